"""The reduction emitters: RowReductionFusion, MultiRowReductionFusion, ColumnReductionFusion and
SmallColumnReductionFusion as Triton kernels.

Mirrors XLA's ``ReductionFusion`` family (``xla/backends/gpu/codegen/emitters/reduction.cc``:
``CreateReductionFusion``, ``RowReductionFusion``, ``MultiRowReductionFusion``, ``ColumnReductionFusion``,
``SmallColumnReductionFusion``); the sub-emitter is chosen by
:func:`fusegen.analysis.reduction.choose_reduction_emitter` (XLA's rule).

Every reduction hero is viewed, as XLA does (``GetReductionKindAndContiguousComponents``), as a 3-D
array in its input's physical order: a row reduction ``[major_reduced, kept, minor_reduced]`` or a
column reduction ``[major_kept, reduced, minor_kept]``. fusegen writes both as one kernel shape: a
program owns a tile of ``TA`` x ``TB`` kept positions (row reductions: ``TA`` rows, ``TB = 1``; column
reductions: ``TA`` major x ``TB`` minor kept positions, the minor ones contiguous in memory), and loops
over the reduced extent in chunks of ``TR`` (a power of two not above the extent). Each iteration reads
a ``[TA, TR, TB]`` tile of the reduce input(s) through the elemental generator (the fused prologue is
computed in registers), folds it into per-lane accumulators with the ``to_apply`` computation (written
inline), and writes side outputs (roots with as many elements as the reduce input) from the same tile.
After the loop ``tl.reduce`` folds the ``TR`` axis with a ``@triton.jit`` combine function generated
from ``to_apply`` (tuples of operands for variadic reductions; where the reducer breaks ties by an index operand,
an argmax's, the combine hands it the side with the lower index first, as XLA's in-order fold does: the lanes
hold interleaved parts of the row and ``tl.reduce`` meets them in its own order), the reduce's ``init`` operand is
combined in exactly once, and epilogues (roots that are chains of elementwise/bitcast/reshape/transpose
ops over the reduce) are computed on the reduced values before the store. A row reduction's epilogue runs on
``OLANES`` copies of each row's value (``ceil(threads / (TA * TB))``: one element a thread), held by the lanes that
reduced the row, and the first copy stores: XLA's lane 0 of the row's warp writes it, and Triton needs no
shared-memory layout conversion where XLA's kernel has none (a row within one warp folds by shuffles alone).

f16/bf16 ``add``/``multiply`` reductions accumulate in f32 and round once. Every kernel is race free
(one program per kept tile, no atomics), so there is no ``ReductionIsRaceFree`` split.

Sub-emitter tiles (powers of two, ``TA*TR*TB <= 4096`` elements):

* Row: ``TR = min(floor_pow2(reduced), 4096)``, as many rows per program as fit.
* MultiRow (XLA: several rows per warp, reduced dim a power of two ``<= warp * vector``): the whole row
  in one chunk, many rows per program.
* Column: ``TB = min(pow2(minor_kept), 64)`` contiguous columns, ``TR`` reduced rows per chunk.
* SmallColumn (``warp % minor_kept == 0``): ``TB = minor_kept``, more reduced rows and major positions
  per program.

This module chooses the tile and XLA's launch geometry; :mod:`fusegen_plugins.emitters._reduction_plan` sorts the
roots and :mod:`fusegen_plugins.emitters._reduction_body` writes the kernel body.
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.pow2 import is_pow2, next_pow2, prev_pow2
from fusegen.analysis.reduction import (ReductionDimensions, choose_reduction_emitter,
                                        get_reduction_kind_and_contiguous_components, is_real_reduction_hero)
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import KernelContext, choose_index_dtype, deep_recursion
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.codegen.launch import REDUCTION_TILE_SIZE, ReductionGeometry, kernel_warps, reduction_geometry
from fusegen.codegen.thread_indexing import compose_bitcast, compose_with_operand, reduction_maps
from fusegen.indexing import IndexingMap
from fusegen.hlo import dtypes
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters._reduction_body import KERNEL_NAMES, write_body
from fusegen_plugins.emitters._reduction_plan import ReductionPlan, shape_leaves

#: Elements of one program's input tile (``TA * TR * TB``).
TILE_ELEMENTS = 4096
#: Steps over the reduced extent written out (``tl.static_range``) rather than looped: XLA's row tile is at most
#: ``MINOR_REDUCED_ELEMENTS_PER_THREAD`` (16) elements a thread, unrolled.
UNROLLED_STEPS = 16
#: The same for column reductions: XLA's column kernels read up to 94 rows a thread straight-line (z_colsum_odd:
#: 94 loads, z_colmax_f16 and y_colsum_scaled 64) and keep a loop at 128 (x_colsum_bf16, 4096 bf16 rows).
COLUMN_UNROLLED_STEPS = 64

class ReductionFusion(FusionEmitter):
    """Base of the four reduction emitters; subclasses choose the tile (:meth:`tile`).

    ``emit()`` returns one kernel. Raises :class:`EmitterUnsupported` (naming the instruction) for
    fusions it cannot generate: incompatible reductions, side outputs of another element count,
    non-scalar reducers, or ops the elemental generator lacks.
    """

    name = "ReductionFusion"
    #: steps over the reduced extent written out straight-line (more stay a runtime loop)
    unrolled_steps = UNROLLED_STEPS

    def tile(self, dims: ReductionDimensions, na: int, nr: int, nb: int) -> tuple[int, int, int]:
        """``(TA, TR, TB)``: kept-major, reduced and kept-minor tile sizes (powers of two, ``TR <= nr``)."""
        raise NotImplementedError

    def xla_geometry(self, plan: ReductionPlan | None = None) -> ReductionGeometry | None:
        """XLA's launch geometry for this sub-emitter (:func:`fusegen.codegen.launch.reduction_geometry`);
        ``None`` when XLA would not pick a reduction emitter (no real reduction hero)."""
        analysis = self.analysis
        hero = analysis.find_hero_reduction()
        if hero is None:
            return None
        dims = get_reduction_kind_and_contiguous_components(hero).dimensions
        is_red = [h.opcode == "reduce" and is_real_reduction_hero(r, h, analysis.device)
                  for r, h in zip(analysis.roots, analysis.non_trivial_heroes)]
        return reduction_geometry(analysis, self.name, dims, is_red)

    def launch_dimensions(self) -> LaunchDimensions | None:
        """XLA's launch dimensions (``ReductionFusion::launch_dimensions``)."""
        geo = self.xla_geometry()
        return geo.launch(self.analysis.device) if geo is not None else None

    def _groups_and_roots(self) -> tuple[ReductionGeometry, list[bool], list[int]]:
        from fusegen.codegen.launch import reduction_group_ids

        geo = self.xla_geometry()
        if geo is None:
            raise EmitterUnsupported("fusion", self.fusion.name, "no real reduction hero: no XLA thread map")
        a = self.analysis
        is_red = [h.opcode == "reduce" and is_real_reduction_hero(r, h, a.device)
                  for r, h in zip(a.roots, a.non_trivial_heroes)]
        return geo, is_red, reduction_group_ids(a, is_red)

    def thread_id_to_output_indexing(self, root_index: int) -> IndexingMap | None:
        """``ReductionFusion::ComputeThreadIdToOutputIndexing``: for a reduction root the projected output
        map (the thread that writes each kept element) bitcast to the hero's output; for a side output the
        reduce-input map bitcast to the root's shape. ``None`` when XLA would not use a reduction emitter."""
        try:
            geo, is_red, groups = self._groups_and_roots()
        except EmitterUnsupported:
            return None
        a = self.analysis
        inp, in_shape, out, out_shape = reduction_maps(geo, a.device, groups[root_index] if geo.groups > 1 else None)
        root = a.roots[root_index]
        if not is_red[root_index]:
            return compose_bitcast(inp, in_shape, root.shape)
        hero = a.non_trivial_heroes[root_index]
        return compose_bitcast(out, out_shape, hero.shape.leaves()[0])

    def thread_id_to_input_indexing(self, root_index: int, hero_operand_index: int) -> IndexingMap | None:
        """``ReductionFusion::ComputeThreadIdToInputIndexing``: the reduce-input map bitcast to the hero's
        operand (undefined for init values); for a side output, its output map composed with the root's
        output-to-input map."""
        try:
            geo, is_red, groups = self._groups_and_roots()
        except EmitterUnsupported:
            return None
        a = self.analysis
        root, hero = a.roots[root_index], a.non_trivial_heroes[root_index]
        if not is_red[root_index]:
            return compose_with_operand(self.thread_id_to_output_indexing(root_index), root, hero_operand_index)
        if hero_operand_index >= len(hero.operands) // 2:
            return IndexingMap.unknown()
        inp, in_shape, _, _ = reduction_maps(geo, a.device, groups[root_index] if geo.groups > 1 else None)
        return compose_bitcast(inp, in_shape, hero.operands[hero_operand_index].shape)

    def xla_tile(self, geo: ReductionGeometry, na: int, nr: int, nb: int) -> tuple[int, int, int] | None:
        """``(TA, TR, TB)`` giving one program per XLA block: row reductions take XLA's kept rows per block,
        column reductions one major position and XLA's ``32 * vector`` columns (small column: all of them).
        ``None`` when the blocks cannot be matched (a row split over several blocks)."""
        if geo.emitter in ("RowReductionFusion", "MultiRowReductionFusion"):
            if len(geo.num_blocks) > 1 and geo.num_blocks[1] > 1:
                return None
            ta = geo.num_threads[0] if geo.num_blocks[0] > 1 else next_pow2(na)
            if ta & (ta - 1):
                return None
            tb = 1
        else:
            ta = 1
            cols = REDUCTION_TILE_SIZE * geo.vector_size if geo.emitter == "ColumnReductionFusion" else nb
            tb = min(next_pow2(cols), next_pow2(nb))
            if -(-nb // tb) != -(-nb // cols):
                return None
        if ta * tb > TILE_ELEMENTS:
            return None
        tr = min(prev_pow2(nr), max(1, TILE_ELEMENTS // (ta * tb)))
        return ta, tr, tb

    def xla_row_step(self, geo: ReductionGeometry, ta: int, tr: int) -> int:
        """``TR`` of a row reduction as XLA's threads read the row: one vector a thread a step (``reduced
        threads x vector`` lanes of each of the ``TA`` rows), the steps unrolled (:data:`UNROLLED_STEPS`), as
        XLA's ``RowReductionFusion`` tiles a row (``num_threads = [kept, reduced]``, each thread ``tile``
        vectors). A warp then reduces its row with shuffles and each thread's vectors are of one row (a row
        value loaded once a thread); the default ``tr`` when XLA's threads are not a power-of-two block of
        ``TA`` rows."""
        if geo.emitter not in ("RowReductionFusion", "MultiRowReductionFusion") or len(geo.num_threads) != 2:
            return tr
        kept, reduced = geo.num_threads
        c = reduced * geo.vector_size
        if c & (c - 1) or kept != ta or kernel_warps(geo.threads) * 32 != geo.threads:
            return tr
        return c

    def xla_column_step(self, geo: ReductionGeometry, tb: int, tr: int) -> int:
        """``TR`` of a small column reduction as XLA's threads read it: one vector of ``vector_size`` columns a
        thread a step (``threads x vector / TB`` rows of the ``TB`` columns), as XLA's
        ``SmallColumnReductionFusion`` walks the rows; the default ``tr`` (the program's whole tile of
        :data:`TILE_ELEMENTS` a step) held up to ``TILE_ELEMENTS / threads`` values a thread at once (a bf16
        ``[516, 32]`` max: 32 a thread, 72 registers and a spill where XLA's kernel has 32 registers, one
        8-byte load a row step). Column reductions keep their tile."""
        if geo.emitter != "SmallColumnReductionFusion":
            return tr
        lanes = geo.threads * geo.vector_size
        if lanes % tb or not is_pow2(lanes // tb):
            return tr
        return min(tr, lanes // tb)

    # ------------------------------------------------------------------------------------------
    def emit(self) -> EmittedFusion:
        fusion = self.fusion
        comp = self.computation
        plan = ReductionPlan(self.analysis, fusion)
        d0, d1, d2 = plan.dims.dimensions
        if plan.dims.is_row_reduction:
            na, nr, nb = d1, d0 * d2, 1
        else:
            na, nr, nb = d0, d1, d2
        if na * nb == 0:
            return EmittedFusion(emitter=self.name)  # nothing to write: every output is empty
        geo = self.xla_geometry(plan)
        xla_tiles = self.xla_tile(geo, na, nr, nb) if geo is not None and nr > 0 else None
        if xla_tiles is not None:
            ta, tr, tb = xla_tiles
        else:
            ta, tr, tb = self.tile(plan.dims, na, nr, nb) if nr > 0 else (min(next_pow2(na), TILE_ELEMENTS), 1, 1)
        if xla_tiles is not None and tb == 1:
            tr = self.xla_row_step(geo, ta, tr)
        elif xla_tiles is not None:
            tr = self.xla_column_step(geo, tb, tr)
        block, oblock = ta * tr * tb, ta * tb
        ga, gb = -(-na // ta), -(-nb // tb)
        nit = -(-nr // tr) if nr > 0 else 0
        warps = kernel_warps(geo.threads) if xla_tiles is not None else max(1, min(8, block // 512))
        op_shapes = [o.shape for o in fusion.operands]
        idx_t = choose_index_dtype(op_shapes + [fusion.shape, plan.first.operands[0].shape], block)
        ctx = KernelContext(idx_t, op_shapes)
        ctx.complex_values = True  # c64/c128 values are (re, im) pairs, accumulated and folded part by part
        for n in KERNEL_NAMES:
            ctx.names.reserve(n)
        with deep_recursion():
            combine_src = write_body(ctx, comp, plan, shape_leaves(fusion.shape), (ta, tr, tb), (na, nr, nb), nit,
                                     idx_t, 32 * warps, self.unrolled_steps)
        entry = ts.sanitize_identifier(f"reduce_{fusion.name}", "k")
        # BLOCK = TA * TR * TB; TA and OBLOCK are derived in the kernel. With one column tile (GB == 1)
        # the grid is cdiv(N, BLOCK) for N = NA * TR * TB and any power-of-two BLOCK >= TR * TB gives the
        # same values: the linear-kernel contract under which the interpreter runs wider programs.
        constexprs = {"BLOCK": block, "TR": tr, "TB": tb, "NA": na, "NR": nr, "NB": nb, "NIT": nit, "GB": gb}
        if gb == 1:
            constexprs["N"] = na * tr * tb
        args = list(ctx.param_names) + [f"{c}: tl.constexpr" for c in constexprs]
        lines = ts.module_header() + [""] + combine_src + ["", "@triton.jit", f"def {entry}({', '.join(args)}):"]
        lines += ctx.body.lines
        source = "\n".join(lines) + "\n"
        acc_bytes = sum(max(1, dtypes.bit_width(s.element_type) // 8) for h in plan.heroes
                        for s in shape_leaves(h.shape))
        # cross-warp partial results of tl.reduce: one per kept lane of the tile and warp
        smem = oblock * acc_bytes * warps if tr > 1 else 0
        if xla_tiles is not None and geo.blocks(self.analysis.device)[:2] == (ga * gb, 1):
            # one program per XLA block (z: XLA's reduction groups, which this kernel computes together)
            launch = attrs.evolve(geo.launch(self.analysis.device), grid=(ga * gb,), num_warps=warps,
                                  shared_memory_bytes=smem)
        else:
            launch = LaunchDimensions(grid=(ga * gb,), num_warps=warps, shared_memory_bytes=smem)
        ks = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params), constexprs=constexprs,
                          launch=launch, num_stages=1)
        return EmittedFusion(emitter=self.name, kernels=(ks,))


class RowReductionFusion(ReductionFusion):
    """Row reductions (``RowReductionFusion``): a program reduces ``TA`` rows, ``TR`` elements a step."""

    name = "RowReductionFusion"

    def tile(self, dims: ReductionDimensions, na: int, nr: int, nb: int) -> tuple[int, int, int]:
        tr = min(prev_pow2(nr), TILE_ELEMENTS)
        ta = min(next_pow2(na), max(1, TILE_ELEMENTS // tr))
        return ta, tr, 1


class MultiRowReductionFusion(RowReductionFusion):
    """Short power-of-two rows (``MultiRowReductionFusion``): whole rows in one step, many rows a program."""

    name = "MultiRowReductionFusion"


class ColumnReductionFusion(ReductionFusion):
    """Column reductions (``ColumnReductionFusion``): ``TB`` contiguous kept columns, ``TR`` rows a step."""

    name = "ColumnReductionFusion"
    max_columns = 64
    unrolled_steps = COLUMN_UNROLLED_STEPS

    def tile(self, dims: ReductionDimensions, na: int, nr: int, nb: int) -> tuple[int, int, int]:
        tb = min(next_pow2(nb), self.max_columns)
        tr = min(prev_pow2(nr), max(1, TILE_ELEMENTS // tb))
        ta = min(next_pow2(na), max(1, TILE_ELEMENTS // (tr * tb)))
        return ta, tr, tb


class SmallColumnReductionFusion(ColumnReductionFusion):
    """Column reductions whose minor kept extent divides the warp (``SmallColumnReductionFusion``): all
    kept columns in one tile, several major positions per program."""

    name = "SmallColumnReductionFusion"
    max_columns = 32


_CLASSES = {c.name: c for c in (RowReductionFusion, MultiRowReductionFusion, ColumnReductionFusion,
                                SmallColumnReductionFusion)}


def create_reduction_emitter(analysis: Any, context: Any = None) -> ReductionFusion | None:
    """``CreateReductionFusion``: the sub-emitter XLA's rule picks, or ``None`` without a reduction hero."""
    if analysis.find_hero_reduction() is None:
        return None
    return _CLASSES[choose_reduction_emitter(analysis)](analysis)


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="reduction", kind="kReduction", rank=100, create=create_reduction_emitter)]
