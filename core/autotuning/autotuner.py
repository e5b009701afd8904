"""The autotuner: cache, AOT check, cost model, no-tuning path, tune; winner applied and cached.

Mirrors XLA's ``ConfigAssigner::GetConfig`` (``xla/backends/autotuner/config_assigner.cc:291-347``) and
``Autotuner::GetTunedConfig`` (``xla/backends/autotuner/autotuner.cc:177-245``). Per instruction, in
order:

1. cache lookup (memory, then the directory); a cached config of an unregistered backend is ignored
   with a warning;
2. ``xla_gpu_require_complete_aot_autotune_results``: a miss is ``NotFound``
   ``"No cached config found for HLO instr: <instr>"``;
3. optional cost model (fusegen; ``cost_model_top_k``): roofline ranking, keep the best ``k``;
4. ``xla_gpu_autotune_level=0``: the first supported config that compiles, else the first backend
   default config;
5. tune: the supported configs of every selected backend (``xla_gpu_experimental_autotune_backends``,
   ``+name,-name``); none -> ``NotFound "No supported configs found for HLO: "``; exactly one -> used
   without compiling; else compile all in worker processes; none compiled -> ``Internal "No candidates
   could be compiled."``; one -> used; else ``ConfigRunner.profile_all`` + ``pick_best_config``.
   Levels 1-3 profile without buffer init, red zones or correctness; level >= 4 with all three.

The winner is written into the instruction's backend config by its backend (``apply_config``) and the
result inserted into the cache (tuned results only, as XLA).
"""

from __future__ import annotations

import collections
import hashlib
import json
import logging
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import attrs

from fusegen.autotuning import cost_model
from fusegen.autotuning.compile_pool import (DEFAULT_TIMEOUT_S, CompileOutcome, CompilePool, CompilePoolUnavailable,
                                             CompileTask, instruction_to_text)
from fusegen.autotuning.config_runner import Candidate, ConfigRunner
from fusegen.autotuning.profiler import Profiler, default_profiler
from fusegen.autotuning.redzone import DEFAULT_REDZONE_BYTES
from fusegen.autotuning.supervised import DEFAULT_PROFILE_TIMEOUT_S, ProfileSupervisor
from fusegen.autotuning.selection import (DEFAULT_SCRATCH_WINDOW_US, AutotuneError, Failure, FailureKind,
                                          ProfileResult, pick_best_config)
from fusegen.cache.format import CacheEntry, TuneResult
from fusegen.cache.key import CacheKey, make_key
from fusegen.cache.tiers import TieredCache, normalize_mode
from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Module

log = logging.getLogger("fusegen.autotuning")

#: fusegen's CPU default of ``cost_model_top_k``: in Triton's interpreter one run of a small-tile config of a
#: real GEMM takes minutes (``gpu_mlp_bf16``: 8192 programs for 16x8 tiles), so without a GPU only the
#: roofline's best 4 configs (the host backend, always kept, and 3 Triton tilings) are compiled and timed.
#: Override with ``--cost-model-top-k`` (0 tunes every config).
CPU_DEFAULT_TOP_K = 4

#: Options whose value changes which config wins (fingerprinted into every cache key).
RESULT_CHANGING = ("xla_gpu_autotune_level", "xla_gpu_autotune_gemm_rtol", "xla_gpu_experimental_autotune_backends",
                   "xla_gpu_deterministic_ops", "xla_gpu_exclude_nondeterministic_ops", "scratch_bytes_window_us",
                   "cost_model_top_k")


@attrs.define
class AutotuneOptions:
    """Autotuner options under XLA's flag names (defaults as ``debug_options_flags.cc``).

    XLA flags: ``xla_gpu_autotune_level`` (4), ``xla_gpu_autotune_gemm_rtol`` (0.1),
    ``xla_gpu_redzone_padding_bytes`` (8 MiB per side), ``xla_gpu_per_fusion_autotune_cache_dir`` (""),
    ``xla_gpu_experimental_autotune_cache_mode`` ("UPDATE"), ``xla_gpu_require_complete_aot_autotune_results``
    (False), ``xla_gpu_experimental_autotune_backends`` ("" = all; ``"+triton,-cublaslt"`` or
    ``"triton,host"``), ``xla_gpu_crash_on_verification_failures`` (False).

    fusegen's own: ``scratch_bytes_window_us`` (XLA's hard-coded 2 µs), ``cost_model_top_k`` (0 = off;
    ``None`` = fusegen's default: :data:`CPU_DEFAULT_TOP_K` when the autotuner times on the CPU because no
    GPU is usable and no profiler was given, else off; see :func:`default_top_k`),
    ``compile_workers`` (None = CPU count, 0 = in process), ``compile_timeout_s`` (debug option
    ``xla_gpu_autotune_compile_timeout``), ``profile_timeout_s`` (``xla_gpu_autotune_profile_timeout``),
    ``profile_in_worker`` (``pickled``: candidates compiled in a worker are profiled in a supervised worker,
    :mod:`fusegen.autotuning.supervised`; ``all``: every picklable one; ``none``), ``profile_runs`` (None:
    5 with CUDA events, 0 = the timed warm-up run on the CPU),
    ``seed`` (input data), ``tune_emitter_fusions`` (also tune emitter fusions' launch parameters),
    ``retune_configured`` (also tune instructions that already carry a config).
    """

    xla_gpu_autotune_level: int = 4
    xla_gpu_autotune_gemm_rtol: float = 0.1
    xla_gpu_redzone_padding_bytes: int = DEFAULT_REDZONE_BYTES
    xla_gpu_per_fusion_autotune_cache_dir: str = ""
    xla_gpu_experimental_autotune_cache_mode: str = attrs.field(default="UPDATE", converter=normalize_mode)
    xla_gpu_require_complete_aot_autotune_results: bool = False
    xla_gpu_experimental_autotune_backends: str = ""
    xla_gpu_crash_on_verification_failures: bool = False
    xla_gpu_deterministic_ops: bool = False
    xla_gpu_exclude_nondeterministic_ops: bool = False
    scratch_bytes_window_us: float = DEFAULT_SCRATCH_WINDOW_US
    cost_model_top_k: int | None = None
    compile_workers: int | None = None
    compile_timeout_s: float = DEFAULT_TIMEOUT_S
    profile_timeout_s: float = DEFAULT_PROFILE_TIMEOUT_S
    profile_in_worker: str = attrs.field(default="pickled", validator=attrs.validators.in_(("pickled", "all", "none")))
    profile_runs: int | None = None
    seed: int = 0
    tune_emitter_fusions: bool = False
    retune_configured: bool = False

    @classmethod
    def from_debug_options(cls, obj: Any, **overrides: Any) -> "AutotuneOptions":
        """Read every field this class knows from ``obj`` (e.g. ``fusegen.config.options.DebugOptions``)."""
        kw = {}
        for f in attrs.fields(cls):
            if hasattr(obj, f.name):
                kw[f.name] = getattr(obj, f.name)
        for flag, field in (("xla_gpu_autotune_compile_timeout", "compile_timeout_s"),
                            ("xla_gpu_autotune_profile_timeout", "profile_timeout_s")):
            if hasattr(obj, flag):
                kw[field] = float(getattr(obj, flag))
        kw.update(overrides)
        return cls(**kw)

    @property
    def check_correctness(self) -> bool:
        return self.xla_gpu_autotune_level >= 4

    @property
    def allow_autotuning(self) -> bool:
        """False for level 0 or deterministic ops (``config_assigner_pass.cc:276-279``)."""
        return (self.xla_gpu_autotune_level > 0 and not self.xla_gpu_deterministic_ops
                and not self.xla_gpu_exclude_nondeterministic_ops)

    def fingerprint(self, backends: Sequence[CodegenBackend] = ()) -> str:
        """sha256 hex of the result-changing options and the selected backends' ``name:version``."""
        d = {k: getattr(self, k) for k in RESULT_CHANGING}
        d["xla_gpu_experimental_autotune_backends"] = None  # represented by the selected set below
        d["backends"] = sorted(f"{b.name}:{b.version}" for b in backends)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def default_top_k(profiler: Profiler | None, device: Any) -> int:
    """``cost_model_top_k`` when the options leave it ``None``.

    :data:`CPU_DEFAULT_TOP_K` when the autotuner will build its own profiler (``profiler is None``) and
    that is CPU wall time (no CuPy/GPU), and ``device`` is a description the cost model can use; else 0.
    A profiler passed in explicitly (tests, benchmarks) keeps every config.
    """
    if profiler is not None or not hasattr(device, "memory_bandwidth"):
        return 0
    from fusegen.autotuning.profiler import CudaEventsProfiler

    ok, _ = CudaEventsProfiler.availability()
    return 0 if ok else CPU_DEFAULT_TOP_K


# --------------------------------------------------------------------------------------------
# Backend selection and discovery
# --------------------------------------------------------------------------------------------

def select_backends(backends: Sequence[CodegenBackend], spec: str) -> list[CodegenBackend]:
    """Backends enabled by ``xla_gpu_experimental_autotune_backends`` (case-insensitive names).

    ``""`` keeps all; ``"a,b"`` keeps exactly those; ``"+a,-b"`` edits the full set (XLA's syntax).

    Raises:
        ValueError: an unknown name (listing the known ones), or plain names mixed with ``+``/``-``.
    """
    known = [b.name.lower() for b in backends]
    items = [s.strip() for s in (spec or "").split(",") if s.strip()]
    if not items:
        return list(backends)
    signed = [s[0] in "+-" for s in items]
    if any(signed) and not all(signed):
        raise ValueError(f"xla_gpu_experimental_autotune_backends={spec!r}: either list backends or edit the "
                         f"default set with +name/-name, not both")
    enabled = set(known) if all(signed) else set()
    for s in items:
        name = s[1:].strip().lower() if s[0] in "+-" else s.lower()
        if name not in known:
            raise ValueError(f"xla_gpu_experimental_autotune_backends: unknown backend {name!r}; "
                             f"registered: {', '.join(known) or '(none)'}")
        if s[0] == "-":
            enabled.discard(name)
        else:
            enabled.add(name)
    return [b for b in backends if b.name.lower() in enabled]


def discover_backends(pm: Any = None) -> list[CodegenBackend]:
    """Backends contributed through the ``fusegen_codegen_backends`` hook, sorted by ``rank`` (stable).

    Same order as ``PluginManager.codegen_backends`` for equal ranks; a backend name registered by two
    plugins is an error naming both.

    Raises:
        fusegen.plugin_manager.PluginError: a plugin raised or returned something that is not a
            :class:`CodegenBackend`.
    """
    from fusegen.plugin_manager import PluginError, default_plugin_manager

    pm = pm or default_plugin_manager()
    hook = getattr(pm.pm.hook, "fusegen_codegen_backends", None)
    if hook is None:
        return []
    out: list[CodegenBackend] = []
    owner: dict[str, str] = {}
    for impl in reversed(hook.get_hookimpls()):  # pluggy's call order, as PluginManager.codegen_backends
        try:
            res = impl.function()
        except Exception as e:
            raise PluginError(impl.plugin_name, "raised in fusegen_codegen_backends", e) from e
        for b in res or []:
            if not isinstance(b, CodegenBackend):
                raise PluginError(impl.plugin_name, f"returned {type(b).__name__} from fusegen_codegen_backends, "
                                                    f"expected CodegenBackend")
            if b.name in owner:
                raise PluginError(impl.plugin_name, f"registers codegen backend {b.name!r}, already registered by "
                                                    f"{owner[b.name]!r}")
            owner[b.name] = impl.plugin_name
            out.append(b)
    return sorted(out, key=lambda b: b.rank)


# --------------------------------------------------------------------------------------------
# Which instructions
# --------------------------------------------------------------------------------------------

def needs_config(instr: "Instruction", tune_emitter_fusions: bool = False, retune: bool = False) -> bool:
    """Whether ``instr`` gets a config (``config_assigner_pass.cc:115-230``).

    cuBLASLt custom calls without ``selected_algorithm``, cuDNN convolutions without an algorithm,
    ``__triton_gemm`` fusions without ``triton_gemm_config``, ``__triton_nested_gemm_fusion`` without
    ``block_level_fusion_config``, ``__cudnn$fusion`` without ``plan_id``, ``__custom_fusion`` without
    ``custom_fusion_config``; with ``tune_emitter_fusions`` also other non-custom fusions without
    scatter. ``retune`` (beyond XLA) also takes those kinds when they already carry a config, e.g.
    an optimized module from XLA tuned on another machine.
    """
    bc = instr.backend_config
    if instr.opcode == "custom-call":
        target = str(instr.attrs.get("custom_call_target", "")).strip('"')
        if target.startswith("__cublas$lt$matmul"):
            gbc = bc.get("gemm_backend_config", {}) if isinstance(bc, dict) else {}
            return retune or not (isinstance(gbc, dict) and "selected_algorithm" in gbc)
        if target.startswith("__cudnn$conv"):
            cbc = bc.get("cudnn_conv_backend_config", {}) if isinstance(bc, dict) else {}
            return retune or not (isinstance(cbc, dict) and cbc.get("algorithm"))
        return False
    if instr.opcode != "fusion":
        return False
    kind = instr.fusion_backend_kind
    fbc = bc.get("fusion_backend_config", {}) if isinstance(bc, dict) else {}
    fbc = fbc if isinstance(fbc, dict) else {}
    if kind == "__triton_gemm":
        return retune or "triton_gemm_config" not in fbc
    if kind == "__triton_nested_gemm_fusion":
        return retune or "block_level_fusion_config" not in fbc
    if kind == "__cudnn$fusion":
        cfc = fbc.get("cudnn_fusion_config", {})
        return retune or not (isinstance(cfc, dict) and "plan_id" in cfc)
    if kind == "__custom_fusion":
        return retune or "custom_fusion_config" not in fbc
    if tune_emitter_fusions and instr.attrs.get("kind") != "kCustom" and kind is None:
        return not any(i.opcode == "scatter" for i in instr.fused_computation.instructions)
    return False


def tunable_instructions(module: "Module", tune_emitter_fusions: bool = False,
                         retune: bool = False) -> list["Instruction"]:
    """Instructions of ``module``'s non-fused computations that need a config, in module order."""
    fused: set[int] = set()
    for c in module.computations:
        for i in c.instructions:
            if i.opcode == "fusion":
                for sub in i.called_computations:
                    fused.add(id(sub))
    out = []
    for c in module.computations:
        if id(c) in fused:
            continue
        out.extend(i for i in c.instructions if needs_config(i, tune_emitter_fusions, retune))
    return out


def describe(instr: "Instruction") -> str:
    """The instruction as HLO text (for XLA's messages that embed it)."""
    try:
        from fusegen.hlo.printer import print_instruction

        return print_instruction(instr)
    except Exception:  # printer missing or cannot print this instruction: fall back to a short form
        return f"%{instr.name} = {instr.opcode}(...)"


# --------------------------------------------------------------------------------------------
# Reports
# --------------------------------------------------------------------------------------------

@attrs.define
class InstructionReport:
    """What happened to one instruction (one row of the summary table).

    ``step``: ``cache`` | ``tuned`` | ``single-config`` | ``single-compiled`` | ``first-compilable`` |
    ``default`` | ``kept`` (re-tuning, no supported config here: its own config stays) | ``error``; ``cache``: ``memory`` | ``directory`` | ``miss``. ``configs`` counts the
    configs tried (after the cost model), ``supported`` every supported config before it.
    """

    name: str
    key: str = ""
    cache: str = "miss"
    step: str = ""
    configs: int = 0
    supported: int = 0
    compiled: int = 0
    failures: dict[str, int] = attrs.field(factory=dict)
    winner: str | None = None
    duration_us: float | None = None
    scratch_bytes: int = 0
    tie_break: bool = False
    error: str | None = None
    compile_seconds: float = 0.0
    seconds: float = 0.0
    results: list[ProfileResult] = attrs.field(factory=list, repr=False)

    @property
    def cache_hit(self) -> bool:
        return self.cache in ("memory", "directory")

    def to_json(self) -> dict:
        d = attrs.asdict(self, filter=lambda a, v: a.name != "results")
        d["cache_hit"] = self.cache_hit
        return d


def summary_table(reports: Sequence[InstructionReport], title: str = "autotuning"):
    """A ``rich`` table: configs tried, failures by kind, winner, time, scratch, tie-break, cache."""
    from rich.markup import escape
    from rich.table import Table

    t = Table(title=title)
    for col in ("instruction", "cache", "step", "configs", "compiled", "failures", "winner", "time µs",
                "scratch B", "tie-break"):
        t.add_column(col, overflow="fold")
    for r in reports:
        fails = ", ".join(f"{k}×{v}" for k, v in sorted(r.failures.items())) or "-"
        cache = f"hit ({r.cache})" if r.cache_hit else r.cache
        err = r.error.splitlines()[0] if r.error else ""
        err = err if len(err) <= 160 else err[:159] + "…"  # XLA's messages embed the whole instruction
        t.add_row(r.name, cache, r.step if not r.error else f"[red]error[/]: {escape(err)}",
                  str(r.configs) if r.supported <= r.configs else f"{r.configs} of {r.supported}",
                  str(r.compiled), fails, r.winner or "-",
                  "-" if r.duration_us is None else f"{r.duration_us:.2f}", str(r.scratch_bytes),
                  "yes" if r.tie_break else "no")
    return t


# --------------------------------------------------------------------------------------------
# The autotuner
# --------------------------------------------------------------------------------------------

class Autotuner:
    """Assigns a config to each tunable instruction.

    Args:
        backends: the codegen backends, in XLA's order of preference (the first compilable config at
            level 0 is searched in this order).
        options: :class:`AutotuneOptions`.
        device: a ``DeviceDescription`` (or a model string) for the cache key and the cost model.
        cache: a :class:`TieredCache`; default from the options' cache dir and mode.
        profiler: default CUDA events on a GPU, CPU wall time otherwise.
        record_dir: write a replay record per tuned instruction (``fusegen tune --replay``).
        progress: a ``rich.progress.Progress`` to report on, or ``None``.
    """

    def __init__(self, backends: Sequence[CodegenBackend], options: AutotuneOptions | None = None,
                 device: Any = None, cache: TieredCache | None = None, profiler: Profiler | None = None,
                 record_dir: str | Path | None = None, progress: Any = None):
        self.options = options or AutotuneOptions()
        names = [b.name for b in backends]
        dup = {n for n in names if names.count(n) > 1}
        if dup:
            raise ValueError(f"two codegen backends share the name(s) {', '.join(sorted(dup))}")
        self.all_backends = list(backends)
        self.backends = select_backends(backends, self.options.xla_gpu_experimental_autotune_backends)
        self.by_name = {b.name: b for b in self.all_backends}
        if device is None:
            from fusegen.device import DEFAULT_DEVICE

            device = DEFAULT_DEVICE
        self.device = device
        if self.options.cost_model_top_k is None:
            self.options = attrs.evolve(self.options, cost_model_top_k=default_top_k(profiler, device))
        if self.options.cost_model_top_k > 0 and not hasattr(device, "memory_bandwidth"):
            raise ValueError("cost_model_top_k needs a device description (fusegen.device), not a model string")
        self.cache = cache if cache is not None else TieredCache(
            self.options.xla_gpu_per_fusion_autotune_cache_dir or None,
            self.options.xla_gpu_experimental_autotune_cache_mode)
        self._profiler = profiler
        self.record_dir = Path(record_dir) if record_dir else None
        self.progress = progress
        self.fingerprint = self.options.fingerprint(self.backends)
        self._pool: CompilePool | None = None
        self._supervisor: ProfileSupervisor | None = None
        self.compiles = 0  # candidates compiled (tests count these)

    # -- resources -----------------------------------------------------------------------------
    @property
    def profiler(self) -> Profiler:
        if self._profiler is None:
            self._profiler = default_profiler(self.options.profile_runs)
        return self._profiler

    def pool(self) -> CompilePool:
        if self._pool is None:
            self._pool = CompilePool(self.options.compile_workers, self.options.compile_timeout_s)
        return self._pool

    def supervisor(self) -> ProfileSupervisor | None:
        if self.options.profile_in_worker == "none":
            return None
        if self._supervisor is None:
            self._supervisor = ProfileSupervisor(self.options.profile_timeout_s)
        return self._supervisor

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None
        if self._supervisor is not None:
            self._supervisor.close()
            self._supervisor = None

    def __enter__(self) -> "Autotuner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- steps ---------------------------------------------------------------------------------
    def key_for(self, instr: "Instruction") -> CacheKey:
        return make_key(instr, self.device, self.fingerprint)

    def supported_configs(self, instr: "Instruction") -> list[Config]:
        out: list[Config] = []
        for b in self.backends:
            try:
                cs = b.get_supported_configs(instr)
            except Exception as e:  # a backend that cannot enumerate is skipped, as XLA's orchestrator does
                log.warning("backend %s failed to list configs for %%%s: %s", b.name, instr.name, e)
                continue
            for c in cs:
                if c.backend != b.name:
                    raise AutotuneError(f"backend {b.name!r} returned a config of backend {c.backend!r}")
                if c not in out:  # a repeated config would be compiled and profiled twice
                    out.append(c)
        return out

    def compile_configs(self, instr: "Instruction", configs: Sequence[Config], parallel: bool = True,
                        on_done: Callable[[CompileOutcome], Any] | None = None) -> list[CompileOutcome]:
        """Compile ``configs``; worker processes unless the backend compiles in process or no printer."""
        self.compiles += len(configs)
        outcomes: list[CompileOutcome | None] = [None] * len(configs)
        remote: list[CompileTask] = []
        local: list[int] = []
        text = None
        for i, c in enumerate(configs):
            b = self.by_name[c.backend]
            if not b.compiles_in_process and self.options.compile_workers != 0:
                if text is None:
                    try:
                        text = instruction_to_text(instr)
                    except CompilePoolUnavailable as e:
                        log.warning("%s; compiling in process", e)
                        text = ""
                if text:
                    remote.append(CompileTask(i, b.worker_spec(), c.to_json(), text))
                    continue
            local.append(i)
        background = None
        if remote and parallel:
            # Worker processes compile while in-process backends compile here.
            import concurrent.futures

            ex = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="fusegen-compile-pool")
            background = ex.submit(self.pool().compile_all, remote, on_done)
            ex.shutdown(wait=False)
        for i in local:
            c, b = configs[i], self.by_name[configs[i].backend]
            t0 = time.perf_counter()
            try:
                exe = b.compile(instr, c)
                if exe is None:
                    raise CompilationFailed("backend returned no executable")
                outcomes[i] = CompileOutcome(i, exe, None, time.perf_counter() - t0)
            except CompilationFailed as e:
                outcomes[i] = CompileOutcome(i, None, e.reason, time.perf_counter() - t0)
            except Exception as e:
                outcomes[i] = CompileOutcome(i, None, f"{type(e).__name__}: {e}", time.perf_counter() - t0)
            if on_done:
                on_done(outcomes[i])
        if remote:
            if background is not None:
                for o in background.result():
                    outcomes[o.index] = o
            else:
                for t in remote:
                    o = self.pool().compile_all([t], on_done)[0]
                    outcomes[o.index] = o
        return [o for o in outcomes if o is not None]

    def _validate(self, instr: "Instruction", entry: CacheEntry) -> None:
        """A cached config must pass its backend's check before it is applied (unknown backends: see _tune)."""
        b = self.by_name.get(entry.result.config.backend)
        if b is not None:
            b.validate_config(instr, entry.result.config)

    def _apply(self, instr: "Instruction", config: Config) -> None:
        b = self.by_name.get(config.backend)
        if b is None:
            raise AutotuneError(f"no registered backend {config.backend!r} to apply {config.name}")
        b.apply_config(instr, config)

    # -- one instruction -----------------------------------------------------------------------
    def tune_instruction(self, instr: "Instruction") -> InstructionReport:
        """Assign a config to ``instr`` (in place) and report what happened.

        Raises:
            AutotuneError: ``NotFound``/``Internal`` with XLA's messages (see the module docstring).
        """
        t_start = time.perf_counter()
        rep = InstructionReport(instr.name)
        key = self.key_for(instr)
        rep.key = key.digest
        try:
            self._tune(instr, key, rep)
        finally:
            rep.seconds = time.perf_counter() - t_start
        return rep

    def _status(self, text: str) -> None:
        if self.progress is not None and getattr(self, "_task", None) is not None:
            self.progress.update(self._task, description=text)

    def _tune(self, instr: "Instruction", key: CacheKey, rep: InstructionReport) -> None:
        opts = self.options
        # 1. cache
        entry, where = self.cache.lookup(key, validate=lambda e: self._validate(instr, e))
        if entry is not None:
            cfg = entry.result.config
            if cfg.backend not in self.by_name:
                warnings.warn(f"cached config {cfg.name} for %{instr.name} names backend {cfg.backend!r}, which "
                              f"is not registered; ignoring it", RuntimeWarning, stacklevel=3)
            else:
                self._apply(instr, cfg)
                rep.cache, rep.step, rep.winner = where, "cache", cfg.name
                rep.duration_us, rep.scratch_bytes = entry.result.duration_us, entry.result.scratch_bytes
                rep.configs, rep.failures = entry.result.candidates, dict(entry.result.failures)
                return
        rep.cache = "miss"
        # 2. ahead-of-time results required
        if opts.xla_gpu_require_complete_aot_autotune_results:
            raise AutotuneError(f"No cached config found for HLO instr: {describe(instr)}", code="NotFound")
        configs = self.supported_configs(instr)
        rep.supported = len(configs)
        # 3. cost model
        if opts.cost_model_top_k > 0 and configs:
            configs, _ = cost_model.rank_configs(instr, configs, self.by_name, self.device, opts.cost_model_top_k)
        rep.configs = len(configs)
        # 4. no tuning
        if not opts.allow_autotuning:
            self._first_compilable(instr, configs, rep)
            return
        # 5. tune
        if not configs and opts.retune_configured and not needs_config(instr, opts.tune_emitter_fusions):
            # Re-tuning an instruction that carries a config, with no backend able to tune it here (cuBLASLt
            # without a GPU): keep its config rather than fail; nothing is cached.
            rep.step = "kept"
            return
        if not configs:
            raise AutotuneError(f"No supported configs found for HLO: {describe(instr)}", code="NotFound")
        if len(configs) == 1:
            self._finish(instr, key, rep, configs[0], "single-config", None)
            return
        self._status(f"compiling %{instr.name}: {len(configs)} configs")
        self._compiled_now = 0
        t0 = time.perf_counter()
        outcomes = self.compile_configs(instr, configs, on_done=self._advance_compile)
        rep.compile_seconds = time.perf_counter() - t0
        compile_failed = []
        cands: list[Candidate] = []
        for o in outcomes:
            c = configs[o.index]
            if o.ok:
                b = self.by_name[c.backend]
                cands.append(Candidate(c, o.executable, not b.can_produce_wrong_results(), int(b.scratch_bytes(c))))
            else:
                compile_failed.append(ProfileResult(c.name, failure=Failure(FailureKind.COMPILATION_FAILED, o.error or ""),
                                                    config=c, scratch_bytes=int(self.by_name[c.backend].scratch_bytes(c))))
        rep.compiled = len(cands)
        rep.failures = dict(collections.Counter(r.failure.kind.name for r in compile_failed))
        if not cands:
            rep.results = compile_failed
            raise AutotuneError("No candidates could be compiled." + _failure_lines(compile_failed), code="Internal")
        if len(cands) == 1:
            self._finish(instr, key, rep, cands[0].config, "single-compiled", None)
            return
        self._status(f"profiling %{instr.name}: {len(cands)} candidates")
        runner = ConfigRunner(
            self.profiler, check_correctness=opts.check_correctness, init_buffers=opts.check_correctness,
            redzone_bytes=opts.xla_gpu_redzone_padding_bytes if opts.check_correctness else 0,
            rtol=opts.xla_gpu_autotune_gemm_rtol,
            crash_on_verification_failures=opts.xla_gpu_crash_on_verification_failures, seed=opts.seed,
            supervisor=self.supervisor(), supervise=opts.profile_in_worker)
        profiled = runner.profile_all(instr, cands)
        results = _merge_in_config_order(configs, profiled, compile_failed)
        rep.results = results
        rep.failures = dict(collections.Counter(r.failure.kind.name for r in results if r.failed))
        if self.record_dir is not None:
            from fusegen.autotuning.replay import write_record

            write_record(self.record_dir, instr.name, key.digest, results, window_us=opts.scratch_bytes_window_us,
                         rtol=opts.xla_gpu_autotune_gemm_rtol, check_correctness=opts.check_correctness)
        sel = pick_best_config(results, opts.scratch_bytes_window_us)
        rep.tie_break = sel.tie_break
        self._finish(instr, key, rep, sel.result.config, "tuned", sel.result)

    def _finish(self, instr: "Instruction", key: CacheKey, rep: InstructionReport, config: Config, step: str,
                result: ProfileResult | None) -> None:
        self._apply(instr, config)
        b = self.by_name[config.backend]
        rep.step, rep.winner = step, config.name
        rep.duration_us = result.duration_us if result is not None else None
        rep.scratch_bytes = result.scratch_bytes if result is not None else int(b.scratch_bytes(config))
        tr = TuneResult(config, b.version, rep.duration_us, rep.scratch_bytes, rep.configs, dict(rep.failures))
        self.cache.insert(CacheEntry(key, tr))

    def _first_compilable(self, instr: "Instruction", configs: Sequence[Config], rep: InstructionReport) -> None:
        """Level 0: first supported config that compiles (in order), else the first default config."""
        errors = []
        for c in configs:
            o = self.compile_configs(instr, [c], parallel=False)[0]
            if o.ok:
                rep.compiled = 1
                self._apply(instr, c)
                rep.step, rep.winner = "first-compilable", c.name
                rep.scratch_bytes = int(self.by_name[c.backend].scratch_bytes(c))
                return
            errors.append(f"{c.name}: {o.error}")
            rep.failures["COMPILATION_FAILED"] = rep.failures.get("COMPILATION_FAILED", 0) + 1
        for b in self.backends:
            d = b.get_default_config(instr)
            if d is not None:
                self._apply(instr, d)
                rep.step, rep.winner = "default", d.name
                rep.scratch_bytes = int(b.scratch_bytes(d))
                return
        supported = "no supported configs" if not configs else "all supported configs failed to compile: " + "; ".join(errors)
        raise AutotuneError(f"No supported config found for HLO: {describe(instr)} Supported configs status: "
                            f"{supported}; Default config status: no backend with default config found for "
                            f"instruction", code="NotFound")

    def _advance_compile(self, outcome: CompileOutcome) -> None:
        self._compiled_now = getattr(self, "_compiled_now", 0) + 1
        self._status(f"compiling: {self._compiled_now} done")

    # -- a module ------------------------------------------------------------------------------
    def tune_module(self, module: "Module", instructions: Iterable["Instruction"] | None = None,
                    raise_on_error: bool = True) -> list[InstructionReport]:
        """Tune every instruction that needs a config (or ``instructions``); identical keys tune once.

        Raises:
            AutotuneError: when any instruction failed and ``raise_on_error``: XLA's
                ``"Failed to get configs for: N out of M instructions. ..."`` with the first failure.
        """
        instrs = list(instructions) if instructions is not None else tunable_instructions(
            module, self.options.tune_emitter_fusions, self.options.retune_configured)
        reports: list[InstructionReport] = []
        if self.progress is not None:
            self._task = self.progress.add_task("autotuning", total=len(instrs))
        try:
            for instr in instrs:
                self._status(f"autotuning %{instr.name}")
                try:
                    reports.append(self.tune_instruction(instr))
                except AutotuneError as e:
                    log.warning("Could not get config for HLO: %s. Status: %s", instr.name, e)
                    reports.append(InstructionReport(instr.name, step="error", error=f"{e.code}: {e.message}"))
                if self.progress is not None:
                    self.progress.advance(self._task)
        finally:
            self._task = None
        failed = [r for r in reports if r.error]
        if failed and raise_on_error:
            raise AutotuneError(
                f"Failed to get configs for: {len(failed)} out of {len(instrs)} instructions. See logs for all "
                f"failures. Example failure: \n%{failed[0].name}: {failed[0].error}", code="Internal")
        return reports


def _failure_lines(results: Sequence[ProfileResult]) -> str:
    if not results:
        return ""
    return f"\nFailures ({len(results)}):\n" + "\n".join(f"{r.name}: {r.failure}" for r in results)


def _merge_in_config_order(configs: Sequence[Config], profiled: Sequence[ProfileResult],
                           compile_failed: Sequence[ProfileResult]) -> list[ProfileResult]:
    by_name = {r.name: r for r in list(profiled) + list(compile_failed)}
    return [by_name[c.name] for c in configs if c.name in by_name]


def autotune_module(module: "Module", backends: Sequence[CodegenBackend] | None = None,
                    options: AutotuneOptions | None = None, device: Any = None, **kw: Any) -> list[InstructionReport]:
    """Convenience: tune ``module`` with ``backends`` (default: from plugins), closing the pool after."""
    with Autotuner(backends if backends is not None else discover_backends(), options, device, **kw) as tuner:
        return tuner.tune_module(module)
