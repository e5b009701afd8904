"""Helpers of the block-level Triton emitter (:mod:`fusegen_plugins.backends.triton_block_level`): a tile's
coordinate lines, index maps between a tile and an operand with unit dimensions, reduce identities, and the
tests that decide where a reduce's row is reduced once per program.

Mirrors XLA's generic Triton fusion emitter (``xla/backends/gpu/codegen/triton/fusion_emitter.cc``) where the
functions say so.
"""

from __future__ import annotations

import re

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import int_list
from fusegen.hlo.ir import Instruction


def lane_invariant(expr: int | str, lines: list[str]) -> bool:
    """Whether the index ``expr`` (a constant or a variable of the kernel's statements ``lines``, ``name = ...``)
    is built from the tile number and constants only, never from ``lane``; a name assigned several times (a
    loop-carried one) varies if any of its definitions does, and a name the lines do not define is not known
    to be invariant."""
    if isinstance(expr, int):
        return True
    defs: dict[str, list[str]] = {}
    for line in lines:
        m = _ASSIGN.match(line)
        if m:
            defs.setdefault(m.group(1), []).append(m.group(2))
    memo: dict[str, bool] = {}

    def varies(name: str) -> bool:
        if name == "lane":
            return True
        if name in memo:
            return memo[name]
        memo[name] = False  # a loop-carried name: its other definitions decide
        memo[name] = any(varies(t) for rhs in defs.get(name, ()) for t in _NAME.findall(rhs)
                         if t == "lane" or t in defs)
        return memo[name]

    return expr in defs and not varies(expr)


def feeds_reduce(src: Instruction) -> bool:
    """Whether a reduce is among ``src`` and the instructions it reads in its computation."""
    seen, stack = set(), [src]
    while stack:
        i = stack.pop()
        if id(i) in seen:
            continue
        seen.add(id(i))
        if i.opcode in ("reduce", "reduce-window"):
            return True
        stack.extend(i.operands)
    return False


def reduced_count(inst: Instruction) -> int:
    n = 1
    for d in int_list(inst.attrs.get("dimensions")):
        n *= inst.operands[0].shape.dimensions[d]
    return n


_ASSIGN = re.compile(r"\s*([A-Za-z_]\w*) = (.*)$")
_NAME = re.compile(r"[A-Za-z_]\w*")

#: stands for the kernel's parameter list in calls emitted before that list is final
PARAMS_TOKEN = "__PARAMS__, "


def reduce_identity(op: str, ct: str, shape: str) -> str:
    """The identity of ``op`` (add/maximum/minimum) over ``ct`` as a ``shape`` tensor literal."""
    if op == "add":
        return ts.float_constant(0.0, ct, shape) if ct.startswith("f") else ts.int_constant(0, ct, shape)
    if ct.startswith("f"):
        return ts.float_constant(float("-inf") if op == "maximum" else float("inf"), ct, shape)
    import numpy as np

    from fusegen.hlo import dtypes

    info = np.iinfo(dtypes.numpy_dtype(ct))
    return ts.int_constant(int(info.min if op == "maximum" else info.max), ct, shape)


#: Triton's largest tensor (``TRITON_MAX_TENSOR_NUMEL``), the bound XLA checks block-level tiles against.
MAX_TENSOR_NUMEL = 1048576


def unit_map(src_dims: tuple[int, ...], dims: tuple[int, ...]) -> list[int | None] | None:
    """For each dimension of ``src_dims``, the dimension of ``dims`` it is once dimensions of size 1 are
    dropped from both (``None`` for a unit dimension of ``src_dims``); ``None`` when the two differ otherwise."""
    big = [d for d, n in enumerate(dims) if n != 1]
    src_big = [d for d, n in enumerate(src_dims) if n != 1]
    if [dims[d] for d in big] != [src_dims[d] for d in src_big]:
        return None
    out: list[int | None] = [None] * len(src_dims)
    for s_d, d in zip(src_big, big):
        out[s_d] = d
    return out


def broadcast_map(src_dims: tuple[int, ...], dims: tuple[int, ...], rdims: list[int], idx: tuple,
                  lane_idx: tuple[str, ...]) -> list[int | None] | None:
    """:func:`unit_map` where the tile also has dimensions the reduce's operand lacks (the output broadcasts the
    reduced rows along them: a softmax over rows of 3 broadcast to ``[8, 3, 125, 3]``): each kept dimension of
    the operand is the tile dimension whose lane index ``idx`` (the reduce's output index at the lane) names,
    each reduced one the only unused tile dimension of its extent between its neighbours' (a unit dimension
    ``None``). XLA's tile propagation drops the broadcast dimensions from the operand's tile; here the tile keeps
    them and each of their lanes reduces its own copy of the row. ``None`` when ``idx`` is not the lanes' own
    indices or a reduced dimension's place is not unique."""
    kept = [d for d in range(len(src_dims)) if d not in rdims]
    if len(idx) != len(kept):
        return None
    at = {name: d for d, name in enumerate(lane_idx)}
    out: list[int | None] = [None] * len(src_dims)
    for s, i in zip(kept, idx):
        if isinstance(i, int):
            if i != 0 or src_dims[s] != 1:
                return None
            continue
        d = at.get(i)
        if d is None or dims[d] != src_dims[s] or d in out:
            return None
        out[s] = d
    for s in rdims:
        if src_dims[s] == 1:
            continue
        lo = max((out[t] for t in range(s) if out[t] is not None), default=-1)
        hi = min((out[t] for t in range(s + 1, len(src_dims)) if out[t] is not None), default=len(dims))
        cand = [d for d in range(lo + 1, hi) if d not in out and dims[d] == src_dims[s]]
        if len(cand) != 1:
            return None
        out[s] = cand[0]
    mapped = [d for d in out if d is not None]
    return out if mapped == sorted(mapped) and mapped else None


def reshaped_rows(bc: Instruction, dims: tuple[int, ...], tile: tuple[int, ...]) -> int:
    """``k`` when ``bc`` is a row-major bitcast of a reduce over the trailing ``k`` dimensions of a row-major
    reshape of the tile's array onto the tile's leading dimensions, with the tile covering those ``k``
    dimensions (gpt12's final log-softmax reduces ``f32[512,8192]`` and bitcasts the maxima to ``[4,128]``);
    else 0 (``dims``, ``tile``: the tile's array and tile). Such a reduce folds the tile's own rows, so it is a
    tile reduction, not a per-lane loop."""
    red = bc.operands[0]
    if len(red.operands) != 2 or red.shape.is_tuple:
        return 0
    sd = tuple(red.operands[0].shape.dimensions)
    rd = sorted(int_list(red.attrs.get("dimensions")))
    k = len(rd)
    if not k or k >= len(dims) or rd != list(range(len(sd) - k, len(sd))) or sd[-k:] != dims[-k:]:
        return 0
    if tuple(bc.shape.dimensions) != dims[:-k] or any(tile[d] < dims[d] for d in range(len(dims) - k, len(dims))):
        return 0
    for s in (red.operands[0].shape, red.shape, bc.shape):
        if tuple(s.minor_to_major()) != tuple(reversed(range(s.rank))):
            return 0
    return k


def row_major_strides(extents: list[int] | tuple[int, ...]) -> list[int]:
    """Strides of a row-major walk over ``extents`` (the last dimension's stride is 1)."""
    out, st = [], 1
    for e in reversed(extents):
        out.append(st)
        st *= e
    return out[::-1]


def tile_coordinates(dims: tuple[int, ...], sizes: list[int], tile: tuple[int, ...], counts: list[int],
                      strides_t: list[int], strides_l: list[int],
                      outer_counts: list[int] | None = None) -> list[str]:
    """Prologue lines defining ``g<d>`` (the lane's index along dimension ``d``: tile origin + lane offset, one
    ``[BLOCK]`` tensor per dimension) and ``valid`` (the lane lies in the tile and in the array).

    Written so that Triton's axis analysis sees what XLA's tile pointers state (``fusion_emitter.cc``: a tile's
    offsets are its origin plus ``make_range`` along each dimension, masked only where the tile overruns the
    array): the minor dimension's lanes are ``lane % T`` (contiguous, divisible), the others ``lane // S``
    (constant over the minor run); no clamp on an index (a clamp makes Triton's contiguity 1, so every access
    would be scalar). Lanes past the array keep unclamped indices and are masked with ``valid`` on every load
    and store (the generator's ``ctx.mask``); a tile that fits the array has no mask terms at all.
    ``outer_counts``: the tile grid ``strides_t`` walks, where ``counts`` leaves dimensions untiled (default
    ``counts``)."""
    lines: list[str] = []
    valid: list[str] = []
    rank = len(dims)
    inner = [d for d in range(rank) if tile[d] > 1]
    for d in range(rank):
        if counts[d] == 1:
            o = "0"
        else:
            q = "tile" if strides_t[d] == 1 else f"(tile // {strides_t[d]})"
            # the outermost tiled dimension needs no modulo (tile < N)
            outer = all(c == 1 for c in (outer_counts or counts)[:d])
            o = f"{q}{'' if outer else f' % {counts[d]}'}"
            o = o if sizes[d] == 1 else f"({o}) * {sizes[d]}"
        if tile[d] == 1:
            lines.append(f"g{d} = zero + {o}" if o != "0" else f"g{d} = zero")
            if dims[d] % max(1, sizes[d]):
                valid.append(f"(g{d} < {dims[d]})")
            continue
        q = "lane" if strides_l[d] == 1 else f"(lane // {strides_l[d]})"
        lines.append(f"l{d} = {q}" + ("" if d == inner[0] else f" % {tile[d]}"))
        lines.append(f"g{d} = l{d}" + ("" if o == "0" else f" + {o}"))
        if dims[d] % sizes[d]:
            valid.append(f"(g{d} < {dims[d]})")
        if tile[d] > sizes[d]:
            valid.append(f"(l{d} < {sizes[d]})")
    lines.append("valid = " + (" & ".join(valid) if valid else "mask"))
    return lines
