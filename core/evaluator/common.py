"""Helpers shared by the evaluator's op families: dtypes, attribute forms, the errors, calling computations.

Values are numpy arrays in logical index order (see :mod:`fusegen.evaluator.evaluator`).
"""

from __future__ import annotations

import json
import re
from typing import Any, Callable, NamedTuple, Union

import ml_dtypes
import numpy as np

from fusegen.hlo.dtypes import numpy_dtype
from fusegen.hlo.ir import Computation, Instruction, Shape

Value = Union[np.ndarray, tuple]

#: Floating types narrower than f32: XLA computes their elementwise ops in f32 and rounds the result.
LOW_FLOATS: frozenset[np.dtype] = frozenset(
    np.dtype(t)
    for t in (
        np.float16, ml_dtypes.bfloat16, ml_dtypes.float8_e4m3fn, ml_dtypes.float8_e5m2, ml_dtypes.float8_e4m3fnuz,
        ml_dtypes.float8_e5m2fnuz, ml_dtypes.float8_e4m3b11fnuz, ml_dtypes.float8_e4m3, ml_dtypes.float8_e3m4,
        ml_dtypes.float8_e8m0fnu, ml_dtypes.float4_e2m1fn,
    )
)
_SUB_BYTE_INTS = frozenset(np.dtype(t) for t in (ml_dtypes.int2, ml_dtypes.uint2, ml_dtypes.int4, ml_dtypes.uint4))


class EvaluationError(RuntimeError):
    """A value the evaluator cannot compute (bad attribute, operand shape mismatch, ...); names the instruction."""


class UnsupportedOpError(Exception):
    """A valid HLO opcode (or custom-call target) fusegen has no implementation of.

    ``str(err)``: ``fusegen has no implementation of HLO op 'foo' (instruction %name, computation %c, line N)``,
    or for a custom call ``fusegen has no implementation of custom-call target '__foo' (instruction ...)``. The
    command line exits 4 on it (a valid module fusegen cannot run), never 2.

    Attributes:
        opcode, instruction (name), computation (name or ``None``), target (custom-call target or ``None``),
        what (``"custom-call target '__foo'"`` or ``"HLO op 'foo'"``).
    """

    def __init__(self, inst: Instruction | str, target: str | None = None):
        if isinstance(inst, Instruction):
            self.opcode = inst.opcode
            self.instruction = inst.name
            self.computation = inst.parent.name if inst.parent is not None else None
            self.target = target
            where = f"instruction %{inst.name}" + (f", computation %{self.computation}" if self.computation else "")
            where += f", line {inst.line}" if inst.line else ""
            self.what = f"custom-call target {target!r}" if target is not None else f"HLO op {inst.opcode!r}"
            msg = f"fusegen has no implementation of {self.what} ({where})"
        else:
            self.opcode = self.instruction = self.computation = None
            self.target = target
            self.what = target or ""
            msg = str(inst)
        super().__init__(msg)


def is_float(dt: np.dtype) -> bool:
    return dt in LOW_FLOATS or np.issubdtype(dt, np.floating)


def is_complex(dt: np.dtype) -> bool:
    return np.issubdtype(dt, np.complexfloating)


def is_int(dt: np.dtype) -> bool:
    return dt in _SUB_BYTE_INTS or np.issubdtype(dt, np.integer)


def is_signed(dt: np.dtype) -> bool:
    if dt in _SUB_BYTE_INTS:
        return dt in (np.dtype(ml_dtypes.int2), np.dtype(ml_dtypes.int4))
    return np.issubdtype(dt, np.signedinteger)


def int_info(dt: np.dtype):
    if dt in _SUB_BYTE_INTS:
        return ml_dtypes.iinfo(dt)
    return np.iinfo(dt)


def compute_dtype(dt: np.dtype) -> np.dtype:
    """The dtype XLA computes an elementwise op of ``dt`` in (f32 for f16/bf16/f8, else ``dt``)."""
    if dt in LOW_FLOATS:
        return np.dtype(np.float32)
    if dt in _SUB_BYTE_INTS:
        return np.dtype(np.int8) if is_signed(dt) else np.dtype(np.uint8)
    return dt


def up(x: np.ndarray) -> np.ndarray:
    """``x`` in its compute dtype (an f32 copy for narrow floats)."""
    x = np.asarray(x)
    cd = compute_dtype(x.dtype)
    return x if cd == x.dtype else x.astype(cd)


def shape_dtype(shape: Shape) -> np.dtype:
    return numpy_dtype(shape.element_type)


def as_array(x: Any, dt: np.dtype) -> np.ndarray:
    """``x`` as an ndarray of ``dt`` (rounding floats to nearest even, as XLA's convert does)."""
    a = np.asarray(x)
    if a.dtype != dt:
        if a.dtype == np.bool_ and dt in LOW_FLOATS:
            a = a.astype(np.float32)
        a = a.astype(dt)
    return a


_INT_RE = re.compile(r"-?\d+")


def ints(v: Any) -> tuple[int, ...]:
    """An integer-list attribute in any of its parsed forms (``(1, 2)``, ``"{1,2}"``, ``3``) as a tuple."""
    if v is None:
        return ()
    if isinstance(v, (int, np.integer)):
        return (int(v),)
    if isinstance(v, str):
        return tuple(int(t) for t in _INT_RE.findall(v))
    return tuple(int(t) for t in v)


def attr_ints(inst: Instruction, key: str, default: tuple[int, ...] = ()) -> tuple[int, ...]:
    v = inst.attrs.get(key)
    return default if v is None else ints(v)


def attr_int(inst: Instruction, key: str, default: int) -> int:
    v = inst.attrs.get(key)
    if v is None:
        return default
    if isinstance(v, str):
        return int(v.strip().strip("{}"))
    return int(v)


def attr_bool(inst: Instruction, key: str, default: bool = False) -> bool:
    v = inst.attrs.get(key)
    if v is None:
        return default
    if isinstance(v, str):
        return v.strip().lower() == "true"
    return bool(v)


def backend_config(inst: Instruction) -> dict:
    """The backend config as a dict, also when the parser kept it as (escaped) JSON text."""
    bc = inst.attrs.get("backend_config")
    if isinstance(bc, dict):
        return bc
    if isinstance(bc, str):
        text = bc.strip()
        for cand in (text, text.encode().decode("unicode_escape") if "\\" in text else None):
            if not cand:
                continue
            try:
                out = json.loads(cand)
            except ValueError:
                continue
            if isinstance(out, str):
                try:
                    out = json.loads(out)
                except ValueError:
                    continue
            if isinstance(out, dict):
                return out
    return {}


_FFI_ITEM = re.compile(r'\s*([A-Za-z_][\w.]*)\s*=\s*("(?:[^"\\]|\\.)*"|[^,:{}]+?)\s*(?::\s*[a-z]\w*)?\s*(?:,|$)')


def ffi_attrs(inst: Instruction) -> dict:
    """A typed-FFI custom call's attributes: its ``backend_config`` as the MLIR dictionary jax writes,
    ``{lower = true, algorithm = 0 : ui8, magma = "auto"}`` -> ``{"lower": True, "algorithm": 0, "magma": "auto"}``.

    Booleans, integers, floats and strings are typed; a JSON backend config is returned as parsed. An empty or
    missing config gives ``{}``.

    Raises:
        EvaluationError: text that is neither JSON nor an MLIR dictionary of scalars (names the instruction).
    """
    bc = inst.attrs.get("backend_config")
    if bc is None or isinstance(bc, dict):
        return dict(bc or {})
    text = str(bc).strip()
    if text.startswith("{") and '"' in text.split("=", 1)[0]:
        return backend_config(inst)  # JSON (the __cublas$ / __cudnn$ targets)
    body = text[1:-1].strip() if text.startswith("{") and text.endswith("}") else text
    out: dict = {}
    pos = 0
    while pos < len(body):
        m = _FFI_ITEM.match(body, pos)
        if m is None or m.end() == pos:
            raise EvaluationError(f"custom-call %{inst.name}: cannot read backend_config {text!r} "
                                  f"(at {body[pos:pos + 20]!r})")
        key, raw = m.group(1), m.group(2).strip()
        if raw.startswith('"'):
            val: Any = json.loads(raw)
        elif raw in ("true", "false"):
            val = raw == "true"
        else:
            try:
                val = int(raw)
            except ValueError:
                try:
                    val = float(raw)
                except ValueError:
                    val = raw
        out[key] = val
        pos = m.end()
    return out


def computation_attr(inst: Instruction, *keys: str) -> Computation:
    """The called computation under the first of ``keys`` present (first element of a list)."""
    for k in keys:
        v = inst.attrs.get(k)
        if isinstance(v, list) and v:
            v = v[0]
        if isinstance(v, Computation):
            return v
    raise EvaluationError(f"%{inst.name} ({inst.opcode}) names no called computation under {', '.join(keys)}")


class Calls(NamedTuple):
    """The evaluator's entry points for the computations an op calls (a reduce's reducer, a sort's comparator, a
    loop's body, a collective's reducer). :mod:`fusegen.evaluator.evaluator` hands them (its ``CALLS``) to each
    handler in a family's ``CALLING_HANDLERS`` as ``handler(inst, operands, calls)``, so no op module imports it.

    ``call(comp, args)``: ``comp`` evaluated on ``args`` (recursion entry point); ``call_lifted(comp, args)``: a
    scalar elementwise computation (:func:`~fusegen.evaluator.elementwise.is_liftable`) run on whole arrays at
    once; ``subgraph(root, params)``: lifted evaluation of ``root`` and the instructions it depends on,
    parameter ``n`` bound to ``params[n]`` (a sort comparator's key expression on a whole operand)."""

    call: Callable[[Computation, list], Value]
    call_lifted: Callable[[Computation, list], Value]
    subgraph: Callable[[Instruction, dict[int, Value]], Value]


def contiguous(x: Any) -> np.ndarray:
    """``x`` as a C-contiguous array *of the same shape* (``np.ascontiguousarray`` turns 0-d into ``(1,)``,
    which would make scalar results fail the shape check)."""
    a = np.asarray(x)
    return np.ascontiguousarray(a).reshape(a.shape)


def zeros_for(shape: Shape) -> Value:
    """A zero value of ``shape`` (tuples recursively; tokens as ``()``)."""
    if shape.is_tuple:
        return tuple(zeros_for(s) for s in shape.tuple_shapes or ())
    if shape.element_type == "token":
        return ()
    return np.zeros(shape.dimensions, dtype=shape_dtype(shape))


def total_order_key(x: np.ndarray) -> np.ndarray:
    """Signed integers ordering floats like XLA's total order (-NaN < -inf < ... < -0 < +0 < ... < NaN)."""
    x = contiguous(x)
    bits = x.dtype.itemsize * 8
    it = {1: np.int8, 2: np.int16, 4: np.int32, 8: np.int64}[x.dtype.itemsize]
    i = x.view(it)
    mask = np.array((1 << (bits - 1)) - 1, dtype=it)
    return np.where(i < 0, i ^ mask, i)
