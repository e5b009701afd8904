"""SortFusion: every sort of the shared corpus (today: bug B20's argsort-of-argsort) and synthetic sorts run
in the Triton interpreter against the reference evaluator, compile for sm_90, keep s64 end to end, are
stable, and sort padding last."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS
from sort_programs import _cmp, _sort_module

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.device import get_device
from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Module
from fusegen.hlo.parser import parse_module
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves, make_inputs, random_array
from fusegen_plugins.emitters.sort import MAX_SORT_SIZE

RTX = get_device("rtxa6000")


def _corpus(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"shared corpus not found at {p}")
    return p


def run_sort(inst: Instruction, ops: list, device=RTX):
    """Dispatch ``inst`` (a kSort fusion or a plain sort), run the emitted kernel, compare with the evaluator."""
    analysis = FusionAnalysis.create(inst, device)
    assert get_emitter_fusion_kind(analysis).kind == "kSort"
    em, factory = get_fusion_emitter(analysis)
    assert factory is not None and factory.name == "sort"
    emitted = em.emit()
    assert emitted.emitter == "SortFusion"
    outs = triton_runtime.run_fusion(emitted, ops, inst)
    ref = evaluate_instruction(inst, ops)
    for k, (o, r, s) in enumerate(zip(outs, leaves(ref), inst.shape.leaves())):
        c = compare(o, r, s.element_type)
        assert c.ok, f"{inst.name} leaf {k} ({s.element_type}): max abs {c.max_abs_error}"
        assert o.dtype == np.asarray(r).dtype
    return em, emitted, outs


def _evaluate_entry(m: Module, args: list, on_sort) -> dict:
    vals: dict[int, object] = {}
    for inst in m.entry.post_order():
        if inst.opcode == "parameter":
            vals[id(inst)] = args[inst.parameter_number]
            continue
        ops = [vals[id(o)] for o in inst.operands]
        is_sort = inst.opcode == "sort" or (inst.opcode == "fusion" and (
            inst.attrs.get("kind") == "kSort" or inst.fused_computation.root.opcode == "sort"))
        vals[id(inst)] = on_sort(inst, ops) if is_sort else evaluate_instruction(inst, ops)
    return vals


# ------------------------------------------------------------------------------------------------
# corpus
# ------------------------------------------------------------------------------------------------
def _corpus_sort_files() -> list[Path]:
    if not CORPUS.exists():
        return []
    out = []
    for p in sorted(CORPUS.rglob("*.hlo")):
        text = p.read_text(errors="replace")
        if re.search(r"\ssort\(", text):
            out.append(p)
    index = CORPUS / "xla" / "cases" / "INDEX.tsv"
    if index.exists():
        for line in index.read_text().splitlines()[1:]:
            cols = line.split("\t")
            if len(cols) >= 3 and cols[2] == "kSort" and (CORPUS / "xla" / "cases" / cols[0]) not in out:
                out.append(CORPUS / "xla" / "cases" / cols[0])
    return out


SORT_FILES = _corpus_sort_files()
#: Corpus sort files the emitter misses; strict xfails with the reason.
KNOWN_MISSES: dict[str, str] = {}


def test_corpus_sorts_found():
    _corpus(CORPUS)
    assert any(p.name == "B20.hlo" for p in SORT_FILES)


@pytest.mark.parametrize("path", [pytest.param(p, id=p.name, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[p.name]))
                                  if p.name in KNOWN_MISSES else pytest.param(p, id=p.name) for p in SORT_FILES])
def test_corpus_sorts_match_evaluator_and_compile(path):
    m = parse_module(path.read_text(), str(path))
    emitted_all = []

    def on_sort(inst, ops):
        _, emitted, outs = run_sort(inst, ops)
        emitted_all.append(emitted)
        return tuple(outs) if inst.shape.is_tuple else outs[0]

    for seed in (0, 1):
        _evaluate_entry(m, make_inputs(m, seed=seed), on_sort)
    assert emitted_all
    for e in emitted_all[: len(emitted_all) // 2]:
        for ks in e.kernels:
            r = triton_runtime.compile_for_target(ks)
            assert ".target sm_90a" in r.ptx and r.cubin_bytes > 0


def test_b20_argsort_of_argsort_s64_is_the_inverse_permutation():
    m = parse_module(_corpus(CORPUS / "bugs" / "B20.hlo").read_text(), "B20.hlo")
    x = np.array([7, 2, 9, 0, 5, 1, 8, 3, 6, 4], dtype=np.int64)
    kernels = []

    def on_sort(inst, ops):
        em, emitted, outs = run_sort(inst, ops)
        kernels.append(emitted.kernels[0])
        assert all(o.dtype == np.int64 for o in outs)
        return tuple(outs)

    vals = _evaluate_entry(m, [x], on_sort)
    p, ip = vals[id(m.entry.root)]
    np.testing.assert_array_equal(p, [3, 5, 1, 7, 9, 4, 8, 0, 6, 2])
    np.testing.assert_array_equal(ip, x)
    # s64 end to end: every buffer of both kernels is s64, and both compile
    assert len(kernels) == 2 and all(p.shape.element_type == "s64" for ks in kernels for p in ks.params)
    for ks in kernels:
        assert ".target sm_90a" in triton_runtime.compile_for_target(ks).ptx
    # a bigger random permutation, ties impossible: argsort(argsort(x)) == x
    rng = np.random.default_rng(0)
    big = rng.permutation(1000).astype(np.int64)
    text = _corpus(CORPUS / "bugs" / "B20.hlo").read_text()
    m2 = parse_module(text.replace("s64[10]", "s64[1000]"), "B20-1000")
    vals = _evaluate_entry(m2, [big], on_sort)
    np.testing.assert_array_equal(vals[id(m2.entry.root)][1], big)


# ------------------------------------------------------------------------------------------------
# synthetic sorts
# ------------------------------------------------------------------------------------------------
def _run_text(text: str, ops: list):
    m = parse_module(text, "t")
    return run_sort(m.entry.root, ops)


@pytest.mark.parametrize("n", [1, 2, 3, 7, 8, 33, 100, 257])
def test_sizes_with_padding(n):
    text = _sort_module([f"f32[{n}]"], 0, _cmp(["f32"], "  ROOT lt = pred[] compare(l0, r0), direction=LT"))
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    em, emitted, outs = _run_text(text, [x])
    np.testing.assert_array_equal(outs[0], np.sort(x))
    npad = 1 << max(0, (n - 1).bit_length())
    if npad <= MAX_SORT_SIZE:  # one program's register network
        assert emitted.kernels[0].constexprs["NPAD"] == npad
    else:  # the multi-launch sort: the bitonic kernels cover the row, padding virtual
        assert emitted.kernels[0].constexprs["NSORT"] == n and len(emitted.kernels) == len(em.xla_launches())


def test_padding_sorts_last_even_when_comparator_says_otherwise():
    # GT comparator (descending): padding lanes hold 0s and would otherwise win against negatives.
    text = _sort_module(["s32[5]"], 0, _cmp(["s32"], "  ROOT gt = pred[] compare(l0, r0), direction=GT"))
    x = np.array([-5, -1, -7, -3, -2], np.int32)
    _, _, outs = _run_text(text, [x])
    np.testing.assert_array_equal(outs[0], [-1, -2, -3, -5, -7])


def test_stable_key_value_sort_keeps_ties_in_order():
    text = _sort_module(["s32[300]", "s32[300]"], 0,
                        _cmp(["s32", "s32"], "  ROOT lt = pred[] compare(l0, r0), direction=LT"))
    rng = np.random.default_rng(1)
    keys = rng.integers(0, 4, 300).astype(np.int32)
    vals = np.arange(300, dtype=np.int32)
    _, _, outs = _run_text(text, [keys, vals])
    np.testing.assert_array_equal(outs[1], np.argsort(keys, kind="stable"))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # inf - inf inside compare()
@pytest.mark.parametrize("direction", ["LT", "GT"])
@pytest.mark.parametrize("et", ["f32", "bf16", "f16", "f64"])
def test_totalorder_floats_with_nan_and_signed_zero(direction, et):
    text = _sort_module([f"{et}[12]", "s32[12]"], 0, _cmp([et, "s32"],
                        f"  ROOT c = pred[] compare(l0, r0), direction={direction}, type=TOTALORDER"))
    dt = dtypes.numpy_dtype(et)
    x = np.array([1.5, -0.0, np.nan, 0.0, -np.inf, 2.0, -np.nan, np.inf, -3.0, 0.0, 1.5, -0.0]).astype(dt)
    _, _, outs = _run_text(text, [x, np.arange(12, dtype=np.int32)])
    # the values travel bit-exactly (NaN payloads and signs included)
    w = {2: np.uint16, 4: np.uint32, 8: np.uint64}[np.dtype(dt).itemsize]
    assert sorted(outs[0].view(w).tolist()) == sorted(x.view(w).tolist())


def test_lexicographic_comparator_on_two_keys_and_pred_payload():
    body = """  lt0 = pred[] compare(l0, r0), direction=LT
  eq0 = pred[] compare(l0, r0), direction=EQ
  gt1 = pred[] compare(l1, r1), direction=GT
  both = pred[] and(eq0, gt1)
  ROOT r = pred[] or(lt0, both)"""
    text = _sort_module(["s8[4,50]", "f32[4,50]", "pred[4,50]"], 1, _cmp(["s8", "f32", "pred"], body))
    rng = np.random.default_rng(2)
    a = rng.integers(-3, 3, (4, 50)).astype(np.int8)
    b = np.round(rng.standard_normal((4, 50)), 1).astype(np.float32)
    c = rng.random((4, 50)) < 0.5
    _run_text(text, [a, b, c])


@pytest.mark.parametrize("dim", [0, 1, 2])
def test_middle_and_major_dims_with_layouts(dim):
    shapes = ["f32[5,6,7]{0,2,1}", "s32[5,6,7]{2,1,0}"]
    text = _sort_module(shapes, dim, _cmp(["f32", "s32"], "  ROOT lt = pred[] compare(l0, r0), direction=LT"))
    rng = np.random.default_rng(dim)
    _run_text(text, [rng.standard_normal((5, 6, 7)).astype(np.float32), rng.integers(0, 100, (5, 6, 7)).astype(np.int32)])


def test_many_short_rows_are_batched_per_program():
    text = _sort_module(["u16[300,6]"], 1, _cmp(["u16"], "  ROOT lt = pred[] compare(l0, r0), direction=LT"))
    x = np.random.default_rng(3).integers(0, 65535, (300, 6)).astype(np.uint16)
    em, emitted, outs = _run_text(text, [x])
    ks = emitted.kernels[0]
    # compiled: XLA's launch (one block per row, NPAD / 4 threads); interpreted: rows batched per program
    assert ks.constexprs["R"] == 1 and ks.launch.to_json()["grid"] == [300, 1, 1]
    assert ks.launch.threads3 == (2, 1, 1) and ks.launch.num_warps == 1
    assert ks.interpret_variant.constexprs["R"] > 1 and ks.interpret_variant.launch.grid[0] < 300
    np.testing.assert_array_equal(outs[0], np.sort(x, axis=1))


@pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning")  # NaN keys inside compare()
@pytest.mark.parametrize("shape,packed", [
    ("f32[300,4]", (32, 1, 10)),     # XLA: 300 blocks of 1 thread -> 10 programs of a warp, a row a lane
    ("bf16[64,4]", (32, 1, 2)),
    ("f32[777,2]", (128, 4, 7)),     # XLA's standard launch, 7 blocks of 128 threads: the same launch
    ("f32[219,3]", None),            # a 3-element row is not contiguous in its 4-lane tile: a row a program
    ("f32[40,4]{0,1}", None),        # rows strided in memory: a row a program
])
def test_rows_of_up_to_four_elements_run_a_row_a_lane(shape, packed):
    """XLA gives a row of at most 4 (padded) elements one thread; the compiled kernel packs 32 rows a warp so
    that each lane holds its row (vector loads, the network in registers), and that program itself, not the
    interpreter's variant, sorts NaN keys and ties as the evaluator does."""
    import attrs

    from fusegen.codegen.kernel import EmittedFusion

    et = shape.split("[")[0]
    text = _sort_module([shape, shape.replace(et, "s32", 1)], 1, _cmp(
        [et, "s32"], "  ROOT c = pred[] compare(l0, r0), direction=GT, type=TOTALORDER"))
    m = parse_module(text, "t")
    inst = m.entry.root
    rows, n = inst.operands[0].shape.dimensions
    rng = np.random.default_rng(rows)
    keys = rng.integers(-2, 3, (rows, n)).astype(np.float32)
    keys[rng.random((rows, n)) < 0.2] = np.nan  # ties of equal values and of NaNs
    keys = keys.astype(dtypes.numpy_dtype(et))
    ops = [keys, np.broadcast_to(np.arange(n, dtype=np.int32), (rows, n)).copy()]
    em, emitted, _ = run_sort(inst, ops)
    ks = emitted.kernels[0]
    xla = em.launch_dimensions()
    if packed is None:
        assert ks.constexprs["R"] == 1 and ks.launch.grid == (rows,)
        return
    r, warps, grid = packed
    assert (ks.constexprs["R"], ks.launch.num_warps, ks.launch.grid) == (r, warps, (grid,))
    assert ks.constexprs["BLOCK"] == r * ks.constexprs["NPAD"] == 32 * warps * ks.constexprs["NPAD"]
    # XLA's threads, in whole warps: its grid where its block is whole warps
    xla_threads = xla.num_programs * xla.threads3[0]
    assert grid == -(-xla_threads // (32 * warps))
    if xla.threads3[0] >= 32:
        assert xla.grid3 == (grid, 1, 1) and xla.threads3[0] == 32 * warps
    compiled = EmittedFusion(emitter=emitted.emitter, kernels=(attrs.evolve(ks, interpret_variant=None),))
    outs = triton_runtime.run_fusion(compiled, ops, inst)
    ref = evaluate_instruction(inst, ops)
    for o, want in zip(outs, leaves(ref)):
        np.testing.assert_array_equal(np.asarray(o).view(np.uint8), np.asarray(want).view(np.uint8))


def test_iota_operand_fused_sort_and_compiles():
    text = """
HloModule t
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT lt = pred[] compare(a, b), direction=GT
}
fused {
  x = f32[8,64] parameter(0)
  io = s32[8,64] iota(), iota_dimension=1
  ROOT s = (f32[8,64], s32[8,64]) sort(x, io), dimensions={1}, is_stable=true, to_apply=cmp
}
ENTRY e {
  x = f32[8,64] parameter(0)
  ROOT f = (f32[8,64], s32[8,64]) fusion(x), kind=kSort, calls=fused
}
"""
    x = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    em, emitted, outs = _run_text(text, [x])
    np.testing.assert_array_equal(outs[1], np.argsort(-x, axis=1, kind="stable"))
    r = triton_runtime.compile_for_target(emitted.kernels[0])
    assert ".target sm_90a" in r.ptx and r.cubin_bytes > 0
    assert 0 <= r.shared_bytes <= emitted.kernels[0].launch.shared_memory_bytes
    assert r.num_warps == emitted.kernels[0].launch.num_warps


def test_sort_longer_than_one_program_takes_the_multi_launch_sort():
    # more elements than one program's register network: XLA's launches over the output buffers (issue 10),
    # one kernel each
    n = 2 * MAX_SORT_SIZE
    text = _sort_module([f"f32[{n}]"], 0, _cmp(["f32"], "  ROOT lt = pred[] compare(l0, r0), direction=LT"))
    x = np.round(np.random.default_rng(5).standard_normal(n) * 4).astype(np.float32)
    em, emitted, outs = _run_text(text, [x])
    np.testing.assert_array_equal(outs[0], np.sort(x))
    assert len(emitted.kernels) == len(em.xla_launches()) and emitted.launch == em.launch_dimensions()


# ------------------------------------------------------------------------------------------------
# property test
# ------------------------------------------------------------------------------------------------
@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_random_sorts_match_evaluator(data):
    et = data.draw(st.sampled_from(["f32", "f16", "bf16", "s32", "pred"]))
    rank = data.draw(st.integers(1, 3))
    dims = [data.draw(st.integers(1, 9)) for _ in range(rank)]
    dim = data.draw(st.integers(0, rank - 1))
    direction = data.draw(st.sampled_from(["LT", "GT"]))
    total = data.draw(st.booleans()) and et not in ("s32", "pred")
    with_values = data.draw(st.booleans())
    stable = data.draw(st.booleans())
    m2m = data.draw(st.permutations(list(range(rank))))
    layout = "{" + ",".join(map(str, m2m)) + "}"
    shape = f"{et}[{','.join(map(str, dims))}]{layout}"
    shapes = [shape] + ([f"s32[{','.join(map(str, dims))}]"] if with_values else [])
    cmp_type = ", type=TOTALORDER" if total else ""
    text = _sort_module(shapes, dim, _cmp([et] + (["s32"] if with_values else []),
                                          f"  ROOT c = pred[] compare(l0, r0), direction={direction}{cmp_type}"), stable)
    m = parse_module(text, "prop")
    seed = data.draw(st.integers(0, 10_000))
    rng = np.random.default_rng(seed)
    ops = [random_array(o.shape, rng) for o in m.entry.root.operands]
    if et in ("f32", "f16", "bf16"):  # a few repeated keys so stability matters
        ops[0] = np.round(ops[0].astype(np.float32), 0).astype(ops[0].dtype)
    run_sort(m.entry.root, ops)
