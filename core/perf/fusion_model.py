"""One kernel fusion's time from its indexing maps and launch (XLA's indexing performance model).

Mirrors ``GpuPerformanceModelWithIndexingAnalysis::EstimateRunTimeForFusion``
(``xla/service/gpu/model/gpu_indexing_performance_model.cc``) with the per-operand coalescing of
``GpuPerformanceModel::EstimateRunTimeForInstruction`` (``gpu_performance_model.cc``):

1. From every root, the grouped output-to-input indexing maps reach each instruction of the fusion and
   each fusion operand (:func:`fusegen.indexing.analysis.compute_grouped_output_to_input_indexing`); each
   distinct map covers its *iteration space*: the product of its dimension and range-variable intervals
   (an undefined map: the instruction's elements). The roots of a multi-output fusion share one iteration:
   an instruction (or operand) reached from several roots counts as often as the root reaching it most.
2. An operand's ``n_bytes_total`` is its element size x the iteration spaces of its maps, ``n_bytes_net``
   that capped at its size; its read time is :func:`fusegen.perf.base.read_time` with the coalescing
   verdict (XLA's performance model asks ``IsReadCoalescedHeuristic``: a fusion that transposes a minor
   dimension, or fuses two row reductions, reads uncoalesced; :mod:`fusegen.codegen.coalescing`).
3. An instruction inside the fusion costs :func:`fusegen.perf.flops.flops_per_element` x its iteration
   spaces; compute time is over the FP32 units the launch occupies.
4. Output bytes are written once. A fusion whose root is a dynamic-update-slice of a fused parameter
   updates that buffer in place (XLA's in-place DUS emitter): it neither reads nor writes the untouched
   part, only the update (``DusScalesWithUpdates``).

Runtime variables of a map (a dynamic offset) count one value each, not their range (fusegen's choice:
XLA multiplies symbol bounds, which overcounts dynamic slices by their offset range).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Sequence

import attrs

from fusegen.hlo.dtypes import bit_width
from fusegen.perf import base
from fusegen.perf.device_rates import PerfDevice
from fusegen.perf.flops import flops_per_element

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Shape
    from fusegen.indexing.map import IndexingMap

#: ``EstimateFusionLaunchDimensions``' fallback: one thread per output element, 128 per block.
FALLBACK_THREADS_PER_BLOCK = 128


def element_bytes(element_type: str) -> int:
    """Bytes of one element (``ByteSizeOfPrimitiveType``; sub-byte types round up; tuples/tokens 4, XLA's dummy)."""
    if element_type in ("tuple", "token"):
        return 4
    return max(1, (bit_width(element_type) + 7) // 8)


def shape_bytes(shape: "Shape") -> int:
    """Bytes of every array leaf of ``shape`` (``GetShapeSizeRecursive``)."""
    total = 0
    for leaf in shape.leaves():
        if leaf.element_type in ("token", "tuple"):
            continue
        total += (leaf.numel * bit_width(leaf.element_type) + 7) // 8
    return total


def iteration_space_size(m: "IndexingMap", instr: "Instruction") -> int:
    """``GetIterationSpaceSize``: points of ``m``'s dimension and range-variable domain (see the module doc)."""
    if m.is_undefined:
        return sum(leaf.numel for leaf in instr.shape.leaves())
    if m.is_known_empty:
        return 0
    return math.prod(i.size for i in m.dims) * math.prod(i.size for i in m.syms)


@attrs.frozen
class OperandRead:
    """How one fusion operand is read (a term of the estimate).

    Attributes:
        operand: the operand instruction's name; ``index``: its first operand number.
        bytes_total: bytes read over the whole launch (re-reads included); ``bytes_net``: distinct bytes.
        coalesced: the coalescing analysis' answer; ``utilization``: the DRAM bandwidth fraction it implies.
        seconds: its read time.
    """

    operand: str
    index: int
    bytes_total: int
    bytes_net: int
    coalesced: bool
    utilization: float
    seconds: float

    def to_json(self) -> dict:
        return {"operand": self.operand, "index": self.index, "bytes_total": self.bytes_total,
                "bytes_net": self.bytes_net, "coalesced": self.coalesced, "utilization": round(self.utilization, 6),
                "read_us": round(self.seconds * 1e6, 6)}


@attrs.frozen
class KernelTimes:
    """A fusion's :class:`~fusegen.perf.base.RunTimeData` and the terms it was built from."""

    data: base.RunTimeData
    reads: tuple[OperandRead, ...]
    num_blocks: int
    threads_per_block: int


def _through_bitcasts(instr: "Instruction") -> "Instruction":
    while instr.opcode == "bitcast" and instr.operands:
        instr = instr.operands[0]
    return instr


def in_place_update(root: "Instruction") -> "Instruction | None":
    """The update operand of a root dynamic-update-slice writing into a fused parameter's buffer, else ``None``."""
    r = _through_bitcasts(root)
    if r.opcode == "dynamic-update-slice" and _through_bitcasts(r.operands[0]).opcode == "parameter":
        return r.operands[1]
    return None


def _launch(fusion: "Instruction", launch) -> tuple[int, int]:
    if launch is not None:
        blocks = max(int(getattr(launch, "num_programs", 0) or math.prod(launch.grid3)), 1)
        threads = max(int(math.prod(launch.threads3)), 1)
        return blocks, threads
    first = fusion.shape
    while first.is_tuple and first.tuple_shapes:
        first = first.tuple_shapes[0]
    n = max(first.numel if first.is_array else 1, 1)
    return max(math.ceil(n / FALLBACK_THREADS_PER_BLOCK), 1), FALLBACK_THREADS_PER_BLOCK


def _coalescing(fusion: "Instruction", device, mode: str) -> list[bool]:
    n = len(fusion.operands)
    if mode == "none" or fusion.opcode != "fusion":
        return [True] * n
    from fusegen.codegen.coalescing import CoalescingError, analyze_coalescing

    try:
        return list(analyze_coalescing(fusion, device, use_heuristic=(mode == "heuristic")).coalesced)
    except (CoalescingError, ValueError, KeyError, NotImplementedError):  # unanalysable: XLA's default
        return [True] * n


def estimate_kernel_fusion(fusion: "Instruction", device, launch=None, *, coalesced: Sequence[bool] | None = None,
                           coalescing: str = "heuristic") -> KernelTimes:
    """The run time of one kernel fusion from its indexing maps (see the module docstring).

    Args:
        fusion: a ``fusion`` instruction of a parsed module (any emitter kind; a non-fusion instruction is
            estimated as a fusion of itself).
        device: a :class:`fusegen.device.DeviceDescription` (or :class:`~fusegen.perf.device_rates.PerfDevice`).
        launch: the emitter's :class:`fusegen.codegen.kernel.LaunchDimensions`; ``None``: XLA's fallback
            (128 threads per block, one thread per element of the first output).
        coalesced: per-operand coalescing, overriding the analysis.
        coalescing: ``"heuristic"`` (XLA's performance model: ``CoalescingAnalysis::Create`` defaults to
            ``use_heuristic=true``, :func:`fusegen.codegen.coalescing.is_read_coalesced_heuristic`), ``"maps"``
            (the emitter's thread-id maps, :func:`fusegen.codegen.coalescing.analyze_coalescing`) or ``"none"``.

    Returns:
        :class:`KernelTimes` (seconds, bytes, flops).

    Raises:
        ValueError: the device lacks bandwidth, cores or clock.
    """
    from fusegen.indexing.analysis import FusionAdaptor, compute_grouped_output_to_input_indexing

    dev = PerfDevice.of(device)
    cc = dev.compute_capability
    num_blocks, threads = _launch(fusion, launch)
    adaptor = FusionAdaptor.for_instruction(fusion)
    flags = list(coalesced) if coalesced is not None else _coalescing(fusion, device, coalescing)
    total_iters: dict[int, int] = {}
    instrs: dict[int, "Instruction"] = {}
    written = 0
    op_cache: dict = {}
    for root in adaptor.roots:
        update = in_place_update(root) if fusion.opcode == "fusion" else None
        target = root if update is None else update
        written += shape_bytes((update if update is not None else root).shape)
        grouped = compute_grouped_output_to_input_indexing(adaptor, target, op_cache)
        for instr, items in grouped.values():
            instrs[id(instr)] = instr
            keys: set = set()
            iters = 0
            for it in items:
                k = it.map._key() if not it.map.is_undefined else ("undefined", id(it))
                if k not in keys:
                    keys.add(k)
                    iters += iteration_space_size(it.map, instr)
            # roots of a multi-output fusion share one iteration: what two roots both read is read once
            total_iters[id(instr)] = max(total_iters.get(id(instr), 0), iters)
    operand_index: dict[int, list[int]] = {}
    for k, o in enumerate(fusion.operands if fusion.opcode == "fusion" else ()):
        operand_index.setdefault(id(o), []).append(k)
    if fusion.opcode != "fusion":  # an unfused instruction: its operands are what it reads
        for k, o in enumerate(fusion.operands):
            operand_index.setdefault(id(o), []).append(k)
    flops = 0
    reads: list[OperandRead] = []
    read_s = 0.0
    for key, instr in instrs.items():
        iters = total_iters.get(key, 0)
        if key in operand_index:
            ty = instr.shape.element_type if instr.shape.is_array else "tuple"
            n_total = element_bytes(ty) * iters
            n_net = min(shape_bytes(instr.shape), n_total)
            idx = operand_index[key]
            ok = all(flags[i] for i in idx if i < len(flags))
            util = base.coalescing_utilization(element_bytes(ty), ok, dev)
            t = base.read_time(dev, num_blocks, n_net, n_total, util)
            read_s += t
            reads.append(OperandRead(instr.name, idx[0], n_total, n_net, ok, util, t))
        else:
            flops += flops_per_element(instr, cc) * iters
    write_s = base.write_time(dev, written)
    compute_s = base.compute_time(dev, flops, num_blocks, threads)
    exec_s = base.combine(compute_s, read_s + write_s)
    data = base.RunTimeData(flops, sum(r.bytes_total for r in reads), written, read_s, write_s, compute_s, exec_s)
    return KernelTimes(data, tuple(sorted(reads, key=lambda r: r.index)), num_blocks, threads)
