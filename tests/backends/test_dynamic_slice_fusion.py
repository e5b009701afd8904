"""``dynamic_slice_fusion`` custom fusions whose hero is a copy (issue 10): one Triton kernel that reads the start
indices from device buffers, clamps them as XLA does and moves the data, checked against the evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_file, parse_module
from fusegen_plugins.backends import custom_fusion as cf


def _emit(f):
    em = cf._create_dynamic_slice_emitter(FusionAnalysis.create(f))
    assert em is not None and em.name == "DynamicSliceFusion"
    return em.emit()


@pytest.mark.parametrize("start,row", [(5, 5), (-3, 0), (100, 23)])  # out-of-range starts clamp into [0, 23]
def test_lstm_scan_update_written_in_place_at_device_side_offsets(start, row):
    m = parse_file(REPO / "tests" / "data" / "real_models" / "equinox_gru_scan.h200_opt.hlo")
    f = next(i for i in m.all_instructions() if i.name == "loop_dynamic_update_slice_fusion")
    em = _emit(f)
    assert em.output_aliases == {0: 0}  # the update is written into the operand's buffer
    (k,) = em.kernels
    assert [p.kind for p in k.params].count("operand") == 2  # the start index is a kernel argument, loaded there
    rng = np.random.default_rng(0)
    base = rng.standard_normal((24, 16)).astype(np.float32)
    upd = rng.standard_normal(16).astype(np.float32)
    ops = [base, np.int32(start), upd]
    out = triton_runtime.run_fusion(em, ops, f)[0]
    want = base.copy()
    want[row] = upd
    np.testing.assert_array_equal(out, want)
    np.testing.assert_array_equal(out, evaluate_instruction(f, ops))


_SLICE_OUT = """HloModule m
c {
  p0 = f32[8,6,5] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  z = s32[] constant(0)
  ds = f32[1,3,5] dynamic-slice(p0, i, j, z), dynamic_slice_sizes={1,3,5}
  b = f32[3,5] bitcast(ds)
  ROOT c = f32[3,5]{0,1} copy(b)
}
ENTRY e {
  p0 = f32[8,6,5] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  ROOT f = f32[3,5]{0,1} fusion(p0, i, j), kind=kCustom, calls=c,
    backend_config={"fusion_backend_config":{"kind":"__custom_fusion","custom_fusion_config":{"name":"dynamic_slice_fusion","kernel_index":0}}}
}"""


@pytest.mark.parametrize("i,j", [(2, 1), (9, -4), (-1, 5)])
def test_dynamic_slice_copy_out(i, j):
    f = parse_module(_SLICE_OUT).entry.root
    em = _emit(f)
    assert not em.output_aliases
    x = np.random.default_rng(1).standard_normal((8, 6, 5)).astype(np.float32)
    ops = [x, np.int32(i), np.int32(j)]
    out = triton_runtime.run_fusion(em, ops, f)[0]
    ci, cj = min(max(i, 0), 7), min(max(j, 0), 3)
    np.testing.assert_array_equal(out, x[ci, cj:cj + 3, :])
    np.testing.assert_array_equal(out, evaluate_instruction(f, ops))
    triton_runtime.compile_for_target(em.kernels[0], capability=90)


def test_library_call_heroes_stay_with_the_execution_backend():
    from conftest import corpus_path
    from fusegen.hlo.parser import parse_modules

    name = "custom__CublasLtMatmulWithBitcastSlicedOperand.hlo"
    m = parse_modules(corpus_path("xla", "cases", name).read_text(), name)[0]
    f = next(i for i in m.all_instructions() if i.opcode == "fusion")
    assert cf._create_dynamic_slice_emitter(FusionAnalysis.create(f)) is None
    assert cf.find_kernel(f) is not None
