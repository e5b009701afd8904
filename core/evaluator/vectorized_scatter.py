"""Scatters with an arbitrary update computation, as array programs: ``scatter``'s ordered combine and
``select-and-scatter``.

:func:`ordered_combine` applies ``comp(operand[loc], update)`` for a list of (location, update) pairs in list
order, as XLA's ``HloEvaluator::HandleScatter`` does one scatter index after another, but in *rounds*: round
``r`` combines, all at once, the ``r``-th update of every location (the ``r``-th in list order). Each location
sees its updates in order and locations are independent, so the values are those of the one-at-a-time loop;
the number of combiner calls is the largest number of updates one location gets, not the number of updates.

``select-and-scatter`` (XLA operation semantics; ``HloEvaluator::HandleSelectAndScatter``): for every window
position (one per ``source`` element, row-major) the ``select`` computation picks one operand element of the
window, scanning the window in row-major order and skipping padding: the first element is taken, then an
element replaces the pick when ``select(pick, element)`` is false. ``scatter`` then combines the source value
into the output (initialised to ``init_value``) at the picked index, source positions in row-major order. Here
the scan runs once per window offset over all window positions at once, and the scatter by rounds.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import Calls, EvaluationError, as_array, computation_attr, shape_dtype
from fusegen.evaluator.elementwise import is_liftable
from fusegen.hlo.ir import Computation, Instruction

__all__ = ["ordered_combine", "CALLING_HANDLERS"]


def update_rounds(lin: np.ndarray) -> tuple[np.ndarray, int]:
    """For flat locations ``lin`` (in update order): each update's rank among the earlier updates of its
    location (0 for the first), and the number of rounds (the largest rank + 1; 0 without updates)."""
    if lin.size == 0:
        return np.zeros(0, dtype=np.int64), 0
    order = np.argsort(lin, kind="stable")
    s = lin[order]
    first = np.ones(s.size, dtype=bool)
    first[1:] = s[1:] != s[:-1]
    starts = np.maximum.accumulate(np.where(first, np.arange(s.size), 0))
    rank = np.empty(s.size, dtype=np.int64)
    rank[order] = np.arange(s.size) - starts
    return rank, int(rank.max()) + 1


def ordered_combine(comp: Computation, targets: list[np.ndarray], lin: np.ndarray, updates: list[np.ndarray],
                    calls: Calls) -> None:
    """``targets[j].flat[lin[e]] = comp(targets..., updates...)[j]`` for every update ``e`` in order, in place.

    Args:
        comp: the update computation ``(targets..., updates...) -> targets`` (scalars; lifted when it can be,
            else :func:`~fusegen.evaluator.reduce.apply_combiner` runs it per element).
        targets: C-contiguous arrays updated in place (one per operand).
        lin: int64 flat indices into the targets, one per update, in application order.
        updates: one 1-D array per operand, ``len(lin)`` values each.
        calls: the evaluator's (:class:`~fusegen.evaluator.common.Calls`), which run ``comp``.
    """
    from fusegen.evaluator.reduce import apply_combiner

    flats = [t.reshape(-1) for t in targets]
    rank, rounds = update_rounds(lin)
    single = rounds == 1
    for r in range(rounds):
        sel = slice(None) if single else rank == r
        loc = lin[sel]
        new = apply_combiner(comp, [f[loc] for f in flats], [u[sel] for u in updates], calls)
        for f, v in zip(flats, new):
            f[loc] = as_array(v, f.dtype)


def _window(inst: Instruction, rank: int) -> dict[str, list]:
    from fusegen.hlo.window import parse_window

    return parse_window(inst, rank)


def _select_and_scatter(inst: Instruction, ops: list, calls: Calls) -> np.ndarray:
    select = computation_attr(inst, "select")
    scatter = computation_attr(inst, "scatter", "to_apply")
    operand, source, init = np.asarray(ops[0]), np.asarray(ops[1]), np.asarray(ops[2]).reshape(())
    rank = operand.ndim
    w = _window(inst, rank)
    if any(d != 1 for d in w["lhs_dilate"]):
        raise EvaluationError(f"select-and-scatter %{inst.name}: base dilation is not allowed")
    out = np.ascontiguousarray(np.broadcast_to(as_array(init, shape_dtype(inst.shape)), operand.shape)).copy()
    nsrc = source.size
    if nsrc == 0:
        return out
    src_pos = np.indices(source.shape).reshape(rank, nsrc)
    have = np.zeros(nsrc, dtype=bool)
    pick_val = np.zeros(nsrc, dtype=operand.dtype)
    pick_lin = np.zeros(nsrc, dtype=np.int64)
    lifted = is_liftable(select)
    for pos in np.ndindex(*w["size"]):
        idx = [src_pos[d] * w["stride"][d] + pos[d] * w["rhs_dilate"][d] - w["pad"][d][0] for d in range(rank)]
        valid = np.ones(nsrc, dtype=bool)
        for d in range(rank):
            valid &= (idx[d] >= 0) & (idx[d] < operand.shape[d])
        if not valid.any():
            continue
        clipped = tuple(np.clip(i, 0, max(s - 1, 0)) for i, s in zip(idx, operand.shape))
        cur = operand[clipped]
        lin = np.ravel_multi_index(clipped, operand.shape) if operand.size else np.zeros(nsrc, dtype=np.int64)
        take = valid & ~have
        both = valid & have
        if both.any():
            if lifted:
                keep = np.broadcast_to(np.asarray(calls.call_lifted(select, [pick_val[both], cur[both]]), bool),
                                       (int(both.sum()),))
            else:
                keep = np.array([bool(np.asarray(calls.call(select, [np.asarray(a), np.asarray(b)])).reshape(()))
                                 for a, b in zip(pick_val[both], cur[both])], dtype=bool)
            repl = np.zeros(nsrc, dtype=bool)
            repl[both] = ~keep
            take |= repl
        pick_val = np.where(take, cur, pick_val)
        pick_lin = np.where(take, lin, pick_lin)
        have |= valid
    src_flat = np.ascontiguousarray(source).reshape(-1)
    ordered_combine(scatter, [out], pick_lin[have], [src_flat[have].astype(out.dtype)], calls)
    return out


#: ``handler(inst, operands, calls)`` (select and scatter run through ``calls``, see :class:`~.common.Calls`)
CALLING_HANDLERS: dict[str, Callable] = {"select-and-scatter": _select_and_scatter}
