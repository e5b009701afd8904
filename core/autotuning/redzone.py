"""Buffers surrounded by red zones, to catch kernels that write past their buffers.

Mirrors ``stream_executor/gpu/redzone_allocator.{h,cc}`` (``kDefaultRedzoneSize = 1 << 23`` per side,
pattern ``0xFF``, ``RedzoneCheckStatus::RedzoneFailureMsg``) and the rejection text of
``xla/backends/gpu/autotuner/gpu_profiler.cc:296-323``. ``xla_gpu_redzone_padding_bytes`` sets the size
of one side; tests use small zones.
"""

from __future__ import annotations

import attrs
import numpy as np

#: ``xla_gpu_redzone_padding_bytes`` default: 8 MiB on each side of a buffer.
DEFAULT_REDZONE_BYTES = 8 * 1024 * 1024
REDZONE_PATTERN = 0xFF
#: Prefix of the profiler's rejection (gpu_profiler.cc).
REJECTION_PREFIX = "Autotuning candidate rejected: kernel wrote past its allocated buffer. "
_ALIGN = 64


def _address(a) -> int:
    if hasattr(a, "__cuda_array_interface__"):
        return int(a.__cuda_array_interface__["data"][0])
    return int(a.__array_interface__["data"][0])


class RedzoneCheckError(Exception):
    """A red zone was overwritten; the message names the buffer, the side and the byte offset."""


@attrs.define(eq=False)
class RedzoneBuffer:
    """A user buffer in the middle of ``backing``: ``[lhs red zone | user bytes | slop+rhs red zone]``.

    Attributes:
        name: shown in messages (``"input 0 (f32[64,64])"``, ``"output 0"``, ``"scratch"``).
        backing: the whole ``uint8`` allocation.
        array: the user view: 1-D, ``dtype``, ``numel`` elements.
        redzone_bytes: size of each side's red zone.
    """

    name: str
    backing: np.ndarray = attrs.field(repr=False)
    array: np.ndarray = attrs.field(repr=False)
    user_offset: int
    user_bytes: int
    redzone_bytes: int

    @property
    def address(self) -> int:
        """Address of the user bytes (XLA prints it with ``%p``)."""
        return _address(self.backing) + self.user_offset

    def lhs(self) -> np.ndarray:
        return self.backing[self.user_offset - self.redzone_bytes: self.user_offset]

    def rhs(self) -> np.ndarray:
        return self.backing[self.user_offset + self.user_bytes:]

    def reinit(self) -> None:
        """Rewrite the pattern into both red zones."""
        self.lhs()[...] = REDZONE_PATTERN
        self.rhs()[...] = REDZONE_PATTERN

    def check(self) -> str | None:
        """``None`` if both red zones hold the pattern, else XLA's ``RedzoneFailureMsg`` text."""
        for side, zone in (("LHS", self.lhs()), ("RHS", self.rhs())):
            bad = zone != REDZONE_PATTERN
            if not bool(bad.any()):
                continue
            first = int(bad.argmax())
            word_off = first - first % 4
            word = bytes(zone[word_off: word_off + 4].tolist())
            word = word + b"\xff" * (4 - len(word))
            actual = int.from_bytes(word, "little")
            return (
                f"Redzone mismatch in {side} redzone of buffer 0x{self.address:x} ({self.name}) at offset "
                f"{word_off}; expected {0xFFFFFFFF:08x} but was {actual:08x}."
            )
        return None


class RedzoneAllocator:
    """Allocates :class:`RedzoneBuffer` s with ``redzone_bytes`` on each side (0 disables red zones).

    Raises:
        ValueError: a negative red-zone size.
    """

    def __init__(self, redzone_bytes: int = DEFAULT_REDZONE_BYTES, xp=np):
        if redzone_bytes < 0:
            raise ValueError(f"xla_gpu_redzone_padding_bytes must be >= 0, got {redzone_bytes}")
        self.redzone_bytes = int(redzone_bytes)
        self.buffers: list[RedzoneBuffer] = []
        self.xp = xp  # numpy, or cupy for device buffers

    def allocate(self, name: str, numel: int, dtype: np.dtype) -> RedzoneBuffer:
        """A 1-D ``dtype`` array of ``numel`` elements between two red zones."""
        dtype = np.dtype(dtype)
        user_bytes = int(numel) * dtype.itemsize
        rz = self.redzone_bytes
        # Keep the user view aligned for its dtype; alignment slop belongs to the rhs red zone.
        lhs = ((rz + _ALIGN - 1) // _ALIGN) * _ALIGN if rz else 0
        total = lhs + user_bytes + (((user_bytes + 3) // 4) * 4 - user_bytes) + rz
        backing = self.xp.empty(total + _ALIGN, dtype=np.uint8)
        shift = (-_address(backing)) % _ALIGN
        backing = backing[shift: shift + total]
        # The whole lhs side (including alignment bytes) is checked as red zone.
        buf = RedzoneBuffer(name, backing, backing[lhs: lhs + user_bytes].view(dtype), lhs, user_bytes, lhs)
        if rz:
            buf.reinit()
        self.buffers.append(buf)
        return buf

    def check(self, buffers: list[RedzoneBuffer] | None = None) -> str | None:
        """First red-zone failure among ``buffers`` (default: all allocated), as a message, else ``None``."""
        if not self.redzone_bytes:
            return None
        for b in self.buffers if buffers is None else buffers:
            msg = b.check()
            if msg:
                return msg
        return None

    def release(self, buffers: list[RedzoneBuffer]) -> None:
        ids = {id(b) for b in buffers}
        self.buffers = [b for b in self.buffers if id(b) not in ids]
