"""fusegen as a library: load, explain, run and tune HLO modules from Python, with typed results.

::

    import fusegen

    m = fusegen.load("model.hlo")                       # a path, or HLO text
    plan = fusegen.explain(m)                           # ExplainResult: one FusionPlan per fusion
    [(f.name, f.kind, f.emitter) for f in plan.fusions]
    res = fusegen.run(m, inputs={"p0": x}, compile=False)   # RunResult: .status, .outputs, .fusions
    res.to_json() == json.loads(`fusegen run model.hlo --json`)     # the same keys
    tuned = fusegen.tune(m, backends="triton")          # TuneResult: one report per tuned instruction

Each result's ``to_json()`` is what the command's ``--json`` prints (same keys; the CLI builds its JSON with
the same functions: :func:`explain_document`, ``fusegen.cli.run.report_json``). A module that is not fused
yet (no ``fusion`` instruction) goes through the pipeline first, in place, as every command does.

Errors are exceptions, never ``SystemExit``: :class:`fusegen.hlo.errors.HloParseError` (file:line:col),
:class:`LoadError` (unreadable file), :class:`fusegen.runtime.inputs.InputError`,
:class:`fusegen.plugin_manager.PluginError` (names the plugin), :class:`fusegen.config.toml.ConfigError`,
:class:`fusegen.passes.pipeline.PassError`, ``ValueError`` (unknown device).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping, Sequence

import attrs
import numpy as np


ModuleLike = Any  # fusegen.hlo.ir.Module | list[Module] | str (path or HLO text) | pathlib.Path


class LoadError(ValueError):
    """``load`` got a path that cannot be read as text (the message names it)."""


# ------------------------------------------------------------------------------------------------ loading
def _looks_like_text(source: str) -> bool:
    return "\n" in source or source.lstrip().startswith("HloModule")


def load_all(source: str | Path, *, filename: str | None = None) -> list:
    """Every module of an HLO file or text (XLA's tests separate several with ``// -----``).

    Args:
        source: a path (``str`` or ``Path``), or HLO text (a string holding a newline or starting with
            ``HloModule``).
        filename: what error messages call text (default ``<text>``).

    Raises:
        LoadError: the path cannot be read.
        fusegen.hlo.errors.HloParseError: the text does not parse (``FILE:LINE:COL: error: ...``).
    """
    from fusegen.hlo.parser import parse_modules

    if isinstance(source, str) and _looks_like_text(source):
        return parse_modules(source, filename=filename or "<text>")
    path = Path(source)
    try:
        text = path.read_text()
    except OSError as e:
        raise LoadError(f"{path}: {e.strerror or e}") from None
    except UnicodeDecodeError as e:
        raise LoadError(f"{path}: not a text file ({e.reason})") from None
    return parse_modules(text, filename=str(path))


def load(source: str | Path, *, filename: str | None = None):
    """The module of an HLO file or text (:func:`load_all`; a file of several modules gives the first).

    Returns:
        fusegen.hlo.ir.Module
    """
    return load_all(source, filename=filename)[0]


def _modules(module: ModuleLike) -> list:
    if isinstance(module, (str, Path)):
        return load_all(module)
    if isinstance(module, (list, tuple)):
        return list(module)
    return [module]


# ----------------------------------------------------------------------------------- config and devices
@attrs.frozen
class Session:
    """What a call runs with: the resolved configuration, the device and the plugin manager."""

    config: Any  # fusegen.config.loader.ResolvedConfig
    device: Any  # fusegen.device.DeviceDescription
    pm: Any  # fusegen.plugin_manager.PluginManager


def session(config: Any = None, device: Any = None, xla_flags: Sequence[str] = (), pm: Any = None) -> Session:
    """Resolve configuration (a ``fusegen.toml`` path, a ``ResolvedConfig``, or None: searched from the
    working directory as the CLI does, with ``XLA_FLAGS``), ``xla_flags`` (``["name=value"]``), the device (a
    preset name, a ``DeviceDescription``, or None: ``[device] name``, else h200) and the plugin manager (default:
    the process-wide one; a configuration with ``[plugins] enable/disable`` gets a manager of its own, so that
    the selection of one call does not hold for the next).

    Raises:
        fusegen.config.toml.ConfigError, fusegen.plugin_manager.PluginError (also: a plugin was quarantined
        and ``FUSEGEN_STRICT_PLUGINS`` or ``[plugins] strict`` asks for strict mode), ValueError (unknown device).
    """
    from fusegen.config.loader import ResolvedConfig, load_config, read_plugins_table
    from fusegen.device import get_device
    from fusegen.plugin_manager import PluginError, PluginManager, default_plugin_manager, strict_from_env

    opts = config.plugins if isinstance(config, ResolvedConfig) else read_plugins_table(config)
    if pm is None:  # a call's [plugins] enable/disable hold for that call only: never applied to the shared one
        pm = PluginManager(config=opts, lazy=True) if (opts.enable or opts.disable) else default_plugin_manager()
    cfg = config if isinstance(config, ResolvedConfig) else load_config(
        config_path=config, cli_flags=list(xla_flags or ()), pm=pm)
    pm.apply_config(cfg)
    lines = pm.quarantine_lines()
    if lines and (strict_from_env() or cfg.plugins.strict):  # the CLI's exit 2 in strict mode
        raise PluginError(next(iter(pm.broken)), lines[0].split(" ", 2)[2] + " (strict plugins: "
                          "FUSEGEN_STRICT_PLUGINS or [plugins] strict)")
    if device is None or isinstance(device, str):
        name = device or (cfg.device.name if getattr(cfg, "device", None) is not None else None) or "h200"
        device = get_device(name)
    pm.set_context(config=cfg, device=device)  # what every plugin callable's PluginContext says
    return Session(cfg, device, pm)


def prepare(modules: list, s: Session, passes: Sequence[str] | None = None) -> list:
    """Run the pipeline (``passes``, else ``[pipeline] passes``, else the default one; ``[pipeline.options]``)
    on the modules that are not fused yet, in place; per-module pipeline results (``None`` where a module came
    fused).

    Raises:
        fusegen.passes.pipeline.PassError, fusegen.plugin_manager.PluginError.
    """
    from fusegen.passes.pipeline import optimize_if_needed

    pipeline = getattr(s.config, "pipeline", None)
    names = list(passes) if passes is not None else (list(pipeline.passes) if pipeline and pipeline.passes else None)
    return [optimize_if_needed(m, pm=s.pm, debug_options=s.config.debug_options, device=s.device, passes=names,
                               pass_options_by_name=pipeline.options if pipeline else None) for m in modules]


# ----------------------------------------------------------------------------------------------- explain
@attrs.frozen
class FusionPlan:
    """One fusion as ``explain`` shows it (the keys of its ``--json`` row).

    Attributes:
        name, kind, decided_by, emitter, backend: as in the table (kind an EmitterFusionKind name).
        launch: the launch's short text (``grid=64 warps=4``), ``-`` without a kernel.
        launch_dimensions: ``{"grid": [x, y, z], "threads": [x, y, z], "shared_memory_bytes": N}`` or None.
        reason: why the fusion runs on an execution backend (``""`` when it has a kernel).
        kernels: ``(name, source)`` of its kernels.
        status: ``"error"`` when a plugin failed on the fusion (``reason`` names plugin, callable and fusion;
            the CLI then exits 2), else what planning left (``"ok"``).
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


@attrs.frozen
class ExplainResult:
    """What ``fusegen explain --json`` prints, typed.

    Attributes:
        module: the module name (``"a; b"`` for a file of several).
        fusions: one :class:`FusionPlan` per fusion, in execution order.
        library_calls: ``{"name", "target", "backend"}`` of each library custom call outside fusions.
        indexing: the thread-id maps of the fusion asked for (``fusion=``, ``indexing=True``), else None.
        passes: the pipeline an unoptimized module went through (``()`` when it came fused).
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
    def errors(self) -> list[str]:
        """``fusion %NAME: REASON`` of each fusion a plugin failed on (the CLI prints them and exits 2)."""
        return [f"fusion %{f.name}: {f.reason}" for f in self.fusions if f.status == "error"]

    def to_json(self) -> dict:
        """The ``explain --json`` document (a fresh copy)."""
        import copy

        return copy.deepcopy(self.document)


def plan_fusions(modules: list, device: Any, pm: Any = None) -> tuple[list, list[dict]]:
    """Dispatch and emit every fusion without running anything: ``(rows, library calls)``, rows
    ``(instruction, (EmittedFusion | None, FusionReport))`` in the order ``run`` reports them.

    Raises:
        fusegen.plugin_manager.PluginError, fusegen.dispatch.DispatchError.
    """
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
                    calls.append({"name": inst.name, "target": inst.attrs.get("custom_call_target", ""),
                                  "backend": ex._backend_for(inst).name})
    return rows, calls


def explain_document(modules: list, rows: list, calls: list, fusion_name: str | None = None,
                     indexing: dict | None = None, passes: Sequence[str] = (),
                     smem_reason: dict | None = None) -> dict:
    """The ``explain --json`` document of planned ``rows`` (see :func:`plan_fusions`); ``passes``: the pipeline
    an unoptimized module went through; ``smem_reason``: ``id(fusion) -> why`` its compiled shared memory is
    unknown (:func:`shared_memory_reasons`)."""
    from fusegen.cli.run import launch_dimensions_json
    from fusegen.cli.run_spmd import explain_devices

    # "passes": the pipeline an unoptimized module went through ([] when it came fused)
    out: dict = {"module": "; ".join(m.name for m in modules), "fusions": [], "passes": list(dict.fromkeys(passes))}
    want = fusion_name.lstrip("%") if fusion_name else None
    smem_reason = smem_reason or {}
    for inst, (emitted, rep) in rows:
        d = {k: v for k, v in rep.to_json().items() if k not in ("max_abs_error", "max_rel_error", "status", "compiled_sm90")}
        d["launch_dimensions"] = launch_dimensions_json(rep) if emitted is not None and emitted.launch else None
        if id(inst) in smem_reason and d["launch_dimensions"] is not None:
            d["launch_dimensions"]["shared_memory_bytes"] = None  # unknown until compiled, never a wrong 0
            d["shared_memory_reason"] = smem_reason[id(inst)]
        if want and inst.name == want:
            d["kernels"] = [{"name": k.name, "source": k.source} for k in rep.kernels]
            if indexing is not None:
                d["indexing"] = indexing
        out["fusions"].append(d)
    out["library_calls"] = calls
    out.update(explain_devices(modules[0])[0])  # num_partitions, replica_count, collectives
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
            (``explain --compile``).
        passes: the pipeline for an unoptimized module (``--passes``; default ``[pipeline] passes``).
        device, config, xla_flags, pm: see :func:`session`.

    Raises:
        KeyError: ``fusion`` names no fusion (the message lists how many there are); ValueError: ``indexing``
            without ``fusion``; and what :func:`load_all`, :func:`session`, :func:`prepare` and
            :func:`plan_fusions` raise.
    """
    if indexing and fusion is None:
        raise ValueError("indexing=True needs fusion=NAME")
    modules = _modules(module)
    s = session(config, device, xla_flags, pm)
    ran = [n for r in prepare(modules, s, passes) if r is not None for n in r.passes]
    rows, calls = plan_fusions(modules, s.device, s.pm)
    smem = shared_memory_reasons(rows, compile)
    maps = None
    if fusion is not None:
        inst = next((i for i, _ in rows if i.name == fusion.lstrip("%")), None)
        if inst is None:
            raise KeyError(f"no fusion named {fusion!r} (the module has {len(rows)})")
        if indexing:
            from fusegen.codegen.thread_indexing import fusion_thread_indexing

            maps = fusion_thread_indexing(inst, s.device, s.pm)
    doc = explain_document(modules, rows, calls, fusion, maps, ran, smem)
    plans = tuple(FusionPlan(name=rep.name, kind=rep.kind, decided_by=rep.decided_by, emitter=rep.emitter,
                             backend=rep.backend, launch=rep.launch, launch_dimensions=d["launch_dimensions"],
                             reason=rep.reason or "", kernels=tuple((k.name, k.source) for k in rep.kernels),
                             status=rep.status)
                  for (_i, (_e, rep)), d in zip(rows, doc["fusions"]))
    return ExplainResult(module=doc["module"], fusions=plans, library_calls=tuple(calls), indexing=maps,
                         passes=tuple(doc["passes"]), rows=tuple(rows), document=doc)


# --------------------------------------------------------------------------------------------------- run
@attrs.frozen
class RunResult:
    """What ``fusegen run --json`` prints, typed.

    Attributes:
        module: the module name (``"a; b"`` for several).
        status: ``ok``, ``drift`` or ``mismatch`` (of every module), or ``error`` when a plugin failed on a
            fusion (:attr:`errors`; the CLI's exit 2): that fusion ran on the host, so outputs judge nothing of it.
        ok: the exit status would be 0 (``ok`` or ``drift``, and no plugin failed: :attr:`errors`).
        outputs: the kernel path's outputs of the first module (a numpy array, or a tuple for tuple roots).
        fusions: every fusion's :class:`~fusegen.runtime.executor.FusionReport` (kind, emitter, backend,
            launch, ``max_abs_error``, ``status`` ...), all modules.
        reports: one :class:`~fusegen.runtime.executor.RunReport` per module.
    """

    module: str
    status: str
    ok: bool
    outputs: Any = attrs.field(repr=False, eq=False)
    fusions: tuple = attrs.field(repr=False)
    reports: tuple = attrs.field(repr=False, eq=False)

    @property
    def errors(self) -> list[str]:
        """``fusion %NAME: REASON`` of each fusion a plugin failed on (matcher, factory, ``emit``, a kernel that
        does not load or compile; the reason names the plugin): the CLI prints the rows, then these, exit 2."""
        return [f"fusion %{f.name}: {f.reason}" for f in self.fusions if f.status == "error"]

    def to_json(self) -> dict:
        """The ``run --json`` document (``fusegen.cli.run.report_json``)."""
        from fusegen.cli.run import report_json

        return report_json(list(self.reports))


def inputs_for(module: Any, inputs: Any = None, seed: int = 0) -> list:
    """Entry arguments of ``module``: seeded random ones (``inputs=None``; index operands in range), an ``.npz``
    path, a sequence (parameter order) or a mapping keyed ``p0``, ``p1`` ... or by parameter name. Checked as
    the CLI checks an ``.npz`` (:func:`fusegen.runtime.inputs.check_array`): a numpy array must have the
    parameter's shape and dtype (no silent cast); a Python number or list takes the parameter's type.

    Raises:
        fusegen.runtime.inputs.InputError: a parameter is missing, a key names no parameter, or an array has
            the wrong shape or dtype (named).
    """
    from fusegen.hlo import dtypes
    from fusegen.runtime.inputs import (InputError, check_array, check_keys, from_npz_dtype, load_inputs,
                                        make_inputs)

    if inputs is None:
        return make_inputs(module, seed)
    if isinstance(inputs, (str, Path)):
        return load_inputs(module, inputs)
    params = sorted(module.entry.parameters, key=lambda p: p.parameter_number)
    where = f"module {module.name}"
    if isinstance(inputs, Mapping):
        check_keys(where, params, inputs)
        missing = [f"p{p.parameter_number} (%{p.name})" for p in params
                   if f"p{p.parameter_number}" not in inputs and p.name not in inputs]
        if missing:
            raise InputError(f"module {module.name}: no input for parameter {', '.join(missing)}")
        values = [inputs[f"p{p.parameter_number}"] if f"p{p.parameter_number}" in inputs else inputs[p.name]
                  for p in params]
    else:
        values = list(inputs)
        if len(values) != len(params):
            raise InputError(f"module {module.name}: {len(values)} inputs for {len(params)} parameters")
    out = []
    for p, v in zip(params, values):
        if p.shape.is_tuple:
            out.append(v)
            continue
        key = f"p{p.parameter_number}"
        if isinstance(v, np.ndarray) or isinstance(v, np.generic):  # typed: its dtype must be the parameter's
            out.append(from_npz_dtype(np.asarray(v), check_array(where, key, p, np.shape(v), np.asarray(v).dtype)))
            continue
        arr = np.asarray(v)  # a Python number or list carries no type: it takes the parameter's
        check_array(where, key, p, arr.shape, dtypes.numpy_dtype(p.shape.element_type))
        out.append(arr.astype(dtypes.numpy_dtype(p.shape.element_type)))
    return out


def _devices(module: Any) -> int:
    from fusegen.hlo.sharding import device_counts

    p, r = device_counts(module)
    return p * r


def _run_spmd(m: Any, inputs: Any, seed: int, s: Any, compile: bool, limits: Any, verify: Any, expected: Any,
              jobs: int) -> tuple[Any, Any]:
    """A module of N devices: ``inputs`` are the global arrays (or an ``.npz`` / a folder of
    ``part{K}.inputs.npz``), split by the parameters' shardings; the outputs are global."""
    from fusegen.runtime.spmd import run_spmd_module
    from fusegen.runtime.spmd_io import load_spmd_inputs, seeded_inputs, split_inputs
    from fusegen.runtime.spmd_plan import plan_spmd

    plan = plan_spmd(m)
    if inputs is None:
        args = seeded_inputs(m, plan, seed)
    elif isinstance(inputs, (str, Path)):
        args = load_spmd_inputs(m, plan, inputs)
    else:
        args = split_inputs(m, plan, [np.asarray(a) for a in inputs], "inputs")
    _, out, rep = run_spmd_module(m, args, s.device, pm=s.pm, compile_kernels=compile, limits=limits, verify=verify,
                                  expected=expected, jobs=jobs, plan=plan)
    return out, rep


def run(module: ModuleLike, *, inputs: Any = None, seed: int = 0, expected: Any = None, device: Any = None,
        config: Any = None, xla_flags: Sequence[str] = (), compile: bool = True, rtol: float | None = None,
        atol: float | None = None, limits: Any = None, jobs: int = 1, passes: Sequence[str] | None = None,
        pm: Any = None) -> RunResult:
    """Run every fusion's kernel (Triton's interpreter on a CPU) and judge the outputs (``fusegen run``).

    Args:
        module: a Module, a list of them, a path or HLO text (:func:`load_all`).
        inputs: see :func:`inputs_for` (one module); ``seed`` seeds random ones. A module of N > 1 devices
            (``num_partitions * replica_count``) runs as all of them: ``inputs`` are then the global arrays
            (or an ``.npz`` of them, or a folder of ``part{K}.inputs.npz``), the outputs and ``expected``
            global; refusals raise :class:`fusegen.evaluator.collectives.MultiDeviceUnsupported`.
        expected: a known answer per output leaf (arrays, or an ``.npz`` of ``o0``, ``o1`` ...), the third oracle.
        compile: also compile every kernel for sm_90 (the CLI's default; ``--no-compile`` is ``False``).
        rtol, atol: ``--rtol`` / ``--atol`` (the conditioning factor and the floor of every type).
        limits: a :class:`fusegen.runtime.limits.RunLimits` (default: half the machine's memory, no deadline).
        jobs: compile workers (``--jobs``).
        passes: the pipeline for an unoptimized module (``--passes``; default ``[pipeline] passes``).
        device, config, xla_flags, pm: see :func:`session`.

    Raises:
        fusegen.runtime.limits.ResourceLimitError: a limit was passed; InputError (inputs), and what
            :func:`load_all`, :func:`session` and :func:`prepare` raise; a plugin quarantined at load in strict
            mode is a :class:`~fusegen.plugin_manager.PluginError` naming it. A plugin failing on a fusion
            (matcher, factory, ``emit``, kernel load/run/compile) raises nothing: the result's ``status`` is
            ``"error"`` and :attr:`RunResult.errors` names it (the CLI prints the rows and exits 2).
    """
    from fusegen.runtime.executor import combined_status, run_module
    from fusegen.runtime.inputs import InputError, leaves
    from fusegen.runtime.limits import RunLimits, check_module, default_max_memory

    modules = _modules(module)
    if (inputs is not None or expected is not None) and len(modules) > 1:
        raise InputError(f"{len(modules)} modules: inputs and expected need a single module")
    s = session(config, device, xla_flags, pm)
    prepare(modules, s, passes)
    verify = s.config.verify.with_overrides(rtol, atol)
    limits = limits if limits is not None else RunLimits(max_memory=default_max_memory())
    if isinstance(expected, (str, Path)):
        from fusegen.verify.verdict import load_expected

        types = [t.element_type for t in modules[0].entry.root.shape.leaves()]
        expected = load_expected(str(expected), len(types), types=types)
    elif expected is not None:
        expected = [np.asarray(x) for x in leaves(expected if isinstance(expected, tuple) else tuple(expected))]
    reports, outputs = [], []
    for m in modules:
        if _devices(m) > 1:  # every partition x replica, global inputs and outputs (fusegen.runtime.spmd)
            out, rep = _run_spmd(m, inputs, seed, s, compile, limits, verify, expected, jobs)
            reports.append(rep)
            outputs.append(out)
            continue
        check_module(m, limits)
        out, rep = run_module(m, inputs_for(m, inputs, seed), s.device, pm=s.pm, compile_kernels=compile,
                              limits=limits, verify=verify, expected=expected, jobs=jobs)
        reports.append(rep)
        outputs.append(out)
    result = RunResult(module="; ".join(r.module for r in reports), status=combined_status(r.status for r in reports),
                       ok=all(r.ok for r in reports), outputs=outputs[0],
                       fusions=tuple(f for r in reports for f in r.fusions), reports=tuple(reports))
    return result


# -------------------------------------------------------------------------------------------------- tune
@attrs.frozen
class TuneResult:
    """What ``fusegen tune --json`` prints, typed.

    Attributes:
        module: the first module's file name (the CLI's first path).
        modules: every module's file name.
        instructions: one :class:`~fusegen.autotuning.instructions.InstructionReport` per tuned instruction
            (``name``, ``winner``, ``configs``, ``error`` ...).
        cache: the autotune cache's counters.
        tuned_modules: the modules, with the winners applied to their backend configs.
    """

    module: str
    modules: tuple[str, ...]
    instructions: tuple
    cache: dict
    tuned_modules: tuple = attrs.field(repr=False, eq=False)

    @property
    def ok(self) -> bool:
        """Every instruction got a config (``tune``'s exit 0)."""
        return not any(r.error for r in self.instructions)

    def to_json(self) -> dict:
        return {"module": self.module, "modules": list(self.modules),
                "instructions": [r.to_json() for r in self.instructions], "cache": dict(self.cache)}


def tune(module: ModuleLike, *, backends: str | None = None, level: int | None = None, cache_dir: str | None = None,
         retune: bool = False, workers: int | None = 0, cost_model_top_k: int | None = None,
         record_dir: str | None = None, device: Any = None, config: Any = None, xla_flags: Sequence[str] = (),
         pm: Any = None) -> TuneResult:
    """Autotune every instruction that needs a config with the plugins' codegen backends (``fusegen tune``);
    the winners are applied to the modules' backend configs in place.

    Args:
        backends: ``xla_gpu_experimental_autotune_backends`` (``"triton"``, ``"+a,-b"``).
        level, cache_dir, retune, cost_model_top_k, record_dir: as ``tune``'s options.
        workers: compile worker processes (0, the default here: compile in this process).

    Raises:
        fusegen.autotuning.selection.AutotuneError; ValueError (bad options or no codegen backend); and what
            :func:`load_all`, :func:`session` and :func:`prepare` raise.
    """
    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner, discover_backends

    modules = _modules(module)
    s = session(config, device, xla_flags, pm)
    prepare(modules, s)
    overrides: dict = {"retune_configured": True} if retune else {}
    for key, v in (("xla_gpu_per_fusion_autotune_cache_dir", cache_dir), ("xla_gpu_autotune_level", level),
                   ("xla_gpu_experimental_autotune_backends", backends), ("compile_workers", workers),
                   ("cost_model_top_k", cost_model_top_k)):
        if v is not None:
            overrides[key] = v
    options = AutotuneOptions.from_debug_options(s.config.debug_options, **overrides)
    found = discover_backends(s.pm)
    if not found:
        raise ValueError("no codegen backends are registered (plugins contribute them through the "
                         "fusegen_codegen_backends hook)")
    reports: list = []
    with Autotuner(found, options, s.device, record_dir=record_dir) as tuner:
        for m in modules:
            reports.extend(tuner.tune_module(m, raise_on_error=False))
        stats = dict(tuner.cache.stats)
    names = tuple(str(m.filename or m.name) for m in modules)
    return TuneResult(module=names[0], modules=names, instructions=tuple(reports), cache=stats,
                      tuned_modules=tuple(modules))
