"""Checking the read-coalescing analysis against XLA's own test expectations (``../shared/corpus/xla/indexing``).

The ``coalescing`` and ``coalescing_heuristic`` cases of the corpus come from XLA's
``coalescing_analysis_test.cc`` and run on its RTXA6000 test device; they need the fusion's analysis and the
emitter dispatch picks (:mod:`fusegen.codegen.coalescing`), so they stand here, above dispatch, beside the
indexing analysis' own cases (:mod:`fusegen.indexing.analysis_conformance`). :func:`agreement_table` is the
table of every kind that ``docs/indexing.md`` shows.
"""

from __future__ import annotations

import json
from pathlib import Path

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen.coalescing import analyze_coalescing, is_read_coalesced_heuristic
from fusegen.device import get_device
from fusegen.dispatch import get_emitter_fusion_kind
from fusegen.hlo.parser import parse_module
from fusegen.indexing import analysis_conformance
from fusegen.indexing.analysis_conformance import ANALYSIS_KINDS, CaseResult, run_case

COALESCING_KINDS = ("coalescing", "coalescing_heuristic")


def run_coalescing_case(path: Path) -> CaseResult:
    """A ``coalescing`` (map-based, RTXA6000) or ``coalescing_heuristic`` case; ``text`` is the same as
    ``semantic`` (booleans have one spelling)."""
    case = json.loads(path.read_text())
    device = get_device("rtxa6000")
    try:
        root = parse_module(path.with_suffix(".hlo").read_text()).entry.root
        if case["kind"] == "coalescing":
            res = analyze_coalescing(root, device)
            got, detail = list(res.coalesced), f"{res.kind} via {res.method}: {list(res.coalesced)}"
        else:
            analysis = FusionAnalysis.create(root, device)
            get_emitter_fusion_kind(analysis)
            got = [is_read_coalesced_heuristic(analysis.kind, device, root.operands[0], root)]
            detail = f"{analysis.kind} heuristic: {got}"
    except Exception as e:  # a crash is a miss, reported with its reason
        return CaseResult(path.stem, case["kind"], False, False, f"{type(e).__name__}: {e}")
    ok = got == case["expected"]
    return CaseResult(path.stem, case["kind"], ok, ok, detail)


def agreement_table(corpus: Path) -> str:
    """The markdown agreement table of every analysis and coalescing kind, then the misses."""
    runners = {kind: run_case for kind in ANALYSIS_KINDS}
    runners.update({kind: run_coalescing_case for kind in COALESCING_KINDS})
    return analysis_conformance.agreement_table(corpus, runners)


if __name__ == "__main__":  # python -m fusegen.codegen.coalescing_conformance [CORPUS]
    import sys

    print(agreement_table(Path(sys.argv[1]) if len(sys.argv) > 1 else analysis_conformance.DEFAULT_CORPUS))
