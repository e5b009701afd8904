"""Every corpus sort and every corpus reduce with a combiner other than one binary op (issue 22) gives, through
the evaluator's array-program paths, the same outputs bit for bit as the one-at-a-time paths the evaluator took
before: Python's stable sort calling the comparator per comparison, and ``acc = comp(acc, x[..., k])`` for every
``k`` in order. Inputs hold ties, signed zeros, infinities and (where the comparator orders them: total-order
keys) NaNs of both signs. Rows are cut to keep the per-comparison sort short; the comparator is elementwise, so
a shorter row is as good a test of it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from conftest import CORPUS
from fusegen.evaluator.common import shape_dtype
from fusegen.evaluator.evaluator import CALLS, evaluate_instruction
from fusegen.evaluator.reduce import SEQUENTIAL_LIMIT, simple_combiner
from fusegen.evaluator.vectorized_sort import comparison_sort_order, lexicographic_plan, sort_order
from fusegen.hlo.parser import parse_modules

REPO = Path(__file__).resolve().parents[2]
ROOTS = [CORPUS, REPO / "tests" / "data", REPO / "benchmarks" / "data"]
FLOATS = np.array([0.0, -0.0, 1.5, -1.5, 3.0, np.inf, -np.inf, np.nan, -np.nan], dtype=np.float64)


def _instructions(opcode: str) -> list:
    found = []
    for root in ROOTS:
        for f in sorted(root.rglob("*.hlo")) if root.exists() else []:
            text = f.read_text(errors="replace")
            if f" {opcode}(" not in text:
                continue
            try:
                modules = parse_modules(text, str(f))
            except Exception:  # refused on purpose (the hostile corpus): not a sort to check
                continue
            for m in modules:
                for c in m.computations:
                    for i in c.instructions:
                        if i.opcode == opcode:
                            found.append(pytest.param(i, id=f"{f.name}:{i.name}"))
    return found


def _values(dt: np.dtype, shape: tuple, rng: np.random.Generator, nan: bool) -> np.ndarray:
    if dt == np.bool_:
        return rng.integers(0, 2, shape).astype(bool)
    if np.issubdtype(dt, np.integer):
        return rng.integers(-3, 4, shape).astype(dt)
    pool = FLOATS if nan else FLOATS[:7]
    return pool[rng.integers(0, len(pool), shape)].astype(dt)


SORTS = _instructions("sort")
REDUCES = [p for p in _instructions("reduce") if simple_combiner(p.values[0].attrs["to_apply"]) is None
           or len(p.values[0].operands) > 2]


def test_the_corpus_has_sorts_and_variadic_reduces():
    assert len(SORTS) >= 10 and len(REDUCES) >= 1


@pytest.mark.parametrize("inst", SORTS)
def test_corpus_sort_matches_the_per_comparison_sort(inst):
    comp = inst.attrs["to_apply"]
    rng = np.random.default_rng(len(inst.name))
    n = min(inst.operands[0].shape.dimensions[-1] if inst.operands[0].shape.rank else 1, 96)
    plan = lexicographic_plan(comp, len(inst.operands), CALLS)
    nan = plan is not None and all(lv.mode == "total" for lv in plan)  # NaN is ordered only by total keys
    moved = [_values(shape_dtype(o.shape), (2, n), rng, nan) for o in inst.operands]
    order, path = sort_order(comp, moved, CALLS)
    assert np.array_equal(order, comparison_sort_order(comp, moved, CALLS)), path
    if "TOTALORDER" in str([i.attrs.get("type") for i in comp.instructions]) or "bitcast" in str(
            [i.opcode for i in comp.instructions]):
        assert path == "keys"  # JAX's comparators take the key path


@pytest.mark.parametrize("inst", REDUCES)
def test_corpus_variadic_reduce_matches_the_in_order_fold(inst):
    comp = inst.attrs["to_apply"]
    n = len(inst.operands) // 2
    rng = np.random.default_rng(1)
    rdims = tuple(sorted(int(d) for d in inst.attrs["dimensions"]))
    shape = list(inst.operands[0].shape.dimensions)
    for d in range(len(shape)):  # keep it small: at most 8 kept and 600 reduced elements per dim
        shape[d] = min(shape[d], 600 if d in rdims else 8)
    xs = [_values(shape_dtype(o.shape), tuple(shape), rng, False) for o in inst.operands[:n]]
    inits = [_values(shape_dtype(o.shape), (), rng, False) for o in inst.operands[n:]]
    keep = [d for d in range(len(shape)) if d not in rdims]
    k = int(np.prod([shape[d] for d in rdims]))
    assert k <= SEQUENTIAL_LIMIT
    clone = _with_shapes(inst, xs, inits, keep)
    got = evaluate_instruction(clone, xs + inits)
    got = list(got) if isinstance(got, tuple) else [got]
    moved = [np.moveaxis(x, rdims, tuple(range(len(keep), len(shape)))).reshape([shape[d] for d in keep] + [k])
             for x in xs]
    accs = [np.broadcast_to(i, moved[0].shape[:-1]) for i in inits]
    for j in range(k):
        r = CALLS.call_lifted(comp, accs + [m[..., j] for m in moved])
        accs = [np.broadcast_to(np.asarray(v, a.dtype), moved[0].shape[:-1]) for v, a in
                zip(r if isinstance(r, tuple) else (r,), accs)]
    for g, a in zip(got, accs):
        assert np.array_equal(np.asarray(g).view(np.uint8), np.ascontiguousarray(a).view(np.uint8))


def _with_shapes(inst, xs, inits, keep):
    """A copy of the reduce instruction taking the cut operands (its shape follows them)."""
    import copy

    import attrs

    clone = copy.copy(inst)
    dims = tuple(xs[0].shape[d] for d in keep)
    leaves = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]
    new = [attrs.evolve(s, dimensions=dims, layout=None) for s in leaves]
    clone.shape = attrs.evolve(inst.shape, tuple_shapes=tuple(new)) if inst.shape.is_tuple else new[0]
    return clone
