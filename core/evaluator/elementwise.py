"""Elementwise HLO ops: unary, binary, compare, select, clamp, convert, bitcast-convert, reduce-precision.

Semantics mirror XLA's elemental IR emitter (``xla/service/elemental_ir_emitter.cc``: ``EmitIntegerDivide``,
``EmitIntegerRemainder``, ``EmitIntegerPow``, ``EmitReducePrecisionIR``, ``EmitFloatToInt`` saturation) and the HLO
evaluator (``xla/hlo/evaluator/hlo_evaluator_typed_visitor.h``):

* f16/bf16/f8 operands are computed in f32 and the result is rounded to the declared type (RNE).
* integer ``divide``: ``x / 0 = -1`` (signed) or all ones (unsigned); ``INT_MIN / -1 = INT_MIN``; truncation toward 0.
* integer ``remainder``: ``x % 0 = x``; ``INT_MIN % -1 = 0``; sign of the dividend (C ``fmod``) for all types.
* ``maximum`` / ``minimum`` propagate NaN.
* integer ``power``: exponentiation by squaring with wrap-around; a negative exponent gives 1 for base 1, ±1 for
  base -1 by the exponent's parity, and 0 otherwise (XLA's current ``EmitIntegerPow``).
* shifts: an amount outside ``[0, bits)`` (read as unsigned) gives 0 for left / logical right shifts and the sign
  fill for arithmetic right shifts.
* ``convert`` float -> int saturates at the integer range and maps NaN to 0; anything -> pred is ``!= 0``.
* ``bitcast-convert`` between widths adds (narrowing) or removes (widening) a minor dimension, little-endian.

:func:`is_liftable`: whether a computation is made of scalar elementwise ops alone (``LIFTABLE``), so that it runs
once on whole arrays (*lifted*) instead of once per element.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from fusegen.evaluator.common import (
    contiguous,
    EvaluationError,
    LOW_FLOATS,
    as_array,
    attr_int,
    int_info,
    is_complex,
    is_float,
    is_int,
    is_signed,
    shape_dtype,
    total_order_key,
    up,
)
from fusegen.hlo.dtypes import numpy_dtype
from fusegen.hlo.ir import Computation, Instruction

try:  # scipy is optional: erf falls back to math.erf elementwise
    from scipy.special import erf as _scipy_erf
except Exception:  # pragma: no cover - depends on the environment
    _scipy_erf = None


def _erf(x: np.ndarray) -> np.ndarray:
    if _scipy_erf is not None:
        return _scipy_erf(x)
    f = np.frompyfunc(math.erf, 1, 1)
    return f(x.astype(np.float64)).astype(x.dtype)


def _round_afz(x: np.ndarray) -> np.ndarray:
    t = np.trunc(x)
    frac = np.abs(x - t)
    return np.where(frac >= 0.5, t + np.sign(x), t)


def _sign(x: np.ndarray) -> np.ndarray:
    if is_complex(x.dtype):
        a = np.abs(x)
        return np.where(a == 0, 0, x / np.where(a == 0, 1, a))
    if is_float(x.dtype):
        return np.where((x == 0) | np.isnan(x), x, np.sign(x))
    return np.sign(x)


def _unsigned_view(x: np.ndarray) -> np.ndarray:
    x = contiguous(x)
    return x.view({1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[x.dtype.itemsize])


def _popcnt(x: np.ndarray) -> np.ndarray:
    return np.bitwise_count(_unsigned_view(x)).astype(x.dtype)


def _clz(x: np.ndarray) -> np.ndarray:
    u = _unsigned_view(x).astype(np.uint64)
    bits = x.dtype.itemsize * 8
    n = np.zeros(u.shape, dtype=np.int64)
    # binary search for the bit length
    for s in (32, 16, 8, 4, 2, 1):
        hi = u >> np.uint64(s)
        big = hi != 0
        n = np.where(big, n + s, n)
        u = np.where(big, hi, u)
    length = n + (u != 0)
    return (bits - length).astype(x.dtype)


_UNARY_FLOAT: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "exponential": np.exp,
    "exponential-minus-one": np.expm1,
    "log": np.log,
    "log-plus-one": np.log1p,
    "logistic": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "sqrt": np.sqrt,
    "rsqrt": lambda x: 1.0 / np.sqrt(x),
    "cbrt": np.cbrt,
    "sine": np.sin,
    "cosine": np.cos,
    "tan": np.tan,
    "tanh": np.tanh,
    "erf": _erf,
    "acos": np.arccos,
    "acosh": np.arccosh,
    "asin": np.arcsin,
    "asinh": np.arcsinh,
    "atanh": np.arctanh,
    "cosh": np.cosh,
    "sinh": np.sinh,
    "floor": np.floor,
    "ceil": np.ceil,
    "round-nearest-afz": _round_afz,
    "round-nearest-even": np.rint,
    "is-finite": np.isfinite,
}


def _unary(inst: Instruction, ops: list) -> np.ndarray:
    op = inst.opcode
    out = shape_dtype(inst.shape)
    x = up(ops[0])
    if op in _UNARY_FLOAT:
        if op == "cbrt" and is_complex(x.dtype):
            r = np.power(x, 1.0 / 3.0)
        else:
            r = _UNARY_FLOAT[op](x)
    elif op == "negate":
        r = np.negative(x)
    elif op == "abs":
        r = np.abs(x)
        if is_complex(x.dtype):
            # XLA's EmitComplexAbs: max * sqrt(1 + (min/max)^2) with a NaN-propagating max, falling back to
            # min + max: a NaN part gives NaN even beside an infinite one (hypot would give inf)
            r = np.where(np.isnan(x.real) | np.isnan(x.imag), np.array(np.nan, r.dtype), r)
    elif op == "sign":
        r = _sign(x)
    elif op == "not":
        r = np.logical_not(x) if x.dtype == np.bool_ else np.invert(x)
    elif op == "popcnt":
        r = _popcnt(x)
    elif op in ("clz", "count-leading-zeros"):
        r = _clz(x)
    elif op == "real":
        r = np.real(x)
    elif op == "imag":
        r = np.imag(x) if is_complex(x.dtype) else np.zeros_like(x)
    elif op == "copy":
        r = x
    else:  # pragma: no cover - table and dispatch agree
        raise EvaluationError(f"no elementwise rule for {op}")
    return as_array(r, out)


# ----------------------------------------------------------------------------------------------- binary


def _int_divide(a: np.ndarray, b: np.ndarray, rem: bool) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    zero = b == 0
    if is_signed(a.dtype):
        info = int_info(a.dtype)
        overflow = (a == info.min) & (b == -1)
        bad = zero | overflow
    else:
        overflow = np.zeros(a.shape, dtype=bool)
        bad = zero
    bs = np.where(bad, np.ones((), a.dtype), b)
    if rem:
        r = np.fmod(a, bs)  # sign of the dividend, like C
        r = np.where(zero, a, r)
        return np.where(overflow, np.zeros((), a.dtype), r)
    q = np.floor_divide(a, bs)
    # floor -> truncation toward zero
    fix = (np.fmod(a, bs) != 0) & ((a < 0) != (bs < 0))
    q = q + fix.astype(q.dtype)
    q = np.where(zero, np.array(-1).astype(a.dtype) if is_signed(a.dtype) else np.array(int_info(a.dtype).max, a.dtype), q)
    return q  # INT_MIN / -1 divided by 1 above gives INT_MIN already


def _int_pow(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    dt = a.dtype
    neg = (b < 0) if is_signed(dt) else np.zeros(a.shape, bool)
    e = np.where(neg, 0, b).astype(np.uint64)
    acc = np.ones(a.shape, dtype=dt)
    base = a.copy()
    for _ in range(dt.itemsize * 8):
        odd = (e & np.uint64(1)) != 0
        acc = np.where(odd, acc * base, acc)
        base = base * base
        e = e >> np.uint64(1)
    # negative exponent: 1 / base**|e| truncated toward zero, i.e. nonzero only for base +-1
    odd_e = (b & 1) != 0
    neg_val = np.where(a == 1, 1, np.where(a == -1, np.where(odd_e, -1, 1), 0)).astype(dt)
    return np.where(neg, neg_val, acc)


def _mulhi(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """High half of the double-width product (``mulhi``), wrapping to ``a``'s dtype."""
    a, b = np.broadcast_arrays(a, b)
    bits = a.dtype.itemsize * 8
    if bits <= 32:
        wide = np.int64 if is_signed(a.dtype) else np.uint64
        return (a.astype(wide) * b.astype(wide) >> wide(bits)).astype(a.dtype)
    prod = [(int(x) * int(y)) >> bits for x, y in zip(a.reshape(-1).tolist(), b.reshape(-1).tolist())]
    mask = (1 << bits) - 1
    return np.array([v & mask for v in prod], dtype=np.uint64).view(a.dtype).reshape(a.shape)


def _shift(op: str, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    dt = a.dtype
    bits = dt.itemsize * 8
    ub = _unsigned_view(contiguous(b)).astype(np.uint64)
    oob = ub >= np.uint64(bits)
    amt = np.where(oob, 0, ub).astype(dt)
    if op == "shift-left":
        r = np.left_shift(a, amt)
        return np.where(oob, np.zeros((), dt), r)
    if op == "shift-right-logical":
        ua = _unsigned_view(contiguous(a))
        r = np.right_shift(ua, amt.astype(ua.dtype)).view(dt)
        return np.where(oob, np.zeros((), dt), r)
    # arithmetic: shift the signed view
    sdt = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[dt.itemsize]
    sa = contiguous(a).view(sdt)
    r = np.right_shift(sa, amt.astype(sdt))
    fill = np.where(sa < 0, np.array(-1, sdt), np.array(0, sdt))
    return np.where(oob, fill, r).astype(sdt).view(dt)


def _binary(inst: Instruction, ops: list) -> np.ndarray:
    op = inst.opcode
    out = shape_dtype(inst.shape)
    a, b = up(ops[0]), up(ops[1])
    ints = is_int(a.dtype)
    if op == "add":
        r = np.logical_or(a, b) if a.dtype == np.bool_ else a + b
    elif op == "subtract":
        r = a - b
    elif op == "multiply":
        r = np.logical_and(a, b) if a.dtype == np.bool_ else a * b
    elif op == "divide":
        r = _int_divide(a, b, rem=False) if ints else a / b
    elif op == "remainder":
        r = _int_divide(a, b, rem=True) if ints else np.fmod(a, b)
    elif op == "maximum":
        r = np.maximum(a, b)
    elif op == "minimum":
        r = np.minimum(a, b)
    elif op == "power":
        r = _int_pow(a, b) if ints else np.power(a, b)
    elif op == "atan2":
        r = np.arctan2(a, b)
    elif op == "and":
        r = np.logical_and(a, b) if a.dtype == np.bool_ else np.bitwise_and(a, b)
    elif op == "or":
        r = np.logical_or(a, b) if a.dtype == np.bool_ else np.bitwise_or(a, b)
    elif op == "xor":
        r = np.logical_xor(a, b) if a.dtype == np.bool_ else np.bitwise_xor(a, b)
    elif op in ("shift-left", "shift-right-logical", "shift-right-arithmetic"):
        r = _shift(op, a, b)
    elif op == "complex":
        # parts set one by one: re + 1j*im would make the real part NaN where im is infinite (0 * inf)
        r = np.empty(np.broadcast_shapes(a.shape, b.shape), out)
        r.real, r.imag = a, b
    elif op == "mulhi":
        r = _mulhi(a, b)
    else:  # pragma: no cover
        raise EvaluationError(f"no elementwise rule for {op}")
    return as_array(r, out)


def _compare(inst: Instruction, ops: list) -> np.ndarray:
    a, b = up(ops[0]), up(ops[1])
    direction = str(inst.attrs.get("direction", "")).strip()
    ctype = str(inst.attrs.get("type", "")).strip().upper()
    if ctype == "TOTALORDER" and is_float(a.dtype):
        a, b = total_order_key(a), total_order_key(b)
    fn = {"EQ": np.equal, "NE": np.not_equal, "LT": np.less, "LE": np.less_equal,
          "GT": np.greater, "GE": np.greater_equal}.get(direction)
    if fn is None:
        raise EvaluationError(f"compare %{inst.name}: unknown direction {direction!r}")
    return np.asarray(fn(a, b), dtype=np.bool_)


def _select(inst: Instruction, ops: list) -> np.ndarray:
    out = shape_dtype(inst.shape)
    return as_array(np.where(np.asarray(ops[0], bool), ops[1], ops[2]), out)


def _clamp(inst: Instruction, ops: list) -> np.ndarray:
    out = shape_dtype(inst.shape)
    lo, x, hi = up(ops[0]), up(ops[1]), up(ops[2])
    return as_array(np.minimum(np.maximum(x, lo), hi), out)


# ---------------------------------------------------------------------------------------------- convert


def convert_array(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    """XLA ``convert`` of ``x`` to ``dt``: RNE for floats, saturating float->int with NaN -> 0, ``!= 0`` to pred.

    Mirrors ``xla/service/elemental_ir_emitter.cc`` (``EmitFloatToInt`` / convert lowering).
    """
    x = np.asarray(x)
    src = x.dtype
    if src == dt:
        return x.copy()
    if dt == np.bool_:
        return np.asarray(x != 0)
    if is_int(dt):
        if is_float(src) or is_complex(src):
            xf = np.real(x).astype(np.float64)
            nan = np.isnan(xf)
            xf = np.trunc(np.where(nan, 0.0, xf))
            info = int_info(dt)
            lo_sat = xf <= float(info.min)
            hi_sat = xf >= float(info.max)
            safe = np.where(lo_sat | hi_sat, 0.0, xf).astype(np.int64 if is_signed(dt) else np.uint64)
            r = safe.astype(dt)
            r = np.where(hi_sat, np.array(info.max).astype(dt), r)
            r = np.where(lo_sat, np.array(info.min).astype(dt), r)
            return np.asarray(r, dtype=dt)
        if src == np.bool_:
            return x.astype(dt)
        # int -> int wraps; through int64 (uint64 for u64) since ml_dtypes has no s4 <-> u4 or s2 <-> u4 cast
        wide = np.uint64 if src == np.uint64 else np.int64
        return x.astype(wide).astype(dt)
    if is_float(dt):
        if is_complex(src):
            x = np.real(x)
        if src == np.bool_ or is_int(src):
            x = x.astype(np.float64)
        elif (src in LOW_FLOATS or dt in LOW_FLOATS) and not _direct_cast(src, dt):
            # ml_dtypes casts f8e8m0fnu to and from the other narrow floats only through f32, where every
            # narrow-float value is exact: one rounding, the target's (XLA's convert rules per type)
            x = x.astype(np.float32)
        return x.astype(dt)
    if is_complex(dt):
        if src == np.bool_:
            x = x.astype(np.float32)
        return up(x).astype(dt)
    raise EvaluationError(f"cannot convert {src} to {dt}")


def _direct_cast(src: np.dtype, dt: np.dtype) -> bool:
    """Whether numpy / ml_dtypes can cast ``src`` to ``dt`` directly (no cast between f8e8m0fnu and the other
    narrow floats, nor between sub-byte integer types of different signedness)."""
    try:
        np.zeros(1, src).astype(dt)
    except (TypeError, ValueError):
        return False
    return True


def _convert(inst: Instruction, ops: list) -> np.ndarray:
    return convert_array(ops[0], shape_dtype(inst.shape))


def _reinterpret(x: np.ndarray, dt: np.dtype, dims: tuple[int, ...]) -> np.ndarray:
    if x.dtype.itemsize == dt.itemsize:  # the operand's shape (a lifted scalar computation passes whole arrays)
        return x.view(dt)
    if x.dtype.itemsize > dt.itemsize:  # narrowing: a new minor dim
        return x.reshape(x.shape + (1,)).view(dt).reshape(dims)
    return x.view(dt).reshape(dims)  # widening: the minor dim folds into one element


#: Attribute the f64 oracle (:func:`fusegen.evaluator.promote.keep_bit_width`) sets on a promoted float
#: ``bitcast-convert`` / element-type-changing ``bitcast``: its (operand, result) types before promotion.
BIT_WIDTH_ATTR = "_fusegen_bit_width_types"


def bitcast_convert(inst: Instruction, ops: list) -> np.ndarray:
    """``bitcast-convert`` (and a ``bitcast`` that changes the element type): the operand's bits as the
    result type, at the widths of :data:`BIT_WIDTH_ATTR` where the f64 oracle promoted it."""
    x = contiguous(ops[0])
    dt = shape_dtype(inst.shape)
    dims = tuple(inst.shape.dimensions)
    widths = inst.attrs.get(BIT_WIDTH_ATTR)  # set by the f64 oracle (fusegen.evaluator.promote)
    if widths is not None:
        # promoted: reinterpret the bits at the program's widths, then widen the result
        src, dst = numpy_dtype(widths[0]), numpy_dtype(widths[1])
        return convert_array(_reinterpret(contiguous(convert_array(x, src)), dst, dims), dt)
    return _reinterpret(x, dt, dims)


def reduce_precision_array(x: np.ndarray, exponent_bits: int, mantissa_bits: int) -> np.ndarray:
    """Round ``x`` to a float with the given exponent / mantissa widths (RNE), flushing values below that format's
    smallest normal to signed zero and overflow to signed infinity; NaN stays NaN.

    Mirrors ``EmitReducePrecisionIR`` in ``xla/service/elemental_ir_emitter.cc``. Returns ``x``'s dtype.
    """
    x = np.asarray(x)
    out_dt = x.dtype
    cx = up(x)
    if cx.dtype == np.float64:
        it, src_m, src_e, nbits = np.uint64, 52, 11, 64
    else:
        cx = cx.astype(np.float32)
        it, src_m, src_e, nbits = np.uint32, 23, 8, 32
    v = contiguous(cx).view(it).copy()
    one = it(1)
    if mantissa_bits < src_m:
        sh = it(src_m - mantissa_bits)
        last_bit_mask = one << sh
        base_bias = (last_bit_mask >> one) - one
        last_bit = (v & last_bit_mask) >> sh
        v = (v + last_bit + base_bias) & ~(last_bit_mask - one)
    if exponent_bits < src_e:
        sign_mask = one << it(nbits - 1)
        exp_mask = ((one << it(src_e)) - one) << it(src_m)
        bias = (1 << (src_e - 1)) - 1
        red_max = bias + (1 << (exponent_bits - 1)) - 1
        red_min = bias - (1 << (exponent_bits - 1)) + 2
        e = v & exp_mask
        over = e > (it(red_max) << it(src_m))
        under = e < (it(red_min) << it(src_m))
        signed_zero = v & sign_mask
        signed_inf = signed_zero | exp_mask
        v = np.where(over, signed_inf, np.where(under, signed_zero, v))
    r = contiguous(v).view(cx.dtype)
    r = np.where(np.isnan(cx), cx, r)
    return as_array(r, out_dt)


def _reduce_precision(inst: Instruction, ops: list) -> np.ndarray:
    eb = attr_int(inst, "exponent_bits", 8)
    mb = attr_int(inst, "mantissa_bits", 23)
    return as_array(reduce_precision_array(ops[0], eb, mb), shape_dtype(inst.shape))


UNARY_OPS = (
    tuple(_UNARY_FLOAT) + ("negate", "abs", "sign", "not", "popcnt", "clz", "count-leading-zeros", "real", "imag")
)
BINARY_OPS = (
    "add", "subtract", "multiply", "divide", "remainder", "maximum", "minimum", "power", "atan2", "and", "or",
    "xor", "shift-left", "shift-right-logical", "shift-right-arithmetic", "complex", "mulhi",
)

HANDLERS: dict[str, Callable] = {}
HANDLERS.update({op: _unary for op in UNARY_OPS})
HANDLERS.update({op: _binary for op in BINARY_OPS})
HANDLERS.update({
    "compare": _compare,
    "select": _select,
    "clamp": _clamp,
    "convert": _convert,
    "bitcast-convert": bitcast_convert,
    "reduce-precision": _reduce_precision,
})

#: Opcodes that act elementwise on same-shaped operands (a computation made of these may run lifted).
ELEMENTWISE_OPCODES = frozenset(HANDLERS) | {"copy"}

#: Opcodes that are the identity on a scalar (allowed inside a lifted computation).
SCALAR_IDENTITY = frozenset({"broadcast", "reshape", "bitcast", "copy", "optimization-barrier", "opt-barrier"})
#: Opcodes a lifted computation may hold (with calls / fusions of liftable computations).
LIFTABLE = ELEMENTWISE_OPCODES | {"parameter", "constant", "tuple", "get-tuple-element"} | SCALAR_IDENTITY
_LIFT_CACHE: dict[int, tuple[Computation, bool]] = {}


def is_liftable(comp: Computation) -> bool:
    """Whether every instruction of ``comp`` is a scalar elementwise op (so it can run on whole arrays)."""
    hit = _LIFT_CACHE.get(id(comp))
    if hit is not None and hit[0] is comp:
        return hit[1]
    ok = True
    for inst in comp.instructions:
        shapes = inst.shape.leaves() if inst.shape.is_tuple else [inst.shape]
        if any(s.rank != 0 for s in shapes):
            ok = False
        elif inst.opcode in ("call", "fusion"):
            callee = inst.attrs.get("to_apply") or inst.attrs.get("calls")
            ok = isinstance(callee, Computation) and is_liftable(callee)
        elif inst.opcode not in LIFTABLE:
            ok = False
        elif inst.opcode in ("bitcast-convert", "bitcast"):
            ok = inst.opcode == "bitcast" and BIT_WIDTH_ATTR in inst.attrs  # widths kept, equal
            ok = ok or inst.operands[0].shape.element_type == inst.shape.element_type or (
                np.dtype(shape_dtype(inst.operands[0].shape)).itemsize == np.dtype(shape_dtype(inst.shape)).itemsize)
        if not ok:
            break
    _LIFT_CACHE[id(comp)] = (comp, ok)
    return ok
