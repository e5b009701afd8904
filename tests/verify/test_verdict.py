"""Issue 9: verdicts a user can trust.

One test per part: the f64 oracle, per-fusion error budgets, the pointer to the first fusion out of budget
(with its ``while`` iteration), the ``drift`` status (exit 0), ``--expected`` as a third oracle, the
``[verify]`` table / ``--rtol`` / ``--atol``, and the mutation check. Real-model programs
(``tests/data/real_models``, made by ``scripts/gen_real_models.py`` from keras-hub, optax, flax and equinox,
compiled by XLA for an H200) and the JAX corpus must give no false mismatch; the drift ones carry the f64
figures that prove it.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import CORPUS

from fusegen.cli.main import cli
from fusegen.hlo.parser import parse_module, parse_modules
from fusegen.runtime.executor import Executor
from fusegen.runtime.inputs import leaves, load_expected, load_inputs, make_inputs
from fusegen.verify.judged_run import run_module
from fusegen.verify.recorder import RunRecorder
from fusegen.verify.budget import judge, output_budgets
from fusegen.config.verify_options import VerifyOptions
from fusegen.evaluator.promote import OracleUnavailable, evaluate_promoted
from fusegen.verify.verdict import judge_module

REAL = Path(__file__).parents[1] / "data" / "real_models"
REAL_PROGRAMS = sorted(p.name.removesuffix(".h200_opt.hlo") for p in REAL.glob("*.h200_opt.hlo"))

#: Programs whose f32 outputs differ from the reference beyond f32 tolerance but are as close to the f64
#: answer as a correct evaluation: program -> (output, reference's max error vs f64, that of the reference
#: with its tf32 dots at IEEE f32 where the kernels are judged by it (else None), measured once). The
#: reference runs f32 dots of default precision at tf32, as XLA:GPU does (2026-12-02; before, at IEEE f32:
#: adamw 6.26e-3, batchnorm 1.126e3).
DRIFT = {
    "adamw_logit_offset": ("o0", 3.95e-3, None),  # AdamW turns the offset's rounding-noise gradient into +-lr
    "equinox_rnn_chaotic": ("o0", 1.61e-2, None),  # 48 steps of a gain-3 tanh recurrence
    # E[x^2] - E[x]^2 at x ~ 3000 in f32: the variance is a few f32 ulps of E[x^2], so where an evaluation
    # lands is chance; the tf32 reference lands near the answer (3.8), the kernels' reduction order (and
    # XLA:CPU's f32 dots) at a variance of 0 (1.1e3)
    "flax_batchnorm_offset": ("o0", 3.79, 1.126e3),
}

BF16_CHAIN = """HloModule chain
ENTRY e {
  p = f32[64]{0} parameter(0)
  b = bf16[64]{0} convert(p)
  s = bf16[64]{0} multiply(b, b)
  ROOT r = f32[64]{0} convert(s)
}
"""

REDUCE_FUSION = """HloModule red
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  p = f32[8,4096]{1,0} parameter(0)
  c = bf16[8,4096]{1,0} convert(p)
  d = f32[8,4096]{1,0} convert(c)
  z = f32[] constant(0)
  ROOT r = f32[8]{0} reduce(d, z), dimensions={1}, to_apply=add
}
ENTRY e {
  p0 = f32[8,4096]{1,0} parameter(0)
  ROOT f = f32[8]{0} fusion(p0), kind=kInput, calls=fused
}
"""


def real(name):
    m = parse_module((REAL / f"{name}.h200_opt.hlo").read_text(), str(REAL / f"{name}.h200_opt.hlo"))
    args = load_inputs(m, str(REAL / f"{name}.inputs.npz"))
    expected = load_expected(REAL / f"{name}.expected.npz", len(m.entry.root.shape.leaves()))
    return m, args, expected


# -- part 1: the f64 oracle -------------------------------------------------------------------------------

def test_f64_oracle_is_the_exact_answer_where_the_reference_rounds_to_bf16():
    m = parse_module(BF16_CHAIN)
    x = np.linspace(1.0, 3.0, 64, dtype=np.float32)
    from fusegen.evaluator.evaluator import evaluate_module

    ref = np.asarray(evaluate_module(m, [x]), np.float64)
    exact = np.asarray(evaluate_promoted(m, [x]))
    assert exact.dtype == np.float64
    np.testing.assert_array_equal(exact, x.astype(np.float64) ** 2)
    err = np.abs(ref - exact).max()
    assert 1e-3 < err < 2 * 9.0 * 2.0 ** -8  # the reference rounds twice to bf16; the oracle does not


def test_f64_oracle_keeps_a_float_bitcast_convert_at_its_own_width():
    m = parse_module("HloModule b\nENTRY e {\n  p = f32[4]{0} parameter(0)\n  ROOT r = s32[4]{0} bitcast-convert(p)\n}\n")
    x = np.array([1.0, -2.5, 0.1, -0.0], np.float32)
    np.testing.assert_array_equal(evaluate_promoted(m, [x]), x.view(np.int32))
    m = parse_module("HloModule b\nENTRY e {\n  p = s32[2]{0} parameter(0)\n  ROOT r = f32[2]{0} bitcast-convert(p)\n}\n")
    got = evaluate_promoted(m, [np.array([0x3F800000, -0x40800000], np.int32)])
    assert got.dtype == np.float64 and list(got) == [1.0, -1.0]  # 0xBF800000 is -1.0



def test_f64_oracle_keeps_an_element_type_bitcast_at_its_own_width():
    # XLA's optimised HLO writes the total-order comparator's f32 -> s32 as `bitcast` (benchmarks/data top_k)
    m = parse_module("HloModule b\nENTRY e {\n  p = f32[4]{0} parameter(0)\n  ROOT r = s32[4]{0} bitcast(p)\n}\n")
    x = np.array([1.0, -2.5, 0.1, -0.0], np.float32)
    np.testing.assert_array_equal(evaluate_promoted(m, [x]), x.view(np.int32))
    topk = Path(__file__).resolve().parents[2] / "benchmarks" / "data" / "top_k_50.h200_opt.hlo"
    text = topk.read_text().replace("512,", "4,").replace("[0:512]", "[0:4]").replace("32000", "64")
    m = parse_module(text)
    x = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    x[0, :3] = [np.nan, -0.0, 0.0]
    vals, idx = evaluate_promoted(m, [x])
    # descending in the total order (NaN first, 0.0 before -0.0): the s32 keys of the f32 bits
    bits = x.view(np.int32)
    keys = np.where(bits < 0, bits ^ 0x7FFFFFFF, bits).astype(np.int64)
    order = np.argsort(-keys, axis=1, kind="stable")[:, :50]
    assert list(order[0, :1]) == [0] and list(idx[0]).index(2) < list(idx[0]).index(1)
    np.testing.assert_array_equal(idx, order)
    np.testing.assert_array_equal(vals.astype(np.float32).view(np.int32), np.take_along_axis(bits, order, 1))

TOPK_BITS = """HloModule topk_bits
%cmp (a: f32[], b: f32[], i: s32[], j: s32[]) -> pred[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  %i = s32[] parameter(2)
  %j = s32[] parameter(3)
  %ba = s32[] bitcast-convert(%a)
  %bb = s32[] bitcast-convert(%b)
  %z = s32[] constant(0)
  %m = s32[] constant(2147483647)
  %na = pred[] compare(%ba, %z), direction=LT
  %xa = s32[] xor(%ba, %m)
  %ka = s32[] select(%na, %xa, %ba)
  %nb = pred[] compare(%bb, %z), direction=LT
  %xb = s32[] xor(%bb, %m)
  %kb = s32[] select(%nb, %xb, %bb)
  ROOT %gt = pred[] compare(%ka, %kb), direction=DIRECTION
}
%fused (p0: f32[4,16], p1: s32[4,16]) -> (f32[4,16], s32[4,16]) {
  %p0 = f32[4,16]{1,0} parameter(0)
  %p1 = s32[4,16]{1,0} parameter(1)
  ROOT %s = (f32[4,16]{1,0}, s32[4,16]{1,0}) sort(%p0, %p1), dimensions={1}, is_stable=true, to_apply=%cmp
}
ENTRY %e (x: f32[4,16]) -> (f32[4,16], s32[4,16]) {
  %x = f32[4,16]{1,0} parameter(0)
  %io = s32[4,16]{1,0} iota(), iota_dimension=1
  ROOT %f = (f32[4,16]{1,0}, s32[4,16]{1,0}) fusion(%x, %io), kind=kInput, calls=%fused
}
"""


def test_topk_comparator_bitcasting_its_keys_has_an_f64_oracle_and_a_wrong_comparator_is_a_mismatch():
    """A top-k comparator (Mixtral's router) bitcasts f32 keys to s32 total-order keys: the f64 oracle keeps those
    bitcasts at 32 bits (it used to fail: "cannot reshape array of size 2 into shape ()"), and a comparator
    planted the wrong way round is a mismatch against the right answer."""
    from fusegen.evaluator.promote import evaluate_fusion_promoted

    m = parse_module(TOPK_BITS.replace("DIRECTION", "GT"))
    x = np.random.default_rng(3).standard_normal((4, 16)).astype(np.float32)
    x[0, :3] = [np.inf, -np.inf, -0.0]
    args = [x]
    f = m.entry.root
    exact = evaluate_fusion_promoted(f, [x, np.broadcast_to(np.arange(16, dtype=np.int32), (4, 16)).copy()])
    order = np.argsort(-x, axis=1, kind="stable")
    np.testing.assert_array_equal(exact[1], order)
    assert exact[0].dtype == np.float64
    out, rep = run_module(m, args, compile_kernels=False)
    assert rep.verdict.oracle == "f64" and rep.status == "ok"
    wrong = parse_module(TOPK_BITS.replace("DIRECTION", "LT"))
    _, rep = run_module(wrong, args, compile_kernels=False, expected=[np.asarray(o) for o in out])
    assert rep.status == "mismatch"
    assert {o.name: o.status for o in rep.verdict.outputs} == {"o0": "mismatch", "o1": "mismatch"}


# -- part 2: error budgets --------------------------------------------------------------------------------

def _negate_module(et: str, n: int):
    """A module of one kLoop fusion negating an ``et[n]`` parameter."""
    return parse_module(f"""HloModule neg
%fused (p: {et}[{n}]) -> {et}[{n}] {{
  %p = {et}[{n}]{{0}} parameter(0)
  ROOT %n = {et}[{n}]{{0}} negate(%p)
}}
ENTRY %e (x: {et}[{n}]) -> {et}[{n}] {{
  %x = {et}[{n}]{{0}} parameter(0)
  ROOT %f = {et}[{n}]{{0}} fusion(%x), kind=kLoop, calls=%fused
}}
""")


@pytest.mark.parametrize("et", ["bf16", "f8e4m3fn", "f32"])
def test_an_output_over_budget_gets_the_f64_second_look_in_every_float_type(et):
    # a kernel exactly at the f64 answer, beside a reference 0.5 off: far over the plain budget, and as
    # accurate as the program allows, so the second look clears it (bf16 and f8, numpy kind "V", included)
    from fusegen.hlo import dtypes
    from fusegen.verify.budget import judge_fusion

    m = _negate_module(et, 8)
    dt = dtypes.numpy_dtype(et)
    x = np.array([1, 2, 3, 4, -1, -2, -3, -4], np.float64).astype(dt)
    out = (-x.astype(np.float64)).astype(dt)
    ref = (-x.astype(np.float64) + 0.5).astype(dt)
    plain, _ = judge_fusion(m.entry.root, None, [out], ref, VerifyOptions())
    looked, _ = judge_fusion(m.entry.root, [x], [out], ref, VerifyOptions())
    assert plain.ratio > 1 and looked.ratio == 0.0


@pytest.mark.parametrize("et", ["bf16", "f8e4m3fn", "f16", "f32", "c64"])
def test_record_fusion_reports_the_budget_pass_figures_for_every_float_type(et, monkeypatch):
    # bf16 and f8 arrays are numpy kind "V": their max abs / rel errors must come from judge()'s pass too,
    # and be exactly what compare() gives on the same pair
    from fusegen.hlo import dtypes
    from fusegen.runtime import compare as compare_mod
    from fusegen.runtime.executor import FusionReport
    from fusegen.verify import verdict

    m = _negate_module(et, 64)
    f = m.entry.root
    dt = dtypes.numpy_dtype(et)
    x = np.linspace(-3, 3, 64)
    ref = (-x).astype(dt)
    out = (-x * 1.01 + 0.003).astype(dt)
    want = compare_mod.compare(out, ref, "f64")
    assert want.max_abs_error > 0

    def no_second_pass(*a, **k):
        raise AssertionError("compare() widened a pair judge() had already widened")

    monkeypatch.setattr(verdict, "compare", no_second_pass)
    rep = FusionReport(name="f")
    verdict.record_fusion(RunRecorder(m), rep, f, out, ref, [x.astype(dt)])
    assert (rep.max_abs_error, rep.max_rel_error) == (want.max_abs_error, want.max_rel_error)


def test_budget_takes_the_lowest_precision_computed_type_and_grows_with_the_reduction():
    m = parse_module(REDUCE_FUSION)
    (b,) = output_budgets(m.entry.root)
    assert (b.element_type, b.path_type, b.terms, b.growth) == ("f32", "bf16", 4096, 4.0)
    ref = np.full(8, 100.0, np.float32)
    opts = VerifyOptions()
    one_ulp = judge(ref + np.float32(100 * 2.0 ** -8), ref, b, opts)  # one bf16 ulp: within budget
    assert 0 < one_ulp.ratio < 1
    wrong = judge(ref * np.float32(1.2), ref, b, opts)
    assert wrong.ratio > 1 and wrong.worst_index == (0,)


def test_rows_show_error_over_budget(tmp_path):
    res = CliRunner().invoke(cli, ["run", str(REAL / "equinox_mlp.h200_opt.hlo"), "--no-compile", "--json",
                                   "--inputs", str(REAL / "equinox_mlp.inputs.npz")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    rows = [f for f in doc["fusions"] if f["backend"] == "triton"]
    assert rows and all(0 <= f["error_budget_ratio"] <= 1 and f["budget"] != "-" for f in rows)


# -- part 3 + drift: real-model programs, no false mismatch -----------------------------------------------

@pytest.mark.parametrize("name", REAL_PROGRAMS)
def test_real_model_program_has_no_false_mismatch(name):
    m, args, expected = real(name)
    _, rep = run_module(m, args, compile_kernels=False, expected=expected)
    v = rep.verdict
    assert v.oracle == "f64"
    assert rep.status != "mismatch", "\n".join(v.lines())
    assert all(f.status == "ok" for f in rep.fusions), [(f.name, f.status, f.reason) for f in rep.fusions]
    for o in v.outputs:
        if o.kernel_error is not None:
            assert o.kernel_error <= o.allowed, (o.name, o.kernel_error, o.allowed)
        if o.expected_error is not None:
            assert o.expected_error <= o.expected_allowed
    if name in DRIFT:
        out, ref_err, f32_err = DRIFT[name]
        o = next(x for x in v.outputs if x.name == out)
        assert rep.status == "drift" and o.status == "drift"
        # the reference itself is this far from the f64 answer (the program's conditioning; within 2x: numpy's
        # BLAS kernels differ between CPUs and these programs amplify rounding: adamw_logit_offset is 3.95e-3 on
        # one AVX-512 machine, 5.17e-3 on an AMD EPYC one) ...
        assert ref_err / 2 <= o.reference_error <= 2 * ref_err, (o.reference_error, ref_err)
        # ... and the kernels are no further than a correct evaluation, while they differ from the reference
        # beyond f32 tolerance
        if f32_err is None:
            assert o.kernel_error <= 4 * o.reference_error and "IEEE f32" not in (o.reason or "")
        else:
            assert 4 * o.reference_error < o.kernel_error <= 4 * f32_err and "tf32 dots at IEEE f32" in o.reason
            assert o.allowed == pytest.approx(4 * f32_err, rel=0.25)
        assert o.max_abs_error > 1e-4 * max(1.0, abs(float(o.values["reference"])))


def test_drift_exits_0_and_json_has_status_per_output():
    name = "adamw_logit_offset"
    res = CliRunner().invoke(cli, ["run", str(REAL / f"{name}.h200_opt.hlo"), "--no-compile", "--json",
                                   "--inputs", str(REAL / f"{name}.inputs.npz")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["status"] == "drift" and doc["outputs_match"] is True
    o0 = doc["outputs"][0]
    assert o0["status"] == "drift" and o0["kernel_vs_f64"] <= o0["allowed_vs_f64"]
    assert {"index", "kernel_value", "reference_value", "f64_value"} <= set(o0)
    assert doc["outputs"][1]["status"] == "ok"
    # a conditioning factor below kernel/reference error and no floor make the same run a mismatch (exit 1);
    # the factor comes from this run's errors, which differ between CPUs (numpy's BLAS kernels)
    rtol = _rtol_below_kernel_error(o0)
    res = CliRunner().invoke(cli, ["run", str(REAL / f"{name}.h200_opt.hlo"), "--no-compile", "--rtol", f"{rtol:.6g}",
                                   "--atol", "0", "--inputs", str(REAL / f"{name}.inputs.npz")])
    assert res.exit_code == 1, res.output
    assert "o0 (f32): MISMATCH" in res.output and "worst element" in res.output


def _rtol_below_kernel_error(out: dict) -> float:
    """A conditioning factor whose budget (factor x the reference's error vs f64) is half the kernel's error."""
    assert out["kernel_vs_f64"] > 0 and out["reference_vs_f64"] > 0, out
    return 0.5 * out["kernel_vs_f64"] / out["reference_vs_f64"]


def test_verify_table_sets_the_conditioning_factor(tmp_path):
    name = "adamw_logit_offset"
    cmd = ["run", str(REAL / f"{name}.h200_opt.hlo"), "--no-compile", "--json",
           "--inputs", str(REAL / f"{name}.inputs.npz")]
    first = json.loads(CliRunner().invoke(cli, cmd).output)["outputs"][0]
    cfg = tmp_path / "fusegen.toml"
    cfg.write_text(f"[verify]\nrtol = {_rtol_below_kernel_error(first):.6g}\natol = 0.0\n")
    res = CliRunner().invoke(cli, cmd + ["--config", str(cfg)])
    assert res.exit_code == 1 and json.loads(res.output)["outputs"][0]["status"] == "mismatch"
    cfg.write_text("[verify]\nrtoll = 2\n")
    res = CliRunner().invoke(cli, ["run", str(REAL / f"{name}.h200_opt.hlo"), "--config", str(cfg)])
    assert res.exit_code == 2 and "fusegen.toml:2" in res.output and "did you mean" in res.output


def test_pointer_names_the_first_fusion_out_of_budget_and_its_while_iteration():
    from fusegen.verify.mutate import plant

    m, args, _ = real("equinox_rnn_chaotic")
    whiles = [i for c in m.computations for i in c.instructions if i.opcode == "while"]
    body = whiles[0].attrs["body"]
    target = next(i for i in body.post_order() if i.opcode == "fusion" and i.name.startswith("input_reduce"))

    class Planted(Executor):
        def plan_fusion(self, inst):
            emitted, rep = super().plan_fusion(inst)
            if inst is target and emitted is not None and emitted.kernels:
                bad = plant(emitted, "off_by_one", 0)  # the matrix-vector product reads a shifted row
                self._emitted[id(inst)] = (bad, rep)
                return bad, rep
            return emitted, rep

    ex = Planted(m, compile_kernels=False, observer=RunRecorder(m))
    out = ex.run(args)
    from fusegen.evaluator.evaluator import evaluate_module

    v = judge_module(m, args, out, evaluate_module(m, args), ex.observer.events, ex.verify)
    ev = v.first_out_of_budget
    assert ev is not None and ev.fusion == target.name
    assert (ev.loop, ev.iteration) == (whiles[0].name, 0)
    assert v.status == "mismatch"
    assert f"first fusion out of budget: %{target.name} (while %{whiles[0].name}, iteration 0)" in "\n".join(v.lines())


# -- part 4: --expected -----------------------------------------------------------------------------------

def test_expected_is_a_third_oracle(tmp_path):
    name = "gpt2"
    hlo, inputs = str(REAL / f"{name}.h200_opt.hlo"), str(REAL / f"{name}.inputs.npz")
    res = CliRunner().invoke(cli, ["run", hlo, "--no-compile", "--json", "--inputs", inputs,
                                   "--expected", str(REAL / f"{name}.expected.npz")])
    assert res.exit_code == 0, res.output
    o0 = json.loads(res.output)["outputs"][0]
    # drift allowed: gpt2's dots run at tf32, as on XLA:GPU (JAX's expected: XLA:CPU at IEEE f32), and where two
    # correct evaluations round a computed operand a tf32 step apart the kernels differ from the reference by
    # about f32's tolerance (1.0e-4 relative, 2026-12-02)
    assert o0["status"] in ("ok", "drift") and o0["kernel_vs_expected"] <= o0["allowed_vs_expected"]
    assert o0["kernel_vs_expected"] > 1e-4  # the kernels' tf32 against JAX's f32: the allowance is not vacuous
    jax_out = dict(np.load(REAL / f"{name}.expected.npz"))
    jax_out["o0"] = jax_out["o0"].copy()
    jax_out["o0"][1, 2, 3] += 0.5  # a known answer that disagrees with both the kernels and the reference
    bad = tmp_path / "bad.npz"
    np.savez(bad, **jax_out)
    res = CliRunner().invoke(cli, ["run", hlo, "--no-compile", "--inputs", inputs, "--expected", str(bad)])
    assert res.exit_code == 1
    assert "kernel vs expected" in res.output and "worst element [1, 2, 3]" in res.output
    empty = tmp_path / "empty.npz"
    np.savez(empty, x=np.zeros(1))
    res = CliRunner().invoke(cli, ["run", hlo, "--no-compile", "--inputs", inputs, "--expected", str(empty)])
    assert res.exit_code == 2 and "no array 'o0'" in res.output


# -- the JAX corpus: no false mismatch --------------------------------------------------------------------

JAX_PROGRAMS = sorted(p.name for p in (CORPUS / "jax").glob("*.hlo")) if CORPUS.exists() else []


@pytest.mark.parametrize("name", JAX_PROGRAMS)
def test_jax_corpus_program_has_no_false_mismatch(name):
    if name.startswith("gpt12") and not os.environ.get("FUSEGEN_SLOW"):
        pytest.skip("gpt12 takes minutes in the interpreter; runs with FUSEGEN_SLOW=1")
    from fusegen.cli.common import prepare_modules
    from fusegen.config.loader import load_config
    from fusegen.device import get_device

    path = CORPUS / "jax" / name
    modules = parse_modules(path.read_text(), str(path))
    prepare_modules(modules, load_config(config_path=None, cwd=path.parent), get_device("h200"))
    for m in modules:
        _, rep = run_module(m, make_inputs(m, 0), compile_kernels=False)
        assert rep.status != "mismatch", (rep.verdict.lines(), [(f.name, f.status) for f in rep.fusions])
        assert rep.verdict.oracle == "f64"
        for o in rep.verdict.outputs:
            assert o.kernel_error is None or o.kernel_error <= o.allowed


# -- part 5: mutation check -------------------------------------------------------------------------------

def test_mutation_check_catches_planted_bugs_and_never_the_unmutated_kernels():
    import fusegen
    from fusegen.verify.mutate import KINDS, run_check, score

    paths = [CORPUS / "jax" / n for n in ("gpu_softmax.default.h100_opt.hlo", "gpu_mlp_bf16.default.h100_opt.hlo",
                                         "gpu_rowsum.default.h100_opt.hlo")] if CORPUS.exists() else []
    paths += [REAL / "equinox_mlp.h200_opt.hlo", REAL / "flax_block.h200_opt.hlo"]

    def inputs_for(p, m):
        npz = REAL / (Path(p).name.removesuffix(".h200_opt.hlo") + ".inputs.npz")
        return load_inputs(m, str(npz)) if npz.exists() and Path(p).parent == REAL else None

    modules = ((p, m) for p in paths for m in fusegen.load_all(str(p)))
    controls, mutants = run_check(modules, KINDS, max_sites=1, max_fusions=4, inputs_for=inputs_for)
    assert controls and all(r <= 1.0 for _, _, r in controls), [c for c in controls if c[2] > 1]
    caught, exercised, s = score(mutants)
    assert exercised >= 15
    assert s >= 0.95, [(m.module, m.fusion, m.kind, m.ratio) for m in mutants if m.outcome == "missed"]
    planted = {m.kind for m in mutants}
    assert {"off_by_one", "swapped_operand", "wrong_accumulator", "lost_nan"} <= planted
