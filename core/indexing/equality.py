"""Semantic equality of indexing maps, and vectorized evaluation over many points.

Two maps are semantically equal when they denote the same relation: the same set of
``(dimension values, runtime values, result indices)`` tuples over all range-variable values that satisfy
the domain. Bounded domains up to ``max_points`` are enumerated exactly (numpy); larger ones are checked
on ``samples`` random input points (each with all its range-variable values when those are few), or,
when both maps have the same variables and intervals, pointwise on random full points. ``check_equal``
says which method decided.
"""

from __future__ import annotations

from math import prod

import numpy as np

from fusegen.indexing.expr import (
    ADD, CEILDIV, CONST, DIM, FLOORDIV, MAX, MIN, MOD, MUL, RT, SYM, AffineExpr,
)
from fusegen.indexing.map import IndexingMap

DEFAULT_MAX_POINTS = 1 << 21


def eval_np(e: AffineExpr, env: dict[tuple[str, int], np.ndarray]) -> np.ndarray:
    """``e`` at many points at once; ``env[(kind, i)]`` holds the variable's values (int64 arrays)."""
    kind = e.kind
    if kind == CONST:
        return np.int64(e.value)
    if kind in (DIM, SYM, RT):
        return env[(kind, e.value)]
    a, b = eval_np(e.lhs, env), eval_np(e.rhs, env)
    if kind == ADD:
        return a + b
    if kind == MUL:
        return a * b
    if kind == MIN:
        return np.minimum(a, b)
    if kind == MAX:
        return np.maximum(a, b)
    safe = np.where(b == 0, 1, b)
    if kind == FLOORDIV:
        out = np.floor_divide(a, safe)
    elif kind == CEILDIV:
        out = -np.floor_divide(-a, safe)
    elif kind == MOD:
        out = np.mod(a, safe)
    else:
        raise ValueError(f"unknown expression kind {kind}")
    return np.where(b == 0, 0, out)


def _grid(m: IndexingMap, fixed: dict | None = None) -> dict[tuple[str, int], np.ndarray]:
    axes, keys = [], []
    for kind, bounds in ((DIM, m.dims), (SYM, m.syms), (RT, m.rts)):
        for i, b in enumerate(bounds):
            if fixed and (kind, i) in fixed:
                continue
            keys.append((kind, i))
            axes.append(np.arange(b.lower, b.upper + 1, dtype=np.int64))
    if not axes:
        return {}
    mesh = np.meshgrid(*axes, indexing="ij")
    return {k: a.reshape(-1) for k, a in zip(keys, mesh)}


def _feasible(m: IndexingMap, env: dict, n: int) -> np.ndarray:
    mask = np.ones(n, dtype=bool)
    for kind, bounds in ((DIM, m.dims), (SYM, m.syms), (RT, m.rts)):
        for i, b in enumerate(bounds):
            v = env[(kind, i)]
            mask &= (v >= b.lower) & (v <= b.upper)
    for e, b in m.constraints.items():
        v = np.broadcast_to(eval_np(e, env), (n,))
        mask &= (v >= b.lower) & (v <= b.upper)
    return mask


def _relation(m: IndexingMap, env: dict, n: int) -> np.ndarray:
    """Rows ``(dims..., rts..., results...)`` of the feasible points, unique and sorted."""
    mask = _feasible(m, env, n)
    cols = [env[(DIM, i)] for i in range(m.num_dims)] + [env[(RT, i)] for i in range(m.num_rt_vars)]
    cols += [np.broadcast_to(eval_np(e, env), (n,)) for e in m.exprs]
    if not cols:
        return np.zeros((1 if mask.any() else 0, 0), dtype=np.int64)
    rows = np.stack([np.asarray(c)[mask] for c in cols], axis=1)
    return np.unique(rows, axis=0) if len(rows) else rows


def _size(m: IndexingMap, kinds=(DIM, SYM, RT)) -> int:
    sizes = []
    for kind, bounds in ((DIM, m.dims), (SYM, m.syms), (RT, m.rts)):
        if kind in kinds:
            sizes += [b.size for b in bounds]
    return prod(sizes) if sizes else 1


def _is_empty(m: IndexingMap, max_points: int) -> bool | None:
    if m.is_known_empty:
        return True
    if _size(m) > max_points:
        return None
    n = _size(m)
    return not _feasible(m, _grid(m), n).any() if n else True


def check_equal(a: IndexingMap, b: IndexingMap, max_points: int = DEFAULT_MAX_POINTS,
                samples: int = 2000, seed: int = 0) -> tuple[bool, str]:
    """``(equal, method)``; ``method`` is ``"structural"``, ``"enumeration"``, ``"sampling"`` or why not equal."""
    if a.is_undefined or b.is_undefined:
        return a.is_undefined and b.is_undefined, "undefined"
    if a == b:
        return True, "structural"
    ea, eb = _is_empty(a, max_points), _is_empty(b, max_points)
    if ea and eb:
        return True, "enumeration"
    if ea or eb:
        if ea is None or eb is None:
            return False, "one map is empty, the other too large to check"
        return False, "exactly one map is empty"
    if a.num_dims != b.num_dims or a.num_rt_vars != b.num_rt_vars or a.num_results != b.num_results:
        return False, "different numbers of dimensions, runtime variables or results"
    if _size(a) <= max_points and _size(b) <= max_points:
        ra, rb = _relation(a, _grid(a), _size(a)), _relation(b, _grid(b), _size(b))
        return (ra.shape == rb.shape and bool(np.array_equal(ra, rb))), "enumeration"
    rng = np.random.default_rng(seed)
    sym_cap = max(1, max_points // max(samples, 1))
    if _size(a, (SYM,)) <= sym_cap and _size(b, (SYM,)) <= sym_cap:
        return _sample_inputs(a, b, rng, samples), "sampling"
    if a.dims == b.dims and a.syms == b.syms and a.rts == b.rts:
        return _sample_pointwise(a, b, rng, samples * 100), "sampling"
    return False, "domains too large to compare"


def _random_env(m: IndexingMap, rng, n: int, kinds) -> dict:
    env = {}
    for kind, bounds in ((DIM, m.dims), (SYM, m.syms), (RT, m.rts)):
        if kind in kinds:
            for i, b in enumerate(bounds):
                env[(kind, i)] = rng.integers(b.lower, b.upper + 1, size=n, dtype=np.int64)
    return env


def _sample_inputs(a: IndexingMap, b: IndexingMap, rng, samples: int) -> bool:
    hull = IndexingMap([], [x.union(y) for x, y in zip(a.dims, b.dims)], (), [x.union(y) for x, y in zip(a.rts, b.rts)])
    inputs = _random_env(hull, rng, samples, (DIM, RT))
    for p in range(samples):
        point = {k: v[p] for k, v in inputs.items()}
        sets = []
        for m in (a, b):
            env = _grid(m, fixed=point)
            n = _size(m, (SYM,))
            env.update({k: np.full(n, v, dtype=np.int64) for k, v in point.items()})
            mask = _feasible(m, env, n)
            res = [np.broadcast_to(eval_np(e, env), (n,))[mask] for e in m.exprs]
            sets.append({tuple(int(x) for x in row) for row in zip(*res)} if res else ({()} if mask.any() else set()))
        if sets[0] != sets[1]:
            return False
    return True


def _sample_pointwise(a: IndexingMap, b: IndexingMap, rng, samples: int) -> bool:
    env = _random_env(a, rng, samples, (DIM, SYM, RT))
    ma, mb = _feasible(a, env, samples), _feasible(b, env, samples)
    if not np.array_equal(ma, mb):
        return False
    for ea, eb in zip(a.exprs, b.exprs):
        va = np.broadcast_to(eval_np(ea, env), (samples,))[ma]
        vb = np.broadcast_to(eval_np(eb, env), (samples,))[mb]
        if not np.array_equal(va, vb):
            return False
    return True


def semantically_equal(a: IndexingMap, b: IndexingMap, max_points: int = DEFAULT_MAX_POINTS) -> bool:
    """Whether ``a`` and ``b`` denote the same relation on the same domain (see the module docstring)."""
    return check_equal(a, b, max_points)[0]
