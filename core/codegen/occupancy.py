"""How many blocks of a kernel fit on one SM at once, by the CUDA occupancy rules.

Mirrors ``cudaOccMaxActiveBlocksPerMultiprocessor`` of the CUDA toolkit's ``cuda_occupancy.h`` (the
calculator behind ``cudaOccupancyMaxActiveBlocksPerMultiprocessor``) for the default cache configuration:
the fewest blocks allowed by

* warps: ``threads_per_core_limit / warp size`` warp slots, a block taking ``ceil(threads / 32)``;
* blocks: at most ``max_blocks_per_sm`` resident blocks (32 on sm_80 and sm_90);
* registers: registers are given to warps in units of 256 (``registers x 32`` rounded up), each of the SM's 4
  sub-partitions holds ``registers_per_core_limit / 4`` of them; a block over ``registers_per_block_limit``
  (counting its warps rounded up to a multiple of 4, as the hardware check does) or over 255 registers a
  thread does not launch;
* shared memory: static + dynamic + the 1 KB the driver reserves per block (sm_80+), rounded up to 128 B,
  against the SM's shared memory (the largest carve-out, 228 KB on sm_90); a block over the opt-in per-block
  limit does not launch.

The architecture constants not in :class:`~fusegen.device.DeviceDescription` are in :data:`SM_LIMITS`.
"""

from __future__ import annotations

import attrs

from fusegen.device import DeviceDescription

__all__ = ["SmLimits", "SM_LIMITS", "Occupancy", "occupancy"]


@attrs.frozen
class SmLimits:
    """Per-architecture occupancy constants (``cuda_occupancy.h``).

    Attributes:
        max_blocks_per_sm: resident blocks per SM.
        register_allocation_unit: registers per warp are allocated in multiples of this.
        max_registers_per_thread: what ``ptxas`` can assign.
        sub_partitions: SM sub-partitions (each holds a quarter of the register file).
        shared_allocation_unit: bytes; a block's shared memory is rounded up to this.
        reserved_shared_per_block: bytes the driver reserves per block (``cudaDevAttrReservedSharedMemoryPerBlock``).
    """

    max_blocks_per_sm: int
    register_allocation_unit: int = 256
    max_registers_per_thread: int = 255
    sub_partitions: int = 4
    shared_allocation_unit: int = 128
    reserved_shared_per_block: int = 1024


#: by compute capability ``(major, minor)``
SM_LIMITS: dict[tuple[int, int], SmLimits] = {
    (7, 0): SmLimits(max_blocks_per_sm=32, shared_allocation_unit=256, reserved_shared_per_block=0),
    (8, 0): SmLimits(max_blocks_per_sm=32),
    (8, 6): SmLimits(max_blocks_per_sm=16),
    (8, 7): SmLimits(max_blocks_per_sm=16),
    (8, 9): SmLimits(max_blocks_per_sm=24),
    (9, 0): SmLimits(max_blocks_per_sm=32),
}


@attrs.frozen
class Occupancy:
    """Resident blocks and warps of one kernel on one SM.

    Attributes:
        blocks_per_sm: resident blocks (0: the block cannot launch, see ``limited_by``).
        warps_per_sm: ``blocks_per_sm x`` warps per block.
        max_warps_per_sm: the SM's warp slots.
        limited_by: the limits reaching ``blocks_per_sm``, a subset of ``("warps", "blocks", "registers",
            "shared_memory")``.
        limits: blocks each limit alone allows (``None``: not limiting at all, e.g. no shared memory).
        registers_per_block: registers allocated to one block (after rounding).
        shared_bytes_per_block: shared memory allocated to one block (reserve and rounding included), bytes.
    """

    blocks_per_sm: int
    warps_per_sm: int
    max_warps_per_sm: int
    limited_by: tuple[str, ...]
    limits: dict[str, int | None]
    registers_per_block: int
    shared_bytes_per_block: int

    @property
    def fraction(self) -> float:
        """Achievable occupancy: resident warps / warp slots (0..1)."""
        return self.warps_per_sm / self.max_warps_per_sm if self.max_warps_per_sm else 0.0


def _round_up(x: int, unit: int) -> int:
    return -(-x // unit) * unit


def occupancy(device: DeviceDescription, registers: int, threads_per_block: int, shared_bytes: int = 0) -> Occupancy:
    """Blocks of a kernel resident on one SM of ``device``.

    Args:
        device: the GPU (its ``compute_capability`` picks :data:`SM_LIMITS`; its thread, register and shared
            memory limits are used as given).
        registers: 32-bit registers per thread (``ptxas -v``'s ``Used N registers``).
        threads_per_block: threads of one block (Triton: ``32 x num_warps``).
        shared_bytes: static + dynamic shared memory of one block, bytes.

    Raises:
        ValueError: no occupancy constants for the device's compute capability, or a negative/zero input.
    """
    limits = SM_LIMITS.get(tuple(device.compute_capability))
    if limits is None:
        raise ValueError(f"no occupancy limits for compute capability {device.compute_capability} ({device.name}); "
                         f"known: {sorted(SM_LIMITS)}")
    if threads_per_block <= 0 or registers < 0 or shared_bytes < 0:
        raise ValueError(f"occupancy: threads_per_block must be > 0 and registers, shared_bytes >= 0 "
                         f"(got {threads_per_block}, {registers}, {shared_bytes})")
    ws = device.threads_per_warp
    max_warps = device.threads_per_core_limit // ws
    warps = -(-threads_per_block // ws)
    by_warps = 0 if threads_per_block > device.threads_per_block_limit else max_warps // warps

    regs_per_warp = _round_up(registers * ws, limits.register_allocation_unit)
    regs_block = regs_per_warp * warps
    regs_checked = regs_per_warp * _round_up(warps, limits.sub_partitions)
    by_regs: int | None
    if (regs_checked > device.registers_per_block_limit or regs_block > device.registers_per_block_limit
            or registers > limits.max_registers_per_thread):
        by_regs = 0
    elif regs_per_warp == 0:
        by_regs = None
    else:
        per_sub = (device.registers_per_core_limit // limits.sub_partitions) // regs_per_warp
        by_regs = per_sub * limits.sub_partitions // warps

    smem_block = _round_up(shared_bytes + limits.reserved_shared_per_block, limits.shared_allocation_unit)
    by_smem: int | None
    if smem_block > device.shared_memory_per_block_optin + limits.reserved_shared_per_block:
        by_smem = 0
    elif smem_block == 0:
        by_smem = None
    else:
        by_smem = device.shared_memory_per_core // smem_block

    named = {"warps": by_warps, "blocks": limits.max_blocks_per_sm, "registers": by_regs, "shared_memory": by_smem}
    blocks = min(v for v in named.values() if v is not None)
    return Occupancy(blocks_per_sm=blocks, warps_per_sm=blocks * warps, max_warps_per_sm=max_warps,
                     limited_by=tuple(k for k, v in named.items() if v == blocks), limits=named,
                     registers_per_block=regs_block, shared_bytes_per_block=smem_block)
