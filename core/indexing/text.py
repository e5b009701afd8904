"""XLA's text form of indexing maps: the parser and the printer.

Mirrors ``xla/hlo/analysis/indexing_map_serialization.cc`` (``ParseIndexingMap``, ``ToString``,
``PrintAffineExprImpl``): ``(d0, d1)[s0]{r0} -> (d1, d0 / 4), domain: d0 in [0, 9], ..., d0 + s0 in [0, 5]``.
An expression's own text (:func:`fusegen.indexing.expr.print_expr`, its ``str()``) is printed where it is defined.
The printer spells floordiv as ``/`` (as XLA's current printer does); the parser reads ``/``, ``floordiv``
and ``floorDiv`` alike, ``ceildiv``, ``mod``, ``min(a, b)``, ``max(a, b)``. Constraints print sorted by
their text, as XLA sorts them. A known-empty map prints ``KNOWN EMPTY``, an unknown one ``UNDEFINED``.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Sequence

from fusegen.indexing.expr import (
    CEILDIV, DEFAULT_PREFIX, DIM, FLOORDIV, MAX, MIN, MOD, MUL, RT, SYM, AffineExpr, binary, const, print_expr, var,
)
from fusegen.indexing.interval import Interval

if TYPE_CHECKING:
    from fusegen.indexing.map import IndexingMap


class IndexingMapParseError(ValueError):
    """Bad indexing-map text. ``column`` is 1-based; ``str()`` is one line naming it."""

    def __init__(self, message: str, column: int) -> None:
        super().__init__(f"column {column}: {message}")
        self.message = message
        self.column = column


# ----------------------------------------------------------------------------------------------- printer
def var_names(m: "IndexingMap") -> dict[tuple[str, int], str]:
    names: dict[tuple[str, int], str] = {}
    for kind, count in ((DIM, len(m.dims)), (SYM, len(m.syms)), (RT, len(m.rts))):
        given = m.names.get(kind, ())
        for i in range(count):
            names[(kind, i)] = (given[i] if i < len(given) and given[i] else f"{DEFAULT_PREFIX[kind]}{i}")
    return names


def print_map(m: "IndexingMap") -> str:
    if m.is_undefined:
        return "UNDEFINED"
    if m.is_known_empty:
        return "KNOWN EMPTY"
    names = var_names(m)
    parts = ["(" + ", ".join(names[(DIM, i)] for i in range(len(m.dims))) + ")"]
    if m.syms:
        parts.append("[" + ", ".join(names[(SYM, i)] for i in range(len(m.syms))) + "]")
    if m.rts:
        parts.append("{" + ", ".join(names[(RT, i)] for i in range(len(m.rts))) + "}")
    text = "".join(parts) + " -> (" + ", ".join(print_expr(e, names) for e in m.exprs) + ")"
    if not (m.dims or m.syms or m.rts):
        return text
    domain = []
    for kind, bounds in ((DIM, m.dims), (SYM, m.syms), (RT, m.rts)):
        domain += [f"{names[(kind, i)]} in {b}" for i, b in enumerate(bounds)]
    domain += sorted(f"{print_expr(e, names)} in {b}" for e, b in m.constraints.items())
    return text + ", domain: " + ", ".join(domain)


# ------------------------------------------------------------------------------------------------ parser
_TOKEN = re.compile(r"\s*(?:(?P<arrow>->)|(?P<int>-?\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<op>[-+*/()\[\]{},:]))")


class _Tokens:
    def __init__(self, text: str) -> None:
        self.items: list[tuple[str, str, int]] = []  # (kind, spelling, column)
        pos = 0
        while True:
            while pos < len(text) and text[pos].isspace():
                pos += 1
            if pos >= len(text):
                break
            m = _TOKEN.match(text, pos)
            if not m or m.end() == pos:
                raise IndexingMapParseError(f"unexpected character {text[pos]!r}", pos + 1)
            kind = m.lastgroup
            spelling = m.group(kind)
            col = m.start(kind) + 1
            if kind == "int" and spelling.startswith("-") and self.items and self.items[-1][0] in ("int", "name") \
                    or kind == "int" and spelling.startswith("-") and self.items and self.items[-1][1] == ")":
                # "a -5" is a subtraction, not a negative literal
                self.items.append(("op", "-", col))
                self.items.append(("int", spelling[1:], col + 1))
            else:
                self.items.append((kind, spelling, col))
            pos = m.end()
        self.items.append(("eof", "end of text", len(text) + 1))
        self.i = 0

    def peek(self, ahead: int = 0) -> tuple[str, str, int]:
        return self.items[min(self.i + ahead, len(self.items) - 1)]

    def next(self) -> tuple[str, str, int]:
        tok = self.peek()
        self.i += 1
        return tok

    def accept(self, spelling: str) -> bool:
        if self.peek()[1] == spelling and self.peek()[0] != "eof":
            self.i += 1
            return True
        return False

    def expect(self, spelling: str, what: str | None = None) -> None:
        kind, got, col = self.peek()
        if got != spelling or kind == "eof":
            raise IndexingMapParseError(f"expected {what or repr(spelling)}, got {got!r}", col)
        self.i += 1


_MUL_OPS = {"*": MUL, "/": FLOORDIV, "floordiv": FLOORDIV, "floorDiv": FLOORDIV, "ceildiv": CEILDIV,
            "ceilDiv": CEILDIV, "mod": MOD}


class _ExprParser:
    def __init__(self, toks: _Tokens, scope: dict[str, AffineExpr]) -> None:
        self.t = toks
        self.scope = scope

    def expr(self) -> AffineExpr:
        lhs = self.term()
        while True:
            if self.t.accept("+"):
                lhs = lhs + self.term()
            elif self.t.accept("-"):
                lhs = lhs - self.term()
            else:
                return lhs

    def term(self) -> AffineExpr:
        lhs = self.unary()
        while True:
            kind, spelling, _ = self.t.peek()
            op = _MUL_OPS.get(spelling) if kind in ("op", "name") else None
            if op is None:
                return lhs
            self.t.next()
            lhs = binary(op, lhs, self.unary())

    def unary(self) -> AffineExpr:
        if self.t.accept("-"):
            return -self.unary()
        return self.primary()

    def primary(self) -> AffineExpr:
        kind, spelling, col = self.t.next()
        if kind == "int":
            return const(int(spelling))
        if spelling == "(" and kind == "op":
            inner = self.expr()
            self.t.expect(")")
            return inner
        if kind == "name" and spelling in ("min", "max") and self.t.peek()[1] == "(":
            self.t.next()
            a = self.expr()
            self.t.expect(",")
            b = self.expr()
            self.t.expect(")")
            return binary(MIN if spelling == "min" else MAX, a, b)
        if kind == "name":
            if spelling in self.scope:
                return self.scope[spelling]
            raise IndexingMapParseError(f"unknown variable {spelling!r}", col)
        raise IndexingMapParseError(f"expected an expression, got {spelling!r}", col)


def _name_list(t: _Tokens, close: str) -> list[tuple[str, int]]:
    names: list[tuple[str, int]] = []
    if t.accept(close):
        return names
    while True:
        kind, spelling, col = t.next()
        if kind != "name":
            raise IndexingMapParseError(f"expected a variable name, got {spelling!r}", col)
        names.append((spelling, col))
        if t.accept(close):
            return names
        t.expect(",", f"',' or {close!r}")


def _int(t: _Tokens) -> int:
    kind, spelling, col = t.next()
    if kind != "int":
        raise IndexingMapParseError(f"expected an integer, got {spelling!r}", col)
    return int(spelling)


def _interval(t: _Tokens) -> Interval:
    t.expect("[")
    lo = _int(t)
    t.expect(",")
    hi = _int(t)
    t.expect("]")
    return Interval(lo, hi)


def parse_indexing_map(text: str) -> "IndexingMap":
    """Parses XLA's text form into an :class:`IndexingMap` (mirrors ``ParseIndexingMap``).

    Raises :class:`IndexingMapParseError` (a ``ValueError``) naming the 1-based column of the first bad token.
    Also reads ``KNOWN EMPTY`` and ``UNDEFINED``.
    """
    from fusegen.indexing.map import IndexingMap

    stripped = " ".join(text.split())
    if stripped.upper() == "KNOWN EMPTY":
        return IndexingMap.known_empty(0, 0)
    if stripped.upper() in ("UNDEFINED", "UNKNOWN"):
        return IndexingMap.unknown()
    t = _Tokens(text)
    t.expect("(", "'(' opening the dimension list")
    decl: dict[str, list[tuple[str, int]]] = {DIM: _name_list(t, ")"), SYM: [], RT: []}
    if t.accept("["):
        decl[SYM] = _name_list(t, "]")
    if t.accept("{"):
        decl[RT] = _name_list(t, "}")
    scope: dict[str, AffineExpr] = {}
    for kind, names in decl.items():
        for i, (name, col) in enumerate(names):
            if name in scope:
                raise IndexingMapParseError(f"variable {name!r} declared twice", col)
            scope[name] = var(kind, i)
    t.expect("->", "'->'")
    t.expect("(", "'(' opening the results")
    p = _ExprParser(t, scope)
    exprs: list[AffineExpr] = []
    if not t.accept(")"):
        while True:
            exprs.append(p.expr())
            if t.accept(")"):
                break
            t.expect(",", "',' or ')'")
    bounds: dict[str, list[Interval]] = {DIM: [], SYM: [], RT: []}
    constraints: list[tuple[AffineExpr, Interval]] = []
    if t.accept(","):
        t.expect("domain", "'domain'")
        t.expect(":")
        for kind in (DIM, SYM, RT):
            for name, _ in decl[kind]:
                k, spelling, col = t.next()
                if spelling != name:
                    raise IndexingMapParseError(f"expected the range of {name!r}, got {spelling!r}", col)
                t.expect("in", "'in'")
                bounds[kind].append(_interval(t))
                t.accept(",")
        while t.peek()[0] != "eof":
            if t.peek()[1] == "is_simplified":  # older XLA printers
                t.next()
                t.expect(":")
                t.next()
                t.accept(",")
                continue
            e = p.expr()
            t.expect("in", "'in'")
            constraints.append((e, _interval(t)))
            t.accept(",")
    elif any(decl.values()):
        kind, spelling, col = t.peek()
        raise IndexingMapParseError(f"expected ', domain:', got {spelling!r}", col)
    kind, spelling, col = t.peek()
    if kind != "eof":
        raise IndexingMapParseError(f"unexpected {spelling!r} after the map", col)
    names = {k: tuple(n for n, _ in decl[k]) for k in decl}
    return IndexingMap(exprs, bounds[DIM], bounds[SYM], bounds[RT], constraints, names=names)


def parse_expr(text: str, dim_names: Sequence[str] = (), sym_names: Sequence[str] = (),
               rt_names: Sequence[str] = ()) -> AffineExpr:
    """Parses one expression; variables ``d<i>``, ``s<i>``, ``rt<i>`` or ``r<i>`` (or the given names)."""
    t = _Tokens(text)
    scope: dict[str, AffineExpr] = {}
    for kind, given in ((DIM, dim_names), (SYM, sym_names), (RT, rt_names)):
        for i, n in enumerate(given):
            scope[n] = var(kind, i)
    for kind, prefix in (*DEFAULT_PREFIX.items(), (RT, "r")):
        for tok_kind, spelling, _ in t.items:
            if tok_kind == "name" and re.fullmatch(prefix + r"\d+", spelling) and spelling not in scope:
                scope[spelling] = var(kind, int(spelling[len(prefix):]))
    e = _ExprParser(t, scope).expr()
    kind, spelling, col = t.peek()
    if kind != "eof":
        raise IndexingMapParseError(f"unexpected {spelling!r} after the expression", col)
    return e
