"""Sorts longer than one program: XLA's multi-launch bitonic sort over the output buffers.

Mirrors ``EmitBitonicSortLLVMIR`` (``xla/service/llvm_ir/sort_util.cc``, launched by
``IrEmitterUnnested::EmitSortFusion`` / ``BuildKernelThunkForSort``): the padded sorted dimension ``NPAD`` is
sorted by the "flip" bitonic network; consecutive steps whose partner stays inside one tile of ``TILE``
elements (:func:`fusegen.codegen.launch.sort_tile_size`) are one launch of a *tiled* kernel, every other step
one launch of a *global* kernel (:func:`launch_schedule`), each its own kernel specialised by constexprs
(:mod:`fusegen_plugins.emitters.sort_network`); all launches update the same buffers in place, the first one
reading the sort's operands through the elemental generator.

Where the comparator is a key order the launches compare packed keys
(:mod:`fusegen_plugins.emitters.sort_keys`); any other comparator is evaluated by this module's comparator
network: a tiled launch moves every operand and the original positions (the iota operand's, else a scratch
``s32`` buffer's) through its steps in registers, a global one loads both elements of its pairs. Positions
``>= NSORT`` are virtual padding that sorts last: a pair whose upper position is padding is left as it is.
Ties (neither element before the other) are broken by the original position (the stable order).
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import ElementalGenerator, deep_recursion
from fusegen.codegen.emitter import EmitterUnsupported, store_line
from fusegen.codegen.kernel import EmittedFusion, LaunchDimensions
from fusegen.codegen.launch import sort_launches
from fusegen_plugins.emitters import sort_network as net


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


def tiled_launch_dims(em: Any, shape0: Any, bits: list[int], tile: int, rounded: int) -> LaunchDimensions:
    """The tiled kernel's launch (one program per ``tile`` of a row padded to ``rounded``), XLA's own
    (:func:`fusegen.codegen.launch.sort_launches`, ``BuildKernelThunkForSort``) where grid and threads agree."""
    xla = sort_launches(shape0, em.dim, bits, em.analysis.device)
    dims = LaunchDimensions(grid=(em.rows * rounded // tile,), num_warps=max(1, min(32, tile // 128)),
                            threads=(max(1, tile // 4), 1, 1))
    if xla and xla[0].grid3 == dims.grid3 and xla[0].threads3 == dims.threads3:
        dims = attrs.evolve(xla[0], num_warps=dims.num_warps)
    return dims


def emit_at_scale(em: Any, packed_keys: bool = True) -> EmittedFusion:
    """The multi-launch sort of ``em`` (a :class:`fusegen_plugins.emitters.sort.SortFusion` whose padded
    dimension exceeds one program): XLA's tiled and global bitonic launches, one specialised kernel each
    (:mod:`fusegen_plugins.emitters.sort_network`). Where the comparator is a key order that packs into one
    ``s64`` (:func:`fusegen_plugins.emitters.sort_keys.key_packing`) they compare packed keys
    (:func:`~fusegen_plugins.emitters.sort_keys.emit_keyed`), unless ``packed_keys`` is false (the
    comparator network, for tests comparing the two).

    Raises:
        EmitterUnsupported: an operand is output by two leaves, or the comparator returns a tuple.
    """
    from fusegen_plugins.emitters.sort_keys import emit_keyed, key_packing

    sort, fusion = em.sort, em.fusion
    iotas = position_operands(sort, em.dim)
    pos = iotas[0] if iotas else None
    if packed_keys:
        packing = key_packing(em.comparator, sort.operands, em.n, iotas)
        if packing is not None:
            return emit_keyed(em, packing, iotas)
    bits, stages, tile, plan = net.launch_plan(em, pos)
    base = ts.sanitize_identifier(f"sort_{fusion.name}", "k")
    entry = f"{base}_bitonic"
    sources = net.Sources(first=lambda i: _tile_source(em, plan, pos, entry, True, i),
                          tile=lambda i: _tile_source(em, plan, pos, entry, False, i),
                          global_step=lambda c, f: _global_source(em, plan, entry, c, f), entry=entry,
                          rows=lambda: _tile_source(em, plan, pos, entry, False, True))
    return EmittedFusion(emitter=em.name, kernels=tuple(net.launches(em, sources, stages, tile, bits, base)))


def position_operands(sort: Any, dim: int) -> tuple[int, ...]:
    """The sort operands that are integer ``iota`` s along the sorted dimension (JAX's argsort payload,
    StableSortExpander's tie-break): each holds every element's original position."""
    return tuple(k for k, o in enumerate(sort.operands)
                 if o.opcode == "iota" and o.shape.element_type in ("s32", "s64", "u32", "u64")
                 and int(o.attrs.get("iota_dimension", -1)) == dim)


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


def _carrier(v: str, et: str, ctx: Any) -> str:
    """``v`` as the tensor the network moves (``pred`` as ``int8``: a gather of booleans is not portable)."""
    return ctx.emit(f"{v}.to(tl.int8)", "cr") if et == "pred" else v


def _value(c: str, et: str, ctx: Any) -> str:
    """The comparator's operand from a carrier (:func:`_carrier`)."""
    return ctx.emit(f"{c} != 0", "pv") if et == "pred" else c


def _first_of(gen: Any, em: Any, xs: list[str], ys: list[str], px: str, py: str) -> str:
    """Whether ``x`` (operand values ``xs``, position ``px``) goes before ``y``: the comparator, ties
    (neither before the other) by the position (the stable order)."""
    less_xy, less_yx = compare_both(gen, em.sort, em.comparator, xs, ys)
    return gen.ctx.emit(f"{less_xy} | (({less_yx} ^ True) & ({px} < {py}))", "first")


def _tile_source(em: Any, plan: tuple, pos: int | None, entry: str, first: bool,
                 interpret: bool) -> tuple[str, tuple]:
    """A tiled launch of the comparator network: every operand (and the positions) of the tile in registers,
    the steps of constexprs ``S0..S1`` / ``MTOP..MBOT`` exchanging all of them on the comparator's verdict
    (a pair whose upper position is padding stays), stored once. ``first``: the operands come from the
    fusion's inputs, the positions are the positions themselves; else from the buffers (``interpret``: the
    interpreter variant's source, the same arithmetic)."""
    sort = em.sort
    bufs, pos_buf = plan
    ctx, gen = net.begin(em)
    names = [ctx.param(kind, index, shape, f"b{b}") for b, (kind, index, shape, _) in enumerate(bufs)]
    offs = net.tile_offsets(ctx, em, [buf[2] for buf in bufs], interpret)
    ets = [o.shape.element_type for o in sort.operands]
    buf_of = {buf[3]: j for j, buf in enumerate(bufs)}
    b = ctx.body
    with deep_recursion():
        if first:
            index = net.row_index(gen, em, "row_c", "qc")
            carried = [_carrier(gen.value(o, index), et, ctx) for o, et in zip(sort.operands, ets)]
            position = ctx.emit("qr.to(tl.int32)", "ix")
        else:
            carried = [ctx.emit(f"tl.load({names[buf_of[k]]} + {offs[buf_of[k]]}, mask=valid, other=0)", "v")
                       for k in range(len(ets))]
            position = (ctx.emit(f"tl.load({names[pos_buf]} + {offs[pos_buf]}, mask=valid, other=0)", "ix")
                        if pos is None else carried[pos])
        carried = [ctx.emit(c, "c") for c in carried]  # variables the network reassigns
        if pos is None:
            carried.append(ctx.emit(position, "ix"))
        pix = len(carried) - 1 if pos is None else pos
        loop_at = len(b.lines)
        net.begin_tile_steps(b, interpret)
        start = len(b.lines)
        gen.push_scope()
        try:
            part = [ctx.emit(f"tl.gather({c}, pl, 0)", "w") for c in carried]
            mine = [_value(c, et, ctx) for c, et in zip(carried, ets)]
            theirs = [_value(w, et, ctx) for w, et in zip(part, ets)]
            self_first = _first_of(gen, em, mine, theirs, carried[pix], part[pix])
            other_first = _first_of(gen, em, theirs, mine, part[pix], carried[pix])
            act = "valid & ((qr ^ xm) < NSORT)" if em.n != em.npad else "valid"
            # the lower lane takes its partner if that goes first, the upper one if itself goes first
            b.line(f"swap = ({act}) & tl.where(up, {self_first}, {other_first})")
            for c, w in zip(carried, part):
                b.line(f"{c} = tl.where(swap, {w}, {c})")
            b.lines[start:] = _cse(b.lines[start:])
        finally:
            gen.pop_scope()
        net.end_tile_steps(b)
        b.lines[loop_at:] = _hoist(b.lines[loop_at:], 2)
        for j, (kind, _, shape, k) in enumerate(bufs):
            v = carried[pix] if k == -1 else _value(carried[k], ets[k], ctx)
            store_line(gen, names[j], offs[j], v, shape.element_type, "valid")
    source = ctx.render(entry, net.TILE_CONSTEXPRS, net.tile_prologue(ctx.idx_t, interpret))
    return source, tuple(ctx.params)


def _global_source(em: Any, plan: tuple, entry: str, contiguous: bool, flip: bool) -> tuple[str, tuple]:
    """A global step of the comparator network (constexpr ``M``): both elements of every pair loaded from
    each buffer, stored exchanged where the upper one goes first."""
    bufs, pos_buf = plan
    ets = [o.shape.element_type for o in em.sort.operands]
    buf_of = {buf[3]: j for j, buf in enumerate(bufs)}

    def swap(ctx: Any, gen: Any, lo: list[str], hi: list[str]) -> str:
        vl = [_value(lo[buf_of[k]], et, ctx) for k, et in enumerate(ets)]
        vh = [_value(hi[buf_of[k]], et, ctx) for k, et in enumerate(ets)]
        return _first_of(gen, em, vh, vl, hi[pos_buf], lo[pos_buf])

    return net.global_step_source(em, plan, entry, contiguous, flip, swap, finish=_cse)
