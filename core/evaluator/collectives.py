"""Collectives across N devices: what every participant of one exchange gets, from what each put in.

The N-way semantics of XLA's collectives (``xla/service/collective_ops_utils.h``, the HLO evaluator's
``HandleAllReduce`` / ``HandleAllGather`` ... and the operation semantics of ``all-reduce``, ``all-gather``,
``reduce-scatter``, ``all-to-all``, ``collective-permute``, ``collective-broadcast``):

* ``all-reduce``: each operand reduced elementwise over the group with ``to_apply``, in group order
  (``((x0 op x1) op x2) ...``, deterministic); every member gets the result.
* ``all-gather``: the members' operands concatenated along ``dimensions`` in group order.
* ``reduce-scatter``: the all-reduce, then member ``i`` keeps block ``i`` along ``dimensions``.
* ``all-to-all``: array form (``dimensions={d}``): each operand cut into ``G`` blocks along ``d``, member ``j``
  gets block ``j`` of every member, concatenated along ``d`` in group order; tuple form: member ``j`` gets
  operand ``j`` of every member, as a tuple in group order.
* ``collective-permute``: target gets its source's operand; a device no pair targets gets zeros.
* ``collective-broadcast``: every member gets the group's first member's operand.

The ``-start`` forms return what XLA's async shape says (``all-reduce-start``: the result;
``all-gather-start`` / ``collective-permute-start``: ``(operand, result, context...)``; the async-wrapped
``reduce-scatter-start`` / ``all-to-all-start`` / ``collective-broadcast-start``: ``((operands), result,
context...)``) and the ``-done`` forms take the result out (:func:`done_value`).

Values are the evaluator's (numpy arrays in logical order, tuples for tuple shapes). Used by
:mod:`fusegen.runtime.spmd` for the kernel path, the reference and the f64 oracle alike: the exchange itself
has no rounding but ``to_apply``'s, which runs in each run's own types.

``HANDLERS`` and ``CALLING_HANDLERS`` answer a module of one device (``num_partitions * replica_count == 1``):
every group is that device alone (ids past it do not exist, as XLA:CPU runs such a module on one device), so an
all-reduce is the identity, an all-gather whose result is larger than its operand is an error, and a permute
without a pair to itself gives zeros. A module of more devices runs through :mod:`fusegen.runtime.spmd`, never
through these.
"""

from __future__ import annotations

from typing import Any, Callable

import numpy as np

from fusegen.evaluator.common import Calls, EvaluationError, shape_dtype
from fusegen.evaluator.elementwise import is_liftable
from fusegen.hlo.ir import Computation, Instruction, Shape

__all__ = ["COLLECTIVE_OPCODES", "DONE_OPCODES", "base_opcode", "exchange", "done_value", "start_value",
           "operand_arrays", "HANDLERS", "CALLING_HANDLERS"]

#: The opcodes whose value depends on other devices (the ``-done`` halves are local, see DONE_OPCODES).
COLLECTIVE_OPCODES = frozenset([
    "all-reduce", "all-reduce-start", "all-gather", "all-gather-start", "reduce-scatter", "reduce-scatter-start",
    "all-to-all", "all-to-all-start", "collective-permute", "collective-permute-start", "collective-broadcast",
    "collective-broadcast-start"])
DONE_OPCODES = frozenset(["all-reduce-done", "all-gather-done", "reduce-scatter-done", "all-to-all-done",
                          "collective-permute-done", "collective-broadcast-done"])
#: Collectives fusegen does not run across devices (refused, never answered from one device).
UNSUPPORTED = frozenset(["ragged-all-to-all", "ragged-all-to-all-start", "send", "recv", "send-done", "recv-done",
                         "all-reduce-scatter"])


def base_opcode(opcode: str) -> str:
    """``all-gather-start`` -> ``all-gather``."""
    return opcode[: -len("-start")] if opcode.endswith("-start") else opcode


def _result_shape(inst: Instruction) -> Shape:
    """The exchanged value's shape: the instruction's, or element 1 of a ``-start``'s tuple."""
    if inst.opcode.endswith("-start") and inst.opcode != "all-reduce-start":
        return inst.shape.tuple_shapes[1]
    return inst.shape


def _zeros(s: Shape) -> Any:
    if s.is_tuple:
        return tuple(_zeros(t) for t in s.tuple_shapes)
    return np.zeros(tuple(s.dimensions), dtype=shape_dtype(s))


def operand_arrays(inst: Instruction, ops: list) -> list[np.ndarray]:
    """The arrays one device puts in (a tuple operand flattened; ``-start`` operands as given)."""
    out: list[np.ndarray] = []
    for o in ops:
        if isinstance(o, tuple):
            out.extend(np.asarray(x) for x in o)
        else:
            out.append(np.asarray(o))
    return out


def _pack(shape: Shape, arrays: list[np.ndarray]) -> Any:
    if shape.is_tuple:
        return tuple(arrays)
    if len(arrays) != 1:
        raise EvaluationError(f"{len(arrays)} results for a non-tuple shape {shape}")
    return arrays[0]


def _reduce(comp: Computation, values: list[np.ndarray], calls: Calls) -> np.ndarray:
    acc = values[0]
    for v in values[1:]:
        if is_liftable(comp):
            acc = np.asarray(calls.call_lifted(comp, [acc, v])).astype(acc.dtype, copy=False)
        else:  # a non-elementwise combiner: element by element
            flat = [calls.call(comp, [np.asarray(a), np.asarray(b)]) for a, b in
                    zip(acc.reshape(-1), v.reshape(-1))]
            acc = np.asarray(flat, dtype=acc.dtype).reshape(acc.shape)
    return acc


def _dim(inst: Instruction) -> int:
    dims = inst.attrs.get("dimensions")
    if not dims:
        raise EvaluationError(f"%{inst.name} ({inst.opcode}) has no dimensions={{...}}")
    return int(dims[0])


def exchange(inst: Instruction, contributions: list[list[np.ndarray]], calls: Calls,
             pairs: list[tuple[int, int]] | None = None) -> list[Any]:
    """Every participant's result value of one collective.

    Args:
        inst: the collective (``COLLECTIVE_OPCODES``).
        contributions: per participant in group order, its operand arrays (:func:`operand_arrays`).
        calls: the evaluator's (:class:`~fusegen.evaluator.common.Calls`), which run ``to_apply``.
        pairs: ``collective-permute``: ``(source, target)`` as positions in ``contributions`` (the caller maps
            device ids to positions).

    Returns:
        per participant, the value of the exchanged result (the ``-start`` tuple is built by :func:`start_value`).

    Raises:
        EvaluationError: operands that do not fit the op (shape, block sizes); names the instruction.
    """
    op = base_opcode(inst.opcode)
    n = len(contributions)
    shape = _result_shape(inst)
    leaves = shape.leaves() if shape.is_tuple else [shape]
    if op == "all-reduce":
        comp = inst.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EvaluationError(f"%{inst.name}: all-reduce without a to_apply computation")
        summed = [_reduce(comp, [c[k] for c in contributions], calls) for k in range(len(contributions[0]))]
        return [_pack(shape, list(summed)) for _ in range(n)]
    if op == "all-gather":
        d = _dim(inst)
        cat = [np.concatenate([c[k] for c in contributions], axis=d) for k in range(len(contributions[0]))]
        return [_pack(shape, cat) for _ in range(n)]
    if op == "reduce-scatter":
        comp = inst.attrs.get("to_apply")
        d = _dim(inst)
        out = []
        for k in range(len(contributions[0])):
            total = _reduce(comp, [c[k] for c in contributions], calls)
            if total.shape[d] % n:
                raise EvaluationError(f"%{inst.name}: dimension {d} of size {total.shape[d]} does not split into "
                                      f"{n} blocks")
            out.append(np.split(total, n, axis=d))
        return [_pack(shape, [blocks[i] for blocks in out]) for i in range(n)]
    if op == "all-to-all":
        if inst.attrs.get("dimensions"):
            d = _dim(inst)
            res = []
            for j in range(n):
                arrays = []
                for k in range(len(contributions[0])):
                    if contributions[0][k].shape[d] % n:
                        raise EvaluationError(f"%{inst.name}: dimension {d} of size {contributions[0][k].shape[d]} "
                                              f"does not split into {n} blocks")
                    arrays.append(np.concatenate([np.split(c[k], n, axis=d)[j] for c in contributions], axis=d))
                res.append(_pack(shape, arrays))
            return res
        if len(contributions[0]) != n:
            raise EvaluationError(f"%{inst.name}: tuple all-to-all has {len(contributions[0])} operands for a group "
                                  f"of {n}")
        return [tuple(c[j] for c in contributions) for j in range(n)]
    if op == "collective-broadcast":
        return [_pack(shape, list(contributions[0])) for _ in range(n)]
    if op == "collective-permute":
        res: list[Any] = [_zeros(shape) for _ in range(n)]
        for s, t in pairs or []:
            res[t] = _pack(shape, [np.array(a, copy=True) for a in contributions[s]])
        return res
    raise EvaluationError(f"%{inst.name}: {inst.opcode} is not a collective fusegen exchanges")


def start_value(inst: Instruction, ops: list, result: Any) -> Any:
    """The value of ``inst`` itself given its exchanged ``result`` (a ``-start``'s tuple; else the result)."""
    if not inst.opcode.endswith("-start") or inst.opcode == "all-reduce-start":
        return result
    ts = inst.shape.tuple_shapes
    first = tuple(ops) if ts[0].is_tuple else ops[0]
    return (first, result) + tuple(_zeros(s) for s in ts[2:])


def done_value(inst: Instruction, ops: list) -> Any:
    """A ``-done``'s value: the start's result (``all-reduce-done``: its operand)."""
    if inst.opcode == "all-reduce-done":
        return ops[0]
    v = ops[0]
    if not isinstance(v, tuple) or len(v) < 2:
        raise EvaluationError(f"%{inst.name} ({inst.opcode}): operand is not a {inst.opcode[:-5]}-start value")
    return v[1]


def _single(inst: Instruction, ops: list, calls: Calls) -> Any:
    """One device: each group is that device alone (explicit larger groups are an error)."""
    from fusegen.hlo.sharding import ShardingError, parse_pairs, parse_replica_groups

    try:
        groups = parse_replica_groups(inst.attrs.get("replica_groups"))
        pairs = parse_pairs(inst.attrs.get("source_target_pairs"))
    except ShardingError as e:
        raise EvaluationError(str(e)) from None
    if groups is not None and not any(0 in g for g in groups):
        raise EvaluationError(f"%{inst.name} ({inst.opcode}): replica groups {groups} leave out device 0, the "
                              "module's only device")
    # ids past the one device do not exist: XLA:CPU runs {{0,1}} on a one-device client as the group {0}
    if base_opcode(inst.opcode) == "collective-permute":
        result = exchange(inst, [operand_arrays(inst, ops)], calls, pairs=[q for q in pairs if q == (0, 0)])[0]
    else:
        result = exchange(inst, [operand_arrays(inst, ops)], calls)[0]
    got = [np.shape(x) for x in (result if isinstance(result, tuple) else (result,))]
    want = [tuple(s.dimensions) for s in (_result_shape(inst).leaves() if _result_shape(inst).is_tuple
                                          else [_result_shape(inst)])]
    if got != want:  # e.g. an all-gather of two replicas' halves: the other half does not exist here
        raise MultiDeviceUnsupported(
            f"%{inst.name} ({inst.opcode}) at line {inst.line}: its result {want} needs the other devices of groups "
            f"{groups} but the module has one device (num_partitions * replica_count == 1); fusegen does not "
            "answer it from one device")
    return start_value(inst, ops, result)


def _done(inst: Instruction, ops: list) -> Any:
    return done_value(inst, ops)


def _zero_id(inst: Instruction, ops: list) -> np.ndarray:
    return np.zeros((), dtype=shape_dtype(inst.shape))


HANDLERS: dict[str, Callable] = {**{op: _done for op in DONE_OPCODES}, "partition-id": _zero_id, "replica-id": _zero_id}
#: ``handler(inst, operands, calls)`` (an all-reduce's ``to_apply`` runs through ``calls``, see :class:`~.common.Calls`)
CALLING_HANDLERS: dict[str, Callable] = {op: _single for op in COLLECTIVE_OPCODES}


class MultiDeviceUnsupported(Exception):
    """A valid module of more than one device that this code path cannot run as all its devices (fusegen
    never answers such a module from one device); the CLI's exit code 4. The message names the instruction
    (or the module) and why."""


def refuse_multi_device(module: Any, what: str) -> None:
    """Raise :class:`MultiDeviceUnsupported` when ``module`` has ``num_partitions * replica_count > 1``:
    ``what`` (a one-device code path such as ``evaluate_module``) would answer it from one device."""
    from fusegen.hlo.sharding import ShardingError, device_counts

    try:
        p, r = device_counts(module)
    except ShardingError as e:
        raise MultiDeviceUnsupported(str(e)) from None
    if p * r > 1:
        raise MultiDeviceUnsupported(
            f"module {module.name} has num_partitions={p}, replica_count={r}: {what} runs one device, so it would "
            "answer from one partition; run it with fusegen.runtime.spmd (fusegen run does)")
