"""Shared pieces of the hero-based emitters (transpose, concatenate): output leaves, seeded hero values;
the loop and reduction emitters take :func:`flatten` too.

XLA's hero emitters (``emitters/transpose.cc``, ``emitters/concatenate.cc``) compute the hero's value in
the entry function and hand it to the epilogue functions ("injected values", ``EpilogueSpecification``);
fusegen does the same by placing the hero's value in the elemental generator's cache at the hero index,
so that the epilogue computed at that index reads it instead of re-emitting the hero elementally.
"""

from __future__ import annotations

from typing import Any, Sequence

from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.hlo.ir import Instruction, Shape


def flatten(v: Any) -> list[str]:
    """Leaf variables of a (possibly nested list) value."""
    if isinstance(v, list):
        out: list[str] = []
        for x in v:
            out.extend(flatten(x))
        return out
    return [v]


def seed_value(gen: Any, inst: Instruction, idx: Sequence[Any], value: str) -> None:
    """Make ``gen.value(inst, idx)`` return ``value`` (an injected hero value), through
    :meth:`fusegen.codegen.elemental.ElementalGenerator.bind_value` (innermost scope)."""
    gen.bind_value(inst, tuple(idx), value)


def root_leaves(fusion: Instruction, roots: Sequence[Instruction]) -> list[Shape]:
    """The output leaf shape of each root (roots are array-shaped, one leaf each).

    Raises:
        EmitterUnsupported: a tuple-shaped root, or roots that do not match the fusion's output leaves.
    """
    leaves = fusion.shape.leaves()
    for r in roots:
        if r.shape.is_tuple:
            raise EmitterUnsupported(r.opcode, r.name, "tuple-shaped roots are not supported by this emitter")
    if len(leaves) != len(roots):
        raise EmitterUnsupported("fusion", fusion.name,
                                 f"fused computation has {len(roots)} roots, the fusion shape {len(leaves)} leaves")
    for leaf in leaves:
        if not leaf.is_array:
            raise EmitterUnsupported("fusion", fusion.name, "token outputs")
    return leaves


def row_major(rank: int) -> tuple[int, ...]:
    """Minor-to-major of the default (row-major) layout."""
    return tuple(range(rank - 1, -1, -1))
