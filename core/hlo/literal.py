"""HLO constant literal text <-> numpy arrays.

Mirrors the literal grammar of ``xla/hlo/parser/hlo_parser.cc`` (``ParseLiteral``, ``ParseDenseLiteral``,
``ParseScalar``/``SetValueInLiteral``) and ``Literal::ToString`` (``xla/literal.cc``) for dense arrays: nested
braces in logical (row-major, layout-independent) order, ``true``/``false``, ``inf``/``-inf``/``nan``, hex
integers, hex floats and complex ``(re, im)`` pairs.
"""

from __future__ import annotations

import math
import re

import ml_dtypes
import numpy as np

from fusegen.hlo.dtypes import numpy_dtype
from fusegen.hlo.ir import Shape

__all__ = ["parse_literal", "format_literal"]

_COMPLEX = r"\(\s*([^(),\s]+)\s*,\s*([^(),\s]+)\s*\)"
_TOKEN = re.compile(_COMPLEX + r"|([^\s{},()]+)")
_NAN = re.compile(r"([+-]?)nan(?:\([^)]*\))?$", re.I)
_COMMENT = re.compile(r"/\*.*?\*/|//[^\n]*", re.S)


def _scalar(tok: str) -> float | int | bool:
    t = tok.lower()
    if t == "true":
        return True
    if t == "false":
        return False
    if t in ("inf", "+inf"):
        return math.inf
    if t == "-inf":
        return -math.inf
    m = _NAN.match(t)
    if m:
        return -math.nan if m.group(1) == "-" else math.nan
    neg = t.startswith("-")
    body = t.lstrip("+-")
    if body.startswith("0x"):
        if "p" in body or "." in body:
            v = float.fromhex(body)
            return -v if neg else v
        v = int(body, 16)
        return (-0.0 if neg else 0) if v == 0 else (-v if neg else v)
    try:
        v = int(t)
    except ValueError:
        return float(t)
    # XLA prints negative zero as "-0": keep its sign (a float -0.0 still converts to integer 0)
    return -0.0 if v == 0 and neg else v


def _is_int_dtype(dtype: np.dtype) -> bool:
    if dtype.kind in "iu":
        return True
    try:
        ml_dtypes.iinfo(dtype)
        return True
    except (ValueError, TypeError):
        return False


def _to_array(values: list, dtype: np.dtype) -> np.ndarray:
    if dtype == np.bool_:
        return np.array([bool(v) for v in values], dtype=np.bool_)
    if dtype.kind == "c":
        return np.array(values, dtype=np.complex128).astype(dtype)
    if _is_int_dtype(dtype):
        info = ml_dtypes.iinfo(dtype)
        out = []
        for v in values:
            if isinstance(v, float):
                if not v.is_integer():
                    raise ValueError(f"integer literal expected, got {v!r}")
            v = int(v)
            if v < int(info.min) or v > int(info.max):
                raise ValueError(f"value {v} out of range for {dtype}")
            out.append(v)
        wide = np.uint64 if dtype.kind == "u" and dtype.itemsize == 8 else np.int64
        return np.array(out, dtype=wide).astype(dtype)
    # floating, including ml_dtypes (bf16, f8...): round once from float64
    return np.array([float(v) for v in values], dtype=np.float64).astype(dtype)


def parse_literal(text: str | None, shape: Shape) -> np.ndarray | tuple:
    """Parse a constant's literal text (``Instruction.attrs["literal"]``) into a numpy array.

    Args:
        text: the text between ``constant(`` and ``)``; ``None`` when the constant was elided as ``{...}``.
        shape: the constant's shape; its element type picks the dtype (:func:`fusegen.hlo.dtypes.numpy_dtype`).

    Returns:
        An array of ``shape.dimensions`` in logical order (a 0-d array for scalars). A single value given for a
        non-scalar shape is broadcast. For a tuple shape, a tuple of arrays (``( {1,2}, 3 )``).

    Raises:
        ValueError: for elided constants, malformed text, a value count that does not match the shape, or a value
            out of range; ``fusegen.hlo.dtypes.UnsupportedTypeError`` (a ValueError) for types with no numpy dtype.
    """
    if text is None:
        raise ValueError("constant literal elided as {...}: its values are unknown")
    if shape.is_tuple:
        return _parse_tuple(text, shape)
    dtype = numpy_dtype(shape.element_type)
    s = (_COMMENT.sub(" ", text) if "/" in text else text).strip()
    if not s:
        raise ValueError("empty literal")
    values: list = []
    complex_type = dtype.kind == "c"
    depth = max_depth = 0
    for ch in s:
        if ch == "{":
            depth += 1
            max_depth = max(max_depth, depth)
        elif ch == "}":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced '}}' in literal {s[:60]!r}")
    if depth != 0:
        raise ValueError(f"unbalanced '{{' in literal {s[:60]!r}")
    for m in _TOKEN.finditer(s):
        if m.group(3) is not None:
            tok = m.group(3)
            v = _scalar(tok)
            values.append(complex(v, 0) if complex_type else v)
        else:
            if not complex_type:
                raise ValueError(f"complex value {m.group(0)!r} in a {shape.element_type} literal")
            values.append(complex(float(_scalar(m.group(1))), float(_scalar(m.group(2)))))
    dims = tuple(shape.dimensions)
    numel = 1
    for d in dims:
        numel *= d
    if len(values) == numel and (max_depth in (0, len(dims)) or numel == 0):
        arr = _to_array(values, dtype) if values else np.zeros(0, dtype=dtype)
        return arr.reshape(dims)
    if len(values) == 1 and max_depth == 0:
        return np.full(dims, _to_array(values, dtype)[0], dtype=dtype)
    raise ValueError(
        f"literal has {len(values)} values (nesting depth {max_depth}) but shape "
        f"{shape.element_type}{list(dims)} needs {numel} (depth {len(dims)})"
    )


def _parse_tuple(text: str, shape: Shape) -> tuple:
    s = text.strip()
    if not (s.startswith("(") and s.endswith(")")):
        raise ValueError(f"tuple literal must be parenthesised: {s[:60]!r}")
    body = s[1:-1]
    parts: list[str] = []
    depth = 0
    start = 0
    for i, ch in enumerate(body):
        if ch in "{(":
            depth += 1
        elif ch in "})":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    if body.strip():
        parts.append(body[start:])
    elems = shape.tuple_shapes or ()
    if len(parts) != len(elems):
        raise ValueError(f"tuple literal has {len(parts)} elements, shape has {len(elems)}")
    return tuple(parse_literal(p, e) for p, e in zip(parts, elems))


def _fmt_scalar(v, element_type: str) -> str:
    if element_type == "pred":
        return "true" if bool(v) else "false"
    if isinstance(v, (complex, np.complexfloating)):
        c = complex(v)
        return f"({_fmt_float(c.real, 'f64')}, {_fmt_float(c.imag, 'f64')})"
    if element_type.startswith(("s", "u")):
        return str(int(v))
    return _fmt_float(float(v), element_type)


def _fmt_float(x: float, element_type: str) -> str:
    if math.isnan(x):
        return "nan"
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if element_type == "f64":
        r = repr(x)
    else:
        # every narrower float is exactly an f32; the shortest f32 repr reads back to the same value
        r = str(np.float32(x))
    if r.endswith(".0"):
        r = r[:-2]
    return r


def format_literal(array, shape: Shape) -> str:
    """Literal text for a constant of ``shape`` holding ``array`` (logical order), the inverse of
    :func:`parse_literal`: ``1``, ``{1, 2}``, ``{ {1, 2}, {3, 4} }``, ``(1, 2)`` for complex values.

    Raises:
        ValueError: when ``array``'s size does not match ``shape``.
    """
    if shape.is_tuple:
        return "(" + ", ".join(format_literal(a, s) for a, s in zip(array, shape.tuple_shapes or ())) + ")"
    arr = np.asarray(array)
    dims = tuple(shape.dimensions)
    if arr.size != shape.numel:
        raise ValueError(f"array has {arr.size} elements, shape {shape.element_type}{list(dims)} needs {shape.numel}")
    arr = arr.reshape(dims)
    et = shape.element_type

    def rec(a: np.ndarray) -> str:
        if a.ndim == 0:
            return _fmt_scalar(a[()], et)
        if a.ndim == 1:
            return "{" + ", ".join(_fmt_scalar(x, et) for x in a) + "}"
        return "{ " + ", ".join(rec(x) for x in a) + " }"

    return rec(arr)
