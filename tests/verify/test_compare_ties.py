"""Issue 21, point 5: compare-driven choices (:mod:`fusegen.verify.compare_ties`).

``jnp.where(x > t, a, b)`` with ``x`` one ulp from ``t``: the kernels' chain, the reference and XLA:CPU may
take either branch. The verdict finds the compare's near-tie on the kernel path, re-runs the reference with
the kernels' outcome (and the other one for ``--expected``), and calls what that explains ``drift`` naming
the compare; operands far apart, a compare planted the wrong way round and a kernel that takes the other
branch on the reference's own operands stay a mismatch.
"""

from __future__ import annotations

import json
from pathlib import Path

import attrs
import numpy as np
import pytest
from click.testing import CliRunner

from fusegen.cli.main import cli
from fusegen.codegen import triton_runtime
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_module
from fusegen.verify.compare_ties import CompareTie, find_compare_ties
from fusegen.config.verify_options import VerifyOptions
from fusegen.verify.judged_run import run_module

#: ``where(x > 1, a, b)`` per row, ``x`` through a kernel fusion upstream (``%k``, the compare's operand on
#: the kernel path) and the compare inside the select's fusion (``%f``).
#: an identity kernel fusion: its output is an operand computed on the kernel path
SCALED = """%scaled (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  %one = f32[] constant(1)
  %b1 = f32[4]{0} broadcast(%one), dimensions={}
  ROOT %m = f32[4]{0} multiply(%p, %b1)
}
"""
GATE = "HloModule gate\n" + SCALED + """%gate (p0: f32[4], a: f32[4,3], b: f32[4,3]) -> f32[4,3] {
  %p0 = f32[4]{0} parameter(0)
  %a = f32[4,3]{1,0} parameter(1)
  %b = f32[4,3]{1,0} parameter(2)
  %t = f32[] constant(1)
  %tb = f32[4]{0} broadcast(%t), dimensions={}
  %gt = pred[4]{0} compare(%p0, %tb), direction=GT
  %g = pred[4,3]{1,0} broadcast(%gt), dimensions={0}
  ROOT %s = f32[4,3]{1,0} select(%g, %a, %b)
}
ENTRY %e (x: f32[4], a: f32[4,3], b: f32[4,3]) -> f32[4,3] {
  %x = f32[4]{0} parameter(0)
  %a = f32[4,3]{1,0} parameter(1)
  %b = f32[4,3]{1,0} parameter(2)
  %k = f32[4]{0} fusion(%x), kind=kLoop, calls=%scaled
  ROOT %f = f32[4,3]{1,0} fusion(%k, %a, %b), kind=kLoop, calls=%gate
}
"""

A = np.arange(12, dtype=np.float32).reshape(4, 3) + 1.0
B = -10.0 * A
ONE_ULP_UP = float(np.nextafter(np.float32(1.0), np.float32(2.0)))


def _x(first: float) -> np.ndarray:
    """Row 0 at ``first``; the other rows far from the threshold."""
    return np.array([first, 3.0, -2.0, 0.5], np.float32)


def _answer(x: np.ndarray) -> np.ndarray:
    return np.where((x > 1.0)[:, None], A, B)


def _run(m, x, **kw):
    return run_module(m, [x, A, B], compile_kernels=False, **kw)


def test_find_compare_ties_takes_operands_within_their_budget_and_never_far_apart():
    m = parse_module(GATE)
    f = next(i for i in m.entry.instructions if i.name == "f")
    gt = next(i for i in f.fused_computation.instructions if i.name == "gt")
    x = _x(ONE_ULP_UP)
    (t,) = find_compare_ties(f, gt, x, np.ones(4, np.float32), x > 1, VerifyOptions(), 2)
    assert (t.instruction, t.compare, t.direction, t.index, t.execution, t.outcome) == ("f", "gt", "GT", (0,), 2, True)
    assert t.lhs - t.rhs == pytest.approx(2.0 ** -23)
    assert t.budget == pytest.approx((1e-4 + 1e-5) * ONE_ULP_UP)  # f32's rtol and floor, times the pair's size
    assert find_compare_ties(f, gt, _x(1.5), np.ones(4, np.float32), _x(1.5) > 1, VerifyOptions(), 0) == []


def test_expected_that_took_the_other_branch_of_a_one_ulp_compare_is_drift_naming_it():
    m = parse_module(GATE)
    x = _x(ONE_ULP_UP)
    other = x.copy()
    other[0] = 1.0  # XLA:CPU's chain rounded x to the threshold: where() took b in row 0
    out, rep = _run(m, x, expected=[_answer(other)])
    assert all(f.status == "ok" for f in rep.fusions)
    (o,) = rep.verdict.outputs
    assert rep.status == "drift" and o.status == "drift", "\n".join(rep.verdict.lines())
    assert "compare %gt (GT) in %f at [0]: operands 1.00000012 and 1" in o.reason, o.reason
    (t,) = o.ties
    assert isinstance(t, CompareTie) and (t.instruction, t.compare, t.index, t.outcome) == ("f", "gt", (0,), True)
    j = o.to_json()["ties"][0]
    assert j["kind"] == "compare" and j["compare"] == "gt" and j["index"] == [0] and j["outcome"] is True
    assert j["operands"] == [pytest.approx(ONE_ULP_UP), 1.0] and j["budget"] == pytest.approx(t.budget)
    np.testing.assert_array_equal(np.asarray(out), _answer(x))  # the kernels took a, as the reference did
    _, rep = _run(m, x, expected=[_answer(x)])
    assert rep.status == "ok"


def test_expected_that_took_the_other_branch_far_from_the_threshold_is_a_mismatch():
    m = parse_module(GATE)
    x = _x(1.5)
    other = x.copy()
    other[0] = 0.5
    _, rep = _run(m, x, expected=[_answer(other)])
    (o,) = rep.verdict.outputs
    assert rep.status == "mismatch" and o.status == "mismatch" and not o.ties and "near-tie" not in o.reason


def test_a_large_operand_elsewhere_makes_no_element_a_near_tie():
    """The budget is each element's own: a 1e7 elsewhere must not absorb a branch taken 0.7 from the
    threshold."""
    m = parse_module(GATE)
    x = np.array([1e7, 3.0, 0.3, 1.5], np.float32)
    other = x.copy()
    other[2] = 1.5
    _, rep = _run(m, x, expected=[_answer(other)])
    (o,) = rep.verdict.outputs
    assert rep.status == "mismatch" and o.status == "mismatch" and not o.ties


def test_a_compare_of_entry_parameters_has_no_near_tie():
    """A top-level compare of an input with a constant is the same for every oracle: no flip to absorb."""
    m = parse_module(TOP.replace("%gt = pred[4]{0} compare(%y, %tb)", "%gt = pred[4]{0} compare(%x, %tb)"))
    x = _x(ONE_ULP_UP)
    other = x.copy()
    other[0] = 1.0
    _, rep = run_module(m, [x, A[:, 0], B[:, 0]], compile_kernels=False,
                        expected=[np.where(other > 1.0, A[:, 0], B[:, 0])])
    (o,) = rep.verdict.outputs
    assert o.status == "mismatch" and not o.ties


def test_a_compare_planted_the_wrong_way_round_is_a_mismatch():
    """Kernels, reference and f64 oracle follow ``x < 1``; the right program's answer differs in rows far
    from the threshold, which no near-tie explains (row 0's is one)."""
    m = parse_module(GATE.replace("direction=GT", "direction=LT"))
    x = _x(ONE_ULP_UP)
    _, rep = _run(m, x, expected=[_answer(x)])
    (o,) = rep.verdict.outputs
    assert rep.status == "mismatch" and o.status == "mismatch" and not o.ties, o.reason
    assert o.index[0] in (1, 2, 3)


def _kernel(monkeypatch, fusion: str, change) -> None:
    real = triton_runtime.run_fusion

    def run(runner, ops, inst, **kw):
        flat = real(runner, ops, inst, **kw)
        if inst.name == fusion:
            flat = [change(np.array(flat[0]))] + list(flat[1:])
        return flat

    monkeypatch.setattr(triton_runtime, "run_fusion", run)


def test_kernel_that_takes_the_other_branch_on_the_references_operands_is_a_mismatch(monkeypatch):
    """The select's kernel takes b in row 0 on the same operands as the reference (a compare bug at the tie):
    out of budget at its fusion, never a tie, even though that is what XLA:CPU's answer has."""
    m = parse_module(GATE)
    x = _x(ONE_ULP_UP)
    other = x.copy()
    other[0] = 1.0

    def wrong(flat):
        flat.reshape(4, 3)[0] = B[0]
        return flat

    _kernel(monkeypatch, "f", wrong)
    _, rep = _run(m, x, expected=[_answer(other)])
    assert rep.status == "mismatch" and rep.verdict.first_out_of_budget.fusion == "f"
    assert all(not o.ties for o in rep.verdict.outputs)


def test_kernel_chain_that_took_the_other_branch_is_judged_against_the_reference_with_its_outcome(monkeypatch):
    """``%k``'s kernel rounds x[0] one ulp down, onto the threshold (within its budget): the kernels' chain takes
    b there, the reference a; judged against the reference re-run with the kernels' outcome, drift."""
    m = parse_module(GATE)
    x = _x(ONE_ULP_UP)

    def down(flat):
        flat[0] = np.float32(1.0)
        return flat

    _kernel(monkeypatch, "k", down)
    out, rep = _run(m, x)
    assert all(f.status == "ok" for f in rep.fusions), [(f.name, f.error_budget_ratio) for f in rep.fusions]
    (o,) = rep.verdict.outputs
    assert rep.status == "drift" and "the reference took the other side of 1 near-tie(s)" in o.reason, o.reason
    assert [(t.compare, t.index, t.outcome, t.lhs) for t in o.ties] == [("gt", (0,), False, 1.0)]
    assert o.max_abs_error == 0
    np.testing.assert_array_equal(np.asarray(out)[0], B[0])


def test_kernel_chain_moved_far_past_the_threshold_is_a_mismatch(monkeypatch):
    """``%k``'s kernel moves x[0] to 0.9 (past its budget): out of budget at ``%k``, no tie absorbs it."""
    m = parse_module(GATE)

    def far(flat):
        flat[0] = np.float32(0.9)
        return flat

    _kernel(monkeypatch, "k", far)
    _, rep = _run(m, _x(ONE_ULP_UP))
    assert rep.status == "mismatch" and rep.verdict.first_out_of_budget.fusion == "k"
    assert all(not o.ties for o in rep.verdict.outputs)


#: ``jnp.where(x * 3.0 > 1.5, a, b)`` as XLA compiles it for an H200 (``fusegen.capture``, the jax CUDA
#: plugin's deviceless compile): one loop fusion ``%loop_select_fusion`` whose ``%gt.1.3`` compares the
#: product with the threshold.
CAPTURED = Path(__file__).parents[1] / "data" / "compare_ties" / "gate.h200_opt.hlo"


def _gate_cli(tmp_path, x: np.ndarray, expected: np.ndarray) -> dict:
    a = np.arange(12, dtype=np.float32).reshape(4, 3) + 1.0
    np.savez(tmp_path / "in.npz", p0=x, p1=a, p2=-10.0 * a)
    np.savez(tmp_path / "exp.npz", o0=expected)
    res = CliRunner().invoke(cli, ["run", str(CAPTURED), "--no-compile", "--json", "--inputs",
                                   str(tmp_path / "in.npz"), "--expected", str(tmp_path / "exp.npz")])
    assert res.exit_code in (0, 1), res.output
    return json.loads(res.output)


def _xla_cpu(x: np.ndarray) -> np.ndarray:
    """XLA:CPU's answer of the captured program (jaxlib; this venv has no GPU backend)."""
    jax = pytest.importorskip("jax")
    a = np.arange(12, dtype=np.float32).reshape(4, 3) + 1.0
    return np.asarray(jax.jit(lambda x, a, b: jax.numpy.where(x * 3.0 > 1.5, a, b))(x, a, -10.0 * a))


def test_captured_where_one_ulp_from_its_threshold_is_drift_when_expected_took_the_other_branch(tmp_path):
    """x[0, 0] one ulp above 0.5: x * 3 rounds two ulps above 1.5 and every chain here takes ``a``; an oracle
    whose product rounded onto 1.5 (a fused multiply, another order) took ``b``: drift naming the compare,
    XLA:CPU's own answer ok, and the other branch where the product is far from 1.5 a mismatch."""
    x = np.tile(np.array([[0.5], [0.9], [-0.3], [0.1]], np.float32), (1, 3))
    x[0, 0] = np.nextafter(np.float32(0.5), np.float32(1.0))
    cpu = _xla_cpu(x)
    assert _gate_cli(tmp_path, x, cpu)["status"] == "ok"
    other = cpu.copy()
    other[0, 0] = -10.0 * 1.0  # b there
    doc = _gate_cli(tmp_path, x, other)
    (o0,) = doc["outputs"]
    assert doc["status"] == "drift" and o0["status"] == "drift", o0
    assert "compare %gt.1.3 (GT) in %loop_select_fusion at [0, 0]: operands 1.50000024 and 1.5" in o0["reason"]
    (t,) = o0["ties"]
    assert (t["kind"], t["instruction"], t["compare"], t["direction"], t["index"], t["outcome"]) == \
        ("compare", "loop_select_fusion", "gt.1.3", "GT", [0, 0], True)
    assert all(f["status"] == "ok" for f in doc["fusions"])
    far = cpu.copy()
    far[1, 0] = -10.0 * 4.0  # b where x * 3 = 2.7: no tie
    doc = _gate_cli(tmp_path, x, far)
    assert doc["status"] == "mismatch" and "ties" not in doc["outputs"][0]


def test_a_full_run_gives_up_exact_ties_for_one_with_a_gap():
    """Per run at most COMPARES_PER_RUN elements: once full, an exact tie (a causal mask's diagonal) makes
    room for a later element with a gap; a list of gaps only takes no more."""
    from fusegen.verify import compare_ties as ct
    from fusegen.verify.recorder import RunRecorder

    m = parse_module(GATE)
    f = next(i for i in m.entry.instructions if i.name == "f")
    exact = CompareTie("mask", 0, "ge", "GE", (0,), 2.0, 2.0, True, 1e-4)
    ex = RunRecorder(m, VerifyOptions())
    ex.compare_ties.extend([exact] * ct.COMPARES_PER_RUN)
    out = ct.reference_recording(ex, f, [_x(ONE_ULP_UP), A, B], evaluate_instruction)
    np.testing.assert_array_equal(out, _answer(_x(ONE_ULP_UP)))
    assert len(ex.compare_ties) == ct.COMPARES_PER_RUN
    assert [(t.compare, t.index) for t in ex.compare_ties if t.lhs != t.rhs] == [("gt", (0,))]
    gaps = RunRecorder(m, VerifyOptions())
    gaps.compare_ties.extend([attrs.evolve(exact, rhs=2.0001)] * ct.COMPARES_PER_RUN)
    ct.reference_recording(gaps, f, [_x(ONE_ULP_UP), A, B], evaluate_instruction)
    assert all(t.compare == "ge" for t in gaps.compare_ties) and gaps.compare_counts == {"f": 1}


#: The gate's compare and select at the top level (no fusion): recorded on the compare's own operands.
TOP = """HloModule top_gate
ENTRY %e (x: f32[4], a: f32[4], b: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %a = f32[4]{0} parameter(1)
  %b = f32[4]{0} parameter(2)
  %t = f32[] constant(1)
  %tb = f32[4]{0} broadcast(%t), dimensions={}
  %y = f32[4]{0} multiply(%x, %tb)
  %gt = pred[4]{0} compare(%y, %tb), direction=GT
  ROOT %s = f32[4]{0} select(%gt, %a, %b)
}
"""


@pytest.mark.parametrize("first, drift", [(ONE_ULP_UP, True), (1.5, False)])
def test_top_level_compare_flip_is_drift_at_one_ulp_and_a_mismatch_far_apart(first, drift):
    m = parse_module(TOP)
    x = _x(first)
    other = x.copy()
    other[0] = 1.0 if drift else 0.5
    _, rep = run_module(m, [x, A[:, 0], B[:, 0]], compile_kernels=False,
                        expected=[np.where(other > 1.0, A[:, 0], B[:, 0])])
    (o,) = rep.verdict.outputs
    if drift:
        assert o.status == "drift" and "compare %gt (GT) at [0]: operands 1.00000012 and 1" in o.reason, o.reason
        assert [(t.instruction, t.compare, t.index) for t in o.ties] == [("gt", "gt", (0,))]
    else:
        assert o.status == "mismatch" and not o.ties


#: ``fmod(x, 1.5)`` per element, ``x`` through a kernel fusion upstream: the result drops by 1.5 where ``x``
#: reaches a multiple of 1.5 (a threshold as a compare's).
REM = "HloModule rem\n" + SCALED + """%wrap (p0: f32[4]) -> f32[4] {
  %p0 = f32[4]{0} parameter(0)
  %d = f32[] constant(1.5)
  %db = f32[4]{0} broadcast(%d), dimensions={}
  ROOT %r = f32[4]{0} remainder(%p0, %db)
}
ENTRY %e (x: f32[4]) -> f32[4] {
  %x = f32[4]{0} parameter(0)
  %k = f32[4]{0} fusion(%x), kind=kLoop, calls=%scaled
  ROOT %f = f32[4]{0} fusion(%k), kind=kLoop, calls=%wrap
}
"""


@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_a_remainder_one_ulp_below_a_multiple_is_drift_when_expected_wrapped_and_names_it(sign):
    """x = 3 - 1 ulp: fmod gives 1.5 - 1 ulp; XLA:CPU's chain reaching 3.0 gives 0 (numpy's fmod, the
    independent answer). A wrap far from any multiple stays a mismatch."""
    m = parse_module(REM)
    below = float(np.nextafter(np.float32(3.0), np.float32(0.0)))
    x = (sign * np.array([below, 1.0, 2.0, 0.25])).astype(np.float32)
    other = x.copy()
    other[0] = np.float32(sign * 3.0)
    _, rep = run_module(m, [x], compile_kernels=False, expected=[np.fmod(other, np.float32(1.5))])
    (o,) = rep.verdict.outputs
    assert rep.status == "drift" and o.status == "drift", "\n".join(rep.verdict.lines())
    (t,) = o.ties
    assert (t.compare, t.direction, t.index, t.outcome) == ("r", "REM", (0,), False)
    assert t.rhs == sign * 3.0 and abs(t.lhs - t.rhs) == pytest.approx(3.0 - below)
    assert "remainder %r in %f at [0]" in o.reason and "did not wrap" in o.reason
    far = np.fmod(x, np.float32(1.5))
    far[1] = 0.0  # element 1 (x = 1) is 0.5 from the nearest multiple: no near-tie explains a wrap there
    _, rep = run_module(m, [x], compile_kernels=False, expected=[far])
    assert rep.status == "mismatch" and rep.verdict.outputs[0].index == (1,)


def test_a_remainder_near_zero_is_continuous_and_no_tie():
    m = parse_module(REM)
    f = next(i for i in m.entry.instructions if i.name == "f")
    r = next(i for i in f.fused_computation.instructions if i.name == "r")
    x = np.array([1e-7, -1e-7, 0.75, 1.5], np.float32)
    ties = find_compare_ties(f, r, x, np.full(4, 1.5, np.float32), np.fmod(x, np.float32(1.5)), VerifyOptions(), 0)
    assert [t.index for t in ties] == [(3,)] and ties[0].outcome is True  # only 1.5 itself, which wrapped
