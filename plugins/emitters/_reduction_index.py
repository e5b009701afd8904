"""Index arithmetic of the reduction kernels: the 3-D view of a reduce input and the indices it maps to.

A reduction kernel (:mod:`fusegen_plugins.emitters.reduction`) addresses the hero's input by XLA's 3-D view
(``GetReductionKindAndContiguousComponents``: ``[major_reduced, kept, minor_reduced]`` or ``[major_kept,
reduced, minor_kept]``); these functions turn view coordinates into the input's linear position and per-dimension
index, and map a hero's output index forward through the epilogue chain to a root's.
"""

from __future__ import annotations

from typing import Any

from fusegen.analysis.reduction import ReductionDimensions
from fusegen.codegen.elemental import ElementalGenerator, int_list
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.hlo.ir import Instruction, Shape


def view_position(gen: ElementalGenerator, dims: ReductionDimensions, a: Any, r: Any, b: Any) -> Any:
    """Physical linear position in the reduce input of 3-D view coordinates ``(a, r, b)``."""
    d0, d1, d2 = dims.dimensions
    if dims.is_row_reduction:  # a = kept row, r over [major_reduced * minor_reduced]
        i0 = gen.idiv(r, d2) if d0 > 1 else 0
        i2 = gen.imod(r, d2) if d0 > 1 else r
        return gen.iadd(gen.imul(gen.iadd(gen.imul(i0, d1), a), d2), i2)
    return gen.iadd(gen.imul(gen.iadd(gen.imul(a, d1), r), d2), b)


def input_index(gen: ElementalGenerator, shape: Shape, dims: ReductionDimensions, a: Any, r: Any, b: Any,
                p: Any) -> tuple:
    """The index of the reduce input ``shape`` at 3-D view coordinates ``(a, r, b)`` (linear position ``p``),
    each dimension from its own view component (a kept row's dimensions from ``a`` only, XLA's indexing
    maps) rather than divisions of ``p``: an operand broadcast along the reduced dimensions is then read at
    an index Triton sees constant over the row, and the generator's caches know ``p`` and this index are
    one position. Falls back to delinearizing ``p`` when the layout does not split into the view's runs."""
    d0, d1, d2 = dims.dimensions
    if shape.numel == 0:
        return gen.delinearize(p, shape.dimensions, shape.minor_to_major())
    comps = ([gen.idiv(r, d2) if d0 > 1 else 0, a, gen.imod(r, d2) if d0 > 1 else r] if dims.is_row_reduction
             else [a, r, b])
    m2m = shape.minor_to_major()
    runs: list[list[int]] = [[], [], []]
    k, prod = 0, 1
    for d in reversed(m2m):  # physical dimensions, major to minor
        n = shape.dimensions[d]
        if n == 1:
            continue
        while k < 3 and prod == (d0, d1, d2)[k]:
            k, prod = k + 1, 1
        if k == 3 or (d0, d1, d2)[k] % (prod * n):
            return gen.delinearize(p, shape.dimensions, m2m)
        runs[k].append(d)
        prod *= n
    idx: list[Any] = [0] * shape.rank
    for run, c in zip(runs, comps):
        if run:
            sizes = [shape.dimensions[d] for d in run]
            for d, v in zip(run, gen.delinearize(c, sizes, tuple(range(len(run) - 1, -1, -1)))):
                idx[d] = v
    out = tuple(idx)
    gen._delin[-1][(p, tuple(shape.dimensions), tuple(m2m))] = out
    gen._lin_of[-1][(out, tuple(shape.dimensions), tuple(m2m))] = p
    return out


def forward_index(gen: ElementalGenerator, root: Instruction, hero: Instruction, idx: tuple) -> tuple:
    """The root's index of the lane whose hero index is ``idx`` (epilogue chain mapped forward)."""
    path = []
    n = root
    while n is not hero:
        if len(n.operands) != 1:
            raise EmitterUnsupported(n.opcode, n.name, "epilogue op with several operands")
        path.append(n)
        n = n.operands[0]
    cur = hero
    for u in reversed(path):
        src = cur.shape
        dst = u.shape
        if u.opcode == "bitcast":
            lin = gen.linearize(idx, src.dimensions, src.minor_to_major())
            idx = gen.delinearize(lin, dst.dimensions, dst.minor_to_major())
        elif u.opcode == "reshape":
            lin = gen.linearize(idx, src.dimensions, tuple(range(src.rank - 1, -1, -1)))
            idx = gen.delinearize(lin, dst.dimensions, tuple(range(dst.rank - 1, -1, -1)))
        elif u.opcode == "transpose":
            perm = int_list(u.attrs.get("dimensions"))
            idx = tuple(idx[perm[i]] for i in range(len(perm)))
        elif tuple(dst.dimensions) != tuple(src.dimensions):
            raise EmitterUnsupported(u.opcode, u.name, "epilogue op changes the shape")
        cur = u
    return tuple(idx)
