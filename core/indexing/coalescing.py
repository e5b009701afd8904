"""XLA's read-coalescing analysis: does a fusion read each operand with coalesced memory transactions?

Mirrors ``xla/service/gpu/model/coalescing_analysis.cc``:

* :func:`is_indexing_coalesced` (``IsIndexingCoalesced``): sample the first warp (``thread_x in [0, 31]``,
  every other thread/block id 0) of a map from thread ids to an operand's *linear physical* index, fix the
  outer loop variables at their first value, split the result into ``f(thread_x) + g(s)``, find the
  contiguous intervals the warp touches and compare the 128-byte transactions they need with the ideal
  count (coalesced when ideal > 0.9 x needed).
* :func:`compute_coalescing_for_all_operands` (``ComputeCoalescingForAllOperands``): for every hero, the
  emitter's thread-id -> hero-operand maps (:mod:`fusegen.codegen.thread_indexing`), composed with the
  grouped output-to-input maps from each hero operand to the fusion operands and with each operand's
  logical -> linear physical map.
* :func:`is_read_coalesced_heuristic` (``IsReadCoalescedHeuristic``): the fallback when no emitter map is
  known: a transpose of the minor dimension (not of a broadcast/iota) or two fused row reductions break
  coalescing.
"""

from __future__ import annotations

from typing import Sequence

import attrs

from fusegen.analysis.hero import find_non_trivial_hero
from fusegen.analysis.reduction import is_real_reduction_hero, is_reduction_from_or_to_contiguous_dimensions
from fusegen.hlo.shape_util import inverse_permutation, is_elementwise
from fusegen.hlo.dtypes import bit_width
from fusegen.hlo.ir import Instruction, Shape
from fusegen.indexing.analysis import FusionAdaptor, compute_grouped_output_to_input_indexing
from fusegen.indexing.expr import ADD, DIM, MUL, SYM, AffineExpr, const, dim, rt, sym
from fusegen.indexing.interval import Interval
from fusegen.indexing.map import IndexingMap
from fusegen import kinds

WARP = 32
BYTES_PER_TRANSACTION = 128
IS_COALESCED_THRESHOLD = 0.9


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


# ------------------------------------------------------------------------------------------- one map
def _assign_rt_vars(m: IndexingMap) -> IndexingMap:
    """``AssignValuesToRTVars``: each runtime variable becomes the midpoint of its feasible interval."""
    if not m.rts:
        return m
    subst = {rt(i): const((b.lower + b.upper) // 2) for i, b in enumerate(m.rts)}
    out = IndexingMap([e.replace(subst) for e in m.exprs], m.dims, m.syms, (),
                      [(e.replace(subst), b) for e, b in m.constraints.items()])
    return out.simplify().remove_unused_symbols()


def _assign_outer_loop_ivs(m: IndexingMap) -> IndexingMap:
    """``AssignValuesToOuterLoopIVs``: every range variable but the last takes its first value; the last
    becomes ``s0``."""
    if m.num_symbols <= 1:
        return m
    subst = {sym(i): const(m.syms[i].lower) for i in range(m.num_symbols - 1)}
    subst[sym(m.num_symbols - 1)] = sym(0)
    out = IndexingMap([e.replace(subst) for e in m.exprs], m.dims, [m.syms[-1]], (),
                      [(e.replace(subst), b) for e, b in m.constraints.items()])
    return out.simplify().remove_unused_symbols()


def _summands(e: AffineExpr) -> list[AffineExpr]:
    if e.kind == ADD:
        return _summands(e.lhs) + _summands(e.rhs)
    return [e]


def _partition(e: AffineExpr) -> tuple[AffineExpr, AffineExpr] | None:
    """``Partition``: ``e = f(d0) + g(s0)`` (constant summands dropped), or ``None`` when a summand uses both."""
    f: AffineExpr = const(0)
    g: AffineExpr = const(0)
    for term in reversed(_summands(e)):
        uses_d = term.uses(DIM, 0)
        uses_s = term.uses(SYM, 0)
        if uses_d and uses_s:
            return None
        if uses_d:
            f = term + f
        elif uses_s:
            g = term + g
    return f, g


def _intervals_of(values: Sequence[int]) -> list[Interval]:
    out: list[Interval] = []
    for v in sorted(set(values)):
        if out and v == out[-1].upper + 1:
            out[-1] = Interval(out[-1].lower, v)
        else:
            out.append(Interval(v, v))
    return out


def _extend(intervals: list[Interval], length: int) -> list[Interval]:
    """``ExtendIntervals``: ``[lo, hi + length]`` each, overlapping ones merged."""
    out: list[Interval] = []
    i = 0
    while i < len(intervals):
        lo, hi = intervals[i].lower, intervals[i].upper + length
        i += 1
        while i < len(intervals) and hi >= intervals[i].lower - 1:
            hi = max(hi, intervals[i].upper + length)
            i += 1
        out.append(Interval(lo, hi))
    return out


def _contiguous_intervals(f: AffineExpr, g: AffineExpr, m: IndexingMap) -> list[Interval]:
    """``FindContiguousIntervals`` for ``f(thread_x) + g(s0)``."""
    if f == dim(0):
        return [Interval(0, WARP - 1)]
    s0 = sym(0)
    if f.kind == MUL and f.rhs.is_const:
        mult = f.rhs.value
        if mult == -1:
            return [Interval(0, WARP - 1)]
        if g == s0:
            r = m.syms[0]
            n = r.size
            if n >= abs(mult):
                return [Interval(0, mult * (WARP - 1) + n - 1)]
            return [Interval(r.lower + i * mult, r.upper + i * mult) for i in range(WARP)]
        return [Interval(i * mult, i * mult) for i in range(WARP)]
    d = m.dims[0]
    found = _intervals_of([f.evaluate([x]) for x in range(d.lower, d.upper + 1)])
    if g != s0:
        return found
    return _extend(found, m.syms[0].size - 1)


def _estimate(intervals: list[Interval], element_bytes: int) -> bool:
    """``EstimateCoalescingViaMemoryTransactionsCount``."""
    transactions = total = 0
    for r in intervals:
        n = r.upper - r.lower + 1
        transactions += -(-(n * element_bytes) // BYTES_PER_TRANSACTION)
        total += n
    if transactions == 0:
        return True
    lower_bound = -(-(total * element_bytes) // BYTES_PER_TRANSACTION)
    return lower_bound > transactions * IS_COALESCED_THRESHOLD


def element_bytes(element_type: str) -> int:
    """``ByteSizeOfPrimitiveType`` (sub-byte types count as one byte, ``pred`` as one)."""
    try:
        return max(1, bit_width(element_type) // 8)
    except (ValueError, KeyError):
        return 4


def is_indexing_coalesced(thread_to_linear_input: IndexingMap, element_type: str) -> bool:
    """``IsIndexingCoalesced``: whether the first warp's reads through this map (6 thread/block dims ->
    the operand's linear physical index) are coalesced. Unknown maps are not; scalars are."""
    m = thread_to_linear_input
    if m.is_undefined:
        return False
    if m.num_results == 0:
        return True
    m = _assign_rt_vars(m)
    first_warp = IndexingMap([dim(0)] + [const(0)] * (m.num_dims - 1), [Interval(0, WARP - 1)])
    sample = first_warp.compose(m).simplify().rescale_symbols().remove_unused_symbols()
    if sample.is_known_empty:
        return True
    sample = _assign_outer_loop_ivs(sample)
    if sample.is_known_empty:
        return True
    result = sample.exprs[0]
    parts = _partition(result)
    if parts is None:
        return False
    if len(sample.constraints) > 1:
        return False
    if len(sample.constraints) == 1 and next(iter(sample.constraints)) != result:
        return False
    return _estimate(_contiguous_intervals(parts[0], parts[1], sample), element_bytes(element_type))


# ------------------------------------------------------------------------------------------- a fusion
def logical_to_linear_physical_map(shape: Shape) -> IndexingMap:
    """``MapLogicalToLinearizedPhysicalShape`` of one operand: logical index -> offset in its buffer."""
    if not shape.dimensions:
        return IndexingMap([], [])
    stride, strides = 1, [0] * shape.rank
    for d in shape.minor_to_major():
        strides[d] = stride
        stride *= shape.dimensions[d]
    linear: AffineExpr = const(0)
    for d in range(shape.rank):
        linear = linear + dim(d) * strides[d]
    return IndexingMap.from_tensor_sizes([linear], shape.dimensions)


def _hero_operand_maps(analysis, root_index: int) -> list[IndexingMap | None] | None:
    """The emitter's ``ComputeThreadIdToInputIndexing(root_index, k)`` for every operand ``k`` of the hero
    (``None`` entries for scalar operands, which are not analysed); ``None`` when no native emitter takes the
    fusion or it has no map for a non-scalar operand (XLA's ``std::nullopt``)."""
    from fusegen import dispatch
    from fusegen.codegen.emitter import EmitterUnsupported
    from fusegen.plugin_manager import PluginError

    try:
        emitter, _ = dispatch.get_fusion_emitter(analysis, analysis.kind)
    except EmitterUnsupported:
        return None
    except PluginError as e:
        raise CoalescingError(str(e)) from e
    fn = getattr(emitter, "thread_id_to_input_indexing", None)
    if fn is None:
        return None
    out: list[IndexingMap | None] = []
    for k, operand in enumerate(analysis.heroes[root_index].operands):
        if not operand.shape.dimensions:
            out.append(None)
            continue
        try:
            m = fn(root_index, k)
        except (EmitterUnsupported, NotImplementedError):
            return None
        if m is None:
            return None
        out.append(m)
    return out


def compute_coalescing_for_all_operands(analysis, fusion: Instruction,
                                        operands: Sequence[Instruction]) -> list[bool] | None:
    """``ComputeCoalescingForAllOperands``: per operand of ``fusion``, whether all its reads are coalesced;
    ``None`` when the emitter gives no thread-id maps (the caller then uses the heuristic).

    The thread-id -> hero-operand maps are the emitter's own (``thread_id_to_input_indexing`` of the native
    emitter dispatch picks, :mod:`fusegen.codegen.thread_indexing`)."""
    adaptor = FusionAdaptor.for_instruction(fusion)
    linear = {id(o): logical_to_linear_physical_map(o.shape) for o in operands}
    per_operand: dict[int, list[IndexingMap]] = {}
    op_cache: dict = {}
    try:
        for root_index, hero in enumerate(analysis.heroes):
            hero_maps = _hero_operand_maps(analysis, root_index)
            if hero_maps is None:
                return None
            for k, thread_map in enumerate(hero_maps):
                if thread_map is None:
                    continue
                target = adaptor.operand(hero, k)
                grouped = compute_grouped_output_to_input_indexing(adaptor, target, op_cache)
                for o in operands:
                    for it in grouped.get_maps(o):
                        if it.map.is_undefined or thread_map.is_undefined:
                            per_operand[id(o)] = [IndexingMap.unknown()]
                            break
                        m = thread_map.compose(it.map.compose(linear[id(o)])).simplify()
                        per_operand.setdefault(id(o), []).append(m)
    except ValueError:  # maps the emitter's cannot be composed with (mismatched ranks): no emitter answer
        return None
    out = []
    for o in operands:
        if not o.shape.dimensions or id(o) not in per_operand:
            out.append(True)
            continue
        out.append(all(is_indexing_coalesced(m, o.shape.element_type) for m in per_operand[id(o)]))
    return out


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


def analyze_coalescing(fusion: Instruction, device=None, use_heuristic: bool = False) -> CoalescingResult:
    """``CoalescingAnalysis::Create(fusion, fusion->operands(), HloFusionAnalysis(fusion, device))`` and
    ``IsReadCoalesced(operand)`` for every operand.

    Args:
        fusion: a ``fusion`` instruction of a parsed module.
        device: a :class:`~fusegen.device.DeviceDescription` (default H200).
        use_heuristic: skip the map-based analysis (XLA's ``use_heuristic``).

    Raises:
        CoalescingError: the fusion cannot be analysed or dispatched.
    """
    from fusegen.analysis.fusion_analysis import FusionAnalysis, FusionAnalysisError
    from fusegen.device import DEFAULT_DEVICE
    from fusegen.dispatch import DispatchError, get_emitter_fusion_kind

    device = device or DEFAULT_DEVICE
    try:
        analysis = FusionAnalysis.create(fusion, device)
        get_emitter_fusion_kind(analysis)
    except (FusionAnalysisError, DispatchError) as e:
        raise CoalescingError(str(e)) from e
    operands = list(fusion.operands)
    if not use_heuristic:
        flags = compute_coalescing_for_all_operands(analysis, fusion, operands)
        if flags is not None:
            return CoalescingResult(tuple(flags), "maps", analysis.kind)
    ok = is_read_coalesced_heuristic(analysis.kind, device, fusion)
    return CoalescingResult(tuple([ok] * len(operands)), "heuristic", analysis.kind)


def coalescing_for_fusion(fusion: Instruction, device_name: str | None = None, use_heuristic: bool = False) -> list[bool]:
    """:func:`analyze_coalescing` on the named device preset (default H200); the per-operand bools.

    Raises:
        CoalescingError: unknown device, or the fusion cannot be analysed.
    """
    from fusegen.device import get_device

    try:
        device = get_device(device_name or "h200")
    except (KeyError, ValueError) as e:
        raise CoalescingError(f"unknown device {device_name!r}") from e
    return list(analyze_coalescing(fusion, device, use_heuristic).coalesced)
