"""Comparing kernel outputs with the reference evaluator.

Tolerances depend on the element type: kernels may reassociate and use hardware transcendental
approximations, so low-precision types get wider bounds (bf16 keeps 8 mantissa bits). ``tf32`` is no HLO type:
it is the precision of an f32 dot's products on tensor cores (each operand rounded to 10 mantissa bits: half
an ulp is 2^-11, about 5e-4), which error budgets (:mod:`fusegen.verify.budget`) use for the outputs such a
dot computes.
"""

from __future__ import annotations

import attrs
import numpy as np

#: (rtol, atol) per element type; others compare exactly.
TOLERANCES: dict[str, tuple[float, float]] = {
    "f64": (1e-9, 1e-12), "f32": (1e-4, 1e-5), "tf32": (5e-4, 1e-3), "f16": (2e-3, 1e-3), "bf16": (2e-2, 1e-2),
    "c64": (1e-4, 1e-5), "c128": (1e-9, 1e-12),
}
_FP8 = (0.13, 0.07)


@attrs.frozen
class Comparison:
    """Result of comparing one value with its reference.

    Attributes:
        max_abs_error: largest |out - ref| over all elements (NaN positions that agree excluded).
        max_rel_error: largest |out - ref| / max(|ref|, tiny).
        ok: every element within ``atol*max(1, max|ref|) + rtol*|ref|`` and NaN where the reference is NaN.
    """

    max_abs_error: float
    max_rel_error: float
    ok: bool


def tolerance(element_type: str) -> tuple[float, float]:
    if element_type.startswith("f8") or element_type.startswith("f4"):
        return _FP8
    return TOLERANCES.get(element_type, (0.0, 0.0))


def abs_error(out: np.ndarray, ref: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(|out - ref|, ref widened)``: positions where both are NaN or the same infinity count 0 (and their
    reference reads 0); any other NaN or infinity in the difference counts ``inf``. Complex values are
    compared part by part (``hypot`` of the two parts' errors; an agreeing infinite part reads 0)."""
    wide = np.complex128 if (out.dtype.kind == "c" or ref.dtype.kind == "c") else np.float64
    a, b = out.astype(wide), ref.astype(wide)
    if np.isfinite(a).all() and np.isfinite(b).all():  # nothing to agree on: the same figures in 2 passes, not 8
        if a is out or a.dtype.kind == "c":
            return np.asarray(np.abs(a - b)), b
        np.subtract(a, b, out=a)  # a is astype's fresh copy
        return np.abs(a, out=a), b
    if a.dtype.kind == "c":  # part by part: (-inf, 1) vs (-inf, 1.1) differs by 0.1, not by |nan|
        dr, br = abs_error(a.real, b.real)
        di, bi = abs_error(a.imag, b.imag)
        wb = np.empty(b.shape, b.dtype)
        wb.real, wb.imag = br, bi  # not br + 1j * bi: 1j * inf has a NaN real part
        return np.hypot(dr, di), wb
    agree = (np.isnan(a) & np.isnan(b)) | (np.isinf(a) & np.isinf(b) & (a == b))
    with np.errstate(invalid="ignore"):
        diff = np.where(agree, 0.0, np.abs(a - b))
    return np.where(np.isnan(diff), np.inf, diff), np.where(agree, 0.0, b)


def compare(out: np.ndarray, ref: np.ndarray, element_type: str) -> Comparison:
    """Compare two logical arrays of one HLO element type."""
    out = np.asarray(out)
    ref = np.asarray(ref)
    if out.shape != ref.shape:
        return Comparison(float("inf"), float("inf"), False)
    if out.size == 0:
        return Comparison(0.0, 0.0, True)
    rtol, atol = tolerance(element_type)
    if out.dtype.kind in "biu" or out.dtype == np.bool_:
        a = out.astype(np.int64) if out.dtype != np.uint64 else out.astype(np.float64)
        b = ref.astype(np.int64) if ref.dtype != np.uint64 else ref.astype(np.float64)
        diff = np.abs(a - b).astype(np.float64)
        m = float(diff.max())
        rel = float((diff / np.maximum(np.abs(b).astype(np.float64), 1)).max())
        return Comparison(m, rel, m == 0)
    diff, b = abs_error(out, ref)
    m = float(diff.max())
    rel = float((diff / np.maximum(np.abs(b), 1e-30)).max())
    # The absolute floor scales with the output's magnitude: a sum of K products near zero carries an
    # error of about eps*sqrt(K)*max|ref| whatever the order, so a fixed atol fails correct kernels.
    finite = np.abs(b[np.isfinite(b)])
    scale = max(1.0, float(finite.max())) if finite.size else 1.0
    ok = bool(np.all(diff <= atol * scale + rtol * np.abs(b)))
    return Comparison(m, rel, ok)


def all_nonfinite(a: np.ndarray) -> bool:
    """Every element of a non-empty floating-point (or complex) array is NaN or +-inf: comparing it with
    another such array says nothing of the computation (NaN matches NaN, inf matches inf). False for integer
    and boolean arrays and empty ones."""
    a = np.asarray(a)
    if a.size == 0 or a.dtype.kind in "biu" or a.dtype == np.bool_:
        return False
    try:
        f = np.abs(a) if a.dtype.kind == "c" else a.astype(np.float64)  # bf16 / f8 (numpy kind "V") widen
    except (TypeError, ValueError):
        return False
    return not bool(np.isfinite(f).any())
