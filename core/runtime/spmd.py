"""Running an SPMD module as all its devices: N copies of the per-partition program that meet at collectives.

A module with ``num_partitions * replica_count = N > 1`` is XLA's per-partition program: each device runs it
on its own shards, with its own ``partition-id`` / ``replica-id``, and the collectives exchange data between
the copies. :func:`fusegen.verify.judged_run.run_spmd_module` runs it the same way, on this module's parts:

* **the kernel path**: one :class:`PartitionExecutor` per device, in lockstep (:mod:`fusegen.runtime.lockstep`);
  every fusion runs its generated kernels on that device's operands. The fusions are planned and their
  kernels generated once, for the first device that reaches them; the other devices run the same kernels
  (:class:`~fusegen.runtime.kernel_reuse.KernelReuse` shared), each keeping its own report rows, error
  budgets and events. Collectives, ``partition-id`` and ``replica-id`` (also inside ``while`` /
  ``conditional`` / ``call`` bodies and ``async-start`` wrappers) are exchanged on the host with XLA's N-way
  semantics (:mod:`fusegen.evaluator.collectives`).
* **the reference** (``R``) and **the f64 oracle** (``O``): the reference evaluator on every device, again in
  lockstep, each device's collectives met in the program's precision (``R``) or promoted to f64 (``O``). Both
  run after the kernels, in sequence, reusing each device's fusion references as ``run_module`` does with
  ``--jobs 1``.
* **the verdict** (:mod:`fusegen.verify.judged_run`, above the verdict it composes): on the global outputs
  (each output leaf reassembled from the devices by its sharding, :mod:`fusegen.runtime.spmd_io`), against the
  global ``expected`` too; then each device's outputs are judged on their own, so a replicated output that one
  partition got wrong is not hidden behind partition 0's.

No XLA counterpart as a whole: XLA's ``HloRunner::ExecuteReplicated`` (``xla/service/hlo_runner.cc``) runs the
copies on devices, with one thread per device.
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import numpy as np

from fusegen.evaluator import collectives
from fusegen.evaluator.collectives import (COLLECTIVE_OPCODES, DONE_OPCODES, MultiDeviceUnsupported, done_value,
                                           operand_arrays, start_value)
from fusegen.codegen.collective_kernel import one_shot_declines, one_shot_kernel, run_one_shot
from fusegen.evaluator.collectives_ref import exchange_stacked
from fusegen.evaluator.common import computation_attr, shape_dtype
from fusegen.evaluator.evaluator import CALLS, _coerce_arg, evaluate_instruction
from fusegen.hlo.ir import Computation, Instruction, Module
from fusegen.runtime.executor import Executor, FusionReport, RunReport, interpret
from fusegen.runtime.limits import Budget, ResourceLimitError
from fusegen.runtime.lockstep import Lockstep
from fusegen.runtime.oracles import reusing_reference
from fusegen.evaluator.spmd_plan import SpmdPlan, is_triton_collective
from fusegen.runtime.timings import Timings
from fusegen.evaluator.promote import OracleUnavailable, promote_module, promote_value

__all__ = ["DeviceContext", "KernelCollectives", "PartitionExecutor", "SpmdRunReport", "PartitionFusionReport",
           "merge_rows", "run_spmd_reference"]


def exchange(inst: Instruction, contributions: list, pairs: list | None = None) -> list:
    """The kernel path's host exchange: :func:`fusegen.evaluator.collectives.exchange`, an all-reduce's
    ``to_apply`` run by the evaluator's ``CALLS``."""
    return collectives.exchange(inst, contributions, CALLS, pairs=pairs)


def _wraps_collective(comp: Computation) -> bool:
    return any(i.opcode in COLLECTIVE_OPCODES or i.opcode in ("partition-id", "replica-id")
               for i in comp.instructions)


class DeviceContext:
    """One device of a lockstep run: its ids and the rendezvous (``plan``: the module's collectives).

    ``exchange_fn``: the collectives' semantics (the kernel path's :func:`exchange`;
    the reference and the f64 oracle use :func:`~fusegen.evaluator.collectives_ref.exchange_stacked`).
    """

    def __init__(self, plan: SpmdPlan, device: int, lockstep: Lockstep, exchange_fn: Callable | None = None):
        self.plan, self.device, self.lockstep = plan, device, lockstep
        self.exchange = exchange_fn or exchange
        self.partition, self.replica = plan.partition(device), plan.replica(device)

    def collective(self, inst: Instruction, ops: list) -> Any:
        comp = inst.parent.name if inst.parent is not None else ""
        c = self.plan.collectives.get((comp, inst.name))
        if c is None:
            raise MultiDeviceUnsupported(f"%{inst.name} ({inst.opcode}) in computation %{comp} was not planned")
        group = c.group_of(self.device)
        if group is None:
            raise MultiDeviceUnsupported(f"%{inst.name} ({inst.opcode}): device {self.device} is in no group")
        pos = {d: k for k, d in enumerate(group)}
        pairs = [(pos[s], pos[t]) for s, t in c.pairs if s in pos and t in pos]

        def compute(contributions: list) -> list:
            return self.exchange(inst, contributions, pairs=pairs)

        result = self.lockstep.meet(self.device, (comp, inst.name), list(group), operand_arrays(inst, ops), compute)
        return start_value(inst, ops, result)

    def wrap(self, base: Callable[[Instruction, list], Any], budget: Budget) -> Callable[[Instruction, list], Any]:
        """``base`` (an ``apply`` for :func:`interpret`) with this device's collectives and ids answered here."""
        def apply(inst: Instruction, ops: list) -> Any:
            op = inst.opcode
            if op in COLLECTIVE_OPCODES:
                return self.collective(inst, ops)
            if op in DONE_OPCODES:
                return done_value(inst, ops)
            if op in ("partition-id", "replica-id"):
                return np.asarray(self.partition if op == "partition-id" else self.replica,
                                  dtype=shape_dtype(inst.shape))
            if op == "fusion" and is_triton_collective(inst):  # no emitter yet: its computation, collectives met
                return interpret(computation_attr(inst, "calls"), list(ops), apply, budget)
            if op == "async-start":
                comp = computation_attr(inst, "calls", "to_apply", "async_wrapped_computation")
                if _wraps_collective(comp):
                    result = interpret(comp, list(ops), apply, budget)
                    rest = tuple(np.zeros(tuple(s.dimensions), shape_dtype(s)) for s in inst.shape.tuple_shapes[2:])
                    return (tuple(ops), result) + rest
            return base(inst, ops)

        return apply


class KernelCollectives:
    """The kernel path's exchange: a one-shot all-reduce on its generated Triton kernel over the participants'
    buffers (:mod:`fusegen.codegen.collective_kernel`; compiled for sm_90 once with ``compile_kernels``), every
    other collective on the host (:func:`exchange`). ``info`` says, per
    collective name, ``{"backend", "kernel", "compiled_sm90"}`` or ``{"backend": "host", "reason"}``."""

    def __init__(self, compile_kernels: bool):
        self.compile_kernels = compile_kernels
        self.kernels: dict[tuple, Any] = {}
        self.info: dict[str, dict] = {}

    def __call__(self, inst: Instruction, contributions: list, pairs: list | None = None) -> list:
        why = one_shot_declines(inst)
        if why is not None:
            self.info.setdefault(inst.name, {"backend": "host", "reason": why})
            return exchange(inst, contributions, pairs=pairs)
        key = (inst.parent.name if inst.parent is not None else "", inst.name, len(contributions))
        ks = self.kernels.get(key)
        if ks is None:
            ks = self.kernels[key] = one_shot_kernel(inst, len(contributions))
            info = self.info[inst.name] = {"backend": "triton", "kernel": ks.name, "compiled_sm90": "-"}
            if self.compile_kernels:
                from fusegen.codegen.triton_runtime import compile_for_target

                try:
                    res = compile_for_target(ks)
                    info["compiled_sm90"] = f"ok ({res.cubin_bytes} B cubin)"
                except Exception as e:  # reported with the collective, as a fusion's failed compile is
                    info["compiled_sm90"] = f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        result = run_one_shot(ks, inst, [c[0] for c in contributions])
        return [result for _ in contributions]


def _pristine(rep: FusionReport) -> FusionReport:
    return attrs.evolve(rep, kernels=list(rep.kernels), timings=Timings())


class PartitionExecutor(Executor):
    """An :class:`Executor` for one device of an SPMD run: collectives and device ids go through ``ctx``;
    with ``lead`` (the first device's executor) the fusion plans, generated kernels and kernel-reuse cache
    are the lead's (no second codegen, no second sm_90 compile), the report rows its own."""

    def __init__(self, module: Module, ctx: DeviceContext, lead: "PartitionExecutor | None" = None, **kw: Any):
        super().__init__(module, **kw)
        self.ctx = ctx
        self.plans: dict[int, tuple[Any, FusionReport]] = lead.plans if lead is not None else {}
        if lead is not None:
            self.kernel_reuse = lead.kernel_reuse
            self.compiled_checks = lead.compiled_checks  # each kernel set runs as compiled once for all devices
            self.compile_kernels = False
        self._device_apply = ctx.wrap(super()._apply, self.budget)

    def plan_fusion(self, inst: Instruction) -> tuple[Any, FusionReport]:
        mine = self._emitted.get(id(inst))
        if mine is not None:
            return mine
        hit = self.plans.get(id(inst))
        if hit is None:
            emitted, rep = Executor.plan_fusion(self, inst)
            self.plans[id(inst)] = (emitted, _pristine(rep))
            return emitted, rep
        mine = self._emitted[id(inst)] = (hit[0], _pristine(hit[1]))
        return mine

    def _apply(self, inst: Instruction, ops: list) -> Any:
        return self._device_apply(inst, ops)


@attrs.define
class PartitionFusionReport(FusionReport):
    """A fusion row of an SPMD run: the worst device's figures; ``partition`` names it where devices differ."""

    partition: int | None = None
    partitions: int = 1

    def to_json(self) -> dict:
        d = super().to_json()
        if self.partition is not None:
            d["partition"] = self.partition
        return d


@attrs.define
class SpmdRunReport(RunReport):
    """A :class:`RunReport` of all devices, with the module's devices and collectives."""

    num_partitions: int = 1
    replica_count: int = 1
    collectives: list = attrs.Factory(list)
    output_shardings: list = attrs.Factory(list)
    output_sharding_sources: list = attrs.Factory(list)  # per leaf: LeafSharding.to_json (source, inferred, ...)
    collective_backends: dict = attrs.Factory(dict)  # name -> {"backend", "kernel", "compiled_sm90" | "reason"}
    # fusegen.perf.report.collective_estimates_json: each collective's estimate on its group, and their totals
    collective_estimates: dict = attrs.Factory(dict)
    collective_totals: dict = attrs.Factory(dict)

    def spmd_json(self) -> dict:
        """The ``--json`` keys an SPMD run adds: ``num_partitions``, ``replica_count``, ``collectives``
        (``{"name", "opcode", "groups", "channel_id", "bytes_per_partition", ..., "estimate"}``, the estimate of
        :func:`fusegen.perf.report.collective_estimates_json`), ``output_shardings`` (each
        leaf's sharding text) and ``output_sharding_sources`` (``{"name", "sharding", "source", "from",
        "inferred"[, "note"]}`` per leaf: :mod:`fusegen.runtime.spmd_outputs`)."""
        return {"num_partitions": self.num_partitions, "replica_count": self.replica_count,
                "collectives": [{**c.to_json(), **self.collective_backends.get(c.name, {"backend": "host"}),
                                 "estimate": self.collective_estimates.get(c.name)} for c in self.collectives],
                "output_shardings": list(self.output_shardings),
                "output_sharding_sources": list(self.output_sharding_sources)}

    def collective_lines(self) -> list[str]:
        """One line per collective for the table output."""
        lines = [f"devices: num_partitions={self.num_partitions}, replica_count={self.replica_count}; "
                 f"{len(self.collectives)} collective(s)"]
        for c in self.collectives:
            b = self.collective_backends.get(c.name, {"backend": "host"})
            lines.append(f"  %{c.name} {c.opcode} groups={[list(g) for g in c.groups]} channel_id={c.channel_id} "
                         f"{c.bytes_per_partition} B/partition"
                         + (f" pairs={[list(p) for p in c.pairs]}" if c.pairs else "")
                         + (f" on triton ({b['kernel']}, sm_90 {b['compiled_sm90']})" if b["backend"] == "triton"
                            else " on host"))
        return lines


_RANK = {"error": 3, "mismatch": 2, "pending": 1, "ok": 0}


def merge_rows(executors: list[PartitionExecutor]) -> list[PartitionFusionReport]:
    """One row per fusion of every device's executor: the worst device's (``partition`` names it where the
    devices differ), timings and kernel seconds summed over the devices."""
    names = list(executors[0].reports)
    for ex in executors[1:]:
        names += [n for n in ex.reports if n not in names]
    rows = []
    for name in names:
        reps = [(k, ex.reports[name]) for k, ex in enumerate(executors) if name in ex.reports]
        k, worst = max(reps, key=lambda kr: (_RANK.get(kr[1].status, 1), kr[1].error_budget_ratio or 0.0,
                                             kr[1].max_abs_error or 0.0, -kr[0]))
        differ = len({(r.status, r.max_abs_error, r.error_budget_ratio) for _, r in reps}) > 1
        fields = {f.name: getattr(worst, f.name) for f in attrs.fields(FusionReport)}
        timings = Timings()
        for _, r in reps:
            for ph, s in r.timings.phases.items():
                timings.add(ph, s)
        fields["timings"] = timings
        fields["kernel_seconds"] = sum(r.kernel_seconds for _, r in reps)
        fields["compiled"] = reps[0][1].compiled
        rows.append(PartitionFusionReport(**fields, partition=k if differ else None, partitions=len(reps)))
    return rows


def run_spmd_reference(module: Module, plan: SpmdPlan, args: list[list[Any]], budget: Budget,
                       reuse: list[dict] | None = None, promoted: bool = False) -> list[Any]:
    """Every device's entry value from the reference evaluator (``promoted``: the f64 oracle, one array per
    output leaf per device, or the :class:`OracleUnavailable` saying why there is none).

    Args:
        args: per device, its entry arguments.
        reuse: per device, its executor's fusion references (consumed; see ``reusing_reference``).
    """
    lock = Lockstep(plan.devices)
    params = module.entry.parameters
    if promoted:  # one promoted copy serves every device (only one copy runs at a time)
        try:
            module = promote_module(module)
        except OracleUnavailable as e:
            return [e] * plan.devices

    def one(d: int) -> Any:
        ctx = DeviceContext(plan, d, lock, exchange_stacked)
        b = budget.another_run()
        if not promoted:
            base = reusing_reference(reuse[d]) if reuse is not None else evaluate_instruction
            coerced = [_coerce_arg(p, a, module.filename) for p, a in zip(params, args[d])]
            return interpret(module.entry, coerced, ctx.wrap(base, b), b)
        from fusegen.runtime.inputs import leaves

        try:
            value = interpret(module.entry, [promote_value(a) for a in args[d]], ctx.wrap(evaluate_instruction, b), b)
        except (MultiDeviceUnsupported, ResourceLimitError):
            raise
        except Exception as e:  # as evaluate_promoted: a program the f64 run cannot evaluate has no oracle
            return OracleUnavailable(f"f64 evaluation failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}")
        return [np.asarray(x) for x in leaves(value)]

    return lock.run(one)
