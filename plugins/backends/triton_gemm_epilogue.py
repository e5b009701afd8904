"""The fused computation around a Triton GEMM's dot: nested fusions inlined, and the epilogue's map from the
dot's elements to the fusion root's.

XLA's GEMM fusions end with layout-changing bitcasts, ``ReshapeMayBeBitcast`` reshapes and transposes that the
tiling propagates through (``triton_tiling_propagation.cc``, ``GetPropagatedDimOrders`` toward users); the epilogue
is emitted at the root index of each accumulator element, which :func:`root_index` computes forward through them
once :func:`dot_to_root_map` has checked that they move each dot element to exactly one root element.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegen.codegen.elemental import ELEMENTWISE, ElementalGenerator, KernelContext, int_list
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.hlo.ir import Computation, Instruction

# ------------------------------------------------------------------------------------------------ flattening
def inline_nested(comp: Computation) -> Computation:
    """A copy of ``comp`` with nested ``fusion`` instructions (``__triton_nested_gemm_fusion`` operands) inlined."""
    if not any(i.opcode == "fusion" for i in comp.instructions):
        return comp
    out: list[Instruction] = []

    def clone(inst: Instruction, ops: list[Instruction]) -> Instruction:
        c = Instruction(name=inst.name, opcode=inst.opcode, shape=inst.shape, operands=ops, attrs=dict(inst.attrs))
        out.append(c)
        return c

    def inline(c: Computation, args: list[Instruction]) -> Instruction:
        local: dict[int, Instruction] = {}
        for inst in c.instructions:
            if inst.opcode == "parameter":
                local[id(inst)] = args[inst.parameter_number]
                continue
            ops = [local[id(o)] for o in inst.operands]
            if inst.opcode == "fusion":
                local[id(inst)] = inline(inline_nested(inst.fused_computation), ops)
            else:
                local[id(inst)] = clone(inst, ops)
        return local[id(c.root)]

    params = [Instruction(name=p.name, opcode="parameter", shape=p.shape, attrs=dict(p.attrs)) for p in comp.parameters]
    out.extend(params)
    root = inline(comp, params)
    return Computation(name=comp.name, instructions=out, root=root)


class EpilogueGen(ElementalGenerator):
    """ElementalGenerator whose ``dot`` value is the accumulator tile variable ``acc``.

    The epilogue is evaluated at the root index of each accumulator lane; the ops between the dot and the root are
    checked to be a bijection of the dot's elements (:func:`dot_to_root_map`), so whichever index expression a path
    through bitcasts, reshapes and transposes reaches the dot with, it names that lane's own element.
    """

    def __init__(self, ctx: KernelContext, comp: Computation, dot: Instruction):
        super().__init__(ctx, comp)
        self.acc_dot = dot

    def value(self, inst: Instruction, idx: Any) -> Any:
        if inst is self.acc_dot:
            return "acc"
        return super().value(inst, idx)


_LAYOUT_OPS = ("bitcast", "reshape", "transpose", "copy")


def _dot_dependents(comp: Computation, dot: Instruction) -> list[Instruction]:
    """Instructions computed from ``dot``, in topological (definition) order."""
    dep = {id(dot)}
    out = []
    for inst in comp.instructions:
        if inst is not dot and any(id(o) in dep for o in inst.operands):
            dep.add(id(inst))
            out.append(inst)
    return out


def _permuted(inst: Instruction, a: Any) -> Any:
    """``a`` (an array in ``inst``'s operand's shape) moved as ``inst`` (bitcast/reshape/transpose/copy) moves data."""
    src = inst.operands[0].shape
    if inst.opcode == "transpose":
        return np.transpose(a, int_list(inst.attrs.get("dimensions")))
    if inst.opcode == "copy":
        return a
    if inst.opcode == "reshape":
        return a.reshape(inst.shape.dimensions)
    # bitcast: physical (major-to-minor) order is kept
    s_phys = tuple(reversed(src.minor_to_major()))
    d_phys = tuple(reversed(inst.shape.minor_to_major()))
    flat = np.transpose(a, s_phys).reshape(-1)
    phys = flat.reshape([inst.shape.dimensions[d] for d in d_phys])
    return np.transpose(phys, np.argsort(d_phys))


def dot_to_root_map(comp: Computation, dot: Instruction) -> None:
    """Check that the ops from ``dot`` to the root move each dot element to exactly one root element.

    Allowed on the path: bitcasts, reshapes, transposes and copies (XLA's GEMM fusions end with layout-changing
    bitcasts, ``ReshapeMayBeBitcast`` reshapes and transposes the tiling propagates through, as in
    ``triton_tiling_propagation.cc``'s ``GetPropagatedDimOrders`` toward users), and elementwise ops whose
    dot-dependent operands all carry the same arrangement of the dot's elements.

    Raises:
        EmitterUnsupported: an epilogue op that is not such a permutation (a broadcast or reduce of the dot, or an
        elementwise op combining differently arranged copies of it).
    """
    if dot.shape.numel > (1 << 24):  # the check itself would cost too much; keep the old rule
        arr_of = None
    else:
        arr_of = {id(dot): np.arange(dot.shape.numel, dtype=np.int64).reshape(dot.shape.dimensions)}
    deps = _dot_dependents(comp, dot)
    ids = {id(dot)} | {id(u) for u in deps}
    for u in deps:
        if u.shape.is_tuple:
            raise EmitterUnsupported(u.opcode, u.name, "epilogue op is not elementwise over the dot's shape")
        dep_ops = [o for o in u.operands if id(o) in ids]
        if u.opcode in _LAYOUT_OPS:
            if arr_of is None and u.opcode != "copy":
                raise EmitterUnsupported(u.opcode, u.name, "epilogue op is not elementwise over the dot's shape")
            if arr_of is not None:
                arr_of[id(u)] = _permuted(u, arr_of[id(dep_ops[0])])
            continue
        if u.opcode not in ELEMENTWISE or any(o.shape.dimensions != u.shape.dimensions for o in dep_ops):
            raise EmitterUnsupported(u.opcode, u.name, "epilogue op is not elementwise over the dot's shape")
        if arr_of is not None:
            first = arr_of[id(dep_ops[0])]
            if any(not np.array_equal(arr_of[id(o)], first) for o in dep_ops[1:]):
                raise EmitterUnsupported(u.opcode, u.name, "epilogue combines differently arranged copies of the dot")
            arr_of[id(u)] = first
    if comp.root is not dot and id(comp.root) not in ids:
        raise EmitterUnsupported(comp.root.opcode, comp.root.name, "fusion root does not depend on the dot")


def root_index(gen: ElementalGenerator, comp: Computation, dot: Instruction, dot_idx: tuple) -> tuple:
    """The root index of the element the dot holds at ``dot_idx`` (forward through the layout ops)."""
    idx_of = {id(dot): tuple(dot_idx)}
    for u in _dot_dependents(comp, dot):
        src = next(o for o in u.operands if id(o) in idx_of)
        i = idx_of[id(src)]
        if u.opcode == "transpose":
            perm = int_list(u.attrs.get("dimensions"))
            idx_of[id(u)] = tuple(i[p] for p in perm)
        elif u.opcode in ("bitcast", "reshape"):
            s_m2m = src.shape.minor_to_major() if u.opcode == "bitcast" else row_major(src.shape.rank)
            d_m2m = u.shape.minor_to_major() if u.opcode == "bitcast" else row_major(u.shape.rank)
            lin = gen.linearize(i, src.shape.dimensions, s_m2m)
            idx_of[id(u)] = gen.delinearize(lin, u.shape.dimensions, d_m2m)
        else:
            idx_of[id(u)] = i
    return idx_of[id(comp.root)]


def row_major(n: int) -> tuple[int, ...]:
    return tuple(range(n - 1, -1, -1))


def root_dims_of_dot(comp: Computation, dot: Instruction) -> list[int | None] | None:
    """For each dimension of the fusion root, the dot dimension it is (``None`` for a size-1 dimension the layout
    ops added), or ``None`` when a reshape or bitcast on the way merges or splits dimensions.

    A nested GEMM fusion's ``block_level_fusion_config`` tiles the root (the fusion's output): a root that is the
    dot moved by a layout-changing bitcast or a transpose has its M and N tiles in other places than the dot's.
    """
    dims_of: dict[int, list[int | None]] = {id(dot): list(range(dot.shape.rank))}
    for u in _dot_dependents(comp, dot):
        src = next(o for o in u.operands if id(o) in dims_of)
        d = dims_of[id(src)]
        if u.opcode == "transpose":
            dims_of[id(u)] = [d[p] for p in int_list(u.attrs.get("dimensions"))]
        elif u.opcode in ("bitcast", "reshape"):
            s_order = list(reversed(src.shape.minor_to_major())) if u.opcode == "bitcast" else list(range(src.shape.rank))
            u_order = list(reversed(u.shape.minor_to_major())) if u.opcode == "bitcast" else list(range(u.shape.rank))
            s_big = [x for x in s_order if src.shape.dimensions[x] != 1]
            u_big = [x for x in u_order if u.shape.dimensions[x] != 1]
            if [src.shape.dimensions[x] for x in s_big] != [u.shape.dimensions[x] for x in u_big]:
                return None
            out: list[int | None] = [None] * u.shape.rank
            for a, b in zip(u_big, s_big):
                out[a] = d[b]
            dims_of[id(u)] = out
        else:
            dims_of[id(u)] = list(d) if u.shape.rank == src.shape.rank else [None] * u.shape.rank
    return dims_of.get(id(comp.root))
