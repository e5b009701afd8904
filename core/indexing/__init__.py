"""``fusegen.indexing``: XLA's indexing maps (``xla/hlo/analysis/indexing_map.h``) in Python.

Build expressions from ``dim(i)``, ``sym(i)``, ``rt(i)``, ``const(c)`` with ``+ - *`` and ``.floordiv(c)``,
``.ceildiv(c)``, ``.mod(c)``, ``expr_min``/``expr_max``; build maps with ``IndexingMap(exprs, dims, syms, rts,
constraints)`` or ``parse_indexing_map(text)``; ``str(map)`` prints XLA's text form. See docs/indexing.md.
"""

from fusegen.indexing.compose import compose_indexing_maps
from fusegen.indexing.equality import semantically_equal
from fusegen.indexing.expr import AffineExpr, const, dim, expr_max, expr_min, rt, sym
from fusegen.indexing.interval import Interval
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify import remove_unused_vars, rescale_symbols, simplify
from fusegen.indexing.text import IndexingMapParseError, parse_expr, parse_indexing_map


def clear_caches() -> None:
    """Forget the cached results of ``simplify`` and ``compose`` (keyed by the maps' structure)."""
    import sys

    for name in ("fusegen.indexing.compose", "fusegen.indexing.simplify"):  # the modules, not the functions
        sys.modules[name].clear_cache()

__all__ = [
    "AffineExpr", "IndexingMap", "IndexingMapParseError", "Interval", "clear_caches", "compose_indexing_maps",
    "const", "dim",
    "expr_max", "expr_min", "parse_expr", "parse_indexing_map", "remove_unused_vars", "rescale_symbols", "rt",
    "semantically_equal", "simplify", "sym",
]
