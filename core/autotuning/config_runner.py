"""Running compiled candidates on shared buffers: red zones, timing, output clustering.

Mirrors XLA's ``ConfigRunner`` (``xla/backends/autotuner/config_runner.cc``) over ``GpuProfiler``
(``xla/backends/gpu/autotuner/gpu_profiler.cc``): one set of input buffers shared by every candidate,
fresh output (and scratch) buffers per candidate, each surrounded by red zones when enabled; a warm-up
run whose failure is EXECUTION_FAILED, a red-zone check (REDZONE_CHECK_FAILED), then the profiler's
timed runs. Clustering and demotion are :mod:`fusegen.autotuning.clustering`.

Difference from XLA (on purpose): an overwritten red zone around an output or the scratch buffer is
reported as REDZONE_CHECK_FAILED (XLA reports it as a failed warm-up, EXECUTION FAILED); the message
is XLA's in both cases.
"""

from __future__ import annotations

import functools
import time
from typing import TYPE_CHECKING, Any, Sequence

import attrs
import numpy as np

from fusegen.autotuning.clustering import DEFAULT_RTOL, buffers_match, profile_all
from fusegen.autotuning.profiler import CpuWallTimeProfiler, Profiler
from fusegen.autotuning.redzone import REJECTION_PREFIX, RedzoneAllocator, RedzoneBuffer
from fusegen.autotuning.selection import AutotuneError, Failure, FailureKind, ProfileResult
from fusegen.codegen_backend import Config, Executable

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Shape


@attrs.define
class Candidate:
    """A compiled config ready to profile."""

    config: Config
    executable: Executable
    trusted: bool
    scratch_bytes: int = 0

    @property
    def name(self) -> str:
        return self.config.name


def shape_text(shape: "Shape") -> str:
    return f"{shape.element_type}[{','.join(str(d) for d in shape.dimensions)}]"


def buffer_shapes(instr: "Instruction") -> tuple[list["Shape"], list["Shape"]]:
    """(input leaves, output leaves) of ``instr``: operand array shapes in order, result leaves."""
    ins: list = []
    for op in instr.operands:
        ins.extend(op.shape.leaves())
    return ins, list(instr.shape.leaves())


def fill_random(a: np.ndarray, rng: np.random.Generator) -> None:
    """Fill a host array with small random values of its dtype (XLA ``InitializeBuffer``-like)."""
    dt = a.dtype
    n = a.size
    if n == 0:
        return
    if dt == np.bool_:
        a[...] = rng.integers(0, 2, n).astype(np.bool_)
    elif dt.kind in "iu" and dt.name not in ("int4", "uint4", "int2", "uint2"):
        lo = 0 if dt.kind == "u" else -4
        a[...] = rng.integers(lo, 5, n).astype(dt)
    elif dt.kind == "c":
        a[...] = (rng.standard_normal(n) + 1j * rng.standard_normal(n)).astype(dt)
    elif dt.name in ("int4", "uint4", "int2", "uint2"):
        a[...] = rng.integers(0, 2, n).astype(dt)
    else:  # floating, including ml_dtypes' bf16 / f8 / f4
        a[...] = rng.uniform(-1.0, 1.0, n).astype(np.float32).astype(dt)


class ConfigRunner:
    """Profiles candidates of one instruction (``ConfigRunner::ProfileAll``).

    Args:
        profiler: times executables; its ``xp`` decides where buffers live.
        check_correctness: cluster outputs (autotune level >= 4).
        init_buffers: fill inputs (and outputs) with random data (level >= 4 today in XLA).
        redzone_bytes: red zone on each side of every buffer (0: none; level < 4 uses 0).
        rtol: ``xla_gpu_autotune_gemm_rtol``.
        crash_on_verification_failures: raise when a candidate gives WRONG_RESULTS.
        seed: seed of the input data.
        supervisor: a :class:`~fusegen.autotuning.supervised.ProfileSupervisor` to profile candidates in
            (``None``: all in this process).
        supervise: ``"pickled"`` (candidates whose executable came from a compile worker) or ``"all"`` (every
            candidate whose executable can be pickled).
    """

    def __init__(self, profiler: Profiler | None = None, *, check_correctness: bool = True,
                 init_buffers: bool = True, redzone_bytes: int = 0, rtol: float = DEFAULT_RTOL,
                 crash_on_verification_failures: bool = False, seed: int = 0, supervisor: Any = None,
                 supervise: str = "pickled"):
        self.profiler = profiler or CpuWallTimeProfiler()
        self.check_correctness = check_correctness
        self.init_buffers = init_buffers
        self.redzone_bytes = redzone_bytes
        self.rtol = rtol
        self.crash_on_verification_failures = crash_on_verification_failures
        self.seed = seed
        self.supervisor = supervisor
        self.supervise = supervise

    def _alloc(self, allocator: RedzoneAllocator, name: str, shape: "Shape", rng) -> RedzoneBuffer:
        from fusegen.hlo.dtypes import numpy_dtype

        dt = numpy_dtype(shape.element_type)
        buf = allocator.allocate(f"{name}: {shape_text(shape)}", shape.numel, dt)
        if self.init_buffers and rng is not None:
            host = np.empty(shape.numel, dtype=dt)
            fill_random(host, rng)
            buf.array[...] = host if allocator.xp is np else allocator.xp.asarray(host)
        elif not self.init_buffers:
            buf.array[...] = 0
        return buf

    def allocate_inputs(self, alloc: RedzoneAllocator, in_shapes: list["Shape"]) -> list[RedzoneBuffer]:
        """The shared input buffers (seeded: a profiling worker rebuilds the same bytes)."""
        rng = np.random.default_rng(self.seed)
        return [self._alloc(alloc, f"input {k}", s, rng) for k, s in enumerate(in_shapes)]

    def run_candidate(self, alloc: RedzoneAllocator, inputs: list[RedzoneBuffer], out_shapes: list["Shape"],
                      c: Candidate, i: int) -> ProfileResult:
        """Warm-up, red-zone check and timing of candidate ``i`` on ``inputs`` (in this process)."""
        res = ProfileResult(c.name, scratch_bytes=c.scratch_bytes, config=c.config, trusted=c.trusted)
        out_rng = np.random.default_rng(self.seed + 1 + i)  # different garbage per candidate
        outs = [self._alloc(alloc, f"output {k}", s, out_rng) for k, s in enumerate(out_shapes)]
        scratch = alloc.allocate("scratch", c.scratch_bytes, np.uint8) if c.scratch_bytes else None
        own = outs + ([scratch] if scratch is not None else [])
        in_arrays = [b.array for b in inputs]
        out_arrays = [b.array for b in outs]
        scratch_array = scratch.array if scratch is not None else None
        try:
            try:
                t0 = time.perf_counter()
                c.executable.run(in_arrays, out_arrays, scratch_array)
                self.profiler.synchronize()
                warmup_us = (time.perf_counter() - t0) * 1e6
            except Exception as e:  # the candidate's own failure, never the tuner's
                res.failure = Failure(FailureKind.EXECUTION_FAILED, f"{type(e).__name__}: {e}")
                return res
            if _redzone_failed(res, alloc.check(inputs + own)):
                return res
            if self.check_correctness:
                res.output = [self.profiler.to_host(a) for a in out_arrays]
            if getattr(self.profiler, "time_warmup", False):
                res.duration_us = warmup_us
                return res
            try:
                res.duration_us = self.profiler.time_us(c.executable, in_arrays, out_arrays, scratch_array)
            except Exception as e:
                res.failure = Failure(FailureKind.EXECUTION_FAILED, f"{type(e).__name__}: {e}")
                return res
            _redzone_failed(res, alloc.check(inputs + own))
            return res
        finally:
            if res.failed and self.redzone_bytes:
                for b in inputs:  # the next candidate must start from intact inputs
                    b.reinit()
            alloc.release(own)

    def _job(self, c: Candidate, i: int, in_shapes, out_shapes, profiler_bytes: bytes | None):
        """A :class:`~fusegen.autotuning.supervised.ProfileJob` for ``c``, or ``None`` to run it here."""
        from fusegen.autotuning.supervised import PickledExecutable, ProfileJob, executable_bytes

        if self.supervisor is None or profiler_bytes is None:
            return None
        if self.supervise != "all" and not isinstance(c.executable, PickledExecutable):
            return None
        data = executable_bytes(c.executable)
        if data is None:
            return None
        settings = {"check_correctness": self.check_correctness, "init_buffers": self.init_buffers,
                    "redzone_bytes": self.redzone_bytes, "rtol": self.rtol, "seed": self.seed}
        return ProfileJob(settings, profiler_bytes, tuple(in_shapes), tuple(out_shapes), i, c.name, c.config.to_json(),
                          c.trusted, c.scratch_bytes, data)

    def profile_all(self, instr: "Instruction", candidates: Sequence[Candidate]) -> list[ProfileResult]:
        """Profile every candidate on shared inputs; results in candidate order.

        With a ``supervisor``, candidates whose executable came from a compile worker (or every picklable
        one, ``supervise="all"``) run in its worker process: a hang or crash fails that candidate only.

        Raises:
            AutotuneError: with ``crash_on_verification_failures`` when a candidate is demoted to
                WRONG_RESULTS (the message names it).
        """
        import pickle

        xp = self.profiler.xp
        alloc = RedzoneAllocator(self.redzone_bytes, xp=xp)
        in_shapes, out_shapes = buffer_shapes(instr)
        inputs = self.allocate_inputs(alloc, in_shapes)
        profiler_bytes = None
        if self.supervisor is not None:
            try:
                profiler_bytes = pickle.dumps(self.profiler)
            except Exception:  # noqa: BLE001 - e.g. CUDA events: profile in process
                profiler_bytes = None

        def run_one(i: int) -> ProfileResult:
            c = candidates[i]
            job = self._job(c, i, in_shapes, out_shapes, profiler_bytes)
            if job is not None:
                return self.supervisor.profile(job)
            return self.run_candidate(alloc, inputs, out_shapes, c, i)

        compare = functools.partial(_compare, rtol=self.rtol)
        results = profile_all([c.trusted for c in candidates], run_one, compare, self.check_correctness)
        if self.crash_on_verification_failures:
            wrong = [r for r in results if r.failure and r.failure.kind is FailureKind.WRONG_RESULTS]
            if wrong:
                raise AutotuneError(
                    f"Results mismatch for %{instr.name}: {', '.join(r.name for r in wrong)} "
                    f"(xla_gpu_crash_on_verification_failures): {wrong[0].failure.message}", code="Internal")
        for r in results:
            if not self.check_correctness:
                r.output = None
        return results


def _redzone_failed(res: ProfileResult, msg: str | None) -> bool:
    """Record a red-zone violation (``msg`` from ``RedzoneAllocator.check``) as the candidate's failure."""
    if msg:
        res.failure = Failure(FailureKind.REDZONE_CHECK_FAILED, REJECTION_PREFIX + msg)
    return bool(msg)


def _compare(current: Any, representative: Any, rtol: float) -> bool:
    return buffers_match(current, representative, rtol)
