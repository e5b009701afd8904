"""The ``fusion`` pass: producer-consumer fusion of unoptimized HLO into loop and input (reduction) fusions.

A simplified form of XLA:GPU's fusion pipeline (``xla/service/gpu/transforms/priority_fusion.cc``,
``xla/service/instruction_fusion.cc``, ``multi_output_fusion.cc``, ``fusion_wrapper.cc``), enough to turn
``jax.jit(f).lower(...).as_text("hlo")`` modules into fused modules the emitters run:

* consumers are visited users-first; each grows a fusion by pulling in operand producers that are fusible
  (elementwise ops, broadcast, reshape/bitcast, transpose, slice, concatenate, pad, iota, constants,
  reverse, dynamic-slice, gather, ``reduce-precision``);
* a producer whose other users stay outside is duplicated into the fusion only when it is cheap
  (``InstructionFusion::IsExpensive``: transcendental ops, divide, power... are never duplicated), as XLA does;
* a ``reduce`` is a fusion root (``kInput``) and takes producers into its inputs, never fused into its users;
* reductions of the same input with compatible shapes are merged into one multi-output fusion
  (``GpuMultiOutputFusion``'s sibling fusion, ``multi_output_fusion.cc``; ``IsFusibleAsMultiOutputFusionRoot``);
* every remaining non-trivial op is wrapped into a single-instruction ``kLoop`` fusion (``FusionWrapper``);
  bitcasts, parameters, constants, tuples, get-tuple-element, dots and custom calls are left alone.

Limits: at most :data:`MAX_OPERANDS` fusion operands (XLA ``kMaxOperandsAndOutputsPerFusion`` is 96) and
:data:`MAX_MEMBERS` fused instructions per fusion.
"""

from __future__ import annotations

from typing import Any

from fusegen.hlo.ir import Computation, Instruction, Module
from fusegen.passes.hlo_edit import (NameUniquer, build_computation, fusible_computations, insert_before,
                                     make_fusion, remove_dead, replace_all_uses, add_computation_before,
                                     topo_sort)

MAX_OPERANDS = 64
MAX_MEMBERS = 256

_ELEMENTWISE = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "copy", "cosine",
    "count-leading-zeros", "divide", "erf", "exponential", "exponential-minus-one", "floor", "is-finite",
    "log", "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt",
    "power", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt", "subtract",
    "tan", "tanh", "xor", "bitcast-convert", "acos", "acosh", "asin", "asinh", "atanh", "cosh", "sinh", "atan",
    "real", "imag",
})

#: Producers a consumer may pull in.
PRODUCERS = _ELEMENTWISE | {"broadcast", "reshape", "bitcast", "transpose", "slice", "concatenate", "pad",
                            "iota", "constant", "reverse", "dynamic-slice", "gather"}

#: Instructions that may root a fusion.
ROOTS = PRODUCERS | {"reduce", "dynamic-update-slice", "scatter", "sort"}

#: Roots that take no producers (their emitters want plain operands).
_LONE_ROOTS = frozenset({"sort", "scatter"})

#: ``InstructionFusion::IsExpensive`` (instruction_fusion.cc): never duplicated into a second consumer.
EXPENSIVE = frozenset({
    "atan2", "divide", "power", "remainder", "sqrt", "rsqrt", "cbrt", "exponential", "exponential-minus-one",
    "log", "log-plus-one", "logistic", "tanh", "sine", "cosine", "tan", "erf", "acos", "acosh", "asin", "asinh",
    "atanh", "cosh", "sinh", "atan", "gather", "dynamic-slice", "reduce-precision",
})

#: Not worth a kernel of their own.
_TRIVIAL_ALONE = frozenset({"bitcast", "constant", "parameter", "tuple", "get-tuple-element", "iota"})


class _Group:
    def __init__(self, root: Instruction):
        self.root = root
        self.members: list[Instruction] = [root]
        self.ids: set[int] = {id(root)}

    def externals(self) -> list[Instruction]:
        seen: set[int] = set()
        out = []
        for m in self.members:
            for o in m.operands:
                if id(o) not in self.ids and id(o) not in seen:
                    seen.add(id(o))
                    out.append(o)
        return out

    def add(self, inst: Instruction) -> None:
        self.members.append(inst)
        self.ids.add(id(inst))


def _is_expensive(inst: Instruction) -> bool:
    if inst.opcode in EXPENSIVE:
        return True
    if inst.opcode in ("constant",) and inst.shape.numel > 1:
        return False
    return False


def _fusion_name(root: Instruction, kind: str) -> str:
    op = root.opcode.replace("-", "_")
    return f"{'input' if kind == 'kInput' else 'loop'}_{op}_fusion"


def _kind_of(members: list[Instruction]) -> str:
    return "kInput" if any(m.opcode == "reduce" for m in members) else "kLoop"


def _can_pull(group: _Group, producer: Instruction, user_groups: dict[int, list[_Group]]) -> bool:
    if producer.opcode not in PRODUCERS or producer.shape.is_tuple:
        return False
    if group.root.opcode in _LONE_ROOTS:
        return False
    # a reduce's init value stays a scalar constant or parameter
    for m in group.members:
        if m.opcode == "reduce":
            n = len(m.operands) // 2
            if any(o is producer for o in m.operands[n:]) and producer.opcode != "constant":
                return False
    if len(group.members) >= MAX_MEMBERS:
        return False
    outside = [u for u in producer.users if id(u) not in group.ids]
    if outside and _is_expensive(producer):
        return False
    if outside and producer.opcode in ("concatenate", "pad") and producer.shape.numel > (1 << 16):
        return False
    new_ext = {id(o) for o in group.externals() if o is not producer} | {id(o) for o in producer.operands
                                                                        if id(o) not in group.ids}
    return len(new_ext) <= MAX_OPERANDS


def _grow(group: _Group, user_groups: dict[int, list[_Group]]) -> None:
    changed = True
    while changed:
        changed = False
        for ext in group.externals():
            if ext.parent is not group.root.parent:
                continue
            if _can_pull(group, ext, user_groups):
                group.add(ext)
                changed = True
                break


def _absorbed(inst: Instruction, member_of: dict[int, list[_Group]]) -> bool:
    users = inst.users
    if not users:
        return inst is not inst.parent.root
    groups = member_of.get(id(inst), [])
    for u in users:
        if not any(id(u) in g.ids for g in groups):
            return False
    return True


def _sibling_merge(groups: list[_Group]) -> list[list[_Group]]:
    """Pairs reduction fusions that read the same operand with equal input shapes and reduced dimensions
    and do not depend on each other (sibling multi-output fusion)."""
    merged: list[list[_Group]] = []
    used: set[int] = set()
    reds = [g for g in groups if g.root.opcode == "reduce" and not g.root.shape.is_tuple]

    def key(g: _Group) -> tuple:
        r = g.root
        return (tuple(r.operands[0].shape.dimensions), tuple(r.attrs.get("dimensions") or ()), r.shape.dimensions)

    def depends(a: _Group, b: _Group) -> bool:
        # does any external of a transitively reach b's root?
        stack = list(a.externals())
        seen: set[int] = set()
        while stack:
            x = stack.pop()
            if id(x) in seen:
                continue
            seen.add(id(x))
            if x is b.root:
                return True
            stack.extend(x.operands)
        return False

    for i, a in enumerate(reds):
        if id(a) in used:
            continue
        bucket = [a]
        for b in reds[i + 1:]:
            if id(b) in used or key(a) != key(b):
                continue
            ext_a = {id(x) for x in a.externals()}
            if not any(id(x) in ext_a for x in b.externals()):
                continue
            if any(depends(b, x) or depends(x, b) for x in bucket):
                continue
            bucket.append(b)
        if len(bucket) > 1:
            for g in bucket:
                used.add(id(g))
            merged.append(bucket)
    return merged


def _make_multi_output(module: Module, comp: Computation, bucket: list[_Group], uniq: NameUniquer) -> None:
    from fusegen.hlo.ir import Shape

    members: list[Instruction] = []
    seen: set[int] = set()
    for g in bucket:
        for m in g.members:
            if id(m) not in seen:
                seen.add(id(m))
                members.append(m)
    roots = [g.root for g in bucket]
    tuple_shape = Shape("tuple", tuple_shapes=tuple(r.shape for r in roots))
    fake_root = Instruction(name=uniq.get("tuple"), opcode="tuple", shape=tuple_shape, operands=list(roots))
    anchor = max(roots, key=lambda r: next(k for k, i in enumerate(comp.instructions) if i is r))
    insert_before(comp, fake_root, anchor)
    comp.instructions.remove(fake_root)
    idx = next(k for k, i in enumerate(comp.instructions) if i is anchor)
    comp.instructions.insert(idx + 1, fake_root)
    fake_root.parent = comp
    comp.invalidate()
    fused, externals = build_computation(uniq.get(f"fused_{roots[0].opcode}"), members + [fake_root], fake_root)
    for inst in fused.instructions:
        if inst.opcode != "parameter":
            inst.name = uniq.get(inst.name)
    fusion = Instruction(name=uniq.get("input_reduce_fusion"), opcode="fusion", shape=tuple_shape,
                         operands=list(externals), attrs={"kind": "kInput", "calls": fused})
    insert_before(comp, fusion, fake_root)
    comp.instructions.remove(fake_root)
    comp.invalidate()
    for k, r in enumerate(roots):
        gte = Instruction(name=uniq.get(f"get-tuple-element.{k}"), opcode="get-tuple-element", shape=r.shape,
                          operands=[fusion], attrs={"index": k})
        idx = next(j for j, i in enumerate(comp.instructions) if i is fusion)
        comp.instructions.insert(idx + 1 + k, gte)
        gte.parent = comp
        comp.invalidate()
        replace_all_uses(comp, r, gte)
    add_computation_before(module, fused, comp)
    topo_sort(comp)


def fuse_computation(module: Module, comp: Computation, uniq: NameUniquer, multi_output: bool = True) -> bool:
    """Fuse one computation in place; returns whether anything changed."""
    groups: list[_Group] = []
    member_of: dict[int, list[_Group]] = {}
    for inst in reversed(comp.instructions):
        if inst.opcode not in ROOTS or inst.shape.is_tuple and inst.opcode != "sort":
            continue
        if _absorbed(inst, member_of):
            continue
        g = _Group(inst)
        _grow(g, member_of)
        if len(g.members) == 1 and inst.opcode in _TRIVIAL_ALONE:
            continue
        if all(m.opcode in ("bitcast", "constant", "iota") for m in g.members) and inst.opcode == "bitcast":
            continue
        groups.append(g)
        for m in g.members:
            member_of.setdefault(id(m), []).append(g)
    if not groups:
        return False
    buckets = _sibling_merge(groups) if multi_output else []
    in_bucket = {id(g) for b in buckets for g in b}
    for g in groups:
        if id(g) in in_bucket:
            continue
        kind = _kind_of(g.members)
        root = g.root
        make_fusion(module, comp, g.members, root, kind, _fusion_name(root, kind), f"fused_{root.opcode}", uniq,
                    metadata=root.attrs.get("metadata"))
    for b in buckets:
        _make_multi_output(module, comp, b, uniq)
    remove_dead(comp)
    topo_sort(comp)
    return True


def run(module: Module, options: Any = None) -> bool:
    """Run the fusion pass over every fusible computation of ``module`` (in place).

    Args:
        options: :class:`fusegen.passes.pipeline.PassOptions` (``options.options["multi_output"]``: merge sibling
            reductions, default true).

    Returns:
        whether the module changed.
    """
    from fusegen.passes.pipeline import pass_options

    opts = pass_options(options)
    multi = bool(opts.options.get("multi_output", True))
    uniq = NameUniquer(module)
    changed = False
    for comp in list(fusible_computations(module)):
        changed = fuse_computation(module, comp, uniq, multi) or changed
    return changed
