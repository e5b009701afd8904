"""Operand indices from indexing maps: the pure index transformations (broadcast, transpose, slice, reverse,
reshape, bitcast) and ``pad`` read their operand's index (and pad its in-bounds test) off the op's output-to-input :class:`~fusegen.indexing.IndexingMap`
(``fusegen.indexing.analysis.compute_output_to_input_indexing``, XLA's ``ComputeOutputToInputIndexing``)
instead of re-deriving it, so codegen and ``explain --indexing`` share one source of truth.

Mirrors XLA's ``elemental_hlo_to_mlir.cc`` (``ApplyIndexing`` on the op's map in ``EmitElementalHloInstruction``).
"""

from __future__ import annotations

from typing import Any, Callable

from fusegen.codegen.elemental.common import Index
from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo.ir import Instruction
from fusegen.indexing import AffineExpr, IndexingMap
from fusegen.indexing.expr import ADD, CONST, DIM, FLOORDIV, MOD, MUL, binary, const
from fusegen.indexing.linear import expr_range, to_linear


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

    def index_expr(self, e: AffineExpr, idx: Index, inst: Instruction,
                   linear: Callable[[AffineExpr], int | str | None] | None = None) -> int | str:
        """One affine expression as index arithmetic (``iadd``/``isub``/``imul``/``idiv``/``imod``: shared,
        de-duplicated index variables); ``c + x * -1`` is emitted as ``c - x``. ``linear``, when given, may
        supply a variable for a sum or product node (``None``: emit it term by term)."""
        k = e.kind
        if linear is not None and k in (ADD, MUL):
            hit = linear(e)
            if hit is not None:
                return hit
        if k == DIM:
            return idx[e.value]
        if k == CONST:
            return e.value
        if k == ADD:
            if e.rhs.kind == CONST and e.rhs.value < 0:  # d - lo (pad): `x - 1`, not `x + -1`
                return self.isub(self.index_expr(e.lhs, idx, inst, linear), -e.rhs.value)
            if e.rhs.kind == CONST and e.lhs.kind == MUL and e.lhs.rhs.kind == CONST and e.lhs.rhs.value == -1:
                return self.isub(e.rhs.value, self.index_expr(e.lhs.lhs, idx, inst, linear))
            return self.iadd(self.index_expr(e.lhs, idx, inst, linear), self.index_expr(e.rhs, idx, inst, linear))
        if k in (MUL, FLOORDIV, MOD) and e.rhs.kind == CONST:
            a: Any = self.index_expr(e.lhs, idx, inst, linear)
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
        for e in (*m.exprs, *m.constraints):
            for node in e.walk():
                if node.kind in (FLOORDIV, MOD) and expr_range(node.lhs, m.bounds).lower < 0:
                    raise EmitterUnsupported(inst.opcode, inst.name,
                                             f"{node} divides a value that may be negative inside the domain")

    # ------------------------------------------------------------------------- reshape / bitcast
    def shape_map(self, inst: Instruction) -> IndexingMap | None:
        """The output-to-operand map of a ``reshape`` / ``bitcast`` as ``compute_output_to_input_indexing``
        builds it before simplification (``reshape_exprs`` / ``bitcast_map`` of
        :mod:`fusegen.indexing.analysis_shapes`: per run of equal element count, the operand index is the
        row-major delinearization of the output's linear index), ``None`` when it is not one pure map.

        Not the simplified map: simplification splits the linear index into per-run divisions
        (``d0 * 2 + (d1 * 4 + d2) floordiv 6``), which costs more index arithmetic than the linear index
        the loop emitter already holds (the generator's linearize/delinearize caches share it).
        """
        cache = self.root_gen._op_maps
        key = (id(inst), "shape")
        hit = cache.get(key)
        if hit is None:
            hit = cache[key] = (inst, unsimplified_shape_map(inst))
        return hit[1]

    def apply_shape_map(self, m: IndexingMap, idx: Index, inst: Instruction, out_m2m: tuple[int, ...],
                        src_m2m: tuple[int, ...]) -> Index:
        """The operand index of a reshape / bitcast from :meth:`shape_map` ``m``.

        Reshapes and bitcasts keep the linear position (row-major for a reshape, physical for a bitcast:
        ``out_m2m`` / ``src_m2m``). A linear combination of a run of the output's dimensions with dense
        strides is a quotient / remainder of the output's linear index (:meth:`linearize`, usually the
        variable the loop emitter delinearized: no arithmetic), so the operand index shares the emitter's
        variables; the result is recorded as :meth:`delinearize` of that linear index, so a later
        linearization of the operand index is the same variable again.
        """
        dims = tuple(b.upper + 1 for b in m.dims)
        src_key = (tuple(inst.operands[0].shape.dimensions), tuple(src_m2m))
        # The linear position is what a reshape / bitcast keeps: when the output's is known, an index of
        # the operand at that position already built is this map's result, and a run of the output's
        # dimensions is a quotient / remainder of it (the same variables the loop emitter delinearized).
        lin = self._lookup(self._lin_of, (tuple(idx), dims, tuple(out_m2m)))
        if lin is not None:
            hit = self._lookup(self._delin, (lin,) + src_key)
            if hit is not None:
                return hit
        major = [k for k in out_m2m if dims[k] != 1]
        if lin is None and len(major) == 1:  # one dimension of size > 1: its index is the linear index
            lin = idx[major[0]]
        linears: dict[AffineExpr, int | str] = {}
        box = [lin]

        def linear(e: AffineExpr) -> int | str | None:
            if e in linears:
                return linears[e]
            used = _layout_run(e, dims)
            out = None
            if used is not None and used[0] in major:
                p0 = major.index(used[0])
                if major[p0:p0 + len(used)] == used:  # a run of the layout: quotient / remainder of the whole
                    if box[0] is None:
                        box[0] = self.linearize(idx, dims, tuple(out_m2m))
                    below = 1
                    for k in major[:p0]:
                        below *= dims[k]
                    out = self.idiv(box[0], below)
                    if p0 + len(used) < len(major):
                        run = 1
                        for k in used:
                            run *= dims[k]
                        out = self.imod(out, run)
                else:
                    sub = used[::-1]
                    out = self.linearize(tuple(idx[k] for k in sub), [dims[k] for k in sub],
                                         tuple(range(len(sub) - 1, -1, -1)))
            linears[e] = out
            return out

        res = tuple(self.index_expr(e, idx, inst, linear) for e in m.exprs)
        lin = box[0]
        if lin is not None and self._lookup(self._delin, (lin,) + src_key) is None:
            self._delin[-1][(lin,) + src_key] = res
            self._lin_of[-1][(res,) + src_key] = lin
        return res


def unsimplified_shape_map(inst: Instruction) -> IndexingMap | None:
    """The output-to-operand map of ``reshape`` / ``bitcast`` ``inst`` before simplification, its
    delinearizations in the generator's form (:func:`_delinearize_form`); ``None`` unless one pure map
    (a bitcast between element types of different widths or counts has none).

    Mirrors ``ComputeReshapeIndexingMap`` / ``GetBitcastMap`` (``xla/hlo/analysis/indexing_analysis.cc``)
    through :func:`fusegen.indexing.analysis_shapes.reshape_exprs` / ``bitcast_map``.
    """
    from fusegen.indexing.analysis_shapes import bitcast_map, reshape_exprs

    src = inst.operands[0]
    if inst.opcode == "bitcast":
        m = bitcast_map(inst.shape, src.shape)
    else:
        m = IndexingMap.from_tensor_sizes(reshape_exprs(src.shape.dimensions, inst.shape.dimensions),
                                          inst.shape.dimensions)
    if m.is_undefined or m.is_known_empty or m.num_symbols or m.num_rt_vars or m.constraints:
        return None
    return m.replace(exprs=[_delinearize_form(e, m.bounds) for e in m.exprs])


def _layout_run(e: AffineExpr, dims: tuple[int, ...]) -> list[int] | None:
    """The dimensions (minor to major, size-1 ones left out) of which ``e`` is the linear index with
    dense strides (``d0 * 4 + d1`` with ``d1 in [0, 3]``: ``[1, 0]``); ``None`` for any other expression."""
    terms, c0 = _linear_terms(e)
    if terms is None or c0 or len(terms) < 2:
        return None
    order = sorted((c, k) for k, c in terms.items() if dims[k] != 1)
    stride = 1
    for c, k in order:
        if c != stride:
            return None
        stride *= dims[k]
    return [k for _, k in order] or None


def _linear_terms(e: AffineExpr) -> tuple[dict[int, int] | None, int]:
    """``{dimension: coefficient}`` and constant of a sum of dimensions times constants (``None`` otherwise)."""
    terms, c0 = to_linear(e)
    out: dict[int, int] = {}
    for t, c in terms.items():
        if t.kind != DIM:
            return None, c0
        out[t.value] = c
    return out, c0


def _delinearize_form(e: AffineExpr, bounds) -> AffineExpr:
    """``e`` with the delinearization of :func:`fusegen.indexing.analysis_shapes.delinearize`
    (``(X mod a) floordiv c``, ``(X mod a) mod c``) rewritten to the generator's own (``(X floordiv c) mod
    (a / c)``, ``X mod c``) for ``X >= 0`` and ``c | a``, and ``mod`` / ``floordiv`` that do nothing on the
    domain dropped, so both name the same index variables."""
    if not e.is_binary:
        return e
    lhs, rhs = _delinearize_form(e.lhs, bounds), _delinearize_form(e.rhs, bounds)
    k = e.kind
    if k in (FLOORDIV, MOD) and rhs.kind == CONST and rhs.value > 0:
        c = rhs.value
        if lhs.kind == MOD and lhs.rhs.kind == CONST and lhs.rhs.value % c == 0 and \
                expr_range(lhs.lhs, bounds).lower >= 0:
            x, a = lhs.lhs, lhs.rhs.value
            return _delinearize_form(x.floordiv(c).mod(a // c), bounds) if k == FLOORDIV else \
                _delinearize_form(x.mod(c), bounds)
        r = expr_range(lhs, bounds)
        if r.lower >= 0 and r.upper < c:
            return lhs if k == MOD else const(0)
    return e if (lhs is e.lhs and rhs is e.rhs) else binary(k, lhs, rhs)
