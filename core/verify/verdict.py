"""The verdict of ``fusegen run``: ``ok``, ``drift`` or ``mismatch`` per module output, and what differs first.

Three oracles judge each module output (a kernel-path value ``K``):

1. the reference evaluator ``R`` (XLA's semantics at the program's precision): ``K`` within the per-dtype
   tolerance of :func:`fusegen.runtime.compare.compare` is ``ok``;
2. the f64 oracle ``O`` (:mod:`fusegen.evaluator.promote`): otherwise ``K`` is ``drift`` when
   ``max|K - O| <= rtol * max|R - O| + floor(t) * max(1, max|O|)`` (as accurate as the reference itself, up
   to the conditioning factor ``rtol`` and the per-dtype floor of :class:`VerifyOptions`) *and every fusion
   stayed within its error budget* (:mod:`fusegen.verify.budget`); else ``mismatch``;
3. a known answer ``E`` (``--expected OUT.npz``, e.g. JAX's own outputs): ``K`` must also satisfy
   ``max|K - E| <= rtol * max|R - O| + floor(t) * max(1, max|E|)`` (``max|R - E|`` in place of
   ``max|R - O|`` without the f64 oracle), whatever 1 and 2 said (this also catches a reference evaluator
   that is wrong), per element (:mod:`fusegen.verify.expected`); where ``E`` is the farther from ``O`` by no
   more than another summation order rounds, ``E`` is the less accurate answer: ``drift``, said.

A failing output names its worst element (index, kernel / reference / f64 / expected values) and the first
fusion, in execution order (with the ``while`` loop and iteration it ran in), whose result left its budget.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import attrs
import ml_dtypes
import numpy as np

from fusegen.hlo.ir import Computation, Instruction, Module
from fusegen.runtime.compare import abs_error, all_nonfinite, compare
from fusegen.verify.budget import judge_fusion, output_tolerance_types
from fusegen.verify.expected import OutputPath, edge_values, judge_expected, output_paths, typed
from fusegen.config.verify_options import VerifyOptions
from fusegen.evaluator.promote import OracleUnavailable, evaluate_promoted, is_float_type


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
class FusionEvent:
    """One execution of a fusion whose kernel was compared (execution order over the whole run).

    ``loop``: the enclosing ``while`` instruction's name (innermost), or ``None``; ``iteration``: its
    0-based iteration when the loop is not nested in another (else ``None``: ``execution`` still counts).
    """

    order: int
    fusion: str
    execution: int
    ratio: float
    worst_index: tuple[int, ...] | None
    value: Any
    reference: Any
    loop: str | None = None
    iteration: int | None = None

    def where(self) -> str:
        if self.loop is None:
            return f"%{self.fusion}" + (f" (execution {self.execution})" if self.execution else "")
        it = f"iteration {self.iteration}" if self.iteration is not None else f"execution {self.execution}"
        return f"%{self.fusion} (while %{self.loop}, {it})"

    def to_json(self) -> dict:
        return {"fusion": self.fusion, "execution": self.execution, "while": self.loop, "iteration": self.iteration,
                "error_budget_ratio": _py(self.ratio), "index": list(self.worst_index or ()),
                "kernel_value": _py(self.value), "reference_value": _py(self.reference)}


def _enclosing_whiles(module: Module) -> dict[int, list[str]]:
    """Computation id -> names of the ``while`` loops around it (innermost last)."""
    callers: dict[int, list[Instruction]] = {}
    for c in module.computations:
        for inst in c.instructions:
            for callee in inst.called_computations:
                callers.setdefault(id(callee), []).append(inst)
    memo: dict[int, list[str]] = {}

    def loops(comp: Computation, depth: int = 0) -> list[str]:
        if id(comp) in memo or depth > 64:
            return memo.get(id(comp), [])
        found: list[str] = []
        for caller in callers.get(id(comp), [])[:1]:
            found = loops(caller.parent, depth + 1) if caller.parent is not None else []
            if caller.opcode == "while":
                found = found + [caller.name]
        memo[id(comp)] = found
        return found

    return {id(c): loops(c) for c in module.computations}


def record_fusion(recorder: Any, rep: Any, inst: Instruction, out: Any, ref: Any, ops: list | None = None) -> None:
    """Judge one fusion execution against its budgets; update ``rep`` and append to ``recorder.events``
    (``recorder``: the run's :class:`~fusegen.verify.recorder.RunRecorder`).

    Sets ``rep.max_abs_error``, ``rep.max_rel_error`` (worst over executions), ``rep.error_budget_ratio``,
    ``rep.budget`` and ``rep.status`` (``ok`` / ``mismatch``); ``ops`` (the fusion's operands) allow the
    f64 second look of :func:`fusegen.verify.budget.judge_fusion`.
    """
    from fusegen.runtime.inputs import leaves

    ok = rep.status in ("pending", "ok")
    outs, refs = leaves(out), leaves(ref)
    judged: list = []
    worst = judge_fusion(inst, ops, outs, ref, recorder.verify, judged)
    types = [s.element_type for s in inst.shape.leaves()]
    for k, (a, r) in enumerate(zip(outs, refs)):
        a, r = np.asarray(a), np.asarray(r)
        if k < len(judged) and k < len(types) and is_float_type(types[k]):
            # judge() widened this pair already (bf16 and f8 too: numpy kind "V"): its max abs / rel errors
            # are compare()'s figures
            m, rel = judged[k].max_abs_error, judged[k].max_rel_error
        else:
            c = compare(a, r, "f64" if r.dtype.kind == "f" else "s32")
            m, rel = c.max_abs_error, c.max_rel_error
        rep.max_abs_error = max(rep.max_abs_error or 0.0, m)
        rep.max_rel_error = max(rep.max_rel_error or 0.0, rel)
    if worst is None:
        rep.status = "ok" if ok else rep.status
        return
    j, b = worst
    rep.error_budget_ratio = max(rep.error_budget_ratio or 0.0, j.ratio)
    rep.budget = b.describe()
    rep.status = "ok" if ok and rep.error_budget_ratio <= 1.0 else "mismatch"
    counts = recorder.fusion_counts
    n = counts.get(inst.name, 0)
    counts[inst.name] = n + 1
    if recorder.loops is None:
        recorder.loops = _enclosing_whiles(recorder.module)
    loops = recorder.loops.get(id(inst.parent), [])
    recorder.events.append(FusionEvent(len(recorder.events), inst.name, n, j.ratio, j.worst_index, j.value,
                                       j.reference, loops[-1] if loops else None, n if len(loops) == 1 else None))


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


def _term_magnitudes(module: Module, args: list[Any]) -> list[np.ndarray] | None:
    """The module's outputs evaluated in f64 on the inputs' magnitudes (the size of the terms each output
    element's sums combine); ``None`` when the f64 evaluation is unavailable."""
    from fusegen.runtime.inputs import leaves

    def mag(v: Any) -> Any:
        if isinstance(v, tuple):
            return tuple(mag(x) for x in v)
        a = np.asarray(v)
        if a.dtype.kind == "c":
            return np.abs(a).astype(a.real.dtype).astype(a.dtype)
        return np.abs(a) if a.dtype.kind == "f" or a.dtype.name == "bfloat16" or a.dtype.name.startswith("float") else a

    try:
        return [np.asarray(x) for x in leaves(evaluate_promoted(module, [mag(a) for a in args]))]
    except OracleUnavailable:
        return None


@attrs.define
class ModuleVerdict:
    """Per-output verdicts, the oracle's availability, and the first fusion execution out of budget."""

    outputs: list[OutputVerdict]
    oracle: str = "f64"  # or "unavailable: why"
    first_out_of_budget: FusionEvent | None = None
    notes: list[str] = attrs.field(factory=list)  # lines said after the outputs' (an SPMD run's inferred shardings)

    @property
    def status(self) -> str:
        """The worst output's: ``mismatch`` > ``undetermined`` (an SPMD output whose inferred sharding cannot be
        told from a mismatch: :mod:`fusegen.runtime.spmd_outputs`) > ``vacuous`` > ``drift`` > ``ok``."""
        s = {o.status for o in self.outputs}
        return next((x for x in ("mismatch", "undetermined", "vacuous", "drift") if x in s), "ok")

    def to_json(self) -> dict:
        return {"outputs": [o.to_json() for o in self.outputs], "oracle": self.oracle,
                "first_out_of_budget": self.first_out_of_budget.to_json() if self.first_out_of_budget else None}

    def lines(self) -> list[str]:
        """Human-readable lines for each output that is not ``ok`` (and the pointer)."""
        out = []
        for o in self.outputs:
            if o.status == "ok":
                continue
            fig = (f"kernel vs f64 {o.kernel_error:.3g}, reference vs f64 {o.reference_error:.3g}, allowed "
                   f"{o.allowed:.3g}" if o.kernel_error is not None else "")
            if o.expected_error is not None:
                fig += f"{'; ' if fig else ''}kernel vs expected {o.expected_error:.3g}"
                if o.expected_less_accurate:
                    fig += f", expected vs f64 {o.expected_vs_f64:.3g}"
            at = ""
            if o.index is not None:
                vals = ", ".join(f"{k} {_py(v):.6g}" if isinstance(_py(v), float) else f"{k} {_py(v)}"
                                 for k, v in o.values.items())
                at = f"; worst element {list(o.index)}: {vals}"
            out.append(f"{o.name} ({o.element_type}): {o.status.upper() if o.status == 'mismatch' else o.status}"
                       f" ({fig}){at}" + (f" - {o.reason}" if o.reason else ""))
        if self.first_out_of_budget is not None:
            ev = self.first_out_of_budget
            out.append(f"first fusion out of budget: {ev.where()}: error/budget {ev.ratio:.3g} at "
                       f"{list(ev.worst_index or ())} (kernel {_py(ev.value)}, reference {_py(ev.reference)})")
        return out + list(self.notes)


def judge_module(module: Module, args: list[Any], out: Any, ref: Any, events: list[FusionEvent],
                 options: VerifyOptions, expected: list[np.ndarray] | None = None,
                 f64: list[np.ndarray] | OracleUnavailable | None = None, ties: list | None = None,
                 budget: Any = None) -> ModuleVerdict:
    """Judge every module output of a run (see the module docstring).

    The f64 oracle is always evaluated, so every output carries its figures: ``f64`` gives it already
    evaluated (one array per output leaf, or the :class:`OracleUnavailable` saying why there is none, as
    :class:`fusegen.runtime.oracles.ModuleOracles` computes it beside the kernels); ``None`` evaluates it here.
    ``ties``: the kernel path's near-ties (:mod:`fusegen.verify.ties`): an output that is a mismatch while
    every fusion kept its budget is judged again against the reference re-run with those choices
    (``budget``: the run's :class:`~fusegen.runtime.limits.Budget`, whose ``another_run`` each re-run gets).
    """
    from fusegen.runtime.inputs import leaves

    shapes = module.entry.root.shape.leaves()
    ks, rs = [np.asarray(x) for x in leaves(out)], [np.asarray(x) for x in leaves(ref)]
    first = next((e for e in events if e.ratio > 1.0), None)
    if f64 is None:
        try:
            f64 = [np.asarray(x) for x in leaves(evaluate_promoted(module, args))]
        except OracleUnavailable as e:
            f64 = e
    oracle, os_ = ("f64", f64) if not isinstance(f64, OracleUnavailable) else (f"unavailable: {f64}", None)
    paths: list = [None] * len(shapes)
    if expected is not None:
        edge = edge_values(list(args))
        paths = [attrs.evolve(p, edge=edge) for p in output_paths(module)]
        if edge and any(p.order_dependent for p in paths):
            terms = _term_magnitudes(module, args)
            if terms is not None and len(terms) == len(paths):
                paths = [attrs.evolve(p, terms=t) if p.order_dependent else p for p, t in zip(paths, terms)]
    # an output computed by a dot at lower precision than its type (tf32) is judged at that precision
    tts = output_tolerance_types(module)
    tts += [s.element_type for s in shapes[len(tts):]]
    opts = [options.with_floor_of(s.element_type, tt) for s, tt in zip(shapes, tts)]
    outs = [_judge_output(i, s.element_type, k, r, os_[i] if os_ else None,
                          expected[i] if expected is not None else None, opts[i], first is None, p,
                          tolerance_type=tts[i])
            for i, (s, k, r, p) in enumerate(zip(shapes, ks, rs, paths))]
    if expected is not None and os_ is not None:
        _judge_less_accurate_expected(module, args, shapes, ks, rs, os_, expected, paths, outs, opts, tts,
                                      first is None)
    if first is None and os_ is not None and any(o.status == "mismatch" for o in outs):
        _judge_with_f32_dots(module, args, shapes, ks, rs, os_, expected, paths, outs, opts, tts)
    if ties and first is None and any(o.status == "mismatch" for o in outs):
        _judge_ties(module, args, shapes, ks, rs, os_, expected, paths, outs, opts, ties, budget, tts)
    if expected is not None and os_ is not None:  # last: a near-tie or another order is the better reason
        _judge_excess_precision_expected(module, args, shapes, ks, rs, os_, expected, paths, outs, opts, tts,
                                         first is None)
        if first is None:  # every fusion kept its budget: the kernels follow the reference's rule
            _judge_excess_precision_thresholds(module, args, shapes, ks, rs, os_, expected, paths, outs, opts,
                                               tts, budget)
    return ModuleVerdict(outs, oracle, first)


def _judge_less_accurate_expected(module: Module, args: list[Any], shapes: list, ks: list, rs: list, os_: list,
                                  expected: list, paths: list, outs: list[OutputVerdict],
                                  opts: list[VerifyOptions], tts: list[str], budgets_ok: bool) -> None:
    """Judge again each output that fails only ``--expected`` where the kernel is the nearer to f64.

    The bound on a correct evaluation's rounding (:func:`fusegen.verify.expected.rounding_bound`) needs the
    module evaluated in f64 on the inputs' magnitudes; it is evaluated once, here, only when an
    order-dependent floating output fails against the expected answer at an element where the kernel is at
    least as near the f64 oracle as that answer. ``paths`` gets the magnitudes (the later re-judges use them)."""
    def candidate(i: int) -> bool:
        v, p = outs[i], paths[i]
        if (v.status != "mismatch" or p is None or not p.order_dependent or p.terms is not None
                or v.expected_error is None or not v.expected_error > (v.expected_allowed or 0.0)
                or not is_float_type(shapes[i].element_type) or ks[i].shape != os_[i].shape):
            return False
        e = typed(expected[i], ks[i])
        return e.shape == ks[i].shape and bool((abs_error(ks[i], os_[i])[0] <= abs_error(e, os_[i])[0]).any())

    todo = [i for i in range(min(len(outs), len(os_), len(paths))) if candidate(i)]
    terms = _term_magnitudes(module, args) if todo else None
    if terms is None or len(terms) != len(paths):
        return
    for i in todo:
        paths[i] = attrs.evolve(paths[i], terms=terms[i])
        # still a mismatch elsewhere, the verdict now counts the elements the expected answer rounds worse
        outs[i] = _judge_output(i, shapes[i].element_type, ks[i], rs[i], os_[i], expected[i], opts[i], budgets_ok,
                                paths[i], tolerance_type=tts[i])


def _judge_excess_precision_expected(module: Module, args: list[Any], shapes: list, ks: list, rs: list,
                                     os_: list, expected: list, paths: list, outs: list[OutputVerdict],
                                     opts: list[VerifyOptions], tts: list[str], budgets_ok: bool) -> None:
    """Judge again each output that fails ``--expected`` where the kernel is the nearer to f64, with the bound
    of a bf16 rounding of its inputs (:attr:`fusegen.verify.expected.OutputPath.bf16_inputs`).

    XLA:GPU drops a convert pair such as f32 -> bf16 -> f32 under ``--xla_allow_excess_precision`` (on by
    default), so the HLO run here may no longer round an input where the program that gave the expected answer
    did. The module is evaluated in f64 on its f32/f64 inputs rounded to bf16, and on their magnitudes (the cap
    of that bound), only when such an output exists and the switch is on
    (:func:`fusegen.verify.expected.rounded_more`)."""
    from fusegen.runtime.inputs import leaves

    def candidate(i: int) -> bool:
        v, p = outs[i], paths[i]
        if (v.status != "mismatch" or p is None or p.edge or p.bf16_inputs is not None
                or not opts[i].xla_allow_excess_precision or v.expected_error is None
                or not v.expected_error > (v.expected_allowed or 0.0)
                or not is_float_type(shapes[i].element_type) or ks[i].shape != os_[i].shape):
            return False
        e = typed(expected[i], ks[i])
        return e.shape == ks[i].shape and bool((abs_error(ks[i], os_[i])[0] <= abs_error(e, os_[i])[0]).any())

    todo = [i for i in range(min(len(outs), len(os_), len(paths))) if candidate(i)]
    if not todo:
        return
    try:
        alt = [np.asarray(x) for x in leaves(evaluate_promoted(module, [_bf16_rounded(a) for a in args]))]
    except OracleUnavailable:
        return
    terms = _term_magnitudes(module, args) if any(paths[i].terms is None for i in todo) else None
    for i in todo:
        t = paths[i].terms if paths[i].terms is not None else terms[i] if terms and i < len(terms) else None
        if i >= len(alt) or alt[i].shape != os_[i].shape or t is None:
            continue
        paths[i] = attrs.evolve(paths[i], bf16_inputs=abs_error(alt[i], os_[i])[0], terms=t)
        outs[i] = _judge_output(i, shapes[i].element_type, ks[i], rs[i], os_[i], expected[i], opts[i], budgets_ok,
                                paths[i], tolerance_type=tts[i])


def _judge_excess_precision_thresholds(module: Module, args: list[Any], shapes: list, ks: list, rs: list,
                                       os_: list, expected: list, paths: list, outs: list[OutputVerdict],
                                       opts: list[VerifyOptions], tts: list[str], budget: Any) -> None:
    """Judge again each output that still fails ``--expected``, against the reference re-run with the computed
    operands of its compares and remainders rounded to bf16 (:func:`fusegen.verify.ties.rerun_rounded`).

    Where XLA:GPU dropped a convert pair before a threshold (``--xla_allow_excess_precision``), the expected
    answer's program decided it on bf16 values: ``fmod(3.623, 3.625)`` is 3.623 here and 0 there, and a
    rounding of 0.05% moves the result by the divisor. Elements of the expected answer that the re-run gives
    within the same allowance, where the kernel does not, are ``drift`` naming that re-run; the rest is
    judged as before. Every element of the re-run is the reference's own rule on rounded operands, so a wrong
    kernel (which differs from the reference) is not excused."""
    from fusegen.verify.expected import failing
    from fusegen.verify.ties import rerun_rounded

    todo = [i for i, v in enumerate(outs) if v.status == "mismatch" and i < len(paths) and paths[i] is not None
            and not paths[i].edge and opts[i].xla_allow_excess_precision and i < len(os_)
            and is_float_type(shapes[i].element_type) and ks[i].shape == rs[i].shape
            and compare(ks[i], rs[i], tts[i]).ok]
    if not todo:
        return
    try:
        alt = rerun_rounded(module, args, _bf16_rounded, budget.another_run() if budget is not None else None)
    except Exception:  # noqa: BLE001 - a re-run that cannot run explains nothing
        return
    if alt is None:
        return
    why = ("the reference re-run with the operands of its compares and remainders rounded to bf16 (where a "
           "convert pair XLA:GPU drops under --xla_allow_excess_precision may stay in the expected answer's "
           "program) gives the expected value there")
    for i in todo:
        if i >= len(alt) or alt[i].shape != ks[i].shape:
            continue
        t, k, o, e = shapes[i].element_type, ks[i], os_[i], typed(expected[i], ks[i])
        path = paths[i]
        fails = failing(t, k, rs[i], o, e, path, opts[i])
        explained = fails & ~failing(t, alt[i], rs[i], o, e, path, opts[i])
        if not explained.any():
            continue
        # still a mismatch elsewhere, the verdict then names an element the re-run does not explain
        outs[i] = _judge_output(i, t, k, rs[i], o, expected[i], opts[i], True, path, (explained, why),
                                tolerance_type=tts[i])


def _bf16_rounded(v: Any) -> Any:
    """``v`` (an array or a tuple of them) with its f32/f64 (and c64/c128) arrays rounded through bf16."""
    if isinstance(v, tuple):
        return tuple(_bf16_rounded(x) for x in v)
    a = np.asarray(v)
    if a.dtype in (np.float32, np.float64):
        return a.astype(ml_dtypes.bfloat16).astype(a.dtype)
    if a.dtype in (np.complex64, np.complex128):
        part = a.real.dtype
        return (a.real.astype(ml_dtypes.bfloat16).astype(part) + 1j * a.imag.astype(ml_dtypes.bfloat16).astype(part)
                ).astype(a.dtype)
    return a


def _judge_with_f32_dots(module: Module, args: list[Any], shapes: list, ks: list, rs: list, os_: list,
                         expected: list | None, paths: list, outs: list[OutputVerdict], opts: list[VerifyOptions],
                         tts: list[str]) -> None:
    """Judge each mismatching output of a module with tf32 dots again, its conditioning sampled twice.

    XLA:GPU runs an f32 dot at default precision at tf32 (so do the kernels and the reference), XLA:CPU at
    IEEE f32: both are correct evaluations of the program, each its own distance from the f64 answer. Where
    the program amplifies rounding (a variance ``E[x^2] - E[x]^2`` at a large offset), one evaluation may land
    near the answer by chance while another, as correct, does not; so the reference re-run with every tf32
    dot at IEEE f32 (``operand_precision={highest,highest}``) gives a second sample, and the kernels may be as
    far from the f64 oracle as ``rtol`` x the larger (:attr:`fusegen.verify.expected.OutputPath.conditioning`).
    Every fusion kept its error budget (the caller checks), so a planted bug is still a mismatch there."""
    from fusegen.evaluator.evaluator import evaluate_module
    from fusegen.runtime.inputs import leaves

    f32 = _with_f32_dots(module)
    if f32 is None:
        return
    try:
        alt = [np.asarray(x) for x in leaves(evaluate_module(f32, list(args)))]
    except Exception:  # noqa: BLE001 - a re-run that cannot run gives no second sample
        return
    for i, (s, v) in enumerate(zip(shapes, outs)):
        if v.status != "mismatch" or i >= len(alt) or alt[i].shape != ks[i].shape or not is_float_type(s.element_type):
            continue
        path = paths[i] or OutputPath(False, False, False, 0.0)
        path = attrs.evolve(path, conditioning=abs_error(alt[i], os_[i])[0])
        nv = _judge_output(i, s.element_type, ks[i], rs[i], os_[i], expected[i] if expected is not None else None,
                           opts[i], True, path, tolerance_type=tts[i])
        if nv.status != "mismatch":
            why = "as far from f64 as the reference with its tf32 dots at IEEE f32 (XLA:CPU's arithmetic) allows"
            nv.reason = "; ".join(x for x in (nv.reason, why) if x)
            outs[i] = nv


def _with_f32_dots(module: Module) -> Module | None:
    """A copy of ``module`` whose tf32 dots multiply in IEEE f32
    (:func:`fusegen.evaluator.dot_conv.ieee_f32_dots`), or ``None`` when it has none."""
    import copy

    from fusegen.evaluator.dot_conv import ieee_f32_dots

    clone = copy.deepcopy(module)
    return clone if ieee_f32_dots(clone) else None


def _judge_ties(module: Module, args: list[Any], shapes: list, ks: list, rs: list, os_: list | None,
                expected: list | None, paths: list, outs: list[OutputVerdict], opts: list[VerifyOptions],
                ties: list, budget: Any, tts: list[str]) -> None:
    """Replace each mismatching verdict of ``outs`` that near-ties explain (:mod:`fusegen.verify.ties`).

    First the reference re-run with every tie in the kernel path's order: an output that differed from the
    reference is judged against it (drift when that passes, naming the ties the reference had taken the other
    way). Then, for an output that fails only ``--expected``, one re-run per tie flipped (the closest
    :data:`~fusegen.verify.ties.FLIPS_TRIED`, and as many compares', :mod:`fusegen.verify.compare_ties`):
    elements where a flipped re-run gives the expected value within the same allowance are drift, the tie named."""
    from fusegen.verify.expected import failing
    from fusegen.verify.compare_ties import flip_order
    from fusegen.verify.ties import FLIPS_TRIED, describe, rerun

    def run(flipped=None):
        try:
            return rerun(module, args, ties, flipped, budget.another_run() if budget is not None else None)
        except Exception:  # a re-run that fails (a limit, the evaluator) explains nothing
            return None

    flips: dict[Any, Any] = {}  # the re-runs, each once: None (the kernels' choices) or the tie flipped
    for i, (s, v) in enumerate(zip(shapes, outs)):
        if v.status != "mismatch" or i >= len(rs) or rs[i].shape != ks[i].shape:
            continue
        t, k, o = s.element_type, ks[i], os_[i] if os_ else None
        options, tt = opts[i], tts[i]
        e = typed(expected[i], k) if expected is not None else None
        r, noted = rs[i], []
        if not compare(k, r, tt).ok:
            if None not in flips:
                flips[None] = run()
            got = flips[None]
            if got is not None and got[1] and i < len(got[0]) and got[0][i].shape == k.shape:
                r, noted = got[0][i], got[1]
        alone = _judge_output(i, t, k, r, o, None, options, True, paths[i], tolerance_type=tt)
        if alone.status == "mismatch":
            continue  # the kernels differ from the reference that took their choices: not a tie
        tied, used = None, []
        path = paths[i] or OutputPath(False, False, False, 0.0)
        if e is not None and e.shape == k.shape and _judge_output(i, t, k, r, o, e, options, True, paths[i],
                                                                  tolerance_type=tt).status == "mismatch":
            fails = failing(t, k, r, o, e, path, options)
            explained = np.zeros(fails.shape, bool)
            for tie in flip_order(ties, FLIPS_TRIED):
                if tie not in flips:
                    flips[tie] = run(tie)
                alt = flips[tie]
                if alt is None or i >= len(alt[0]) or alt[0][i].shape != k.shape or tie not in alt[1]:
                    continue
                now = fails & ~explained & ~failing(t, alt[0][i], r, o, e, path, options)
                if now.any():
                    explained |= now
                    used.append(tie)
                if not (fails & ~explained).any():
                    break
            if not used:
                continue
            tied = (explained, f"the reference re-run with {describe(used)} flipped gives the expected value there")
        if not noted and tied is None:
            continue
        nv = _judge_output(i, t, k, r, o, e, options, True, paths[i], tied, tolerance_type=tt)
        if nv.status == "mismatch":
            continue
        if noted:
            why = (f"the reference took the other side of {len(noted)} near-tie(s) ({describe(noted)}); judged "
                   "against its re-run with the kernels' choice")
            nv.reason = "; ".join(x for x in (why, nv.reason) if x)
        nv.status, nv.ties = "drift", noted + used
        outs[i] = nv
