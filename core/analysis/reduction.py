"""Reduction classification and the reduction sub-emitter choice.

Mirrors ``xla/service/gpu/reduction_utils.cc`` (``GetReductionKindAndContiguousComponents``,
``IsUnnestedReductionFasterThanElemental``, ``IsReductionFromOrToContiguousDimensions``,
``ReductionIsRaceFree``, ``IsRealReductionHero``, ``AreReductionsMultiOutputFusionCompatible``) and
``CreateReductionFusion`` / ``MultiRowReductionFusion::TryCreate``
(``xla/backends/gpu/codegen/emitters/reduction.cc``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import attrs

from fusegen.hlo.shape_util import are_dimensions_consecutive
from fusegen.hlo.ir import Instruction, Shape

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.device import DeviceDescription

# reduction_utils.h
MIN_THREADS_X_ROW_REDUCTION = 1024
BATCHED_REDUCTION_RACE_FREE_BOUND = 8
# Indices into ReductionDimensions.dimensions.
ROW_MAJOR_REDUCED, ROW_KEPT, ROW_MINOR_REDUCED = 0, 1, 2
COL_MAJOR_KEPT, COL_REDUCED, COL_MINOR_KEPT = 0, 1, 2


@attrs.frozen
class ReductionDimensions:
    """``ReductionDimensions``: row reduction ``[major_reduced, kept, minor_reduced]`` or column
    reduction ``[major_kept, reduced, minor_kept]``."""

    is_row_reduction: bool
    dimensions: tuple[int, int, int]


def _partition_by_middle(shape: Shape, middle: Sequence[int]) -> tuple[int, int, int]:
    """``PartitionShapeByMiddleDimensions``: products of the (major, middle, minor) layout segments."""
    values = [1, 1, 1]
    seg = 2  # minor
    for d in shape.minor_to_major():
        if seg != 0:
            inside = d in middle
            if seg == 2 and inside:
                seg = 1
            elif seg == 1 and not inside:
                seg = 0
        values[seg] *= shape.dimensions[d]
    return values[0], values[1], values[2]


def _reduce_input_shape(reduce: Instruction) -> Shape:
    return reduce.operands[0].shape


def get_reduction_kind_and_contiguous_components(reduce: Instruction) -> ReductionDimensions:
    """``GetReductionKindAndContiguousComponents`` of a ``reduce``: row/column and its 3-D view."""
    shape = _reduce_input_shape(reduce)
    reduced = tuple(reduce.attrs.get("dimensions", ()))
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not kept:
        return ReductionDimensions(True, (1, 1, shape.numel))
    if are_dimensions_consecutive(shape, kept):
        major, middle, minor = _partition_by_middle(shape, kept)
        if middle == 1:
            return ReductionDimensions(True, (1, 1, major * minor))
        if minor == 1:
            return ReductionDimensions(False, (1, major, middle))
        return ReductionDimensions(True, (major, middle, minor))
    major, middle, minor = _partition_by_middle(shape, reduced)
    if minor == 1:
        return ReductionDimensions(True, (1, major, middle))
    return ReductionDimensions(False, (major, middle, minor))


def is_unnested_reduction_faster_than_elemental(dims: ReductionDimensions, device: "DeviceDescription") -> bool:
    """``IsUnnestedReductionFasterThanElemental``: row: ``d2 >= warp`` or ``warp % d2 == 0``; column:
    not one of the small-column cases found by XLA's sweep."""
    warp = device.threads_per_warp
    d = dims.dimensions
    if dims.is_row_reduction:
        return d[2] >= warp or (d[2] != 0 and warp % d[2] == 0)
    major, minor = d[1], d[2]
    prefer_elemental = (
        major < warp
        or (major < 2 * warp and minor < warp)
        or (major < 4 * warp and minor < 8)
        or (major < 8 * warp and minor < 3)
    )
    return not prefer_elemental


def is_reduction_from_or_to_contiguous_dimensions(reduce: Instruction, device: "DeviceDescription") -> bool:
    """``IsReductionFromOrToContiguousDimensions``: a ``reduce`` whose kept or reduced dims are
    consecutive in the operand layout and that the reduction emitter beats the loop emitter on."""
    if reduce.opcode != "reduce" or not reduce.operands:
        return False
    shape = _reduce_input_shape(reduce)
    reduced = tuple(reduce.attrs.get("dimensions", ()))
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not (are_dimensions_consecutive(shape, kept) or are_dimensions_consecutive(shape, reduced)):
        return False
    return is_unnested_reduction_faster_than_elemental(get_reduction_kind_and_contiguous_components(reduce), device)


def get_reduction_tiling(dims: ReductionDimensions) -> tuple[int, int, int]:
    """``GetReductionTiling``: row ``(min(d0, 8), 1, 16)``, column ``(1, 128, 1)``."""
    if dims.is_row_reduction:
        return (min(dims.dimensions[0], BATCHED_REDUCTION_RACE_FREE_BOUND), 1, 16)
    return (1, 128, 1)


def reduction_dimension_race_free_bound(dims: ReductionDimensions, warp_size: int = 32) -> int:
    """``ReductionDimensionRaceFreeBound``: row ``1024*16``, column ``warp*128``."""
    tiling = get_reduction_tiling(dims)
    if dims.is_row_reduction:
        return MIN_THREADS_X_ROW_REDUCTION * tiling[2]
    return warp_size * tiling[1]


def reduction_is_race_free(dims: ReductionDimensions, warp_size: int = 32) -> bool:
    """``ReductionIsRaceFree``: row ``d2 <= 16384 and d0 <= 8``; column ``d1 <= warp*128``.

    ``warp_size`` is the device's warp (32 on every NVIDIA GPU).
    """
    bound = reduction_dimension_race_free_bound(dims, warp_size)
    if dims.is_row_reduction:
        return dims.dimensions[2] <= bound and dims.dimensions[0] <= BATCHED_REDUCTION_RACE_FREE_BOUND
    return dims.dimensions[1] <= bound


def is_real_reduction_hero(root: Instruction, hero: Instruction, device: "DeviceDescription") -> bool:
    """``IsRealReductionHero``: ``hero`` is an emitter-worthy reduce, and either it is the root itself
    or the reduction is race free (so an epilogue can follow it)."""
    if not is_reduction_from_or_to_contiguous_dimensions(hero, device):
        return False
    return root is hero or reduction_is_race_free(
        get_reduction_kind_and_contiguous_components(hero), device.threads_per_warp or 32
    )


def are_reductions_multi_output_fusion_compatible(reduce_hero: Instruction, first_reduce: Instruction) -> bool:
    """``AreReductionsMultiOutputFusionCompatible``: identical reduction kind and 3-D view."""
    return get_reduction_kind_and_contiguous_components(reduce_hero) == get_reduction_kind_and_contiguous_components(first_reduce)


def _multi_row_num_threads(dims: ReductionDimensions, vector_size: int) -> tuple[int, int]:
    reduced_threads = dims.dimensions[ROW_MINOR_REDUCED] // vector_size
    target = 256  # kThreadsPerBlockTarget
    kept = dims.dimensions[ROW_KEPT]
    if kept * reduced_threads <= target:
        kept_threads = kept
    else:
        kept_threads = target // reduced_threads
    return kept_threads, reduced_threads


def _multi_row_num_blocks(dims: ReductionDimensions, num_threads: tuple[int, int]) -> int:
    return -(-dims.dimensions[ROW_KEPT] // num_threads[0])


def multi_row_vector_size(analysis: "FusionAnalysis") -> int | None:
    """``MultiRowReductionFusion::TryCreate``: the vector size it would use, or ``None`` when it does
    not apply (reduced dim not a power of two, or wider than ``warp * vector_size``)."""
    hero = analysis.find_hero_reduction()
    if hero is None:
        return None
    dims = get_reduction_kind_and_contiguous_components(hero)
    reduced = dims.dimensions[ROW_MINOR_REDUCED]
    if reduced & (reduced - 1):
        return None
    io = analysis.input_output_info
    smallest = min(io.smallest_input_dtype_bits, io.smallest_output_dtype_bits)
    # XLA takes the max of the two *smallest* widths here.
    largest = max(io.smallest_input_dtype_bits, io.smallest_output_dtype_bits)
    if largest == io.NO_BITS:
        largest = io.smallest_output_dtype_bits
    vector_size = min(reduced, 64 // smallest) if smallest < io.NO_BITS else reduced
    if largest >= 32:
        vector_size = min(128 // largest, vector_size)
    warp = analysis.device.threads_per_warp
    if reduced > warp * vector_size:
        return None
    min_blocks = analysis.device.core_count
    while vector_size > 1 and _multi_row_num_blocks(dims, _multi_row_num_threads(dims, vector_size)) < min_blocks:
        vector_size //= 2
    if reduced > warp * vector_size:
        return None
    return vector_size


def choose_reduction_emitter(analysis: "FusionAnalysis") -> str:
    """``CreateReductionFusion``: ``"MultiRowReductionFusion"`` / ``"RowReductionFusion"`` for row
    reductions, ``"SmallColumnReductionFusion"`` when ``warp % minor_kept == 0`` else
    ``"ColumnReductionFusion"`` for column reductions.

    Raises:
        ValueError: the analysis has no reduction hero.
    """
    hero = analysis.find_hero_reduction()
    if hero is None:
        raise ValueError(f"fusion {analysis.name!r} has no real reduction hero")
    dims = get_reduction_kind_and_contiguous_components(hero)
    if dims.is_row_reduction:
        if multi_row_vector_size(analysis) is not None:
            return "MultiRowReductionFusion"
        return "RowReductionFusion"
    warp = analysis.device.threads_per_warp
    if warp % dims.dimensions[COL_MINOR_KEPT] == 0:
        return "SmallColumnReductionFusion"
    return "ColumnReductionFusion"
