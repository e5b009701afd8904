"""Checking the indexing analysis against XLA's own test expectations (``../shared/corpus/xla/indexing``).

Each case is a ``NAME.json`` (with ``NAME.hlo``) taken from XLA's ``indexing_analysis_test.cc``; see the
corpus README. :func:`run_case` computes fusegen's answer for one case and compares it with XLA's twice:
*semantically* (the same relation on the same domain, per :func:`fusegen.indexing.semantically_equal`; the
runtime-variable origins and replica-id maps too) and *textually* (the printed form, whitespace-insensitive).
The coalescing cases need the fusion's analysis and emitter: :mod:`fusegen.codegen.coalescing_conformance`.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Callable, Mapping

import attrs

from fusegen.hlo.ir import Instruction, Module
from fusegen.hlo.parser import parse_module
from fusegen.indexing.analysis import (
    FusionAdaptor, compute_epilogue_input_to_output_indexing, compute_grouped_output_to_input_indexing,
    compute_input_to_output_indexing, compute_input_to_output_indexing_physical, compute_output_to_input_indexing,
    compute_output_to_input_indexing_physical,
)
from fusegen.indexing.analysis_types import OperandIndexing
from fusegen.indexing.equality import semantically_equal
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.text import parse_indexing_map

ANALYSIS_KINDS = ("output_to_input", "input_to_output", "grouped_output_to_input", "epilogue_input_to_output")


def ws(text: str) -> str:
    return " ".join(text.split())


def nospace(text: str) -> str:
    return "".join(text.split())


# ------------------------------------------------------------------------------------------- expected texts
@attrs.frozen
class ExpectedIndexing:
    """One expected operand indexing: the map text, ``[(origin, map text)]`` runtime variables, replica map."""

    map: str
    rt_vars: tuple[tuple[str, str], ...] = ()
    replica: str | None = None


_MAP_START = re.compile(r"\((?:\s*[A-Za-z_]\w*\s*(?:,\s*[A-Za-z_]\w*\s*)*)?\)\s*(?:\[[^\]]*\]\s*)?(?:\{[^}]*\}\s*)?->")


def split_operand_text(chunk: str) -> list[ExpectedIndexing]:
    """Splits the maps printed one after another for one operand (with their ``runtime variables:`` and
    ``replica id:`` sections)."""
    chunk = chunk.strip()
    if not chunk:
        return []
    if chunk.startswith("unknown indexing"):
        return [ExpectedIndexing("UNDEFINED")] * max(1, chunk.count("unknown indexing"))
    if chunk in ("KNOWN EMPTY", "UNDEFINED"):
        return [ExpectedIndexing(chunk)]
    starts = []
    for m in _MAP_START.finditer(chunk):
        before = chunk[:m.start()].rstrip()
        if m.start() == 0 or (before.endswith(("]", ")")) and not before.endswith(";")
                              and not before.endswith("replica id:")):
            starts.append(m.start())
    starts = [s for s in starts if not re.search(r"(;|replica id:|rt\d+:)\s*$", chunk[:s])]
    out = []
    for a, b in zip(starts, starts[1:] + [len(chunk)]):
        out.append(parse_expected_entry(chunk[a:b]))
    return out


def parse_expected_entry(text: str) -> ExpectedIndexing:
    replica = None
    if "replica id:" in text:
        text, replica = text.split("replica id:", 1)
        replica = replica.strip()
    rts: list[tuple[str, str]] = []
    if "runtime variables:" in text:
        text, rest = text.split("runtime variables:", 1)
        for part in re.split(r"\brt\d+:", rest)[1:]:
            origin, m = part.split(";", 1)
            rts.append((origin.strip(), m.strip()))
    return ExpectedIndexing(text.strip(), tuple(rts), replica)


def split_instruction_text(text: str) -> list[list[ExpectedIndexing]]:
    """``operand id = N ...`` blocks -> the expected indexing of each operand."""
    parts = re.split(r"operand id = (\d+)", text)
    out: list[list[ExpectedIndexing]] = []
    for k in range(1, len(parts), 2):
        out.append(split_operand_text(parts[k + 1]))
    return out


# ------------------------------------------------------------------------------------------- comparison
def _map_equal(expected: str, actual: IndexingMap) -> bool:
    if expected.strip().upper() == "UNDEFINED":
        return actual.is_undefined
    if actual.is_undefined:
        return False
    if expected.strip().upper() == "KNOWN EMPTY":
        return actual.is_known_empty
    exp = parse_indexing_map(expected)
    if exp.is_known_empty or actual.is_known_empty:
        return exp.is_known_empty and actual.is_known_empty
    return semantically_equal(exp, actual)


def _origin_text(rt) -> str:
    return str(rt).split(";", 1)[0]


def indexing_equal(expected: ExpectedIndexing, actual: OperandIndexing) -> bool:
    """Semantic equality of one operand indexing (map, runtime-variable origins and maps, replica map)."""
    if not _map_equal(expected.map, actual.map):
        return False
    if len(expected.rt_vars) != len(actual.rt_vars):
        return False
    for (origin, m), rv in zip(expected.rt_vars, actual.rt_vars):
        if origin != _origin_text(rv) or not _map_equal(m, rv.map):
            return False
    if (expected.replica is None) != (actual.replica_id_map is None):
        return False
    return expected.replica is None or _map_equal(expected.replica, actual.replica_id_map)


def sets_equal(expected: list[ExpectedIndexing], actual: list[OperandIndexing]) -> bool:
    """Unordered one-to-one match of two sets of operand indexings."""
    if len(expected) != len(actual):
        return False
    free = list(actual)
    for e in expected:
        hit = next((a for a in free if indexing_equal(e, a)), None)
        if hit is None:
            return False
        free.remove(hit)
    return True


def _texts_equal(expected: list[ExpectedIndexing], actual: list[OperandIndexing]) -> bool:
    def render(e: ExpectedIndexing) -> str:
        out = e.map
        if e.rt_vars:
            out += "runtime variables:" + "".join(f"rt{i}: {o}; {m}" for i, (o, m) in enumerate(e.rt_vars))
        if e.replica is not None:
            out += "replica id:" + e.replica
        return nospace(out.replace("UNDEFINED", "unknown indexing"))
    return sorted(render(e) for e in expected) == sorted(nospace(str(a)) for a in actual)


# ------------------------------------------------------------------------------------------- running a case
@attrs.define
class CaseResult:
    name: str
    kind: str
    semantic: bool
    text: bool
    detail: str = ""


def find_instruction(module: Module, name: str) -> Instruction:
    """By name, the ENTRY computation first."""
    comps = ([module.entry] if module.entry else []) + [c for c in module.computations if c is not module.entry]
    for c in comps:
        for i in c.instructions:
            if i.name == name:
                return i
    raise KeyError(f"no instruction %{name}")


def _adaptor_from_note(module: Module, note: str, start: Instruction) -> FusionAdaptor:
    m = re.search(r"ForProducerConsumer\((?:producer=)?([\w.\-]+),\s*(?:consumer=)?([\w.\-]+)\)", note)
    if m:
        return FusionAdaptor.for_producer_consumer(find_instruction(module, m.group(1)),
                                                   find_instruction(module, m.group(2)))
    m = re.search(r"ForInstruction\((?:ENTRY root `?)?([\w.\-]+)`?\)", note)
    if m:
        return FusionAdaptor.for_instruction(find_instruction(module, m.group(1)))
    return FusionAdaptor.for_instruction(start)


def compute_case(case: dict, module: Module) -> Any:
    """fusegen's answer for one analysis case (an ``InstructionIndexing``, a grouped dict, or a map)."""
    kind = case["kind"]
    name = case.get("instruction")
    instr = find_instruction(module, name) if name else module.entry.root
    if kind == "output_to_input":
        fn = compute_output_to_input_indexing_physical if case.get("physical_layout") else compute_output_to_input_indexing
        return fn(instr, case.get("output_id") or 0)
    if kind == "input_to_output":
        fn = compute_input_to_output_indexing_physical if case.get("physical_layout") else compute_input_to_output_indexing
        return fn(instr, case.get("input_id") or 0)
    if kind == "grouped_output_to_input":
        return compute_grouped_output_to_input_indexing(_adaptor_from_note(module, case.get("note", ""), instr), instr)
    if kind == "epilogue_input_to_output":
        return compute_epilogue_input_to_output_indexing(instr, instr.parent.root)
    raise ValueError(f"not an analysis case kind: {kind}")


def compare_case(case: dict, actual: Any) -> tuple[bool, bool, str]:
    """``(semantic match, text match, detail)`` of fusegen's answer against XLA's expectation."""
    kind, match = case["kind"], case["match"]
    if kind == "epilogue_input_to_output":
        exp = case["expected"][0]
        return _map_equal(exp, actual), nospace(exp) == nospace(str(actual)), str(actual)
    if kind == "grouped_output_to_input":
        got = actual.by_name()
        exp_g = {k: [parse_expected_entry(t) if t != "UNDEFINED" else ExpectedIndexing("UNDEFINED") for t in v]
                 for k, v in case["expected_grouped"].items()}
        complete = "complete result" in case.get("note", "")
        keys_ok = (set(got) == set(exp_g)) if complete else set(exp_g) <= set(got)
        sem = keys_ok and all(sets_equal(v, got.get(k, [])) for k, v in exp_g.items())
        txt = keys_ok and all(_texts_equal(v, got.get(k, [])) for k, v in exp_g.items())
        detail = "; ".join(f"{k}: " + " | ".join(str(x) for x in v) for k, v in got.items())
        return sem, txt, detail
    if match == "per_operand_sets":
        expected = [[parse_expected_entry(t) for t in ops] for ops in case["expected_per_operand"]]
    else:
        expected = split_instruction_text(case["expected"][0])
    got = actual.indexing_maps
    sem = len(expected) == len(got) and all(sets_equal(e, a) for e, a in zip(expected, got))
    if match == "per_operand_sets":
        txt = len(expected) == len(got) and all(_texts_equal(e, a) for e, a in zip(expected, got))
    else:
        txt = nospace(case["expected"][0]) == nospace(actual.to_string(""))
    return sem, txt, actual.to_string(" ")


def run_case(path: Path) -> CaseResult:
    case = json.loads(path.read_text())
    hlo = path.with_suffix(".hlo")
    try:
        module = parse_module(hlo.read_text())
        actual = compute_case(case, module)
        sem, txt, detail = compare_case(case, actual)
    except Exception as e:  # a crash is a miss, reported with its reason
        return CaseResult(path.stem, case["kind"], False, False, f"{type(e).__name__}: {e}")
    return CaseResult(path.stem, case["kind"], sem, txt, detail)


def corpus_cases(corpus: Path, kinds: tuple[str, ...] = ANALYSIS_KINDS) -> list[Path]:
    """The case files of the given kinds, from ``INDEX.tsv``."""
    out = []
    for line in (corpus / "INDEX.tsv").read_text().splitlines()[1:]:
        cols = line.split("\t")
        if len(cols) >= 2 and cols[1] in kinds:
            out.append(corpus / f"{cols[0]}.json")
    return out


# ------------------------------------------------------------------------------------------- the table
def agreement_table(corpus: Path, runners: Mapping[str, Callable[[Path], CaseResult]] | None = None) -> str:
    """The markdown agreement table of each case kind, then the misses.

    Args:
        corpus: the case directory (``INDEX.tsv``).
        runners: case kind -> what runs one case of it, in table order; default every analysis kind
            (:data:`ANALYSIS_KINDS`) by :func:`run_case` (the coalescing kinds' runner stands above dispatch:
            :mod:`fusegen.codegen.coalescing_conformance`, whose table has them all).
    """
    if runners is None:
        runners = {kind: run_case for kind in ANALYSIS_KINDS}
    rows = ["| kind | cases | semantically equal | exact text |", "|---|---|---|---|"]
    misses, text_misses = [], []
    for kind, runner in runners.items():
        results = [runner(p) for p in corpus_cases(corpus, (kind,))]
        n = len(results)
        sem = sum(r.semantic for r in results)
        txt = sum(r.text for r in results)
        rows.append(f"| {kind} | {n} | {sem}/{n} ({100 * sem // max(1, n)}%) | {txt}/{n} ({100 * txt // max(1, n)}%) |")
        misses += [f"- {r.name} ({kind}): {r.detail}" for r in results if not r.semantic]
        text_misses += [f"- {r.name} ({kind})" for r in results if r.semantic and not r.text]
    out = "\n".join(rows) + "\n\nSemantic misses:\n" + ("\n".join(misses) or "none")
    return out + "\n\nText-only misses:\n" + ("\n".join(text_misses) or "none") + "\n"


#: the shared corpus of XLA's indexing cases, beside the repository
DEFAULT_CORPUS = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "xla" / "indexing"

if __name__ == "__main__":  # python -m fusegen.indexing.analysis_conformance [CORPUS]: the analysis kinds
    import sys

    print(agreement_table(Path(sys.argv[1]) if len(sys.argv) > 1 else DEFAULT_CORPUS))
