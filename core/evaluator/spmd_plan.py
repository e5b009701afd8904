"""What an SPMD module needs from its devices, read before anything runs: every collective with its
groups, channel and bytes, and every instruction fusegen cannot run as N copies (refused, never answered
from one partition).

The groups follow XLA's ``GetParticipatingDevices`` (``xla/service/collective_ops_utils.cc``) in global device
ids ``replica * num_partitions + partition`` (:func:`fusegen.hlo.sharding.collective_groups`).

The plan is read from the module alone, beside the collectives' semantics (:mod:`fusegen.evaluator.collectives`):
the SPMD runner and the performance model's collective estimates (:mod:`fusegen.perf.collectives`) both stand
above it (docs/layers.md).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from fusegen.evaluator.collectives import COLLECTIVE_OPCODES, UNSUPPORTED, MultiDeviceUnsupported, base_opcode
from fusegen.hlo.dtypes import numpy_dtype
from fusegen.hlo.ir import Computation, Instruction, Module
from fusegen.hlo.sharding import ShardingError, collective_groups, device_counts, group_mode, parse_pairs
from fusegen.kinds import TRITON_COLLECTIVE_STAMP

__all__ = ["Collective", "SpmdPlan", "plan_spmd", "is_triton_collective", "collectives_by_name"]

_DEVICE_IDS = frozenset(["partition-id", "replica-id"])


@attrs.frozen
class Collective:
    """One collective instruction of the module.

    ``groups``: participant groups in global device ids (group order); for ``collective-permute`` one group
    per replica (or partition) with ``pairs`` as ``(source, target)`` global ids. ``bytes_per_partition``:
    the bytes one device sends in (its operands).
    """

    name: str
    computation: str
    opcode: str
    mode: str
    groups: tuple[tuple[int, ...], ...]
    channel_id: int | None
    bytes_per_partition: int
    pairs: tuple[tuple[int, int], ...] = ()

    def group_of(self, device: int) -> tuple[int, ...] | None:
        return next((g for g in self.groups if device in g), None)

    def to_json(self) -> dict:
        d = {"name": self.name, "opcode": self.opcode, "groups": [list(g) for g in self.groups],
             "channel_id": self.channel_id, "bytes_per_partition": self.bytes_per_partition, "mode": self.mode}
        if self.opcode.startswith("collective-permute"):
            d["source_target_pairs"] = [list(p) for p in self.pairs]
        return d


@attrs.frozen
class SpmdPlan:
    """The module's devices and collectives (``collectives`` keyed by ``(computation, instruction)`` names)."""

    num_partitions: int
    replica_count: int
    collectives: dict

    @property
    def devices(self) -> int:
        return self.num_partitions * self.replica_count

    def partition(self, device: int) -> int:
        return device % self.num_partitions

    def replica(self, device: int) -> int:
        return device // self.num_partitions


def _bytes(inst: Instruction) -> int:
    total = 0
    for o in inst.operands:
        for s in (o.shape.leaves() if o.shape.is_tuple else [o.shape]):
            if s.element_type in ("token", "tuple"):
                continue
            total += int(np.prod(s.dimensions, dtype=np.int64)) * np.dtype(numpy_dtype(s.element_type)).itemsize
    return total


def is_triton_collective(inst: Instruction) -> bool:
    """A ``__triton_collective`` fusion (``fusion_backend_config.kind``): XLA's Triton collective kernel."""
    bc = inst.attrs.get("backend_config")
    fbc = bc.get("fusion_backend_config") if isinstance(bc, dict) else None
    return inst.opcode == "fusion" and isinstance(fbc, dict) and fbc.get("kind") == TRITON_COLLECTIVE_STAMP


def _fused_computations(module: Module) -> dict[int, Instruction]:
    """``id(computation) -> the fusion`` for every computation a fusion calls (transitively), but those of
    ``__triton_collective`` fusions: their collectives run across partitions (on the host) as any other."""
    out: dict[int, Instruction] = {}
    for inst in module.all_instructions():
        if inst.opcode != "fusion" or is_triton_collective(inst):
            continue
        todo = list(inst.called_computations)
        while todo:
            c = todo.pop()
            if id(c) in out:
                continue
            out[id(c)] = inst
            for i in c.instructions:
                todo.extend(i.called_computations)
    return out


def _refuse(inst: Instruction, comp: Computation, why: str) -> MultiDeviceUnsupported:
    line = f" (line {inst.line})" if getattr(inst, "line", None) else ""
    return MultiDeviceUnsupported(f"%{inst.name} ({inst.opcode}) in computation %{comp.name}{line}: {why}")


def _collective(inst: Instruction, comp: Computation, p: int, r: int) -> Collective:
    try:
        mode = group_mode(inst)
        channel = inst.attrs.get("channel_id")
        channel = int(str(channel).strip()) if channel is not None else None
        if base_opcode(inst.opcode) == "collective-permute":
            if len(inst.operands) > 1 and not inst.shape.is_tuple or len(inst.operands) == 4:
                raise _refuse(inst, comp, "the in-place collective-permute (output buffer and start indices) "
                                          "is not run across partitions")
            pairs = parse_pairs(inst.attrs.get("source_target_pairs"))
            if mode == "cross_partition":
                groups = [tuple(q * p + k for k in range(p)) for q in range(r)]
                gpairs = [(q * p + s, q * p + t) for q in range(r) for s, t in pairs]
                limit = p
            else:
                groups = [tuple(q * p + k for q in range(r)) for k in range(p)]
                gpairs = [(s * p + k, t * p + k) for k in range(p) for s, t in pairs]
                limit = r
            bad = [pr for pr in pairs if not (0 <= pr[0] < limit and 0 <= pr[1] < limit)]
            if bad:
                raise ShardingError(f"source_target_pairs {bad} name ids outside 0..{limit - 1}")
            targets = [t for _, t in pairs]
            if len(set(targets)) != len(targets):
                raise ShardingError(f"source_target_pairs {pairs}: a device receives twice")
            return Collective(inst.name, comp.name, inst.opcode, mode, tuple(groups), channel, _bytes(inst),
                              tuple(gpairs))
        groups = [tuple(g) for g in collective_groups(inst, p, r)]
    except ShardingError as e:
        raise _refuse(inst, comp, str(e)) from None
    seen: dict[int, int] = {}
    for g in groups:
        for d in g:
            seen[d] = seen.get(d, 0) + 1
    twice = sorted(d for d, k in seen.items() if k > 1)
    missing = sorted(set(range(p * r)) - set(seen))
    if twice or missing:
        raise _refuse(inst, comp, f"replica groups {[list(g) for g in groups]} (global ids) "
                                  + (f"put devices {twice} in more than one group" if twice else
                                     f"leave devices {missing} out"))
    return Collective(inst.name, comp.name, inst.opcode, mode, tuple(groups), channel, _bytes(inst))


def plan_spmd(module: Module) -> SpmdPlan:
    """The :class:`SpmdPlan` of ``module``.

    Raises:
        MultiDeviceUnsupported: naming the first instruction fusegen cannot run as N copies and why (a
            collective inside a fusion, send/recv, ragged all-to-all, the in-place collective-permute,
            groups that do not cover the devices, an unreadable group form).
    """
    try:
        p, r = device_counts(module)
    except ShardingError as e:
        raise MultiDeviceUnsupported(str(e)) from None
    fused = _fused_computations(module)
    collectives: dict[tuple[str, str], Collective] = {}
    for comp in module.computations:
        for inst in comp.instructions:
            op = inst.opcode
            if op in UNSUPPORTED:
                raise _refuse(inst, comp, f"{op} is not run across partitions by fusegen")
            if op == "custom-call" and any(w in str(inst.attrs.get("custom_call_target", "")).lower()
                                           for w in ("nccl", "nvshmem", "collective")):
                raise _refuse(inst, comp, "a collective library call is not run across partitions by fusegen")
            if op not in COLLECTIVE_OPCODES and op not in _DEVICE_IDS:
                continue
            if id(comp) in fused:
                raise _refuse(inst, comp, f"inside fusion %{fused[id(comp)].name}: its kernel would need every "
                                          "partition's buffers (no collective emitter)")
            if op in COLLECTIVE_OPCODES:
                collectives[(comp.name, inst.name)] = _collective(inst, comp, p, r)
    return SpmdPlan(p, r, collectives)


def collectives_by_name(module: Module) -> dict[str, Collective]:
    """``instruction name -> Collective`` for the report's graph (empty where the plan is refused: the run
    says why)."""
    try:
        plan = plan_spmd(module)
    except MultiDeviceUnsupported:
        return {}
    return {c.name: c for c in plan.collectives.values()}
