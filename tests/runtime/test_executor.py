"""The executor: control flow bodies get kernels, non-fusion instructions run on the host backend."""

from __future__ import annotations

import numpy as np
import pytest

from fusegen.hlo.dot_numerics import tf32_round
from fusegen.hlo.parser import parse_module
from fusegen.verify.judged_run import run_module

WHILE = """HloModule w

%body_fused (p: f32[16]) -> f32[16] {
  %p = f32[16]{0} parameter(0)
  %two = f32[] constant(2)
  %b = f32[16]{0} broadcast(%two), dimensions={}
  ROOT %m = f32[16]{0} multiply(%p, %b)
}

%body (s: (s32[], f32[16])) -> (s32[], f32[16]) {
  %s = (s32[], f32[16]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %v = f32[16]{0} get-tuple-element(%s), index=1
  %one = s32[] constant(1)
  %i1 = s32[] add(%i, %one)
  %v1 = f32[16]{0} fusion(%v), kind=kLoop, calls=%body_fused
  ROOT %t = (s32[], f32[16]{0}) tuple(%i1, %v1)
}

%cond (s: (s32[], f32[16])) -> pred[] {
  %s = (s32[], f32[16]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}

%neg_fused (q: f32[16]) -> f32[16] {
  %q = f32[16]{0} parameter(0)
  ROOT %n = f32[16]{0} negate(%q)
}

%true_branch (x: f32[16]) -> f32[16] {
  %x = f32[16]{0} parameter(0)
  ROOT %f = f32[16]{0} fusion(%x), kind=kLoop, calls=%neg_fused
}

%false_branch (y: f32[16]) -> f32[16] {
  %y = f32[16]{0} parameter(0)
  ROOT %c = f32[16]{0} copy(%y)
}

ENTRY %main (a: f32[16], p: pred[]) -> f32[16] {
  %a = f32[16]{0} parameter(0)
  %p = pred[] parameter(1)
  %zero = s32[] constant(0)
  %init = (s32[], f32[16]{0}) tuple(%zero, %a)
  %loop = (s32[], f32[16]{0}) while(%init), condition=%cond, body=%body
  %v = f32[16]{0} get-tuple-element(%loop), index=1
  ROOT %r = f32[16]{0} conditional(%p, %v, %v), true_computation=%true_branch, false_computation=%false_branch
}
"""


@pytest.mark.parametrize("pred", [True, False])
def test_control_flow_bodies_get_kernels(pred):
    m = parse_module(WHILE, "while.hlo")
    a = np.arange(16, dtype=np.float32)
    out, report = run_module(m, [a, np.bool_(pred)], compile_kernels=False)
    expected = -(a * 8) if pred else a * 8
    np.testing.assert_allclose(out, expected)
    rows = {f.name: f for f in report.fusions}
    assert rows["v1"].backend == "triton" and rows["v1"].emitter == "LoopFusion" and rows["v1"].status == "ok"
    if pred:
        assert rows["f"].backend == "triton"
    else:
        assert "f" not in rows  # the untaken branch's fusion never ran
    assert report.ok


CUSTOM = """HloModule cc
ENTRY %main (a: f32[4,8], b: f32[8,3]) -> f32[4,3] {
  %a = f32[4,8]{1,0} parameter(0)
  %b = f32[8,3]{1,0} parameter(1)
  %gemm = (f32[4,3]{1,0}, s8[0]{0}) custom-call(%a, %b), custom_call_target="__cublas$gemm", backend_config={"gemm_backend_config":{"alpha_real":2,"alpha_imag":0,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"DEFAULT"}}
  ROOT %r = f32[4,3]{1,0} get-tuple-element(%gemm), index=0
}
"""


def test_library_custom_call_runs_on_the_host_backend():
    m = parse_module(CUSTOM, "cc.hlo")
    rng = np.random.default_rng(0)
    a = rng.standard_normal((4, 8)).astype(np.float32)
    b = rng.standard_normal((8, 3)).astype(np.float32)
    out, report = run_module(m, [a, b], compile_kernels=False)
    # a cuBLAS GEMM of default precision: tf32 operands (XLA's compute type), products summed in f32
    np.testing.assert_allclose(out, 2 * (tf32_round(a).astype(np.float64) @ tf32_round(b)), rtol=1e-5)
    assert report.other == {"host": 1}


def test_unknown_custom_call_target_is_named_before_any_run_and_is_no_plugin_failure():
    from fusegen.runtime.executor import Executor
    from fusegen.runtime.support import UnsupportedInstructionError

    m = parse_module(CUSTOM.replace("__cublas$gemm", "__my$kernel"), "cc.hlo")
    ran = []
    orig = Executor.run
    try:
        Executor.run = lambda self, args: ran.append(1)  # type: ignore[method-assign]
        with pytest.raises(UnsupportedInstructionError,
                           match=r"^fusegen has no implementation of custom-call target '__my\$kernel' "
                                 r"\(instruction %gemm,") as e:
            run_module(m, [np.zeros((4, 8), np.float32), np.zeros((8, 3), np.float32)], compile_kernels=False)
    finally:
        Executor.run = orig  # type: ignore[method-assign]
    assert ran == [] and e.value.target == "__my$kernel" and e.value.instruction == "gemm"
    assert [u.instruction for u in e.value.unsupported] == ["gemm"]


def test_a_backend_config_that_is_not_json_is_reported_not_silently_dropped():
    from fusegen.runtime.executor import Executor

    text = WHILE.replace("%v1 = f32[16]{0} fusion(%v), kind=kLoop, calls=%body_fused",
                         '%v1 = f32[16]{0} fusion(%v), kind=kLoop, calls=%body_fused, '
                         'backend_config={"fusion_backend_config":{"kind":"__triton",,}}')
    m = parse_module(text, "bad_bc.hlo")
    fusion = m.computation("body").instruction("v1")
    _, rep = Executor(m, compile_kernels=False).plan_fusion(fusion)
    assert rep.kind == "kLoop"  # no stamp survives, as with XLA's default config
    assert "backend_config is not valid JSON" in rep.reason
