"""The scatter emitter (ScatterWithDistributedUpdates / ScatterWithDistributedIndices): corpus scatter fusions
and bug B07 run in the Triton interpreter against the reference evaluator with in-bounds and out-of-bounds
indices, compile for sm_90, follow XLA's sub-emitter rule at its boundary, and use native atomics."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conftest import CORPUS

from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
from fusegen.codegen import triton_runtime
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.device import get_device
from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction
from fusegen.hlo.parser import parse_module
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves, random_array
from fusegen_plugins.emitters.scatter import choose_scatter_emitter, describe_scatter

CASES = CORPUS / "xla" / "cases"
RTX = get_device("rtxa6000")


def _kind_cases(kind: str) -> list[str]:
    index = CASES / "INDEX.tsv"
    if not index.exists():
        return []
    out = []
    for line in index.read_text().splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 3 and cols[2] == kind:
            out.append(cols[0])
    return out


SCATTER_CASES = _kind_cases("kScatter")
#: Corpus scatter cases the emitter misses (none today); strict xfails with the reason.
KNOWN_MISSES: dict[str, str] = {}


def _corpus(p: Path) -> Path:
    if not p.exists():
        pytest.skip(f"shared corpus not found at {p}")
    return p


def _scatter_of(fusion: Instruction) -> Instruction:
    if fusion.opcode == "scatter":
        return fusion
    return fusion.fused_computation.root


def _np_dtype(et: str):
    return dtypes.numpy_dtype(et)


def scatter_inputs(fusion: Instruction, seed: int = 0, index_mode: str = "mixed") -> tuple[list, dict]:
    """Random operands for a scatter fusion (or a plain scatter instruction).

    Index operands that are fusion parameters get a mix of in-bounds and out-of-bounds start indices
    (``index_mode="mixed"``), all equal to 0 (``"zero"``), or sorted distinct ones when the scatter is hinted
    ``unique_indices``. Returns the operands and facts about the indices drawn (``in`` / ``out`` counts).
    """
    rng = np.random.default_rng(seed)
    sc = _scatter_of(fusion)
    n = (len(sc.operands) - 1) // 2
    ind = sc.operands[n]
    vals = [random_array(o.shape, rng) for o in fusion.operands]
    facts = {"param_indices": False}
    if fusion.opcode == "scatter":
        k = n
    elif ind.opcode == "parameter":
        k = ind.parameter_number
    else:
        return vals, facts
    facts["param_indices"] = True
    d = describe_scatter(sc)
    shp = fusion.operands[k].shape
    ivd = d.index_vector_dim
    nvec = len(d.scatter_dims_to_operand_dims)
    his = [d.operand_dims[od] - d.window_sizes[od] for od in d.scatter_dims_to_operand_dims]
    S = d.num_slices
    cols = np.zeros((S, nvec), dtype=np.int64)
    unique = str(sc.attrs.get("unique_indices", "false")).lower() == "true"
    if index_mode == "zero":
        pass
    else:
        for c, hi in enumerate(his):
            cols[:, c] = rng.integers(0, max(hi, 0) + 1, size=S)
        if unique and S:
            # distinct (and sorted) first components, one of them out of bounds when there is room
            pool = np.arange(-2, his[0] + 3)
            pick = np.sort(rng.choice(pool, size=min(S, pool.size), replace=False))
            if S > 1 and not ((pick < 0) | (pick > his[0])).any():
                pick[-1] = his[0] + 1
            cols[: pick.size, 0] = pick
        else:
            n_out = max(1, S // 4) if S > 1 else 0
            for r in rng.choice(S, size=n_out, replace=False):
                c = int(rng.integers(0, nvec))
                cols[r, c] = -1 - int(rng.integers(0, 3)) if rng.random() < 0.5 else his[c] + 1 + int(rng.integers(0, 3))
            if str(sc.attrs.get("indices_are_sorted", "false")).lower() == "true":
                cols = cols[np.lexsort(cols.T[::-1])]
    # lay the [S, nvec] matrix out as the indices operand (index vector at index_vector_dim)
    sshape = tuple(x for j, x in enumerate(shp.dimensions) if j != ivd)
    v = cols.reshape(sshape + (nvec,))
    if ivd < len(shp.dimensions):
        v = np.moveaxis(v, -1, ivd)
    else:
        v = v.reshape(shp.dimensions)
    vals[k] = v.astype(_np_dtype(shp.element_type))
    # which slices are in bounds (the whole window must fit)
    idx = np.asarray(vals[k]).astype(np.int64)
    idx = idx[..., None] if ivd == idx.ndim else np.moveaxis(idx, ivd, -1)
    ok = np.ones(idx.shape[:-1], dtype=bool)
    for c, od in enumerate(d.scatter_dims_to_operand_dims):
        ok &= (idx[..., c] >= 0) & (idx[..., c] <= d.operand_dims[od] - d.window_sizes[od])
    facts["in"], facts["out"] = int(ok.sum()), int((~ok).sum())
    return vals, facts


def run_scatter(fusion: Instruction, ops: list, device=RTX, expect_emitter: str | None = None):
    analysis = FusionAnalysis.create(fusion, device)
    assert get_emitter_fusion_kind(analysis).kind == "kScatter"
    em, factory = get_fusion_emitter(analysis)
    assert factory is not None and factory.name == "scatter", factory
    emitted = em.emit()
    if expect_emitter:
        assert emitted.emitter == expect_emitter
    outs = triton_runtime.run_fusion(emitted, ops, fusion)
    ref = evaluate_instruction(fusion, ops)
    for k, (o, r, s) in enumerate(zip(outs, leaves(ref), fusion.shape.leaves())):
        c = compare(o, r, s.element_type)
        assert c.ok, f"{fusion.name} leaf {k} ({s.element_type}): max abs {c.max_abs_error}, rel {c.max_rel_error}"
    return em, emitted, outs, ref


def _compile_all(emitted) -> list:
    res = []
    for ks in emitted.kernels:
        r = triton_runtime.compile_for_target(ks)
        assert ".target sm_90a" in r.ptx and r.cubin_bytes > 0
        res.append(r)
    return res


# ------------------------------------------------------------------------------------------------
# corpus
# ------------------------------------------------------------------------------------------------
def test_corpus_has_scatter_cases():
    _corpus(CASES)
    assert len(SCATTER_CASES) >= 8


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_MISSES[n]))
                                  if n in KNOWN_MISSES else n for n in SCATTER_CASES])
def test_corpus_scatter_case_matches_evaluator_and_compiles(name):
    m = parse_module(_corpus(CASES / name).read_text(), name)
    f = entry_fusion(m)
    saw_in = saw_out = False
    for seed in (0, 1):
        ops, facts = scatter_inputs(f, seed)
        em, emitted, outs, ref = run_scatter(f, ops)
        if facts["param_indices"]:
            saw_in |= facts["in"] > 0
            saw_out |= facts["out"] > 0
    if _scatter_of(f).operands[0].opcode == "parameter":
        assert emitted.output_aliases == {k: _scatter_of(f).operands[k].parameter_number
                                          for k in range(len(f.shape.leaves()))}
    if (_scatter_of(f).operands[(len(_scatter_of(f).operands) - 1) // 2]).opcode == "parameter":
        assert saw_in and saw_out, "index inputs must exercise in-bounds and out-of-bounds windows"
    _compile_all(emitted)


def test_corpus_scatter_pass_rate():
    _corpus(CASES)
    assert len(KNOWN_MISSES) <= 0.05 * len(SCATTER_CASES)


def test_oob_window_is_dropped_whole():
    # operand rows 0..9, window of 2 rows: start 9 would write row 9 and 10 -> dropped entirely; start 8 fits.
    text = """
HloModule t
add { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
fused {
  o = f32[10,5] parameter(0)
  i = s32[4,1] parameter(1)
  u = f32[4,2,5] parameter(2)
  ROOT s = f32[10,5] scatter(o, i, u), update_window_dims={1,2}, inserted_window_dims={}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}
ENTRY e {
  o = f32[10,5] parameter(0)
  i = s32[4,1] parameter(1)
  u = f32[4,2,5] parameter(2)
  ROOT f = f32[10,5] fusion(o, i, u), kind=kScatter, calls=fused
}
"""
    m = parse_module(text, "t")
    f = m.entry.root
    o = np.zeros((10, 5), np.float32)
    i = np.array([[9], [8], [-1], [0]], np.int32)
    u = np.ones((4, 2, 5), np.float32)
    _, _, outs, _ = run_scatter(f, [o, i, u])
    np.testing.assert_array_equal(outs[0][:, 0], [1, 1, 0, 0, 0, 0, 0, 0, 1, 1])


# ------------------------------------------------------------------------------------------------
# B07: f32 add must be the native float atomic add
# ------------------------------------------------------------------------------------------------
def _b07(rows: int = 399, n: int = 40960, width: int = 128) -> Instruction:
    text = _corpus(CORPUS / "bugs" / "B07.hlo").read_text()
    text = text.replace("f32[399,128]", f"f32[{rows},{width}]").replace("s32[40960,1]", f"s32[{n},1]") \
        .replace("f32[40960,128]", f"f32[{n},{width}]")
    m = parse_module(text, "B07.hlo")
    return m.entry.root


def test_b07_full_size_uses_native_float_atomic_add():
    f = _b07()
    em, _ = get_fusion_emitter(FusionAnalysis.create(f, RTX), "kScatter")
    emitted = em.emit()
    assert em.strategy == "atomic"
    (ks,) = emitted.kernels
    assert "tl.atomic_add(" in ks.source
    assert "atomic_cas" not in ks.source and "while" not in ks.source
    (r,) = _compile_all(emitted)
    adds = re.findall(r"(?:red|atom)\.global[.\w]*\.add\.f32", r.ptx)
    assert adds, "no native f32 atomic add in the PTX"
    assert "atom.global.cas" not in r.ptx and ".cas." not in r.ptx


@pytest.mark.parametrize("mode", ["zero", "mixed"])
def test_b07_small_contended_and_uniform(mode):
    f = _b07(rows=13, n=96, width=8)
    ops, facts = scatter_inputs(f, seed=3, index_mode=mode)
    ops[0] = np.zeros_like(ops[0])
    ops[2] = np.ones_like(ops[2])
    _, emitted, outs, _ = run_scatter(f, ops)
    assert "tl.atomic_add(" in emitted.kernels[0].source
    if mode == "zero":  # all 96 updates land on row 0
        np.testing.assert_array_equal(outs[0][0], np.full(8, 96, np.float32))
        assert not outs[0][1:].any()
    else:
        assert facts["in"] and facts["out"]


# ------------------------------------------------------------------------------------------------
# sub-emitter rule: sorted, non-unique and num_slices > 4 * core_count -> distributed indices
# ------------------------------------------------------------------------------------------------
def _scatter_text(num_slices: int, window: int = 4, rows: int = 64, et: str = "f32", sorted_: bool = True,
                  unique: bool = False, combiner: str = "add") -> str:
    hints = f"indices_are_sorted={'true' if sorted_ else 'false'}, unique_indices={'true' if unique else 'false'}"
    return f"""
HloModule t
comb {{ a = {et}[] parameter(0)  b = {et}[] parameter(1)  ROOT s = {et}[] {combiner}(a, b) }}
fused {{
  o = {et}[{rows},{window}] parameter(0)
  i = s32[{num_slices},1] parameter(1)
  u = {et}[{num_slices},1,{window}] parameter(2)
  ROOT s = {et}[{rows},{window}] scatter(o, i, u), update_window_dims={{1,2}}, inserted_window_dims={{}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, {hints}, to_apply=comb
}}
ENTRY e {{
  o = {et}[{rows},{window}] parameter(0)
  i = s32[{num_slices},1] parameter(1)
  u = {et}[{num_slices},1,{window}] parameter(2)
  ROOT f = {et}[{rows},{window}] fusion(o, i, u), kind=kScatter, calls=fused
}}
"""


@pytest.mark.parametrize("device_name,cores", [("rtxa6000", 84), ("h200", 132)])
def test_distributed_indices_rule_boundary(device_name, cores):
    dev = get_device(device_name)
    assert dev.core_count == cores
    limit = 4 * cores
    for n, sorted_, unique, want in [
        (limit, True, False, "ScatterWithDistributedUpdates"),
        (limit + 1, True, False, "ScatterWithDistributedIndices"),
        (limit + 1, False, False, "ScatterWithDistributedUpdates"),
        (limit + 1, True, True, "ScatterWithDistributedUpdates"),
    ]:
        m = parse_module(_scatter_text(n, sorted_=sorted_, unique=unique), "t")
        f = m.entry.root
        desc = describe_scatter(f.fused_computation.root)
        assert desc.num_slices == n
        assert choose_scatter_emitter(desc, dev) == want
        em, _ = get_fusion_emitter(FusionAnalysis.create(f, dev), "kScatter")
        assert em.name == want and em.emit().emitter == want


@pytest.mark.parametrize("combiner,et", [("add", "f32"), ("maximum", "s32"), ("add", "f16"), ("add", "c64")])
def test_distributed_indices_kernel_matches_evaluator(combiner, et):
    m = parse_module(_scatter_text(4 * 84 + 1, window=4, rows=40, et=et, combiner=combiner), "t")
    f = m.entry.root
    ops, facts = scatter_inputs(f, seed=5)
    if et == "f16":  # small integers: f16 sums are exact whatever order the runs are combined in
        ops[0] = np.round(ops[0] * 2).astype(np.float16)
        ops[2] = np.round(ops[2] * 2).astype(np.float16)
    assert facts["in"] > 100 and facts["out"] > 0
    em, emitted, outs, _ = run_scatter(f, ops, expect_emitter="ScatterWithDistributedIndices")
    src = emitted.kernels[-1].source
    assert re.search(r"for t\w* in range\(0, PER\)", src) and ("tl.atomic_add(" in src or "tl.atomic_max(" in src)
    _compile_all(emitted)


# ------------------------------------------------------------------------------------------------
# combiners: native atomics where they exist, the ordered serial path otherwise
# ------------------------------------------------------------------------------------------------
OVERWRITE = "ROOT overwrite"
KEEP = "ROOT keep"


def _combiner_module(body: str, et: str, n_slices: int = 12, rows: int = 6, width: int = 3, unique: bool = False) -> str:
    if body.strip() in (OVERWRITE, KEEP):
        root = "b" if body.strip() == OVERWRITE else "a"
        comb = "\n".join(f"  {'ROOT ' if x == root else ''}{x} = {et}[] parameter({k})" for k, x in enumerate("ab"))
    else:
        comb = f"  a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n{body}"
    return f"""
HloModule t
comb {{
{comb}
}}
fused {{
  o = {et}[{rows},{width}] parameter(0)
  i = s32[{n_slices}] parameter(1)
  u = {et}[{n_slices},{width}] parameter(2)
  ROOT s = {et}[{rows},{width}] scatter(o, i, u), update_window_dims={{1}}, inserted_window_dims={{0}}, scatter_dims_to_operand_dims={{0}}, index_vector_dim=1, unique_indices={'true' if unique else 'false'}, to_apply=comb
}}
ENTRY e {{
  o = {et}[{rows},{width}] parameter(0)
  i = s32[{n_slices}] parameter(1)
  u = {et}[{n_slices},{width}] parameter(2)
  ROOT f = {et}[{rows},{width}] fusion(o, i, u), kind=kScatter, calls=fused
}}
"""


COMBINER_CASES = [
    # (root line, element type, expected strategy, atomic spelled in the source)
    ("  ROOT r = f32[] add(a, b)", "f32", "atomic", "tl.atomic_add("),
    ("  ROOT r = f32[] add(b, a)", "f32", "atomic", "tl.atomic_add("),
    ("  ROOT r = f64[] add(a, b)", "f64", "atomic", "tl.atomic_add("),
    ("  ROOT r = bf16[] add(a, b)", "bf16", "atomic", "tl.atomic_add("),
    ("  ROOT r = s32[] add(a, b)", "s32", "atomic", "tl.atomic_add("),
    ("  ROOT r = u32[] add(a, b)", "u32", "atomic", "tl.atomic_add("),
    ("  ROOT r = s64[] add(a, b)", "s64", "atomic", "tl.atomic_add("),
    ("  ROOT r = f32[] maximum(a, b)", "f32", "atomic", "tl.atomic_max("),
    ("  ROOT r = f32[] minimum(a, b)", "f32", "atomic", "tl.atomic_min("),
    ("  ROOT r = s32[] minimum(a, b)", "s32", "atomic", "tl.atomic_min("),
    ("  ROOT r = u32[] maximum(a, b)", "u32", "atomic", "tl.atomic_max("),
    ("  ROOT r = s32[] and(a, b)", "s32", "atomic", "tl.atomic_and("),
    ("  ROOT r = s32[] or(a, b)", "s32", "atomic", "tl.atomic_or("),
    ("  ROOT r = s64[] xor(a, b)", "s64", "atomic", "tl.atomic_xor("),
    # XLA's compare-and-swap loop: on the element (32/64-bit) or on the 32-bit word holding it (8/16-bit)
    # a combine that is one PTX instruction: XLA's per-thread loop itself, as inline PTX
    ("  ROOT r = f32[] multiply(a, b)", "f32", "cas", "mul.rn.f32 %fgnew"),
    ("  ROOT r = f32[] multiply(b, a)", "f32", "cas", "mul.rn.f32 %fgnew"),
    ("  ROOT r = f64[] multiply(a, b)", "f64", "cas", "mul.rn.f64 %fgnew"),
    ("  ROOT r = s32[] multiply(a, b)", "s32", "cas", "mul.lo.s32 %fgnew"),
    ("  ROOT r = u64[] subtract(a, b)", "u64", "cas", "sub.s64 %fgnew"),
    ("  ROOT r = f32[] subtract(b, a)", "f32", "cas", "tl.atomic_cas("),  # update - current: the Triton loop
    ("  ROOT r = s8[] add(a, b)", "s8", "cas", "tl.atomic_cas("),
    ("  ROOT r = u8[] maximum(a, b)", "u8", "cas", "tl.atomic_cas("),
    ("  ROOT r = f16[] maximum(a, b)", "f16", "cas", "max.NaN.f16 %fgo"),
    ("  ROOT r = bf16[] minimum(b, a)", "bf16", "cas", "min.NaN.bf16 %fgo"),
    ("  ROOT r = s16[] maximum(a, b)", "s16", "cas", "max.s16 %fgo"),
    ("  ROOT r = u16[] minimum(a, b)", "u16", "cas", "min.u16 %fgo"),
    ("  ROOT r = bf16[] multiply(a, b)", "bf16", "cas", "tl.atomic_cas("),
    ("  ROOT r = s16[] multiply(a, b)", "s16", "cas", "tl.atomic_cas("),
    ("  ROOT r = pred[] or(a, b)", "pred", "cas", "tl.atomic_cas("),
    ("  ROOT r = f32[] subtract(a, b)", "f32", "cas", "sub.rn.f32 %fgnew"),
    ("  t = f32[] multiply(b, b)\n  ROOT r = f32[] add(a, t)", "f32", "cas", "tl.atomic_cas("),
    # overwrite, indices may repeat: XLA's atomic store (a word store) or its sub-word CAS loop, as inline PTX
    (OVERWRITE, "f32", "store", None),
    (OVERWRITE, "s32", "store", None),
    (OVERWRITE, "u64", "store", None),
    (OVERWRITE, "bf16", "cas", "atom.relaxed.gpu.global.cas.b32"),
    (OVERWRITE, "f16", "cas", "atom.relaxed.gpu.global.cas.b32"),
    (OVERWRITE, "pred", "cas", "atom.relaxed.gpu.global.cas.b32"),
    (OVERWRITE, "s8", "cas", "atom.relaxed.gpu.global.cas.b32"),
    (KEEP, "f32", "keep", None),
    # complex (issue 21 item 6): (re, im) pairs, an add is one float atomic per part
    ("  ROOT r = c64[] add(a, b)", "c64", "atomic", "tl.atomic_add("),
    ("  ROOT r = c128[] add(b, a)", "c128", "atomic", "tl.atomic_add("),
    ("  ROOT r = c64[] multiply(a, b)", "c64", "serial", None),
    ("  t = c64[] multiply(b, b)\n  ROOT r = c64[] subtract(a, t)", "c64", "serial", None),
    (OVERWRITE, "c64", "serial", None),
]


@pytest.mark.parametrize("body,et,strategy,atomic", COMBINER_CASES)
def test_combiner_paths_match_evaluator(body, et, strategy, atomic):
    m = parse_module(_combiner_module(body, et), "t")
    f = m.entry.root
    ops, facts = scatter_inputs(f, seed=7)
    if et in ("f32", "f64", "bf16", "f16") and "multiply" in body:
        ops[2] = (np.abs(ops[2].astype(np.float32)) * 0.5 + 0.75).astype(ops[2].dtype)
    em, emitted, outs, _ = run_scatter(f, ops)
    assert em.strategy == strategy
    src = "\n".join(k.source for k in emitted.kernels)
    if atomic:
        assert atomic in emitted.kernels[-1].source
        assert "for s in range(0, S)" not in src
    if strategy == "serial":
        assert "for s in range(0, S)" in src and "atomic" not in src
    if strategy in ("cas", "store"):  # one lane per update element on XLA's launch, no walk over the slices
        assert "for s in range(0, S)" not in src
        assert emitted.kernels[-1].launch == em.launch_dimensions()
    if strategy == "keep":
        assert not emitted.kernels and emitted.output_aliases == {0: 0}
    assert facts["in"] and facts["out"]


@pytest.mark.parametrize("body,et", [("  ROOT r = f32[] add(a, b)", "f32"), ("  ROOT r = bf16[] add(a, b)", "bf16"),
                                     ("  ROOT r = f32[] maximum(a, b)", "f32"), ("  ROOT r = f64[] minimum(a, b)", "f64"),
                                     ("  ROOT r = u32[] maximum(a, b)", "u32"), ("  ROOT r = s32[] xor(a, b)", "s32"),
                                     ("  ROOT r = s8[] add(a, b)", "s8"), (OVERWRITE, "f32"),
                                     (OVERWRITE, "bf16"), (OVERWRITE, "pred"), ("  ROOT r = f16[] maximum(a, b)", "f16"),
                                     ("  ROOT r = bf16[] maximum(a, b)", "bf16"), ("  ROOT r = s16[] minimum(a, b)", "s16"),
                                     ("  ROOT r = f64[] multiply(a, b)", "f64"), ("  ROOT r = f32[] multiply(a, b)", "f32"),
                                     ("  ROOT r = s32[] multiply(a, b)", "s32"),
                                     ("  ROOT r = c64[] add(a, b)", "c64"), ("  ROOT r = c64[] multiply(a, b)", "c64")])
def test_combiner_kernels_compile_for_sm90(body, et):
    m = parse_module(_combiner_module(body, et), "t")
    em, _ = get_fusion_emitter(FusionAnalysis.create(m.entry.root, RTX), "kScatter")
    _compile_all(em.emit())


def test_float_max_propagates_nan():
    m = parse_module(_combiner_module("  ROOT r = f32[] maximum(a, b)", "f32", n_slices=4, rows=4, width=2), "t")
    f = m.entry.root
    o = np.array([[1, 2], [3, np.nan], [5, 6], [7, 8]], np.float32)
    i = np.array([0, 2, 2, 3], np.int32)
    u = np.array([[np.nan, 0], [9, 1], [-1, np.nan], [0, 100]], np.float32)
    _, emitted, outs, _ = run_scatter(f, [o, i, u])
    assert "tl.pointer_type(tl.int32)" in emitted.kernels[-1].source and len(emitted.kernels) == 2
    r = outs[0]
    assert np.isnan(r[0, 0]) and r[0, 1] == 2 and np.isnan(r[1, 1]) and r[2, 0] == 9 and np.isnan(r[2, 1])
    assert r[3, 1] == 100


def test_float_min_propagates_nan():
    m = parse_module(_combiner_module("  ROOT r = f32[] minimum(a, b)", "f32", n_slices=4, rows=4, width=2), "t")
    f = m.entry.root
    o = np.array([[1, 2], [3, np.nan], [5, 6], [7, 8]], np.float32)
    i = np.array([0, 2, 2, 1], np.int32)
    u = np.array([[np.nan, 0], [-9, 1], [-1, np.nan], [0, -100]], np.float32)
    _, emitted, outs, _ = run_scatter(f, [o, i, u])
    assert "tl.pointer_type(tl.uint32)" in emitted.kernels[-1].source and len(emitted.kernels) == 2
    r = outs[0]
    assert np.isnan(r[0, 0]) and r[0, 1] == 0 and np.isnan(r[1, 1]) and r[1, 0] == 0
    assert r[2, 0] == -9 and np.isnan(r[2, 1])


def test_overwrite_with_unique_indices_is_a_plain_store():
    m = parse_module(_combiner_module(OVERWRITE, "f32", n_slices=4, unique=True), "t")
    f = m.entry.root
    o = np.zeros((6, 3), np.float32)
    i = np.array([5, 0, 9, 2], np.int32)  # 9 is out of bounds
    u = np.arange(12, dtype=np.float32).reshape(4, 3) + 1
    em, emitted, outs, _ = run_scatter(f, [o, i, u])
    assert em.strategy == "store"
    src = emitted.kernels[0].source
    assert "tl.store(" in src and "atomic" not in src
    np.testing.assert_array_equal(outs[0][5], [1, 2, 3])
    assert not outs[0][1].any()


def test_overwrite_with_repeated_indices_keeps_the_last_update():
    m = parse_module(_combiner_module(OVERWRITE, "f32", n_slices=5), "t")
    f = m.entry.root
    o = np.zeros((6, 3), np.float32)
    i = np.array([1, 1, 4, 1, -1], np.int32)
    u = np.arange(15, dtype=np.float32).reshape(5, 3)
    _, _, outs, _ = run_scatter(f, [o, i, u])
    np.testing.assert_array_equal(outs[0][1], u[3])


@pytest.mark.parametrize("et", ["bf16", "s8"])
def test_sub_word_overwrite_keeps_neighbours_and_the_last_update(et):
    """Lanes of one program write both halves (bytes) of a 32-bit word at once, some elements several times:
    the compare-and-swap on the word keeps every neighbour and, in the interpreter's lane order, the last update."""
    m = parse_module(_combiner_module(OVERWRITE, et, n_slices=8, rows=4, width=1), "t")
    f = m.entry.root
    npt = dtypes.numpy_dtype(et)
    o = np.full((4, 1), 7, npt)
    i = np.array([0, 1, 2, 3, 1, 2, 9, 2], np.int32)  # 9: out of bounds, skipped
    u = np.arange(1, 9, dtype=np.float32).reshape(8, 1).astype(npt)
    em, emitted, outs, _ = run_scatter(f, [o, i, u])
    assert em.strategy == "cas" and "atom.relaxed.gpu.global.cas.b32" in emitted.kernels[-1].source
    np.testing.assert_array_equal(outs[0][:, 0].astype(np.float32), [1, 5, 8, 4])


def test_multiply_with_repeated_indices_is_applied_in_slice_order_bit_for_bit():
    """Many lanes multiply into few elements through the per-thread CAS loop: the interpreter applies them in slice
    order, so the products round exactly as the reference's in-order loop (another order differs in the last bits)."""
    m = parse_module(_combiner_module("  ROOT r = f32[] multiply(a, b)", "f32", n_slices=64, rows=3, width=1), "t")
    f = m.entry.root
    rng = np.random.default_rng(11)
    o = np.ones((3, 1), np.float32)
    i = rng.integers(0, 3, 64).astype(np.int32)
    u = (1 + rng.random((64, 1)) * 1e-3).astype(np.float32)
    em, emitted, outs, ref = run_scatter(f, [o, i, u])
    assert "mul.rn.f32 %fgnew" in emitted.kernels[-1].source
    got, want = outs[0].view(np.uint32), np.asarray(leaves(ref)[0], np.float32).view(np.uint32)
    np.testing.assert_array_equal(got, want)
    backwards = np.ones(3, np.float32)
    for k in range(63, -1, -1):
        backwards[i[k]] *= u[k, 0]
    assert not np.array_equal(backwards.view(np.uint32), want[:, 0])  # the order is visible in the bits


def test_corpus_bf16_overwrite_scatter_is_xlas_parallel_kernel():
    """new_scatter's input_scatter_fusion.1 (bf16 overwrite, indices may repeat): XLA launches 3 x 128 threads,
    one per update, each a CAS loop on the word holding its element (its PTX: atom.relaxed.sys.global.cas.b32);
    fusegen's kernel is that kernel, not a walk over the 300 updates in one program."""
    path = Path(CORPUS) / "jax" / "launch" / "new_scatter.h200_opt.hlo"
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared corpus is not beside the checkout)")
    m = parse_module(path.read_text(), path.name)
    f = next(i for c in m.computations for i in c.instructions if i.name == "input_scatter_fusion.1")
    ops, _ = scatter_inputs(f, seed=3)
    k = next(n for n, o in enumerate(f.operands) if o.shape.element_type == "s32")
    # 300 updates on 40 elements (negative indices wrap, as the fusion's select does): repeats and neighbours
    ops[k] = np.random.default_rng(3).integers(-20, 20, 300).astype(np.int32)
    em, emitted, outs, ref = run_scatter(f, ops)
    assert len(set(ops[k] % 4096)) < 300 and np.count_nonzero(leaves(ref)[0] != ops[0]) > 20
    ks = emitted.kernels[-1]
    assert em.strategy == "cas" and ks.launch.grid == (3,) and ks.launch.num_warps * 32 == 128
    assert "for s in range" not in ks.source and "atom.relaxed.gpu.global.cas.b32" in ks.source
    r = triton_runtime.compile_for_target(ks, pointer_alignment=16)
    assert "atom.relaxed.gpu.global.cas.b32" in r.ptx and r.shared_bytes == 0


# ------------------------------------------------------------------------------------------------
# dimension numbers
# ------------------------------------------------------------------------------------------------
DIMS_CASES = {
    "index_vector_dim_first": """
HloModule t
comb { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
fused {
  o = f32[6,7,5] parameter(0)
  i = s32[2,4] parameter(1)
  u = f32[4,2,5] parameter(2)
  ROOT s = f32[6,7,5] scatter(o, i, u), update_window_dims={1,2}, inserted_window_dims={1}, scatter_dims_to_operand_dims={1,0}, index_vector_dim=0, to_apply=comb
}
ENTRY e {
  o = f32[6,7,5] parameter(0)
  i = s32[2,4] parameter(1)
  u = f32[4,2,5] parameter(2)
  ROOT f = f32[6,7,5] fusion(o, i, u), kind=kScatter, calls=fused
}
""",
    "batching_dims": """
HloModule t
comb { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
fused {
  o = f32[3,8,4] parameter(0)
  i = s32[3,5,1] parameter(1)
  u = f32[3,5,4] parameter(2)
  ROOT s = f32[3,8,4] scatter(o, i, u), update_window_dims={2}, inserted_window_dims={1}, input_batching_dims={0}, scatter_indices_batching_dims={0}, scatter_dims_to_operand_dims={1}, index_vector_dim=2, to_apply=comb
}
ENTRY e {
  o = f32[3,8,4] parameter(0)
  i = s32[3,5,1] parameter(1)
  u = f32[3,5,4] parameter(2)
  ROOT f = f32[3,8,4] fusion(o, i, u), kind=kScatter, calls=fused
}
""",
    "layouts_and_s64_indices": """
HloModule t
comb { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] maximum(a, b) }
fused {
  o = f32[9,6]{0,1} parameter(0)
  i = s64[3,7,2] parameter(1)
  u = f32[3,7]{0,1} parameter(2)
  ROOT s = f32[9,6]{0,1} scatter(o, i, u), update_window_dims={}, inserted_window_dims={0,1}, scatter_dims_to_operand_dims={0,1}, index_vector_dim=2, to_apply=comb
}
ENTRY e {
  o = f32[9,6]{0,1} parameter(0)
  i = s64[3,7,2] parameter(1)
  u = f32[3,7]{0,1} parameter(2)
  ROOT f = f32[9,6]{0,1} fusion(o, i, u), kind=kScatter, calls=fused
}
""",
    "fused_operand_and_updates": """
HloModule t
comb { a = f32[] parameter(0)  b = f32[] parameter(1)  ROOT s = f32[] add(a, b) }
fused {
  z = f32[] constant(0.5)
  o = f32[8,4] broadcast(z), dimensions={}
  i = s32[6,1] parameter(0)
  p = f32[6,4] parameter(1)
  u = f32[6,4] exponential(p)
  ROOT s = f32[8,4] scatter(o, i, u), update_window_dims={1}, inserted_window_dims={0}, scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}
ENTRY e {
  i = s32[6,1] parameter(0)
  p = f32[6,4] parameter(1)
  ROOT f = f32[8,4] fusion(i, p), kind=kScatter, calls=fused
}
""",
}


@pytest.mark.parametrize("name", sorted(DIMS_CASES))
def test_dimension_numbers(name):
    m = parse_module(DIMS_CASES[name], name)
    f = m.entry.root
    for seed in (0, 1, 2):
        ops, facts = scatter_inputs(f, seed)
        em, emitted, outs, ref = run_scatter(f, ops)
        assert facts["in"] and facts["out"]
    if name == "fused_operand_and_updates":
        assert emitted.output_aliases == {} and len(emitted.kernels) == 2  # init kernel, then the scatter
    _compile_all(emitted)


def test_unsupported_element_type_declines_naming_the_type():
    # a narrow float (held as its byte) has no arithmetic on a kernel: the combiner's add declines
    text = _combiner_module("  ROOT r = f8e4m3fnuz[] add(a, b)", "f8e4m3fnuz")
    m = parse_module(text, "t")
    em, _ = get_fusion_emitter(FusionAnalysis.create(m.entry.root, RTX), "kScatter")
    with pytest.raises(EmitterUnsupported) as ei:
        em.emit()
    assert "f8e4m3fnuz" in str(ei.value)


# ------------------------------------------------------------------------------------------------
# property test
# ------------------------------------------------------------------------------------------------
_ET_COMBINERS = {
    "f32": ["add", "maximum", "multiply", "overwrite"],
    "f16": ["add", "minimum"],
    "bf16": ["add", "maximum"],
    "s32": ["add", "minimum", "xor", "overwrite"],
    "pred": ["or", "and", "overwrite"],
}


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_property_random_scatters_match_evaluator(data):
    et = data.draw(st.sampled_from(sorted(_ET_COMBINERS)))
    comb = data.draw(st.sampled_from(_ET_COMBINERS[et]))
    rank = data.draw(st.integers(1, 3))
    dims = [data.draw(st.integers(1, 6)) for _ in range(rank)]
    inserted = sorted(data.draw(st.sets(st.integers(0, rank - 1), max_size=rank)))
    scatter_to = data.draw(st.permutations(list(range(rank))))[: data.draw(st.integers(1, rank))]
    n_slices = data.draw(st.integers(1, 9))
    window_dims = [d for d in range(rank) if d not in inserted]
    wsizes = [data.draw(st.integers(1, dims[d])) for d in window_dims]
    upd_dims = [n_slices] + wsizes
    uwd = list(range(1, 1 + len(window_dims)))
    sorted_ = data.draw(st.booleans())
    if comb == "overwrite":
        comb_text = f"a = {et}[] parameter(0)\n  ROOT b = {et}[] parameter(1)"
    else:
        comb_text = f"a = {et}[] parameter(0)\n  b = {et}[] parameter(1)\n  ROOT r = {et}[] {comb}(a, b)"
    dims_s = ",".join(map(str, dims))
    text = f"""
HloModule t
comb {{
  {comb_text}
}}
fused {{
  o = {et}[{dims_s}] parameter(0)
  i = s32[{n_slices},{len(scatter_to)}] parameter(1)
  u = {et}[{",".join(map(str, upd_dims))}] parameter(2)
  ROOT s = {et}[{dims_s}] scatter(o, i, u), update_window_dims={{{",".join(map(str, uwd))}}}, inserted_window_dims={{{",".join(map(str, inserted))}}}, scatter_dims_to_operand_dims={{{",".join(map(str, scatter_to))}}}, index_vector_dim=1, indices_are_sorted={'true' if sorted_ else 'false'}, to_apply=comb
}}
ENTRY e {{
  o = {et}[{dims_s}] parameter(0)
  i = s32[{n_slices},{len(scatter_to)}] parameter(1)
  u = {et}[{",".join(map(str, upd_dims))}] parameter(2)
  ROOT f = {et}[{dims_s}] fusion(o, i, u), kind=kScatter, calls=fused
}}
"""
    m = parse_module(text, "prop")
    f = m.entry.root
    seed = data.draw(st.integers(0, 1000))
    ops, _ = scatter_inputs(f, seed)
    if comb == "multiply":
        ops[2] = (np.abs(ops[2]) * 0.5 + 0.75).astype(np.float32)
    run_scatter(f, ops)


def test_two_component_index_vector_is_one_load_a_thread():
    """``o.at[i[:, 0], i[:, 1]].add(u)`` (tests/data/xla_kernels_v/v_scatter_add_2d_idx): jax builds the
    s32[2048, 2] index vector from two slices of the indices, wrapped for negative values, concatenated; the
    kernel reads each update's index pair as one 8-byte load, as XLA's kernel (``ld.global.nc.v2.b32``), and
    adds as numpy's ``np.add.at`` does (negative indices counted from the end)."""
    from conftest import REPO
    from kernel_inspection import global_accesses

    path = REPO / "tests" / "data" / "xla_kernels_v" / "v_scatter_add_2d_idx.h200_opt.hlo"
    m = parse_module(path.read_text(), path.name)
    f = entry_fusion(m)
    a = FusionAnalysis.create(f, get_device("h200"))
    get_emitter_fusion_kind(a)
    em, _ = get_fusion_emitter(a)
    emitted = em.emit()
    loads = {k: v for k, v in global_accesses(triton_runtime.compile_for_target(
        emitted.kernels[-1], pointer_alignment=16).ptx).items() if k[0] == "ld"}
    assert loads == {("ld", 8): 1, ("ld", 4): 1}, loads
    rng = np.random.default_rng(7)
    target = rng.standard_normal((256, 256)).astype(np.float32)
    idx = rng.integers(-256, 256, size=(2048, 2)).astype(np.int32)
    upd = rng.standard_normal(2048).astype(np.float32)
    outs = triton_runtime.run_fusion(emitted, [target, upd, idx], f)
    want = target.astype(np.float64)
    np.add.at(want, (idx[:, 0], idx[:, 1]), upd.astype(np.float64))
    np.testing.assert_allclose(outs[0], want, rtol=1e-5, atol=1e-5)
    ref = evaluate_instruction(f, [target, upd, idx])
    np.testing.assert_allclose(outs[0], ref, rtol=1e-5, atol=1e-5)


def test_bf16_max_is_xla_word_loop_and_propagates_nan():
    """A bf16 max scatter is XLA's per-thread loop on the word holding the element (``max.NaN.bf16`` between the
    swaps, no Triton loop, so no block-wide vote through shared memory); repeated indices, a NaN in either the
    operand or an update, and neighbours in one word all come out as the float64 oracle says."""
    import ml_dtypes

    m = parse_module(_combiner_module("  ROOT r = bf16[] maximum(a, b)", "bf16", n_slices=5, rows=4, width=3), "t")
    f = m.entry.root
    bf = ml_dtypes.bfloat16
    o = np.array([[1, 2, -3], [3, np.nan, 0], [5, 6, -7], [7, 8, 9]], np.float64)
    i = np.array([0, 2, 2, 3, 0], np.int32)
    u = np.array([[np.nan, 0, -4], [9, 1, 2], [-1, np.nan, -8], [0, 100, 9.5], [4, 5, 6]], np.float64)
    _, emitted, outs, _ = run_scatter(f, [o.astype(bf), i, u.astype(bf)])
    src = emitted.kernels[-1].source
    assert "max.NaN.bf16" in src and "while" not in src and "tl.atomic_cas(" not in src
    want = o.copy()
    for s_, row in enumerate(i):
        want[row] = np.where(np.isnan(want[row]) | np.isnan(u[s_]), np.nan, np.maximum(want[row], u[s_]))
    got = outs[0].astype(np.float64)
    np.testing.assert_array_equal(np.isnan(got), np.isnan(want))
    np.testing.assert_array_equal(np.nan_to_num(got), np.nan_to_num(want))
    r = triton_runtime.compile_for_target(emitted.kernels[-1])
    assert r.shared_bytes == 0 and "max.NaN.bf16" in r.ptx and "atom.relaxed.gpu.global.cas.b32" in r.ptx
