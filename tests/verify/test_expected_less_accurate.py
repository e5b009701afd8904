"""Issue 42 item 5: ``--expected`` does not blame a kernel that the f64 oracle shows nearer the truth.

A long cancelling f32 sum (rows of 65536 terms of alternating sign): XLA:CPU folds each row in its own order
and lands up to 4e-5 from the exact sum, beyond the per-element allowance, while the kernel's tree is within
3e-6. XLA:CPU's answer is ``data/expected_less_accurate/cancelling_sum.expected.npz``, made by jaxlib
(``python tests/verify/test_expected_less_accurate.py`` remakes it; the inputs are seeded here). The exact sums are
``math.fsum``'s, independent of fusegen's f64 oracle. A wrong kernel, and an expected answer off by more than
any summation order rounds, stay a mismatch; integer outputs stay exact.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import attrs
import numpy as np
from click.testing import CliRunner

from fusegen.cli.main import cli
from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_module
from fusegen.runtime.executor import Executor
from fusegen.verify.expected import OutputPath, failing, judge_expected, output_paths, rounding_bound
from fusegen.config.verify_options import VerifyOptions
from fusegen.evaluator.promote import evaluate_promoted
from fusegen.verify.recorder import RunRecorder
from fusegen.verify.verdict import judge_module

EXPECTED = Path(__file__).parents[1] / "data" / "expected_less_accurate" / "cancelling_sum.expected.npz"
ROWS, N, SCALE = 4, 65536, 0.03
#: the per-element allowance alone (XLA:CPU's sums here are also within one bf16 rounding of an intermediate,
#: test_expected_excess_precision's rule, which is off here so that the premise is the allowance's)
_ALLOWANCE_ONLY = VerifyOptions(xla_allow_excess_precision=False)

_ADD = """add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""
FUSED = f"""HloModule cancelling_sum
{_ADD}fused {{
  p = f32[{ROWS},{N}]{{1,0}} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{ROWS}]{{0}} reduce(p, z), dimensions={{1}}, to_apply=add
}}
ENTRY e {{
  p0 = f32[{ROWS},{N}]{{1,0}} parameter(0)
  ROOT f = f32[{ROWS}]{{0}} fusion(p0), kind=kInput, calls=fused
}}
"""
#: the same program unfused, for XLA:CPU (which does not run kInput fusions)
UNFUSED = f"""HloModule cancelling_sum
{_ADD}ENTRY e {{
  p0 = f32[{ROWS},{N}]{{1,0}} parameter(0)
  z = f32[] constant(0)
  ROOT r = f32[{ROWS}]{{0}} reduce(p0, z), dimensions={{1}}, to_apply=add
}}
"""


def _inputs() -> np.ndarray:
    x = np.random.default_rng(0).uniform(0.5, 1.5, (ROWS, N)).astype(np.float32)
    x[:, 1::2] *= -1  # alternating signs: a vectorised fold keeps same-sign terms in each lane
    return (x * np.float32(SCALE)).astype(np.float32)


def _exact(x: np.ndarray) -> np.ndarray:
    return np.array([math.fsum(row.astype(np.float64)) for row in x])


def _expected() -> np.ndarray:
    return np.load(EXPECTED)["o0"]


def _beyond_allowance(m, r: np.ndarray, exact: np.ndarray, e: np.ndarray) -> np.ndarray:
    """Rows where ``e`` is outside the per-element allowance (the rule without the rounding bound)."""
    return failing("f32", r, r, exact, e, output_paths(m)[0], _ALLOWANCE_ONLY)


def test_a_cancelling_sum_xla_cpu_rounds_more_than_the_kernel_is_drift_and_says_so(tmp_path):
    x, e = _inputs(), _expected()
    exact = _exact(x)
    # the premise: XLA:CPU's sum is farther from the exact one than the old allowance let the kernel be
    m = parse_module(FUSED)
    r = np.asarray(evaluate_module(m, [x]))
    old = judge_expected("f32", r, r, exact, e, output_paths(m)[0], _ALLOWANCE_ONLY)
    assert old.status == "mismatch" and "per-element allowance" in old.reason
    beyond = _beyond_allowance(m, r, exact, e)
    np.savez(tmp_path / "in.npz", p0=x)
    hlo = tmp_path / "sum.hlo"
    hlo.write_text(FUSED)
    res = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--json", "--inputs", str(tmp_path / "in.npz"),
                                   "--expected", str(EXPECTED), "--save-outputs", str(tmp_path / "out.npz")])
    assert res.exit_code == 0, res.output
    o0 = json.loads(res.output[res.output.index("{"):])["outputs"][0]
    k = np.load(tmp_path / "out.npz")["o0"]
    dk, de = np.abs(k - exact), np.abs(e.astype(np.float64) - exact)
    assert dk.max() < 5e-6 and de.max() > 3e-5  # the kernel nearer the exact sum, at every row
    assert (dk <= de).all()
    assert o0["status"] == "drift" and o0["expected_less_accurate"] == beyond.sum() >= 1
    np.testing.assert_allclose(o0["expected_vs_f64"], de.max(), rtol=1e-6)
    np.testing.assert_allclose(o0["kernel_vs_f64"], dk.max(), atol=1e-10)
    assert "the expected answer is the less accurate one" in o0["reason"]
    text = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--inputs", str(tmp_path / "in.npz"),
                                    "--expected", str(EXPECTED)])
    assert text.exit_code == 0 and "less accurate" in text.output and "expected vs f64" in text.output


def test_the_rounding_bound_of_a_sum_is_rtol_unit_roundoff_growth_times_its_terms():
    x = _inputs()
    m = parse_module(FUSED)
    path = output_paths(m)[0]
    assert path.order_dependent and path.reduced == N
    terms = np.asarray(evaluate_promoted(m, [np.abs(x)]))
    bound = rounding_bound("f32", attrs.evolve(path, terms=terms), VerifyOptions(rtol=4))
    sums = np.array([math.fsum(np.abs(row).astype(np.float64)) for row in x])
    np.testing.assert_allclose(bound, 4 * 2.0 ** -24 * math.sqrt(N / 256) * sums, rtol=1e-12)


def test_an_expected_answer_off_by_more_than_any_summation_order_rounds_is_a_mismatch():
    """+0.05 on one row: the kernel is the nearer there, but no correct order rounds this sum that far
    (bound 4 * 2^-24 * 16 * sum|x| = 0.0075)."""
    x = _inputs()
    m = parse_module(FUSED)
    out = Executor(m, compile_kernels=False, observer=RunRecorder(m))
    k = out.run([x])
    e = _expected().copy()
    beyond = _beyond_allowance(m, np.asarray(evaluate_module(m, [x])), _exact(x), e)
    e[2] += np.float32(0.05)
    v = judge_module(m, [x], k, evaluate_module(m, [x]), out.observer.events, out.verify, expected=[e])
    o = v.outputs[0]
    assert v.status == "mismatch" and o.index == (2,) and "kernel vs expected" in o.reason
    # the other rows XLA:CPU rounds beyond the allowance are still told apart
    assert beyond[np.arange(ROWS) != 2].any() and o.expected_less_accurate == beyond[np.arange(ROWS) != 2].sum()


def test_a_planted_wrong_accumulator_still_fails_with_the_expected_answer():
    from fusegen.verify.mutate import plant

    x = _inputs()
    m = parse_module(FUSED)
    target = m.entry.root

    class Planted(Executor):
        def plan_fusion(self, inst):
            emitted, rep = super().plan_fusion(inst)
            if inst is target and emitted is not None and emitted.kernels:
                bad = plant(emitted, "wrong_accumulator", 0)  # the row's partial sums rounded to bf16
                assert bad is not None
                self._emitted[id(inst)] = (bad, rep)
                return bad, rep
            return emitted, rep

    ex = Planted(m, compile_kernels=False, observer=RunRecorder(m))
    k = np.asarray(ex.run([x]))
    exact, e = _exact(x), _expected()
    assert (np.abs(k - exact) > np.abs(e - exact)).any()  # the planted kernel is the farther one
    v = judge_module(m, [x], k, evaluate_module(m, [x]), ex.observer.events, ex.verify, expected=[e])
    o = v.outputs[0]
    assert v.status == "mismatch" and o.status == "mismatch"
    assert o.expected_error > o.expected_allowed


def test_integer_outputs_stay_exact_whatever_the_f64_oracle_says():
    k = np.array([3, 4, 5], np.int32)
    e = k + np.array([0, 1, 0], np.int32)
    path = OutputPath(False, True, False, 0.0, reduced=1024)
    j = judge_expected("s32", k, k, k.astype(np.float64), e, path, VerifyOptions())
    assert j.status == "mismatch" and j.index == (1,) and j.less_accurate == 0


if __name__ == "__main__":  # remake XLA:CPU's answer (jaxlib)
    import sys

    sys.path.insert(0, str(Path(__file__).parents[1]))  # tests/: xla_oracle
    from xla_oracle import run_xla

    EXPECTED.parent.mkdir(parents=True, exist_ok=True)
    np.savez(EXPECTED, o0=run_xla(UNFUSED, [_inputs()])[0])
