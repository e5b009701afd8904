"""Rounding-error bounds of a fusion's outputs from its conditioning: first-order running error analysis.

Two correct evaluations of one fused computation (a kernel and the reference) may round differently: they
sum in other orders, keep intermediates in wider registers, use other approximations. How far apart that can
take them depends on the computation's conditioning on its operands, not on the outputs' size: a sum whose
terms cancel to almost nothing keeps the rounding of its large terms. This module bounds, per output element,
``|fl(y) - y|`` for *any* evaluation order of the program at its own element types, by propagating an absolute
bound ``E`` through the computation in f64 on the fusion's operands (Wilkinson's running error analysis;
Higham, *Accuracy and Stability of Numerical Algorithms*, 2nd ed., §3.3 and §4.2):

* an operation rounding to type ``t`` adds ``u(t) * |y|`` (``u = 2**-(mantissa bits + 1)``, the unit roundoff);
* operand errors propagate through the derivative: ``E(a + b) = E(a) + E(b)``, ``E(a * b) = |b| E(a) + |a| E(b)``,
  ``E(a / b) = E(a) / |b| + |a / b**2| E(b)``, ``E(sqrt a) = min(E(a) / (2 sqrt a), sqrt E(a))``, ...;
* a ``K``-term sum (``reduce`` with an ``add`` combiner, ``dot``, ``convolution``, ``reduce-window``) adds
  ``(K - 1) u |terms|`` summed: the worst case of any order of summation, ``eps * sum |terms|``. A ``dot``
  whose f32 operands are rounded before the products (tf32 on the tensor cores, ``u(p) = 2**-11``, or a bf16
  algorithm) rounds an operand read exactly (a parameter, ``E = 0``) the same way in every evaluation (the
  reference rounds it as the kernel does), so that adds nothing; a computed operand (``E > 0``) may round a
  whole step apart in two evaluations, so its bound grows by ``u(p) |x|`` before the products: a tf32 GEMM of
  a computed lhs adds up to ``2**-11 sum |a| |b|`` beside its f32 accumulation's ``(K - 1) 2**-24 sum |a| |b|``;
* data movement (reshape, transpose, broadcast, slice, gather, select, ...) moves ``E`` with the values.

Parameters and constants are exact (kernel and reference read the same operand values). An instruction this
analysis has no rule for leaves the outputs that depend on it without a bound (``None``); so does an element
whose bound is not finite (a division by a value its own error could zero), where the plain budget stands.

XLA has no counterpart: its tests compare with ``ErrorSpec`` tolerances chosen per test
(``xla/tests/literal_test_util``); this replaces the choice by the program's own conditioning.
"""

from __future__ import annotations

import math
import types
from typing import Any, Sequence

import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction

Bound = Any  # np.ndarray (f64, the value's shape) | tuple of Bound | None (no rule)

#: ops that only move or select elements: the bound moves with the values (float operands replaced by
#: their bounds; index and predicate operands keep their values)
_MOVES = frozenset({"bitcast", "reshape", "transpose", "broadcast", "slice", "copy", "concatenate", "pad",
                    "reverse", "dynamic-slice", "dynamic-update-slice", "gather", "select"})
_EXACT_UNARY = frozenset({"negate", "abs", "real", "imag"})
#: the result's own error of an op that is not correctly rounded, in units of u (half an ulp): CUDA's
#: documented single-precision maxima (expf, tanhf, sinf, erff 2 ulp; powf 4 ulp; rsqrtf 2 ulp), which also
#: cover numpy's SIMD float32 functions (exp up to ~2 ulp on AVX-512); correctly rounded ops (+, -, x, /, sqrt)
#: keep 1.
_RESULT_ROUNDING = types.MappingProxyType({
    **{op: 4.0 for op in ("exponential", "exponential-minus-one", "log", "log-plus-one", "tanh", "sine", "cosine",
                          "erf", "cbrt", "rsqrt")},
    "logistic": 8.0,  # 1 / (1 + exp(-x)): the exp's error and two rounded steps
    "power": 8.0,
})


def unit_roundoff(element_type: str) -> float:
    """``u = 2**-(p)`` for a floating ``element_type`` with ``p - 1`` explicit mantissa bits (f32 ``2**-24``,
    bf16 ``2**-8``, f8e4m3 ``2**-4``); 0 for integer and pred types."""
    from fusegen.verify.budget import mantissa_bits

    m = mantissa_bits(element_type)
    return 0.0 if m >= 64 else 2.0 ** -(m + 1)


def _is_float(element_type: str) -> bool:
    return dtypes.is_floating(element_type) or dtypes.is_complex(element_type)


def _f64(v: Any) -> np.ndarray:
    a = np.asarray(v)
    if a.dtype.kind == "c":
        return np.abs(a).astype(np.float64)
    if a.dtype.kind in "biu" or a.dtype == np.bool_:
        return a.astype(np.float64)
    return a.astype(np.float64, copy=False)


def _combiner(inst: Instruction) -> str | None:
    """``add`` / ``maximum`` / ``minimum`` when ``inst``'s ``to_apply`` combines its two scalars that way."""
    comp = inst.attrs.get("to_apply")
    if not isinstance(comp, Computation) or comp.root is None:
        return None
    r = comp.root
    if r.opcode in ("add", "maximum", "minimum") and len(comp.parameters) == 2 \
            and {id(o) for o in r.operands} == {id(p) for p in comp.parameters}:
        return r.opcode
    return None


def _elementwise(op: str, y: np.ndarray, a: list[np.ndarray], e: list[np.ndarray], u: float) -> np.ndarray | None:
    """The bound of an elementwise ``op`` with result ``y`` (f64 magnitudes for complex), operand values ``a``
    and their bounds ``e``; ``None`` without a rule."""
    ay = np.abs(y)
    ru = _RESULT_ROUNDING.get(op, 1.0) * u * ay
    with np.errstate(all="ignore"):
        if op in ("add", "subtract"):
            return e[0] + e[1] + ru
        if op == "multiply":
            return np.abs(a[1]) * e[0] + np.abs(a[0]) * e[1] + ru
        if op == "divide":
            return e[0] / np.abs(a[1]) + np.abs(a[0]) / (a[1] * a[1]) * e[1] + ru
        if op in _EXACT_UNARY:
            return e[0]
        if op in ("maximum", "minimum"):
            return np.maximum(e[0], e[1])
        if op == "clamp":
            return np.maximum(np.maximum(e[0], e[1]), e[2])
        if op == "sqrt":
            return np.minimum(e[0] / (2 * ay), np.sqrt(e[0])) + ru
        if op == "rsqrt":
            return ay / (2 * np.abs(a[0])) * e[0] + ru
        if op == "cbrt":
            return np.minimum(ay / (3 * np.abs(a[0])) * e[0], np.cbrt(e[0])) + ru
        if op == "exponential":
            return ay * e[0] + ru
        if op == "exponential-minus-one":
            return np.abs(y + 1) * e[0] + ru
        if op == "log":
            return e[0] / np.abs(a[0]) + ru
        if op == "log-plus-one":
            return e[0] / np.abs(1 + a[0]) + ru
        if op == "tanh":
            return (1 - y * y) * e[0] + ru
        if op == "logistic":
            return y * (1 - y) * e[0] + ru
        if op in ("sine", "cosine"):
            return e[0] + ru
        if op == "erf":
            return 2 / math.sqrt(math.pi) * np.exp(-a[0] * a[0]) * e[0] + ru
        if op == "power":
            return ay * (np.abs(a[1] / a[0]) * e[0] + np.abs(np.log(np.abs(a[0]))) * e[1]) + ru
    return None


class _Propagation:
    """Values (f64, the promoted computation's) and bounds of every instruction of one computation."""

    def __init__(self, promoted: Computation, original: Computation):
        self.promoted, self.original = promoted, original
        self.twin = {id(p): o for p, o in zip(promoted.instructions, original.instructions)}

    def run(self, values: Sequence[Any], bounds: Sequence[Bound]) -> tuple[Any, Bound]:
        from fusegen.evaluator.evaluator import evaluate_instruction

        val: dict[int, Any] = {}
        err: dict[int, Bound] = {}
        for inst in self.promoted.post_order():
            orig = self.twin.get(id(inst), inst)
            if inst.opcode == "parameter":
                val[id(inst)], err[id(inst)] = values[inst.parameter_number], bounds[inst.parameter_number]
                continue
            ops = [val[id(o)] for o in inst.operands]
            val[id(inst)] = y = evaluate_instruction(inst, ops)
            err[id(inst)] = self.bound(inst, orig, y, ops, [err[id(o)] for o in inst.operands])
        root = self.promoted.root
        return val[id(root)], err[id(root)]

    def bound(self, inst: Instruction, orig: Instruction, y: Any, ops: list[Any], es: list[Bound]) -> Bound:
        from fusegen.evaluator.evaluator import evaluate_instruction
        from fusegen.verify.precision_terms import reduced_terms as _reduced_terms

        op = inst.opcode
        if op == "tuple":
            return tuple(es)
        if op == "get-tuple-element":
            e = es[0]
            return e[inst.attrs.get("index", 0)] if isinstance(e, tuple) else None
        if orig.shape.is_tuple:
            return None  # variadic reduce (argmax), sort, ...: no rule
        if not _is_float(orig.shape.element_type):
            return np.zeros(np.shape(y))  # integers and predicates are exact; a flipped choice is ties.py's
        if op in ("constant", "iota", "parameter"):
            return np.zeros(np.shape(y))
        if any(e is None or isinstance(e, tuple) for e, o in zip(es, orig.operands) if _is_float(o.shape.element_type)):
            return None
        u = unit_roundoff(orig.shape.element_type)
        if op in _MOVES:
            subst = [e if _is_float(o.shape.element_type) else v for e, v, o in zip(es, ops, orig.operands)]
            if op == "bitcast" and orig.operands and orig.operands[0].shape.element_type != orig.shape.element_type:
                return None
            return _f64(evaluate_instruction(inst, subst))
        if op == "convert":
            src = orig.operands[0].shape.element_type
            from fusegen.verify.budget import mantissa_bits

            rounds = not _is_float(src) or mantissa_bits(orig.shape.element_type) < mantissa_bits(src)
            return (es[0] if _is_float(src) else 0.0) + (u * np.abs(_f64(y)) if rounds else 0.0)
        if op in ("reduce", "reduce-window", "dot", "convolution"):
            return self._sum(inst, orig, y, ops, es, u, _reduced_terms(orig))
        if op == "fusion":
            inner = _Propagation(inst.fused_computation, orig.fused_computation)
            return inner.run(ops, es)[1]
        vals = [_f64(v) for v in ops]
        return _elementwise(op, _f64(y), vals, [np.asarray(e, np.float64) for e in es], u)

    def _sum(self, inst, orig, y, ops, es, u, terms: int) -> Bound:
        """A sum of ``terms`` terms: the terms' own bounds summed, plus ``(terms - 1) u`` times the sum of
        their magnitudes (any order; Higham (4.4)), evaluated with the instruction itself on substituted
        operands so that its dimension numbers, window and batch dimensions apply."""
        from fusegen.evaluator.evaluator import evaluate_instruction

        op = inst.opcode
        absv = [np.abs(np.asarray(v)) for v in ops]
        if op in ("reduce", "reduce-window"):
            how = _combiner(orig)
            if how is None or len(ops) != 2:
                return None
            if how in ("maximum", "minimum"):  # exact: the bound is the chosen term's, at most the largest
                if op == "reduce":
                    dims = tuple(orig.attrs.get("dimensions", ()) or ())
                    return np.maximum(np.max(es[0], axis=dims, initial=0.0), es[1])
                return None
            carried = _f64(evaluate_instruction(inst, [es[0], es[1]]))
            magnitude = _f64(evaluate_instruction(inst, absv))
        else:
            a, b = absv
            ea, eb = (np.asarray(e, np.float64) for e in es[:2])
            if op == "dot":  # a computed operand rounded before the products (tf32): u(p) |x| more, see above
                up_ = _operand_roundoff(orig)
                if up_:
                    ea = ea + np.where(ea > 0, up_ * a, 0.0)
                    eb = eb + np.where(eb > 0, up_ * b, 0.0)
            carried = _f64(evaluate_instruction(inst, [a, eb])) + _f64(evaluate_instruction(inst, [ea, b]))
            magnitude = _f64(evaluate_instruction(inst, [a, b]))
        return carried + (max(terms - 1, 0) * u) * magnitude + u * np.abs(_f64(y))


def _operand_roundoff(dot: Instruction) -> float:
    """The unit roundoff of the type ``dot``'s f32 operands are rounded to before its products (``2**-11`` for
    tf32: :meth:`fusegen.hlo.dot_numerics.DotNumerics.product_type`), 0 when they are not rounded."""
    from fusegen.verify.budget import _dot_product_type, mantissa_bits

    p = _dot_product_type(dot)
    widest = max((mantissa_bits(o.shape.element_type) for o in dot.operands[:2] if o.shape.is_array), default=0)
    return unit_roundoff(p) if p is not None and mantissa_bits(p) < widest else 0.0


def rounding_bounds(fusion: Instruction, operands: Sequence[Any]) -> list[np.ndarray | None]:
    """Per array leaf of ``fusion``'s output, a per-element bound (f64 array of the leaf's shape) on how far
    any evaluation of its fused computation at the program's element types can be from the exact result on
    ``operands`` (the fusion's operand values), or ``None`` where no bound is known (an instruction without
    a rule on the path; see the module docstring). Non-finite bounds read 0 (no allowance).

    Raises:
        fusegen.evaluator.promote.OracleUnavailable: the f64 evaluation of the computation fails.
    """
    from fusegen.evaluator.promote import OracleUnavailable, promote_value, promoted_fusion

    clone = promoted_fusion(fusion)
    values = [promote_value(v) for v in operands]
    zero = [_zeros(v) for v in values]
    try:
        _, e = _Propagation(clone.fused_computation, fusion.fused_computation).run(values, zero)
    except Exception as err:  # noqa: BLE001 - an analysis that cannot run gives no bound, never a failure
        raise OracleUnavailable(f"rounding bounds failed: {type(err).__name__}: {err}") from err
    out = []
    for leaf in (list(e) if isinstance(e, tuple) else [e]):
        if leaf is None or isinstance(leaf, tuple):
            out.append(None)
            continue
        b = np.asarray(leaf, np.float64)
        out.append(np.where(np.isfinite(b), b, 0.0))
    return out


def _zeros(v: Any) -> Bound:
    if isinstance(v, tuple):
        return tuple(_zeros(x) for x in v)
    return np.zeros(np.shape(v))
