"""``reduce`` and ``reduce-window``.

Semantics: XLA operation semantics; the combiner's parameters are ``(accumulators..., inputs...)``.

* A single-input reduce whose ``to_apply`` is one of add / multiply / maximum / minimum / and / or / xor of its two
  parameters runs as one numpy reduction. f16/bf16 sums and products accumulate in f32 and round once at the end
  (XLA's reduction order is unspecified, so no reference can match GPU bits there; this is the most accurate one).
  Float sums are computed pairwise over contiguous rows (:func:`accurate_sum`): numpy would otherwise
  accumulate row after row along a non-minor axis, less accurately than any GPU reduction tree.
* Any other combiner (variadic reduces such as argmax included) folds the reduced elements in XLA's order
  (``HloEvaluator::HandleReduce``: ``acc = init``, then ``acc = f(acc, x)`` over the reduced index space in
  row-major order), evaluating the combiner on all output elements at once when it is elementwise, else one
  element at a time. Above ``SEQUENTIAL_LIMIT`` reduced elements an elementwise combiner folds as a pairwise
  tree instead (XLA requires combiners to be associative, so only rounding can differ).
* ``reduce-window`` pads with the init value (base dilation as interior padding), then folds every window
  position in row-major order (``HloEvaluator::HandleReduceWindow``).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import (
    Calls,
    as_array,
    attr_ints,
    computation_attr,
    shape_dtype,
    up,
)
from fusegen.evaluator.elementwise import LIFTABLE, is_liftable
from fusegen.hlo.ir import Computation, Instruction
from fusegen.hlo.window import parse_window


def is_liftable_opcode(inst: Instruction) -> bool:
    """Whether one instruction may run on whole arrays inside a lifted computation."""
    return inst.opcode in LIFTABLE

_SIMPLE = {"add", "multiply", "maximum", "minimum", "and", "or", "xor"}


def simple_combiner(comp: Computation) -> str | None:
    """The opcode of a combiner that is ``op(param0, param1)`` on scalars (either order), else ``None``."""
    root = comp.root
    if root is None or root.opcode not in _SIMPLE or len(root.operands) != 2:
        return None
    params = comp.parameters
    if len(params) != 2 or any(p.shape.rank for p in params):
        return None
    if {id(o) for o in root.operands} != {id(p) for p in params}:
        return None
    if root.shape.element_type != params[0].shape.element_type:
        return None
    return root.opcode


def _ufunc(op: str, dt: np.dtype):
    if dt == np.bool_:
        return {"add": np.logical_or, "multiply": np.logical_and, "maximum": np.logical_or,
                "minimum": np.logical_and, "and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}[op]
    return {"add": np.add, "multiply": np.multiply, "maximum": np.maximum, "minimum": np.minimum,
            "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor}[op]


def apply_combiner(comp: Computation, accs: list[np.ndarray], xs: list[np.ndarray], calls: Calls) -> list[np.ndarray]:
    """``comp(accs..., xs...)`` elementwise over equally shaped arrays; returns the list of results (arrays of
    the broadcast shape and the accumulators' dtypes, never views of the arguments). A combiner that is not
    liftable (control flow inside) runs once per element (:func:`per_element_reason` says why)."""
    args = list(accs) + list(xs)
    shp = np.broadcast_shapes(*(np.shape(a) for a in args))
    if is_liftable(comp):
        r = calls.call_lifted(comp, args)
        r = list(r) if isinstance(r, tuple) else [r]
        out = []
        for v, a in zip(r, accs):
            v = as_array(v, a.dtype)
            if v.shape != shp:
                v = np.broadcast_to(v, shp).copy()
            elif any(np.may_share_memory(v, x) for x in args):
                v = v.copy()  # a combiner returning a parameter must not alias the caller's arrays
            out.append(v)
        return out
    bargs = [np.broadcast_to(a, shp) for a in args]
    outs = [np.empty(shp, dtype=a.dtype) for a in accs]
    for idx in np.ndindex(*shp):
        r = calls.call(comp, [np.asarray(b[idx]) for b in bargs])
        r = r if isinstance(r, tuple) else (r,)
        for o, v in zip(outs, r):
            o[idx] = v
    return outs


def per_element_reason(comp: Computation) -> str | None:
    """Why ``comp`` (a combiner, comparator, map or update body) runs once per element, or ``None`` when it
    runs on whole arrays: the first instruction that is not a scalar elementwise op (``--profile`` says it)."""
    if is_liftable(comp):
        return None
    for inst in comp.instructions:
        shapes = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]
        if any(s.rank != 0 for s in shapes):
            return f"%{inst.name} ({inst.opcode}) in %{comp.name} is not scalar"
        callee = inst.attrs.get("to_apply") or inst.attrs.get("calls")
        if inst.opcode in ("call", "fusion") and isinstance(callee, Computation):
            inner = per_element_reason(callee)
            if inner is not None:
                return inner
        elif not is_liftable_opcode(inst):
            return f"%{inst.name} ({inst.opcode}) in %{comp.name} is not elementwise"
    return f"%{comp.name} is not elementwise"


def tree_fold(comp: Computation, xs: list[np.ndarray], axis_len: int, calls: Calls) -> list[np.ndarray]:
    """Fold the last axis of each of ``xs`` with ``comp`` pairwise; returns arrays without that axis."""
    cur = list(xs)
    while axis_len > 1:
        half = axis_len // 2
        lhs = [c[..., 0 : 2 * half : 2] for c in cur]
        rhs = [c[..., 1 : 2 * half : 2] for c in cur]
        merged = apply_combiner(comp, lhs, rhs, calls)
        if axis_len % 2:
            merged = [np.concatenate([m, c[..., -1:]], axis=-1) for m, c in zip(merged, cur)]
        cur = merged
        axis_len = cur[0].shape[-1]
    return [c[..., 0] for c in cur]


SEQUENTIAL_LIMIT = 16384


def sequential_fold(comp: Computation, accs: list[np.ndarray], xs: list[np.ndarray], axis_len: int,
                    calls: Calls) -> list[np.ndarray]:
    """``acc = comp(acc, x[..., k])`` for k in order (XLA's reduce order); ``xs`` carry the fold axis last.

    Blocks of the fold axis are moved first and made contiguous (a block transposes with far fewer cache
    misses than the whole array), so every step reads a contiguous slice rather than a strided column."""
    if axis_len > 1 and xs and xs[0].ndim > 1:
        block = 64
        for k0 in range(0, axis_len, block):
            blk = [np.ascontiguousarray(np.moveaxis(x[..., k0:k0 + block], -1, 0)) for x in xs]
            for k in range(blk[0].shape[0]):
                accs = apply_combiner(comp, accs, [b[k] for b in blk], calls)
        return accs
    for k in range(axis_len):
        accs = apply_combiner(comp, accs, [x[..., k] for x in xs], calls)
    return accs


def accurate_sum(x: np.ndarray, rdims: tuple[int, ...], init: np.ndarray) -> np.ndarray:
    """``init + sum(x over rdims)`` for float ``x`` (f32 or f64), summed pairwise in ``x``'s dtype.

    numpy sums pairwise only along a contiguous innermost axis; over any other axis it adds row after
    row, which for long f32 sums drifts far more than a GPU's tree reduction (gpu_colsum: 1.3e-4 off the
    exact sum). The reduced dims are therefore moved last and made contiguous before summing. The sum
    stays in f32 for f32 input and for f16/bf16 input widened to f32 (bug B19's documented rule): below
    eight elements numpy's pairwise sum is the sequential one, so short sums (split-K partials) equal
    XLA's in-order fold bit for bit. The caller rounds once to the result type.
    """
    keep = [d for d in range(x.ndim) if d not in rdims]
    k = 1
    for d in rdims:
        k *= x.shape[d]
    moved = np.moveaxis(x, list(rdims), list(range(x.ndim - len(rdims), x.ndim)))
    flat = np.ascontiguousarray(moved).reshape(tuple(x.shape[d] for d in keep) + (k,))
    total = np.add.reduce(flat, axis=-1, dtype=x.dtype)
    return np.add(total, np.asarray(init, dtype=x.dtype))


def _reduce(inst: Instruction, ops: list, calls: Calls):
    comp = computation_attr(inst, "to_apply")
    n = len(ops) // 2
    xs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o) for o in ops[n:]]
    rdims = tuple(sorted(attr_ints(inst, "dimensions")))
    keep = [d for d in range(xs[0].ndim) if d not in rdims]
    out_shapes = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]
    out_dts = [shape_dtype(s) for s in out_shapes]
    out_dims = tuple(xs[0].shape[d] for d in keep)
    k = int(np.prod([xs[0].shape[d] for d in rdims], dtype=np.int64)) if rdims else 1

    results: list[np.ndarray]
    op = simple_combiner(comp) if n == 1 else None
    if k == 0:
        results = [np.broadcast_to(as_array(i, dt), out_dims).copy() for i, dt in zip(inits, out_dts)]
    elif op is not None:
        x = up(xs[0])
        init = up(inits[0])
        f = _ufunc(op, x.dtype)
        if op == "add" and x.dtype in (np.float32, np.float64):
            results = [as_array(accurate_sum(x, rdims, init), out_dts[0])]
        else:
            if op == "multiply" and x.dtype == np.float32 and xs[0].dtype != np.float32:
                r = f.reduce(x, axis=rdims, dtype=np.float32)
            else:
                r = f.reduce(x, axis=rdims)
            results = [as_array(f(r, init), out_dts[0])]
    else:
        moved = [np.moveaxis(x, rdims, tuple(range(x.ndim - len(rdims), x.ndim))).reshape(out_dims + (k,))
                 for x in xs]
        accs = [np.broadcast_to(as_array(i, x.dtype), out_dims) for i, x in zip(inits, xs)]
        if k > SEQUENTIAL_LIMIT and is_liftable(comp):
            results = apply_combiner(comp, accs, tree_fold(comp, moved, k, calls), calls)
        else:
            results = sequential_fold(comp, accs, moved, k, calls)
        results = [as_array(r, dt).reshape(out_dims) for r, dt in zip(results, out_dts)]
    return tuple(results) if inst.shape.is_tuple else results[0]


def _reduce_window(inst: Instruction, ops: list, calls: Calls):
    from fusegen.evaluator.shape_ops import pad_array

    comp = computation_attr(inst, "to_apply")
    n = len(ops) // 2
    xs = [np.asarray(o) for o in ops[:n]]
    inits = [np.asarray(o).reshape(()) for o in ops[n:]]
    rank = xs[0].ndim
    w = parse_window(inst, rank)
    padded = [pad_array(x, i, [(lo, hi, bd - 1) for (lo, hi), bd in zip(w["pad"], w["lhs_dilate"])])
              for x, i in zip(xs, inits)]
    pshape = padded[0].shape
    out_dims = []
    for d in range(rank):
        span = (w["size"][d] - 1) * w["rhs_dilate"][d] + 1
        out_dims.append(max(0, (pshape[d] - span) // w["stride"][d] + 1) if pshape[d] >= span else 0)
    out_dims = tuple(out_dims)
    op = simple_combiner(comp) if n == 1 else None
    if op is not None:
        x = up(padded[0])
        acc = np.broadcast_to(up(inits[0]), out_dims)
        f = _ufunc(op, x.dtype)
    else:
        acc_list = [np.broadcast_to(as_array(i, x.dtype), out_dims) for i, x in zip(inits, xs)]
    for pos in np.ndindex(*w["size"]):
        idx = tuple(
            slice(p * rd, p * rd + (o - 1) * s + 1, s) if o > 0 else slice(0, 0)
            for p, rd, s, o in zip(pos, w["rhs_dilate"], w["stride"], out_dims)
        )
        if op is not None:
            acc = f(acc, x[idx])
        else:
            acc_list = apply_combiner(comp, acc_list, [p[idx] for p in padded], calls)
    out_shapes = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]
    if op is not None:
        return as_array(acc, shape_dtype(out_shapes[0])).reshape(out_dims)
    res = [as_array(a, shape_dtype(s)).reshape(out_dims) for a, s in zip(acc_list, out_shapes)]
    return tuple(res) if inst.shape.is_tuple else res[0]


#: ``handler(inst, operands, calls)`` (the combiner runs through ``calls``, see :class:`~.common.Calls`)
CALLING_HANDLERS: dict[str, Callable] = {"reduce": _reduce, "reduce-window": _reduce_window}
