"""The third oracle, ``--expected OUT.npz``: a known answer judged element by element, for every type.

Per module output leaf ``k`` (kernel path ``K``, reference ``R``, f64 oracle ``O``, expected ``E``):

* **integer and pred outputs** compare exactly: any ``K != E`` is a mismatch, except an index chosen by a
  variadic ``reduce`` over floating keys (argmax / argmin) when the inputs hold edge values (NaN, inf): with
  two NaNs in a row the index depends on the reduction order, so where ``K`` differs from ``E`` but equals
  ``R`` it is ``drift`` (a near-tie of finite keys is :mod:`fusegen.verify.ties`'s);
* **floating outputs of exact operations** (data movement, negate, abs, select, max/min, compare, converts,
  rounding, sorts, max/min reductions: nothing that rounds a sum) compare exactly up to the smallest normal
  of the f32/f64 types on the path (XLA:CPU flushes their denormals to zero, XLA:GPU keeps them);
* **other floating outputs** are judged per element: ``|K - E| <= rtol * c + floor(t) * S`` where
  ``S = max(1, |E|, median finite |E|)`` (the median stands for the output's typical magnitude, so an
  element that cancels is judged on the scale of its terms, and one ``±MAX`` element does not widen the
  allowance of the others) and ``c = max(|R - O|, kappa * W)`` with ``W = max(|O|, median |O|)`` and
  ``kappa`` the largest finite ``|R - O| / W`` over the output (the program's conditioning as a relative
  figure: an error in a shared intermediate, such as a cancelling variance, counts at every element it
  feeds); where ``R`` overflows but ``O`` does not, ``|E - O|`` stands in for ``|R - O|`` at that element;
* **inf/NaN positions** are compared: a non-finite value where ``E`` has another value fails, unless the
  output comes through an order-dependent reduction (sum, product, dot, convolution, scatter-add) and the
  kernel's value is one another oracle gives there (``R`` or ``O``), or is itself inf/NaN while the inputs
  hold edge values (inf, NaN, or magnitudes past ``sqrt(max)`` of their type): overflow, ``inf - inf`` and
  ``inf * 0`` then depend on the order, which XLA leaves free (and so does a finite element within the
  floor of the magnitude of its terms, the module evaluated in f64 on ``|inputs|``: reassociating
  ±MAX-size terms moves the rounding by about ``eps * MAX``); those elements are ``drift``, named in the reason (:func:`order_free`; the per-fusion budgets of :mod:`fusegen.verify.budget` use the same rule);
* **a less accurate expected answer**: an element of an order-dependent output that fails the allowance is
  ``drift``, not a mismatch, when the f64 oracle shows the kernel at least as near the truth as ``E``
  (``|K - O| <= |E - O|``) and ``E``'s own distance is what a correct evaluation in another order can round
  to, ``|E - O| <= rtol * u(t) * growth(n) * T``: ``u(t)`` the unit roundoff of the output type, ``n`` the
  largest number of terms a reduction on the path combines, ``growth`` the budgets' ``max(1, sqrt(n/256))``
  and ``T`` the f64 evaluation on the inputs' magnitudes (``sum |x|`` for a sum); :func:`less_accurate`.
  XLA:CPU folds a long row in its own order, which on a cancelling sum can round far more than the kernel's.
* **an expected answer rounded through a 16-bit intermediate** (any floating output): an element that fails
  the allowance is ``drift`` when the kernel is at least as near the f64 oracle as ``E`` and ``|E - O|`` is
  what one bf16 rounding can move it: ``rtol * max(u * |O|, min(B, u * |T|))``, ``u`` bf16's unit roundoff,
  ``B`` the distance to ``O`` of the module evaluated in f64 on its inputs rounded to bf16 (on an output of exact operations ``E`` must also be a
  bf16 value; inputs with edge values are left out). XLA:GPU's optimized HLO drops convert pairs such as f32 -> bf16 -> f32 under
  ``--xla_allow_excess_precision`` (on by default; ``simplify_fp_conversions.cc``), XLA:CPU may keep them, so the
  HLO fusegen runs no longer rounds where ``E`` did. ``[verify] xla_allow_excess_precision = false`` (for an
  answer computed with that flag off) turns the rule off; :func:`rounded_more`.

The archive itself is read by :func:`fusegen.runtime.inputs.load_expected`.

Mirrors no XLA file: XLA's tests compare with ``ErrorSpec`` per element (``xla/literal_comparison.cc``,
``NearComparator``), which this follows in spirit (per-element bounds, NaN/inf positions compared).
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import ml_dtypes
import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Module
from fusegen.runtime.compare import abs_error
from fusegen.verify.precision_terms import GROWTH_FREE_TERMS, mantissa_bits, reduced_terms
from fusegen.config.verify_options import VerifyOptions

#: Opcodes whose floating results are exact functions of their operands (no rounding of a sum or product).
EXACT_OPS = frozenset({
    "parameter", "constant", "iota", "bitcast", "reshape", "broadcast", "transpose", "copy", "slice",
    "concatenate", "pad", "reverse", "gather", "dynamic-slice", "dynamic-update-slice", "tuple",
    "get-tuple-element", "select", "negate", "abs", "maximum", "minimum", "clamp", "compare", "sign", "floor",
    "ceil", "round-nearest-afz", "round-nearest-even", "not", "and", "or", "xor", "convert", "bitcast-convert",
    "reduce-precision", "sort", "real", "imag", "complex", "copy-start", "copy-done", "fusion", "reduce",
    "reduce-window", "scatter", "select-and-scatter", "map", "call", "while", "conditional",
    "optimization-barrier", "after-all", "partition-id", "replica-id", "shift-left", "shift-right-logical",
    "shift-right-arithmetic", "popcnt", "clz", "is-finite",
})
#: Opcodes whose result depends on the order in which they combine floating terms (when the combiner adds
#: or multiplies; max/min combiners are exact).
ORDERED_OPS = frozenset({"reduce", "reduce-window", "dot", "convolution", "scatter", "select-and-scatter",
                         "all-reduce", "reduce-scatter", "custom-call", "fft", "map"})


_TINY = 2.0 ** -126  # the scale of an all-zero output

#: Types whose denormals XLA:CPU flushes (bf16 computes in f32; f16 and the f8 types' denormals are f32 normals).
_FLUSHED = frozenset({"f32", "bf16", "f64", "c64", "c128"})


def _is_float(element_type: str) -> bool:
    return dtypes.is_floating(element_type) or dtypes.is_complex(element_type)


@attrs.frozen
class OutputPath:
    """What the computation of one module output leaf does (from the HLO alone).

    Attributes:
        exact: every floating instruction on the path is exact (see :data:`EXACT_OPS`; ``abs`` of a complex
            value and reductions that add are not).
        order_dependent: a floating reduction, dot, convolution or scatter whose combiner adds or multiplies.
        index_choice: an integer result chosen by a variadic ``reduce`` with floating keys (argmax/argmin):
            with edge-value inputs (``edge``), an index equal to the reference's is drift (two NaNs in a row
            make it depend on the reduction order); without, integer outputs compare exactly.
        flush: the largest smallest-normal of the f32/bf16/f64/complex types on the path (0 without one):
            XLA:CPU flushes their denormals to zero.
        edge: the largest finite input magnitude when the module's inputs hold edge values, else 0
            (:func:`edge_values`; set by the caller, which has the inputs).
        terms: for an order-dependent output with edge-value inputs, the f64 evaluation of the module on the
            inputs' magnitudes (``|x|``), an array of the output's shape: per element, the size of the terms
            its sums combine (the scale of reassociation's rounding); ``None`` when not computed.
        conditioning: another correct evaluation's distance to the f64 oracle (f64, the output's shape): the
            reference with its tf32 dots at IEEE f32 (:func:`fusegen.verify.verdict.judge_module`), a second
            sample of the program's conditioning beside ``|R - O|``; ``None`` when not computed.
        reduced: the largest number of terms one floating reduction, dot or convolution on the path combines
            (1 without one).
        bf16_inputs: the f64 evaluation with its f32/f64 inputs rounded to bf16, as its distance to the f64
            oracle (f64, the output's shape): how far a bf16 rounding the HLO no longer has moves the output
            (:func:`excess_precision_bound`); ``None`` when not computed.
    """

    exact: bool
    order_dependent: bool
    index_choice: bool
    flush: float
    edge: float = 0.0
    terms: Any = attrs.field(default=None, eq=False)
    conditioning: Any = attrs.field(default=None, eq=False)
    reduced: int = 1
    bf16_inputs: Any = attrs.field(default=None, eq=False)


def _inexact(inst: Instruction) -> bool:
    """Whether ``inst`` rounds a floating result (its opcode is not exact, or complex ``abs``)."""
    types = [s.element_type for s in inst.shape.leaves()] + [s.element_type for o in inst.operands
                                                             for s in o.shape.leaves()]
    if not any(_is_float(t) for t in types):
        return False  # integer arithmetic is exact
    if inst.opcode == "abs":
        return any(dtypes.is_complex(o.shape.element_type) for o in inst.operands if o.shape.is_array)
    return inst.opcode not in EXACT_OPS


def _combines(inst: Instruction) -> bool:
    """Whether a reduction-like ``inst`` combines floating terms with something other than max/min/select."""
    if inst.opcode in ("dot", "convolution", "all-reduce", "reduce-scatter", "fft"):
        return True
    if inst.opcode == "custom-call":
        return "matmul" in str(inst.attrs.get("custom_call_target", "")) or "gemm" in str(
            inst.attrs.get("custom_call_target", ""))
    return any(_inexact(i) for c in inst.called_computations for i in c.instructions)


def smallest_normal(element_type: str) -> float:
    """The smallest normal magnitude of a floating ``element_type`` (bf16 and complex: their f32/f64 part's)."""
    part = {"c64": "f32", "c128": "f64", "bf16": "f32"}.get(element_type, element_type)
    return float(ml_dtypes.finfo(dtypes.numpy_dtype(part)).smallest_normal)


def output_paths(module: Module) -> list[OutputPath]:
    """One :class:`OutputPath` per array leaf of the entry computation's root (tuple leaves in order)."""
    root = module.entry.root
    leaves = root.shape.leaves()
    roots = list(root.operands) if root.opcode == "tuple" and len(root.operands) == len(leaves) else [root] * len(leaves)
    return [_path(r) for r in roots]


def order_dependent_fusion(fusion: Instruction) -> bool:
    """Whether a fusion's result goes through a floating reduction, dot or scatter that adds or multiplies."""
    comp = getattr(fusion, "fused_computation", None)
    return comp is not None and _path(comp.root).order_dependent


def _path(root: Instruction) -> OutputPath:
    seen: set[int] = set()
    stack = [root]
    exact, ordered, index, flush, reduced = True, False, False, 0.0, 1
    while stack:
        inst = stack.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        types = [s.element_type for s in inst.shape.leaves()]
        for t in types:
            if t in _FLUSHED:
                flush = max(flush, smallest_normal(t))
        if _inexact(inst):
            exact = False
        if inst.opcode in ORDERED_OPS and _combines(inst) and any(_is_float(t) for t in types):
            ordered = True
            reduced = max(reduced, reduced_terms(inst))
        if (inst.opcode == "reduce" and len(inst.operands) >= 4 and any(not _is_float(t) for t in types)
                and any(_is_float(o.shape.element_type) for o in inst.operands if o.shape.is_array)):
            index = True
        for c in inst.called_computations:
            stack.extend(c.instructions)
        stack.extend(inst.operands)
    return OutputPath(exact, ordered, index, flush, reduced=reduced)


@attrs.define
class ExpectedJudgement:
    """The third oracle's answer for one output: ``status`` ``ok`` / ``drift`` / ``mismatch``.

    ``error`` / ``allowed``: ``|K - E|`` and its allowance at the worst failing element (by error / allowance)
    for a mismatch, else at the largest error outside the elements the order explains (so ``error <=
    allowed`` unless ``mismatch``); ``index``: the element named (the first order-explained one for drift;
    ``None`` when every element is equal); ``reason``: why not ``ok``; ``less_accurate``: how many elements
    failed the allowance where the expected answer is the less accurate one (:func:`less_accurate`: drift).
    """

    status: str
    error: float
    allowed: float
    index: tuple[int, ...] | None = None
    reason: str = ""
    less_accurate: int = 0


def _finite(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x)
    return np.isfinite(x.astype(np.complex128 if x.dtype.kind == "c" else np.float64))


def _worst(ratio: np.ndarray, shape: tuple[int, ...]) -> tuple[int, ...] | None:
    if not ratio.size or not (ratio > 0).any():
        return None
    return tuple(int(x) for x in np.unravel_index(int(np.argmax(ratio)), shape))


def edge_values(values: Any) -> float:
    """The largest finite magnitude among the floating arrays of ``values`` (arrays or tuples) when one holds
    inf, NaN, or a magnitude past ``sqrt(max)`` of its type (a product of two such values overflows; a long
    sum of them may); 0.0 when none does."""
    from fusegen.runtime.inputs import leaves

    edge, scale = False, 0.0
    for v in leaves(tuple(values) if isinstance(values, list) else values):
        a = np.asarray(v)
        if a.dtype.kind not in "fcV" or a.dtype.type is np.void or not a.size:
            continue
        try:
            big = math.sqrt(float(ml_dtypes.finfo(a.real.dtype if a.dtype.kind == "c" else a.dtype).max))
        except (TypeError, ValueError):
            continue  # an integer ml_dtypes type
        w = np.abs(a.astype(np.complex128 if a.dtype.kind == "c" else np.float64))
        fin = np.isfinite(w)
        top = float(w[fin].max()) if fin.any() else 0.0
        edge = edge or not fin.all() or top >= big
        scale = max(scale, top)
    return max(scale, 1.0) if edge else 0.0


def order_free(k: np.ndarray, r: np.ndarray, x: np.ndarray | None, edge: float, nonfinite: np.ndarray,
               allowed: np.ndarray | float) -> np.ndarray:
    """Elements of an order-dependent reduction's result ``k`` whose disagreement the order explains.

    ``nonfinite``: where ``k`` and the oracle being checked disagree on an inf/NaN (their difference is
    ``inf``); free among them: where ``k`` equals the reference ``r`` or is within ``allowed`` of the f64
    value ``x``, or where ``k`` itself is inf/NaN and ``edge`` (the inputs hold edge values: see
    :func:`edge_values`, non-zero). Returns a bool array of ``k``'s shape.
    """
    agree = abs_error(k, r)[0] == 0
    if x is not None:
        agree |= abs_error(k, x)[0] <= allowed
    involved = nonfinite | ~_finite(r) | ~_finite(k)
    return involved & (agree | (~_finite(k) & (edge > 0)))


def rounding_bound(t: str, path: OutputPath, options: VerifyOptions) -> np.ndarray | None:
    """How far from the f64 oracle a correct evaluation of an order-dependent output may round, per element:
    ``rtol * u(t) * growth(n) * |T|`` (see the module docstring; f64, ``path.terms``' shape, ``inf`` where
    ``T`` is not finite), or ``None`` without ``path.terms`` or for an output no reduction orders."""
    if not path.order_dependent or path.terms is None:
        return None
    tm = np.asarray(path.terms)
    tm = np.abs(tm.astype(np.complex128 if np.iscomplexobj(tm) else np.float64))
    growth = max(1.0, math.sqrt(path.reduced / GROWTH_FREE_TERMS))
    unit = 2.0 ** -(mantissa_bits(t) + 1)
    return np.where(np.isfinite(tm), options.rtol * unit * growth * tm, np.inf)


def less_accurate(t: str, k: np.ndarray, o: np.ndarray | None, e: np.ndarray, path: OutputPath,
                  options: VerifyOptions) -> np.ndarray:
    """Elements where the expected answer ``e`` is the less accurate one: the kernel ``k`` is at least as near
    the f64 oracle ``o`` (``|k - o| <= |e - o|``, both finite) and ``|e - o|`` is within
    :func:`rounding_bound`; a bool array of ``k``'s shape (all False without ``o`` or the bound)."""
    bound = rounding_bound(t, path, options)
    if o is None or bound is None or np.shape(bound) != k.shape:
        return np.zeros(k.shape, bool)
    dk, de = abs_error(k, o)[0], abs_error(e, o)[0]
    return np.isfinite(de) & (dk <= de) & (de <= bound)


#: The coarsest intermediate type whose rounding ``--xla_allow_excess_precision`` lets XLA:GPU skip (a convert
#: pair through bf16 or f16; bf16 has the fewer mantissa bits).
EXCESS_PRECISION_TYPE = "bf16"


def excess_precision_bound(o: np.ndarray, path: OutputPath, options: VerifyOptions) -> np.ndarray:
    """How far one rounding to :data:`EXCESS_PRECISION_TYPE` can move an output from the f64 oracle ``o``, per
    element: ``rtol * max(u * |o|, min(B, u * |T|))`` (f64, ``o``'s shape; ``u`` bf16's unit roundoff): a
    rounding of the value itself or of an intermediate, or, where ``B = path.bf16_inputs`` is computed, a
    rounding of the inputs carried through the program (a sum's terms, a cancelling difference), capped by
    the magnitude of the terms ``T = path.terms`` (a branch that flips under the rounding is not excused).
    The element's own figures only: a median would excuse any error near zero."""
    unit = 2.0 ** -(mantissa_bits(EXCESS_PRECISION_TYPE) + 1)

    def finite(a: Any) -> np.ndarray:
        m = np.abs(np.asarray(a).astype(np.complex128 if np.iscomplexobj(a) else np.float64))
        return np.where(np.isfinite(m), m, 0.0)

    w = unit * finite(o)
    if (path.bf16_inputs is not None and np.shape(path.bf16_inputs) == w.shape and path.terms is not None
            and np.shape(path.terms) == w.shape):
        w = np.maximum(w, np.minimum(finite(path.bf16_inputs), unit * finite(path.terms)))
    return options.rtol * w


def _bf16_representable(e: np.ndarray) -> np.ndarray:
    if np.iscomplexobj(e):
        return _bf16_representable(e.real) & _bf16_representable(e.imag)
    x = np.asarray(e).astype(np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        return x.astype(ml_dtypes.bfloat16).astype(np.float64) == x


def rounded_more(k: np.ndarray, o: np.ndarray | None, e: np.ndarray, path: OutputPath,
                 options: VerifyOptions) -> np.ndarray:
    """Elements where the expected answer ``e`` carries a 16-bit rounding the module does not: the kernel ``k``
    is at least as near the f64 oracle ``o`` (both distances finite) and ``|e - o|`` is within
    :func:`excess_precision_bound`; on an output of exact operations, ``e`` is a bf16 value too (exact
    operations after the rounding keep it one). A bool array of ``k``'s shape: all False without ``o``, with
    ``options.xla_allow_excess_precision`` off, or when the inputs hold edge values (inf, NaN, past
    ``sqrt(max)``), whose magnitudes would excuse anything. Mirrors the effect of XLA's
    ``SimplifyFPConversions`` (``xla/hlo/transforms/simplifiers/simplify_fp_conversions.cc``), which removes a
    chain of floating converts such as f32 -> bf16 -> f32 when excess precision is allowed."""
    if o is None or not options.xla_allow_excess_precision or path.edge or np.shape(o) != k.shape:
        return np.zeros(k.shape, bool)
    dk, de = abs_error(k, o)[0], abs_error(e, o)[0]
    out = np.isfinite(de) & np.isfinite(dk) & (dk <= de) & (de <= excess_precision_bound(o, path, options))
    return out & _bf16_representable(e) if path.exact else out


def failing(t: str, k: np.ndarray, r: np.ndarray, o: np.ndarray | None, e: np.ndarray, path: OutputPath,
            options: VerifyOptions) -> np.ndarray:
    """The elements of ``k`` that :func:`judge_expected` fails against ``e`` (a bool array of ``k``'s shape)."""
    if k.dtype.kind in "biu" or k.dtype == np.bool_ or not _is_float(t):
        return _int_failing(k, r, e, path)
    return _float_judgement(t, k, r, o, e, path, options)[5]


def _float_judgement(t: str, k: np.ndarray, r: np.ndarray, o: np.ndarray | None, e: np.ndarray, path: OutputPath,
                     options: VerifyOptions) -> tuple:
    """``(diff, allowed, ratio, nonfinite, free, failing, what, nearer, rounded)`` of a floating output (see
    judge_expected); ``nearer``: the failing elements where the expected answer is the less accurate one
    (:func:`less_accurate` or :func:`rounded_more`), left out of ``failing``; ``rounded``: those of them only
    :func:`rounded_more` explains."""
    diff, eb = abs_error(k, e)
    nonfinite = np.isinf(diff)
    if path.exact:
        allowed = np.full(diff.shape, path.flush)
        what = "exact operation"
    else:
        cond, ob = abs_error(r, o if o is not None else e)
        if o is not None and not np.isfinite(cond).all():
            alt, _ = abs_error(e, o)  # the program overflows here at its precision: E's own distance to f64
            cond = np.where(np.isfinite(cond), cond, np.where(np.isfinite(alt), alt, 0.0))
        if path.conditioning is not None and np.shape(path.conditioning) == np.shape(cond):
            c2 = np.asarray(path.conditioning, np.float64)
            cond = np.maximum(cond, np.where(np.isfinite(c2), c2, 0.0))
        # the program's conditioning as a relative figure (finite elements only), so that an error in a shared
        # intermediate (a variance, a max) that the reference happens to round well at one element still counts
        om = np.abs(ob)
        om = np.where(np.isfinite(om), om, 0.0)
        ofin = om[om > 0]
        w = np.maximum(om, max(float(np.median(ofin)) if ofin.size else 0.0, _TINY))
        with np.errstate(invalid="ignore"):
            rel = cond / w
        rel = rel[np.isfinite(rel)]
        cond = np.maximum(cond, (float(rel.max()) if rel.size else 0.0) * w)
        mag = np.abs(eb)
        finite = mag[np.isfinite(mag)]
        typical = float(np.median(finite)) if finite.size else 0.0
        scale = np.maximum(np.where(np.isfinite(mag), mag, 0.0), max(1.0, typical))
        with np.errstate(over="ignore"):
            allowed = options.rtol * cond + options.floor(t) * scale + path.flush
        what = "per-element allowance"
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(diff == 0, 0.0, diff / allowed)
    ratio = np.where(np.isnan(ratio), np.inf, ratio)
    bad = ratio > 1.0
    free = np.zeros(diff.shape, bool)
    if bad.any() and path.order_dependent:
        free = bad & order_free(k, r, o, path.edge, nonfinite, np.where(np.isfinite(allowed), allowed, 0.0))
        if path.edge:
            # reassociating a sum of ±MAX-size terms moves the rounding by about eps * MAX: a finite element
            # within the floor of the magnitude of its terms is free too (all inputs' largest without them)
            scale = path.edge
            if path.terms is not None and np.shape(path.terms) == diff.shape:
                tm = np.abs(np.asarray(path.terms).astype(np.complex128 if np.iscomplexobj(path.terms) else np.float64))
                scale = np.where(np.isfinite(tm), tm, np.inf)
            free |= bad & ~nonfinite & (diff <= options.floor(t) * scale)
    nearer = rounded = np.zeros(diff.shape, bool)
    if bad.any():
        nearer = bad & ~free & less_accurate(t, k, o, e, path, options)
        rounded = bad & ~free & ~nearer & rounded_more(k, o, e, path, options)
        nearer = nearer | rounded
    return diff, allowed, ratio, nonfinite, free, bad & ~free & ~nearer, what, nearer, rounded


def _tie_drift(tied: np.ndarray, shape: tuple[int, ...], reason: tuple) -> str:
    """``reason``: the ``tied`` tuple's text, and (third, optional) what the elements do instead of taking the
    other side of a near-tie (a re-run with roundings the expected answer's program kept)."""
    first = tuple(int(x) for x in np.argwhere(tied)[0]) if tied.ndim else ()
    what = reason[2] if len(reason) > 2 else "take the other side of a near-tie"
    return f"{int(tied.sum())} element(s) (first at {list(first)}) {what}: {reason[1]}"


def judge_expected(t: str, k: np.ndarray, r: np.ndarray, o: np.ndarray | None, e: np.ndarray,
                   path: OutputPath, options: VerifyOptions,
                   tied: tuple[np.ndarray, str] | None = None) -> ExpectedJudgement:
    """Judge kernel output ``k`` (element type ``t``) against the expected array ``e`` (see module docstring).

    ``r``: the reference evaluator's output; ``o``: the f64 oracle's (``None`` when unavailable). All arrays
    share one shape (the caller checks). ``tied``: ``(mask, reason[, what they do])``, elements that a re-run of
    the reference with a near-tie flipped (:mod:`fusegen.verify.ties`) or with a bf16 rounding explains: failing
    there is ``drift`` with ``reason``.
    """
    if k.dtype.kind in "biu" or k.dtype == np.bool_ or not _is_float(t):
        return _judge_exact_ints(k, r, e, path, tied)
    diff, allowed, ratio, nonfinite, free, rest, what, nearer, rounded = _float_judgement(t, k, r, o, e, path,
                                                                                          options)
    tmask = rest & tied[0] if tied is not None else np.zeros(diff.shape, bool)
    rest = rest & ~tmask
    n_nearer = int(nearer.sum())
    if rest.any():  # the figures at the worst failing element (error > allowed there)
        ridx = _worst(np.where(rest, ratio, 0.0), k.shape)
        return ExpectedJudgement("mismatch", float(diff[ridx]), float(allowed[ridx]), ridx,
                                 f"kernel vs expected {float(diff[ridx]):.3g} > {what} {float(allowed[ridx]):.3g} "
                                 f"at {list(ridx)}" + (" (a non-finite value where the other has another)"
                                                       if nonfinite[ridx] else ""), n_nearer)
    # the largest error outside the free elements and the allowance there (error <= allowed)
    held = np.where(free | tmask | nearer, 0.0, diff)
    hidx = _worst(held, k.shape)
    err, allow_at = (float(held[hidx]), float(allowed[hidx])) if hidx is not None else (0.0, 0.0)
    if not free.any() and not tmask.any() and not n_nearer:
        return ExpectedJudgement("ok", err, allow_at, hidx)
    reasons = []
    for mask, within in ((nearer & ~rounded, "the rounding of another summation order"),
                         (rounded, "one bf16 rounding of an intermediate (a convert pair XLA:GPU drops under "
                                   "--xla_allow_excess_precision, on by default, may stay in the expected "
                                   "answer's program)")):
        if not mask.any():
            continue
        nidx = _worst(np.where(mask, ratio, 0.0), k.shape)
        dk, de = abs_error(k, o)[0][nidx], abs_error(e, o)[0][nidx]
        bound = (excess_precision_bound(o, path, options) if mask is rounded else rounding_bound(t, path, options))
        reasons.append(f"the expected answer is the less accurate one at {int(mask.sum())} element(s) (worst "
                       f"at {list(nidx)}: kernel vs expected {float(diff[nidx]):.3g} > {what} "
                       f"{float(allowed[nidx]):.3g}, but kernel vs f64 {float(dk):.3g} <= expected vs f64 "
                       f"{float(de):.3g}, within {within} {float(bound[nidx]):.3g})")
    if free.any():
        fidx = _worst(np.where(free, ratio, 0.0), k.shape)
        reasons.append(f"{int(free.sum())} element(s) overflow or turn NaN depending on the order of a "
                       f"reduction (first at {list(fidx)}): the kernel's value is the reference's or the "
                       "f64 oracle's there, inf/NaN from edge-value inputs, or within the rounding of a sum of "
                       "±MAX-size terms")
    elif tmask.any():
        fidx = _worst(np.where(tmask, ratio, 0.0), k.shape)
    else:
        fidx = _worst(np.where(nearer, ratio, 0.0), k.shape)
    if tmask.any():
        reasons.append(_tie_drift(tmask, k.shape, tied))
    return ExpectedJudgement("drift", err, allow_at, fidx, "; ".join(reasons), n_nearer)


def _int_failing(k: np.ndarray, r: np.ndarray, e: np.ndarray, path: OutputPath) -> np.ndarray:
    wide = np.float64 if k.dtype == np.uint64 else np.int64
    a, b = k.astype(wide), e.astype(wide)
    bad = a != b
    # the argmax exemption needs keys that can hold two NaNs in a row: inputs with edge values (NaN/inf);
    # otherwise an index that differs from expected is judged exactly (a near-tie is left to ties.py)
    return bad & (a != r.astype(wide)) if path.index_choice and path.edge > 0 else bad


def _judge_exact_ints(k: np.ndarray, r: np.ndarray, e: np.ndarray, path: OutputPath,
                      tied: tuple[np.ndarray, str] | None = None) -> ExpectedJudgement:
    """Integer / pred outputs: exact, except an argmax-style index where the kernel agrees with the reference
    and elements a near-tie explains (``tied``)."""
    wide = np.float64 if k.dtype == np.uint64 else np.int64
    a, b = k.astype(wide), e.astype(wide)
    diff = np.abs(a - b).astype(np.float64)
    err = float(diff.max()) if diff.size else 0.0
    if err == 0:
        return ExpectedJudgement("ok", 0.0, 0.0)
    idx = _worst(diff, k.shape)
    bad = _int_failing(k, r, e, path)
    tmask = bad & tied[0] if tied is not None else np.zeros(bad.shape, bool)
    if not (bad & ~tmask).any():
        reasons = []
        if (a != b).sum() > tmask.sum():
            n = int((a != b).sum() - tmask.sum())
            reasons.append(f"{n} index(es) of a reduce over floating keys differ from expected but equal "
                           "the reference: with tied keys or two NaNs in a row the index depends on the "
                           "reduction order")
        if tmask.any():
            reasons.append(_tie_drift(tmask, k.shape, tied))
        return ExpectedJudgement("drift", err, 0.0, idx, "; ".join(reasons))
    idx = _worst(np.where(bad & ~tmask, diff, 0.0), k.shape)
    return ExpectedJudgement("mismatch", err, 0.0, idx,
                             f"kernel vs expected {float(diff[idx]):.3g} at {list(idx)} (integer outputs compare "
                             "exactly)")


def typed(e: Any, k: np.ndarray) -> np.ndarray:
    """``e`` as an array; raw bytes of ``k``'s item size are viewed as ``k``'s dtype (a caller without types)."""
    e = np.asarray(e)
    if e.dtype.kind == "V" and e.dtype.itemsize == k.dtype.itemsize:
        return e.view(k.dtype)
    return e

