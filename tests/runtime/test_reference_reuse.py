"""run_module's reference run reuses a fusion's reference value only for bitwise-identical operands."""

from __future__ import annotations

import numpy as np

from fusegen.codegen import triton_runtime
from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_module
from fusegen.runtime import executor, oracles
from fusegen.runtime.oracles import same_bits as _same_bits
from fusegen.verify.judged_run import run_module

CHAIN = """HloModule chain

%neg_fused (q: f32[64]) -> f32[64] {
  %q = f32[64]{0} parameter(0)
  ROOT %n = f32[64]{0} negate(%q)
}

%mul_fused (x: f32[64], y: f32[64]) -> f32[64] {
  %x = f32[64]{0} parameter(0)
  %y = f32[64]{0} parameter(1)
  ROOT %m = f32[64]{0} multiply(%x, %y)
}

ENTRY %main (a: f32[64], b: f32[64]) -> f32[64] {
  %a = f32[64]{0} parameter(0)
  %b = f32[64]{0} parameter(1)
  %f1 = f32[64]{0} fusion(%a), kind=kLoop, calls=%neg_fused
  ROOT %f2 = f32[64]{0} fusion(%f1, %b), kind=kLoop, calls=%mul_fused
}
"""


def test_same_bits_compares_bytes_dtypes_and_shapes():
    z = np.zeros(3, np.float32)
    assert _same_bits(z, z.copy())
    assert not _same_bits(z, -z)  # -0.0 has other bits than 0.0
    nan = np.array([np.nan], np.float32)
    other_nan = nan.view(np.uint32) | np.uint32(1)
    assert _same_bits(nan, nan.copy())
    assert not _same_bits(nan, other_nan.view(np.float32))
    assert not _same_bits(z, z.astype(np.float64))
    assert not _same_bits(z, z.reshape(1, 3))
    assert _same_bits((z, np.float32(2)), (z.copy(), np.float32(2)))
    assert not _same_bits((z,), z)
    assert _same_bits(np.arange(6, dtype=np.int32).reshape(2, 3).T, np.arange(6, dtype=np.int32).reshape(2, 3).T.copy())


def _counting(monkeypatch):
    calls = []
    real = executor.evaluate_instruction

    def counted(inst, ops):
        if inst.opcode == "fusion" and inst.shape.element_type != "f64":  # not the f64 oracle's promoted copy
            calls.append(inst.name)
        return real(inst, ops)

    monkeypatch.setattr(executor, "evaluate_instruction", counted)
    monkeypatch.setattr(oracles, "evaluate_instruction", counted)
    return calls


def test_exact_kernels_let_the_module_reference_reuse_every_fusion(monkeypatch):
    m = parse_module(CHAIN, "chain.hlo")
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)]
    calls = _counting(monkeypatch)
    out, report = run_module(m, args, compile_kernels=False)
    assert calls == ["f1", "f2"]  # the executor's references only: the module run reused both
    want = evaluate_module(m, args)
    np.testing.assert_array_equal(np.asarray(out), want)
    assert report.output_max_abs_error == 0.0 and report.status == "ok"


def test_a_fusion_fed_by_a_different_kernel_value_is_evaluated_again(monkeypatch):
    m = parse_module(CHAIN, "chain.hlo")
    rng = np.random.default_rng(1)
    args = [rng.standard_normal(64).astype(np.float32), rng.standard_normal(64).astype(np.float32)]
    real_run = triton_runtime.run_fusion

    def off_by_one_ulp(emitted, ops, inst, **kw):  # the first kernel rounds differently from the reference
        flat = real_run(emitted, ops, inst, **kw)
        return [np.nextafter(f, np.float32(np.inf)) for f in flat] if inst.name == "f1" else flat

    monkeypatch.setattr(triton_runtime, "run_fusion", off_by_one_ulp)
    calls = _counting(monkeypatch)
    out, report = run_module(m, args, compile_kernels=False)
    assert calls == ["f1", "f2", "f2"]  # f1's operands are the same, f2's are not: evaluated again
    want = evaluate_module(m, args)
    assert report.output_max_abs_error == float(np.max(np.abs(np.asarray(out, np.float64) - want)))
    assert report.output_max_abs_error > 0
