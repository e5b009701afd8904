"""``--expected`` can fail: planted errors in XLA:CPU's answers of the sweep corpus are caught for every dtype
class (int, pred, float, complex, f8) and under overflow, and arrays ``np.savez`` wrote from ml_dtypes
(``'<f1'``, ``|V1``, ``|V2``) are read by the module's output types."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from click.testing import CliRunner

from conftest import CORPUS

from fusegen.cli.main import cli
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import load_expected, load_inputs
from fusegen.verify.expected import output_paths
from fusegen.verify.judged_run import run_module

SWEEP = CORPUS / "sweep"
pytestmark = pytest.mark.skipif(not SWEEP.exists(), reason=f"sweep corpus not found at {SWEEP}")


def _program(name: str):
    hlo = SWEEP / f"{name}.h200_opt.hlo"
    m = parse_module(hlo.read_text(), str(hlo))
    types = [s.element_type for s in m.entry.root.shape.leaves()]
    return m, load_inputs(m, SWEEP / f"{name}.inputs.npz"), load_expected(SWEEP / f"{name}.expected.npz",
                                                                          len(types), types=types)


def _verdict(m, args, expected):
    _, rep = run_module(m, args, compile_kernels=False, expected=expected)
    return rep


def _plus_one(a: np.ndarray) -> np.ndarray:
    return (a.astype(np.float64) + 1).astype(a.dtype) if a.dtype.kind != "c" else a + np.complex64(1j).astype(a.dtype)


def _one_ulp(a: np.ndarray, at: int) -> np.ndarray:
    """``a`` with the element at flat index ``at`` moved one step in its bit pattern (a wrong last bit)."""
    b = a.copy()
    bits = b.reshape(-1).view(f"u{b.dtype.itemsize}")
    bits[at] ^= 1
    return b


# (program, output, how the plant is made, class)
PLANTS = [
    ("int_arith_s32", 0, "plus_one", "int"),
    ("int_arith_u64", 0, "plus_one", "int"),
    ("int_arith_s4", 0, "one_ulp", "int (s4)"),
    ("reduce_and_bool_ax0", 0, "flip", "pred"),
    ("exp_f32", 0, "plus_one", "float, overflowing at f32"),
    ("neg_f32", 0, "one_ulp", "float, exact operation"),
    ("add_bf16", 0, "plus_one", "bf16"),
    ("add_c64", 0, "plus_one", "complex"),
    ("convert_from_u8", 11, "one_ulp", "f8e5m2 (saved as '<f1')"),
    ("convert_from_u8", 10, "one_ulp", "f8e4m3fn (saved as |V1)"),
    ("reduce_sum_f32_ax2", 0, "plus_one", "float through a reduction over edge values"),
]


@pytest.mark.parametrize("name,out,how,what", PLANTS, ids=[f"{p[0]}-o{p[1]}-{p[2]}" for p in PLANTS])
def test_a_planted_error_in_the_expected_answer_is_a_mismatch(name, out, how, what):
    m, args, expected = _program(name)
    rep = _verdict(m, args, expected)
    assert rep.status in ("ok", "drift"), (what, rep.verdict.lines())
    e = np.asarray(expected[out])
    finite = np.isfinite(e.astype(np.complex128 if e.dtype.kind == "c" else np.float64)) if e.dtype.kind not in "biu" \
        and e.dtype != np.bool_ and not str(e.dtype).startswith(("int", "uint")) else np.ones(e.shape, bool)
    candidates = np.flatnonzero(finite.reshape(-1))
    at = int(candidates[min(3, candidates.size - 1)])
    if how == "plus_one":
        bad = _plus_one(e)
    elif how == "flip":
        bad = e.copy()
        bad.reshape(-1)[at] = not bad.reshape(-1)[at]
    else:
        bad = _one_ulp(e, at)
    planted = list(expected)
    planted[out] = bad
    rep = _verdict(m, args, planted)
    o = rep.verdict.outputs[out]
    assert rep.status == "mismatch" and o.status == "mismatch", (what, rep.verdict.lines())
    assert o.expected_error > o.expected_allowed and o.index is not None
    assert "expected" in o.values


def test_one_overflowing_element_leaves_the_others_their_own_allowance():
    """exp_f32 overflows at f32 where f64 does not: that element's allowance is its own; +1 elsewhere fails."""
    m, args, expected = _program("exp_f32")
    e = expected[0]
    assert np.isinf(e).any() and np.isfinite(e).any()
    bad = e.copy()
    small = np.flatnonzero((np.abs(e) < 10).reshape(-1))
    bad.reshape(-1)[small[0]] += np.float32(1)
    o = _verdict(m, args, [bad]).verdict.outputs[0]
    assert o.status == "mismatch" and o.index == np.unravel_index(small[0], e.shape)


def test_cli_exits_1_on_a_planted_integer_error_and_reads_np_savez_ml_dtypes(tmp_path):
    hlo, inp = SWEEP / "convert_from_u8.h200_opt.hlo", SWEEP / "convert_from_u8.inputs.npz"
    m, args, expected = _program("convert_from_u8")
    # as a JAX user writes them: plain np.savez of ml_dtypes arrays (f8e5m2 gets descr '<f1', s4 |V1)
    assert expected[11].dtype == ml_dtypes.float8_e5m2 and expected[1].dtype == ml_dtypes.int4
    good = tmp_path / "good.npz"
    np.savez(good, **{f"o{i}": a for i, a in enumerate(expected)})
    res = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--inputs", str(inp), "--expected", str(good)])
    assert res.exit_code == 0, res.output
    bad = tmp_path / "bad.npz"
    planted = list(expected)
    planted[6] = planted[6] + np.int32(1)  # s32 output
    np.savez(bad, **{f"o{i}": a for i, a in enumerate(planted)})
    res = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--inputs", str(inp), "--expected", str(bad)])
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())  # rich wraps long lines
    assert "o6 (s32): MISMATCH" in text and "integer outputs compare exactly" in text, text


def test_expected_array_of_the_wrong_item_size_is_a_one_line_error(tmp_path):
    hlo, inp = SWEEP / "add_bf16.h200_opt.hlo", SWEEP / "add_bf16.inputs.npz"
    _, _, expected = _program("add_bf16")
    bad = tmp_path / "bad.npz"
    np.savez(bad, o0=expected[0].view(np.uint16).astype(np.uint8).view("V1"))
    res = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--inputs", str(inp), "--expected", str(bad)])
    assert res.exit_code == 2 and "output 0 is bf16" in res.output, res.output


def test_output_paths_know_exact_order_dependent_and_index_choices():
    assert [p.exact for p in output_paths(_program("neg_f32")[0])] == [True]
    assert [p.exact for p in output_paths(_program("exp_f32")[0])] == [False]
    sums = output_paths(_program("reduce_sum_f32_ax2")[0])
    assert sums[0].order_dependent and not sums[0].exact
    maxes = output_paths(_program("reduce_max_f32_ax0")[0])
    assert maxes[0].exact and not maxes[0].order_dependent
    arg = output_paths(_program("reduce_argmax_f32_ax0")[0])
    assert any(p.index_choice for p in arg)


REDUCE_SUM = """HloModule rs
%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}
%fused (p: f32[2,4]) -> f32[2] {
  %p = f32[2,4]{1,0} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[2]{0} reduce(%p, %z), dimensions={1}, to_apply=%add
}
ENTRY %e (x: f32[2,4]) -> f32[2] {
  %x = f32[2,4]{1,0} parameter(0)
  ROOT %f = f32[2]{0} fusion(%x), kind=kInput, calls=%fused
}
"""


def test_a_sum_the_sequential_reference_overflows_is_within_budget_where_the_kernel_gives_the_f64_answer():
    """[MAX, MAX, -MAX, -MAX] summed in order overflows to inf (the reference); paired the other way it is 0
    (the f64 answer): a kernel giving 0 is within its budget (the order is XLA's to choose), one giving 5 is not."""
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen.verify.budget import judge_fusion
    from fusegen.config.verify_options import VerifyOptions

    m = parse_module(REDUCE_SUM)
    f = m.entry.root
    big = np.finfo(np.float32).max
    x = np.array([[big, big, -big, -big], [1.0, 2.0, 3.0, 4.0]], np.float32)
    ref = evaluate_instruction(f, [x])
    assert np.isinf(ref[0]) and ref[1] == 10
    good = np.array([0.0, 10.0], np.float32)
    assert judge_fusion(f, [x], [good], ref, VerifyOptions())[0].ratio <= 1.0
    bad = np.array([5.0, 10.0], np.float32)
    assert judge_fusion(f, [x], [bad], ref, VerifyOptions())[0].ratio > 1.0
    lost = np.array([0.0, 11.0], np.float32)  # an ordinary row still has its budget
    assert judge_fusion(f, [x], [lost], ref, VerifyOptions())[0].ratio > 1.0


def test_argmax_index_off_from_expected_on_finite_inputs_is_a_mismatch():
    """An argmax whose kernel equals the reference is not excused from ``--expected`` when the inputs hold no
    NaN or inf (two NaNs in a row cannot happen): expected indices moved to 0 are a mismatch; on the sweep's
    edge-value inputs the same agreement is drift (the order-dependent two-NaN case)."""
    m, args, _ = _program("reduce_argmax_f32_ax0")
    finite = [np.random.default_rng(3).standard_normal(np.shape(a)).astype(np.asarray(a).dtype)
              if np.asarray(a).dtype.kind == "f" else a for a in args]
    out, rep = run_module(m, finite, compile_kernels=False)
    outs = [np.asarray(o) for o in (out if isinstance(out, (list, tuple)) else [out])]
    wrong = [np.zeros_like(o) if o.dtype.kind in "iu" else o for o in outs]
    assert any(o.dtype.kind in "iu" and (o != 0).any() for o in outs)
    _, rep = run_module(m, finite, compile_kernels=False, expected=wrong)
    assert rep.status == "mismatch"
    assert any(o.status == "mismatch" and "compare exactly" in o.reason for o in rep.verdict.outputs)
