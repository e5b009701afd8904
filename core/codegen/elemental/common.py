"""Shared tables and helpers of the elemental generator: element-type predicates, complex pairs,
constant literals, index dtype choice."""

from __future__ import annotations

import sys
from typing import Any, Sequence

import numpy as np

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Shape


Index = tuple  # of int | str (a variable holding an index tensor)

#: Opcodes XLA treats as elementwise (``HloInstruction::IsElementwise``) that fusegen emits.
ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "copy", "cosine",
    "count-leading-zeros", "divide", "erf", "exponential", "exponential-minus-one", "floor", "is-finite",
    "log", "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt",
    "power", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt", "subtract",
    "tan", "tanh", "xor", "bitcast-convert", "acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh",
    "atan", "map",
})

_LOW_FLOATS = ("f16", "bf16", "f8e4m3fn", "f8e5m2")

_LIBDEVICE_UNARY = {
    "exponential": "exp", "log": "log", "log-plus-one": "log1p", "exponential-minus-one": "expm1",
    "sqrt": "sqrt", "rsqrt": "rsqrt", "cbrt": "cbrt", "tanh": "tanh", "sine": "sin", "cosine": "cos",
    "tan": "tan", "erf": "erf", "floor": "floor", "ceil": "ceil", "round-nearest-afz": "round",
    "round-nearest-even": "rint", "acos": "acos", "asin": "asin", "atan": "atan", "acosh": "acosh",
    "asinh": "asinh", "atanh": "atanh", "cosh": "cosh", "sinh": "sinh",
}

_CMP = {"EQ": "==", "NE": "!=", "LT": "<", "LE": "<=", "GT": ">", "GE": ">="}


def int_list(v: Any) -> tuple[int, ...]:
    """An attribute that is a tuple of ints, or raw text like ``{1,2}`` (parser keeps unknown keys raw)."""
    if v is None:
        return ()
    if isinstance(v, (list, tuple)):
        return tuple(int(x) for x in v)
    if isinstance(v, int):
        return (v,)
    s = str(v).strip().strip("{}").strip()
    return tuple(int(x) for x in s.split(",") if x.strip()) if s else ()


def is_float(et: str) -> bool:
    return dtypes.is_floating(et)


def _int_range(et: str) -> tuple[int, int]:
    bits = dtypes.bit_width(et)
    if dtypes.is_unsigned_int(et):
        return 0, (1 << bits) - 1
    return -(1 << (bits - 1)), (1 << (bits - 1)) - 1


#: Complex element types and the float type of their parts.
COMPLEX_PARTS = {"c64": "f32", "c128": "f64"}
#: Opcodes that accept complex operands / results (besides the complex arithmetic of ``_complex_op``).
_COMPLEX_OK = frozenset({
    "parameter", "constant", "broadcast", "reshape", "copy", "transpose", "slice", "reverse", "pad",
    "concatenate", "dynamic-slice", "dynamic-update-slice", "gather", "tuple", "get-tuple-element", "select",
    "compare", "convert", "bitcast",
})


class Cx(tuple):
    """A complex value: the pair ``(re, im)`` of variables of the part type (``c64`` -> f32 parts).

    Buffers of complex type are stored as interleaved parts (numpy's layout), read and written by the
    part type at offsets ``2 * off`` and ``2 * off + 1``.
    """

    __slots__ = ()

    @property
    def re(self) -> str:
        return self[0]

    @property
    def im(self) -> str:
        return self[1]


#: Opcodes that may produce or read a float type Triton lacks (held as its storage byte): data movement and
#: select move the bits, ``convert`` and ``compare`` decode / encode them
#: (:mod:`fusegen.codegen.elemental.narrow_float`), a constant is its byte.
_BIT_FLOAT_OK = frozenset({
    "parameter", "convert", "bitcast", "reshape", "broadcast", "copy", "transpose", "slice", "reverse",
    "concatenate", "tuple", "get-tuple-element", "dynamic-slice", "dynamic-update-slice", "gather", "constant",
    "compare", "select", "pad",
})


def _check_type(inst: Instruction, shape: Shape | None = None) -> None:
    shape = shape or inst.shape
    if inst.opcode not in _BIT_FLOAT_OK:
        for leaf in list(shape.leaves()) + [s for o in inst.operands for s in o.shape.leaves()]:
            if leaf.element_type in ts.BIT_FLOAT_TYPES:
                raise EmitterUnsupported(inst.opcode, inst.name, f"{inst.opcode} on {leaf.element_type} (its "
                                         "kernels only move and convert the bits)")
    for leaf in shape.leaves():
        et = leaf.element_type
        if et in COMPLEX_PARTS:
            continue
        try:
            ts.tl_dtype(et)
        except dtypes.UnsupportedTypeError:
            raise EmitterUnsupported(inst.opcode, inst.name, f"element type {et} has no Triton type") from None
        if leaf.dynamic and any(leaf.dynamic):
            raise EmitterUnsupported(inst.opcode, inst.name, "dynamic shapes are not supported")


def parse_constant(inst: Instruction) -> np.ndarray:
    """The logical value of a ``constant`` instruction.

    Raises:
        EmitterUnsupported: the literal is elided (``{...}``) or cannot be parsed.
    """
    text = inst.attrs.get("literal")
    if text is None:
        raise EmitterUnsupported("constant", inst.name, "literal is elided ({...})")
    try:
        from fusegen.hlo.literal import parse_literal

        val = parse_literal(text, inst.shape)
    except ImportError:
        val = _parse_scalar_literal(str(text), inst.shape)
    except Exception as e:  # a literal the parser rejects: decline, the host backend reports it
        raise EmitterUnsupported("constant", inst.name, f"cannot parse literal: {e}") from None
    return np.asarray(val).reshape(inst.shape.dimensions)


def _parse_scalar_literal(text: str, shape: Shape) -> np.ndarray:
    t = text.strip().strip("{}").strip()
    et = shape.element_type
    if shape.numel != 1 or "," in t:
        raise EmitterUnsupported("constant", "", "array literals need fusegen.hlo.literal")
    if et == "pred":
        v: Any = t.lower() in ("true", "1")
    elif is_float(et):
        v = float(t.replace("inf", "inf"))
    else:
        v = int(t, 0)
    return np.asarray(v).astype(dtypes.numpy_dtype(et)).reshape(shape.dimensions)


def _nest(shape: Shape, flat: Any) -> Any:
    """Leaf values from the iterator ``flat`` arranged as the (nested) tuple ``shape``."""
    if not shape.is_tuple:
        return next(flat)
    return [_nest(t, flat) for t in shape.tuple_shapes or ()]


def choose_index_dtype(shapes: Sequence[Shape], block: int) -> str:
    """``tl.int64`` when some buffer (or the launch) reaches 2**31 elements, else ``tl.int32``."""
    biggest = 0
    for s in shapes:
        for leaf in s.leaves():
            if leaf.is_array:  # complex buffers hold two parts per element
                biggest = max(biggest, leaf.numel * (2 if leaf.element_type in COMPLEX_PARTS else 1))
    return "tl.int64" if biggest + block >= 2**31 - 1 else "tl.int32"


class deep_recursion:
    """Context manager raising the recursion limit while walking long fused chains."""

    def __init__(self, limit: int = 20000):
        self.limit = limit

    def __enter__(self) -> None:
        self.old = sys.getrecursionlimit()
        sys.setrecursionlimit(max(self.old, self.limit))

    def __exit__(self, *a: Any) -> None:
        sys.setrecursionlimit(self.old)
