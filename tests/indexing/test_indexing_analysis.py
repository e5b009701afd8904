"""The indexing analysis against XLA's own expectations (``../shared/corpus/xla/indexing``) and independent
oracles (numpy's reshape/transposition of real arrays)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from fusegen.hlo.ir import Layout, Shape
from fusegen.hlo.layout_util import bitcast as np_bitcast
from fusegen.hlo.parser import parse_module
from fusegen.indexing import IndexingMap, parse_indexing_map
from fusegen.indexing.analysis import (
    compute_input_to_output_indexing, compute_output_to_input_indexing, compute_output_to_input_indexing_physical,
)
from fusegen.indexing.analysis_conformance import (
    ExpectedIndexing, corpus_cases, indexing_equal, run_case, sets_equal, split_instruction_text,
)
from fusegen.indexing.analysis_shapes import bitcast_map, reshape_exprs
from fusegen.indexing.analysis_types import OperandIndexing

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "xla" / "indexing"
needs_corpus = pytest.mark.skipif(not (CORPUS / "INDEX.tsv").exists(), reason=f"corpus absent: {CORPUS}")


def _cases(kind: str) -> list[Path]:
    if not (CORPUS / "INDEX.tsv").exists():
        return []
    return corpus_cases(CORPUS, (kind,))


def _ids(paths):
    return [p.stem for p in paths]


@needs_corpus
@pytest.mark.parametrize("kind", ["output_to_input", "input_to_output", "grouped_output_to_input",
                                  "epilogue_input_to_output"])
def test_corpus_kind_at_least_95_percent_semantically_equal(kind):
    results = [run_case(p) for p in _cases(kind)]
    assert results, f"no {kind} cases in {CORPUS}"
    misses = [f"{r.name}: {r.detail}" for r in results if not r.semantic]
    assert sum(r.semantic for r in results) >= 0.95 * len(results), "\n".join(misses)


@needs_corpus
@pytest.mark.parametrize("path", _cases("output_to_input"), ids=_ids(_cases("output_to_input")))
def test_output_to_input_case(path):
    r = run_case(path)
    assert r.semantic, r.detail


@needs_corpus
@pytest.mark.parametrize("path", _cases("input_to_output"), ids=_ids(_cases("input_to_output")))
def test_input_to_output_case(path):
    r = run_case(path)
    assert r.semantic, r.detail


@needs_corpus
@pytest.mark.parametrize("path", _cases("grouped_output_to_input"), ids=_ids(_cases("grouped_output_to_input")))
def test_grouped_case(path):
    r = run_case(path)
    assert r.semantic, r.detail


def test_comparator_rejects_a_wrong_map():
    """The semantic comparison is not vacuous: a transposed map, a narrower domain, a missing runtime
    variable and an extra map all fail."""
    right = OperandIndexing(parse_indexing_map("(d0, d1) -> (d1, d0), domain: d0 in [0, 39], d1 in [0, 19]"))
    exp = ExpectedIndexing("(d0, d1) -> (d1, d0), domain: d0 in [0, 39], d1 in [0, 19]")
    assert indexing_equal(exp, right)
    assert not indexing_equal(exp, OperandIndexing(parse_indexing_map(
        "(d0, d1) -> (d0, d1), domain: d0 in [0, 39], d1 in [0, 19]")))
    assert not indexing_equal(exp, OperandIndexing(parse_indexing_map(
        "(d0, d1) -> (d1, d0), domain: d0 in [0, 38], d1 in [0, 19]")))
    assert not indexing_equal(ExpectedIndexing(exp.map, (("parameter(1)", "(d0, d1) -> ()"),)), right)
    assert not sets_equal([exp], [right, right])


def test_expected_text_splits_runtime_variables_and_operands():
    text = ("operand id = 0 (d0){rt0} -> (d0 + rt0), domain: d0 in [0, 3], rt0 in [0, 5] runtime variables: "
            "rt0: parameter(1); (d0) -> (), domain: d0 in [0, 3] operand id = 1 (d0) -> (), domain: d0 in [0, 3]")
    ops = split_instruction_text(text)
    assert [len(o) for o in ops] == [1, 1]
    assert ops[0][0].rt_vars == (("parameter(1)", "(d0) -> (), domain: d0 in [0, 3]"),)


HLO_TRANSPOSE = """
HloModule m
ENTRY e {
  p0 = f32[20, 40] parameter(0)
  ROOT t = f32[40, 20] transpose(p0), dimensions={1, 0}
}
"""


def test_seed_transpose_example():
    """The emitters doc's transpose ``[20, 40] -> [40, 20]``: output (d0, d1) reads input (d1, d0)."""
    root = parse_module(HLO_TRANSPOSE).entry.root
    (maps,) = compute_output_to_input_indexing(root).indexing_maps
    assert str(maps[0].map) == "(d0, d1) -> (d1, d0), domain: d0 in [0, 39], d1 in [0, 19]"
    (back,) = compute_input_to_output_indexing(root, 0).indexing_maps
    assert str(back[0].map) == "(d0, d1) -> (d1, d0), domain: d0 in [0, 19], d1 in [0, 39]"


def _check_against_numpy(m: IndexingMap, src: np.ndarray, dst: np.ndarray) -> None:
    """Every point of ``m``'s domain maps a ``src`` position to the ``dst`` position holding the same value."""
    for point in itertools.product(*[range(b.lower, b.upper + 1) for b in m.dims]):
        if not m.constraints_satisfied(point):
            continue
        assert dst[tuple(m.evaluate(point))] == src[point], (str(m), point)


@pytest.mark.parametrize("in_dims,in_m2m,out_dims,out_m2m", [
    ((4, 6), (1, 0), (24,), (0,)),
    ((4, 6), (0, 1), (6, 4), (1, 0)),             # transpose bitcast
    ((3, 4, 5), (2, 1, 0), (12, 5), (1, 0)),
    ((2, 6, 4), (1, 2, 0), (4, 3, 4), (0, 2, 1)),  # transpose-reshape-transpose
    ((6, 5), (0, 1), (5, 2, 3), (1, 2, 0)),
])
def test_bitcast_map_moves_elements_like_the_physical_buffer(in_dims, in_m2m, out_dims, out_m2m):
    a = Shape("f32", in_dims, Layout(in_m2m))
    b = Shape("f32", out_dims, Layout(out_m2m))
    src = np.arange(a.numel, dtype=np.float32).reshape(in_dims)
    dst = np_bitcast(src, a, b)
    _check_against_numpy(bitcast_map(a, b), src, dst)


@pytest.mark.parametrize("src_dims,dst_dims", [((4, 8, 12), (32, 3, 4)), ((8, 16), (4, 32)), ((30,), (2, 3, 5)),
                                               ((2, 3, 5), (5, 6))])
def test_reshape_map_matches_numpy_reshape(src_dims, dst_dims):
    """Output-to-input reshape map: output index -> the input index numpy's row-major reshape reads."""
    m = IndexingMap.from_tensor_sizes(reshape_exprs(src_dims, dst_dims), dst_dims)
    out = np.arange(int(np.prod(src_dims))).reshape(src_dims)
    _check_against_numpy(m, out.reshape(dst_dims), out)


HLO_PHYSICAL = """
HloModule m
ENTRY e {
  p0 = f32[10, 20, 30] parameter(0)
  ROOT add0 = f32[10, 20, 30]{1, 0, 2} exponential(p0)
}
"""


def test_physical_layout_output_permutation():
    root = parse_module(HLO_PHYSICAL).entry.root
    (maps,) = compute_output_to_input_indexing_physical(root).indexing_maps
    # output physical dims are [30, 10, 20]; the input's physical = logical order
    assert str(maps[0].map) == "(d0, d1, d2) -> (d1, d2, d0), domain: d0 in [0, 29], d1 in [0, 9], d2 in [0, 19]"


HLO_UNKNOWN = """
HloModule m
ENTRY e {
  p1 = f32[4,4] parameter(0)
  p2 = f32[4,3] parameter(1)
  ROOT out = f32[4,3] triangular-solve(p1, p2), left_side=true, lower=true, transpose_a=NO_TRANSPOSE, unit_diagonal=true
}
"""


def test_uncovered_op_is_unknown_indexing():
    root = parse_module(HLO_UNKNOWN).entry.root
    ind = compute_output_to_input_indexing(root)
    assert ind.to_string(" ") == "operand id = 0 unknown indexing operand id = 1 unknown indexing "


# --------------------------------------------------------------------------------------------------------------
# Independent oracle: fusegen's reference evaluator. Every operand element is a unique number, so the value at
# each output point of a data-movement fusion names the one operand element it came from; the analysis must map
# that output point there (and no other non-scalar operand's map may claim the point; a scalar operand, such as
# pad's padding value, is mapped from every point, as XLA maps it).
ORACLE_BODIES = {
    "transpose_reshape": ("f32[6,4]{1,0}", ["f32[4,6]{1,0}"],
                          "t = f32[6,4]{1,0} transpose(p0), dimensions={1,0}\n"
                          "r = f32[24]{0} reshape(t)\n  ROOT o = f32[6,4]{1,0} reshape(r)"),
    "bitcast_layout": ("f32[3,8]{1,0}", ["f32[2,3,4]{0,2,1}"], "ROOT o = f32[3,8]{1,0} bitcast(p0)"),
    "slice_reverse": ("f32[3,4]{1,0}", ["f32[9,10]{1,0}"],
                      "s = f32[3,4]{1,0} slice(p0), slice={[1:9:3], [2:10:2]}\n"
                      "  ROOT o = f32[3,4]{1,0} reverse(s), dimensions={0,1}"),
    "pad": ("f32[13]{0}", ["f32[5]{0}", "f32[]"], "ROOT o = f32[13]{0} pad(p0, p1), padding=1_-1_2"),
    "concat_broadcast": ("f32[3,7]{1,0}", ["f32[3,2]{1,0}", "f32[5]{0}"],
                         "b = f32[3,5]{1,0} broadcast(p1), dimensions={1}\n"
                         "  ROOT o = f32[3,7]{1,0} concatenate(p0, b), dimensions={1}"),
    "reshape_collapse_expand": ("f32[4,6]{1,0}", ["f32[2,3,4]{2,1,0}"], "ROOT o = f32[4,6]{1,0} reshape(p0)"),
}


def _oracle_module(out: str, params: list[str], body: str) -> str:
    fparams = "\n  ".join(f"p{i} = {s} parameter({i})" for i, s in enumerate(params))
    args = ", ".join(f"a{i}" for i in range(len(params)))
    eparams = "\n  ".join(f"a{i} = {s} parameter({i})" for i, s in enumerate(params))
    return (f"HloModule m\nf {{\n  {fparams}\n  {body}\n}}\n"
            f"ENTRY e {{\n  {eparams}\n  ROOT fusion = {out} fusion({args}), kind=kLoop, calls=f\n}}\n")


@pytest.mark.parametrize("name", sorted(ORACLE_BODIES))
def test_output_to_input_maps_agree_with_the_evaluator(name):
    from fusegen.evaluator.evaluator import evaluate_module

    module = parse_module(_oracle_module(*ORACLE_BODIES[name]))
    fusion = module.entry.root
    big = 1000
    args = [(np.arange(p.shape.numel, dtype=np.float32) + big * (k + 1)).reshape(p.shape.dimensions)
            for k, p in enumerate(fusion.operands)]
    out = np.asarray(evaluate_module(module, args))
    indexing = compute_output_to_input_indexing(fusion)
    for point in itertools.product(*[range(n) for n in fusion.shape.dimensions]):
        value = int(out[point])
        k, flat = value // big - 1, value % big
        want = tuple(int(i) for i in np.unravel_index(flat, fusion.operands[k].shape.dimensions))
        for j, items in enumerate(indexing):
            hits = [it.map.evaluate(point) for it in items if it.map.constraints_satisfied(point)]
            if j == k:
                assert want in hits, (name, point, j, [str(it.map) for it in items])
            elif fusion.operands[j].shape.dimensions:
                assert not hits, (name, point, j, [str(it.map) for it in items])


I2O_OPS = {
    "transpose": ("f32[4,3,2]", ["f32[3,2,4]"], "transpose(a0), dimensions={2,0,1}", 0),
    "reshape": ("f32[6,4]", ["f32[2,3,4]"], "reshape(a0)", 0),
    "bitcast": ("f32[4,6]{0,1}", ["f32[2,3,4]{2,0,1}"], "bitcast(a0)", 0),
    "slice": ("f32[3,2]", ["f32[8,7]"], "slice(a0), slice={[1:8:3], [2:6:2]}", 0),
    "reverse": ("f32[3,5]", ["f32[3,5]"], "reverse(a0), dimensions={1}", 0),
    "broadcast": ("f32[2,3,4]", ["f32[3]"], "broadcast(a0), dimensions={1}", 0),
    "concatenate": ("f32[2,7]", ["f32[2,3]", "f32[2,4]"], "concatenate(a0, a1), dimensions={1}", 1),
}


@pytest.mark.parametrize("name", sorted(I2O_OPS))
def test_input_to_output_maps_agree_with_the_evaluator(name):
    """For every element of operand ``input_id``, the input-to-output map yields exactly the output points that
    hold it."""
    from fusegen.evaluator.evaluator import evaluate_module

    out_shape, params, op, input_id = I2O_OPS[name]
    eparams = "\n  ".join(f"a{i} = {s} parameter({i})" for i, s in enumerate(params))
    module = parse_module(f"HloModule m\nENTRY e {{\n  {eparams}\n  ROOT o = {out_shape} {op}\n}}\n")
    root = module.entry.root
    args = [(np.arange(p.shape.numel, dtype=np.float32) + 1000 * (k + 1)).reshape(p.shape.dimensions)
            for k, p in enumerate(root.operands)]
    out = np.asarray(evaluate_module(module, args))
    (items,) = compute_input_to_output_indexing(root, input_id).indexing_maps
    (m,) = [it.map for it in items]
    src = args[input_id]
    for q in itertools.product(*[range(n) for n in src.shape]):
        want = {tuple(int(i) for i in p) for p in zip(*np.nonzero(out == src[q]))}
        got = set()
        for s in itertools.product(*[range(b.lower, b.upper + 1) for b in m.syms]):
            if m.constraints_satisfied(q, s):
                got.add(m.evaluate(q, s))
        assert got == want, (name, q, str(m))


PRINT_INDEXING = CORPUS.parent / "modules" / "tools__print_indexing_test.hlo"


@pytest.mark.skipif(not PRINT_INDEXING.exists(), reason=f"corpus absent: {PRINT_INDEXING}")
def test_xla_print_indexing_tool_checks():
    """XLA's ``print_indexing`` tool test: every ``Output i operand j`` map of the multi-output fusion, and no
    map for an operand it does not list."""
    import re

    from fusegen.indexing import semantically_equal

    text = PRINT_INDEXING.read_text()
    checks = re.findall(r"// CHECK: Output (\d+) operand (\d+):\n// CHECK: (.+)\n", text)
    assert checks
    fusion = parse_module(text).entry.root
    expected: dict[tuple[int, int], str] = {(int(o), int(k)): m for o, k, m in checks}
    for out_id in {o for o, _ in expected}:
        ind = compute_output_to_input_indexing(fusion, out_id)
        for k, items in enumerate(ind):
            if (out_id, k) in expected:
                assert len(items) == 1 and semantically_equal(parse_indexing_map(expected[(out_id, k)]), items[0].map)
            else:
                assert items == [], (out_id, k, [str(i) for i in items])


REDUCING_OPS = {
    "reduce": ("f32[5]", ["f32[4,5,6]", "f32[]"], "reduce(a0, a1), dimensions={0,2}, to_apply=add"),
    "reduce_window_pad_stride": ("f32[4,8]", ["f32[7,8]", "f32[]"],
                                 "reduce-window(a0, a1), window={size=3x2 stride=2x1 pad=1_1x0_1}, to_apply=add"),
    "reduce_window_base_dilation": ("f32[6,4]", ["f32[4,3]", "f32[]"],
                                    "reduce-window(a0, a1), window={size=2x2 lhs_dilate=2x2}, to_apply=add"),
    "dot": ("f32[2,3,5]", ["f32[2,3,4]", "f32[2,4,5]"],
            "dot(a0, a1), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}"),
}


@pytest.mark.parametrize("name", sorted(REDUCING_OPS))
def test_reduction_maps_rebuild_the_op(name):
    """Summing (or multiply-adding, for dot) the operand elements the output-to-input maps name, over every
    symbol value in the domain, reproduces the evaluator's result: the maps read exactly the right elements."""
    from fusegen.evaluator.evaluator import evaluate_module

    out_shape, params, op = REDUCING_OPS[name]
    eparams = "\n  ".join(f"a{i} = {s} parameter({i})" for i, s in enumerate(params))
    module = parse_module("HloModule m\nadd {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n"
                          "  ROOT s = f32[] add(x, y)\n}\n"
                          f"ENTRY e {{\n  {eparams}\n  ROOT o = {out_shape} {op}\n}}\n")
    root = module.entry.root
    rng = np.random.default_rng(0)
    args = [rng.integers(1, 9, size=p.shape.dimensions).astype(np.float32) if p.shape.dimensions
            else np.float32(0) for p in root.operands]
    out = np.asarray(evaluate_module(module, args))
    ind = compute_output_to_input_indexing(root)
    m0 = ind[0][0].map
    m1 = ind[1][0].map if root.operands[1].shape.dimensions else None
    for p in itertools.product(*[range(n) for n in root.shape.dimensions]):
        total = 0.0
        for s in itertools.product(*[range(b.lower, b.upper + 1) for b in m0.syms]):
            if not m0.constraints_satisfied(p, s):
                continue
            a = args[0][m0.evaluate(p, s)]
            total += a * args[1][m1.evaluate(p, s)] if m1 is not None else a
        assert total == out[p], (name, p, str(m0))


RT_OPS = {
    "dynamic_slice": ("s32[2,3]", ["s32[5,7]", "s32[]", "s32[]"],
                      "dynamic-slice(a0, a1, a2), dynamic_slice_sizes={2,3}", [None, np.int32(2), np.int32(99)]),
    "gather": ("s32[4,2,3]", ["s32[6,7]", "s32[4,2]"],
               "gather(a0, a1), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={1,0}, "
               "index_vector_dim=1, slice_sizes={2,3}",
               [None, np.array([[0, 0], [4, 1], [2, 5], [9, -3]], dtype=np.int32)]),
}


@pytest.mark.parametrize("name", sorted(RT_OPS))
def test_runtime_variable_maps_agree_with_the_evaluator(name):
    """Each runtime variable, read from its origin operand through its map and clamped to its feasible
    interval (as XLA clamps the offsets), turns the map into the element the evaluator actually read."""
    from fusegen.evaluator.evaluator import evaluate_module

    out_shape, params, op, fixed = RT_OPS[name]
    eparams = "\n  ".join(f"a{i} = {s} parameter({i})" for i, s in enumerate(params))
    module = parse_module(f"HloModule m\nENTRY e {{\n  {eparams}\n  ROOT o = {out_shape} {op}\n}}\n")
    root = module.entry.root
    src = np.arange(root.operands[0].shape.numel, dtype=np.int32).reshape(root.operands[0].shape.dimensions)
    args = [src] + [f for f in fixed[1:]]
    out = np.asarray(evaluate_module(module, args))
    (item,) = compute_output_to_input_indexing(root)[0]
    assert item.rt_vars and len(item.rt_vars) == item.map.num_rt_vars
    for p in itertools.product(*[range(n) for n in root.shape.dimensions]):
        rts = []
        for bounds, rv in zip(item.map.rts, item.rt_vars):
            v = np.asarray(args[rv.instruction.parameter_number])[rv.map.evaluate(p)]
            rts.append(min(max(int(v), bounds.lower), bounds.upper))
        assert src[item.map.evaluate(p, (), rts)] == out[p], (name, p, str(item))


def test_ragged_dot_non_contracting_reads_its_row_and_every_group():
    """Ragged (non-contracting) dot ``[M, K] x [G, K, N]``: output ``(m, n)`` reads all of lhs row ``m``, column
    ``n`` of every group's rhs (the group owning row ``m`` is a runtime fact) and every group size; a ragged
    contracting dimension is unknown."""
    hlo = """HloModule m
ENTRY main {
  p0 = f32[6,4] parameter(0)
  p1 = f32[3,4,5] parameter(1)
  p2 = s64[3] parameter(2)
  ROOT rd = f32[6,5] ragged-dot(p0, p1, p2), lhs_contracting_dims={1}, rhs_contracting_dims={1}, %s
}"""
    root = parse_module(hlo % "lhs_ragged_dims={0}, rhs_group_dims={0}").entry.root
    ind = compute_output_to_input_indexing(root)

    def image(m: IndexingMap, point) -> set:
        return {m.evaluate(point, s) for s in itertools.product(*[range(b.lower, b.upper + 1) for b in m.syms])}

    for m_, n_ in [(0, 0), (5, 3), (2, 4)]:
        assert image(ind[0][0].map, (m_, n_)) == {(m_, k) for k in range(4)}
        assert image(ind[1][0].map, (m_, n_)) == {(g, k, n_) for g in range(3) for k in range(4)}
        assert image(ind[2][0].map, (m_, n_)) == {(g,) for g in range(3)}
    contracting = parse_module(hlo.replace("f32[6,5]", "f32[3,6,5]").replace("f32[3,4,5]", "f32[4,5]") %
                               "lhs_ragged_dims={1}, rhs_group_dims={}").entry.root
    assert all(items[0].map.is_undefined for items in compute_output_to_input_indexing(contracting))
