"""Runs the map-only cases of XLA's indexing corpus (``../shared/corpus/xla/indexing/``) through fusegen.indexing.

Kinds: ``map_simplify`` (parse, apply the ops in order, compare the printed map or the ops' bool results),
``map_compose`` (``ComposeIndexingMaps(first, second)``, then the ops), ``map_parse_print`` (parse, print).
Each case yields a :class:`CaseResult` with semantic agreement (same relation on the same domain; for
``changed_flags`` cases, the same bools) and exact-text agreement (XLA's printed text, whitespace-insensitive).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from fusegen.indexing.compose import compose_indexing_maps
from fusegen.indexing.equality import check_equal
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify import remove_unused_vars, rescale_symbols, simplify
from fusegen.indexing.text import parse_indexing_map

MAP_KINDS = ("map_simplify", "map_compose", "map_parse_print")
_OP = re.compile(r"^\s*(\w+)(?:\(([^)]*)\))?\s*(?:->\s*(true|false))?\s*$")


@dataclass
class CaseResult:
    name: str
    kind: str
    source: str
    semantic: bool
    exact: bool | None  # None: the case asserts bools only
    got: str
    expected: str
    reason: str = ""


def _norm(text: str) -> str:
    return "".join(text.split())


def apply_op(m: IndexingMap, op: str) -> tuple[IndexingMap, bool | None]:
    """One op of a case (``Simplify()``, ``RemoveUnusedSymbols()``, ...) -> (new map, its bool result)."""
    match = _OP.match(op)
    if not match:
        raise ValueError(f"unknown op {op!r}")
    name, args = match.group(1), match.group(2) or ""
    if name == "Simplify":
        return simplify(m, fold_point_vars="kPreserve" not in args)
    if name == "RemoveUnusedSymbols":
        return remove_unused_vars(m, dims=False)
    if name == "RemoveUnusedVars":
        return remove_unused_vars(m, dims=True)
    if name == "RescaleSymbols":
        return rescale_symbols(m)
    if name == "IsKnownEmpty":
        return m, m.is_known_empty
    if name in ("ParseIndexingMap", "ToString"):
        return m, None
    raise ValueError(f"unknown op {op!r}")


def run_case(path: Path) -> CaseResult:
    case = json.loads(path.read_text())
    kind, name = case["kind"], path.stem
    src = case.get("source", "")
    expected = case["expected"]
    try:
        if kind == "map_compose":
            first, second = (parse_indexing_map(t) for t in case["input"])
            m = compose_indexing_maps(first, second)
        else:
            m = parse_indexing_map(case["input"])
        flags: list[bool | None] = []
        for op in case.get("ops", []):
            m, flag = apply_op(m, op)
            flags.append(flag)
    except Exception as exc:  # a case we cannot run is a miss with its reason
        return CaseResult(name, kind, src, False, False, "", str(expected), f"{type(exc).__name__}: {exc}")
    got = str(m)
    if case["match"] == "changed_flags":
        ok = flags == expected
        return CaseResult(name, kind, src, ok, None, str(flags), str(expected),
                          "" if ok else "op results differ")
    want = expected[0]
    exact = _norm(got) == _norm(want)
    asserted = [(op, f) for op, f in zip(case.get("ops", []), flags) if "->" in op]
    flags_ok = all(f == (op.rsplit("->", 1)[1].strip() == "true") for op, f in asserted)
    semantic, method = check_equal(m, parse_indexing_map(want))
    reason = "" if semantic else method
    if semantic and not flags_ok:
        semantic, reason = False, "op results differ"
    return CaseResult(name, kind, src, semantic, exact, got, want, reason)


def run_corpus(root: Path, kinds=MAP_KINDS) -> list[CaseResult]:
    index = (root / "INDEX.tsv").read_text().splitlines()[1:]
    names = [line.split("\t")[0] for line in index if line.split("\t")[1] in kinds]
    return [run_case(root / f"{n}.json") for n in names]


def agreement_table(results: list[CaseResult]) -> str:
    """A markdown table: per kind, cases, semantic agreement and exact-text agreement."""
    lines = ["| kind | cases | semantically equal | exact text (of text cases) |", "|---|---|---|---|"]
    kinds = sorted({r.kind for r in results})
    for kind in kinds + ["all"]:
        rs = [r for r in results if kind in ("all", r.kind)]
        sem = sum(r.semantic for r in rs)
        text = [r for r in rs if r.exact is not None]
        ex = sum(bool(r.exact) for r in text)
        lines.append(f"| {kind} | {len(rs)} | {sem}/{len(rs)} ({100 * sem / len(rs):.0f}%) | "
                     f"{ex}/{len(text)} ({100 * ex / max(len(text), 1):.0f}%) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """``python -m fusegen.indexing.corpus [CORPUS_DIR]``: the agreement table and every miss with its reason."""
    import sys

    args = sys.argv[1:] if argv is None else argv
    root = Path(args[0]) if args else Path(__file__).resolve().parents[2].parent / "shared/corpus/xla/indexing"
    if not (root / "INDEX.tsv").exists():
        print(f"indexing corpus not found at {root}", file=sys.stderr)
        return 2
    results = run_corpus(root)
    print(agreement_table(results))
    for r in results:
        if not r.semantic or r.exact is False:
            status = "text differs" if r.semantic else f"MISS ({r.reason})"
            print(f"- {r.name} [{r.kind}] {status}\n    got:  {r.got}\n    want: {r.expected}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
