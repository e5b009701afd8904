"""Thread-id -> hero-operand indexing maps of the native emitters, as the coalescing analysis reads them.

XLA's coalescing analysis asks the fusion's emitter for ``ComputeThreadIdToInputIndexing(root_index)``: one map
per hero operand, from the six launch ids ``(th_x, th_y, th_z, bl_x, bl_y, bl_z)`` (and the emitter's loop and
vector symbols, the vector index last) to the hero operand's logical index. This module builds those maps
from the launch geometry of :mod:`fusegen.codegen.launch`:

* loop fusions: exactly XLA's ``GetDefaultThreadIdIndexingMap`` (linear thread id x unroll factor + chunk
  and unroll symbols, delinearized in the output's physical order) composed with the root's
  output-to-input maps (``LoopFusion::ComputeThreadIdToInputIndexing``);
* reduction fusions (row, multi-row, column, small column): the tile each thread reads of the reduction's
  3-D input view (``ReductionDimensions``), mapped back to the hero operand's layout;
* transpose fusions: the shared-memory tile a thread reads, consecutive threads along the input's
  physical minor dimension, ``vector_size`` elements each.

The reduction and transpose maps follow XLA's emitters' tiling (thread and vector order, loop symbols first
and the vector symbol last), which is what the first-warp sample of ``IsIndexingCoalesced`` depends on; block
offsets are kept on ``bl_x``. Other kinds (concatenate, scatter, in-place DUS, sort, Triton, custom) give
``None``: the caller then falls back to XLA's heuristic.
"""

from __future__ import annotations

import math

from fusegen import kinds
from fusegen.hlo.ir import Instruction, Shape
from fusegen.indexing.analysis import compute_output_to_input_indexing
from fusegen.indexing.analysis_shapes import bitcast_map
from fusegen.indexing.expr import AffineExpr, const, dim, sym
from fusegen.indexing.interval import Interval
from fusegen.indexing.map import IndexingMap

TH_X, TH_Y, TH_Z, BL_X, BL_Y, BL_Z = range(6)


def _launch_dims(threads: tuple[int, int, int], blocks: tuple[int, int, int]) -> list[Interval]:
    return [Interval(0, n - 1) for n in (*threads, *blocks)]


def default_thread_id_indexing_map(threads: tuple[int, int, int], blocks: tuple[int, int, int], unroll: int,
                                   shape: Shape) -> IndexingMap:
    """``GetDefaultThreadIdIndexingMap``: launch ids -> the index of ``shape`` the thread writes; symbols
    ``s0`` (chunk of ``threads x blocks x unroll`` elements) and ``s1`` (unrolled element)."""
    linear: AffineExpr = const(0)
    stride = 1
    for i in range(3):
        coord = dim(TH_X + i) + dim(BL_X + i) * threads[i]
        linear = linear + coord * stride
        stride *= threads[i] * blocks[i]
    bound = math.prod(threads) * math.prod(blocks)
    chunk, elem = sym(0), sym(1)
    base = linear * unroll
    full = base + chunk * (unroll * bound) + elem
    exprs: list[AffineExpr] = [const(0)] * shape.rank
    divisor = 1
    for d in shape.minor_to_major():
        exprs[d] = full.floordiv(divisor) % shape.dimensions[d]
        divisor *= shape.dimensions[d]
    n = shape.numel
    syms = [Interval(0, -(-n // (bound * unroll)) - 1), Interval(0, unroll - 1)]
    if n % unroll == 0:
        constraint = (base, Interval(0, n - unroll))
    else:
        constraint = (full, Interval(0, n - 1))
    return IndexingMap(exprs, _launch_dims(threads, blocks), syms, (), [constraint]).simplify()


def _through_root(thread_to_root: IndexingMap, root: Instruction) -> list[IndexingMap | None]:
    """Thread -> each operand of ``root``, via ``root``'s output-to-input map (one map per operand)."""
    out: list[IndexingMap | None] = []
    for items in compute_output_to_input_indexing(root, 0):
        if len(items) != 1:
            out.append(None)
            continue
        out.append(thread_to_root.compose(items[0].map).simplify())
    return out


def _element_shape(analysis) -> Shape:
    s = analysis.roots[0].shape
    while s.is_tuple:
        s = s.tuple_shapes[0]
    return s


def loop_maps(analysis, root_index: int) -> list[IndexingMap | None]:
    from fusegen.codegen.launch import analysis_loop_geometry

    g = analysis_loop_geometry(analysis)
    shape = _element_shape(analysis)
    thread_map = default_thread_id_indexing_map((g.threads, 1, 1), (g.blocks[0], g.blocks[1], 1), g.unroll, shape)
    root = analysis.roots[root_index]
    root_shape = root.shape.tuple_shapes[0] if root.shape.is_tuple else root.shape
    if tuple(root_shape.dimensions) != tuple(shape.dimensions):
        # a multi-output root of another shape: the same linear elements, through a bitcast
        to_root = bitcast_map(shape, root_shape)
        if to_root.is_undefined:
            return None
        thread_map = thread_map.compose(to_root).simplify()
    return _through_root(thread_map, root)


# ------------------------------------------------------------------------------------------- reductions
def _reduction_view_map(analysis, emitter: str, geometry, dims: tuple[int, int, int]) -> IndexingMap:
    """Launch ids -> the index into the reduction's 3-D input view ``dims`` a thread reads."""
    d0, d1, d2 = dims
    threads = (geometry.threads, 1, 1)
    n_blocks = max(1, math.prod(geometry.num_blocks))
    blocks = (n_blocks, 1, 1)
    tx, bx = dim(TH_X), dim(BL_X)
    vec = max(1, geometry.vector_size)
    if emitter == "MultiRowReductionFusion":
        kept_t, red_t = geometry.num_threads
        exprs = [sym(0), bx * kept_t + tx.floordiv(red_t), (tx % red_t) * vec + sym(1)]
        syms = [Interval(0, d0 - 1), Interval(0, vec - 1)]
    elif emitter == "RowReductionFusion":
        kept_t, red_t = geometry.num_threads
        nb_kept, nb_red = geometry.num_blocks
        tile = max(1, -(-(d2 // vec) // (nb_red * red_t)))
        exprs = [sym(0), bx.floordiv(nb_red) * kept_t + tx.floordiv(red_t),
                 (((bx % nb_red) * tile + sym(1)) * red_t + tx % red_t) * vec + sym(2)]
        syms = [Interval(0, d0 - 1), Interval(0, tile - 1), Interval(0, vec - 1)]
    elif emitter == "ColumnReductionFusion":
        nb_major, nb_minor = geometry.num_blocks
        exprs = [bx.floordiv(nb_minor), tx.floordiv(32) + sym(0) * 32,
                 (bx % nb_minor) * (32 * vec) + (tx % 32) * vec + sym(1)]
        syms = [Interval(0, -(-d1 // 32) - 1), Interval(0, vec - 1)]
    else:  # SmallColumnReductionFusion: each thread walks the flattened (reduced, kept) rows of a block
        t = geometry.threads
        flat = (sym(0) * t + tx) * vec + sym(1)
        exprs = [bx, flat.floordiv(d2), flat % d2]
        syms = [Interval(0, -(-(d1 * d2) // (t * vec)) - 1), Interval(0, vec - 1)]
    constraints = [(e, Interval(0, n - 1)) for e, n in zip(exprs, dims)]
    return IndexingMap(exprs, _launch_dims(threads, blocks), syms, (), constraints)


def reduction_maps(analysis, root_index: int) -> list[IndexingMap | None] | None:
    from fusegen.analysis.reduction import (
        choose_reduction_emitter, get_reduction_kind_and_contiguous_components, is_real_reduction_hero,
    )
    from fusegen.codegen.launch import reduction_geometry

    first = analysis.find_hero_reduction()
    if first is None:
        return None
    emitter = choose_reduction_emitter(analysis)
    rd = get_reduction_kind_and_contiguous_components(first)
    is_red = [is_real_reduction_hero(r, h, analysis.device) for r, h in zip(analysis.roots, analysis.heroes)]
    geometry = reduction_geometry(analysis, emitter, rd.dimensions, is_red)
    view = _reduction_view_map(analysis, emitter, geometry, rd.dimensions)
    input_shape = first.operands[0].shape
    view_shape = Shape(input_shape.element_type, tuple(rd.dimensions))
    to_input = bitcast_map(view_shape, input_shape)
    if to_input.is_undefined:
        return None
    thread_to_input = view.compose(to_input).simplify()
    hero = analysis.heroes[root_index]
    if is_red[root_index]:
        n_in = len(hero.operands) // 2
        return [thread_to_input] * n_in + [None] * (len(hero.operands) - n_in)
    # a side output: the same elements, seen through the bitcast from the reduction input to the root
    root = analysis.roots[root_index]
    to_root = bitcast_map(input_shape, root.shape)
    if to_root.is_undefined or root.shape.is_tuple:
        return None
    return _through_root(thread_to_input.compose(to_root).simplify(), root)


# ------------------------------------------------------------------------------------------- transposes
def _transpose_input_map(operand: Shape, perm: tuple[int, ...], out_shape: Shape, vec: int) -> IndexingMap:
    """Launch ids -> the index of the transpose's operand a thread reads: threads along the operand's physical
    minor dimension (``vec`` elements each), warps along the dimension that becomes the output's minor one,
    every other dimension an outer loop."""
    minor = operand.minor_to_major()[0]
    out_minor = out_shape.minor_to_major()[0]
    t = perm[out_minor]
    tx = dim(TH_X)
    exprs: list[AffineExpr] = [const(0)] * operand.rank
    syms: list[Interval] = []
    for d in range(operand.rank):
        if d not in (minor, t):
            exprs[d] = sym(len(syms))
            syms.append(Interval(0, operand.dimensions[d] - 1))
    rows = 32 * vec
    if t != minor:
        exprs[t] = tx.floordiv(32) + sym(len(syms)) * 4
        syms.append(Interval(0, max(1, rows // 4) - 1))
    exprs[minor] = (tx % 32) * vec + sym(len(syms))
    syms.append(Interval(0, vec - 1))
    constraints = [(exprs[d], Interval(0, operand.dimensions[d] - 1)) for d in {minor, t}]
    return IndexingMap(exprs, _launch_dims((128, 1, 1), (1, 1, 1)), syms, (), constraints)


def transpose_maps(analysis, root_index: int) -> list[IndexingMap | None] | None:
    from fusegen.codegen.launch import transpose_vector_size

    desc = analysis.tiled_transpose
    if desc is None:
        return None
    t = desc.instr
    operand = t.operands[0].shape
    perm = tuple(int(p) for p in t.attrs.get("dimensions", ()))
    norm_out = list(desc.dimensions)
    norm_in = [0] * len(norm_out)
    for i, p in enumerate(desc.permutation):
        norm_in[p] = norm_out[i]
    try:
        vec = transpose_vector_size(norm_in, list(desc.permutation), max(1, _bytes(operand)), len(analysis.heroes),
                                    analysis.device)
    except (ValueError, IndexError):
        vec = 1
    hero = analysis.heroes[root_index]
    if hero.opcode == "transpose" and len(hero.operands) == 1:
        own = tuple(int(p) for p in hero.attrs.get("dimensions", ()))
        return [_transpose_input_map(hero.operands[0].shape, own, hero.shape, vec).simplify()]
    base = _transpose_input_map(operand, perm, t.shape, vec)
    root = analysis.roots[root_index]
    to_root = bitcast_map(operand, root.shape)
    if to_root.is_undefined or root.shape.is_tuple:
        return None
    return _through_root(base.compose(to_root).simplify(), root)


def _bytes(shape: Shape) -> int:
    from fusegen.indexing.coalescing import element_bytes

    return element_bytes(shape.element_type)


def thread_id_to_hero_operand_maps(analysis, root_index: int) -> list[IndexingMap | None] | None:
    """``ComputeThreadIdToInputIndexing(root_index)`` of the fusion's emitter: one map per operand of hero
    ``root_index`` (``None`` entries for operands the emitter does not index, e.g. reduction inits); ``None``
    for emitter kinds this module does not model."""
    kind = analysis.kind
    if kind == kinds.LOOP:
        return loop_maps(analysis, root_index)
    if kind == kinds.REDUCTION:
        return reduction_maps(analysis, root_index)
    if kind == kinds.TRANSPOSE:
        return transpose_maps(analysis, root_index)
    return None
