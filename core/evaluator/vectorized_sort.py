"""Sorting with an HLO comparator as array programs: no Python call per comparison.

:func:`sort_order` returns, for arrays whose sorted dimension is last, the stable order a sort with
``comparator`` puts each row in. XLA's sort semantics (``xla/hlo/evaluator/hlo_evaluator.cc``,
``HandleSort``: ``std::stable_sort`` with the comparator as "less" when ``is_stable``, ``std::sort`` otherwise)
leave the order of equivalent elements open for an unstable sort; the evaluator always keeps them in input
order (as it did with ``functools.cmp_to_key``), so stable and unstable sorts answer alike. Three ways, the
first that applies:

1. **Keys** (:func:`lexicographic_plan`): a comparator that is a lexicographic order over per-operand keys
   ``f_i(operand)`` (each ``compare(f(p[2i]), f(p[2i+1]))`` an atom, joined by ``and`` / ``or`` / ``not`` /
   ``select`` / pred ``compare``) becomes ``np.lexsort`` on those keys. This covers JAX's total order (NaN
   and -0.0 canonicalised, then XLA's ``ComparisonExpander`` turning the float compare into ``bitcast`` /
   ``xor`` / ``select`` on s32), descending sorts, ``lax.sort`` with ``num_keys > 1``, and XLA's
   ``StableSortExpander`` form ``select(lt(a,b) == lt(b,a), iota_a < iota_b, lt(a,b))``. The comparator is
   read as a truth table over the atoms' outcomes (``<``, ``=``, ``>`` per key), so any boolean spelling of
   the same order is recognised, and one that is no lexicographic order is not.
2. **Merge** (:func:`merge_sort_order`): any elementwise (liftable) comparator: a bottom-up stable merge sort
   whose merges place every element by a binary search in the other run, all elements at once:
   ``log2 n`` passes of ``log2 w + 1`` comparator evaluations on whole arrays (``O(log^2 n)`` calls).
3. **Per comparison** (:func:`comparison_sort_order`): Python's stable sort calling the comparator once per
   comparison, for a comparator with control flow inside (not liftable), and for one that is no strict weak
   order on the data (the merge's placement then is no permutation).

For a strict weak order (what XLA requires of a comparator) all three give the same, unique stable order.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any

import numpy as np

from fusegen.evaluator.common import Calls, is_float, total_order_key, up
from fusegen.evaluator.elementwise import is_liftable
from fusegen.hlo.ir import Computation, Instruction

__all__ = ["lexicographic_plan", "sort_order", "merge_sort_order", "comparison_sort_order", "KeyLevel"]

_IGNORED_ATTRS = frozenset({"metadata", "sharding", "frontend_attributes", "backend_config", "statistics_viz"})
_PASS = frozenset({"copy", "bitcast", "reshape", "broadcast", "optimization-barrier", "opt-barrier"})
_FLIP = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE", "EQ": "EQ", "NE": "NE"}
#: outcome of (key(a) vs key(b)): 0 '<', 1 '=', 2 '>'; a compare direction as a function of it
_TRUTH = {"LT": (True, False, False), "GT": (False, False, True), "LE": (True, True, False),
          "GE": (False, True, True), "EQ": (False, True, False), "NE": (True, False, True)}
MAX_LEVELS = 8  # 3**8 outcome combinations


class _NotKeys(Exception):
    """The comparator is not a lexicographic order over per-operand keys."""


class KeyLevel:
    """One key of a lexicographic comparator: ``expr`` (an instruction of the comparator computing the key
    from parameter ``param``, the operand ``operand``'s lhs or rhs), ``mode`` (``total``: integers, pred, or a
    ``TOTALORDER`` float compare; ``partial``: an IEEE float compare) and ``descending``."""

    __slots__ = ("operand", "param", "expr", "mode", "descending")

    def __init__(self, operand: int, param: int, expr: Instruction, mode: str, descending: bool = False):
        self.operand, self.param, self.expr, self.mode, self.descending = operand, param, expr, mode, descending

    def __repr__(self) -> str:
        return (f"KeyLevel(operand={self.operand}, %{self.expr.name}, {self.mode}"
                f"{', descending' if self.descending else ''})")


def _attr_repr(v: Any) -> Any:
    if isinstance(v, Computation):
        return ("computation", id(v))
    if isinstance(v, (list, tuple)):
        return tuple(_attr_repr(x) for x in v)
    return repr(v)


class _Analysis:
    """Parameter dependencies and side-independent signatures of a comparator's instructions."""

    def __init__(self, comp: Computation):
        self.comp = comp
        self._deps: dict[int, frozenset[int]] = {}
        self._sigs: dict[int, tuple] = {}

    def deps(self, inst: Instruction) -> frozenset[int]:
        hit = self._deps.get(id(inst))
        if hit is None:
            if inst.opcode == "parameter":
                hit = frozenset((inst.parameter_number,))
            else:
                hit = frozenset().union(*(self.deps(o) for o in inst.operands)) if inst.operands else frozenset()
            self._deps[id(inst)] = hit
        return hit

    def sig(self, inst: Instruction) -> tuple:
        """The expression's structure with its one parameter anonymised (equal for ``f(p[2i])`` and
        ``f(p[2i+1])``)."""
        hit = self._sigs.get(id(inst))
        if hit is None:
            if inst.opcode == "parameter":
                hit = ("parameter", inst.shape.element_type)
            else:
                attrs = tuple(sorted((k, _attr_repr(v)) for k, v in inst.attrs.items() if k not in _IGNORED_ATTRS))
                hit = (inst.opcode, inst.shape.element_type, tuple(inst.shape.dimensions), attrs,
                       tuple(self.sig(o) for o in inst.operands))
            self._sigs[id(inst)] = hit
        return hit


def _constant_bool(inst: Instruction, calls: Calls) -> bool:
    return bool(np.asarray(calls.subgraph(inst, {})).reshape(-1)[0])


def lexicographic_plan(comp: Computation, n_operands: int, calls: Calls) -> list[KeyLevel] | None:
    """The keys, most significant first, of a comparator that is a lexicographic order over per-operand keys
    (see the module docstring); ``None`` for any other comparator. An empty list: every pair is equivalent.
    ``calls`` (the evaluator's, :class:`~fusegen.evaluator.common.Calls`) evaluates its constant parts."""
    if comp.root is None or not is_liftable(comp):
        return None
    an = _Analysis(comp)
    levels: list[KeyLevel] = []
    index: dict[tuple, int] = {}
    atoms: dict[int, tuple[int, str]] = {}  # id(compare) -> (level, direction on (key(a), key(b)))

    def atom(inst: Instruction) -> tuple[int, str] | None:
        x, y = inst.operands
        dx, dy = an.deps(x), an.deps(y)
        if len(dx) != 1 or len(dy) != 1:
            return None
        (px,), (py,) = dx, dy
        if px // 2 != py // 2 or px == py or px // 2 >= n_operands or an.sig(x) != an.sig(y):
            return None
        direction = str(inst.attrs.get("direction", "")).strip().upper()
        if direction not in _TRUTH:
            raise _NotKeys
        dt = x.shape.element_type
        from fusegen.hlo.dtypes import numpy_dtype

        np_dt = np.dtype(numpy_dtype(dt))
        total = str(inst.attrs.get("type", "")).strip().upper() == "TOTALORDER"
        mode = "partial" if is_float(np_dt) and not total else "total"
        key = (px // 2, an.sig(x), mode)
        lvl = index.get(key)
        if lvl is None:
            lvl = index[key] = len(levels)
            levels.append(KeyLevel(px // 2, px, x, mode))
        return lvl, direction if px % 2 == 0 else _FLIP[direction]

    # pass 1: find the atoms (and check that everything above them is boolean structure)
    order: list[Instruction] = []
    seen: set[int] = set()

    def visit(inst: Instruction) -> None:
        if id(inst) in seen:
            return
        seen.add(id(inst))
        if inst.shape.is_tuple or inst.shape.rank or inst.shape.element_type != "pred":
            raise _NotKeys
        if not an.deps(inst):
            order.append(inst)
            return
        op = inst.opcode
        if op == "compare" and len(inst.operands) == 2:
            a = atom(inst)
            if a is not None:
                atoms[id(inst)] = a
                order.append(inst)
                return
        elif op not in ("and", "or", "xor", "not", "select") and op not in _PASS:
            raise _NotKeys
        for o in inst.operands:
            visit(o)
        order.append(inst)

    try:
        visit(comp.root)
    except _NotKeys:
        return None
    if len(levels) > MAX_LEVELS:
        return None
    # pass 2: the comparator's truth table over every combination of the keys' outcomes
    k = len(levels)
    outcomes = np.indices((3,) * k).reshape(k, -1) if k else np.zeros((0, 1), dtype=np.int64)
    vals: dict[int, np.ndarray] = {}
    for inst in order:
        op = inst.opcode
        if id(inst) in atoms:
            lvl, direction = atoms[id(inst)]
            v = np.asarray(_TRUTH[direction])[outcomes[lvl]]
        elif not an.deps(inst):
            v = np.full(outcomes.shape[1], _constant_bool(inst, calls))
        else:
            ops = [vals[id(o)] for o in inst.operands]
            if op == "and":
                v = ops[0] & ops[1]
            elif op == "or":
                v = ops[0] | ops[1]
            elif op == "xor":
                v = ops[0] ^ ops[1]
            elif op == "not":
                v = ~ops[0]
            elif op == "select":
                v = np.where(ops[0], ops[1], ops[2])
            elif op == "compare":
                d = str(inst.attrs.get("direction", "")).strip().upper()
                a, b = ops[0].astype(np.int8), ops[1].astype(np.int8)
                v = {"EQ": a == b, "NE": a != b, "LT": a < b, "LE": a <= b, "GT": a > b, "GE": a >= b}[d]
            else:  # _PASS on a pred scalar
                v = ops[0]
        vals[id(inst)] = v
    table = vals[id(comp.root)].reshape((3,) * k) if k else vals[id(comp.root)].reshape(())
    return _lexicographic(table, levels)


def _lexicographic(table: np.ndarray, levels: list[KeyLevel]) -> list[KeyLevel] | None:
    """Read a truth table (one axis per level: outcome '<', '=', '>') as a lexicographic order."""
    remaining = list(range(len(levels)))
    plan: list[KeyLevel] = []
    while True:
        if not table.any():
            return plan  # what is left never decides: equivalent
        if not remaining:
            return None  # true on all-equal keys: no strict order
        for ax, lvl in enumerate(remaining):
            lt, gt = np.take(table, 0, axis=ax), np.take(table, 2, axis=ax)
            if lt.all() and not gt.any():
                descending = False
            elif gt.all() and not lt.any():
                descending = True
            else:
                continue
            lv = levels[lvl]
            plan.append(KeyLevel(lv.operand, lv.param, lv.expr, lv.mode, descending))
            table = np.take(table, 1, axis=ax)
            del remaining[ax]
            break
        else:
            return None


def _sortable(key: np.ndarray, mode: str, descending: bool) -> np.ndarray | None:
    """Integers ordering like the key's compare (``None``: a partial-order float key holding a NaN)."""
    key = np.asarray(key)
    if np.issubdtype(key.dtype, np.complexfloating):
        return None
    if is_float(key.dtype):
        k = up(key)
        if mode == "partial":
            if np.isnan(k).any():
                return None  # NaN is unordered: no strict weak order, left to the merge
            k = k + np.zeros((), k.dtype)  # -0 == +0
        k = total_order_key(k)
    elif key.dtype == np.bool_:
        k = key.astype(np.int8)
    else:
        k = up(key)
    return ~k if descending else k


def key_order(plan: list[KeyLevel], moved: list[np.ndarray], calls: Calls) -> np.ndarray | None:
    """The stable order of a lexicographic ``plan`` on ``moved`` (sorted dim last), or ``None`` where a key
    cannot be ordered exactly (a NaN under a partial-order float compare)."""
    shape = moved[0].shape
    keys = []
    for lv in plan:
        key = calls.subgraph(lv.expr, {lv.param: moved[lv.operand]})
        s = _sortable(np.broadcast_to(np.asarray(key), shape), lv.mode, lv.descending)
        if s is None:
            return None
        keys.append(s)
    return stable_argsort(keys, shape)


def _strictly_increasing(k: np.ndarray) -> bool:
    return k.shape[-1] < 2 or bool((k[..., 1:] > k[..., :-1]).all())


def stable_argsort(keys: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The stable lexicographic order (``keys[0]`` most significant) of integer keys along the last axis.

    A trailing key strictly increasing along every row (an iota) decides nothing stability does not, so it
    is dropped; keys that fit 64 bits together with the element index are packed into one ``uint64`` and
    sorted by value (each packed value is unique, so the unstable ``np.sort`` gives the stable order, and
    faster than ``argsort``); others take ``np.lexsort``."""
    keys = [k if k.dtype.kind in "iu" else k.astype(np.int64) for k in keys]  # bool, int4: numpy integers
    while keys and _strictly_increasing(keys[-1]):
        keys.pop()
    n = shape[-1]
    if not keys:
        return np.broadcast_to(np.arange(n), shape).copy()
    idx_bits = max(1, int(n - 1).bit_length())
    widths = [k.dtype.itemsize * 8 for k in keys]
    if sum(widths) + idx_bits <= 63:  # one int64, the first key's sign kept, in place (big arrays)
        packed = keys[0].astype(np.int64)
        if not np.issubdtype(keys[0].dtype, np.signedinteger):
            packed -= 1 << (widths[0] - 1)
        for k, bits in zip(keys[1:], widths[1:]):
            packed <<= bits
            u = k.astype(np.int64)
            if np.issubdtype(k.dtype, np.signedinteger):
                u += 1 << (bits - 1)
            packed |= u
        packed <<= idx_bits
        packed |= np.arange(n, dtype=np.int64)
        packed.sort(axis=-1)
        packed &= (1 << idx_bits) - 1
        return packed
    if len(keys) == 1:
        return np.argsort(keys[0], axis=-1, kind="stable")
    return np.lexsort(keys[::-1], axis=-1)


def _less(comp: Computation, used: set[int], xs: list, ys: list, shape: tuple, calls: Calls) -> np.ndarray:
    args: list[Any] = []
    for i, (x, y) in enumerate(zip(xs, ys)):
        args += [x if 2 * i in used else None, y if 2 * i + 1 in used else None]
    return np.broadcast_to(np.asarray(calls.call_lifted(comp, args), dtype=bool), shape)


def merge_sort_order(comp: Computation, moved: list[np.ndarray], calls: Calls) -> np.ndarray | None:
    """Stable order of ``moved`` (sorted dim last) under a liftable comparator, by a bottom-up merge sort
    evaluated on whole arrays; ``None`` where the comparator is no strict weak order on the data."""
    shape = moved[0].shape
    n = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    used = {p.parameter_number for p in comp.parameters if _reachable(comp, p)}
    cur = [np.ascontiguousarray(m).reshape(rows, n) if (2 * i in used or 2 * i + 1 in used) else None
           for i, m in enumerate(moved)]
    perm = np.broadcast_to(np.arange(n), (rows, n)).copy()
    pos = np.arange(n)
    ridx = np.arange(rows)[:, None]
    w = 1
    while w < n:
        start = (pos // (2 * w)) * (2 * w)
        off = pos - start
        left = off < w
        other_len = np.where(left, np.clip(n - start - w, 0, w), w)  # the run searched
        base = np.where(left, start + w, start)
        lo = np.zeros((rows, n), dtype=np.int64)
        hi = np.broadcast_to(other_len, (rows, n)).copy()
        for _ in range(int(w).bit_length()):
            mid = (lo + hi) >> 1
            probe = np.minimum(base + mid, n - 1)  # inactive elements probe anything: their answer is unused
            pv = [None if c is None else np.take_along_axis(c, probe, axis=1) for c in cur]
            xs = [None if c is None else np.where(left, p, c) for c, p in zip(cur, pv)]
            ys = [None if c is None else np.where(left, c, p) for c, p in zip(cur, pv)]
            c = _less(comp, used, xs, ys, (rows, n), calls)
            active = lo < hi
            right = c == left  # a left element passes right-run elements less than it, a right one not-greater
            lo = np.where(active & right, mid + 1, lo)
            hi = np.where(active & ~right, mid, hi)
        newpos = np.where(left, start + off, start + off - w) + lo
        hit = np.zeros((rows, n), dtype=bool)
        hit[ridx, newpos] = True
        if not hit.all():
            return None
        nperm = np.empty_like(perm)
        nperm[ridx, newpos] = perm
        perm = nperm
        for i, c in enumerate(cur):
            if c is not None:
                nc = np.empty_like(c)
                nc[ridx, newpos] = c
                cur[i] = nc
        w *= 2
    return perm.reshape(shape)


def _reachable(comp: Computation, p: Instruction) -> bool:
    stack, seen = [comp.root], set()
    while stack:
        i = stack.pop()
        if i is p:
            return True
        if id(i) not in seen:
            seen.add(id(i))
            stack.extend(i.operands)
    return False


def comparison_sort_order(comp: Computation, moved: list[np.ndarray], calls: Calls) -> np.ndarray:
    """Stable order of ``moved`` (sorted dim last) by Python's sort, calling ``comp`` per comparison."""
    shp = moved[0].shape
    order = np.empty(shp, dtype=np.int64)
    flat = [m.reshape(-1, shp[-1]) for m in moved]
    oflat = order.reshape(-1, shp[-1])
    for r in range(flat[0].shape[0]):
        row = [f[r] for f in flat]

        def cmp(i: int, j: int, row=row) -> int:
            args = list(itertools.chain.from_iterable((np.asarray(v[i]), np.asarray(v[j])) for v in row))
            if bool(calls.call(comp, args)):
                return -1
            args = list(itertools.chain.from_iterable((np.asarray(v[j]), np.asarray(v[i])) for v in row))
            return 1 if bool(calls.call(comp, args)) else 0

        oflat[r] = sorted(range(shp[-1]), key=functools.cmp_to_key(cmp))
    return order


def sort_order(comp: Computation, moved: list[np.ndarray], calls: Calls) -> tuple[np.ndarray, str]:
    """``(order, path)``: the stable order of ``moved`` (equal shapes, sorted dim last) under ``comp`` and the
    way it was found: ``keys``, ``merge`` or ``per-comparison`` (see the module docstring). ``calls``: the
    evaluator's (:class:`~fusegen.evaluator.common.Calls`), which run the comparator."""
    if moved[0].shape[-1] <= 1:
        return np.zeros(moved[0].shape, dtype=np.int64), "keys"
    plan = lexicographic_plan(comp, len(moved), calls)
    if plan is not None:
        order = key_order(plan, moved, calls)
        if order is not None:
            return order, "keys"
    if is_liftable(comp):
        order = merge_sort_order(comp, moved, calls)
        if order is not None:
            return order, "merge"
    return comparison_sort_order(comp, moved, calls), "per-comparison"
