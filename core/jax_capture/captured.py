"""What :func:`fusegen.capture` returns: the compiled module with the function's argument and output pytrees.

``fusegen.run``, ``explain``, ``tune`` and ``report`` take a :class:`Captured` wherever they take a module; ``run``
then takes the function's arguments and JAX's outputs as pytrees (``inputs=(params, batch)``,
``expected=jax_outputs``) and gives the outputs back as one (:meth:`Captured.flatten`, :meth:`Captured.unflatten`).
:meth:`Captured.write` is the one place a capture's files are written.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import attrs
import numpy as np


@attrs.frozen
class CaptureFiles:
    """The files :meth:`Captured.write` wrote: ``NAME.DEV[xN]_opt.hlo`` (the module; ``NAME.DEV.hlo`` when
    fusegen's pipeline is to fuse it), ``.inputs.npz`` (global inputs ``p0``, ``p1`` ...) and ``.expected.npz``
    (XLA:CPU's outputs ``o0``, ``o1`` ...; None without them), for ``fusegen run --inputs ... --expected ...``;
    on N devices ``.shardings.json`` (the output shardings, read by the run; None when jax had none)."""

    hlo: Path
    inputs: Path
    expected: Path | None
    shardings: Path | None = None


def _tree_text(treedef: Any, limit: int = 160) -> str:
    text = str(treedef).removeprefix("PyTreeDef(").removesuffix(")")
    return text if len(text) <= limit else text[:limit] + "..."


@attrs.frozen(repr=False)
class Captured:
    """A function as XLA compiled it for ``devices`` GPUs of kind ``device`` (or as jax lowered it, for
    fusegen's own pipeline: ``compiler="fusegen"``).

    Attributes:
        name: the module's name (the function's, or ``capture(name=...)``).
        device: the fusegen device preset compiled for (``"h200"``); ``devices``: how many (``num_partitions``).
        compiler: ``"xla"`` (XLA:GPU's deviceless compile, fused) or ``"fusegen"`` (unoptimized HLO that fusegen's
            pipeline fuses when it runs).
        text: the HLO module's text; ``module``: it parsed (a :class:`fusegen.hlo.ir.Module`).
        in_tree: the treedef of the dynamic positional arguments (a tuple; static ones left out);
            ``out_tree``: of the outputs.
        static: ``{argnum or name: value}`` of the static arguments (baked into the module).
        arg_count: positional arguments the function was called with (static ones included).
        inputs_flat: the global example inputs, one per module parameter (given arrays or seeded draws).
        expected_flat: XLA:CPU's outputs for them, one per output leaf (None: ``capture(expected=False)``).
        in_shardings: each input leaf's partition spec as text (``"('d', None)"``; ``"()"`` replicated).
        out_structs: each output leaf's global shape and dtype (``jax.ShapeDtypeStruct``).
        out_shardings: on N devices, each output leaf's sharding as XLA's HloSharding text (jax's
            ``compiled.output_shardings``): a run reads the devices' outputs with it; :meth:`write` stores it in
            ``NAME.DEVxN.shardings.json`` (:mod:`fusegen.runtime.sharding_sidecar`). Empty: unknown.
        files: what :meth:`write` wrote (``capture(out_dir=...)``), else None.
    """

    name: str
    device: str
    devices: int
    compiler: str
    text: str
    module: Any
    in_tree: Any
    out_tree: Any
    static: dict
    arg_count: int
    inputs_flat: tuple
    expected_flat: tuple | None
    in_shardings: tuple[str, ...] = ()
    out_structs: tuple = ()
    out_shardings: tuple[str, ...] = ()
    files: CaptureFiles | None = None

    @property
    def __fusegen_captured__(self) -> "Captured":  # what run/explain/tune/report look for
        return self

    def __repr__(self) -> str:
        from fusegen.api.trees import describe

        return (f"Captured({self.name} for {self.devices} {self.device} ({self.compiler}): "
                f"inputs {describe(list(self.inputs_flat))}; outputs {describe(list(self.out_structs))})")

    @property
    def inputs(self) -> tuple:
        """The example inputs as the function's dynamic positional arguments (a tuple of pytrees)."""
        return self.in_tree.unflatten(list(self.inputs_flat))

    def stated_shardings(self) -> Any:
        """:attr:`out_shardings` checked against the module (a
        :class:`~fusegen.runtime.sharding_sidecar.StatedShardings`), or None without them."""
        if not self.out_shardings or self.devices == 1:
            return None
        from fusegen.runtime.sharding_sidecar import stated_shardings

        return stated_shardings(self.module, self.out_shardings, [tuple(s.shape) for s in self.out_structs],
                                where=f"fusegen.capture of {self.name}")

    @property
    def expected(self) -> Any:
        """XLA:CPU's outputs for :attr:`inputs`, as the function's output pytree (None when not computed)."""
        return None if self.expected_flat is None else self.out_tree.unflatten(list(self.expected_flat))

    # ---------------------------------------------------------------------------------------- pytrees
    def flatten(self, inputs: Any = None, expected: Any = None) -> tuple[list | None, list | None]:
        """``(input leaves, expected leaves)`` for a run: ``inputs`` the function's positional arguments (static
        ones may be left out, or given equal to the captured values; one argument may be given bare),
        ``expected`` its output pytree (or a flat sequence of as many arrays). ``inputs=None`` runs on the
        example inputs, and then ``expected=None`` judges against XLA:CPU's outputs for them.

        Raises:
            fusegen.runtime.inputs.InputError: a structure, leaf count or static value that does not fit (the
                message names the leaf counts and shapes of both sides).
        """
        if inputs is None:
            flat_in = list(self.inputs_flat)
            if expected is None:
                return flat_in, None if self.expected_flat is None else list(self.expected_flat)
        else:
            flat_in = self._input_leaves(inputs)
        return flat_in, None if expected is None else self._output_leaves(expected)

    def unflatten(self, outputs: Any) -> Any:
        """The kernel path's outputs (an array, or a tuple for a tuple root) as the function's output pytree."""
        from fusegen.runtime.inputs import leaves

        return self.out_tree.unflatten(leaves(outputs) if isinstance(outputs, tuple) else [outputs])

    def _input_leaves(self, inputs: Any) -> list:
        import jax

        from fusegen.api.trees import describe
        from fusegen.runtime.inputs import InputError

        n_dyn = len(self.in_tree.children())  # the dynamic positional arguments
        args = tuple(inputs) if isinstance(inputs, (tuple, list)) and not hasattr(inputs, "_fields") else (inputs,)
        statics = sorted(k for k in self.static if isinstance(k, int))
        if len(args) == self.arg_count and statics and len(args) != n_dyn:
            for k in statics:
                if not _same(args[k], self.static[k]):
                    raise InputError(f"{self.name}: static argument {k} was captured as {self.static[k]!r}, got "
                                     f"{args[k]!r} (capture again for another value)")
            args = tuple(a for i, a in enumerate(args) if i not in statics)
        if len(args) != n_dyn and n_dyn == 1:
            args = (inputs,)  # the one dynamic argument, given as it is
        got = jax.tree_util.tree_structure(args)
        flat = jax.tree_util.tree_leaves(args)
        if got != self.in_tree:
            raise InputError(f"{self.name}: inputs do not have the structure the function was captured with: got "
                             f"{len(args)} argument(s), {describe(flat)} ({_tree_text(got)}); captured {n_dyn} dynamic "
                             f"argument(s), {describe(list(self.inputs_flat))} ({_tree_text(self.in_tree)})")
        for (path, leaf), want in zip(jax.tree_util.tree_flatten_with_path(args)[0], self.inputs_flat):
            if np.shape(leaf) != np.shape(want):  # global shapes, on N devices too
                raise InputError(f"{self.name}: input {jax.tree_util.keystr(path)} has shape {list(np.shape(leaf))}, "
                                 f"the function was captured with {describe([want]).split(': ', 1)[-1]}")
        return flat

    def _output_leaves(self, expected: Any) -> list:
        import jax

        from fusegen.api.trees import describe
        from fusegen.runtime.inputs import InputError

        got = jax.tree_util.tree_structure(expected)
        flat = jax.tree_util.tree_leaves(expected)
        if got == self.out_tree:
            return flat
        n = self.out_tree.num_leaves
        if isinstance(expected, (list, tuple)) and len(expected) == n == len(flat):
            return flat  # the output leaves, flat (as an .npz of o0, o1, ... holds them)
        want = describe(list(self.out_structs)).split(": ", 1)[-1] if self.out_structs else ""
        raise InputError(f"{self.name}: expected has {describe(flat)} ({_tree_text(got)}); the function's output has "
                         f"{n} lea{'f' if n == 1 else 'ves'}" + (f": {want}" if want else "")
                         + f" ({_tree_text(self.out_tree)})")

    # ------------------------------------------------------------------------------------------ files
    def write(self, out_dir: str | Path) -> CaptureFiles:
        """Write the module, the example inputs and XLA:CPU's outputs into ``out_dir`` (see :class:`CaptureFiles`);
        returns the paths (also :attr:`files` of the result of ``capture(out_dir=...)``).

        Raises:
            OSError: the folder cannot be made or written.
        """
        suffix = f"x{self.devices}" if self.devices > 1 else ""
        base = Path(out_dir) / f"{self.name}.{self.device}{suffix}"
        base.parent.mkdir(parents=True, exist_ok=True)
        hlo = Path(f"{base}_opt.hlo" if self.compiler == "xla" else f"{base}.hlo")
        hlo.write_text(self.text)
        inputs = Path(f"{base}.inputs.npz")
        np.savez(inputs, **{f"p{i}": np.asarray(a) for i, a in enumerate(self.inputs_flat)})
        expected = None
        if self.expected_flat is not None:
            expected = Path(f"{base}.expected.npz")
            np.savez(expected, **{f"o{i}": np.asarray(o) for i, o in enumerate(self.expected_flat)})
        shardings = None
        if self.out_shardings and self.devices > 1:  # how a run reads the devices' outputs: beside the module
            from fusegen.runtime.sharding_sidecar import sidecar_path, write_sidecar

            shardings = write_sidecar(sidecar_path(hlo), self.module, self.out_shardings, self.out_structs)
        return CaptureFiles(hlo, inputs, expected, shardings)


def _same(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except Exception:
        return a is b
