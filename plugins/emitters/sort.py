"""The sort emitter: a bitonic sorting network per row, with the HLO comparator, as one Triton kernel.

Mirrors XLA's ``SortFusion`` (``xla/backends/gpu/codegen/sort.h``; the network follows XLA's sort thunks,
``xla/service/gpu/ir_emitter_unnested.cc`` ``EmitSortFusion`` / ``EmitSortingNetwork``): the sorted dimension
is padded to the next power of two ``NPAD`` and sorted by a bitonic network of ``log2(NPAD) * (log2(NPAD)+1) / 2``
compare-exchange steps.

* A program holds ``rows_per_program`` whole rows (``BLOCK = rows_per_program * NPAD``, rows never mix:
  partners ``i ^ j`` with ``j < NPAD`` stay in the row, and the last merge is forced ascending per row). Rows of
  at most 4 elements, which XLA gives one thread each, are packed 32 a warp so that a lane holds its row
  (:meth:`SortFusion.row_per_thread`); longer rows run one a program on XLA's launch.
* Key-value sorts: all operands travel together; the comparator computation (``to_apply``, parameters
  ``lhs0, rhs0, lhs1, rhs1, ...``) is emitted elementally on whole tensors, called on ``(L, R)`` and ``(R, L)``.
* Ties (neither element before the other) are broken by the original position, so the result is the stable
  order (``is_stable=true``; for ``is_stable=false`` the stable order is one of the allowed results, and the
  tie-break costs nothing extra since both comparator calls are needed anyway).
* Padding lanes (position ``>= NSORT``, the sorted dimension's size) sort after every real element whatever the comparator says.
* A value's partner is fetched by viewing the row as ``[.., 2, j]`` and swapping the halves (``tl.split`` /
  ``tl.join``) on integer bit patterns, so NaNs and -0.0 survive the exchange unchanged.

Operands may be computed in the fusion (``iota``, converts...): they are produced by the elemental generator
at each lane's index. Sorted dimensions padding to more than :data:`MAX_SORT_SIZE` are sorted as XLA does, by
several launches over the output buffers (:mod:`fusegen_plugins.emitters.sort_scale`), any length.
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.pow2 import next_pow2
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, KernelContext, choose_index_dtype, deep_recursion, int_list
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, fusion_roots, store_line
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.codegen.launch import sort_launches
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters.sort_scale import compare_both, emit_at_scale

#: Largest padded sort dimension one program sorts with the unrolled register network. Its sm_90 compile
#: time grows with the network (JAX's comparator, 2 shared cores: ~4 s at 32, ~8 s at 64, ~17 s at 128,
#: ~45 s at 1024), so longer rows take XLA's multi-launch sort (:mod:`fusegen_plugins.emitters.sort_scale`),
#: whose kernels compare packed keys where the comparator is a key order (one gather per step).
MAX_SORT_SIZE = 32
#: Longest padded row XLA's sort gives one thread (its tile's threads, ``NPAD / 4``, round up to one): such
#: rows are packed a row a lane (:meth:`SortFusion.row_per_thread`).
ROW_PER_THREAD_MAX = 4
#: Elements per program the row batching aims for.
TARGET_BLOCK = 1024



def _partner(ctx: KernelContext, x: str, j: int) -> str:
    """``x[i ^ j]`` for every lane ``i`` (``j`` a power of two below ``BLOCK``): view the lanes as
    ``[BLOCK / 2j, 2, j]`` and swap the two halves (builtins only, so the interpreter runs it too)."""
    y = ctx.emit(f"tl.permute(tl.reshape({x}, [BLOCK // {2 * j}, 2, {j}]), (0, 2, 1))", "py")
    lo, hi = ctx.names.fresh("plo"), ctx.names.fresh("phi")
    ctx.body.line(f"{lo}, {hi} = tl.split({y})")
    return ctx.emit(f"tl.reshape(tl.permute(tl.join({hi}, {lo}), (0, 2, 1)), [BLOCK])", "pc")


def _to_carrier(ctx: KernelContext, v: str, et: str) -> str:
    """``v`` as a 32/64-bit integer tensor holding its bit pattern (the partner exchange works on these)."""
    bits = 1 if et == "pred" else dtypes.bit_width(et)
    if et == "pred":
        return ctx.emit(f"{v}.to(tl.int32)", "cr")
    if dtypes.is_floating(et):
        it = {16: "tl.int16", 32: "tl.int32", 64: "tl.int64"}[bits]
        c = ctx.emit(f"{v}.to({it}, bitcast=True)", "cr")
        return ctx.emit(f"{c}.to(tl.int32)", "cr") if bits == 16 else c
    if bits == 64:
        return ctx.emit(f"{v}.to(tl.int64, bitcast=True)", "cr") if dtypes.is_unsigned_int(et) else v
    if bits == 32:
        return ctx.emit(f"{v}.to(tl.int32, bitcast=True)", "cr") if dtypes.is_unsigned_int(et) else v
    return ctx.emit(f"{v}.to(tl.int32)", "cr")


def _from_carrier(ctx: KernelContext, c: str, et: str) -> str:
    """Inverse of :func:`_to_carrier`."""
    bits = 1 if et == "pred" else dtypes.bit_width(et)
    t = ts.tl_dtype(et)
    if et == "pred":
        return ctx.emit(f"{c} != 0", "cv")
    if dtypes.is_floating(et):
        if bits == 16:
            return ctx.emit(f"{c}.to(tl.int16).to({t}, bitcast=True)", "cv")
        return ctx.emit(f"{c}.to({t}, bitcast=True)", "cv")
    if bits in (32, 64):
        return ctx.emit(f"{c}.to({t}, bitcast=True)", "cv") if dtypes.is_unsigned_int(et) else c
    return ctx.emit(f"{c}.to({t})", "cv")


class SortFusion(FusionEmitter):
    """Sort emitter for ``kSort`` fusions (and any fusion whose outputs are a sort's results).

    Attributes:
        sort: the sort instruction; ``leaf_operand``: output leaf -> sorted operand number.
    """

    name = "SortFusion"

    def __init__(self, analysis: Any):
        super().__init__(analysis)
        self.error: EmitterUnsupported | None = None
        try:
            self._describe()
        except EmitterUnsupported as e:  # reported by emit(), so the fallback names the reason
            self.error = e

    def _describe(self) -> None:
        sort, leaf_operand = _sort_outputs(self.computation)
        if sort is None:
            raise EmitterUnsupported("fusion", self.fusion.name, "the outputs of a sort fusion must be sort results")
        self.sort = sort
        self.leaf_operand = leaf_operand
        comp = sort.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported("sort", sort.name, "sort without a comparator computation")
        self.comparator = comp
        shape0 = sort.operands[0].shape
        dims = int_list(sort.attrs.get("dimensions")) or (shape0.rank - 1,)
        self.dim = dims[0]
        self.n = shape0.dimensions[self.dim] if shape0.rank else 1
        self.npad = next_pow2(self.n)
        self.rows = shape0.numel // max(1, self.n)
        self.is_stable = str(sort.attrs.get("is_stable", "false")).lower() == "true"

    def xla_launches(self) -> list[LaunchDimensions]:
        """XLA's launches for this sort (``EmitBitonicSortLLVMIR``, :func:`fusegen.codegen.launch.sort_launches`)."""
        bits = [1 if o.shape.element_type == "pred" else dtypes.bit_width(o.shape.element_type) for o in self.sort.operands]
        return sort_launches(self.sort.operands[0].shape, self.dim, bits, self.analysis.device)

    def launch_dimensions(self) -> LaunchDimensions | None:
        """XLA's first sort kernel's launch: one block per row, ``NPAD / 4`` threads (the kernel's, too)."""
        if self.error is not None:
            return None
        launches = self.xla_launches()
        return launches[0] if launches else None

    def row_per_thread(self, xla: LaunchDimensions | None) -> tuple[int, int] | None:
        """``(rows_per_program, num_warps)`` when XLA gives each row one thread (a padded row of at most
        :data:`ROW_PER_THREAD_MAX` elements: its tiled kernel's ``NPAD / 4`` threads round up to one, and a
        two-element row takes the standard launch, a thread a row) and every row is contiguous in memory, else
        ``None``.

        Triton gives a thread several elements only when the program holds that many per thread
        (``CoalesceUtils.cpp`` ``buildCoalescedEncoding`` caps a thread's elements at the block over its threads),
        so a one-row program of 1 warp spreads a 4-element row over 4 lanes: scalar loads, and the exchange
        through shuffles. Packing ``32 * num_warps`` rows into a program gives each lane its row, as XLA's thread
        has it: one vector load per operand, the network in registers. ``num_warps`` is XLA's block in warps
        (1 where the block is one thread), so the threads launched are XLA's, in whole warps.
        """
        if xla is None or self.npad > ROW_PER_THREAD_MAX or self.n != self.npad or self.rows < 2:
            return None
        layouts = [o.shape for o in self.sort.operands] + list(self.fusion.shape.leaves())
        if any(s.rank == 0 or s.minor_to_major()[0] != self.dim for s in layouts):
            return None  # a row strided in memory: no vector to read
        block = xla.threads3[0] * xla.threads3[1] * xla.threads3[2]
        warps = max(1, min(8, block // 32))
        return 32 * warps, warps

    def launch_plan(self) -> tuple[int, int, int]:
        """``(rows_per_program, BLOCK, programs)`` of the interpreter's variant (rows batched per program)."""
        r = 1
        while r * 2 * self.npad <= TARGET_BLOCK and r * 2 <= next_pow2(self.rows):
            r *= 2
        block = max(r * self.npad, 2)
        return r, block, max(1, -(-self.rows // r))

    def emit(self) -> EmittedFusion:
        if self.error is not None:
            raise self.error
        sort = self.sort
        leaves = self.fusion.shape.leaves()
        if len(leaves) != len(self.leaf_operand):
            raise EmitterUnsupported("fusion", self.fusion.name, "output leaves do not match the sort results")
        for o in sort.operands:
            try:
                ts.tl_dtype(o.shape.element_type)
            except dtypes.UnsupportedTypeError:
                raise EmitterUnsupported("sort", sort.name, f"element type {o.shape.element_type} has no Triton type") from None
        if self.rows == 0 or self.n == 0:
            return EmittedFusion(emitter=self.name)
        if self.npad > MAX_SORT_SIZE:  # XLA's multi-launch sort over the output buffers
            return emit_at_scale(self)
        r, block, programs = self.launch_plan()
        fusion = self.fusion
        op_shapes = [o.shape for o in fusion.operands]
        idx_t = choose_index_dtype(op_shapes + [fusion.shape], block)
        ctx = KernelContext(idx_t, op_shapes)
        for nm in ("lane", "loc", "row", "mask", "zero", "ix", "BLOCK", "J", "K", "asc", "left", "NSORT", "R", "ROWS", "NPAD"):
            ctx.names.reserve(nm)
        gen = ElementalGenerator(ctx, self.computation)
        shape0 = sort.operands[0].shape
        other = [d for d in range(shape0.rank) if d != self.dim]
        other_dims = tuple(shape0.dimensions[d] for d in other)
        ets = [o.shape.element_type for o in sort.operands]
        m = len(sort.operands)
        logn = self.npad.bit_length() - 1
        with deep_recursion():
            row_c = gen.iexpr(f"tl.minimum(row, {max(self.rows - 1, 0)})", "row_c")
            # the clamp only moves padding lanes: keep the row's contiguity for Triton's vectoriser
            loc_c = gen.iexpr(f"tl.max_contiguous(tl.multiple_of(tl.minimum(loc, {self.n - 1}), NPAD), NPAD)", "loc_c")
            rm = gen.delinearize(row_c, other_dims, tuple(range(len(other_dims) - 1, -1, -1)))
            idx: list[Any] = [0] * shape0.rank
            for k, d in enumerate(other):
                idx[d] = rm[k]
            if shape0.rank:
                idx[self.dim] = loc_c
            idx_t_ = tuple(idx)
            carriers = []
            for k, o in enumerate(sort.operands):
                v = gen.value(o, idx_t_)
                c = _to_carrier(ctx, v, ets[k])
                name = ctx.names.fresh(f"c{k}")
                ctx.body.line(f"{name} = {c}")
                carriers.append(name)
            ctx.body.line("ix = loc.to(tl.int32)")
            # the network is unrolled in the source: J and K are literals in every step (Triton's interpreter and
            # compiler disagree on constexprs computed inside tl.static_range loops)
            for kk in range(1, logn + 1):
                for jj in range(kk):
                    gen.push_scope()
                    try:
                        self._step(gen, 1 << (kk - 1 - jj), 1 << kk, carriers, ets)
                    finally:
                        gen.pop_scope()
            for leaf_no, k in enumerate(self.leaf_operand):
                ls = leaves[leaf_no]
                v = _from_carrier(ctx, carriers[k], ets[k])
                off = gen.linearize(idx_t_, ls.dimensions, ls.minor_to_major()) if ls.rank else 0
                ptr = ctx.param("output", leaf_no, ls, f"out{leaf_no}")
                store_line(gen, ptr, off, v, ls.element_type, ctx.mask)
        entry = ts.sanitize_identifier(f"sort_{fusion.name}", "k")
        prologue = ["lane = tl.arange(0, BLOCK)", "loc = lane % NPAD",
                    f"row = (tl.program_id(0) * R + lane // NPAD).to({idx_t})",
                    "mask = (loc < NSORT) & (row < ROWS)", f"zero = tl.full([BLOCK], 0, {idx_t})"]
        source = ctx.render(entry, ["BLOCK", "NPAD", "NSORT", "R", "ROWS"], prologue)
        # the partner exchange (reshape/permute/split) goes through shared memory: one carrier per lane
        carrier_bytes = max(8 if (et != "pred" and dtypes.bit_width(et) == 64) else 4 for et in ets)
        constexprs = {"NPAD": self.npad, "NSORT": self.n, "ROWS": self.rows}
        variant = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                               constexprs={"BLOCK": block, "R": r, **constexprs},
                               launch=LaunchDimensions(grid=(programs,), num_warps=max(1, min(8, block // 256))),
                               num_stages=1)
        # XLA's tiled sort kernel: one block per row (the padded row is one tile), NPAD / 4 threads
        xla = self.launch_dimensions()
        packed = self.row_per_thread(xla)
        if packed is not None:
            rows_per_program, warps = packed
            grid = -(-self.rows // rows_per_program)
            ks = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                              constexprs={"BLOCK": rows_per_program * self.npad, "R": rows_per_program, **constexprs},
                              launch=LaunchDimensions(grid=(grid,), num_warps=warps), num_stages=1,
                              interpret_variant=variant if programs < grid else None)
        elif xla is not None and xla.grid3 == (self.rows, 1, 1):
            launch = attrs.evolve(xla, shared_memory_bytes=self.npad * carrier_bytes)
            ks = KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                              constexprs={"BLOCK": max(self.npad, 2), "R": 1, **constexprs}, launch=launch,
                              num_stages=1, interpret_variant=variant if programs < self.rows else None)
        else:  # XLA would tile the row (too many operand bytes for one shared tile): keep batched rows
            ks = attrs.evolve(variant, launch=attrs.evolve(variant.launch, shared_memory_bytes=block * carrier_bytes))
        return EmittedFusion(emitter=self.name, kernels=(ks,))

    def _step(self, gen: ElementalGenerator, j: int, k: int, carriers: list[str], ets: list[str]) -> None:
        """One compare-exchange step of the bitonic network: merge stage ``k``, partner distance ``j``."""
        ctx = gen.ctx
        ctx.body.line(f"# step k={k} j={j}")
        ctx.body.line(f"asc = (loc & {k}) == 0")
        ctx.body.line(f"left = (loc & {j}) == 0")
        partners = [_partner(ctx, c, j) for c in carriers]
        pix = _partner(ctx, "ix", j)
        lvals, rvals = [], []
        for c, p, et in zip(carriers, partners, ets):
            a = _from_carrier(ctx, c, et)
            b = _from_carrier(ctx, p, et)
            lvals.append(ctx.emit(f"tl.where(left, {a}, {b})", "lv"))
            rvals.append(ctx.emit(f"tl.where(left, {b}, {a})", "rv"))
        lix = ctx.emit(f"tl.where(left, ix, {pix})", "lix")
        rix = ctx.emit(f"tl.where(left, {pix}, ix)", "rix")
        less_lr, less_rl = compare_both(gen, self.sort, self.comparator, lvals, rvals)
        pad = ctx.emit(f"({lix} >= NSORT) | ({rix} >= NSORT)", "pad")
        r_first = ctx.emit(f"tl.where({pad}, {rix} < {lix}, {less_rl} | (({less_lr} ^ True) & ({rix} < {lix})))", "rf")
        l_first = ctx.emit(f"tl.where({pad}, {lix} < {rix}, {less_lr} | (({less_rl} ^ True) & ({lix} < {rix})))", "lf")
        swap = ctx.emit(f"tl.where(asc, {r_first}, {l_first})", "swap")
        for c, p in zip(carriers, partners):
            ctx.body.line(f"{c} = tl.where({swap}, {p}, {c})")
        ctx.body.line(f"ix = tl.where({swap}, {pix}, ix)")


def _sort_outputs(comp: Computation) -> tuple[Instruction | None, list[int]]:
    """The sort whose results the fusion outputs, and output leaf -> sort result number."""
    try:
        roots = fusion_roots(comp)
    except EmitterUnsupported:
        return None, []
    sort: Instruction | None = None
    mapping: list[int] = []
    for r in roots:
        if r.opcode == "sort":
            s, ks = r, list(range(len(r.operands)))
        elif r.opcode == "get-tuple-element" and r.operands and r.operands[0].opcode == "sort":
            s, ks = r.operands[0], [int(r.attrs.get("index", 0))]
        else:
            return None, []
        if sort is not None and s is not sort:
            return None, []
        sort = s
        mapping += ks
    return sort, mapping


def _create(analysis: Any, context: Any = None) -> SortFusion | None:
    comp = getattr(analysis, "computation", None) or analysis.fusion.fused_computation
    sort, _ = _sort_outputs(comp)
    if sort is None:
        return None
    return SortFusion(analysis)


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="sort", kind="kSort", rank=100, create=_create)]
