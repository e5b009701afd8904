"""The sort emitter's own reading of a sort comparator as a key order: which per-operand keys, in which order and
direction, the comparator sorts by.

The multi-launch sort (:mod:`fusegen_plugins.emitters.sort_keys`) packs every element's keys into one integer
where a comparator is a lexicographic order over keys ``f(operand)``. The reference evaluator it is judged
against reads comparators for the same purpose (``fusegen.evaluator.vectorized_sort``); this module shares no
code with it, so that a misreading on one side shows as a mismatch instead of being repeated by both.

:func:`read_key_order` works on the comparator's instructions:

1. **Atoms.** A ``compare(x, y)`` whose sides each read one parameter, ``x`` the lhs or rhs of an operand and
   ``y`` the other one, through the same instructions (:func:`_mirrored`: the same opcode, shape and attributes
   all the way down, the two parameters swapped; scalars only, no called computation) compares that
   operand's key ``x``. Atoms on the same operand whose keys are the same instructions (and both total or
   both IEEE float compares) are one key.
2. **Boolean structure.** Above the atoms only ``and``, ``or``, ``xor``, ``not``, ``select``, ``compare`` of
   ``pred`` values, the scalar identities (``copy``, ``bitcast``, ...) and constants are allowed; the root is
   a ``pred`` scalar. Anything else: no key order.
3. **Peeling the keys by search.** With the keys found so far fixed to *equal*, the comparator is evaluated
   in three-valued logic on the sign of ``key(lhs) - key(rhs)`` per key (a key not fixed: unknown); where
   that leaves it unknown, the search splits on one unknown key's three signs until every branch is decided
   (:func:`_constant`). The comparator is a key order where, at each step, it is either false whatever the
   remaining keys (the keys so far decide everything: done) or there is a key that alone decides it: true
   for ``lhs < rhs`` and false for ``lhs > rhs`` whatever the others (ascending), or the reverse
   (descending). A comparator true for two equal elements is no strict order.

This reads JAX's total order (NaN and -0.0 canonicalised, then XLA's ``ComparisonExpander``'s ``bitcast`` /
``xor`` / ``select`` on integers: one key, its instructions), the ``(key, iota)`` tie-break of XLA's
``StableSortExpander`` (``select(lt(a,b) == lt(b,a), iota_a < iota_b, lt(a,b))``), ``lax.top_k``'s
descending order, ``num_keys > 1`` and any other boolean spelling of a lexicographic order, and nothing that
is not one (``LE``: true on equal keys; a key that decides only one way).
"""

from __future__ import annotations

import itertools
import operator
from typing import Any

import attrs

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction
from fusegen.hlo.literal import parse_literal

__all__ = ["SortKey", "read_key_order"]

#: Instructions that pass a scalar through unchanged.
_SCALAR_IDENTITIES = frozenset({"copy", "bitcast", "reshape", "broadcast", "optimization-barrier",
                                "opt-barrier"})
#: Attributes that do not change what an instruction computes.
_INERT_ATTRS = frozenset({"metadata", "sharding", "frontend_attributes", "backend_config", "statistics_viz"})
#: A compare direction as a test of ``lhs`` against ``rhs``.
_DIRECTIONS = {"LT": operator.lt, "LE": operator.le, "GT": operator.gt, "GE": operator.ge, "EQ": operator.eq,
               "NE": operator.ne}
#: Most keys searched: the search over unknown keys grows as 3 ** keys.
MAX_KEYS = 8


@attrs.frozen(eq=False)
class SortKey:
    """One key of a comparator's key order.

    Attributes:
        operand: the sort operand the key is computed from.
        param: the comparator parameter ``expr`` reads (the operand's lhs ``2 * operand`` or rhs ``+ 1``).
        expr: the comparator's instruction computing the key from ``param``.
        mode: ``total`` (integers, ``pred``, or a ``TOTALORDER`` float compare) or ``partial`` (an IEEE float
            compare: NaN unordered, ``-0.0 == +0.0``).
        descending: the comparator puts the larger key first.
    """

    operand: int
    param: int
    expr: Instruction
    mode: str
    descending: bool = False


class _NoKeyOrder(Exception):
    """The comparator is not a lexicographic order over per-operand keys."""


# Nodes of the comparator's boolean structure: ("const", bool), ("atom", key, signs where true),
# ("not", a), ("and" | "or" | "xor", a, b), ("select", c, t, f), ("pred-compare", direction, a, b).


class _Reader:
    """The boolean structure over key atoms of one comparator (steps 1 and 2 of the module docstring)."""

    def __init__(self, comparator: Computation, n_operands: int):
        self.n_operands = n_operands
        self.keys: list[SortKey] = []
        self._reads: dict[int, frozenset[int]] = {}
        self._nodes: dict[int, tuple] = {}
        self.root = self.node(comparator.root)

    def reads(self, inst: Instruction) -> frozenset[int]:
        """The parameter numbers ``inst`` depends on."""
        done = self._reads.get(id(inst))
        if done is None:
            if inst.opcode == "parameter":
                done = frozenset({inst.parameter_number})
            else:
                done = frozenset(itertools.chain.from_iterable(self.reads(o) for o in inst.operands))
            self._reads[id(inst)] = done
        return done

    def node(self, inst: Instruction) -> tuple:
        done = self._nodes.get(id(inst))
        if done is None:
            done = self._nodes[id(inst)] = self._build(inst)
        return done

    def _build(self, inst: Instruction) -> tuple:
        shape = inst.shape
        if shape.is_tuple or shape.rank or shape.element_type != "pred":
            raise _NoKeyOrder
        if not self.reads(inst):
            return ("const", bool(_fold(inst)))
        op = inst.opcode
        if op == "compare" and len(inst.operands) == 2:
            atom = self._atom(inst)
            if atom is not None:
                return atom
            return ("pred-compare", _direction(inst), self.node(inst.operands[0]), self.node(inst.operands[1]))
        if op in _SCALAR_IDENTITIES and len(inst.operands) == 1:
            return self.node(inst.operands[0])
        if op == "not" and len(inst.operands) == 1:
            return ("not", self.node(inst.operands[0]))
        if op in ("and", "or", "xor") and len(inst.operands) == 2:
            return (op, self.node(inst.operands[0]), self.node(inst.operands[1]))
        if op == "select" and len(inst.operands) == 3:
            return ("select", *(self.node(o) for o in inst.operands))
        raise _NoKeyOrder

    def _atom(self, inst: Instruction) -> tuple | None:
        """``("atom", key index, signs of key(lhs) - key(rhs) where true)`` where ``inst`` compares one
        operand's key of its lhs and rhs; ``None`` where it does not."""
        x, y = inst.operands
        rx, ry = self.reads(x), self.reads(y)
        if len(rx) != 1 or len(ry) != 1:
            return None
        (px,), (py,) = rx, ry
        operand = px // 2
        if py != px ^ 1 or operand >= self.n_operands or not _mirrored(x, y, px, py):
            return None
        et = x.shape.element_type
        total = not dtypes.is_floating(et) or str(inst.attrs.get("type", "")).strip().upper() == "TOTALORDER"
        mode = "total" if total else "partial"
        for k, key in enumerate(self.keys):
            if key.operand == operand and key.mode == mode and _mirrored(x, key.expr, px, key.param):
                break
        else:
            k = len(self.keys)
            self.keys.append(SortKey(operand, px, x, mode))
        holds = _DIRECTIONS[_direction(inst)]
        # x is the lhs's key where px is even: the compare holds for sign s of key(lhs) - key(rhs) when
        # holds(s, 0); x is the rhs's key otherwise, and the compare reads the sign the other way round
        lhs_side = px % 2 == 0
        signs = frozenset(s for s in (-1, 0, 1) if holds(s if lhs_side else -s, 0))
        return ("atom", k, signs)


def _direction(inst: Instruction) -> str:
    d = str(inst.attrs.get("direction", "")).strip().upper()
    if d not in _DIRECTIONS:
        raise _NoKeyOrder
    return d


def _same_attr(a: Any, b: Any) -> bool:
    if isinstance(a, Computation) or isinstance(b, Computation):
        return a is b
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same_attr(u, v) for u, v in zip(a, b))
    return a == b


def _mirrored(x: Instruction, y: Instruction, px: int, py: int) -> bool:
    """Whether ``y`` computes from parameter ``py`` what ``x`` computes from ``px``: the same instructions,
    the parameters swapped (an instruction reading neither is shared or equal on both sides). Keys are scalar
    instructions, none calling a computation."""
    if x.shape.is_tuple or x.shape.rank or x.called_computations:
        return False
    if x is y:
        return True
    if (x.opcode != y.opcode or x.shape.element_type != y.shape.element_type
            or tuple(x.shape.dimensions) != tuple(y.shape.dimensions) or len(x.operands) != len(y.operands)):
        return False
    if x.opcode == "parameter":
        return x.parameter_number == px and y.parameter_number == py
    keys = (set(x.attrs) | set(y.attrs)) - _INERT_ATTRS
    if any(not _same_attr(x.attrs.get(k), y.attrs.get(k)) for k in keys):
        return False
    return all(_mirrored(a, b, px, py) for a, b in zip(x.operands, y.operands))


def _fold(inst: Instruction) -> Any:
    """The value of a scalar instruction reading no parameter: constants through the scalar identities,
    logical ops, ``select`` and ``compare`` (not a ``TOTALORDER`` float one)."""
    op, args = inst.opcode, inst.operands
    if op == "constant":
        if inst.shape.rank or inst.attrs.get("literal") is None:
            raise _NoKeyOrder
        return parse_literal(inst.attrs["literal"], inst.shape).item()
    if op in _SCALAR_IDENTITIES and len(args) == 1 and not inst.shape.rank:
        if op == "bitcast" and inst.shape.element_type != args[0].shape.element_type:
            raise _NoKeyOrder
        return _fold(args[0])
    if inst.shape.element_type != "pred" or inst.shape.rank:
        raise _NoKeyOrder
    if op == "not" and len(args) == 1:
        return not _fold(args[0])
    if op in ("and", "or", "xor") and len(args) == 2:
        a, b = bool(_fold(args[0])), bool(_fold(args[1]))
        return {"and": a and b, "or": a or b, "xor": a != b}[op]
    if op == "select" and len(args) == 3:
        return _fold(args[1]) if _fold(args[0]) else _fold(args[2])
    if op == "compare" and len(args) == 2:
        if (dtypes.is_floating(args[0].shape.element_type)
                and str(inst.attrs.get("type", "")).strip().upper() == "TOTALORDER"):
            raise _NoKeyOrder
        return _DIRECTIONS[_direction(inst)](_fold(args[0]), _fold(args[1]))
    raise _NoKeyOrder


def _value(node: tuple, signs: dict[int, int]) -> bool | None:
    """``node`` in three-valued logic: ``signs`` maps the keys fixed to the sign of ``key(lhs) - key(rhs)``;
    ``None`` where the result depends on a key not fixed."""
    kind = node[0]
    if kind == "const":
        return node[1]
    if kind == "atom":
        s = signs.get(node[1])
        return None if s is None else s in node[2]
    if kind == "not":
        a = _value(node[1], signs)
        return None if a is None else not a
    if kind == "and":
        a, b = _value(node[1], signs), _value(node[2], signs)
        return False if a is False or b is False else (True if a and b else None)
    if kind == "or":
        a, b = _value(node[1], signs), _value(node[2], signs)
        return True if a is True or b is True else (False if a is False and b is False else None)
    if kind == "select":
        c = _value(node[1], signs)
        if c is not None:
            return _value(node[2] if c else node[3], signs)
        t, f = _value(node[2], signs), _value(node[3], signs)
        return t if t == f else None
    a, b = _value(node[-2], signs), _value(node[-1], signs)  # xor, pred-compare
    if a is None or b is None:
        return None
    return a != b if kind == "xor" else _DIRECTIONS[node[1]](int(a), int(b))


def _constant(node: tuple, signs: dict[int, int], n_keys: int) -> bool | None:
    """What ``node`` is for every sign of the keys ``signs`` leaves open, where that is one value; ``None``
    where it depends on them (three-valued evaluation, then a split on the first open key)."""
    v = _value(node, signs)
    if v is not None:
        return v
    k = next(k for k in range(n_keys) if k not in signs)
    first = _constant(node, {**signs, k: -1}, n_keys)
    if first is None:
        return None
    for s in (0, 1):
        if _constant(node, {**signs, k: s}, n_keys) != first:
            return None
    return first


def read_key_order(comparator: Computation, n_operands: int) -> tuple[SortKey, ...] | None:
    """The keys, most significant first, of a sort comparator over ``n_operands`` operands that is a
    lexicographic order over per-operand keys (see the module docstring); ``None`` for any other comparator.
    An empty tuple: the comparator is false for every pair (every element equivalent)."""
    if comparator.root is None:
        return None
    try:
        reader = _Reader(comparator, n_operands)
    except (_NoKeyOrder, RecursionError, ValueError, TypeError):
        return None
    n = len(reader.keys)
    if n > MAX_KEYS:
        return None
    fixed: dict[int, int] = {}  # keys already ordered: equal from here on
    order: list[SortKey] = []
    while True:
        now = _constant(reader.root, fixed, n)
        if now is False:
            return tuple(order)
        if now is True:  # true for two elements equal in every key: no strict order
            return None
        for k in range(n):
            if k in fixed:
                continue
            below = _constant(reader.root, {**fixed, k: -1}, n)
            above = _constant(reader.root, {**fixed, k: 1}, n)
            if {below, above} == {True, False}:
                order.append(attrs.evolve(reader.keys[k], descending=above))
                fixed[k] = 0
                break
        else:
            return None
