"""XLA's read-coalescing analysis against ``coalescing_analysis_test.cc`` (``../shared/corpus/xla/indexing``,
kinds ``coalescing`` and ``coalescing_heuristic``, on XLA's RTXA6000 test device)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen.coalescing import analyze_coalescing, is_read_coalesced_heuristic
from fusegen.device import get_device
from fusegen.dispatch import get_emitter_fusion_kind
from fusegen.hlo.parser import parse_module
from fusegen.indexing import IndexingMap, parse_indexing_map
from fusegen.indexing.analysis_conformance import corpus_cases
from fusegen.indexing.coalescing import is_indexing_coalesced

CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "xla" / "indexing"
needs_corpus = pytest.mark.skipif(not (CORPUS / "INDEX.tsv").exists(), reason=f"corpus absent: {CORPUS}")


def _cases(kind: str) -> list[Path]:
    return corpus_cases(CORPUS, (kind,)) if (CORPUS / "INDEX.tsv").exists() else []


@needs_corpus
@pytest.mark.parametrize("path", _cases("coalescing"), ids=[p.stem for p in _cases("coalescing")])
def test_coalescing_case(path):
    case = json.loads(path.read_text())
    root = parse_module(path.with_suffix(".hlo").read_text()).entry.root
    result = analyze_coalescing(root, get_device("rtxa6000"))
    assert result.method == "maps", f"{path.stem}: decided by the heuristic ({result.kind})"
    assert list(result.coalesced) == case["expected"]


@needs_corpus
@pytest.mark.parametrize("path", _cases("coalescing_heuristic"), ids=[p.stem for p in _cases("coalescing_heuristic")])
def test_coalescing_heuristic_case(path):
    case = json.loads(path.read_text())
    root = parse_module(path.with_suffix(".hlo").read_text()).entry.root
    device = get_device("rtxa6000")
    analysis = FusionAnalysis.create(root, device)
    get_emitter_fusion_kind(analysis)
    assert [is_read_coalesced_heuristic(analysis.kind, device, root.operands[0], root)] == case["expected"]


def _warp_map(result: str) -> IndexingMap:
    """A thread-id map over the six launch ids with one vector symbol."""
    return parse_indexing_map(f"(d0, d1, d2, d3, d4, d5)[s0] -> ({result}), domain: d0 in [0, 127], d1 in [0, 0], "
                              "d2 in [0, 0], d3 in [0, 99], d4 in [0, 0], d5 in [0, 0], s0 in [0, 3]")


@pytest.mark.parametrize("result,element_type,expected", [
    ("d3 * 512 + d0 * 4 + s0", "f32", True),     # each thread 4 consecutive floats: one 512-byte run per warp
    ("d0 + s0 * 128", "f32", True),              # f(thread_x) = thread_x: 32 consecutive floats
    ("d0 * 64 + s0", "f32", False),              # 32 runs of 4 floats, 64 apart
    ("(d0 mod 8) * 1000 + d0 floordiv 8", "f32", False),
])
def test_is_indexing_coalesced(result, element_type, expected):
    assert is_indexing_coalesced(_warp_map(result), element_type) is expected


def test_unknown_map_is_not_coalesced_and_scalar_is():
    assert is_indexing_coalesced(IndexingMap.unknown(), "f32") is False
    assert is_indexing_coalesced(IndexingMap.from_tensor_sizes([], [128, 1, 1, 4, 1, 1]), "f32") is True
