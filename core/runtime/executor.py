"""Running a module's entry computation: kernels for fusions, backends for everything else.

The executor walks the entry computation in program order. A ``fusion`` goes through analysis,
dispatch (:mod:`fusegen.dispatch`), emitter construction and kernel generation, and its kernels run
on numpy buffers in Triton's interpreter; each fusion's outputs are compared with the reference
evaluator on the same operands. ``while``, ``conditional`` and ``call`` bodies are run by the
executor too, so their fusions get kernels like any other. Every other instruction, and every
fusion whose kind has no emitter, runs on the first execution backend that accepts it (the host
backend in the end) and is reported as such. A fusion whose autotuned winner names an execution
backend (:mod:`fusegen.codegen.tuned_backend`, e.g. the host backend beating every Triton config)
runs on that backend, decided by ``autotuner``.

Mirrors the role of XLA's ``ThunkEmitter`` + ``GpuExecutable`` (``xla/service/gpu/thunk_emitter.cc``):
a sequence of kernel / library / copy thunks.
"""

from __future__ import annotations

import time
from typing import Any, Callable

import attrs
import numpy as np

from fusegen import dispatch
from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.codegen.interpreter_patches import TritonInternalsError
from fusegen.codegen.kernel import EmittedFusion
from fusegen.codegen.kernel_dir import KernelDirError
from fusegen.codegen.tuned_backend import tuned_execution_backend
from fusegen.device import DeviceDescription, get_device
from fusegen.evaluator.evaluator import UnsupportedOpError, evaluate_instruction
from fusegen.hlo.ir import Computation, Instruction, Module, Shape
from fusegen.perf.report import fusion_estimate_json
from fusegen.plugin_manager import PluginError, PluginManager, default_plugin_manager
from fusegen.runtime.observer import FusionObserver
from fusegen.config.verify_options import VerifyOptions
from fusegen.runtime.compile_jobs import CompileJobs, apply_compiled_shared
from fusegen.runtime.compiled_program import CompiledTrace
from fusegen.runtime.kernel_reuse import KernelReuse
from fusegen.runtime.limits import Budget, RunLimits
from fusegen.runtime.plugin_failures import check_compiled, compile_failure, kernel_failure, refuse_over_limits
from fusegen.runtime.timings import MODULE_PHASES, Timings

_CONTROL_FLOW = frozenset(["call", "while", "conditional"])


class _Frame:
    """One activation of a computation on the interpreter's stack."""

    __slots__ = ("comp", "args", "order", "i", "values", "cont")

    def __init__(self, comp: Computation, args: list[Any], order: list[Instruction], cont: tuple | None):
        self.comp, self.args, self.order, self.cont = comp, args, order, cont
        self.i = 0
        self.values: dict[int, Any] = {}


def _branch(inst: Instruction, ops: list[Any]) -> tuple[Computation, list[Any]]:
    """The branch a ``conditional`` takes and its argument (XLA: an out-of-range index takes the last)."""
    branches = inst.attrs.get("branch_computations")
    sel = np.asarray(ops[0])
    if branches is None:
        branches = [inst.attrs["true_computation"], inst.attrs["false_computation"]]
        idx = 0 if bool(sel) else 1
    else:
        if isinstance(branches, Computation):
            branches = [branches]
        idx = int(sel)
        if idx < 0 or idx >= len(branches):
            idx = len(branches) - 1
    return branches[idx], [ops[idx + 1]]


def interpret(comp: Computation, args: list[Any], apply: Callable[[Instruction, list[Any]], Any],
              budget: Budget | None = None) -> Any:
    """Run ``comp`` on ``args`` without recursing per ``call``/``while``/``conditional`` level.

    Every other instruction is handed to ``apply(inst, operand_values)`` (a kernel run, an execution
    backend, or the reference evaluator). Called computations are pushed on an explicit stack, so a chain
    of thousands of nested ``call`` s needs no Python recursion. ``budget`` counts while iterations and
    watches the deadline.

    Raises:
        ResourceLimitError: from ``budget``.
    """
    budget = budget or Budget(None)
    orders: dict[int, list[Instruction]] = {}

    def frame(c: Computation, a: list[Any], cont: tuple | None) -> _Frame:
        order = orders.get(id(c))
        if order is None:
            order = orders[id(c)] = c.post_order()
        return _Frame(c, a, order, cont)

    stack = [frame(comp, list(args), None)]
    while True:
        f = stack[-1]
        if f.i == len(f.order):
            result = f.values[id(f.comp.root)]
            stack.pop()
            cont = f.cont
            if cont is None:
                return result
            parent = stack[-1]
            kind, inst = cont[0], cont[1]
            if kind == "value":
                parent.values[id(inst)] = result
                parent.i += 1
            elif kind == "cond":  # result: the loop predicate for state cont[2]
                if bool(np.asarray(result).reshape(())):
                    budget.iteration(inst)
                    stack.append(frame(inst.attrs["body"], [cont[2]], ("body", inst)))
                else:
                    parent.values[id(inst)] = cont[2]
                    parent.i += 1
            else:  # "body": result is the next loop state
                stack.append(frame(inst.attrs["condition"], [result], ("cond", inst, result)))
            continue
        inst = f.order[f.i]
        if inst.opcode == "parameter":
            f.values[id(inst)] = f.args[inst.parameter_number]
            f.i += 1
            continue
        budget.step(inst)
        ops = [f.values[id(o)] for o in inst.operands]
        op = inst.opcode
        if op == "call":
            stack.append(frame(inst.attrs["to_apply"], ops, ("value", inst)))
        elif op == "while":
            stack.append(frame(inst.attrs["condition"], [ops[0]], ("cond", inst, ops[0])))
        elif op == "conditional":
            branch, bargs = _branch(inst, ops)
            stack.append(frame(branch, bargs, ("value", inst)))
        else:
            f.values[id(inst)] = apply(inst, ops)
            f.i += 1


def interpret_instruction(inst: Instruction, ops: list[Any], apply: Callable[[Instruction, list[Any]], Any],
                          budget: Budget | None = None) -> Any:
    """Run one instruction (control flow included) through :func:`interpret` on a one-instruction frame."""
    if inst.opcode not in _CONTROL_FLOW:
        return apply(inst, ops)
    holder = Computation(name=f"{inst.name}.frame")
    params = [Instruction(name=f"arg{k}", opcode="parameter", shape=o.shape, attrs={"parameter_number": k})
              for k, o in enumerate(inst.operands)]
    clone = Instruction(name=inst.name, opcode=inst.opcode, shape=inst.shape, operands=params, attrs=inst.attrs)
    for p in params:
        holder.instructions.append(p)
    holder.instructions.append(clone)
    holder.root = clone
    return interpret(holder, ops, apply, budget)


@attrs.define
class FusionReport:
    """One row of ``fusegen run``: what ran a fusion and how its output compared.

    ``launch`` is ``"grid=AxB warps=N"`` or ``"-"`` (no kernel); errors are ``None`` until compared.
    ``status``: ``ok``, ``mismatch``, or ``error`` (with ``reason``): a plugin failed on this fusion (a matcher
    or factory raised or answered nonsense, ``emit`` raised, the kernel did not load, run or compile). ``plugin``
    names the plugin whose emitter made the kernel (else the one whose matcher decided the kind);
    ``decided_by_plugin`` the matcher's.
    """

    name: str
    kind: str = "-"
    decided_by: str = "-"
    emitter: str = "-"
    backend: str = "-"
    launch: str = "-"
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    status: str = "pending"
    reason: str = ""
    kernel_seconds: float = 0.0
    compiled: str = "-"
    error_budget_ratio: float | None = None  # worst error / budget (fusegen.verify.budget)
    budget: str = "-"  # lowest-precision type on the path and reduction size, e.g. "bf16 K=4096"
    kernels: list[Any] = attrs.field(factory=list, repr=False)
    timings: Timings = attrs.field(factory=Timings, repr=False, eq=False)  # fusegen.runtime.timings
    plugin: str = "-"
    decided_by_plugin: str = "-"
    estimate: dict | None = attrs.field(default=None, eq=False)  # fusegen.perf's estimated device time (JSON)
    # its kernels run as compiled against the judged run (fusegen.runtime.compiled_program); None: no kernel ran
    compiled_program: Any = attrs.field(default=None, eq=False)

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in
             ("name", "kind", "decided_by", "emitter", "backend", "launch", "max_abs_error", "max_rel_error", "status")}
        d["plugin"], d["decided_by_plugin"] = self.plugin, self.decided_by_plugin
        if self.reason:
            d["reason"] = self.reason
        d["compiled_sm90"] = self.compiled
        d["error_budget_ratio"], d["budget"] = self.error_budget_ratio, self.budget
        d["timings"] = self.timings.to_json()
        if self.estimate is not None:
            d["estimate"] = self.estimate
        d["compiled_program"] = self.compiled_program.to_json() if self.compiled_program is not None else None
        return d

    @property
    def compiled_sm90(self) -> str:
        """``to_json()``'s name for :attr:`compiled`: ``"ok"``, ``"-"`` (not compiled) or ``"failed: ..."``."""
        return self.compiled

    @property
    def launch_dimensions(self) -> dict | None:
        """The launch of the kernel ``launch`` names: ``{"grid": [x, y, z], "threads": [x, y, z],
        "shared_memory_bytes": N}`` (bytes), ``None`` without a kernel. A Triton fusion that was not compiled for
        sm_90 has no known shared memory: ``None`` there, never a placeholder 0 (:attr:`shared_memory_reason`)."""
        from fusegen import kinds
        from fusegen.runtime.run_json import launch_dimensions_json

        d = launch_dimensions_json(self)
        if d is not None and self.kind == kinds.TRITON and self.compiled != "ok":
            d["shared_memory_bytes"] = None
        return d

    @property
    def shared_memory_reason(self) -> str | None:
        """Why :attr:`launch_dimensions` has no shared memory (a Triton kernel not compiled), else ``None``."""
        from fusegen import kinds

        if not self.kernels or self.kind != kinds.TRITON or self.compiled == "ok":
            return None
        return ("not compiled for sm_90 (--no-compile): the shared memory of a Triton kernel is known after its "
                "compile" if self.compiled == "-" else f"sm_90 compile {self.compiled}")


@attrs.define
class RunReport:
    module: str
    fusions: list[FusionReport]
    other: dict[str, int]
    outputs_ok: bool = True
    output_max_abs_error: float = 0.0
    seconds: float = 0.0
    verdict: Any = None  # fusegen.verify.verdict.ModuleVerdict
    # each non-fusion instruction sent to an execution backend, first execution order: (name, opcode, backend)
    other_instructions: list[tuple[str, str, str]] = attrs.Factory(list)
    timings: Timings = attrs.field(factory=Timings, repr=False, eq=False)  # module total, fusions included
    # seconds per instruction of the module's reference run and f64 oracle, and the instructions whose
    # computation runs per element (fusegen.runtime.instruction_profile; run --profile)
    reference_profile: dict = attrs.field(factory=dict, repr=False, eq=False)
    per_element: list = attrs.field(factory=list, repr=False, eq=False)
    library_estimates: list = attrs.field(factory=list, repr=False, eq=False)  # fusegen.perf.report

    def timings_json(self) -> dict[str, float]:
        """``{"parse", "passes", "dispatch", ..., "other", "seconds"}`` (see :mod:`fusegen.runtime.timings`)."""
        return self.timings.to_json(MODULE_PHASES, self.seconds + self.timings.get("parse") + self.timings.get("passes"))

    @property
    def ok(self) -> bool:
        """Every fusion and output matched (``ok`` or ``drift``); a ``vacuous`` output (all NaN/inf on both
        sides, nothing compared) is not a pass unless ``[verify] allow_vacuous`` made it ``drift``; nor is an
        ``undetermined`` one (an SPMD output whose inferred sharding cannot be told from a mismatch)."""
        return self.outputs_ok and all(f.status == "ok" for f in self.fusions) and \
            (self.verdict is None or self.verdict.status not in ("vacuous", "undetermined"))

    @property
    def plugin_errors(self) -> list[dict[str, str]]:
        """``{"fusion", "plugin", "reason"}`` of each fusion a plugin failed on (its row has ``status="error"``)."""
        return [{"fusion": f.name, "plugin": f.plugin, "reason": f.reason} for f in self.fusions if f.status == "error"]

    @property
    def status(self) -> str:
        """``error`` (a plugin failed on a fusion: :attr:`plugin_errors`; its outputs say nothing of the
        plugin's kernel), ``ok``, ``drift`` (outputs as accurate as the reference vs the f64 oracle) or
        ``mismatch``."""
        if self.plugin_errors:
            return "error"
        if not (self.outputs_ok and all(f.status == "ok" for f in self.fusions)):
            return "mismatch"
        return self.verdict.status if self.verdict is not None else "ok"


def combined_status(statuses) -> str:
    """The status of several modules: the worst of ``error`` > ``mismatch`` > ``undetermined`` > ``vacuous`` >
    ``drift`` > ``ok``."""
    statuses = set(statuses)
    return next((s for s in ("error", "mismatch", "undetermined", "vacuous", "drift") if s in statuses), "ok")


def _unflatten(shape: Shape, flat: list[np.ndarray]) -> Any:
    it = iter(flat)

    def build(s: Shape) -> Any:
        if s.is_tuple:
            return tuple(build(t) for t in s.tuple_shapes)
        v = np.asarray(next(it))
        # kernels hand back buffers; a scalar output must be a 0-d array like the reference's
        return v.reshape(s.dimensions) if v.size == s.numel else v

    return build(shape)


class Executor:
    """Runs a module on numpy values.

    Args:
        module: the parsed module (fusions already formed).
        device: the device description dispatch and emitters see (default H200).
        pm: plugin manager (default: the process-wide one).
        compile_kernels: also compile every generated kernel for sm_90 (``triton.compile`` with a
            ``GPUTarget("cuda", 90, 32)``), recording success in the report.
        on_fusion: progress callback, called after each fusion with its report.
        limits: deadline and while iteration budget (:class:`~fusegen.runtime.limits.RunLimits`); default
            no deadline and :data:`~fusegen.runtime.limits.DEFAULT_MAX_WHILE_ITERATIONS`.
        verify: error budgets and floors (:class:`fusegen.config.verify_options.VerifyOptions`; default ones).
        jobs: worker processes for the sm_90 compiles (:class:`~fusegen.runtime.compile_jobs.CompileJobs`):
            ``1`` compiles each fusion as it first runs; more compile in the background, and
            :meth:`finish_compiles` fills in ``compiled`` (and a failed compile's status).
        observer: who hears of each execution (:class:`~fusegen.runtime.observer.FusionObserver`: the reference
            on the kernel path's operands, the kernel's outputs, each compared fusion). Default a plain
            :class:`~fusegen.runtime.observer.FusionObserver`, which judges nothing: a compared fusion is ``ok``
            with no errors or budget. Pass the verdict's :class:`~fusegen.verify.recorder.RunRecorder` (as
            :func:`fusegen.verify.judged_run.run_module` does) for error budgets, events and near-ties.
    """

    def __init__(self, module: Module, device: DeviceDescription | None = None, pm: PluginManager | None = None,
                 compile_kernels: bool = True, on_fusion: Callable[[FusionReport], None] | None = None,
                 limits: RunLimits | None = None, verify: VerifyOptions | None = None, jobs: int = 1,
                 observer: FusionObserver | None = None):
        self.module = module
        self.budget = Budget(limits)
        self.device = device or get_device("h200")
        self.pm = pm or default_plugin_manager()
        self.compile_kernels = compile_kernels
        self.on_fusion = on_fusion
        self.reports: dict[str, FusionReport] = {}
        self.other: dict[str, int] = {}
        self.other_instructions: dict[str, tuple[str, str, str]] = {}  # name -> (name, opcode, backend)
        self._emitted: dict[int, tuple[Any, FusionReport]] = {}
        self.verify = verify or VerifyOptions()
        self.observer = observer if observer is not None else FusionObserver()
        self.timings = Timings()  # module-level phases outside fusions (fusegen.runtime.timings)
        self.compiles = CompileJobs(jobs)
        self.kernel_reuse = KernelReuse()  # identical fusions run the first one's kernels
        # id(the EmittedFusion that ran) -> (fusion, CompiledProgramCheck): each kernel set is checked once
        self.compiled_checks: dict[int, tuple[str, Any]] = {}
        self._pending: list[tuple[FusionReport, tuple, bool]] = []
        # id(fusion) -> (operands, reference value) of its latest execution, for run_module's reference run
        # in sequence (off when that run happens beside the kernels: fusegen.runtime.oracles)
        self.fusion_references: dict[int, tuple[list[Any], Any]] = {}
        self.keep_references = True

    # -- planning (no execution): used by `fusegen explain` too ---------------------------------------
    def plan_fusion(self, inst: Instruction) -> tuple[Any, FusionReport]:
        """Analyse, dispatch and emit one fusion; returns ``(EmittedFusion | None, report)``.

        A plugin (matcher, emitter factory, emitter) that raises or answers nonsense does not stop the run:
        the report gets ``status="error"``, ``plugin`` and the reason, and the fusion runs on an execution
        backend (:func:`plugin_failures` lists such rows; the CLI then exits 2).
        """
        if id(inst) in self._emitted:
            return self._emitted[id(inst)]
        rep = FusionReport(name=inst.name)
        try:
            return self._plan(inst, rep)
        except PluginError as e:  # the row keeps the kind and emitter found before the failure
            rep.status, rep.reason, rep.plugin = "error", str(e), e.plugin
            rep.backend = self._backend_for(inst).name
            self._emitted[id(inst)] = (None, rep)
            return None, rep

    def _plan(self, inst: Instruction, rep: FusionReport) -> tuple[Any, FusionReport]:
        t0 = time.perf_counter()
        analysis = FusionAnalysis.create(inst, self.device)
        decision = dispatch.get_emitter_fusion_kind(analysis, self.pm)
        rep.kind, rep.decided_by = decision.kind, decision.decided_by
        rep.plugin = rep.decided_by_plugin = decision.plugin
        raw_bc = inst.attrs.get("backend_config")
        if isinstance(raw_bc, str) and raw_bc.lstrip().startswith("{"):
            # XLA falls back to the default config too, but a lost stamp changes the kind: say so.
            note = "backend_config is not valid JSON and was read as absent (XLA's default config)"
        else:
            note = ""
        emitted = None
        tuned = tuned_execution_backend(inst)
        if tuned is not None:  # the autotuner chose an execution backend over every kernel config
            rep.decided_by, rep.backend = "autotuner", self._backend_for(inst).name
            rep.reason = f"autotuned winner: {tuned} backend"
            rep.timings.add("dispatch", time.perf_counter() - t0)
            rep.estimate = fusion_estimate_json(inst, self.device)
            self._emitted[id(inst)] = (None, rep)
            return None, rep
        try:
            emitter, factory = dispatch.get_fusion_emitter(analysis, decision.kind, self.pm)
        except EmitterUnsupported as e:
            emitter, factory = None, None
            rep.reason = str(e)
        rep.timings.add("dispatch", time.perf_counter() - t0)
        if emitter is not None:
            rep.emitter = type(emitter).__name__
            rep.plugin = factory.plugin
            try:
                with rep.timings.phase("codegen"):
                    emitted = self.pm.call_plugin(factory.plugin, f"{rep.emitter}.emit", emitter.emit)
            except PluginError as e:
                if isinstance(e.__cause__, EmitterUnsupported):
                    rep.reason = f"{rep.emitter} declined: {e.__cause__}"
                    emitted = None
                    rep.emitter = "-"
                else:
                    raise PluginError(factory.plugin, f"{rep.emitter}.emit (emitter factory {factory.name!r}) "
                                                      f"failed on fusion %{inst.name}", e.__cause__) from e
            if emitted is not None and not isinstance(emitted, EmittedFusion):
                raise PluginError(factory.plugin, f"{rep.emitter}.emit returned {type(emitted).__name__} for fusion "
                                                  f"%{inst.name}, expected an EmittedFusion")
        emitted = refuse_over_limits(rep, emitted, self.device)  # a launch CUDA would refuse never runs
        if emitted is not None:
            rep.emitter = emitted.emitter
            rep.backend = "triton" if emitted.kernels else "memcpy"
            rep.launch = str(emitted.launch) if emitted.launch else "-"
            rep.kernels = list(emitted.kernels)
        else:
            backend = self._backend_for(inst)
            rep.backend = backend.name
            if not rep.reason:
                rep.reason = f"no emitter for {rep.kind}"
        if note:
            rep.reason = f"{note}; {rep.reason}" if rep.reason else note
        rep.estimate = fusion_estimate_json(inst, self.device, emitted)  # the device's time, estimated
        self._emitted[id(inst)] = (emitted, rep)
        return emitted, rep

    def _backend_for(self, inst: Instruction):
        tuned = tuned_execution_backend(inst)
        if tuned is not None:
            for b in self.pm.execution_backends():
                if b.name == tuned:
                    return b
            raise PluginError("fusegen", f"%{inst.name} was autotuned to run on execution backend {tuned!r}, "
                                         "which no plugin registers")
        backends = self.pm.execution_backends()
        for b in backends:
            if self.pm.call_plugin(b.plugin, f"{b.name}.can_execute", b.can_execute, inst):
                return b
        if any(b.name == "host" for b in backends):  # the host declines only what fusegen does not implement
            target = str(inst.attrs.get("custom_call_target", "")).strip('"') if inst.opcode == "custom-call" \
                else None
            raise UnsupportedOpError(inst, target=target)
        raise PluginError("fusegen", f"found no execution backend for %{inst.name} ({inst.opcode}); "
                                     "is the host backend plugin installed?")

    def _context(self, plugin: str):
        """The :class:`fusegen.plugin_context.PluginContext` an execution backend of ``plugin`` gets."""
        return self.pm.context_for(plugin, device=self.device, executor=self)

    # -- execution ---------------------------------------------------------------------------------
    def run(self, args: list[Any]) -> Any:
        """Run the entry computation on ``args`` (one value per parameter); returns its value.

        Raises:
            ResourceLimitError: the run passed ``limits`` (deadline or while iteration budget).
        """
        return self.run_computation(self.module.entry, args)

    def run_computation(self, comp: Computation, args: list[Any]) -> Any:
        """Run ``comp`` on ``args``; ``call``/``while``/``conditional`` bodies run on an explicit stack."""
        return interpret(comp, args, self._apply, self.budget)

    def run_instruction(self, inst: Instruction, ops: list[Any]) -> Any:
        """Run one instruction on operand values (control flow runs its bodies through :func:`interpret`)."""
        if inst.opcode in _CONTROL_FLOW:
            return interpret_instruction(inst, ops, self._apply, self.budget)
        return self._apply(inst, ops)

    def _apply(self, inst: Instruction, ops: list[Any]) -> Any:
        op = inst.opcode
        if op == "fusion":
            return self._run_fusion(inst, ops)
        if op in ("parameter", "constant", "tuple", "get-tuple-element", "bitcast"):
            return evaluate_instruction(inst, ops)
        backend = self._backend_for(inst)
        self.other[backend.name] = self.other.get(backend.name, 0) + 1
        self.other_instructions.setdefault(inst.name, (inst.name, op, backend.name))
        with self.timings.phase("other"):
            out = self.pm.call_plugin(backend.plugin, f"{backend.name}.execute", backend.execute, inst, ops,
                                      self._context(backend.plugin))
        if op in ("sort", "reduce"):
            self.observer.kernel_output(inst, out, ops)
        elif op == "compare":
            self.observer.reference(inst, ops, evaluate_instruction)  # its near-ties, the reference's outcome
        return out

    def _run_fusion(self, inst: Instruction, ops: list[Any]) -> Any:
        emitted, plan = self.plan_fusion(inst)
        rep = self.reports.get(inst.name)
        first = rep is None
        if first:
            rep = plan
            self.reports[inst.name] = rep
        tm = rep.timings
        with tm.phase("reference"):
            ref = self.observer.reference(inst, ops, evaluate_instruction)  # and its compares' near-ties
        if self.keep_references:
            self.fusion_references[id(inst)] = (ops, ref)
        if emitted is None:
            backend = self._backend_for(inst)
            with tm.phase("interpret"):
                out = self.pm.call_plugin(backend.plugin, f"{backend.name}.execute", backend.execute, inst, ops,
                                          self._context(backend.plugin))
        else:
            t0 = time.perf_counter()
            runner = self.kernel_reuse.runner(inst, emitted)
            trace = CompiledTrace(runner) if first and id(runner) not in self.compiled_checks else None
            what = "failed to load or run"
            try:
                flat = triton_runtime.run_fusion(runner, ops, inst, interpret_max_programs=16, before_kernel=trace)
                rep.kernel_seconds += time.perf_counter() - t0
                if trace is not None:  # the kernels as compiled on the same operands, bit for bit
                    what = "ran as judged but failed to run as compiled"
                    self.compiled_checks[id(runner)] = (inst.name, trace.check())
            except (KernelDirError, TritonInternalsError):  # no kernel can be loaded or run as meant: the run stops
                raise
            except Exception as e:  # a kernel that fails to run is a failed fusion, not a crash
                rep.status = "error"
                rep.reason = kernel_failure(rep, emitted, e, what)
                out = ref
            else:
                out = _unflatten(inst.shape, flat)
                if first:
                    self._judge_compiled(rep, inst, runner)
            tm.add("interpret", time.perf_counter() - t0)
            if first and self.compile_kernels and emitted.kernels and rep.status != "error":
                with tm.phase("compile"):
                    handle, fresh = self.compiles.submit(inst, emitted.kernels)
                if self.compiles.jobs == 1:
                    result = self.compiles.result(handle)
                    rep.compiled = result[0]
                    apply_compiled_shared(rep, result)
                    check_compiled(rep, result, self.device)
                else:
                    self._pending.append((rep, handle, fresh))
        with tm.phase("compare"):
            self._record(rep, inst, out, ref, ops)
            self.observer.kernel_output(inst, out, ops)
        if first and self.on_fusion is not None:
            self.on_fusion(rep)
        return out

    def _judge_compiled(self, rep: FusionReport, inst: Instruction, runner: Any) -> None:
        """``rep.compiled_program`` from the check of ``runner``'s kernels; one that differs makes the fusion a
        mismatch whose reason names the kernel, its variant and the first differing element."""
        done = self.compiled_checks.get(id(runner))
        if done is None:
            return
        fusion, check = done
        rep.compiled_program = check if fusion == inst.name else check.on(fusion)
        if check.status == "differs":
            rep.status = "mismatch"
            rep.reason = f"{rep.reason}; {check.message}" if rep.reason else check.message

    def finish_compiles(self) -> None:
        """Wait for the background compiles (``jobs > 1``) and record them as a synchronous compile would:
        ``compiled``, the compile's time, and ``error`` with the reason for a failed one. Closes the pool."""
        try:
            for rep, handle, fresh in self._pending:
                result = self.compiles.result(handle)
                rep.compiled, seconds = result[0], result[1]
                apply_compiled_shared(rep, result)
                check_compiled(rep, result, self.device)
                if fresh:
                    rep.timings.add("compile", seconds)
                if rep.compiled.startswith("failed") and rep.status != "error" and rep.backend != "host":
                    rep.status = "error"
                    rep.reason = compile_failure(rep)
            self._pending.clear()
        finally:
            self.compiles.close()

    def _record(self, rep: FusionReport, inst: Instruction, out: Any, ref: Any, ops: list[Any] | None = None) -> None:
        if rep.status == "error":
            return
        if rep.backend == "host":
            # The host backend *is* the reference evaluator: comparing it with itself verifies nothing,
            # so no error is reported (``null`` in JSON, ``-`` in the table).
            rep.status = "ok"
            return
        self.observer.fusion_executed(rep, inst, out, ref, ops)  # the verdict's: error budgets, the event list
        if rep.compiled.startswith("failed"):
            rep.status = "error"
            rep.reason = compile_failure(rep)
