"""Affine (and near-affine) index expressions over dimension, range and runtime variables.

Mirrors XLA's ``SymbolicExpr`` (``xla/hlo/analysis/symbolic_expr.h``), which replaced MLIR's ``AffineExpr``
in XLA's indexing maps: a binary tree of ``+``, ``*``, ``floordiv``, ``ceildiv``, ``mod``, ``min``, ``max``
over integer constants and variables. ``a - b`` is stored as ``a + b * -1``, as MLIR and XLA store it.

Variables: ``dim(i)`` is ``d{i}`` (a dimension variable), ``sym(i)`` is ``s{i}`` (a range variable / symbol),
``rt(i)`` is ``rt{i}`` (a runtime variable, e.g. the offset a dynamic-slice reads at run time).

Expressions are immutable and hashable; ``==`` is structural equality (so they can key a constraint dict).
Builders fold constants and apply MLIR's cheap canonicalizations (constant on the right of ``+``/``*``,
``x + 0``, ``x * 1``, ``(x + c1) + c2``, ``(x * c1) * c2``), nothing range-dependent: that is ``simplify``'s.
``str(e)`` is XLA's text of the expression (:func:`print_expr`; whole maps: :mod:`fusegen.indexing.text`).
"""

from __future__ import annotations

from typing import Callable, Iterator, Mapping

# Node kinds.
CONST, DIM, SYM, RT = "const", "d", "s", "r"
ADD, MUL, FLOORDIV, CEILDIV, MOD, MIN, MAX = "add", "mul", "floordiv", "ceildiv", "mod", "min", "max"
VAR_KINDS = (DIM, SYM, RT)
BINARY_KINDS = (ADD, MUL, FLOORDIV, CEILDIV, MOD, MIN, MAX)


def _floordiv(a: int, b: int) -> int:
    return a // b if b else 0


def _ceildiv(a: int, b: int) -> int:
    return -((-a) // b) if b else 0


def _mod(a: int, b: int) -> int:
    return a % b if b else 0


FOLD: dict[str, Callable[[int, int], int]] = {
    ADD: lambda a, b: a + b,
    MUL: lambda a, b: a * b,
    FLOORDIV: _floordiv,
    CEILDIV: _ceildiv,
    MOD: _mod,
    MIN: min,
    MAX: max,
}


class AffineExpr:
    """One node of an index expression. Build with ``dim``/``sym``/``rt``/``const`` and the operators."""

    __slots__ = ("kind", "lhs", "rhs", "value", "_hash")

    def __init__(self, kind: str, lhs: "AffineExpr | None" = None, rhs: "AffineExpr | None" = None,
                 value: int = 0) -> None:
        object.__setattr__(self, "kind", kind)
        object.__setattr__(self, "lhs", lhs)
        object.__setattr__(self, "rhs", rhs)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "_hash", hash((kind, lhs, rhs, value)))

    def __setattr__(self, name, value):  # immutable: they key dicts
        raise AttributeError("AffineExpr is immutable")

    def _key(self):
        return (self.kind, self.lhs, self.rhs, self.value)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if self is other:
            return True
        return isinstance(other, AffineExpr) and self._hash == other._hash and self._key() == other._key()

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)

    def __repr__(self) -> str:
        return f"AffineExpr({self})"

    def __str__(self) -> str:
        return print_expr(self)

    # --- predicates ---
    @property
    def is_const(self) -> bool:
        return self.kind == CONST

    @property
    def is_var(self) -> bool:
        return self.kind in VAR_KINDS

    @property
    def is_binary(self) -> bool:
        return self.kind in BINARY_KINDS

    # --- operators ---
    def __add__(self, other: "AffineExpr | int") -> "AffineExpr":
        return add(self, as_expr(other))

    def __radd__(self, other: int) -> "AffineExpr":
        return add(as_expr(other), self)

    def __sub__(self, other: "AffineExpr | int") -> "AffineExpr":
        return add(self, mul(as_expr(other), const(-1)))

    def __rsub__(self, other: int) -> "AffineExpr":
        return add(as_expr(other), mul(self, const(-1)))

    def __neg__(self) -> "AffineExpr":
        return mul(self, const(-1))

    def __mul__(self, other: "AffineExpr | int") -> "AffineExpr":
        return mul(self, as_expr(other))

    def __rmul__(self, other: int) -> "AffineExpr":
        return mul(as_expr(other), self)

    def floordiv(self, other: "AffineExpr | int") -> "AffineExpr":
        return binary(FLOORDIV, self, as_expr(other))

    def ceildiv(self, other: "AffineExpr | int") -> "AffineExpr":
        return binary(CEILDIV, self, as_expr(other))

    def mod(self, other: "AffineExpr | int") -> "AffineExpr":
        return binary(MOD, self, as_expr(other))

    __floordiv__ = floordiv
    __mod__ = mod

    def min(self, other: "AffineExpr | int") -> "AffineExpr":
        return binary(MIN, self, as_expr(other))

    def max(self, other: "AffineExpr | int") -> "AffineExpr":
        return binary(MAX, self, as_expr(other))

    # --- traversal ---
    def walk(self) -> Iterator["AffineExpr"]:
        """Every node, pre-order."""
        stack = [self]
        while stack:
            node = stack.pop()
            yield node
            if node.is_binary:
                stack.append(node.rhs)
                stack.append(node.lhs)

    def variables(self) -> set[tuple[str, int]]:
        """``{(kind, index)}`` of the variables used, e.g. ``{("d", 0), ("s", 1)}``."""
        return {(n.kind, n.value) for n in self.walk() if n.is_var}

    def uses(self, kind: str, index: int) -> bool:
        return any(n.kind == kind and n.value == index for n in self.walk())

    def replace(self, mapping: Mapping["AffineExpr", "AffineExpr"]) -> "AffineExpr":
        """Substitutes whole sub-expressions (variables usually), rebuilding with the canonicalizing builders."""
        hit = mapping.get(self)
        if hit is not None:
            return hit
        if not self.is_binary:
            return self
        lhs, rhs = self.lhs.replace(mapping), self.rhs.replace(mapping)
        if lhs is self.lhs and rhs is self.rhs:
            return self
        return binary(self.kind, lhs, rhs)

    def evaluate(self, dims=(), syms=(), rts=()) -> int:
        """The integer value at a point (Python floor semantics for floordiv/mod, as XLA's evaluator)."""
        if self.kind == CONST:
            return self.value
        if self.kind == DIM:
            return int(dims[self.value])
        if self.kind == SYM:
            return int(syms[self.value])
        if self.kind == RT:
            return int(rts[self.value])
        return FOLD[self.kind](self.lhs.evaluate(dims, syms, rts), self.rhs.evaluate(dims, syms, rts))


def const(c: int) -> AffineExpr:
    """The constant ``c``."""
    return AffineExpr(CONST, value=int(c))


def dim(i: int) -> AffineExpr:
    """Dimension variable ``d{i}``."""
    return AffineExpr(DIM, value=int(i))


def sym(i: int) -> AffineExpr:
    """Range variable (symbol) ``s{i}``."""
    return AffineExpr(SYM, value=int(i))


def rt(i: int) -> AffineExpr:
    """Runtime variable ``rt{i}`` (XLA's default name; a map parsed with other names keeps them)."""
    return AffineExpr(RT, value=int(i))


def var(kind: str, i: int) -> AffineExpr:
    return AffineExpr(kind, value=int(i))


def as_expr(x: "AffineExpr | int") -> AffineExpr:
    if isinstance(x, AffineExpr):
        return x
    if isinstance(x, bool) or not isinstance(x, int):
        raise TypeError(f"expected an AffineExpr or int, got {type(x).__name__}")
    return const(x)


def expr_min(a: "AffineExpr | int", b: "AffineExpr | int") -> AffineExpr:
    return binary(MIN, as_expr(a), as_expr(b))


def expr_max(a: "AffineExpr | int", b: "AffineExpr | int") -> AffineExpr:
    return binary(MAX, as_expr(a), as_expr(b))


def add(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    if a.is_const and b.is_const:
        return const(a.value + b.value)
    if a.is_const:  # constant to the right
        a, b = b, a
    if b.is_const and b.value == 0:
        return a
    if b.is_const and a.kind == ADD and a.rhs.is_const:  # (x + c1) + c2
        return add(a.lhs, const(a.rhs.value + b.value))
    if a.kind == ADD and a.rhs.is_const and not b.is_const:  # (x + c) + y -> (x + y) + c
        return add(add(a.lhs, b), a.rhs)
    return AffineExpr(ADD, a, b)


def mul(a: AffineExpr, b: AffineExpr) -> AffineExpr:
    if a.is_const and b.is_const:
        return const(a.value * b.value)
    if a.is_const:
        a, b = b, a
    if b.is_const:
        if b.value == 1:
            return a
        if b.value == 0:
            return const(0)
        if a.kind == MUL and a.rhs.is_const:  # (x * c1) * c2
            return mul(a.lhs, const(a.rhs.value * b.value))
    return AffineExpr(MUL, a, b)


def binary(kind: str, a: AffineExpr, b: AffineExpr) -> AffineExpr:
    """Builds ``a kind b`` with constant folding and the identities every simplifier agrees on."""
    if kind == ADD:
        return add(a, b)
    if kind == MUL:
        return mul(a, b)
    if a.is_const and b.is_const:
        if kind in (FLOORDIV, CEILDIV, MOD) and b.value == 0:
            return AffineExpr(kind, a, b)  # undefined; left for the caller to see
        return const(FOLD[kind](a.value, b.value))
    if b.is_const:
        if kind in (FLOORDIV, CEILDIV) and b.value == 1:
            return a
        if kind == MOD and b.value in (1, -1):
            return const(0)
    if kind in (MIN, MAX) and a == b:
        return a
    return AffineExpr(kind, a, b)


# ----------------------------------------------------------------------------------------------- printer
_SPELLING = {MUL: " * ", FLOORDIV: " / ", CEILDIV: " ceildiv ", MOD: " mod "}
DEFAULT_PREFIX = {DIM: "d", SYM: "s", RT: "rt"}  # XLA's GetRTVarName default is "rt"


def print_expr(expr: AffineExpr, names: dict[tuple[str, int], str] | None = None) -> str:
    out: list[str] = []
    _print(expr, names or {}, False, out)
    return "".join(out)


def _var_name(expr: AffineExpr, names: dict) -> str:
    return names.get((expr.kind, expr.value)) or f"{DEFAULT_PREFIX[expr.kind]}{expr.value}"


def _print(e: AffineExpr, names: dict, parens: bool, out: list[str]) -> None:
    kind = e.kind
    if kind == CONST:
        out.append(str(e.value))
        return
    if kind in DEFAULT_PREFIX:
        out.append(_var_name(e, names))
        return
    if kind in (MIN, MAX):
        out.append(f"{kind}(")
        _print(e.lhs, names, False, out)
        out.append(", ")
        _print(e.rhs, names, False, out)
        out.append(")")
        return
    if parens:
        out.append("(")
    if kind != ADD:
        if kind == MUL and e.rhs.is_const and e.rhs.value == -1:
            out.append("-")
            _print(e.lhs, names, True, out)
        else:
            _print(e.lhs, names, True, out)
            out.append(_SPELLING[kind])
            _print(e.rhs, names, True, out)
    else:
        rhs = e.rhs
        if rhs.kind == MUL and rhs.rhs.is_const and rhs.rhs.value < 0:
            _print(e.lhs, names, False, out)
            out.append(" - ")
            if rhs.rhs.value == -1:
                _print(rhs.lhs, names, rhs.lhs.kind == ADD, out)
            else:
                _print(rhs.lhs, names, True, out)
                out.append(f" * {-rhs.rhs.value}")
        elif rhs.is_const and rhs.value < 0:
            _print(e.lhs, names, False, out)
            out.append(f" - {-rhs.value}")
        else:
            _print(e.lhs, names, False, out)
            out.append(" + ")
            _print(rhs, names, False, out)
    if parens:
        out.append(")")
