"""Dispatch against XLA's own test expectations (shared/corpus/xla/cases/INDEX.tsv).

Every row whose expected result is an EmitterFusionKind is parsed, analysed the way its XLA test does
(``__root``/``__fi``: the entry root; ``__pc``: producer ``root->operand(0)`` fused into ``root``;
``__producer``: ``root->operand(0)``; lit files: the fusion ``LoadTestModule`` builds; Triton/cuDNN/
custom cases: the stamped fusions) and dispatched. Disagreements must be listed in
``tests/corpus/known_kind_mismatches.tsv``; listed cases that now agree fail as stale.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from fusegen import kinds
from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
from fusegen.analysis.hero import find_non_trivial_hero
from fusegen.analysis.reduction import is_real_reduction_hero
from fusegen.analysis.transpose import get_description_for_tiled_transpose_emitter
from fusegen.device import RTXA6000, minimal_device
from fusegen.dispatch import get_emitter_fusion_kind
from fusegen.hlo.parser import parse_module
from fusegen.plugin_manager import PluginManager

SHARED = Path(__file__).parents[2].parent / "shared"
CASES = SHARED / "corpus" / "xla" / "cases"
INDEX = CASES / "INDEX.tsv"
MISMATCHES = Path(__file__).parent / "known_kind_mismatches.tsv"

pytestmark = pytest.mark.skipif(not INDEX.exists(), reason=f"shared corpus not found at {CASES}")


def _rows() -> list[tuple[str, str, str, str]]:
    if not INDEX.exists():
        return []
    with open(INDEX, newline="") as fh:
        rows = list(csv.reader(fh, delimiter="\t"))
    return [tuple(r) for r in rows[1:] if len(r) >= 4]


def _expected_kind(expected: str) -> str | None:
    """The EmitterFusionKind a row expects, or ``None`` for rows that are not about the kind."""
    if expected in kinds.EMITTER_FUSION_KINDS:
        return expected
    if expected.startswith("backend_kind=__triton"):
        return kinds.TRITON
    if expected.startswith("kInputSlices @271f80b; kLoop @183fa00"):
        return kinds.LOOP  # kInputSlices was removed from XLA in 2025-08
    return None


_SED = re.compile(r"sed\s+'s/(\w+)/(\w+)/'")


def _load(name: str):
    """Parse a case, applying its RUN lines' ``sed 's/X/Y/'`` (first value per placeholder) to the
    HLO body as lit does (lit_triton files carry ``ENABLE_TMA`` placeholders)."""
    lines = (CASES / name).read_text().splitlines()
    subs: dict[str, str] = {}
    for line in lines:
        if line.startswith("// RUN:"):
            for a, b in _SED.findall(line):
                subs.setdefault(a, b)
    if subs:
        lines = [ln if ln.startswith("//") else _apply(ln, subs) for ln in lines]
    return parse_module("\n".join(lines), str(CASES / name))


def _apply(line: str, subs: dict[str, str]) -> str:
    for a, b in subs.items():
        line = line.replace(a, b)
    return line


def _device(note: str):
    return minimal_device(32) if "empty GpuDeviceInfoProto" in note else RTXA6000


def _analyses(name: str, note: str, module) -> list[FusionAnalysis]:
    dev = _device(note)
    stem = name.rsplit(".", 1)[0]
    root = module.entry.root
    if name.startswith("hfa__"):
        if stem.endswith("__pc"):
            return [FusionAnalysis.create_producer_consumer(root.operands[0], root, dev)]
        if stem.endswith("__producer"):
            return [FusionAnalysis.create(root.operands[0], dev)]
        return [FusionAnalysis.create(root, dev)]
    if name.startswith(("lit_triton__", "cudnn__", "custom__")):
        stamped = [i for i in module.entry.instructions if i.opcode == "fusion" and i.fusion_backend_kind in kinds.STAMP_TO_KIND]
        if not stamped:
            stamped = [i for i in module.fusion_instructions() if i.fusion_backend_kind in kinds.STAMP_TO_KIND]
        return [FusionAnalysis.create(f, dev) for f in stamped]
    return [FusionAnalysis.create(entry_fusion(module), dev)]


@pytest.fixture(scope="module")
def pm():
    return PluginManager(autoload=False)


def _dispatch_row(name: str, note: str, pm) -> str:
    module = _load(name)
    analyses = _analyses(name, note, module)
    if not analyses:
        return "<no fusion>"
    got = sorted({get_emitter_fusion_kind(a, pm).kind for a in analyses})
    return got[0] if len(got) == 1 else "/".join(got)


def _kind_rows():
    return [(f, _expected_kind(e), n) for f, _s, e, n in _rows() if _expected_kind(e) is not None and not e.startswith("pipeline:")]


def _known_mismatches() -> dict[str, tuple[str, str, str]]:
    out = {}
    for line in MISMATCHES.read_text().splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        parts = line.split("\t")
        assert len(parts) == 4, f"{MISMATCHES}: malformed line {line!r} (want file, expected, got, reason)"
        out[parts[0]] = (parts[1], parts[2], parts[3])
    return out


def test_dispatch_agrees_with_xla_corpus(pm):
    rows = _kind_rows()
    assert len(rows) >= 190, f"expected ~201 kind rows in {INDEX}, found {len(rows)}"
    known = _known_mismatches()
    disagreements = {}
    for name, expected, note in rows:
        try:
            got = _dispatch_row(name, note, pm)
        except Exception as e:  # report, do not stop at the first
            got = f"error: {type(e).__name__}: {e}"
        if got != expected:
            disagreements[name] = (expected, got)
    agree = len(rows) - len(disagreements)
    ratio = agree / len(rows)
    unlisted = {k: v for k, v in disagreements.items() if k not in known}
    stale = sorted(k for k in known if k not in disagreements)
    wrong_listing = {k: (known[k][:2], v) for k, v in disagreements.items() if k in known and known[k][:2] != v}
    assert ratio >= 0.95, f"agreement {agree}/{len(rows)} = {ratio:.1%} < 95%"
    assert not unlisted, f"disagreements not in {MISMATCHES.name}: {unlisted}"
    assert not stale, f"listed in {MISMATCHES.name} but now agree (remove them): {stale}"
    assert not wrong_listing, f"listed (expected, got) differ from now: {wrong_listing}"


@pytest.mark.parametrize("kind", [kinds.LOOP, kinds.REDUCTION, kinds.TRANSPOSE, kinds.CONCATENATE, kinds.SCATTER])
def test_every_analysed_kind_is_present_in_the_corpus(kind):
    # The agreement test is only meaningful if the corpus exercises the hero-driven kinds.
    assert any(e == kind for _n, e, _note in _kind_rows())


# --- hlo_fusion_analysis_test.cc extras -----------------------------------------------------


def test_hfa_concatenate_fallback_resets_heroes(pm):
    m = _load("hfa__ConcatenateFusionFallbackToLoop__root.hlo")
    a = FusionAnalysis.create(m.entry.root, RTXA6000)
    assert a.non_trivial_heroes[0].opcode == "concatenate"
    d = get_emitter_fusion_kind(a, pm)
    assert (d.kind, d.decided_by) == (kinds.LOOP, "loop")
    assert [h.name for h in a.heroes] == ["multiply"]


@pytest.mark.parametrize("case", ["hfa__ExtractValidGpuBackendConfig__producer.hlo", "hfa__ExtractValidGpuBackendConfig__pc.hlo"])
def test_hfa_backend_config_extracted(case, pm):
    m = _load(case)
    r = m.entry.root
    if case.endswith("__pc.hlo"):
        a = FusionAnalysis.create_producer_consumer(r.operands[0], r, RTXA6000)
    else:
        a = FusionAnalysis.create(r.operands[0], RTXA6000)
    assert a.backend_kind == "__triton"
    assert get_emitter_fusion_kind(a, pm).decided_by == "backend-config-stamp"


def test_hfa_producer_consumer_reduction_epilogue(pm):
    m = _load("hfa__ReductionEpilogueFusionPartiallyFusedInBoth__pc.hlo")
    r = m.entry.root
    a = FusionAnalysis.create_producer_consumer(r.operands[0], r, RTXA6000)
    assert [x.opcode for x in a.roots] == ["negate"]
    assert a.heroes[0].opcode == "reduce"
    assert a.original(a.heroes[0]).parent.name == "fusion.1"
    assert get_emitter_fusion_kind(a, pm).kind == kinds.REDUCTION


# --- transpose_detect__* (ir_emission_utils_test.cc) ------------------------------------------

_TT = re.compile(r"tiled_transpose: dims=\[([\d, ]+)\] perm=\[([\d, ]+)\]")


def _ints(s: str) -> tuple[int, ...]:
    return tuple(int(x) for x in s.split(","))


def _transpose_rows():
    return [(f, e, n) for f, _s, e, n in _rows() if f.startswith("transpose_detect__")]


def _var(note: str, var: str, module):
    m = re.search(rf"\b{var}=([^;|]+)", note)
    assert m, f"no definition of {var} in {note!r}"
    expr = m.group(1).strip()
    inst = module.entry.root
    if "fused_expression_root" in expr:
        inst = inst.fused_computation.root
    return inst


@pytest.mark.parametrize("name,expected,note", [r for r in _transpose_rows() if not r[1].startswith("hero:")], ids=lambda x: str(x)[:60])
def test_transpose_detection(name, expected, note):
    module = _load(name)
    called_on = note.split("called on:", 1)[1].strip()
    m = re.fullmatch(r"(FindNonTrivialHero\()?\*(\w+)(->operand\(0\))?\)?", called_on)
    assert m, called_on
    inst = _var(note, m.group(2), module)
    if m.group(3):
        inst = inst.operands[0]
    if m.group(1):
        inst = find_non_trivial_hero(inst)
    d = get_description_for_tiled_transpose_emitter(inst)
    if expected.startswith("no_tiled_transpose"):
        assert d is None
    else:
        mm = _TT.match(expected)
        assert mm, expected
        assert d is not None
        assert (d.dimensions, d.permutation) == (_ints(mm.group(1)), _ints(mm.group(2)))


@pytest.mark.parametrize("name,expected,note", [r for r in _transpose_rows() if r[1].startswith("hero:")], ids=lambda x: str(x)[:60])
def test_hero_expectations(name, expected, note):
    module = _load(name)
    if "FindNonTrivialHero(r) == transpose" in expected:
        t = module.entry.instruction("t")
        fusion = module.entry.instruction("fusion")
        a = FusionAnalysis.create_producer_consumer(t, fusion, RTXA6000)
        (root,) = a.roots
        assert a.original(root).parent.name == "f"
        hero = find_non_trivial_hero(root)
        assert a.original(hero) is t
        return
    a = FusionAnalysis.create(module.entry.root, RTXA6000)
    pairs = re.findall(r"GetRoots\(\)\[(\d+)\]\)=([\w.]+)", expected)
    assert pairs, expected
    for idx, hero_name in pairs:
        assert find_non_trivial_hero(a.roots[int(idx)]).name == hero_name


# --- reduce_hero__* (gpu_fusible_test.cc) ----------------------------------------------------


@pytest.mark.parametrize("name,expected,note", [(f, e, n) for f, _s, e, n in _rows() if f.startswith("reduce_hero__")], ids=lambda x: str(x)[:70])
def test_reduce_hero(name, expected, note):
    module = _load(name)
    dev = minimal_device(32)
    a = FusionAnalysis.create(module.entry.root, dev)
    is_reduce_input = any(is_real_reduction_hero(r, find_non_trivial_hero(r), dev) for r in a.roots)
    want = dict(kv.split("=") for kv in expected.split("; "))
    assert is_reduce_input == (want["IsReduceInputFusion"] == "true")
    assert is_reduce_input == (want["IsInputFusibleReduction"] == "true")
