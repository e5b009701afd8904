"""Row reductions on whole tiles and on rows shorter than their tile (RowReductionFusion, XLA's H200 launch):
the bound checks folded where the tiles cover the array (and kept where the interpreter's wider programs
overhang), and a one-step variadic reduction ignoring the lanes past its row. Checked against numpy."""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

from fusion_harness import _module, run_emitter
from hlo_modules import ARGMAX

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.device import get_device
from fusegen_plugins.emitters.reduction import create_reduction_emitter


_U8_SUM = """
HloModule t
add {{
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT s = s32[] add(a, b)
}}
fused {{
  p = u8[{rows},{cols}] parameter(0)
  w = s32[{rows},{cols}] convert(p)
  c = s32[] constant(0)
  ROOT r = s32[{rows}] reduce(w, c), dimensions={{1}}, to_apply=add
}}
ENTRY main {{
  p = u8[{rows},{cols}] parameter(0)
  ROOT f = s32[{rows}] fusion(p), kind=kInput, calls=fused
}}
"""


@pytest.mark.parametrize("rows,cols,exact", [(4096, 512, True), (1000, 510, False), (4093, 512, False)])
def test_row_reduction_on_whole_tiles_has_no_bound_checks(rows, cols, exact):
    """A row reduction whose tiles cover the array exactly (XLA's grid for v_sum_u8: 4096 rows of 512) folds its
    bound checks to constants: no predicated load in the sm_90 PTX (v_sum_u8: 19 -> 14 registers, XLA's 15). A
    ragged tiling keeps them. Exact against numpy's int64 sum, under the interpreter (its wider programs take
    the masked branch of the same source) as on the GPU path."""
    a, f = _module(_U8_SUM.format(rows=rows, cols=cols))
    a = FusionAnalysis.create(f, get_device("h200"))
    x = np.random.default_rng(5).integers(0, 256, (rows, cols)).astype(np.uint8)
    emitted, (out,) = run_emitter(create_reduction_emitter(a), f, [x])
    np.testing.assert_array_equal(out, x.astype(np.int64).sum(axis=1).astype(np.int32))
    (ks,) = emitted.kernels
    assert "EXACT: tl.constexpr = NA % TA == 0 and NB % TB == 0" in ks.source
    ptx = triton_runtime.compile_for_target(ks, pointer_alignment=16).ptx
    predicated = re.findall(r"@%p\d+ ld\.global", ptx)
    assert (not predicated) == exact, predicated[:4]


def test_whole_tile_row_reduction_under_wider_interpreted_programs():
    """1000 rows of 512 are whole tiles at XLA's block (8 rows) but not at the interpreter's wider ones (64 rows
    at 8192 lanes): the constexpr test takes the masked branch there, and the sums stay exact."""
    a, f = _module(_U8_SUM.format(rows=1000, cols=512))
    a = FusionAnalysis.create(f, get_device("h200"))
    (ks,) = create_reduction_emitter(a).emit().kernels
    cx = ks.constexprs
    assert cx["NA"] % (cx["BLOCK"] // (cx["TR"] * cx["TB"])) == 0
    grid, wide = triton_runtime._widened(ks, 16)
    assert wide["NA"] % (wide["BLOCK"] // (wide["TR"] * wide["TB"])) != 0, wide
    x = np.random.default_rng(6).integers(0, 256, (1000, 512)).astype(np.uint8)
    out = np.zeros(1000, np.int32)
    triton_runtime.run_interpreted(ks, [triton_runtime.to_storage(x.reshape(-1), "u8"), out], max_programs=16)
    np.testing.assert_array_equal(out, x.astype(np.int64).sum(axis=1).astype(np.int32))


@pytest.mark.parametrize("rows,cols", [(16, 8), (16, 2), (1000, 16), (8192, 8), (64, 32), (64, 100)])
def test_argmax_of_rows_shorter_than_the_tile_ignores_the_lanes_past_the_row(rows, cols):
    """A variadic row reduction in one step over a row shorter than its tile (an argmax over 8 columns: XLA's
    row reduction, 32 lanes a row) must not fold the lanes past the row: they hold the loads' 0, so an
    all-negative row's max came out 0 (found by an adversarial check). Against numpy on all-negative rows, at
    XLA's block and at the interpreter's wider one."""
    text = ARGMAX.replace("SHAPE", f"{rows},{cols}").replace("OUT", str(rows)).replace("DIM", "1")
    text = text.replace(f"""  v = f32[{rows}] get-tuple-element(red), index=0
  i = s32[{rows}] get-tuple-element(red), index=1
  ROOT t = (f32[{rows}], s32[{rows}]) tuple(v, i)""", "").replace("red = (", "ROOT red = (")
    a, f = _module(text)
    a = FusionAnalysis.create(f, get_device("h200"))
    x = -np.random.default_rng(8).permutation(rows * cols).reshape(rows, cols).astype(np.float32) - 1
    emitted = create_reduction_emitter(a).emit()
    raw = attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in emitted.kernels))
    for em, programs in ((emitted, 16), (raw, None)):
        mx, idx = triton_runtime.run_fusion(em, [x], f, interpret_max_programs=programs)
        np.testing.assert_array_equal(mx, x.max(axis=1))
        np.testing.assert_array_equal(idx, x.argmax(axis=1))
    if (rows, cols) == (16, 8):  # the flag-carrying combine compiles for the GPU too
        assert "_valid" in emitted.kernels[0].source
        assert ".target sm_90a" in triton_runtime.compile_for_target(emitted.kernels[0]).ptx
