"""The hero search shared by a multi-output fusion's roots (``find_hero`` with a memo: candidates computed once
per node, children first) finds what the plain breadth-first search of ``FindHero`` finds from each root alone,
on every multi-root fusion of the corpus and on hand-built graphs with several or no candidates."""

from __future__ import annotations

import pytest

from fusegen.analysis.fusion_analysis import _flatten_tuple_root
from fusegen.analysis.hero import _is_concatenate, _is_tiled_transpose, find_hero, find_non_trivial_hero
from fusegen.hlo.errors import HloParseError
from fusegen.hlo.parser import parse_module, parse_modules

from conftest import CORPUS

PREDICATES = [("transpose", _is_tiled_transpose), ("concatenate", _is_concatenate)]


def multi_root_fusions():
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    for f in sorted(CORPUS.glob("**/*.hlo")):
        try:
            modules = parse_modules(f.read_text(errors="replace"), str(f))
        except HloParseError:
            continue
        for m in modules:
            for c in m.computations:
                roots = _flatten_tuple_root(c.root) if c.root is not None else []
                if len(roots) > 1:
                    yield f.name, c, roots


def test_shared_search_finds_what_each_root_finds_alone():
    checked = 0
    for name, comp, roots in multi_root_fusions():
        for tag, predicate in PREDICATES:
            memo: dict = {}
            for r in roots:
                alone = find_hero(r, predicate)  # breadth-first, nothing shared
                assert find_hero(r, predicate, memo) is alone, (name, comp.name, r.name, tag)
                checked += 1
        memo = {}
        for r in roots:
            assert find_non_trivial_hero(r, memo) is find_non_trivial_hero(r), (name, comp.name, r.name)
    assert checked > 100  # the corpus has many multi-output fusions


MOF = """
fused {
  p0 = f32[16,32]{1,0} parameter(0)
  p1 = f32[16,32]{1,0} parameter(1)
  c = f32[32,32]{1,0} concatenate(p0, p1), dimensions={0}
  n = f32[32,32]{1,0} negate(c)
  a = f32[32,32]{1,0} add(n, c)
  c2 = f32[32,32]{1,0} concatenate(p0, p1), dimensions={0}
  e = f32[32,32]{1,0} exponential(c2)
  b = f32[32,32]{1,0} add(a, e)
  ROOT t = (f32[32,32]{1,0}, f32[32,32]{1,0}, f32[32,32]{1,0}) tuple(a, b, p0)
}
"""


def test_shared_search_several_and_single_candidates():
    comp = parse_module(MOF).computation("fused")
    a, b, n, c = (comp.instruction(x) for x in ("a", "b", "n", "c"))
    memo: dict = {}
    # `a` reaches one concatenate through two paths (a->n->c, a->c); `b` reaches two concatenates
    assert find_hero(b, _is_concatenate, memo) is None and find_hero(b, _is_concatenate) is None
    assert find_hero(n, _is_concatenate, memo) is c and find_hero(n, _is_concatenate) is c
    assert find_hero(a, _is_concatenate, memo) is find_hero(a, _is_concatenate)
    assert find_hero(comp.instruction("p0"), _is_concatenate, memo) is None
