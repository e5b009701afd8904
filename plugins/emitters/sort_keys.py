"""Multi-launch sorts whose comparator is a key order: XLA's launches comparing one packed key per element.

Where :func:`fusegen_plugins.emitters.sort_comparator.read_key_order` reads a sort's comparator as a
lexicographic order over per-operand keys (JAX's total order after ``ComparisonExpander``, the ``(key, iota)``
tie-break of ``StableSortExpander``, descending sorts, ``num_keys > 1``; the emitter's own reading, sharing no
code with the reference evaluator's) and the keys fit 62 bits together with the
position (:func:`key_packing`), :func:`emit_keyed` builds XLA's launches (schedule, grids, tiles and the
buffers they move: every operand, in its output leaf or a scratch buffer) with one compare per pair:

* each launch computes every element's packed ``s64`` key from the operands it loads: every key evaluated by
  the comparator's own instructions, biased to ``[0, 2**bits)`` (floats by XLA's total-order bits), reversed
  if descending, most significant first, then the element's original position (the ``iota`` operand, else
  a scratch ``s32`` position buffer; in the first launch the position itself). Packed keys are unique, so the
  network yields the stable order, the one the comparator network reaches with its position tie-break;
* a tiled launch (:mod:`fusegen_plugins.emitters.sort_network`) sorts the tile's keys in registers, the lane
  each key started in riding in its lowest bits (or in a second tensor when they do not fit), then gathers
  every operand from the tile it loaded, the positions decoded from the keys;
* a global launch loads both elements of its pairs, compares their keys and stores them exchanged.
"""

from __future__ import annotations

import types
from typing import Any

import attrs

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, deep_recursion
from fusegen.codegen.emitter import store_line
from fusegen.codegen.kernel import EmittedFusion
from fusegen.hlo import dtypes
from fusegen.hlo.layout_util import physical_strides
from fusegen_plugins.emitters import sort_network as net
from fusegen_plugins.emitters.sort_comparator import read_key_order

#: Key element types a packed key takes: bits, and whether their compare is signed.
_INT_KEYS = {"pred": (1, False), "s8": (8, True), "s16": (16, True), "s32": (32, True), "u8": (8, False),
             "u16": (16, False), "u32": (32, False)}
#: Float keys under a ``TOTALORDER`` compare: bits.
_FLOAT_KEYS = {"f16": 16, "bf16": 16, "f32": 32}
#: Bits a packed key may use: the largest ``s64`` stays free for lanes past the row.
KEY_BITS = 62
_KEY_PAD = (1 << 63) - 1
_INT64_MIN = -(1 << 63)
#: Registers per thread a tiled launch is capped at (``maxnreg``). XLA launches its kernel with ``.reqntid``
#: and no register cap; ptxas left to itself with that block spends up to 1.6x XLA's registers (sm_90,
#: ``new_sort_small``; a first launch of 1024 threads it even caps at 32 itself, spilling). Live through the
#: network are the tile's keys and their partners (4 elements a thread: 16 registers), the key operands'
#: values no key gives back, one predicate and one shared-memory address per step mask; the buffers'
#: addresses are one 64-bit scalar each (:func:`~fusegen_plugins.emitters.sort_network.tile_offsets`):
#: blocks of 512 threads or more fit 32 (2048 threads an SM, XLA's occupancy), smaller ones 36 (at 32 ptxas
#: spilled 4 bytes on some); rows whose accesses are scalar (a row's bytes not a multiple of 16, or a sorted
#: dimension that is not the minor one) take 48: the first launch reads its operands through the elemental
#: generator, an address per element.
TILE_REGISTERS = types.MappingProxyType({"large_block": 32, "small_block": 36, "scalar_rows": 48})


@attrs.frozen
class KeyPacking:
    """How a lexicographic comparator's keys pack into one ``s64`` per element.

    Attributes:
        levels: ``(SortKey, bits, kind)`` most significant first; ``kind`` is ``int``, ``uint`` or ``float``.
        idx_bits: bits of the original position (the least significant part).
    """

    levels: tuple
    idx_bits: int


def key_packing(comparator: Any, operands: list, n: int, pos: "int | tuple[int, ...] | None") -> KeyPacking | None:
    """The packing of ``comparator``'s keys for a sort of ``n`` elements per row (``pos``: the operands that
    are integer ``iota`` s along the sorted dimension, or one of them, or ``None``).

    Returns ``None`` where the comparator is no key order
    (:func:`~fusegen_plugins.emitters.sort_comparator.read_key_order`), a key is an IEEE (partial-order) float
    compare, a 64-bit, complex or narrow float type, or the keys need more than :data:`KEY_BITS` bits. An
    ascending last key that is an ``iota`` operand itself is the position and takes no bits.
    """
    plan = read_key_order(comparator, len(operands))
    if plan is None:
        return None
    plan = list(plan)
    iotas = (pos,) if isinstance(pos, int) else tuple(pos or ())
    if (plan and plan[-1].operand in iotas and not plan[-1].descending
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


def _level_keys(gen: ElementalGenerator, comparator: Any, packing: KeyPacking, values: dict[int, str]) -> list[str]:
    """Per key level, most significant first: the key of the element whose sort operands are ``values``
    (by operand), as an integer whose own compare (signed, or unsigned for an unsigned key) is the level's
    ascending order: the comparator's key instructions, floats by XLA's total-order bits."""
    out = []
    for lv, bits, kind in packing.levels:
        sub = ElementalGenerator(gen.ctx, comparator, {lv.param: values[lv.operand]}, parent=gen)
        k = sub.value(lv.expr, ())
        if kind == "float":  # XLA's total order: negative floats' magnitude bits flipped, then signed order
            b = gen.ctx.emit(f"{k}.to(tl.int{bits}, bitcast=True)", "kb")
            k = gen.ctx.emit(f"{b} ^ (({b} >> {bits - 1}) & {(1 << (bits - 1)) - 1})", "kt")
        elif bits == 1:
            k = gen.ctx.emit(f"{k}.to(tl.int8)", "kp")
        out.append(k)
    return out


def _packed_key(gen: ElementalGenerator, comparator: Any, packing: KeyPacking, values: dict[int, str],
                position: str, idx_bits: int | None = None) -> str:
    """The packed ``tl.int64`` key of the element whose sort operands are ``values`` (by operand) at
    ``position``: every level biased to ``[0, 2**bits)``, reversed if descending, most significant first,
    then the position (in ``idx_bits``, default the packing's)."""
    shift = (packing.idx_bits if idx_bits is None else idx_bits) + sum(b for _, b, _ in packing.levels)
    terms = [f"{position}.to(tl.int64)"]
    for (lv, bits, kind), k in zip(packing.levels, _level_keys(gen, comparator, packing, values)):
        shift -= bits
        u = gen.ctx.emit(f"{k}.to(tl.int64)", "ku")
        if kind != "uint":
            u = gen.ctx.emit(f"{u} + {1 << (bits - 1)}", "ku")
        if lv.descending:
            u = gen.ctx.emit(f"{(1 << bits) - 1} - {u}", "ku")
        terms.append(f"({u} << {shift})" if shift else u)
    return gen.ctx.emit(" | ".join(reversed(terms)), "key")


def _before(gen: ElementalGenerator, comparator: Any, packing: KeyPacking, first: dict[int, str], pos_first: str,
            second: dict[int, str], pos_second: str) -> str:
    """Whether the element ``first`` (operand values, position) goes before ``second``: the order of their
    packed keys (:func:`_packed_key`), compared level by level in the keys' own widths."""
    ka = _level_keys(gen, comparator, packing, first)
    kb = _level_keys(gen, comparator, packing, second)
    expr = f"({pos_first} < {pos_second})"
    for (lv, _, _), a, b in reversed(list(zip(packing.levels, ka, kb))):
        lt = f"({b} < {a})" if lv.descending else f"({a} < {b})"
        expr = gen.ctx.emit(f"{lt} | (({a} == {b}) & {expr})", "lt")
    return expr


def _lane_bits(packing: KeyPacking, tile: int) -> int:
    """Bits of the tile lane a tiled launch packs below the key (0: they do not fit, a second tensor carries it).

    The lane may take the key's last two bits: a key of 64 bits has its top bit flipped (:func:`_signed_key`),
    and a key of 63 or 64 bits reaches the pad (``2**63 - 1``, every bit set) only with the position's bits
    all set, which needs a row of ``2**idx_bits`` elements; such a row fills its tiles (``TILE`` divides
    it), so no lane of its tiles holds the pad."""
    used = packing.idx_bits + sum(bits for _, bits, _ in packing.levels)
    lane_bits = (tile - 1).bit_length()
    return lane_bits if used + lane_bits <= 64 else 0


def _signed_key(packing: KeyPacking, lb: int) -> bool:
    """Whether a later tiled launch's key with ``lb`` lane bits takes all 64 bits: it is then the packed bits
    with the top one flipped, so that ``int64`` order is their unsigned order."""
    return packing.idx_bits + sum(bits for _, bits, _ in packing.levels) + lb == 64


def key_inverse(lv: Any) -> str | None:
    """How a key level's operand is recovered from the key, where the comparator's key of it is a bijection
    of its bits: ``identity`` (the parameter itself), ``bitcast`` (its bits as the same width's integer) or
    ``total_order`` (``ComparisonExpander``'s total order without JAX's canonicalisation of NaN and -0.0:
    ``select(b < 0, b ^ MAX, b)`` of those bits, its own inverse: ``lax.top_k``'s comparator); ``None`` for
    any other key (JAX's ``sort`` canonicalises NaN and -0.0: several values, one key)."""
    e = lv.expr

    def is_param(i: Any) -> bool:
        return i.opcode == "parameter" and int(i.attrs.get("parameter_number", -1)) == lv.param

    def is_bits(i: Any) -> bool:
        return (i.opcode in ("bitcast", "bitcast-convert") and is_param(i.operands[0])
                and i.shape.element_type in ("s8", "s16", "s32")
                and dtypes.bit_width(i.shape.element_type) == dtypes.bit_width(i.operands[0].shape.element_type))

    def constant(i: Any) -> int | None:
        while i.opcode in ("broadcast", "reshape", "copy") and i.operands:
            i = i.operands[0]
        if i.opcode != "constant" or i.shape.rank:
            return None
        try:
            return int(str(i.attrs.get("literal", i.attrs.get("value", ""))).strip("{} "))
        except ValueError:
            return None

    if is_param(e):
        return "identity"
    if is_bits(e):
        return "bitcast"
    if e.opcode != "select" or not is_bits(e.operands[2]):
        return None
    cond, flipped, b = e.operands
    top = (1 << (dtypes.bit_width(b.shape.element_type) - 1)) - 1
    if flipped.opcode != "xor" or b not in flipped.operands:
        return None
    other = flipped.operands[1] if flipped.operands[0] is b else flipped.operands[0]
    direction = str(cond.attrs.get("direction", "")).upper()
    if cond.opcode != "compare" or constant(other) != top:
        return None
    if (cond.operands[0] is b and direction == "LT" and constant(cond.operands[1]) == 0) or (
            cond.operands[1] is b and direction == "GT" and constant(cond.operands[0]) == 0):
        return "total_order"
    return None


def _decoded(ctx: Any, packing: KeyPacking, key: str, operand: int, et: str, low_bits: int) -> str | None:
    """Operand ``operand``'s value (element type ``et``) read back from packed ``key`` (:func:`_packed_key`,
    ``low_bits`` below the levels: the position and lane bits) where a level's key is a bijection of it
    (:func:`key_inverse`), so that the network need not hold or gather it; ``None`` where none is."""
    shift = low_bits + sum(bits for _, bits, _ in packing.levels)
    for lv, bits, kind in packing.levels:
        shift -= bits
        how = key_inverse(lv) if lv.operand == operand else None
        if how is None:
            continue
        field = ctx.emit(f"({key} >> {shift}) & {(1 << bits) - 1}" if shift else f"{key} & {(1 << bits) - 1}", "kf")
        if lv.descending:
            field = ctx.emit(f"{(1 << bits) - 1} - {field}", "kf")
        if kind != "uint":
            field = ctx.emit(f"{field} - {1 << (bits - 1)}", "kf")
        ket = lv.expr.shape.element_type
        if kind == "float":  # XLA's total order back to the float's bits (the transform is its own inverse)
            kb = ctx.emit(f"{field}.to(tl.int{bits})", "kb")
            k = ctx.emit(f"({kb} ^ (({kb} >> {bits - 1}) & {(1 << (bits - 1)) - 1})).to({ts.tl_dtype(ket)}, "
                         "bitcast=True)", "kd")
        elif ket == "pred":
            k = ctx.emit(f"{field} != 0", "kd")
        else:
            k = ctx.emit(f"{field}.to({ts.tl_dtype(ket)})", "kd")
        if how == "total_order":
            k = ctx.emit(f"tl.where({k} < 0, {k} ^ {(1 << (bits - 1)) - 1}, {k})", "kd")
        if how != "identity":
            k = ctx.emit(f"{k}.to({ts.tl_dtype(et)}, bitcast=True)", "kd")
        return k
    return None


def _storage(v: str, et: str) -> str:
    """A loaded buffer element as the value the keys read (``pred`` buffers hold bytes)."""
    return f"{v} != 0" if et == "pred" else v


def _tile_source(em: Any, packing: KeyPacking, plan: tuple, iotas: tuple, lb: int, tile_bits: int, entry: str,
                 first: bool, interpret: bool) -> tuple[str, tuple]:
    """A tiled launch: the tile's keys sorted in registers by the steps of constexprs ``S0..S1`` /
    ``MTOP..MBOT``, then every buffer written at each position from the lane its key came from. ``first``:
    the operands come from the fusion's inputs (elemental generator at each position), the positions are
    the positions themselves; else from the buffers. An operand whose key is a bijection of it is read back
    from its key (:func:`key_inverse`); another key operand's values are held through the network and
    gathered after it (each buffer loaded once, as XLA's kernel does); an operand no key reads is loaded
    after the network. ``interpret``: the interpreter variant's source (``int64`` gather indices)."""
    sort = em.sort
    bufs, pos_buf = plan
    ctx, gen = net.begin(em, ("key", "ln"))
    names = [ctx.param(kind, index, shape, f"b{b}") for b, (kind, index, shape, _) in enumerate(bufs)]
    offs = net.tile_offsets(ctx, em, [buf[2] for buf in bufs], interpret)
    b = ctx.body
    used = sorted({lv.operand for lv, _, _ in packing.levels})
    buf_of = {buf[3]: j for j, buf in enumerate(bufs)}
    with deep_recursion():
        index = net.row_index(gen, em, "row_c", "qc")
        local = "lane & (TILE - 1)"
        if first:  # nothing moved yet: the lane in the tile orders ties as the position does, and is its key
            values = {k: gen.value(sort.operands[k], index) for k in used}
            key = _packed_key(gen, em.comparator, packing, values, f"({local})", idx_bits=tile_bits)
            # the tile's start in its row plus the lane (a row of one tile starts at 0: nothing held through
            # the network for it)
            positions = ("key & (TILE - 1)" if em.n <= 1 << tile_bits else
                         f"(tl.program_id(0).to({ctx.idx_t}) * BLOCK + (lane & (0 - TILE))) % RT + (key & (TILE - 1))")
        else:
            loaded = {buf_of[k]: ctx.emit(f"tl.load({names[buf_of[k]]} + {offs[buf_of[k]]}, mask=valid, other=0)", "v")
                      for k in used}
            values = {k: ctx.emit(_storage(loaded[buf_of[k]], sort.operands[k].shape.element_type), "v") for k in used}
            position = ctx.emit(f"tl.load({names[pos_buf]} + {offs[pos_buf]}, mask=valid, other=0)", "pos")
            key = _packed_key(gen, em.comparator, packing, values, position)
            if lb:  # the lane in the lowest bits, below the position
                key = ctx.emit(f"({key} << {lb}) | ({local}).to(tl.int64)", "key")
                if _signed_key(packing, lb):
                    key = ctx.emit(f"{key} ^ {_INT64_MIN}", "key")
            positions = f"(key >> {lb}) & {(1 << packing.idx_bits) - 1}"
    b.line(f"key = tl.where(valid, {key}, {_KEY_PAD})")
    carry_lane = not first and not lb
    if carry_lane:  # the lane does not fit below the key: a second tensor carries it
        b.line("ln = gl & (TILE - 1)")
    net.begin_tile_steps(b, interpret)
    b.line("w = tl.gather(key, pl, 0)")
    b.line("swap = (w < key) ^ up")  # the lower lane takes the smaller key, the upper one the larger
    if carry_lane:
        b.line("ln = tl.where(swap, tl.gather(ln, pl, 0), ln)")
    b.line("key = tl.where(swap, w, key)")
    net.end_tile_steps(b)
    # the lane each sorted key started in (a lane of the same tile)
    b.line(f"src = (gl & (0 - TILE)) | {'ln' if carry_lane else '(key & (TILE - 1))'}.to(gl.dtype)")
    mask_before = ctx.mask
    ctx.mask = "valid"
    low_bits = tile_bits if first else packing.idx_bits + lb
    raw = "key" if first or not _signed_key(packing, lb) else ctx.emit(f"key ^ {_INT64_MIN}", "kr")
    with deep_recursion():
        rindex = net.row_index(gen, em, "row_c", "qc")
        for j, (kind, _, shape, k) in enumerate(bufs):
            et = shape.element_type
            if j == pos_buf or k == -1 or k in iotas:  # positions: decoded from the key
                v = ctx.emit(f"({positions}).to({ts.tl_dtype(et)})", "posv")
            elif (v := _decoded(ctx, packing, raw, k, et, low_bits)) is not None:  # read back from its key
                pass
            else:
                if first:  # a key operand's value is the generator's, computed before the network
                    v = gen.value(sort.operands[k], rindex)
                elif j in loaded:
                    v = loaded[j]
                else:
                    v = ctx.emit(f"tl.load({names[j]} + {offs[j]}, mask=valid, other=0)", "v")
                if et == "pred":
                    v = ctx.emit(f"{v}.to(tl.int8)", "pg")
                v = ctx.emit(f"tl.gather({v}, src, 0)", "g")
                if et == "pred":
                    v = ctx.emit(f"{v} != 0", "pg")
            store_line(gen, names[j], offs[j], v, et, "valid")
    ctx.mask = mask_before
    source = ctx.render(entry, net.TILE_CONSTEXPRS, net.tile_prologue(ctx.idx_t, interpret))
    return source, tuple(ctx.params)


def _global_source(em: Any, packing: KeyPacking, plan: tuple, entry: str, contiguous: bool,
                   flip: bool) -> tuple[str, tuple]:
    """A global step (constexpr ``M``): both elements of every pair loaded from each buffer, their keys
    compared level by level, both stored exchanged where the upper one's key is smaller."""
    sort = em.sort
    bufs, pos_buf = plan
    buf_of = {buf[3]: j for j, buf in enumerate(bufs)}
    used = sorted({lv.operand for lv, _, _ in packing.levels})

    def swap(ctx: Any, gen: Any, lo: list[str], hi: list[str]) -> str:
        values = [{k: ctx.emit(_storage(side[buf_of[k]], sort.operands[k].shape.element_type), "v") for k in used}
                  for side in (lo, hi)]
        return _before(gen, em.comparator, packing, values[1], hi[pos_buf], values[0], lo[pos_buf])

    return net.global_step_source(em, plan, entry, contiguous, flip, swap)


def tile_registers(em: Any, plan: tuple, tile: int) -> int:
    """The register cap of a tiled launch of ``tile`` elements (XLA's ``tile / 4`` threads) moving the
    buffers of ``plan`` (:func:`fusegen_plugins.emitters.sort_network.plan_buffers`): see
    :data:`TILE_REGISTERS`."""
    shapes = [shape for _, _, shape, _ in plan[0]]
    strided = any(physical_strides(shape)[em.dim] != 1 for shape in shapes if shape.rank)
    if em.rows > 1 and (strided or any(em.n * max(1, dtypes.bit_width(shape.element_type) // 8) % 16
                                       for shape in shapes)):
        return TILE_REGISTERS["scalar_rows"]
    return TILE_REGISTERS["large_block" if tile // 4 >= 512 else "small_block"]


def emit_keyed(em: Any, packing: KeyPacking, iotas: tuple[int, ...]) -> EmittedFusion:
    """The multi-launch sort of ``em`` (a :class:`fusegen_plugins.emitters.sort.SortFusion` whose padded
    dimension exceeds one program) comparing packed keys (``packing``: :func:`key_packing`'s answer; ``iotas``:
    the ``iota`` operands holding each element's position): XLA's tiled and global launches
    (``EmitBitonicSortLLVMIR``'s schedule, ``xla/service/llvm_ir/sort_util.cc``), one specialised kernel
    each (:mod:`fusegen_plugins.emitters.sort_network`).

    Raises:
        EmitterUnsupported: a sort result is output twice, or the elemental generator's.
    """
    fusion = em.fusion
    bits, stages, tile, plan = net.launch_plan(em, iotas[0] if iotas else None)
    lb, tb = _lane_bits(packing, tile), (tile - 1).bit_length()
    base = ts.sanitize_identifier(f"sort_{fusion.name}", "k")
    entry = f"{base}_bitonic"
    sources = net.Sources(first=lambda i: _tile_source(em, packing, plan, iotas, lb, tb, entry, True, i),
                          tile=lambda i: _tile_source(em, packing, plan, iotas, lb, tb, entry, False, i),
                          global_step=lambda c, f: _global_source(em, packing, plan, entry, c, f), entry=entry,
                          rows=lambda: _tile_source(em, packing, plan, iotas, _lane_bits(packing, em.npad), tb, entry,
                                                    False, True))
    kernels = net.launches(em, sources, stages, tile, bits, base, tile_registers=tile_registers(em, plan, tile))
    return EmittedFusion(emitter=em.name, kernels=tuple(kernels), primary=0)
