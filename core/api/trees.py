"""Pytrees of inputs and outputs: jax's when jax is loaded, else the same order for tuples, lists and dicts.

A captured function's arguments and outputs are jax pytrees (:class:`jax.tree_util.PyTreeDef`); ``run`` takes
and gives them as such. Without jax (a module loaded from a file) the leaves of tuples, lists and dicts come in
jax's order (dict keys sorted), so JAX's output pytree passed as ``expected`` lines up with the module's output
leaves either way.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np


def _jax_tree() -> Any:
    """``jax.tree_util`` when jax is already imported (never imported here: it costs seconds)."""
    return sys.modules["jax"].tree_util if "jax" in sys.modules else None


def tree_leaves(value: Any) -> list:
    """The leaves of ``value`` (jax's order; ``None`` is no leaf, as in jax)."""
    tu = _jax_tree()
    if tu is not None:
        return tu.tree_leaves(value)
    if value is None:
        return []
    if isinstance(value, (tuple, list)):
        return [x for v in value for x in tree_leaves(v)]
    if isinstance(value, dict):
        return [x for k in sorted(value) for x in tree_leaves(value[k])]
    return [value]


def describe(leaves: list) -> str:
    """``3 leaves: f32[4,8], bf16[8], s32[]`` (at most 8 named): what an error message shows of a pytree."""
    def one(x: Any) -> str:
        dt = getattr(x, "dtype", None)
        shape = getattr(x, "shape", None)
        if dt is None or shape is None:
            return type(x).__name__
        from fusegen.hlo.dtypes import element_type_of

        return f"{element_type_of(np.dtype(dt))}[{','.join(str(d) for d in shape)}]"

    shown = ", ".join(one(x) for x in leaves[:8]) + (", ..." if len(leaves) > 8 else "")
    return f"{len(leaves)} lea{'f' if len(leaves) == 1 else 'ves'}" + (f": {shown}" if leaves else "")
