"""A Triton fusion's time from its output tiles (XLA's tiled indexing performance model).

Mirrors ``EstimateRunTimeForTiledHloComputationImpl`` (``xla/service/gpu/model/gpu_indexing_performance_model.cc``)
over a tiling fusegen derives from indexing maps instead of XLA's symbolic tile analysis:

* **Tiles.** Each root gets its tile from the backend config (``block_level_fusion_config.output_tiles``, or
  ``block_m x block_n`` of a GEMM); there are ``prod(ceil(dim / tile))`` blocks. Going from an instruction to
  its operands, each op's output-to-input map (:func:`fusegen.indexing.analysis.compute_output_to_input_indexing`)
  is evaluated over the tile with interval arithmetic: the operand's tile is the range each index takes, with
  reduced dimensions whole, a dot's contracting dimension one ``block_k`` step (its blocks multiplied by the
  ``ceil(K / block_k)`` steps, XLA's region scaling) and a concatenate operand's blocks scaled to its share.
* **Bytes.** A fusion operand's tile reads ``min(tile, dim)`` elements per dimension (masked padding is not
  read); per operand, the re-reads of all its tiles go through :func:`fusegen.perf.base.read_time` at the
  worst utilization among them.
* **Coalescing.** ``BandwidthUtilizationRateHeuristicForTiledMemoryAccess``: the contiguous run of a tile
  (its minor dimensions up to the first one the tile does not cover) over whole 64-byte transactions; the
  roots' writes use the same rate.
* **Flops.** Each instruction's flops per element x its tile padded to powers of two x its blocks (masked
  elements are computed); a reduce's reduced size is padded too.
* **Registers.** A root or operand tile (or an iota) of more than 40% of a block's registers spills: the
  estimate is infinite (``DoesTileFitInRegisters``). A fusion whose dots go through the hardware GEMM model
  (``gemm="hardware"``) fits as its kernel does instead (:func:`fusegen.perf.gemm_model.occupancy`: at most 255
  registers a thread, shared memory within the SM's limit; infinite otherwise, whatever ``register_check`` says).
* **Dots** go through :mod:`fusegen.perf.dot_model` (``gemm="xla"``, XLA's dot fusion cost model: what XLA's
  tests check) or :mod:`fusegen.perf.gemm_model` (``gemm="hardware"``: L2 reuse, pipelining, waves; what
  ``estimate_fusion`` uses). With ``"hardware"`` the operands a dot reads (directly or through elementwise
  prologue ops) are priced by the GEMM model, not re-read per tile here; the fusion's time is at least the dot's.
* **Warps.** The config's ``num_warps``, else XLA's ``GetNumWarps`` of the largest padded tile.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import attrs

from fusegen.pow2 import next_pow2
from fusegen.hlo.dtypes import bit_width
from fusegen.indexing.interval import Interval
from fusegen.indexing.linear import expr_range
from fusegen.perf import base, dot_model
from fusegen.perf.device_rates import PerfDevice
from fusegen.perf.flops import computation_flops, flops_per_element
from fusegen.perf.fusion_model import element_bytes, shape_bytes

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Shape

#: ``kFractionOfRegistersAvailableToStoreTile``.
REGISTER_FRACTION_FOR_TILES = 0.4


class TilingError(ValueError):
    """The fusion has no tiling the model can read (the message says what is missing)."""


@attrs.frozen
class TiledConfig:
    """What the tiled model needs from a Triton config.

    Attributes:
        output_tiles: one tile (sizes per dimension) per root, in root order.
        num_warps: warps per block (``None``: XLA's estimate from the largest tile).
        num_stages: software pipelining stages of a dot's main loop; block_k: a dot's K step (``None``: the
            dot's ``backend_config.sizes[0]``, else all of K); split_k: K split across blocks;
        is_tma_allowed: a dot's loads use TMA.
    """

    output_tiles: tuple[tuple[int, ...], ...]
    num_warps: int | None = None
    num_stages: int = 1
    block_k: int | None = None
    split_k: int = 1
    is_tma_allowed: bool = False


def num_warps_for_tile(largest_padded_tile: int) -> int:
    """``GetNumWarps``: 1 up to 256 elements, 2 up to 1024, 4 up to 4096, else 8."""
    if largest_padded_tile <= 256:
        return 1
    if largest_padded_tile <= 1024:
        return 2
    if largest_padded_tile <= 4096:
        return 4
    return 8


def _first_array(shape: "Shape") -> "Shape":
    while shape.is_tuple and shape.tuple_shapes:
        shape = shape.tuple_shapes[0]
    return shape


def tiled_utilization(shape: "Shape", sizes: Sequence[int], dev: PerfDevice) -> float:
    """``BandwidthUtilizationRateHeuristicForTiledMemoryAccess`` of a tile of ``shape`` (a fraction in (0, 1])."""
    if not shape.is_array or not shape.dimensions:
        return 1.0
    contiguous = 1
    for d in shape.minor_to_major():
        t, n = int(sizes[d]), shape.dimensions[d]
        contiguous *= min(t, n)
        if t < n:
            break
    nbytes = contiguous * element_bytes(shape.element_type)
    tx = dev.transaction_bytes
    return nbytes / (tx * math.ceil(nbytes / tx)) if nbytes else 1.0


@attrs.frozen
class _State:
    """One tile of one instruction: its sizes per dimension and how many blocks compute it."""

    sizes: tuple[int, ...]
    blocks: int


def _operand_tiles(instr: "Instruction", st: _State, block_k: int | None) -> list[list[tuple[_State, bool]]]:
    """For each operand of ``instr``: the tiles ``st`` reads, and whether a read goes through a dot."""
    from fusegen.indexing.analysis import compute_output_to_input_indexing

    out: list[list[tuple[_State, bool]]] = []
    indexing = compute_output_to_input_indexing(instr, 0)
    out_dims = _first_array(instr.shape).dimensions
    for k, items in enumerate(indexing.indexing_maps):
        shape = _first_array(instr.operands[k].shape)
        tiles: list[tuple[_State, bool]] = []
        for it in items:
            m = it.map
            if m.is_undefined:
                tiles.append((_State(tuple(shape.dimensions), st.blocks), False))
                continue
            if m.is_known_empty:
                continue
            blocks = st.blocks
            dims: list[Interval] = []
            for i, dom in enumerate(m.dims):
                size = st.sizes[i] if i < len(st.sizes) else 1
                full = out_dims[i] if i < len(out_dims) else dom.size
                if dom.size < full and full > 0:  # the operand covers part of the output (concatenate)
                    blocks = blocks * dom.size // full
                dims.append(Interval(dom.lower, min(dom.lower + max(size, 1) - 1, dom.upper)))
            syms = list(m.syms)
            if instr.opcode == "dot":
                steps = 1
                for j, s in enumerate(syms):
                    bk = min(block_k or s.size, s.size)
                    steps *= math.ceil(s.size / max(bk, 1))
                    syms[j] = Interval(s.lower, s.lower + bk - 1)
                blocks *= steps
            rts = [Interval(r.lower, r.lower) for r in m.rts]

            def bounds(kind: str, index: int, dims=dims, syms=syms, rts=rts) -> Interval:
                return {"d": dims, "s": syms, "r": rts}[kind][index]

            sizes = []
            for j, e in enumerate(m.exprs):
                r = expr_range(e, bounds)
                n = shape.dimensions[j] if j < len(shape.dimensions) else 1
                sizes.append(max(1, min(r.size, n)))
            tiles.append((_State(tuple(sizes), max(blocks, 1)), instr.opcode == "dot"))
        out.append(tiles)
    return out


def _dot_block_k(dot: "Instruction", config: TiledConfig) -> int | None:
    if config.block_k:
        return int(config.block_k)
    bc = dot.attrs.get("backend_config")
    sizes = bc.get("sizes") if isinstance(bc, dict) else None
    try:
        return int(sizes[0]) if sizes else None
    except (TypeError, ValueError):
        return None


def _padded(sizes: Sequence[int]) -> int:
    return math.prod(next_pow2(s) for s in sizes) if sizes else 1


def _flops_per_element(instr: "Instruction", cc: tuple[int, int]) -> int:
    if instr.opcode == "reduce":  # the reduced size padded to a power of two, as the tiled kernel computes it
        reduced = [d for d in instr.attrs.get("dimensions", ())]
        factor = math.prod(next_pow2(instr.operands[0].shape.dimensions[d]) for d in reduced)
        return (factor - 1) * computation_flops(instr.called_computations[0], cc)
    return flops_per_element(instr, cc)


def estimate_tiled_fusion(fusion: "Instruction", device: Any, config: TiledConfig,
                          machine_peak: float | None = None, register_check: bool = True,
                          gemm: str = "xla") -> base.RunTimeData:
    """The run time of a Triton fusion tiled by ``config`` (see the module docstring).

    Args:
        fusion: a ``fusion`` instruction (block-level or GEMM).
        device: a device description; config: :class:`TiledConfig`.
        machine_peak: flops/s replacing the tensor-core peak of its dots (:mod:`fusegen.perf.machine_code`).
        register_check: XLA's ``DoesTileFitInRegisters`` refusal (``False``: estimate the tiling anyway, as if
            it did not spill).
        gemm: ``"xla"`` (XLA's dot fusion cost model, the default: XLA's tests) or ``"hardware"``
            (:mod:`fusegen.perf.gemm_model`) for the fusion's dots.

    Returns:
        :class:`~fusegen.perf.base.RunTimeData`; infinite when a tile would spill registers (``register_check``).

    Raises:
        TilingError: ``config`` does not give one tile per root, or a tile's rank differs from its root's.
        ValueError: ``gemm`` is neither ``"xla"`` nor ``"hardware"``.
    """
    from fusegen.indexing.analysis import FusionAdaptor

    if gemm not in ("xla", "hardware"):
        raise ValueError(f"gemm must be 'xla' or 'hardware', got {gemm!r}")

    dev = PerfDevice.of(device)
    cc = dev.compute_capability
    adaptor = FusionAdaptor.for_instruction(fusion)
    roots = adaptor.roots
    if len(config.output_tiles) != len(roots):
        raise TilingError(f"fusion %{fusion.name}: {len(config.output_tiles)} output tile(s) for {len(roots)} root(s)")
    # XLA's DoesTileFitInRegisters; a GEMM priced by the hardware model instead fits as the kernel does (its
    # registers <= 255 a thread and shared memory, gemm_model.occupancy): a 128x256 tile's f32 accumulator is 128
    # registers a thread over 8 warps, which Triton compiles on sm_90 without spilling
    hardware_gemm = gemm == "hardware" and any(i.opcode == "dot" for i in adaptor.instructions)
    limit = (REGISTER_FRACTION_FOR_TILES * dev.registers_per_block if register_check and not hardware_gemm
             else float("inf"))
    states: dict[int, dict[_State, bool]] = {}
    write_s, written = 0.0, 0
    first = _first_array(roots[0].shape)
    tile0 = config.output_tiles[0]
    if len(tile0) != first.rank:
        raise TilingError(f"fusion %{fusion.name}: tile {list(tile0)} for root shape {list(first.dimensions)}")
    num_blocks = math.prod(math.ceil(n / max(t, 1)) for n, t in zip(first.dimensions, tile0)) if first.rank else 1
    largest = 1
    for root, tile in zip(roots, config.output_tiles):
        shape = _first_array(root.shape)
        sizes = tuple(min(int(t), n) for t, n in zip(tile, shape.dimensions))
        if _padded(tile) > limit:
            return base.RunTimeData.infinite()
        largest = max(largest, _padded(tile))
        states.setdefault(id(root), {})[_State(sizes, num_blocks)] = False
        nbytes = shape_bytes(root.shape)
        written += nbytes
        write_s += base.write_time(dev, nbytes, tiled_utilization(shape, sizes, dev))
    reads: dict[int, list] = {}
    flops = 0
    dot_compute, dot_exec, dot_flops = 0.0, 0.0, 0
    dot_read_bytes, dot_read_s = 0, 0.0  # ("hardware") what the GEMM model reads from DRAM
    warps = config.num_warps
    for instr in reversed(adaptor.instructions):
        mine = states.get(id(instr))
        if not mine:
            continue
        for st, via_dot in mine.items():
            largest = max(largest, _padded(st.sizes))
            if instr.opcode == "iota" and _padded(st.sizes) > limit:
                return base.RunTimeData.infinite()
            n = st.blocks * _padded(st.sizes)
            if instr.opcode == "dot":
                try:
                    d = _dot_estimate(instr, st, config, device, warps, machine_peak, gemm)
                    dot_compute += d.compute_time
                    dot_exec = max(dot_exec, d.exec_time)
                    if gemm == "hardware":
                        dot_read_bytes, dot_read_s = dot_read_bytes + d.bytes_read, dot_read_s + d.read_time
                    dot_flops += flops_per_element(instr, cc) * n
                except dot_model.DotUnsupported:
                    flops += flops_per_element(instr, cc) * n
            else:
                flops += _flops_per_element(instr, cc) * n
            for k, tiles in enumerate(_operand_tiles(instr, st, _dot_block_k(instr, config)
                                                      if instr.opcode == "dot" else None)):
                operand = adaptor.operand(instr, k)
                for ost, through_dot in tiles:
                    feeds_dot = via_dot or through_dot  # read for a dot: the GEMM model prices it ("hardware")
                    if adaptor.contains(instr.operands[k]) and instr.operands[k].opcode != "parameter":
                        seen = states.setdefault(id(operand), {})
                        seen[ost] = seen.get(ost, True) and feeds_dot
                    else:
                        if _padded(ost.sizes) > limit:
                            return base.RunTimeData.infinite()
                        if gemm == "hardware" and feeds_dot:
                            continue
                        reads.setdefault(id(operand), [operand, []])[1].append(ost)
    read_s, bytes_read = 0.0, 0
    for operand, tiles in reads.values():
        shape = _first_array(operand.shape)
        total, util = 0, 1.0
        for ost in set(tiles):
            total += element_bytes(shape.element_type) * ost.blocks * math.prod(ost.sizes)
            util = min(util, tiled_utilization(shape, ost.sizes, dev))
        bytes_read += total
        read_s += base.read_time(dev, num_blocks, min(shape_bytes(operand.shape), total), total, util)
    if warps is None:
        warps = num_warps_for_tile(largest)
    compute_s = base.compute_time(dev, flops, num_blocks, warps * dev.warp_size) + dot_compute
    exec_s = max(base.combine(compute_s, read_s + write_s), dot_exec)
    bytes_read += dot_read_bytes  # ("hardware") the dots' operand traffic, as the GEMM model counted it
    read_s += dot_read_s
    return base.RunTimeData(flops + dot_flops, bytes_read, written, read_s, write_s, compute_s, exec_s)


def _dot_estimate(dot: "Instruction", st: _State, config: TiledConfig, device: Any, warps: int | None,
                  machine_peak: float | None, gemm: str = "xla") -> base.RunTimeData:
    dev = PerfDevice.of(device)
    p = dot_model.DotProblem.of(dot)
    k_step = _dot_block_k(dot, config) or p.k
    split = max(int(config.split_k or 1), 1)
    if gemm == "hardware":  # XLA's Triton GEMM: row-major raster, no cluster, the split-K sum a second kernel
        from fusegen.perf import gemm_model

        tile = dot_model.tile_from_sizes(st.sizes if len(st.sizes) >= 2 else (1,) + st.sizes, min(k_step, p.k))
        kernel = gemm_model.GemmKernel(tile.m, tile.n, tile.k, max(config.num_stages, 1), warps or 4, split,
                                       tma=config.is_tma_allowed)
        return gemm_model.estimate_gemm(p, kernel, device, machine_peak).run_time_data()
    if split > 1:  # each of split_k blocks contracts K / split_k and writes an f32 partial output
        p = attrs.evolve(p, b=p.b * split, k=math.ceil(p.k / split))
    tile = dot_model.tile_from_sizes(st.sizes if len(st.sizes) >= 2 else (1,) + st.sizes, min(k_step, p.k))
    return dot_model.estimate_dot(p, tile, dev, config.num_stages, config.is_tma_allowed, machine_peak)


def config_from_backend_config(fusion: "Instruction") -> TiledConfig:
    """The :class:`TiledConfig` a Triton fusion's backend config gives (``triton_gemm_config`` or
    ``block_level_fusion_config``).

    Raises:
        TilingError: neither config is present, or a size is not a positive integer.
    """
    bc = fusion.backend_config if isinstance(fusion.backend_config, dict) else {}
    fbc = bc.get("fusion_backend_config") if isinstance(bc.get("fusion_backend_config"), dict) else {}
    try:
        gemm = fbc.get("triton_gemm_config")
        if isinstance(gemm, dict):
            return gemm_config(fusion, gemm)
        blc = fbc.get("block_level_fusion_config")
        if isinstance(blc, dict) and blc.get("output_tiles"):
            tiles = tuple(tuple(int(x) for x in t.get("sizes", ())) for t in blc["output_tiles"])
            warps = blc.get("num_warps")
            return TiledConfig(tiles, int(warps) if warps not in (None, "") else None,
                               int(blc.get("num_stages", 1) or 1), None, 1, bool(blc.get("is_tma_allowed", False)))
    except (TypeError, ValueError, AttributeError) as e:
        raise TilingError(f"fusion %{fusion.name}: unreadable Triton config ({e})") from None
    raise TilingError(f"fusion %{fusion.name}: no triton_gemm_config or block_level_fusion_config.output_tiles")


def gemm_config(fusion: "Instruction", values: dict) -> TiledConfig:
    """A :class:`TiledConfig` from ``triton_gemm_config`` values (``block_m``, ``block_n``, ``block_k``,
    ``split_k``, ``num_stages``, ``num_warps``): the root tile is ``1 x ... x block_m x block_n``."""
    rank = _first_array(fusion.shape).rank if fusion.opcode == "fusion" else 2
    bm, bn = int(values.get("block_m", 64)), int(values.get("block_n", 64))
    tile = (1,) * max(rank - 2, 0) + ((bm, bn) if rank >= 2 else (bn,))
    from fusegen.indexing.analysis import FusionAdaptor

    n_roots = len(FusionAdaptor.for_instruction(fusion).roots)
    return TiledConfig((tile,) * n_roots, int(values.get("num_warps", 4)), int(values.get("num_stages", 1)),
                       int(values.get("block_k", 32)), int(values.get("split_k", 1)),
                       bool(values.get("is_tma_allowed", False)))
