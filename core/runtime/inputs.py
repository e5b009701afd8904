"""Input arrays for a module's entry parameters: seeded random ones, or read from an ``.npz``.

Index operands (start indices of dynamic-slice / dynamic-update-slice, gather and scatter indices)
get integers inside the operand's bounds, so a run exercises real addresses instead of clamping.
"""

from __future__ import annotations

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


def load_inputs(module: Module, path: str | Path) -> list[Any]:
    """Read entry parameters from an ``.npz`` keyed ``p0``, ``p1``... or by parameter name.

    Raises:
        InputError: a parameter is missing, or its array has the wrong shape or dtype.
    """
    path = Path(path)
    try:
        data = np.load(path, allow_pickle=False)
    except Exception as e:
        raise InputError(f"{path}: cannot read inputs: {e}") from None
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
            arr = data[key]
        except (ValueError, OSError) as e:
            raise InputError(f"{path}: array '{key}' cannot be read: {e}") from None
        want = dtypes.numpy_dtype(p.shape.element_type)
        if tuple(arr.shape) != tuple(p.shape.dimensions):
            raise InputError(f"{path}: array '{key}' for parameter {n} (%{p.name}) has shape {list(arr.shape)}, "
                             f"expected {list(p.shape.dimensions)}")
        if arr.dtype.kind == "V" and arr.dtype.itemsize == want.itemsize:
            arr = arr.view(want)  # np.savez stores bfloat16 / float8 arrays as raw bytes (|V2, |V1)
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
