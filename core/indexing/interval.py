"""Closed integer intervals ``[lower, upper]`` and their arithmetic (mirrors XLA's ``xla/hlo/analysis/interval.h``).

An interval with ``lower > upper`` is empty. Arithmetic is the range of the result over every pair of points,
as XLA's ``RangeEvaluator`` uses it to bound an expression over a map's domain.
"""

from __future__ import annotations

from typing import NamedTuple

# XLA's interval bounds are int64; an unbounded side is clamped to these.
INT64_MIN = -(2**63)
INT64_MAX = 2**63 - 1


class Interval(NamedTuple):
    """The integers ``lower..upper`` inclusive; printed as XLA prints it: ``[0, 9]``."""

    lower: int
    upper: int

    def __str__(self) -> str:
        return f"[{self.lower}, {self.upper}]"

    @property
    def is_empty(self) -> bool:
        return self.lower > self.upper

    @property
    def is_point(self) -> bool:
        return self.lower == self.upper

    @property
    def size(self) -> int:
        """Number of integers in the interval (0 when empty)."""
        return max(0, self.upper - self.lower + 1)

    def contains(self, value: int | "Interval") -> bool:
        if isinstance(value, Interval):
            return value.is_empty or (self.lower <= value.lower and value.upper <= self.upper)
        return self.lower <= value <= self.upper

    def intersect(self, other: "Interval") -> "Interval":
        return Interval(max(self.lower, other.lower), min(self.upper, other.upper))

    def union(self, other: "Interval") -> "Interval":
        if self.is_empty:
            return other
        if other.is_empty:
            return self
        return Interval(min(self.lower, other.lower), max(self.upper, other.upper))

    # --- arithmetic: the range of ``a op b`` for a in self, b in other ---
    def __add__(self, other: "Interval | int") -> "Interval":
        other = _as_interval(other)
        return Interval(self.lower + other.lower, self.upper + other.upper)

    def __neg__(self) -> "Interval":
        return Interval(-self.upper, -self.lower)

    def __mul__(self, other: "Interval | int") -> "Interval":
        other = _as_interval(other)
        products = [a * b for a in (self.lower, self.upper) for b in (other.lower, other.upper)]
        return Interval(min(products), max(products))

    def floordiv(self, other: "Interval | int") -> "Interval":
        other = _as_interval(other)
        if other.contains(0):
            if other.is_point:
                return Interval(0, 0)  # division by zero: XLA leaves such maps alone; any bound is safe here
            parts = [Interval(other.lower, -1), Interval(1, other.upper)]
            out = Interval(1, 0)
            for part in parts:
                if not part.is_empty:
                    out = out.union(self.floordiv(part))
            return out
        quotients = [a // b for a in (self.lower, self.upper) for b in (other.lower, other.upper)]
        return Interval(min(quotients), max(quotients))

    def ceildiv(self, other: "Interval | int") -> "Interval":
        return -((-self).floordiv(other))

    def mod(self, other: "Interval | int") -> "Interval":
        other = _as_interval(other)
        if other.is_point and other.lower > 0:
            m = other.lower
            if self.lower // m == self.upper // m:  # no wrap-around inside the interval
                return Interval(self.lower % m, self.upper % m)
            return Interval(0, m - 1)
        if other.lower > 0:
            return Interval(0, other.upper - 1)
        if other.upper < 0:
            return Interval(other.lower + 1, 0)
        return Interval(min(0, other.lower + 1), max(0, other.upper - 1))

    def min(self, other: "Interval") -> "Interval":
        return Interval(min(self.lower, other.lower), min(self.upper, other.upper))

    def max(self, other: "Interval") -> "Interval":
        return Interval(max(self.lower, other.lower), max(self.upper, other.upper))


def _as_interval(value: "Interval | int") -> Interval:
    return value if isinstance(value, Interval) else Interval(value, value)
