"""``gather``, ``scatter``, ``sort`` and ``topk``.

* ``gather``: XLA ``GatherDimensionNumbers`` (offset_dims, collapsed_slice_dims, start_index_map,
  index_vector_dim, operand_batching_dims, start_indices_batching_dims); start indices are clamped so the whole
  slice is in bounds (``HloEvaluator::HandleGather``).
* ``scatter``: ``ScatterDimensionNumbers``; an update window whose start would put any part of the window out of
  bounds is skipped whole (``HloEvaluator::HandleScatter``); updates are applied in row-major order of the
  scatter indices, so duplicate indices combine in that order. add / max / min / mul / and / or combiners run as
  numpy ``ufunc.at``; others by rounds of distinct locations (:mod:`fusegen.evaluator.vectorized_scatter`).
* ``sort``: along ``dimensions={d}`` with the comparator; a comparator that is ``compare(p[2i], p[2i+1])`` LT/GT
  becomes a stable numpy argsort on that operand; any other comparator is sorted as an array program
  (:mod:`fusegen.evaluator.vectorized_sort`: keys when it is a lexicographic order, else a vectorised merge).
* ``topk``: largest ``k`` along the last dim, values then s32 indices, ties to the lower index.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import (
    Calls,
    contiguous,
    EvaluationError,
    as_array,
    attr_bool,
    attr_int,
    attr_ints,
    computation_attr,
    is_float,
    shape_dtype,
    total_order_key,
    up,
)
from fusegen.evaluator.reduce import simple_combiner
from fusegen.evaluator.vectorized_scatter import ordered_combine
from fusegen.evaluator.vectorized_sort import sort_order, stable_argsort
from fusegen.hlo.ir import Computation, Instruction


def _indices_last(idx: np.ndarray, index_vector_dim: int) -> np.ndarray:
    """Indices with the index vector as the last dim (appending a size-1 one when it equals the rank)."""
    idx = np.asarray(idx).astype(np.int64)
    if index_vector_dim == idx.ndim:
        return idx[..., None]
    return np.moveaxis(idx, index_vector_dim, -1)


def _window_starts(idx: np.ndarray, indices_rank: int, index_vector_dim: int, rank: int, index_map,
                   operand_batching_dims, indices_batching_dims) -> list[np.ndarray]:
    """Per operand dimension (``rank`` of them), where each index's window starts, an int64 array of the batch
    shape ``idx.shape[:-1]`` (``idx``: :func:`_indices_last`'s indices, int64): ``idx[..., k]`` for the operand
    dimension ``index_map[k]`` (gather's ``start_index_map``, scatter's ``scatter_dims_to_operand_dims``), for
    a batching dimension ``operand_batching_dims[i]`` the position along the indices' dimension
    ``indices_batching_dims[i]`` (numbered among the ``indices_rank`` dimensions of the raw indices less
    ``index_vector_dim``, as XLA's ``start_indices_batching_dims`` / ``scatter_indices_batching_dims`` are),
    0 elsewhere. Unclamped: gather clamps the starts, scatter skips windows out of bounds."""
    batch_shape = idx.shape[:-1]
    # indices dims without the index vector dim, in order: batching dims count in that numbering
    idx_dims_wo_ivd = [d for d in range(indices_rank) if d != index_vector_dim]
    starts = [np.zeros(batch_shape, dtype=np.int64) for _ in range(rank)]
    for k, od in enumerate(index_map):
        starts[od] = idx[..., k]
    for od, idd in zip(operand_batching_dims, indices_batching_dims):
        pos = idx_dims_wo_ivd.index(idd)
        shp = [1] * len(batch_shape)
        shp[pos] = batch_shape[pos]
        starts[od] = np.broadcast_to(np.arange(batch_shape[pos]).reshape(shp), batch_shape)
    return starts


def gather_array(operand: np.ndarray, indices: np.ndarray, offset_dims, collapsed, start_index_map,
                 index_vector_dim: int, slice_sizes, operand_batching_dims=(), indices_batching_dims=()) -> np.ndarray:
    """XLA gather (see the module docstring); returns an array of ``operand``'s dtype."""
    operand = np.asarray(operand)
    raw_idx = np.asarray(indices)
    idx = _indices_last(raw_idx, index_vector_dim)
    batch_shape = idx.shape[:-1]
    rank = operand.ndim
    starts = _window_starts(idx, raw_idx.ndim, index_vector_dim, rank, start_index_map, operand_batching_dims,
                            indices_batching_dims)
    nb = len(batch_shape)
    grids = []
    for d in range(rank):
        s = np.clip(starts[d], 0, operand.shape[d] - slice_sizes[d])
        s = s.reshape(batch_shape + (1,) * rank)
        ar = np.arange(slice_sizes[d]).reshape((1,) * nb + tuple(slice_sizes[d] if e == d else 1 for e in range(rank)))
        grids.append(s + ar)
    g = operand[tuple(grids)]  # batch_shape + slice_sizes
    drop = set(collapsed) | set(operand_batching_dims)
    keep = [d for d in range(rank) if d not in drop]
    g = g.reshape(batch_shape + tuple(slice_sizes[d] for d in keep))
    out_rank = nb + len(keep)
    perm, bi = [], 0
    for i in range(out_rank):
        if i in offset_dims:
            perm.append(nb + list(offset_dims).index(i))
        else:
            perm.append(bi)
            bi += 1
    return contiguous(np.transpose(g, perm))


def _gather(inst: Instruction, ops: list) -> np.ndarray:
    r = gather_array(
        ops[0], ops[1], attr_ints(inst, "offset_dims"), attr_ints(inst, "collapsed_slice_dims"),
        attr_ints(inst, "start_index_map"), attr_int(inst, "index_vector_dim", np.asarray(ops[1]).ndim),
        attr_ints(inst, "slice_sizes"), attr_ints(inst, "operand_batching_dims"),
        attr_ints(inst, "start_indices_batching_dims"),
    )
    return as_array(r, shape_dtype(inst.shape))


def _scatter(inst: Instruction, ops: list, calls: Calls):
    comp = computation_attr(inst, "to_apply")
    n = (len(ops) - 1) // 2
    operands = [np.array(o, copy=True) for o in ops[:n]]
    raw_idx = np.asarray(ops[n])
    updates = [np.asarray(u) for u in ops[n + 1:]]
    uwd = list(attr_ints(inst, "update_window_dims"))
    iwd = set(attr_ints(inst, "inserted_window_dims"))
    sd2od = list(attr_ints(inst, "scatter_dims_to_operand_dims"))
    ivd = attr_int(inst, "index_vector_dim", raw_idx.ndim)
    ibd = list(attr_ints(inst, "input_batching_dims"))
    sibd = list(attr_ints(inst, "scatter_indices_batching_dims"))
    idx = _indices_last(raw_idx, ivd)
    rank = operands[0].ndim
    upd = updates[0]
    # update dims: scatter dims (not window) in order, window dims in order
    sdims = [d for d in range(upd.ndim) if d not in uwd]
    scatter_shape = tuple(upd.shape[d] for d in sdims)
    # operand dims that the window covers, in order (those not inserted and not batching)
    win_operand_dims = [d for d in range(rank) if d not in iwd and d not in ibd]
    if len(win_operand_dims) != len(uwd):
        raise EvaluationError(f"scatter %{inst.name}: window dims do not match the operand rank")
    win_sizes = [1] * rank
    for od, ud in zip(win_operand_dims, uwd):
        win_sizes[od] = upd.shape[ud]
    idx = idx.reshape(scatter_shape + (idx.shape[-1],))
    starts = _window_starts(idx, raw_idx.ndim, ivd, rank, sd2od, ibd, sibd)
    in_bounds = np.ones(scatter_shape, dtype=bool)
    for d in range(rank):
        in_bounds &= (starts[d] >= 0) & (starts[d] <= operands[0].shape[d] - win_sizes[d])
    # updates as [S, window...] with window dims in operand order
    perm = sdims + uwd
    nsc = int(np.prod(scatter_shape, dtype=np.int64))
    wshape = tuple(upd.shape[d] for d in uwd)
    ups = [np.transpose(u, perm).reshape((nsc,) + wshape) for u in updates]
    flat_starts = [s.reshape(nsc) for s in starts]
    valid = in_bounds.reshape(nsc)
    # full operand index of every update element: [S, window...] per operand dim
    grids = []
    nw = len(wshape)
    for d in range(rank):
        s = flat_starts[d].reshape((nsc,) + (1,) * nw)
        if d in win_operand_dims:
            j = win_operand_dims.index(d)
            ar = np.arange(wshape[j]).reshape((1,) + tuple(wshape[j] if e == j else 1 for e in range(nw)))
            grids.append(np.broadcast_to(s + ar, (nsc,) + wshape))
        else:
            grids.append(np.broadcast_to(s, (nsc,) + wshape))
    grids = [g[valid] for g in grids]
    ups = [u[valid] for u in ups]
    op = simple_combiner(comp) if n == 1 else None
    if op is not None and ups[0].size:
        from fusegen.evaluator.reduce import _ufunc

        tgt = operands[0]
        f = _ufunc(op, tgt.dtype)
        try:
            f.at(tgt, tuple(grids), ups[0].astype(tgt.dtype))
            return tgt
        except TypeError:
            pass  # fall through to the ordered loop
    # ordered: every update in scatter-index order, by rounds of distinct locations (vectorized_scatter)
    if ups and ups[0].size and operands[0].size:
        operands = [np.ascontiguousarray(o) for o in operands]
        lin = np.ravel_multi_index(tuple(g.reshape(-1) for g in grids), operands[0].shape)
        ordered_combine(comp, operands, lin, [u.reshape(-1) for u in ups], calls)
    return tuple(operands) if inst.shape.is_tuple else operands[0]


# ------------------------------------------------------------------------------------------------- sort


def _is_const(inst: Instruction, test: Callable[[float], bool]) -> bool:
    if inst.opcode != "constant" or inst.shape.rank:
        return False
    try:
        return bool(test(float(str(inst.attrs.get("literal")).strip())))
    except (TypeError, ValueError, IndexError):
        return False


def _canonicalized_parameter(inst: Instruction) -> Instruction | None:
    """The parameter ``p`` of JAX's sort-key canonicalization ``select(p != p, NaN, select(p == 0, 0, p))``
    (every NaN becomes one NaN, -0 becomes +0: ``jax.lax.sort``'s float comparator), else ``None``."""
    if inst.opcode != "select" or len(inst.operands) != 3:
        return None
    isnan, nan, inner = inst.operands
    if isnan.opcode != "compare" or str(isnan.attrs.get("direction", "")) != "NE" or len(isnan.operands) != 2:
        return None
    p = isnan.operands[0]
    if p.opcode != "parameter" or isnan.operands[1] is not p or not _is_const(nan, np.isnan):
        return None
    if inner.opcode != "select" or len(inner.operands) != 3:
        return None
    iszero, zero, same = inner.operands
    if same is not p or not _is_const(zero, lambda v: v == 0) or iszero.opcode != "compare" \
            or str(iszero.attrs.get("direction", "")) != "EQ" or iszero.operands[0] is not p \
            or not _is_const(iszero.operands[1], lambda v: v == 0):
        return None
    return p


def _simple_comparator(comp: Computation) -> tuple[int, str, bool, bool] | None:
    """``(operand index, direction, totalorder, canonical)`` for ``compare(p[2i], p[2i+1])`` (LT or GT, either
    parameter order) or for JAX's ``compare(canon(p[2i]), canon(p[2i+1])), type=TOTALORDER`` (``canonical``:
    NaNs are one NaN and -0 is +0); ``None`` for any other comparator (sorted with the comparator itself)."""
    root = comp.root
    if root is None or root.opcode != "compare" or len(root.operands) != 2:
        return None
    a, b = root.operands
    canonical = False
    if a.opcode != "parameter" or b.opcode != "parameter":
        a, b = _canonicalized_parameter(a), _canonicalized_parameter(b)
        if a is None or b is None:
            return None
        canonical = True
    pa, pb = a.parameter_number, b.parameter_number
    direction = str(root.attrs.get("direction", ""))
    total = str(root.attrs.get("type", "")).upper() == "TOTALORDER"
    if canonical and not total:
        return None
    if pa % 2 == 0 and pb == pa + 1 and direction in ("LT", "GT"):
        return pa // 2, direction, total, canonical
    if pb % 2 == 0 and pa == pb + 1 and direction in ("LT", "GT"):
        return pb // 2, "GT" if direction == "LT" else "LT", total, canonical
    return None


def _sort_key(x: np.ndarray, total: bool, canonical: bool = False) -> np.ndarray:
    x = np.asarray(x)
    if is_float(x.dtype):
        cx = up(x)
        if not total or canonical:
            cx = cx + np.zeros((), cx.dtype)  # -0 == +0 under the partial order
        if canonical:
            cx = np.where(np.isnan(cx), np.array(np.nan, cx.dtype), cx)  # one (positive) NaN, sorted last
        return total_order_key(contiguous(cx))
    if x.dtype == np.bool_:
        return x.astype(np.int8)
    return x


def _sort(inst: Instruction, ops: list, calls: Calls):
    comp = computation_attr(inst, "to_apply")
    arrays = [np.asarray(o) for o in ops]
    dim = attr_ints(inst, "dimensions", (arrays[0].ndim - 1,))[0]
    moved = [np.moveaxis(a, dim, -1) for a in arrays]
    simple = _simple_comparator(comp)
    if simple is not None:
        which, direction, total, canonical = simple
        key = _sort_key(moved[which], total, canonical)
        if direction == "GT":
            # descending and stable: sort the reversed order key ascending
            key = ~key  # bitwise not reverses integer order exactly (signed and unsigned)
        order = stable_argsort([key], key.shape)
    else:
        order, _ = sort_order(comp, moved, calls)
    outs = [np.moveaxis(np.take_along_axis(m, order, axis=-1), -1, dim) for m in moved]
    outs = [contiguous(o) for o in outs]
    return tuple(outs) if inst.shape.is_tuple else outs[0]


def topk_arrays(x: np.ndarray, k: int, largest: bool = True) -> tuple[np.ndarray, np.ndarray]:
    """Top ``k`` along the last dim (descending for ``largest``; ties to the lower index) and s32 indices."""
    x = np.asarray(x)
    key = _sort_key(x, total=True)
    if largest:
        key = ~key
    order = stable_argsort([key], key.shape)[..., :k]
    return np.take_along_axis(x, order, axis=-1), order.astype(np.int32)


def _topk(inst: Instruction, ops: list):
    k = attr_int(inst, "k", inst.shape.tuple_shapes[0].dimensions[-1] if inst.shape.is_tuple else 1)
    largest = attr_bool(inst, "largest", True)
    v, i = topk_arrays(ops[0], k, largest)
    return (v, i.astype(shape_dtype(inst.shape.tuple_shapes[1])))


HANDLERS: dict[str, Callable] = {"gather": _gather, "topk": _topk}
#: ``handler(inst, operands, calls)`` (the combiner / comparator runs through ``calls``, see :class:`~.common.Calls`)
CALLING_HANDLERS: dict[str, Callable] = {"scatter": _scatter, "sort": _sort}
