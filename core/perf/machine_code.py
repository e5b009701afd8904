"""What a kernel's sm_90 machine code changes in its estimate (:class:`fusegen.codegen.sass.SassStats`).

XLA's performance model never sees machine code; fusegen compiles every kernel for sm_90 on the CPU
(:mod:`fusegen.codegen.sass`), so three facts XLA has to assume are known here:

* **Tensor cores.** A dot whose kernel has no tensor-core instruction runs on the CUDA cores: its compute
  time uses the FP32 FMA peak (``PerfDevice.peak_scalar_flops("f32")``) instead of the tensor-core peak; one
  with ``HMMA`` (``mma.sync``) but no ``GMMA`` (``wgmma``) on Hopper gets XLA's 0.63 derate for missing
  ``wgmma``.
* **Loads in flight (load width x occupancy).** DRAM keeps its bandwidth only with enough bytes in flight
  (Little's law): ``bandwidth x latency`` bytes, :data:`DRAM_LATENCY_S` being a stated assumption (no XLA
  counterpart; a published Hopper HBM figure, to be calibrated with ``scripts/gpu-check``). A kernel has at most
  ``resident warps x 32 threads x mean access bytes x global loads in its straight-line body`` bytes in flight
  per SM (resident warps from registers and shared memory, :meth:`SassStats.occupancy`, and from how many blocks
  the launch has per SM). When that is less, memory time is scaled up by the shortfall; a kernel without
  global loads (stores only) has no such bound.
* **Spills.** Each thread's spill stores and loads go to local memory (through L2: at 2.5x the DRAM
  bandwidth), added to memory time; a kernel that cannot launch (zero resident blocks) is infinite.

The adjustment is additive: ``exec += memory' - memory`` (compute and the dot model are left as they are).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import attrs

from fusegen.perf import base
from fusegen.perf.device_rates import PerfDevice

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction
    from fusegen.perf.estimate import FusionEstimate

#: Assumed DRAM access latency for the loads-in-flight bound (seconds); see the module docstring.
DRAM_LATENCY_S = 600e-9
#: XLA's Hopper derate for MMA without ``wgmma`` (``GetEffectiveFlopsPerNsForTileSize``).
NO_WGMMA_DERATE = 0.63


@attrs.frozen
class Adjustments:
    """The machine-code facts the estimate uses (all ``None`` / 0 when no machine code is known).

    Attributes:
        kernel: the kernel's name; registers: per thread; spill_bytes: spill stores + loads per thread.
        tensor_core_instructions: ``HMMA``/``GMMA``/... count; wgmma: any ``GMMA`` among them.
        blocks_per_sm: resident blocks (``None``: unknown); warps_per_block: warps of one block.
        mean_access_bytes: bytes per thread per global access; global_loads: static load instructions.
    """

    kernel: str | None = None
    registers: int = 0
    spill_bytes: int = 0
    tensor_core_instructions: int | None = None
    wgmma: bool = False
    blocks_per_sm: int | None = None
    warps_per_block: int = 0
    mean_access_bytes: float = 0.0
    global_loads: int = 0

    @property
    def known(self) -> bool:
        return self.kernel is not None

    def dot_peak(self, fusion: "Instruction", dev: PerfDevice) -> float | None:
        """flops/s for the fusion's dots given its machine code, ``None`` to keep the tensor-core model."""
        if not self.known or self.tensor_core_instructions is None:
            return None
        if not any(i.opcode == "dot" for c in fusion.called_computations for i in c.instructions):
            return None
        if self.tensor_core_instructions == 0:
            return dev.peak_scalar_flops("f32")
        if dev.compute_capability[0] == 9 and not self.wgmma:
            ty = _dot_type(fusion)
            return dev.peak_matrix_flops(ty) * NO_WGMMA_DERATE
        return None


def _dot_type(fusion: "Instruction") -> str:
    for c in fusion.called_computations:
        for i in c.instructions:
            if i.opcode == "dot" and i.operands[0].shape.is_array:
                return i.operands[0].shape.element_type
    return "f32"


def adjustments(sass: Any, dev: PerfDevice, device: Any = None) -> Adjustments:
    """:class:`Adjustments` from a :class:`fusegen.codegen.sass.SassStats` (or the first of a list: the primary
    kernel). ``device`` (a ``DeviceDescription``) enables the occupancy; without it occupancy stays unknown."""
    if isinstance(sass, (list, tuple)):
        sass = sass[0] if sass else None
    if sass is None:
        return Adjustments()
    warps = int(sass.num_warps or math.ceil((sass.threads_per_block or 128) / dev.warp_size))
    blocks = None
    if device is not None:
        try:
            blocks = int(sass.occupancy(device, warps * dev.warp_size).blocks_per_sm)
        except (ValueError, TypeError, KeyError):
            blocks = None
    tc = int(sass.tensor_core_instructions)
    return Adjustments(kernel=sass.kernel, registers=int(sass.registers), spill_bytes=int(sass.spill_bytes),
                       tensor_core_instructions=tc, wgmma=any("GMMA" in k for k in sass.tensor_core_ops),
                       blocks_per_sm=blocks, warps_per_block=warps,
                       mean_access_bytes=float(sass.mean_global_access_bytes),
                       global_loads=int(sum(sass.global_loads.values())))


def in_flight_bandwidth(adj: Adjustments, dev: PerfDevice, num_blocks: int) -> float | None:
    """Bytes/s the kernel's loads in flight can sustain (Little's law, see the module docstring); ``None`` when
    the machine code does not say, or the kernel loads nothing from global memory (stores wait on no load)."""
    if not adj.known or not adj.mean_access_bytes or adj.blocks_per_sm is None or adj.global_loads <= 0:
        return None
    per_sm_blocks = min(adj.blocks_per_sm, math.ceil(max(num_blocks, 1) / dev.cores))
    active_sms = min(max(num_blocks, 1), dev.cores)
    in_flight = per_sm_blocks * adj.warps_per_block * dev.warp_size * adj.mean_access_bytes * adj.global_loads
    return active_sms * in_flight / DRAM_LATENCY_S


def apply(est: "FusionEstimate", adj: Adjustments, dev: PerfDevice) -> "FusionEstimate":
    """``est`` with the machine-code terms applied (unchanged without machine code); the terms used are recorded
    in ``est.machine_code``."""
    if not adj.known:
        return est
    d = est.data
    notes: dict = {"kernel": adj.kernel, "registers": adj.registers, "spill_bytes": adj.spill_bytes,
                   "tensor_core_instructions": adj.tensor_core_instructions, "wgmma": adj.wgmma,
                   "blocks_per_sm": adj.blocks_per_sm, "mean_access_bytes": round(adj.mean_access_bytes, 3),
                   "global_loads": adj.global_loads}
    if adj.blocks_per_sm == 0:
        notes["cannot_launch"] = True
        return attrs.evolve(est, data=base.RunTimeData.infinite(), machine_code=notes)
    if d.is_infinite:
        return attrs.evolve(est, machine_code=notes)
    memory = d.read_time + d.write_time
    extra = 0.0
    bw = in_flight_bandwidth(adj, dev, est.num_blocks)
    if bw is not None:
        notes["in_flight_bandwidth_gbps"] = round(bw / 1e9, 3)
        if bw < dev.memory_bandwidth and memory > 0:
            extra += memory * (dev.memory_bandwidth / bw - 1.0)
    if adj.spill_bytes and est.threads_per_block and est.num_blocks:
        local = adj.spill_bytes * est.threads_per_block * est.num_blocks
        notes["spill_traffic_bytes"] = local
        extra += local / (dev.memory_bandwidth * base.L2_CACHE_SPEEDUP)
    if not extra:
        return attrs.evolve(est, machine_code=notes)
    notes["memory_us_added"] = round(extra * 1e6, 6)
    return attrs.evolve(est, data=attrs.evolve(d, exec_time=d.exec_time + extra), machine_code=notes)
