"""Fusions that run an earlier identical fusion's kernels.

A 12-layer transformer has each layer's fusions twelve times over, differing only in names
(``gpt12.h200_opt.hlo``: 183 fusions, 21 distinct). Their generated kernels differ only in identifiers, yet
each would be imported, and rewritten by Triton's interpreter (a source parse and compile per
``@jit`` function), as a new kernel. :class:`KernelReuse` hands every fusion whose :func:`reuse_key` was
seen before the first such fusion's :class:`~fusegen.codegen.emitter.EmittedFusion` to run, so its
interpreted functions are reused; the fusion's own kernels stay in its report (``explain``, the report,
``--json``).

The key is the compile deduplication's :func:`~fusegen.runtime.compile_jobs.fusion_fingerprint` (canonical
HLO, fusion backend config, shapes with layouts, each kernel's constexprs and launch) plus what that leaves
out and a run depends on: the emitter, output aliases and copies, each kernel's parameter list (kind,
index, shape, and the bytes of a constant buffer) and the literals of constants the canonical text elides.

Mirrors XLA's ``KernelReuseCache`` (``xla/service/gpu/kernel_reuse_cache.cc``, ``GetComputationFingerprint``):
a fusion whose fused computation and kernel arguments print the same reuses the kernel already emitted.
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np

from fusegen.hlo.ir import Instruction
from fusegen.runtime.compile_jobs import fusion_fingerprint

__all__ = ["KernelReuse", "reuse_key"]


def _digest(value: Any) -> str:
    if isinstance(value, str):
        return hashlib.sha256(value.encode("utf-8")).hexdigest()
    a = np.ascontiguousarray(np.asarray(value))
    if a.dtype.hasobject:
        return hashlib.sha256(repr(a.tolist()).encode("utf-8")).hexdigest()
    return hashlib.sha256(str(a.dtype).encode() + str(a.shape).encode() + a.tobytes()).hexdigest()


def _constant_literals(inst: Instruction) -> tuple[str, ...]:
    """Digests of every constant literal in ``inst``'s fused computation and what it calls, in order."""
    out: list[str] = []
    todo, seen = list(inst.called_computations), set()
    while todo:
        comp = todo.pop(0)
        if id(comp) in seen:
            continue
        seen.add(id(comp))
        for i in comp.instructions:
            if i.opcode == "constant":
                out.append(_digest(i.attrs.get("literal")))
            todo.extend(i.called_computations)
    return tuple(out)


def reuse_key(inst: Instruction, emitted: Any) -> tuple:
    """What makes two fusions' emitted kernels interchangeable in a run (see the module docstring).

    Args:
        inst: the fusion instruction; ``emitted``: its :class:`~fusegen.codegen.emitter.EmittedFusion`.
    """
    from fusegen.hlo.printer import print_shape

    params = tuple(
        tuple((p.kind, p.index, print_shape(p.shape), _digest(p.value) if p.kind == "constant" else repr(p.value))
              for p in k.params)
        for k in emitted.kernels)
    variants = tuple((tuple(sorted(v.constexprs.items())), str(v.launch)) if v is not None else None
                     for v in (k.interpret_variant for k in emitted.kernels))
    return (fusion_fingerprint(inst, emitted.kernels), emitted.emitter,
            tuple(sorted(emitted.output_aliases.items())), tuple(emitted.copies), params, variants,
            tuple(tuple(map(tuple, k.launch_args)) for k in emitted.kernels), _constant_literals(inst))


class KernelReuse:
    """The first :class:`~fusegen.codegen.emitter.EmittedFusion` of every :func:`reuse_key` seen in a run.

    ``distinct`` counts the keys (the kernels actually loaded and interpreted).
    """

    def __init__(self) -> None:
        self._first: dict[tuple, Any] = {}
        self._key_of: dict[int, tuple] = {}  # id(fusion) -> its key, computed once per fusion

    def runner(self, inst: Instruction, emitted: Any) -> Any:
        """The emitted fusion to run for ``inst``: ``emitted`` itself, or an earlier identical fusion's."""
        key = self._key_of.get(id(inst))
        if key is None:
            key = self._key_of[id(inst)] = reuse_key(inst, emitted)
        return self._first.setdefault(key, emitted)

    @property
    def distinct(self) -> int:
        """How many distinct kernel sets ran so far (fusions that ran their own kernels)."""
        return len(self._first)
