"""Input arrays for a module's entry parameters: seeded random ones, or read from an ``.npz``.

Index operands (start indices of dynamic-slice / dynamic-update-slice, gather and scatter indices)
get integers inside the operand's bounds, so a run exercises real addresses instead of clamping.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction, Module, Shape

_PASS_THROUGH = {"convert", "bitcast", "reshape", "copy", "broadcast", "slice", "concatenate", "get-tuple-element",
                 "transpose", "clamp", "bitcast-convert"}


class InputError(ValueError):
    """An input array is missing, misshaped or mistyped (the message names the parameter)."""


def _index_uses(inst: Instruction) -> list[tuple[int, int]]:
    """(operand number, bound) pairs of ``inst``'s index operands."""
    op = inst.opcode
    if op == "dynamic-slice":
        src = inst.operands[0].shape
        sizes = inst.attrs.get("dynamic_slice_sizes", src.dimensions)
        return [(k, max(0, src.dimensions[k - 1] - sizes[k - 1])) for k in range(1, len(inst.operands))
                if k - 1 < src.rank]
    if op == "dynamic-update-slice":
        src, upd = inst.operands[0].shape, inst.operands[1].shape
        return [(k, max(0, src.dimensions[k - 2] - upd.dimensions[k - 2])) for k in range(2, len(inst.operands))
                if k - 2 < src.rank]
    if op == "gather":
        dims = inst.operands[0].shape.dimensions
        return [(1, max(0, min(dims) - 1) if dims else 0)]
    if op == "scatter":
        n = (len(inst.operands) - 1) // 2
        dims = inst.operands[0].shape.dimensions
        return [(n, max(0, min(dims) - 1) if dims else 0)]
    return []


def index_bounds(module: Module) -> dict[int, int]:
    """Entry parameter number -> largest in-range value, for parameters that feed index operands."""
    callers: dict[int, list[tuple[Instruction, int]]] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            for c in inst.called_computations:
                callers.setdefault(id(c), []).append((inst, 0))
    bounds: dict[int, int] = {}

    def walk(inst: Instruction, bound: int, depth: int) -> None:
        if depth > 12:
            return
        if inst.opcode == "parameter":
            comp = inst.parent
            if comp is module.entry:
                n = inst.parameter_number
                bounds[n] = min(bound, bounds.get(n, bound))
                return
            for caller, _ in callers.get(id(comp), []):
                if caller.opcode in ("fusion", "call") and inst.parameter_number < len(caller.operands):
                    walk(caller.operands[inst.parameter_number], bound, depth + 1)
            return
        if inst.opcode in _PASS_THROUGH:
            for o in inst.operands[: 1 if inst.opcode != "concatenate" else None]:
                walk(o, bound, depth + 1)

    for comp in module.computations:
        for inst in comp.instructions:
            for k, bound in _index_uses(inst):
                if k < len(inst.operands):
                    walk(inst.operands[k], bound, 0)
    return bounds


def random_array(shape: Shape, rng: np.random.Generator, high: int | None = None) -> np.ndarray:
    """A seeded random logical array of ``shape``: normal floats, small integers, random preds."""
    et = shape.element_type
    dt = dtypes.numpy_dtype(et)
    dims = shape.dimensions
    if high is not None and dtypes.is_integral(et):
        return rng.integers(0, high + 1, size=dims).astype(dt)
    if et == "pred":
        return rng.random(dims) < 0.5
    if dtypes.is_integral(et):
        lo, hi = (0, 16) if dtypes.is_unsigned_int(et) or dtypes.bit_width(et) < 8 else (-8, 8)
        if dtypes.bit_width(et) < 8:
            lo, hi = 0, 2
        return rng.integers(lo, hi, size=dims).astype(dt)
    if dtypes.is_complex(et):
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dt)
    return rng.standard_normal(dims).astype(np.float32).astype(dt)


def random_value(shape: Shape, rng: np.random.Generator, high: int | None = None) -> Any:
    if shape.is_tuple:
        return tuple(random_value(s, rng) for s in shape.tuple_shapes)
    if shape.element_type == "token":
        return np.zeros((), np.int8)
    return random_array(shape, rng, high)


def make_inputs(module: Module, seed: int = 0) -> list[Any]:
    """Seeded random values for every entry parameter (index operands in range)."""
    rng = np.random.default_rng(seed)
    bounds = index_bounds(module)
    return [random_value(p.shape, rng, bounds.get(p.parameter_number)) for p in module.entry.parameters]


def from_npz_dtype(arr: np.ndarray, want: np.dtype) -> np.ndarray:
    """``arr`` as read from an ``.npz``, retyped to ``want`` when ``np.savez`` stored it as raw bytes.

    numpy records an ml_dtypes array (bf16, the f8/f4 types, s4/u4, s2/u2) as a plain void type of its item
    size (``|V2`` for bf16), so ``np.load`` gives bytes back; ml_dtypes users read them with
    ``.view(ml_dtypes.bfloat16)``, and so does this function when the parameter's type has that item size.
    Any other array is returned as it is.
    """
    raw = arr.dtype.kind == "V" and arr.dtype.fields is None and arr.dtype.type is np.void
    if raw and _is_ml_dtype(want) and arr.dtype.itemsize == want.itemsize:
        return arr.view(want)
    return arr


def _is_ml_dtype(dt: np.dtype) -> bool:
    return dt.type.__module__.split(".")[0] == "ml_dtypes"


def _read_npz_member(data: Any, key: str) -> np.ndarray:
    """``data[key]``; an array ``np.savez`` wrote with the descriptor ``'<f1'`` (what ml_dtypes' float8_e5m2
    reports, and numpy cannot read back) is read as raw bytes ``|V1``."""
    try:
        return data[key]
    except ValueError as e:
        if "descr" not in str(e):
            raise
    with data.zip.open(f"{key}.npy") as fp:
        major, _ = np.lib.format.read_magic(fp)
        size = int.from_bytes(fp.read(2 if major == 1 else 4), "little")
        header = ast.literal_eval(fp.read(size).decode("latin1"))
        if not re.fullmatch(r"[<>|=]f1", str(header.get("descr"))):
            raise ValueError(f"descr {header.get('descr')!r} is not a valid dtype descriptor")
        shape = tuple(header["shape"])
        flat = np.frombuffer(fp.read(), dtype=np.dtype("V1"), count=int(np.prod(shape, dtype=np.int64)))
    return flat.reshape(shape, order="F" if header.get("fortran_order") else "C")


def save_npz(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """``np.savez`` with every ml_dtypes array (bf16, f8, f4, s4 ...) stored as raw bytes of its item size
    (``|V2``, ``|V1``), as numpy stores most of them already; ``np.load(path)[k].view(ml_dtypes.bfloat16)``
    reads one back, and :func:`load_inputs` reads them as the parameter's type.

    Raises:
        OSError: the file cannot be written.
    """
    np.savez(path, **{k: a.view(f"V{a.dtype.itemsize}") if _is_ml_dtype(a.dtype) else a for k, a in arrays.items()})


def load_inputs(module: Module, path: str | Path) -> list[Any]:
    """Read entry parameters from an ``.npz`` keyed ``p0``, ``p1``... or by parameter name.

    ml_dtypes arrays (bf16, f8, s4 ...) saved with ``np.savez`` come back as raw bytes (``|V2``); they are read
    as the parameter's type when the item size agrees (:func:`from_npz_dtype`).

    Raises:
        InputError: a parameter is missing, or its array has the wrong shape or dtype.
    """
    path = Path(path)
    try:
        with open(path, "rb") as fp:
            head = fp.read(6)
    except OSError as e:
        raise InputError(f"{path}: cannot read inputs: {e.strerror or e}") from None
    if not head.startswith(b"PK"):  # an .npz is a zip archive of .npy files
        what = ("it holds a single .npy array" if head.startswith(b"\x93NUMPY") else "it is empty" if not head
                else "it is not a zip archive")
        raise InputError(f"{path}: not an .npz archive ({what}; np.savez writes one, with arrays p0, p1, ...)")
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:
        raise InputError(f"{path}: not a readable .npz archive: {e}") from None
    if not hasattr(data, "files"):
        raise InputError(f"{path}: not an .npz archive (np.savez writes one, with arrays p0, p1, ...)")
    out = []
    for p in module.entry.parameters:
        n = p.parameter_number
        key = f"p{n}" if f"p{n}" in data.files else p.name if p.name in data.files else None
        if key is None:
            raise InputError(f"{path}: no array for parameter {n} (%{p.name}); expected key 'p{n}' or '{p.name}'")
        if p.shape.is_tuple:
            raise InputError(f"{path}: parameter {n} (%{p.name}) has a tuple shape; .npz inputs must be arrays")
        try:
            arr = _read_npz_member(data, key)
        except (ValueError, OSError, SyntaxError) as e:
            raise InputError(f"{path}: array '{key}' cannot be read: {e}") from None
        want = dtypes.numpy_dtype(p.shape.element_type)
        arr = from_npz_dtype(arr, want)
        if tuple(arr.shape) != tuple(p.shape.dimensions):
            raise InputError(f"{path}: array '{key}' for parameter {n} (%{p.name}) has shape {list(arr.shape)}, "
                             f"expected {list(p.shape.dimensions)}")
        if arr.dtype != want:
            raise InputError(f"{path}: array '{key}' for parameter {n} (%{p.name}) has dtype {arr.dtype}, "
                             f"expected {want} ({p.shape.element_type})")
        out.append(arr)
    known = {f"p{p.parameter_number}" for p in module.entry.parameters} | {p.name for p in module.entry.parameters}
    unknown = sorted(set(data.files) - known)
    if unknown:  # a typo in a key would otherwise be silently replaced by nothing
        raise InputError(f"{path}: arrays {unknown} match no parameter of the entry computation "
                         f"(expected p0..p{len(module.entry.parameters) - 1} or parameter names)")
    return out


def leaves(value: Any) -> list[np.ndarray]:
    """Array leaves of a value (a tuple is flattened in order)."""
    if isinstance(value, tuple):
        return [x for v in value for x in leaves(v)]
    return [np.asarray(value)]
