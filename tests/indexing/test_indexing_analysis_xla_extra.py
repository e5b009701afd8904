"""More of XLA's ``indexing_analysis_test.cc`` expectations (ops and fusions the shared corpus selection leaves
out: window dilation, variadic reduce-window, convolution padding/stride/rhs dilation/batch groups, reverse,
dot with several batch and contracting dims, select's scalar predicate, an unsupported op inside a fusion,
runtime variables through pad and out of range constants, all-gather into dot), compared semantically."""

from __future__ import annotations

import pytest

from fusegen.hlo.parser import parse_module
from fusegen.indexing.analysis import (
    FusionAdaptor, compute_grouped_output_to_input_indexing, compute_input_to_output_indexing,
    compute_output_to_input_indexing,
)
from fusegen.indexing.analysis_conformance import find_instruction, parse_expected_entry, sets_equal, \
    split_instruction_text

MAX = "max {\n p0 = f32[] parameter(0)\n p1 = f32[] parameter(1)\n ROOT max = f32[] maximum(p0, p1)\n}\n"



def conv(out: str, window: str, lhs: str = "1,12,10,4", rhs: str = "4,3,5,8", extra: str = "") -> str:
    """The convolution module XLA's convolution tests share: ``p0 * p1 -> out`` with ``window``."""
    return (f"HloModule m\nENTRY e {{\n  p0 = f32[{lhs}] parameter(0)\n  p1 = f32[{rhs}] parameter(1)\n"
            f"  ROOT conv = f32[{out}] convolution(p0, p1), window={{{window}}}, dim_labels=b01f_i01o->b01f{extra}\n}}")


# (name, hlo, direction, id, expected ``HloInstructionIndexing::ToString``)
CASES = [
    ("ReduceWindowOp_WindowDilation", "HloModule m\n" + MAX + """ENTRY e {
      c_inf = f32[] constant(-inf)
      p0 = f32[7, 3] parameter(0)
      ROOT reduce-window = f32[4, 3] reduce-window(p0, c_inf), window={size=2x1 pad=0_0x0_0 rhs_dilate=3x1}, to_apply=max
    }""", "o2i", 0, """operand id = 0 (d0, d1)[s0] -> (d0 + s0 * 3, d1), domain: d0 in [0, 3], d1 in [0, 2], s0 in [0, 1]
     operand id = 1 (d0, d1) -> (), domain: d0 in [0, 3], d1 in [0, 2]"""),
    ("ReduceWindowOp_Variadic", """HloModule m
    combiner {
      a0 = f32[] parameter(0)
      a1 = s32[] parameter(1)
      b0 = f32[] parameter(2)
      b1 = s32[] parameter(3)
      add0 = f32[] add(a0, b0)
      add1 = s32[] add(a1, b1)
      ROOT sum2 = (f32[], s32[]) tuple(add0, add1)
    }
    ENTRY e {
      c_f32 = f32[] constant(-inf)
      c_s32 = s32[] constant(10)
      p0 = f32[2, 3] parameter(0)
      p1 = s32[2, 3] parameter(1)
      ROOT reduce-window = (f32[1, 2], s32[1, 2]) reduce-window(p0, p1, c_f32, c_s32), window={size=2x2 pad=0_0x0_0}, to_apply=combiner
    }""", "o2i", 1, """operand id = 0 (d0, d1)[s0, s1] -> (s0, d1 + s1), domain: d0 in [0, 0], d1 in [0, 1], s0 in [0, 1], s1 in [0, 1]
     operand id = 1 (d0, d1)[s0, s1] -> (s0, d1 + s1), domain: d0 in [0, 0], d1 in [0, 1], s0 in [0, 1], s1 in [0, 1]
     operand id = 2 (d0, d1) -> (), domain: d0 in [0, 0], d1 in [0, 1]
     operand id = 3 (d0, d1) -> (), domain: d0 in [0, 0], d1 in [0, 1]"""),
    ("ConvolutionOp_NoPadding", conv("1,10,6,8", "size=3x5 pad=0_0x0_0"), "o2i", 0, """operand id = 0 (d0, d1, d2, d3)[s0, s1, s2] -> (0, d1 + s0, d2 + s1, s2), domain: d0 in [0, 0],
     d1 in [0, 9], d2 in [0, 5], d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]
     operand id = 1 (d0, d1, d2, d3)[s0, s1, s2] -> (s2, s0, s1, d3), domain: d0 in [0, 0], d1 in [0, 9], d2 in [0, 5],
     d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]"""),
    ("ConvolutionOp_PaddingAndWindowStride", conv("1,6,5,8", "size=3x5 stride=2x2 pad=1_1x2_2"), "o2i", 0, """operand id = 0 (d0, d1, d2, d3)[s0, s1, s2] -> (0, d1 * 2 + s0 - 1, d2 * 2 + s1 - 2, s2), domain:
     d0 in [0, 0], d1 in [0, 5], d2 in [0, 4], d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3],
     d1 * 2 + s0 in [1, 12], d2 * 2 + s1 in [2, 11]
     operand id = 1 (d0, d1, d2, d3)[s0, s1, s2] -> (s2, s0, s1, d3), domain: d0 in [0, 0], d1 in [0, 5], d2 in [0, 4],
     d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]"""),
    ("ConvolutionOp_RhsDilation", conv("1,8,2,8", "size=3x5 pad=0_0x0_0 rhs_dilate=2x2"), "o2i", 0, """operand id = 0 (d0, d1, d2, d3)[s0, s1, s2] -> (0, d1 + s0 * 2, d2 + s1 * 2, s2), domain: d0 in [0, 0],
     d1 in [0, 7], d2 in [0, 1], d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]
     operand id = 1 (d0, d1, d2, d3)[s0, s1, s2] -> (s2, s0, s1, d3), domain: d0 in [0, 0], d1 in [0, 7], d2 in [0, 1],
     d3 in [0, 7], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]"""),
    ("ConvolutionOp_BatchGroups", conv("2,10,6,21", "size=3x5 pad=0_0x0_0", "14,12,10,4", "4,3,5,21", ", batch_group_count=7"), "o2i", 0, """operand id = 0 (d0, d1, d2, d3)[s0, s1, s2, s3] -> (d0 + s3 * 2, d1 + s0, d2 + s1, s2), domain:
     d0 in [0, 1], d1 in [0, 9], d2 in [0, 5], d3 in [0, 20], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3], s3 in [0, 6]
     operand id = 1 (d0, d1, d2, d3)[s0, s1, s2] -> (s2, s0, s1, d3), domain: d0 in [0, 1], d1 in [0, 9], d2 in [0, 5],
     d3 in [0, 20], s0 in [0, 2], s1 in [0, 4], s2 in [0, 3]"""),
    ("ReverseOp", """HloModule m
    ENTRY e {
      p0 = f32[1, 17, 9, 9] parameter(0)
      ROOT reverse = f32[1, 17, 9, 9] reverse(p0), dimensions={1, 2}
    }""", "both", 0, """operand id = 0 (d0, d1, d2, d3) -> (d0, -d1 + 16, -d2 + 8, d3), domain: d0 in [0, 0], d1 in [0, 16],
     d2 in [0, 8], d3 in [0, 8]"""),
    ("DotOp", """HloModule m
    ENTRY e {
      p0 = f32[4, 38, 17, 11, 18, 10] parameter(0)
      p1 = f32[17, 10, 16, 18, 22, 38] parameter(1)
      ROOT dot = f32[10, 38, 4, 11, 16, 22] dot(p0, p1), lhs_batch_dims={5,1}, rhs_batch_dims={1,5},
        lhs_contracting_dims={4,2}, rhs_contracting_dims={3,0}
    }""", "o2i", 0, """operand id = 0 (d0, d1, d2, d3, d4, d5)[s0, s1] -> (d2, d1, s1, d3, s0, d0), domain: d0 in [0, 9],
     d1 in [0, 37], d2 in [0, 3], d3 in [0, 10], d4 in [0, 15], d5 in [0, 21], s0 in [0, 17], s1 in [0, 16]
     operand id = 1 (d0, d1, d2, d3, d4, d5)[s0, s1] -> (s1, d0, d4, s0, d5, d1), domain: d0 in [0, 9], d1 in [0, 37],
     d2 in [0, 3], d3 in [0, 10], d4 in [0, 15], d5 in [0, 21], s0 in [0, 17], s1 in [0, 16]"""),
    ("FusionWithUnsupportedOp", """HloModule m
    fused_computation {
      p0 = f32[20, 20] parameter(0)
      p1 = f32[4,4] parameter(1)
      p2 = f32[4,3] parameter(2)
      lhs = f32[4,3] triangular-solve(f32[4,4] p1, f32[4,3] p2), left_side=true, lower=true, transpose_a=NO_TRANSPOSE, unit_diagonal=true
      rhs = f32[4, 3] slice(f32[20, 20] p0), slice={[0:20:6], [0:5:2]}
      ROOT add = f32[4, 3] add(lhs, rhs)
    }
    ENTRY e {
      p0 = f32[20, 20] parameter(0)
      p1 = f32[4, 4] parameter(1)
      p2 = f32[4, 3] parameter(2)
      ROOT fusion = f32[4, 3] fusion(p0, p1, p2), kind=kLoop, calls=fused_computation
    }""", "o2i", 0, """operand id = 0 (d0, d1) -> (d0 * 6, d1 * 2), domain: d0 in [0, 3], d1 in [0, 2]
     operand id = 1 unknown indexing operand id = 2 unknown indexing"""),
    ("BroadcastingElementwise", """HloModule m
    ENTRY e {
      p0 = pred[] parameter(0)
      p1 = f32[1000, 1000] parameter(1)
      p2 = f32[1000, 1000] parameter(2)
      ROOT select = f32[1000, 1000] select(p0, p1, p2)
    }""", "o2i", 0, """operand id = 0 (d0, d1) -> (), domain: d0 in [0, 999], d1 in [0, 999]
     operand id = 1 (d0, d1) -> (d0, d1), domain: d0 in [0, 999], d1 in [0, 999]
     operand id = 2 (d0, d1) -> (d0, d1), domain: d0 in [0, 999], d1 in [0, 999]"""),
    ("FusionWithRTVarsSimplification_ScalarConstantOutsideOfRangeIsKept", """HloModule m
    fused_computation {
      p0 = s32[100] parameter(0)
      offset = s64[] constant(99)
      ROOT dynamic-slice = s32[10] dynamic-slice(p0, offset), dynamic_slice_sizes={10}
    }
    ENTRY main {
      p0 = s32[100] parameter(0)
      ROOT fusion = s32[10] fusion(p0), kind=kInput, calls=fused_computation
    }""", "o2i", 0, """operand id = 0 (d0){rt0} -> (d0 + rt0), domain: d0 in [0, 9], rt0 in [0, 90]
     runtime variables: rt0: constant(99); (d0) -> (), domain: d0 in [0, 9]"""),
    ("FusionOpWithPadAndDynamicSlice", """HloModule m
    fused_computation {
      bitcast = s32[1,4096]{1,0} parameter(0)
      constant = s32[] constant(0)
      pad = s32[1,8192]{1,0} pad(bitcast, constant), padding=0_0x4096_0
      slice = s32[1]{0} parameter(1)
      bitcast.4 = s32[] bitcast(slice)
      ROOT dynamic-slice = s32[1,4096]{1,0} dynamic-slice(pad, constant, bitcast.4), dynamic_slice_sizes={1,4096}
    }
    ENTRY main {
      param_0 = s32[1,4096]{1,0} parameter(0)
      param_1 = s32[1]{0} parameter(1)
      ROOT fusion = s32[1,4096]{1,0} fusion(param_0, param_1), kind=kInput, calls=fused_computation
    }""", "o2i", 0, """operand id = 0 (d0, d1){rt0} -> (0, d1 + rt0 - 4096), domain: d0 in [0, 0], d1 in [0, 4095],
     rt0 in [0, 4096], d1 + rt0 in [4096, 8191]
     runtime variables: rt0: bitcast.4; (d0, d1) -> (), domain: d0 in [0, 0], d1 in [0, 4095]
     operand id = 1 (d0, d1) -> (0), domain: d0 in [0, 0], d1 in [0, 4095]"""),
    ("AllGatherOp", """HloModule m, replica_count=4
    ENTRY e {
      p0 = f32[128, 128] parameter(0)
      ROOT all-gather = f32[128, 256] all-gather(p0), replica_groups={{0,1}, {2,3}}, dimensions={1}
    }""", "o2i", 0, """operand id = 0 (d0, d1) -> (d0, d1 mod 128), domain: d0 in [0, 127], d1 in [0, 255]
     replica id: (d0, d1) -> (d1 floordiv 128), domain: d0 in [0, 127], d1 in [0, 255]"""),
]


@pytest.mark.parametrize("name,hlo,direction,idx,expected", CASES, ids=[c[0] for c in CASES])
def test_xla_expectation(name, hlo, direction, idx, expected):
    root = parse_module(hlo).entry.root
    want = split_instruction_text(expected)
    got = []
    if direction in ("o2i", "both"):
        got.append(compute_output_to_input_indexing(root, idx))
    if direction in ("i2o", "both"):
        got.append(compute_input_to_output_indexing(root, idx))
    for ind in got:
        assert len(ind) == len(want), ind.to_string(" ")
        for w, g in zip(want, ind.indexing_maps):
            assert sets_equal(w, g), (name, ind.to_string(" "))


ALL_GATHER_DOT = """HloModule m
ENTRY e {
  p0 = f32[%s] parameter(0)
  p1 = f32[256, 128] parameter(1)
  all-gather = f32[128, 256] all-gather(p0), replica_groups={{0,1}}, dimensions={%d}
  ROOT dot = f32[128, 128] dot(all-gather, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""


@pytest.mark.parametrize("shape,gdim,expected", [
    ("64, 256", 0, """(d0, d1)[s0] -> (d0 mod 64, s0), domain: d0 in [0, 127], d1 in [0, 127], s0 in [0, 255]
     replica id: (d0, d1)[s0] -> (d0 floordiv 64), domain: d0 in [0, 127], d1 in [0, 127], s0 in [0, 255]"""),
    ("128, 128", 1, """(d0, d1)[s0] -> (d0, s0 mod 128), domain: d0 in [0, 127], d1 in [0, 127], s0 in [0, 255]
     replica id: (d0, d1)[s0] -> (s0 floordiv 128), domain: d0 in [0, 127], d1 in [0, 127], s0 in [0, 255]"""),
], ids=["GatherNonContractingDim", "GatherContractingDim"])
def test_xla_all_gather_dot_fusion(shape, gdim, expected):
    module = parse_module(ALL_GATHER_DOT % (shape, gdim))
    dot = module.entry.root
    ag = find_instruction(module, "all-gather")
    grouped = compute_grouped_output_to_input_indexing(FusionAdaptor.for_producer_consumer(ag, dot), dot)
    assert sets_equal([parse_expected_entry(expected)], grouped.get_maps(ag.operands[0]))
