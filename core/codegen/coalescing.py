"""XLA's read-coalescing analysis of a fusion: does it read each operand with coalesced memory transactions?

Mirrors ``xla/service/gpu/model/coalescing_analysis.cc`` above dispatch, where the fusion's kind, heroes and
emitter are known:

* :func:`coalescing_for_analysis` (``CoalescingAnalysis::Create(instr, operands, fusion_analysis, ...)`` and
  ``IsReadCoalesced``): takes the :class:`~fusegen.analysis.fusion_analysis.FusionAnalysis` (kind decided) and
  hands :func:`fusegen.indexing.coalescing.compute_coalescing_for_all_operands` its heroes and the thread-id ->
  hero-operand maps of the native emitter dispatch picks (:func:`emitter_thread_id_to_input_indexing`,
  :mod:`fusegen.codegen.thread_indexing`); without them, the heuristic decides.
* :func:`analyze_coalescing`: the same from a ``fusion`` instruction and a device (analysis and dispatch here).
* :func:`is_read_coalesced_heuristic` (``IsReadCoalescedHeuristic``): the fallback when no emitter map is
  known: a transpose of the minor dimension (not of a broadcast/iota) or two fused row reductions break
  coalescing.

The indexing-map algebra (``IsIndexingCoalesced``, the composition with each operand's physical layout) is
:mod:`fusegen.indexing.coalescing`.
"""

from __future__ import annotations

from typing import Callable

import attrs

from fusegen import kinds
from fusegen.analysis.fusion_analysis import FusionAnalysis, FusionAnalysisError
from fusegen.analysis.hero import find_non_trivial_hero
from fusegen.analysis.reduction import is_real_reduction_hero, is_reduction_from_or_to_contiguous_dimensions
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.device import DEFAULT_DEVICE, get_device
from fusegen.dispatch import DispatchError, get_emitter_fusion_kind, get_fusion_emitter
from fusegen.hlo.ir import Instruction, Shape
from fusegen.hlo.shape_util import inverse_permutation, is_elementwise
from fusegen.indexing.coalescing import compute_coalescing_for_all_operands
from fusegen.indexing.map import IndexingMap
from fusegen.plugin_manager import PluginError


class CoalescingError(ValueError):
    """The fusion cannot be analysed (malformed, or no kind matcher answered)."""


# ------------------------------------------------------------------------------------------- heuristic
def _first_non_trivial_position(shape: Shape) -> int:
    m2m = list(shape.minor_to_major())
    for pos, d in enumerate(m2m):
        if shape.dimensions[d] > 1:
            return pos
    return 0


def transposes_minor_dimension(instr: Instruction) -> bool:
    """``TransposesMinorDimension``: a transpose or copy that changes which dimension is physically minor
    (size-1 dimensions ignored); a fusion when any fused instruction does."""
    if instr.opcode == "fusion":
        return any(transposes_minor_dimension(i) for i in instr.fused_computation.instructions)
    if instr.opcode == "copy":
        a, b = instr.operands[0].shape, instr.shape
        if not a.is_array or not b.is_array or not a.dimensions:
            return False
        pa, pb = _first_non_trivial_position(a), _first_non_trivial_position(b)
        return a.minor_to_major()[pa] != b.minor_to_major()[pb]
    if instr.opcode == "transpose":
        operand = instr.operands[0].shape
        pos_in_m2m = inverse_permutation(operand.minor_to_major())
        first = _first_non_trivial_position(operand)
        perm = list(instr.attrs.get("dimensions", ()))
        for out_d in instr.shape.minor_to_major():
            if instr.shape.dimensions[out_d] == 1:
                continue
            return pos_in_m2m[perm[out_d]] > first
        return False
    return False


def _is_broadcast_chain(instr: Instruction) -> bool:
    while True:
        if instr.opcode in ("broadcast", "iota"):
            return True
        if len(instr.operands) != 1:
            return False
        if instr.opcode != "bitcast" and not is_elementwise(instr):
            return False
        instr = instr.operands[0]


def _is_bad_transpose(instr: Instruction) -> bool:
    if instr.opcode == "fusion":
        return any(transposes_minor_dimension(i) and not _is_broadcast_chain(i.operands[0])
                   for i in instr.fused_computation.instructions)
    return transposes_minor_dimension(instr) and not _is_broadcast_chain(instr.operands[0])


def is_input_fusible_reduction(instr: Instruction, device) -> bool:
    """``IsInputFusibleReduction``: a fusion with a real reduction hero root, or a reduce from/to
    contiguous dimensions."""
    if instr.opcode == "fusion":
        root = instr.fused_computation.root
        roots = list(root.operands) if root.opcode == "tuple" else [root]
        return any(is_real_reduction_hero(r, find_non_trivial_hero(r), device) for r in roots)
    return instr.opcode == "reduce" and is_reduction_from_or_to_contiguous_dimensions(instr, device)


def is_read_coalesced_heuristic(fusion_kind: str, device, producer: Instruction,
                                consumer: Instruction | None = None) -> bool:
    """``IsReadCoalescedHeuristic``: ``False`` when a non-transpose fusion transposes the minor dimension
    (unless of a broadcast or iota), or a reduction fusion fuses two input-fusible reductions."""
    if fusion_kind != kinds.TRANSPOSE:
        if _is_bad_transpose(producer) or (consumer is not None and _is_bad_transpose(consumer)):
            return False
    if (fusion_kind == kinds.REDUCTION and consumer is not None and is_input_fusible_reduction(producer, device)
            and is_input_fusible_reduction(consumer, device)):
        return False
    return True



# ------------------------------------------------------------------------------------------- a fusion
def emitter_thread_id_to_input_indexing(analysis: FusionAnalysis) -> Callable[[int, int], IndexingMap | None] | None:
    """The ``ComputeThreadIdToInputIndexing(root_index, hero_operand_index)`` of the native emitter dispatch picks
    for ``analysis`` (its kind decided), as :func:`fusegen.indexing.coalescing.compute_coalescing_for_all_operands`
    asks it: ``None`` from it where the emitter has no map for that operand (XLA's ``std::nullopt``, also when
    it raises :class:`~fusegen.codegen.emitter.EmitterUnsupported` or ``NotImplementedError``).

    ``None`` itself when no native emitter takes the fusion, its plugin's factory raised (the heuristic then
    decides), or the emitter has no thread-id maps."""
    try:
        emitter, _ = get_fusion_emitter(analysis, analysis.kind)
    except (EmitterUnsupported, PluginError):
        return None
    fn = getattr(emitter, "thread_id_to_input_indexing", None)
    if fn is None:
        return None

    def thread_id_to_input_indexing(root_index: int, hero_operand_index: int) -> IndexingMap | None:
        try:
            return fn(root_index, hero_operand_index)
        except (EmitterUnsupported, NotImplementedError):
            return None

    return thread_id_to_input_indexing


@attrs.frozen
class CoalescingResult:
    """Per-operand coalescing of one fusion, and how it was decided.

    Attributes:
        coalesced: one bool per fusion operand.
        method: ``"maps"`` (the emitter's thread-id maps) or ``"heuristic"`` (``IsReadCoalescedHeuristic``).
        kind: the fusion's emitter kind (``kLoop``, ``kReduction``, ...).
    """

    coalesced: tuple[bool, ...]
    method: str
    kind: str


def coalescing_for_analysis(analysis: FusionAnalysis, fusion: Instruction, use_heuristic: bool = False
                            ) -> CoalescingResult:
    """``CoalescingAnalysis::Create(fusion, fusion->operands(), fusion_analysis)`` and ``IsReadCoalesced(operand)``
    for every operand, given the fusion's analysis.

    Args:
        analysis: ``fusion``'s :class:`~fusegen.analysis.fusion_analysis.FusionAnalysis`, its kind decided
            (:func:`fusegen.dispatch.get_emitter_fusion_kind`); its device is the heuristic's.
        fusion: the ``fusion`` instruction.
        use_heuristic: skip the map-based analysis (XLA's ``use_heuristic``).
    """
    operands = list(fusion.operands)
    if not use_heuristic:
        interface = emitter_thread_id_to_input_indexing(analysis)
        flags = (compute_coalescing_for_all_operands(fusion, operands, analysis.heroes, interface)
                 if interface is not None else None)
        if flags is not None:
            return CoalescingResult(tuple(flags), "maps", analysis.kind)
    ok = is_read_coalesced_heuristic(analysis.kind, analysis.device, fusion)
    return CoalescingResult(tuple([ok] * len(operands)), "heuristic", analysis.kind)


def analyze_coalescing(fusion: Instruction, device=None, use_heuristic: bool = False) -> CoalescingResult:
    """``CoalescingAnalysis::Create(fusion, fusion->operands(), HloFusionAnalysis(fusion, device))`` and
    ``IsReadCoalesced(operand)`` for every operand: :func:`coalescing_for_analysis` of the fusion's analysis,
    its kind decided here.

    Args:
        fusion: a ``fusion`` instruction of a parsed module.
        device: a :class:`~fusegen.device.DeviceDescription` (default H200).
        use_heuristic: skip the map-based analysis (XLA's ``use_heuristic``).

    Raises:
        CoalescingError: the fusion cannot be analysed or dispatched.
    """
    device = device or DEFAULT_DEVICE
    try:
        analysis = FusionAnalysis.create(fusion, device)
        get_emitter_fusion_kind(analysis)
    except (FusionAnalysisError, DispatchError) as e:
        raise CoalescingError(str(e)) from e
    return coalescing_for_analysis(analysis, fusion, use_heuristic)


def coalescing_for_fusion(fusion: Instruction, device_name: str | None = None, use_heuristic: bool = False) -> list[bool]:
    """:func:`analyze_coalescing` on the named device preset (default H200); the per-operand bools.

    Raises:
        CoalescingError: unknown device, or the fusion cannot be analysed.
    """
    try:
        device = get_device(device_name or "h200")
    except (KeyError, ValueError) as e:
        raise CoalescingError(f"unknown device {device_name!r}") from e
    return list(analyze_coalescing(fusion, device, use_heuristic).coalesced)
