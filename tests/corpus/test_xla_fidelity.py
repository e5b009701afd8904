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


# --- rule 4: dispatch of packed-type transposes -------------------------------------------------------
def _transpose_fusion(src: str, dst: str, perm: str):
    text = (f"HloModule m\nfused {{\n  p0 = {src} parameter(0)\n  ROOT t = {dst} transpose(p0), dimensions={{{perm}}}\n}}\n"
            f"ENTRY e {{\n  x = {src} parameter(0)\n  ROOT f = {dst} fusion(x), kind=kLoop, calls=fused\n}}\n")
    return parse_module(text, "transpose.hlo").entry.root


@pytest.mark.parametrize("src, dst, perm, kind, emitter", [
    # transpose_10_s4.hlo and partial_tile_s4.hlo (emitters/tests/transpose/): XLA's own FileCheck lines say
    # "CHECK: xla.loop" and "CHECK-NOT: xla_gpu.allocate_shared" -- GetDescriptionForTiledTransposeEmitter
    # (service/gpu/ir_emission_utils.cc) refuses a 4-bit transpose that moves the minor dim (TODO
    # b/415741994), and the packed transpose needs 10 * vector_size = 80 populated rows and columns
    # (GetPackedTransposeTileSizes), which 64 and 24 are not. A test directory label says kTranspose; the
    # test itself (and XLA) says loop.
    ("s4[64,64]{1,0:E(4)}", "s4[64,64]{1,0:E(4)}", "1,0", "kLoop", None),
    ("s4[24,2,24]{2,1,0:E(4)}", "s4[24,2,24]{2,1,0:E(4)}", "2,1,0", "kLoop", None),
    # transpose_102_s4.hlo: minor dim kept, 4 * 4 bits <= 64 and 4 * 4 * 16 >= 128: the tiled emitter, and
    # "CHECK-NOT: allocate_shared : tensor<256x256xi4>" (not the packed one)
    ("s4[64,16,4]{2,1,0:E(4)}", "s4[16,64,4]{2,1,0:E(4)}", "1,0,2", "kTranspose", "TransposeFusion"),
    # packed_transpose_s4.hlo: "CHECK: xla_gpu.allocate_shared : tensor<256x256xi4>": shmem_dim 32 * 8 = 256
    ("s4[128,256,8,32]{3,2,1,0:E(4)}", "s4[128,32,8,256]{3,2,1,0:E(4)}", "0,3,2,1", "kTranspose", "PackedTranspose"),
    # the same 64x64 transpose of bytes: the refusal is of 4-bit types only (packed: 64 < 10 * 4 fails too,
    # so the minor-dim rule decides: 64 >= 16 on both sides)
    ("s8[64,64]", "s8[64,64]", "1,0", "kTranspose", "PackedTranspose"),
])
def test_packed_type_transpose_dispatch(src, dst, perm, kind, emitter):
    from fusegen.analysis.transpose import choose_transpose_emitter, get_description_for_tiled_transpose_emitter
    from fusegen.device import RTXA6000
    from fusegen.dispatch import get_emitter_fusion_kind
    from fusegen.plugin_manager import PluginManager

    f = _transpose_fusion(src, dst, perm)
    assert get_emitter_fusion_kind(FusionAnalysis.create(f, RTXA6000), PluginManager(autoload=False)).kind == kind
    d = get_description_for_tiled_transpose_emitter(f.fused_computation.root)
    assert (d and choose_transpose_emitter(d)) == emitter


# --- rule 5: GemmFusion --------------------------------------------------------------------------------
def _gemm_fusion(text: str, v2: bool):
    from _backend_helpers import debug, device
    from fusegen.hlo.parser import parse_modules
    from fusegen.passes.pipeline import PassOptions
    from fusegen_plugins.backends import triton_gemm_fusion as gf

    m = parse_modules(text, "gemm.hlo")[0]
    # GemmFusionTest's fixture: triton_gemm_any=false, rewrite size threshold 0, Ampere
    dbg = debug(xla_gpu_triton_gemm_any=False, xla_gpu_gemm_rewrite_size_threshold=0)
    changed = gf.run(m, PassOptions(debug_options=dbg, device=device("a100"), options={"v2": v2}))
    return changed, m


_NON_MAJOR = """HloModule m
ENTRY e {
  p0 = f32[2,2,256,256] parameter(0)
  s0 = f32[1,1,256,256] slice(p0), slice={[0:1], [0:1], [0:256], [0:256]}
  r0 = f32[256,256] reshape(s0)
  p1 = f16[2,2,256,256] parameter(1)
  sout1 = f16[1,1,256,256] slice(p1), slice={[0:1], [0:1], [0:256], [0:256]}
  r1 = f16[256,256] reshape(sout1)
  ROOT d = f32[256,256] dot(r0, r1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_slice_of_a_non_major_fragment_is_not_fused():
    """``DoNotFuseSlicesOfNonMajorFragments`` (gemm_fusion_test.cc): the reshape makes the sliced size-1 dims
    0 and 1 fragments of the dot's dim 0 (GetPropagatedDimOrdersForBitcast groups degenerate dims with the
    most-major fragment), and GetRequirementsIfSupportedOrder (triton_tiling_propagation.cc) refuses a
    sliced fragment that is not the major-most ("Sliced non-major-most fragment."): the slices stay out,
    the rest is a pure matmul, the module is unchanged."""
    changed, _ = _gemm_fusion(_NON_MAJOR, v2=False)
    assert not changed


@pytest.mark.parametrize("slice_dims, fused", [
    ("p0 = f32[2,256,256] parameter(0)\n  s0 = f32[1,256,256] slice(p0), slice={[1:2], [0:256], [0:256]}", True),
    ("p0 = f32[256,2,256] parameter(0)\n  s0 = f32[256,1,256] slice(p0), slice={[0:256], [1:2], [0:256]}", False),
])
def test_only_the_major_most_fragment_may_be_sliced(slice_dims, fused):
    """The same rule read the other way: slicing the major-most (size-1) fragment of the dot's dim 0 is fine; a
    size-1 dim below the 256 one (a fragment of that dim, GetPropagatedDimOrdersForBitcast) is not, and the
    slice stays outside the fusion."""
    text = f"""HloModule m
ENTRY e {{
  {slice_dims}
  r0 = f32[256,256] reshape(s0)
  p1 = f16[256,256] parameter(1)
  c1 = f32[256,256] convert(p1)
  ROOT d = f32[256,256] dot(r0, c1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    changed, m = _gemm_fusion(text, v2=False)
    assert changed
    body = [i.opcode for i in m.entry.root.fused_computation.instructions]
    assert ("slice" in body) == fused, body


_UNHOISTED = """HloModule m
ENTRY e {
  p0 = f32[129] parameter(0)
  c0 = f32[129] convert(p0)
  sl = f32[128] slice(c0), slice={[0:128]}
  bi = f32[16,8] bitcast(sl)
  p1 = f32[8,7] parameter(1)
  ROOT d = f32[16,7] dot(bi, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_v2_fuses_through_an_unhoisted_bitcast():
    """``GemmFusionTestV2.UnhoistedBitcastCanStillBeFused`` (gemm_fusion_test.cc): the bitcast splits the sliced
    dim into both dot dims, which legacy tiling propagation cannot follow (the slice stays out, a pure matmul
    is left: unchanged); GemmFusion v2 tiles through it: ``fusion(parameter, parameter)`` holding convert,
    slice, bitcast and dot."""
    changed, _ = _gemm_fusion(_UNHOISTED, v2=False)
    assert not changed
    changed, m = _gemm_fusion(_UNHOISTED, v2=True)
    root = m.entry.root
    assert changed and root.opcode == "fusion" and [o.opcode for o in root.operands] == ["parameter", "parameter"]
    assert sorted(i.opcode for i in root.fused_computation.instructions if i.opcode != "parameter") == [
        "bitcast", "convert", "dot", "slice"]


@pytest.mark.parametrize("program, unroll, blocks", [
    ("loop_reduce_window_2x2", 4, 16384),   # window of 4 elements <= 8: unrolled
    ("loop_reduce_window_3x3", 1, 65536),   # window of 9 > kMaxReduceWindowSize = 8: not unrolled
    ("loop_concat_11_operands", 1, 1408),   # 11 > kMaxConcatArgumentsForUnrolling = 10 operands
])
def test_may_cause_performance_drop_if_unrolled(program, unroll, blocks):
    """``MayCausePerformanceDropIfUnrolled`` (gpu_fusible.cc, called by ComputeLoopFusionConfig): a reduce-window
    blocks the unroll only when its window holds more than 8 elements, a concatenate when it has more than 10
    operands. The launches are XLA's own (tests/data/launch_extra, deviceless H200 compiles)."""
    from pathlib import Path

    from fusegen.hlo.parser import parse_file

    m = parse_file(Path(__file__).parents[1] / "data" / "launch_extra" / f"{program}.h200_opt.hlo")
    fusion = next(i for i in m.entry.instructions if i.opcode == "fusion")
    geo = analysis_loop_geometry(FusionAnalysis.create(fusion, H200))
    assert (geo.unroll, geo.threads, geo.num_blocks) == (unroll, 128, blocks)


def test_s4_transposes_dispatch_as_xlas_h200_compile():
    """XLA's own compile of the lit tests' s4 transposes (tests/data/launch_extra/transpose_*: jax 0.10.2,
    deviceless H200): ``transpose_10_s4`` and the partial-tile ``s4[24,2,24]`` come out as ``kLoop`` fusions
    (the loop emitter: 2 elements a thread, 16 and 5 blocks), the 1024x1024 packed transpose and
    ``transpose_102_s4`` as ``kInput`` (the transpose emitter). fusegen dispatches each the same way and
    launches it the same way."""
    import csv
    from pathlib import Path

    from fusegen.dispatch import get_emitter_fusion_kind
    from fusegen.hlo.parser import parse_file
    from fusegen.plugin_manager import PluginManager

    extra = Path(__file__).parents[1] / "data" / "launch_extra"
    rows = [r for r in csv.DictReader(open(extra / "LAUNCH.tsv"), delimiter="\t")
            if r["module_file"].startswith("transpose_")]
    assert len(rows) == 4
    pm = PluginManager(autoload=False)
    for r in rows:
        m = parse_file(extra / r["module_file"])
        fusion = next(i for i in m.entry.instructions if i.opcode == "fusion")
        kind = get_emitter_fusion_kind(FusionAnalysis.create(fusion, H200), pm).kind
        assert kind == {"kLoop": "kLoop", "kInput": "kTranspose"}[r["fusion_kind"]], (r["module_file"], kind)


@pytest.mark.parametrize("concat, operand_dim", [
    # DoNotFuseConcatOnContractingDimension (GemmFusionTestV2): ShouldFuseConcat refuses a concat along K
    ("p0 = f32[128,8] parameter(0)\n  p1 = f32[128,8] parameter(1)\n"
     "  concat = f32[128,16] concatenate(p0, p1), dimensions={1}", "128,16"),
    # DoNotFuseIndivisibleConcat (GemmFusionTestV2): 65 is no multiple of kMinConcatFragmentSize = 64
    ("p0 = f32[65,16] parameter(0)\n  p1 = f32[64,16] parameter(1)\n"
     "  concat = f32[129,16] concatenate(p0, p1), dimensions={0}", "129,16"),
])
def test_v2_fuses_a_pure_matmul_with_the_concat_outside(concat, operand_dim):
    """CreateDotFusionV2 (gemm_fusion.cc) returns its tileable fusion without CreateDotFusion's "Pure Matmul"
    refusal (xla_gpu_triton_gemm_any=false): ``fusion(concatenate, parameter)``; v1 leaves the module alone."""
    m_ = operand_dim.split(",")[0]
    text = f"""HloModule m
ENTRY e {{
  {concat}
  p2 = f32[16,64] parameter(2)
  ROOT d = f32[{m_},64] dot(concat, p2), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
}}
"""
    assert not _gemm_fusion(text, v2=False)[0]
    changed, m = _gemm_fusion(text, v2=True)
    assert changed and [o.opcode for o in m.entry.root.operands] == ["concatenate", "parameter"]


def test_slice_to_a_degenerate_dim_is_not_fused():
    """``SliceToDegenerateIsSkipped`` (gemm_fusion_test.cc): the slice's one dim is reshaped away to a scalar
    (GetPropagatedDimOrdersForBitcast gives a degenerate dim no fragment when there is none to join), so its
    slicing cannot be tiled: the fusion's operand is the slice, the broadcast and reshape are inside."""
    text = """HloModule m
ENTRY e {
  p = f32[3] parameter(0)
  s = f32[1] slice(p), slice={[2:3]}
  r = f32[] reshape(s)
  b = f32[3,3] broadcast(r), dimensions={}
  ROOT d = f32[3,3] dot(b, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""
    changed, m = _gemm_fusion(text, v2=False)
    assert changed and [o.opcode for o in m.entry.root.operands] == ["slice"]
    assert "slice" not in [i.opcode for i in m.entry.root.fused_computation.instructions]
