"""The autotuner: cache, AOT check, cost model, no-tuning path, tune; winner applied and cached.

Mirrors XLA's ``ConfigAssigner::GetConfig`` (``xla/backends/autotuner/config_assigner.cc:291-347``) and
``Autotuner::GetTunedConfig`` (``xla/backends/autotuner/autotuner.cc:177-245``). Per instruction, in
order:

1. cache lookup (memory, then the directory); a cached config of an unregistered backend is ignored
   with a warning;
2. ``xla_gpu_require_complete_aot_autotune_results``: a miss is ``NotFound``
   ``"No cached config found for HLO instr: <instr>"``;
3. optional cost model (fusegen; ``cost_model_top_k``): keep the best ``k`` estimated configs and up to ``k``
   without an estimate (:mod:`fusegen.autotuning.cost_model`);
4. ``xla_gpu_autotune_level=0``: the first supported config that compiles, else the first backend
   default config;
5. tune: the supported configs of every selected backend (``xla_gpu_experimental_autotune_backends``,
   ``+name,-name``); none -> ``NotFound "No supported configs found for HLO: "``; exactly one -> used
   without compiling; else compile all in worker processes; none compiled -> ``Internal "No candidates
   could be compiled."``; one -> used; else ``ConfigRunner.profile_all`` + ``pick_best_config``.
   Levels 1-3 profile without buffer init, red zones or correctness; level >= 4 with all three.

**Without the target GPU** (fusegen): nothing is timed unless asked. The compiled candidates are ranked by
their estimates (``fusegen.perf`` or the backend's own) and ``pick_best_config`` runs on those; a config
without an estimate is only chosen when no config has one (then the first that compiled, as level 0 does, and
like a level-0 pick it is not cached: a GPU run sharing the cache tunes the instruction).
``measure_on_cpu`` times them in Triton's interpreter instead, recorded as CPU time. A backend that runs on the
host (``targets_gpu = False``) is never a candidate for the GPU device key. A library-call fallback (XLA's cuBLAS
fallback for a GEMM fusion: ``CodegenBackend.library_fallback``) competes unless ``xla_gpu_cublas_fallback`` is
false or candidates are timed on the CPU. Every result records its
:class:`~fusegen.cache.provenance.Source`; on a GPU a cached entry that is not a GPU measurement is a hint: the
instruction is re-measured (``remeasure_estimates``).

The winner is written into the instruction's backend config by its backend (``apply_config``) and the
result inserted into the cache (tuned results only, as XLA).
"""

from __future__ import annotations

import collections
import logging
import math
import time
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Iterable, Sequence

import attrs

from fusegen.autotuning import cost_model
from fusegen.autotuning.compile_pool import (CompileOutcome, CompilePool, CompilePoolUnavailable,
                                             CompileTask, instruction_to_text)
from fusegen.autotuning.config_runner import Candidate, ConfigRunner
from fusegen.autotuning.profiler import Profiler, default_profiler
from fusegen.autotuning.supervised import ProfileSupervisor
from fusegen.autotuning.selection import (AutotuneError, Failure, FailureKind,
                                          ProfileResult, pick_best_config)
from fusegen.cache import provenance
from fusegen.cache.format import CacheEntry, TuneResult
from fusegen.cache.key import CacheKey, make_key
from fusegen.cache.tiers import TieredCache
from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Module

log = logging.getLogger("fusegen.autotuning")

from fusegen.autotuning.instructions import (InstructionReport, describe, needs_config,  # noqa: E402,F401
                                            summary_table, tunable_instructions)
from fusegen.autotuning.options import (CPU_DEFAULT_TOP_K, RESULT_CHANGING, AutotuneOptions,  # noqa: E402,F401
                                       default_top_k, discover_backends, for_device, select_backends, timing_mode,
                                       without_names)


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
        if device is None:
            from fusegen.device import DEFAULT_DEVICE

            device = DEFAULT_DEVICE
        self.device = device
        spec = self.options.xla_gpu_experimental_autotune_backends
        usable = for_device(backends, device, spec)
        #: backends registered but never candidates for this device key (the host, on a GPU key)
        self.excluded = {b.name for b in self.all_backends} - {b.name for b in usable}
        self.backends = select_backends(usable, without_names(spec, self.excluded))
        self.by_name = {b.name: b for b in self.all_backends}
        #: how candidates are timed: "measure" (GPU), "estimate" (no timing) or "cpu" (interpreter wall time)
        self.timing = timing_mode(profiler, self.options.measure_on_cpu)
        if not self.options.xla_gpu_cublas_fallback or self.timing == "cpu":
            # XLA cancels the fission backends' configs without the cuBLAS fallback ("exclude_cublas_config is set.",
            # codegen_orchestrator.cc): only the fusion's own configs compete. Timed on the CPU a library call would be
            # numpy's time (the host evaluator), not a GPU kernel's in the interpreter: left out too. The selected set
            # (and so the cache fingerprint) says so.
            self.backends = [b for b in self.backends if not getattr(b, "library_fallback", False)]
        if self.options.cost_model_top_k is None:
            self.options = attrs.evolve(self.options, cost_model_top_k=default_top_k(
                profiler, device, self.options.measure_on_cpu))
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

    def _usable_cached(self, instr: "Instruction", entry: CacheEntry, rep: InstructionReport) -> bool:
        """Whether a cached entry is applied as it is (else the instruction is tuned again; nothing is deleted)."""
        cfg, src = entry.result.config, entry.result.source
        if cfg.backend in self.excluded:
            _ignored(f"cached config {cfg.name} for %{instr.name} is the {cfg.backend!r} backend, which runs on the "
                     f"CPU and is not an XLA:GPU backend; tuning %{instr.name} again")
            return False
        if cfg.backend not in self.by_name:
            _ignored(f"cached config {cfg.name} for %{instr.name} names backend {cfg.backend!r}, which is not "
                     f"registered; ignoring it")
            return False
        if src.is_measurement or src.kind == "untimed":
            return True
        if self.timing == "measure":  # on the GPU anything but a GPU measurement is a hint
            if self.options.remeasure_estimates:
                rep.hint = f"{cfg.name} ({src.label})"
                return False
            return True
        if src.kind == "unknown" or (src.kind == "estimated" and src.model == "fusegen.perf" and
                                     src.model_version != _model_version()):
            # without the GPU: a format-1 entry (an interpreter time taken for the GPU's) or an older model's estimate
            # is estimated again; an estimate of today's model, or CPU time asked for, is applied
            rep.hint = f"{cfg.name} ({src.label})"
            return False
        return True

    def _tune(self, instr: "Instruction", key: CacheKey, rep: InstructionReport) -> None:
        opts = self.options
        # 1. cache
        entry, where = self.cache.lookup(key, validate=lambda e: self._validate(instr, e))
        if entry is not None and self._usable_cached(instr, entry, rep):
            cfg = entry.result.config
            self._apply(instr, cfg)
            rep.cache, rep.step, rep.winner = where, "cache", cfg.name
            rep.duration_us, rep.scratch_bytes = entry.result.duration_us, entry.result.scratch_bytes
            rep.configs, rep.failures = entry.result.candidates, dict(entry.result.failures)
            rep.source = entry.result.source.to_json()
            return
        rep.cache = "miss"
        # 2. ahead-of-time results required
        if opts.xla_gpu_require_complete_aot_autotune_results:
            raise AutotuneError(f"No cached config found for HLO instr: {describe(instr)}", code="NotFound")
        configs = self.supported_configs(instr)
        rep.supported = len(configs)
        # 3. cost model
        estimates: dict = {}
        if opts.cost_model_top_k > 0 and configs:
            configs, estimates = cost_model.rank_configs(instr, configs, self.by_name, self.device,
                                                         opts.cost_model_top_k)
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
            self._finish(instr, key, rep, configs[0], "single-config", None,
                         provenance.untimed("the only supported config"))
            return
        if self.timing == "estimate":
            self._select_by_estimate(instr, key, rep, configs, estimates)
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
            self._finish(instr, key, rep, cands[0].config, "single-compiled", None,
                         provenance.untimed("the only config that compiled"))
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
                         rtol=opts.xla_gpu_autotune_gemm_rtol, check_correctness=opts.check_correctness,
                         source=self.measurement_source())
        sel = pick_best_config(results, opts.scratch_bytes_window_us)
        rep.tie_break = sel.tie_break
        self._finish(instr, key, rep, sel.result.config, "tuned", sel.result, self.measurement_source())

    def measurement_source(self) -> "provenance.Source":
        """What this tuner's timed figures are: a GPU measurement on the device, or CPU wall time."""
        if self.timing == "measure":
            return provenance.measured(getattr(self.device, "model", "") or str(self.device),
                                       getattr(self.profiler, "name", "") or "cuda-events")
        return provenance.cpu_interpreter(getattr(self._profiler, "name", "") or "cpu-wall-time")

    def _select_by_estimate(self, instr: "Instruction", key: CacheKey, rep: InstructionReport,
                            configs: Sequence[Config], estimates: dict) -> None:
        """Without the GPU: ``pick_best_config`` over every config's estimate (µs); the pick is compiled, and a pick
        that does not compile is dropped and the next picked (so usually one compile). A config without an
        estimate is only chosen when no config has one: then the first that compiles, in preference order."""
        opts = self.options
        results: dict[str, ProfileResult] = {}
        models: dict[str, str] = {}
        unestimated: list[Config] = []
        refused: list[Config] = []  # the model refuses them (a tiling that would spill): the very last resort
        for c in configs:
            b = self.by_name[c.backend]
            e = estimates.get(c.name) or cost_model.estimate_config(instr, c, b, self.device)
            if e.seconds is None or not math.isfinite(e.seconds):
                (unestimated if e.seconds is None else refused).append(c)
                continue
            models[c.name] = e.model
            results[c.name] = ProfileResult(c.name, e.seconds * 1e6, int(b.scratch_bytes(c)), None,
                                            not b.can_produce_wrong_results(), c)
        device = getattr(self.device, "model", "") or str(self.device)
        failed: list[ProfileResult] = []
        t0 = time.perf_counter()
        chosen: ProfileResult | None = None
        tie = False
        while results and chosen is None:
            sel = pick_best_config(list(results.values()), opts.scratch_bytes_window_us)
            o = self.compile_configs(instr, [sel.result.config], parallel=False)[0]
            if o.ok:
                chosen, tie = sel.result, sel.tie_break
            else:
                r = results.pop(sel.result.name)
                r.failure = Failure(FailureKind.COMPILATION_FAILED, o.error or "")
                failed.append(r)
        rep.compile_seconds = time.perf_counter() - t0
        rep.failures = dict(collections.Counter(r.failure.kind.name for r in failed))
        if chosen is None:
            for c in unestimated + refused:  # nothing estimated (or nothing estimated compiles): the first that compiles
                o = self.compile_configs(instr, [c], parallel=False)[0]
                if o.ok:
                    rep.compiled, rep.results = 1, _merge_in_config_order(configs, failed, [])
                    # a pick among several with no figure at all: applied, not cached (XLA never caches a level-0
                    # pick), so a GPU run sharing the cache tunes it and an XLA export never sees it
                    self._finish(instr, key, rep, c, "first-compilable", None, provenance.untimed(
                        "no config has an estimate and nothing is timed without the GPU: the first that compiled; "
                        "not cached"), cache=False)
                    return
                failed.append(ProfileResult(c.name, failure=Failure(FailureKind.COMPILATION_FAILED, o.error or ""),
                                            config=c, scratch_bytes=int(self.by_name[c.backend].scratch_bytes(c))))
            rep.results = _merge_in_config_order(configs, failed, [])
            rep.failures = dict(collections.Counter(r.failure.kind.name for r in failed))
            raise AutotuneError("No candidates could be compiled." + _failure_lines(failed), code="Internal")
        rep.compiled, rep.tie_break = 1, tie
        rep.results = _merge_in_config_order(configs, list(results.values()), failed)
        src = provenance.estimated(device, models[chosen.name])
        if self.record_dir is not None:
            from fusegen.autotuning.replay import write_record

            write_record(self.record_dir, instr.name, key.digest, rep.results, window_us=opts.scratch_bytes_window_us,
                         rtol=opts.xla_gpu_autotune_gemm_rtol, check_correctness=False, source=src)
        self._finish(instr, key, rep, chosen.config, "tuned", chosen, src)

    def _finish(self, instr: "Instruction", key: CacheKey, rep: InstructionReport, config: Config, step: str,
                result: ProfileResult | None, source: "provenance.Source", cache: bool = True) -> None:
        self._apply(instr, config)
        b = self.by_name[config.backend]
        rep.step, rep.winner = step, config.name
        rep.duration_us = result.duration_us if result is not None else None
        rep.scratch_bytes = result.scratch_bytes if result is not None else int(b.scratch_bytes(config))
        rep.source = source.to_json()
        if cache:
            tr = TuneResult(config, b.version, rep.duration_us, rep.scratch_bytes, rep.configs, dict(rep.failures),
                            source)
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


def _ignored(message: str) -> None:
    """A cached config not applied: one log line (what the CLI shows) and a :class:`CachedConfigWarning`."""
    from fusegen.cache.tiers import CachedConfigWarning

    log.warning(message)
    warnings.warn(message, CachedConfigWarning, stacklevel=5)


def _model_version() -> int:
    from fusegen.perf import MODEL_VERSION

    return MODEL_VERSION


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
