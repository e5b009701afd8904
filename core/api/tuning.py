"""``fusegen.tune``: autotune every instruction that needs a config, in this process, one shard, or on Ray.

:func:`tune` is the library's ``fusegen tune``; :func:`autotune_modules` the tuning step of ``run --autotune``
and ``report --autotune``; :func:`load_xla_results` / :func:`dump_xla_results` read and write XLA's
AutotuneResults text proto around tuning (``xla_gpu_load_autotune_results_from`` /
``xla_gpu_dump_autotune_results_to``).
"""

from __future__ import annotations

from typing import Any, Sequence

import attrs

from fusegen.api.loading import ModuleLike, as_modules, prepare, session
from fusegen.api.progress import progress_sink


@attrs.frozen
class TuneResult:
    """What ``fusegen tune --json`` prints, typed (every key of :meth:`to_json` is an attribute).

    Attributes:
        module: the first module's file name (the CLI's first path).
        modules: every module's file name.
        instructions: one :class:`~fusegen.autotuning.instructions.InstructionReport` per tuned instruction
            (``name``, ``winner``, ``configs``, ``duration_us`` (µs), ``error`` ...).
        cache: the autotune cache's counters.
        tuned_modules: the modules, with the winners applied to their backend configs.
        extra: the keys a shard (``shard``), a Ray run (``cluster``) or XLA's results files
            (``xla_results_loaded``, ``xla_results_dumped``) add to the document; also attributes.
        notes: warnings of reading or writing XLA's results files (the CLI prints them).
        timing: how candidates were timed: ``measure`` (CUDA events on the GPU), ``estimate`` (ranked by the H200
            performance model: no GPU) or ``cpu`` (Triton's interpreter, on request); each instruction's ``source``
            says where its figure came from.
        note: why nothing was tuned (``""`` when something was), naming ``retune=True``.
    """

    module: str
    modules: tuple[str, ...]
    instructions: tuple
    cache: dict
    tuned_modules: tuple = attrs.field(default=(), repr=False, eq=False)
    extra: dict = attrs.field(factory=dict, repr=False, eq=False)
    notes: tuple[str, ...] = attrs.field(default=(), repr=False, eq=False)
    timing: str = "measure"
    note: str = ""

    @property
    def ok(self) -> bool:
        """Every instruction got a config (``tune``'s exit 0)."""
        return not any(r.error for r in self.instructions)

    def __getattr__(self, name: str) -> Any:
        if name in ("shard", "cluster", "xla_results_loaded", "xla_results_dumped"):
            return self.extra.get(name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def to_json(self) -> dict:
        out = {"module": self.module, "modules": list(self.modules),
               "instructions": [r.to_json() for r in self.instructions], "cache": dict(self.cache),
               "timing": self.timing, **self.extra}
        if self.note:
            out["note"] = self.note
        return out

    def to_dataframe(self) -> Any:
        """One row per tuned instruction (``name``, ``step``, ``winner``, ``duration_us``, ...).

        Raises:
            ImportError: pandas is not installed.
        """
        from fusegen.api.frames import dataframe

        return dataframe([r.to_json() for r in self.instructions])


@attrs.frozen
class AutotuneRun:
    """What :func:`autotune_modules` did: ``tuned`` is ``[(module name, InstructionReport)]``; ``compiles``
    counts the candidates compiled; ``cache`` the cache's counters; ``notes`` as in :class:`TuneResult`."""

    tuned: tuple
    compiles: int
    cache: dict
    scratch_bytes_window_us: float
    notes: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not any(r.error for _, r in self.tuned)


def load_xla_results(tuner: Any, debug_options: Any) -> tuple[dict, list[str]]:
    """Load ``xla_gpu_load_autotune_results_from`` (if set) into ``tuner``: ``(JSON keys, notes)``.

    Raises:
        fusegen.cache.xla_results.XlaResultsError: the file cannot be read.
    """
    path = getattr(debug_options, "xla_gpu_load_autotune_results_from", "")
    if not path:
        return {}, []
    from fusegen.cache.xla_results import load_into

    rep = load_into(tuner, path)
    return {"xla_results_loaded": {"file": path, "results": rep.results, "entries": len(rep.entries),
                                   "skipped": rep.skipped, "notes": rep.notes}}, list(rep.notes)


def dump_xla_results(tuner: Any, debug_options: Any) -> tuple[dict, list[str]]:
    """Write ``xla_gpu_dump_autotune_results_to`` (if set) from ``tuner``'s memory: ``(JSON keys, notes)``.

    Raises:
        OSError: the file cannot be written.
    """
    path = getattr(debug_options, "xla_gpu_dump_autotune_results_to", "")
    if not path:
        return {}, []
    from fusegen.cache.xla_results import dump_from

    rep = dump_from(tuner, path)
    return {"xla_results_dumped": {"file": path, "results": rep.results, "skipped": rep.skipped,
                                   "estimates_left_out": rep.estimates_left_out}}, list(rep.notes)


def tune_options(debug_options: Any, **overrides: Any) -> Any:
    """An :class:`~fusegen.autotuning.autotuner.AutotuneOptions` from the configuration's debug options and the
    call's values (``None`` ones left out).

    Raises:
        ValueError, TypeError: a bad option value.
    """
    from fusegen.autotuning.autotuner import AutotuneOptions

    return AutotuneOptions.from_debug_options(debug_options, **{k: v for k, v in overrides.items() if v is not None})


def codegen_backends(pm: Any = None) -> list:
    """The plugins' codegen backends (``fusegen_codegen_backends``).

    Raises:
        ValueError: no plugin contributes one; fusegen.plugin_manager.PluginError.
    """
    from fusegen.autotuning.autotuner import discover_backends

    found = discover_backends(pm)
    if not found:
        raise ValueError("no codegen backends are registered (plugins contribute them through the "
                         "fusegen_codegen_backends hook)")
    return found


def autotune_modules(modules: list, s: Any, *, cache_dir: str | None = None, record_dir: str | None = None,
                     cost_model_top_k: int | None = None, progress: Any = None,
                     measure_on_cpu: bool = False) -> AutotuneRun:
    """Tune every tunable instruction of ``modules`` (also those that carry a config, as ``run --autotune``)
    in place, with XLA's results files around it. Without a GPU candidates are ranked by the H200 performance
    model unless ``measure_on_cpu``.

    Raises:
        fusegen.autotuning.selection.AutotuneError, OSError (cache or record directory), PluginError,
        ValueError (bad options, no codegen backend), XlaResultsError.
    """
    from fusegen.autotuning.autotuner import Autotuner

    options = tune_options(s.config.debug_options, retune_configured=True,
                           xla_gpu_per_fusion_autotune_cache_dir=cache_dir, cost_model_top_k=cost_model_top_k,
                           measure_on_cpu=bool(measure_on_cpu))
    sink = progress_sink(progress)
    tuner = Autotuner(codegen_backends(s.pm), options, s.device, record_dir=record_dir, progress=sink)
    tuned = []
    with tuner:
        _, notes = load_xla_results(tuner, s.config.debug_options)
        for m in modules:
            tuned.extend((m.name, r) for r in tuner.tune_module(m, raise_on_error=False))
        notes += dump_xla_results(tuner, s.config.debug_options)[1]
        stats = dict(tuner.cache.stats)
    if sink is not None:
        sink.finish()
    return AutotuneRun(tuple(tuned), tuner.compiles, stats, tuner.options.scratch_bytes_window_us, tuple(notes))


def _shard(shard: Any) -> tuple[int, int] | None:
    if shard is None or isinstance(shard, tuple):
        return shard
    from fusegen.autotuning.sharding import parse_shard

    return parse_shard(str(shard))


def _tune_all(tuner: Any, modules: list, shard: tuple[int, int] | None, ray: Any, progress: Any,
              extra: dict) -> list:
    """Tune ``modules`` in this process, one shard of them, or on Ray; fills ``extra`` (JSON keys)."""
    if ray is not None:
        from fusegen.autotuning.distributed import tune_on_ray

        r = tune_on_ray(tuner, modules, ray, progress)
        extra["cluster"] = {"address": ray.address or "local", "cpus": r.cpus, "gpus": r.gpus, "tuned": r.tuned,
                            "measured_on": r.measured_on, "settled": r.settled, "seconds": round(r.seconds, 3)}
        return r.reports
    if shard is not None:
        from fusegen.autotuning.sharding import tune_shard

        k, n = shard
        sr = tune_shard(tuner, modules, k, n)
        extra["shard"] = {"index": k, "count": n, "unique": sr.unique, "keys": sr.keys}
        return sr.reports
    reports = []
    for m in modules:
        reports.extend(tuner.tune_module(m, raise_on_error=False))
    return reports


def tune(module: ModuleLike, *, backends: str | None = None, level: int | None = None, cache_dir: str | None = None,
         cache_mode: str | None = None, retune: bool = False, workers: int | None = 0,
         cost_model_top_k: int | None = None, record_dir: str | None = None, compile_timeout: float | None = None,
         shard: str | tuple[int, int] | None = None, cluster: str | None = None, ray_num_cpus: int | None = None,
         measure_on_cpu: bool = False, remeasure_estimates: bool = True,
         device: Any = None, config: Any = None, xla_flags: Sequence[str] = (), passes: Sequence[str] | None = None,
         pm: Any = None, progress: Any = None, _kill_worker_once: str | None = None) -> TuneResult:
    """Autotune every instruction that needs a config with the plugins' codegen backends (``fusegen tune``);
    the winners are applied to the modules' backend configs in place.

    Without a GPU the candidates are ranked by the H200 performance model (``fusegen.perf``) and every result says
    so (``TuneResult.timing``, each instruction's ``source``); the host backend is never a candidate for a GPU
    device key. A module whose instructions all carry a config (an XLA-optimized module) tunes nothing unless
    ``retune=True``: the result's ``note`` says so.

    Args:
        module: a Module, a list of them, a path or HLO text, or a :class:`~fusegen.api.Captured`.
        backends: ``xla_gpu_experimental_autotune_backends`` (``"triton"``, ``"+a,-b"``).
        level, cache_dir, cache_mode, retune, cost_model_top_k, record_dir: as ``tune``'s options.
        workers: compile worker processes (0, the default here: compile in this process); they start as
            ``python -m`` workers (:mod:`fusegen.runtime.module_process`) that never re-run the caller's
            ``__main__``, so a plain script needs no ``if __name__ == "__main__":`` guard.
        compile_timeout: seconds one candidate may compile (``xla_gpu_autotune_compile_timeout``).
        shard: ``"K/N"`` or ``(K, N)``: tune only the K-th of N shards of the unique instructions.
        cluster: ``"ray"`` (a local instance of ``ray_num_cpus`` CPUs) or ``"ray://ADDRESS"``; extra
            ``distributed``.
        progress: ``None``, ``"tqdm"`` or a callable taking a :class:`~fusegen.api.progress.ProgressEvent`.
        measure_on_cpu: without a GPU, time candidates in Triton's interpreter (``--measure-on-cpu``).
        remeasure_estimates: on a GPU, re-measure cached figures that are not GPU measurements (``False``:
            ``--no-remeasure``).

    Raises:
        fusegen.autotuning.selection.AutotuneError; ValueError (bad options, no codegen backend, both ``shard``
            and ``cluster``); fusegen.autotuning.distributed.DistributedUnavailable (no Ray); OSError (cache
            or record directory); XlaResultsError; and what :func:`~fusegen.api.load_all`,
            :func:`~fusegen.api.session` and :func:`~fusegen.api.prepare` raise.
    """
    from fusegen.autotuning.autotuner import Autotuner

    if shard is not None and cluster is not None:
        raise ValueError("give shard=K/N or cluster=..., not both")
    shard_kn = _shard(shard)
    ray = None
    if cluster is not None:
        from fusegen.autotuning.distributed import RayOptions, parse_cluster

        ray = RayOptions(parse_cluster(cluster), ray_num_cpus, kill_worker_once=_kill_worker_once)
    modules = as_modules(module)
    s = session(config, device, xla_flags, pm)
    options = tune_options(s.config.debug_options, xla_gpu_per_fusion_autotune_cache_dir=cache_dir,
                           xla_gpu_experimental_autotune_cache_mode=cache_mode.upper() if cache_mode else None,
                           xla_gpu_autotune_level=level, xla_gpu_experimental_autotune_backends=backends,
                           compile_workers=workers, cost_model_top_k=cost_model_top_k,
                           retune_configured=True if retune else None, compile_timeout_s=compile_timeout,
                           measure_on_cpu=bool(measure_on_cpu), remeasure_estimates=bool(remeasure_estimates))
    prepare(modules, s, passes)  # an unoptimized module is fused first, as `run` does
    found = codegen_backends(s.pm)
    sink = progress_sink(progress)
    extra: dict = {}
    tuner = Autotuner(found, options, s.device, record_dir=record_dir, progress=None if ray else sink)
    with tuner:
        keys, notes = load_xla_results(tuner, s.config.debug_options)
        extra.update(keys)
        reports = _tune_all(tuner, modules, shard_kn, ray, sink, extra)
        keys, more = dump_xla_results(tuner, s.config.debug_options)
        extra.update(keys)
        stats = dict(tuner.cache.stats)
    if sink is not None:
        sink.finish()
    from fusegen.autotuning.instructions import nothing_to_tune_note

    names = tuple(str(m.filename or m.name) for m in modules)
    return TuneResult(module=names[0], modules=names, instructions=tuple(reports), cache=stats,
                      tuned_modules=tuple(modules), extra=extra, notes=tuple(notes + more), timing=tuner.timing,
                      note="" if reports else nothing_to_tune_note(bool(retune)))
