"""The collectives of the reference run and the f64 oracle, written apart from the kernel path's.

:mod:`fusegen.evaluator.collectives` exchanges the kernel path's buffers (block by block, ``np.concatenate`` /
``np.split``). This module computes the same XLA semantics a second way, from one stacked ``[G, ...]`` array of
the group's operands and index arithmetic, so a wrong exchange on the kernel path (an all-reduce answered as
the identity, blocks in the wrong order, a permute to the wrong device) differs from the reference and the f64
oracle instead of being agreed with. The reduction is the same fold in group order with ``to_apply`` (that
order is XLA's semantics, not an implementation choice).

Same results as :func:`fusegen.evaluator.collectives.exchange`; not one of the evaluator's op modules, it runs
``to_apply`` through the evaluator's ``CALLS`` itself, where ``exchange`` is handed them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegen.evaluator.common import EvaluationError, shape_dtype
from fusegen.evaluator.elementwise import is_liftable
from fusegen.evaluator.evaluator import CALLS
from fusegen.hlo.ir import Computation, Instruction

__all__ = ["exchange_stacked"]


def _fold(comp: Computation, stacked: np.ndarray) -> np.ndarray:
    acc = stacked[0]
    for k in range(1, stacked.shape[0]):
        if is_liftable(comp):
            acc = np.asarray(CALLS.call_lifted(comp, [acc, stacked[k]])).astype(stacked.dtype, copy=False)
        else:
            acc = np.vectorize(lambda a, b: CALLS.call(comp, [np.asarray(a), np.asarray(b)]),
                               otypes=[stacked.dtype])(acc, stacked[k])
    return acc


def _blocks(x: np.ndarray, d: int, g: int, name: str) -> np.ndarray:
    """``x`` (``[G, ..., D, ...]``, ``d`` counted without the group axis) as ``[G, g, ..., D/g, ...]``."""
    size = x.shape[1 + d]
    if size % g:
        raise EvaluationError(f"%{name}: dimension {d} of size {size} does not split into {g} blocks")
    shape = x.shape[: 1 + d] + (g, size // g) + x.shape[2 + d:]
    return np.moveaxis(x.reshape(shape), 1 + d, 1)


def _one(inst: Instruction, op: str, stacked: np.ndarray, dims: Any) -> list[np.ndarray]:
    g = stacked.shape[0]
    if op == "all-reduce":
        total = _fold(inst.attrs["to_apply"], stacked)
        return [total] * g
    if op == "all-gather":
        d = int(dims[0])
        # member k's block lands at [k*size, (k+1)*size) of dimension d
        moved = np.moveaxis(stacked, 0, d)  # [..., G, D, ...]
        shape = moved.shape[:d] + (moved.shape[d] * moved.shape[d + 1],) + moved.shape[d + 2:]
        return [moved.reshape(shape)] * g
    if op == "reduce-scatter":
        d = int(dims[0])
        total = _fold(inst.attrs["to_apply"], stacked)
        blocks = _blocks(total[None], d, g, inst.name)[0]  # [g, ...]
        return [blocks[k] for k in range(g)]
    if op == "all-to-all":
        d = int(dims[0])
        blocks = _blocks(stacked, d, g, inst.name)  # [src, dst, ..., D/g, ...]
        out = []
        for dst in range(g):
            mine = blocks[:, dst]  # [src, ..., D/g, ...]
            moved = np.moveaxis(mine, 0, d)
            out.append(moved.reshape(moved.shape[:d] + (moved.shape[d] * moved.shape[d + 1],) + moved.shape[d + 2:]))
        return out
    if op == "collective-broadcast":
        return [stacked[0]] * g
    raise EvaluationError(f"%{inst.name}: {inst.opcode} is not a collective the reference exchanges")


def exchange_stacked(inst: Instruction, contributions: list[list[np.ndarray]],
                     pairs: list[tuple[int, int]] | None = None) -> list[Any]:
    """Every participant's result of one collective (see :func:`fusegen.evaluator.collectives.exchange`)."""
    op = inst.opcode[:-6] if inst.opcode.endswith("-start") else inst.opcode
    g = len(contributions)
    shape = inst.shape.tuple_shapes[1] if inst.opcode.endswith("-start") and op != "all-reduce" else inst.shape
    leaves = shape.leaves() if shape.is_tuple else [shape]
    if op == "collective-permute":
        source = {t: s for s, t in pairs or []}
        res = []
        for k in range(g):
            arrays = ([np.array(a) for a in contributions[source[k]]] if k in source else
                      [np.zeros(tuple(s.dimensions), dtype=shape_dtype(s)) for s in leaves])
            res.append(tuple(arrays) if shape.is_tuple else arrays[0])
        return res
    if op == "all-to-all" and not inst.attrs.get("dimensions"):
        return [tuple(contributions[src][dst] for src in range(g)) for dst in range(g)]
    per_operand = [_one(inst, op, np.stack([c[i] for c in contributions]), inst.attrs.get("dimensions"))
                   for i in range(len(contributions[0]))]
    return [tuple(r[k] for r in per_operand) if shape.is_tuple else per_operand[0][k] for k in range(g)]
