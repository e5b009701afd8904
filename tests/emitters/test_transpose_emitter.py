"""TransposeFusion / PackedTranspose: corpus transpose fusions run in the Triton interpreter against the
reference evaluator and compile for sm_90; the sub-emitter at XLA's rule boundaries; property tests."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from conftest import CORPUS

from fusegen import dispatch
from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
from fusegen.codegen import triton_runtime
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.device import get_device
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_module
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves, random_value
from fusegen_plugins.emitters.transpose import (PackedTranspose, TransposeFusion, create_transpose_emitter,
                                                describe_any_transpose)

CASES = CORPUS / "xla" / "cases"
MODULES = CORPUS / "xla" / "modules"
JAX = CORPUS / "jax"
RTXA6000 = "rtxa6000"  # XLA's emitter lit tests analyse with TestGpuDeviceInfo::RTXA6000DeviceInfo


def _index_rows(kind: str) -> list[str]:
    index = CASES / "INDEX.tsv"
    if not index.exists():
        return []
    with index.open() as fh:
        return sorted(r[0] for r in csv.reader(fh, delimiter="\t") if len(r) > 2 and r[2] == kind)


TRANSPOSE_CASES = _index_rows("kTranspose")

#: Sub-emitter per case by XLA's rule (``CreateTransposeFusion``: packed iff GetPackedTransposeTileSizes
#: succeeds): packed needs < 32-bit elements, canonical B dim 1, >= 10*vector_size populated rows/cols.
PACKED_CASES = {
    "lit_gpu__transpose__multiple_roots.hlo",  # pred 200x200: 128x128 tiles
    "lit_gpu__transpose__multiple_roots_mixed_rank.hlo",  # bf16 (2,128,2048) 0,2,1: 64x64 tiles
    "lit_gpu__transpose__packed_transpose_multiple_heroes.hlo",
    "lit_gpu__transpose__packed_transpose_multiple_roots.hlo",
    "lit_gpu__transpose__packed_transpose_s16.hlo",
    "lit_gpu__transpose__packed_transpose_side_output.hlo",
    "lit_gpu__transpose__packed_transpose_two_heroes.hlo",
}
#: Cases that miss (none today); name -> reason, run as strict xfails.
MISSES: dict[str, str] = {}


def _shared(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"shared corpus not found at {p}")
    return p


def _bits(et: str) -> int:
    return {"pred": 8, "s4": 4, "s8": 8, "u8": 8, "f16": 16, "bf16": 16, "s16": 16, "f32": 32, "s32": 32,
            "f64": 64, "s64": 64}[et]


def expected_shmem(em: TransposeFusion, n_heroes: int) -> int:
    """XLA's shared-memory formulas (``GetDescriptionForTiledTransposeEmitter``), one tile per hero."""
    d = em.description
    bits = _bits(d.instr.shape.element_type)
    if isinstance(em, PackedTranspose):
        per = 32 * (32 // 8) * 32 * (32 // bits)
    elif d.permutation[-1] == len(d.dimensions) - 1:
        per = -(-(32 * 33 * bits * d.dimensions[-1]) // 8)
    else:
        per = -(-(32 * 33 * bits) // 8)
    return per * n_heroes


def run_checked(fusion, emitter, seed: int = 0, compile_sm90: bool = False):
    """Emit, run in the interpreter and compare every output leaf with the reference evaluator."""
    emitted = emitter.emit()
    rng = np.random.default_rng(seed)
    ops = [random_value(o.shape, rng) for o in fusion.operands]
    ref = evaluate_instruction(fusion, ops)
    outs = triton_runtime.run_fusion(emitted, ops, fusion)
    shapes = fusion.shape.leaves()
    refs = leaves(ref)
    assert len(outs) == len(refs) == len(shapes)
    for k, (s, o, r) in enumerate(zip(shapes, outs, refs)):
        c = compare(o, r, s.element_type)
        assert c.ok, f"{fusion.name} leaf {k} ({s.element_type}): max abs {c.max_abs_error}, rel {c.max_rel_error}"
    if compile_sm90:
        for ks in emitted.kernels:
            res = triton_runtime.compile_for_target(ks)
            assert ".target sm_90a" in res.ptx and res.cubin_bytes > 0
            assert res.num_warps == ks.launch.num_warps
    return emitted


def analyse(fusion, device: str = RTXA6000) -> FusionAnalysis:
    a = FusionAnalysis.create(fusion, get_device(device))
    dispatch.get_emitter_fusion_kind(a)
    return a


# ------------------------------------------------------------------------------------------------
# corpus cases (expected kind kTranspose)
# ------------------------------------------------------------------------------------------------
def test_corpus_has_transpose_cases():
    _shared(CASES)
    assert len(TRANSPOSE_CASES) == 16


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=MISSES[n], strict=True))
                                  if n in MISSES else n for n in TRANSPOSE_CASES])
def test_corpus_transpose_case(name):
    path = _shared(CASES / name)
    m = parse_module(path.read_text(), str(path))
    f = entry_fusion(m)
    a = analyse(f)
    assert a.kind == "kTranspose"
    em, factory = dispatch.get_fusion_emitter(a)
    assert factory is not None and factory.name == "transpose"
    want = PackedTranspose if name in PACKED_CASES else TransposeFusion
    assert type(em) is want, f"{name}: {type(em).__name__}, XLA's rule says {want.__name__}"
    emitted = run_checked(f, em, compile_sm90=True)
    assert emitted.emitter == want.name
    (ks,) = emitted.kernels
    n_heroes = len({id(h) for h in a.heroes if h.opcode == "transpose" and
                    describe_any_transpose(h) is not None and
                    describe_any_transpose(h).dimensions == a.tiled_transpose.dimensions})
    assert ks.launch.shared_memory_bytes == expected_shmem(em, n_heroes)
    tiles = em.tile_sizes()
    assert ks.constexprs["BLOCK"] == int(np.prod(tiles))
    assert ks.launch.grid == (int(np.prod([-(-n // t) for n, t in zip(em.dims, tiles)])),)
    assert "tl.permute" in ks.source  # the tile is transposed, not gathered elementally


def test_transpose_fusion_tiles_follow_xla():
    """kTileSize 32 on both swapped dims (4 warps = XLA's 128 threads); the 021 minor dim rides along."""
    m = parse_module(_shared(CASES / "lit_gpu__transpose__epilogue.hlo").read_text(), "epilogue")
    em = create_transpose_emitter(analyse(entry_fusion(m)))
    assert (em.dims, em.perm) == ((20, 170, 160), (0, 2, 1))
    assert em.xla_tile_sizes() == (1, 32, 32)
    ks = em.emit().kernels[0]
    assert ks.launch.num_warps == 4 and ks.launch.grid == (20 * 6 * 5,)
    m = parse_module(_shared(CASES / "lit_gpu__transpose__transpose_102.hlo").read_text(), "t102")
    em = create_transpose_emitter(analyse(entry_fusion(m)))
    assert (em.dims, em.perm) == ((170, 160, 3), (1, 0, 2))
    assert em.xla_tile_sizes() == (32, 32, 3) and em.tile_sizes() == (32, 32, 4)


def test_packed_tiles_follow_get_packed_transpose_tile_sizes():
    # s16 (4,2,6,10,64) perm (1,0,4,3,2): vector 2, shmem dim 64: T1 = 6, A = min(10, 64 // 6) = 10, T2 = 64
    m = parse_module(_shared(CASES / "lit_gpu__transpose__packed_transpose_s16.hlo").read_text(), "s16")
    em = create_transpose_emitter(analyse(entry_fusion(m)))
    assert isinstance(em, PackedTranspose)
    assert em.xla_tile_sizes() == (1, 1, 6, 10, 64)
    assert em.tile_sizes() == (1, 1, 8, 16, 64)
    # pred 200x200: vector 4, shmem dim 128
    m = parse_module(_shared(CASES / "lit_gpu__transpose__multiple_roots.hlo").read_text(), "pred")
    em = create_transpose_emitter(analyse(entry_fusion(m)))
    assert em.xla_tile_sizes() == (128, 128) and em.emit().kernels[0].launch.grid == (4,)


# ------------------------------------------------------------------------------------------------
# corpus modules
# ------------------------------------------------------------------------------------------------
def test_jax_gpu_transpose_add():
    path = _shared(JAX / "gpu_transpose_add.default.h100_opt.hlo")
    m = parse_module(path.read_text(), str(path))
    f = m.entry.root
    assert f.name == "input_transpose_fusion"
    a = analyse(f, "h100")
    assert a.kind == "kTranspose"
    em, _ = dispatch.get_fusion_emitter(a)
    assert type(em) is TransposeFusion
    emitted = run_checked(f, em, compile_sm90=True)
    assert emitted.kernels[0].launch.grid == (8 * 16,)


MODULE_FILES = sorted(p.name for p in MODULES.glob("*transpose__*.hlo")) if MODULES.exists() else []


@pytest.mark.parametrize("name", MODULE_FILES)
def test_corpus_transpose_module(name):
    path = _shared(MODULES / name)
    m = parse_module(path.read_text(), str(path))
    f = entry_fusion(m)
    a = analyse(f)
    if "__triton__" in name:
        # __triton block-level fusions: XLA sends them to its Triton emitter; the transpose is too small
        # for XLA's tiled-transpose rule (minor dim 3 < 8, or a 021 minor dim of 20 f32 > 64 bits).
        assert a.kind == "kTriton" and a.tiled_transpose is None
        assert create_transpose_emitter(a) is None
        em = create_transpose_emitter(a, describe_any_transpose(a.heroes[0]))
        assert em is not None  # the tiled kernel is still correct on them (tiles not a power of two)
        run_checked(f, em, compile_sm90=True)
        return
    assert a.kind == "kTranspose"
    em, _ = dispatch.get_fusion_emitter(a)
    emitted = run_checked(f, em, compile_sm90=True)
    if "side_outputs_inplace" in name:
        assert type(em) is TransposeFusion
        src = emitted.kernels[0].source
        # two side outputs (add, bitcast) written in the read phase, the transpose in the write phase
        read, write = src.split("# write phase")
        assert read.count("tl.store") == 2 and write.count("tl.store") == 1


def test_gpt12_and_conv_transpose_fusions():
    """Transpose fusions of real models: a sliced bf16 projection (gpt12) and a conv weight relayout."""
    for fname, fusion_name, cls in (("gpt12.h200_opt.hlo", "input_transpose_fusion", PackedTranspose),
                                    ("gpu_conv_relu_bf16.h100_opt.hlo", "wrapped_transpose", PackedTranspose)):
        path = _shared(JAX / fname)
        m = parse_module(path.read_text(), str(path))
        (f,) = [i for i in m.entry.instructions if i.name == fusion_name]
        a = analyse(f, "h200")
        assert a.kind == "kTranspose"
        em, _ = dispatch.get_fusion_emitter(a)
        assert type(em) is cls
        run_checked(f, em)


# ------------------------------------------------------------------------------------------------
# sub-emitter at XLA's rule boundaries
# ------------------------------------------------------------------------------------------------
def _transpose_text(et: str, in_dims: tuple[int, ...], perm: tuple[int, ...]) -> str:
    out = tuple(in_dims[p] for p in perm)
    s_in = ",".join(map(str, in_dims))
    s_out = ",".join(map(str, out))
    return (f"fusion {{\n  p0 = {et}[{s_in}] parameter(0)\n"
            f"  ROOT t = {et}[{s_out}] transpose(p0), dimensions={{{','.join(map(str, perm))}}}\n}}\n")


#: (element type, input dims, permutation, expected emitter or None = not a tiled transpose -> kLoop).
#: Expectations from XLA's rules (ir_emission_utils.cc), worked out by hand.
BOUNDARIES = [
    # minor dim moves: both minor dims >= 16 ...
    ("f32", (16, 16), (1, 0), "TransposeFusion"),
    ("f32", (16, 15), (1, 0), None),
    # ... or both >= 8 with product >= 64*128
    ("f32", (8, 1024), (1, 0), "TransposeFusion"),
    ("f32", (8, 1023), (1, 0), None),
    ("f32", (7, 2048), (1, 0), None),
    # "021": bits*minor <= 64 and bits*minor*min(dim[-2] in, out) >= 128
    ("f32", (2, 2, 2), (1, 0, 2), "TransposeFusion"),
    ("f32", (16, 32, 3), (1, 0, 2), None),
    ("s16", (2, 2, 4), (1, 0, 2), "TransposeFusion"),
    ("s16", (2, 2, 3), (1, 0, 2), None),
    # packed: vector 2 for 16-bit (shmem dim 64, >= 20 populated rows and cols, even counts)
    ("f16", (20, 20), (1, 0), "PackedTranspose"),
    ("f16", (19, 19), (1, 0), "TransposeFusion"),
    ("f16", (20, 21), (1, 0), "TransposeFusion"),
    ("bf16", (22, 20), (1, 0), "PackedTranspose"),
    # (dim_T2 % tile_T2) % vector_size: 66 % 64 = 2 is even, 65 % 64 = 1 is odd
    ("f16", (66, 64), (1, 0), "PackedTranspose"),
    ("f16", (65, 64), (1, 0), "TransposeFusion"),
    # 8-bit: vector 4, >= 40 populated rows and cols
    ("s8", (40, 40), (1, 0), "PackedTranspose"),
    ("s8", (36, 36), (1, 0), "TransposeFusion"),
    ("pred", (40, 44), (1, 0), "PackedTranspose"),
    # 32-bit elements are never packed; 021 with a minor dim is never packed (B != 1)
    ("f32", (64, 64), (1, 0), "TransposeFusion"),
    ("f16", (64, 64, 2), (1, 0, 2), "TransposeFusion"),
    # 4-bit types are rejected when the minor dim moves
    ("s4", (64, 64), (1, 0), None),
]


@pytest.mark.parametrize("et,dims,perm,want", BOUNDARIES, ids=lambda v: str(v))
def test_sub_emitter_at_rule_boundary(et, dims, perm, want):
    m = parse_module(_transpose_text(et, dims, perm), "boundary")
    f = entry_fusion(m)
    a = analyse(f)
    if want is None:
        assert a.kind == "kLoop"
        assert create_transpose_emitter(FusionAnalysis.create(f, get_device(RTXA6000))) is None
        return
    assert a.kind == "kTranspose"
    em, _ = dispatch.get_fusion_emitter(a)
    assert type(em).__name__ == want
    run_checked(f, em)


def test_declines_without_description():
    m = parse_module(_transpose_text("f32", (16, 15), (1, 0)), "small")
    a = FusionAnalysis.create(entry_fusion(m), get_device(RTXA6000))
    with pytest.raises(EmitterUnsupported, match="no tiled transpose"):
        TransposeFusion(a).emit()


# ------------------------------------------------------------------------------------------------
# properties: any shape / permutation / dtype, with epilogue and side output
# ------------------------------------------------------------------------------------------------
DTYPES = ["f32", "f16", "bf16", "s32", "pred"]


@st.composite
def transposes(draw):
    rank = draw(st.integers(2, 4))
    hi = {2: 64, 3: 20, 4: 9}[rank]
    dims = tuple(draw(st.lists(st.integers(1, hi), min_size=rank, max_size=rank)))
    perm = tuple(draw(st.permutations(range(rank))))
    et = draw(st.sampled_from(DTYPES))
    epilogue = draw(st.sampled_from(["none", "unary", "binary"]))
    side = draw(st.booleans())
    # layouts (minor-to-major) of the epilogue parameter and of the epilogue root; the transpose itself
    # keeps the default layout (XLA only tiles normalized, dim-0-major transposes)
    p1_layout = tuple(draw(st.permutations(range(rank))))
    root_layout = tuple(draw(st.permutations(range(rank))))
    return dims, perm, et, epilogue, side, p1_layout, root_layout


def _shape(et: str, dims, layout=None) -> str:
    s = f"{et}[{','.join(map(str, dims))}]"
    return s + ("{" + ",".join(map(str, layout)) + "}" if layout is not None else "")


def _property_text(dims, perm, et, epilogue, side, p1_layout=None, root_layout=None) -> str:
    out = tuple(dims[p] for p in perm)
    si, so = _shape(et, dims), _shape(et, out)
    lines = [f"  p0 = {si} parameter(0)",
             f"  t = {so} transpose(p0), dimensions={{{','.join(map(str, perm))}}}"]
    root, root_shape = "t", so
    if epilogue == "unary":
        root_shape = _shape(et, out, root_layout)
        lines.append(f"  e = {root_shape} {'not' if et == 'pred' else 'negate'}(t)")
        root = "e"
    elif epilogue == "binary":
        root_shape = _shape(et, out, root_layout)
        lines.append(f"  p1 = {_shape(et, out, p1_layout)} parameter(1)")
        lines.append(f"  e = {root_shape} {'xor' if et == 'pred' else 'add'}(t, p1)")
        root = "e"
    if side:
        lines.append(f"  s = {si} {'not' if et == 'pred' else 'negate'}(p0)")
        lines.append(f"  ROOT tup = ({root_shape}, {si}) tuple({root}, s)")
    else:
        lines[-1] = "  ROOT " + lines[-1].lstrip()
    return "fusion {\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])
@given(transposes(), st.integers(0, 2**16))
def test_property_transpose_matches_evaluator(case, seed):
    m = parse_module(_property_text(*case), "prop")
    f = entry_fusion(m)
    a = FusionAnalysis.create(f, get_device(RTXA6000))
    t = [i for i in f.fused_computation.instructions if i.opcode == "transpose"][0]
    desc = a.tiled_transpose or describe_any_transpose(t)
    assume(desc is not None)  # identity once size-1 dims are dropped
    em = create_transpose_emitter(a, desc)
    run_checked(f, em, seed=seed)


def test_large_transpose_uses_64_bit_indices_and_compiles():
    """2.6e9 elements: index arithmetic in int64; emitted and compiled only (too big to interpret)."""
    m = parse_module(_transpose_text("f32", (65536, 40000), (1, 0)), "big")
    a = analyse(entry_fusion(m), "h200")
    em, _ = dispatch.get_fusion_emitter(a)
    (ks,) = em.emit().kernels
    assert "tl.int64" in ks.source
    assert ks.launch.grid == ((65536 // 32) * (40000 // 32),)
    res = triton_runtime.compile_for_target(ks)
    assert ".target sm_90a" in res.ptx and res.shared_bytes > 0  # the tile goes through shared memory


@pytest.mark.parametrize("et,dt,in_dims,perm,root", [
    ("s4", "int4", (256, 256), (1, 0), ""),
    ("u4", "uint4", (128, 512), (1, 0), ""),
    ("s4", "int4", (4, 256, 256), (0, 2, 1), ""),
    ("s4", "int4", (512, 256), (1, 0), "bf16"),  # int4 weights: transpose, then convert to bf16
])
def test_sub_byte_transposes_are_packed_transposes(et, dt, in_dims, perm, root):
    """s4/u4 transposes are kTranspose with XLA's PackedTranspose (vector size 32/4 = 8), and the kernel moves the
    4-bit values exactly (numpy's transpose is the oracle)."""
    import ml_dtypes

    out_dims = tuple(in_dims[p] for p in perm)
    shp = lambda t, d: f"{t}[{','.join(map(str, d))}]"  # noqa: E731
    conv = f"\n  ROOT c = {shp(root, out_dims)} convert(t)" if root else ""
    text = (f"HloModule t\nfused {{\n  p = {shp(et, in_dims)} parameter(0)\n"
            f"  {'' if root else 'ROOT '}t = {shp(et, out_dims)} transpose(p), dimensions={{{','.join(map(str, perm))}}}"
            f"{conv}\n}}\nENTRY e {{\n  p = {shp(et, in_dims)} parameter(0)\n"
            f"  ROOT f = {shp(root or et, out_dims)} fusion(p), kind=kInput, calls=fused\n}}\n")
    fusion = parse_module(text, "<s4>").entry.root
    analysis = FusionAnalysis.create(fusion, get_device("h200"))
    assert dispatch.get_emitter_fusion_kind(analysis).kind == "kTranspose"
    em = create_transpose_emitter(analysis)
    assert isinstance(em, PackedTranspose)
    x = np.random.default_rng(0).integers(-8 if et == "s4" else 0, 8 if et == "s4" else 16, in_dims)
    x = x.astype(getattr(ml_dtypes, dt))
    emitted = em.emit()
    (out,) = triton_runtime.run_fusion(emitted, [x], fusion)
    assert ".target sm_90a" in triton_runtime.compile_for_target(emitted.kernels[0]).ptx
    expect = np.transpose(x, perm)
    assert np.array_equal(np.asarray(out).astype(np.float32), expect.astype(np.float32))


@pytest.mark.parametrize("name", ["gpt12.h200_opt.hlo", "gpu_transpose_add.default.h100_opt.hlo"])
def test_interpret_variant_with_wide_tiles_is_bitwise_the_kernel(name):
    """The interpreter variant's wide tiles move every element to the same place: the first transpose
    fusion of the module gives bitwise the same outputs with and without it, in fewer programs."""
    import attrs

    from fusegen.codegen import triton_runtime
    from fusegen.hlo.parser import parse_file
    from fusegen.runtime.executor import Executor
    from fusegen.runtime.inputs import random_value

    path = CORPUS / "jax" / name
    if not path.exists():
        pytest.skip(f"{path} is absent")
    m = parse_file(path)
    ex = Executor(m, compile_kernels=False)
    inst, em = next((i, e) for i in m.fusion_instructions()
                    for e, rep in [ex.plan_fusion(i)] if rep.kind == "kTranspose" and e is not None and e.kernels)
    (k,) = em.kernels
    assert k.interpret_variant is not None and k.interpret_variant.launch.grid[0] < k.launch.grid[0]
    ops = [random_value(o.shape, np.random.default_rng(1)) for o in inst.operands]
    wide = triton_runtime.run_fusion(em, ops, inst)
    plain = triton_runtime.run_fusion(attrs.evolve(em, kernels=(attrs.evolve(k, interpret_variant=None),)), ops, inst)
    for a, b in zip(wide, plain):
        assert np.array_equal(np.asarray(a).view(np.uint8), np.asarray(b).view(np.uint8))


def _complex_transpose_module(et: str, in_dims: tuple[int, ...], perm: tuple[int, ...]) -> str:
    out = ",".join(str(in_dims[p]) for p in perm)
    s_in = ",".join(map(str, in_dims))
    return f"""HloModule cx
fused {{
  p = {et}[{s_in}] parameter(0)
  t = {et}[{out}] transpose(p), dimensions={{{','.join(map(str, perm))}}}
  m = {et}[{out}] multiply(t, t)
  n = {et}[{s_in}] negate(p)
  ROOT r = ({et}[{out}], {et}[{s_in}]) tuple(m, n)
}}
ENTRY e {{
  p = {et}[{s_in}] parameter(0)
  ROOT f = ({et}[{out}], {et}[{s_in}]) fusion(p), kind=kInput, calls=fused
}}
"""


@pytest.mark.parametrize("et,in_dims,perm", [("c64", (33, 65), (1, 0)), ("c128", (3, 40, 36), (0, 2, 1))])
def test_complex_transpose_runs_as_pairs_of_float_tiles(et, in_dims, perm):
    """Issue 21 item 6: c64/c128 transposes are (re, im) pairs, each part a tile of the part type; the hero is
    followed by a complex multiply and a side output (negate) reads the input."""
    m = parse_module(_complex_transpose_module(et, in_dims, perm), "cx")
    f = entry_fusion(m)
    em, factory = dispatch.get_fusion_emitter(analyse(f, "h200"))
    assert isinstance(em, TransposeFusion), factory
    emitted = run_checked(f, em, seed=3, compile_sm90=True)
    src = emitted.kernels[0].source
    assert src.count("tl.permute(") == 2  # one per part


def test_each_real_dimension_is_indexed_from_its_own_normalized_coordinate():
    """A packed transpose of bf16 [16,16,17,127] (normalized [256, 2159]) minus a broadcast of a [16,16,17]
    operand in another layout (rand_100224 of the fresh random sample, seeds 100150-100249): every real dimension
    is read from the one normalized coordinate that holds it, so no index divides the whole linear position by a
    product of two groups (127 x 256 = 32512, which cost 32 division chains a thread and 16 bytes of spill at
    sm_90). Values against the reference evaluator; registers and spills when ptxas can run."""
    text = """
HloModule t
fused {
  p1 = bf16[16,16,17,127]{3,2,1,0} parameter(1)
  t = bf16[17,127,16,16]{3,2,1,0} transpose(p1), dimensions={2,3,0,1}
  p0 = bf16[16,16,17]{1,0,2} parameter(0)
  b = bf16[17,16,16]{2,1,0} bitcast(p0)
  bb = bf16[17,127,16,16]{3,2,1,0} broadcast(b), dimensions={0,2,3}
  ROOT s = bf16[17,127,16,16]{3,2,1,0} subtract(t, bb)
}
ENTRY e {
  p0 = bf16[16,16,17]{1,0,2} parameter(0)
  p1 = bf16[16,16,17,127]{3,2,1,0} parameter(1)
  ROOT f = bf16[17,127,16,16]{3,2,1,0} fusion(p0, p1), kind=kInput, calls=fused
}
"""
    fusion = entry_fusion(parse_module(text, "t"))
    em, _ = dispatch.get_fusion_emitter(analyse(fusion, "h200"))
    assert isinstance(em, PackedTranspose)
    emitted = run_checked(fusion, em)
    (ks,) = emitted.kernels
    assert "// 32512" not in ks.source and "// 34544" not in ks.source  # 127 x 256, 17 x 2032 (the operand's)
    assert "c0_2 // 127" in ks.source  # the output's dims 0 and 1 from the row coordinate alone
    from fusegen.codegen import sass

    if sass.tools_unavailable_reason() is None:
        st = sass.kernel_sass_stats(ks, use_cache=False)
        assert st.spill_bytes == 0
