"""MemcpyFusion and InPlaceDynamicUpdateSliceFusion: when the loop arm picks them, and that what they
produce (copies, in-place kernels over the update only) matches the reference evaluator."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import CORPUS
from fusion_harness import load, loop_fusions, operands_and_reference, pick_emitter, run_and_compare

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen_plugins.emitters import in_place_dus, memcpy

CASES = CORPUS / "xla" / "cases"
DUS_CASES = sorted(p.name for p in CASES.glob("lit_shared__dynamic_update_slice__*.hlo")) if CASES.exists() else []


@pytest.mark.parametrize("name", DUS_CASES)
def test_corpus_dus_cases_in_place(name):
    path = CASES / name
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path}")
    m = load(path)
    (f,) = loop_fusions(m)
    em = pick_emitter(FusionAnalysis.create(f))
    assert type(em).__name__ == "InPlaceDynamicUpdateSliceFusion"
    emitted = em.emit()
    (ks,) = emitted.kernels
    upd = f.operands[1].shape
    assert ks.constexprs["N"] == upd.numel  # iterates over the update only
    assert emitted.output_aliases == {0: 0}
    for seed in range(3):
        ops, ref = operands_and_reference(m, f, seed=seed)
        run_and_compare(f, ops, ref, emitted)
    # start indices far out of range are clamped to [0, dim - update_dim]
    ops, _ = operands_and_reference(m, f)
    for starts in ((10_000, -7), (-3, 10_000)):
        ops2 = list(ops[:2]) + [np.int32(s) for s in starts]
        run_and_compare(f, ops2, f_eval(f, ops2), emitted)
    r = triton_runtime.compile_for_target(ks)
    assert ".target sm_90a" in r.ptx


def f_eval(f, ops):
    from fusegen.evaluator.evaluator import evaluate_instruction

    return evaluate_instruction(f, ops)


B09_FUSED = """
HloModule b09_fused

fused_dus {
  p0 = s32[4,1,1] parameter(0)
  head = s32[3,1,1] slice(p0), slice={[0:3], [0:1], [0:1]}
  one = s32[] constant(1)
  zero = s32[] constant(0)
  shifted = s32[4,1,1] dynamic-update-slice(p0, head, one, zero, zero)
  ROOT out = s32[1,4,1] bitcast(shifted)
}

ENTRY main {
  x = s32[4,1,1] parameter(0)
  one = s32[] constant(1)
  one_b = s32[4,1,1] broadcast(one), dimensions={}
  base = s32[4,1,1] add(x, one_b)
  ROOT f = s32[1,4,1] fusion(base), kind=kLoop, calls=fused_dus
}
"""


def test_b09_update_reading_the_written_operand_is_not_in_place():
    m = load(B09_FUSED)
    (f,) = loop_fusions(m)
    a = FusionAnalysis.create(f)
    assert in_place_dus.output_dus(a) is not None  # it IS a DUS fusion ...
    assert not in_place_dus.can_emit_in_place(a)   # ... but the update is a slice of the written buffer
    em = pick_emitter(a)
    assert type(em).__name__ == "LoopFusion"
    x = np.arange(4, dtype=np.int32).reshape(4, 1, 1)
    ops, ref = operands_and_reference(m, f, args=[x])
    _, outs = run_and_compare(f, ops, ref)
    assert outs[0].reshape(-1).tolist() == [1, 1, 2, 3]  # expected value from the bug report (B09)


def test_b09_unfused_module_evaluates_to_expected(tmp_path):
    path = CORPUS / "bugs" / "B09.hlo"
    if not path.exists():
        pytest.skip(f"shared corpus not found at {path}")
    from fusegen.evaluator.evaluator import evaluate_module

    m = load(path)
    out = evaluate_module(m, [np.arange(4, dtype=np.int32).reshape(4, 1, 1)])
    assert np.asarray(out).reshape(-1).tolist() == [1, 1, 2, 3]


_DS_TEMPLATE = """
HloModule t
fused {{
  p = f32[8,4] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  z = s32[] constant(0)
  ds = f32[2,4] dynamic-slice(p, {ds_start}, z), dynamic_slice_sizes={{2,4}}
  two = f32[] constant(2)
  twob = f32[2,4] broadcast(two), dimensions={{}}
  u = f32[2,4] multiply(ds, twob)
  ROOT d = f32[8,4] dynamic-update-slice(p, u, i, z)
}}
ENTRY main {{
  p = f32[8,4] parameter(0)
  i = s32[] parameter(1)
  j = s32[] parameter(2)
  ROOT f = f32[8,4] fusion(p, i, j), kind=kLoop, calls=fused
}}
"""


@pytest.mark.parametrize("ds_start,in_place", [("i", True), ("j", False)])
def test_dynamic_slice_of_written_operand(ds_start, in_place):
    m = load(_DS_TEMPLATE.format(ds_start=ds_start))
    (f,) = loop_fusions(m)
    a = FusionAnalysis.create(f)
    assert in_place_dus.can_emit_in_place(a) is in_place
    em = pick_emitter(a)
    assert type(em).__name__ == ("InPlaceDynamicUpdateSliceFusion" if in_place else "LoopFusion")
    p = np.random.default_rng(0).standard_normal((8, 4)).astype(np.float32)
    for i, j in ((3, 4), (0, 1), (7, 2), (-2, 9)):
        ops, ref = operands_and_reference(m, f, args=[p, np.int32(i), np.int32(j)])
        run_and_compare(f, ops, ref)


def test_multi_output_dus_with_bitcast_root():
    text = """
HloModule t
fused {
  a = f32[6,4] parameter(0)
  b = s32[24] parameter(1)
  ua = f32[2,4] parameter(2)
  ub = s32[2,4] parameter(3)
  i = s32[] parameter(4)
  z = s32[] constant(0)
  bb = s32[6,4] bitcast(b)
  da = f32[6,4] dynamic-update-slice(a, ua, i, z)
  db = s32[6,4] dynamic-update-slice(bb, ub, i, z)
  dbc = s32[24] bitcast(db)
  ROOT t = (f32[6,4], s32[24]) tuple(da, dbc)
}
ENTRY main {
  a = f32[6,4] parameter(0)
  b = s32[24] parameter(1)
  ua = f32[2,4] parameter(2)
  ub = s32[2,4] parameter(3)
  i = s32[] parameter(4)
  ROOT f = (f32[6,4], s32[24]) fusion(a, b, ua, ub, i), kind=kLoop, calls=fused
}
"""
    m = load(text)
    (f,) = loop_fusions(m)
    em = pick_emitter(FusionAnalysis.create(f))
    assert type(em).__name__ == "InPlaceDynamicUpdateSliceFusion"
    emitted = em.emit()
    assert emitted.output_aliases == {0: 0, 1: 1}
    rng = np.random.default_rng(1)
    for i in (0, 2, 4, 99):
        args = [rng.standard_normal((6, 4)).astype(np.float32), np.arange(24, dtype=np.int32),
                rng.standard_normal((2, 4)).astype(np.float32), -np.arange(8, dtype=np.int32).reshape(2, 4),
                np.int32(i)]
        ops, ref = operands_and_reference(m, f, args=args)
        run_and_compare(f, ops, ref, emitted)


def test_dus_with_epilogue_is_not_a_dus_fusion():
    text = """
HloModule t
fused {
  a = f32[6,4] parameter(0)
  u = f32[2,4] parameter(1)
  i = s32[] parameter(2)
  z = s32[] constant(0)
  d = f32[6,4] dynamic-update-slice(a, u, i, z)
  ROOT n = f32[6,4] negate(d)
}
ENTRY main {
  a = f32[6,4] parameter(0)
  u = f32[2,4] parameter(1)
  i = s32[] parameter(2)
  ROOT f = f32[6,4] fusion(a, u, i), kind=kLoop, calls=fused
}
"""
    m = load(text)
    (f,) = loop_fusions(m)
    a = FusionAnalysis.create(f)
    assert in_place_dus.output_dus(a) is None
    assert type(pick_emitter(a)).__name__ == "LoopFusion"
    ops, ref = operands_and_reference(m, f)
    run_and_compare(f, ops, ref)


_COPY = """
HloModule t
fused {{
  p0 = f32[4,6]{{1,0}} parameter(0)
  p1 = s8[5]{{0}} parameter(1)
  c0 = f32[4,6]{{{layout}}} copy(p0)
  c1 = s8[5]{{0}} copy(p1)
  ROOT t = (f32[4,6]{{{layout}}}, s8[5]{{0}}) tuple(c0, c1)
}}
ENTRY main {{
  p0 = f32[4,6]{{1,0}} parameter(0)
  p1 = s8[5]{{0}} parameter(1)
  ROOT f = (f32[4,6]{{{layout}}}, s8[5]{{0}}) fusion(p0, p1), kind=kLoop, calls=fused
}}
"""


def test_copy_of_parameters_is_memcpy():
    m = load(_COPY.format(layout="1,0"))
    (f,) = loop_fusions(m)
    em = pick_emitter(FusionAnalysis.create(f))
    assert type(em).__name__ == "MemcpyFusion"
    emitted = em.emit()
    assert emitted.kernels == () and emitted.copies == ((0, 0), (1, 1))
    ops, ref = operands_and_reference(m, f)
    _, outs = run_and_compare(f, ops, ref, emitted)
    np.testing.assert_array_equal(outs[0], ops[0])


def test_layout_changing_copy_is_a_loop_kernel():
    m = load(_COPY.format(layout="0,1"))
    (f,) = loop_fusions(m)
    a = FusionAnalysis.create(f)
    assert memcpy.copy_fusion_pairs(a) is None
    em = pick_emitter(a)
    assert type(em).__name__ == "LoopFusion"
    ops, ref = operands_and_reference(m, f)
    _, outs = run_and_compare(f, ops, ref)
    np.testing.assert_array_equal(outs[0], ops[0])


def test_copy_of_computed_value_is_not_memcpy():
    text = """
HloModule t
fused {
  p0 = f32[8] parameter(0)
  n = f32[8] negate(p0)
  ROOT c = f32[8] copy(n)
}
ENTRY main {
  p0 = f32[8] parameter(0)
  ROOT f = f32[8] fusion(p0), kind=kLoop, calls=fused
}
"""
    m = load(text)
    (f,) = loop_fusions(m)
    assert memcpy.copy_fusion_pairs(FusionAnalysis.create(f)) is None
    ops, ref = operands_and_reference(m, f)
    run_and_compare(f, ops, ref)
