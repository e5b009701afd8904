"""Multi-launch sorts whose comparator is a key order: XLA's bitonic launches moving one packed key per element.

Where :func:`fusegen.evaluator.vectorized_sort.lexicographic_plan` reads a sort's comparator as a lexicographic
order over per-operand keys (JAX's total order after ``ComparisonExpander``, the ``(key, iota)`` tie-break of
``StableSortExpander``, descending sorts, ``num_keys > 1``) and the keys fit 62 bits together with the
position (:func:`key_packing`), :func:`emit_keyed` replaces the comparator network of
:mod:`fusegen_plugins.emitters.sort_scale` with the same launches (XLA's schedule, grids and tiles) over one
``s64`` scratch buffer of packed keys:

* launch 0 writes each element's packed key: every key evaluated by the comparator's own instructions,
  biased to ``[0, 2**bits)`` (floats by XLA's total-order bits), reversed if descending, most significant
  first, then the element's original position;
* every compare-exchange step compares two keys (one ``s64`` compare instead of the comparator twice) and
  moves only the key: packed keys are unique, so the network yields the stable order, the one the
  comparator network reaches with its position tie-break;
* the last launch (``S1`` the last stage, ``MBOT == 0``) writes every output leaf at each position from the
  key it holds: the elemental generator evaluates the sorted operand at the key's original position
  (the operands are functions of the fusion's inputs, which the sort does not write).

Moving one key instead of every operand makes each step's work independent of the number of operands;
non-output operands need no buffer at all. In Triton's interpreter both kernels run as a variant holding
whole tiles (the tiled kernel) or whole padded rows (the global one, a stage's consecutive steps then one
launch) in registers, with the partner fetched by ``tl.gather``; lanes past the row get the largest key,
which never leaves those positions (the network puts the smaller key of a pair lower).
"""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, KernelContext, deep_recursion
from fusegen.codegen.emitter import store_line
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.codegen.launch import sort_tile_size
from fusegen.hlo import dtypes
from fusegen.hlo.layout_util import physical_strides
from fusegen_plugins.emitters.sort_scale import (
    GLOBAL_BLOCK, INIT_BLOCK, INTERPRET_BLOCK, _hoist, _offset, _pow2_floor, merge_launches, schedule_kernels,
    tiled_launch_dims,
)

#: Key element types a packed key takes: bits, and whether their compare is signed.
_INT_KEYS = {"pred": (1, False), "s8": (8, True), "s16": (16, True), "s32": (32, True), "u8": (8, False),
             "u16": (16, False), "u32": (32, False)}
#: Float keys under a ``TOTALORDER`` compare: bits.
_FLOAT_KEYS = {"f16": 16, "bf16": 16, "f32": 32}
#: Bits a packed key may use: the largest ``s64`` stays free for lanes past the row.
KEY_BITS = 62
_KEY_PAD = (1 << 63) - 1


@attrs.frozen
class KeyPacking:
    """How a lexicographic comparator's keys pack into one ``s64`` per element.

    Attributes:
        levels: ``(KeyLevel, bits, kind)`` most significant first; ``kind`` is ``int``, ``uint`` or ``float``.
        idx_bits: bits of the original position (the least significant part).
    """

    levels: tuple
    idx_bits: int


def key_packing(comparator: Any, operands: list, n: int, pos: int | None) -> KeyPacking | None:
    """The packing of ``comparator``'s keys for a sort of ``n`` elements per row (``pos``: the operand that is
    an integer ``iota`` along the sorted dimension, or ``None``).

    Returns ``None`` where the comparator is no key order
    (:func:`~fusegen.evaluator.vectorized_sort.lexicographic_plan`), a key is an IEEE (partial-order) float
    compare, a 64-bit, complex or narrow float type, or the keys need more than :data:`KEY_BITS` bits. An
    ascending last key that is the ``iota`` operand itself is the position and takes no bits.
    """
    from fusegen.evaluator.vectorized_sort import lexicographic_plan

    plan = lexicographic_plan(comparator, len(operands))
    if plan is None:
        return None
    plan = list(plan)
    if (plan and pos is not None and plan[-1].operand == pos and not plan[-1].descending
            and plan[-1].expr.opcode == "parameter"):
        plan.pop()
    levels = []
    for lv in plan:
        et = lv.expr.shape.element_type
        if lv.expr.shape.rank or lv.mode != "total":
            return None
        if et in _INT_KEYS:
            bits, signed = _INT_KEYS[et]
            levels.append((lv, bits, "int" if signed else "uint"))
        elif et in _FLOAT_KEYS:
            levels.append((lv, _FLOAT_KEYS[et], "float"))
        else:
            return None
    idx_bits = max(1, (n - 1).bit_length())
    if sum(b for _, b, _ in levels) + idx_bits > KEY_BITS:
        return None
    return KeyPacking(levels=tuple(levels), idx_bits=idx_bits)


def _packed_key(gen: ElementalGenerator, comparator: Any, packing: KeyPacking, values: dict[int, str],
                position: str) -> str:
    """The packed ``tl.int64`` key of the element whose sort operands are ``values`` (by operand) at
    ``position``."""
    shift = packing.idx_bits + sum(b for _, b, _ in packing.levels)
    terms = [f"{position}.to(tl.int64)"]
    for lv, bits, kind in packing.levels:
        shift -= bits
        sub = ElementalGenerator(gen.ctx, comparator, {lv.param: values[lv.operand]}, parent=gen)
        k = sub.value(lv.expr, ())
        if kind == "float":  # XLA's total order: negative floats' magnitude bits flipped, then signed order
            b = gen.ctx.emit(f"{k}.to(tl.int{bits}, bitcast=True)", "kb")
            k = gen.ctx.emit(f"{b} ^ (({b} >> {bits - 1}) & {(1 << (bits - 1)) - 1})", "kt")
        u = gen.ctx.emit(f"{k}.to(tl.int64)", "ku")
        if kind != "uint":
            u = gen.ctx.emit(f"{u} + {1 << (bits - 1)}", "ku")
        if lv.descending:
            u = gen.ctx.emit(f"{(1 << bits) - 1} - {u}", "ku")
        terms.append(f"({u} << {shift})" if shift else u)
    return gen.ctx.emit(" | ".join(reversed(terms)), "key")


def _row_index(gen: ElementalGenerator, em: Any, row: str, pos: str) -> tuple:
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


def _offset_of(gen: ElementalGenerator, shape: Any, index: tuple) -> Any:
    return gen.linearize(index, shape.dimensions, shape.minor_to_major()) if shape.rank else 0


def _init_source(em: Any, packing: KeyPacking, key_shape: Any, idx_t: str, entry: str) -> KernelSource:
    """Launch 0: each element's packed key into the key buffer."""
    total = em.rows * em.n
    ctx = KernelContext(idx_t, [o.shape for o in em.fusion.operands])
    for nm in ("lane", "e", "ec", "row", "loc", "mask", "zero", "BLOCK", "N", "NSORT"):
        ctx.names.reserve(nm)
    gen = ElementalGenerator(ctx, em.computation)
    kb = ctx.param("scratch", 0, key_shape, "keys")
    with deep_recursion():
        index = _row_index(gen, em, "row", "loc")
        used = sorted({lv.operand for lv, _, _ in packing.levels})
        values = {k: gen.value(em.sort.operands[k], index) for k in used}
        key = _packed_key(gen, em.comparator, packing, values, "loc")
        store_line(gen, kb, _offset_of(gen, key_shape, index), key, "s64", "mask")
    prologue = ["lane = tl.arange(0, BLOCK)", f"e = tl.program_id(0).to({idx_t}) * BLOCK + lane", "mask = e < N",
                "ec = tl.minimum(e, N - 1)", "row = ec // NSORT", "loc = ec % NSORT",
                f"zero = tl.full([BLOCK], 0, {idx_t})"]
    source = ctx.render(entry, ["BLOCK", "N", "NSORT"], prologue)
    block = min(INIT_BLOCK, _pow2_floor(max(2, total)) * 2)
    return KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                        constexprs={"BLOCK": block, "N": total, "NSORT": em.n},
                        launch=LaunchDimensions(grid=(-(-total // block),), num_warps=4), num_stages=1)


def _network_source(em: Any, packing: KeyPacking, key_shape: Any, idx_t: str, entry: str,
                    registers: bool) -> tuple[str, tuple]:
    """The compare-exchange kernel over the keys (runtime ``(S0, S1, MTOP, MBOT)``, constexprs ``BLOCK``,
    ``PR``, ``NSORT``, ``ROWS``, ``LAST``), whose last launch writes the output leaves.

    ``registers=False`` (the launched kernels): ``BLOCK`` pairs per program, ``PR`` pairs per row; each step
    loads and stores its pairs' keys. ``registers=True`` (the interpreter variant): ``BLOCK`` elements per
    program (whole tiles or rows), ``PR`` elements per row; the keys are loaded once, partners fetched with
    ``tl.gather``, stored once.
    """
    shape0 = em.sort.operands[0].shape
    leaves = em.fusion.shape.leaves()
    ctx = KernelContext(idx_t, [o.shape for o in em.fusion.operands])
    for nm in ("lane", "lane64", "q", "row", "qr", "qc", "live", "row_c", "s", "t", "top", "m", "h", "xm", "i", "p",
               "act", "lower", "src", "swap", "mask", "valid", "zero", "k", "w", "a", "c", "oi", "op", "BLOCK", "PR",
               "NSORT", "ROWS", "LAST", "S0", "S1", "MTOP", "MBOT"):
        ctx.names.reserve(nm)
    gen = ElementalGenerator(ctx, em.computation)
    kb = ctx.param("scratch", 0, key_shape, "keys")
    outs = [ctx.param("output", j, leaves[j], f"o{j}") for j in range(len(em.leaf_operand))]
    other = [d for d in range(shape0.rank) if d != em.dim]
    prologue = ["lane = tl.arange(0, BLOCK)", f"q = tl.program_id(0).to({idx_t}) * BLOCK + lane",
                "row = q // PR", "qr = q % PR", "live = row < ROWS", "row_c = tl.minimum(row, ROWS - 1)",
                f"zero = tl.full([BLOCK], 0, {idx_t})", "mask = live"]
    st = physical_strides(key_shape)
    rem, terms = "row_c", []
    for d in reversed(other):  # the row's base offset in the key buffer
        size = shape0.dimensions[d]
        digit = ctx.emit(f"{rem} % {size}", "rd") if d != other[0] else rem
        if d != other[0]:
            rem = ctx.emit(f"{rem} // {size}", "rq")
        if size > 1:
            terms.append(f"{digit} * {st[d]}")
    base = ctx.emit(" + ".join(terms), "base") if terms else ""
    sd = st[em.dim] if shape0.rank else 0
    b = ctx.body
    padded = em.n != em.npad
    if registers:
        prologue.append("lane64 = lane.to(tl.int64)")  # np.take's index type: no conversion per gather
        b.line("valid = live & (qr < NSORT)")
        # offsets clamped into the row: a lane the masks should drop never addresses past its buffer
        b.line("qc = tl.minimum(qr, NSORT - 1)")
        koff = ctx.emit(_offset(base, "qc", sd), "off")
        b.line(f"k = tl.load({kb} + {koff}, mask=valid, other={_KEY_PAD})")
    loop_at = len(b.lines)
    b.line("for s in range(S0, S1 + 1):")
    b.level += 1
    b.line("top = tl.minimum(s, MTOP)")
    b.line("for t in range(0, top - MBOT + 1):")
    b.level += 1
    for line in ("m = top - t", "h = 1 << m", "xm = tl.where(m == s, h * 2 - 1, h)"):  # flip: mirrored in 2h
        b.line(line)
    if registers:
        # lanes and positions agree below the block's tile or row: bit m tells the pair's lower element
        for line in ("src = lane64 ^ xm", "lower = (lane & h) == 0", "w = tl.gather(k, src, 0)",
                     "swap = (w < k) == lower", "k = tl.where(swap, w, k)"):
            b.line(line)
    else:
        for line in ("i = qr + (qr & (0 - h))", "p = i ^ xm", "act = live & (p < NSORT)" if padded else "act = live",
                     f"oi = {_offset(base, 'tl.minimum(i, NSORT - 1)', sd)}",
                     f"op = {_offset(base, 'tl.minimum(p, NSORT - 1)', sd)}",
                     f"a = tl.load({kb} + oi, mask=act, other=0)", f"c = tl.load({kb} + op, mask=act, other=0)",
                     "swap = act & (c < a)", f"tl.store({kb} + oi, c, mask=swap)", f"tl.store({kb} + op, a, mask=swap)",
                     "tl.debug_barrier()"):
            b.line(line)
    b.level -= 2
    b.lines[loop_at:] = _hoist(b.lines[loop_at:], 2)
    if registers:
        b.line(f"tl.store({kb} + {koff}, k, mask=valid)")
    b.line("if (S1 == LAST) & (MBOT == 0):")  # the network's last launch: the outputs from the keys
    b.level += 1
    mask_before = ctx.mask
    gen.push_scope()
    try:
        with deep_recursion():
            if registers:
                spots = [("qr", "qc", "valid", "k")]
            else:  # the program's pairs cover positions 2 qr and 2 qr + 1 of its row
                spots = []
                for j, e in enumerate(("qr * 2", "qr * 2 + 1")):
                    pe = ctx.emit(e, "pe")
                    ve = ctx.emit(f"live & ({pe} < NSORT)", "ve")
                    pc = ctx.emit(f"tl.minimum({pe}, NSORT - 1)", "pc")
                    ke = ctx.emit(f"tl.load({kb} + {_offset(base, pc, sd)}, mask={ve}, other=0)", "ke")
                    spots.append((pe, pc, ve, ke))
            for pe, pc, ve, ke in spots:
                ctx.mask = ve
                # a real key's position is below NSORT: the clamp only bounds what a dropped mask would read
                orig = ctx.emit(f"tl.minimum({ke} & {(1 << packing.idx_bits) - 1}, NSORT - 1).to({idx_t})", "orig")
                src_index = _row_index(gen, em, "row_c", orig)
                dst_index = _row_index(gen, em, "row_c", pc)
                for j, k in enumerate(em.leaf_operand):
                    v = gen.value(em.sort.operands[k], src_index)
                    store_line(gen, outs[j], _offset_of(gen, leaves[j], dst_index), v, leaves[j].element_type, ve)
    finally:
        gen.pop_scope()
        ctx.mask = mask_before
    b.level -= 1
    source = ctx.render(entry, ["BLOCK", "PR", "NSORT", "ROWS", "LAST"], prologue,
                        scalars=["S0", "S1", "MTOP", "MBOT"])
    return source, tuple(ctx.params)


def emit_keyed(em: Any, packing: KeyPacking) -> EmittedFusion:
    """The multi-launch sort of ``em`` (a :class:`fusegen_plugins.emitters.sort.SortFusion` whose padded
    dimension exceeds one program) over packed keys (``packing``: :func:`key_packing`'s answer): launch 0
    writes the keys (one ``s64`` scratch buffer, 8 bytes per element), then XLA's tiled and global bitonic
    launches (``EmitBitonicSortLLVMIR``'s schedule, ``xla/service/llvm_ir/sort_util.cc``) move them, the last
    one writing the output leaves. Raises nothing beyond the elemental generator's ``EmitterUnsupported``."""
    sort, fusion = em.sort, em.fusion
    shape0 = sort.operands[0].shape
    bits = [1 if o.shape.element_type == "pred" else dtypes.bit_width(o.shape.element_type) for o in sort.operands]
    n, rows, npad = em.n, em.rows, em.npad
    stages = npad.bit_length() - 1
    tile = min(sort_tile_size(n, bits, em.analysis.device), npad)
    idx_t = "tl.int64" if rows * npad >= 2 ** 31 - 1 else "tl.int32"
    base = ts.sanitize_identifier(f"sort_{fusion.name}", "k")
    key_shape = attrs.evolve(shape0, element_type="s64")
    init = _init_source(em, packing, key_shape, idx_t, f"{base}_init")
    src, params = _network_source(em, packing, key_shape, idx_t, f"{base}_bitonic", registers=False)
    reg_src, _ = _network_source(em, packing, key_shape, idx_t, f"{base}_bitonic", registers=True)
    rounded = -(-n // tile) * tile
    tiled_pairs, global_pairs = rows * rounded // 2, rows * npad // 2
    tiled_launch = tiled_launch_dims(em, shape0, bits, tile, rounded)
    common = {"NSORT": n, "ROWS": rows, "LAST": stages - 1}

    def instance(kind: str, launches: list[tuple[int, int, int, int]]) -> KernelSource:
        if kind == "tile":
            cx, total, row = {"BLOCK": max(1, tile // 2), "PR": rounded // 2}, tiled_pairs, rounded
            launch = tiled_launch
        else:
            blk = min(GLOBAL_BLOCK, _pow2_floor(global_pairs))
            cx, total, row = {"BLOCK": blk, "PR": npad // 2}, global_pairs, npad
            launch = LaunchDimensions(grid=(-(-global_pairs // blk),), num_warps=4)
        ks = KernelSource(name=f"{base}_{kind}", source=src, entry=f"{base}_bitonic", params=params,
                          constexprs={**cx, **common}, launch=launch, num_stages=1,
                          scalar_types=("i32", "i32", "i32", "i32"), scalar_launches=tuple(launches))
        if kind == "global" and npad > 2 * INTERPRET_BLOCK:
            return ks  # a row longer than the interpreter's block: the launched kernel, as it is
        # tiles (or whole padded rows) in registers; a global stage's consecutive steps are one launch
        ve = max(row if kind == "global" else tile, min(2 * INTERPRET_BLOCK, _pow2_floor(2 * total)))
        variant = attrs.evolve(ks, source=reg_src, constexprs={**common, "BLOCK": ve, "PR": row},
                               launch=LaunchDimensions(grid=(-(-2 * total // ve),), num_warps=4),
                               scalar_launches=tuple(merge_launches(launches) if kind == "global" else launches))
        return attrs.evolve(ks, interpret_variant=variant)

    kernels = [init] + schedule_kernels(stages, tile, instance)
    return EmittedFusion(emitter=em.name, kernels=tuple(kernels), primary=1)
