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
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.pow2 import is_pow2, next_pow2, prev_pow2
from fusegen.analysis.reduction import (ReductionDimensions, are_reductions_multi_output_fusion_compatible,
                                        choose_reduction_emitter, get_reduction_kind_and_contiguous_components,
                                        is_real_reduction_hero)
from fusegen.hlo.shape_util import are_dimensions_consecutive
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import (COMPLEX_PARTS, Cx, ElementalGenerator, KernelContext, choose_index_dtype,
                                      deep_recursion, int_list)
from fusegen.codegen.elemental.step_offsets import LoopSteps
from fusegen.codegen.elemental.uniform_runs import UniformRuns
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, store_line
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.codegen.launch import REDUCTION_TILE_SIZE, ReductionGeometry, kernel_warps, reduction_geometry
from fusegen.codegen import loop_unroll
from fusegen.codegen.thread_indexing import compose_bitcast, compose_with_operand, reduction_maps
from fusegen.indexing import IndexingMap
from fusegen.codegen.reduction_codegen import (COMBINE_PREFIX, combine_function, position_operand,
                                               promoted_reducer)
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters._reduction_index import forward_index, input_index, view_position
from fusegen_plugins.emitters._hero_kernel import flatten

#: Elements of one program's input tile (``TA * TR * TB``).
TILE_ELEMENTS = 4096
#: Steps over the reduced extent written out (``tl.static_range``) rather than looped: XLA's row tile is at most
#: ``MINOR_REDUCED_ELEMENTS_PER_THREAD`` (16) elements a thread, unrolled.
UNROLLED_STEPS = 16
#: The same for column reductions: XLA's column kernels read up to 94 rows a thread straight-line (z_colsum_odd:
#: 94 loads, z_colmax_f16 and y_colsum_scaled 64) and keep a loop at 128 (x_colsum_bf16, 4096 bf16 rows).
COLUMN_UNROLLED_STEPS = 64

# Names the kernel defines itself; never handed out for HLO instructions.
_FIXED = ("EXACT", "pid", "pid_a", "pid_b", "t", "ta", "tr", "tb", "A", "B", "R", "A_c", "A_q", "B_c", "R_c", "okab", "it",
          "o", "oA", "oB", "oA_c", "oB_c", "omask", "ozero", "OBLOCK", "OLANES", "TA", "TR", "TB", "NA", "NR", "NB",
          "NIT", "GB")


def _leaves(shape: Shape) -> list[Shape]:
    return shape.leaves() if shape.is_tuple else [shape]


class _EpilogueGenerator(ElementalGenerator):
    """An elemental generator where the reduction heroes' values are given (the reduced block).

    The epilogue chain from a hero to its root is made of bijective index maps (elementwise, bitcast,
    bitcast-reshape/transpose: ``FindNonTrivialHero``), so the root's index is mapped forward from the
    hero's and every read of a hero in that chain reads the value of this lane.
    """

    def __init__(self, ctx: KernelContext, comp: Computation, injected: dict[int, Any]):
        super().__init__(ctx, comp)
        self.injected = injected

    def value(self, inst: Instruction, idx: tuple) -> Any:
        hit = self.injected.get(id(inst))
        if hit is not None:
            return hit
        return super().value(inst, idx)


def _parts(*values: list) -> list[tuple]:
    """Zip lists of values part by part: a complex value (:class:`Cx`) contributes its re and im parts."""
    out = []
    for vs in zip(*values):
        out.extend(zip(*vs) if isinstance(vs[0], Cx) else [vs])
    return out


def _usable_hero(root: Instruction, hero: Instruction) -> bool:
    """A reduce the kernel can be built around: kept or reduced dims consecutive in the input layout
    (``IsReductionFromOrToContiguousDimensions`` without the speed test). fusegen's kernels never split
    a reduced row across programs, so an epilogue is fine even where XLA's ``ReductionIsRaceFree`` fails."""
    if hero.opcode != "reduce" or not hero.operands:
        return False
    shape = hero.operands[0].shape
    reduced = set(int_list(hero.attrs.get("dimensions")))
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not (are_dimensions_consecutive(shape, kept) or are_dimensions_consecutive(shape, sorted(reduced))):
        return False
    return True


class _Plan:
    """Roots of a reduction fusion sorted into reduction roots and side outputs."""

    def __init__(self, analysis: Any, fusion: Instruction):
        first = analysis.find_hero_reduction()
        if first is None:  # not a kReduction by XLA's speed heuristics, but the kernel shape still applies
            first = next((h for r, h in zip(analysis.roots, analysis.non_trivial_heroes) if _usable_hero(r, h)), None)
        if first is None:
            raise EmitterUnsupported("fusion", fusion.name, "no reduce whose kept or reduced dims are consecutive")
        self.first = first
        self.dims: ReductionDimensions = get_reduction_kind_and_contiguous_components(first)
        self.heroes: list[Instruction] = []
        self.reduction_roots: list[tuple[Instruction, Instruction, list[int]]] = []  # root, hero, leaves
        self.side_roots: list[tuple[Instruction, list[int]]] = []
        in_numel = first.operands[0].shape.numel
        k = 0
        for root, hero in zip(analysis.roots, analysis.non_trivial_heroes):
            n = len(_leaves(root.shape))
            lks = list(range(k, k + n))
            k += n
            if hero.opcode == "reduce" and (is_real_reduction_hero(root, hero, analysis.device) or _usable_hero(root, hero)):
                if not are_reductions_multi_output_fusion_compatible(hero, first):
                    raise EmitterUnsupported("reduce", hero.name,
                                             f"reduction not compatible with %{first.name} in one kernel")
                if not any(h is hero for h in self.heroes):
                    self.heroes.append(hero)
                self.reduction_roots.append((root, hero, lks))
                continue
            if root.shape.is_tuple or not root.shape.is_array:
                raise EmitterUnsupported(root.opcode, root.name, "tuple-shaped side output")
            if root.shape.numel != in_numel:
                raise EmitterUnsupported(root.opcode, root.name,
                                         f"side output has {root.shape.numel} elements, the reduce input {in_numel}")
            self.side_roots.append((root, lks))
        leaves = _leaves(fusion.shape)
        if k != len(leaves):
            raise EmitterUnsupported("fusion", fusion.name,
                                     f"roots have {k} output leaves, the fusion shape {len(leaves)}")
        for hero in self.heroes:
            n = len(hero.operands) // 2
            if not isinstance(hero.attrs.get("to_apply"), Computation):
                raise EmitterUnsupported("reduce", hero.name, "reduce without to_apply computation")
            for x in hero.operands[:n]:
                if x.shape.dimensions != hero.operands[0].shape.dimensions:
                    raise EmitterUnsupported("reduce", hero.name, "variadic inputs of different shapes")


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

    def xla_geometry(self, plan: "_Plan | None" = None) -> ReductionGeometry | None:
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
        plan = _Plan(self.analysis, fusion)
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
        for n in _FIXED:
            ctx.names.reserve(n)
        with deep_recursion():
            combine_src = self._body(ctx, comp, plan, (ta, tr, tb), (na, nr, nb), nit, gb, idx_t, 32 * warps)
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
                        for s in _leaves(h.shape))
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

    # ------------------------------------------------------------------------------------------
    def _body(self, ctx: KernelContext, comp: Computation, plan: _Plan, tiles: tuple[int, int, int],
              sizes: tuple[int, int, int], nit: int, gb: int, idx_t: str, threads: int) -> list[str]:
        ta, tr, tb = tiles
        na, nr, nb = sizes
        body = ctx.body
        fusion = self.fusion
        leaves = _leaves(fusion.shape)
        i64 = idx_t == "tl.int64"
        line = body.line

        # reducers: the combine function for tl.reduce, and the computation folded inline
        reducers = []
        combine_src: list[str] = []
        for k, hero in enumerate(plan.heroes):
            to_apply = hero.attrs["to_apply"]
            n = len(hero.operands) // 2
            promoted = promoted_reducer(to_apply) if n == 1 else None
            red = promoted or to_apply
            acc_types = ["f32"] if promoted else [s.element_type for s in _leaves(hero.shape)]
            fname = ctx.names.fresh(f"{COMBINE_PREFIX}{k}_{hero.name}")  # sanitized; keeps the prefix
            # tl.reduce folds interleaved lanes in its own order: the sides go to the reducer in position order
            combine_src += combine_function(ctx, red, n, fname, order_by=position_operand(red, n)) + [""]
            reducers.append((hero, n, red, acc_types, fname, promoted is not None))

        # program and tile coordinates
        line("TA: tl.constexpr = BLOCK // (TR * TB)")
        line("OBLOCK: tl.constexpr = BLOCK // TR")
        line("pid = tl.program_id(0)" + (".to(tl.int64)" if i64 else ""))
        line("pid_a = pid // GB")
        line("pid_b = pid % GB")
        line("t = tl.arange(0, BLOCK)" + (".to(tl.int64)" if i64 else ""))
        line("ta = t // (TR * TB)")
        line("tr = (t // TB) % TR")
        line("tb = t % TB")
        line("A = pid_a * TA + ta")
        line("B = pid_b * TB + tb")
        # every tile inside the array (XLA's exact grids): the bound checks are constants Triton folds away, with
        # the predicated loads and the accumulator's selects (v_sum_u8: 19 -> 14 registers, XLA's 15). A
        # constexpr test: the interpreter's wider programs (a larger TA) may overhang. Rows only, and not around
        # a runtime loop: unmasked, LLVM unrolls column steps and loops (x_colsum_bf16: 2.4x XLA's memory
        # instructions; z_colmax_f16 spills)
        exact = tb == 1 and nit <= max(1, self.unrolled_steps)
        if exact:
            line("EXACT: tl.constexpr = NA % TA == 0 and NB % TB == 0")
            for x in ts.constexpr_branches("EXACT", [f"okab = {ts.true_mask()}"], ["okab = (A < NA) & (B < NB)"]):
                line(x)
        else:
            line("okab = (A < NA) & (B < NB)")
        line("A_c = tl.minimum(A, NA - 1)")
        # the clamp only moves masked lanes: keep the runs' contiguity for Triton's vectoriser (XLA's
        # vectorised loads along the minor dimension)
        line("B_c = tl.max_contiguous(tl.multiple_of(tl.minimum(B, NB - 1), TB), TB)" if tb > 1
             else "B_c = tl.minimum(B, NB - 1)")
        line(f"zero = tl.full([BLOCK], 0, {idx_t})")
        ctx.zero, ctx.mask = "zero", "mask"
        gen = ElementalGenerator(ctx, comp)

        accs: list[list[str]] = []
        for hero, n, red, acc_types, fname, promoted in reducers:
            names = []
            for et in acc_types:
                if et in COMPLEX_PARTS:
                    pair = Cx((ctx.names.fresh(f"acc_{hero.name}_re"), ctx.names.fresh(f"acc_{hero.name}_im")))
                    for v in pair:
                        line(f"{v} = tl.full([BLOCK], 0, {ts.tl_dtype(COMPLEX_PARTS[et])})")
                    names.append(pair)
                    continue
                v = ctx.names.fresh(f"acc_{hero.name}")
                names.append(v)
                if et == "pred":
                    line(f"{v} = tl.full([BLOCK], 0, tl.int8) != 0")
                else:
                    line(f"{v} = tl.full([BLOCK], 0, {ts.tl_dtype(et)})")
            accs.append(names)

        if nit > 0:
            loop = nit > 1
            hoist_at = len(body.lines)
            if tb == 1 and tr > 1:
                # an operand read at the kept row only (a broadcast row scale) is loaded once per row, before
                # the loop (UniformRuns): one load a thread, as XLA's row reduction loads it
                hoist = ts.SourceBuilder()
                hoist.level = body.level
                hoist.line("A_q = tl.minimum(pid_a * TA + tl.arange(0, TA)" + (".to(tl.int64)" if i64 else "") +
                           ", NA - 1)")
                ctx.runs = UniformRuns(base="", width=1, coarse_base="A_q", coarse_shape="[TA]",
                                       expand="tl.reshape(tl.broadcast_to({x}[:, None], [TA, TR * TB]), [BLOCK])",
                                       seeds={"A_c": "A_q"}, hoist=hoist)
            if loop:
                ctx.steps = LoopSteps("it * TR", {"R_c": ("tr", 1), "tr": ("tr", 0), "A_c": ("A_c", 0),
                                                  "B_c": ("B_c", 0)})
                # the header is written once the body is known (its size decides the unrolling)
                header_at = len(body.lines)
                line("for it in range(0, NIT):")
                body.indent()
                gen.push_scope()
                line("R = it * TR + tr")
            else:
                line("R = tr")
            # R < NR on every step when TR divides NR
            line("mask = okab" if nr % tr == 0 and exact else "mask = okab & (R < NR)")
            # no clamp: lanes past the reduced extent are masked on every load, store and accumulation, and an
            # unclamped R keeps each step's addresses one base plus constants (XLA's immediate offsets)
            line("R_c = R")
            p = view_position(gen, plan.dims, "A_c", "R_c", "B_c")
            p = gen.itensor(p)
            for (hero, n, red, acc_types, fname, promoted), names in zip(reducers, accs):
                xin = hero.operands[0].shape
                idx = input_index(gen, xin, plan.dims, "A_c", "R_c", "B_c", p)
                xs = [gen.value(x, idx) for x in hero.operands[:n]]
                if promoted:
                    xs = [ctx.emit(f"{x}.to(tl.float32)", "up") for x in xs]
                if loop:
                    res = gen.call_computation(red, list(names) + xs)
                    res = res if isinstance(res, list) else [res]
                    for a, x, r in _parts(names, xs, res):
                        line(f"{a} = tl.where(it == 0, {x}, tl.where(mask, {r}, {a}))")
                else:
                    for a, x in _parts(names, xs):
                        line(f"{a} = {x}")
            for root, lks in plan.side_roots:
                xin = plan.first.operands[0].shape
                if tuple(root.shape.dimensions) == tuple(xin.dimensions):
                    ridx = gen.delinearize(p, xin.dimensions, xin.minor_to_major())
                else:  # equal element count: XLA's bitcast map from the reduce input
                    ridx = gen.delinearize(p, root.shape.dimensions, root.shape.minor_to_major())
                v = gen.value(root, ridx)
                ls = leaves[lks[0]]
                off = gen.linearize(ridx, ls.dimensions, ls.minor_to_major())
                ptr = ctx.param("output", lks[0], ls, f"out{lks[0]}")
                store_line(gen, ptr, off, v, ls.element_type, "mask")
            if loop:
                gen.pop_scope()
                body.dedent()
                self._unroll(body, header_at, nit)
            if ctx.runs is not None:
                body.lines[hoist_at:hoist_at] = ctx.runs.hoist.lines  # coarse code: before the loop
                ctx.runs = None
            ctx.steps = None

        # fold the TR axis of the accumulators. A row's result stays with the lanes that reduced it: the epilogue
        # runs on OLANES copies of each kept element (one a thread, as XLA's) and the first copy stores. Stored as
        # OBLOCK elements, Triton's coalesced store layout spreads rows over warp 0's lanes and converts the
        # reduced values through shared memory, where XLA's lane 0 of each row's warp stores them directly.
        spread = tr > 1 and tb == 1
        if spread:
            line(f"OLANES: tl.constexpr = ({threads} + OBLOCK - 1) // OBLOCK")
        reduced: list[list[str]] = []
        for (hero, n, red, acc_types, fname, promoted), names in zip(reducers, accs):
            if nit == 0:
                reduced.append([])
                continue
            flat = [a for (a,) in _parts(names)]  # a complex accumulator folds as its two parts
            outs = [ctx.names.fresh(f"red_{hero.name}") for _ in flat]
            if tr > 1:
                tiles3 = [f"tl.reshape({a}, [TA, TR, TB])" for a in flat]
                if nit == 1 and nr < tr:
                    # one step over a row shorter than the tile: lanes past the row hold the loads' `other`, not
                    # values of the row, and a reducer has no identity to put there (an argmax of negative rows
                    # kept 0). A validity flag rides along and the combine keeps the valid side
                    fname = ctx.names.fresh(f"{fname}_valid")  # keeps COMBINE_PREFIX: folded vectorised
                    combine_src += combine_function(ctx, red, n, fname, valid=True,
                                                    order_by=position_operand(red, n)) + [""]
                    tiles3.append("tl.reshape(mask.to(tl.int32), [TA, TR, TB])")
                    outs = outs + [ctx.names.fresh("red_valid")]
                src = tiles3[0] if len(tiles3) == 1 else "(" + ", ".join(tiles3) + ")"
                line(f"{', '.join(outs)}{',' if len(tiles3) > 1 else ''} = tl.reduce({src}, 1, {fname})")
                outs = outs[:len(flat)]
                for o in outs:
                    if spread:
                        line(f"{o} = tl.reshape(tl.broadcast_to({o}[:, None, :], [TA, OLANES, TB]), [OBLOCK * OLANES])")
                    else:
                        line(f"{o} = tl.reshape({o}, [OBLOCK])")
            else:
                for o, a in zip(outs, flat):
                    line(f"{o} = {a}")
            it_outs = iter(outs)
            reduced.append([Cx((next(it_outs), next(it_outs))) if isinstance(a, Cx) else next(it_outs)
                            for a in names])

        # epilogue on the block of reduced values
        oblock = "OBLOCK * OLANES" if spread else "OBLOCK"
        line(f"o = tl.arange(0, {oblock})" + (".to(tl.int64)" if i64 else ""))
        line("oA = pid_a * TA + o // (OLANES * TB)" if spread else "oA = pid_a * TA + o // TB")
        line("oB = pid_b * TB + o % TB")
        first = "((o // TB) % OLANES == 0)"
        checked = f"omask = (oA < NA) & (oB < NB) & {first}" if spread else "omask = (oA < NA) & (oB < NB)"
        if exact:
            whole = f"omask = {first}" if spread else f"omask = {ts.true_mask('[OBLOCK]')}"
            for x in ts.constexpr_branches("EXACT", [whole], [checked]):
                line(x)
        else:
            line(checked)
        line("oA_c = tl.minimum(oA, NA - 1)")
        line("oB_c = tl.minimum(oB, NB - 1)")
        line(f"ozero = tl.full([{oblock}], 0, {idx_t})")
        ctx.zero, ctx.mask, ctx.block_shape = "ozero", "omask", f"[{oblock}]"
        injected: dict[int, Any] = {}
        egen = _EpilogueGenerator(ctx, comp, injected)
        p_out = egen.itensor(view_position(egen, plan.dims, "oA_c", 0, "oB_c"))
        hero_idx: dict[int, tuple] = {}
        for (hero, n, red, acc_types, fname, promoted), outs in zip(reducers, reduced):
            xin = hero.operands[0].shape
            iidx = input_index(egen, xin, plan.dims, "oA_c", 0, "oB_c", p_out)
            rdims = set(int_list(hero.attrs.get("dimensions")))
            hidx = tuple(c for d, c in enumerate(iidx) if d not in rdims)
            hero_idx[id(hero)] = hidx
            inits = [egen.value(i, ()) for i in hero.operands[n:]]
            if promoted:
                inits = [ctx.emit(f"{v}.to(tl.float32)", "up") for v in inits]
            if outs:
                res = egen.call_computation(red, inits + outs)
                res = res if isinstance(res, list) else [res]
            else:
                res = inits
            if promoted:
                et = _leaves(hero.shape)[0].element_type
                res = [ctx.emit(f"{res[0]}.to({ts.tl_dtype(et)})", f"out_{hero.name}")]
            injected[id(hero)] = res if hero.shape.is_tuple else res[0]
        for root, hero, lks in plan.reduction_roots:
            ridx = forward_index(egen, root, hero, hero_idx[id(hero)])
            vals = flatten(egen.value(root, ridx))
            for leaf_no, v in zip(lks, vals):
                ls = leaves[leaf_no]
                off = egen.linearize(ridx, ls.dimensions, ls.minor_to_major())
                ptr = ctx.param("output", leaf_no, ls, f"out{leaf_no}")
                store_line(egen, ptr, off, v, ls.element_type, "omask")
        ctx.zero, ctx.mask, ctx.block_shape = "zero", "mask", "[BLOCK]"
        return combine_src

    def _unroll(self, body: ts.SourceBuilder, header_at: int, nit: int) -> None:
        """Rewrites the step loop whose header is ``body.lines[header_at]``: up to ``unrolled_steps`` steps are
        unrolled as XLA's ``xla-gpu-optimize-loops`` unrolls its per-thread loop (:mod:`fusegen.codegen.loop_unroll`:
        whole up to 4 steps, else by the largest divisor of the step count within its size bound, so a heavy step
        body keeps a loop); more steps stay a runtime loop."""
        if nit > self.unrolled_steps:
            return
        steps = body.lines[header_at + 1:]
        # a step holding a loop of its own is written out as before (XLA's rule would leave it a loop)
        factor = nit if loop_unroll.holds_loop(steps) else loop_unroll.unroll_factor(nit, loop_unroll.body_size(steps))
        loop_unroll.unroll_in_place(body.lines, header_at, "it", "NIT", nit, factor, keep=True)


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
