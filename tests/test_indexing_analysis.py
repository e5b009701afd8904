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

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "xla" / "indexing"
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
