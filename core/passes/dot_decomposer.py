"""``dot-decomposer``: rewrite every non-canonical ``dot`` into XLA's canonical ``[batch, m, k] x [batch, k, n]`` form.

Mirrors ``DotDecomposer`` (``xla/service/dot_decomposer.cc``, run by ``GpuCompiler::OptimizeHloModule`` before
layout assignment, long before ``GemmFusion`` and ``GemmRewriter``). A dot is canonical when its batch
dimensions are the leading dimensions of both operands (in order) and each operand has exactly one contracting
and at most one non-contracting dimension; one with several batch dimensions (``einsum('bhqd,bhkd->bhqk')``) or
several contracting / non-contracting dimensions is rewritten as::

    lhs' = reshape(transpose(lhs, batch + non-contracting + contracting), [B, M, K])
    rhs' = reshape(transpose(rhs, batch + contracting + non-contracting), [B, K, N])
    out  = reshape(dot(lhs', rhs'), <the dot's own shape>)      # batch, lhs non-contracting, rhs non-contracting

with ``B``, ``M``, ``K``, ``N`` the products of those dimension groups (no batch dimension when the dot has
none, a size-1 ``M`` or ``N`` when a side has no non-contracting dimension; identity transposes and reshapes
are left out). Only dots whose operands and result have default layouts are
rewritten (an unoptimized module's; the reshapes are then bitcasts), so the pass is a no-op on modules XLA
already optimized. Sparse dots (``sparsity`` operands) are left alone.
"""

from __future__ import annotations

from typing import Any

from fusegen.hlo.ir import Computation, Instruction, Module, Shape
from fusegen.passes.hlo_edit import NameUniquer, insert_before, replace_all_uses


def _dims(inst: Instruction, key: str) -> list[int]:
    return [int(d) for d in (inst.attrs.get(key) or ())]


def is_canonical_dot(dot: Instruction) -> bool:
    """Batch dims leading on both sides, one contracting and at most one non-contracting dim per operand."""
    for side, operand in (("lhs", dot.operands[0]), ("rhs", dot.operands[1])):
        batch, contracting = _dims(dot, f"{side}_batch_dims"), _dims(dot, f"{side}_contracting_dims")
        if batch != list(range(len(batch))) or len(batch) > 1 or len(contracting) != 1:
            return False
        if operand.shape.rank - len(batch) - len(contracting) > 1:
            return False
    return True


def _default_layout(shape: Shape) -> bool:
    return shape.is_array and shape.minor_to_major() == tuple(range(shape.rank - 1, -1, -1))


def _prod(xs: list[int]) -> int:
    n = 1
    for x in xs:
        n *= x
    return n


def _canonical_operand(comp: Computation, dot: Instruction, k: int, order: list[int], groups: list[list[int]],
                       uniq: NameUniquer) -> Instruction:
    """``reshape(transpose(operand, order), [prod(g) for g in groups])`` inserted before ``dot``."""
    x = dot.operands[k]
    dims = x.shape.dimensions
    if order != list(range(len(order))):
        t_shape = Shape(x.shape.element_type, tuple(dims[d] for d in order))
        x = insert_before(comp, Instruction(name=uniq.get(f"{dot.name}.{'lr'[k]}hs.transpose"), opcode="transpose",
                                            shape=t_shape, operands=[x], attrs={"dimensions": list(order)}), dot)
    new_dims = tuple(_prod([dims[d] for d in g]) for g in groups)  # an empty group is a dimension of size 1
    r_shape = Shape(x.shape.element_type, new_dims)
    if r_shape.dimensions == x.shape.dimensions:
        return x
    return insert_before(comp, Instruction(name=uniq.get(f"{dot.name}.{'lr'[k]}hs.reshape"), opcode="reshape",
                                           shape=r_shape, operands=[x]), dot)


def _decompose(comp: Computation, dot: Instruction, uniq: NameUniquer) -> None:
    lhs, rhs = dot.operands[:2]
    lb, lc = _dims(dot, "lhs_batch_dims"), _dims(dot, "lhs_contracting_dims")
    rb, rc = _dims(dot, "rhs_batch_dims"), _dims(dot, "rhs_contracting_dims")
    ln = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
    rn = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
    batch = [lb] if lb else []
    new_lhs = _canonical_operand(comp, dot, 0, lb + ln + lc, batch + [ln, lc], uniq)
    new_rhs = _canonical_operand(comp, dot, 1, rb + rc + rn, ([rb] if rb else []) + [rc, rn], uniq)
    nb = 1 if lb else 0
    out_dims = new_lhs.shape.dimensions[:nb + 1] + new_rhs.shape.dimensions[nb + 1:]
    attrs: dict[str, Any] = {k: v for k, v in dot.attrs.items() if not k.endswith(("_batch_dims", "_contracting_dims"))}
    attrs.update(lhs_batch_dims=list(range(nb)), lhs_contracting_dims=[nb + 1],
                 rhs_batch_dims=list(range(nb)), rhs_contracting_dims=[nb])
    new_dot = insert_before(comp, Instruction(name=uniq.get(f"{dot.name}.canonical"), opcode="dot",
                                              shape=Shape(dot.shape.element_type, out_dims),
                                              operands=[new_lhs, new_rhs], attrs=attrs), dot)
    back = Instruction(name=uniq.get(f"{dot.name}.reshape"), opcode="reshape", shape=dot.shape, operands=[new_dot])
    insert_before(comp, back, dot)
    replace_all_uses(comp, dot, back)
    comp.instructions = [i for i in comp.instructions if i is not dot]
    comp.invalidate()


def run(module: Module, options: Any = None) -> bool:
    """Canonicalize every non-canonical dot with default layouts; returns whether the module changed."""
    uniq = NameUniquer(module)
    changed = False
    for comp in module.computations:
        for dot in [i for i in comp.instructions if i.opcode == "dot"]:
            if len(dot.operands) != 2 or is_canonical_dot(dot):
                continue
            if not all(_default_layout(s) for s in (dot.shape, dot.operands[0].shape, dot.operands[1].shape)):
                continue
            if any(s == 0 for s in dot.shape.dimensions):
                continue
            _decompose(comp, dot, uniq)
            changed = True
    return changed
