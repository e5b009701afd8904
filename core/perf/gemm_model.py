"""A tiled GEMM's time as the hardware runs it, and cuBLASLt's time as the best of its usual kernels.

fusegen's own estimator (XLA has no counterpart; :mod:`fusegen.perf.dot_model` mirrors XLA's dot fusion cost
model and stays what ``tests/perf/test_perf_model_xla.py`` checks). :func:`estimate_gemm` prices one kernel
(:class:`GemmKernel`: tile, pipeline stages, warps, split-K, block order) on a device from public figures only:

* **Main loop, per SM.** A block's K step of ``bm x bn x bk`` costs the largest of: its tensor-core time
  (``2 bm bn bk`` flops at the SM's share of the peak for the input type, x :data:`SUSTAINED_TENSOR_FRACTION`;
  on Hopper without ``wgmma`` (``bm < 64`` or warps not whole warpgroups) XLA's 0.63 derate), its shared-memory
  operand reads (128 bytes a clock an SM; a ``wgmma`` warpgroup re-reads the B tile, an ``mma.sync`` warp grid
  re-reads both), its L2 -> SM bytes at the SM's share of the L2 bandwidth (at most 64 bytes a clock when few
  SMs share it; TMA multicast shares one operand
  between the blocks of a cluster), the load latency the pipeline leaves exposed (``num_stages - 1`` loads
  in flight per resident block; one stage: every step waits for its load; a load of the first round of blocks
  waits on DRAM, later rounds' on DRAM for their share of first touches, else on L2), and a block's step plus its
  loop synchronisation (XLA's per-K-step overheads: 150 ns with TMA, 400 ns with ``cp.async``; none for a
  persistent warp-specialised kernel), both hidden by the other resident blocks; with ``wgmma`` and two or more
  stages the synchronisation overlaps the block's own asynchronous MMAs instead of adding to them.
* **Waves and the tail.** ``tiles = batch x ceil(M / bm) x ceil(N / bn) x split_k`` blocks; the busiest SM runs
  ``ceil(tiles / SMs)`` of them. Resident blocks (shared memory, registers, threads) share the SM's tensor cores
  and hide each other's latency; each round of them pays a pipeline fill (one DRAM round trip: the stages' loads
  are issued together) and an epilogue store (a persistent kernel pays them once).
* **Fixed costs.** Once a kernel, what no throughput hides: :data:`KERNEL_FLOOR_S`, launch to first instruction
  and retire as a profiler sees it, and the last stores' round trip to DRAM. Together with the first fill they
  make :data:`SMALL_TRANSFER_S`, XLA's measured H100 time for a transfer of 1 MiB or less (about 5.2 µs): no GEMM
  kernel is faster than a kernel that moves almost nothing.
* **DRAM and L2 reuse.** Blocks run in a raster: row-major (XLA's Triton GEMM) or grouped ``group_m`` rows at a
  time (cuBLAS). A band of rows sweeps every column: its A rows stay in L2, and B is read from DRAM once per
  band unless B and the band's A fit in the usable L2 (:data:`L2_USABLE_FRACTION`), then once in all. Output
  and split-K partials are written once. The kernel takes at least its DRAM bytes at
  :data:`DRAM_EFFICIENCY` of the bandwidth.
* **Split-K** contracts ``K / split_k`` per block and adds a reduction of the f32 partials (a second kernel for
  Triton, as XLA emits it, paying :data:`SMALL_TRANSFER_S` besides its bytes; in-kernel for a library).

:func:`library_gemm` is cuBLASLt's time: the best of :func:`library_kernels` (Hopper: persistent, TMA,
cluster-multicast, grouped raster, warp-specialised tiles from 64x64 to 256x128, split-K when the tiles do not
fill the SMs; Ampere: ``mma.sync`` tiles), as a well-tuned library's heuristic picks.

Constants and where they come from (all public; none fitted to XLA's measured sm_90 tables):

* peak flops per type: XLA's ``cuda_core_info_table_test.cc`` (:mod:`fusegen.perf.device_rates`);
* :data:`SUSTAINED_TENSOR_FRACTION` 0.77: what a dense GEMM sustains of the datasheet tensor rate (power-limited
  clocks); set so this model reproduces the public cuBLAS figure of 721.6 TFLOP/s for a 2048x8192x8192 fp16
  GEMM on an H100 (triton-lang/triton#2339), fixed costs included, see docs/perf-model.md;
* :data:`KERNEL_FLOOR_S`: XLA's measured H100 small-transfer time (``GetEffectiveHbmBandwidth``'s table in
  ``gpu_dot_fusion_cost_model.cc``, :data:`fusegen.perf.dot_model.HBM_TABLE_H100`) less its load and store round
  trips (2 x :data:`DRAM_LATENCY_S`); 3.97 µs;
* L2 bandwidth: XLA's measured 6.65 TB/s on an H100, per SM x clock; shared memory 128 bytes a clock an SM (32
  banks x 4 bytes); latencies 250 ns from L2 and 600 ns from DRAM (the DRAM figure is
  :mod:`fusegen.perf.machine_code`'s assumption);
* XLA's 0.63 tensor-core derate without ``wgmma`` (``gpu_dot_fusion_cost_model.cc``).
"""

from __future__ import annotations

import math
from typing import Iterable

import attrs

from fusegen.hlo.dtypes import bit_width
from fusegen.perf.base import RunTimeData
from fusegen.perf.device_rates import PerfDevice
from fusegen.perf import dot_model
from fusegen.perf.dot_model import DotProblem, DotUnsupported, effective_matrix_flops

#: Fraction of the datasheet tensor-core rate a dense GEMM's main loop sustains (see the module docstring).
SUSTAINED_TENSOR_FRACTION = 0.77
#: L2 -> SM bytes a clock, per SM: XLA's measured H100 L2 bandwidth (6.65 TB/s, ``gpu_dot_fusion_cost_model.cc``)
#: over its 132 SMs at 1.98 GHz (25.4 B/clk/SM; public microbenchmarks of an H100 PCIe find ~5.5 TB/s for 114 SMs
#: at 1.755 GHz, 27.5 B/clk/SM). Other devices scale by SMs x clock.
L2_BYTES_PER_CLOCK_PER_SM = dot_model.L2_BANDWIDTH / (132 * 1.98e9)
#: The most L2 bytes one SM takes a clock when few SMs share the L2 (its L1 fill port).
L2_BYTES_PER_CLOCK_ONE_SM = 64
#: Shared-memory bytes an SM reads a clock (32 banks of 4 bytes).
SMEM_BYTES_PER_CLOCK = 128
#: Load latencies (seconds): an L2 hit, a DRAM access.
L2_LATENCY_S = 250e-9
DRAM_LATENCY_S = 600e-9


def _small_transfer_s() -> float:
    """The time XLA measured on an H100 for a transfer of 1 MiB or less (``GetEffectiveHbmBandwidth``'s table,
    :data:`fusegen.perf.dot_model.HBM_TABLE_H100`): the median of ``bytes / measured bandwidth`` over its rows up
    to 1 MiB (5.17 µs; every such row takes 5.0 to 5.5 µs, the bytes themselves at most 0.3 µs)."""
    times = sorted(b / (gbps * (1 << 30)) for b, gbps in dot_model.HBM_TABLE_H100 if b <= 1 << 20)
    mid = len(times) // 2
    return times[mid] if len(times) % 2 else (times[mid - 1] + times[mid]) / 2


#: A kernel that moves almost nothing, as XLA measured it on an H100 (seconds; :func:`_small_transfer_s`).
SMALL_TRANSFER_S = _small_transfer_s()
#: A kernel's launch-to-first-instruction and retire time as a profiler sees it (seconds): the small transfer's
#: time less its two dependent DRAM round trips (the load, then the store's completion), 3.97 µs.
KERNEL_FLOOR_S = SMALL_TRANSFER_S - 2 * DRAM_LATENCY_S
#: Fraction of the DRAM bandwidth a streaming kernel reaches.
DRAM_EFFICIENCY = 0.9
#: Fraction of the L2 that keeps operands across waves (the rest: other lines, set conflicts).
L2_USABLE_FRACTION = 0.75
#: Registers a thread needs beyond its f32 accumulators (addresses, loop state, fragments), at least.
REGISTER_OVERHEAD = 40
#: Tensor-core rate without ``wgmma`` on Hopper (XLA's ``GetEffectiveFlopsPerNsForTileSize``).
NO_WGMMA_DERATE = 0.63
#: A block's per-K-step synchronisation and load issue (XLA's dot cost model's loop overheads; seconds).
from fusegen.perf.dot_model import LEGACY_LOOP_OVERHEAD_S, TMA_LOOP_OVERHEAD_S  # noqa: E402


@attrs.frozen
class GemmKernel:
    """One GEMM kernel's shape.

    Attributes:
        bm, bn, bk: the output tile of one block and its K step (elements).
        stages: software-pipelining stages (1: every K step waits for its own load).
        warps: warps per block.
        split_k: K split across blocks (their f32 partials are reduced after).
        group_m: raster: 1 = row-major over output tiles (N fastest); G > 1 = G tile rows at a time.
        multicast: blocks of a cluster sharing one operand load (TMA multicast; 1 = none).
        persistent: blocks loop over tiles with a producer warpgroup feeding the MMAs (pipeline fill and epilogue
            paid once per SM, no per-step synchronisation exposed).
        tma: loads use the tensor memory accelerator (a cheaper K step than ``cp.async``).
        name: a label (``"cublas 128x256x64 s4"``).
    """

    bm: int
    bn: int
    bk: int
    stages: int = 1
    warps: int = 4
    split_k: int = 1
    group_m: int = 1
    multicast: int = 1
    persistent: bool = False
    tma: bool = False
    name: str = ""


@attrs.frozen
class GemmTime:
    """:func:`estimate_gemm`'s answer (seconds, bytes).

    Attributes:
        seconds: the kernel's time, its fixed costs included (plus a split-K reduction kernel for a Triton kernel),
            without XLA's 1 µs launch overhead (the module estimate adds it).
        compute_s: the busiest SM's tensor-core time; main_s: its main loop, fills and epilogues.
        l2_s, dram_s: the whole grid's L2 -> SM and DRAM time; latency_s: exposed load latency per K step x steps.
        flops, dram_bytes, l2_bytes, written_bytes: counts (flops of the padded tiles).
        tiles, tiles_per_sm, occupancy: blocks, the busiest SM's blocks, resident blocks per SM.
        bound: ``compute``, ``l2``, ``dram`` or ``latency``: what set the main loop's step (or DRAM overall).
        kernel: the :class:`GemmKernel`; extra_launches: kernels beyond the GEMM (split-K reduction).
    """

    seconds: float
    compute_s: float
    main_s: float
    l2_s: float
    dram_s: float
    latency_s: float
    flops: int
    dram_bytes: int
    l2_bytes: int
    written_bytes: int
    tiles: int
    tiles_per_sm: int
    occupancy: int
    bound: str
    kernel: GemmKernel
    extra_launches: int = 0

    @property
    def is_infinite(self) -> bool:
        return self.seconds == float("inf")

    def run_time_data(self) -> RunTimeData:
        """As :class:`~fusegen.perf.base.RunTimeData`: read time = DRAM reads, compute = tensor-core time."""
        if self.is_infinite:
            return RunTimeData.infinite()
        read_b = max(self.dram_bytes - self.written_bytes, 0)
        share = self.dram_s / self.dram_bytes if self.dram_bytes else 0.0
        return RunTimeData(self.flops, read_b, self.written_bytes, read_b * share, self.written_bytes * share,
                           self.compute_s, self.seconds)

    def to_json(self) -> dict:
        k = self.kernel
        return {"kernel": k.name or f"{k.bm}x{k.bn}x{k.bk} s{k.stages} w{k.warps}",
                "us": None if self.is_infinite else round(self.seconds * 1e6, 6), "bound": self.bound,
                "tiles": self.tiles, "tiles_per_sm": self.tiles_per_sm, "occupancy": self.occupancy,
                "dram_bytes": int(self.dram_bytes), "l2_bytes": int(self.l2_bytes)}


def _eb(element_type: str) -> float:
    return bit_width(element_type) / 8


def _infinite(kernel: GemmKernel) -> GemmTime:
    inf = float("inf")
    return GemmTime(inf, inf, inf, inf, inf, inf, 0, 0, 0, 0, 0, 0, 0, "spill", kernel)


def tensor_flops_per_sm(p: DotProblem, kernel: GemmKernel, dev: PerfDevice, peak: float | None = None) -> float:
    """Flops/s one SM's tensor cores sustain for this kernel: the device's rate for the LHS type (XLA's table,
    its small-tile derates) or ``peak`` (flops/s of the whole device, from machine code), on Hopper x
    :data:`NO_WGMMA_DERATE` without whole warpgroups, x :data:`SUSTAINED_TENSOR_FRACTION`."""
    if peak is None:
        peak = effective_matrix_flops(dev, kernel.bm, p.lhs_type)
        if dev.compute_capability[0] == 9 and kernel.bm >= 64 and kernel.warps % 4:
            peak *= NO_WGMMA_DERATE  # 64-row tiles but warps that do not form warpgroups: mma.sync
    return peak * SUSTAINED_TENSOR_FRACTION / dev.cores


def _uses_wgmma(kernel: GemmKernel, dev: PerfDevice) -> bool:
    return dev.compute_capability[0] == 9 and kernel.bm >= 64 and kernel.warps % 4 == 0


def _smem_bytes_per_step(p: DotProblem, kernel: GemmKernel, dev: PerfDevice) -> float:
    """Shared-memory bytes the MMAs of one K step read: a ``wgmma`` warpgroup reads its A rows and all of B;
    an ``mma.sync`` warp grid ``wm x wn`` reads A ``wn`` times and B ``wm`` times."""
    a = kernel.bm * kernel.bk * _eb(p.lhs_type)
    b = kernel.bk * kernel.bn * _eb(p.rhs_type)
    if _uses_wgmma(kernel, dev):
        groups = max(1, min(kernel.warps // 4, kernel.bm // 64))
        return a + groups * b
    wm = max(1, min(kernel.warps, kernel.bm // 16))
    while kernel.warps % wm:
        wm -= 1
    wn = max(1, kernel.warps // wm)
    return a * wn + b * wm


def registers(p: DotProblem, kernel: GemmKernel, threads: int) -> int:
    """32-bit registers a thread of ``kernel`` needs: its share of the f32 accumulators ``bm x bn``, plus, for a
    Triton kernel (not :attr:`~GemmKernel.persistent`: its loads go through registers on their way to shared
    memory), its share of one K step's A and B tiles, at least :data:`REGISTER_OVERHEAD`. Over 255 the kernel spills
    and XLA discards it ("Discarding compilation due to register spilling."). Checked against 18 Triton sm_90
    compiles of fusegen's 4096^3 GEMM kernels (``ptxas -v``), right about spilling for each: bf16 128x256x64 and
    256x128x64 with 8 warps 172 and 176 registers (this model 176, 176), 128x256x128 with 8 warps 190 (224),
    128x128x64 with 4 warps 168 (192), no spills; 128x256x32 with 4 warps spills (304); f32 (tf32) 128x256x64 and
    256x128x64 with 8 warps 254 and 248 (224, 224), 128x128x32, 128x128x16, 128x64x64 and 64x16x256 with 4 warps
    228, 193, 199 and 249 (192, 160, 160, 168), no spills; 128x128x64, 64x128x128 and 128x64x128 with 4 warps and
    128x256x128 with 8 warps spill 216, 300, 368 and 1820 bytes (256, 256, 256, 320)."""
    acc = math.ceil(kernel.bm * kernel.bn / threads)
    if kernel.persistent:  # TMA straight into shared memory, a producer warpgroup
        return acc + REGISTER_OVERHEAD
    step = kernel.bm * kernel.bk * _eb(p.lhs_type) + kernel.bk * kernel.bn * _eb(p.rhs_type)
    return acc + max(REGISTER_OVERHEAD, math.ceil(step / (4 * threads)))


def occupancy(p: DotProblem, kernel: GemmKernel, device: object) -> int:
    """Blocks one SM holds at once (:func:`fusegen.codegen.occupancy.occupancy`) for ``stages x`` the A and B K-step
    tiles of shared memory and :func:`registers` a thread; 0 when one block does not fit (over 255 registers a
    thread: it would spill; shared memory over the opt-in limit). This, not the tiled model's 40%-of-registers rule
    for a tile, decides whether a Triton GEMM config runs (``gemm="hardware"``).

    Raises:
        ValueError: ``device`` is not a device description with occupancy limits (its compute capability).
    """
    from fusegen.codegen.occupancy import occupancy as sm_occupancy

    if isinstance(device, PerfDevice):
        raise ValueError("GEMM occupancy needs the device description, not a PerfDevice")
    stage = kernel.bm * kernel.bk * _eb(p.lhs_type) + kernel.bk * kernel.bn * _eb(p.rhs_type)
    threads = kernel.warps * getattr(device, "threads_per_warp", 32)
    return sm_occupancy(device, registers(p, kernel, threads), threads,
                        int(max(kernel.stages, 1) * stage)).blocks_per_sm


def dram_bytes(p: DotProblem, kernel: GemmKernel, device: object, resident: int) -> int:
    """Bytes the grid moves to and from DRAM (see the module docstring: bands of the raster, L2 reuse across
    waves, the output and split-K partials); ``resident``: blocks per SM (a wave is ``SMs x resident`` tiles)."""
    dev = PerfDevice.of(device)
    ea, eb, eo = _eb(p.lhs_type), _eb(p.rhs_type), _eb(p.out_type)
    split = max(kernel.split_k, 1)
    kk = math.ceil(p.k / split)
    tm, tn = math.ceil(p.m / kernel.bm), math.ceil(p.n / kernel.bn)
    layers = p.b * split
    a_layer, b_layer = p.m * kk * ea, kk * p.n * eb
    usable = dev.l2_cache_bytes * L2_USABLE_FRACTION
    wave = max(1, dev.cores * max(resident, 1))
    g = min(max(kernel.group_m, 1), tm)
    band_a = g * kernel.bm * kk * ea
    if wave >= tm * tn or a_layer + b_layer <= usable:
        reads = a_layer + b_layer  # a wave holds the whole layer, or both operands stay in L2
    else:
        bands = math.ceil(tm / g)
        per_wave = max(1, wave // (g * tn))  # bands one wave sweeps together share their B reads
        b_reads = 1 if b_layer + band_a <= usable else math.ceil(bands / per_wave)
        a_reads = 1 if band_a <= usable / 2 else math.ceil(tn * g / wave)  # a band's rows outlive its sweep
        reads = a_reads * a_layer + b_reads * b_layer
    out = p.b * p.m * p.n * eo
    partials = p.b * p.m * p.n * 4 * split if split > 1 else 0
    return int(layers * reads + (partials if split > 1 else out))


def estimate_gemm(p: DotProblem, kernel: GemmKernel, device: object, peak: float | None = None,
                  reduction_kernel: bool = True) -> GemmTime:
    """The time of ``kernel`` computing ``p`` on ``device`` (see the module docstring).

    Args:
        p: batch, M, N, K and element types (:class:`fusegen.perf.dot_model.DotProblem`).
        kernel: the tiling; device: a :class:`fusegen.device.DeviceDescription`.
        peak: flops/s of the whole device replacing the tensor-core rate (machine code without tensor cores).
        reduction_kernel: split-K partials are reduced by a second kernel (Triton, as XLA emits it); ``False``:
            in the kernel (a library), their bytes still count.

    Returns:
        :class:`GemmTime`; infinite when one block does not fit on an SM.

    Raises:
        DotUnsupported: a tile size, K or a dimension is not positive.
        ValueError: the device lacks bandwidth, cores or clock, or occupancy limits (:func:`occupancy`).
    """
    dev = PerfDevice.of(device)
    if min(kernel.bm, kernel.bn, kernel.bk, p.k, p.m, p.n, p.b) <= 0:
        raise DotUnsupported(f"GEMM {p.b}x{p.m}x{p.n}x{p.k} with tile {kernel.bm}x{kernel.bn}x{kernel.bk}: "
                             "every size must be positive")
    resident = occupancy(p, kernel, device)
    if resident == 0:
        return _infinite(kernel)
    split = max(kernel.split_k, 1)
    kk = math.ceil(p.k / split)
    steps = math.ceil(kk / kernel.bk)
    tm, tn = math.ceil(p.m / kernel.bm), math.ceil(p.n / kernel.bn)
    tiles = p.b * tm * tn * split
    per_sm = math.ceil(tiles / dev.cores)
    active = min(tiles, dev.cores)
    res = max(1, min(resident, per_sm))
    clock = dev.clock_ghz * 1e9
    ea, eb, eo = _eb(p.lhs_type), _eb(p.rhs_type), _eb(p.out_type)
    # one block's K step, in the SM's time
    flops_step = 2 * kernel.bm * kernel.bn * kernel.bk
    t_mma = flops_step / tensor_flops_per_sm(p, kernel, dev, peak)
    t_smem = _smem_bytes_per_step(p, kernel, dev) / (SMEM_BYTES_PER_CLOCK * clock)
    a_step, b_step = kernel.bm * kernel.bk * ea, kernel.bk * kernel.bn * eb
    l2_step = a_step + b_step / max(kernel.multicast, 1)
    l2_total_bw = L2_BYTES_PER_CLOCK_PER_SM * dev.cores * clock
    t_l2 = l2_step / min(l2_total_bw / active, L2_BYTES_PER_CLOCK_ONE_SM * clock)
    dram_b = dram_bytes(p, kernel, dev, resident)
    l2_b = tiles * steps * l2_step
    # the share of a block's loads that wait on DRAM: every load of the first round (its lines are cold, or in flight
    # for a neighbour of the same round), and the share of first touches among the later rounds' loads
    loaded = dram_b - p.b * p.m * p.n * (4 * split if split > 1 else eo)  # what the grid reads from DRAM
    first_touch = min(1.0, loaded / l2_b) if l2_b else 1.0
    waves = math.ceil(per_sm / res)
    from_dram = (1 + (waves - 1) * first_touch) / waves
    latency = L2_LATENCY_S + from_dram * (DRAM_LATENCY_S - L2_LATENCY_S)
    t_comp = max(t_mma, t_smem)
    sync = 0.0 if kernel.persistent else TMA_LOOP_OVERHEAD_S if kernel.tma else LEGACY_LOOP_OVERHEAD_S
    if kernel.stages <= 1:
        t_lat = (latency + t_comp + sync) / res
    elif _uses_wgmma(kernel, dev):
        # wgmma runs asynchronously: the next step's barrier wait and load issue overlap the MMAs in flight
        t_lat = max(latency / ((kernel.stages - 1) * res), max(t_comp, sync) / res)
    else:
        t_lat = max(latency / ((kernel.stages - 1) * res), (t_comp + sync) / res)
    t_step = max(t_comp, t_l2, t_lat)
    bound = "compute" if t_step == t_comp else "l2" if t_step == t_l2 else "latency"
    dram_bw = dev.memory_bandwidth * DRAM_EFFICIENCY
    out_tile = kernel.bm * kernel.bn * (4 if split > 1 else eo)
    epilogue = out_tile / (dram_bw / active)
    rounds = 1 if kernel.persistent else math.ceil(per_sm / res)
    main = per_sm * steps * t_step + rounds * (DRAM_LATENCY_S + epilogue)
    dram_s = dram_b / dram_bw
    seconds = max(main, dram_s)
    if seconds == dram_s and dram_s > main:
        bound = "dram"
    # fixed costs no throughput hides: the launch and retire floor, and the last stores' round trip to DRAM
    seconds += KERNEL_FLOOR_S + DRAM_LATENCY_S
    extra = 0
    written = p.b * p.m * p.n * eo
    if split > 1:
        red = (p.b * p.m * p.n * 4 * split + written) / dram_bw
        seconds += red
        if reduction_kernel:  # a second kernel: its own floor, its load and its store round trips
            extra = 1
            seconds += SMALL_TRANSFER_S
    flops = 2 * tiles * kernel.bm * kernel.bn * steps * kernel.bk
    return GemmTime(seconds, per_sm * steps * t_mma, main, l2_b / l2_total_bw, dram_s, steps * per_sm * t_lat,
                    int(flops), int(dram_b + (written if split > 1 else 0)), int(l2_b), int(written), tiles,
                    per_sm, res, bound, kernel, extra)


def library_kernels(p: DotProblem, device: object) -> list[GemmKernel]:
    """The kernels :func:`library_gemm` chooses among: on Hopper persistent, warp-specialised TMA kernels
    (one producer warpgroup, ``bm / 64`` consumer warpgroups up to 2), a 2-block cluster multicasting the
    shared operand once there are tiles for it, grouped raster of 8; elsewhere ``mma.sync`` kernels of 4 or 8
    warps. ``bk`` is 128 bytes of the input type; stages fill the shared memory (at most 8); split-K of 2 to
    16 while the tiles leave SMs idle and each split keeps 256 of K."""
    dev = PerfDevice.of(device)
    eb = max(_eb(p.lhs_type), _eb(p.rhs_type))
    bk = max(16, int(128 // eb))
    hopper = dev.compute_capability[0] >= 9
    shapes = ((64, 64), (64, 128), (128, 64), (128, 128), (64, 256), (128, 256), (256, 128))
    optin = getattr(device, "shared_memory_per_block_optin", 0) or 227 * 1024
    out = []
    for bm, bn in shapes:
        stage = (bm + bn) * bk * eb
        stages = int(min(8, (optin - bm * bn * _eb(p.out_type)) // stage))
        if stages < 2:
            continue
        tiles = p.b * math.ceil(p.m / bm) * math.ceil(p.n / bn)
        splits = [1]
        s = 2
        while s <= 16 and tiles * s <= 2 * dev.cores and p.k // s >= 256:
            splits.append(s)
            s *= 2
        for split in splits:
            if hopper:
                consumers = max(1, min(2, bm // 64))
                multicast = 2 if tiles * split >= 2 * dev.cores else 1
                out.append(GemmKernel(bm, bn, bk, stages, 4 * (consumers + 1), split, 8, multicast, True, True,
                                      f"cublas {bm}x{bn}x{bk} s{stages}" + (f" split{split}" if split > 1 else "")))
            else:
                warps = 8 if bm * bn >= 128 * 128 else 4
                out.append(GemmKernel(bm, bn, bk, min(stages, 4), warps, split, 8, 1, False, False,
                                      f"cublas {bm}x{bn}x{bk} s{min(stages, 4)}" + (f" split{split}" if split > 1 else "")))
    return out


def library_gemm(p: DotProblem, device: object, kernels: Iterable[GemmKernel] | None = None) -> GemmTime:
    """cuBLASLt's time for ``p``: the fastest of ``kernels`` (default :func:`library_kernels`), split-K reduced in
    the kernel.

    Raises:
        DotUnsupported: a dimension is not positive, or no kernel fits the device.
    """
    best = None
    for k in kernels if kernels is not None else library_kernels(p, device):
        t = estimate_gemm(p, k, device, reduction_kernel=False)
        if best is None or t.seconds < best.seconds:
            best = t
    if best is None or best.is_infinite:
        raise DotUnsupported(f"no library kernel fits {p.b}x{p.m}x{p.n}x{p.k} on this device")
    return best
