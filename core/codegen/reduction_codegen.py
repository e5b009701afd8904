"""Shared pieces of reduction code generation: the Triton combine function of a reducer computation,
f32 accumulation of f16/bf16 sums, and a vectorised ``tl.reduce`` for Triton's interpreter.

* :func:`combine_function` writes a reducer (``to_apply``) computation as a ``@triton.jit`` function
  ``(acc..., x...) -> result(s)`` usable as ``tl.reduce``'s ``combine_fn``. Its body is produced by the
  :class:`~fusegen.codegen.elemental.ElementalGenerator` on bound arguments, with constants written as
  0-d tensors (``tl.full([], ...)``) so the function works on scalars (compiled ``tl.reduce`` regions)
  and on tensors of any shape (the interpreter). Mirrors XLA's reducer call in
  ``emitters/reduction.cc`` (``ReductionFusion::EmitReduction`` calling ``to_apply`` on shuffled values).
* :func:`promoted_reducer`: an f16/bf16 ``add``/``multiply`` reducer rewritten on f32, so a reduction
  accumulates in f32 and rounds once (what the reference evaluator does).
* :func:`patch_interpreter_reduce`: Triton 3.9's interpreter folds a generic ``tl.reduce`` one element at
  a time in Python; fusegen's combine functions are elementwise, so for them (name prefix
  :data:`COMBINE_PREFIX`) the fold is done as a pairwise tree over whole numpy arrays (same values for an
  associative combiner; the reduction order of a compiled ``tl.reduce`` is a tree as well).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

import numpy as np

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.hlo.ir import Computation, Instruction, Shape

#: Name prefix of generated combine functions (the interpreter patch only vectorises these).
COMBINE_PREFIX = "fg_combine_"

_SIMPLE = ("add", "multiply", "maximum", "minimum", "and", "or", "xor")
_BLOCK_SHAPE = re.compile(r"tl\.full\(\[BLOCK\]")


def simple_reducer_op(comp: Computation) -> str | None:
    """The opcode of a reducer that is ``op(param0, param1)`` on scalars of one type (either order),
    for ``op`` in add/multiply/maximum/minimum/and/or/xor; ``None`` otherwise."""
    root = comp.root
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    if root is None or root.opcode not in _SIMPLE or len(root.operands) != 2 or len(params) != 2:
        return None
    if any(p.shape.rank or p.shape.is_tuple for p in params):
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    if root.shape.element_type != params[0].shape.element_type:
        return None
    return root.opcode


def promoted_reducer(comp: Computation) -> Computation | None:
    """An f32 copy of an f16/bf16 ``add``/``multiply`` reducer, else ``None``.

    XLA's GPU emitters keep the reducer's own type; fusegen sums low-precision floats in f32 and
    rounds once (like the reference evaluator), which keeps long sums within f16/bf16 tolerance.
    """
    op = simple_reducer_op(comp)
    if op not in ("add", "multiply"):
        return None
    if comp.root.shape.element_type not in ("f16", "bf16"):
        return None
    f32 = Shape("f32", ())
    out = Computation(name=f"{comp.name}.f32")
    p0 = out.add(Instruction(name="lhs", opcode="parameter", shape=f32, attrs={"parameter_number": 0}))
    p1 = out.add(Instruction(name="rhs", opcode="parameter", shape=f32, attrs={"parameter_number": 1}))
    r = out.add(Instruction(name=op, opcode=op, shape=f32, operands=[p0, p1]))
    out.root = r
    return out


def _check_scalar(comp: Computation) -> None:
    if comp.root is None:
        raise EmitterUnsupported("reduce", comp.name, "reducer computation has no root")
    for inst in comp.instructions:
        for leaf in inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]:
            if leaf.is_array and leaf.rank != 0:
                raise EmitterUnsupported(inst.opcode, inst.name, "non-scalar instruction in a reducer computation")


def combine_function(ctx: Any, comp: Computation, n: int, name: str) -> list[str]:
    """Source lines of ``@triton.jit def <name>(a0..a{n-1}, b0..b{n-1})`` computing ``comp(a..., b...)``.

    Args:
        ctx: the :class:`~fusegen.codegen.elemental.KernelContext` of the kernel (names are shared;
            its body is restored afterwards).
        comp: the reducer computation (``2n`` scalar parameters, ``n`` results).
        n: number of reduced operands (``n > 1`` for variadic reductions).
        name: the function name (must start with :data:`COMBINE_PREFIX`).

    Raises:
        EmitterUnsupported: a non-scalar reducer, or one whose code needs kernel state (loads, indices).
    """
    from fusegen.codegen.elemental import ElementalGenerator

    _check_scalar(comp)
    saved = ctx.body
    ctx.body = ts.SourceBuilder()
    ctx.body.level = 1
    try:
        args = [ctx.names.fresh(f"a{k}") for k in range(n)] + [ctx.names.fresh(f"b{k}") for k in range(n)]
        gen = ElementalGenerator(ctx, comp, {i: a for i, a in enumerate(args)})
        res = gen.value(comp.root, ())
        vals = res if isinstance(res, list) else [res]
        if len(vals) != n or any(isinstance(v, list) for v in vals):
            raise EmitterUnsupported("reduce", comp.name, f"reducer returns {len(vals)} values for {n} operands")
        body = ctx.body.lines
    finally:
        ctx.body = saved
    out = []
    for line in body:
        line = _BLOCK_SHAPE.sub("tl.full([]", line)
        if "BLOCK" in line or re.search(rf"\b({ctx.zero}|{ctx.mask})\b", line) or "tl.load" in line:
            raise EmitterUnsupported("reduce", comp.name, "reducer computation needs kernel state")
        out.append(line)
    ret = ", ".join(vals)
    return ["@triton.jit", f"def {name}({', '.join(args)}):", *out, f"    return {ret}"]


def retarget_block(lines: list[str], start: int, block: str) -> None:
    """Rewrite generated constants ``tl.full([BLOCK], ...)`` in ``lines[start:]`` to shape ``[block]``.

    The elemental generator writes every value as a ``[BLOCK]`` tensor; a reduction's epilogue runs on
    the (smaller) block of reduced values, whose size is the constexpr ``block``.
    """
    for k in range(start, len(lines)):
        lines[k] = _BLOCK_SHAPE.sub(f"tl.full([{block}]", lines[k])


# ------------------------------------------------------------------------------------------------
# interpreter
# ------------------------------------------------------------------------------------------------
_PATCHED = False


def patch_interpreter_reduce() -> None:
    """Fold ``tl.reduce`` with a fusegen combine function as a vectorised pairwise tree in Triton's
    interpreter (idempotent). Other combine functions keep the interpreter's element-by-element path."""
    global _PATCHED
    if _PATCHED:
        return
    import triton.language as tl
    from triton.runtime import interpreter as interp

    ops = interp.ReduceOps
    original = ops.generic_reduce

    def generic_reduce(self: Any, input: Sequence[Any]) -> list[Any]:
        fn = getattr(self.combine_fn, "fn", None)
        if fn is None or not getattr(fn, "__name__", "").startswith(COMBINE_PREFIX):
            return original(self, input)
        original_axis = self.axis
        tensors, axis = self.unravel(input, self.axis)
        types = [t.dtype for t in tensors]
        datas = [np.moveaxis(t.handle.data, axis, -1) for t in tensors]
        n = datas[0].shape[-1]
        while n > 1:
            h = n // 2
            lhs = [np.ascontiguousarray(d[..., 0:2 * h:2]) for d in datas]
            rhs = [np.ascontiguousarray(d[..., 1:2 * h:2]) for d in datas]
            args = [self.to_tensor(x, ty) for x, ty in zip(lhs, types)] + \
                   [self.to_tensor(x, ty) for x, ty in zip(rhs, types)]
            res = fn(*args)
            res = res if isinstance(res, tuple) else (res,)
            merged = []
            for r, l in zip(res, lhs):
                data = r.handle.data if isinstance(r, tl.core.tensor) else np.asarray(r)
                merged.append(np.broadcast_to(np.asarray(data).astype(l.dtype, copy=False), l.shape))
            if n % 2:
                merged = [np.concatenate([m, d[..., -1:]], axis=-1) for m, d in zip(merged, datas)]
            datas = merged
            n = datas[0].shape[-1]
        outs = []
        for d, ty in zip(datas, types):
            o = d[..., 0] if n == 1 else np.zeros(d.shape[:-1], d.dtype)
            if self.keep_dims:
                if original_axis is not None:
                    o = np.expand_dims(o, axis)
                else:
                    o = o.reshape((1,) * len(tensors[0].handle.data.shape))
            elif original_axis is None:
                o = o.item()
            outs.append(self.to_tensor(np.ascontiguousarray(o) if isinstance(o, np.ndarray) else o, ty))
        return outs

    ops.generic_reduce = generic_reduce
    _PATCHED = True


__all__ = ["COMBINE_PREFIX", "simple_reducer_op", "promoted_reducer", "combine_function", "retarget_block",
           "patch_interpreter_reduce"]
