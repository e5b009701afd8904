"""Small HLO editing helpers shared by the module passes (fusion, gemm-fusion, gemm-rewriter).

Mirrors the pieces of ``HloComputation`` / ``HloModule`` that XLA's passes use to rewrite a graph
(``xla/hlo/ir/hlo_computation.cc``: ``AddInstruction``, ``ReplaceAllUsesWith``,
``RemoveInstructionAndUnusedOperands``; ``HloModule::AddComputationAndUnifyNamesAndIds``): unique names,
cloning into a new computation, building a ``fusion`` instruction, replacing uses and dead-code removal.
"""

from __future__ import annotations

import re
from typing import Any, Iterable, Sequence

from fusegen.hlo.ir import COMPUTATION_ATTRIBUTES, Computation, Instruction, Module, Shape

#: Opcodes that must never be removed as dead code even without users.
SIDE_EFFECTING = frozenset({
    "send", "send-done", "recv", "recv-done", "outfeed", "infeed", "all-reduce-start", "all-reduce-done",
    "all-gather-start", "all-gather-done", "collective-permute-start", "collective-permute-done",
    "custom-call", "rng", "rng-get-and-update-state", "after-all", "add-dependency", "optimization-barrier",
})


class NameUniquer:
    """Hands out module-wide unique instruction / computation names (``name``, ``name.1``, ``name.2``...)."""

    def __init__(self, module: Module):
        self.used: set[str] = set()
        for c in module.computations:
            self.used.add(c.name)
            for i in c.instructions:
                self.used.add(i.name)

    def get(self, base: str) -> str:
        base = re.sub(r"[^A-Za-z0-9_.\-]", "_", base) or "x"
        if base not in self.used:
            self.used.add(base)
            return base
        stem = re.sub(r"\.\d+$", "", base)
        k = 1
        while f"{stem}.{k}" in self.used:
            k += 1
        name = f"{stem}.{k}"
        self.used.add(name)
        return name


def replace_all_uses(comp: Computation, old: Instruction, new: Instruction) -> None:
    """Point every use of ``old`` in ``comp`` (and the root) at ``new``."""
    for inst in comp.instructions:
        if inst is new:
            continue
        if any(o is old for o in inst.operands):
            inst.operands = [new if o is old else o for o in inst.operands]
    if comp.root is old:
        comp.root = new
    comp.invalidate()


def insert_before(comp: Computation, inst: Instruction, anchor: Instruction) -> Instruction:
    """Add ``inst`` to ``comp`` right before ``anchor`` (keeps text order a valid post order)."""
    inst.parent = comp
    idx = next((k for k, i in enumerate(comp.instructions) if i is anchor), len(comp.instructions))
    comp.instructions.insert(idx, inst)
    comp.invalidate()
    return inst


def topo_sort(comp: Computation) -> None:
    """Reorder ``comp.instructions`` so that every operand precedes its users (stable otherwise)."""
    pos = {id(i): k for k, i in enumerate(comp.instructions)}
    done: set[int] = set()
    order: list[Instruction] = []
    for start in comp.instructions:
        if id(start) in done:
            continue
        stack: list[tuple[Instruction, int]] = [(start, 0)]
        while stack:
            node, k = stack.pop()
            if id(node) in done:
                continue
            ops = [o for o in node.operands if id(o) in pos]
            if k < len(ops):
                stack.append((node, k + 1))
                if id(ops[k]) not in done:
                    stack.append((ops[k], 0))
            else:
                done.add(id(node))
                order.append(node)
    comp.instructions = order
    comp.invalidate()


def remove_dead(comp: Computation, keep: Iterable[Instruction] = ()) -> int:
    """Remove instructions of ``comp`` that nothing uses (never the root, parameters or side effects).

    Returns:
        the number of instructions removed.
    """
    keep_ids = {id(k) for k in keep}
    removed = 0
    while True:
        used: set[int] = set()
        for i in comp.instructions:
            for o in i.operands:
                used.add(id(o))
            for p in i.attrs.get("control-predecessors") or []:
                if isinstance(p, Instruction):
                    used.add(id(p))
        dead = [i for i in comp.instructions
                if id(i) not in used and i is not comp.root and i.opcode != "parameter"
                and i.opcode not in SIDE_EFFECTING and id(i) not in keep_ids]
        if not dead:
            break
        dead_ids = {id(d) for d in dead}
        comp.instructions = [i for i in comp.instructions if id(i) not in dead_ids]
        removed += len(dead)
    comp.invalidate()
    return removed


def clone_attrs(inst: Instruction) -> dict[str, Any]:
    """A shallow copy of ``inst.attrs`` (computations are shared, JSON configs copied)."""
    import copy

    out: dict[str, Any] = {}
    for k, v in inst.attrs.items():
        if k in COMPUTATION_ATTRIBUTES:
            out[k] = v
        elif k == "control-predecessors":
            continue
        else:
            out[k] = copy.deepcopy(v)
    return out


def build_computation(name: str, members: Sequence[Instruction], root: Instruction,
                      param_prefix: str = "param_") -> tuple[Computation, list[Instruction]]:
    """Clone ``members`` (a set of instructions of one computation, ``root`` among them) into a new computation.

    Operands of members that are not members become parameters, numbered in order of first use
    (members are visited in their original program order).

    Returns:
        ``(computation, external_operands)``: the new computation and, per parameter number, the original
        instruction it stands for (the fusion's operands).
    """
    member_ids = {id(m) for m in members}
    comp_order = root.parent.instructions if root.parent is not None else list(members)
    pos = {id(i): k for k, i in enumerate(comp_order)}
    ordered = sorted(members, key=lambda m: pos.get(id(m), 0))
    clones: dict[int, Instruction] = {}
    params: list[Instruction] = []
    externals: list[Instruction] = []
    ext_index: dict[int, int] = {}
    body: list[Instruction] = []
    for m in ordered:
        new_ops = []
        for o in m.operands:
            if id(o) in member_ids:
                new_ops.append(clones[id(o)])
                continue
            if id(o) not in ext_index:
                k = len(externals)
                ext_index[id(o)] = k
                externals.append(o)
                p = Instruction(name=f"{param_prefix}{k}", opcode="parameter", shape=o.shape,
                                attrs={"parameter_number": k})
                params.append(p)
            new_ops.append(params[ext_index[id(o)]])
        c = Instruction(name=m.name, opcode=m.opcode, shape=m.shape, operands=new_ops, attrs=clone_attrs(m))
        clones[id(m)] = c
        body.append(c)
    comp = Computation(name=name, instructions=params + body, root=clones[id(root)])
    return comp, externals


def add_computation_before(module: Module, comp: Computation, user_comp: Computation | None) -> None:
    """Insert ``comp`` into ``module.computations`` before ``user_comp`` (callees precede callers)."""
    if user_comp is None:
        module.computations.append(comp)
        return
    idx = next((k for k, c in enumerate(module.computations) if c is user_comp), len(module.computations))
    module.computations.insert(idx, comp)


def make_fusion(module: Module, comp: Computation, members: Sequence[Instruction], root: Instruction,
                kind: str, fusion_name: str, computation_name: str, uniq: NameUniquer,
                backend_config: dict | None = None, metadata: Any = None) -> Instruction:
    """Replace ``root`` (and the ``members`` feeding it) with a ``fusion`` instruction calling a new computation.

    Members whose original still has users outside the fusion stay in ``comp`` (they are duplicated, as
    XLA's instruction fusion duplicates cheap producers); the others become dead and are removed.

    Returns:
        the new fusion instruction (inserted right before ``root``'s old position).
    """
    fused, externals = build_computation(uniq.get(computation_name), members, root)
    for inst in fused.instructions:
        if inst.opcode != "parameter":
            inst.name = uniq.get(inst.name)
    attrs: dict[str, Any] = {"kind": kind, "calls": fused}
    if metadata:
        attrs["metadata"] = metadata
    if backend_config is not None:
        attrs["backend_config"] = backend_config
    fusion = Instruction(name=uniq.get(fusion_name), opcode="fusion", shape=root.shape, operands=list(externals),
                         attrs=attrs)
    insert_before(comp, fusion, root)
    replace_all_uses(comp, root, fusion)
    add_computation_before(module, fused, comp)
    return fusion


def shape_bytes(shape: Shape) -> int:
    """Byte size of an array (or tuple) shape; sub-byte types count one byte per element (as stored)."""
    from fusegen.hlo import dtypes

    if shape.is_tuple:
        return sum(shape_bytes(s) for s in shape.tuple_shapes or ())
    if not shape.is_array:
        return 0
    try:
        bits = dtypes.bit_width(shape.element_type)
    except Exception:
        bits = 32
    return shape.numel * max(1, bits // 8) if bits >= 8 else (shape.numel * bits + 7) // 8


def fusible_computations(module: Module) -> list[Computation]:
    """Computations a pass rewrites: the entry and those run as control flow (``while``/``conditional``/``call``
    bodies), never fused computations or reducers (XLA ``GetFusibleComputations``)."""
    excluded: set[int] = set()
    for c in module.computations:
        for i in c.instructions:
            if i.opcode in ("fusion", "reduce", "reduce-window", "map", "sort", "scatter", "select-and-scatter",
                            "all-reduce", "reduce-scatter", "all-reduce-start", "custom-call"):
                for cc in i.called_computations:
                    excluded.add(id(cc))
    # computations reachable only through excluded ones are excluded too (nested reducers)
    changed = True
    while changed:
        changed = False
        for c in module.computations:
            if id(c) in excluded:
                for i in c.instructions:
                    for cc in i.called_computations:
                        if id(cc) not in excluded:
                            excluded.add(id(cc))
                            changed = True
    return [c for c in module.computations if id(c) not in excluded]
