"""An estimated H200 time for each fusion and module, from what fusegen knows without a GPU.

Which model a fusion gets (the model's *terms*, stated so tests can hold each estimate to them):

* **Triton fusions** with a tiling (``triton_gemm_config`` or ``block_level_fusion_config``): the tiled model
  (:mod:`fusegen.perf.tiled`, XLA's ``EstimateRunTimeForTriton``), dots through the hardware GEMM model
  (:mod:`fusegen.perf.gemm_model`; XLA's dot cost model, :mod:`fusegen.perf.dot_model`, stays for XLA's tests).
  A Triton GEMM fusion's estimate is XLA's autotuner's choice: the faster of the config and cuBLASLt
  (:func:`fusegen.perf.gemm_model.library_gemm`), ``gemm["picked"]`` says which (the tuner's cost model ranks the
  Triton config alone, ``library_candidate=False``, and the cuBLASLt call as a candidate of its own,
  :func:`estimate_fission`).
* **cuBLAS calls** (``__cublas$lt$matmul``, ``__cublas$gemm``): the library GEMM model; ``model="library"``.
  A GEMM fusion a tuning gave to cuBLASLt (XLA's cuBLAS fallback, the ``cublaslt_fission`` backend) is the call and
  the fusions of the rest (:func:`estimate_fission`), as the tuner estimated it.
* **Emitter kernels** (loop, reduction, transpose, concatenate, scatter, sort, in-place DUS): the indexing
  model over the emitter's own launch (:mod:`fusegen.perf.fusion_model`, XLA's
  ``GpuPerformanceModelWithIndexingAnalysis``).
* **Copies** (a memcpy fusion, no kernel): each copied byte read and written once at the DRAM bandwidth.
* **Library calls and fusions without a kernel** (cuBLAS, cuDNN, custom fusions, host fallbacks): a roofline,
  ``max(flops / tensor-core peak, (operand + output bytes) / bandwidth)``, a library's workspace buffer not
  counted; ``model="roofline"``.
* **Extra launches** (a kernel launched several times, e.g. a sort's steps, or a fusion's preparation kernels):
  each moves its buffers once more at the DRAM bandwidth, plus one launch overhead.

Every estimate adds XLA's ``kKernelLaunchOverhead`` (1 µs) per launch to :attr:`FusionEstimate.total_seconds`;
``seconds`` is the kernel's own time (XLA's ``exec_time``). :data:`MODEL_VERSION` changes whenever a change
moves estimates; cache entries record it.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Iterable, Sequence

import attrs

from fusegen.perf import base
from fusegen.perf.device_rates import PerfDevice
from fusegen.perf.flops import instruction_flops
from fusegen.perf.fusion_model import OperandRead, estimate_kernel_fusion, shape_bytes

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Module

#: Bumped when the model's figures change (cache entries and reports say which version estimated them).
#: 2: the hardware GEMM model and cuBLASLt as a candidate (issue 45). 3: a GEMM kernel's fixed costs (launch-to-retire
#: floor and the last stores' round trip, from XLA's measured H100 small-transfer time), the first round of blocks
#: loading from DRAM, and a wgmma kernel's loop overhead under its asynchronous MMAs (issue 45's small sizes). 4: a
#: Triton GEMM config fits as its kernel does (registers <= 255 a thread, shared memory), not by the tiled model's
#: 40%-of-registers rule, and its registers count a K step's operand tiles; a library-call fission (issue 45).
MODEL_VERSION = 4
#: What every estimate is labelled with in tables (it is not a measurement).
LABEL = "estimate"


@attrs.frozen
class FusionEstimate:
    """One fusion's (or library call's) estimated time on a device.

    Attributes:
        name: the instruction's name; device: the device preset name (``h200``).
        model: ``tiled``, ``indexing``, ``copy``, ``roofline`` or ``none`` (nothing to estimate: ``seconds`` 0).
        data: the kernel's :class:`~fusegen.perf.base.RunTimeData` (seconds, bytes, flops).
        launches: kernel launches (each adds :data:`~fusegen.perf.base.KERNEL_LAUNCH_OVERHEAD_S`).
        reads: per-operand read terms (indexing model only).
        num_blocks, threads_per_block: the launch the estimate assumed.
        machine_code: adjustments read from the sm_90 machine code (:mod:`fusegen.perf.machine_code`), if any.
        note: why a fusion got a coarser model than its kind would.
        gemm: a GEMM's candidates (``{"triton_us", "library_us", "picked", "library_kernel"}``), else empty.
    """

    name: str
    device: str
    model: str
    data: base.RunTimeData
    launches: int = 1
    reads: tuple[OperandRead, ...] = ()
    num_blocks: int = 0
    threads_per_block: int = 0
    machine_code: dict = attrs.field(factory=dict)
    note: str = ""
    version: int = MODEL_VERSION
    gemm: dict = attrs.field(factory=dict)

    @property
    def seconds(self) -> float:
        """The kernel's time without launch overhead (XLA's ``exec_time``), seconds."""
        return self.data.exec_time

    @property
    def total_seconds(self) -> float:
        """:attr:`seconds` plus 1 µs per launch (what the fusion adds to a module's time)."""
        return self.data.exec_time + self.launches * base.KERNEL_LAUNCH_OVERHEAD_S

    @property
    def us(self) -> float:
        """:attr:`total_seconds` in microseconds."""
        return self.total_seconds * 1e6

    @property
    def bound(self) -> str:
        """``compute`` when compute time exceeds memory time, else ``memory``."""
        d = self.data
        return "compute" if d.compute_time > d.read_time + d.write_time else "memory"

    def to_json(self) -> dict:
        """``{"us", "kernel_us", "model", "bound", "device", "model_version", "launches", ...RunTimeData}``."""
        inf = self.data.is_infinite
        out = {"us": None if inf else round(self.us, 6), "kernel_us": None if inf else round(self.seconds * 1e6, 6),
               "model": self.model, "bound": self.bound, "device": self.device, "model_version": self.version,
               "launches": self.launches, "num_blocks": self.num_blocks, "threads_per_block": self.threads_per_block,
               **self.data.to_json(), "label": LABEL}
        if self.reads:
            out["reads"] = [r.to_json() for r in self.reads]
        if self.machine_code:
            out["machine_code"] = dict(self.machine_code)
        if self.note:
            out["note"] = self.note
        if self.gemm:
            out["gemm"] = dict(self.gemm)
        return out


def _device_name(device: Any) -> str:
    return str(getattr(device, "name", "custom"))


def roofline_instruction(instr: "Instruction", device: Any, note: str = "") -> FusionEstimate:
    """``max(flops / peak, bytes / bandwidth)`` of an instruction run by a library (cuBLAS, cuDNN) or the host:
    the flops of its dots and convolutions at the tensor-core peak of their input type, every operand and output
    byte once at the DRAM bandwidth, but for a library call's workspace (:func:`_workspace_bytes`). A cuBLAS GEMM
    call gets the library GEMM model instead (``model="library"``, :func:`library_problem`)."""
    dev = PerfDevice.of(device)
    lib = _library_call_estimate(instr, device, note)
    if lib is not None:
        return lib
    flops, peak_type = 0, "f32"
    comps = instr.called_computations if instr.opcode == "fusion" else []
    body = [i for c in comps for i in c.instructions] or [instr]
    for i in body:
        if i.opcode in ("dot", "convolution") or (i.opcode == "custom-call" and i.operands):
            f = instruction_flops(i, dev.compute_capability) if i.opcode != "custom-call" else _library_flops(i)
            if f:
                flops += f
                peak_type = i.operands[0].shape.element_type if i.operands[0].shape.is_array else peak_type
    read = sum(shape_bytes(o.shape) for o in instr.operands)
    written = shape_bytes(instr.shape) - _workspace_bytes(instr)
    compute_s = flops / dev.peak_matrix_flops(peak_type) if flops else 0.0
    read_s, write_s = read / dev.memory_bandwidth, written / dev.memory_bandwidth
    data = base.RunTimeData(flops, read, written, read_s, write_s, compute_s, max(compute_s, read_s + write_s))
    return FusionEstimate(instr.name, _device_name(device), "roofline", data, 1, note=note)


def library_problem(call: "Instruction") -> "Any":
    """The :class:`fusegen.perf.dot_model.DotProblem` of a cuBLAS GEMM custom call (its ``gemm_backend_config``
    dimension numbers; batch and non-contracting dimensions multiplied out), or ``None`` for any other
    instruction or an unreadable config."""
    from fusegen.perf.dot_model import DotProblem

    target = str(call.attrs.get("custom_call_target", "")).strip('"')
    if call.opcode != "custom-call" or not target.startswith("__cublas") or len(call.operands) < 2:
        return None
    bc = call.backend_config if isinstance(call.backend_config, dict) else {}
    gbc = bc.get("gemm_backend_config") if isinstance(bc.get("gemm_backend_config"), dict) else None
    lhs, rhs = call.operands[0].shape, call.operands[1].shape
    if gbc is None or not (lhs.is_array and rhs.is_array):
        return None
    dn = gbc.get("dot_dimension_numbers") or {}
    try:
        lc, rc = ([int(d) for d in dn.get(f"{s}_contracting_dimensions", ())] for s in ("lhs", "rhs"))
        lb, rb = ([int(d) for d in dn.get(f"{s}_batch_dimensions", ())] for s in ("lhs", "rhs"))
        size = lambda sh, ds: math.prod(sh.dimensions[d] for d in ds)  # noqa: E731
        b, k = size(lhs, lb), size(lhs, lc)
        m = size(lhs, [d for d in range(lhs.rank) if d not in lc + lb])
        n = size(rhs, [d for d in range(rhs.rank) if d not in rc + rb])
    except (TypeError, ValueError, IndexError):
        return None
    out = call.shape.tuple_shapes[0] if call.shape.is_tuple else call.shape
    if min(b, m, n, k) <= 0:
        return None
    return DotProblem(b, m, n, k, lhs.element_type, rhs.element_type, out.element_type)


def _library_call_estimate(call: "Instruction", device: Any, note: str) -> FusionEstimate | None:
    """A cuBLAS GEMM call's estimate by the library GEMM model (``model="library"``), or ``None``."""
    from fusegen.perf.dot_model import DotUnsupported
    from fusegen.perf.gemm_model import library_gemm

    p = library_problem(call)
    if p is None:
        return None
    try:
        t = library_gemm(p, device)
    except (DotUnsupported, ValueError):
        return None
    data = t.run_time_data()
    return FusionEstimate(call.name, _device_name(device), "library", data, 1, note=note,
                          gemm={"library_us": round(t.seconds * 1e6, 6), "picked": "cublas",
                                "library_kernel": t.to_json()})


def _with_library_candidate(est: FusionEstimate, fusion: "Instruction", device: Any) -> FusionEstimate:
    """``est`` (a Triton GEMM fusion's config) or cuBLASLt's time for its dot, whichever is faster: what XLA's
    autotuner picks between the two. The fusion's other work (prologue and epilogue ops) is taken to ride along
    with the library call, as cuBLASLt's epilogues do (an approximation for a heavy prologue)."""
    from fusegen.perf.dot_model import DotProblem, DotUnsupported, find_dot
    from fusegen.perf.gemm_model import library_gemm

    dot = find_dot(fusion)
    if dot is None:
        return est
    try:
        t = library_gemm(DotProblem.of(dot), device)
    except (DotUnsupported, ValueError, KeyError, IndexError):
        return est
    triton_us = None if est.data.is_infinite else round(est.seconds * 1e6, 6)
    info = {"triton_us": triton_us, "library_us": round(t.seconds * 1e6, 6), "library_kernel": t.to_json()}
    if est.data.is_infinite or t.seconds < est.seconds:
        lib = t.run_time_data()
        data = attrs.evolve(lib, flops=max(lib.flops, est.data.flops) if not est.data.is_infinite else lib.flops)
        return attrs.evolve(est, data=data, gemm={**info, "picked": "cublas"},
                            note="; ".join(x for x in (est.note, "XLA's autotuner would pick cuBLASLt: its estimate "
                                                                  "beats this Triton config's") if x))
    return attrs.evolve(est, gemm={**info, "picked": "triton"})


def estimate_fission(module: "Module", device: Any, name: str = "", note: str = "") -> FusionEstimate:
    """A fusion replaced by a library call, as XLA's fission backends run it (``FissionBackend``, the cuBLAS
    fallback of a GEMM fusion): ``module``'s entry computation (the cuBLAS call and the fusions of the fusion's other
    ops, :meth:`fusegen.codegen_backend.CodegenBackend.fissioned`), each kernel by :func:`estimate_fusion` (the
    call: the library GEMM model). ``seconds`` is their kernels' time plus XLA's 1 µs launch overhead for each launch
    after the first (the first is the fusion's own, which :attr:`FusionEstimate.total_seconds` adds), so it compares
    with a Triton config's kernel time, as ``FissionBackend::GetSupportedConfigsWithEstimates`` adds its prologue and
    epilogue kernels; ``model="library"``, ``gemm["picked"] == "cublas"``.

    Raises:
        ValueError: the entry computation has no cuBLAS GEMM call; the device lacks bandwidth, cores or clock.
    """
    entry = module.entry
    parts = [i for i in (entry.instructions if entry is not None else ())
             if i.opcode == "fusion" or (i.opcode == "custom-call" and library_problem(i) is not None)]
    calls = [i for i in parts if i.opcode == "custom-call"]
    if not calls:
        raise ValueError(f"{module.name}: no cuBLAS GEMM call to estimate")
    ests = [estimate_fusion(i, device, refuse_spills=True, library_candidate=False) for i in parts]
    launches = sum(e.launches for e in ests)
    if any(e.data.is_infinite for e in ests):
        data = base.RunTimeData.infinite()
    else:
        d = [e.data for e in ests]
        data = base.RunTimeData(sum(x.flops for x in d), sum(x.bytes_read for x in d), sum(x.bytes_written for x in d),
                                sum(x.read_time for x in d), sum(x.write_time for x in d),
                                sum(x.compute_time for x in d),
                                sum(x.exec_time for x in d) + (launches - 1) * base.KERNEL_LAUNCH_OVERHEAD_S)
    lib = next(e for i, e in zip(parts, ests) if i.opcode == "custom-call")
    gemm = {**lib.gemm, "picked": "cublas", "fission": [i.name for i in parts]}
    others = len(parts) - len(calls)
    text = ("a cuBLASLt call" + (f" and {others} fusion(s) of the rest" if others else "")
            + " in place of the fusion (XLA's cuBLAS fallback)")
    return FusionEstimate(name or module.name, _device_name(device), "library", data, launches,
                          note="; ".join(x for x in (note, text) if x), gemm=gemm)


def _tuned_library_call(fusion: "Instruction", device: Any, call: dict) -> FusionEstimate | None:
    """A GEMM fusion a tuning gave to a library call (:data:`fusegen.codegen.tuned_backend.LIBRARY_CALL_FIELD`):
    :func:`estimate_fission` of what the named backend runs in its place; ``None`` when that backend is not
    registered or builds nothing (the caller falls back)."""
    from fusegen.codegen_backend import Config
    from fusegen.plugin_manager import default_plugin_manager

    name = call.get("backend")
    backend = next((b for b in default_plugin_manager().codegen_backends() if b.name == name), None)
    if backend is None:
        return None
    values = {k: v for k, v in call.items() if k != "backend"}
    try:
        module = backend.fissioned(fusion, Config(name, values))
        if module is None:
            return None
        return estimate_fission(module, device, fusion.name, note=f"autotuned to {name}")
    except Exception:  # noqa: BLE001 - a plugin's hook: its failure means the fallback estimate
        return None


def _workspace_bytes(call: "Instruction") -> int:
    """Bytes of the scratch buffer a cuBLAS / cuDNN custom call's result tuple ends with (``s8[N]``, ``u8[N]``: what
    XLA's GemmRewriter and cuDNN conv rewriter append). It is the library's workspace, used or not, not traffic."""
    if call.opcode != "custom-call" or not call.shape.is_tuple or len(call.shape.tuple_shapes or ()) < 2:
        return 0
    if not str(call.attrs.get("custom_call_target", "")).strip('"').startswith(("__cublas", "__cudnn")):
        return 0
    last = call.shape.tuple_shapes[-1]
    return shape_bytes(last) if last.is_array and last.rank == 1 and last.element_type in ("s8", "u8") else 0


def _library_flops(call: "Instruction") -> int:
    """Flops of a cuBLAS GEMM custom call (``2 x M x N x K`` from its ``gemm_backend_config``), else 0."""
    bc = call.backend_config if isinstance(call.backend_config, dict) else {}
    gbc = bc.get("gemm_backend_config") if isinstance(bc.get("gemm_backend_config"), dict) else None
    if gbc is None:
        return 0
    dn = gbc.get("dot_dimension_numbers") or {}
    lhs = call.operands[0].shape
    k = math.prod(lhs.dimensions[int(d)] for d in dn.get("lhs_contracting_dimensions", ()) if int(d) < lhs.rank)
    out = call.shape.tuple_shapes[0] if call.shape.is_tuple else call.shape
    return 2 * out.numel * max(k, 1)


def _extra_launch_seconds(emitted: Any, fusion: "Instruction", dev: PerfDevice) -> tuple[int, float]:
    """Launches beyond the one the model priced, and the seconds their buffers take to move once each."""
    kernels = list(getattr(emitted, "kernels", ()) or ())
    launches = sum(len(k.launch_args) for k in kernels)
    extra_s = 0.0
    primary = min(getattr(emitted, "primary", 0), len(kernels) - 1) if kernels else -1
    for j, k in enumerate(kernels):
        n = len(k.launch_args) - (1 if j == primary else 0)
        if n <= 0:
            continue
        moved = sum(shape_bytes(p.shape) for p in k.params if p.kind in ("operand", "output", "scratch"))
        extra_s += n * moved / dev.memory_bandwidth
    return max(launches, 1), extra_s


def estimate_fusion(fusion: "Instruction", device: Any = None, *, emitted: Any = None, sass: Any = None,
                    coalescing: str = "heuristic", refuse_spills: bool = False,
                    library_candidate: bool = True) -> FusionEstimate:
    """The estimated time of one fusion (or library call) on ``device`` (see the module docstring).

    Args:
        fusion: a ``fusion`` or ``custom-call`` instruction of a parsed module.
        device: a :class:`fusegen.device.DeviceDescription` (default H200).
        emitted: the fusion's :class:`fusegen.codegen.kernel.EmittedFusion` (its launch and kernels), as
            ``fusegen.api.plan_fusions`` gives it; ``None``: a Triton fusion is tiled from its backend config, any
            other fusion gets XLA's fallback launch.
        sass: :class:`fusegen.codegen.sass.SassStats` of the fusion's primary kernel (or a list, one per kernel):
            tensor-core use, spills and occupancy adjust the estimate (:mod:`fusegen.perf.machine_code`).
        coalescing: see :func:`fusegen.perf.fusion_model.estimate_kernel_fusion`.
        refuse_spills: a Triton tiling whose tile would spill registers is infinite, as XLA's tiling search
            treats it (the autotuner's cost model); ``False`` (explain, run, report): it is estimated anyway, with a
            note saying so.
        library_candidate: a Triton GEMM fusion gets the faster of its config and cuBLASLt (XLA's autotuner's
            choice); ``False`` (the tuner ranking Triton configs), or ``sass`` given (that kernel's machine
            code): the config alone.

    Raises:
        ValueError: the device lacks bandwidth, cores or clock.
    """
    from fusegen.codegen.tuned_backend import library_call, tuned_execution_backend
    from fusegen.device import DEFAULT_DEVICE
    from fusegen.perf import machine_code

    device = device if device is not None else DEFAULT_DEVICE
    dev = PerfDevice.of(device)
    name = _device_name(device)
    if fusion.opcode != "fusion":
        return roofline_instruction(fusion, device, note=f"{fusion.opcode} run by a library")
    tuned_call = library_call(fusion)
    if tuned_call is not None:  # a tuning gave the GEMM fusion to cuBLASLt (XLA's cuBLAS fallback)
        est = _tuned_library_call(fusion, device, tuned_call)
        if est is not None:
            return est
    if tuned_execution_backend(fusion) is not None:
        return roofline_instruction(fusion, device, note=f"autotuned to the {tuned_execution_backend(fusion)} "
                                                          f"execution backend: no kernel to model")
    adjust = machine_code.adjustments(sass, dev, device) if sass is not None else machine_code.Adjustments()
    kind = fusion.fusion_backend_kind or ""
    if kind.startswith("__triton"):
        from fusegen.perf.tiled import TilingError, config_from_backend_config, estimate_tiled_fusion, gemm_config

        try:
            cfg = config_from_backend_config(fusion)
            note = ""
        except TilingError as e:
            cfg, note = gemm_config(fusion, {}), f"{e}; XLA's default tile 64x64, block_k 32"
        try:
            data = estimate_tiled_fusion(fusion, device, cfg, machine_peak=adjust.dot_peak(fusion, dev),
                                         gemm="hardware")
            if data.is_infinite and not refuse_spills:  # a config given, not searched: estimate it anyway
                data = estimate_tiled_fusion(fusion, device, cfg, machine_peak=adjust.dot_peak(fusion, dev),
                                             register_check=False, gemm="hardware")
                why = ("this GEMM kernel does not fit an SM (over 255 registers a thread: it would spill; or shared "
                       "memory over the limit)" if data.is_infinite else
                       "XLA's model refuses this tiling (a tile over 40% of a block's registers would spill); "
                       "estimated as if it did not spill")
                note = why + (f"; {note}" if note else "")
        except (TilingError, ValueError, KeyError, IndexError) as e:
            return roofline_instruction(fusion, device, note=f"tiled model failed ({e}); roofline instead")
        blocks = _tiled_blocks(fusion, cfg)
        warps = cfg.num_warps or 4
        est = machine_code.apply(FusionEstimate(fusion.name, name, "tiled", data, 1, (), blocks,
                                                warps * dev.warp_size, note=note), adjust, dev)
        if library_candidate and sass is None and kind in ("__triton_gemm", "__triton_nested_gemm_fusion"):
            est = _with_library_candidate(est, fusion, device)
        return est
    if emitted is not None and not getattr(emitted, "kernels", ()):
        if getattr(emitted, "copies", ()):  # a memcpy fusion: device-to-device copies
            moved = sum(shape_bytes(fusion.operands[i].shape) for i, _leaf in emitted.copies)
            t = 2 * moved / dev.memory_bandwidth
            data = base.RunTimeData(0, moved, moved, moved / dev.memory_bandwidth, moved / dev.memory_bandwidth, 0.0, t)
            return FusionEstimate(fusion.name, name, "copy", data, len(emitted.copies))
        return roofline_instruction(fusion, device, note="no kernel: run by an execution backend")
    if emitted is None and kind in ("__cudnn$fusion", "__custom_fusion"):
        return roofline_instruction(fusion, device, note=f"{kind} runs in a library")
    launch = emitted.launch if emitted is not None else None
    kt = estimate_kernel_fusion(fusion, device, launch, coalescing=coalescing)
    launches, extra_s = _extra_launch_seconds(emitted, fusion, dev) if emitted is not None else (1, 0.0)
    data = kt.data if not extra_s else attrs.evolve(kt.data, exec_time=kt.data.exec_time + extra_s)
    est = FusionEstimate(fusion.name, name, "indexing", data, launches, kt.reads, kt.num_blocks, kt.threads_per_block,
                         note="" if launch is not None else "no emitter launch: XLA's fallback of 128 threads a block")
    return machine_code.apply(est, adjust, dev)


def _tiled_blocks(fusion: "Instruction", cfg: Any) -> int:
    from fusegen.indexing.analysis import FusionAdaptor

    root = FusionAdaptor.for_instruction(fusion).roots[0]
    shape = root.shape
    while shape.is_tuple and shape.tuple_shapes:
        shape = shape.tuple_shapes[0]
    return math.prod(math.ceil(n / max(t, 1)) for n, t in zip(shape.dimensions, cfg.output_tiles[0])) or 1


@attrs.frozen
class ModuleEstimate:
    """Every fusion's and library call's estimate of a module, in execution order, and their sum.

    Attributes:
        module: the module's name; device: the device preset; fusions: :class:`FusionEstimate` per instruction.
        collectives: an SPMD module's collectives by name (:func:`fusegen.perf.report.collective_estimates_json`:
            ``{"us", "algorithm", ..., "overlapped_us", "exposed_us"}``); collective_totals: their
            ``collectives_us`` / ``collectives_overlapped_us`` / ``collectives_exposed_us``.
    """

    module: str
    device: str
    fusions: tuple[FusionEstimate, ...]
    collectives: dict = attrs.field(factory=dict)
    collective_totals: dict = attrs.field(factory=dict)

    @property
    def total_seconds(self) -> float:
        """Sum of every instruction's :attr:`FusionEstimate.total_seconds` (launch overheads included) and the
        collectives' time not hidden under compute."""
        return (sum(f.total_seconds for f in self.fusions)
                + float(self.collective_totals.get("collectives_exposed_us", 0.0)) * 1e-6)

    @property
    def us(self) -> float:
        return self.total_seconds * 1e6

    def by_name(self) -> dict[str, FusionEstimate]:
        return {f.name: f for f in self.fusions}

    def ranked(self) -> list[FusionEstimate]:
        """Slowest first (infinite estimates first)."""
        return sorted(self.fusions, key=lambda f: -f.total_seconds)

    def to_json(self) -> dict:
        out = {"us": round(self.us, 6), "device": self.device, "model_version": MODEL_VERSION, "label": LABEL,
               "fusions": {f.name: f.to_json() for f in self.fusions}}
        if self.collectives:
            out["collectives"] = dict(self.collectives)
            out.update(self.collective_totals)
        return out


def estimate_rows(rows: Sequence, device: Any, library_calls: Iterable["Instruction"] = (),
                  module_name: str = "") -> ModuleEstimate:
    """Estimates of planned fusions (``fusegen.api.plan_fusions`` rows: ``(instruction, (emitted, report))``)
    and of library calls outside fusions. A fusion the model cannot read gets a roofline with the reason."""
    out = []
    for inst, (emitted, _rep) in rows:
        out.append(_safe(inst, device, emitted))
    for call in library_calls:
        out.append(_safe(call, device, None))
    return ModuleEstimate(module_name, _device_name(device), tuple(out))


def _safe(inst: "Instruction", device: Any, emitted: Any) -> FusionEstimate:
    try:
        return estimate_fusion(inst, device, emitted=emitted)
    except (ValueError, KeyError, IndexError, TypeError, ZeroDivisionError, NotImplementedError) as e:
        return roofline_instruction(inst, device, note=f"model failed ({type(e).__name__}: {e}); roofline instead")


def library_calls(module: "Module") -> list["Instruction"]:
    """Custom calls outside fusions that a library runs (cuBLAS GEMMs, cuDNN convolutions)."""
    fused = {id(i.fused_computation) for c in module.computations for i in c.instructions if i.opcode == "fusion"}
    return [i for c in module.computations if id(c) not in fused for i in c.instructions
            if i.opcode == "custom-call" and str(i.attrs.get("custom_call_target", "")).strip('"').startswith(
                ("__cublas", "__cudnn"))]
