"""Errors raised while reading HLO text."""

from __future__ import annotations


class HloParseError(Exception):
    """Malformed HLO text.

    Attributes:
        filename, line (1-based), column (1-based), token (the offending text), message.
    ``str(err)`` is one line: ``FILE:LINE:COL: error: MESSAGE (at 'TOKEN')``.
    """

    def __init__(self, message: str, filename: str = "<string>", line: int = 0, column: int = 0, token: str = ""):
        self.message = message
        self.filename = filename
        self.line = line
        self.column = column
        self.token = token
        super().__init__(str(self))

    def __str__(self) -> str:
        at = f" (at {self.token!r})" if self.token else ""
        return f"{self.filename}:{self.line}:{self.column}: error: {self.message}{at}"
