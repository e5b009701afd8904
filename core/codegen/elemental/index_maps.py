"""Operand indices from indexing maps: the pure index transformations (broadcast, transpose, slice, reverse,
reshape, bitcast) and ``pad`` read their operand's index (and pad its in-bounds test) off the op's output-to-input :class:`~fusegen.indexing.IndexingMap`
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
from fusegen.indexing.interval import Interval
from fusegen.indexing.linear import expr_range


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
            if e.rhs.kind == CONST and e.rhs.value < 0:  # d - lo (pad): `x - 1`, not `x + -1`
                return self.isub(self.index_expr(e.lhs, idx, inst), -e.rhs.value)
            if e.rhs.kind == CONST and e.lhs.kind == MUL and e.lhs.rhs.kind == CONST and e.lhs.rhs.value == -1:
                return self.isub(e.rhs.value, self.index_expr(e.lhs.lhs, idx, inst))
            return self.iadd(self.index_expr(e.lhs, idx, inst), self.index_expr(e.rhs, idx, inst))
        if k in (MUL, FLOORDIV, MOD) and e.rhs.kind == CONST:
            a: Any = self.index_expr(e.lhs, idx, inst)
            op = {MUL: self.imul, FLOORDIV: self.idiv, MOD: self.imod}[k]
            return op(a, e.rhs.value)
        raise EmitterUnsupported(inst.opcode, inst.name, f"index expression {e} has no index arithmetic here")

    def domain_test(self, m: IndexingMap, idx: Index, inst: Instruction) -> tuple[str | bool, Index]:
        """Whether ``idx`` lies in the domain of ``m`` (dimension intervals and constraints), and ``idx``
        clamped into the dimension intervals (so the operand index it gives stays in range: a load at a
        point outside the domain, e.g. in a pad's edge, must still read a valid address).

        ``m``'s dimension ``k`` ranges over ``[0, inst.shape.dimensions[k] - 1]`` outside the domain; bounds
        equal to that range are not tested. Constraints are evaluated at the clamped index (a point outside
        the intervals fails anyway), so every ``floordiv``/``mod`` sees the values the map was built for.

        Returns:
            ``(True, idx)`` when every point is in the domain, ``(False, ...)`` when ``idx`` (all constant)
            is not, else ``(variable of the test, clamped idx)``.

        Raises:
            EmitterUnsupported: a ``floordiv``/``mod`` whose dividend may be negative inside the intervals
                (Triton's integer division truncates; the map's is floor division).
        """
        if m.is_known_empty:
            return False, idx
        parts: list[str] = []
        clamped: list[int | str] = []
        for k, (x, b) in enumerate(zip(idx, m.dims)):
            if isinstance(x, int):
                if not b.contains(x):
                    return False, idx
                clamped.append(x)
                continue
            n = inst.shape.dimensions[k]
            if b.lower > 0:
                parts.append(f"({x} >= {b.lower})")
            if b.upper < n - 1:
                parts.append(f"({x} <= {b.upper})")
            clamped.append(self.iclamp(x, b.lower, b.upper) if b.lower > 0 or b.upper < n - 1 else x)
        self._check_divisions(m, inst)
        cidx = tuple(clamped)
        for e, b in m.constraints.items():
            v = self.index_expr(e, cidx, inst)
            if isinstance(v, int):
                if not b.contains(v):
                    return False, idx
                continue
            if b.is_point:
                parts.append(f"({v} == {b.lower})")
            else:
                parts.append(f"({v} >= {b.lower}) & ({v} <= {b.upper})")
        if not parts:
            return True, cidx
        return self.iexpr(" & ".join(parts), "inpad"), cidx

    @staticmethod
    def _check_divisions(m: IndexingMap, inst: Instruction) -> None:
        bounds = lambda kind, i: m.bounds(kind, i)  # noqa: E731
        for e in (*m.exprs, *m.constraints):
            for node in e.walk():
                if node.kind in (FLOORDIV, MOD) and expr_range(node.lhs, bounds).lower < 0:
                    raise EmitterUnsupported(inst.opcode, inst.name,
                                             f"{node} divides a value that may be negative inside the domain")
