"""What the performance model knows about a GPU beyond :class:`fusegen.device.DeviceDescription`.

XLA keeps these facts on ``se::DeviceDescription`` as per-architecture constants
(``xla/stream_executor/device_description.h``) and in its CUDA core table
(``xla/stream_executor/cuda/cuda_core_info_table.cc``, checked by ``cuda_core_info_table_test.cc``):

* ``l1_cache_size_per_SM`` 2 KiB, ``dram_to_l2_transaction_size_bytes`` 64 B and
  ``memory_transactions_per_clock`` 32 (one 32-byte transaction per SM per clock) on every NVIDIA part;
* peak tensor-core ("matrix unit") and CUDA-core ("scalar unit") rates per element type for Hopper, which
  XLA's test gives as dense TFLOP/s of an H100 SXM (132 SMs at 1.98 GHz): scaled here by cores x clock, so an
  H200 (same SMs and clock) gets the same rates. A device without a table (XLA's RTX A6000 test device, A100
  here) falls back to the FP32 FMA rate ``cores x fpus_per_core x 2 x clock`` (XLA's
  ``CalculateEffectiveFlopsPerNs`` fallback in ``CalculatePeakOpsPerNs``).
"""

from __future__ import annotations

from typing import Any

import attrs

#: ``DeviceDescription::l1_cache_size_per_SM`` for NVIDIA GPUs (bytes).
L1_CACHE_BYTES_PER_SM = 2 * 1024
#: ``DeviceDescription::dram_to_l2_transaction_size_bytes`` (two 32-byte sectors).
DRAM_TO_L2_TRANSACTION_BYTES = 64
#: ``DeviceDescription::memory_transactions_per_clock`` (32-byte transactions per SM per clock).
MEMORY_TRANSACTIONS_PER_CLOCK = 32

#: The H100 SXM the Hopper rates below are quoted for (``TestGpuDeviceInfo::H100SXMDeviceInfo``).
_HOPPER_CORES, _HOPPER_CLOCK_GHZ = 132, 1.98

#: Dense TFLOP/s of the tensor cores per input element type (``cuda_core_info_table_test.cc``, H100).
HOPPER_MATRIX_TFLOPS = {"f8e4m3fn": 1979.0, "f8e5m2": 1979.0, "f8e4m3": 1979.0, "s8": 1979.0, "u8": 1979.0,
                        "f16": 989.0, "bf16": 989.0, "f32": 495.0, "f64": 67.0}
#: TFLOP/s of the CUDA cores (FMA = 2 flops) per element type (same test).
HOPPER_SCALAR_TFLOPS = {"f16": 134.0, "bf16": 134.0, "f32": 67.0, "s32": 33.5, "f64": 33.5}


@attrs.frozen
class PerfDevice:
    """The device as the model sees it (units: bytes, bytes/s, GHz, flops/s).

    Built from a ``DeviceDescription`` by :meth:`of`; ``matrix_tflops`` / ``scalar_tflops`` are empty for a
    device without XLA's rate table.
    """

    name: str
    compute_capability: tuple[int, int]
    cores: int
    fpus_per_core: int
    clock_ghz: float
    memory_bandwidth: float
    l2_cache_bytes: int
    registers_per_block: int
    registers_per_core: int
    threads_per_core: int
    shared_memory_per_core: int
    warp_size: int = 32
    l1_cache_bytes_per_core: int = L1_CACHE_BYTES_PER_SM
    transaction_bytes: int = DRAM_TO_L2_TRANSACTION_BYTES
    transactions_per_clock: int = MEMORY_TRANSACTIONS_PER_CLOCK
    matrix_tflops: dict = attrs.field(factory=dict)
    scalar_tflops: dict = attrs.field(factory=dict)

    @classmethod
    def of(cls, device: Any) -> "PerfDevice":
        """The model's view of a :class:`fusegen.device.DeviceDescription` (a :class:`PerfDevice` passes through).

        Raises:
            ValueError: ``device`` lacks bandwidth, cores or clock (e.g. a model string or a minimal device).
        """
        if isinstance(device, PerfDevice):
            return device
        bw = getattr(device, "memory_bandwidth", 0)
        cores = getattr(device, "core_count", 0)
        clock = getattr(device, "clock_rate_ghz", 0.0)
        if not (bw and cores and clock):
            raise ValueError(f"the performance model needs a device description with memory bandwidth, core "
                             f"count and clock rate, got {getattr(device, 'name', device)!r}")
        cc = tuple(getattr(device, "compute_capability", (0, 0)))
        scale = cores * clock / (_HOPPER_CORES * _HOPPER_CLOCK_GHZ)
        hopper = getattr(device, "platform", "CUDA") == "CUDA" and cc[0] == 9
        return cls(name=getattr(device, "name", "custom"), compute_capability=cc, cores=int(cores),
                   fpus_per_core=int(getattr(device, "fpus_per_core", 0) or 128), clock_ghz=float(clock),
                   memory_bandwidth=float(bw), l2_cache_bytes=int(getattr(device, "l2_cache_size", 0)),
                   registers_per_block=int(getattr(device, "registers_per_block_limit", 0) or 65536),
                   registers_per_core=int(getattr(device, "registers_per_core_limit", 0) or 65536),
                   threads_per_core=int(getattr(device, "threads_per_core_limit", 0) or 2048),
                   shared_memory_per_core=int(getattr(device, "shared_memory_per_core", 0) or 0),
                   warp_size=int(getattr(device, "threads_per_warp", 32) or 32),
                   matrix_tflops={k: v * scale for k, v in HOPPER_MATRIX_TFLOPS.items()} if hopper else {},
                   scalar_tflops={k: v * scale for k, v in HOPPER_SCALAR_TFLOPS.items()} if hopper else {})

    # -- rates ---------------------------------------------------------------------------------
    def effective_flops_per_ns(self, num_blocks: int, threads_per_block: int) -> int:
        """``CalculateEffectiveFlopsPerNs``: FP32 FMA units a launch keeps busy x 2 x clock (flops/ns, truncated
        to an integer as XLA's ``int64_t`` is)."""
        fpus = min(int(threads_per_block), self.fpus_per_core)
        active = min(int(num_blocks), self.cores)
        return int(self.clock_ghz * 2 * fpus * active)

    def peak_matrix_flops(self, element_type: str) -> float:
        """Tensor-core flops/s for inputs of ``element_type`` (``CalculatePeakMatrixOpsPerNs``); the FP32 FMA rate
        of the whole chip where the device has no table or the type is not listed."""
        t = self.matrix_tflops.get(element_type)
        return t * 1e12 if t else self.effective_flops_per_ns(self.cores, self.fpus_per_core) * 1e9

    def peak_scalar_flops(self, element_type: str) -> float:
        """CUDA-core flops/s for ``element_type`` (``CalculatePeakScalarOpsPerNs``), same fallback."""
        t = self.scalar_tflops.get(element_type)
        return t * 1e12 if t else self.effective_flops_per_ns(self.cores, self.fpus_per_core) * 1e9

    def per_block_bandwidth(self) -> float:
        """Bytes/s one resident block (one SM) can move: one 32-byte transaction per clock (``AdjustBandwidth``)."""
        return self.clock_ghz * 1e9 * self.transactions_per_clock
