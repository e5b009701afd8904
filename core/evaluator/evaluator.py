"""fusegen's reference evaluator: HLO executed with numpy + ml_dtypes.

Every generated kernel is checked against this. Mirrors the behaviour of XLA's ``HloEvaluator``
(``xla/hlo/evaluator/hlo_evaluator.cc``) and, where XLA:GPU's emitters define it, of the elemental IR emitter
(``xla/service/elemental_ir_emitter.cc``) and the GPU library calls (see :mod:`.custom_calls`).

Values
    ``Value`` is a numpy array in *logical* index order (``shape.dimensions``) whose dtype is
    ``fusegen.hlo.dtypes.numpy_dtype(shape.element_type)`` (``ml_dtypes.bfloat16`` for ``bf16``), or a Python
    tuple of Values for a tuple shape (a token is the empty tuple). Layouts only matter to ``bitcast``, which
    reinterprets the physical buffer through both layouts (:func:`fusegen.hlo.layout_util.bitcast`).

Precision (excess precision OFF, bug B19)
    The evaluator behaves as XLA with ``--xla_allow_excess_precision=false``: every f16 / bf16 / f8 intermediate
    is rounded (round-to-nearest-even) to its declared type. Elementwise ops on those types compute in f32 and
    round the result, so ``f32(bf16(x))`` is ``x`` rounded to bf16, never ``x``. Kernels that fuse such chains
    must round at the same points to match bitwise. Exceptions, where XLA itself fixes no order or rounding:
    dots and convolutions accumulate in f32 and round once; single-input add / multiply reductions of
    f16 / bf16 accumulate in f32 and round once.

Called computations (fusion, call, map, reduce / reduce-window / scatter combiners, sort comparators, while,
conditional, async wrappers) are evaluated by recursion. Scalar elementwise computations (combiners,
comparators, map bodies) are *lifted*: run once on whole arrays instead of once per element.

Errors
    :class:`UnsupportedOpError` for an opcode or custom-call target the evaluator does not implement;
    :class:`~fusegen.evaluator.common.EvaluationError` for malformed input (names file line, instruction and
    computation).
"""

from __future__ import annotations

import functools
from typing import Callable, Sequence

import numpy as np

from fusegen.evaluator import (
    batch_norm,
    collectives,
    control_flow,
    custom_calls,
    dot_conv,
    elementwise,
    fft,
    gather_scatter_sort,
    linalg,
    reduce,
    shape_ops,
    vectorized_scatter,
)
from fusegen.evaluator.common import (Calls, EvaluationError, UnsupportedOpError, Value, as_array, contiguous,
                                      shape_dtype)
from fusegen.evaluator.elementwise import SCALAR_IDENTITY
from fusegen.hlo.dtypes import numpy_dtype
from fusegen.hlo.ir import Computation, Instruction, Module, Shape

__all__ = [
    "UnsupportedOpError",
    "EvaluationError",
    "Value",
    "evaluate_instruction",
    "evaluate_computation",
    "evaluate_module",
    "supported_opcodes",
]


def supported_opcodes() -> frozenset[str]:
    """Every opcode :func:`evaluate_instruction` implements (``parameter`` is bound by the caller)."""
    return frozenset(HANDLERS) | {"parameter"}


def implements(inst: Instruction) -> bool:
    """Whether :func:`evaluate_instruction` runs ``inst``: its opcode has a handler and, for a custom call, its
    target is one of :func:`fusegen.evaluator.custom_calls.library_targets` (fusions: their own opcode only;
    their bodies are instructions of their own)."""
    if inst.opcode not in HANDLERS and inst.opcode != "parameter":
        return False
    if inst.opcode == "custom-call":
        return str(inst.attrs.get("custom_call_target", "")).strip('"') in custom_calls.library_targets()
    return True


def _check(inst: Instruction, value: Value, shape: Shape) -> Value:
    if shape.is_tuple:
        if not isinstance(value, tuple) or len(value) != len(shape.tuple_shapes or ()):
            raise EvaluationError(f"result is not a {len(shape.tuple_shapes or ())}-tuple")
        return tuple(_check(inst, v, s) for v, s in zip(value, shape.tuple_shapes or ()))
    if shape.element_type == "token":
        return value
    arr = np.asarray(value)
    dt = shape_dtype(shape)
    if arr.dtype != dt:
        arr = as_array(arr, dt)
    if arr.shape != tuple(shape.dimensions):
        raise EvaluationError(f"result has shape {arr.shape}, the instruction declares {tuple(shape.dimensions)}")
    return arr


def _locate(inst: Instruction, err: Exception) -> EvaluationError:
    comp = inst.parent.name if inst.parent is not None else "?"
    line = f"line {inst.line}: " if inst.line else ""
    e = EvaluationError(f"{line}%{inst.name} ({inst.opcode}) in computation %{comp}: {err}")
    e.located = True  # type: ignore[attr-defined]
    return e


def _apply(inst: Instruction, operands: list, lifted: bool) -> Value:
    if lifted and inst.opcode in SCALAR_IDENTITY:
        if inst.opcode == "bitcast" and inst.shape.element_type != inst.operands[0].shape.element_type:
            # a scalar bitcast between element types of one width (XLA's ComparisonExpander writes them)
            widths = inst.attrs.get(elementwise.BIT_WIDTH_ATTR)
            if widths is not None:  # the f64 oracle's: the bits at the program's (equal) widths, then widened
                src, dst = numpy_dtype(widths[0]), numpy_dtype(widths[1])
                bits = contiguous(elementwise.convert_array(np.asarray(operands[0]), src)).view(dst)
                return elementwise.convert_array(bits, shape_dtype(inst.shape))
            return contiguous(operands[0]).view(shape_dtype(inst.shape))
        return operands[0]
    if lifted and inst.opcode in ("call", "fusion"):
        callee = inst.attrs.get("to_apply") or inst.attrs.get("calls")
        callee = callee[0] if isinstance(callee, list) else callee
        return _evaluate_computation(callee, operands, lifted=True)
    handler = HANDLERS.get(inst.opcode)
    if handler is None:
        raise UnsupportedOpError(inst)
    try:
        with np.errstate(all="ignore"):
            value = handler(inst, operands)
        return value if lifted else _check(inst, value, inst.shape)
    except (UnsupportedOpError, collectives.MultiDeviceUnsupported, KeyboardInterrupt):
        raise
    except Exception as err:  # noqa: BLE001 - every failure is reported against its instruction
        if getattr(err, "located", False):
            raise
        raise _locate(inst, err) from err


def evaluate_instruction(inst: Instruction, operands: list[Value]) -> Value:
    """Evaluate one instruction on operand values (called computations are evaluated recursively).

    Args:
        inst: any non-``parameter`` instruction.
        operands: one Value per ``inst.operands`` entry, in order.

    Returns:
        The Value of ``inst`` (array of ``inst.shape``'s dims and dtype, or a tuple).

    Raises:
        UnsupportedOpError: opcode / custom-call target not implemented.
        EvaluationError: malformed instruction or operands (names the instruction).
    """
    if inst.opcode == "parameter":
        raise EvaluationError(f"%{inst.name} is a parameter: bind it through evaluate_computation")
    return _apply(inst, list(operands), lifted=False)


_PLAN_CACHE: dict[int, tuple[Computation, tuple, list, dict]] = {}


def _plan(comp: Computation) -> tuple[list[Instruction], dict[int, int]]:
    """Instructions reachable from the root in definition order, and each one's last use position."""
    hit = _PLAN_CACHE.get(id(comp))
    if hit is not None and hit[0] is comp and hit[1] == (len(comp.instructions), comp.version, id(comp.root)):
        return hit[2], hit[3]
    if comp.root is None:
        raise EvaluationError(f"computation %{comp.name} has no root")
    reach: set[int] = set()
    stack = [comp.root]
    while stack:
        i = stack.pop()
        if id(i) in reach:
            continue
        reach.add(id(i))
        stack.extend(i.operands)
    # definition order when it is a valid order (XLA prints post order), else a post order from the root
    order = [i for i in comp.instructions if id(i) in reach]
    seen: set[int] = set()
    for i in order:
        if any(id(o) not in seen for o in i.operands):
            order = [j for j in comp.post_order() if id(j) in reach]
            break
        seen.add(id(i))
    last: dict[int, int] = {}
    for k, i in enumerate(order):
        for o in i.operands:
            last[id(o)] = k
    last[id(comp.root)] = len(order)
    _PLAN_CACHE[id(comp)] = (comp, (len(comp.instructions), comp.version, id(comp.root)), order, last)
    return order, last


def _evaluate_computation(comp: Computation, args: Sequence[Value], lifted: bool = False) -> Value:
    order, last = _plan(comp)
    vals: dict[int, Value] = {}
    for k, inst in enumerate(order):
        if inst.opcode == "parameter":
            n = inst.parameter_number
            if n >= len(args):
                raise EvaluationError(f"computation %{comp.name} needs parameter {n}, got {len(args)} arguments")
            v = args[n]
        else:
            v = _apply(inst, [vals[id(o)] for o in inst.operands], lifted)
        vals[id(inst)] = v
        for o in inst.operands:
            if last.get(id(o)) == k:
                vals.pop(id(o), None)
    return vals[id(comp.root)]


def _evaluate_subgraph(root: Instruction, params: dict[int, Value]) -> Value:
    """Lifted evaluation of ``root`` and the instructions it depends on (scalar elementwise ones), parameter
    ``n`` bound to ``params[n]`` (a sort comparator's key expression on a whole operand)."""
    vals: dict[int, Value] = {}
    stack: list[tuple[Instruction, bool]] = [(root, False)]
    while stack:
        inst, ready = stack.pop()
        if id(inst) in vals:
            continue
        if inst.opcode == "parameter":
            vals[id(inst)] = params[inst.parameter_number]
        elif not ready:
            stack.append((inst, True))
            stack.extend((o, False) for o in inst.operands if id(o) not in vals)
        else:
            vals[id(inst)] = _apply(inst, [vals[id(o)] for o in inst.operands], lifted=True)
    return vals[id(root)]


def evaluate_computation(comp: Computation, args: list[Value]) -> Value:
    """Evaluate ``comp`` with ``args[i]`` bound to parameter ``i``; returns the root's Value.

    Raises:
        UnsupportedOpError, EvaluationError: as :func:`evaluate_instruction`.
    """
    return _evaluate_computation(comp, list(args), lifted=False)


#: What the ops that call computations (a reducer, a comparator, a body) evaluate them with: handed to each
#: handler of a family's ``CALLING_HANDLERS`` as its third argument, so the op modules never import this one.
CALLS = Calls(call=evaluate_computation, call_lifted=functools.partial(_evaluate_computation, lifted=True),
              subgraph=_evaluate_subgraph)

#: opcode -> ``handler(inst, operands)``, the ``CALLING_HANDLERS`` with :data:`CALLS` bound
HANDLERS: dict[str, Callable[[Instruction, list], Value]] = {}
for _family in (elementwise, shape_ops, collectives, dot_conv, gather_scatter_sort, control_flow, custom_calls,
                batch_norm, linalg, fft):
    HANDLERS.update(_family.HANDLERS)
for _family in (collectives, reduce, gather_scatter_sort, control_flow, vectorized_scatter):
    HANDLERS.update({op: functools.partial(h, calls=CALLS) for op, h in _family.CALLING_HANDLERS.items()})
HANDLERS["copy"] = shape_ops.HANDLERS["copy"]


def _coerce_arg(p: Instruction, a, filename: str) -> Value:
    if p.shape.is_tuple:
        return tuple(a)
    arr = np.asarray(a)
    dt = shape_dtype(p.shape)
    if arr.dtype != dt:
        arr = elementwise.convert_array(arr, dt)
    if arr.shape != tuple(p.shape.dimensions):
        if arr.size == p.shape.numel:
            arr = arr.reshape(p.shape.dimensions)
        else:
            raise EvaluationError(f"{filename}: parameter {p.parameter_number} (%{p.name}) expects "
                                  f"{p.shape.element_type}{list(p.shape.dimensions)}, got shape {arr.shape}")
    return arr


def evaluate_module(module: Module, args: Sequence[Value]) -> Value:
    """Evaluate the module's entry computation on ``args`` (one per entry parameter, in parameter order).

    Array arguments are converted to the parameter's element type (``convert`` semantics) when their dtype
    differs, and reshaped when only the element count matches.

    Raises:
        EvaluationError: wrong argument count / shape (names the file), or malformed HLO.
        UnsupportedOpError: an opcode or custom-call target not implemented.
    """
    entry = module.entry
    if entry is None:
        raise EvaluationError(f"{module.filename}: module {module.name} has no entry computation")
    collectives.refuse_multi_device(module, "evaluate_module")  # N copies run in fusegen.runtime.spmd
    params = entry.parameters
    if len(args) != len(params):
        raise EvaluationError(f"{module.filename}: entry %{entry.name} takes {len(params)} arguments, "
                              f"got {len(args)}")
    return evaluate_computation(entry, [_coerce_arg(p, a, module.filename) for p, a in zip(params, args)])
