"""Tuning on a Ray cluster: compile and profile tasks fan out, selection stays central.

``fusegen tune MODULE... --cluster ray[://ADDRESS]`` (extra ``distributed``). The unique tunable
instructions (:func:`fusegen.autotuning.sharding.unique_instructions`) that miss the cache become Ray
tasks:

* one **compile task** per candidate config, on a CPU worker (``num_cpus=1``); the executable comes back
  pickled through Ray's object store when it can be pickled, else the profiling task compiles it again;
* one **profiling task** per instruction, depending on its compile tasks (Ray starts it when they are
  done), on a worker holding one GPU (``num_gpus=1``) when the cluster has GPUs, otherwise on a CPU worker
  timing with the interpreter. It runs :class:`fusegen.autotuning.config_runner.ConfigRunner` and returns the
  raw measurements as a replay record (:func:`fusegen.autotuning.replay.record_json`).

The driver then runs correctness clustering and PickBestConfig over each record
(:func:`fusegen.autotuning.replay.replay`, the code behind ``fusegen tune --replay``), so the winner does
not depend on which worker measured, applies it and writes the cache. Only the driver writes the cache,
after a task's result is in, so a dead worker or a failed task never leaves a partial entry. Ray does all
the scheduling and retrying: a task whose worker dies is re-run elsewhere (``max_retries``), as is one that
raised a transient :data:`RETRY_EXCEPTIONS` error (``retry_exceptions``); a task that still fails makes
that instruction an error row and nothing else.

Cache hits, level 0, ``xla_gpu_require_complete_aot_autotune_results`` and instructions with at most one
config are settled on the driver by the :class:`fusegen.autotuning.autotuner.Autotuner` itself.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import pickle
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, Sequence

import attrs

from fusegen.cache import provenance

from fusegen.autotuning.selection import AutotuneError, Failure, FailureKind, ProfileResult

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.autotuning.autotuner import Autotuner, InstructionReport
    from fusegen.codegen_backend import Config
    from fusegen.hlo.ir import Module

#: The version the ``distributed`` extra pins (pyproject.toml).
RAY_VERSION = "2.60.0"
#: Errors a task is re-run for (besides a dead worker): resources that may be free on the next try.
RETRY_EXCEPTIONS = (OSError, MemoryError, TimeoutError)


class DistributedUnavailable(RuntimeError):
    """Ray is not installed or the cluster cannot be reached (the message says which and how to fix it)."""


@attrs.define
class RayOptions:
    """Where and how to run.

    Attributes:
        address: ``None`` starts a local Ray instance sized to the machine (or joins the one this process
            already started); ``"auto"``, ``"HOST:PORT"`` or ``"ray://HOST:PORT"`` join a running cluster.
        num_cpus: CPUs of a local instance (``None``: all).
        max_retries: re-runs of a task whose worker died or that raised a :data:`RETRY_EXCEPTIONS` error.
        kill_worker_once: fault injection for tests: the first compile task that creates this file kills
            its own worker process (SIGKILL), as a lost machine would.
    """

    address: str | None = None
    num_cpus: int | None = None
    max_retries: int = 3
    kill_worker_once: str | None = None


def parse_cluster(text: str) -> str | None:
    """``--cluster`` value -> Ray address: ``ray`` -> ``None`` (local), ``ray://H:P`` -> ``ray://H:P``,
    ``ray:auto`` / ``ray:H:P`` -> ``auto`` / ``H:P``.

    Raises:
        ValueError: anything that is not ``ray[...]``.
    """
    t = text.strip()
    if t == "ray":
        return None
    if t.startswith("ray://"):
        return t
    if t.startswith("ray:") and len(t) > 4:
        return t[4:]
    raise ValueError(f"--cluster {text!r}: expected ray, ray://HOST:PORT or ray:auto")


def import_ray():
    """The ``ray`` module.

    Raises:
        DistributedUnavailable: Ray is not installed (names the extra to install).
    """
    try:
        import ray
    except ImportError:
        raise DistributedUnavailable(f"--cluster ray needs Ray: pip install 'fusegen[distributed]' "
                                     f"(ray=={RAY_VERSION})") from None
    return ray


# --------------------------------------------------------------------------------------------
# Task bodies (plain functions; wrapped with ray.remote when a run starts)
# --------------------------------------------------------------------------------------------

def _maybe_die(marker: str | None) -> None:
    if not marker:
        return
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return
    os.write(fd, str(os.getpid()).encode())
    os.close(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def compile_candidate(backends: dict, config_json: dict, hlo_text: str, kill_marker: str | None = None) -> dict:
    """Compile one candidate with ``backends[config backend]`` (a compile task).

    Returns:
        ``{"config": config_json, "error": str | None, "seconds": float, "executable": bytes | None}``;
        ``executable`` is the pickled executable when it pickles (else ``None`` and the profiler recompiles).
    """
    from fusegen.hlo.parser import entry_root_from_text
    from fusegen.codegen_backend import CompilationFailed, Config

    _maybe_die(kill_marker)
    t0 = time.perf_counter()
    exe, error = None, None
    try:
        config = Config.from_json(config_json)
        exe = backends[config.backend].compile(entry_root_from_text(hlo_text), config)
        if exe is None:
            error = "backend returned no executable"
    except CompilationFailed as e:
        error = e.reason
    except RETRY_EXCEPTIONS:
        raise  # Ray re-runs the task
    except Exception as e:  # the config's failure, never the tuner's
        error = f"{type(e).__name__}: {e}"
    payload = None
    if exe is not None:
        try:
            payload = pickle.dumps(exe)  # inter-process transport through Ray only
        except Exception:  # not picklable (live device handles): the profiling task compiles it again
            payload = None
    return {"config": config_json, "error": error, "seconds": time.perf_counter() - t0, "executable": payload,
            "compiled": exe is not None}


def profile_instruction(meta: dict, *compiled: dict) -> dict:
    """Profile the compiled candidates of one instruction (a profiling task) and return a replay record.

    ``meta``: ``hlo_text``, ``name``, ``key``, ``backends`` (name -> backend), ``runner`` (ConfigRunner
    keyword arguments), ``profiler`` (a Profiler or None: the worker's default, CUDA events on a GPU),
    ``profile_runs``, ``window_us``. ``compiled``: :func:`compile_candidate` results in config order.

    Returns:
        ``{"single": config name}`` when exactly one candidate compiled (used without profiling), else the
        record of every candidate (compile failures included).
    """
    from fusegen.hlo.parser import entry_root_from_text
    from fusegen.autotuning.config_runner import Candidate, ConfigRunner
    from fusegen.autotuning.profiler import default_profiler
    from fusegen.autotuning.replay import record_json
    from fusegen.codegen_backend import CompilationFailed, Config

    instr = entry_root_from_text(meta["hlo_text"])
    configs = [Config.from_json(c["config"]) for c in compiled]
    backends = meta["backends"]
    failed: list[ProfileResult] = []
    cands: list[Candidate] = []
    for c, cfg in zip(compiled, configs):
        b = backends[cfg.backend]
        exe, error = None, c["error"]
        if c["compiled"]:
            if c["executable"] is not None:
                exe = pickle.loads(c["executable"])
            else:
                try:
                    exe = b.compile(instr, cfg)
                except CompilationFailed as e:
                    error = e.reason
                except RETRY_EXCEPTIONS:
                    raise
                except Exception as e:
                    error = f"{type(e).__name__}: {e}"
        if exe is None:
            failed.append(ProfileResult(cfg.name, failure=Failure(FailureKind.COMPILATION_FAILED, error or ""),
                                        config=cfg, scratch_bytes=int(b.scratch_bytes(cfg))))
        else:
            cands.append(Candidate(cfg, exe, not b.can_produce_wrong_results(), int(b.scratch_bytes(cfg))))
    where = _worker_place()
    if len(cands) == 1:
        return {"single": cands[0].config.name, "failed": [(r.name, r.failure.message) for r in failed],
                "measured_on": where}
    profiled = []
    if cands:
        runner = ConfigRunner(meta["profiler"] or default_profiler(meta["profile_runs"]), **meta["runner"])
        profiled = runner.profile_all(instr, cands)
    by_name = {r.name: r for r in [*profiled, *failed]}
    results = [by_name[c.name] for c in configs]
    rec = record_json(meta["name"], meta["key"], results, meta["window_us"], meta["runner"]["rtol"],
                      meta["runner"]["check_correctness"])
    rec["measured_on"] = where  # informational: selection never reads it
    return rec


def _worker_place() -> dict:
    """The node and GPUs of the worker running this task (``{}`` outside Ray)."""
    try:
        import ray

        ctx = ray.get_runtime_context()
        return {"node": ctx.get_node_id(), "gpu_ids": [str(g) for g in ray.get_gpu_ids()]}
    except Exception:  # not in a Ray worker (tests calling the task body directly)
        return {}


# --------------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------------

@attrs.define
class RayRun:
    """What a run did: ``reports`` one per instruction in module order, ``tuned`` the unique keys profiled on
    the cluster (digest -> times selected: 1 each), ``measured_on`` the node and GPU ids of the worker that
    profiled each of them, ``settled`` unique keys settled on the driver (cache hits included), the cluster's
    ``gpus`` and ``cpus``, and the wall ``seconds`` of the run."""

    reports: list["InstructionReport"] = attrs.field(factory=list)
    tuned: dict[str, int] = attrs.field(factory=dict)
    measured_on: dict[str, dict] = attrs.field(factory=dict)
    settled: int = 0
    gpus: float = 0.0
    cpus: float = 0.0
    seconds: float = 0.0


def _plan(tuner: "Autotuner", instr, key, gpus: float = 0.0) -> list["Config"] | None:
    """The configs to fan out, or ``None`` when the tuner settles ``instr`` itself (also: nothing to time, when the
    tuner estimates and the cluster has no GPU)."""
    from fusegen.autotuning import cost_model

    cache, o = tuner.cache, tuner.options
    if tuner.timing == "estimate" and not gpus:
        return None
    if cache.memory.get(key) is not None:
        return None
    if cache.directory is not None and cache.mode != "WRITE_ONLY" and cache.directory.get(key) is not None:
        return None
    if o.xla_gpu_require_complete_aot_autotune_results or not o.allow_autotuning:
        return None
    configs = tuner.supported_configs(instr)
    if o.cost_model_top_k > 0 and configs:
        configs, _ = cost_model.rank_configs(instr, configs, tuner.by_name, tuner.device, o.cost_model_top_k)
    return configs if len(configs) > 1 else None


def _runner_kw(tuner: "Autotuner") -> dict:
    o = tuner.options
    return {"check_correctness": o.check_correctness, "init_buffers": o.check_correctness,
            "redzone_bytes": o.xla_gpu_redzone_padding_bytes if o.check_correctness else 0,
            "rtol": o.xla_gpu_autotune_gemm_rtol, "crash_on_verification_failures": o.xla_gpu_crash_on_verification_failures,
            "seed": o.seed}


def _select(tuner: "Autotuner", instr, key, rep, configs: Sequence["Config"], out: dict) -> None:
    """Central selection over one profiling task's result; applies and caches the winner."""
    from fusegen.autotuning.replay import _safe, load_record, replay

    by_name = {c.name: c for c in configs}
    if "single" in out:
        rep.compiled = 1
        rep.failures = {"COMPILATION_FAILED": len(out["failed"])} if out["failed"] else {}
        tuner._finish(instr, key, rep, by_name[out["single"]], "single-compiled", None,
                      provenance.untimed("the only config that compiled"))
        return
    if tuner.record_dir is not None:
        tuner.record_dir.mkdir(parents=True, exist_ok=True)
        (tuner.record_dir / f"{_safe(instr.name)}.{key.digest[:12]}.json").write_text(json.dumps(out) + "\n")
    outcome = replay(load_record(out, f"record of %{instr.name}"))
    for r in outcome.results:
        r.config = by_name.get(r.name)
    rep.results = outcome.results
    rep.compiled = sum(1 for r in outcome.results if not (r.failed and r.failure.kind is FailureKind.COMPILATION_FAILED))
    rep.failures = dict(collections.Counter(r.failure.kind.name for r in outcome.results if r.failed))
    if outcome.winner is None:
        raise AutotuneError(outcome.error or "no winner", code="Internal" if "compiled" in (outcome.error or "") else "NotFound")
    rep.tie_break = outcome.tie_break
    result = next(r for r in outcome.results if r.name == outcome.winner)
    where = out.get("measured_on") or {}
    # The worker timed with the tuner's own profiler when one was given (shipped in the task), else its default.
    name = getattr(tuner._profiler, "name", "")
    src = (provenance.measured(getattr(tuner.device, "model", "") or str(tuner.device), name or "cuda-events")
           if where.get("gpu_ids") else provenance.cpu_interpreter(name or "cpu-wall-time"))
    tuner._finish(instr, key, rep, by_name[outcome.winner], "tuned", result, src)


def _first_line(e: BaseException) -> str:
    """One line for a Ray task error: its cause's type and message, without Ray's colour codes."""
    import re

    cause = getattr(e, "cause", None) or e
    text = re.sub(r"\x1b\[[0-9;]*m", "", str(cause)).strip()
    lines = [ln for ln in text.splitlines() if ln.strip()]
    return f"{type(cause).__name__}: {lines[-1] if lines else ''}"[:300]


def _ray_init(ray, opts: RayOptions) -> bool:
    """Start or join Ray unless this process already did; returns whether this call started it."""
    if ray.is_initialized():
        return False
    kw: dict[str, Any] = {"include_dashboard": False, "log_to_driver": False, "configure_logging": False}
    if opts.address is None:
        kw["num_cpus"] = opts.num_cpus
    else:
        kw["address"] = opts.address
    try:
        ray.init(**kw)
    except Exception as e:  # ConnectionError, a bad address...: one line naming the address
        raise DistributedUnavailable(f"cannot start or join Ray at {opts.address or 'a local instance'}: "
                                     f"{type(e).__name__}: {e}") from None
    return True


def tune_on_ray(tuner: "Autotuner", modules: Sequence["Module"], opts: RayOptions | None = None,
                progress: Any = None) -> RayRun:
    """Tune every tunable instruction of ``modules`` on Ray (see the module docstring).

    Args:
        tuner: supplies the backends, options, device, cache, explicit profiler and record directory.
        progress: a ``rich.progress.Progress`` showing unique instructions done / total and cache hits.

    Raises:
        DistributedUnavailable: no Ray, or the cluster cannot be reached.
    """
    opts = opts or RayOptions()
    ray = import_ray()
    # Ray prints worker deaths and retries from a background thread on stdout: keep stdout for results.
    with contextlib.redirect_stdout(sys.stderr):
        return _run(ray, tuner, modules, opts, progress)


def _run(ray, tuner: "Autotuner", modules: Sequence["Module"], opts: RayOptions, progress: Any) -> RayRun:
    from fusegen.autotuning.autotuner import InstructionReport, tunable_instructions
    from fusegen.autotuning.compile_pool import instruction_to_text
    from fusegen.autotuning.sharding import unique_instructions

    started = _ray_init(ray, opts)
    t0 = time.perf_counter()
    run = RayRun()
    try:
        res = ray.cluster_resources()
        run.gpus, run.cpus = float(res.get("GPU", 0)), float(res.get("CPU", 0))
        retry = {"max_retries": opts.max_retries, "retry_exceptions": list(RETRY_EXCEPTIONS)}
        compile_task = ray.remote(num_cpus=1, **retry)(compile_candidate)
        profile_task = (ray.remote(num_gpus=1, num_cpus=0, **retry) if run.gpus else
                        ray.remote(num_cpus=1, **retry))(profile_instruction)
        pos: dict[int, int] = {}  # reports in module order, as tune_module gives them
        for m in modules:
            for i in tunable_instructions(m, tuner.options.tune_emitter_fusions, tuner.options.retune_configured):
                pos.setdefault(id(i), len(pos))
        groups = unique_instructions(tuner, modules)
        task = progress.add_task("tuning on Ray", total=len(groups)) if progress is not None else None
        hits = 0

        def advance() -> None:
            if progress is not None:
                progress.update(task, advance=1, description=f"tuning on Ray: cache hits {hits}")

        backends_ref = None
        pending: dict[Any, tuple] = {}
        by_group: dict[str, list] = {}
        for g in groups:
            first = g.instructions[0]
            configs = _plan(tuner, first, g.key, run.gpus)
            if configs is None:
                try:
                    rep = tuner.tune_instruction(first)
                except AutotuneError as e:
                    rep = InstructionReport(first.name, key=g.digest, step="error", error=f"{e.code}: {e.message}")
                hits += rep.cache_hit
                run.settled += 1
                by_group[g.digest] = [rep]
                advance()
                continue
            tuner.cache.stats["misses"] += 1
            if backends_ref is None:
                backends_ref = ray.put(tuner.by_name)
            text = instruction_to_text(first)
            tuner.compiles += len(configs)
            refs = [compile_task.remote(backends_ref, c.to_json(), text, opts.kill_worker_once) for c in configs]
            meta = {"hlo_text": text, "name": first.name, "key": g.digest, "backends": tuner.by_name,
                    "runner": _runner_kw(tuner), "profiler": tuner._profiler, "profile_runs": tuner.options.profile_runs,
                    "window_us": tuner.options.scratch_bytes_window_us}
            rep = InstructionReport(first.name, key=g.digest, cache="miss", configs=len(configs),
                                    supported=len(tuner.supported_configs(first)))
            pending[profile_task.remote(meta, *refs)] = (g, configs, rep, time.perf_counter())
        while pending:
            ready, _ = ray.wait(list(pending), num_returns=1)
            g, configs, rep, started_at = pending.pop(ready[0])
            first = g.instructions[0]
            try:
                out = ray.get(ready[0])
                _select(tuner, first, g.key, rep, configs, out)
                run.tuned[g.digest] = run.tuned.get(g.digest, 0) + 1
                run.measured_on[g.digest] = out.get("measured_on", {})
            except AutotuneError as e:
                rep.step, rep.error = "error", f"{e.code}: {e.message}"
            except Exception as e:  # a task that failed for good (after Ray's retries): this instruction only
                rep.step, rep.error = "error", f"Internal: Ray task failed: {_first_line(e)}"
            rep.seconds = time.perf_counter() - started_at
            by_group[g.digest] = [rep]
            advance()
        placed: list[tuple[int, "InstructionReport"]] = []
        for g in groups:  # the other instructions of each key: served from memory, as tune_module does
            reps = by_group[g.digest]
            for instr in g.instructions[1:]:
                if reps[0].error:
                    reps.append(InstructionReport(instr.name, key=g.digest, step="error", error=reps[0].error))
                else:
                    reps.append(tuner.tune_instruction(instr))
            placed.extend(zip((id(i) for i in g.instructions), reps))
        run.reports = [r for _, r in sorted(placed, key=lambda p: pos[p[0]])]
    finally:
        if started:
            ray.shutdown()
    run.seconds = time.perf_counter() - t0
    return run
