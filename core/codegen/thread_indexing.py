"""Thread-id indexing maps of the native emitters, in XLA's form.

A kernel's thread-to-output map sends the launch's ids ``(th_x, th_y, th_z, bl_x, bl_y, bl_z)`` and the
per-thread loop symbols to the output element the thread writes; the thread-to-input map of a hero operand
is that map composed with the operand's output-to-input map. Mirrors XLA's
``KernelFusionInterface::ComputeThreadIdToOutputIndexing`` / ``ComputeThreadIdToInputIndexing`` and
``GetDefaultThreadIdIndexingMap`` (``xla/backends/gpu/codegen/fusion_emitter.cc``), the reduction maps of
``emitters/reduction.cc`` and the transpose maps of ``emitters/transpose.cc``.

:func:`emitter_thread_indexing` answers for any fusion by asking the emitter dispatch picks (the analysis
engineer's coalescing analysis uses it).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

from fusegen.hlo.ir import Instruction, Layout, Shape
from fusegen.indexing import AffineExpr, Interval, IndexingMap, compose_indexing_maps, const, dim, simplify, sym

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.codegen.kernel import LaunchDimensions

#: XLA's names of the six launch ids (``kIndexingMapThreadIdxDims`` / ``kIndexingMapBlockIdxDims``).
GRID_NAMES = ("th_x", "th_y", "th_z", "bl_x", "bl_y", "bl_z")
TH_X, BL_X, BL_Y = dim(0), dim(3), dim(4)


def grid_dims(threads: Sequence[int], blocks: Sequence[int]) -> list[Interval]:
    """``DimVarsFromGPUGrid``: ``th_* in [0, threads - 1]``, ``bl_* in [0, blocks - 1]``."""
    t = list(threads) + [1] * (3 - len(threads))
    b = list(blocks) + [1] * (3 - len(blocks))
    return [Interval(0, max(1, n) - 1) for n in t[:3] + b[:3]]


def named(m: IndexingMap, symbols: Sequence[str] = ()) -> IndexingMap:
    """``m`` printing its dims as the launch ids (and its symbols as ``symbols`` when they match)."""
    if m.is_undefined or m.is_known_empty:
        return m
    names: dict[str, tuple[str, ...]] = {}
    if m.num_dims == 6:
        names["d"] = GRID_NAMES
    if symbols and len(symbols) == m.num_symbols:
        names["s"] = tuple(symbols)
    return m.replace(names=names)


def delinearize_in_bounds(linear: AffineExpr, sizes: Sequence[int]) -> list[AffineExpr]:
    """``DelinearizeInBoundsIndex``: row-major coordinates of ``linear`` in ``sizes``, the outermost without
    ``mod`` (the linear index is in bounds)."""
    out: list[AffineExpr] = []
    stride = 1
    for s in sizes:
        stride *= s
    for i, s in enumerate(sizes):
        stride //= s
        if s == 1:
            out.append(const(0))
            continue
        e = linear.floordiv(stride) if stride != 1 else linear
        out.append(e if i == 0 else e.mod(s))
    return out


def row_major_shape(element_type: str, dims: Sequence[int]) -> Shape:
    """``ShapeUtil::MakeShapeWithDescendingLayout``."""
    return Shape(element_type, tuple(int(d) for d in dims), Layout(tuple(range(len(dims) - 1, -1, -1))))


def bitcast_to(from_dims: Sequence[int], shape: Shape) -> IndexingMap:
    """``GetBitcastMap(from_dims, shape)``: row-major ``from_dims`` index -> ``shape`` index."""
    from fusegen.indexing.analysis_shapes import bitcast_map

    return bitcast_map(row_major_shape(shape.element_type, from_dims), shape)


def default_thread_id_indexing_map(launch: "LaunchDimensions", unroll: int, shape: Shape) -> IndexingMap:
    """``GetDefaultThreadIdIndexingMap``: the loop-style map of a launch over ``shape``'s physical order.

    The linear index ``((bl_x * threads_x + th_x) * unroll + chunk_id * unroll * launch_bound + unroll_id``
    is split by ``shape``'s minor-to-major layout; ``chunk_id`` covers what one launch does not, ``unroll_id``
    the elements of a thread; the linear index is constrained to ``[0, numel - 1]``. Simplified.
    """
    threads, blocks = launch.threads3, launch.grid3
    total = [threads[i] * blocks[i] for i in range(3)]
    linear: AffineExpr = const(0)
    stride = 1
    for i in range(3):
        linear = linear + (dim(i) + dim(3 + i) * threads[i]) * stride
        stride *= total[i]
    bound = 1
    for i in range(3):
        bound *= total[i]
    linear = linear * unroll + sym(0) * (unroll * bound) + sym(1)
    n = shape.numel
    exprs: list[AffineExpr] = [const(0)] * shape.rank
    divisor = 1
    for d in shape.minor_to_major():
        exprs[d] = linear.floordiv(divisor).mod(shape.dimensions[d]) if divisor != 1 else linear.mod(shape.dimensions[d])
        divisor *= shape.dimensions[d]
    chunks = max(1, -(-n // (bound * unroll)))
    m = IndexingMap(exprs, grid_dims(threads, blocks), [Interval(0, chunks - 1), Interval(0, unroll - 1)],
                    constraints={linear: Interval(0, max(0, n - 1))})
    return named(simplify(m)[0], ("chunk_id", "unroll_id"))


def compose_with_operand(thread_to_output: IndexingMap | None, root: Instruction, operand_index: int) -> IndexingMap | None:
    """``thread_to_output`` composed with ``root``'s output-to-input map of operand ``operand_index``
    (the first of its maps), simplified; ``None`` without a thread map."""
    from fusegen.indexing.analysis import compute_output_to_input_indexing

    if thread_to_output is None:
        return None
    maps = compute_output_to_input_indexing(root, 0).indexing_maps
    if operand_index >= len(maps) or not maps[operand_index]:
        return IndexingMap.unknown()
    second = maps[operand_index][0].map
    if second.is_undefined:
        return second
    composed = simplify(compose_indexing_maps(thread_to_output, second))[0]
    keep = thread_to_output.names.get("s", ()) if composed.num_symbols == thread_to_output.num_symbols else ()
    return named(composed, keep)


def emitter_thread_indexing(fusion: Instruction, root_index: int, hero_operand_index: int | None = None,
                            device: Any = None) -> IndexingMap | None:
    """The thread-id map of the emitter dispatch picks for ``fusion``: to output ``root_index``
    (``hero_operand_index`` ``None``) or to that root's hero operand; ``None`` when the emitter has none
    (as XLA's ``std::nullopt``) or no native emitter takes the fusion.

    Args:
        fusion: a ``fusion`` instruction.
        root_index: index into the fused computation's roots.
        hero_operand_index: operand of the root's hero.
        device: a :class:`~fusegen.device.DeviceDescription` (default H200).
    """
    from fusegen import dispatch
    from fusegen.analysis.fusion_analysis import FusionAnalysis

    analysis = FusionAnalysis.create(fusion, device)
    kind = dispatch.get_emitter_fusion_kind(analysis).kind
    emitter, _ = dispatch.get_fusion_emitter(analysis, kind)
    if emitter is None:
        return None
    if hero_operand_index is None:
        fn = getattr(emitter, "thread_id_to_output_indexing", None)
        return fn(root_index) if fn is not None else None
    fn = getattr(emitter, "thread_id_to_input_indexing", None)
    return fn(root_index, hero_operand_index) if fn is not None else None


# ------------------------------------------------------------------------------------------ reductions
def _constrain(m: IndexingMap, exprs: Sequence[AffineExpr], sizes: Sequence[int]) -> IndexingMap:
    for e, n in zip(exprs, sizes):
        m = m.with_constraint(e, Interval(0, n - 1))
    return m


def reduction_maps(geo: Any, device: Any, group: int | None = None
                   ) -> tuple[IndexingMap, list[int], IndexingMap, list[int]]:
    """XLA's ``ComputeReductionInputIndexing`` / ``ComputeReductionOutputIndexing`` of a
    :class:`~fusegen.codegen.launch.ReductionGeometry`: ``(input map, input shape, output map, output
    shape)``, the shapes being the emitter's row-major views (row: ``[d0, d1, d2 / v, v]``; column:
    ``[d0, d1, d2]``; outputs ``[d1]`` / ``[d0, d2]``). ``group``: the reduction group (``bl_z``) whose
    threads the maps are for (``AddGroupIdConstraint``)."""
    from fusegen.codegen.launch import REDUCTION_TILE_SIZE, MINOR_REDUCED_ELEMENTS_PER_THREAD

    d0, d1, d2 = geo.dims
    gx, gy, gz = geo.blocks(device)
    grid = grid_dims((geo.threads, 1, 1), (gx, gy, gz))
    block = BL_X + BL_Y * gx if gy > 1 else BL_X
    vec = geo.vector_size

    def mk(exprs: Sequence[AffineExpr], syms: Sequence[int]) -> IndexingMap:
        m = IndexingMap(list(exprs), grid, [Interval(0, max(1, n) - 1) for n in syms])
        if group is not None and gz > 1:
            m = m.with_constraint(dim(5), Interval(group, group))
        return m

    if geo.emitter in ("RowReductionFusion", "MultiRowReductionFusion"):
        kept, reduced = geo.num_threads
        tid = delinearize_in_bounds(TH_X, [kept, reduced])
        if geo.emitter == "RowReductionFusion":
            in_shape = [d0, d1, d2 // vec, vec]
            tile = min(MINOR_REDUCED_ELEMENTS_PER_THREAD // vec, -(-in_shape[2] // reduced))
            bid = delinearize_in_bounds(block, list(geo.num_blocks))
            idx = [sym(0), bid[0] * kept + tid[0], bid[1] * (tile * reduced) + sym(1) * reduced + tid[1], sym(2)]
            inp = _constrain(mk(idx, [d0, tile, vec]), idx, in_shape)
        else:
            in_shape = [d0, d1, d2]
            bid = [block if geo.num_blocks[0] > 1 else const(0)]
            idx = [sym(0), bid[0] * kept + tid[0], tid[1] * vec + sym(1)]
            inp = _constrain(mk(idx, [d0, vec]), idx, in_shape)
        out_idx = [bid[0] * kept + tid[0]]
        out = _constrain(mk(out_idx, []).with_constraint(tid[1], Interval(0, 0)), out_idx, [d1])
        return simplify(inp)[0], in_shape, simplify(out)[0], [d1]
    in_shape = [d0, d1, d2]
    if geo.emitter == "ColumnReductionFusion":
        t = REDUCTION_TILE_SIZE
        tid = delinearize_in_bounds(TH_X, [t, t])
        bid = delinearize_in_bounds(block, list(geo.num_blocks))
        idx = [bid[0], tid[0] + sym(0) * t, (bid[1] * t + tid[1]) * vec + sym(1)]
        inp = _constrain(mk(idx, [-(-d1 // t), vec]), idx, in_shape)
        out_idx = [bid[0], (bid[1] * t + tid[0]) * vec + sym(0)]
        out = mk(out_idx, [vec]).with_constraint(tid[1], Interval(0, 0))
    else:  # SmallColumnReductionFusion
        (t,) = geo.num_threads
        shared_rows = min(REDUCTION_TILE_SIZE, vec * t // d2) if d2 else 1
        loop = -(-(d1 * d2) // (vec * t))
        linear = TH_X * vec + sym(1) + sym(0) * (vec * t)
        idx = [block, linear.floordiv(d2), linear.mod(d2)]
        inp = _constrain(mk(idx, [loop, vec]), idx, in_shape)
        out_idx = [block, (TH_X + sym(0) * t).floordiv(shared_rows)]
        out = mk(out_idx, [vec]).with_constraint(TH_X.mod(shared_rows), Interval(0, 0))
    out = _constrain(out, out_idx, [d0, d2])
    return simplify(inp)[0], in_shape, simplify(out)[0], [d0, d2]


def compose_bitcast(m: IndexingMap, from_dims: Sequence[int], shape: Shape) -> IndexingMap:
    """``m * GetBitcastMap(from_dims, shape)``, simplified and named."""
    return named(simplify(compose_indexing_maps(m, bitcast_to(from_dims, shape)))[0])


# ----------------------------------------------------------------------------------------- transposes
def transpose_indexing(dims: Sequence[int], perm: Sequence[int], vector_size: int, read: bool,
                       shape: Shape) -> IndexingMap:
    """``TransposeFusion::GetIndexing``: thread ids -> element of ``shape`` (bitcast of the normalized input
    when ``read``, of the normalized output ``dims`` otherwise). Tiles are ``32 v`` along both swapped dims
    (``021``: 32 x 32 rows of the whole minor dim); ``s0`` walks a thread's rows, ``s1`` its vector."""
    from fusegen.codegen.launch import TRANSPOSE_NUM_ROWS, TRANSPOSE_TILE_SIZE

    r = len(dims)
    inv = [0] * r
    for k, p in enumerate(perm):
        inv[p] = k
    in_shape = [dims[inv[j]] for j in range(r)]
    minor_unchanged = perm[-1] == r - 1
    bs = [1] * r
    if minor_unchanged:
        block = TRANSPOSE_TILE_SIZE
        bs[-1] = vector_size
        bs[r - 2] = block
        bs[perm[r - 2]] = block
    else:
        block = TRANSPOSE_TILE_SIZE * vector_size
        bs[-1] = block
        bs[perm[-1]] = block
    out_bs = [bs[perm[k]] for k in range(r)]
    counts = [-(-n // b) for n, b in zip(in_shape, bs)]
    nblocks = 1
    for c in counts:
        nblocks *= c
    bid_in = delinearize_in_bounds(BL_X, counts)
    bid = bid_in if read else [bid_in[perm[k]] for k in range(r)]
    stride = block * TRANSPOSE_NUM_ROWS * (vector_size if minor_unchanged else 1)
    linear = sym(0) * stride + TH_X * vector_size + sym(1)
    th = delinearize_in_bounds(linear, bs if read else out_bs)
    sizes = bs if read else out_bs
    offsets = [b * s + t for b, s, t in zip(bid, sizes, th)]
    threads = TRANSPOSE_NUM_ROWS * TRANSPOSE_TILE_SIZE
    m = IndexingMap(offsets, grid_dims((threads, 1, 1), (nblocks, 1, 1)),
                    [Interval(0, max(1, block // TRANSPOSE_NUM_ROWS) - 1), Interval(0, vector_size - 1)])
    norm = in_shape if read else list(dims)
    m = _constrain(m, offsets, norm)
    return compose_bitcast(m, norm, shape)


# ---------------------------------------------------------------------------------------------- explain
def fusion_thread_indexing(fusion: Instruction, device: Any = None, pm: Any = None) -> dict:
    """Every thread-id map of ``fusion``'s emitter, for ``fusegen explain --indexing``.

    Returns ``{"emitter": name | None, "roots": [{"root", "hero", "thread_to_output": text | None,
    "operands": [{"operand", "thread_to_input": text | None}]}]}`` with maps in XLA's text form
    (``None``: the emitter has no such map, as XLA's ``std::nullopt``).
    """
    from fusegen import dispatch
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.codegen.emitter import EmitterUnsupported

    analysis = FusionAnalysis.create(fusion, device)
    kind = dispatch.get_emitter_fusion_kind(analysis, pm).kind
    try:
        emitter, _ = dispatch.get_fusion_emitter(analysis, kind, pm)
    except EmitterUnsupported:
        emitter = None
    out: dict = {"emitter": type(emitter).__name__ if emitter is not None else None, "roots": []}
    to_out = getattr(emitter, "thread_id_to_output_indexing", None)
    to_in = getattr(emitter, "thread_id_to_input_indexing", None)

    def text(fn: Any, *args: int) -> str | None:
        if fn is None:
            return None
        try:
            m = fn(*args)
        except (EmitterUnsupported, NotImplementedError, ValueError):
            return None
        return None if m is None else str(m)

    for i, (root, hero) in enumerate(zip(analysis.roots, analysis.heroes)):
        ops = [{"operand": o.name, "thread_to_input": text(to_in, i, k)} for k, o in enumerate(hero.operands)]
        out["roots"].append({"root": root.name, "hero": hero.name, "thread_to_output": text(to_out, i),
                             "operands": ops})
    return out
