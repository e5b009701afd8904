"""The higher-precision oracle: a module evaluated with every floating type promoted to f64 (complex to c128).

The reference evaluator follows XLA's semantics exactly, rounding every bf16/f16/f32 intermediate to its
type; the promoted copy computes the same program with 52-bit mantissas, so its outputs are (up to the
program's own conditioning) the exact answer. A kernel and the reference are then both measured against it.

Instructions whose meaning depends on a floating type's bit width keep it: ``reduce-precision`` (its
rounding *is* the program) and ``bitcast-convert`` to or from a float, whose operand is rounded back to its
own width before the bits are reinterpreted (:func:`keep_bit_width`: a sort comparator's total-order key,
``f32 -> s32``, stays the program's; promoting it would reinterpret 8 bytes as two s32 values).
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

    ``bitcast-convert`` instructions of floats keep their bit widths (:func:`keep_bit_width`).
    """
    clone = copy.deepcopy(module)
    insts = list(clone.all_instructions())
    for inst in insts:
        keep_bit_width(inst)
    for inst in insts:
        if inst.opcode == "reduce-precision":
            continue  # it rounds to (exponent_bits, mantissa_bits) whatever the carrier type
        inst.shape = promote_shape(inst.shape)
    return clone


#: Attribute a promoted ``bitcast-convert`` carries: its operand's and result's element types before promotion.
BIT_WIDTH_ATTR = "_fusegen_bit_width_types"


def keep_bit_width(inst) -> None:
    """Mark a ``bitcast-convert`` of a floating operand or result so that, promoted, it still reinterprets the
    bits at the original widths (the evaluator rounds its operand to the original type, bitcasts, and widens
    the result): a sort comparator's total-order key (f32 -> s32) stays what the program compares."""
    if inst.opcode not in ("bitcast-convert", "bitcast") or BIT_WIDTH_ATTR in inst.attrs or not inst.operands:
        return
    src, dst = inst.operands[0].shape.element_type, inst.shape.element_type
    if inst.opcode == "bitcast" and src == dst:  # a layout bitcast: promoted like any reshape
        return
    if promoted_type(src) != src or promoted_type(dst) != dst:
        inst.attrs[BIT_WIDTH_ATTR] = (src, dst)


def promoted_fusion(fusion):
    """A copy of ``fusion`` (or any instruction) and its called computations with floating shapes promoted
    (:func:`promote_shape`; ``bitcast-convert`` keeps its bit widths), operands shared with the original.
    Called computations keep their instruction order, so ``zip`` pairs the copy's instructions with the
    original's."""
    memo = {id(fusion.parent): fusion.parent} if fusion.parent is not None else {}
    for o in fusion.operands:
        memo[id(o)] = o
    clone = copy.deepcopy(fusion, memo)
    todo, seen, order = [clone], set(), []
    while todo:
        inst = todo.pop()
        if id(inst) in seen:
            continue
        seen.add(id(inst))
        order.append(inst)
        for c in inst.called_computations:
            todo.extend(c.instructions)
    for inst in order:  # before any shape changes: the operands' original types
        keep_bit_width(inst)
    for inst in order:
        if inst.opcode != "reduce-precision":
            inst.shape = promote_shape(inst.shape)
    return clone


def evaluate_fusion_promoted(fusion, operands: Sequence[Any]) -> Any:
    """One fusion (or any instruction) evaluated in f64/c128 on ``operands`` (its called computations copied).

    Raises:
        OracleUnavailable: as :func:`evaluate_promoted`.
    """
    from fusegen.evaluator.evaluator import evaluate_instruction

    clone = promoted_fusion(fusion)
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
