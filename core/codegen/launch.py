"""XLA's launch geometry per native emitter: threads per block, blocks, unroll/vector sizes.

Every function here computes what XLA:GPU launches for the same fusion, so that an emitter can build its
Triton kernel on that geometry (``num_warps = threads / 32``, one program per XLA block, ``threads x unroll``
elements a program) and report XLA's launch. Sources mirrored (openxla/xla):

* ``xla/service/gpu/launch_dimensions.cc``: ``CalculateLaunchDimensions`` (:func:`calculate_launch_dimensions`);
* ``xla/service/gpu/gpu_fusible.cc``: ``ComputeLoopFusionConfig``, ``ComputeMaxUnrollFactor``,
  ``MayPreventVectorization`` (:func:`loop_unroll_factor`);
* ``xla/backends/gpu/codegen/emitters/emitter_base.cc``: ``MaybeSplitGridDimensionX``;
* ``emitters/reduction.cc`` / ``reduction_base.cc``: the four reduction emitters' ``num_threads_`` and
  ``num_blocks_``, ``GetVectorSizeForMlir``, ``GroupDisjointReductions`` (:func:`reduction_geometry`);
* ``emitters/transpose.cc``: ``TransposeFusion`` block sizes with vectorisation (:func:`transpose_geometry`);
* ``emitters/scatter.cc``: ``CreateScatterFusion`` (:func:`scatter_geometry`);
* ``llvm/sort_util.cc``: ``EmitBitonicSortLLVMIR`` tile size and launches (:func:`sort_launches`).

Launch shared memory: XLA's MLIR emitters allocate their shared tiles statically inside the kernel, so the
thunk's (dynamic) shared memory is 0 for every native emitter; the static tile size is reported apart.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import attrs

from fusegen.codegen.kernel import LaunchDimensions
from fusegen.hlo.ir import Computation, Instruction, Shape

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.device import DeviceDescription

#: ``ComputeMaxUnrollFactor``'s cap.
MAX_UNROLL_FACTOR = 4
#: ``CalculateLaunchDimensions``: warp schedulers per SM (threads per block = 4 warps).
WARP_SCHEDULERS = 4
#: ``MayPreventVectorization``: concatenates with more operands are not unrolled.
MAX_CONCAT_ARGUMENTS_FOR_UNROLLING = 10
#: ``MayCausePerformanceDropIfUnrolled``: reduce-windows of larger windows are not unrolled.
MAX_REDUCE_WINDOW_SIZE_FOR_UNROLLING = 8
#: Reduction emitters (``reduction.cc``): threads a block aims for, column tile, elements per thread.
THREADS_PER_BLOCK_TARGET = 256
REDUCTION_TILE_SIZE = 32
MINOR_REDUCED_ELEMENTS_PER_THREAD = 16
#: Transpose emitter (``transpose.cc``): 32-wide tiles, 4 rows of threads, 4-byte vector loads.
TRANSPOSE_TILE_SIZE = 32
TRANSPOSE_NUM_ROWS = 4
TRANSPOSE_MAX_VECTORIZED_BYTES = 4
#: Scatter emitter (``scatter.cc``).
SCATTER_NUM_WARPS_PER_BLOCK = 4
SCATTER_MAX_VECTORIZED_BITS = 128
#: Sort (``sort_util.cc``): elements each thread copies into the shared tile.
SORT_UNROLL_FACTOR = 4


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _warp(device: "DeviceDescription | None") -> int:
    return (device.threads_per_warp if device is not None else 0) or 32


def xla_bits(element_type: str) -> int:
    """``primitive_util::BitWidth`` (``pred`` is 1 bit)."""
    from fusegen.hlo.dtypes import bit_width

    return 1 if element_type == "pred" else bit_width(element_type)


def launch(blocks: Sequence[int], threads: Sequence[int], num_warps: int | None = None,
           shared_memory_bytes: int = 0) -> LaunchDimensions:
    """A :class:`LaunchDimensions` whose kernel grid and XLA block counts are ``blocks`` (up to 3 axes)
    and whose threads per block are ``threads``; ``num_warps`` defaults to ``threads / 32`` rounded up
    to a power of two (Triton's warp count must be one)."""
    t = tuple(int(x) for x in threads) + (1,) * (3 - len(threads))
    b = tuple(int(x) for x in blocks)
    while len(b) > 1 and b[-1] == 1:
        b = b[:-1]
    return LaunchDimensions(grid=b, num_warps=num_warps or kernel_warps(t[0] * t[1] * t[2]),
                            shared_memory_bytes=shared_memory_bytes, threads=t)


def kernel_warps(threads: int) -> int:
    """Triton ``num_warps`` for ``threads`` per block: ``ceil(threads / 32)`` rounded up to a power of two."""
    w = max(1, _cdiv(threads, 32))
    return 1 << (w - 1).bit_length()


# ---------------------------------------------------------------------------------------------- loops
def may_prevent_vectorization(comp: Computation) -> bool:
    """``MayCausePerformanceDropIfUnrolled`` (``gpu_fusible.cc``; ``MayPreventVectorization`` before): a
    reduce-window whose window holds more than 8 elements (one thread walks a whole window), a sort, a dot,
    a variadic reduce or a concatenate of more than 10 operands anywhere in the fused computation (nested
    fusions included)."""
    from fusegen.hlo.window import parse_window

    for inst in comp.instructions:
        op = inst.opcode
        if op == "reduce-window":
            rank = inst.operands[0].shape.rank if inst.operands and inst.operands[0].shape.is_array else 0
            if math.prod(parse_window(inst, rank)["size"]) > MAX_REDUCE_WINDOW_SIZE_FOR_UNROLLING:
                return True
            continue
        if op in ("sort", "dot"):
            return True
        if op == "concatenate" and len(inst.operands) > MAX_CONCAT_ARGUMENTS_FOR_UNROLLING:
            return True
        if op == "reduce" and inst.shape.is_tuple and len(inst.shape.tuple_shapes) > 1:
            return True
        if op == "fusion" and inst.fused_computation is not None and may_prevent_vectorization(inst.fused_computation):
            return True
    return False


def compute_max_unroll_factor(num_elements: int) -> int:
    """``ComputeMaxUnrollFactor``: the largest of 4, 2 dividing ``num_elements``, else 1."""
    i = MAX_UNROLL_FACTOR
    while i > 1:
        if num_elements % i == 0:
            return i
        i //= 2
    return 1


def loop_unroll_factor(comp: Computation, num_elements: int, smallest_output_bits: int,
                       device: "DeviceDescription") -> int:
    """``ComputeLoopFusionConfig``: unroll (= vector size) of a loop-style kernel over ``num_elements``.

    Unrolled only when the kernel would use at least as many threads as the GPU holds
    (``threads_per_core_limit * core_count``) and nothing in ``comp`` prevents vectorisation; at least
    ``ceil(8 / smallest_output_bits)`` so one thread owns every sub-byte output element of a byte.
    """
    unroll = 1
    n_threads_max = device.threads_per_core_limit * device.core_count
    if num_elements >= n_threads_max and not may_prevent_vectorization(comp):
        unroll = compute_max_unroll_factor(num_elements)
    return max(unroll, _cdiv(8, max(1, smallest_output_bits)))


def maybe_split_grid_x(threads_x: int, blocks_x: int, device: "DeviceDescription") -> tuple[int, int]:
    """``MaybeSplitGridDimensionX``: ``(blocks_x, blocks_y)``; blocks beyond the grid's x limit are folded
    into y (the smallest divisor-free split that fits)."""
    limit = (device.block_dim_limit[0] if device.block_dim_limit[0] else 2**31 - 1)
    if blocks_x <= limit:
        return blocks_x, 1
    y = _cdiv(blocks_x, limit)
    return _cdiv(blocks_x, y), y


@attrs.frozen
class LoopGeometry:
    """A loop-style launch: ``threads`` per block, each thread ``unroll`` consecutive elements.

    Attributes:
        num_elements: elements of the indexing shape.
        unroll: elements per thread (XLA's unroll factor, the vector size of the loop map).
        threads: threads per block (x).
        blocks: blocks ``(x, y)``.
    """

    num_elements: int
    unroll: int
    threads: int
    blocks: tuple[int, int]

    @property
    def elements_per_block(self) -> int:
        return self.threads * self.unroll

    @property
    def num_blocks(self) -> int:
        return self.blocks[0] * self.blocks[1]

    def launch(self, shared_memory_bytes: int = 0) -> LaunchDimensions:
        return launch(self.blocks, (self.threads,), shared_memory_bytes=shared_memory_bytes)


def calculate_launch_dimensions(num_elements: int, device: "DeviceDescription", unroll: int = 1) -> LoopGeometry:
    """``CalculateLaunchDimensions`` (CUDA branch): ``min(128, ceil(n / unroll))`` threads per block and
    enough blocks for ``ceil(n / unroll)`` threads, the blocks split over y beyond the x limit; a single
    thread for ``n <= 1``."""
    if num_elements <= 1:
        return LoopGeometry(num_elements, unroll, 1, (1, 1))
    n = _cdiv(num_elements, unroll)
    threads = min(_warp(device) * WARP_SCHEDULERS, n)
    total = _cdiv(n, threads)
    limit = device.block_dim_limit[0] or 2**31 - 1
    by = _cdiv(total, limit)
    return LoopGeometry(num_elements, unroll, threads, (_cdiv(total, by), by))


def loop_geometry(comp: Computation, element_shape: Shape, smallest_output_bits: int,
                  device: "DeviceDescription") -> LoopGeometry:
    """``LoopFusion::launch_dimensions``: :func:`calculate_launch_dimensions` of ``element_shape`` (the
    first root's first leaf) with ``ComputeLoopFusionConfig``'s unroll factor."""
    n = element_shape.numel
    return calculate_launch_dimensions(n, device, loop_unroll_factor(comp, n, smallest_output_bits, device))


def element_shape(roots: Sequence[Instruction]) -> Shape:
    """``GetElementShape``: the first root's shape, first tuple leaf while tuple-shaped."""
    s = roots[0].shape
    while s.is_tuple:
        s = s.tuple_shapes[0]
    return s


def smallest_output_bits(roots: Sequence[Instruction]) -> int:
    """``InputOutputInfo::smallest_output_dtype_bits`` over the roots' array leaves (``SmallestBitWidth``:
    ``pred`` counts 8 bits)."""
    bits = 2**31 - 1
    for r in roots:
        for leaf in r.shape.leaves():
            if leaf.is_array:
                try:
                    bits = min(bits, 8 if leaf.element_type == "pred" else xla_bits(leaf.element_type))
                except ValueError:
                    continue
    return bits


def analysis_loop_geometry(analysis: Any, shape: Shape | None = None) -> LoopGeometry:
    """:func:`loop_geometry` of an analysed fusion (``shape``: the indexing shape, default the element
    shape of its roots)."""
    roots = list(analysis.roots)
    comp = analysis.computation
    io = getattr(analysis, "input_output_info", None)
    bits = io.smallest_output_dtype_bits if io is not None else smallest_output_bits(roots)
    return loop_geometry(comp, shape if shape is not None else element_shape(roots), bits, analysis.device)


# ----------------------------------------------------------------------------------------------- sort
def sort_tile_size(n: int, operand_bits: Sequence[int], device: "DeviceDescription") -> int:
    """Elements of one row a tiled sort kernel sorts in shared memory (``EmitBitonicSortLLVMIR``'s
    ``kTileSize``): ``min(4 * threads_per_block_limit, shared_memory_per_block / bytes per element of all
    operands, 2**stages)`` floored to a power of two; ``n`` the sorted dimension's size (> 1)."""
    stages = (n - 1).bit_length() if n > 1 else 0
    total_bytes = sum(max(1, b // 8) for b in operand_bits)
    smem = device.shared_memory_per_block or 49152
    tpb_limit = device.threads_per_block_limit or 1024
    tile = max(1, min(tpb_limit * SORT_UNROLL_FACTOR, smem // max(1, total_bytes), 1 << stages))
    return 1 << (tile.bit_length() - 1)


def sort_launches(keys_shape: Shape, sort_dim: int, operand_bits: Sequence[int],
                  device: "DeviceDescription") -> list[LaunchDimensions]:
    """``EmitBitonicSortLLVMIR``: the launch of every kernel XLA emits for a sort (in order).

    The tile is ``min(4 * threads_per_block_limit, shared_memory_per_block / bytes per element of all
    operands, 2**stages)`` floored to a power of two; consecutive xor masks below the tile share one tiled
    kernel (``tile / 4`` threads a block, one block per tile of every row), every mask at or above it gets
    its own kernel with the standard launch over half the padded sort dimension (``/ 4``, no unroll).
    No kernel for a sort dimension of one element.
    """
    n = keys_shape.dimensions[sort_dim] if keys_shape.rank else 1
    stages = (n - 1).bit_length() if n > 1 else 0
    if stages == 0:
        return []
    tile = sort_tile_size(n, operand_bits, device)
    rows = keys_shape.numel // n
    std_iters = _cdiv(1 << (stages - 1), SORT_UNROLL_FACTOR)
    std = calculate_launch_dimensions(rows * std_iters, device).launch()
    rounded = _cdiv(n, tile) * tile
    threads = max(1, tile // SORT_UNROLL_FACTOR)
    tiled = launch((_cdiv(rows * _cdiv(rounded, SORT_UNROLL_FACTOR), threads),), (threads,))
    out: list[LaunchDimensions] = []
    group = 0
    for stage in range(stages):
        for mask in range(stage, -1, -1):
            xor = (1 << (stage + 1)) - 1 if mask == stage else 1 << mask
            if xor >= tile:
                if group:
                    out.append(tiled if group > 1 else std)
                    group = 0
                out.append(std)
            else:
                group += 1
    if group:
        out.append(tiled if group > 1 else std)
    return out


# -------------------------------------------------------------------------------------------- scatter
@attrs.frozen
class ScatterGeometry:
    """``CreateScatterFusion``'s launch parameters.

    Attributes:
        emitter: ``ScatterWithDistributedUpdates`` or ``ScatterWithDistributedIndices``.
        vector_size: update elements per thread and step.
        blocks, threads: the launch (threads a multiple of the warp).
        updates: for distributed updates, the loop geometry over the update shape (``None`` otherwise).
        indices_per_warp: for distributed indices, consecutive slices one warp walks.
    """

    emitter: str
    vector_size: int
    blocks: int
    threads: int
    updates: LoopGeometry | None = None
    indices_per_warp: int = 1

    def launch(self) -> LaunchDimensions:
        return launch((self.blocks,), (self.threads,))


def scatter_geometry(analysis: Any, update_shape: Shape, slice_shape: Sequence[int], operand_dims: Sequence[int],
                     index_vector_length: int, num_slices: int, element_type: str, index_element_type: str,
                     sorted_not_unique: bool) -> ScatterGeometry:
    """``CreateScatterFusion`` + the two emitters' constructors (``emitters/scatter.cc``).

    Distributed updates: vector size ``gcd(slice elements, ComputeLoopFusionConfig(update shape))``,
    :func:`calculate_launch_dimensions` of the update shape, threads rounded up to whole warps.
    Distributed indices (indices hinted sorted, not unique, more slices than ``4 * core_count``): 4 warps a
    block, each warp ``ceil(slices / max(4 * cores, possible valid indices))`` slices (padded to a multiple
    of the 128-bit index vector when the index vector has length 1).
    """
    device = analysis.device
    warp = _warp(device)
    slice_elems = 1
    for s in slice_shape:
        slice_elems *= s
    max_vec = max(1, SCATTER_MAX_VECTORIZED_BITS // xla_bits(element_type))
    vec = math.gcd(slice_elems, max_vec) if slice_elems else 1
    while vec > 1 and warp * vec > slice_elems:
        vec //= 2
    max_active_warps = SCATTER_NUM_WARPS_PER_BLOCK * device.core_count
    if sorted_not_unique and num_slices > max_active_warps:
        valid = 1
        for i in range(index_vector_length):
            valid *= operand_dims[i] - slice_shape[i] + 1
        per_warp = _cdiv(num_slices, max(max_active_warps, valid))
        max_idx_vec = SCATTER_MAX_VECTORIZED_BITS // xla_bits(index_element_type)
        if index_vector_length == 1 and per_warp > max_idx_vec:
            per_warp = _cdiv(per_warp, max_idx_vec) * max_idx_vec
        blocks = _cdiv(num_slices, per_warp * SCATTER_NUM_WARPS_PER_BLOCK)
        return ScatterGeometry("ScatterWithDistributedIndices", vec, blocks, SCATTER_NUM_WARPS_PER_BLOCK * warp,
                               indices_per_warp=per_warp)
    io = getattr(analysis, "input_output_info", None)
    bits = io.smallest_output_dtype_bits if io is not None else xla_bits(element_type)
    unroll = loop_unroll_factor(analysis.computation, update_shape.numel, bits, device)
    vec = math.gcd(slice_elems, unroll) if slice_elems else 1
    geo = calculate_launch_dimensions(update_shape.numel, device, max(1, vec))
    threads = _cdiv(geo.threads, warp) * warp
    geo = attrs.evolve(geo, threads=threads)
    return ScatterGeometry("ScatterWithDistributedUpdates", max(1, vec), geo.num_blocks, threads, updates=geo)


# ------------------------------------------------------------------------------------------ reductions
@attrs.frozen
class ReductionGeometry:
    """A reduction emitter's launch (``ReductionFusion::launch_dimensions``).

    Attributes:
        emitter: the sub-emitter (``RowReductionFusion``, ``MultiRowReductionFusion``,
            ``ColumnReductionFusion``, ``SmallColumnReductionFusion``).
        dims: the hero's ``ReductionDimensions`` 3-D view.
        num_threads: XLA's ``num_threads_`` (row: ``[kept, reduced]``; column: ``[32, 32]``; small column:
            ``[threads]``).
        num_blocks: XLA's ``num_blocks_`` (row: ``[kept, reduced]`` tiles; column: ``[major, minor]``).
        vector_size: elements a thread reads at once along the minor dimension.
        groups: disjoint reduction groups (``GroupDisjointReductions``): the grid's z.
    """

    emitter: str
    dims: tuple[int, int, int]
    num_threads: tuple[int, ...]
    num_blocks: tuple[int, ...]
    vector_size: int
    groups: int = 1

    @property
    def threads(self) -> int:
        return math.prod(self.num_threads)

    def blocks(self, device: "DeviceDescription") -> tuple[int, int, int]:
        x, y = maybe_split_grid_x(self.threads, math.prod(self.num_blocks), device)
        return x, y, self.groups

    def launch(self, device: "DeviceDescription") -> LaunchDimensions:
        return launch(self.blocks(device), (self.threads,))


def vector_size_for_mlir(analysis: Any, minor_dim: int, num_threads: int) -> int:
    """``GetVectorSizeForMlir`` (``reduction_base.cc``): 1 for odd minor dims, when fewer than two elements
    per thread, or for complex hero operands; 2 for >= 32-bit inputs or fewer than four elements per
    thread; else 4 when the minor dim divides by 4."""
    if minor_dim % 2:
        return 1
    if num_threads * 2 > minor_dim:
        return 1
    for hero in getattr(analysis, "heroes", None) or []:
        if any(o.shape.is_array and o.shape.element_type in ("c64", "c128") for o in hero.operands):
            return 1
    if analysis.input_output_info.smallest_input_dtype_bits >= 32:
        return 2
    if num_threads * 4 > minor_dim:
        return 2
    return 4 if minor_dim % 4 == 0 else 2


def _broadcasted_constant_or_scalar(inst: Instruction) -> bool:
    """``hlo_query::IsBroadcastedConstantOrScalar``."""
    if inst.opcode == "constant" or (inst.shape.is_array and inst.shape.rank == 0):
        return True
    if inst.opcode == "broadcast" and inst.operands:
        o = inst.operands[0]
        return o.opcode == "constant" or (o.shape.is_array and o.shape.rank == 0)
    return False


def count_reduction_groups(analysis: Any, is_reduction_root: Sequence[bool]) -> int:
    """The number of groups of :func:`reduction_group_ids`."""
    return len(set(reduction_group_ids(analysis, is_reduction_root)))


def reduction_group_ids(analysis: Any, is_reduction_root: Sequence[bool]) -> list[int]:
    """``GroupDisjointReductions`` (MLIR variant), the group of each root: roots that share a non-trivial
    producer are one group; all side outputs are one group; a broadcasted constant or scalar joins at most
    one reduction root. Groups are numbered in the order of their first root."""
    roots = list(analysis.roots)
    if len(roots) <= 1:
        return [0] * len(roots)
    parent = list(range(len(roots)))

    def find(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    def union(a: int, b: int) -> None:
        parent[find(b)] = find(a)

    first_side = None
    for i, red in enumerate(is_reduction_root):
        if not red:
            if first_side is None:
                first_side = i
            else:
                union(first_side, i)
    reach: dict[int, set[int]] = {}
    insts: dict[int, Instruction] = {}
    for i, r in enumerate(roots):  # consumers first: every producer reaches the roots its users reach
        todo = [r]
        while todo:
            x = todo.pop()
            s = reach.setdefault(id(x), set())
            if i in s:
                continue
            s.add(i)
            insts[id(x)] = x
            todo.extend(x.operands)
    for key, inst in insts.items():
        reached, added_to_reduce = [], False
        for i in range(len(roots)):
            if is_reduction_root[i] and _broadcasted_constant_or_scalar(inst) and added_to_reduce:
                continue
            if i in reach[key]:
                reached.append(i)
                added_to_reduce = added_to_reduce or is_reduction_root[i]
        for j in reached[1:]:
            union(reached[0], j)
    ids: dict[int, int] = {}
    return [ids.setdefault(find(i), len(ids)) for i in range(len(roots))]


def reduction_geometry(analysis: Any, emitter: str, dims: tuple[int, int, int],
                       is_reduction_root: Sequence[bool]) -> ReductionGeometry:
    """The constructors of XLA's four reduction emitters (``emitters/reduction.cc``).

    Row: ``min(1024, roundup(ceil(d2 / 16), 32))`` reducing threads, more kept rows per block up to 256
    threads; MultiRow: the row's ``d2 / vector`` threads, rows up to 256 threads; Column: ``32 x 32``
    threads over ``32 * vector`` columns; SmallColumn: 128 threads (fewer when more than 32 shared rows).
    """
    from fusegen.analysis.reduction import multi_row_vector_size

    d0, d1, d2 = dims
    groups = count_reduction_groups(analysis, is_reduction_root)
    warp = _warp(analysis.device)
    if emitter == "MultiRowReductionFusion":
        vec = multi_row_vector_size(analysis) or 1
        reduced = d2 // vec
        kept = d1 if d1 * reduced <= THREADS_PER_BLOCK_TARGET else THREADS_PER_BLOCK_TARGET // reduced
        return ReductionGeometry(emitter, dims, (kept, reduced), (_cdiv(d1, kept),), vec, groups)
    if emitter == "RowReductionFusion":
        reduced = min(1024, _cdiv(_cdiv(d2, MINOR_REDUCED_ELEMENTS_PER_THREAD), warp) * warp)
        kept = 1
        if reduced * 2 <= THREADS_PER_BLOCK_TARGET:
            kept = d1 if d1 * reduced <= THREADS_PER_BLOCK_TARGET else THREADS_PER_BLOCK_TARGET // reduced
        vec = vector_size_for_mlir(analysis, d2, reduced)
        minor = d2 // vec
        tile = min(MINOR_REDUCED_ELEMENTS_PER_THREAD // vec, _cdiv(minor, reduced))
        return ReductionGeometry(emitter, dims, (kept, reduced), (_cdiv(d1, kept), _cdiv(minor, tile * reduced)),
                                 vec, groups)
    if emitter == "ColumnReductionFusion":
        vec = vector_size_for_mlir(analysis, d2, REDUCTION_TILE_SIZE)
        return ReductionGeometry(emitter, dims, (REDUCTION_TILE_SIZE, REDUCTION_TILE_SIZE),
                                 (d0, _cdiv(d2, REDUCTION_TILE_SIZE * vec)), vec, groups)
    # SmallColumnReductionFusion
    vec = vector_size_for_mlir(analysis, d1 * d2, REDUCTION_TILE_SIZE)
    threads = 128
    shared_rows = vec * threads // d2
    while shared_rows > REDUCTION_TILE_SIZE and vec > 1:
        vec //= 2
        shared_rows //= 2
    if shared_rows > REDUCTION_TILE_SIZE:
        threads //= shared_rows // REDUCTION_TILE_SIZE
    return ReductionGeometry(emitter, dims, (threads,), (d0,), vec, groups)


# ----------------------------------------------------------------------------------------- transposes
def transpose_vector_size(input_dims: Sequence[int], perm: Sequence[int], element_bytes: int, num_heroes: int,
                          device: "DeviceDescription") -> int:
    """``TransposeFusion``'s vector size for a transpose that moves its minor dim (``transpose.cc``): the
    largest ``v`` in ``4 / element bytes, ..., 2`` with enough work (``v * v`` elements a thread still
    fills the GPU), enough shared memory (``32 * 33 * bytes * heroes * v * v``) and both tiled input dims
    divisible by ``v``; 1 otherwise."""
    r = len(input_dims)
    counts = 1
    for j, n in enumerate(input_dims):
        counts *= _cdiv(n, TRANSPOSE_TILE_SIZE) if j in (r - 1, perm[-1]) else n
    shmem = TRANSPOSE_TILE_SIZE * (TRANSPOSE_TILE_SIZE + 1) * element_bytes * num_heroes
    vec = TRANSPOSE_MAX_VECTORIZED_BYTES // max(1, element_bytes)
    while vec > 1:
        enough_work = counts * TRANSPOSE_NUM_ROWS * TRANSPOSE_TILE_SIZE >= vec * vec * device.core_count * \
            device.threads_per_core_limit
        enough_shmem = shmem * vec * vec <= (device.shared_memory_per_block or 49152)
        aligned = input_dims[-1] % vec == 0 and input_dims[perm[-1]] % vec == 0
        if enough_work and enough_shmem and aligned:
            return vec
        vec //= 2
    return 1
