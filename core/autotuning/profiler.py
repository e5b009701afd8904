"""Timing a compiled candidate: wall time on the CPU, CUDA events on a GPU.

XLA's ``GpuProfiler`` (``xla/backends/gpu/autotuner/gpu_profiler.cc``) runs each executable on shared
buffers and reports its kernel time. fusegen makes the profiler pluggable: a :class:`Profiler` says
which array module its buffers live in (``numpy`` or ``cupy``) and how to time one executable. The
warm-up run, red-zone checks and output capture are done by the config runner, not here.
"""

from __future__ import annotations

import abc
import statistics
import time
from typing import Any

import numpy as np

from fusegen.codegen_backend import Executable


class ProfilerUnavailable(RuntimeError):
    """The profiler cannot run here (no GPU, no CuPy); the message says what is missing."""


class Profiler(abc.ABC):
    """Times executables; subclasses set ``name`` and ``xp`` (the array module of their buffers)."""

    name: str = ""
    xp: Any = np
    #: Use the warm-up run's wall time as the measurement (no separate timed runs).
    time_warmup: bool = False

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        """``(usable, reason-if-not)``."""
        return True, ""

    @abc.abstractmethod
    def time_us(self, executable: Executable, inputs: list, outputs: list, scratch: Any) -> float:
        """Median run time of ``executable`` in microseconds (outputs are overwritten)."""

    def to_host(self, a: Any) -> np.ndarray:
        """A host (numpy) copy of a buffer of this profiler's array module."""
        return np.array(a, copy=True)

    def synchronize(self) -> None:
        pass


class CpuWallTimeProfiler(Profiler):
    """Wall time (``time.perf_counter_ns``) of ``runs`` runs, median, e.g. in the Triton interpreter.

    Args:
        runs: timed runs after the caller's warm-up run; 0 times the warm-up run itself (the default
            for the CPU: an interpreter run can take minutes, and has no first-run effects to skip).
    """

    name = "cpu-wall-time"

    def __init__(self, runs: int = 0):
        if runs < 0:
            raise ValueError(f"profiler runs must be >= 0, got {runs}")
        self.runs = runs
        self.time_warmup = runs == 0

    def time_us(self, executable: Executable, inputs: list, outputs: list, scratch: Any) -> float:
        samples = []
        for _ in range(max(1, self.runs)):
            t0 = time.perf_counter_ns()
            executable.run(inputs, outputs, scratch)
            samples.append((time.perf_counter_ns() - t0) / 1e3)
        return float(statistics.median(samples))


class CudaEventsProfiler(Profiler):
    """CUDA-event time of each run with an L2 flush before it; median of ``runs``.

    The flush writes a buffer as large as the device's L2 (``l2_bytes``, default from the device
    attribute) so every run starts cold, as ``GpuProfiler`` does. Needs CuPy and a CUDA device.

    Raises:
        ProfilerUnavailable: on construction without CuPy or a GPU.
    """

    name = "cuda-events"

    @classmethod
    def availability(cls) -> tuple[bool, str]:
        try:
            import cupy  # noqa: F401
        except Exception as e:  # ImportError or a broken CUDA install
            return False, f"CuPy is not importable ({type(e).__name__}: {e})"
        try:
            n = cupy.cuda.runtime.getDeviceCount()
        except Exception as e:
            return False, f"no CUDA device ({type(e).__name__}: {e})"
        if n < 1:
            return False, "no CUDA device"
        return True, ""

    def __init__(self, runs: int = 5, l2_bytes: int | None = None):
        ok, why = self.availability()
        if not ok:
            raise ProfilerUnavailable(why)
        import cupy

        self.xp = cupy
        self.runs = max(1, int(runs))
        if l2_bytes is None:
            dev = cupy.cuda.Device()
            l2_bytes = int(dev.attributes.get("L2CacheSize", 50 * 1024 * 1024))
        self._flush = cupy.empty(max(int(l2_bytes), 1), dtype=np.uint8)

    def time_us(self, executable: Executable, inputs: list, outputs: list, scratch: Any) -> float:
        cupy = self.xp
        samples = []
        for i in range(self.runs):
            self._flush.fill(i & 0xFF)
            start, stop = cupy.cuda.Event(), cupy.cuda.Event()
            start.record()
            executable.run(inputs, outputs, scratch)
            stop.record()
            stop.synchronize()
            samples.append(cupy.cuda.get_elapsed_time(start, stop) * 1e3)
        return float(statistics.median(samples))

    def to_host(self, a: Any) -> np.ndarray:
        return self.xp.asnumpy(a)

    def synchronize(self) -> None:
        self.xp.cuda.Device().synchronize()


def default_profiler(runs: int | None = None) -> Profiler:
    """CUDA events when CuPy and a GPU are usable, else CPU wall time."""
    ok, _ = CudaEventsProfiler.availability()
    if ok:
        return CudaEventsProfiler(runs or 5)
    return CpuWallTimeProfiler(0 if runs is None else runs)
