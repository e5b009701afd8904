"""The higher-precision oracle: a module evaluated with every floating type promoted to f64 (complex to c128).

The reference evaluator follows XLA's semantics exactly, rounding every bf16/f16/f32 intermediate to its
type; the promoted copy computes the same program with 52-bit mantissas, so its outputs are (up to the
program's own conditioning) the exact answer. A kernel and the reference are then both measured against it.

Instructions whose meaning depends on a floating type's bit width cannot be promoted: ``bitcast-convert`` to
or from a float, ``reduce-precision`` (kept at its width: its rounding *is* the program), and layouts with
element-size annotations. A module holding a ``bitcast-convert`` of a float gets no oracle
(:class:`OracleUnavailable`).
"""

from __future__ import annotations

import copy
from typing import Any, Callable, Sequence

import attrs
import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Module, Shape

#: element type -> promoted element type.
PROMOTE = {"f32": "f64", "f16": "f64", "bf16": "f64", "c64": "c128"}


class OracleUnavailable(Exception):
    """The module cannot be evaluated in f64 (the message says which instruction and why)."""


def promoted_type(element_type: str) -> str:
    """The f64 oracle's type for ``element_type``: floats to ``f64``, complex to ``c128``, the rest unchanged."""
    if element_type.startswith(("f8", "f4")):
        return "f64"
    return PROMOTE.get(element_type, element_type)


def promote_shape(shape: Shape) -> Shape:
    """``shape`` with every leaf promoted by :func:`promoted_type` (tuples recursively)."""
    if shape.is_tuple:
        return attrs.evolve(shape, tuple_shapes=tuple(promote_shape(s) for s in shape.tuple_shapes))
    return attrs.evolve(shape, element_type=promoted_type(shape.element_type))


def promote_module(module: Module) -> Module:
    """A deep copy of ``module`` with floating shapes promoted (f32/f16/bf16/f8 -> f64, c64 -> c128).

    Raises:
        OracleUnavailable: a ``bitcast-convert`` to or from a floating type (its bits depend on the width).
    """
    for inst in module.all_instructions():
        if inst.opcode == "bitcast-convert":
            types = [inst.shape.element_type] + [o.shape.element_type for o in inst.operands]
            if any(promoted_type(t) != t for t in types):
                raise OracleUnavailable(f"%{inst.name} bitcast-converts a floating type; its bits depend on the width")
    clone = copy.deepcopy(module)
    for inst in clone.all_instructions():
        if inst.opcode == "reduce-precision":
            continue  # it rounds to (exponent_bits, mantissa_bits) whatever the carrier type
        inst.shape = promote_shape(inst.shape)
    return clone


def evaluate_fusion_promoted(fusion, operands: Sequence[Any]) -> Any:
    """One fusion (or any instruction) evaluated in f64/c128 on ``operands`` (its called computations copied).

    Raises:
        OracleUnavailable: as :func:`evaluate_promoted`.
    """
    from fusegen.evaluator.evaluator import evaluate_instruction

    memo = {id(fusion.parent): fusion.parent} if fusion.parent is not None else {}
    for o in fusion.operands:
        memo[id(o)] = o
    clone = copy.deepcopy(fusion, memo)
    todo, seen = [clone], set()
    while todo:
        inst = todo.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        if inst.opcode == "bitcast-convert" and promote_shape(inst.shape) != inst.shape:
            raise OracleUnavailable(f"%{inst.name} bitcast-converts a floating type")
        if inst.opcode != "reduce-precision":
            inst.shape = promote_shape(inst.shape)
        for c in inst.called_computations:
            todo.extend(c.instructions)
    try:
        return evaluate_instruction(clone, [promote_value(v) for v in operands])
    except Exception as e:
        raise OracleUnavailable(f"f64 evaluation failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def promote_value(v: Any) -> Any:
    """An argument value in the promoted module's types (tuples recursively)."""
    if isinstance(v, tuple):
        return tuple(promote_value(x) for x in v)
    a = np.asarray(v)
    if a.dtype.kind == "c":
        return a.astype(np.complex128)
    if a.dtype.kind == "f" or a.dtype.name in ("bfloat16",) or a.dtype.name.startswith("float8"):
        return a.astype(np.float64)
    return a


def evaluate_promoted(module: Module, args: Sequence[Any],
                      run: Callable[[Module, list[Any]], Any] | None = None) -> Any:
    """The module's outputs evaluated in f64/c128 on ``args`` (promoted exactly; same tree as the module's).

    Args:
        run: evaluates the promoted module on the promoted arguments (default
            :func:`~fusegen.evaluator.evaluator.evaluate_module`; :mod:`fusegen.runtime.oracles` passes one
            that can be cancelled and watches the run's deadline).

    Raises:
        OracleUnavailable: see :func:`promote_module`; also when the promoted evaluation itself fails (an
            ``Exception``; a ``BaseException`` from ``run`` passes through).
    """
    from fusegen.evaluator.evaluator import evaluate_module

    promoted = promote_module(module)
    try:
        return (run or evaluate_module)(promoted, [promote_value(a) for a in args])
    except Exception as e:  # a program the f64 evaluation cannot run must not break the verdict
        raise OracleUnavailable(f"f64 evaluation failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")


def is_float_type(element_type: str) -> bool:
    """Whether ``element_type`` is a floating or complex HLO type."""
    return dtypes.is_floating(element_type) or dtypes.is_complex(element_type)
