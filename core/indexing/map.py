"""``IndexingMap``: a function from dimension variables (and range / runtime variables) to indices, on a domain.

Mirrors XLA's ``IndexingMap`` (``xla/hlo/analysis/indexing_map.h``). A map

    (d0, ..., dN)[s0, ..., sM]{r0, ..., rK} -> (e0, ..., eR), domain: d0 in [l, u], ..., expr in [l, u], ...

relates each point ``d`` of the dimension domain to the indices ``e(d, s, r)`` for every range-variable
point ``s`` (and runtime value ``r``) inside their intervals that satisfies every constraint. Maps are
immutable here: ``simplify``, ``compose_indexing_maps`` and the variable removals (functions of
:mod:`fusegen.indexing.simplify` and :mod:`fusegen.indexing.compose`) return new maps.

Special maps: ``IndexingMap.unknown()`` (XLA's undefined map: the indexing cannot be expressed) and
known-empty maps (no point satisfies the domain; printed ``KNOWN EMPTY``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Iterable, Mapping, Sequence

from fusegen.indexing.expr import DIM, RT, SYM, AffineExpr, as_expr, const, dim, rt, sym, var
from fusegen.indexing.interval import Interval

Constraints = Mapping[AffineExpr, Interval] | Iterable[tuple[AffineExpr, Interval]]


def _as_interval(b) -> Interval:
    if isinstance(b, Interval):
        return b
    lo, hi = b
    return Interval(int(lo), int(hi))


class IndexingMap:
    """An indexing map (see the module docstring).

    Args:
        exprs: the result expressions (one per index of the target shape).
        dims: the interval of each dimension variable ``d_i``.
        syms: the interval of each range variable ``s_i``.
        rts: the interval of each runtime variable ``r_i``.
        constraints: ``{expr: Interval}`` (or pairs); each must hold on the domain. Constraints on a bare
            variable narrow its interval; a constant constraint is checked at once, as XLA's
            ``IndexingMap::AddConstraint`` does. An empty interval anywhere makes the map known-empty.
            Raises ``ValueError`` when an expression uses a variable the map does not declare.
        names: optional non-default variable names, ``{"d": (...), "s": (...), "r": (...)}``.
    """

    __slots__ = ("exprs", "dims", "syms", "rts", "constraints", "names", "is_known_empty", "is_undefined")

    def __init__(self, exprs: Sequence[AffineExpr | int], dims: Sequence[Interval], syms: Sequence[Interval] = (),
                 rts: Sequence[Interval] = (), constraints: Constraints = (), *,
                 names: Mapping[str, Sequence[str]] | None = None) -> None:
        self.exprs: tuple[AffineExpr, ...] = tuple(as_expr(e) for e in exprs)
        self.dims: list[Interval] = [_as_interval(b) for b in dims]
        self.syms: list[Interval] = [_as_interval(b) for b in syms]
        self.rts: list[Interval] = [_as_interval(b) for b in rts]
        self.constraints: dict[AffineExpr, Interval] = {}
        self.names: dict[str, tuple[str, ...]] = {k: tuple(v) for k, v in (names or {}).items()
                                                  if any(n and not _is_default(k, i, n) for i, n in enumerate(v))}
        self.is_undefined = False
        self.is_known_empty = False
        items = list(constraints.items() if isinstance(constraints, Mapping) else constraints)
        counts = {DIM: len(self.dims), SYM: len(self.syms), RT: len(self.rts)}
        for e in (*self.exprs, *(as_expr(c) for c, _ in items)):
            for kind, index in _variables(e):
                if index >= counts[kind]:
                    raise ValueError(f"{e} uses {kind}{'t' if kind == RT else ''}{index}, but the map has "
                                     f"{counts[kind]} such variables")
        for expr, bounds in items:
            self._add_constraint(as_expr(expr), _as_interval(bounds))
        if any(b.is_empty for b in (*self.dims, *self.syms, *self.rts)):
            self._reset_to_known_empty()

    # ------------------------------------------------------------------------------------ constructors
    @classmethod
    def identity(cls, shape: Sequence[int]) -> "IndexingMap":
        """``(d0, ..., dN) -> (d0, ..., dN)`` with ``d_i in [0, shape[i] - 1]``."""
        return cls([dim(i) for i in range(len(shape))], [Interval(0, n - 1) for n in shape])

    @classmethod
    def from_tensor_sizes(cls, exprs: Sequence[AffineExpr | int], dim_sizes: Sequence[int],
                          sym_sizes: Sequence[int] = ()) -> "IndexingMap":
        """Dims ``[0, dim_sizes[i] - 1]``, symbols ``[0, sym_sizes[i] - 1]`` (XLA's ``FromTensorSizes``)."""
        return cls(exprs, [Interval(0, n - 1) for n in dim_sizes], [Interval(0, n - 1) for n in sym_sizes])

    @classmethod
    def unknown(cls) -> "IndexingMap":
        """The undefined map: the indexing is not expressible (XLA's ``IndexingMap::GetUndefined``)."""
        m = cls((), ())
        m.is_undefined = True
        return m

    @classmethod
    def known_empty(cls, num_dims: int, num_results: int) -> "IndexingMap":
        """A map whose domain holds no point (XLA's ``IndexingMap::GetKnownEmpty``-style result)."""
        m = cls([const(0)] * num_results, [Interval(0, -1)] * num_dims)
        m.is_known_empty = True
        return m

    def _reset_to_known_empty(self) -> None:
        self.exprs = tuple(const(0) for _ in self.exprs)
        self.dims = [Interval(0, -1)] * len(self.dims)
        self.syms = [Interval(0, -1)] * len(self.syms)
        self.rts = [Interval(0, -1)] * len(self.rts)
        self.constraints = {}
        self.is_known_empty = True

    def _add_constraint(self, expr: AffineExpr, bounds: Interval) -> None:
        if self.is_known_empty:
            return
        if expr.is_var:
            table = {DIM: self.dims, SYM: self.syms, RT: self.rts}[expr.kind]
            table[expr.value] = table[expr.value].intersect(bounds)
            if table[expr.value].is_empty:
                self._reset_to_known_empty()
            return
        if expr.is_const:
            if not bounds.contains(expr.value):
                self._reset_to_known_empty()
            return
        old = self.constraints.get(expr)
        bounds = bounds if old is None else old.intersect(bounds)
        if bounds.is_empty:
            self._reset_to_known_empty()
            return
        self.constraints[expr] = bounds

    # ------------------------------------------------------------------------------------ accessors
    @property
    def num_dims(self) -> int:
        return len(self.dims)

    @property
    def num_symbols(self) -> int:
        """Range variables only (XLA's ``GetRangeVarsCount``)."""
        return len(self.syms)

    @property
    def num_rt_vars(self) -> int:
        return len(self.rts)

    @property
    def num_results(self) -> int:
        return len(self.exprs)

    def bounds(self, kind: str, index: int) -> Interval:
        return {DIM: self.dims, SYM: self.syms, RT: self.rts}[kind][index]

    def replace(self, *, exprs=None, dims=None, syms=None, rts=None, constraints=None, names=None) -> "IndexingMap":
        """A copy with some fields replaced (constraints re-added, so they re-narrow the domain)."""
        if self.is_undefined:
            return self
        if exprs is None and dims is None and syms is None and rts is None and constraints is None:
            out = object.__new__(IndexingMap)  # names only: nothing to validate or re-narrow
            for slot in IndexingMap.__slots__:
                object.__setattr__(out, slot, getattr(self, slot))
            out.dims, out.syms, out.rts = list(self.dims), list(self.syms), list(self.rts)
            out.constraints = dict(self.constraints)
            out.names = IndexingMap((), (), names=self.names if names is None else names).names
            return out
        return IndexingMap(self.exprs if exprs is None else exprs, self.dims if dims is None else dims,
                           self.syms if syms is None else syms, self.rts if rts is None else rts,
                           self.constraints if constraints is None else constraints,
                           names=self.names if names is None else names)

    def with_constraint(self, expr: AffineExpr, bounds: Interval) -> "IndexingMap":
        """A copy with ``expr in bounds`` added (XLA's ``AddConstraint``)."""
        out = self.replace()
        out._add_constraint(as_expr(expr), _as_interval(bounds))
        return out

    # ------------------------------------------------------------------------------------ evaluation
    def evaluate(self, dims: Sequence[int], syms: Sequence[int] = (), rts: Sequence[int] = ()) -> tuple[int, ...]:
        """The result indices at one point; the domain is not checked (XLA's ``Evaluate`` ignores it too)."""
        if self.is_undefined:
            raise ValueError("the undefined indexing map cannot be evaluated")
        return tuple(e.evaluate(dims, syms, rts) for e in self.exprs)

    def constraints_satisfied(self, dims: Sequence[int], syms: Sequence[int] = (), rts: Sequence[int] = ()) -> bool:
        """Whether the point lies in every variable interval and satisfies every constraint."""
        if self.is_known_empty or self.is_undefined:
            return False
        for values, bounds in ((dims, self.dims), (syms, self.syms), (rts, self.rts)):
            if any(not b.contains(int(v)) for v, b in zip(values, bounds)):
                return False
        return all(b.contains(e.evaluate(dims, syms, rts)) for e, b in self.constraints.items())

    # ------------------------------------------------------------------------------------ dunder
    def __str__(self) -> str:
        from fusegen.indexing.text import print_map

        return print_map(self)

    def __repr__(self) -> str:
        return f"IndexingMap({str(self)!r})"

    def cache_key(self) -> tuple:
        """Structural key including the variable names: equal keys print and behave alike (the caches of
        ``simplify`` / ``compose`` use it; ``==`` ignores names)."""
        return (self._key(), tuple(sorted(self.names.items())))

    def _key(self):
        return (self.is_undefined, self.is_known_empty, self.exprs, tuple(self.dims), tuple(self.syms),
                tuple(self.rts), frozenset(self.constraints.items()))

    def __eq__(self, other: object) -> bool:
        """Structural equality (same expressions, intervals and constraints); see ``equality.semantically_equal``."""
        return isinstance(other, IndexingMap) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@lru_cache(maxsize=1 << 16)
def _variables(e: AffineExpr) -> frozenset:
    """``e.variables()``, remembered: maps are built from the same expressions over and over."""
    return frozenset(e.variables())


def _is_default(kind: str, i: int, name: str) -> bool:
    return name == f"{ {DIM: 'd', SYM: 's', RT: 'rt'}[kind] }{i}".replace(" ", "")


__all__ = ["IndexingMap", "Interval", "dim", "sym", "rt", "var", "const"]
