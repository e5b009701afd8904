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


# --- rule 3: indexing of scan and of nested runtime variables --------------------------------------
_SCAN = """HloModule m

add {
  in = f32[] parameter(0)
  carry = f32[] parameter(1)
  add = f32[] add(in, carry)
  ROOT t = (f32[], f32[]) tuple(add, add)
}

ENTRY e {
  p0 = f32[100] parameter(0)
  p1 = f32[] parameter(1)
  ROOT scan = (f32[100], f32[]) scan(p0, p1), dimensions={0}, num_carries=1, is_associative=true, to_apply=add
}
"""

_SCAN2 = """HloModule m

body {
  a = f32[] parameter(0)
  b = s32[] parameter(1)
  c0 = f32[] parameter(2)
  c1 = s32[] parameter(3)
  s = f32[] add(a, c0)
  t = s32[] add(b, c1)
  ROOT r = (f32[], s32[], f32[], s32[]) tuple(s, t, s, t)
}

ENTRY e {
  x = f32[8,16] parameter(0)
  y = s32[8,16] parameter(1)
  i0 = f32[] parameter(2)
  i1 = s32[] parameter(3)
  ROOT scan = (f32[8,16], s32[8,16], f32[], s32[]) scan(x, y, i0, i1), dimensions={1}, num_carries=2, to_apply=body
}
"""


@pytest.mark.parametrize("text, output_id, expected", [
    # array result: the input at its own index, the carry as a scalar
    (_SCAN, 0, "operand id = 0 (d0) -> (d0), domain: d0 in [0, 99]\noperand id = 1 (d0) -> (), domain: d0 in [0, 99]\n"),
    # scalar result (the carry): every operand as a scalar
    (_SCAN, 1, "operand id = 0 () -> ()\noperand id = 1 () -> ()\n"),
    (_SCAN2, 1, "operand id = 0 (d0, d1) -> (d0, d1), domain: d0 in [0, 7], d1 in [0, 15]\n"
                "operand id = 1 (d0, d1) -> (d0, d1), domain: d0 in [0, 7], d1 in [0, 15]\n"
                "operand id = 2 (d0, d1) -> (), domain: d0 in [0, 7], d1 in [0, 15]\n"
                "operand id = 3 (d0, d1) -> (), domain: d0 in [0, 7], d1 in [0, 15]\n"),
    (_SCAN2, 3, "".join(f"operand id = {i} () -> ()\n" for i in range(4))),
])
def test_scan_output_to_input_indexing(text, output_id, expected):
    """``ComputeOutputToInputScanOpIndexing`` (``xla/hlo/analysis/indexing_analysis.cc``; ``ScanOp`` in
    ``indexing_analysis_test.cc``): operands are inputs then ``num_carries`` carries."""
    from fusegen.indexing.analysis import compute_output_to_input_indexing

    m = parse_module(text, "scan.hlo")
    assert compute_output_to_input_indexing(m.entry.root, output_id).to_string() == expected


_DS_OF_DS = """HloModule m

fused {
  p0 = f32[100,60] parameter(0)
  p1 = s32[] parameter(1)
  p2 = s32[] parameter(2)
  ds1 = f32[50,50] dynamic-slice(p0, p1, p2), dynamic_slice_sizes={50,50}
  p3 = s32[] parameter(3)
  p4 = s32[] parameter(4)
  ROOT ds2 = f32[10,20] dynamic-slice(ds1, p3, p4), dynamic_slice_sizes={10,20}
}

ENTRY e {
  a = f32[100,60] parameter(0)
  b = s32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  f = s32[] parameter(4)
  ROOT fusion = f32[10,20] fusion(a, b, c, d, f), kind=kLoop, calls=fused
}
"""


def test_dynamic_slice_of_dynamic_slice_keeps_nested_runtime_variables(tmp_path):
    """``ComposeOperandIndexing`` (``indexing_analysis.cc``): the records are the outer slice's starts (``p3``,
    ``p4``), then the inner slice's (``p1``, ``p2``), whose maps from the fusion's output are composed with the
    outer map and so keep its runtime variables and their constraints; the composed map numbers its runtime
    variables the inner slice's first (``ComposeIndexingMaps``). ``--json`` details keep them whole."""
    import json

    from click.testing import CliRunner

    from fusegen.cli.main import cli

    p = tmp_path / "dsds.hlo"
    p.write_text(_DS_OF_DS)
    res = CliRunner().invoke(cli, ["indexing", str(p), "--instruction", "fusion", "--output-to-input"])
    assert res.exit_code == 0, res.output
    dom = "domain: d0 in [0, 9], d1 in [0, 19]"
    nested = f"(d0, d1){{rt0, rt1}} -> (), {dom}, rt0 in [0, 40], rt1 in [0, 30], d0 + rt0 in [0, 49], d1 + rt1 in [0, 49]"
    first = res.output.split("operand id = 1")[0]
    assert first == (f"operand id = 0 (d0, d1){{rt0, rt1, rt2, rt3}} -> (d0 + rt0 + rt2, d1 + rt1 + rt3), {dom}, "
                     "rt0 in [0, 50], rt1 in [0, 10], rt2 in [0, 40], rt3 in [0, 30]\nruntime variables:\n\n"
                     f"rt0: parameter(3); (d0, d1) -> (), {dom}\nrt1: parameter(4); (d0, d1) -> (), {dom}\n"
                     f"rt2: parameter(1); {nested}\nrt3: parameter(2); {nested}\n")
    res = CliRunner().invoke(cli, ["indexing", str(p), "--instruction", "fusion", "--output-to-input", "--json"])
    rts = json.loads(res.output)["details"][0][0]["runtime_variables"]
    assert [(r["instruction"], r["map"]) for r in rts] == [
        ("parameter(3)", f"(d0, d1) -> (), {dom}"), ("parameter(4)", f"(d0, d1) -> (), {dom}"),
        ("parameter(1)", nested), ("parameter(2)", nested)]


def test_unknown_indexing_prints_as_xla(tmp_path):
    """``HloInstructionIndexing::ToString`` prints an undefined map as ``unknown indexing`` (a sort has no
    indexing); ``--json`` says the same."""
    import json

    from click.testing import CliRunner

    from fusegen.cli.main import cli

    p = tmp_path / "sort.hlo"
    p.write_text("HloModule m\nlt {\n  a = f32[] parameter(0)\n  b = f32[] parameter(1)\n"
                 "  ROOT c = pred[] compare(a, b), direction=LT\n}\nENTRY e {\n  p0 = f32[16] parameter(0)\n"
                 "  ROOT s = f32[16] sort(p0), dimensions={0}, to_apply=lt\n}\n")
    res = CliRunner().invoke(cli, ["indexing", str(p), "--instruction", "s", "--output-to-input"])
    assert res.output == "operand id = 0 unknown indexing\n"
    res = CliRunner().invoke(cli, ["indexing", str(p), "--instruction", "s", "--output-to-input", "--json"])
    assert json.loads(res.output)["operands"] == [["unknown indexing"]]
