"""fusegen.indexing against XLA's own indexing-map tests (../shared/corpus/xla/indexing/), one test per kind.

Each case's expected map is what XLA printed; a case counts when our result is semantically equal (same
relation on the same domain; for ``changed_flags`` cases, the same op results). Misses must be listed in
KNOWN_MISSES with the reason; the exact-text rate is asserted too, so a printer regression shows.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

from fusegen.indexing import parse_indexing_map
from fusegen.indexing.corpus import MAP_KINDS, agreement_table, run_corpus
from tests.conftest import corpus_path

# name -> why we differ from XLA (none today: 52/52 semantically equal, 46/46 exact text).
KNOWN_MISSES: dict[str, str] = {}


@pytest.fixture(scope="module")
def results():
    root = corpus_path("xla", "indexing")
    if not (root / "INDEX.tsv").exists():
        pytest.skip(f"indexing corpus not found at {root}")
    return run_corpus(root)


@pytest.mark.parametrize("kind", MAP_KINDS)
def test_corpus_kind_semantically_equal(results, kind):
    rs = [r for r in results if r.kind == kind]
    assert rs, f"no {kind} cases in the corpus"
    misses = {r.name: f"{r.reason}: got {r.got!r}, want {r.expected!r}" for r in rs if not r.semantic}
    unexpected = {n: why for n, why in misses.items() if n not in KNOWN_MISSES}
    assert not unexpected, f"new misses: {unexpected}"
    assert (len(rs) - len(misses)) / len(rs) >= 0.95, misses


@pytest.mark.parametrize("kind", MAP_KINDS)
def test_corpus_kind_exact_text(results, kind):
    text_cases = [r for r in results if r.kind == kind and r.exact is not None]
    wrong = {r.name: (r.got, r.expected) for r in text_cases if not r.exact}
    # XLA's printer is matched exactly on every text case today; keep it that way
    assert not wrong, wrong


def test_agreement_table_lists_every_kind(results):
    table = agreement_table(results)
    for kind in MAP_KINDS:
        assert f"| {kind} |" in table
    assert "| all | 52 | 52/52 (100%)" in table


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusegen.cli", "indexing", *args], capture_output=True, text=True,
                          timeout=120)


def test_cli_simplify_json():
    text = "(d0, d1) -> ((d0 mod 8) * 128 + d1 + (d0 / 8) * 1024), domain: d0 in [0, 1023], d1 in [0, 127]"
    proc = _cli("--map", text, "--simplify", "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == {"map": "(d0, d1) -> (d0 * 128 + d1), domain: d0 in [0, 1023], d1 in [0, 127]",
                                       "changed": True}


def test_cli_compose_matches_xla():
    first = "(d0)[s0] -> (d0, s0), domain: d0 in [0, 9], s0 in [0, 7]"
    second = "(d0, d1)[s0, s1] -> (d1, d0, s1, s0), domain: d0 in [0, 4], d1 in [0, 5], s0 in [0, 6], s1 in [0, 1]"
    proc = _cli("--map", first, "--compose", second, "--json")
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout)
    assert out["map"] == ("(d0)[s0, s1, s2] -> (s2, d0, s1, s0), domain: d0 in [0, 4], s0 in [0, 6], s1 in [0, 1], "
                          "s2 in [0, 5]")


def test_cli_unchanged_map():
    proc = _cli("--map", "(d0) -> (d0 mod 5), domain: d0 in [-4, 0]", "--simplify", "--json")
    assert json.loads(proc.stdout) == {"map": "(d0) -> (d0 mod 5), domain: d0 in [-4, 0]", "changed": False}


@pytest.mark.parametrize("text, column", [
    ("(d0, d1) -> (d0 + d5), domain: d0 in [0, 9], d1 in [0, 9]", 19),
    ("(d0) -> (d0), domain: d0 in [0, 9", 34),
    ("(d0) -> (d0 $ 2), domain: d0 in [0, 9]", 13),
])
def test_cli_bad_map_is_one_line_with_column(text, column):
    proc = _cli("--map", text)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"column {column}:" in lines[0], proc.stderr


_MAP_HEADER = re.compile(r"(?=\((?:[A-Za-z_0-9, ]*)\)(?:\[[^\]]*\])?(?:\{[^}]*\})? ->)")
_TRAILER = re.compile(r"\s(?:runtime variables:|replica id:|rt\d+:).*$")


def _analysis_maps(root):
    """Every map text XLA printed in the op-level cases (headers and trailers stripped)."""
    for path in sorted(root.glob("*.json")):
        case = json.loads(path.read_text())
        if case["kind"].startswith(("map_", "coalescing")):
            continue
        for text in case["expected"]:
            if not isinstance(text, str):
                continue
            for chunk in re.split(r"operand id = \d+", text):
                for piece in _MAP_HEADER.split(chunk):
                    piece = _TRAILER.sub("", piece.strip()).strip().rstrip(",")
                    if "->" in piece:
                        yield path.stem, piece


def test_xla_printed_analysis_maps_round_trip():
    """The printer reproduces every map XLA printed in its indexing-analysis tests, whitespace aside."""
    root = corpus_path("xla", "indexing")
    pairs = list(_analysis_maps(root))
    assert len(pairs) > 100
    differ = [(name, text, str(parse_indexing_map(text))) for name, text in pairs
              if "".join(str(parse_indexing_map(text)).split()) != "".join(text.split())]
    # one hand-written expectation in XLA's test prints nested divisions without parentheses
    assert [d[0] for d in differ] == ["AllGatherFusionWithReshape"], differ
