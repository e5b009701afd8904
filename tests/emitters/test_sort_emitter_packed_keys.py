"""The multi-launch sort over packed keys (:mod:`fusegen_plugins.emitters.sort_keys`, issue 22) against the
comparator network it replaces (:func:`fusegen_plugins.emitters.sort_scale.emit_at_scale` with
``packed_keys=False``) and the reference evaluator, bit for bit, in Triton's interpreter: random lexicographic
comparators (the key orders of ``test_vectorized_sort``'s generator: JAX's canonicalisation, bit tricks,
descending, several keys, select / or-and / StableSortExpander spellings) over 1-3 operands of f32 / s32 /
pred with NaNs of both signs, signed zeros and ties, stable and unstable; comparators that are no key order
keep the comparator network."""

from __future__ import annotations

import re
from pathlib import Path

import attrs
import numpy as np
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.device import get_device
from fusegen.dispatch import get_fusion_emitter
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import leaves
from fusegen_plugins.emitters.sort import MAX_SORT_SIZE
from fusegen_plugins.emitters.sort_keys import key_packing
from fusegen_plugins.emitters.sort_scale import emit_at_scale
from sort_programs import POOLS, comparators

H200 = get_device("h200")


def _fused(text: str, rows: int, n: int) -> str:
    """``text``'s ENTRY sort (``test_vectorized_sort``'s module) as a kSort fusion of ``[rows, n]`` operands."""
    text = re.sub(r"\[\d+,\d+\]", f"[{rows},{n}]", text)
    head, entry = text.split("ENTRY e {")
    params = re.findall(r"(x\d+) = (\w+\[[\d,]+\]) parameter\((\d+)\)", entry)
    out = re.search(r"ROOT s = (\([^)]*\))", entry).group(1)
    call = ", ".join(p for p, _, _ in params)
    entry_params = "\n  ".join(f"{p} = {t} parameter({i})" for p, t, i in params)
    return (f"{head}fused {{{entry}\nENTRY e {{\n  {entry_params}\n"
            f"  ROOT f = {out} fusion({call}), kind=kSort, calls=fused\n}}\n")


#: The key the packed-key network's tiled launches give lanes past the row (the comparator network has none).
_KEYED = "9223372036854775807"


def _launched(emitted):
    """``emitted`` with the launched kernels only (no interpreter variants): what the GPU runs."""
    return attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in emitted.kernels))


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck))
@given(comparators(), st.integers(MAX_SORT_SIZE + 1, 700) | st.integers(4097, 6000), st.integers(0, 2**32 - 1))
def test_packed_keys_equal_the_comparator_network(case, n, seed):
    """Rows up to 1024 take the tiled launch alone; past 4096 the global launches too (one row). The
    interpreter variants and the launched kernels (run in the interpreter too) give the same bits."""
    text, types, dims = case
    rows = dims[0] if n <= 4096 else 1
    m = parse_module(_fused(text, rows, n), "packed")
    inst = m.entry.root
    em, factory = get_fusion_emitter(FusionAnalysis.create(inst, H200))
    assert factory is not None and factory.name == "sort"
    packing = key_packing(em.comparator, em.sort.operands, em.n, None)
    rng = np.random.default_rng(seed)
    ops = [POOLS[t][rng.integers(0, len(POOLS[t]), (rows, n))] for t in types]
    emitted = em.emit()
    keyed = _KEYED in emitted.kernels[0].source
    if packing is None:  # no key order: the comparator network
        event("comparator network")
        assert not keyed
        return
    event(f"packed keys, {len(packing.levels)} levels")
    assert keyed and len(emitted.kernels) == len(em.xla_launches())  # one kernel per XLA launch
    network = emit_at_scale(em, packed_keys=False)
    ref = leaves(evaluate_instruction(inst, ops))
    for run in (emitted, _launched(emitted), network, _launched(network)):
        for o, r in zip(triton_runtime.run_fusion(run, ops, inst), ref):
            np.testing.assert_array_equal(np.asarray(o).view(np.uint8), np.asarray(r).view(np.uint8))


def test_keys_pack_most_significant_first_with_the_position():
    """JAX's argsort comparator after ComparisonExpander: one s32 key (descending for top-k), the iota
    tie-break folded into the position bits; a 64-bit key does not fit."""
    text = (Path(__file__).parents[2] / "benchmarks" / "data" / "top_k_50.h200_opt.hlo").read_text()
    m = parse_module(text, "top_k")
    fusion = next(i for i in m.entry.instructions if i.opcode == "fusion" and i.attrs["calls"].root.opcode == "sort")
    sort = fusion.attrs["calls"].root
    packing = key_packing(sort.attrs["to_apply"], sort.operands, 32000, 1)
    assert [(lv.operand, bits, kind, lv.descending) for lv, bits, kind in packing.levels] == [(0, 32, "int", True)]
    assert packing.idx_bits == 15
    # were the iota not the position, its 32 bits would be a key too: 32 + 32 + 15 bits do not fit
    assert key_packing(sort.attrs["to_apply"], sort.operands, 32000, None) is None
