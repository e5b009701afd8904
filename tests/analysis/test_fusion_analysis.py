"""Rule boundaries of fusegen's fusion analysis, on small HLO modules built here.

Each case sits on one side of a threshold of XLA's heuristics (reduction_utils.cc,
ir_emission_utils.cc, hlo_fusion_analysis.cc, emitters/reduction.cc, emitters/transpose.cc) and
asserts XLA's answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fusegen import kinds
from fusegen.analysis.fusion_analysis import FusionAnalysis, FusionAnalysisError
from fusegen.analysis.reduction import (
    ReductionDimensions,
    choose_reduction_emitter,
    get_reduction_kind_and_contiguous_components,
    multi_row_vector_size,
    reduction_is_race_free,
)
from fusegen.analysis.transpose import (
    choose_transpose_emitter,
    get_description_for_tiled_transpose_emitter,
    get_normalized_logical_transpose_shape,
)
from fusegen.device import (
    A100,
    H100,
    H200,
    RTXA6000,
    from_target_config_text,
    get_device,
    model_string,
)
from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter
from fusegen.hlo.parser import parse_module
from fusegen.plugin_manager import PluginError, PluginManager, hookimpl
from fusegen.registry import EmitterFactory, KindMatcher

SHARED = Path(__file__).parents[2].parent / "shared"
CASES = SHARED / "corpus" / "xla" / "cases"

ADD = """
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
"""


@pytest.fixture(scope="module")
def pm():
    return PluginManager(autoload=False)


def fusion_module(body: str, params: list[str], root_shape: str, kind: str = "kLoop", extra: str = "", fusion_attrs: str = ""):
    """A module whose ENTRY root is ``fusion(params...)`` calling ``body``."""
    entry_params = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"p{i}" for i in range(len(params)))
    text = f"""HloModule m
{ADD}{extra}
fused {{
{body}
}}

ENTRY e {{
{entry_params}
  ROOT f = {root_shape} fusion({args}), kind={kind}, calls=fused{fusion_attrs}
}}
"""
    return parse_module(text, "test_analysis.hlo")


def dispatch(module, pm, device=RTXA6000):
    a = FusionAnalysis.create(module.entry.root, device)
    return a, get_emitter_fusion_kind(a, pm)


def reduce_with_epilogue(in_shape: str, out_shape: str, dims: str, layout: str = ""):
    body = f"""  x = {in_shape}{layout} parameter(0)
  c = f32[] constant(0)
  r = {out_shape} reduce(x, c), dimensions={{{dims}}}, to_apply=add
  ROOT n = {out_shape} negate(r)"""
    return fusion_module(body, [in_shape + layout], out_shape)


def reduce_root(in_shape: str, out_shape: str, dims: str, layout: str = ""):
    body = f"""  x = {in_shape}{layout} parameter(0)
  c = f32[] constant(0)
  ROOT r = {out_shape} reduce(x, c), dimensions={{{dims}}}, to_apply=add"""
    return fusion_module(body, [in_shape + layout], out_shape, kind="kInput")


# --- reductions ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "in_shape,out_shape,dims,expected_kind",
    [
        # Row reduction (1, 4, R): race free while R <= 1024*16.
        ("f32[4,16384]", "f32[4]", "1", kinds.REDUCTION),
        ("f32[4,16385]", "f32[4]", "1", kinds.LOOP),
        # Batched row reduction (B, K, R): race free while B <= 8.
        ("f32[8,64,32]", "f32[64]", "0,2", kinds.REDUCTION),
        ("f32[9,64,32]", "f32[64]", "0,2", kinds.LOOP),
        # Column reduction (1, C, K): race free while C <= 32*128.
        ("f32[4096,64]", "f32[64]", "0", kinds.REDUCTION),
        ("f32[4097,64]", "f32[64]", "0", kinds.LOOP),
    ],
)
def test_reduction_race_free_bounds_with_epilogue(in_shape, out_shape, dims, expected_kind, pm):
    a, d = dispatch(reduce_with_epilogue(in_shape, out_shape, dims), pm)
    assert d.kind == expected_kind
    if expected_kind == kinds.LOOP:
        # XLA resets the heroes to the roots after a kLoop decision.
        assert [h.opcode for h in a.heroes] == ["negate"]
        assert a.non_trivial_heroes[0].opcode == "reduce"


def test_race_free_bound_does_not_apply_when_reduce_is_the_root(pm):
    _, d = dispatch(reduce_root("f32[4,16385]", "f32[4]", "1"), pm)
    assert d.kind == kinds.REDUCTION


@pytest.mark.parametrize(
    "dims,expected",
    [
        (ReductionDimensions(True, (8, 1, 16384)), True),
        (ReductionDimensions(True, (8, 1, 16385)), False),
        (ReductionDimensions(True, (9, 1, 16)), False),
        (ReductionDimensions(False, (1, 4096, 7)), True),
        (ReductionDimensions(False, (1, 4097, 7)), False),
    ],
)
def test_reduction_is_race_free(dims, expected):
    assert reduction_is_race_free(dims) is expected


@pytest.mark.parametrize(
    "in_shape,layout,out_shape,dims,expected",
    [
        ("f32[32,64]", "", "f32[32]", "1", ReductionDimensions(True, (1, 32, 64))),
        ("f32[32,64]", "", "f32[64]", "0", ReductionDimensions(False, (1, 32, 64))),
        # Layout-aware: dim 0 is physically minor, so reducing it is a row reduction.
        ("f32[32,64]", "{0,1}", "f32[64]", "0", ReductionDimensions(True, (1, 64, 32))),
        ("f32[8,16,32]", "", "f32[16]", "0,2", ReductionDimensions(True, (8, 16, 32))),
        ("f32[8,16,32]", "", "f32[8,32]", "1", ReductionDimensions(False, (8, 16, 32))),
        ("f32[8,16,32]", "", "f32[]", "0,1,2", ReductionDimensions(True, (1, 1, 4096))),
        ("f32[8,1,32]", "", "f32[1]", "0,2", ReductionDimensions(True, (1, 1, 256))),
    ],
)
def test_row_vs_column(in_shape, layout, out_shape, dims, expected):
    m = reduce_root(in_shape, out_shape, dims, layout)
    r = m.entry.root.fused_computation.root
    assert get_reduction_kind_and_contiguous_components(r) == expected


@pytest.mark.parametrize(
    "in_shape,out_shape,dims,expected_kind",
    [
        ("f32[64,16]", "f32[64]", "1", kinds.REDUCTION),  # 32 % 16 == 0
        ("f32[64,24]", "f32[64]", "1", kinds.LOOP),  # 24 < 32 and 32 % 24 != 0
        ("f32[64,32]", "f32[64]", "1", kinds.REDUCTION),
        ("f32[31,64]", "f32[64]", "0", kinds.LOOP),  # column: major < warp
        ("f32[63,31]", "f32[31]", "0", kinds.LOOP),  # major < 2*warp and minor < warp
        ("f32[64,31]", "f32[31]", "0", kinds.REDUCTION),
        ("f32[127,7]", "f32[7]", "0", kinds.LOOP),  # major < 4*warp and minor < 8
        ("f32[255,2]", "f32[2]", "0", kinds.LOOP),  # major < 8*warp and minor < 3
        ("f32[256,2]", "f32[2]", "0", kinds.REDUCTION),
    ],
)
def test_unnested_reduction_faster_than_elemental(in_shape, out_shape, dims, expected_kind, pm):
    _, d = dispatch(reduce_root(in_shape, out_shape, dims), pm)
    assert d.kind == expected_kind


@pytest.mark.parametrize(
    "in_shape,device,emitter,vector",
    [
        # (1, 1024, 32): vector 2 gives 64 blocks < 84 SMs, halved to 1; 32 <= 32*1 fits.
        ("f32[1024,32]", RTXA6000, "MultiRowReductionFusion", 1),
        # (1, 1024, 64): vector 2 -> 128 blocks >= 84.
        ("f32[1024,64]", RTXA6000, "MultiRowReductionFusion", 2),
        # ... but 128 blocks < 132 SMs on H200, so vector 1 and 64 > 32*1: plain row reduction.
        ("f32[1024,64]", H200, "RowReductionFusion", None),
        # Reduced dimension not a power of two.
        ("f32[1024,48]", RTXA6000, "RowReductionFusion", None),
        ("f32[1024,128]", RTXA6000, "RowReductionFusion", None),
    ],
)
def test_multi_row_vs_row(in_shape, device, emitter, vector, pm):
    a, d = dispatch(reduce_root(in_shape, "f32[1024]", "1"), pm, device)
    assert d.kind == kinds.REDUCTION
    assert multi_row_vector_size(a) == vector
    assert choose_reduction_emitter(a) == emitter


@pytest.mark.parametrize(
    "in_shape,out_shape,emitter",
    [
        ("f32[1024,16]", "f32[16]", "SmallColumnReductionFusion"),
        ("f32[1024,32]", "f32[32]", "SmallColumnReductionFusion"),
        ("f32[1024,24]", "f32[24]", "ColumnReductionFusion"),
        ("f32[1024,33]", "f32[33]", "ColumnReductionFusion"),
    ],
)
def test_small_column(in_shape, out_shape, emitter, pm):
    a, d = dispatch(reduce_root(in_shape, out_shape, "0"), pm)
    assert d.kind == kinds.REDUCTION
    assert choose_reduction_emitter(a) == emitter


def test_multi_output_reductions_must_be_compatible(pm):
    body = """  x = f32[64,128] parameter(0)
  c = f32[] constant(0)
  r0 = f32[64] reduce(x, c), dimensions={1}, to_apply=add
  r1 = f32[128] reduce(x, c), dimensions={0}, to_apply=add
  ROOT t = (f32[64], f32[128]) tuple(r0, r1)"""
    _, d = dispatch(fusion_module(body, ["f32[64,128]"], "(f32[64], f32[128])"), pm)
    assert (d.kind, d.decided_by) == (kinds.LOOP, "several-roots")
    body_ok = """  x = f32[64,128] parameter(0)
  c = f32[] constant(0)
  r0 = f32[64] reduce(x, c), dimensions={1}, to_apply=add
  e = f32[64,128] exponential(x)
  ROOT t = (f32[64], f32[64,128]) tuple(r0, e)"""
    _, d = dispatch(fusion_module(body_ok, ["f32[64,128]"], "(f32[64], f32[64,128])"), pm)
    assert d.kind == kinds.REDUCTION  # side output with as many elements as the reduce input


# --- transposes ---------------------------------------------------------------------------


def transpose_inst(operand: str, out: str, dims: str):
    body = f"""  x = {operand} parameter(0)
  ROOT t = {out} transpose(x), dimensions={{{dims}}}"""
    m = fusion_module(body, [operand], out)
    return m, m.entry.root.fused_computation.root


@pytest.mark.parametrize(
    "operand,out,dims,expected",
    [
        ("f32[16,16]", "f32[16,16]", "1,0", ((16, 16), (1, 0))),
        ("f32[16,15]", "f32[15,16]", "1,0", None),  # 15 < 16 and product < 64*128
        ("f32[8,1024]", "f32[1024,8]", "1,0", ((1024, 8), (1, 0))),  # both >= 8, product == 8192
        ("f32[8,1023]", "f32[1023,8]", "1,0", None),  # product 8184
        ("f32[7,2048]", "f32[2048,7]", "1,0", None),
        # "021": bits*minor <= 64 and bits*minor*min(...) >= 128.
        ("f32[64,32,2]", "f32[32,64,2]", "1,0,2", ((32, 64, 2), (1, 0, 2))),
        ("f32[64,32,3]", "f32[32,64,3]", "1,0,2", None),  # 96 bits > 64
        ("f32[2,2,2]", "f32[2,2,2]", "1,0,2", ((2, 2, 2), (1, 0, 2))),  # 64*2 == 128
        ("f16[2,2,2]", "f16[2,2,2]", "1,0,2", None),  # 32*2 == 64 < 128
        # 4-bit types only through the packed emitter.
        ("s4[64,64]", "s4[64,64]", "1,0", None),
        ("s4[256,256]", "s4[256,256]", "1,0", ((256, 256), (1, 0))),
        # Degenerate dims dropped, adjacent dims grouped.
        ("f32[32,1,16,2]", "f32[16,1,32,2]", "2,1,0,3", ((16, 32, 2), (1, 0, 2))),
        ("f32[32,32,64]", "f32[64,32,32]", "2,0,1", ((64, 1024), (1, 0))),
        # Identity after normalization: not a transpose.
        ("f32[1,64]", "f32[64,1]", "1,0", None),
    ],
)
def test_tiled_transpose_thresholds(operand, out, dims, expected):
    _, t = transpose_inst(operand, out, dims)
    d = get_description_for_tiled_transpose_emitter(t)
    if expected is None:
        assert d is None
    else:
        assert d is not None and (d.dimensions, d.permutation) == expected


@pytest.mark.parametrize(
    "operand,out,dims,emitter",
    [
        ("bf16[64,64]", "bf16[64,64]", "1,0", "PackedTranspose"),
        ("bf16[64,16]", "bf16[16,64]", "1,0", "TransposeFusion"),  # 16 populated columns < 20
        ("f32[64,64]", "f32[64,64]", "1,0", "TransposeFusion"),  # 32-bit: never packed
        ("s8[2,128,128]", "s8[2,128,128]", "0,2,1", "PackedTranspose"),
    ],
)
def test_packed_vs_plain_transpose(operand, out, dims, emitter, pm):
    m, _ = transpose_inst(operand, out, dims)
    a, d = dispatch(m, pm)
    assert d.kind == kinds.TRANSPOSE
    assert choose_transpose_emitter(a.tiled_transpose) == emitter


def test_normalized_logical_transpose_shape():
    from fusegen.hlo.ir import Shape

    assert get_normalized_logical_transpose_shape(Shape("f32", (100, 11, 12, 8)), Shape("f32", (8, 12, 100, 11)), (3, 2, 0, 1)) == ((8, 12, 1100), (2, 1, 0))
    assert get_normalized_logical_transpose_shape(Shape("f32", (10, 1, 11, 32)), Shape("f32", (32, 1, 10, 11)), (3, 1, 0, 2)) == ((32, 110), (1, 0))


def test_transpose_hero_through_elementwise_and_inconsistent_roots(pm):
    body = """  x = f32[64,32] parameter(0)
  t = f32[32,64] transpose(x), dimensions={1,0}
  y = f32[32,64] parameter(1)
  ROOT a = f32[32,64] add(t, y)"""
    a, d = dispatch(fusion_module(body, ["f32[64,32]", "f32[32,64]"], "f32[32,64]"), pm)
    assert d.kind == kinds.TRANSPOSE and a.heroes[0].name == "t"
    # A second root that is not a bitcast of the transpose input makes the heroes inconsistent.
    body2 = """  x = f32[64,32] parameter(0)
  t = f32[32,64] transpose(x), dimensions={1,0}
  y = f32[16,16] parameter(1)
  n = f32[16,16] negate(y)
  ROOT r = (f32[32,64], f32[16,16]) tuple(t, n)"""
    _, d = dispatch(fusion_module(body2, ["f32[64,32]", "f32[16,16]"], "(f32[32,64], f32[16,16])"), pm)
    assert (d.kind, d.decided_by) == (kinds.LOOP, "several-roots")


# --- concatenate, scatter, sort, stamps ---------------------------------------------------------


@pytest.mark.parametrize("n,expected", [(4, kinds.CONCATENATE), (5, kinds.LOOP)])
def test_concatenate_operand_limit(n, expected, pm):
    params = "\n".join(f"  c{i} = f32[32] parameter({i})" for i in range(n))
    names = ", ".join(f"c{i}" for i in range(n))
    body = f"""{params}
  cat = f32[{32 * n}] concatenate({names}), dimensions={{0}}
  ROOT m = f32[{32 * n}] multiply(cat, cat)"""
    a, d = dispatch(fusion_module(body, ["f32[32]"] * n, f"f32[{32 * n}]"), pm)
    assert (d.kind, d.decided_by) == (expected, "concatenate" if expected == kinds.CONCATENATE else "loop")
    assert a.heroes[0].opcode == ("concatenate" if expected == kinds.CONCATENATE else "multiply")


def test_scatter_and_sort_roots(pm):
    body = """  op = f32[10,5] parameter(0)
  idx = s32[24,1] parameter(1)
  upd = f32[24,5] parameter(2)
  ROOT s = f32[10,5] scatter(op, idx, upd), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add"""
    _, d = dispatch(fusion_module(body, ["f32[10,5]", "s32[24,1]", "f32[24,5]"], "f32[10,5]"), pm)
    assert (d.kind, d.decided_by) == (kinds.SCATTER, "scatter-root")
    lt = """
lt {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
"""
    body = """  x = f32[16,128] parameter(0)
  ROOT s = f32[16,128] sort(x), dimensions={1}, to_apply=lt"""
    # kCustom without a backend config is not a stamp: the sort root decides.
    _, d = dispatch(fusion_module(body, ["f32[16,128]"], "f32[16,128]", kind="kCustom", extra=lt), pm)
    assert (d.kind, d.decided_by) == (kinds.SORT, "sort-root")


@pytest.mark.parametrize(
    "stamp,expected",
    [
        ("__triton_gemm", kinds.TRITON),
        ("__triton_nested_gemm_fusion", kinds.TRITON),
        ("__triton_collective", kinds.TRITON),
        ("__cudnn$fusion", kinds.CUDNN),
        ("__custom_fusion", kinds.CUSTOM_FUSION),
    ],
)
def test_stamps_decide_before_heroes(stamp, expected, pm):
    body = """  x = f32[64,128] parameter(0)
  c = f32[] constant(0)
  ROOT r = f32[64] reduce(x, c), dimensions={1}, to_apply=add"""
    bc = ', backend_config={"fusion_backend_config":{"kind":"%s"}}' % stamp
    _, d = dispatch(fusion_module(body, ["f32[64,128]"], "f32[64]", kind="kCustom", fusion_attrs=bc), pm)
    assert (d.kind, d.decided_by) == (expected, "backend-config-stamp")


def test_producer_consumer_prefers_consumer_config():
    text = """HloModule m
f1 {
  x = f32[64] parameter(0)
  ROOT n = f32[64] negate(x)
}
f2 {
  x = f32[64] parameter(0)
  ROOT e = f32[64] exponential(x)
}
ENTRY e {
  p = f32[64] parameter(0)
  a = f32[64] fusion(p), kind=kLoop, calls=f1, backend_config={"fusion_backend_config":{"kind":"__triton"}}
  ROOT b = f32[64] fusion(a), kind=kCustom, calls=f2, backend_config={"fusion_backend_config":{"kind":"__cudnn$fusion"}}
}
"""
    m = parse_module(text)
    b = m.entry.root
    a = FusionAnalysis.create_producer_consumer(b.operands[0], b, RTXA6000)
    assert a.backend_kind == "__cudnn$fusion"
    assert [r.opcode for r in a.roots] == ["exponential"]
    assert a.roots[0].operands[0].opcode == "negate"
    with pytest.raises(FusionAnalysisError, match="not an operand"):
        FusionAnalysis.create_producer_consumer(b, b.operands[0], RTXA6000)


# --- dispatch mechanics -------------------------------------------------------------------


class _RaisingPlugin:
    @hookimpl
    def fusegen_fusion_kind_matchers(self):
        def boom(analysis):
            raise RuntimeError("matcher exploded")

        return [KindMatcher("exploding", 50, boom)]


class _Made:
    """An emitter (anything with ``emit``) that remembers what its factory was given."""

    def __init__(self, *seen):
        self.seen = seen

    def emit(self):
        raise NotImplementedError


class _OverridePlugin:
    @hookimpl
    def fusegen_fusion_kind_matchers(self):
        return [KindMatcher("everything-is-sort", 150, lambda a: kinds.SORT)]

    @hookimpl
    def fusegen_emitter_factories(self):
        return [
            EmitterFactory("declines", kinds.SORT, 10, lambda a, ctx: None),
            EmitterFactory("accepts", kinds.SORT, 20, lambda a, ctx: _Made("emitter-for", a.name, ctx)),
        ]


def _simple_reduce():
    return reduce_root("f32[64,128]", "f32[64]", "1")


def test_raising_matcher_is_reported_by_plugin_name():
    pm = PluginManager(autoload=False, extra_plugins=[("acme-matchers", _RaisingPlugin())])
    a = FusionAnalysis.create(_simple_reduce().entry.root, RTXA6000)
    with pytest.raises(PluginError, match="acme-matchers.*exploding.*matcher exploded"):
        get_emitter_fusion_kind(a, pm)


def test_third_party_matcher_slots_between_ranks_and_factories_decline():
    pm = PluginManager(autoload=False, extra_plugins=[("acme", _OverridePlugin())])
    a = FusionAnalysis.create(_simple_reduce().entry.root, RTXA6000)
    d = get_emitter_fusion_kind(a, pm)
    assert (d.kind, d.decided_by) == (kinds.REDUCTION, "real-reduction-hero")  # rank 100 < 150
    body = """  x = f32[64] parameter(0)
  ROOT n = f32[64] negate(x)"""
    a = FusionAnalysis.create(fusion_module(body, ["f32[64]"], "f32[64]").entry.root, RTXA6000)
    d = get_emitter_fusion_kind(a, pm)
    assert (d.kind, d.decided_by, d.plugin) == (kinds.SORT, "everything-is-sort", "acme")
    emitter, factory = get_fusion_emitter(a, d.kind, pm, context="ctx")
    assert factory.name == "accepts" and emitter.seen == ("emitter-for", "f", "ctx")
    assert get_fusion_emitter(a, kinds.SCATTER, pm) == (None, None)


def test_dispatch_module_imports_no_emitter():
    import fusegen.dispatch as dispatch_mod

    src = Path(dispatch_mod.__file__).read_text()
    assert "fusegen_plugins" not in src and "emitters" not in src.replace("emitter_factories", "")


# --- devices ------------------------------------------------------------------------------


def test_get_device_presets():
    assert get_device("H200") is H200 and get_device("h100") is H100 and get_device("A100") is A100
    assert get_device("RTXA6000").core_count == 84
    with pytest.raises(ValueError, match="a100, h100, h200, rtxa6000"):
        get_device("v100")


def test_model_strings_of_presets():
    assert model_string(H200) == (
        "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 4800 GB/s, L2 cache: 50 MB, DNN version: 0.0.0"
    )
    assert model_string(H100) == (
        "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 3352 GB/s, L2 cache: 50 MB, DNN version: 0.0.0"
    )


def _cache_key_cases():
    index = CASES / "INDEX.tsv"
    if not index.exists():
        return []
    rows = [ln.split("\t") for ln in index.read_text().splitlines()[1:]]
    # SYCL specs name the GPU by a string not present in the spec (BMG_G21), so only CUDA/ROCm.
    return [(r[0], r[2]) for r in rows if r[0].startswith("cache_key_device__") and r[2].startswith(("CUDA", "ROCM"))]


@pytest.mark.skipif(not (CASES / "INDEX.tsv").exists(), reason=f"shared corpus not found at {CASES}")
@pytest.mark.parametrize("name,expected", _cache_key_cases())
def test_model_string_matches_xla_cache_key(name, expected):
    dev = from_target_config_text((CASES / name).read_text())
    assert model_string(dev) == expected


@pytest.mark.skipif(not (CASES / "INDEX.tsv").exists(), reason=f"shared corpus not found at {CASES}")
def test_a100_preset_matches_spec():
    dev = from_target_config_text((CASES / "cache_key_device__a100_sxm_40.txtpb").read_text())
    assert model_string(dev) == model_string(A100)
    assert (dev.core_count, dev.shared_memory_per_block_optin, dev.l2_cache_size) == (A100.core_count, A100.shared_memory_per_block_optin, A100.l2_cache_size)
