"""Safe pieces of generated Triton source: identifiers, literals, dtype names and a line builder.

Nothing taken from HLO text is ever pasted into generated source as-is: instruction and computation
names go through :func:`sanitize_identifier` (ASCII letters, digits and ``_`` only), and constants are
re-formatted from their numeric value (:func:`float_literal`, :func:`int_literal`). This keeps hostile
names (quotes, newlines, ``\"\"\"``, unicode) from ever becoming code.
"""

from __future__ import annotations

import keyword
import math
import re
import struct
from typing import Sequence

from fusegen.hlo import dtypes

_IDENT_BAD = re.compile(r"[^A-Za-z0-9_]")

#: Names the generated module uses itself; a sanitized HLO name never takes one of them.
RESERVED = frozenset({
    "triton", "tl", "libdevice", "entry", "BLOCK", "N", "pid", "lin", "mask", "zero", "float", "int",
    "range", "True", "False", "None", "min", "max", "abs", "len", "print",
})

#: HLO element type -> ``tl`` dtype spelling used in generated code.
#: Float types Triton has no type for: kernels hold their storage byte (one element per byte).
BIT_FLOAT_TYPES = frozenset({"f8e3m4", "f8e4m3", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz", "f8e8m0fnu", "f4e2m1fn"})

_TL_DTYPE = {
    "pred": "tl.int1", "s8": "tl.int8", "s16": "tl.int16", "s32": "tl.int32", "s64": "tl.int64",
    "u8": "tl.uint8", "u16": "tl.uint16", "u32": "tl.uint32", "u64": "tl.uint64",
    "f16": "tl.float16", "bf16": "tl.bfloat16", "f32": "tl.float32", "f64": "tl.float64",
    "f8e4m3fn": "tl.float8e4nv", "f8e5m2": "tl.float8e5",
    # sub-byte integers live one per byte (as numpy/ml_dtypes keep them) and compute in 8 bits
    "s4": "tl.int8", "u4": "tl.uint8", "s2": "tl.int8", "u2": "tl.uint8",
    # float types Triton lacks: their storage byte, decoded / encoded by bit manipulation
    # (fusegen.codegen.elemental.narrow_float)
    **{t: "tl.uint8" for t in BIT_FLOAT_TYPES},
}

#: HLO element type -> storage element type of a kernel buffer (signature spelling ``*<this>``).
_STORAGE = {
    "pred": "u8", "s4": "i8", "s2": "i8", "u4": "u8", "u2": "u8",
    **{t: "u8" for t in BIT_FLOAT_TYPES},
    # complex buffers hold interleaved (re, im) parts
    "c64": "fp32", "c128": "fp64",
}


def sanitize_identifier(name: str, prefix: str = "v") -> str:
    """A valid, ASCII-only Python identifier derived from ``name``.

    Every character outside ``[A-Za-z0-9_]`` becomes ``_`` (so quotes, newlines, ``%``, ``.``, unicode
    can never reach generated code); a leading digit, an empty result, a Python keyword or a name in
    :data:`RESERVED` gets ``prefix`` + ``_`` in front. Distinct names may map to the same identifier:
    use :class:`NameAllocator` for uniqueness.
    """
    s = _IDENT_BAD.sub("_", str(name).lstrip("%"))
    s = re.sub(r"_+", "_", s)
    if len(s) > 48:  # keep generated lines short; uniqueness comes from NameAllocator
        s = s[:48]
    if not s or s[0].isdigit() or keyword.iskeyword(s) or s in RESERVED or s.startswith("__"):
        s = f"{prefix}_{s}".rstrip("_") if s else prefix
    if keyword.iskeyword(s) or s in RESERVED:
        s = f"{prefix}_{s}"
    assert s.isidentifier() and s.isascii()
    return s


class NameAllocator:
    """Hands out unique sanitized identifiers (``add_1``, ``add_1_2``...)."""

    def __init__(self, reserved: frozenset[str] = RESERVED):
        self._used: set[str] = set(reserved)

    def fresh(self, hint: str, prefix: str = "v") -> str:
        base = sanitize_identifier(hint, prefix)
        name = base
        k = 1
        while name in self._used:
            k += 1
            name = f"{base}_{k}"
        self._used.add(name)
        return name

    def reserve(self, name: str) -> None:
        self._used.add(name)


def tl_dtype(element_type: str) -> str:
    """``tl`` dtype expression for an HLO element type (``f32`` -> ``tl.float32``).

    Raises:
        dtypes.UnsupportedTypeError: complex, fp8 variants Triton lacks, token, tuple.
    """
    try:
        return _TL_DTYPE[element_type]
    except KeyError:
        raise dtypes.UnsupportedTypeError(f"HLO element type {element_type!r} has no Triton type") from None


def storage_type(element_type: str) -> str:
    """Pointer element spelling for a buffer of ``element_type`` (``pred`` is stored as ``u8``)."""
    if element_type in _STORAGE:
        return _STORAGE[element_type]
    return dtypes.triton_type(element_type)


def storage_tl_dtype(element_type: str) -> str:
    """``tl`` dtype of the loaded/stored buffer element (``pred`` -> ``tl.uint8``, ``c64`` -> ``tl.float32``)."""
    return {"pred": "tl.uint8", "c64": "tl.float32", "c128": "tl.float64"}.get(element_type, tl_dtype(element_type))


def int_literal(value: int) -> str:
    """Decimal text of an integer (never HLO text)."""
    return str(int(value))


def float_bits(value: float, element_type: str) -> int:
    """Bit pattern of ``value`` rounded to ``element_type`` (f16/bf16/f32/f64/fp8)."""
    import numpy as np

    arr = np.asarray(value, dtype=np.float64).astype(dtypes.numpy_dtype(element_type))
    width = dtypes.bit_width(element_type)
    return int(arr.reshape(1).view({8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64}[width])[0])


def float_literal(value: float) -> str:
    """Python text for a finite float value that round-trips exactly (``repr``).

    Raises:
        ValueError: for inf/nan/-0.0, which callers must build from their bit pattern
            (:func:`float_constant`).
    """
    v = float(value)
    if math.isnan(v) or math.isinf(v) or (v == 0.0 and math.copysign(1.0, v) < 0):
        raise ValueError(f"{v!r} has no plain literal; use float_constant")
    s = repr(v)
    assert re.fullmatch(r"-?[0-9.e+\-]+", s), s
    return s


def float_constant(value: float, element_type: str, shape: str = "[BLOCK]") -> str:
    """A ``tl`` expression for a float constant of ``element_type`` with exactly that value.

    Finite values are first rounded to the element type (so the literal is exact in it); inf, nan and
    -0.0 are built from their bit pattern with a bitcast, which both the interpreter and the compiler
    handle the same way.
    """
    import numpy as np

    et = element_type
    rounded = float(np.asarray(value, dtype=np.float64).astype(dtypes.numpy_dtype(et)).astype(np.float64))
    if math.isfinite(rounded) and not (rounded == 0.0 and math.copysign(1.0, rounded) < 0):
        return f"tl.full({shape}, {float_literal(rounded)}, {tl_dtype(et)})"
    width = dtypes.bit_width(et)
    bits = float_bits(rounded, et)
    utype = {8: "tl.uint8", 16: "tl.uint16", 32: "tl.uint32", 64: "tl.uint64"}[width]
    return f"tl.full({shape}, {bits}, {utype}).to({tl_dtype(et)}, bitcast=True)"


def int_constant(value: int, element_type: str, shape: str = "[BLOCK]") -> str:
    """A ``tl`` expression for an integer (or pred) constant of ``element_type``."""
    if element_type == "pred":
        return f"(tl.full({shape}, {1 if value else 0}, tl.int8) != 0)"
    return f"tl.full({shape}, {int_literal(value)}, {tl_dtype(element_type)})"


def true_mask(shape: str = "[BLOCK]") -> str:
    """A mask with every lane set: a constant Triton drops from the loads and stores it guards."""
    return f"tl.full({shape}, 1, tl.int1)"


def constexpr_branches(test: str, taken: Sequence[str], other: Sequence[str]) -> list[str]:
    """Lines ``if <test>: <taken> else: <other>`` on a ``tl.constexpr`` test, which Triton resolves when it
    compiles (only one group reaches the kernel). fusegen's kernels test XLA's exact grid this way, so that the
    interpreter's wider programs of the same source, which may overhang, take the checked group."""
    return [f"if {test}:", *("    " + x for x in taken), "else:", *("    " + x for x in other)]


class SourceBuilder:
    """Lines of Python with an indentation stack."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.level = 0

    def line(self, text: str = "") -> None:
        assert "\n" not in text, "generated lines never contain raw newlines"
        self.lines.append(("    " * self.level + text) if text else "")

    def indent(self) -> None:
        self.level += 1

    def dedent(self) -> None:
        assert self.level > 0
        self.level -= 1

    def render(self) -> str:
        return "\n".join(self.lines) + "\n"


def module_header() -> list[str]:
    """Imports every generated kernel module starts with."""
    return [
        "# Generated by fusegen (Triton code generation for an HLO fusion). Do not edit.",
        "import triton",
        "import triton.language as tl",
        "from triton.language.extra.cuda import libdevice",
        "",
    ]


def pack_f32(value: float) -> int:
    """Bits of an f32 (helper for tests and reduce-precision)."""
    return struct.unpack("<I", struct.pack("<f", value))[0]
