"""A run judged: the executor runs a module's kernels, the verdict judges its outputs (issue 44: this module
stands above both, so runtime never imports verify).

:func:`run_module` runs one device's module on :class:`~fusegen.runtime.executor.Executor` with the verdict's
:class:`~fusegen.verify.recorder.RunRecorder` subscribed (error budgets, fusion events, near-ties), the module's
reference run and f64 oracle beside or after the kernels (:class:`~fusegen.runtime.oracles.ModuleOracles`), and
judges every output (:func:`~fusegen.verify.verdict.judge_module`). :func:`run_spmd_module` runs every device of
an SPMD module in lockstep (:mod:`fusegen.runtime.spmd`, a recorder per device) and judges the global outputs,
then each device's own.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import attrs
import numpy as np

from fusegen.config.verify_options import VerifyOptions
from fusegen.device import DeviceDescription
from fusegen.evaluator.collectives import MultiDeviceUnsupported, refuse_multi_device
from fusegen.evaluator.evaluator import evaluate_module
from fusegen.evaluator.promote import OracleUnavailable
from fusegen.evaluator.spmd_plan import SpmdPlan, plan_spmd
from fusegen.hlo.ir import Module
from fusegen.perf.report import collective_estimates_json, library_estimates_json
from fusegen.plugin_manager import PluginManager
from fusegen.runtime.executor import Executor, FusionReport, RunReport
from fusegen.runtime.inputs import leaves
from fusegen.runtime.instruction_profile import per_element_notes
from fusegen.runtime.limits import ResourceLimitError, RunLimits, check_module, estimate_peak_bytes
from fusegen.runtime.lockstep import Lockstep
from fusegen.runtime.oracles import ModuleOracles, fits_beside
from fusegen.runtime.sharding_sidecar import stated_shardings
from fusegen.runtime.spmd import (DeviceContext, KernelCollectives, PartitionExecutor, SpmdRunReport, merge_rows,
                                  run_spmd_reference)
from fusegen.runtime.spmd_io import assemble_leaves, split_leaves
from fusegen.runtime.spmd_outputs import resolve_output_shardings, settle, sharding_notes
from fusegen.runtime.support import check_supported
from fusegen.runtime.timings import Timings, module_timings
from fusegen.verify.recorder import RunRecorder
from fusegen.verify.verdict import judge_module

__all__ = ["run_module", "run_spmd_module"]


def run_module(module: Module, args: list[Any], device: DeviceDescription | None = None,
               pm: PluginManager | None = None, compile_kernels: bool = True,
               on_fusion: Callable[[FusionReport], None] | None = None,
               limits: RunLimits | None = None, verify: VerifyOptions | None = None,
               expected: list[np.ndarray] | None = None, jobs: int = 1) -> tuple[Any, RunReport]:
    """Run ``module`` end to end and judge its outputs (:mod:`fusegen.verify.verdict`).

    Args:
        limits: deadline and while iteration budget, applied to both runs.
        verify: budgets, conditioning factor and floors (default :class:`VerifyOptions`).
        expected: a known answer per output leaf (``--expected``), the third oracle.
        jobs: worker processes for the sm_90 compiles (see :class:`~fusegen.runtime.executor.Executor`); with
            ``jobs > 1`` the module's reference run and the f64 oracle also run in a forked process while the
            kernels run (:class:`~fusegen.runtime.oracles.ModuleOracles`; same values, less wall time on two
            cores).

    The reference runs on the same explicit-stack interpreter (:func:`~fusegen.runtime.executor.interpret`) with
    :func:`~fusegen.evaluator.evaluator.evaluate_instruction` for every instruction, so deep ``call`` chains
    need no recursion there either; ``limits`` apply to each run (the same deadline; each its own while
    iterations).

    Returns:
        ``(outputs, RunReport)``; fusions in the report are in entry post order (first execution);
        ``report.verdict`` holds the per-output ``ok`` / ``drift`` / ``mismatch`` and the f64 figures.

    Raises:
        ResourceLimitError: a limit of ``limits`` was passed (deadline, while iterations).
        MultiDeviceUnsupported: a module of more than one device (``num_partitions * replica_count > 1``).
        fusegen.runtime.support.UnsupportedInstructionError: an instruction nothing can run (before any run).
    """
    refuse_multi_device(module, "run_module")  # N devices: run_spmd_module
    t0 = time.perf_counter()
    ex = Executor(module, device, pm, compile_kernels, on_fusion, limits, verify, jobs,
                  observer=RunRecorder(module, verify))  # the verdict's events and near-ties
    check_supported(module, ex.pm)  # before anything runs (fusegen.runtime.support)
    background = jobs > 1 and module.entry is not None and len(args) == len(module.entry.parameters) \
        and fits_beside(module, limits)
    ex.keep_references = not background
    oracles = ModuleOracles(module, args, ex.budget, background).start()
    try:
        try:
            out = ex.run(args)
        finally:
            ex.finish_compiles()
        if len(args) != len(module.entry.parameters):
            evaluate_module(module, args)  # raises the evaluator's one-line error
        with ex.timings.phase("reference"):  # the module's reference run and the verdict's f64 oracle
            ref = oracles.reference(ex.fusion_references)
            ex.fusion_references.clear()
            rec = ex.observer
            verdict = judge_module(module, args, out, ref, rec.events, ex.verify, expected, f64=oracles.f64(),
                                   ties=rec.ties + rec.compare_ties, budget=ex.budget)
    finally:
        oracles.close()
    ok = verdict.status != "mismatch"
    worst = max((o.max_abs_error for o in verdict.outputs), default=0.0)
    fusions = list(ex.reports.values())
    report = RunReport(module.name, fusions, dict(ex.other), ok, worst, time.perf_counter() - t0, verdict,
                       other_instructions=list(ex.other_instructions.values()),
                       timings=module_timings([f.timings for f in fusions], ex.timings),
                       reference_profile=oracles.profile(), per_element=per_element_notes(module),
                       library_estimates=library_estimates_json(module, ex.device))
    return out, report


def run_spmd_module(module: Module, args: list[list[Any]], device: Any = None, pm: Any = None,
                    compile_kernels: bool = True, on_fusion: Callable | None = None, limits: Any = None,
                    verify: Any = None, expected: list[np.ndarray] | None = None,
                    expected_parts: list[list[np.ndarray]] | None = None, jobs: int = 1,
                    plan: SpmdPlan | None = None, stated: Any = None) -> tuple[list[Any], Any, SpmdRunReport]:
    """Run every device of ``module`` (:mod:`fusegen.runtime.spmd`) and judge the global outputs, then each
    device's own.

    Args:
        args: per device (global id ``replica * P + partition``), its entry arguments (its shards).
        expected: the global known answer per output leaf (``--expected OUT.npz``), or
        expected_parts: per partition, its shard of every output leaf (a folder of ``part{K}.expected.npz``).
        jobs: worker processes for the first device's sm_90 compiles.
        stated: the output shardings a capture stated
            (:class:`~fusegen.runtime.sharding_sidecar.StatedShardings`); default: ``NAME.shardings.json``
            beside ``module.filename`` if there is one. Each output leaf's sharding and its source:
            :mod:`fusegen.runtime.spmd_outputs` (an inferred one that makes a mismatch is re-judged with the
            other shardings that fit; ``undetermined`` when none does and no oracle but ``expected`` objects).

    Returns:
        ``(per-device outputs, global outputs as a tuple of leaves or one array, SpmdRunReport)``.

    Raises:
        MultiDeviceUnsupported: an instruction fusegen cannot run as N copies (see :func:`plan_spmd`), or
            copies that diverged at a collective.
        ResourceLimitError: a limit was passed (each copy's own deadline is the run's).
        ShardingError, InputError: an output sharding that does not fit ``expected`` or a sidecar that does not
            fit the module (named).
        fusegen.runtime.support.UnsupportedInstructionError: an instruction nothing can run (before any run).
    """
    t0 = time.perf_counter()
    plan = plan or plan_spmd(module)
    check_supported(module, pm)  # an instruction nothing runs: refused before any copy runs
    n = plan.devices
    if len(args) != n:
        raise MultiDeviceUnsupported(f"module {module.name}: {len(args)} argument lists for {n} devices")
    if limits is not None:
        check_module(module, limits)  # static while trip counts, one copy's memory
        need = estimate_peak_bytes(module) * n
        if need > limits.max_memory:
            raise ResourceLimitError(f"module {module.name} needs an estimated {need / 2**20:.1f} MiB for its {n} "
                                     f"devices, more than the limit of {limits.max_memory / 2**20:.1f} MiB (raise it "
                                     "with --max-memory)")
    lock = Lockstep(n)
    kernels = KernelCollectives(compile_kernels)
    executors: list[PartitionExecutor] = []
    for d in range(n):
        ctx = DeviceContext(plan, d, lock, kernels)
        executors.append(PartitionExecutor(module, ctx, executors[0] if executors else None, device=device, pm=pm,
                                           compile_kernels=compile_kernels, on_fusion=on_fusion if d == 0 else None,
                                           limits=limits, verify=verify, jobs=jobs if d == 0 else 1,
                                           observer=RunRecorder(module, verify)))
    try:
        outs = lock.run(lambda d: executors[d].run(args[d]))
    finally:
        executors[0].finish_compiles()
    lead = executors[0]
    with lead.timings.phase("reference"):
        refs = run_spmd_reference(module, plan, args, lead.budget, reuse=[ex.fusion_references for ex in executors])
        f64s = run_spmd_reference(module, plan, args, lead.budget, promoted=True)
        k_leaves = [leaves(o) for o in outs]
        if stated is None:
            stated = stated_shardings(module)
        given = expected is not None  # a global expected: the sharding splits it per device
        chosen = resolve_output_shardings(module, plan, k_leaves, expected, stated)
        dims = [tuple(np.asarray(e).shape) for e in expected] if given else \
            list(stated.global_shapes) if stated is not None else None
        if not given and expected_parts is not None:  # the parts as the devices hold them: any sharding fits
            expected = assemble_leaves([c.sharding for c in chosen], plan,
                                       [expected_parts[plan.partition(d)] for d in range(n)], dims)
        sides = _Sides(module, plan, outs, refs, f64s, executors, lead.verify)
        verdict = sides.judge([c.sharding for c in chosen], expected, dims)
        if given:
            chosen = settle(chosen, verdict, lambda sh, with_e: sides.judge(sh, expected if with_e else None, dims))
        shardings = [c.sharding for c in chosen]
        verdict.notes = sharding_notes(chosen)
        glob = assemble_leaves(shardings, plan, k_leaves, dims)
    ok = verdict.status != "mismatch"
    worst = max((o.max_abs_error for o in verdict.outputs), default=0.0)
    rows = merge_rows(executors)
    other: dict[str, int] = {}
    other_inst: dict[str, tuple] = {}
    for ex in executors:
        for b, c in ex.other.items():
            other[b] = other.get(b, 0) + c
        for k, v in ex.other_instructions.items():
            other_inst.setdefault(k, v)
    module_level = Timings()
    for ex in executors:
        for ph, s in ex.timings.phases.items():
            module_level.add(ph, s)
    report = SpmdRunReport(module.name, list(rows), other, ok, worst, time.perf_counter() - t0, verdict,
                           other_instructions=list(other_inst.values()),
                           timings=module_timings([f.timings for f in rows], module_level),
                           num_partitions=plan.num_partitions, replica_count=plan.replica_count,
                           collectives=list(plan.collectives.values()), collective_backends=dict(kernels.info),
                           output_shardings=[s.text for s in shardings],
                           output_sharding_sources=[c.to_json(i) for i, c in enumerate(chosen)])
    report.collective_estimates, report.collective_totals = collective_estimates_json(
        module, getattr(executors[0], "device", device), [(f.name, f.estimate) for f in rows])
    g_out = tuple(glob) if module.entry.root.shape.is_tuple else glob[0]
    return outs, g_out, report


_RANK_OUT = {"ok": 0, "drift": 1, "vacuous": 2, "undetermined": 3, "mismatch": 4}


@attrs.define
class _Sides:
    """Every device's kernel outputs, references and f64 oracles, judged (:meth:`judge`) with given output
    shardings: the verdict on the global outputs, then each device's own against its shard of ``expected``."""

    module: Module
    plan: SpmdPlan
    outs: list
    refs: list
    f64s: list
    executors: list
    verify: Any

    def judge(self, shardings: list, expected: list | None, dims: list | None) -> Any:
        plan, module = self.plan, self.module
        glob = assemble_leaves(shardings, plan, [leaves(o) for o in self.outs], dims)
        g_ref = assemble_leaves(shardings, plan, [leaves(r) for r in self.refs], dims)
        bad = next((f for f in self.f64s if isinstance(f, OracleUnavailable)), None)
        g_f64 = bad if bad is not None else assemble_leaves(shardings, plan, self.f64s, dims)
        events = [e for ex in self.executors for e in ex.observer.events]
        verdict = judge_module(module, [], tuple(glob), tuple(g_ref), events, self.verify, expected, f64=g_f64)
        parts = split_leaves(shardings, plan, expected) if expected is not None else None
        for d in range(plan.devices):  # each device judged on its own: a replicated output wrong on one partition
            vd = judge_module(module, [], self.outs[d], self.refs[d], self.executors[d].observer.events,
                              self.verify,
                              parts[d] if parts is not None else None, f64=self.f64s[d])
            for i, o in enumerate(vd.outputs):
                g = verdict.outputs[i]
                if _RANK_OUT[o.status] > _RANK_OUT[g.status]:
                    o.reason = (o.reason + "; " if o.reason else "") + f"partition {plan.partition(d)}" + (
                        f" replica {plan.replica(d)}" if plan.replica_count > 1 else "")
                    verdict.outputs[i] = o
        return verdict
