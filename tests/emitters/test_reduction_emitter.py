"""Reduction emitters (Row / MultiRow / Column / SmallColumn): corpus reduction fusions and bug inputs run in
the Triton interpreter against the reference evaluator and compile for sm_90; XLA's sub-emitter rule at its
boundaries; property tests over shapes, layouts, dtypes and reduced dimensions."""

from __future__ import annotations

import csv
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusion_harness import _module, run_emitter
from hlo_modules import ARGMAX

from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
from fusegen.analysis.reduction import choose_reduction_emitter, get_reduction_kind_and_contiguous_components
from fusegen.codegen import triton_runtime
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.device import RTXA6000, get_device, minimal_device
from fusegen.dispatch import get_emitter_fusion_kind
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Module
from fusegen.hlo.parser import parse_module
from fusegen.plugin_manager import PluginManager, default_plugin_manager
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves, random_value
from fusegen_plugins.emitters.reduction import (ColumnReductionFusion, ReductionFusion, RowReductionFusion,
                                                create_reduction_emitter)

SHARED = Path(__file__).parents[2].parent / "shared"
CASES = SHARED / "corpus" / "xla" / "cases"
JAX = SHARED / "corpus" / "jax"
BUGS = SHARED / "corpus" / "bugs"


def _rows() -> list[tuple[str, str]]:
    index = CASES / "INDEX.tsv"
    if not index.exists():
        return []
    with open(index, newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    return [(r[0], r[3]) for r in rows[1:] if len(r) >= 4 and r[2] == "kReduction"]


REDUCTION_CASES = _rows()

#: Corpus kReduction cases the emitter misses, with the reason (strict: each must really fail).
KNOWN_MISSES: dict[str, str] = {}


def _need(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"shared corpus not found at {p}")
    return p


# ------------------------------------------------------------------------------------------ helpers
def _operand_values(insts: list[Instruction], rng: np.random.Generator) -> list[Any]:
    """Values of entry instructions: parameters random, anything else evaluated from its operands."""
    cache: dict[int, Any] = {}

    def val(i: Instruction) -> Any:
        if id(i) not in cache:
            if i.opcode == "parameter":
                cache[id(i)] = random_value(i.shape, rng)
            else:
                cache[id(i)] = evaluate_instruction(i, [val(o) for o in i.operands])
        return cache[id(i)]

    return [val(i) for i in insts]


def _as_fusion(analysis: FusionAnalysis) -> Instruction:
    """A fusion instruction whose body is the analysis' computation (producer-consumer analyses)."""
    comp = analysis.computation
    params = sorted(analysis.parameters, key=lambda p: p.parameter_number)
    operands = [analysis.original(p) for p in params]
    return Instruction(name="pc_fusion", opcode="fusion", shape=comp.root.shape, operands=operands,
                       attrs={"kind": "kInput", "calls": comp})


def _reduced_extent(analysis: FusionAnalysis) -> int:
    hero = analysis.find_hero_reduction()
    if hero is None:
        hero = next(h for h in analysis.non_trivial_heroes if h.opcode == "reduce")
    d = get_reduction_kind_and_contiguous_components(hero).dimensions
    return d[0] * d[2] if get_reduction_kind_and_contiguous_components(hero).is_row_reduction else d[1]


def assert_matches(outs: list[np.ndarray], ref: Any, fusion: Instruction, extent: int) -> None:
    """Every output leaf matches the reference within the element type's tolerance.

    Sums of ``extent`` terms may differ by their summation order: for floats an extra
    ``extent * eps * max|ref|`` (the recursive-summation error bound) is allowed.
    """
    shapes = fusion.shape.leaves() if fusion.shape.is_tuple else [fusion.shape]
    refs = leaves(ref)
    assert len(outs) == len(refs) == len(shapes)
    root = fusion.fused_computation.root
    roots = list(root.operands) if root.opcode == "tuple" else [root]
    for k, (o, r, s) in enumerate(zip(outs, refs, shapes)):
        assert o.size == r.size, (k, o.shape, r.shape)
        o = o.reshape(r.shape)
        src = roots[k] if len(roots) == len(shapes) else None
        if src is not None and src.opcode == "bitcast" and dtypes.is_floating(src.operands[0].shape.element_type) \
                and not dtypes.is_floating(s.element_type):
            # a float sum reinterpreted as integers: compare the floats (summation order changes low bits)
            fet = src.operands[0].shape.element_type
            o, r, s = o.view(dtypes.numpy_dtype(fet)), np.asarray(r).view(dtypes.numpy_dtype(fet)), src.operands[0].shape
        c = compare(o, r, s.element_type)
        if c.ok:
            continue
        if o.dtype.kind == "f" or s.element_type in ("bf16", "f16"):
            eps = np.finfo(np.float64 if s.element_type == "f64" else np.float32).eps
            a = o.astype(np.float64)
            b = r.astype(np.float64)
            scale = float(np.nanmax(np.abs(b))) if b.size else 0.0
            from fusegen.runtime.compare import tolerance

            rtol, atol = tolerance(s.element_type)
            bound = atol + rtol * np.abs(b) + extent * eps * scale
            same_nan = np.isnan(a) & np.isnan(b)
            if bool(np.all(same_nan | (np.abs(a - b) <= bound))):
                continue
        raise AssertionError(f"{fusion.name} leaf {k} ({s.element_type}): max abs {c.max_abs_error}, "
                             f"rel {c.max_rel_error}")


def check_fusion(analysis: FusionAnalysis, fusion: Instruction, ops: list[Any], compile_sm90: bool = True,
                 emitter: ReductionFusion | None = None) -> Any:
    em = emitter or create_reduction_emitter(analysis)
    assert em is not None, f"{fusion.name}: no reduction emitter"
    emitted, outs = run_emitter(em, fusion, ops)
    assert_matches(outs, evaluate_instruction(fusion, ops), fusion, _reduced_extent(analysis))
    if compile_sm90:
        for ks in emitted.kernels:
            r = triton_runtime.compile_for_target(ks)
            assert ".target sm_90a" in r.ptx and r.cubin_bytes > 0
    return emitted


def _analysis_of(module: Module, name: str, note: str) -> tuple[FusionAnalysis, Instruction]:
    dev = minimal_device(32) if "empty GpuDeviceInfoProto" in note else RTXA6000
    if name.endswith("__pc.hlo"):
        root = module.entry.root
        pc = FusionAnalysis.create_producer_consumer(root.operands[0], root, dev)
        fusion = _as_fusion(pc)
        return FusionAnalysis.create(fusion, dev), fusion
    fusion = entry_fusion(module)
    return FusionAnalysis.create(fusion, dev), fusion


# ------------------------------------------------------------------------------------ corpus cases
@pytest.mark.parametrize("name,note", REDUCTION_CASES, ids=[r[0] for r in REDUCTION_CASES])
def test_corpus_reduction_case(name, note, request):
    if name in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_MISSES[name], strict=True))
    m = parse_module(_need(CASES / name).read_text(), str(CASES / name))
    analysis, fusion = _analysis_of(m, name, note)
    assert analysis.find_hero_reduction() is not None
    ops = _operand_values(list(fusion.operands), np.random.default_rng(0))
    emitted = check_fusion(analysis, fusion, ops)
    assert emitted.emitter == choose_reduction_emitter(analysis)
    # the lit directory names the emitter under test (reduce_column/small* is really SmallColumn)
    if "__reduce_multirow__" in name:
        assert emitted.emitter == "MultiRowReductionFusion"
    elif "__reduce_column_small__" in name:
        assert emitted.emitter == "SmallColumnReductionFusion"
    elif "__reduce_column__" in name:
        assert emitted.emitter == "ColumnReductionFusion"
    (ks,) = emitted.kernels
    assert ks.launch.num_warps >= 1 and ks.launch.grid[0] >= 1


def test_corpus_pass_rate():
    if not REDUCTION_CASES:
        pytest.skip(f"shared corpus not found at {CASES}")
    assert len(REDUCTION_CASES) >= 20
    assert len(KNOWN_MISSES) <= 0.05 * len(REDUCTION_CASES)
    assert set(KNOWN_MISSES) <= {n for n, _ in REDUCTION_CASES}


def _jax_reduction_fusions() -> list[tuple[str, str]]:
    if not JAX.exists():
        return []
    pm = PluginManager(autoload=False)
    out = []
    for p in sorted(JAX.glob("gpu_*.hlo")):
        m = parse_module(p.read_text(), str(p))
        for inst in m.entry.post_order():
            if inst.opcode == "fusion" and get_emitter_fusion_kind(FusionAnalysis.create(inst, get_device("h100")), pm).kind == "kReduction":
                out.append((p.name, inst.name))
    return out


JAX_REDUCTIONS = _jax_reduction_fusions()


def test_jax_corpus_has_reductions():
    if not JAX.exists():
        pytest.skip(f"shared corpus not found at {JAX}")
    names = {f for f, _ in JAX_REDUCTIONS}
    assert {"gpu_rowsum.default.h100_opt.hlo", "gpu_colsum.default.h100_opt.hlo",
            "gpu_multi_output.default.h100_opt.hlo"} <= names


@pytest.mark.parametrize("file,fusion_name", JAX_REDUCTIONS)
def test_jax_gpu_reduction_fusion(file, fusion_name):
    m = parse_module((JAX / file).read_text(), str(JAX / file))
    fusion = next(i for i in m.entry.instructions if i.name == fusion_name)
    analysis = FusionAnalysis.create(fusion, get_device("h100"))
    ops = _operand_values(list(fusion.operands), np.random.default_rng(1))
    emitted = check_fusion(analysis, fusion, ops)
    expect = {"gpu_rowsum": "RowReductionFusion", "gpu_colsum": "ColumnReductionFusion"}.get(file.split(".")[0])
    if expect:
        assert emitted.emitter == expect


def test_factory_registered_and_dispatch_uses_it():
    facs = default_plugin_manager().emitter_factories("kReduction")
    assert any(f.name == "reduction" for f in facs)
    m = parse_module(_need(JAX / "gpu_multi_output.default.h100_opt.hlo").read_text(), "mo")
    fusion = next(i for i in m.entry.instructions if i.opcode == "fusion" and "reduce" in i.name)
    em = next(f for f in facs if f.name == "reduction").create(FusionAnalysis.create(fusion, get_device("h100")), None)
    assert em.emit().kernels[0].source.count("tl.reduce(") == 1


# -------------------------------------------------------------------------------------- bug inputs
def test_b04_f16_min_over_two_dims_with_inf_init():
    m = parse_module(_need(BUGS / "B04.hlo").read_text(), "B04.hlo")
    fusion = entry_fusion(m)
    analysis = FusionAnalysis.create(fusion, RTXA6000)
    em = create_reduction_emitter(analysis)
    assert em is not None and em.name == "RowReductionFusion"
    ones = np.ones((2, 16385, 1), np.float16)
    emitted, (out,) = run_emitter(em, fusion, [ones])
    np.testing.assert_array_equal(out.reshape(2), np.array([1, 1], np.float16))
    x = random_value(fusion.operands[0].shape, np.random.default_rng(4))
    x[1, 16384, 0] = np.float16(-9.0)  # the element past 2^14 decides the minimum
    _, (out,) = run_emitter(em, fusion, [x])
    np.testing.assert_array_equal(out.reshape(2), evaluate_instruction(fusion, [x]))
    assert out.reshape(2)[1] == np.float16(-9.0)
    triton_runtime.compile_for_target(emitted.kernels[0])


B05_FUSION = """
HloModule b05_reduction_fusion
and_pred {
  lhs = pred[] parameter(0)
  rhs = pred[] parameter(1)
  ROOT a = pred[] and(lhs, rhs)
}
fused_reduce {
  x = f32[196608] parameter(0)
  thr = f32[] constant(0.7)
  thr_b = f32[196608] broadcast(thr), dimensions={}
  lt = pred[196608] compare(x, thr_b), direction=LT
  t = pred[] constant(true)
  ROOT all_lt = pred[] reduce(lt, t), dimensions={0}, to_apply=and_pred
}
ENTRY main {
  x = f32[196608] parameter(0)
  ROOT r = pred[] fusion(x), kind=kInput, calls=fused_reduce
}
"""


def test_b05_pred_and_reduction_of_compare():
    # B05's module as XLA fuses it: the reduction (196608 > the race-free bound 16384) keeps its
    # compare prologue; not() is a separate kernel. fusegen checks the value and records the choice.
    if not (BUGS / "B05.hlo").exists():
        pytest.skip(f"shared corpus not found at {BUGS}")
    m = parse_module(B05_FUSION, "B05")
    fusion = m.entry.root
    analysis = FusionAnalysis.create(fusion, RTXA6000)
    em = create_reduction_emitter(analysis)
    assert em.name == "RowReductionFusion"
    rng = np.random.default_rng(5)
    cases = [rng.standard_normal(196608).astype(np.float32), np.zeros(196608, np.float32)]
    last = np.zeros(196608, np.float32)
    last[-1] = 0.9  # only the very last element fails x < 0.7
    cases.append(last)
    for x in cases:
        emitted, (out,) = run_emitter(em, fusion, [x])
        assert bool(out.reshape(())) == bool(np.all(x < np.float32(0.7)))
    (ks,) = emitted.kernels
    assert ks.constexprs["TR"] == 4096 and ks.launch.num_warps == 8  # 4096-element tiles, 8 warps
    triton_runtime.compile_for_target(ks)


# ---------------------------------------------------------------------------- rule boundaries
def _reduce_hlo(in_shape: str, out_shape: str, dims: str, et: str = "f32", epilogue: str = "") -> str:
    root = "reduce"
    extra = ""
    if epilogue:
        extra = f"\n  ROOT e = {et}{out_shape} {epilogue}(r)"
        root = ""
    return f"""
HloModule t
add {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT s = {et}[] add(a, b)
}}
fused {{
  p = {et}{in_shape} parameter(0)
  c = {et}[] constant(0)
  {"ROOT " if root else ""}r = {et}{out_shape} reduce(p, c), dimensions={{{dims}}}, to_apply=add{extra}
}}
ENTRY main {{
  p = {et}{in_shape} parameter(0)
  ROOT f = {et}{out_shape} fusion(p), kind=kInput, calls=fused
}}
"""


@pytest.mark.parametrize("minor_kept,expected", [
    (32, "SmallColumnReductionFusion"), (33, "ColumnReductionFusion"),
    (16, "SmallColumnReductionFusion"), (24, "ColumnReductionFusion"), (8, "SmallColumnReductionFusion")])
def test_small_column_boundary(minor_kept, expected):
    # column reduction [1, 512, minor_kept]: SmallColumn iff warp % minor_kept == 0
    a, f = _module(_reduce_hlo(f"[512,{minor_kept}]", f"[{minor_kept}]", "0"))
    em = create_reduction_emitter(a)
    assert em.name == expected
    check_fusion(a, f, [random_value(f.operands[0].shape, np.random.default_rng(2))], compile_sm90=False, emitter=em)


@pytest.mark.parametrize("reduced,expected", [(31, None), (32, "ColumnReductionFusion")])
def test_column_faster_than_elemental_boundary(reduced, expected):
    # column reductions with fewer reduced rows than a warp stay elemental (loop emitter)
    a, _ = _module(_reduce_hlo(f"[{reduced},40]", "[40]", "0"))
    em = create_reduction_emitter(a)
    assert (em.name if em else None) == expected


@pytest.mark.parametrize("rows,cols,expected", [
    (4096, 64, "MultiRowReductionFusion"),   # power of two, <= warp * vector(2 for f32)
    (4096, 128, "RowReductionFusion"),       # wider than warp * vector
    (4096, 48, "RowReductionFusion"),        # not a power of two
    (4096, 8, "MultiRowReductionFusion"),
    (16, 64, "RowReductionFusion"),          # few rows: the vector is halved for core_count blocks, 64 > warp * 1
])
def test_multi_row_boundary(rows, cols, expected):
    a, f = _module(_reduce_hlo(f"[{rows},{cols}]", f"[{rows}]", "1"))
    em = create_reduction_emitter(a)
    assert em.name == expected
    if rows * cols <= 1 << 14:
        check_fusion(a, f, [random_value(f.operands[0].shape, np.random.default_rng(3))], compile_sm90=False, emitter=em)


@pytest.mark.parametrize("shape,out,dims,ok", [
    ("[8,16384]", "[8]", "1", True), ("[8,16385]", "[8]", "1", False),       # row: d2 <= 1024*16
    ("[4096,64]", "[64]", "0", True), ("[4097,64]", "[64]", "0", False),     # column: d1 <= warp*128
    ("[8,4,64]", "[4]", "0,2", True), ("[9,4,64]", "[4]", "0,2", False),     # row: d0 <= 8
])
def test_race_free_bound_allows_epilogue(shape, out, dims, ok):
    a, f = _module(_reduce_hlo(shape, out, dims, epilogue="negate"))
    em = create_reduction_emitter(a)
    assert (em is not None) == ok
    if ok and f.operands[0].shape.numel <= 1 << 17:
        check_fusion(a, f, [random_value(f.operands[0].shape, np.random.default_rng(6))], compile_sm90=False, emitter=em)


# -------------------------------------------------------------------- variadic / init / multi-output
@pytest.mark.parametrize("shape,out,dim", [("37,300", "37", "1"), ("300,37", "37", "0")])
def test_variadic_argmax_reduction(shape, out, dim):
    text = ARGMAX.replace("SHAPE", shape).replace("OUT", out).replace("DIM", dim)
    a, f = _module(text)
    # the roots are get-tuple-elements of the reduce: not reduction heroes, so XLA keeps this a loop
    # fusion; the Row/Column kernels still apply (a variadic tl.reduce over a tuple)
    cls = RowReductionFusion if dim == "1" else ColumnReductionFusion
    x = random_value(f.operands[0].shape, np.random.default_rng(7))
    x[3, 5] = x[3, 6] = x[4, 5] = 50.0  # ties: the smaller index wins
    with pytest.raises(EmitterUnsupported, match="no reduce"):
        cls(a).emit()
    text2 = text.replace("""  v = f32[OUT] get-tuple-element(red), index=0
  i = s32[OUT] get-tuple-element(red), index=1
  ROOT t = (f32[OUT], s32[OUT]) tuple(v, i)""".replace("OUT", out), "")
    text2 = text2.replace("red = (", "ROOT red = (")
    a, f = _module(text2)
    em = create_reduction_emitter(a)
    assert em is not None and isinstance(em, cls)
    emitted, outs = run_emitter(em, f, [x])
    ref = evaluate_instruction(f, [x])
    np.testing.assert_array_equal(outs[0].reshape(ref[0].shape), ref[0])
    np.testing.assert_array_equal(outs[1].reshape(ref[1].shape), ref[1])
    axis = int(dim)
    np.testing.assert_array_equal(outs[1].reshape(ref[1].shape), np.argmax(x, axis=axis))
    assert "tl.reduce((" in emitted.kernels[0].source
    triton_runtime.compile_for_target(emitted.kernels[0])


def test_non_identity_init_is_applied_once():
    text = _reduce_hlo("[6,100]", "[6]", "1").replace("c = f32[] constant(0)", "c = f32[] constant(10)")
    a, f = _module(text)
    x = np.ones((6, 100), np.float32)
    _, (out,) = run_emitter(create_reduction_emitter(a), f, [x])
    np.testing.assert_array_equal(out, np.full(6, 110.0, np.float32))


MULTI = """
HloModule multi
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
fused {
  p = f32[24,200] parameter(0)
  q = f16[24,200] parameter(1)
  e = f32[24,200] exponential(p)
  qc = f32[24,200] convert(q)
  prod = f32[24,200] multiply(e, qc)
  z = f32[] constant(0)
  ninf = f32[] constant(-inf)
  s = f32[24] reduce(prod, z), dimensions={1}, to_apply=add
  m = f32[24] reduce(p, ninf), dimensions={1}, to_apply=mx
  h = f16[24] convert(s)
  bc = f16[4,6] bitcast(h)
  side = f32[4800] bitcast(prod)
  ROOT t = (f16[4,6], f32[24], f32[4800], f32[24,200]) tuple(bc, m, side, e)
}
ENTRY main {
  p = f32[24,200] parameter(0)
  q = f16[24,200] parameter(1)
  ROOT f = (f16[4,6], f32[24], f32[4800], f32[24,200]) fusion(p, q), kind=kInput, calls=fused
}
"""


def test_multi_output_reductions_side_outputs_and_epilogue():
    a, f = _module(MULTI)
    em = create_reduction_emitter(a)
    assert em.name == "RowReductionFusion"
    ops = [random_value(o.shape, np.random.default_rng(8)) for o in f.operands]
    emitted = check_fusion(a, f, ops)
    src = emitted.kernels[0].source
    assert src.count("tl.reduce(") == 2 and src.count("@triton.jit") == 3  # two combiners and the kernel


def test_f16_sum_accumulates_in_f32():
    text = _reduce_hlo("[4,4096]", "[4]", "1", et="f16")
    a, f = _module(text)
    x = np.full((4, 4096), 1.0, np.float16)
    x[:, ::2] = np.float16(0.0999755859375)
    _, (out,) = run_emitter(create_reduction_emitter(a), f, [x])
    ref = (np.float32(0.0999755859375) * 2048 + 2048).astype(np.float16)
    np.testing.assert_array_equal(out, np.full(4, ref, np.float16))


def test_launch_dimensions_reported():
    a, f = _module(_reduce_hlo("[300,1000]", "[1000]", "0"))
    emitted = create_reduction_emitter(a).emit()
    (ks,) = emitted.kernels
    cx = ks.constexprs
    ta = cx["BLOCK"] // (cx["TR"] * cx["TB"])
    assert ks.launch.grid == (-(-cx["NA"] // ta) * -(-cx["NB"] // cx["TB"]),)
    assert ks.launch.shared_memory_bytes > 0
    assert (cx["NA"], cx["NR"], cx["NB"]) == (1, 300, 1000)
    # XLA's ColumnReductionFusion: 32 x 32 threads, 2-wide f32 vectors, one block per 64 columns
    assert ks.launch.to_json() == {"grid": [16, 1, 1], "threads": [1024, 1, 1], "shared_memory_bytes": 0}
    assert ks.launch.num_warps * 32 == 1024 and cx["TB"] == 64
    res = triton_runtime.compile_for_target(ks)
    assert res.num_warps == 32


# --------------------------------------------------------------------------------- property tests
_REDUCERS = {
    "f32": ["add", "maximum", "minimum"], "f16": ["add", "maximum"], "bf16": ["add", "minimum"],
    "s32": ["add", "maximum", "multiply"], "pred": ["and", "or"],
}
_INITS = {"f32": ["0", "1.5", "-inf"], "f16": ["0", "inf"], "bf16": ["0", "2"], "s32": ["0", "3", "1"],
          "pred": ["true", "false"]}


@st.composite
def reduction_cases(draw):
    rank = draw(st.integers(1, 3))
    dims = [draw(st.sampled_from([1, 2, 3, 5, 8, 13, 32, 40, 70])) for _ in range(rank)]
    perm = draw(st.permutations(list(range(rank))))
    # a run of consecutive physical positions is either the reduced or the kept dims
    start = draw(st.integers(0, rank - 1))
    length = draw(st.integers(1, rank - start))
    run = set(perm[start:start + length])
    reduced = run if draw(st.booleans()) or len(run) == rank else set(range(rank)) - run
    et = draw(st.sampled_from(sorted(_REDUCERS)))
    op = draw(st.sampled_from(_REDUCERS[et]))
    init = draw(st.sampled_from(_INITS[et]))
    epilogue = draw(st.booleans())
    return dims, tuple(perm), sorted(reduced), et, op, init, epilogue


def _case_hlo(dims, m2m, reduced, et, op, init, epilogue) -> str:
    shape = f"{et}[{','.join(map(str, dims))}]{{{','.join(map(str, m2m))}}}"
    kept = [d for d in range(len(dims)) if d not in reduced]
    out = f"{et}[{','.join(str(dims[d]) for d in kept)}]"
    pro = "not" if et == "pred" else "negate"
    tail = f"  ROOT e = {out} {pro}(r)" if epilogue else ""
    return f"""
HloModule prop
red {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT s = {et}[] {op}(a, b)
}}
fused {{
  p = {shape} parameter(0)
  x = {shape} {pro}(p)
  c = {et}[] constant({init})
  {"" if epilogue else "ROOT "}r = {out} reduce(x, c), dimensions={{{','.join(map(str, reduced))}}}, to_apply=red
{tail}
}}
ENTRY main {{
  p = {shape} parameter(0)
  ROOT f = {out} fusion(p), kind=kInput, calls=fused
}}
"""


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(reduction_cases())
def test_property_reduction_matches_evaluator(case):
    dims, m2m, reduced, et, op, init, epilogue = case
    a, f = _module(_case_hlo(dims, m2m, reduced, et, op, init, epilogue))
    hero = next(h for h in a.non_trivial_heroes if h.opcode == "reduce")
    rd = get_reduction_kind_and_contiguous_components(hero)
    em = create_reduction_emitter(a)
    if em is None:  # XLA would keep it elemental; the kernel shape for its 3-D view still applies
        em = (RowReductionFusion if rd.is_row_reduction else ColumnReductionFusion)(a)
    x = random_value(f.operands[0].shape, np.random.default_rng(9))
    check_fusion(a, f, [x], compile_sm90=False, emitter=em)


def test_property_sample_compiles_for_sm90():
    # one kernel per dtype through the compiler (the property test itself runs in the interpreter)
    for et, op in (("f32", "maximum"), ("f16", "add"), ("bf16", "add"), ("s32", "multiply"), ("pred", "or")):
        a, f = _module(_case_hlo([40, 70], (0, 1), [0], et, op, _INITS[et][1], True))
        r = triton_runtime.compile_for_target(create_reduction_emitter(a).emit().kernels[0])
        assert ".target sm_90a" in r.ptx


# ------------------------------------------------------------------------------------- edge cases
def test_empty_reduced_extent_gives_init_and_empty_output_gives_no_kernel():
    a, f = _module(_reduce_hlo("[0,40]", "[40]", "0").replace("c = f32[] constant(0)", "c = f32[] constant(-2.5)"))
    em = ColumnReductionFusion(a)
    _, (out,) = run_emitter(em, f, [np.zeros((0, 40), np.float32)])
    np.testing.assert_array_equal(out, np.full(40, -2.5, np.float32))
    a, f = _module(_reduce_hlo("[40,0]", "[0]", "0"))
    assert ColumnReductionFusion(a).emit().kernels == ()


def test_large_input_uses_64_bit_indices():
    a, f = _module(_reduce_hlo("[65536,40000]", "[65536]", "1", et="bf16"))
    emitted = create_reduction_emitter(a).emit()
    (ks,) = emitted.kernels
    assert "tl.program_id(0).to(tl.int64)" in ks.source
    assert ks.launch.grid[0] * (ks.constexprs["BLOCK"] // ks.constexprs["TR"]) >= 65536
    assert ".target sm_90a" in triton_runtime.compile_for_target(ks).ptx


def test_unsupported_reducer_type_names_the_instruction():
    # (c64/c128 reductions are supported: tests/emitters/test_reduction_emitter_complex.py)
    a, _ = _module(_reduce_hlo("[64,64]", "[64]", "1", et="f8e4m3fnuz"))
    with pytest.raises(EmitterUnsupported, match="f8e4m3fnuz") as ei:
        create_reduction_emitter(a).emit()
    assert ei.value.instruction
