"""Running a module's entry computation: kernels for fusions, backends for everything else.

The executor walks the entry computation in program order. A ``fusion`` goes through analysis,
dispatch (:mod:`fusegen.dispatch`), emitter construction and kernel generation, and its kernels run
on numpy buffers in Triton's interpreter; each fusion's outputs are compared with the reference
evaluator on the same operands. ``while``, ``conditional`` and ``call`` bodies are run by the
executor too, so their fusions get kernels like any other. Every other instruction, and every
fusion whose kind has no emitter, runs on the first execution backend that accepts it (the host
backend in the end) and is reported as such. A fusion whose autotuned winner names an execution
backend (:mod:`fusegen.autotuning.tuned_backend`, e.g. the host backend beating every Triton config)
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
from fusegen.autotuning.tuned_backend import tuned_execution_backend
from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.device import DeviceDescription, get_device
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.ir import Computation, Instruction, Module, Shape
from fusegen.plugin_manager import PluginError, PluginManager, default_plugin_manager
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import leaves


@attrs.define
class FusionReport:
    """One row of ``fusegen run``: what ran a fusion and how its output compared.

    ``launch`` is ``"grid=AxB warps=N"`` or ``"-"`` (no kernel); errors are ``None`` until compared.
    ``status``: ``ok``, ``mismatch``, or ``error`` (with ``reason``).
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
    kernels: list[Any] = attrs.field(factory=list, repr=False)

    def to_json(self) -> dict:
        d = {k: getattr(self, k) for k in
             ("name", "kind", "decided_by", "emitter", "backend", "launch", "max_abs_error", "max_rel_error", "status")}
        if self.reason:
            d["reason"] = self.reason
        d["compiled_sm90"] = self.compiled
        return d


@attrs.define
class RunReport:
    module: str
    fusions: list[FusionReport]
    other: dict[str, int]
    outputs_ok: bool = True
    output_max_abs_error: float = 0.0
    seconds: float = 0.0
    # each non-fusion instruction sent to an execution backend, first execution order: (name, opcode, backend)
    other_instructions: list[tuple[str, str, str]] = attrs.Factory(list)

    @property
    def ok(self) -> bool:
        return self.outputs_ok and all(f.status == "ok" for f in self.fusions)


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
    """

    def __init__(self, module: Module, device: DeviceDescription | None = None, pm: PluginManager | None = None,
                 compile_kernels: bool = True, on_fusion: Callable[[FusionReport], None] | None = None):
        self.module = module
        self.device = device or get_device("h200")
        self.pm = pm or default_plugin_manager()
        self.compile_kernels = compile_kernels
        self.on_fusion = on_fusion
        self.reports: dict[str, FusionReport] = {}
        self.other: dict[str, int] = {}
        self.other_instructions: dict[str, tuple[str, str, str]] = {}  # name -> (name, opcode, backend)
        self._emitted: dict[int, tuple[Any, FusionReport]] = {}

    # -- planning (no execution): used by `fusegen explain` too ---------------------------------------
    def plan_fusion(self, inst: Instruction) -> tuple[Any, FusionReport]:
        """Analyse, dispatch and emit one fusion; returns ``(EmittedFusion | None, report)``.

        Raises:
            PluginError: a plugin (matcher, emitter factory, emitter) raised; it is named.
        """
        if id(inst) in self._emitted:
            return self._emitted[id(inst)]
        rep = FusionReport(name=inst.name)
        analysis = FusionAnalysis.create(inst, self.device)
        decision = dispatch.get_emitter_fusion_kind(analysis, self.pm)
        rep.kind, rep.decided_by = decision.kind, decision.decided_by
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
            self._emitted[id(inst)] = (None, rep)
            return None, rep
        try:
            emitter, factory = dispatch.get_fusion_emitter(analysis, decision.kind, self.pm)
        except EmitterUnsupported as e:
            emitter, factory = None, None
            rep.reason = str(e)
        if emitter is not None:
            rep.emitter = type(emitter).__name__
            try:
                emitted = self.pm.call_plugin(factory.plugin, f"{rep.emitter}.emit", emitter.emit)
            except PluginError as e:
                if isinstance(e.__cause__, EmitterUnsupported):
                    rep.reason = f"{rep.emitter} declined: {e.__cause__}"
                    emitted = None
                    rep.emitter = "-"
                else:
                    raise
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
        for b in self.pm.execution_backends():
            if self.pm.call_plugin(b.plugin, f"{b.name}.can_execute", b.can_execute, inst):
                return b
        raise PluginError("fusegen", f"found no execution backend for %{inst.name} ({inst.opcode}); "
                                     "is the host backend plugin installed?")

    # -- execution ---------------------------------------------------------------------------------
    def run(self, args: list[Any]) -> Any:
        """Run the entry computation on ``args`` (one value per parameter); returns its value."""
        return self.run_computation(self.module.entry, args)

    def run_computation(self, comp: Computation, args: list[Any]) -> Any:
        values: dict[int, Any] = {}
        for inst in comp.post_order():
            if inst.opcode == "parameter":
                values[id(inst)] = args[inst.parameter_number]
                continue
            ops = [values[id(o)] for o in inst.operands]
            values[id(inst)] = self.run_instruction(inst, ops)
        return values[id(comp.root)]

    def run_instruction(self, inst: Instruction, ops: list[Any]) -> Any:
        op = inst.opcode
        if op == "fusion":
            return self._run_fusion(inst, ops)
        if op == "call":
            return self.run_computation(inst.attrs["to_apply"], ops)
        if op == "while":
            cond, body = inst.attrs["condition"], inst.attrs["body"]
            state = ops[0]
            while bool(np.asarray(self.run_computation(cond, [state]))):
                state = self.run_computation(body, [state])
            return state
        if op == "conditional":
            branches = inst.attrs.get("branch_computations")
            sel = np.asarray(ops[0])
            if branches is None:
                branches = [inst.attrs["true_computation"], inst.attrs["false_computation"]]
                idx = 0 if bool(sel) else 1
            else:
                idx = int(sel)
                if idx < 0 or idx >= len(branches):
                    idx = len(branches) - 1
            return self.run_computation(branches[idx], [ops[idx + 1]])
        if op in ("parameter", "constant", "tuple", "get-tuple-element", "bitcast"):
            return evaluate_instruction(inst, ops)
        backend = self._backend_for(inst)
        self.other[backend.name] = self.other.get(backend.name, 0) + 1
        self.other_instructions.setdefault(inst.name, (inst.name, op, backend.name))
        return self.pm.call_plugin(backend.plugin, f"{backend.name}.execute", backend.execute, inst, ops, self)

    def _run_fusion(self, inst: Instruction, ops: list[Any]) -> Any:
        emitted, plan = self.plan_fusion(inst)
        rep = self.reports.get(inst.name)
        first = rep is None
        if first:
            rep = plan
            self.reports[inst.name] = rep
        ref = evaluate_instruction(inst, ops)
        if emitted is None:
            backend = self._backend_for(inst)
            out = self.pm.call_plugin(backend.plugin, f"{backend.name}.execute", backend.execute, inst, ops, self)
        else:
            t0 = time.perf_counter()
            try:
                flat = triton_runtime.run_fusion(emitted, ops, inst)
            except Exception as e:  # a kernel that fails to run is a failed fusion, not a crash
                rep.status = "error"
                rep.reason = f"kernel failed: {type(e).__name__}: {e}".splitlines()[0]
                out = ref
            else:
                rep.kernel_seconds += time.perf_counter() - t0
                out = _unflatten(inst.shape, flat)
            if first and self.compile_kernels and emitted.kernels and rep.status != "error":
                rep.compiled = self._compile(emitted)
        self._record(rep, inst, out, ref)
        if first and self.on_fusion is not None:
            self.on_fusion(rep)
        return out

    def _compile(self, emitted) -> str:
        try:
            for k in emitted.kernels:
                triton_runtime.compile_for_target(k, capability=90)
        except Exception as e:
            return f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return "ok"

    def _record(self, rep: FusionReport, inst: Instruction, out: Any, ref: Any) -> None:
        if rep.status == "error":
            return
        if rep.backend == "host":
            # The host backend *is* the reference evaluator: comparing it with itself verifies nothing,
            # so no error is reported (``null`` in JSON, ``-`` in the table).
            rep.status = "ok"
            return
        shapes = inst.shape.leaves()
        worst_abs = rep.max_abs_error or 0.0
        worst_rel = rep.max_rel_error or 0.0
        ok = rep.status in ("pending", "ok")
        for s, a, b in zip(shapes, leaves(out), leaves(ref)):
            c = compare(a, b, s.element_type)
            worst_abs = max(worst_abs, c.max_abs_error)
            worst_rel = max(worst_rel, c.max_rel_error)
            ok = ok and c.ok
        rep.max_abs_error, rep.max_rel_error = worst_abs, worst_rel
        if rep.compiled.startswith("failed"):
            rep.status = "error"
            rep.reason = f"sm_90 compile {rep.compiled}"
        else:
            rep.status = "ok" if ok else "mismatch"


def run_module(module: Module, args: list[Any], device: DeviceDescription | None = None,
               pm: PluginManager | None = None, compile_kernels: bool = True,
               on_fusion: Callable[[FusionReport], None] | None = None) -> tuple[Any, RunReport]:
    """Run ``module`` end to end and compare its outputs with the reference evaluator.

    Returns:
        ``(outputs, RunReport)``; fusions in the report are in entry post order (first execution).
    """
    from fusegen.evaluator.evaluator import evaluate_module

    t0 = time.perf_counter()
    ex = Executor(module, device, pm, compile_kernels, on_fusion)
    out = ex.run(args)
    ref = evaluate_module(module, args)
    ok = True
    worst = 0.0
    for s, a, b in zip(module.entry.root.shape.leaves(), leaves(out), leaves(ref)):
        c = compare(a, b, s.element_type)
        ok = ok and c.ok
        worst = max(worst, c.max_abs_error)
    report = RunReport(module.name, list(ex.reports.values()), dict(ex.other), ok, worst, time.perf_counter() - t0,
                       list(ex.other_instructions.values()))
    return out, report
