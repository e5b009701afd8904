"""ConcatenateFusion: corpus concatenate fusions run in the Triton interpreter against the reference
evaluator and compile for sm_90; nested concatenates (corpus bug B10); XLA's operand limit; properties."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS

from fusegen import dispatch
from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
from fusegen.codegen import triton_runtime
from fusegen.device import get_device
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_module
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves, random_value
from fusegen_plugins.emitters.concatenate import ConcatenateFusion, concat_pieces

CASES = CORPUS / "xla" / "cases"
RTXA6000 = "rtxa6000"

#: Cases that miss (none today); name -> reason, run as strict xfails.
MISSES: dict[str, str] = {}


def _index_rows(kind: str) -> list[str]:
    index = CASES / "INDEX.tsv"
    if not index.exists():
        return []
    with index.open() as fh:
        return sorted(r[0] for r in csv.reader(fh, delimiter="\t") if len(r) > 2 and r[2] == kind)


CONCAT_CASES = _index_rows("kConcatenate")


def _shared(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"shared corpus not found at {p}")
    return p


def analyse(fusion) -> FusionAnalysis:
    a = FusionAnalysis.create(fusion, get_device(RTXA6000))
    dispatch.get_emitter_fusion_kind(a)
    return a


def run_checked(fusion, emitter, seed: int = 0, ops=None, compile_sm90: bool = False):
    emitted = emitter.emit()
    if ops is None:
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
    return emitted, outs


def concat_emitter(text: str, name: str = "concat"):
    m = parse_module(text, name)
    f = entry_fusion(m)
    a = analyse(f)
    assert a.kind == "kConcatenate", a.kind
    em, factory = dispatch.get_fusion_emitter(a)
    assert factory is not None and factory.name == "concatenate"
    assert type(em) is ConcatenateFusion
    return f, em


# ------------------------------------------------------------------------------------------------
# corpus cases (expected kind kConcatenate)
# ------------------------------------------------------------------------------------------------
def test_corpus_has_concatenate_cases():
    _shared(CASES)
    assert len(CONCAT_CASES) == 4


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(reason=MISSES[n], strict=True))
                                  if n in MISSES else n for n in CONCAT_CASES])
def test_corpus_concatenate_case(name):
    path = _shared(CASES / name)
    f, em = concat_emitter(path.read_text(), str(path))
    emitted, _ = run_checked(f, em, compile_sm90=True)
    (ks,) = emitted.kernels
    hero = em.hero()
    # one pass per operand, the launch sized by the largest operand (ComputeLoopFusionConfig)
    assert ks.source.count("# pass ") == len(hero.operands)
    n_max = max(o.shape.numel for o in hero.operands)
    assert ks.constexprs["N"] == n_max
    assert ks.launch.grid[0] * ks.constexprs["BLOCK"] >= n_max
    assert ks.launch.grid[0] == -(-n_max // ks.constexprs["BLOCK"])
    assert "tl.where" not in ks.source  # no per-element select over the operands


def test_concat_1d_offsets():
    """concat_1d: f32[200] ++ f32[400] ++ f32[300]; the output slices are exactly the operands."""
    path = _shared(CASES / "lit_shared__concatenate__concat_1d.hlo")
    f, em = concat_emitter(path.read_text())
    assert [off for _, off in concat_pieces(em.hero())] == [0, 200, 600]
    ops = [np.arange(200, dtype=np.float32), -np.arange(400, dtype=np.float32), np.full(300, 7, np.float32)]
    _, (out,) = run_checked(f, em, ops=ops)
    np.testing.assert_array_equal(out, np.concatenate(ops))


# ------------------------------------------------------------------------------------------------
# nested concatenates (corpus bug B10, jax-ml/jax#40588): the inner one uses its own offsets
# ------------------------------------------------------------------------------------------------
#: B10's structure (bugs/B10.py): valid = concat(head, tail) mask; RMS norm of seq masked by it; the
#: outer concatenate appends 4 extra rows. Shapes shrunk (40+4 rows x 16) for the interpreter.
B10_TEXT = """
add_f32 {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}

fusion {
  seq = f32[40,16] parameter(0)
  extra = f32[4,16] parameter(1)
  head = pred[8] parameter(2)
  tail = pred[32] parameter(3)
  valid = pred[40] concatenate(head, tail), dimensions={0}
  sq = f32[40,16] multiply(seq, seq)
  zero = f32[] constant(0)
  sum = f32[40] reduce(sq, zero), dimensions={1}, to_apply=add_f32
  n = f32[] constant(16)
  nb = f32[40] broadcast(n), dimensions={}
  ms = f32[40] divide(sum, nb)
  eps = f32[] constant(1e-06)
  epsb = f32[40] broadcast(eps), dimensions={}
  mse = f32[40] add(ms, epsb)
  r = f32[40] rsqrt(mse)
  rb = f32[40,16] broadcast(r), dimensions={0}
  normed = f32[40,16] multiply(seq, rb)
  vb = pred[40,16] broadcast(valid), dimensions={0}
  zb = f32[40,16] broadcast(zero), dimensions={}
  masked = f32[40,16] select(vb, normed, zb)
  ROOT out = f32[44,16] concatenate(masked, extra), dimensions={0}
}
"""


def test_b10_nested_concatenate_matches_evaluator():
    f, em = concat_emitter(B10_TEXT, "B10")
    rng = np.random.default_rng(0)
    seq = rng.standard_normal((40, 16), dtype=np.float32)
    extra = rng.standard_normal((4, 16), dtype=np.float32)
    head = np.ones(8, bool)
    tail = rng.random(32) < 0.7
    _, (out,) = run_checked(f, em, ops=[seq, extra, head, tail], compile_sm90=True)
    # and the numpy reference of B10.py
    valid = np.concatenate([head, tail])
    ms = (seq.astype(np.float64) ** 2).mean(-1, keepdims=True)
    want = np.concatenate([np.where(valid[:, None], seq / np.sqrt(ms + 1e-6), 0.0), extra]).astype(np.float32)
    np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)


NESTED_SAME_DIM = """
fusion {
  a = f32[3,5] parameter(0)
  b = f32[4,5] parameter(1)
  c = f32[2,5] parameter(2)
  d = f32[6,5] parameter(3)
  inner = f32[9,5] concatenate(a, b, c), dimensions={0}
  na = f32[6,5] negate(d)
  outer = f32[15,5] concatenate(na, inner), dimensions={0}
  ROOT e = f32[15,5] exponential(outer)
}
"""

NESTED_OTHER_DIM = """
fusion {
  a = f32[6,2] parameter(0)
  b = f32[6,3] parameter(1)
  c = f32[5,5] parameter(2)
  inner = f32[6,5] concatenate(a, b), dimensions={1}
  t = f32[6,5] tanh(inner)
  outer = f32[11,5] concatenate(c, t), dimensions={0}
  ROOT r = f32[55] bitcast(outer)
}
"""


def test_nested_same_dimension_concatenate_is_flattened_with_own_offsets():
    f, em = concat_emitter(NESTED_SAME_DIM, "nested_same")
    pieces = concat_pieces(em.hero())
    assert [(o.name, off) for o, off in pieces] == [("na", 0), ("a", 6), ("b", 9), ("c", 13)]
    ops = [np.full((3, 5), 1, np.float32), np.full((4, 5), 2, np.float32), np.full((2, 5), 3, np.float32),
           np.full((6, 5), 4, np.float32)]
    emitted, (out,) = run_checked(f, em, ops=ops)
    want = np.exp(np.concatenate([-ops[3], ops[0], ops[1], ops[2]]))
    np.testing.assert_allclose(out, want, rtol=1e-6)
    assert "tl.where" not in emitted.kernels[0].source


def test_nested_other_dimension_concatenate_uses_its_own_offsets():
    f, em = concat_emitter(NESTED_OTHER_DIM, "nested_other")
    assert [o.name for o, _ in concat_pieces(em.hero())] == ["c", "t"]
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(s).astype(np.float32) for s in ((6, 2), (6, 3), (5, 5))]
    _, (out,) = run_checked(f, em, ops=ops, compile_sm90=True)
    want = np.concatenate([ops[2], np.tanh(np.concatenate([ops[0], ops[1]], axis=1))]).reshape(-1)
    np.testing.assert_allclose(out, want, rtol=1e-6)


# ------------------------------------------------------------------------------------------------
# XLA's operand limit and the epilogue forms
# ------------------------------------------------------------------------------------------------
def _concat_text(n_ops: int, size: int = 3) -> str:
    ps = "\n".join(f"  p{i} = f32[{size},4] parameter({i})" for i in range(n_ops))
    args = ", ".join(f"p{i}" for i in range(n_ops))
    return f"fusion {{\n{ps}\n  ROOT c = f32[{size * n_ops},4] concatenate({args}), dimensions={{0}}\n}}\n"


def test_four_operands_is_a_concatenate_fusion_five_is_a_loop():
    f, em = concat_emitter(_concat_text(4), "four")
    run_checked(f, em)
    m = parse_module(_concat_text(5), "five")
    a = analyse(entry_fusion(m))
    assert a.kind == "kLoop"  # UseConcatenateFusion: operand_count() <= 4
    from fusegen_plugins.emitters.concatenate import _create

    a2 = FusionAnalysis.create(entry_fusion(m), get_device(RTXA6000))
    assert a2.heroes[0].opcode == "concatenate" and _create(a2) is None


def test_epilogue_with_layout_and_side_parameter():
    text = """
fusion {
  p0 = bf16[4,6] parameter(0)
  p1 = bf16[5,6] parameter(1)
  p2 = f32[9,6]{0,1} parameter(2)
  c = bf16[9,6] concatenate(p0, p1), dimensions={0}
  cv = f32[9,6] convert(c)
  m = f32[9,6] multiply(cv, p2)
  ROOT out = f32[6,9]{0,1} bitcast(m)
}
"""
    f, em = concat_emitter(text, "epi_layout")
    run_checked(f, em, compile_sm90=True)


# ------------------------------------------------------------------------------------------------
# properties: operand counts and sizes, ranks, dimension, dtypes, epilogues
# ------------------------------------------------------------------------------------------------
DTYPES = ["f32", "f16", "bf16", "s32", "pred"]


@st.composite
def concats(draw):
    rank = draw(st.integers(1, 3))
    k = draw(st.integers(0, rank - 1))
    n_ops = draw(st.integers(1, 4))
    base = list(draw(st.lists(st.integers(1, 12), min_size=rank, max_size=rank)))
    sizes = draw(st.lists(st.integers(0, 20), min_size=n_ops, max_size=n_ops))
    if sum(sizes) == 0:
        sizes[0] = 1
    et = draw(st.sampled_from(DTYPES))
    epilogue = draw(st.sampled_from(["none", "unary", "bitcast", "param"]))
    return rank, k, base, sizes, et, epilogue


def _prop_text(rank, k, base, sizes, et, epilogue) -> str:
    def shp(dims):
        return f"{et}[{','.join(map(str, dims))}]"

    lines = []
    names = []
    for i, s in enumerate(sizes):
        dims = list(base)
        dims[k] = s
        lines.append(f"  p{i} = {shp(dims)} parameter({i})")
        names.append(f"p{i}")
    out = list(base)
    out[k] = sum(sizes)
    lines.append(f"  c = {shp(out)} concatenate({', '.join(names)}), dimensions={{{k}}}")
    if epilogue == "unary":
        lines.append(f"  ROOT r = {shp(out)} {'not' if et == 'pred' else 'negate'}(c)")
    elif epilogue == "bitcast":
        n = int(np.prod(out))
        lines.append(f"  ROOT r = {et}[{n}] bitcast(c)")
    elif epilogue == "param":
        lines.append(f"  q = {shp(out)} parameter({len(sizes)})")
        lines.append(f"  ROOT r = {shp(out)} {'or' if et == 'pred' else 'maximum'}(c, q)")
    else:
        lines[-1] = "  ROOT " + lines[-1].lstrip()
    return "fusion {\n" + "\n".join(lines) + "\n}\n"


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(concats(), st.integers(0, 2**16))
def test_property_concatenate_matches_evaluator(case, seed):
    f, em = concat_emitter(_prop_text(*case), "prop")
    emitted, _ = run_checked(f, em, seed=seed)
    if emitted.kernels:
        n_nonempty = sum(1 for s in case[3] if s > 0)
        assert emitted.kernels[0].source.count("# pass ") == n_nonempty


def test_large_concatenate_uses_64_bit_indices_and_compiles():
    """2.6e9 output elements: int64 indices; emitted and compiled only (too big to interpret)."""
    text = """
fusion {
  p0 = f32[65536,40000] parameter(0)
  p1 = f32[10,40000] parameter(1)
  ROOT c = f32[65546,40000] concatenate(p0, p1), dimensions={0}
}
"""
    f, em = concat_emitter(text, "big")
    (ks,) = em.emit().kernels
    assert "tl.int64" in ks.source and ks.constexprs["N"] == 65536 * 40000
    res = triton_runtime.compile_for_target(ks)
    assert ".target sm_90a" in res.ptx


def test_roll_concatenate_unrolls_by_a_divisor_of_every_operand_width():
    """``jnp.roll(x, 3, axis=1)`` on bf16[1024,1024] (tests/data/xla_kernels_v/v_roll): slices of 3 and 1021
    columns concatenated. XLA's ComputeUnrollFactor takes the gcd of the unroll and every operand's
    concatenated extent (1 here) and launches with it: 8168 blocks of 128 threads, one element a thread (XLA's
    LAUNCH.tsv row); the kernel rolls the rows as numpy does."""
    import ml_dtypes

    from conftest import REPO

    path = REPO / "tests" / "data" / "xla_kernels_v" / "v_roll.h200_opt.hlo"
    m = parse_module(path.read_text(), path.name)
    f = entry_fusion(m)
    a = FusionAnalysis.create(f, get_device("h200"))
    dispatch.get_emitter_fusion_kind(a)
    em, _ = dispatch.get_fusion_emitter(a)
    with open(path.parent / "LAUNCH.tsv") as fh:
        row = next(r for r in csv.DictReader(fh, delimiter="\t") if r["module_file"] == path.name)
    geo = em.geometry()
    assert (geo.unroll, geo.blocks[0], geo.threads) == (1, int(row["grid_x"]), int(row["threads_x"])) == (1, 8168, 128)
    x = np.random.default_rng(0).standard_normal((1024, 1024)).astype(ml_dtypes.bfloat16)
    _, (out,) = run_checked(f, em, ops=[x])
    np.testing.assert_array_equal(out, np.roll(x, 3, axis=1))


def test_interleaved_rotary_embedding_reads_and_writes_each_pair_once():
    """GPT-J style rotary embedding (tests/data/xla_kernels_u/u_rope_interleaved): ``x[..., ::2]`` and
    ``x[..., 1::2]`` rotated by cos/sin and stacked on a new last axis. The even/odd slices of ``x`` are one
    4-byte load a lane and the stacked pair one 4-byte store, XLA's kernel's global accesses exactly (its
    vectoriser merges both pairs); the values are float64 numpy's within bf16 rounding."""
    import ml_dtypes

    from conftest import REPO
    from kernel_inspection import global_accesses, xla_entry

    where = REPO / "tests" / "data" / "xla_kernels_u"
    m = parse_module((where / "u_rope_interleaved.h200_opt.hlo").read_text(), "u_rope_interleaved")
    f = entry_fusion(m)
    a = FusionAnalysis.create(f, get_device("h200"))
    dispatch.get_emitter_fusion_kind(a)
    em, _ = dispatch.get_fusion_emitter(a)
    rng = np.random.default_rng(2)
    sin, cos = (rng.standard_normal((128, 1, 32)).astype(ml_dtypes.bfloat16) for _ in range(2))
    x = rng.standard_normal((4, 128, 8, 64)).astype(ml_dtypes.bfloat16)
    emitted, (out,) = run_checked(f, em, ops=[sin, x, cos])
    ours = global_accesses(triton_runtime.compile_for_target(emitted.kernels[0], pointer_alignment=16).ptx)
    assert ours == global_accesses(xla_entry("u_rope_interleaved.h200_opt.hlo", "input_concatenate_fusion", where))
    x1, x2 = x[..., ::2].astype(np.float64), x[..., 1::2].astype(np.float64)
    c, s = cos.astype(np.float64).reshape(1, 128, 1, 32), sin.astype(np.float64).reshape(1, 128, 1, 32)
    want = np.stack([x1 * c - x2 * s, x1 * s + x2 * c], -1)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=2e-2, atol=2e-2)


_CAT0 = """HloModule m
c {{
  a = bf16[{ra},{w}] parameter(0)
  b = bf16[{rb},{w}] parameter(1)
  ROOT r = bf16[{rt},{w}] concatenate(a, b), dimensions={{0}}
}}
ENTRY e {{
  a = bf16[{ra},{w}] parameter(0)
  b = bf16[{rb},{w}] parameter(1)
  ROOT f = bf16[{rt},{w}] fusion(a, b), kind=kLoop, calls=c
}}"""


@pytest.mark.parametrize("ra,rb,w,unmasked", [(512, 256, 1024, True), (512, 100, 1000, False),
                                              (300, 512, 1024, True), (300, 512, 1000, False),
                                              (301, 64, 1024, True)])
def test_whole_program_passes_have_no_bound_checks(ra, rb, w, unmasked):
    """x_concat0 (bf16[512,1024] ++ bf16[256,1024], XLA's grid of 1024 x 512 elements): every program lies wholly
    inside the largest operand, and the smaller operand's pass, under ``start < n``, wholly inside it (a multiple
    of BLOCK): the indices are not clamped and the masks are constants (no predicated access in the sm_90 PTX;
    14 -> 10 registers, XLA's 10). A smaller operand that is not whole programs (100 x 1000, 300 x 1000
    elements) keeps its mask. Exact against numpy's concatenate, run as the interpreter runs it (its wider
    programs of 4096 overhang 301 x 1024 and take the masked branch of the same source)."""
    import re

    import attrs
    import ml_dtypes

    m = parse_module(_CAT0.format(ra=ra, rb=rb, rt=ra + rb, w=w), "cat0")
    f = entry_fusion(m)
    a = FusionAnalysis.create(f, get_device("h200"))
    dispatch.get_emitter_fusion_kind(a)
    em, _ = dispatch.get_fusion_emitter(a)
    rng = np.random.default_rng(1)
    x, y = (rng.standard_normal((r, w)).astype(ml_dtypes.bfloat16) for r in (ra, rb))
    emitted, (out,) = run_checked(f, em, ops=[x, y])
    np.testing.assert_array_equal(out, np.concatenate([x, y]))
    (ks,) = emitted.kernels
    # and at XLA's own block, whose unmasked branches the interpreter's wider programs may not take
    raw = attrs.evolve(emitted, kernels=(attrs.evolve(ks, interpret_variant=None),))
    (at_xla,) = triton_runtime.run_fusion(raw, [x, y], f, interpret_max_programs=None)
    np.testing.assert_array_equal(at_xla, np.concatenate([x, y]))
    assert max(ra, rb) * w % ks.constexprs["BLOCK"] == 0 and "mask = tl.full([BLOCK], 1, tl.int1)" in ks.source
    ptx = triton_runtime.compile_for_target(ks, pointer_alignment=16).ptx
    predicated = re.findall(r"@%p\d+ (?:ld|st)\.global", ptx)
    assert (not predicated) == unmasked, predicated[:4]
    if ra == 301:
        assert ks.interpret_variant is not None and 301 * 1024 % ks.interpret_variant.constexprs["BLOCK"] != 0
