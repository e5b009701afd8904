"""Shared pieces of reduction code generation: the Triton combine function of a reducer computation,
f32 accumulation of f16/bf16 sums, and a vectorised ``tl.reduce`` for Triton's interpreter.

* :func:`combine_function` writes a reducer (``to_apply``) computation as a ``@triton.jit`` function
  ``(acc..., x...) -> result(s)`` usable as ``tl.reduce``'s ``combine_fn``. Its body is produced by the
  :class:`~fusegen.codegen.elemental.ElementalGenerator` on bound arguments with the kernel context's
  block shape set to ``[]``, so constants are 0-d tensors (``tl.full([], ...)``) and the function works
  on scalars (compiled ``tl.reduce`` regions) and on tensors of any shape (the interpreter). Mirrors XLA's reducer call in
  ``emitters/reduction.cc`` (``ReductionFusion::EmitReduction`` calling ``to_apply`` on shuffled values).
* :func:`promoted_reducer`: an f16/bf16 ``add``/``multiply`` reducer rewritten on f32, so a reduction
  accumulates in f32 and rounds once (what the reference evaluator does).

The interpreter's vectorised ``tl.reduce`` for these combine functions lives in
:func:`fusegen.codegen.triton_runtime.run_interpreted` (it patches the interpreter itself).
"""

from __future__ import annotations

import re
from typing import Any

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.codegen.triton_runtime import COMBINE_PREFIX  # noqa: F401  (re-exported)
from fusegen.hlo.ir import Computation, Instruction, Shape

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


def combine_function(ctx: Any, comp: Computation, n: int, name: str, valid: bool = False) -> list[str]:
    """Source lines of ``@triton.jit def <name>(a0..a{n-1}, b0..b{n-1})`` computing ``comp(a..., b...)``.

    A complex (``c64``/``c128``) operand is two arguments, its real and imaginary parts, and a complex result
    two returned values: ``tl.reduce`` then folds a tuple of the parts. With ``valid`` each side carries an int32
    validity flag after its values (``(a..., av, b..., bv)``): two valid sides combine, one valid side is kept,
    and the flag returned is ``av | bv`` (for lanes that hold no element, where a reducer has no identity).

    Args:
        ctx: the :class:`~fusegen.codegen.elemental.KernelContext` of the kernel (names are shared;
            its body is restored afterwards).
        comp: the reducer computation (``2n`` scalar parameters, ``n`` results).
        n: number of reduced operands (``n > 1`` for variadic reductions).
        name: the function name (must start with :data:`COMBINE_PREFIX`).

    Raises:
        EmitterUnsupported: a non-scalar reducer, or one whose code needs kernel state (loads, indices).
    """
    from fusegen.codegen.elemental import COMPLEX_PARTS, ElementalGenerator, Cx

    _check_scalar(comp)
    types = {i.parameter_number: i.shape.element_type for i in comp.instructions if i.opcode == "parameter"}
    saved = ctx.body
    ctx.body = ts.SourceBuilder()
    ctx.body.level = 1
    try:
        with ctx.block("[]"):
            args: list[str] = []
            bindings: dict[int, Any] = {}
            for i in range(2 * n):
                stem = f"{'ab'[i // n]}{i % n}"
                if types.get(i) in COMPLEX_PARTS:  # a complex operand is two arguments, its (re, im) parts
                    pair = Cx((ctx.names.fresh(f"{stem}_re"), ctx.names.fresh(f"{stem}_im")))
                    args += list(pair)
                    bindings[i] = pair
                else:
                    bindings[i] = ctx.names.fresh(stem)
                    args.append(bindings[i])
            gen = ElementalGenerator(ctx, comp, bindings)
            res = gen.value(comp.root, ())
        vals = res if isinstance(res, list) else [res]
        if len(vals) != n or any(isinstance(v, list) for v in vals):
            raise EmitterUnsupported("reduce", comp.name, f"reducer returns {len(vals)} values for {n} operands")
        vals = [p for v in vals for p in (v if isinstance(v, Cx) else [v])]
        body = ctx.body.lines
    finally:
        ctx.body = saved
    out = []
    for line in body:
        if "BLOCK" in line or re.search(rf"\b({ctx.zero}|{ctx.mask})\b", line) or "tl.load" in line:
            raise EmitterUnsupported("reduce", comp.name, "reducer computation needs kernel state")
        out.append(line)
    if not valid:
        return ["@triton.jit", f"def {name}({', '.join(args)}):", *out, f"    return {', '.join(vals)}"]
    half = len(args) // 2
    av, bv, both, keep = (ctx.names.fresh(x) for x in ("av", "bv", "both", "keep_a"))
    out += [f"    {both} = ({av} != 0) & ({bv} != 0)", f"    {keep} = {av} != 0"]
    ret = [f"tl.where({both}, {v}, tl.where({keep}, {x}, {y}))" for v, x, y in zip(vals, args[:half], args[half:])]
    sig = args[:half] + [av] + args[half:] + [bv]
    return ["@triton.jit", f"def {name}({', '.join(sig)}):", *out, f"    return {', '.join(ret + [f'{av} | {bv}'])}"]


def retarget_block(lines: list[str], start: int, block: str) -> None:
    """Rewrite constants ``tl.full([BLOCK], ...)`` in ``lines[start:]`` to shape ``[block]``.

    Deprecated: emit on the smaller block with ``KernelContext.block("[block]")`` instead (the
    elemental generator then writes constants of that shape directly).
    """
    for k in range(start, len(lines)):
        lines[k] = _BLOCK_SHAPE.sub(f"tl.full([{block}]", lines[k])


def patch_interpreter_reduce() -> None:
    """Deprecated alias: :func:`fusegen.codegen.triton_runtime.run_interpreted` applies the vectorised
    ``tl.reduce`` patch itself (:func:`fusegen.codegen.interpreter_patches.patch_reduce`)."""
    from fusegen.codegen.interpreter_patches import patch_reduce

    patch_reduce()


__all__ = ["COMBINE_PREFIX", "simple_reducer_op", "promoted_reducer", "combine_function", "retarget_block",
           "patch_interpreter_reduce"]
