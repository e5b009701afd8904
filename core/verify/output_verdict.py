"""One module output judged: its :class:`OutputVerdict` and the three oracles applied to it.

:func:`_judge_output` gives an output's verdict against the reference evaluator, the f64 oracle and a known
answer (``--expected``, applied by :func:`_expected`); what each oracle allows is in
:mod:`fusegen.verify.verdict`'s docstring. :func:`_term_magnitudes` evaluates the module in f64 on its inputs'
magnitudes (the size of the terms each output element's sums combine). :mod:`fusegen.verify.verdict` judges
every output of a run with these, and :mod:`fusegen.verify.rejudge` judges a failing one again.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import attrs
import numpy as np

from fusegen.hlo.ir import Module
from fusegen.runtime.compare import abs_error, all_nonfinite, compare
from fusegen.verify.expected import OutputPath, judge_expected, typed
from fusegen.config.verify_options import VerifyOptions
from fusegen.evaluator.promote import OracleUnavailable, evaluate_promoted


VACUOUS = "every element is NaN or inf in kernel and reference alike: comparison vacuous (try other inputs)"
#: what a vacuous output says when ``[verify] allow_vacuous`` (``--allow-vacuous``) did not allow it
NOT_A_PASS = "not a pass: nothing was compared ([verify] allow_vacuous = true or --allow-vacuous accepts it)"


def _py(v: Any) -> Any:
    """A JSON-friendly scalar (bf16/f8 numpy scalars become floats; complex becomes [re, im])."""
    if v is None:
        return None
    if isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, complex) or np.iscomplexobj(v):
        return [float(np.real(v)), float(np.imag(v))]
    f = float(v)
    return f if math.isfinite(f) else str(f)


@attrs.define
class OutputVerdict:
    """The verdict on one module output (``o0``, ``o1``, ... in the root tuple's leaf order)."""

    name: str
    element_type: str
    status: str
    max_abs_error: float
    kernel_error: float | None = None  # max |K - O|
    reference_error: float | None = None  # max |R - O|
    allowed: float | None = None  # rtol * reference_error + floor
    expected_error: float | None = None  # max |K - E|
    expected_allowed: float | None = None
    expected_vs_f64: float | None = None  # max finite |E - O| (with --expected and the f64 oracle)
    expected_less_accurate: int = 0  # elements where E, not the kernel, is the farther from f64 (drift)
    index: tuple[int, ...] | None = None
    values: dict[str, Any] = attrs.field(factory=dict)
    reason: str = ""
    ties: list = attrs.field(factory=list)  # fusegen.verify.ties.Tie: the near-ties that explain a difference

    def to_json(self) -> dict:
        d = {"name": self.name, "element_type": self.element_type, "status": self.status,
             "max_abs_error": _py(self.max_abs_error), "kernel_vs_f64": _py(self.kernel_error),
             "reference_vs_f64": _py(self.reference_error), "allowed_vs_f64": _py(self.allowed)}
        if self.expected_error is not None:
            d["kernel_vs_expected"] = _py(self.expected_error)
            d["allowed_vs_expected"] = _py(self.expected_allowed)
            if self.expected_vs_f64 is not None:
                d["expected_vs_f64"] = _py(self.expected_vs_f64)
            d["expected_less_accurate"] = self.expected_less_accurate
        if self.index is not None:
            d["index"] = list(self.index)
            d.update({f"{k}_value": _py(v) for k, v in self.values.items()})
        if self.reason:
            d["reason"] = self.reason
        if self.ties:
            d["ties"] = [t.to_json() for t in self.ties]
        return d


def _expected(v: OutputVerdict, t: str, k: np.ndarray, r: np.ndarray, o: np.ndarray | None, e: np.ndarray,
              options: VerifyOptions, path: OutputPath | None, tied: tuple | None = None) -> bool:
    """Apply the third oracle to ``v`` (status, figures, reason, worst element); False on a shape mismatch."""
    e = np.asarray(e)
    if e.shape != k.shape:
        v.status, v.reason = "mismatch", f"expected array has shape {e.shape}, output {k.shape}"
        return False
    j = judge_expected(t, k, r, o, e, path or OutputPath(False, False, False, 0.0), options, tied)
    v.expected_error, v.expected_allowed, v.expected_less_accurate = j.error, j.allowed, j.less_accurate
    if o is not None and _is_float_array(k):
        de = abs_error(e, o)[0]
        v.expected_vs_f64 = _max(de[np.isfinite(de)])
    if j.status == "mismatch" or (j.status == "drift" and v.status == "ok"):
        v.status = j.status
        v.reason = "; ".join(x for x in (v.reason, j.reason) if x) if j.status == "drift" else j.reason
    elif j.status == "drift" and j.reason:
        v.reason = "; ".join(x for x in (v.reason, j.reason) if x)
    if j.index is not None and j.status != "ok":
        v.index = j.index
        v.values = {"kernel": k[j.index].item(), "reference": r[j.index].item(), "expected": e[j.index].item()}
    return True


def _is_float_array(a: np.ndarray) -> bool:
    return not (a.dtype.kind in "biu" or a.dtype == np.bool_)


def _max(d: np.ndarray) -> float:
    return float(d.max()) if d.size else 0.0


def _judge_output(i: int, t: str, k: np.ndarray, r: np.ndarray, o: np.ndarray | None, e: np.ndarray | None,
                  options: VerifyOptions, budgets_ok: bool, path: OutputPath | None = None,
                  tied: tuple | None = None, tolerance_type: str | None = None) -> OutputVerdict:
    """One output's verdict; ``tolerance_type`` (default ``t``) gives the tolerance against the reference
    (``tf32`` for an output of a tf32 dot, :func:`fusegen.verify.budget.output_tolerance_types`), and
    ``options`` already carries its floor (:meth:`VerifyOptions.with_floor_of`)."""
    if e is not None:
        e = typed(e, k)  # np.savez stores bfloat16 arrays as raw bytes
    c = compare(k, r, tolerance_type or t)
    v = OutputVerdict(f"o{i}", t, "ok" if c.ok else "mismatch", c.max_abs_error)
    if k.shape != r.shape:
        return v
    if k.dtype.kind in "biu" or k.dtype == np.bool_:
        if e is not None:
            _expected(v, t, k, r, None, e, options, path, tied)
        return v
    floor = options.floor(t)
    worst = None
    if c.ok and all_nonfinite(k) and all_nonfinite(r):  # NaN == NaN everywhere: nothing was checked
        v.status, v.reason = ("drift", VACUOUS) if options.allow_vacuous else ("vacuous", f"{VACUOUS}; {NOT_A_PASS}")
    if o is not None:
        dk, ob = abs_error(k, o)
        dr, _ = abs_error(r, o)
        v.kernel_error, v.reference_error = _max(dk), _max(dr)
        finite = np.abs(ob[np.isfinite(ob)])
        cond = v.reference_error
        if path is not None and path.conditioning is not None:  # the reference with f32 dots: a second sample
            c2 = np.asarray(path.conditioning, np.float64)
            cond = max(cond, _max(c2[np.isfinite(c2)]))
        v.allowed = options.rtol * cond + floor * max(1.0, _max(finite))
        if not c.ok:
            v.status = "drift" if (v.kernel_error <= v.allowed and budgets_ok) else "mismatch"
            if v.status == "mismatch":
                v.reason = ("some fusion left its error budget" if v.kernel_error <= v.allowed else
                            f"kernel error vs f64 {v.kernel_error:.3g} > {options.rtol:g} x reference's "
                            f"{v.reference_error:.3g} + floor")
        worst = dk
    elif not c.ok:
        v.reason = "no f64 oracle to tell drift from a mismatch"
    if e is not None:
        e = np.asarray(e)
        if not _expected(v, t, k, r, o, e, options, path, tied):
            return v
    idx = v.index  # the element the third oracle named, if it found one
    if idx is None:
        if worst is None:
            worst = abs_error(k, e)[0] if e is not None else abs_error(k, r)[0]
        if not worst.size:
            return v
        idx = tuple(int(x) for x in np.unravel_index(int(np.argmax(worst)), worst.shape))
    v.index = idx
    v.values = {"kernel": k[idx].item(), "reference": r[idx].item()}
    if o is not None:
        v.values["f64"] = o[idx].item()
    if e is not None:
        v.values["expected"] = e[idx].item()
    return v


def _map_leaves(fn: Callable[[np.ndarray], Any], v: Any) -> Any:
    """``fn`` applied to each array of ``v`` (an array or nested tuples of them), the tuples kept."""
    if isinstance(v, tuple):
        return tuple(_map_leaves(fn, x) for x in v)
    return fn(np.asarray(v))


def _magnitude(a: np.ndarray) -> np.ndarray:
    """``|a|`` of a floating array (a complex one stays complex, its imaginary part 0); any other as it is."""
    if a.dtype.kind == "c":
        return np.abs(a).astype(a.real.dtype).astype(a.dtype)
    return np.abs(a) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" or a.dtype.name.startswith("float") else a


def _term_magnitudes(module: Module, args: list[Any]) -> list[np.ndarray] | None:
    """The module's outputs evaluated in f64 on the inputs' magnitudes (the size of the terms each output
    element's sums combine); ``None`` when the f64 evaluation is unavailable."""
    from fusegen.runtime.inputs import leaves

    try:
        return [np.asarray(x) for x in leaves(evaluate_promoted(module, [_map_leaves(_magnitude, a) for a in args]))]
    except OracleUnavailable:
        return None
