"""Issue 23's rules, each pinned by cases read off XLA's code or its tests (the function and line cited).

Source lines refer to openxla/xla at the snapshot the shared corpus was built from (183fa00, see
``../shared/corpus/xla/cases/README.md``); where a line moved between snapshots the function name is the
anchor.
"""

from __future__ import annotations

import pytest

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen.launch import analysis_loop_geometry
from fusegen.device import H200
from fusegen.hlo.parser import parse_module


def _loop_fusion(root_types: list[str], dims: str, body: str, params: str) -> str:
    """A module whose entry is one kLoop fusion with one root per ``root_types`` (a tuple when more)."""
    shapes = [f"{t}[{dims}]" for t in root_types]
    out = shapes[0] if len(shapes) == 1 else "(" + ", ".join(shapes) + ")"
    return f"""HloModule m

%fused (p0: s32[{dims}], p1: s32[{dims}]) -> {out} {{
  %p0 = s32[{dims}] parameter(0)
  %p1 = s32[{dims}] parameter(1)
{body}
}}

ENTRY %main (a: s32[{dims}], b: s32[{dims}]) -> {out} {{
  %a = s32[{dims}] parameter(0)
  %b = s32[{dims}] parameter(1)
  ROOT %loop_fusion = {out} fusion(%a, %b), kind=kLoop, calls=%fused
}}
"""


# jnp.floor_divide / jnp.remainder of s32 as XLA fuses them (remainder, divide, sign, shift, select).
_DIVMOD = """  %rem = s32[{d}] remainder(%p0, %p1)
  %zero = s32[] constant(0)
  %bz = s32[{d}] broadcast(%zero), dimensions={{}}
  %ne = pred[{d}] compare(%rem, %bz), direction=NE
  %sr = s32[{d}] sign(%rem)
  %sd = s32[{d}] sign(%p1)
  %neq = pred[{d}] compare(%sr, %sd), direction=NE
  %fix = pred[{d}] and(%ne, %neq)
  %fixed = s32[{d}] add(%rem, %p1)
  %mod = s32[{d}] select(%fix, %fixed, %rem)
  %div = s32[{d}] divide(%p0, %p1)
  %c31 = s32[] constant(31)
  %b31 = s32[{d}] broadcast(%c31), dimensions={{}}
  %sh = s32[{d}] shift-right-arithmetic(%div, %b31)
  ROOT %t = (pred[{d}], s32[{d}], s32[{d}]) tuple(%fix, %mod, %sh)"""


def _geometry(text: str):
    m = parse_module(text, "case.hlo")
    fusion = next(i for i in m.entry.instructions if i.opcode == "fusion")
    return analysis_loop_geometry(FusionAnalysis.create(fusion, H200))


# --- rule 2: loop unroll ------------------------------------------------------------------------
# ComputeLoopFusionConfig (gpu_fusible.cc, the function at the end of the file):
#   unroll = ComputeMaxUnrollFactor(n, 4) when n >= threads_per_core_limit * core_count and nothing may
#   cause a performance drop; then unroll = max(unroll, CeilOfRatio(8, smallest_output_dtype_bits)).
# smallest_output_dtype_bits comes from SmallestBitWidth (hlo_fusion_analysis.cc, anonymous namespace),
# which counts PRED as 8 bits ("shape.element_type() == PRED ? 8 : BitWidth(...)"): a pred root does
# not force 8 elements a thread the way a 1-bit type would.


def test_divmod_multi_output_with_pred_root_unrolls_by_four():
    """The issue's jnp floor_divide + remainder fusion, s32[1024,1024] -> (pred, s32, s32): XLA's thunk
    launches 2048 blocks of 128 threads (512 elements a block)."""
    d = "1024,1024"
    geo = _geometry(_loop_fusion(["pred", "s32", "s32"], d, _DIVMOD.format(d=d), ""))
    assert (geo.unroll, geo.threads, geo.blocks) == (4, 128, (2048, 1))


@pytest.mark.parametrize("dims, unroll, threads, blocks", [
    ("64", 1, 64, 1),          # small: no unroll, and pred needs none (8 bits)
    ("1000,1000", 4, 128, 1954),  # n >= 132 * 2048 and n % 4 == 0: 4
    ("1001,1001", 1, 128, 7829),  # odd n: ComputeMaxUnrollFactor finds no divisor
])
def test_pred_only_root_counts_eight_bits(dims, unroll, threads, blocks):
    body = "  ROOT %c = pred[{d}] compare(%p0, %p1), direction=LT".format(d=dims)
    geo = _geometry(_loop_fusion(["pred"], dims, body, ""))
    assert (geo.unroll, geo.threads, geo.blocks[0]) == (unroll, threads, blocks)


def test_sub_byte_root_still_forces_a_byte_per_thread():
    """``CeilOfRatio(8, 4) = 2``: an s4 root below the unroll threshold still takes 2 elements a thread
    (two nibbles of a byte are written by one thread); a pred root beside it does not lower that."""
    body = """  %c = pred[64] compare(%p0, %p1), direction=LT
  %n = s4[64] convert(%p0)
  ROOT %t = (pred[64], s4[64]) tuple(%c, %n)"""
    geo = _geometry(_loop_fusion(["pred", "s4"], "64", body, ""))
    assert (geo.unroll, geo.threads, geo.blocks) == (2, 32, (1, 1))
