"""Operand indices from indexing maps: the pure index transformations (broadcast, transpose, slice, reverse)
read their operand's index off the op's output-to-input :class:`~fusegen.indexing.IndexingMap`
(``fusegen.indexing.analysis.compute_output_to_input_indexing``, XLA's ``ComputeOutputToInputIndexing``)
instead of re-deriving it, so codegen and ``explain --indexing`` share one source of truth.

Mirrors XLA's ``elemental_hlo_to_mlir.cc`` (``ApplyIndexing`` on the op's map in ``EmitElementalHloInstruction``).
"""

from __future__ import annotations

from typing import Any

from fusegen.codegen.elemental.common import Index
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.hlo.ir import Instruction
from fusegen.indexing import AffineExpr, IndexingMap
from fusegen.indexing.expr import ADD, CONST, DIM, FLOORDIV, MOD, MUL


class IndexMapMixin:
    """Applies indexing maps to index tuples of :class:`ElementalGenerator` (a mixin)."""

    def operand_map(self, inst: Instruction, operand: int) -> IndexingMap:
        """The output-to-input map of ``inst`` to operand ``operand`` (one per instruction and kernel, cached).

        Raises:
            EmitterUnsupported: the map is unknown, has range/runtime variables, or is not a single map.
        """
        cache = self.root_gen._op_maps
        key = (id(inst), operand)
        hit = cache.get(key)
        if hit is None:
            from fusegen.indexing.analysis import compute_output_to_input_indexing

            maps = compute_output_to_input_indexing(inst).maps(operand)
            if len(maps) != 1 or maps[0].is_undefined or maps[0].num_symbols or maps[0].num_rt_vars:
                raise EmitterUnsupported(inst.opcode, inst.name, "no single pure output-to-input indexing map")
            hit = cache[key] = (inst, maps[0])  # the instruction is held so its id stays unique
        return hit[1]

    def apply_map(self, m: IndexingMap, idx: Index, inst: Instruction) -> Index:
        """The results of ``m`` at the dimension values ``idx`` (ints or index-tensor variables)."""
        return tuple(self.index_expr(e, idx, inst) for e in m.exprs)

    def index_expr(self, e: AffineExpr, idx: Index, inst: Instruction) -> int | str:
        """One affine expression as index arithmetic (``iadd``/``isub``/``imul``/``idiv``/``imod``: shared,
        de-duplicated index variables); ``c + x * -1`` is emitted as ``c - x``."""
        k = e.kind
        if k == DIM:
            return idx[e.value]
        if k == CONST:
            return e.value
        if k == ADD:
            if e.rhs.kind == CONST and e.lhs.kind == MUL and e.lhs.rhs.kind == CONST and e.lhs.rhs.value == -1:
                return self.isub(e.rhs.value, self.index_expr(e.lhs.lhs, idx, inst))
            return self.iadd(self.index_expr(e.lhs, idx, inst), self.index_expr(e.rhs, idx, inst))
        if k in (MUL, FLOORDIV, MOD) and e.rhs.kind == CONST:
            a: Any = self.index_expr(e.lhs, idx, inst)
            op = {MUL: self.imul, FLOORDIV: self.idiv, MOD: self.imod}[k]
            return op(a, e.rhs.value)
        raise EmitterUnsupported(inst.opcode, inst.name, f"index expression {e} has no index arithmetic here")
