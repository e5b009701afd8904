"""The second look at a module output that failed its first judgement (:mod:`fusegen.verify.output_verdict`):
the passes :func:`fusegen.verify.verdict.judge_module` runs after it, each judging a failing output again and
replacing its verdict where a correct evaluation of the program explains the difference.

Each mirrors a behaviour of XLA, or of a correct evaluation, that the first judgement does not see:

- :func:`_judge_less_accurate_expected`: an expected answer (``--expected``) less accurate than the kernel: another
  summation order rounds it farther from f64, within the bound on a correct evaluation's rounding;
- :func:`_judge_excess_precision_expected` and :func:`_judge_excess_precision_thresholds`: XLA's excess precision
  (XLA:GPU drops a convert pair such as f32 -> bf16 -> f32 under ``--xla_allow_excess_precision``), so the program
  that gave the expected answer may round an input, or a compare's or remainder's operands, to bf16
  (:func:`_bf16_rounded`) where the HLO run here does not;
- :func:`_judge_with_f32_dots`: f32 dots at default precision, tf32 on XLA:GPU and IEEE f32 on XLA:CPU: the
  reference re-run with IEEE f32 dots (:func:`_with_f32_dots`) samples the conditioning a second time;
- :func:`_judge_ties`: near-ties (:mod:`fusegen.verify.ties`, :mod:`fusegen.verify.compare_ties`) that a sort or
  compare may break either way: the reference re-run with the kernels' choices, or with a tie flipped.

A planted bug differs from the reference's own rule, so none of them excuses it.
"""

from __future__ import annotations

from typing import Any

import attrs
import ml_dtypes
import numpy as np

from fusegen.hlo.ir import Module
from fusegen.runtime.compare import abs_error, compare
from fusegen.verify.expected import OutputPath, typed
from fusegen.verify.output_verdict import OutputVerdict, _judge_output, _map_leaves, _term_magnitudes
from fusegen.config.verify_options import VerifyOptions
from fusegen.evaluator.promote import OracleUnavailable, evaluate_promoted, is_float_type


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
    """Judge again each output that still fails ``--expected``, against the reference re-run with values rounded
    to bf16 where XLA:GPU may have dropped such a rounding (:func:`fusegen.verify.ties.rerun_rounded`): first
    the computed operands of its compares and remainders, then, for what still fails, the operand of every
    convert between f16, f32 and f64.

    Where XLA:GPU dropped a convert pair before a threshold (``--xla_allow_excess_precision``), the expected
    answer's program decided it on bf16 values: ``fmod(3.623, 3.625)`` is 3.623 here and 0 there, and a
    rounding of 0.05% moves the result by the divisor. Where it shortened a chain (f16 -> bf16 -> f32 to
    f16 -> f32), the convert left is where the expected answer's program rounded, and a sum of products that
    cancels carries that rounding far past its own size. Elements of the expected answer that a re-run gives
    within the same allowance, where the kernel does not, are ``drift`` naming that re-run; the rest is
    judged as before. Every element of a re-run is the reference's own rule on rounded operands, so a wrong
    kernel (which differs from the reference) is not excused."""
    from fusegen.verify.expected import failing
    from fusegen.verify.ties import rerun_rounded

    earlier: dict[int, tuple] = {}  # output -> (elements, reason, what) an earlier re-run explained
    for at, rounding, where, what in _reruns():
        todo = [i for i, v in enumerate(outs) if v.status == "mismatch" and i < len(paths) and paths[i] is not None
                and not paths[i].edge and opts[i].xla_allow_excess_precision and i < len(os_)
                and is_float_type(shapes[i].element_type) and ks[i].shape == rs[i].shape
                and compare(ks[i], rs[i], tts[i]).ok]
        if not todo:
            return
        try:
            alt = rerun_rounded(module, args, rounding, budget.another_run() if budget is not None
                                else None, at=at)
        except Exception:  # noqa: BLE001 - a re-run that cannot run explains nothing
            continue
        if alt is None:
            continue
        why = (f"the reference re-run with {where} rounded to bf16 (where a convert chain XLA:GPU drops or "
               "shortens under --xla_allow_excess_precision may stay in the expected answer's program) gives the "
               "expected value there")
        for i in todo:
            if i >= len(alt) or alt[i].shape != ks[i].shape:
                continue
            t, k, o, e = shapes[i].element_type, ks[i], os_[i], typed(expected[i], ks[i])
            path = paths[i]
            fails = failing(t, k, rs[i], o, e, path, opts[i])
            explained = fails & ~failing(t, alt[i], rs[i], o, e, path, opts[i])
            if not explained.any():
                continue
            tied = (explained, why, what)
            if i in earlier:  # the elements each re-run explains, both named
                prev = earlier[i]
                tied = (explained | prev[0], f"{prev[1]}; for others, {why}", f"{prev[2]} or {what}")
            earlier[i] = tied
            # still a mismatch elsewhere, the verdict then names an element no re-run explains
            outs[i] = _judge_output(i, t, k, rs[i], o, expected[i], opts[i], True, path, tied,
                                    tolerance_type=tts[i])


def _bf16_rounded(v: Any) -> Any:
    """``v`` (an array or a tuple of them) with its f32/f64 (and c64/c128) arrays rounded through bf16."""
    return _map_leaves(_bf16_round, v)


def _bf16_rounded_all(v: Any) -> Any:
    """``v`` with its f16 arrays rounded through bf16 as well as :func:`_bf16_rounded`'s f32/f64 ones."""
    return _map_leaves(lambda a: a.astype(ml_dtypes.bfloat16).astype(a.dtype) if a.dtype == np.float16
                       else _bf16_round(a), v)


def _bf16_round(a: np.ndarray) -> np.ndarray:
    """One array of :func:`_bf16_rounded`."""
    if a.dtype in (np.float32, np.float64):
        return a.astype(ml_dtypes.bfloat16).astype(a.dtype)
    if a.dtype in (np.complex64, np.complex128):
        part = a.real.dtype
        return (a.real.astype(ml_dtypes.bfloat16).astype(part) + 1j * a.imag.astype(ml_dtypes.bfloat16).astype(part)
                ).astype(a.dtype)
    return a


def _reruns() -> tuple:
    """The re-runs :func:`_judge_excess_precision_thresholds` tries, in order: (where, how the rounding is
    applied, what the reason says the re-run rounded, what the elements it explains do)."""
    return (("thresholds", _bf16_rounded, "the operands of its compares and remainders",
             "take the other side of a near-tie"),
            ("converts", _bf16_rounded_all, "the operand of each convert between f16, f32 and f64",
             "carry a rounding the kernel's program leaves out"))


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
