"""XLA's read-coalescing analysis, its indexing-map part: are a fusion's reads of each operand coalesced?

Mirrors ``xla/service/gpu/model/coalescing_analysis.cc``:

* :func:`is_indexing_coalesced` (``IsIndexingCoalesced``): sample the first warp (``thread_x in [0, 31]``,
  every other thread/block id 0) of a map from thread ids to an operand's *linear physical* index, fix the
  outer loop variables at their first value, split the result into ``f(thread_x) + g(s)``, find the
  contiguous intervals the warp touches and compare the 128-byte transactions they need with the ideal
  count (coalesced when ideal > 0.9 x needed).
* :func:`compute_coalescing_for_all_operands` (``ComputeCoalescingForAllOperands``): for every hero, the
  emitter's thread-id -> hero-operand maps (handed in by the caller, as XLA hands it the fusion's
  ``KernelFusionInterface``), composed with the grouped output-to-input maps from each hero operand to the
  fusion operands and with each operand's logical -> linear physical map.

The fusion-level analysis (the fusion's kind and heroes, the emitter dispatch picks, and the fallback
``IsReadCoalescedHeuristic``) stands above dispatch: :mod:`fusegen.codegen.coalescing`.
"""

from __future__ import annotations

from typing import Callable, Sequence

from fusegen.hlo.dtypes import bit_width
from fusegen.hlo.ir import Instruction, Shape
from fusegen.indexing.analysis import FusionAdaptor, compute_grouped_output_to_input_indexing
from fusegen.indexing.expr import ADD, DIM, MUL, SYM, AffineExpr, const, dim, rt, sym
from fusegen.indexing.interval import Interval
from fusegen.indexing.compose import compose_indexing_maps
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify import remove_unused_vars, rescale_symbols, simplify

WARP = 32
BYTES_PER_TRANSACTION = 128
IS_COALESCED_THRESHOLD = 0.9


# ------------------------------------------------------------------------------------------- one map
def _assign_rt_vars(m: IndexingMap) -> IndexingMap:
    """``AssignValuesToRTVars``: each runtime variable becomes the midpoint of its feasible interval."""
    if not m.rts:
        return m
    subst = {rt(i): const((b.lower + b.upper) // 2) for i, b in enumerate(m.rts)}
    out = IndexingMap([e.replace(subst) for e in m.exprs], m.dims, m.syms, (),
                      [(e.replace(subst), b) for e, b in m.constraints.items()])
    return remove_unused_vars(simplify(out)[0], dims=False)[0]


def _assign_outer_loop_ivs(m: IndexingMap) -> IndexingMap:
    """``AssignValuesToOuterLoopIVs``: every range variable but the last takes its first value; the last
    becomes ``s0``."""
    if m.num_symbols <= 1:
        return m
    subst = {sym(i): const(m.syms[i].lower) for i in range(m.num_symbols - 1)}
    subst[sym(m.num_symbols - 1)] = sym(0)
    out = IndexingMap([e.replace(subst) for e in m.exprs], m.dims, [m.syms[-1]], (),
                      [(e.replace(subst), b) for e, b in m.constraints.items()])
    return remove_unused_vars(simplify(out)[0], dims=False)[0]


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
    sample = simplify(compose_indexing_maps(first_warp, m))[0]
    sample = remove_unused_vars(rescale_symbols(sample)[0], dims=False)[0]
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


def compute_coalescing_for_all_operands(
        fusion: Instruction, operands: Sequence[Instruction], heroes: Sequence[Instruction],
        thread_id_to_input_indexing: Callable[[int, int], IndexingMap | None]) -> list[bool] | None:
    """``ComputeCoalescingForAllOperands``: per operand of ``fusion``, whether all its reads are coalesced;
    ``None`` when the emitter gives no thread-id maps (the caller then uses the heuristic).

    Args:
        fusion: the ``fusion`` instruction.
        operands: the operands asked about (the fusion's).
        heroes: the fusion analysis' hero of each root, in root order.
        thread_id_to_input_indexing: the emitter's ``ComputeThreadIdToInputIndexing(root_index,
            hero_operand_index)``, asked for each non-scalar operand of each hero; ``None`` from it (XLA's
            ``std::nullopt``) leaves the whole answer ``None``, as does a map that cannot be composed with.
    """
    adaptor = FusionAdaptor.for_instruction(fusion)
    linear = {id(o): logical_to_linear_physical_map(o.shape) for o in operands}
    per_operand: dict[int, list[IndexingMap]] = {}
    op_cache: dict = {}
    try:
        for root_index, hero in enumerate(heroes):
            hero_maps: list[IndexingMap | None] = []
            for k, operand in enumerate(hero.operands):
                if not operand.shape.dimensions:  # scalar operands are not analysed
                    hero_maps.append(None)
                    continue
                m = thread_id_to_input_indexing(root_index, k)
                if m is None:
                    return None
                hero_maps.append(m)
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
                        m = simplify(compose_indexing_maps(thread_map, compose_indexing_maps(it.map, linear[id(o)])))[0]
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
