"""A tiled GEMM's time from its tile sizes, pipeline depth and the device (XLA's dot fusion cost model).

Mirrors ``xla/service/gpu/model/gpu_dot_fusion_cost_model.cc``
(``EstimateRunTimeForDotOpWithBlockParameters``):

* compute: ``2 x tile_b x tile_m x tile_n x K`` flops per output tile, the tile count rounded up to whole
  waves of ``core_count`` blocks, over the tensor cores' peak for the LHS type, derated when the tile is too
  small for the architecture's MMA instructions (Hopper ``tile_m < 64``: 0.63, no ``wgmma``; Ampere
  ``tile_m < 16``: 0.5; Blackwell ``tile_m < 128``: 0.5);
* HBM: the operands and the output once each, at the bandwidth XLA measured on an H100 for a transfer of that
  size (:func:`effective_hbm_bandwidth`);
* L2: every tile re-reads its ``(tile_m + tile_n) x K`` operand bytes from L2 (6.65 TB/s) plus a per-K-step
  overhead (150 ns with TMA, 400 ns without);
* main loop: ``ceil(K / block_k)`` steps; with one stage compute and memory (plus an 1.8 µs latency tax per
  step) run in series, with ``num_stages > 1`` they overlap after a prologue;
* the time is the largest of main loop, HBM and L2 time.

fusegen's one change: the measured bandwidth table is scaled by the device's bandwidth over the H100's
(3.35 TB/s) when the device is faster (an H200's HBM3e), so a transfer never moves slower than the table
but an H200 gets its 4.8 TB/s; slower devices use XLA's table as is.
"""

from __future__ import annotations

import bisect
import math
from typing import TYPE_CHECKING, Sequence

import attrs

from fusegen.hlo.dtypes import bit_width
from fusegen.perf.base import RunTimeData
from fusegen.perf.device_rates import PerfDevice

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction

#: ``kLatencyTax``: memory latency paid per main-loop step that the pipeline does not hide (seconds).
LATENCY_TAX_S = 1800e-9
#: Measured H100 L2 bandwidth within a partition (bytes/s).
L2_BANDWIDTH = 6.65e12
#: Per-K-step overheads: TMA (``cp.async.bulk``) and the legacy ``cp.async`` path (seconds).
TMA_LOOP_OVERHEAD_S = 150e-9
LEGACY_LOOP_OVERHEAD_S = 400e-9
#: The H100 SXM whose bandwidth the table was measured on (bytes/s).
H100_BANDWIDTH = 3_352_320_000_000
#: ``(transfer bytes, measured GiB/s)`` on an H100 (``GetEffectiveHbmBandwidth``).
HBM_TABLE_H100 = ((8192, 1.42), (16384, 3.03), (32768, 6.02), (65536, 11.77), (131072, 23.68), (262144, 47.35),
                  (524288, 92.56), (1048576, 179.06), (2097152, 346.75), (4194304, 639.38), (8388608, 1069.98),
                  (16777216, 1583.95), (33554432, 1974.72), (67108864, 2343.19), (134217728, 2632.96),
                  (268435456, 2766.69), (536870912, 2968.89), (1073741824, 3126.0))


class DotUnsupported(ValueError):
    """The dot has a shape the cost model does not cover (the message says which)."""


@attrs.frozen
class DotProblem:
    """``DotProblemInfo``: batch, M, N, K and element types of a dot."""

    b: int
    m: int
    n: int
    k: int
    lhs_type: str
    rhs_type: str
    out_type: str

    @classmethod
    def of(cls, dot: "Instruction") -> "DotProblem":
        """From a ``dot`` instruction.

        Raises:
            DotUnsupported: more than one non-contracting dimension per side, or not exactly one contracting one
                (``IsSupported``).
        """
        lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
        lc, rc = list(dot.attrs.get("lhs_contracting_dims", ())), list(dot.attrs.get("rhs_contracting_dims", ()))
        lb, rb = list(dot.attrs.get("lhs_batch_dims", ())), list(dot.attrs.get("rhs_batch_dims", ()))
        lnc = [d for d in range(lhs.rank) if d not in lc and d not in lb]
        rnc = [d for d in range(rhs.rank) if d not in rc and d not in rb]
        if len(lnc) > 1 or len(rnc) > 1:
            raise DotUnsupported(f"multiple non-contracting dimensions are not supported (LHS {lnc}, RHS {rnc})")
        if len(lc) != 1 or len(rc) != 1:
            raise DotUnsupported(f"exactly one contracting dimension is supported (LHS {lc}, RHS {rc})")
        out = dot.shape if dot.shape.is_array else dot.shape.tuple_shapes[0]
        return cls(math.prod(lhs.dimensions[d] for d in lb), lhs.dimensions[lnc[0]] if lnc else 1,
                   rhs.dimensions[rnc[0]] if rnc else 1, lhs.dimensions[lc[0]], lhs.element_type, rhs.element_type,
                   out.element_type)


def find_dot(instr: "Instruction") -> "Instruction | None":
    """The instruction itself if it is a dot, else the first dot in its called computations (a GEMM fusion's
    dot, which the tuner's cost model and the estimate's library candidate price)."""
    if instr.opcode == "dot":
        return instr
    for comp in instr.called_computations:
        for i in comp.instructions:
            d = find_dot(i)
            if d is not None:
                return d
    return None


@attrs.frozen
class DotTile:
    """``DotTileSize``: the output tile (``b x m x n``) and the K step of one block."""

    m: int
    n: int
    k: int
    b: int = 1


def _bytes(elements: int, element_type: str) -> int:
    return (elements * bit_width(element_type) + 7) // 8


def num_blocks(p: DotProblem, t: DotTile) -> int:
    """``CalculateNumThreadblocks``: output tiles."""
    return math.ceil(p.b / t.b) * math.ceil(p.m / t.m) * math.ceil(p.n / t.n)


def effective_matrix_flops(dev: PerfDevice, tile_m: int, element_type: str) -> float:
    """``GetEffectiveFlopsPerNsForTileSize`` (flops/s): the tensor-core peak with the small-tile derate."""
    major = dev.compute_capability[0]
    derate = 1.0
    if major >= 10 and tile_m < 128:
        derate = 0.5
    elif major == 9 and tile_m < 64:
        derate = 0.63
    elif major == 8 and tile_m < 16:
        derate = 0.5
    return dev.peak_matrix_flops(element_type) * derate


def compute_time(p: DotProblem, t: DotTile, dev: PerfDevice, peak: float | None = None) -> tuple[float, int]:
    """``CalculateComputeTimeWithTileAndWaveQuantization``: ``(seconds, flops incl. tile and wave quantization)``;
    ``peak`` (flops/s) replaces the tensor-core rate (machine code without tensor-core instructions)."""
    waves = math.ceil(num_blocks(p, t) / dev.cores)
    flops = 2 * t.b * t.m * t.n * p.k * waves * dev.cores
    rate = peak if peak is not None else effective_matrix_flops(dev, t.m, p.lhs_type)
    return flops / rate, flops


def effective_hbm_bandwidth(dma_bytes: int, dev: PerfDevice | None = None) -> float:
    """``GetEffectiveHbmBandwidth`` (bytes/s): linear interpolation in :data:`HBM_TABLE_H100`, clamped at its ends;
    scaled up for a device faster than the H100 (see the module docstring)."""
    sizes = [s for s, _ in HBM_TABLE_H100]
    if dma_bytes <= sizes[0]:
        gbps = HBM_TABLE_H100[0][1]
    elif dma_bytes >= sizes[-1]:
        gbps = HBM_TABLE_H100[-1][1]
    else:
        j = bisect.bisect_left(sizes, dma_bytes)
        (s1, a), (s2, b) = HBM_TABLE_H100[j - 1], HBM_TABLE_H100[j]
        gbps = a + (dma_bytes - s1) / (s2 - s1) * (b - a)
    scale = max(1.0, dev.memory_bandwidth / H100_BANDWIDTH) if dev is not None else 1.0
    return gbps * (1 << 30) * scale


def loop_iter_bytes(p: DotProblem, t: DotTile) -> int:
    """``CalculateLoopIterBytes``: LHS and RHS bytes one main-loop step loads."""
    return _bytes(t.b * t.m * t.k, p.lhs_type) + _bytes(t.b * t.k * t.n, p.rhs_type)


def estimate_dot(p: DotProblem, t: DotTile, dev: PerfDevice, num_stages: int = 1, is_tma_allowed: bool = False,
                 peak: float | None = None) -> RunTimeData:
    """One tiled dot's :class:`~fusegen.perf.base.RunTimeData` (see the module docstring).

    Args:
        p, t: the problem and the tile (``t.k``: ``block_k``, at least 1).
        dev: the device; num_stages: software pipelining stages; is_tma_allowed: loads use TMA.
        peak: flops/s replacing the tensor-core peak (see :func:`compute_time`).

    Raises:
        DotUnsupported: ``block_k`` or K is not positive.
    """
    if t.k <= 0 or p.k <= 0:
        raise DotUnsupported(f"block_k ({t.k}) and K ({p.k}) must be positive")
    compute_s, flops = compute_time(p, t, dev, peak)
    read_b = _bytes(p.b * p.m * p.k, p.lhs_type) + _bytes(p.b * p.k * p.n, p.rhs_type)
    write_b = _bytes(p.b * p.m * p.n, p.out_type)
    bw = effective_hbm_bandwidth(read_b + write_b, dev)
    read_s, write_s = read_b / bw, write_b / bw
    blocks = num_blocks(p, t)
    l2_bytes = (_bytes(t.b * t.m * p.k, p.lhs_type) + _bytes(t.b * t.n * p.k, p.rhs_type)) * blocks
    steps = math.ceil(p.k / t.k)
    l2_s = l2_bytes / L2_BANDWIDTH + steps * (TMA_LOOP_OVERHEAD_S if is_tma_allowed else LEGACY_LOOP_OVERHEAD_S)
    it_compute, it_mem_raw = compute_s / steps, read_s / steps
    it_mem = it_mem_raw + LATENCY_TAX_S
    if num_stages <= 1 or steps <= 1:
        main = steps * (it_mem + it_compute) + write_s
    else:
        it = max(max(it_mem_raw, it_compute), max(it_mem, it_compute) / (num_stages - 1))
        prologue_steps = min(num_stages - 1, steps)
        main = (LATENCY_TAX_S + prologue_steps * it_mem_raw + (steps - prologue_steps) * it
                + prologue_steps * it_compute + write_s)
    exec_s = max(main, read_s + write_s, l2_s)
    return RunTimeData(flops, read_b, write_b, read_s, write_s, compute_s, exec_s)


def tile_from_sizes(sizes: Sequence[int], block_k: int) -> DotTile:
    """A :class:`DotTile` from an output tile ``[batch..., m, n]`` (leading sizes multiply into ``b``)."""
    s = [int(x) for x in sizes]
    if len(s) < 2:
        raise DotUnsupported(f"a dot's output tile needs at least 2 sizes, got {s}")
    return DotTile(s[-2], s[-1], int(block_k), math.prod(s[:-2]) if len(s) > 2 else 1)
