"""Error budgets per fusion output: how far a kernel may be from the reference on the same operands.

A fusion output's budget (per element, absolute) is

    floor(t) * growth(K) * max|ref|  +  rtol(t) * |ref|

where ``t`` is the *lowest-precision floating type computed on the path to the output* inside the fused
computation (a bf16 intermediate rounds differently when a kernel keeps it in f32, so an f32 output fed by a
computed bf16 value inherits bf16's budget; the fusion's parameters do not count: kernel and reference read
the same operand values; a ``dot`` counts the type XLA:GPU forms its products in,
:meth:`fusegen.hlo.dot_numerics.DotNumerics.product_type`, where the reference does not round its operands
so itself: bf16 x3 passes, not tf32, whose ``cvt.rna`` of an f32 dot at default precision or of a tf32
algorithm the reference makes as the kernel does; an operand computed in the fusion that two evaluations
round a tf32 step apart is the conditioning's second look, :mod:`fusegen.verify.conditioning`), ``rtol(t)`` the per-type relative tolerance of
:mod:`fusegen.runtime.compare`, ``floor(t)`` the ``[verify]`` floor (:class:`~fusegen.config.verify_options.VerifyOptions`)
and ``K`` the largest number of terms one output element sums on that path (a ``reduce``'s reduced size, a
``dot``'s contracting size, a convolution's window times input features). Summation error grows like
``sqrt(K)`` for random rounding, so ``growth(K) = max(1, sqrt(K / 256))``: sums up to 256 terms keep the
plain budget. Integer and pred outputs compare exactly.

The row of ``fusegen run`` shows ``error / budget``: the largest ratio of an element's error to its budget
(``<= 1`` is within budget; ``inf`` for a NaN where the reference has none, or the other way round).
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction
from fusegen.runtime.compare import abs_error, tolerance
from fusegen.config.verify_options import VerifyOptions
from fusegen.verify.precision_terms import GROWTH_FREE_TERMS, MANTISSA, mantissa_bits  # noqa: F401 - re-exported
from fusegen.verify.precision_terms import reduced_terms as _reduced_terms

_TINY = 2.0 ** -126  # smallest normal f32: the scale of an all-zero reference


@attrs.frozen
class Budget:
    """The budget of one fusion output.

    Attributes:
        element_type: the output's type.
        path_type: the lowest-precision floating type on the path (``element_type`` when none is lower).
        terms: the largest reduction size on the path (1 without reductions).
    """

    element_type: str
    path_type: str
    terms: int = 1

    @property
    def growth(self) -> float:
        return max(1.0, math.sqrt(self.terms / GROWTH_FREE_TERMS))

    def describe(self) -> str:
        s = self.path_type if self.path_type != self.element_type else self.element_type
        return f"{s} K={self.terms}" if self.terms > 1 else s


def _dot_product_type(dot: Instruction, unmodelled: bool = False) -> str | None:
    """The type ``dot``'s products are formed in (``tf32`` for f32 operands of a tf32 dot), or None
    for a dot whose algorithm or precision is unknown (the evaluator's own error names it). ``unmodelled``:
    only a rounding the reference evaluator does not make itself (bf16 x3 passes; not tf32's ``cvt.rna``,
    :meth:`~fusegen.hlo.dot_numerics.DotNumerics.rounded_operand_type`), else the accumulator's type."""
    from fusegen.hlo.dot_numerics import DotNumericsError, dot_numerics

    try:
        num = dot_numerics(dot)
    except DotNumericsError:
        return None
    types = [o.shape.element_type for o in dot.operands[:2] if o.shape.is_array]
    if not types or not all(dtypes.is_floating(t) for t in types):
        return None
    if unmodelled:
        types = [t for t in types if num.rounded_operand_type(t) is None]
        if not types:
            return None
    return min((num.product_type(t) for t in types), key=mantissa_bits)


def _walk(root: Instruction, seen: set[int], acc: dict[str, Any]) -> None:
    stack = [root]
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        for s in ([] if inst.opcode == "parameter" else inst.shape.leaves()):
            if s.is_array and (dtypes.is_floating(s.element_type) or dtypes.is_complex(s.element_type)):
                if mantissa_bits(s.element_type) < mantissa_bits(acc["type"]):
                    acc["type"] = s.element_type
        acc["terms"] = max(acc["terms"], _reduced_terms(inst))
        if inst.opcode == "dot":
            product = _dot_product_type(inst, unmodelled=True)
            if product is not None and mantissa_bits(product) < mantissa_bits(acc["type"]):
                acc["type"] = product
        for c in inst.called_computations:  # nested fusions, reduce combiners, calls: wholly on the path
            _walk(c.root, seen, acc)
            for p in c.parameters:
                _walk(p, seen, acc)
        stack.extend(inst.operands)


def output_tolerance_types(module: Any) -> list[str]:
    """Per array leaf of ``module``'s entry output: the type whose tolerance and floor judge it against the
    reference and the f64 oracle. That is the leaf's own type unless a ``dot`` on its path (in the entry
    computation or any computation it calls) forms its products at lower precision than the leaf holds in a
    way the reference evaluator does not model (bf16 x3 passes): then the dot's product type. A tf32 dot's
    rounding (``cvt.rna`` of its f32 operands) the reference makes itself, so its outputs keep their type:
    the tf32 error against the f64 oracle and ``--expected`` is the reference's own, which the verdict's
    conditioning factor allows the kernels (``fusegen.verify.verdict``)."""
    root = module.entry.root
    leaves = root.shape.leaves()
    roots = list(root.operands) if root.opcode == "tuple" and len(leaves) == len(root.operands) else [root] * len(leaves)
    out = []
    for shape, r in zip(leaves, roots):
        t = shape.element_type
        seen: set[int] = set()
        stack = [r]
        while stack:
            inst = stack.pop()
            if id(inst) in seen:
                continue
            seen.add(id(inst))
            if inst.opcode == "dot":
                p = _dot_product_type(inst, unmodelled=True)
                if p is not None and mantissa_bits(p) < mantissa_bits(t):
                    t = p
            stack.extend(inst.operands)
            for c in inst.called_computations:  # fusions, calls, loop bodies: every instruction of them
                stack.extend(c.instructions)
        out.append(t)
    return out


def output_budgets(fusion: Instruction) -> list[Budget]:
    """One :class:`Budget` per array leaf of ``fusion``'s output, walking its fused computation."""
    comp: Computation = fusion.fused_computation
    root = comp.root
    leaves = fusion.shape.leaves()
    roots = list(root.operands) if root.opcode == "tuple" and len(leaves) == len(root.operands) else [root] * len(leaves)
    out = []
    for shape, r in zip(leaves, roots):
        acc = {"type": shape.element_type if shape.is_array else "f64", "terms": 1}
        if not (dtypes.is_floating(acc["type"]) or dtypes.is_complex(acc["type"])):
            out.append(Budget(shape.element_type, shape.element_type, 1))
            continue
        _walk(r, set(), acc)
        out.append(Budget(shape.element_type, acc["type"], acc["terms"]))
    return out


@attrs.frozen
class Judged:
    """One output compared with its budget.

    Attributes:
        max_abs_error / max_rel_error: as :class:`fusegen.runtime.compare.Comparison`.
        ratio: largest error / budget over the elements (0 when equal; ``inf`` for a NaN disagreement).
        worst_index: the logical index of the element with that ratio, or ``None``.
        value / reference: the two values there.
    """

    max_abs_error: float
    max_rel_error: float
    ratio: float
    worst_index: tuple[int, ...] | None = None
    value: Any = None
    reference: Any = None


def judge(out: Any, ref: Any, budget: Budget, options: VerifyOptions, free: np.ndarray | None = None,
          extra: np.ndarray | None = None) -> Judged:
    """Compare ``out`` with ``ref`` (one array leaf) under ``budget``; elements where ``free`` (a bool array of
    the output's shape) is set count 0 (an order-dependent overflow: :func:`fusegen.verify.expected.order_free`);
    ``extra`` (f64, the output's shape), when given, is added to each element's allowance (the rounding
    bounds of :mod:`fusegen.verify.conditioning`)."""
    out, ref = np.asarray(out), np.asarray(ref)
    if out.shape != ref.shape:
        return Judged(math.inf, math.inf, math.inf)
    if out.size == 0:
        return Judged(0.0, 0.0, 0.0)
    if out.dtype.kind in "biu" or out.dtype == np.bool_:
        a, b = out.astype(np.float64), ref.astype(np.float64)
        diff = np.abs(a - b)
        i = int(np.argmax(diff))
        idx = np.unravel_index(i, out.shape)
        m = float(diff.flat[i])
        rel = float((diff / np.maximum(np.abs(b), 1)).max())
        return Judged(m, rel, math.inf if m else 0.0, tuple(int(x) for x in idx), out[idx].item(), ref[idx].item())
    diff, b = abs_error(out, ref)
    rtol, _ = tolerance(budget.path_type)
    floor = options.floor(budget.path_type)
    diff, b = np.asarray(diff).reshape(-1), np.asarray(b).reshape(-1)  # 1-D: a 0-d result would be a scalar
    abs_b = np.abs(b)  # once: the scale, the allowance and the relative error all read it
    fin = np.isfinite(b)
    finite = abs_b if fin.all() else abs_b[fin]
    scale = max(float(finite.max()) if finite.size else 0.0, _TINY)
    # in place on fresh buffers (these arrays are the size of the output, in f64); x + c is c + x in IEEE
    allowed = rtol * abs_b
    allowed += floor * budget.growth * scale
    if extra is not None:
        allowed += np.asarray(extra, np.float64).reshape(-1)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.divide(diff, allowed, out=allowed)
    ratios[diff == 0] = 0.0
    ratios[np.isnan(ratios)] = np.inf
    if free is not None:
        ratios[np.asarray(free).reshape(-1)] = 0.0
    i = int(np.argmax(ratios))
    idx = np.unravel_index(i, out.shape)
    rel = float(np.divide(diff, np.maximum(abs_b, 1e-30, out=abs_b), out=abs_b).max())
    return Judged(float(diff.max()), rel, float(ratios.flat[i]), tuple(int(x) for x in idx),
                  out[idx].item(), ref[idx].item())


def judge_fusion(inst: Instruction, ops: list[Any] | None, out: list, ref: Any,
                 options: VerifyOptions, judged: list[Judged] | None = None) -> tuple[Judged, Budget] | None:
    """The worst output leaf of one fusion execution against its budget, ``(Judged, Budget)`` (None: no leaf).

    An output over its budget gets a second look on ``ops``, the better of two:

    * the fusion's conditioning (:func:`fusegen.verify.conditioning.rounding_bounds`): each element may
      also differ by twice the bound on the rounding error any evaluation order of the computation can
      make there (kernel and reference each within it), so a sum that cancels to almost nothing may
      differ by its terms' rounding, ``eps * sum |terms|``, and a reordering is never a mismatch;
    * the fusion's own f64 evaluation: when the kernel is no further from it than ``rtol`` x the
      reference's distance plus the floor, the ratio becomes kernel error / that allowance.

    Without ``ops`` (or an f64 evaluation) the plain budget stands.
    In a fusion with an order-dependent reduction (:func:`fusegen.verify.expected.order_dependent_fusion`),
    an inf/NaN disagreement with the reference is not counted where the order explains it
    (:func:`fusegen.verify.expected.order_free`: the kernel gives the f64 value, or inf/NaN on edge-value
    operands).
    ``judged``, when given, receives every leaf's :class:`Judged` in order (its errors are
    :func:`fusegen.runtime.compare.compare`'s for a floating leaf, so callers need not widen the arrays again).
    """
    from fusegen.runtime.inputs import leaves
    from fusegen.verify.expected import edge_values, order_dependent_fusion, order_free
    from fusegen.evaluator.promote import OracleUnavailable, evaluate_fusion_promoted, is_float_type

    worst, exact, ordered, bounds = None, None, None, None
    for i, (b, a, r) in enumerate(zip(output_budgets(inst), out, leaves(ref))):
        j, free = judge(a, r, b, options), None
        if math.isinf(j.ratio) and ops is not None and is_float_type(b.element_type):
            ordered = order_dependent_fusion(inst) if ordered is None else ordered
            if ordered:  # overflow and NaN in a sum or product depend on its order: free where explained
                try:
                    exact = leaves(evaluate_fusion_promoted(inst, ops)) if exact is None else exact
                except OracleUnavailable:
                    exact = []
                a_, r_ = np.asarray(a), np.asarray(r)
                x = np.asarray(exact[i]) if i < len(exact) else None
                if a_.shape == r_.shape:
                    # the kernel's value is free where it is the f64 one up to the budget's rounding there
                    near = 0.0
                    if x is not None and x.shape == a_.shape:
                        mx = np.abs(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64))
                        mx = np.where(np.isfinite(mx), mx, 0.0)
                        near = tolerance(b.path_type)[0] * mx + options.floor(b.path_type) * b.growth * np.maximum(mx, 1.0)
                    free = order_free(a_, r_, x, edge_values(ops), np.isinf(abs_error(a_, r_)[0]), near)
                    j = judge(a, r, b, options, free)
        if j.ratio > 1.0 and ops is not None and math.isfinite(j.ratio) and is_float_type(b.element_type):
            bounds = _bounds(inst, ops) if bounds is None else bounds
            e = bounds[i] if i < len(bounds) else None
            if e is not None and e.shape == np.shape(a):
                conditioned = judge(a, r, b, options, free, extra=2.0 * e)
                j = conditioned if conditioned.ratio < j.ratio else j
        if j.ratio > 1.0 and ops is not None and math.isfinite(j.ratio) and is_float_type(b.element_type):
            try:
                exact = leaves(evaluate_fusion_promoted(inst, ops)) if exact is None else exact
            except OracleUnavailable:
                exact = []
            if i < len(exact):
                x = np.asarray(exact[i])
                dk = abs_error(np.asarray(a), x)[0]
                if free is not None and np.shape(free) == dk.shape:
                    dk = np.where(free, 0.0, dk)
                dr = abs_error(np.asarray(r), x)[0]
                dr = dr[np.isfinite(dr)]  # where the reference overflows, not a conditioning of every element
                ek, er = float(dk.max()), float(dr.max()) if dr.size else 0.0
                finite = np.abs(x[np.isfinite(x)])
                allow = options.rtol * er + options.floor(b.path_type) * b.growth * (float(finite.max()) if finite.size else 0.0)
                if allow > 0 and ek / allow < j.ratio:
                    j = attrs.evolve(j, ratio=ek / allow)
        if judged is not None:
            judged.append(j)
        if worst is None or j.ratio > worst[0].ratio:
            worst = (j, b)
    return worst


def _bounds(inst: Instruction, ops: list[Any]) -> list:
    """:func:`fusegen.verify.conditioning.rounding_bounds`, or ``[]`` where the analysis cannot run."""
    from fusegen.verify.conditioning import rounding_bounds
    from fusegen.evaluator.promote import OracleUnavailable

    try:
        return rounding_bounds(inst, ops)
    except OracleUnavailable:
        return []
