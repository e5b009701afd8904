"""Sorts longer than one program's registers: XLA's multi-launch bitonic sort over the output buffers.

Mirrors ``EmitBitonicSortLLVMIR`` (``xla/service/gpu/llvm_gpu_backend`` / ``xla/service/llvm_ir/sort_util.cc``,
launched by ``IrEmitterUnnested::EmitSortFusion`` / ``BuildKernelThunkForSort``): the padded sorted dimension
``NPAD`` is sorted by the "flip" bitonic network: stage ``s`` compares ``i`` with ``i ^ (2**(s+1) - 1)``, then
with ``i ^ 2**m`` for ``m = s-1 .. 0``, always putting the smaller element at the lower position. Consecutive
steps whose partner stays inside one tile of ``TILE`` elements (:func:`fusegen.codegen.launch.sort_tile_size`)
are one launch of the *tiled* kernel, every other step one launch of the *global* kernel; all launches update
the same buffers in place:

* launch 0 (preparation, XLA's operand copies): the elemental generator produces every sorted operand into
  its buffer (the output leaf, or a scratch buffer for operands the fusion does not output) and the original
  position into the ``s32`` scratch buffer 0 (the stable tie-break), unless an operand is an integer ``iota``
  along the sorted dimension (JAX's argsort), which already holds it;
* then :class:`~fusegen.codegen.kernel.KernelSource` s of one Triton source taking the runtime scalars
  ``(S0, S1, MTOP, MBOT)`` (several launches each, ``scalar_launches``): for each stage ``s`` in ``[S0, S1]``,
  the steps ``m`` from ``min(s, MTOP)`` down to ``MBOT``; the tiled instance (one program per tile, XLA's
  first sort kernel and launch) works on its tile in global memory with ``tl.debug_barrier`` between steps
  (XLA stages the tile in shared memory), the global instance runs one step per launch.

The network is a runtime loop, so the kernels compile in about a second for any length. In Triton's
interpreter the tiled kernel runs as a variant holding whole tiles of many rows in one program (partners
fetched with ``tl.gather``, one load and one store per launch) and the global one, where a padded row fits
the interpreter's block, as the same variant over whole rows (a stage's consecutive global steps then are
one interpreted launch), else with wide programs.

Positions ``>= NSORT`` are virtual padding that sorts last: a pair whose upper position is padding is left as
it is. Ties (neither element before the other) are broken by the original position (the stable order).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, KernelContext, deep_recursion
from fusegen.codegen.emitter import EmitterUnsupported, store_line
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.codegen.launch import sort_launches, sort_tile_size
from fusegen.hlo import dtypes
from fusegen.hlo.layout_util import physical_strides

#: Elements per program of the preparation kernel.
INIT_BLOCK = 1024
#: Pairs per program of the global compare-exchange kernel.
GLOBAL_BLOCK = 1024
#: Largest pairs per program of the interpreter variants (the interpreter's cost is per program and step).
INTERPRET_BLOCK = 1 << 19


def _pow2_floor(x: int) -> int:
    return 1 << (max(1, x).bit_length() - 1)


def _offset(base: str, pos: str, stride: int) -> str:
    """``base + pos * stride`` without the trivial parts."""
    term = pos if stride == 1 else f"{pos} * {stride}"
    return f"{base} + {term}" if base else term


def compare_both(gen: ElementalGenerator, sort: Any, comparator: Any, xs: list[str], ys: list[str]) -> tuple[str, str]:
    """The comparator on ``(x, y)`` and on ``(y, x)`` (parameters ``lhs0, rhs0, lhs1, rhs1, ...``), emitted
    elementally on whole tensors: ``(x before y, y before x)``.

    Raises:
        EmitterUnsupported: the comparator returns a tuple.
    """
    args_xy, args_yx = [], []
    for x, y in zip(xs, ys):
        args_xy += [x, y]
        args_yx += [y, x]
    less_xy = gen.call_computation(comparator, args_xy)
    less_yx = gen.call_computation(comparator, args_yx)
    if isinstance(less_xy, (list, tuple)):
        raise EmitterUnsupported("sort", sort.name, "comparator returns a tuple")
    return less_xy, less_yx


def launch_schedule(stages: int, tile: int) -> list[tuple[str, tuple[int, int, int, int]]]:
    """XLA's launches for a ``2**stages`` padded sort with ``tile``: ``("tile" | "global", (S0, S1, MTOP, MBOT))``
    in order (the grouping of ``EmitBitonicSortLLVMIR``: consecutive xor masks below the tile share a launch)."""
    big = 1 << 30
    out: list[tuple[str, tuple[int, int, int, int]]] = []
    group: list[tuple[int, int]] = []

    def flush() -> None:
        if not group:
            return
        s0, s1 = group[0][0], group[-1][0]
        if s0 == s1:
            out.append(("tile", (s0, s0, group[0][1], group[-1][1])))
        else:  # the first group: every step of stages s0..s1
            assert group[0] == (0, 0) and group[-1][1] == 0 and len(group) == (s1 + 1) * (s1 + 2) // 2
            out.append(("tile", (s0, s1, big, 0)))
        group.clear()

    for s in range(stages):
        for m in range(s, -1, -1):
            xor = (1 << (s + 1)) - 1 if m == s else 1 << m
            if xor >= tile:
                flush()
                out.append(("global", (s, s, m, m)))
            else:
                group.append((s, m))
    flush()
    return out


def merge_launches(launches: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
    """Consecutive single-stage launches ``(s, s, MTOP, MBOT)`` whose steps follow each other (one's
    ``MBOT - 1`` the next one's ``MTOP``) as one launch: the same steps in the same order, for a kernel
    whose every partner lies in its program (the interpreter variant over whole rows)."""
    out: list[tuple[int, int, int, int]] = []
    for la in launches:
        if out and out[-1][0] == out[-1][1] == la[0] == la[1] and la[2] == out[-1][3] - 1:
            out[-1] = (la[0], la[1], out[-1][2], la[3])
        else:
            out.append(tuple(la))
    return out


def tiled_launch_dims(em: Any, shape0: Any, bits: list[int], tile: int, rounded: int) -> LaunchDimensions:
    """The tiled kernel's launch (one program per ``tile`` of a row padded to ``rounded``), XLA's own
    (:func:`fusegen.codegen.launch.sort_launches`, ``BuildKernelThunkForSort``) where grid and threads agree."""
    xla = sort_launches(shape0, em.dim, bits, em.analysis.device)
    dims = LaunchDimensions(grid=(em.rows * rounded // tile,), num_warps=max(1, min(32, tile // 128)),
                            threads=(max(1, tile // 4), 1, 1))
    if xla and xla[0].grid3 == dims.grid3 and xla[0].threads3 == dims.threads3:
        dims = attrs.evolve(xla[0], num_warps=dims.num_warps)
    return dims


def schedule_kernels(stages: int, tile: int, instance: Any) -> list[KernelSource]:
    """One kernel per run of consecutive same-kind launches of :func:`launch_schedule`: ``instance(kind,
    launches)`` builds it."""
    kernels: list[KernelSource] = []
    run: list[tuple[int, int, int, int]] = []
    kind_now = ""
    for kind, args in launch_schedule(stages, tile):
        if kind != kind_now and run:
            kernels.append(instance(kind_now, run))
            run = []
        kind_now = kind
        run.append(args)
    if run:
        kernels.append(instance(kind_now, run))
    return kernels


def emit_at_scale(em: Any, packed_keys: bool = True) -> EmittedFusion:
    """The multi-launch sort of ``em`` (a :class:`fusegen_plugins.emitters.sort.SortFusion` whose padded
    dimension exceeds one program): a preparation kernel, then tiled and global bitonic launches. Where the
    comparator is a key order that packs into one ``s64`` (:func:`fusegen_plugins.emitters.sort_keys.key_packing`)
    the launches move packed keys (:func:`~fusegen_plugins.emitters.sort_keys.emit_keyed`), unless
    ``packed_keys`` is false (the comparator network, for tests comparing the two).

    Raises:
        EmitterUnsupported: an operand is output by two leaves, or the comparator returns a tuple.
    """
    from fusegen_plugins.emitters.sort_keys import emit_keyed, key_packing

    sort, fusion = em.sort, em.fusion
    if packed_keys:
        packing = key_packing(em.comparator, sort.operands, em.n, _position_operand(sort, em.dim))
        if packing is not None:
            return emit_keyed(em, packing)
    leaves = fusion.shape.leaves()
    shape0 = sort.operands[0].shape
    ets = [o.shape.element_type for o in sort.operands]
    if len(set(em.leaf_operand)) != len(em.leaf_operand):
        raise EmitterUnsupported("sort", sort.name, "a sort result is output twice (the multi-launch sort "
                                 "sorts each result in one buffer)")
    # the buffer each operand is sorted in: its output leaf, else a scratch buffer; scratch 0: positions
    bufs: list[tuple[str, int, Any]] = []
    for k, o in enumerate(sort.operands):
        if k in em.leaf_operand:
            leaf_no = em.leaf_operand.index(k)
            bufs.append(("output", leaf_no, leaves[leaf_no]))
        else:
            bufs.append(("scratch", k + 1, o.shape))
    pos = _position_operand(sort, em.dim)
    if pos is None:
        bufs.append(("scratch", 0, attrs.evolve(shape0, element_type="s32")))
        ets_all = ets + ["s32"]
    else:  # an iota along the sorted dimension already holds every element's original position
        ets_all = list(ets)
    bits = [1 if et == "pred" else dtypes.bit_width(et) for et in ets]
    n, rows, npad = em.n, em.rows, em.npad
    stages = npad.bit_length() - 1
    tile = min(sort_tile_size(n, bits, em.analysis.device), npad)
    idx_t = "tl.int64" if rows * npad >= 2 ** 31 - 1 else "tl.int32"
    base = ts.sanitize_identifier(f"sort_{fusion.name}", "k")

    init = _init_kernel(em, bufs, ets_all, idx_t, f"{base}_init", pos is None)
    pos = len(bufs) - 1 if pos is None else pos
    sort_src, params = _sort_source(em, bufs, ets_all, idx_t, f"{base}_bitonic", pos)
    reg_src, _ = _sort_source(em, bufs, ets_all, idx_t, f"{base}_bitonic", pos, registers=True)
    scalars = ("i32", "i32", "i32", "i32")
    rounded = -(-n // tile) * tile
    tiled_pairs = rows * rounded // 2
    tiled_launch = tiled_launch_dims(em, shape0, bits, tile, rounded)
    global_pairs = rows * npad // 2

    def instance(kind: str, launches: list[tuple[int, int, int, int]]) -> KernelSource:
        if kind == "tile":
            cx = {"BLOCK": max(1, tile // 2), "PR": rounded // 2}
            launch, total = tiled_launch, tiled_pairs
        else:
            blk = min(GLOBAL_BLOCK, _pow2_floor(global_pairs))
            cx = {"BLOCK": blk, "PR": npad // 2}
            launch, total = LaunchDimensions(grid=(-(-global_pairs // blk),), num_warps=4), global_pairs
        cx.update(NSORT=n, ROWS=rows)
        # wider programs for the interpreter: whole tiles per program, same launches
        vb = max(cx["BLOCK"], min(INTERPRET_BLOCK, _pow2_floor(total)))
        ks = KernelSource(name=f"{base}_{kind}", source=sort_src, entry=f"{base}_bitonic", params=params,
                          constexprs=cx, launch=launch, num_stages=1, scalar_types=scalars,
                          scalar_launches=tuple(launches))
        if kind == "tile":  # whole tiles in registers, partners by tl.gather
            ve = max(tile, min(2 * INTERPRET_BLOCK, _pow2_floor(2 * total)))
            variant = attrs.evolve(ks, source=reg_src, constexprs={**cx, "BLOCK": ve, "PR": rounded},
                                   launch=LaunchDimensions(grid=(-(-2 * total // ve),), num_warps=4))
            ks = attrs.evolve(ks, interpret_variant=variant)
        elif npad <= 2 * INTERPRET_BLOCK:  # whole padded rows in registers: any partner is in the block,
            # so the consecutive steps of one stage are one launch
            ve = max(npad, min(2 * INTERPRET_BLOCK, _pow2_floor(2 * total)))
            variant = attrs.evolve(ks, source=reg_src, constexprs={**cx, "BLOCK": ve, "PR": npad},
                                   launch=LaunchDimensions(grid=(-(-2 * total // ve),), num_warps=4),
                                   scalar_launches=tuple(merge_launches(launches)))
            ks = attrs.evolve(ks, interpret_variant=variant)
        elif vb > cx["BLOCK"]:
            variant = attrs.evolve(ks, constexprs={**cx, "BLOCK": vb},
                                   launch=LaunchDimensions(grid=(-(-total // vb),), num_warps=4))
            ks = attrs.evolve(ks, interpret_variant=variant)
        return ks

    kernels = [init] + schedule_kernels(stages, tile, instance)
    return EmittedFusion(emitter=em.name, kernels=tuple(kernels), primary=1)


def _position_operand(sort: Any, dim: int) -> int | None:
    """The sort operand that is an integer ``iota`` along the sorted dimension (JAX's argsort payload), if any."""
    for k, o in enumerate(sort.operands):
        if (o.opcode == "iota" and o.shape.element_type in ("s32", "s64", "u32", "u64")
                and int(o.attrs.get("iota_dimension", -1)) == dim):
            return k
    return None


_ASSIGN = re.compile(r"^(\s*)([A-Za-z_]\w*) = (.*)$")
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")


def _cse(lines: list[str]) -> list[str]:
    """Drop assignments whose right-hand side repeats an earlier one (after renaming), renaming their uses.

    The comparator is emitted twice per step, on ``(lo, hi)`` and ``(hi, lo)``: each operand's
    canonicalisation is computed in both. Triton's compiler merges them; the interpreter would not.
    Loads, stores and anything else with effects are kept as they are (beyond renaming).
    """
    alias: dict[str, str] = {}
    seen: dict[str, str] = {}
    out = []
    for line in lines:
        line = _NAME.sub(lambda mt: alias.get(mt.group(0), mt.group(0)), line) if alias else line
        m = _ASSIGN.match(line)
        if m and "tl.load" not in line and "tl.store" not in line and "tl.atomic" not in line:
            key = m.group(3)
            if key in seen:
                alias[m.group(2)] = seen[key]
                continue
            seen[key] = m.group(2)
        out.append(line)
    return out


def _hoist(lines: list[str], depth: int) -> list[str]:
    """Move loop-invariant assignments (constants the comparator builds) out of ``depth`` nested loops
    starting at ``lines[0]``: the interpreter would rebuild them every step."""
    head, body = lines[:depth], lines[depth:]
    variant = {"s", "t", "top"} | {m.group(2) for m in map(_ASSIGN.match, body) if m}
    hoisted, kept = [], []
    for line in body:
        m = _ASSIGN.match(line)
        if (m and "tl.load" not in line and "tl.store" not in line and "tl.gather" not in line
                and not (set(_NAME.findall(m.group(3))) & variant)):
            hoisted.append(m.group(1)[4 * depth:] + f"{m.group(2)} = {m.group(3)}")
            variant.discard(m.group(2))
        else:
            kept.append(line)
    return hoisted + head + kept


def _register(ctx: KernelContext, bufs: list[tuple[str, int, Any]]) -> list[str]:
    names = []
    for b, (kind, index, shape) in enumerate(bufs):
        names.append(ctx.param(kind, index, shape, f"b{b}"))
    return names


def _init_kernel(em: Any, bufs: list[tuple[str, int, Any]], ets: list[str], idx_t: str, entry: str,
                 positions: bool) -> KernelSource:
    """Launch 0: every sorted operand (elemental generator) and, if ``positions``, each element's position
    (the last buffer), into the buffers."""
    fusion, sort = em.fusion, em.sort
    shape0 = sort.operands[0].shape
    total = em.rows * em.n
    ctx = KernelContext(idx_t, [o.shape for o in fusion.operands])
    for nm in ("lane", "e", "ec", "row", "loc", "mask", "zero", "BLOCK", "N", "NSORT"):
        ctx.names.reserve(nm)
    gen = ElementalGenerator(ctx, em.computation)
    names = _register(ctx, bufs)
    other = [d for d in range(shape0.rank) if d != em.dim]
    other_dims = tuple(shape0.dimensions[d] for d in other)
    with deep_recursion():
        rm = gen.delinearize("row", other_dims, tuple(range(len(other_dims) - 1, -1, -1)))
        idx: list[Any] = [0] * shape0.rank
        for k, d in enumerate(other):
            idx[d] = rm[k]
        if shape0.rank:
            idx[em.dim] = "loc"
        index = tuple(idx)
        for k, o in enumerate(sort.operands):
            v = gen.value(o, index)
            s = bufs[k][2]
            off = gen.linearize(index, s.dimensions, s.minor_to_major()) if s.rank else 0
            store_line(gen, names[k], off, v, ets[k], "mask")
        if positions:
            s = bufs[-1][2]
            off = gen.linearize(index, s.dimensions, s.minor_to_major()) if s.rank else 0
            store_line(gen, names[-1], off, "loc.to(tl.int32)", "s32", "mask")
    prologue = ["lane = tl.arange(0, BLOCK)", f"e = tl.program_id(0).to({idx_t}) * BLOCK + lane", "mask = e < N",
                "ec = tl.minimum(e, N - 1)", "row = ec // NSORT", "loc = ec % NSORT",
                f"zero = tl.full([BLOCK], 0, {idx_t})"]
    source = ctx.render(entry, ["BLOCK", "N", "NSORT"], prologue)
    block = min(INIT_BLOCK, _pow2_floor(max(2, total)) * 2)
    return KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                        constexprs={"BLOCK": block, "N": total, "NSORT": em.n},
                        launch=LaunchDimensions(grid=(-(-total // block),), num_warps=4), num_stages=1)


def _sort_source(em: Any, bufs: list[tuple[str, int, Any]], ets: list[str], idx_t: str,
                 entry: str, pos: int, registers: bool = False) -> tuple[str, tuple]:
    """The bitonic compare-exchange kernel: runtime ``(S0, S1, MTOP, MBOT)``; buffer ``pos`` holds the
    original positions (the tie-break), the sort operands are the first ``len(sort.operands)`` buffers.

    ``registers=False`` (both launched instances): constexprs ``BLOCK`` (pairs per program), ``PR`` (pairs
    per row the grid covers), ``NSORT``, ``ROWS``; every step loads and stores its pairs. ``registers=True``
    (the tiled kernel's interpreter variant): ``BLOCK`` elements per program (whole tiles), ``PR`` elements
    per row; the block is loaded once, each step fetches partners with ``tl.gather``, stored once.
    """
    sort = em.sort
    shape0 = sort.operands[0].shape
    padded = em.n != em.npad  # else no position reaches NSORT: every pair of a live row is real
    ctx = KernelContext(idx_t, [o.shape for o in em.fusion.operands])
    for nm in ("lane", "q", "row", "qr", "live", "row_c", "s", "t", "top", "m", "h", "xm", "i", "p", "act",
               "lower", "src", "swap", "mask", "zero", "BLOCK", "PR", "NSORT", "ROWS", "S0", "S1", "MTOP", "MBOT"):
        ctx.names.reserve(nm)
    gen = ElementalGenerator(ctx, em.computation)
    names = _register(ctx, bufs)
    other = [d for d in range(shape0.rank) if d != em.dim]
    prologue = ["lane = tl.arange(0, BLOCK)", f"q = tl.program_id(0).to({idx_t}) * BLOCK + lane",
                "row = q // PR", "qr = q % PR", "live = row < ROWS", "row_c = tl.minimum(row, ROWS - 1)",
                f"zero = tl.full([BLOCK], 0, {idx_t})", "mask = live"]
    # row -> its base offset in each buffer's layout (rows enumerate the other dimensions row-major)
    rem = "row_c"
    digits: dict[int, str] = {}
    for d in reversed(other):
        size = shape0.dimensions[d]
        digits[d] = ctx.emit(f"{rem} % {size}", "rd") if d != other[0] else rem
        if d != other[0]:
            rem = ctx.emit(f"{rem} // {size}", "rq")
    bases, sdim = [], []
    for kind, index, shape in bufs:
        st = physical_strides(shape)
        terms = [f"{digits[d]} * {st[d]}" for d in other if shape0.dimensions[d] > 1]
        bases.append(ctx.emit(" + ".join(terms), "base") if terms else "")
        sdim.append(st[em.dim] if shape0.rank else 0)
    b = ctx.body
    if registers:  # qr is the element's position in its row
        ctx.body.line("valid = live & (qr < NSORT)")
        # offsets clamped into the row: a lane the masks should drop never addresses past its buffer
        offs = [ctx.emit(_offset(base, "tl.minimum(qr, NSORT - 1)", sd), "off") for base, sd in zip(bases, sdim)]
        vals = [ctx.emit(f"tl.load({nm} + {o}, mask=valid, other=0)", "v") for nm, o in zip(names, offs)]
    loop_at = len(b.lines)
    b.line("for s in range(S0, S1 + 1):")
    b.level += 1
    b.line("top = tl.minimum(s, MTOP)")
    b.line("for t in range(0, top - MBOT + 1):")
    b.level += 1
    b.line("m = top - t")
    b.line("h = 1 << m")
    b.line("xm = tl.where(m == s, h * 2 - 1, h)")  # flip step: the partner mirrored in 2h
    start = len(b.lines)
    gen.push_scope()
    try:
        with deep_recursion():
            if registers:
                # p: the partner's position, lane ^ xm its lane (blocks are whole tiles, xm < tile)
                # the pair's upper position, max(p, qr), must be real
                act = "act = live & (tl.maximum(p, qr) < NSORT)" if padded else "act = live"
                for line in ("p = qr ^ xm", "lower = qr < p", act, "src = lane ^ xm"):
                    b.line(line)
                part = [ctx.emit(f"tl.gather({v}, src, 0)", "w") for v in vals]
                lo, hi = vals, part  # (self, partner): lower / upper sorted out by the swap below
            else:
                # i: the pair's lower position (a zero bit inserted at m), p: its partner
                act = "act = live & (p < NSORT)" if padded else "act = live"
                for line in ("i = qr + (qr & (0 - h))", "p = i ^ xm", act):
                    b.line(line)
                lo, hi, offs = [], [], []
                for nm, base, sd in zip(names, bases, sdim):
                    oi = ctx.emit(_offset(base, "tl.minimum(i, NSORT - 1)", sd), "oi")
                    op = ctx.emit(_offset(base, "tl.minimum(p, NSORT - 1)", sd), "op")
                    offs.append((oi, op))
                    lo.append(ctx.emit(f"tl.load({nm} + {oi}, mask=act, other=0)", "a"))
                    hi.append(ctx.emit(f"tl.load({nm} + {op}, mask=act, other=0)", "b"))
            k = len(sort.operands)
            vl = [ctx.emit(f"{v} != 0", "pv") if et == "pred" else v for v, et in zip(lo[:k], ets)]
            vh = [ctx.emit(f"{v} != 0", "pv") if et == "pred" else v for v, et in zip(hi[:k], ets)]
            less_lh, less_hl = compare_both(gen, sort, em.comparator, vl, vh)
            # the upper element goes first: it is less, or neither is and it came first
            hi_first = f"{less_hl} | (({less_lh} ^ True) & ({hi[pos]} < {lo[pos]}))"
            if registers:  # lo is this lane's element: swap if the upper one of the pair goes first
                lo_first = f"{less_lh} | (({less_hl} ^ True) & ({lo[pos]} < {hi[pos]}))"
                b.line(f"swap = act & tl.where(lower, {hi_first}, {lo_first})")
            else:
                b.line(f"swap = act & ({hi_first})")
            if registers:
                for v, w in zip(vals, part):
                    b.line(f"{v} = tl.where(swap, {w}, {v})")
            else:
                for nm, (oi, op), a, c in zip(names, offs, lo, hi):
                    b.line(f"tl.store({nm} + {oi}, {c}, mask=swap)")
                    b.line(f"tl.store({nm} + {op}, {a}, mask=swap)")
                b.line("tl.debug_barrier()")
            b.lines[start:] = _cse(b.lines[start:])
    finally:
        gen.pop_scope()
    b.level -= 2
    b.lines[loop_at:] = _hoist(b.lines[loop_at:], 2)
    if registers:
        for nm, o, v in zip(names, offs, vals):
            b.line(f"tl.store({nm} + {o}, {v}, mask=valid)")
    source = ctx.render(entry, ["BLOCK", "PR", "NSORT", "ROWS"], prologue, scalars=["S0", "S1", "MTOP", "MBOT"])
    return source, tuple(ctx.params)
