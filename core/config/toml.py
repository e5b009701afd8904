"""Reading fusegen's TOML config with line numbers for every key (tomllib gives none).

:func:`read_toml` parses with :mod:`tomllib` and, separately, scans the text for table headers
(``[a.b]``, ``[[a.b]]``) and ``key = value`` lines, so errors can say ``FILE:LINE``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

import attrs


class ConfigError(Exception):
    """A configuration problem, printed as one line ``PATH:LINE: message`` (or ``SOURCE: message``).

    Attributes:
        path: the config file (or a pseudo source such as ``XLA_FLAGS``), or None.
        line: 1-based line in ``path``, or None.
        message: the text after the location.
    """

    def __init__(self, message: str, path: str | Path | None = None, line: int | None = None):
        self.path = str(path) if path is not None else None
        self.line = line
        self.message = message
        loc = self.path or ""
        if loc and line is not None:
            loc = f"{loc}:{line}"
        super().__init__(f"{loc}: {message}" if loc else message)


_BARE = re.compile(r"[A-Za-z0-9_-]+")


def split_key(text: str, pos: int = 0) -> tuple[tuple[str, ...], int] | None:
    """Parse a dotted TOML key starting at ``text[pos]``; returns (parts, end position) or None."""
    parts: list[str] = []
    n = len(text)
    while True:
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos >= n:
            return None
        c = text[pos]
        if c == '"':
            m = re.compile(r'"((?:[^"\\]|\\.)*)"').match(text, pos)
            if not m:
                return None
            try:
                parts.append(tomllib.loads(f"k = {m.group(0)}")["k"])
            except tomllib.TOMLDecodeError:
                return None
            pos = m.end()
        elif c == "'":
            end = text.find("'", pos + 1)
            if end < 0:
                return None
            parts.append(text[pos + 1:end])
            pos = end + 1
        else:
            m = _BARE.match(text, pos)
            if not m:
                return None
            parts.append(m.group(0))
            pos = m.end()
        while pos < n and text[pos] in " \t":
            pos += 1
        if pos < n and text[pos] == ".":
            pos += 1
            continue
        return tuple(parts), pos


def _scan_value_state(text: str, depth: int, in_ml: str | None) -> tuple[int, str | None]:
    """Track bracket depth and multi-line string state through ``text`` (strings and comments skipped)."""
    i, n = 0, len(text)
    while i < n:
        if in_ml:
            j = text.find(in_ml, i)
            if j < 0:
                return depth, in_ml
            i, in_ml = j + 3, None
            continue
        c = text[i]
        if text.startswith('"""', i) or text.startswith("'''", i):
            in_ml = text[i:i + 3]
            i += 3
        elif c == '"':
            m = re.compile(r'"(?:[^"\\]|\\.)*"').match(text, i)
            i = m.end() if m else n
        elif c == "'":
            j = text.find("'", i + 1)
            i = j + 1 if j >= 0 else n
        elif c == "#":
            return depth, in_ml
        else:
            if c in "[{":
                depth += 1
            elif c in "]}":
                depth -= 1
            i += 1
    return depth, in_ml


def scan_key_lines(text: str) -> dict[tuple[str, ...], int]:
    """Map every table header and ``key =`` line to its 1-based line number.

    Keys are full paths: ``[debug_options]`` then ``xla_gpu_autotune_level = 0`` gives
    ``("debug_options", "xla_gpu_autotune_level")``. Keys inside inline tables map to the line of the
    enclosing key (see :meth:`TomlDocument.line_of`). Lines inside multi-line strings and arrays are skipped.
    """
    lines: dict[tuple[str, ...], int] = {}
    table: tuple[str, ...] = ()
    depth, in_ml = 0, None
    for lineno, raw in enumerate(text.splitlines(), start=1):
        if in_ml or depth > 0:
            depth, in_ml = _scan_value_state(raw, depth, in_ml)
            continue
        s = raw.lstrip()
        if not s or s.startswith("#"):
            continue
        if s.startswith("["):
            double = s.startswith("[[")
            got = split_key(s, 2 if double else 1)
            if got:
                table = got[0]
                lines.setdefault(table, lineno)
            continue
        got = split_key(s)
        if got is None:
            continue
        parts, end = got
        if end < len(s) and s[end] == "=":
            full = table + parts
            lines.setdefault(full, lineno)
            depth, in_ml = _scan_value_state(s[end + 1:], 0, None)
    return lines


@attrs.define
class TomlDocument:
    """A parsed TOML file (or its ``[tool.fusegen]`` table) with key line numbers.

    Attributes:
        path: the file.
        data: the parsed table (for pyproject.toml: the ``[tool.fusegen]`` table).
        prefix: key path of ``data`` inside the file (``("tool", "fusegen")`` for pyproject.toml, else ``()``).
        key_lines: full key path -> 1-based line.
    """

    path: Path
    data: dict[str, Any]
    prefix: tuple[str, ...] = ()
    key_lines: dict[tuple[str, ...], int] = attrs.field(factory=dict)

    def line_of(self, *keys: str) -> int:
        """Line of the key path ``keys`` (relative to ``data``); falls back to the nearest enclosing table or key."""
        full = self.prefix + tuple(keys)
        for n in range(len(full), 0, -1):
            if full[:n] in self.key_lines:
                return self.key_lines[full[:n]]
        return 1

    def table_name(self, *keys: str) -> str:
        """``[debug_options]``-style name of a table as written in this file (prefix included)."""
        full = self.prefix + tuple(keys)
        return "[" + ".".join(_quote(k) for k in full) + "]" if full else "top level"

    def error(self, message: str, *keys: str) -> ConfigError:
        return ConfigError(message, self.path, self.line_of(*keys))

    def location(self, *keys: str) -> str:
        """``PATH:LINE`` of a key path."""
        return f"{self.path}:{self.line_of(*keys)}"


def _quote(k: str) -> str:
    return k if _BARE.fullmatch(k) else '"' + k.replace("\\", "\\\\").replace('"', '\\"') + '"'


_TOML_LINE = re.compile(r"\(at line (\d+), column (\d+)\)")


def read_toml(path: str | Path, prefix: tuple[str, ...] = ()) -> TomlDocument:
    """Parse a TOML file; with ``prefix`` (e.g. ``("tool", "fusegen")``) keep only that table.

    Raises:
        ConfigError: unreadable file (``PATH: ...``), TOML syntax error (``PATH:LINE: invalid TOML: ...``),
            or a prefix that is not a table.
    """
    p = Path(path)
    try:
        raw = p.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file: {e.strerror or e}", p) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ConfigError(f"config file is not UTF-8 ({e.reason})", p) from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        msg = str(e)
        m = _TOML_LINE.search(msg)
        line = getattr(e, "lineno", None) or (int(m.group(1)) if m else None)
        msg = _TOML_LINE.sub("", msg).strip().rstrip(".") or "syntax error"
        col = getattr(e, "colno", None) or (int(m.group(2)) if m else None)
        where = f" (column {col})" if col else ""
        raise ConfigError(f"invalid TOML: {msg}{where}", p, line) from None
    key_lines = scan_key_lines(text)
    for i, k in enumerate(prefix):
        data = data.get(k, {}) if isinstance(data, dict) else None
        if not isinstance(data, dict):
            raise ConfigError(f"[{'.'.join(prefix[:i + 1])}] must be a table", p, key_lines.get(prefix[:i + 1]))
    return TomlDocument(p, data, tuple(prefix), key_lines)


def has_table(path: Path, prefix: tuple[str, ...]) -> bool:
    """Whether the TOML file has the table ``prefix`` (a broken file counts as having it when the header is there).

    Used to decide whether a ``pyproject.toml`` configures fusegen without failing on unrelated files.
    """
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return False
    try:
        data: Any = tomllib.loads(text)
    except tomllib.TOMLDecodeError:
        keys = scan_key_lines(text)
        return any(k[:len(prefix)] == prefix for k in keys)
    for k in prefix:
        if not isinstance(data, dict) or k not in data:
            return False
        data = data[k]
    return True
