"""Composition of indexing maps: XLA's ``ComposeIndexingMaps(first, second)`` (``xla/hlo/analysis/indexing_map.cc``).

``compose_indexing_maps(first, second)`` is ``second ∘ first``: ``first``'s results are substituted for
``second``'s dimensions. The composed map has ``first``'s dimensions; its range variables are ``second``'s
followed by ``first``'s, and likewise its runtime variables. Constraints: ``second``'s (substituted),
``first``'s (renumbered), and one per ``second`` dimension saying ``first``'s result lies in that
dimension's interval. Nothing is simplified; call ``fusegen.indexing.simplify(m)`` for that.
"""

from __future__ import annotations

from fusegen.indexing.expr import RT, SYM, dim, rt, sym
from fusegen.indexing.map import IndexingMap


def compose_indexing_maps(first: IndexingMap, second: IndexingMap) -> IndexingMap:
    """``second ∘ first`` (see the module docstring). Raises ``ValueError`` on a result/dimension count mismatch."""
    if first.is_undefined or second.is_undefined:
        return IndexingMap.unknown()
    if first.num_results != second.num_dims:
        raise ValueError(f"cannot compose: the first map has {first.num_results} results, "
                         f"the second {second.num_dims} dimensions")
    if first.is_known_empty or second.is_known_empty:
        return IndexingMap.known_empty(first.num_dims, second.num_results)
    key = (first.cache_key(), second.cache_key())
    hit = _COMPOSED.get(key)
    if hit is None:
        if len(_COMPOSED) >= 8192:
            _COMPOSED.clear()
        hit = _COMPOSED[key] = _compose(first, second)
    return hit


#: Composed maps by the structural keys of both (maps are immutable; models repeat the same pairs).
_COMPOSED: dict = {}


def clear_cache() -> None:
    """Forget the composed maps (for benchmarks measuring a cold run)."""
    _COMPOSED.clear()


def _compose(first: IndexingMap, second: IndexingMap) -> IndexingMap:
    n2s, n2r = second.num_symbols, second.num_rt_vars
    # first's variables renumbered into the composed map
    first_subst = {sym(i): sym(n2s + i) for i in range(first.num_symbols)}
    first_subst.update({rt(i): rt(n2r + i) for i in range(first.num_rt_vars)})
    first_results = [e.replace(first_subst) for e in first.exprs]
    # second's dims become first's (renumbered) results; its own symbols keep their numbers
    second_subst = {dim(i): first_results[i] for i in range(second.num_dims)}

    exprs = [e.replace(second_subst) for e in second.exprs]
    constraints: list = []
    constraints += [(e.replace(second_subst), b) for e, b in second.constraints.items()]
    constraints += [(e.replace(first_subst), b) for e, b in first.constraints.items()]
    constraints += [(first_results[i], second.dims[i]) for i in range(second.num_dims)]
    names = {}
    for kind, n_second in ((SYM, n2s), (RT, n2r)):
        a, b = second.names.get(kind, ()), first.names.get(kind, ())
        if a or b:
            n_first = first.num_symbols if kind == SYM else first.num_rt_vars
            names[kind] = tuple(a) + ("",) * (n_second - len(a)) + tuple(b) + ("",) * (n_first - len(b))
    if "d" in first.names:
        names["d"] = first.names["d"]
    return IndexingMap(exprs, first.dims, list(second.syms) + list(first.syms),
                       list(second.rts) + list(first.rts), constraints, names=names)
