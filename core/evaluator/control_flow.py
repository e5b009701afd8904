"""Ops that call computations: ``fusion``, ``call``, ``map``, ``while``, ``conditional`` and the async wrappers
(``async-start`` / ``async-update`` / ``async-done``, ``call-start`` / ``call-done``).

An async start evaluates its wrapped computation at once; its value is the tuple
``((operands...), result, context...)`` XLA's async shape describes, and the done op returns element 1.
``conditional`` with a ``pred`` selects branch 0 for true and 1 for false; an ``s32`` index out of range selects
the last branch (XLA operation semantics).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import (
    contiguous,
    Calls,
    EvaluationError,
    computation_attr,
    shape_dtype,
    as_array,
    zeros_for,
)
from fusegen.evaluator.elementwise import is_liftable
from fusegen.hlo.ir import Computation, Instruction


def _bind_operand(param: Instruction, value, fusion: Instruction):
    """A fusion operand as its fused parameter declares it.

    The fused computation reads the operand's buffer through the parameter's shape (as a GPU kernel
    does): an operand with more elements than the parameter (malformed HLO that XLA's verifier would
    reject, e.g. ``s32[1024]`` bound to an ``s32[]`` parameter in ``print_indexing_test.hlo``) is read
    as its first elements in physical order, one with as many elements is reinterpreted (bitcast).

    Raises:
        EvaluationError: the operand has fewer elements than the parameter.
    """
    from fusegen.hlo.layout_util import from_physical, to_physical

    shape = param.shape
    if shape.is_tuple or isinstance(value, tuple) or shape.element_type == "token":
        return value
    arr = np.asarray(value)
    if arr.shape == tuple(shape.dimensions):
        return arr
    op_shape = fusion.operands[param.parameter_number].shape if param.parameter_number < len(fusion.operands) \
        else shape
    if arr.size < shape.numel:
        raise EvaluationError(f"%{fusion.name}: operand {param.parameter_number} has {arr.size} elements, "
                              f"fused parameter %{param.name} declares {shape.element_type}{list(shape.dimensions)}")
    flat = to_physical(arr, op_shape) if op_shape.is_array and tuple(op_shape.dimensions) == arr.shape \
        else arr.reshape(-1)
    return from_physical(contiguous(flat[: shape.numel]), shape)


def _fusion(inst: Instruction, ops: list, calls: Calls):
    comp = computation_attr(inst, "calls", "to_apply")
    params = {p.parameter_number: p for p in comp.parameters}
    bound = [(_bind_operand(params[k], v, inst) if k in params else v) for k, v in enumerate(ops)]
    return calls.call(comp, bound)


def _call(inst: Instruction, ops: list, calls: Calls):
    return calls.call(computation_attr(inst, "to_apply", "calls"), list(ops))


def _map(inst: Instruction, ops: list, calls: Calls) -> np.ndarray:
    comp = computation_attr(inst, "to_apply", "calls")
    out = shape_dtype(inst.shape)
    arrays = [np.asarray(o) for o in ops]
    if is_liftable(comp):
        r = calls.call_lifted(comp, arrays)
        return np.broadcast_to(as_array(r, out), tuple(inst.shape.dimensions)).copy()
    res = np.empty(tuple(inst.shape.dimensions), dtype=out)
    for idx in np.ndindex(*res.shape):
        res[idx] = calls.call(comp, [np.asarray(a[idx]) for a in arrays])
    return res


def _while(inst: Instruction, ops: list, calls: Calls):
    cond = computation_attr(inst, "condition")
    body = computation_attr(inst, "body")
    state = ops[0]
    while bool(np.asarray(calls.call(cond, [state])).reshape(())):
        state = calls.call(body, [state])
    return state


def _conditional(inst: Instruction, ops: list, calls: Calls):
    branches = inst.attrs.get("branch_computations")
    if isinstance(branches, Computation):
        branches = [branches]
    if not branches:
        t, f = inst.attrs.get("true_computation"), inst.attrs.get("false_computation")
        if isinstance(t, Computation) and isinstance(f, Computation):
            branches = [t, f]
    if not branches or not all(isinstance(b, Computation) for b in branches):
        raise EvaluationError(f"conditional %{inst.name} has no resolved branch computations "
                              f"(attributes: {sorted(k for k in inst.attrs if 'comput' in k)})")
    sel = np.asarray(ops[0]).reshape(())
    if sel.dtype == np.bool_:
        k = 0 if bool(sel) else 1
    else:
        k = int(sel)
        if k < 0 or k >= len(branches):
            k = len(branches) - 1
    return calls.call(branches[k], [ops[1 + k]])


def _async_start(inst: Instruction, ops: list, calls: Calls) -> tuple:
    comp = computation_attr(inst, "calls", "to_apply", "async_wrapped_computation")
    result = calls.call(comp, list(ops))
    rest = ()
    if inst.shape.is_tuple and len(inst.shape.tuple_shapes) > 2:
        rest = tuple(zeros_for(s) for s in inst.shape.tuple_shapes[2:])
    return (tuple(ops), result) + rest


def _async_update(inst: Instruction, ops: list):
    return ops[0]


def _async_done(inst: Instruction, ops: list):
    v = ops[0]
    if not isinstance(v, tuple) or len(v) < 2:
        raise EvaluationError(f"%{inst.name} ({inst.opcode}): operand is not an async start value")
    return v[1]


HANDLERS: dict[str, Callable] = {
    "async-update": _async_update,
    "async-done": _async_done,
    "call-update": _async_update,
    "call-done": _async_done,
}
#: handlers that evaluate called computations: ``handler(inst, operands, calls)`` (see :class:`~.common.Calls`)
CALLING_HANDLERS: dict[str, Callable] = {
    "fusion": _fusion,
    "call": _call,
    "map": _map,
    "while": _while,
    "conditional": _conditional,
    "async-start": _async_start,
    "call-start": _async_start,
}
