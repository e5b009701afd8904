"""Profiling candidates in a supervised worker process: a hang or a crash fails one config, not ``tune``.

Compiling already runs in worker processes (:mod:`fusegen.autotuning.compile_pool`). Profiling runs a
candidate's own code too, and that code can hang or kill its process: unpickling the executable a
compile worker sent (a ``__setstate__`` that never returns), a ``run()`` that never returns, a ``run()``
that calls ``os._exit``. So an executable that crossed a process boundary is kept as the bytes it came as
(:class:`PickledExecutable`) and is unpickled and run only inside a :class:`ProfileSupervisor` worker:

* the worker rebuilds the shared inputs from the runner's seed (the same bytes the tuning process would
  make), allocates the candidate's outputs and scratch with red zones, and runs the same warm-up, red-zone
  check and timing as :class:`~fusegen.autotuning.config_runner.ConfigRunner` in process;
* a candidate that outlives ``timeout_s`` has its worker killed and fails with EXECUTION_FAILED
  ("profiling timed out after N s"); a worker that dies fails only the candidate it held ("profiling
  worker crashed (exit code N)"); a fresh worker takes the next candidate.

XLA profiles in process (``GpuProfiler``); this is fusegen's own isolation, as for compiles. A profiler that
cannot be pickled (CUDA events hold device buffers) profiles in process.
"""

from __future__ import annotations

import pickle
import time
from multiprocessing.connection import wait as _wait
from typing import Any

import attrs

from fusegen.autotuning.selection import Failure, FailureKind, ProfileResult
from fusegen.codegen_backend import Config, Executable
from fusegen.runtime.module_process import get_context

#: Seconds one candidate's profiling (unpickling, warm-up, timed runs) may take by default.
DEFAULT_PROFILE_TIMEOUT_S = 300.0


class PickledExecutable(Executable):
    """An executable kept as the pickle bytes a compile worker sent; unpickled only when first used here.

    ``data`` is what :class:`ProfileSupervisor` sends to its worker; :meth:`run` (profiling in process)
    unpickles it in this process.
    """

    def __init__(self, data: bytes):
        self.data = data
        self._loaded: Executable | None = None

    def load(self) -> Executable:
        if self._loaded is None:
            self._loaded = pickle.loads(self.data)  # noqa: S301 - bytes from our own compile worker's pipe
        return self._loaded

    def run(self, inputs, outputs, scratch) -> None:
        self.load().run(inputs, outputs, scratch)

    def __getattr__(self, name: str) -> Any:
        # Profilers may read attributes of the executable (e.g. a declared cost); never for dunders.
        if name.startswith("__") or name in ("data", "_loaded"):
            raise AttributeError(name)
        return getattr(self.load(), name)


def executable_bytes(exe: Executable) -> bytes | None:
    """The pickle of ``exe`` for a worker, or ``None`` when it cannot be pickled (it then runs in process)."""
    if isinstance(exe, PickledExecutable):
        return exe.data
    try:
        return pickle.dumps(exe)
    except Exception:  # noqa: BLE001 - closures, device handles ...
        return None


@attrs.frozen
class ProfileJob:
    """Everything the worker needs for one candidate; picklable, no live objects."""

    runner: dict  # ConfigRunner settings: check_correctness, init_buffers, redzone_bytes, seed, rtol
    profiler: bytes  # pickled Profiler
    in_shapes: tuple
    out_shapes: tuple
    index: int
    name: str
    config: dict  # Config.to_json()
    trusted: bool
    scratch_bytes: int
    executable: bytes


def _worker_main(conn) -> None:
    from fusegen.autotuning.config_runner import Candidate, ConfigRunner
    from fusegen.autotuning.redzone import RedzoneAllocator

    inputs_for: dict[Any, tuple] = {}
    while True:
        try:
            job = conn.recv()
        except (EOFError, OSError):
            return
        if job is None:
            return
        profiler = pickle.loads(job.profiler)  # noqa: S301 - sent by the tuning process
        runner = ConfigRunner(profiler, **job.runner)
        key = (job.in_shapes, job.profiler, tuple(sorted(job.runner.items())))
        if key not in inputs_for:
            inputs_for.clear()
            alloc = RedzoneAllocator(runner.redzone_bytes, xp=profiler.xp)
            inputs_for[key] = (alloc, runner.allocate_inputs(alloc, list(job.in_shapes)))
        alloc, inputs = inputs_for[key]
        config = Config.from_json(job.config)
        try:
            exe = pickle.loads(job.executable)  # noqa: S301 - a candidate's executable; may hang: supervised
        except Exception as e:  # noqa: BLE001
            res = ProfileResult(job.name, scratch_bytes=job.scratch_bytes, config=config, trusted=job.trusted)
            res.failure = Failure(FailureKind.EXECUTION_FAILED, f"executable cannot be unpickled: "
                                                                f"{type(e).__name__}: {e}")
        else:
            cand = Candidate(config, exe, job.trusted, job.scratch_bytes)
            res = runner.run_candidate(alloc, inputs, list(job.out_shapes), cand, job.index)
        conn.send(res)


class ProfileSupervisor:
    """One profiling worker process, replaced after a crash or a timeout.

    Args:
        timeout_s: limit for one candidate (unpickling included); ``<= 0`` means none.
        start_method: ``module`` (default: ``python -m`` workers that never re-run the caller's
            ``__main__``, as safe with CUDA and Triton as ``spawn``), ``spawn`` or ``forkserver``.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, timeout_s: float = DEFAULT_PROFILE_TIMEOUT_S, start_method: str = "module"):
        self.timeout_s = float(timeout_s)
        self._ctx = get_context(start_method)  # fusegen.runtime.module_process
        self._proc = None
        self._conn = None
        self.crashes = 0
        self.timeouts = 0

    def __enter__(self) -> "ProfileSupervisor":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def _start(self) -> None:
        parent, child = self._ctx.Pipe(duplex=True)
        self._proc = self._ctx.Process(target=_worker_main, args=(child,), daemon=True, name="fusegen-profile")
        self._proc.start()
        child.close()
        self._conn = parent

    def _kill(self) -> None:
        if self._proc is not None:
            if self._proc.is_alive():
                self._proc.kill()
            self._proc.join(5)
        if self._conn is not None:
            self._conn.close()
        self._proc = self._conn = None

    def close(self) -> None:
        if self._proc is not None and self._conn is not None:
            try:
                self._conn.send(None)
            except (OSError, BrokenPipeError):
                pass
            self._proc.join(2)
        self._kill()

    def profile(self, job: ProfileJob) -> ProfileResult:
        """Profile one candidate in the worker; every fault becomes this candidate's EXECUTION_FAILED."""
        config = Config.from_json(job.config)

        def failed(message: str) -> ProfileResult:
            r = ProfileResult(job.name, scratch_bytes=job.scratch_bytes, config=config, trusted=job.trusted)
            r.failure = Failure(FailureKind.EXECUTION_FAILED, message)
            return r

        if self._proc is None or not self._proc.is_alive():
            self._kill()
            self._start()
        started = time.monotonic()
        try:
            self._conn.send(job)
        except (OSError, BrokenPipeError) as e:
            self._kill()
            return failed(f"profiling worker unreachable ({e})")
        deadline = started + self.timeout_s if self.timeout_s > 0 else None
        while True:
            wait = 1.0 if deadline is None else max(0.0, min(1.0, deadline - time.monotonic()))
            ready = _wait([self._conn, self._proc.sentinel], timeout=wait)
            if self._conn in ready or self._proc.sentinel in ready:
                try:
                    if self._conn.poll():
                        return self._conn.recv()
                except (EOFError, OSError):
                    pass
                if not self._proc.is_alive():
                    self._proc.join(1)
                    code = self._proc.exitcode
                    self.crashes += 1
                    self._kill()
                    return failed(f"profiling worker crashed (exit code {code}) while running this config")
            if deadline is not None and time.monotonic() > deadline:
                self.timeouts += 1
                self._kill()
                return failed(f"profiling timed out after {self.timeout_s:g} s (xla_gpu_autotune_profile_timeout)")
