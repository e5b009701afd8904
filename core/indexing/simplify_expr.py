"""Range-aware rewriting of one expression: XLA's ``AffineExprSimplifier`` rules.

Mirrors ``xla/hlo/analysis/indexing_map.cc`` (``AffineExprSimplifier``: ``RewriteMod``, ``RewriteFloorDiv``,
``SimplifySumDiv``, ``SimplifyModDiv``, ``SimplifyDivDiv``, ...). Every rule is exact on the domain:

- ``x mod c`` / ``x floordiv c`` whose ``x`` stays inside one block ``[q*c, q*c + c - 1]`` become ``x - q*c`` / ``q``;
- summands of ``x`` that are multiples of ``c`` leave the ``mod`` (and leave the ``floordiv`` as ``k * t``);
- ``(A * g + B) mod c`` with ``B in [0, g - 1]`` and ``g | c`` is ``(A mod (c / g)) * g + B``; likewise
  ``(A * g + B) floordiv c`` is ``A floordiv (c / g)``; a common factor of a whole ``floordiv`` cancels;
- ``(x floordiv a) floordiv b`` is ``x floordiv (a * b)``; ``(a + y floordiv c1) floordiv c2`` is
  ``(a * c1 + y) floordiv (c1 * c2)``; ``(y mod a) mod b`` is ``y mod b`` when ``b | a``;
- in a sum, ``k * X - k * c * (X floordiv c)`` is ``k * (X mod c)`` and ``k * (X mod c) + k * c * (X floordiv c)``
  is ``k * X``; ``min``/``max`` whose operand ranges are ordered pick one side; a fixed-value expression is a constant.
"""

from __future__ import annotations

from math import gcd

from fusegen.indexing.expr import (
    ADD, CEILDIV, CONST, FLOORDIV, MAX, MIN, MOD, MUL, AffineExpr, binary, const,
)
from fusegen.indexing.interval import Interval
from fusegen.indexing.linear import Bounds, expr_range, from_linear, sorted_terms, to_linear

# Off by default (XLA has no such step): domains up to this many points are enumerated to prove a
# floordiv/mod expression affine.
AFFINE_FIT_POINTS = 0


class ExprSimplifier:
    """Simplifies expressions given the variables' intervals (``bounds(kind, index)``)."""

    def __init__(self, bounds: Bounds, fold_constant_vars: bool = True,
                 affine_fit_points: int = AFFINE_FIT_POINTS, constraints: dict | None = None) -> None:
        self.bounds = bounds
        self.fold_constant_vars = fold_constant_vars
        self.affine_fit_points = affine_fit_points
        self.constraints = constraints  # results are simplified knowing the constraints, as XLA does

    def range(self, e: AffineExpr) -> Interval:
        return expr_range(e, self.bounds, self.constraints)

    def simplify(self, e: AffineExpr) -> AffineExpr:
        for _ in range(16):  # fixpoint; each pass is bottom-up
            new = self._rewrite(e)
            if new == e:
                break
            e = new
        if self.affine_fit_points and _has_divmod(e):
            fitted = affine_fit(e, self.bounds, self.affine_fit_points)
            if fitted is not None:
                return fitted
        return e

    # ------------------------------------------------------------------------------------- dispatch
    def _rewrite(self, e: AffineExpr) -> AffineExpr:
        kind = e.kind
        if kind == CONST:
            return e
        if e.is_var:
            b = self.bounds(kind, e.value)
            return const(b.lower) if self.fold_constant_vars and b.is_point else e
        if kind == ADD or (kind == MUL and e.rhs.is_const):
            out = self._sum(e)
        else:
            lhs, rhs = self._rewrite(e.lhs), self._rewrite(e.rhs)
            if rhs.is_const and rhs.value > 0 and kind == FLOORDIV:
                out = self._floordiv(lhs, rhs.value)
            elif rhs.is_const and rhs.value > 0 and kind == MOD:
                out = self._mod(lhs, rhs.value)
            elif kind in (MIN, MAX):
                out = self._minmax(kind, lhs, rhs)
            else:
                out = binary(kind, lhs, rhs)
        if not out.is_const and out.kind in (FLOORDIV, CEILDIV, MOD, MIN, MAX):
            r = self.range(out)
            if r.is_point:
                return const(r.lower)
        return out

    # ------------------------------------------------------------------------------------- sums
    def _sum(self, e: AffineExpr) -> AffineExpr:
        terms, c = to_linear(e)
        merged: dict[AffineExpr, int] = {}
        for t, k in terms.items():
            t2 = self._rewrite(t)
            sub, c2 = to_linear(t2)
            c += k * c2
            for s, ks in sub.items():
                merged[s] = merged.get(s, 0) + k * ks
        merged = {t: k for t, k in merged.items() if k}
        merged, c = self._sub_is_mod(merged, c)
        merged = self._mod_div_recombine(merged)
        return from_linear(sorted_terms(merged), c)

    def _sub_is_mod(self, terms: dict[AffineExpr, int], c: int) -> tuple[dict[AffineExpr, int], int]:
        """``k * X - k * c * (X floordiv c)`` -> ``k * (X mod c)``."""
        for t, m in list(terms.items()):
            if t.kind != FLOORDIV or not t.rhs.is_const or t.rhs.value <= 0 or m % t.rhs.value:
                continue
            div = t.rhs.value
            k = -m // div
            x_terms, x_c = to_linear(t.lhs)
            if not x_terms:
                continue
            ok = all(s in terms and s is not t and terms[s] * (k * a) > 0 and abs(terms[s]) >= abs(k * a)
                     for s, a in x_terms.items())
            if not ok:
                continue
            out: dict[AffineExpr, int] = {}
            for s, ks in terms.items():
                if s == t:
                    out[binary(MOD, t.lhs, const(div))] = out.get(binary(MOD, t.lhs, const(div)), 0) + k
                    continue
                out[s] = out.get(s, 0) + ks - k * x_terms.get(s, 0)
            return {s: v for s, v in out.items() if v}, c - k * x_c
        return terms, c

    def _mod_div_recombine(self, terms: dict[AffineExpr, int]) -> dict[AffineExpr, int]:
        """``k * (X mod c) + k * c * (X floordiv c)`` -> ``k * X``.

        As XLA's ``RewriteSum``, the division is matched after simplifying ``X floordiv c``, so
        ``((x floordiv c0) mod c1) * d + (x floordiv (c0 * c1)) * (c1 * d)`` pairs up too.
        """
        for t, k in list(terms.items()):
            if t.kind != MOD or not t.rhs.is_const or t.rhs.value <= 0:
                continue
            div_term = binary(FLOORDIV, t.lhs, t.rhs)
            if terms.get(div_term) != k * t.rhs.value:
                div_term = self.simplify(div_term)
                if div_term == t or terms.get(div_term) != k * t.rhs.value:
                    continue
            x_terms, x_c = to_linear(t.lhs)
            if x_c:
                continue
            out: dict[AffineExpr, int] = {}
            for s, ks in terms.items():
                if s == t:
                    for xs, xa in x_terms.items():
                        out[xs] = out.get(xs, 0) + k * xa
                elif s != div_term:
                    out[s] = out.get(s, 0) + ks
            return {s: v for s, v in out.items() if v}
        return terms

    # ------------------------------------------------------------------------------------- floordiv
    def _floordiv(self, x: AffineExpr, c: int) -> AffineExpr:
        if c == 1:
            return x
        r = self.range(x)
        if r.lower // c == r.upper // c:
            return const(r.lower // c)
        if x.kind == FLOORDIV and x.rhs.is_const and x.rhs.value > 0:  # (y / a) / c
            return self._floordiv(x.lhs, x.rhs.value * c)
        terms, k = to_linear(x)
        # a common factor of every coefficient, the constant and the divisor cancels
        g = gcd(c, k)
        for a in terms.values():
            g = gcd(g, a)
        if g > 1:
            return self._floordiv(from_linear({t: a // g for t, a in terms.items()}, k // g), c // g)
        # summands that are multiples of c leave the division
        # summands that are multiples of c leave the division; the constant only when it is an exact multiple
        # (XLA's SimplifySumDiv keeps ``(d0 + 3) / 2`` as it is)
        outside = {t: a // c for t, a in terms.items() if a % c == 0}
        k_out = k // c if k % c == 0 else 0
        if outside or k_out:
            inside = {t: a for t, a in terms.items() if a % c}
            k_in = k - k_out * c
            rest = self._floordiv(from_linear(inside, k_in), c) if inside else const(k_in // c)
            return from_linear(outside, k_out) + rest
        split = self._split_low(terms, k, c)
        if split is not None:
            high, _, g = split
            return self._floordiv(high, c // g)
        # (a + y / c1) / c2 -> (a * c1 + y) / (c1 * c2), with one floordiv summand
        divs = [t for t, a in terms.items() if a == 1 and t.kind == FLOORDIV and t.rhs.is_const and t.rhs.value > 0]
        others_plain = all(not _has_divmod(t) for t in terms if t not in divs)
        if len(divs) == 1 and others_plain:
            d = divs[0]
            c1 = d.rhs.value
            rest = {t: a * c1 for t, a in terms.items() if t != d}
            y_terms, y_c = to_linear(d.lhs)
            for t, a in y_terms.items():
                rest[t] = rest.get(t, 0) + a
            return self._floordiv(from_linear({t: a for t, a in rest.items() if a}, k * c1 + y_c), c1 * c)
        return binary(FLOORDIV, x, const(c))

    # ------------------------------------------------------------------------------------- mod
    def _mod(self, x: AffineExpr, c: int) -> AffineExpr:
        if c == 1:
            return const(0)
        r = self.range(x)
        if r.lower // c == r.upper // c:
            return x - (r.lower // c) * c if r.lower // c else x
        if x.kind == MOD and x.rhs.is_const and x.rhs.value > 0 and x.rhs.value % c == 0:
            return self._mod(x.lhs, c)
        terms, k = to_linear(x)
        kept = {t: a for t, a in terms.items() if a % c}
        k_rem = k - int(k / c) * c if abs(k) < 2**53 else k % c  # C++ remainder, as XLA's RewriteMod takes it
        if len(kept) != len(terms) or k_rem != k:
            if not kept:
                return const(k % c)
            return self._mod(from_linear(kept, k_rem), c)
        split = self._split_low(terms, k, c)
        if split is not None:
            high, low, g = split
            return self._mod(high, c // g) * g + low
        return binary(MOD, x, const(c))

    def _split_low(self, terms: dict[AffineExpr, int], k: int, c: int):
        """``x = high * g + low`` with ``g | c``, ``g > 1`` and ``low in [0, g - 1]``; the largest such ``g``."""
        candidates = sorted({gcd(c, a) for a in terms.values()} - {1, c}, reverse=True)
        for g in candidates:
            high = {t: a // g for t, a in terms.items() if a % g == 0}
            low = {t: a for t, a in terms.items() if a % g}
            if not high or (not low and not k):
                continue
            # The constant stays whole in the low part (XLA's SplitSumByGcd), except a constant alone that is
            # at least the divisor: its multiples of g move up (``(s0 * 32 + 4639) / 4608`` -> ``(s0 + 144) / 144``).
            k_high = k // g if not low and k >= c else 0
            low_expr = from_linear(low, k - k_high * g)
            lr = self.range(low_expr)
            if lr.lower >= 0 and lr.upper < g:
                return from_linear(high, k_high), low_expr, g
        return None

    # ------------------------------------------------------------------------------------- min / max
    def _minmax(self, kind: str, a: AffineExpr, b: AffineExpr) -> AffineExpr:
        ra, rb = self.range(a), self.range(b)
        if kind == MIN:
            if ra.upper <= rb.lower:
                return a
            if rb.upper <= ra.lower:
                return b
        else:
            if ra.lower >= rb.upper:
                return a
            if rb.lower >= ra.upper:
                return b
        # min(x, x + c) and friends: compare the difference
        diff = self.range(self.simplify(a - b)) if not (a.is_const or b.is_const) else None
        if diff is not None:
            if diff.upper <= 0:
                return a if kind == MIN else b
            if diff.lower >= 0:
                return b if kind == MIN else a
        return binary(kind, a, b)


def _has_divmod(e: AffineExpr) -> bool:
    return any(n.kind in (FLOORDIV, CEILDIV, MOD, MIN, MAX) for n in e.walk())


def affine_fit(e: AffineExpr, bounds: Bounds, max_points: int) -> AffineExpr | None:
    """``e`` as ``sum(a_v * v) + c`` when it equals that at every point of its variables' box, else None.

    An opt-in complement to the rules (``simplify(m, affine_fit_points=N)``): reads the candidate's
    coefficients off unit steps and checks it on every point (exact, no sampling).
    """
    import numpy as np

    from fusegen.indexing.equality import eval_np

    variables = sorted(e.variables(), key=lambda kv: ("dsr".index(kv[0]), kv[1]))
    ranges = [bounds(k, i) for k, i in variables]
    if any(r.is_empty for r in ranges):
        return None
    total = 1
    for r in ranges:
        total *= r.size
    if total > max_points:
        return None
    base = {kv: r.lower for kv, r in zip(variables, ranges)}
    env0 = {kv: np.array([v], dtype=np.int64) for kv, v in base.items()}
    c0 = int(np.asarray(eval_np(e, env0)).reshape(-1)[0])
    coeffs = {}
    for kv, r in zip(variables, ranges):
        if r.size > 1:
            env = dict(env0)
            env[kv] = np.array([r.lower + 1], dtype=np.int64)
            coeffs[kv] = int(np.asarray(eval_np(e, env)).reshape(-1)[0]) - c0
    def candidate(env):
        out = np.int64(c0)
        for kv, a in coeffs.items():
            out = out + a * (env[kv] - base[kv])
        return out
    # a cheap random probe first, then every point
    rng = np.random.default_rng(0)
    probe = {kv: rng.integers(r.lower, r.upper + 1, size=64, dtype=np.int64) for kv, r in zip(variables, ranges)}
    if not np.array_equal(np.broadcast_to(eval_np(e, probe), (64,)), np.broadcast_to(candidate(probe), (64,))):
        return None
    axes = [np.arange(r.lower, r.upper + 1, dtype=np.int64) for r in ranges]
    mesh = np.meshgrid(*axes, indexing="ij") if axes else []
    full = {kv: m.reshape(-1) for kv, m in zip(variables, mesh)}
    if not np.array_equal(np.broadcast_to(eval_np(e, full), (total,)), np.broadcast_to(candidate(full), (total,))):
        return None
    from fusegen.indexing.expr import var as make_var

    terms = {make_var(k, i): a for (k, i), a in coeffs.items() if a}
    offset = c0 - sum(a * base[kv] for kv, a in coeffs.items())
    return from_linear(sorted_terms(terms), offset)
