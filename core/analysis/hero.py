"""Hero finding: the instruction whose shape drives a fusion root's emitter.

Mirrors ``IsIntermediate`` / ``FindHero`` (``xla/codegen/ir_emission_utils.cc``) and
``FindNonTrivialHero`` (``xla/service/gpu/ir_emission_utils.cc``).

fusegen analyses a plain fused :class:`~fusegen.hlo.ir.Computation`: what XLA's
``HloFusionAdaptor`` hides (fused parameters, the root tuple) is hidden here by treating
``parameter`` instructions as outside the fusion and the root ``tuple`` as no real user.
"""

from __future__ import annotations

from collections import deque
from typing import Callable

from fusegen.hlo.shape_util import is_elementwise, reshape_is_bitcast, transpose_is_bitcast
from fusegen.analysis.transpose import get_description_for_tiled_transpose_emitter
from fusegen.hlo.ir import Instruction


def is_intermediate(inst: Instruction, allowed_operand_count: int = 1) -> bool:
    """``IsIntermediate``: 1..allowed operands and elementwise (a copy only when the shape, layout
    included, is unchanged), a bitcast, or a reshape/transpose that is a bitcast."""
    n = len(inst.operands)
    if n == 0 or n > allowed_operand_count:
        return False
    if is_elementwise(inst):
        if inst.opcode == "copy":
            return _same_shape_and_layout(inst, inst.operands[0])
        return True
    if inst.opcode == "bitcast":
        return True
    if inst.opcode == "reshape":
        return reshape_is_bitcast(inst.operands[0].shape, inst.shape)
    if inst.opcode == "transpose":
        return transpose_is_bitcast(inst.operands[0].shape, inst.shape, inst.attrs.get("dimensions", ()))
    return False


def _same_shape_and_layout(a: Instruction, b: Instruction) -> bool:
    sa, sb = a.shape, b.shape
    return (
        sa.element_type == sb.element_type
        and tuple(sa.dimensions) == tuple(sb.dimensions)
        and tuple(sa.minor_to_major()) == tuple(sb.minor_to_major())
    )


def in_fusion(inst: Instruction) -> bool:
    """Whether the fusion adaptor would yield ``inst``: fused parameters resolve outside."""
    return inst.opcode != "parameter"


def fusion_users(inst: Instruction) -> list[Instruction]:
    """Users inside the fused computation, skipping the root tuple (``HloInstructionAdaptor::GetUsers``)."""
    comp = inst.parent
    out = []
    for u in inst.users:
        if u.opcode == "tuple" and comp is not None and u is comp.root:
            continue
        out.append(u)
    return out


def fusion_operands(inst: Instruction) -> list[Instruction]:
    """Operands inside the fusion (parameters resolve outside and are not visited)."""
    return [o for o in inst.operands if in_fusion(o)]


def find_hero(root: Instruction, predicate: Callable[[Instruction], bool],
              memo: dict | None = None) -> Instruction | None:
    """``FindHero``: the unique instruction matching ``predicate`` reachable from ``root`` through
    ``IsIntermediate(..., 3)`` ops (breadth first, consumers first), provided no non-trivial op is
    reachable from its users. ``None`` when there is none, several, or a non-trivial user path.

    ``memo`` (one dict per predicate and unchanged computation) keeps each visited instruction's
    ``(matches, operands to visit)`` and the candidates reachable from it (:func:`_memo_candidate`), so the
    searches from the many roots of a multi-output fusion don't walk the graph again.
    """
    hero: Instruction | None = None
    if memo is not None:
        found = _memo_candidate(root, predicate, memo)
        if found is not _CYCLE:
            if found is None or found is _SEVERAL:
                return None
            hero = found
            ok = memo.get(("users_ok", id(hero)))
            if ok is None:
                ok = memo[("users_ok", id(hero))] = _users_trivial(hero)
            return hero if ok else None
    else:
        memo = {}
    seen = {id(root)}
    queue = deque([root])
    while queue:
        node = queue.popleft()
        facts = _facts(node, predicate, memo)
        if facts[0]:
            if hero is not None:
                return None  # several candidates
            hero = node
            continue
        for op in facts[1]:
            if id(op) not in seen:
                seen.add(id(op))
                queue.append(op)
    if hero is None:
        return None
    return hero if _users_trivial(hero) else None


_SEVERAL = object()  # more than one candidate
_CYCLE = object()  # the operand graph has a cycle: take the breadth-first search


def _facts(node: Instruction, predicate: Callable[[Instruction], bool], memo: dict) -> tuple:
    """``(matches, operands to visit)`` of ``node`` in :func:`find_hero`'s search, memoized by id."""
    facts = memo.get(id(node))
    if facts is None:
        matches = predicate(node)
        facts = memo[id(node)] = (matches, () if matches or not is_intermediate(node, 3) else fusion_operands(node))
    return facts


def _memo_candidate(root: Instruction, predicate: Callable[[Instruction], bool], memo: dict):
    """What :func:`find_hero`'s breadth-first search from ``root`` collects, for many roots sharing ``memo``: each
    node's set of matching instructions reachable through intermediate ops (``None``: none, the one instruction,
    or ``_SEVERAL``) is computed once, children first, so a multi-output fusion's roots don't each walk the whole
    graph. ``_CYCLE`` when the operands form a cycle (malformed HLO)."""
    key = ("reach", id(root))
    if key in memo:
        return memo[key]
    stack = [root]
    expanded: set[int] = set()
    while stack:
        node = stack[-1]
        k = ("reach", id(node))
        if k in memo:
            stack.pop()
            continue
        matches, ops = _facts(node, predicate, memo)
        if matches:
            memo[k] = node
            stack.pop()
            continue
        if id(node) not in expanded:
            expanded.add(id(node))
            for op in ops:
                if ("reach", id(op)) not in memo:
                    if id(op) in expanded:
                        return _CYCLE  # an operand still being expanded: only a cycle leads back to it
                    stack.append(op)
            continue
        r = None
        for op in ops:
            x = memo[("reach", id(op))]
            if x is None or x is r:
                continue
            if x is _SEVERAL or r is not None:
                r = _SEVERAL
                break
            r = x
        memo[k] = r
        stack.pop()
    return memo[key]


def _users_trivial(hero: Instruction) -> bool:
    """No non-trivial op is reachable from ``hero``'s users (the second half of ``FindHero``)."""

    def nontrivial(n: Instruction) -> bool:
        return n.opcode not in ("tuple", "parameter") and not is_intermediate(n, 3)

    start = fusion_users(hero)
    seen = {id(u) for u in start}
    queue = deque(start)
    while queue:
        node = queue.popleft()
        if nontrivial(node):
            return False
        for u in fusion_users(node):
            if id(u) not in seen:
                seen.add(id(u))
                queue.append(u)
    return True


def _is_tiled_transpose(n: Instruction) -> bool:
    return get_description_for_tiled_transpose_emitter(n) is not None


def _is_concatenate(n: Instruction) -> bool:
    return n.opcode == "concatenate"


def _any_match(memo: dict, tag: str, predicate: Callable[[Instruction], bool], inst: Instruction) -> bool:
    """Whether any instruction of ``inst``'s computation meets ``predicate`` (True when it has none)."""
    comp = inst.parent
    if comp is None:
        return True
    key = ("any", tag, id(comp))
    if key not in memo:
        memo[key] = any(predicate(n) for n in comp.instructions)
    return memo[key]


def find_non_trivial_hero(inst: Instruction, memo: dict | None = None) -> Instruction:
    """``FindNonTrivialHero``: walk up single-operand intermediate ops, then look for a tiled
    transpose hero, then a concatenate hero; a reduce reached by the walk is the hero; otherwise the
    instruction itself.

    ``memo``: pass one dict for all roots of one (unchanged) fused computation to share the searches' work;
    then a search whose predicate no instruction of the computation meets is skipped (it can only fail).
    """
    shared = memo is not None
    if memo is None:
        memo = {}
    hero = inst
    while is_intermediate(hero, 1) and in_fusion(hero.operands[0]):
        hero = hero.operands[0]
    opcodes = None
    for tag, predicate in (("transpose", _is_tiled_transpose), ("concatenate", _is_concatenate)):
        if shared:
            if not _any_match(memo, tag, predicate, hero):
                continue
        elif hero.parent is not None:
            # each predicate holds only for its own opcode (the tag): without one the search can only fail
            if opcodes is None:
                opcodes = {n.opcode for n in hero.parent.instructions}
            if tag not in opcodes:
                continue
        found = find_hero(hero, predicate, memo.setdefault(tag, {}))
        if found is not None:
            return found
    if hero.opcode != "reduce":
        return inst
    return hero
