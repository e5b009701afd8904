"""Sums as linear combinations, and the range of an expression over a map's domain.

``to_linear(e)`` flattens ``+`` and ``* constant`` into ``({term: coefficient}, constant)`` where each term
is a non-sum node (a variable, a ``mod``, a ``floordiv`` ...); ``from_linear`` rebuilds a sum, keeping the
terms' order. ``expr_range`` is XLA's ``RangeEvaluator::ComputeExpressionRange``: interval arithmetic over
the variables' intervals (``xla/hlo/analysis/indexing_map.cc``).
"""

from __future__ import annotations

from math import gcd
from typing import Callable

from fusegen.indexing.expr import (
    ADD, CEILDIV, CONST, FLOORDIV, MAX, MIN, MOD, MUL, VAR_KINDS, AffineExpr, const, mul, add,
)
from fusegen.indexing.interval import Interval

Linear = tuple[dict[AffineExpr, int], int]
Bounds = Callable[[str, int], Interval]


def to_linear(e: AffineExpr) -> Linear:
    terms: dict[AffineExpr, int] = {}
    total = 0
    stack = [(e, 1)]
    while stack:
        node, k = stack.pop()
        if node.kind == CONST:
            total += k * node.value
        elif node.kind == ADD:
            stack.append((node.rhs, k))
            stack.append((node.lhs, k))
        elif node.kind == MUL and node.rhs.is_const:
            stack.append((node.lhs, k * node.rhs.value))
        else:
            terms[node] = terms.get(node, 0) + k
    return {t: c for t, c in terms.items() if c}, total


def from_linear(terms: dict[AffineExpr, int], constant: int = 0) -> AffineExpr:
    out: AffineExpr | None = None
    for t, c in terms.items():
        if c == 0:
            continue
        piece = mul(t, const(c))
        out = piece if out is None else add(out, piece)
    if out is None:
        return const(constant)
    return add(out, const(constant)) if constant else out


def linear_gcd(terms: dict[AffineExpr, int]) -> int:
    g = 0
    for c in terms.values():
        g = gcd(g, c)
    return g


def expr_range(e: AffineExpr, bounds: Bounds, constraints: dict | None = None) -> Interval:
    """The interval of values ``e`` can take when every variable ranges over its interval.

    With ``constraints``, a sub-expression that is a constraint's expression is also clipped to that
    constraint's interval (XLA's ``RangeEvaluator`` with ``use_constraints``).
    """
    r = _expr_range(e, bounds, constraints)
    if constraints:
        hit = constraints.get(e)
        if hit is not None:
            return r.intersect(hit)
    return r


def _expr_range(e: AffineExpr, bounds: Bounds, constraints: dict | None) -> Interval:
    kind = e.kind
    if kind == CONST:
        return Interval(e.value, e.value)
    if kind in VAR_KINDS:
        return bounds(kind, e.value)
    if kind == ADD:
        terms, c = to_linear(e)
        out = Interval(c, c)
        for t, k in terms.items():
            out = out + expr_range(t, bounds, constraints) * k
        return out
    lhs, rhs = expr_range(e.lhs, bounds, constraints), expr_range(e.rhs, bounds, constraints)
    if kind == MUL:
        return lhs * rhs
    if kind == FLOORDIV:
        return lhs.floordiv(rhs)
    if kind == CEILDIV:
        return lhs.ceildiv(rhs)
    if kind == MOD:
        if rhs.is_point and rhs.lower > 0 and lhs.lower >= 0 and lhs.upper < rhs.lower:
            return lhs
        return lhs.mod(rhs)
    if kind == MIN:
        return lhs.min(rhs)
    if kind == MAX:
        return lhs.max(rhs)
    raise ValueError(f"unknown expression kind {kind}")


# Summand order of a simplified sum, as XLA's simplifier leaves it: by node kind in MLIR's AffineExprKind
# order (Add, Mul, Mod, FloorDiv, CeilDiv, Constant, Dim, Symbol), then by operands, recursively.
_KIND_RANK = {ADD: 0, MUL: 1, MOD: 2, FLOORDIV: 3, CEILDIV: 4, CONST: 5, "d": 6, "s": 7, "r": 8, MIN: 9, MAX: 10}


def order_key(e: AffineExpr):
    if e.kind == CONST or e.kind in VAR_KINDS:
        return (_KIND_RANK[e.kind], e.value)
    return (_KIND_RANK[e.kind], order_key(e.lhs), order_key(e.rhs))


def sorted_terms(terms: dict[AffineExpr, int]) -> dict[AffineExpr, int]:
    return dict(sorted(terms.items(), key=lambda tc: order_key(tc[0] if tc[1] == 1 else mul(tc[0], const(tc[1])))))
