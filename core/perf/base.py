"""The timing terms every estimate is built from (XLA's ``GpuPerformanceModelBase``).

Mirrors ``xla/service/gpu/model/gpu_performance_model_base.cc``; all times are seconds, sizes bytes:

* :func:`read_time` (``ReadTimeWithDRAMHeuristic``): an operand's first ``n_bytes_net`` bytes come from DRAM
  at ``bandwidth x utilization`` (utilization < 1 when reads are not coalesced, see
  :func:`coalescing_utilization`); the ``n_bytes_total - n_bytes_net`` re-read bytes come from L2 (2.5x the
  DRAM bandwidth) when the operand fits in L2, and from L1 too (another 8x) when it fits in the SMs' L1s,
  else from DRAM again at the degraded rate. Both rates are capped by the launch: each block moves at most
  one 32-byte transaction per clock (:func:`adjust_bandwidth`).
* :func:`write_time` (``WriteTime``): output bytes at the DRAM bandwidth.
* :func:`compute_time` (``ComputeTime``): flops over the FP32 FMA units the launch occupies.
* :func:`combine` (``CombineComputeAndMemoryAccessTime``): ``c + m - 0.95 min(c, m)``.
"""

from __future__ import annotations

import attrs

from fusegen.perf.device_rates import PerfDevice

#: ``kKernelLaunchOverhead``: added once per kernel launch to a module's time (seconds).
KERNEL_LAUNCH_OVERHEAD_S = 1e-6
#: ``kL2CacheSpeedup`` and ``kL1CacheSpeedup``: re-reads of an operand that fits in L2 / in the SMs' L1s.
L2_CACHE_SPEEDUP = 2.5
L1_CACHE_SPEEDUP = 8.0
#: ``kMemoryComputeParallelism``: how much of the shorter of compute and memory time hides under the longer.
MEMORY_COMPUTE_PARALLELISM = 0.95


@attrs.frozen
class RunTimeData:
    """XLA's ``EstimateRunTimeData``: one kernel's counts and times (seconds)."""

    flops: int = 0
    bytes_read: int = 0
    bytes_written: int = 0
    read_time: float = 0.0
    write_time: float = 0.0
    compute_time: float = 0.0
    exec_time: float = 0.0

    @property
    def is_infinite(self) -> bool:
        """The model refused the kernel (a tile that spills registers): ``exec_time`` is infinite."""
        return self.exec_time == float("inf")

    @classmethod
    def infinite(cls) -> "RunTimeData":
        inf = float("inf")
        return cls(0, 0, 0, inf, inf, inf, inf)

    def to_json(self) -> dict:
        return {"flops": int(self.flops), "bytes_read": int(self.bytes_read), "bytes_written": int(self.bytes_written),
                "read_us": _us(self.read_time), "write_us": _us(self.write_time),
                "compute_us": _us(self.compute_time), "exec_us": _us(self.exec_time)}


def _us(seconds: float) -> float | None:
    return None if seconds == float("inf") else round(seconds * 1e6, 6)


def adjust_bandwidth(dev: PerfDevice, bandwidth: float, num_blocks: int) -> float:
    """``AdjustBandwidth``: at most ``num_blocks x clock x 32`` bytes/s (an SM issues one 32-byte transaction per
    clock), at most ``bandwidth``."""
    return min(bandwidth, max(int(num_blocks), 1) * dev.per_block_bandwidth())


def coalescing_utilization(element_bytes: int, coalesced: bool, dev: PerfDevice) -> float:
    """``GetCoalescingUtilizationRate``: 1 when coalesced, else one element per 64-byte DRAM transaction."""
    return 1.0 if coalesced else min(1.0, max(element_bytes, 1) / dev.transaction_bytes)


def read_time(dev: PerfDevice, num_blocks: int, n_bytes_net: int, n_bytes_total: int,
              utilization: float = 1.0) -> float:
    """Seconds to read ``n_bytes_total`` bytes of an operand of ``n_bytes_net`` distinct bytes
    (``ReadTimeWithDRAMHeuristic``; see the module docstring)."""
    dram = dev.memory_bandwidth * utilization
    rest = dev.memory_bandwidth
    if n_bytes_net < dev.l2_cache_bytes:
        rest *= L2_CACHE_SPEEDUP
        if n_bytes_net < dev.l1_cache_bytes_per_core * dev.cores:
            rest *= L1_CACHE_SPEEDUP
    else:
        rest *= utilization
    dram = adjust_bandwidth(dev, dram, num_blocks)
    rest = adjust_bandwidth(dev, rest, num_blocks)
    first = min(n_bytes_net, n_bytes_total)
    return first / dram + (n_bytes_total - first) / rest


def write_time(dev: PerfDevice, bytes_written: int, utilization: float = 1.0) -> float:
    """``WriteTime``: ``bytes / (bandwidth x utilization)`` (the tiled model passes a write utilization)."""
    return bytes_written / (dev.memory_bandwidth * utilization)


def compute_time(dev: PerfDevice, flops: int, num_blocks: int, threads_per_block: int) -> float:
    """``ComputeTime``: ``flops`` over :meth:`PerfDevice.effective_flops_per_ns` of the launch (seconds)."""
    rate = dev.effective_flops_per_ns(num_blocks, threads_per_block)
    return flops / rate * 1e-9 if rate > 0 else 0.0


def combine(compute: float, memory: float, parallelism: float = MEMORY_COMPUTE_PARALLELISM) -> float:
    """``CombineComputeAndMemoryAccessTime``: ``compute + memory - parallelism x min(compute, memory)``."""
    return compute + memory - min(compute, memory) * parallelism
