"""Data-movement HLO ops: broadcast, reshape, bitcast, transpose, slice, dynamic-(update-)slice, concatenate, pad,
iota, constant, reverse, copy and tuple plumbing (collectives: :mod:`.collectives`).

Semantics follow XLA's operation semantics and the HLO evaluator (``xla/hlo/evaluator/hlo_evaluator.cc``):
dynamic-slice / dynamic-update-slice start indices are clamped to ``[0, dim - size]``; ``pad`` accepts negative
edge padding (cropping) and interior padding; ``bitcast`` reinterprets the physical buffer through both layouts.
"""

from __future__ import annotations

import warnings
import zlib
from typing import Callable

import numpy as np

from fusegen.evaluator.common import (
    contiguous,
    EvaluationError,
    as_array,
    attr_int,
    attr_ints,
    is_complex,
    is_float,
    shape_dtype,
)
from fusegen.hlo import layout_util
from fusegen.hlo.ir import Instruction



class ElidedConstantWarning(UserWarning):
    """A constant printed as ``{...}`` was filled with deterministic pseudo-random values."""


def _broadcast(inst: Instruction, ops: list) -> np.ndarray:
    x = np.asarray(ops[0])
    out_dims = tuple(inst.shape.dimensions)
    if inst.attrs.get("dimensions") is None:  # old form: operand dims are the trailing output dims
        dims = tuple(range(len(out_dims) - x.ndim, len(out_dims)))
    else:
        dims = attr_ints(inst, "dimensions")
    if x.ndim != len(dims):
        raise EvaluationError(f"broadcast %{inst.name}: operand rank {x.ndim} vs dimensions={list(dims)}")
    order = sorted(range(len(dims)), key=lambda i: dims[i])
    x = np.transpose(x, order) if order != list(range(len(dims))) else x
    sdims = sorted(dims)
    shp = [1] * len(out_dims)
    for i, d in enumerate(sdims):
        shp[d] = x.shape[i]
    return np.broadcast_to(x.reshape(shp), out_dims).copy()


def _reshape(inst: Instruction, ops: list) -> np.ndarray:
    return np.asarray(ops[0]).reshape(inst.shape.dimensions).copy()


def _bitcast(inst: Instruction, ops: list) -> np.ndarray:
    from fusegen.evaluator.elementwise import BIT_WIDTH_ATTR, bitcast_convert

    if BIT_WIDTH_ATTR in inst.attrs:  # promoted by the f64 oracle: reinterpret at the program's widths
        return bitcast_convert(inst, ops)
    x = np.asarray(ops[0])
    src = inst.operands[0].shape
    # reshape: layout_util's round trip through ascontiguousarray makes scalars 1-D
    return layout_util.bitcast(x, src, inst.shape).reshape(inst.shape.dimensions)


def _transpose(inst: Instruction, ops: list) -> np.ndarray:
    return contiguous(np.transpose(np.asarray(ops[0]), attr_ints(inst, "dimensions")))


def _slice(inst: Instruction, ops: list) -> np.ndarray:
    spec = inst.attrs.get("slice")
    if isinstance(spec, str):
        import re

        spec = [tuple(int(v) for v in m.split(":")) for m in re.findall(r"\[([-\d:]+)\]", spec)]
    idx = []
    for item in spec:
        start, limit = int(item[0]), int(item[1])
        stride = int(item[2]) if len(item) > 2 else 1
        idx.append(slice(start, limit, stride))
    return contiguous(np.asarray(ops[0])[tuple(idx)])


def _start_indices(ops: list, first: int, rank: int) -> list[int]:
    """Start indices from scalar operands (or one rank-1 index operand, the old form)."""
    rest = [np.asarray(o) for o in ops[first:]]
    if len(rest) == 1 and rest[0].ndim == 1:
        return [int(v) for v in rest[0].reshape(-1)]
    return [int(r.reshape(-1)[0]) for r in rest]


def clamp_starts(starts: list[int], dims: tuple[int, ...], sizes: tuple[int, ...]) -> list[int]:
    return [min(max(s, 0), d - z) for s, d, z in zip(starts, dims, sizes)]


def _dynamic_slice(inst: Instruction, ops: list) -> np.ndarray:
    x = np.asarray(ops[0])
    sizes = attr_ints(inst, "dynamic_slice_sizes", tuple(inst.shape.dimensions))
    starts = clamp_starts(_start_indices(ops, 1, x.ndim), x.shape, sizes)
    idx = tuple(slice(s, s + z) for s, z in zip(starts, sizes))
    return contiguous(x[idx])


def _dynamic_update_slice(inst: Instruction, ops: list) -> np.ndarray:
    x = np.array(ops[0], copy=True)
    upd = np.asarray(ops[1])
    starts = clamp_starts(_start_indices(ops, 2, x.ndim), x.shape, upd.shape)
    idx = tuple(slice(s, s + z) for s, z in zip(starts, upd.shape))
    x[idx] = upd
    return x


def _concatenate(inst: Instruction, ops: list) -> np.ndarray:
    dims = attr_ints(inst, "dimensions")
    return np.concatenate([np.asarray(o) for o in ops], axis=dims[0])


def pad_array(x: np.ndarray, value, config: list[tuple[int, int, int]]) -> np.ndarray:
    """XLA ``pad``: per dim (low, high, interior); negative low/high crop. Returns a new array of ``x``'s dtype."""
    x = np.asarray(x)
    pv = np.asarray(value, dtype=x.dtype)
    # interior padding first
    exp_shape = [d + max(d - 1, 0) * it for d, (_, _, it) in zip(x.shape, config)]
    if any(it for _, _, it in config):
        e = np.full(exp_shape, pv, dtype=x.dtype)
        e[tuple(slice(None, None, it + 1) for _, _, it in config)] = x
    else:
        e = x
    out_shape = [lo + d + hi for d, (lo, hi, _) in zip(exp_shape, config)]
    if any(s < 0 for s in out_shape):
        raise EvaluationError(f"pad gives a negative dimension: {out_shape}")
    out = np.full(out_shape, pv, dtype=x.dtype)
    src, dst = [], []
    for d, (lo, hi, _) in zip(exp_shape, config):
        s0 = max(0, -lo)
        s1 = d - max(0, -hi)
        if s1 <= s0:
            return out
        d0 = max(0, lo)
        src.append(slice(s0, s1))
        dst.append(slice(d0, d0 + (s1 - s0)))
    out[tuple(dst)] = e[tuple(src)]
    return out


def _pad(inst: Instruction, ops: list) -> np.ndarray:
    cfg = inst.attrs.get("padding")
    if isinstance(cfg, str):
        cfg = parse_padding(cfg)
    cfg = [tuple(int(v) for v in c) + (0,) * (3 - len(c)) for c in cfg]
    return pad_array(ops[0], np.asarray(ops[1]).reshape(()), cfg)


def parse_padding(text: str) -> list[tuple[int, int, int]]:
    """``0_0x1_2_1`` -> [(0, 0, 0), (1, 2, 1)]."""
    out = []
    for part in text.strip().strip("{}").split("x"):
        vals = [int(v) for v in part.split("_")]
        out.append(tuple(vals + [0] * (3 - len(vals))))
    return out


def _iota(inst: Instruction, ops: list) -> np.ndarray:
    dt = shape_dtype(inst.shape)
    dims = tuple(inst.shape.dimensions)
    d = attr_int(inst, "iota_dimension", 0)
    shp = [1] * len(dims)
    shp[d] = dims[d]
    base = np.arange(dims[d], dtype=np.float64 if (is_float(dt) or is_complex(dt)) else np.int64).reshape(shp)
    return np.broadcast_to(as_array(base, dt), dims).copy()  # convert the one row, then broadcast


_CONST_CACHE: dict[int, tuple[Instruction, str | None, np.ndarray]] = {}


def elided_constant(inst: Instruction) -> np.ndarray:
    """Deterministic pseudo-random values for a constant printed as ``{...}`` (seeded from its name)."""
    dt = shape_dtype(inst.shape)
    dims = tuple(inst.shape.dimensions)
    rng = np.random.default_rng(zlib.crc32(inst.name.encode()))
    if dt == np.bool_:
        v = rng.integers(0, 2, size=dims).astype(bool)
    elif is_float(dt) or is_complex(dt):
        v = rng.uniform(-1.0, 1.0, size=dims)
    else:
        v = rng.integers(0, 8, size=dims)
    return as_array(v, dt)


def _cast_literal(val, shape):
    if shape.is_tuple:
        return tuple(_cast_literal(v, s) for v, s in zip(val, shape.tuple_shapes or ()))
    arr = np.asarray(val)
    dt = shape_dtype(shape)
    if arr.dtype != dt:
        arr = as_array(arr, dt)
    arr = arr.reshape(shape.dimensions)
    arr.setflags(write=False)
    return arr


def _constant(inst: Instruction, ops: list):
    text = inst.attrs.get("literal")
    hit = _CONST_CACHE.get(id(inst))
    if hit is not None and hit[0] is inst and hit[1] == text:
        return hit[2]
    if text is None:
        warnings.warn(
            f"constant %{inst.name} is elided ({{...}}); using pseudo-random values seeded from its name",
            ElidedConstantWarning,
            stacklevel=2,
        )
        if inst.shape.is_tuple:
            raise EvaluationError(f"constant %{inst.name}: elided tuple constants are not filled")
        val = _cast_literal(elided_constant(inst), inst.shape)
    else:
        from fusegen.hlo.literal import parse_literal

        val = _cast_literal(parse_literal(text, inst.shape), inst.shape)
    _CONST_CACHE[id(inst)] = (inst, text, val)
    return val


def _reverse(inst: Instruction, ops: list) -> np.ndarray:
    return contiguous(np.flip(np.asarray(ops[0]), axis=attr_ints(inst, "dimensions")))


def _identity(inst: Instruction, ops: list):
    return ops[0]


def _tuple(inst: Instruction, ops: list) -> tuple:
    return tuple(ops)


def _gte(inst: Instruction, ops: list):
    t = ops[0]
    if not isinstance(t, tuple):
        raise EvaluationError(f"get-tuple-element %{inst.name}: operand is not a tuple")
    return t[attr_int(inst, "index", 0)]


def _copy_start(inst: Instruction, ops: list) -> tuple:
    # (destination, source, context)
    n = len(inst.shape.tuple_shapes or ())
    ctx = tuple(np.zeros(s.dimensions, shape_dtype(s)) for s in (inst.shape.tuple_shapes or ())[2:n])
    return (np.array(ops[0], copy=True), ops[0]) + ctx


def _copy_done(inst: Instruction, ops: list):
    return ops[0][0]


def _token(inst: Instruction, ops: list) -> tuple:
    return ()


def _get_dimension_size(inst: Instruction, ops: list) -> np.ndarray:
    d = attr_ints(inst, "dimensions")[0]
    return np.asarray(np.asarray(ops[0]).shape[d], dtype=shape_dtype(inst.shape))


HANDLERS: dict[str, Callable] = {
    "broadcast": _broadcast,
    "reshape": _reshape,
    "bitcast": _bitcast,
    "transpose": _transpose,
    "slice": _slice,
    "dynamic-slice": _dynamic_slice,
    "dynamic-update-slice": _dynamic_update_slice,
    "concatenate": _concatenate,
    "pad": _pad,
    "iota": _iota,
    "constant": _constant,
    "reverse": _reverse,
    "copy": _identity,
    "optimization-barrier": _identity,
    "opt-barrier": _identity,
    "add-dependency": _identity,
    "set-dimension-size": _identity,
    "tuple": _tuple,
    "get-tuple-element": _gte,
    "copy-start": _copy_start,
    "copy-done": _copy_done,
    "after-all": _token,
    "create-token": _token,
    "get-dimension-size": _get_dimension_size,
}
