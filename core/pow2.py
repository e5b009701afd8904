"""Powers of two, as tile sizes, Triton block shapes and bitonic sort networks need them (one copy for all of fusegen).

``next_pow2(n)``: the least power of two ``>= n`` (1 for ``n <= 1``); ``prev_pow2(n)``: the greatest power of two
``<= n`` (1 for ``n <= 1``); ``is_pow2(n)``: ``n`` is a positive power of two. ``n`` is an ``int`` (numpy
integers are converted).
"""

from __future__ import annotations

__all__ = ["next_pow2", "prev_pow2", "is_pow2"]


def next_pow2(n: int) -> int:
    """The least power of two at or above ``n``; 1 for ``n <= 1``."""
    n = int(n)
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def prev_pow2(n: int) -> int:
    """The greatest power of two at or below ``n``; 1 for ``n <= 1``."""
    return 1 << (max(1, int(n)).bit_length() - 1)


def is_pow2(n: int) -> bool:
    """Whether ``n`` is a positive power of two."""
    n = int(n)
    return n > 0 and n & (n - 1) == 0
