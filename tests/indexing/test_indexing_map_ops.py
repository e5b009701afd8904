"""fusegen.indexing unit behaviour: builders, printer, parser errors, evaluation, equality, and randomized
soundness of simplify/compose (every rewrite must keep the relation; checked by exhaustive enumeration)."""

from __future__ import annotations

import itertools
import random

import pytest

from fusegen.indexing import (
    IndexingMap, IndexingMapParseError, Interval, compose_indexing_maps, const, dim, expr_max, expr_min,
    parse_expr, parse_indexing_map, remove_unused_vars, rescale_symbols, rt, semantically_equal, simplify, sym,
)
from fusegen.indexing.equality import check_equal


def test_expression_printing_follows_xla():
    assert str(dim(0) - sym(0)) == "d0 - s0"
    assert str(dim(0) * 4 + sym(1) - 42) == "d0 * 4 + s1 - 42"
    assert str(-(sym(0).floordiv(144)) + 1) == "-(s0 / 144) + 1"
    assert str(dim(0) - sym(0).floordiv(3) * 3) == "d0 - (s0 / 3) * 3"
    assert str((sym(0) + 1).mod(3) + dim(0)) == "(s0 + 1) mod 3 + d0"
    assert str(sym(0).mod(3) * 4) == "(s0 mod 3) * 4"
    assert str(dim(0) - (dim(1) + sym(0))) == "d0 - (d1 + s0)"
    assert str(expr_min(dim(0), 5)) == "min(d0, 5)"
    assert str(dim(0).ceildiv(4)) == "d0 ceildiv 4"


def test_builders_fold_constants_only():
    assert dim(0) + 0 == dim(0)
    assert dim(0) * 1 == dim(0)
    assert (dim(0) + 2) + 3 == dim(0) + 5
    assert const(7).floordiv(2) == const(3)
    assert const(-7).mod(3) == const(2)
    assert str(dim(0).mod(4)) == "d0 mod 4"  # no range knowledge in builders


def test_parse_reads_xla_spellings():
    assert parse_expr("d0 floordiv 4") == dim(0).floordiv(4)
    assert parse_expr("d0 floorDiv 4") == parse_expr("d0 / 4")
    assert parse_expr("-d0 + 3") == dim(0) * -1 + 3
    assert parse_expr("d1 - 5") == dim(1) + (-5)
    m = parse_indexing_map("(th_x, bl_x)[vector_index] -> (bl_x * 512 + th_x * 4 + vector_index), "
                           "domain: th_x in [0, 127], bl_x in [0, 24575], vector_index in [0, 3]")
    assert m.exprs == (dim(1) * 512 + dim(0) * 4 + sym(0),)
    assert str(m).startswith("(th_x, bl_x)[vector_index] -> (bl_x * 512 + th_x * 4 + vector_index)")


@pytest.mark.parametrize("text, column", [
    ("(d0) -> (d1), domain: d0 in [0, 9]", 10),
    ("(d0) -> (d0), domain: d1 in [0, 9]", 23),
    ("d0 -> (d0)", 1),
    ("(d0) -> (d0), domain: d0 in [0, x]", 33),
    ("(d0) -> (d0)", 13),
])
def test_parse_errors_name_the_column(text, column):
    with pytest.raises(IndexingMapParseError) as info:
        parse_indexing_map(text)
    assert info.value.column == column
    assert str(info.value).startswith(f"column {column}: ")


def test_evaluate_and_constraints():
    m = parse_indexing_map("(d0, d1)[s0] -> (d1, d0 / 4 + s0), domain: d0 in [0, 9], d1 in [0, 3], s0 in [0, 1], "
                           "d0 + s0 in [0, 5]")
    assert m.evaluate([7, 2], [1]) == (2, 2)
    assert m.constraints_satisfied([4, 2], [1])
    assert not m.constraints_satisfied([5, 2], [1])  # d0 + s0 = 6
    assert not m.constraints_satisfied([10, 0], [0])  # outside d0's interval
    assert IndexingMap.identity([4, 5]).evaluate([3, 4]) == (3, 4)


def test_runtime_variables_print_and_evaluate():
    m = IndexingMap([dim(0) + rt(0)], [Interval(0, 9)], [], [Interval(0, 90)])
    assert str(m) == "(d0){rt0} -> (d0 + rt0), domain: d0 in [0, 9], rt0 in [0, 90]"
    assert m.evaluate([3], [], [10]) == (13,)


def test_known_empty_and_unknown():
    assert str(parse_indexing_map("(d0) -> (d0), domain: d0 in [0, -2]")) == "KNOWN EMPTY"
    assert parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 49], 0 in [10, 15]").is_known_empty
    assert str(parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 49], 0 in [-10, 5]")) == \
        "(d0) -> (d0), domain: d0 in [0, 49]"
    u = IndexingMap.unknown()
    assert str(u) == "UNDEFINED" and u.is_undefined
    assert compose_indexing_maps(u, IndexingMap.identity([3])).is_undefined
    empty = parse_indexing_map("(d0) -> (d0), domain: d0 in [0, -1]")
    assert compose_indexing_maps(IndexingMap.identity([50]), empty).is_known_empty
    assert compose_indexing_maps(empty, IndexingMap.identity([50])).num_results == 1


def test_semantic_equality_detects_differences():
    a = parse_indexing_map("(d0) -> (d0 mod 4), domain: d0 in [0, 9]")
    assert not semantically_equal(a, parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 9]"))
    assert semantically_equal(parse_indexing_map("(d0) -> (d0 mod 16), domain: d0 in [0, 9]"),
                              parse_indexing_map("(d0) -> (d0), domain: d0 in [0, 9]"))
    # symbols renamed / reordered and tightened bounds: the same relation
    assert semantically_equal(parse_indexing_map("(d0)[s0, s1] -> (d0 + s0 * 2 + s1), domain: d0 in [0, 3], "
                                                 "s0 in [0, 5], s1 in [0, 1], s0 in [0, 2]"),
                              parse_indexing_map("(d0)[s0, s1] -> (d0 + s1 * 2 + s0), domain: d0 in [0, 3], "
                                                 "s0 in [0, 1], s1 in [0, 2]"))
    # too big to enumerate: sampling
    big_a = parse_indexing_map("(d0, d1, d2) -> ((d0 * 4096 + d1) mod 8192 + d2), domain: d0 in [0, 4095], "
                               "d1 in [0, 4095], d2 in [0, 3]")
    big_b = parse_indexing_map("(d0, d1, d2) -> ((d0 mod 2) * 4096 + d1 + d2), domain: d0 in [0, 4095], "
                               "d1 in [0, 4095], d2 in [0, 3]")
    assert check_equal(big_a, big_b) == (True, "sampling")
    big_c = big_b.replace(exprs=[(dim(0).mod(2)) * 4096 + dim(1)])
    assert check_equal(big_a, big_c)[0] is False


def test_remove_unused_and_rescale():
    m = parse_indexing_map("(d0, d1)[s0, s1] -> (d0, d1, s1), domain: d0 in [0, 49], d1 in [0, 59], s0 in [0, 69], "
                           "s1 in [0, 19], s0 mod 3 in [0, 0]")
    assert str(remove_unused_vars(m, dims=False)[0]) == "(d0, d1)[s0] -> (d0, d1, s0), domain: d0 in [0, 49], " \
                                                        "d1 in [0, 59], s0 in [0, 19]"
    m = parse_indexing_map("(d0, d1) -> (d1), domain: d0 in [0, 9], d1 in [0, 5]")
    assert str(remove_unused_vars(m)[0]) == "(d0) -> (d0), domain: d0 in [0, 5]"
    r = rescale_symbols(parse_indexing_map("()[s0] -> (s0 / 4), domain: s0 in [1, 30], s0 mod 4 in [2, 2]"))[0]
    assert str(r) == "()[s0] -> ((s0 * 4 + 2) / 4), domain: s0 in [0, 7]"
    assert str(simplify(r)[0]) == "()[s0] -> (s0), domain: s0 in [0, 7]"


# ------------------------------------------------------------------------------- randomized soundness
def _random_expr(rng: random.Random, depth: int, nd: int, ns: int):
    if depth == 0 or rng.random() < 0.25:
        r = rng.random()
        if r < 0.45 and nd:
            return dim(rng.randrange(nd))
        if r < 0.8 and ns:
            return sym(rng.randrange(ns))
        return const(rng.randint(-5, 20))
    op = rng.choice(["+", "-", "*", "fd", "mod", "mod", "fd", "min", "max", "cd"])
    a = _random_expr(rng, depth - 1, nd, ns)
    if op == "+":
        return a + _random_expr(rng, depth - 1, nd, ns)
    if op == "-":
        return a - _random_expr(rng, depth - 1, nd, ns)
    if op == "*":
        return a * rng.choice([2, 3, 4, -1, 8, 16, -2])
    c = rng.choice([2, 3, 4, 5, 6, 8, 12, 16, 64])
    if op == "fd":
        return a.floordiv(c)
    if op == "cd":
        return a.ceildiv(c)
    if op == "mod":
        return a.mod(c)
    other = _random_expr(rng, depth - 1, nd, ns)
    return expr_min(a, other) if op == "min" else expr_max(a, other)


def _random_map(rng: random.Random) -> IndexingMap:
    nd, ns = rng.randint(0, 2), rng.randint(0, 2)
    dims = [Interval(lo, lo + rng.randint(0, 40)) for lo in (rng.randint(-4, 10) for _ in range(nd))]
    syms = [Interval(lo, lo + rng.randint(0, 12)) for lo in (rng.randint(-4, 10) for _ in range(ns))]
    exprs = [_random_expr(rng, 3, nd, ns) for _ in range(rng.randint(1, 2))]
    constraints = {}
    for _ in range(rng.randint(0, 2)):
        lo = rng.randint(-5, 30)
        constraints[_random_expr(rng, 2, nd, ns)] = Interval(lo, lo + rng.randint(0, 30))
    return IndexingMap(exprs, dims, syms, (), constraints)


@pytest.mark.parametrize("seed", range(4))
def test_simplify_keeps_the_relation_and_is_idempotent(seed):
    rng = random.Random(seed)
    for _ in range(120):
        m = _random_map(rng)
        s, _ = simplify(m)
        ok, how = check_equal(m, s)
        assert ok and how in ("structural", "enumeration"), f"{m}\n  simplified to {s} ({how})"
        fitted, _ = simplify(m, affine_fit_points=4096)
        assert check_equal(m, fitted)[0], f"{m}\n  fitted to {fitted}"
        again, changed = simplify(s)
        assert not changed and again == s, f"{s}\n  re-simplified to {again}"
        assert semantically_equal(parse_indexing_map(str(m)), m)


def _brute_composition(first: IndexingMap, second: IndexingMap) -> set:
    out = set()
    ranges = lambda bs: [range(b.lower, b.upper + 1) for b in bs]  # noqa: E731
    for d in itertools.product(*ranges(first.dims)):
        for s1 in itertools.product(*ranges(first.syms)):
            if not first.constraints_satisfied(d, s1):
                continue
            mid = first.evaluate(d, s1)
            for s2 in itertools.product(*ranges(second.syms)):
                if second.constraints_satisfied(mid, s2):
                    out.add((*d, *second.evaluate(mid, s2)))
    return out


@pytest.mark.parametrize("seed", range(2))
def test_compose_is_second_after_first(seed):
    rng = random.Random(100 + seed)
    for _ in range(40):
        first = _random_map(rng)
        nd = first.num_results
        second = IndexingMap([_random_expr(rng, 2, nd, 1) for _ in range(2)],
                             [Interval(-2, rng.randint(0, 12)) for _ in range(nd)], [Interval(0, rng.randint(0, 3))])
        composed = compose_indexing_maps(first, second)
        got = set()
        for d in itertools.product(*[range(b.lower, b.upper + 1) for b in composed.dims]):
            for s in itertools.product(*[range(b.lower, b.upper + 1) for b in composed.syms]):
                if composed.constraints_satisfied(d, s):
                    got.add((*d, *composed.evaluate(d, s)))
        assert got == _brute_composition(first, second), f"{first}\n  then {second}\n  gave {composed}"
        assert semantically_equal(simplify(composed)[0], composed)


def test_affine_fit_is_opt_in_and_bounded():
    m = parse_indexing_map("(d0) -> ((d0 + 5) / 3 - (d0 + 2) / 3), domain: d0 in [0, 99]")
    kept = "(d0) -> (-((d0 + 2) / 3) + (d0 + 5) / 3), domain: d0 in [0, 99]"
    assert str(simplify(m)[0]) == kept  # XLA's rules only reorder it
    assert str(simplify(m, affine_fit_points=1000)[0]) == "(d0) -> (1), domain: d0 in [0, 99]"
    assert str(simplify(m, affine_fit_points=50)[0]) == kept  # domain larger than allowed: not enumerated
    wraps = parse_indexing_map("(d0) -> ((d0 * 3) mod 7), domain: d0 in [0, 99]")
    assert simplify(wraps, affine_fit_points=1000)[0] == wraps


def test_undeclared_variable_is_rejected():
    with pytest.raises(ValueError, match="d1"):
        IndexingMap([dim(1)], [Interval(0, 3)])
    with pytest.raises(ValueError, match="rt0"):
        IndexingMap([dim(0)], [Interval(0, 3)], constraints={dim(0) + rt(0): Interval(0, 1)})


def test_simplify_and_compose_caches_keep_results_and_names():
    import sys

    from fusegen.indexing import clear_caches

    simplify_mod = sys.modules["fusegen.indexing.simplify"]
    text = "(d0, d1) -> ((d0 * 4 + d1) floordiv 4, (d0 * 4 + d1) mod 4), domain: d0 in [0, 5], d1 in [0, 3]"
    clear_caches()
    first = simplify(parse_indexing_map(text))[0]
    assert str(first) == "(d0, d1) -> (d0, d1), domain: d0 in [0, 5], d1 in [0, 3]"
    again = simplify(parse_indexing_map(text))[0]  # from the cache: the same map
    assert again == first and str(again) == str(first)
    named = parse_indexing_map(text).replace(names={"d": ("x", "y")})
    assert str(simplify(named)[0]) == "(x, y) -> (x, y), domain: x in [0, 5], y in [0, 3]"  # names are part of the key
    assert len(simplify_mod._SIMPLIFIED) >= 2
    # a permutation map is its own simplification
    perm = IndexingMap.from_tensor_sizes([dim(1), dim(0)], [3, 4])
    assert simplify(perm)[0] is perm
    a = IndexingMap.from_tensor_sizes([dim(0) * 2], [8])
    b = IndexingMap.from_tensor_sizes([dim(0) + 1], [16])
    c1, c2 = compose_indexing_maps(a, b), compose_indexing_maps(a, b)
    assert c1 == c2 and all(c1.evaluate([i]) == (2 * i + 1,) for i in range(8))
    clear_caches()
    assert not simplify_mod._SIMPLIFIED
    assert compose_indexing_maps(a, b) == c1
