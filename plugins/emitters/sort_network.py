"""The kernels of XLA's multi-launch sort, one per launch, specialised by ``tl.constexpr`` step constants.

Mirrors ``EmitBitonicSortLLVMIR`` / ``EmitSortInPlace`` (``xla/service/llvm_ir/sort_util.cc``, launched by
``IrEmitterUnnested::EmitSortFusion``): the padded sorted dimension ``NPAD`` is sorted by the "flip" bitonic
network, stage ``s`` comparing position ``i`` with ``i ^ (2**(s+1) - 1)``, then with ``i ^ 2**m`` for
``m = s-1 .. 0``, the smaller element going to the lower position. XLA emits one straight-line kernel per
launch (:func:`fusegen_plugins.emitters.sort_scale.launch_schedule` groups the steps as XLA does); so does
fusegen:

* a **tiled** launch (consecutive steps whose partner stays inside one tile of ``TILE`` elements,
  :func:`fusegen.codegen.launch.sort_tile_size`) is one program per tile: the tile is loaded once into a
  register tensor, its steps (constexprs ``S0, S1, MTOP, MBOT``: stages ``S0..S1``, each from step
  ``min(s, MTOP)`` down to ``MBOT``) unrolled at trace time by ``tl.static_range``, every partner fetched by
  ``tl.gather`` (Triton stages the tile through shared memory, as XLA's kernel does), the tile stored once;
* a **global** launch is one step (constexpr ``M``; a stage's first, flip, step has its own source) over
  pairs in global memory, straight-line.

No kernel loops over steps at run time and none takes runtime scalars. The first launch reads the sort's
operands through the elemental generator (XLA computes them in its first kernel), every launch writes the
operand buffers (output leaves, scratch for operands the fusion does not output).

In Triton's interpreter a tiled launch runs the same source over many tiles per program (a larger
``BLOCK``: partners never leave a tile, so the arithmetic is the launched kernel's; the values it gathers
are kept rather than loaded again); a stage's global steps run as one launch of the tiled source over whole
padded rows where a row fits the interpreter's block, else each step with wide programs
(:func:`global_prologue` without the contiguity hints of the launched kernel).
"""

from __future__ import annotations

from typing import Any, Callable

import attrs

from fusegen.pow2 import prev_pow2
from fusegen.codegen.elemental import KernelContext
from fusegen.codegen.kernel import KernelSource, LaunchDimensions
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.codegen.launch import SORT_UNROLL_FACTOR, sort_launches, sort_tile_size
from fusegen.hlo import dtypes
from fusegen.hlo.layout_util import physical_strides

#: Largest elements per program of an interpreter variant (its cost is per program and per step).
INTERPRET_LANES = 1 << 20

#: Names the network kernels use (reserved in their :class:`KernelContext`).
NAMES = ("lane", "q", "row", "qr", "qc", "live", "row_c", "valid", "mask", "zero", "s", "t", "h", "xm", "w",
         "up", "pl", "gl", "swap", "i", "i0", "p", "ic", "pc", "act", "src", "BLOCK", "TILE", "RT", "PR", "NSORT", "ROWS", "S0",
         "S1", "MTOP", "MBOT", "M", "U", "u", "iu", "pu", "q0", "t0")

TILE_CONSTEXPRS = ("TILE", "BLOCK", "RT", "NSORT", "ROWS", "S0", "S1", "MTOP", "MBOT")
GLOBAL_CONSTEXPRS = ("BLOCK", "U", "PR", "NSORT", "ROWS", "M")


def offset(base: str, pos: str, stride: int) -> str:
    """``base + pos * stride`` without the trivial parts."""
    term = pos if stride == 1 else f"{pos} * {stride}"
    return f"{base} + {term}" if base else term


def tile_prologue(idx_t: str, interpret: bool) -> list[str]:
    """Lines every tiled kernel starts with: ``qr`` the position in the row (``ROWS`` rows of ``RT``, the
    row rounded up to whole tiles), ``valid`` a real element, ``qc`` the position clamped into the row
    (contiguous runs of a tile, for the elemental generator's reads: a lane the masks should drop never
    addresses past its buffer), ``gl`` the lane as gathers index it (``int64`` in an interpreter variant:
    numpy's index type, no conversion per gather). A launched kernel is one tile a program (``BLOCK ==
    TILE``): its row ``row`` / ``row_c`` and the tile's start ``t0`` are the program's scalars
    (:func:`tile_offsets`); an interpreter variant's program spans tiles and rows, all per lane."""
    if interpret:
        lines = ["lane = tl.arange(0, BLOCK)", "gl = lane.to(tl.int64)",
                 f"q = tl.program_id(0).to({idx_t}) * BLOCK + lane", "row = q // RT", "qr = q % RT",
                 "live = row < ROWS", "row_c = tl.minimum(row, ROWS - 1)", "valid = live & (qr < NSORT)"]
    else:  # the live mask a tensor (a scalar int1 combined with a tensor's widens in Triton's interpreter)
        lines = ["lane = tl.arange(0, BLOCK)", "gl = lane", f"q0 = tl.program_id(0).to({idx_t}) * BLOCK",
                 "row = q0 // RT", "t0 = q0 % RT", "qr = t0 + lane", f"zero = tl.full([BLOCK], 0, {idx_t})",
                 "live = (zero + row) < ROWS", "row_c = tl.minimum(row, ROWS - 1)",
                 "valid = live & (lane < NSORT - t0)"]
    return lines + ["mask = valid", *([f"zero = tl.full([BLOCK], 0, {idx_t})"] if interpret else []),
                    "qc = tl.max_contiguous(tl.multiple_of(tl.minimum(qr, NSORT - 1), TILE), TILE)"]


def tile_offsets(ctx: KernelContext, em: Any, shapes: list[Any], interpret: bool) -> list[str]:
    """Per buffer shape: the offsets of a tiled kernel's elements (:func:`tile_prologue`). A launched kernel's
    are the tile's first element as a 64-bit scalar plus the lanes, so that every access of a buffer is one
    base register and an immediate (XLA's 64-bit indexing), nothing per element held through the network;
    an interpreter variant's are ``qc``'s."""
    bases, strides = row_bases(ctx, em, shapes)
    if interpret:
        return [ctx.emit(offset(base, "qc", sd), "off") for base, sd in zip(bases, strides)]
    out = []
    for base, sd in zip(bases, strides):
        start = ctx.emit(f"{base + '.to(tl.int64) + ' if base else ''}t0.to(tl.int64) * {sd}", "ts")
        out.append(ctx.emit(f"{start} + {'lane' if sd == 1 else f'lane * {sd}'}", "off"))
    return out


def begin_tile_steps(b: Any, interpret: bool = False) -> None:
    """Open the tiled launch's network: the steps of stages ``S0..S1`` unrolled at trace time; inside,
    ``h = 2**m`` and ``xm`` the step's partner mask (``2h - 1`` for a stage's first, flip, step) are
    constexprs, ``up`` the lanes holding the upper element of their pair, ``pl`` every lane's partner.

    ``up`` is bit ``h`` of the lane (the partner differs in bits ``h`` and below): on the GPU a bit test, which
    the compiler keeps as one predicate per mask ``h`` rather than one per element through the network; an
    interpreter variant (``interpret``) spells the same predicate ``pl < gl``, one array operation fewer."""
    b.line("for s in tl.static_range(S0, S1 + 1):")
    b.level += 1
    b.line("for t in tl.static_range(min(s, MTOP) - MBOT + 1):")
    b.level += 1
    for line in ("h = 1 << (min(s, MTOP) - t)", "xm = h", "if min(s, MTOP) - t == s:", "    xm = 2 * h - 1",
                 "pl = gl ^ xm", "up = pl < gl" if interpret else "up = (gl & h) != 0"):
        b.line(line)


def end_tile_steps(b: Any) -> None:
    b.level -= 2


def global_prologue(idx_t: str, contiguous: bool, flip: bool) -> list[str]:
    """Lines of a global step's kernel before its sub-steps (:func:`global_substep`): a program does ``U``
    sub-steps of ``BLOCK`` pairs each, one pair a thread (XLA's unrolled loop of ``kUnrollFactor`` compare
    bodies: a pair is loaded, compared and stored before the next is loaded, so the registers hold one pair).
    ``contiguous``: each program's pairs are one run of lower positions (``U * BLOCK <= 2**M``, rows of whole
    programs): ``row``, ``row_c`` and the run's first lower position ``i0`` are the program's scalars."""
    step = ["h = 1 << M", "xm = 2 * h - 1" if flip else "xm = h"]
    lines = ["lane = tl.arange(0, BLOCK)", f"zero = tl.full([BLOCK], 0, {idx_t})", *step]
    if contiguous:
        # row and run start are scalars; the live mask a tensor (a scalar int1 combined with a tensor's
        # widens in Triton's interpreter)
        lines += [f"q = tl.program_id(0).to({idx_t}) * (BLOCK * U)", "row = q // PR", "qr = q % PR",
                  "live = (zero + row) < ROWS", "row_c = tl.minimum(row, ROWS - 1)", "mask = live",
                  "i0 = qr + (qr & (0 - h))"]
    return lines


def global_substep(idx_t: str, contiguous: bool, flip: bool, padded: bool) -> list[str]:
    """Lines opening sub-step ``u`` of a global step: ``act`` a pair that exchanges (its upper position is
    real). ``contiguous``: ``iu`` (scalar) the sub-step's first lower position, the lower positions
    ``iu + lane``, the partners ``pu + lane`` (``pu - lane`` for a ``flip``, whose partners run downwards);
    else per lane: pair ``q`` of ``ROWS`` rows of ``PR`` pairs, ``i`` its lower position (a zero bit inserted
    at ``M``), ``p`` the partner, ``ic`` / ``pc`` clamped into the row."""
    if contiguous:
        lines = ["iu = i0 + u * BLOCK", "pu = iu ^ xm" if flip else "pu = iu + h"]
        if padded:  # the partner pu -/+ lane is real
            lines.append("act = live & (lane > pu - NSORT)" if flip else "act = live & (lane < NSORT - pu)")
        else:
            lines.append("act = live")
        return lines
    lines = [f"q = tl.program_id(0).to({idx_t}) * (BLOCK * U) + u * BLOCK + lane", "row = q // PR", "qr = q % PR",
             "live = row < ROWS", "row_c = tl.minimum(row, ROWS - 1)", "mask = live", "i = qr + (qr & (0 - h))",
             "p = i ^ xm", "act = live & (p < NSORT)" if padded else "act = live",
             "ic = tl.minimum(i, NSORT - 1)", "pc = tl.minimum(p, NSORT - 1)"]
    return lines


def row_bases(ctx: KernelContext, em: Any, shapes: list[Any]) -> tuple[list[str], list[int]]:
    """Per buffer shape: the variable holding row ``row_c``'s base offset (rows enumerate the sort's other
    dimensions row-major) and the sorted dimension's stride."""
    shape0 = em.sort.operands[0].shape
    other = [d for d in range(shape0.rank) if d != em.dim]
    rem = "row_c"
    digits: dict[int, str] = {}
    for d in reversed(other):
        size = shape0.dimensions[d]
        digits[d] = ctx.emit(f"{rem} % {size}", "rd") if d != other[0] else rem
        if d != other[0]:
            rem = ctx.emit(f"{rem} // {size}", "rq")
    bases, strides = [], []
    for shape in shapes:
        st = physical_strides(shape)
        terms = [f"{digits[d]} * {st[d]}" for d in other if shape0.dimensions[d] > 1]
        bases.append(ctx.emit(" + ".join(terms), "base") if terms else "")
        strides.append(st[em.dim] if shape0.rank else 0)
    return bases, strides


def row_index(gen: ElementalGenerator, em: Any, row: str, pos: str) -> tuple:
    """The sort operand's index of position ``pos`` along the sorted dimension in row ``row`` (rows enumerate
    the other dimensions row-major)."""
    shape0 = em.sort.operands[0].shape
    other = [d for d in range(shape0.rank) if d != em.dim]
    rm = gen.delinearize(row, tuple(shape0.dimensions[d] for d in other), tuple(range(len(other) - 1, -1, -1)))
    idx: list[Any] = [0] * shape0.rank
    for k, d in enumerate(other):
        idx[d] = rm[k]
    if shape0.rank:
        idx[em.dim] = pos
    return tuple(idx)


def plan_buffers(em: Any, pos: int | None, multi: bool) -> tuple[tuple, int]:
    """The buffers a multi-launch sort moves: ``((kind, index, shape, operand), ...)`` per buffer (an output
    leaf, or a scratch buffer for a sort operand the fusion does not output, when ``multi`` launches need it
    between them; ``operand == -1``: the scratch ``s32`` buffer of original positions, when no operand
    ``pos`` is an ``iota`` holding them), and the buffer holding the positions (-1 when there is none)."""
    sort = em.sort
    leaves = em.fusion.shape.leaves()
    bufs = []
    for k, o in enumerate(sort.operands):
        if k in em.leaf_operand:
            leaf_no = em.leaf_operand.index(k)
            bufs.append(("output", leaf_no, leaves[leaf_no], k))
        elif multi:  # a later launch reads it
            bufs.append(("scratch", k + 1, o.shape, k))
    if pos is None and multi:
        bufs.append(("scratch", 0, attrs.evolve(sort.operands[0].shape, element_type="s32"), -1))
    operand = -1 if pos is None else pos
    return tuple(bufs), next((b for b, buf in enumerate(bufs) if buf[3] == operand), -1)


def launch_plan(em: Any, pos: int | None) -> tuple[list[int], int, int, tuple[tuple, int]]:
    """What every multi-launch sort of ``em`` (a :class:`fusegen_plugins.emitters.sort.SortFusion`) starts
    from, with ``pos`` the operand holding original positions (``None``: none): ``(bits, stages, tile,
    plan)``, ``bits`` each operand's width (1 for ``pred``), ``stages`` the bitonic stages of the padded
    dimension (``log2(npad)``), ``tile`` the elements one tiled launch sorts (``sort_tile_size``, XLA's
    ``kTileSize``, at most ``npad``) and ``plan`` :func:`plan_buffers`' answer.

    Raises:
        EmitterUnsupported: a sort result is output twice (each result is sorted in one buffer).
    """
    sort = em.sort
    if len(set(em.leaf_operand)) != len(em.leaf_operand):
        raise EmitterUnsupported("sort", sort.name, "a sort result is output twice (the multi-launch sort "
                                 "sorts each result in one buffer)")
    bits = [1 if o.shape.element_type == "pred" else dtypes.bit_width(o.shape.element_type) for o in sort.operands]
    stages = em.npad.bit_length() - 1
    tile = min(sort_tile_size(em.n, bits, em.analysis.device), em.npad)
    return bits, stages, tile, plan_buffers(em, pos, multi=tile < em.npad)


def begin(em: Any, names: tuple[str, ...] = ()) -> tuple[KernelContext, Any]:
    """A kernel context (index type by the padded size, the network's names reserved) and its generator."""
    from fusegen.codegen.elemental import ElementalGenerator

    idx_t = "tl.int64" if em.rows * em.npad >= 2 ** 31 - 1 else "tl.int32"
    ctx = KernelContext(idx_t, [o.shape for o in em.fusion.operands])
    for nm in NAMES + names:
        ctx.names.reserve(nm)
    return ctx, ElementalGenerator(ctx, em.computation)


def global_step_source(em: Any, plan: tuple, entry: str, contiguous: bool, flip: bool,
                       swap: Callable[[Any, Any, list[str], list[str]], str],
                       finish: Callable[[list[str]], list[str]] = lambda lines: lines) -> tuple[str, tuple]:
    """A global step's kernel (constexpr ``M``, :func:`global_prologue`): both elements of every pair loaded
    from each buffer of ``plan`` (:func:`plan_buffers`), both stored exchanged where ``swap(ctx, gen, lower,
    upper)`` (the loaded values per buffer) says the upper one goes first; ``finish`` rewrites the body."""
    from fusegen.codegen.elemental import deep_recursion

    bufs, _ = plan
    ctx, gen = begin(em)
    names = [ctx.param(kind, index, shape, f"b{b}") for b, (kind, index, shape, _) in enumerate(bufs)]
    b = ctx.body
    b.line("for u in tl.static_range(U):")
    b.level += 1
    for line in global_substep(ctx.idx_t, contiguous, flip, em.n != em.npad):
        b.line(line)
    bases, strides = row_bases(ctx, em, [buf[2] for buf in bufs])
    lo, hi, pi, pp = [], [], [], []
    for nm, base, sd in zip(names, bases, strides):
        if contiguous:  # a scalar pointer to the sub-step's first pair (64-bit, so that every access is one
            # base register and an immediate), then the lanes
            start = f"{base}.to(tl.int64) + " if base else ""
            lanes = "lane" if sd == 1 else f"lane * {sd}"
            pi.append(f"{ctx.emit(f'{nm} + ({start}iu.to(tl.int64) * {sd})', 'pi')} + {lanes}")
            pp.append(f"{ctx.emit(f'{nm} + ({start}pu.to(tl.int64) * {sd})', 'pp')} {'-' if flip else '+'} {lanes}")
        else:
            pi.append(f"{nm} + {ctx.emit(offset(base, 'ic', sd), 'oi')}")
            pp.append(f"{nm} + {ctx.emit(offset(base, 'pc', sd), 'op')}")
        lo.append(ctx.emit(f"tl.load({pi[-1]}, mask=act, other=0)", "a"))
        hi.append(ctx.emit(f"tl.load({pp[-1]}, mask=act, other=0)", "c"))
    with deep_recursion():
        b.line(f"swap = act & ({swap(ctx, gen, lo, hi)})")
    for a, c, o1, o2 in zip(lo, hi, pi, pp):  # XLA's kernel stores only the pairs it exchanges
        b.line(f"tl.store({o1}, {c}, mask=swap)")
        b.line(f"tl.store({o2}, {a}, mask=swap)")
    b.level -= 1
    b.lines[:] = finish(b.lines)
    source = ctx.render(entry, GLOBAL_CONSTEXPRS, global_prologue(ctx.idx_t, contiguous, flip))
    return source, tuple(ctx.params)


@attrs.frozen
class Sources:
    """The kernel texts of one multi-launch sort.

    Attributes:
        first: ``interpret -> (source, params)`` of the first (tiled) launch, which reads the fusion's
            operands (``interpret``: the interpreter variant's, same arithmetic).
        tile: ``interpret -> (source, params)`` of every later tiled launch.
        global_step: ``(contiguous, flip) -> (source, params)`` of a global step (:func:`global_prologue`).
        entry: the kernel function's name in every source.
        rows: ``() -> (source, params)`` of a later tiled launch's interpreter source for tiles of a whole
            padded row (the same parameters as a global step's): the interpreter variant of a stage's global
            steps, all of them in one launch.
    """

    first: Callable[[bool], tuple[str, tuple]]
    tile: Callable[[bool], tuple[str, tuple]]
    global_step: Callable[[bool, bool], tuple[str, tuple]]
    entry: str
    rows: Callable[[], tuple[str, tuple]] | None = None


def launches(em: Any, sources: Sources, stages: int, tile: int, bits: list[int], name: str,
             tile_registers: int = 0) -> list[KernelSource]:
    """One :class:`KernelSource` per launch of XLA's schedule
    (:func:`fusegen_plugins.emitters.sort_scale.launch_schedule`), on XLA's launch dimensions
    (:func:`fusegen.codegen.launch.sort_launches`) where ours agree, each with its interpreter variant;
    ``tile_registers``: the tiled kernels' :attr:`~fusegen.codegen.kernel.KernelSource.max_registers`."""
    from fusegen_plugins.emitters.sort_scale import launch_schedule, tiled_launch_dims

    n, rows, npad = em.n, em.rows, em.npad
    shape0 = em.sort.operands[0].shape
    rounded = -(-n // tile) * tile
    tiled = tiled_launch_dims(em, shape0, bits, tile, rounded)
    xla = sort_launches(shape0, em.dim, bits, em.analysis.device)
    pairs = rows * npad // 2
    common = {"NSORT": n, "ROWS": rows}
    out: list[KernelSource] = []
    cache: dict[Any, tuple[str, tuple]] = {}

    def source(key: Any, make: Callable[[], tuple[str, tuple]]) -> tuple[str, tuple]:
        if key not in cache:
            cache[key] = make()
        return cache[key]

    schedule = launch_schedule(stages, tile)
    for k, (kind, (s0, s1, mtop, mbot)) in enumerate(schedule):
        label = f"{name}_{k}"
        if kind == "tile":
            kind_ = "first" if k == 0 else "tile"
            make = sources.first if k == 0 else sources.tile
            src, params = source((kind_, False), lambda: make(False))
            if k:  # a later stage enters only as s > MTOP (every step a half-cleaner): one kernel for all of them
                s0 = s1 = mtop + 1
            cx = {"TILE": tile, "BLOCK": tile, "RT": rounded, **common, "S0": s0, "S1": s1, "MTOP": mtop, "MBOT": mbot}
            ks = KernelSource(name=label, source=src, entry=sources.entry, params=params, constexprs=cx,
                              launch=tiled, num_stages=1, max_registers=tile_registers)
            ve = max(tile, min(INTERPRET_LANES, prev_pow2(rows * rounded)))
            vsrc, _ = source((kind_, True), lambda: make(True))
            variant = attrs.evolve(ks, source=vsrc, constexprs={**cx, "BLOCK": ve},
                                   launch=LaunchDimensions(grid=(-(-rows * rounded // ve),), num_warps=4))
        else:
            dims = xla[k] if k < len(xla) else None
            threads = dims.threads3[0] if dims is not None else 128
            blk = min(threads * SORT_UNROLL_FACTOR, prev_pow2(pairs))
            launch = LaunchDimensions(grid=(-(-pairs // blk),), num_warps=max(1, threads // 32))
            if dims is not None and dims.grid3 == launch.grid3 and dims.threads3 == launch.threads3:
                launch = attrs.evolve(dims, num_warps=launch.num_warps)
            flip = mtop == s0
            contiguous = blk <= (1 << mtop) and (npad // 2) % blk == 0
            src, params = source(("global", contiguous, flip), lambda: sources.global_step(contiguous, flip))
            sub = min(threads, blk)  # one pair a thread and sub-step, blk // sub sub-steps (XLA's unroll)
            cx = {"BLOCK": sub, "U": blk // sub, "PR": npad // 2, **common, "M": mtop}  # the flip (M == S): source
            ks = KernelSource(name=label, source=src, entry=sources.entry, params=params, constexprs=cx,
                              launch=launch, num_stages=1)
            variant = _global_variant(ks, sources, source, schedule, k, rows, npad, pairs)
        out.append(attrs.evolve(ks, interpret_variant=variant))
    return out


def _global_variant(ks: KernelSource, sources: Sources, source: Callable, schedule: list, k: int, rows: int,
                    npad: int, pairs: int) -> KernelSource:
    """The interpreter variant of global launch ``k``: where whole padded rows fit one program and the
    launch is its stage's first global step, the tiled source over rows doing all of the stage's global
    steps (a merged launch, see :class:`~fusegen.codegen.kernel.KernelSource`); the stage's later global
    steps then launch no program. Else the same step with wide programs."""
    s = schedule[k][1][0]
    if sources.rows is not None and npad <= INTERPRET_LANES:
        if schedule[k - 1][0] == "global" and schedule[k - 1][1][0] == s:  # done by the stage's first
            return attrs.evolve(ks, launch=LaunchDimensions(grid=(0,), num_warps=4))
        last = k
        while last + 1 < len(schedule) and schedule[last + 1][0] == "global" and schedule[last + 1][1][0] == s:
            last += 1
        src, params = source("rows", sources.rows)
        assert params == ks.params
        ve = max(npad, min(INTERPRET_LANES, prev_pow2(rows * npad)))
        cx = {"TILE": npad, "BLOCK": ve, "RT": npad, "NSORT": ks.constexprs["NSORT"], "ROWS": rows,
              "S0": s, "S1": s, "MTOP": schedule[k][1][2], "MBOT": schedule[last][1][3]}
        return attrs.evolve(ks, source=src, constexprs=cx,
                            launch=LaunchDimensions(grid=(-(-rows * npad // ve),), num_warps=4))
    flip = schedule[k][1][2] == s
    vb = max(ks.constexprs["BLOCK"] * ks.constexprs["U"], min(INTERPRET_LANES // 2, prev_pow2(pairs)))
    vsrc, _ = source(("global", False, flip), lambda: sources.global_step(False, flip))
    return attrs.evolve(ks, source=vsrc, constexprs={**ks.constexprs, "BLOCK": vb, "U": 1},
                        launch=LaunchDimensions(grid=(-(-pairs // vb),), num_warps=4))
