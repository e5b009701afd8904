"""Map-level simplification: XLA's ``IndexingMap::Simplify``, ``RemoveUnusedSymbols``/``RemoveUnusedVars``
and ``RescaleSymbols`` (``xla/hlo/analysis/indexing_map.cc``).

``simplify(m)`` repeats until nothing changes:
1. each constraint expression is simplified, then normalized: a constant summand moves into the interval
   (``e + 5 in [50, 54]`` -> ``e in [45, 49]``), ``x * c`` / ``x floordiv c`` / a common factor are divided out
   (``d0 floordiv 8 in [5, 11]`` -> ``d0 in [40, 95]``), ``c * x + y`` with ``y in [0, c - 1]`` on aligned bounds
   becomes a constraint on ``x``; a constraint on a bare variable narrows its interval;
2. a constraint always satisfied on the domain is dropped; one never satisfiable makes the map known-empty;
3. ``v mod c_i in [r_i, r_i]`` constraints on one variable merge (Chinese remainder) into one, and the
   variable's interval shrinks to the first and last values in that residue class;
4. the results are simplified with :class:`~fusegen.indexing.simplify_expr.ExprSimplifier`; a variable with a
   one-point interval becomes that constant in the results.
Each function returns ``(new_map, changed)``.
"""

from __future__ import annotations

from math import gcd

from fusegen.indexing.expr import CONST, DIM, MOD, MUL, FLOORDIV, RT, SYM, AffineExpr, const, var
from fusegen.indexing.interval import Interval
from fusegen.indexing.linear import expr_range, from_linear, to_linear
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify_expr import ExprSimplifier


def _bounds_fn(dims, syms, rts):
    tables = {DIM: dims, SYM: syms, RT: rts}
    return lambda kind, i: tables[kind][i]


def _ceil_div(a: int, b: int) -> int:
    return -((-a) // b)


def normalize_constraint(e: AffineExpr, b: Interval, bounds) -> tuple[AffineExpr, Interval]:
    """Rewrites ``e in b`` into an equivalent, simpler constraint (step 1 of the module docstring)."""
    for _ in range(16):
        terms, k = to_linear(e)
        if k and terms:  # move the constant into the interval
            e, b = from_linear(terms), Interval(b.lower - k, b.upper - k)
            continue
        if len(terms) == 1 and next(iter(terms.values())) not in (0, 1):
            (t, a), = terms.items()
            lo, hi = (_ceil_div(b.lower, a), b.upper // a) if a > 0 else (_ceil_div(b.upper, a), b.lower // a)
            e, b = t, Interval(lo, hi)
            continue
        g = 0
        for a in terms.values():
            g = gcd(g, a)
        if g > 1:
            e = from_linear({t: a // g for t, a in terms.items()})
            b = Interval(_ceil_div(b.lower, g), b.upper // g)
            continue
        if e.kind == FLOORDIV and e.rhs.is_const and e.rhs.value > 0:
            c = e.rhs.value
            e, b = e.lhs, Interval(b.lower * c, b.upper * c + c - 1)
            continue
        if len(terms) > 1:  # c * X + Y, Y in [0, c - 1], aligned bounds -> X in [l / c, (u + 1) / c - 1]
            split = _aligned_split(terms, b, bounds)
            if split is not None:
                e, b = split
                continue
        return e, b
    return e, b


def _aligned_split(terms, b: Interval, bounds):
    coeffs = sorted({abs(a) for a in terms.values()}, reverse=True)
    for c in coeffs:
        if c <= 1:
            continue
        high = {t: a // c for t, a in terms.items() if a % c == 0}
        low = {t: a for t, a in terms.items() if a % c}
        if not high or not low:
            continue
        lr = expr_range(from_linear(low), bounds)
        if lr.lower >= 0 and lr.upper <= c - 1 and b.lower % c == 0 and (b.upper + 1) % c == 0:
            return from_linear(high), Interval(b.lower // c, (b.upper + 1) // c - 1)
    return None


def _merge_mod_constraints(dims, syms, rts, constraints: dict) -> tuple[dict, bool]:
    """Step 3: CRT-merges ``v mod c in [r, r]`` per variable and snaps ``v``'s interval to the class."""
    tables = {DIM: dims, SYM: syms, RT: rts}
    per_var: dict[AffineExpr, list[tuple[AffineExpr, int, int]]] = {}
    for e, b in constraints.items():
        if e.kind == MOD and e.lhs.is_var and e.rhs.is_const and e.rhs.value > 0 and b.is_point:
            per_var.setdefault(e.lhs, []).append((e, e.rhs.value, b.lower))
    changed = False
    for v, items in per_var.items():
        modulus, residue = 1, 0
        for _, c, r in items:
            merged = _crt(modulus, residue, c, r)
            if merged is None:
                return {}, True  # no integer satisfies both: known empty (caller checks)
            modulus, residue = merged
        table = tables[v.kind]
        old = table[v.value]
        lo = old.lower + (residue - old.lower) % modulus
        hi = old.upper - (old.upper - residue) % modulus
        new_bounds = Interval(lo, hi)
        if new_bounds != old:
            table[v.value] = new_bounds
            changed = True
        if len(items) > 1:
            for e, _, _ in items:
                del constraints[e]
            constraints[v.mod(modulus)] = Interval(residue, residue)
            changed = True
    return constraints, changed


def _crt(m1: int, r1: int, m2: int, r2: int):
    g = gcd(m1, m2)
    if (r2 - r1) % g:
        return None
    lcm = m1 // g * m2
    for x in range(r1 % m1, lcm, m1):
        if x % m2 == r2 % m2:
            return lcm, x
    return None


def simplify(m: IndexingMap, fold_point_vars: bool = True, affine_fit_points: int = 0) -> tuple[IndexingMap, bool]:
    """XLA's ``IndexingMap::Simplify``: the steps in the module docstring, to a fixpoint.

    ``fold_point_vars=False`` is XLA's ``SimplifyPointDimensions::kPreserve``. ``affine_fit_points > 0`` (not
    XLA's; off by default) also rewrites a result proven affine on its whole domain of at most that many points.
    """
    if m.is_undefined or m.is_known_empty:
        return m, False
    if not m.constraints and not m.syms and not m.rts and all(e.kind in (DIM, CONST) for e in m.exprs) and \
            not (fold_point_vars and any(b.is_point for b in m.dims)):
        return m, False  # a permutation / projection map: nothing to simplify
    key = (m.cache_key(), fold_point_vars, affine_fit_points)
    hit = _SIMPLIFIED.get(key)
    if hit is None:
        if len(_SIMPLIFIED) >= CACHE_LIMIT:
            _SIMPLIFIED.clear()
        hit = _SIMPLIFIED[key] = _simplify(m, fold_point_vars, affine_fit_points)
    return hit


#: Simplified maps by structural key (maps are immutable; models repeat the same maps layer after layer).
_SIMPLIFIED: dict = {}
CACHE_LIMIT = 8192


def clear_cache() -> None:
    """Forget the simplified maps (for benchmarks measuring a cold run)."""
    _SIMPLIFIED.clear()


def _simplify(m: IndexingMap, fold_point_vars: bool, affine_fit_points: int) -> tuple[IndexingMap, bool]:
    dims, syms, rts = list(m.dims), list(m.syms), list(m.rts)
    constraints = dict(m.constraints)
    bounds = _bounds_fn(dims, syms, rts)
    for _ in range(32):
        before = (list(dims), list(syms), list(rts), dict(constraints))
        simplifier = ExprSimplifier(bounds, fold_point_vars, affine_fit_points)
        new_constraints: dict[AffineExpr, Interval] = {}
        for e, b in constraints.items():
            e2, b2 = normalize_constraint(simplifier.simplify(e), b, bounds)
            if e2.is_var:
                table = {DIM: dims, SYM: syms, RT: rts}[e2.kind]
                table[e2.value] = table[e2.value].intersect(b2)
                if table[e2.value].is_empty:
                    return IndexingMap.known_empty(m.num_dims, m.num_results), True
                continue
            r = expr_range(e2, bounds)
            b2 = b2.intersect(new_constraints.get(e2, b2))
            # As XLA, a constraint disjoint from its expression's range is kept, not turned into emptiness:
            # only an empty variable interval (or an empty constraint interval) makes the map known-empty.
            if b2.is_empty:
                return IndexingMap.known_empty(m.num_dims, m.num_results), True
            if b2.contains(r):
                continue
            new_constraints[e2] = b2
        constraints, _ = _merge_mod_constraints(dims, syms, rts, new_constraints)
        if any(b.is_empty for b in (*dims, *syms, *rts)):
            return IndexingMap.known_empty(m.num_dims, m.num_results), True
        if (dims, syms, rts, constraints) == before:
            break
    simplifier = ExprSimplifier(bounds, fold_point_vars, affine_fit_points, constraints)
    exprs = [simplifier.simplify(e) for e in m.exprs]
    out = IndexingMap(exprs, dims, syms, rts, constraints, names=m.names)
    return out, out != m


def used_vars(m: IndexingMap, dims: bool) -> set[tuple[str, int]]:
    """Variables used by the results, plus every variable of a constraint that touches a used one."""
    used: set[tuple[str, int]] = set()
    for e in m.exprs:
        used |= e.variables()
    for e in m.constraints:
        vs = e.variables()
        touches = vs & used or (not dims and any(k == DIM for k, _ in vs))
        if touches:
            used |= vs
    if not dims:
        used |= {(DIM, i) for i in range(m.num_dims)}
    return used


def remove_unused_vars(m: IndexingMap, dims: bool = True) -> tuple[IndexingMap, bool]:
    """XLA's ``RemoveUnusedVars`` (``dims=True``) / ``RemoveUnusedSymbols`` (``dims=False``).

    Drops the variables neither the results nor a constraint touching a used variable need, renumbers
    the rest, and drops constraints over dropped variables only.
    """
    if m.is_undefined or m.is_known_empty:
        return m, False
    used = used_vars(m, dims)
    kinds = (DIM, SYM, RT) if dims else (SYM, RT)
    mapping: dict[AffineExpr, AffineExpr] = {}
    new_bounds = {DIM: list(m.dims), SYM: list(m.syms), RT: list(m.rts)}
    new_names = dict(m.names)
    for kind in kinds:
        keep = [i for i in range(len(new_bounds[kind])) if (kind, i) in used]
        for new_i, old_i in enumerate(keep):
            mapping[var(kind, old_i)] = var(kind, new_i)
        if kind in new_names:
            new_names[kind] = tuple(new_names[kind][i] for i in keep if i < len(new_names[kind]))
        new_bounds[kind] = [new_bounds[kind][i] for i in keep]
    if all(len(new_bounds[k]) == len(getattr(m, a)) for k, a in ((DIM, "dims"), (SYM, "syms"), (RT, "rts"))):
        return m, False
    constraints = {e.replace(mapping): b for e, b in m.constraints.items() if e.variables() <= used}
    out = IndexingMap([e.replace(mapping) for e in m.exprs], new_bounds[DIM], new_bounds[SYM], new_bounds[RT],
                      constraints, names=new_names)
    return out, True


def rescale_symbols(m: IndexingMap) -> tuple[IndexingMap, bool]:
    """XLA's ``RescaleSymbols``: a range variable ``s`` with ``s mod c in [r, r]`` becomes ``s' * c + r``."""
    if m.is_undefined or m.is_known_empty:
        return m, False
    dims, syms, rts = list(m.dims), list(m.syms), list(m.rts)
    constraints, _ = _merge_mod_constraints(dims, syms, rts, dict(m.constraints))
    mapping: dict[AffineExpr, AffineExpr] = {}
    for e, b in list(constraints.items()):
        if (e.kind == MOD and e.lhs.kind == SYM and e.rhs.is_const and e.rhs.value > 0 and b.is_point
                and e.lhs not in mapping):
            c, r, i = e.rhs.value, b.lower, e.lhs.value
            old = syms[i]
            syms[i] = Interval(_ceil_div(old.lower - r, c), (old.upper - r) // c)
            mapping[e.lhs] = e.lhs * c + r
            del constraints[e]
    if not mapping:
        return m, False
    new_constraints = {e.replace(mapping): b for e, b in constraints.items()}
    out = IndexingMap([e.replace(mapping) for e in m.exprs], dims, syms, rts, new_constraints, names=m.names)
    return out, True
