"""``fusegen.explain``: every fusion's kind, decision, emitter, backend and launch, without running anything.

:func:`explain` is the library's ``fusegen explain``; :func:`explain_document` builds its ``--json``
document, :func:`device_summary` the part about the module's devices and collectives.
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs

from fusegen.api.loading import ModuleLike, as_modules, prepare, session


class FusionNotFound(KeyError):
    """``explain(fusion=NAME)`` names no fusion of the module (the message says how many there are)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else ""


@attrs.frozen
class FusionPlan:
    """One fusion as ``explain`` shows it (every key of its ``--json`` row is an attribute).

    Attributes:
        name, kind, decided_by, emitter, backend: as in the table (kind an EmitterFusionKind name).
        plugin, decided_by_plugin: the plugins of the emitter and of the matcher that decided the kind.
        launch: the launch's short text (``grid=64 warps=4``), ``-`` without a kernel.
        launch_dimensions: ``{"grid": [x, y, z], "threads": [x, y, z], "shared_memory_bytes": N}`` or None.
        shared_memory_reason: why ``shared_memory_bytes`` is None (a Triton kernel not compiled), else None.
        reason: why the fusion runs on an execution backend (``""`` when it has a kernel).
        kernels: ``(name, source)`` of its kernels.
        status: ``"error"`` when a plugin failed on the fusion (``reason`` names plugin, callable and fusion;
            the CLI then exits 2), else what planning left (``"ok"``).
        error_budget_ratio, budget, timings: as in ``run`` (nothing ran: ``None``, ``"-"``, planning seconds).
        indexing: the thread-id maps, on the fusion ``explain(fusion=..., indexing=True)`` asked for.
        estimate: fusegen.perf's estimated device time (``{"us", "model", "bound", ...}``: an estimate, not a
            measurement; :meth:`fusegen.perf.FusionEstimate.to_json`).
    """

    name: str
    kind: str
    decided_by: str
    emitter: str
    backend: str
    launch: str
    launch_dimensions: dict | None
    reason: str
    kernels: tuple[tuple[str, str], ...]
    status: str = "ok"
    plugin: str = "-"
    decided_by_plugin: str = "-"
    shared_memory_reason: str | None = None
    error_budget_ratio: float | None = None
    budget: str = "-"
    timings: dict = attrs.field(factory=dict, repr=False, eq=False)
    indexing: dict | None = attrs.field(default=None, repr=False)
    estimate: dict | None = attrs.field(default=None, repr=False, eq=False)


@attrs.frozen
class ExplainResult:
    """What ``fusegen explain --json`` prints, typed (every key of :meth:`to_json` is an attribute).

    Attributes:
        module: the module name (``"a; b"`` for a file of several).
        fusions: one :class:`FusionPlan` per fusion, in execution order.
        library_calls: ``{"name", "target", "backend"}`` of each library custom call outside fusions (backend
            ``"none"`` for a target fusegen has no implementation of).
        unsupported: (property) one line per instruction nothing can run, which ``run`` refuses (exit 4).
        indexing: the thread-id maps of the fusion asked for (``fusion=``, ``indexing=True``), else None.
        passes: the pipeline an unoptimized module went through (``()`` when it came fused).
        num_partitions, replica_count, collectives: the first module's devices and collectives
            (:func:`device_summary`); ``multi_device_refusal`` why ``run`` refuses it, else None.
        rows: ``(fusion instruction, (EmittedFusion | None, FusionReport))`` as the executor planned them.
    """

    module: str
    fusions: tuple[FusionPlan, ...]
    library_calls: tuple[dict, ...]
    indexing: dict | None
    passes: tuple[str, ...]
    rows: tuple = attrs.field(repr=False, eq=False)
    document: dict = attrs.field(repr=False, eq=False)

    @property
    def estimated_us(self) -> dict:
        """The module's estimated device time (``{"us", "fusions_us", "library_calls_us", "device", ...}``)."""
        return dict(self.document["estimated_us"])

    @property
    def num_partitions(self) -> int:
        return self.document["num_partitions"]

    @property
    def replica_count(self) -> int:
        return self.document["replica_count"]

    @property
    def collectives(self) -> list[dict]:
        """``{"name", "opcode", "groups", "bytes_per_partition", ..., "estimate"}`` per collective, ``"estimate"``
        its estimated time on its group (:func:`fusegen.perf.report.collective_estimates_json`)."""
        return list(self.document["collectives"])

    @property
    def multi_device_refusal(self) -> str | None:
        return self.document.get("multi_device_refusal")

    @property
    def unsupported(self) -> list[str]:
        """One line per instruction fusegen has no implementation of (``run`` refuses the module, exit 4):
        ``fusegen has no implementation of custom-call target '...' (instruction %NAME, ...)``."""
        return [u["message"] for u in self.document["unsupported"]]

    @property
    def errors(self) -> list[str]:
        """``fusion %NAME: REASON`` of each fusion a plugin failed on (the CLI prints them and exits 2)."""
        return [f"fusion %{f.name}: {f.reason}" for f in self.fusions if f.status == "error"]

    def to_json(self) -> dict:
        """The ``explain --json`` document (a fresh copy)."""
        import copy

        return copy.deepcopy(self.document)

    def to_dataframe(self) -> Any:
        """One row per fusion (the ``--json`` rows, ``launch_dimensions`` as columns, kernel sources left out).

        Raises:
            ImportError: pandas is not installed.
        """
        from fusegen.api.frames import dataframe

        return dataframe(self.document["fusions"], drop=("kernels", "indexing"))


def plan_fusions(modules: list, device: Any, pm: Any = None) -> tuple[list, list[dict]]:
    """Dispatch and emit every fusion without running anything: ``(rows, library calls)``, rows
    ``(instruction, (EmittedFusion | None, FusionReport))`` in the order ``run`` reports them.

    Raises:
        fusegen.plugin_manager.PluginError, fusegen.dispatch.DispatchError.
    """
    from fusegen.evaluator.evaluator import UnsupportedOpError
    from fusegen.runtime.executor import Executor
    from fusegen.runtime.order import fusions_in_execution_order

    rows, calls = [], []  # library calls (cuBLAS, cuDNN, ...): not fusions, but where a dot or conv went
    for m in modules:
        ex = Executor(m, device, pm=pm, compile_kernels=False)
        rows.extend((inst, ex.plan_fusion(inst)) for inst in fusions_in_execution_order(m))
        fused = {id(i.fused_computation) for c in m.computations for i in c.instructions if i.opcode == "fusion"}
        for comp in m.computations:
            for inst in comp.instructions:
                if inst.opcode == "custom-call" and id(comp) not in fused:
                    try:
                        backend = ex._backend_for(inst).name
                    except UnsupportedOpError:  # explain lists it under "unsupported"; run refuses it (exit 4)
                        backend = "none"
                    calls.append({"name": inst.name, "target": inst.attrs.get("custom_call_target", ""),
                                  "backend": backend})
    return rows, calls


def estimate_module(module: Any, device: Any = None, pm: Any = None) -> Any:
    """Plan every fusion of ``module`` (dispatch and emit, nothing runs) and estimate each, plus its cuBLAS/cuDNN
    calls and, for an SPMD module, its collectives: a :class:`fusegen.perf.ModuleEstimate`
    (:func:`fusegen.perf.estimate_planned` of :func:`plan_fusions`' rows; a module that is not fused yet should go
    through :func:`fusegen.api.prepare` first).

    Raises:
        fusegen.plugin_manager.PluginError, fusegen.dispatch.DispatchError: planning failed.
    """
    from fusegen.device import DEFAULT_DEVICE
    from fusegen.perf.report import estimate_planned

    device = device if device is not None else DEFAULT_DEVICE
    rows, _ = plan_fusions([module], device, pm)
    return estimate_planned(module, rows, device)


def device_summary(module: Any) -> tuple[dict, list[str]]:
    """``explain``'s part for a module's devices: ``({"num_partitions", "replica_count", "collectives": [...],
    "multi_device_refusal"?}, lines)``; the lines are empty for a module of one device without collectives.

    Raises:
        fusegen.hlo.sharding.ShardingError: the module's device counts cannot be read.
    """
    from fusegen.evaluator.collectives import MultiDeviceUnsupported
    from fusegen.hlo.sharding import device_counts
    from fusegen.evaluator.spmd_plan import plan_spmd

    p, r = device_counts(module)
    doc: dict = {"num_partitions": p, "replica_count": r, "collectives": []}
    try:
        plan = plan_spmd(module)
    except MultiDeviceUnsupported as e:
        if p * r == 1:
            return doc, []
        doc["multi_device_refusal"] = str(e)
        return doc, [f"devices: num_partitions={p}, replica_count={r}; `run` refuses it (exit 4): {e}"]
    doc["collectives"] = [c.to_json() for c in plan.collectives.values()]
    if p * r == 1 and not plan.collectives:
        return doc, []
    lines = [f"devices: num_partitions={p}, replica_count={r}; {len(plan.collectives)} collective(s)"]
    for c in plan.collectives.values():
        lines.append(f"  %{c.name} {c.opcode} ({c.mode.replace('_', ' ')}) groups={[list(g) for g in c.groups]} "
                     f"channel_id={c.channel_id} moves {c.bytes_per_partition} B per partition"
                     + (f" pairs={[list(q) for q in c.pairs]}" if c.pairs else ""))
    return doc, lines


def explain_document(modules: list, rows: list, calls: list, fusion_name: str | None = None,
                     indexing: dict | None = None, passes: Sequence[str] = (),
                     smem_reason: dict | None = None, unsupported: Sequence | None = None, device: Any = None) -> dict:
    """The ``explain --json`` document of planned ``rows`` (see :func:`plan_fusions`); ``passes``: the pipeline
    an unoptimized module went through; ``smem_reason``: ``id(fusion) -> why`` its compiled shared memory is
    unknown (:func:`shared_memory_reasons`); ``unsupported``: the instructions nothing runs
    (:func:`fusegen.runtime.support.unsupported_instructions`), the document's ``"unsupported"`` list. Each fusion
    and library call carries fusegen.perf's ``"estimate"`` on ``device`` (default H200) and the document the
    module's ``"estimated_us"`` (:mod:`fusegen.perf.report`; estimates, not measurements); each of the first
    module's ``"collectives"`` its ``"estimate"`` on its device group, and ``"estimated_us"`` their
    ``"collectives_us"`` (the part not hidden under compute is in ``"us"``)."""
    from fusegen.perf.report import collective_estimates_json, library_estimates_json, module_estimate_json
    from fusegen.runtime.run_json import launch_dimensions_json

    # "passes": the pipeline an unoptimized module went through ([] when it came fused)
    out: dict = {"module": "; ".join(m.name for m in modules), "fusions": [], "passes": list(dict.fromkeys(passes))}
    want = fusion_name.lstrip("%") if fusion_name else None
    smem_reason = smem_reason or {}
    for inst, (emitted, rep) in rows:
        d = {k: v for k, v in rep.to_json().items() if k not in ("max_abs_error", "max_rel_error", "status", "compiled_sm90",
                                                            "compiled_program")}  # explain runs no kernel
        d["launch_dimensions"] = launch_dimensions_json(rep) if emitted is not None and emitted.launch else None
        if id(inst) in smem_reason and d["launch_dimensions"] is not None:
            d["launch_dimensions"]["shared_memory_bytes"] = None  # unknown until compiled, never a wrong 0
            d["shared_memory_reason"] = smem_reason[id(inst)]
        if want and inst.name == want:
            d["kernels"] = [{"name": k.name, "source": k.source} for k in rep.kernels]
            if indexing is not None:
                d["indexing"] = indexing
        out["fusions"].append(d)
    lib = {e["name"]: e for m in modules for e in library_estimates_json(m, device)}
    for c in calls:
        if c.get("name") in lib:
            c["estimate"] = {k: v for k, v in lib[c["name"]].items() if k not in ("name", "target")}
    out["library_calls"] = calls
    out["estimated_us"] = module_estimate_json([d.get("estimate") for d in out["fusions"]], list(lib.values()),
                                               getattr(device, "name", "") or "h200")
    # what `run` refuses (exit 4): instructions fusegen has no implementation of (fusegen.runtime.support)
    out["unsupported"] = [{"instruction": u.instruction, "computation": u.computation, "opcode": u.opcode,
                           "target": u.target, "message": str(u)} for u in unsupported or ()]
    out.update(device_summary(modules[0])[0])  # num_partitions, replica_count, collectives
    if out["collectives"]:  # each priced on its group, less what the compute scheduled beside it hides
        rows, totals = collective_estimates_json(modules[0], device, [(d["name"], d.get("estimate"))
                                                                      for d in out["fusions"]], list(lib.values()))
        for c in out["collectives"]:
            c["estimate"] = rows.get(c["name"])
        out["estimated_us"] = module_estimate_json([d.get("estimate") for d in out["fusions"]], list(lib.values()),
                                                   getattr(device, "name", "") or "h200", totals)
    return out


def shared_memory_reasons(rows: list, compile: bool = False) -> dict:
    """``id(fusion) -> why`` for the Triton fusions whose compiled shared memory is not known (not in the
    compile cache; ``compile=True`` compiles them for sm_90 first, as ``explain --compile``); the reason is also
    appended to the fusion report's ``reason``."""
    from fusegen.runtime.compile_jobs import CompileJobs, shared_from_cache

    out = {}
    jobs = CompileJobs() if compile else None
    for inst, (emitted, rep) in rows:
        why = shared_from_cache(rep, inst, emitted.kernels, jobs) if emitted is not None else None
        if why is not None:
            out[id(inst)] = why
            rep.reason = f"{rep.reason}; {why}" if rep.reason else why
    return out


def explain(module: ModuleLike, *, fusion: str | None = None, indexing: bool = False, compile: bool = False,
            device: Any = None, config: Any = None, xla_flags: Sequence[str] = (), passes: Sequence[str] | None = None,
            pm: Any = None) -> ExplainResult:
    """Kind, decision, emitter, backend and launch of every fusion, without running anything (``fusegen explain``).

    Args:
        module: a Module, a list of them, a path or HLO text (:func:`load_all`).
        fusion: a fusion's name (``%`` optional) whose kernels, and with ``indexing`` its thread-id maps
            (``thread_id_to_output_indexing`` / ``thread_id_to_input_indexing`` of its emitter), are included.
        compile: compile Triton fusions' kernels for sm_90 so their launch carries the compiled shared memory
            (``explain --compile``), and estimate each kernel with its sm_90 machine code (SASS statistics).
        passes: the pipeline for an unoptimized module (``--passes``; default ``[pipeline] passes``).
        device, config, xla_flags, pm: see :func:`session`.

    Raises:
        FusionNotFound: (a ``KeyError``) ``fusion`` names no fusion (the message says how many there are).
        ValueError: ``indexing`` without ``fusion``; and what :func:`load_all`, :func:`session`,
            :func:`prepare` and :func:`plan_fusions` raise.
    """
    if indexing and fusion is None:
        raise ValueError("indexing=True needs fusion=NAME")
    modules = as_modules(module)
    s = session(config, device, xla_flags, pm)
    ran = [n for r in prepare(modules, s, passes) if r is not None for n in r.passes]
    rows, calls = plan_fusions(modules, s.device, s.pm)
    smem = shared_memory_reasons(rows, compile)
    if compile:  # the sm_90 machine code is at hand: tensor cores, load width, occupancy, spills in the estimate
        from fusegen.perf.report import apply_machine_code

        apply_machine_code(rows, s.device)
    maps = None
    if fusion is not None:
        inst = next((i for i, _ in rows if i.name == fusion.lstrip("%")), None)
        if inst is None:
            raise FusionNotFound(f"no fusion named {fusion!r} (the module has {len(rows)})")
        if indexing:
            from fusegen.codegen.thread_indexing import fusion_thread_indexing

            maps = fusion_thread_indexing(inst, s.device, s.pm)
    from fusegen.runtime.support import unsupported_instructions

    unsupported = [u for m in modules for u in unsupported_instructions(m, s.pm)]
    doc = explain_document(modules, rows, calls, fusion, maps, ran, smem, unsupported, s.device)
    plans = tuple(FusionPlan(name=rep.name, kind=rep.kind, decided_by=rep.decided_by, emitter=rep.emitter,
                             backend=rep.backend, launch=rep.launch, launch_dimensions=d["launch_dimensions"],
                             reason=rep.reason or "", kernels=tuple((k.name, k.source) for k in rep.kernels),
                             status=rep.status, plugin=rep.plugin, decided_by_plugin=rep.decided_by_plugin,
                             shared_memory_reason=d.get("shared_memory_reason"),
                             error_budget_ratio=d.get("error_budget_ratio"), budget=d.get("budget", "-"),
                             timings=d.get("timings", {}), indexing=d.get("indexing"), estimate=d.get("estimate"))
                  for (_i, (_e, rep)), d in zip(rows, doc["fusions"]))
    return ExplainResult(module=doc["module"], fusions=plans, library_calls=tuple(calls), indexing=maps,
                         passes=tuple(doc["passes"]), rows=tuple(rows), document=doc)
