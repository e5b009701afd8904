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
* :func:`position_operand`: the operand a variadic reducer breaks ties by (an argmax's index), which
  :func:`combine_function` can order its two sides by (``order_by``): a ``tl.reduce`` folds lanes whose
  partial results interleave in the row, in an order of its own, while XLA's fold has the earlier elements
  on the left.

The interpreter's vectorised ``tl.reduce`` for these combine functions lives in
:func:`fusegen.codegen.triton_runtime.run_interpreted` (it patches the interpreter itself).
"""

from __future__ import annotations

import re
from typing import Any

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.codegen.triton_runtime import COMBINE_PREFIX  # noqa: F401  (re-exported)
from fusegen.hlo import dtypes
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


def position_operand(comp: Computation, n: int) -> int | None:
    """The operand ``k < n`` a variadic reducer breaks ties by, or ``None``.

    That is an integer operand whose two parameters (``k``, the accumulator's, and ``n + k``, the element's) the
    reducer compares for order (LT/LE/GT/GE, either way round): jax's argmax/argmin reducer picks the lower
    index of two equal values with ``compare(a_index, b_index), direction=LT``. Its values are the elements'
    positions along the reduced dimension, so they tell which of two partial results holds the earlier element.
    """
    if n < 2 or comp.root is None:
        return None
    params = {i.parameter_number: i for i in comp.instructions if i.opcode == "parameter"}
    for inst in comp.instructions:
        if inst.opcode != "compare" or len(inst.operands) != 2:
            continue
        if str(inst.attrs.get("direction", "")).upper() not in ("LT", "LE", "GT", "GE"):
            continue
        for k in range(n):
            a, b = params.get(k), params.get(n + k)
            if a is None or b is None or not dtypes.is_integral(a.shape.element_type):
                continue
            if {id(o) for o in inst.operands} == {id(a), id(b)}:
                return k
    return None


def combine_function(ctx: Any, comp: Computation, n: int, name: str, valid: bool = False,
                     order_by: int | None = None) -> list[str]:
    """Source lines of ``@triton.jit def <name>(a0..a{n-1}, b0..b{n-1})`` computing ``comp(a..., b...)``.

    A complex (``c64``/``c128``) operand is two arguments, its real and imaginary parts, and a complex result
    two returned values: ``tl.reduce`` then folds a tuple of the parts. With ``valid`` each side carries an int32
    validity flag after its values (``(a..., av, b..., bv)``): two valid sides combine, one valid side is kept,
    and the flag returned is ``av | bv`` (for lanes that hold no element, where a reducer has no identity).

    With ``order_by = k`` the two sides are swapped (flags included) when ``b``'s operand ``k`` is below
    ``a``'s, so the reducer sees the side holding the earlier position first, as in XLA's in-order fold
    (``HloEvaluator::HandleReduce``: ``acc = f(acc, x)``). ``tl.reduce`` folds lanes in an order of its own
    (the interpreter pairs neighbours, the GPU shuffles across lanes), and a row reduction's lanes hold
    interleaved parts of the row (lane ``l``: elements ``l``, ``l + TR``, ...). A reducer that is not
    commutative on some ties, jax's argmax keeping its first argument when both values are NaN, then still
    returns the first NaN (XLA's rule: NaN wins, the lower index wins among equals).

    Args:
        ctx: the :class:`~fusegen.codegen.elemental.KernelContext` of the kernel (names are shared;
            its body is restored afterwards).
        comp: the reducer computation (``2n`` scalar parameters, ``n`` results).
        n: number of reduced operands (``n > 1`` for variadic reductions).
        name: the function name (must start with :data:`COMBINE_PREFIX`).
        valid: carry the validity flags described above.
        order_by: an integer operand holding positions (:func:`position_operand`), or ``None``.

    Raises:
        EmitterUnsupported: a non-scalar reducer, or one whose code needs kernel state (loads, indices);
        ValueError: ``order_by`` not an operand index below ``n``, or a complex operand.
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
            key = None if order_by is None else (bindings.get(order_by), bindings.get(n + order_by))
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
    half = len(args) // 2
    sides = (args[:half], args[half:])
    flags = [ctx.names.fresh(x) for x in ("av", "bv")] if valid else []
    sig = sides[0] + flags[:1] + sides[1] + flags[1:]
    if order_by is not None:
        if not 0 <= order_by < n or not all(isinstance(k, str) for k in key):
            raise ValueError(f"order_by={order_by}: not a real operand of the {n} of %{comp.name}")
        # the sides as called are renamed; the body reads them in position order
        called = [ctx.names.fresh(f"{x}_in") for x in sig]
        rename = dict(zip(sig, called))
        swap = ctx.names.fresh("swap")
        lead = [f"    {swap} = {rename[key[1]]} < {rename[key[0]]}"]
        for x, y in zip(sides[0] + flags[:1], sides[1] + flags[1:]):
            lead += [f"    {x} = tl.where({swap}, {rename[y]}, {rename[x]})",
                     f"    {y} = tl.where({swap}, {rename[x]}, {rename[y]})"]
        out = lead + out
    else:
        called = sig
    head = ["@triton.jit", f"def {name}({', '.join(called)}):"]
    if not valid:
        return [*head, *out, f"    return {', '.join(vals)}"]
    av, bv = flags
    both, keep = ctx.names.fresh("both"), ctx.names.fresh("keep_a")
    out += [f"    {both} = ({av} != 0) & ({bv} != 0)", f"    {keep} = {av} != 0"]
    ret = [f"tl.where({both}, {v}, tl.where({keep}, {x}, {y}))" for v, x, y in zip(vals, *sides)]
    return [*head, *out, f"    return {', '.join(ret + [f'{av} | {bv}'])}"]


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


__all__ = ["COMBINE_PREFIX", "simple_reducer_op", "promoted_reducer", "position_operand", "combine_function",
           "retarget_block", "patch_interpreter_reduce"]
