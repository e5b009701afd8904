"""The body of a reduction kernel: reads and folds of the reduce input, the fold across lanes, the epilogue.

Writes the kernel of XLA's ``ReductionFusion`` (``xla/backends/gpu/codegen/emitters/reduction.cc``) in the
shape :mod:`fusegen_plugins.emitters.reduction` describes: a program owns ``TA`` x ``TB`` kept positions and
steps over the reduced extent ``TR`` elements at a time. :func:`write_body` writes it step by step: the
combine functions, the tile coordinates, the accumulators, the step loop, the fold of the ``TR`` axis and the
epilogue with its stores.
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.codegen import loop_unroll
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import COMPLEX_PARTS, Cx, ElementalGenerator, KernelContext, int_list
from fusegen.codegen.elemental.step_offsets import LoopSteps
from fusegen.codegen.elemental.uniform_runs import UniformRuns
from fusegen.codegen.emitter import store_line
from fusegen.codegen.reduction_codegen import (COMBINE_PREFIX, combine_function, position_operand,
                                               promoted_reducer)
from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen_plugins.emitters._hero_kernel import flatten
from fusegen_plugins.emitters._reduction_index import forward_index, input_index, view_position
from fusegen_plugins.emitters._reduction_plan import ReductionPlan, shape_leaves

#: Names the kernel defines itself; never handed out for HLO instructions.
KERNEL_NAMES = ("EXACT", "pid", "pid_a", "pid_b", "t", "ta", "tr", "tb", "A", "B", "R", "A_c", "A_q", "B_c", "R_c",
                "okab", "it", "o", "oA", "oB", "oA_c", "oB_c", "omask", "ozero", "OBLOCK", "OLANES", "TA", "TR", "TB",
                "NA", "NR", "NB", "NIT", "GB")


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


@attrs.frozen
class _Reducer:
    """One reduction hero as the kernel folds it."""

    hero: Instruction
    n: int  # reduced operands; the inits follow them
    red: Computation  # folded inline: ``to_apply``, or its f32 form
    acc_types: list[str]
    fname: str  # the combine function handed to tl.reduce
    promoted: bool  # f16/bf16 accumulated in f32


def write_body(ctx: KernelContext, comp: Computation, plan: ReductionPlan, leaves: list[Shape],
               tiles: tuple[int, int, int], sizes: tuple[int, int, int], nit: int, idx_t: str, threads: int,
               unrolled_steps: int) -> list[str]:
    """Writes the kernel body into ``ctx.body`` and returns the source of the combine functions it calls.

    ``tiles`` is ``(TA, TR, TB)``, ``sizes`` ``(NA, NR, NB)``, ``nit`` the steps over the reduced extent,
    ``leaves`` the fusion's output leaves; up to ``unrolled_steps`` steps are written out.
    """
    w = _BodyWriter(ctx, comp, plan, leaves, tiles, sizes, nit, idx_t, threads, unrolled_steps)
    reducers = w.reducers()
    exact = w.tile_coordinates()
    gen = ElementalGenerator(ctx, comp)
    accs = w.accumulators(reducers)
    if nit > 0:
        w.step_loop(gen, reducers, accs, exact)
    reduced, spread = w.fold_lanes(reducers, accs)
    w.epilogue(reducers, reduced, exact, spread)
    return w.combine_src


class _BodyWriter:
    """The steps of :func:`write_body`, each writing one part of the kernel into ``ctx.body``."""

    def __init__(self, ctx: KernelContext, comp: Computation, plan: ReductionPlan, leaves: list[Shape],
                 tiles: tuple[int, int, int], sizes: tuple[int, int, int], nit: int, idx_t: str, threads: int,
                 unrolled_steps: int):
        self.ctx, self.comp, self.plan, self.leaves = ctx, comp, plan, leaves
        self.ta, self.tr, self.tb = tiles
        self.na, self.nr, self.nb = sizes
        self.nit, self.idx_t, self.threads, self.unrolled_steps = nit, idx_t, threads, unrolled_steps
        self.i64 = idx_t == "tl.int64"
        self.body = ctx.body
        self.line = ctx.body.line
        self.combine_src: list[str] = []

    def reducers(self) -> list[_Reducer]:
        """Writes each hero's combine function for ``tl.reduce`` (into :attr:`combine_src`); the computation
        folded inline is chosen alongside."""
        ctx = self.ctx
        reducers = []
        for k, hero in enumerate(self.plan.heroes):
            to_apply = hero.attrs["to_apply"]
            n = len(hero.operands) // 2
            promoted = promoted_reducer(to_apply) if n == 1 else None
            red = promoted or to_apply
            acc_types = ["f32"] if promoted else [s.element_type for s in shape_leaves(hero.shape)]
            fname = ctx.names.fresh(f"{COMBINE_PREFIX}{k}_{hero.name}")  # sanitized; keeps the prefix
            # tl.reduce folds interleaved lanes in its own order: the sides go to the reducer in position order
            self.combine_src += combine_function(ctx, red, n, fname, order_by=position_operand(red, n)) + [""]
            reducers.append(_Reducer(hero, n, red, acc_types, fname, promoted is not None))
        return reducers

    def tile_coordinates(self) -> bool:
        """Writes the program's and its lanes' tile coordinates and the kept-position mask ``okab``; returns
        whether the bound checks are the constexpr ``EXACT`` test."""
        line, i64 = self.line, self.i64
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
        exact = self.tb == 1 and self.nit <= max(1, self.unrolled_steps)
        if exact:
            line("EXACT: tl.constexpr = NA % TA == 0 and NB % TB == 0")
            for x in ts.constexpr_branches("EXACT", [f"okab = {ts.true_mask()}"], ["okab = (A < NA) & (B < NB)"]):
                line(x)
        else:
            line("okab = (A < NA) & (B < NB)")
        line("A_c = tl.minimum(A, NA - 1)")
        # the clamp only moves masked lanes: keep the runs' contiguity for Triton's vectoriser (XLA's
        # vectorised loads along the minor dimension)
        line("B_c = tl.max_contiguous(tl.multiple_of(tl.minimum(B, NB - 1), TB), TB)" if self.tb > 1
             else "B_c = tl.minimum(B, NB - 1)")
        line(f"zero = tl.full([BLOCK], 0, {self.idx_t})")
        self.ctx.zero, self.ctx.mask = "zero", "mask"
        return exact

    def accumulators(self, reducers: list[_Reducer]) -> list[list[Any]]:
        """Writes the per-lane accumulators of each reducer (a complex one as a re/im pair); returns their names."""
        ctx, line = self.ctx, self.line
        accs: list[list[Any]] = []
        for r in reducers:
            names = []
            for et in r.acc_types:
                if et in COMPLEX_PARTS:
                    pair = Cx((ctx.names.fresh(f"acc_{r.hero.name}_re"), ctx.names.fresh(f"acc_{r.hero.name}_im")))
                    for v in pair:
                        line(f"{v} = tl.full([BLOCK], 0, {ts.tl_dtype(COMPLEX_PARTS[et])})")
                    names.append(pair)
                    continue
                v = ctx.names.fresh(f"acc_{r.hero.name}")
                names.append(v)
                if et == "pred":
                    line(f"{v} = tl.full([BLOCK], 0, tl.int8) != 0")
                else:
                    line(f"{v} = tl.full([BLOCK], 0, {ts.tl_dtype(et)})")
            accs.append(names)
        return accs

    def step_loop(self, gen: ElementalGenerator, reducers: list[_Reducer], accs: list[list[Any]],
                  exact: bool) -> None:
        """Writes the steps over the reduced extent: each reads a ``[TA, TR, TB]`` tile of the reduce inputs, folds
        it into the accumulators and stores the side outputs; one step is straight-line, more a loop that
        :func:`_unroll` writes out up to ``unrolled_steps``."""
        ctx, body, line = self.ctx, self.body, self.line
        plan, tr, nit = self.plan, self.tr, self.nit
        loop = nit > 1
        hoist_at = len(body.lines)
        if self.tb == 1 and tr > 1:
            # an operand read at the kept row only (a broadcast row scale) is loaded once per row, before
            # the loop (UniformRuns): one load a thread, as XLA's row reduction loads it
            hoist = ts.SourceBuilder()
            hoist.level = body.level
            hoist.line("A_q = tl.minimum(pid_a * TA + tl.arange(0, TA)" + (".to(tl.int64)" if self.i64 else "") +
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
        line("mask = okab" if self.nr % tr == 0 and exact else "mask = okab & (R < NR)")
        # no clamp: lanes past the reduced extent are masked on every load, store and accumulation, and an
        # unclamped R keeps each step's addresses one base plus constants (XLA's immediate offsets)
        line("R_c = R")
        p = view_position(gen, plan.dims, "A_c", "R_c", "B_c")
        p = gen.itensor(p)
        for r, names in zip(reducers, accs):
            xin = r.hero.operands[0].shape
            idx = input_index(gen, xin, plan.dims, "A_c", "R_c", "B_c", p)
            xs = [gen.value(x, idx) for x in r.hero.operands[:r.n]]
            if r.promoted:
                xs = [ctx.emit(f"{x}.to(tl.float32)", "up") for x in xs]
            if loop:
                res = gen.call_computation(r.red, list(names) + xs)
                res = res if isinstance(res, list) else [res]
                for a, x, v in _parts(names, xs, res):
                    line(f"{a} = tl.where(it == 0, {x}, tl.where(mask, {v}, {a}))")
            else:
                for a, x in _parts(names, xs):
                    line(f"{a} = {x}")
        self.side_outputs(gen, p)
        if loop:
            gen.pop_scope()
            body.dedent()
            _unroll(body, header_at, nit, self.unrolled_steps)
        if ctx.runs is not None:
            body.lines[hoist_at:hoist_at] = ctx.runs.hoist.lines  # coarse code: before the loop
            ctx.runs = None
        ctx.steps = None

    def side_outputs(self, gen: ElementalGenerator, p: Any) -> None:
        """Writes the stores of the side outputs (roots as large as the reduce input) from the step's tile at
        input position ``p``."""
        ctx, plan = self.ctx, self.plan
        for root, lks in plan.side_roots:
            xin = plan.first.operands[0].shape
            if tuple(root.shape.dimensions) == tuple(xin.dimensions):
                ridx = gen.delinearize(p, xin.dimensions, xin.minor_to_major())
            else:  # equal element count: XLA's bitcast map from the reduce input
                ridx = gen.delinearize(p, root.shape.dimensions, root.shape.minor_to_major())
            v = gen.value(root, ridx)
            ls = self.leaves[lks[0]]
            off = gen.linearize(ridx, ls.dimensions, ls.minor_to_major())
            ptr = ctx.param("output", lks[0], ls, f"out{lks[0]}")
            store_line(gen, ptr, off, v, ls.element_type, "mask")

    def fold_lanes(self, reducers: list[_Reducer], accs: list[list[Any]]) -> tuple[list[list[Any]], bool]:
        """Writes the fold of the accumulators' ``TR`` axis (``tl.reduce`` with the combine functions: the
        cross-thread reduction); returns each reducer's reduced values and whether rows are spread over
        ``OLANES`` copies."""
        ctx, line, tr, nit = self.ctx, self.line, self.tr, self.nit
        # A row's result stays with the lanes that reduced it: the epilogue runs on OLANES copies of each kept
        # element (one a thread, as XLA's) and the first copy stores. Stored as OBLOCK elements, Triton's
        # coalesced store layout spreads rows over warp 0's lanes and converts the reduced values through
        # shared memory, where XLA's lane 0 of each row's warp stores them directly.
        spread = tr > 1 and self.tb == 1
        if spread:
            line(f"OLANES: tl.constexpr = ({self.threads} + OBLOCK - 1) // OBLOCK")
        reduced: list[list[Any]] = []
        for r, names in zip(reducers, accs):
            if nit == 0:
                reduced.append([])
                continue
            flat = [a for (a,) in _parts(names)]  # a complex accumulator folds as its two parts
            outs = [ctx.names.fresh(f"red_{r.hero.name}") for _ in flat]
            if tr > 1:
                tiles3 = [f"tl.reshape({a}, [TA, TR, TB])" for a in flat]
                fname = r.fname
                if nit == 1 and self.nr < tr:
                    # one step over a row shorter than the tile: lanes past the row hold the loads' `other`, not
                    # values of the row, and a reducer has no identity to put there (an argmax of negative rows
                    # kept 0). A validity flag rides along and the combine keeps the valid side
                    fname = ctx.names.fresh(f"{fname}_valid")  # keeps COMBINE_PREFIX: folded vectorised
                    self.combine_src += combine_function(ctx, r.red, r.n, fname, valid=True,
                                                         order_by=position_operand(r.red, r.n)) + [""]
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
        return reduced, spread

    def epilogue(self, reducers: list[_Reducer], reduced: list[list[Any]], exact: bool, spread: bool) -> None:
        """Writes the output coordinates, the fold of each reduce's ``init`` into its reduced values (once), the
        epilogue from each hero to its roots and the stores, masked to the first of the ``OLANES`` copies."""
        ctx, line = self.ctx, self.line
        oblock = "OBLOCK * OLANES" if spread else "OBLOCK"
        line(f"o = tl.arange(0, {oblock})" + (".to(tl.int64)" if self.i64 else ""))
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
        line(f"ozero = tl.full([{oblock}], 0, {self.idx_t})")
        ctx.zero, ctx.mask, ctx.block_shape = "ozero", "omask", f"[{oblock}]"
        plan = self.plan
        injected: dict[int, Any] = {}
        egen = _EpilogueGenerator(ctx, self.comp, injected)
        p_out = egen.itensor(view_position(egen, plan.dims, "oA_c", 0, "oB_c"))
        hero_idx: dict[int, tuple] = {}
        for r, outs in zip(reducers, reduced):
            hero = r.hero
            xin = hero.operands[0].shape
            iidx = input_index(egen, xin, plan.dims, "oA_c", 0, "oB_c", p_out)
            rdims = set(int_list(hero.attrs.get("dimensions")))
            hidx = tuple(c for d, c in enumerate(iidx) if d not in rdims)
            hero_idx[id(hero)] = hidx
            inits = [egen.value(i, ()) for i in hero.operands[r.n:]]
            if r.promoted:
                inits = [ctx.emit(f"{v}.to(tl.float32)", "up") for v in inits]
            if outs:
                res = egen.call_computation(r.red, inits + outs)
                res = res if isinstance(res, list) else [res]
            else:
                res = inits
            if r.promoted:
                et = shape_leaves(hero.shape)[0].element_type
                res = [ctx.emit(f"{res[0]}.to({ts.tl_dtype(et)})", f"out_{hero.name}")]
            injected[id(hero)] = res if hero.shape.is_tuple else res[0]
        for root, hero, lks in plan.reduction_roots:
            ridx = forward_index(egen, root, hero, hero_idx[id(hero)])
            vals = flatten(egen.value(root, ridx))
            for leaf_no, v in zip(lks, vals):
                ls = self.leaves[leaf_no]
                off = egen.linearize(ridx, ls.dimensions, ls.minor_to_major())
                ptr = ctx.param("output", leaf_no, ls, f"out{leaf_no}")
                store_line(egen, ptr, off, v, ls.element_type, "omask")
        ctx.zero, ctx.mask, ctx.block_shape = "zero", "mask", "[BLOCK]"


def _unroll(body: ts.SourceBuilder, header_at: int, nit: int, unrolled_steps: int) -> None:
    """Rewrites the step loop whose header is ``body.lines[header_at]``: up to ``unrolled_steps`` steps are
    unrolled as XLA's ``xla-gpu-optimize-loops`` unrolls its per-thread loop (:mod:`fusegen.codegen.loop_unroll`:
    whole up to 4 steps, else by the largest divisor of the step count within its size bound, so a heavy step
    body keeps a loop); more steps stay a runtime loop."""
    if nit > unrolled_steps:
        return
    steps = body.lines[header_at + 1:]
    # a step holding a loop of its own is written out as before (XLA's rule would leave it a loop)
    factor = nit if loop_unroll.holds_loop(steps) else loop_unroll.unroll_factor(nit, loop_unroll.body_size(steps))
    loop_unroll.unroll_in_place(body.lines, header_at, "it", "NIT", nit, factor, keep=True)
