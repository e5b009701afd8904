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

One output's judgement is in :mod:`fusegen.verify.output_verdict`; the second look at an output that failed its
first (a less accurate expected answer, XLA's excess precision, f32 dots, near-ties) in
:mod:`fusegen.verify.rejudge`.
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from fusegen.hlo.ir import Computation, Instruction, Module
from fusegen.runtime.compare import compare
from fusegen.verify.budget import judge_fusion, output_tolerance_types
from fusegen.verify.expected import edge_values, output_paths
from fusegen.verify.output_verdict import OutputVerdict, _judge_output, _py, _term_magnitudes
from fusegen.verify.rejudge import (_judge_excess_precision_expected, _judge_excess_precision_thresholds,
                                    _judge_less_accurate_expected, _judge_ties, _judge_with_f32_dots)
from fusegen.config.verify_options import VerifyOptions
from fusegen.evaluator.promote import OracleUnavailable, evaluate_promoted, is_float_type


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
