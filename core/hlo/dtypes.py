"""HLO primitive types and their numpy (ml_dtypes) and Triton spellings.

Mirrors ``xla/primitive_util.h`` (bit widths, integral/floating classification).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

_NUMPY: dict[str, np.dtype] = {
    "pred": np.dtype(np.bool_),
    "s2": np.dtype(ml_dtypes.int2), "u2": np.dtype(ml_dtypes.uint2),
    "s4": np.dtype(ml_dtypes.int4), "u4": np.dtype(ml_dtypes.uint4),
    "s8": np.dtype(np.int8), "s16": np.dtype(np.int16), "s32": np.dtype(np.int32), "s64": np.dtype(np.int64),
    "u8": np.dtype(np.uint8), "u16": np.dtype(np.uint16), "u32": np.dtype(np.uint32), "u64": np.dtype(np.uint64),
    "f16": np.dtype(np.float16), "f32": np.dtype(np.float32), "f64": np.dtype(np.float64),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "f8e4m3fn": np.dtype(ml_dtypes.float8_e4m3fn), "f8e5m2": np.dtype(ml_dtypes.float8_e5m2),
    "f8e4m3fnuz": np.dtype(ml_dtypes.float8_e4m3fnuz), "f8e5m2fnuz": np.dtype(ml_dtypes.float8_e5m2fnuz),
    "f8e4m3b11fnuz": np.dtype(ml_dtypes.float8_e4m3b11fnuz), "f8e4m3": np.dtype(ml_dtypes.float8_e4m3),
    "f8e3m4": np.dtype(ml_dtypes.float8_e3m4), "f8e8m0fnu": np.dtype(ml_dtypes.float8_e8m0fnu),
    "f4e2m1fn": np.dtype(ml_dtypes.float4_e2m1fn),
    "c64": np.dtype(np.complex64), "c128": np.dtype(np.complex128),
}

_BITS: dict[str, int] = {"pred": 8, "s2": 2, "u2": 2, "s4": 4, "u4": 4, "f4e2m1fn": 4}

_TRITON: dict[str, str] = {
    "pred": "i1", "s8": "i8", "s16": "i16", "s32": "i32", "s64": "i64",
    "u8": "u8", "u16": "u16", "u32": "u32", "u64": "u64",
    "f16": "fp16", "bf16": "bf16", "f32": "fp32", "f64": "fp64",
    "f8e4m3fn": "fp8e4nv", "f8e5m2": "fp8e5",
}


class UnsupportedTypeError(ValueError):
    """An HLO element type fusegen cannot represent (names the type)."""


def numpy_dtype(element_type: str) -> np.dtype:
    """numpy dtype of an HLO element type (``bf16`` -> ``ml_dtypes.bfloat16``).

    Raises:
        UnsupportedTypeError: for ``token``, ``tuple`` or an unknown type.
    """
    try:
        return _NUMPY[element_type]
    except KeyError:
        raise UnsupportedTypeError(f"unsupported HLO element type {element_type!r}") from None


def element_type_of(dtype: np.dtype) -> str:
    """The HLO element type of a numpy (ml_dtypes) dtype (``float32`` -> ``f32``), else the dtype's own name."""
    dt = np.dtype(dtype)
    return next((k for k, v in _NUMPY.items() if v == dt), dt.name)


def bit_width(element_type: str) -> int:
    """Storage bits of one element as XLA counts them (``pred`` is 8, ``s4`` is 4)."""
    if element_type in _BITS:
        return _BITS[element_type]
    return numpy_dtype(element_type).itemsize * 8


def is_floating(element_type: str) -> bool:
    return element_type.startswith(("f", "bf"))


def is_complex(element_type: str) -> bool:
    return element_type.startswith("c")


def is_signed_int(element_type: str) -> bool:
    return element_type.startswith("s")


def is_unsigned_int(element_type: str) -> bool:
    return element_type.startswith("u")


def is_integral(element_type: str) -> bool:
    return is_signed_int(element_type) or is_unsigned_int(element_type)


def triton_type(element_type: str) -> str:
    """Triton pointer element spelling (``fp32``, ``bf16``, ``i1``, ...).

    Raises:
        UnsupportedTypeError: for types Triton has no scalar type for (sub-byte ints, complex, ...).
    """
    try:
        return _TRITON[element_type]
    except KeyError:
        raise UnsupportedTypeError(f"HLO element type {element_type!r} has no Triton type") from None
