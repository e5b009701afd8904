"""Shape-only indexing maps: reshape, bitcast, transpose, layout permutations and the window maps.

Mirrors the shape helpers of XLA's ``xla/hlo/analysis/indexing_analysis.cc`` (``ComputeReshapeIndexingMap``,
``GetBitcastMap``, ``GetIndexingMapFromPhysicalLayoutToLogical`` / ``...LogicalToPhysicalLayout``) and of
``indexing_analysis_utils.cc`` (``ComputeTransposeIndexingMap``, ``ComputePadIndexingMap``,
``ComposeWindowIndexingMap``). Every function takes plain dimension sizes or :class:`fusegen.hlo.ir.Shape`
objects and returns an :class:`~fusegen.indexing.map.IndexingMap` (or its result expressions).
"""

from __future__ import annotations

from typing import Sequence

from fusegen.hlo.shape_util import deduce_transpose_dimensions_for_bitcast, inverse_permutation, reshape_is_bitcast
from fusegen.hlo.dtypes import bit_width
from fusegen.hlo.ir import Shape
from fusegen.indexing.expr import AffineExpr, const, dim, sym
from fusegen.indexing.interval import Interval
from fusegen.indexing.compose import compose_indexing_maps
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify import remove_unused_vars, simplify


def transpose_exprs(permutation: Sequence[int]) -> list[AffineExpr]:
    """``ComputeTransposeIndexingMap``: result ``i`` is ``d{permutation[i]}``."""
    return [dim(p) for p in permutation]


def _strides(sizes: Sequence[int]) -> list[int]:
    out = [1] * len(sizes)
    for i in range(len(sizes) - 2, -1, -1):
        out[i] = out[i + 1] * sizes[i + 1]
    return out


def linearize(sizes: Sequence[int], exprs: Sequence[AffineExpr]) -> AffineExpr:
    """Row-major linear index of ``exprs`` in a shape of ``sizes`` (XLA's ``LinearizeShape``)."""
    out: AffineExpr = const(0)
    for stride, e in zip(_strides(sizes), exprs):
        out = out + e * stride
    return out


def delinearize(sizes: Sequence[int], linear: AffineExpr) -> list[AffineExpr]:
    """Row-major multi-index of ``linear`` (XLA's ``DelinearizeIndex``: ``floordiv`` then ``mod`` per stride)."""
    out = []
    rest = linear
    for stride in _strides(sizes):
        out.append(rest.floordiv(stride))
        rest = rest % stride
    return out


def _minimal_reshape(in_sizes: list[int], out_sizes: list[int], out_exprs: list[AffineExpr]) -> list[AffineExpr]:
    if len(in_sizes) == 1 and len(out_sizes) == 1:
        return list(out_exprs)
    if len(in_sizes) == 1:  # expand
        return [linearize(out_sizes, out_exprs)]
    if len(out_sizes) == 1:  # collapse
        return delinearize(in_sizes, out_exprs[0])
    return delinearize(in_sizes, linearize(out_sizes, out_exprs))


def reshape_exprs(input_dims: Sequence[int], output_dims: Sequence[int]) -> list[AffineExpr]:
    """``ComputeReshapeIndexingMap(input, output)``: for each input dimension, its index as an expression of
    the output dimensions ``d0..``. Splits both shapes into the shortest runs of equal element count and maps
    each run on its own (identity, expand, collapse, or linearize-then-delinearize)."""
    input_dims, output_dims = list(input_dims), list(output_dims)
    n_in = 1
    for s in input_dims:
        n_in *= s
    if n_in == 0:
        return [const(0) for _ in input_dims]
    exprs: list[AffineExpr] = []
    in_sub: list[int] = []
    out_sub: list[int] = []
    out_sub_exprs: list[AffineExpr] = []
    in_n = out_n = 1
    i = o = 0
    while i < len(input_dims) or o < len(output_dims) or in_sub:
        if i < len(input_dims) and (not in_sub or in_n < out_n):
            in_n *= input_dims[i]
            in_sub.append(input_dims[i])
            i += 1
            continue
        if o < len(output_dims) and (not out_sub or out_n < in_n):
            out_n *= output_dims[o]
            out_sub.append(output_dims[o])
            out_sub_exprs.append(dim(o))
            o += 1
            continue
        exprs += _minimal_reshape(in_sub, out_sub, out_sub_exprs)
        in_n = out_n = 1
        in_sub, out_sub, out_sub_exprs = [], [], []
    return exprs


def major_to_minor(shape: Shape) -> tuple[int, ...]:
    """XLA's ``LayoutPerm`` / ``ToTransposeDimensions``: dimension numbers from most major to most minor."""
    return tuple(reversed(shape.minor_to_major()))


def physical_dims(shape: Shape) -> tuple[int, ...]:
    """``MakeShapeWithDescendingLayoutAndSamePhysicalLayout(shape).dimensions()``."""
    return tuple(shape.dimensions[d] for d in major_to_minor(shape))


def _same_bit_width(a: Shape, b: Shape) -> bool:
    try:
        return bit_width(a.element_type) == bit_width(b.element_type)
    except (ValueError, KeyError):
        return a.element_type == b.element_type


def bitcast_map(input_shape: Shape, output_shape: Shape) -> IndexingMap:
    """``GetBitcastMap(input, output)``: input index -> output index of a bitcast, on the input's domain.

    A transpose bitcast is a permutation; a reshape bitcast is the reshape map; any other layout-changing
    bitcast is transpose (to the physical order) -> reshape -> transpose (from the physical order), as
    ``ShapeUtil::DecomposeBitcastToTrt`` splits it. Not a bitcast (element count or width differ): unknown.
    """
    if input_shape.numel != output_shape.numel or not _same_bit_width(input_shape, output_shape):
        return IndexingMap.unknown()
    in_dims = list(input_shape.dimensions)
    if in_dims:
        perm = deduce_transpose_dimensions_for_bitcast(input_shape, output_shape)
        if perm is not None:
            return IndexingMap.from_tensor_sizes(transpose_exprs(perm), in_dims)
    if reshape_is_bitcast(input_shape, output_shape, ignore_element_type=True):
        return IndexingMap.from_tensor_sizes(reshape_exprs(output_shape.dimensions, input_shape.dimensions), in_dims)
    # transpose to the input's physical order, reshape to the output's physical order, transpose back
    t1 = transpose_exprs(major_to_minor(input_shape))
    reshaped = [e.replace({dim(k): t1[k] for k in range(len(t1))})
                for e in reshape_exprs(physical_dims(output_shape), physical_dims(input_shape))]
    inv_out = inverse_permutation(major_to_minor(output_shape))
    return IndexingMap.from_tensor_sizes([reshaped[p] for p in inv_out], in_dims)


def physical_to_logical_map(shape: Shape) -> IndexingMap:
    """``GetIndexingMapFromPhysicalLayoutToLogical``: physical index (major-to-minor order) -> logical index."""
    if not shape.dimensions:
        return IndexingMap([], [])
    return IndexingMap.from_tensor_sizes(transpose_exprs(inverse_permutation(major_to_minor(shape))),
                                         physical_dims(shape))


def logical_to_physical_map(shape: Shape) -> IndexingMap:
    """``GetIndexingMapFromLogicalToPhysicalLayout``: logical index -> physical index."""
    if not shape.dimensions:
        return IndexingMap([], [])
    return IndexingMap.from_tensor_sizes(transpose_exprs(major_to_minor(shape)), shape.dimensions)


def is_identity_permutation_map(m: IndexingMap) -> bool:
    return not m.syms and not m.rts and list(m.exprs) == [dim(i) for i in range(m.num_dims)]


def pad_map(output_dims: Sequence[int], low: Sequence[int], high: Sequence[int],
            interior: Sequence[int]) -> IndexingMap:
    """``ComputePadIndexingMap``: output index -> operand index of ``pad``; the domain keeps only the output
    points that read the operand (edge padding cut off, interior points by a ``mod`` constraint)."""
    exprs, dims, constraints = [], [], []
    for i, (n, lo, hi, inner) in enumerate(zip(output_dims, low, high, interior)):
        d = dim(i)
        dims.append(Interval(max(0, lo), min(n - 1, n - 1 - hi)))
        if inner == 0:
            exprs.append(d - lo)
        else:
            exprs.append((d - lo).floordiv(inner + 1))
            constraints.append(((d - lo) % (inner + 1), Interval(0, 0)))
    return IndexingMap(exprs, dims, (), (), constraints)


def window_map(input_dims: Sequence[int], output_dims: Sequence[int], window: dict) -> IndexingMap:
    """``ComposeWindowIndexingMap``: output index of a windowed op -> input index, one symbol per window
    dimension; padding and base (lhs) dilation are a ``pad`` of the input composed after the window."""
    rank = len(input_dims)
    size = list(window.get("size", (1,) * rank))
    stride = list(window.get("stride", ())) or [1] * rank
    pads = list(window.get("pad", ())) or [(0, 0)] * rank
    base_dil = list(window.get("lhs_dilate", ())) or [1] * rank
    win_dil = list(window.get("rhs_dilate", ())) or [1] * rank
    padded = [n + lo + hi + (n - 1) * (bd - 1) for n, (lo, hi), bd in zip(input_dims, pads, base_dil)]
    no_pad = IndexingMap([sym(i) * win_dil[i] + dim(i) * stride[i] for i in range(rank)],
                         [Interval(0, n - 1) for n in output_dims], [Interval(0, w - 1) for w in size])
    padding = pad_map(padded, [p[0] for p in pads], [p[1] for p in pads], [bd - 1 for bd in base_dil])
    return remove_unused_vars(simplify(compose_indexing_maps(no_pad, padding))[0], dims=False)[0]
