"""The error an emitter raises when it cannot generate a fusion's kernel (re-exported by
:mod:`fusegen.codegen.emitter`). Its own module so that the elemental generator, which the emitters' helpers
call, raises it without importing the emitter base it serves."""

from __future__ import annotations

__all__ = ["EmitterUnsupported"]


class EmitterUnsupported(Exception):
    """An emitter cannot generate code for this fusion; the fusion falls back to another backend.

    Attributes:
        opcode: the HLO opcode that is not supported (or ``""``).
        instruction: the instruction name (without ``%``), or ``""``.
        reason: why, in words.
    """

    def __init__(self, opcode: str = "", instruction: str = "", reason: str = ""):
        self.opcode = opcode
        self.instruction = instruction
        self.reason = reason
        where = f"%{instruction} ({opcode})" if instruction else (opcode or "fusion")
        super().__init__(f"{where}: {reason}" if reason else f"{where}: not supported by the Triton emitter")
