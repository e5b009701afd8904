"""The kernel being written (:class:`KernelContext`): names, body lines, buffer parameters, block shape."""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fusegen.codegen import triton_source as ts
from fusegen.codegen.kernel import KernelParam
from fusegen.hlo.ir import Instruction, Shape


class KernelContext:
    """State of one kernel being written: names, body lines, buffer parameters, index dtype.

    Args:
        index_dtype: ``"tl.int32"`` or ``"tl.int64"`` for index arithmetic.
        operand_shapes: shapes of the fusion operands (their layouts give parameter strides; a
            tuple-shaped operand is passed as one buffer per leaf, see :meth:`ElementalGenerator._parameter`).

    Attributes an emitter may set while generating (each names a variable / constexpr of the kernel):
        mask: the ``[block]`` boolean tensor every ``tl.load`` is masked with (``"mask"``). An emitter
            whose indices are all clamped into range may set a variable that is all true.
        zero: the ``[block]`` index tensor of zeros (``"zero"``), in :attr:`idx_t`; index constants are
            ``zero + k`` so they have the block's shape.
        block_shape: the shape text of the current block (``"[BLOCK]"``); constants the generator
            builds are ``tl.full(<block_shape>, ...)``. Set it to e.g. ``"[OBLOCK]"`` while emitting on a
            smaller block, or ``"[]"`` for scalar code (combine functions); :meth:`block` does this for a
            ``with`` block.
        complex_values: whether the emitter handles complex values (:class:`Cx` pairs, stored with
            :func:`fusegen.codegen.emitter.store_line`); when false (the default) complex types are
            declined as before. The loop emitter sets it.
        runs: the :class:`~fusegen.codegen.elemental.uniform_runs.UniformRuns` of a linear-index kernel on XLA's
            loop geometry (each thread ``width`` consecutive lanes); ``None`` (the default) elsewhere. With it,
            loads uniform over a run are made once per run.
        steps: the :class:`~fusegen.codegen.elemental.step_offsets.LoopSteps` of a loop over the reduced extent
            (``None`` elsewhere): loads affine in the step add it as a separate pointer offset.
        native_loops: the generator's own loops (an elemental reduce, dot or reduce-window) are unrolled as XLA's
            native emitters' ``xla-gpu-optimize-loops`` unrolls them (:mod:`fusegen.codegen.loop_unroll`); the
            Triton backends, whose programs XLA's Triton pipeline writes, set it to ``False``.
    """

    def __init__(self, index_dtype: str, operand_shapes: Sequence[Shape]):
        self.names = ts.NameAllocator()
        self.body = ts.SourceBuilder()
        self.body.level = 1
        self.idx_t = index_dtype
        self.operand_shapes = list(operand_shapes)
        self.params: list[KernelParam] = []
        self.param_names: list[str] = []
        self._param_keys: dict[Any, str] = {}
        self.mask = "mask"
        self.zero = "zero"
        self.block_shape = "[BLOCK]"
        self.complex_values = False
        self.runs: Any = None  # UniformRuns of a linear-index kernel (uniform_runs.py), set by its builder
        self.steps: Any = None  # LoopSteps of a kernel's loop over a reduced extent (step_offsets.py)
        self.native_loops = True
        for n in ("lin_c", "lin_q", "off", "t"):
            self.names.reserve(n)

    def full(self, value: Any, tl_type: str) -> str:
        """``tl.full(<block_shape>, value, tl_type)`` text (``value`` is already a safe literal)."""
        return f"tl.full({self.block_shape}, {value}, {tl_type})"

    def block(self, shape: str, mask: str | None = None, zero: str | None = None) -> "_BlockSetting":
        """Context manager emitting on another block: sets :attr:`block_shape` (and optionally
        :attr:`mask`, :attr:`zero`) and restores the previous values on exit."""
        return _BlockSetting(self, shape, mask, zero)

    def emit(self, expr: str, hint: str = "t") -> str:
        name = self.names.fresh(hint)
        self.body.line(f"{name} = {expr}")
        return name

    def param(self, kind: str, index: int, shape: Shape, hint: str, value: Any = None, key: Any = None) -> str:
        k = key if key is not None else (kind, index)
        if k in self._param_keys:
            return self._param_keys[k]
        name = self.names.fresh(f"{kind[:3]}_{hint}")
        self.params.append(KernelParam(kind=kind, index=index, shape=shape, value=value))
        self.param_names.append(name)
        self._param_keys[k] = name
        return name

    def constant_param(self, inst: Instruction, value: np.ndarray) -> str:
        key = ("constant", id(inst))
        if key in self._param_keys:
            return self._param_keys[key]
        k = sum(1 for p in self.params if p.kind == "constant")
        return self.param("constant", k, inst.shape, inst.name, value=value, key=key)

    def render(self, entry: str, constexprs: Sequence[str], prologue: Sequence[str] = (),
               scalars: Sequence[str] = ()) -> str:
        """The kernel module: pointers (:attr:`params`), then runtime ``scalars`` (names), then ``constexprs``."""
        args = list(self.param_names) + list(scalars) + [f"{c}: tl.constexpr" for c in constexprs]
        out = ts.module_header()
        out.append("")
        out.append("@triton.jit")
        out.append(f"def {entry}({', '.join(args)}):")
        out.extend("    " + p for p in prologue)
        out.extend(self.body.lines)
        return "\n".join(out) + "\n"


class _BlockSetting:
    def __init__(self, ctx: "KernelContext", shape: str, mask: str | None, zero: str | None):
        self.ctx, self.new = ctx, (shape, mask, zero)

    def __enter__(self) -> "KernelContext":
        c = self.ctx
        self.old = (c.block_shape, c.mask, c.zero)
        shape, mask, zero = self.new
        c.block_shape = shape
        c.mask = mask if mask is not None else c.mask
        c.zero = zero if zero is not None else c.zero
        return c

    def __exit__(self, *a: Any) -> None:
        self.ctx.block_shape, self.ctx.mask, self.ctx.zero = self.old
