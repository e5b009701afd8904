"""Lexing and shapes for the HLO text parser (:mod:`fusegen.hlo.parser`).

Token regexes, int64-bounded numbers, C escapes (``absl::CUnescape``), relaxed JSON for backend configs, and
:class:`Lexer`: positions and one-line :class:`~fusegen.hlo.errors.HloParseError` s, whitespace and comments,
balanced raw values, and the shape / layout grammar (``xla/hlo/parser/hlo_lexer.cc``, ``HloParserImpl::ParseShape``,
``ParseLayout``).
"""

from __future__ import annotations

import bisect
import json
import re
from typing import Any

from fusegen.hlo import verifier
from fusegen.hlo.errors import HloParseError
from fusegen.hlo.ir import Layout, Shape

#: Element types XLA's shape grammar knows (``xla/xla_data.proto`` ``PrimitiveType``).
ELEMENT_TYPES: frozenset[str] = frozenset(
    """pred s1 s2 s4 s8 s16 s32 s64 u1 u2 u4 u8 u16 u32 u64 f16 f32 f64 bf16 c64 c128 token opaque
    f8e4m3fn f8e5m2 f8e4m3fnuz f8e5m2fnuz f8e4m3b11fnuz f8e4m3 f8e3m4 f8e8m0fnu f4e2m1fn""".split()
)

_WS = re.compile(r"(?:\s+|//[^\n]*|/\*.*?\*/)*", re.S)
_NAME = re.compile(r"%?([A-Za-z0-9_][\w.\-]*)")
_WORD = re.compile(r"[a-z][a-z0-9\-]*")
_ATTR_KEY = re.compile(r"[A-Za-z_][\w.\-]*")
_INT = re.compile(r"[-+]?\d+")
_UINT = re.compile(r"\d+")
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"', re.S)
_RAW_RUN = re.compile(r'[^{}()\[\]",\n/]+')
_LIT_RUN = re.compile(r'[^{}()\[\]"/]+')
_BARE = re.compile(r"[^\s,{}()\[\]]+")
_INT_LIST = re.compile(r"\{\s*((?:[-+]?\d+\s*(?:,\s*[-+]?\d+\s*)*)?)\}")
_PADDING = re.compile(r"[-+]?\d+_[-+]?\d+(?:_[-+]?\d+)?(?:x[-+]?\d+_[-+]?\d+(?:_[-+]?\d+)?)*")
_XDIMS = re.compile(r"[-+]?\d+(?:x[-+]?\d+)*")
_SLICE_DIM = re.compile(r"\[\s*([-+]?\d+)\s*:\s*([-+]?\d+)\s*(?::\s*([-+]?\d+)\s*)?\]")
_BOOL = re.compile(r"true|false")
_WORD_ANY = re.compile(r"[\w$.\-]+")
_TOKEN = re.compile(r"%?[\w.\-]+|\S")
_SECTION_LINE = re.compile(r"[ \t]*\d+[ \t][^\n]*")
_SPLIT_MARK = re.compile(r"^//\s*-----\s*$", re.M)
_FUSEGEN_COMMENT = re.compile(r"^//\s*(fusegen\.[\w.]+)=(\S*)\s*$", re.M)
_FAST_SHAPE = re.compile(r"([a-z][a-z0-9]*)\[((?:\d+(?:,\d+)*)?)\](?:\{((?:\d+(?:,\d+)*)?)\})?")
# One `key="string"` or `key=bare` item of a flat metadata group; items are read back to back (scanner).
_METADATA_ITEM = re.compile(r'\s*([\w.\-]+)=(?:"([^"\\]*(?:\\.[^"\\]*)*)"|([^\s{}",]+))', re.S)
_CLOSE_BRACE = re.compile(r"\s*\}")
# A line that starts an instruction (`[ROOT] name = shape-or-opcode`): a raw value never runs into one.
_INSTR_START = re.compile(r"[ \t]*(?:ROOT[ \t]+)?%?[\w.\-]+[ \t]*=[ \t]*(?:\(|[a-z][a-z0-9]*\[|[a-z][a-z0-9\-]*\()")
_CLOSE = {"(": ")", "[": "]", "{": "}"}

_INT_LIST_KEYS = frozenset(
    ["dimensions", "dynamic_slice_sizes", "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims",
     "rhs_batch_dims"]
)
_INT_KEYS = frozenset(
    ["index", "iota_dimension", "feature_group_count", "batch_group_count", "index_vector_dim", "exponent_bits",
     "mantissa_bits"]
)
_WORD_KEYS = frozenset(["direction", "kind"])
_BOOL_KEYS = frozenset(["is_stable", "indices_are_sorted", "unique_indices"])
_SECTION_NAMES = frozenset(["FileNames", "FunctionNames", "FileLocations", "StackFrames"])
_CALLER_OPCODES = frozenset(["fusion", "call", "while", "conditional", "async-start", "call-start"])

_ESCAPE = re.compile(r"\\(x[0-9a-fA-F]{1,2}|[0-7]{1,3}|.)", re.S)
_SIMPLE_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", '"': '"', "'": "'", "\\": "\\", "a": "\a", "b": "\b",
                   "f": "\f", "v": "\v", "?": "?"}
_JSON_STR = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
_BARE_JSON_KEY = re.compile(r"([{,]\s*)([A-Za-z_$][\w$.\-]*)(\s*:)")
_JSON = json.JSONDecoder()


class _LexError(ValueError):
    """A bad number or escape inside a token; the parser reports it at the current position."""


def _int(text: str) -> int:
    """An HLO integer: like ``int`` but limited to XLA's int64 (no 5,000-digit dimensions)."""
    digits = len(text) - (text[:1] in "+-")
    if digits > 19:
        raise _LexError(f"integer {text[:12]}... has {digits} digits; HLO integers are int64")
    v = int(text)
    if not -verifier.INT64_MAX - 1 <= v <= verifier.INT64_MAX:
        raise _LexError(f"integer {text} is out of the int64 range")
    return v


def unescape_string(body: str) -> str:
    """Decode a C-escaped HLO string body (without quotes), as XLA's lexer does (``absl::CUnescape``).

    Raises:
        ValueError: a ``\\x`` escape without hex digits (``absl::CUnescape`` rejects it too).
    """
    if "\\" not in body:
        return body

    def repl(m: re.Match) -> str:
        e = m.group(1)
        if e == "x":
            raise _LexError("\\x escape without hex digits in a string")
        if e[0] == "x":
            return chr(int(e[1:], 16))
        if e[0] in "01234567":
            return chr(int(e, 8))
        return _SIMPLE_ESCAPES.get(e, "\\" + e)

    quotes_only = body.replace('\\"', "")
    if "\\" not in quotes_only:  # only \" escapes (JSON backend configs): no per-escape callback
        out = body.replace('\\"', '"')
    else:
        out = _ESCAPE.sub(repl, body)
    # Octal/hex escapes encode UTF-8 bytes; re-decode them when they form valid UTF-8.
    if not out.isascii() and any(0x80 <= ord(ch) <= 0xFF for ch in out):
        try:
            out = out.encode("latin-1").decode("utf-8")
        except (UnicodeEncodeError, UnicodeDecodeError):
            pass
    return out


def _json_or_relaxed(text: str) -> Any:
    """``json.loads``; on failure retry with bare object keys quoted (XLA tests write ``{kind:"__triton"}``)."""
    try:
        return json.loads(text)
    except ValueError:
        pass
    parts = []
    pos = 0
    for m in _JSON_STR.finditer(text):
        parts.append(_BARE_JSON_KEY.sub(r'\1"\2"\3', text[pos:m.start()]))
        parts.append(m.group(0))
        pos = m.end()
    parts.append(_BARE_JSON_KEY.sub(r'\1"\2"\3', text[pos:]))
    return json.loads("".join(parts))


def _decode_backend_config(text: str) -> dict | str:
    try:
        v = _json_or_relaxed(text)
    except (ValueError, RecursionError):
        return text
    return v if isinstance(v, dict) else text


def parse_int_list(raw: str) -> tuple[int, ...]:
    """Parse a raw ``{1,2,3}`` attribute value (``offset_dims``, ``slice_sizes``, ...) into ints.

    Raises:
        ValueError: when ``raw`` is not a brace-wrapped list of integers.
    """
    m = _INT_LIST.fullmatch(raw.strip())
    if not m:
        raise ValueError(f"expected {{int,...}}, got {raw!r}")
    body = m.group(1)
    return tuple(_int(x.strip()) for x in body.split(",")) if body.strip() else ()


def _strip_comments(s: str) -> str:
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    s = re.sub(r"//[^\n]*", "", s)
    return re.sub(r"\s*\n\s*", " ", s)


def _pad_triple(d: str) -> tuple[int, int, int]:
    parts = [_int(x) for x in d.split("_")]
    if len(parts) == 2:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


class Lexer:
    """Position, error and token helpers plus the shape grammar, over one HLO text."""

    def __init__(self, text: str, filename: str):
        self.text = text
        self.n = len(text)
        self.pos = 0
        self.filename = filename
        self._nl: list[int] | None = None
        self._line_at = (0, 1)  # (position, its 1-based line) of the last line_of answer
        # Interned shapes (by their text) and layouts: a module repeats a few dozen shapes thousands of times.
        self.shapes: dict[str, Shape] = {}
        self.layouts: dict[tuple[int, ...], Layout] = {}

    # ---------------------------------------------------------------- positions and errors
    def line_col(self, pos: int) -> tuple[int, int]:
        if self._nl is None:
            t = self.text
            nl = []
            i = t.find("\n")
            while i >= 0:
                nl.append(i)
                i = t.find("\n", i + 1)
            self._nl = nl
        pos = max(0, min(pos, self.n))
        line = bisect.bisect_left(self._nl, pos)
        start = self._nl[line - 1] + 1 if line > 0 else 0
        return line + 1, pos - start + 1

    def line_of(self, pos: int) -> int:
        """1-based line of ``pos``; counts forward from the last answer (the parser mostly moves forward)."""
        last = self._line_at
        if pos >= last[0]:
            line = last[1] + self.text.count("\n", last[0], pos)
            self._line_at = (pos, line)
            return line
        return self.line_col(pos)[0]

    def error(self, message: str, pos: int | None = None, token: str | None = None) -> HloParseError:
        if pos is None:
            pos = self.pos
        line, col = self.line_col(pos)
        if token is None:
            if pos >= self.n:
                token = "<end of file>"
            else:
                m = _TOKEN.match(self.text, pos)
                token = m.group(0)[:40] if m else self.text[pos : pos + 1]
        return HloParseError(message, self.filename, line, col, token)

    # ---------------------------------------------------------------- lexing helpers
    def ws(self) -> None:
        p = self.pos
        if p < self.n:
            c = self.text[p]
            if " " < c < "\x7f" and c != "/":  # printable ASCII other than '/': no blank or comment here
                return
        self.pos = _WS.match(self.text, p).end()
        if self.text.startswith("/*", self.pos):
            raise self.error("unterminated /* comment")

    def peek(self) -> str:
        self.ws()
        return self.text[self.pos] if self.pos < self.n else ""

    def expect(self, ch: str, what: str = "") -> None:
        self.ws()
        if self.pos >= self.n:
            raise self.error(f"unexpected end of file, expected {ch!r}{what}")
        if self.text[self.pos] != ch:
            raise self.error(f"expected {ch!r}{what}")
        self.pos += 1

    def accept(self, ch: str) -> bool:
        self.ws()
        if self.pos < self.n and self.text[self.pos] == ch:
            self.pos += 1
            return True
        return False

    def match(self, rx: re.Pattern, what: str) -> re.Match:
        self.ws()
        m = rx.match(self.text, self.pos)
        if m is None or m.end() == self.pos:
            if self.pos >= self.n:
                raise self.error(f"unexpected end of file, expected {what}")
            raise self.error(f"expected {what}")
        self.pos = m.end()
        return m

    def keyword(self, word: str) -> bool:
        """Consume ``word`` if it is the next token (followed by a non-name character)."""
        self.ws()
        t = self.text
        p = self.pos
        if t.startswith(word, p):
            e = p + len(word)
            if e >= self.n or not (t[e].isalnum() or t[e] in "_.-%"):
                self.pos = e
                return True
        return False

    def integer(self, rx: re.Pattern, what: str) -> int:
        """The next integer token (``rx``), limited to int64; the error points at the number."""
        m = self.match(rx, what)
        try:
            return _int(m.group(0))
        except _LexError as e:
            raise self.error(f"{what}: {e}", m.start(), m.group(0)[:20]) from None

    def name(self, what: str = "name") -> str:
        return self.match(_NAME, what).group(1)

    def scan_balanced(self, start: int, stop: str, run: re.Pattern = _RAW_RUN) -> tuple[int, bool]:
        """Scan from ``start`` over balanced brackets and strings.

        Stops at a depth-0 character in ``stop`` (``,``, newline, closing bracket of the caller) or a ``//``
        comment at depth 0. Returns (end, saw_comment_or_newline_inside).
        """
        t = self.text
        n = self.n
        i = start
        stack: list[str] = []
        opened: list[int] = []
        dirty = False
        while True:
            m = run.match(t, i)
            if m is not None:
                i = m.end()
            if i >= n:
                if stack:
                    raise self.error(f"unbalanced {t[opened[-1]]!r}: not closed before the end of file", opened[-1])
                return i, dirty
            c = t[i]
            if c == '"':
                m = _STRING.match(t, i)
                if m is None:
                    raise self.error("unterminated string", i)
                i = m.end()
            elif c in "{([":
                stack.append(_CLOSE[c])
                opened.append(i)
                i += 1
            elif c in "})]":
                if not stack:
                    if c in stop:
                        return i, dirty
                    raise self.error(f"unbalanced {c!r}", i)
                want = stack.pop()
                opened.pop()
                if c != want:
                    raise self.error(f"unbalanced brackets: expected {want!r}", i, c)
                i += 1
            elif c == "/":
                if t.startswith("//", i):
                    if not stack:
                        return i, dirty
                    j = t.find("\n", i)
                    i = n if j < 0 else j
                    dirty = True
                elif t.startswith("/*", i):
                    j = t.find("*/", i + 2)
                    if j < 0:
                        raise self.error("unterminated /* comment", i)
                    i = j + 2
                    dirty = True
                else:
                    i += 1
            else:  # ',' or '\n'
                if not stack and c in stop:
                    return i, dirty
                if c == "\n":
                    dirty = True
                    if stack and _INSTR_START.match(t, i + 1):
                        raise self.error(f"unbalanced {t[opened[-1]]!r}: not closed before the next instruction",
                                         opened[-1])
                i += 1

    def braced(self) -> str:
        """A balanced ``{...}`` group starting at the current position, as raw text."""
        start = self.pos
        end, dirty = self.scan_balanced(start + 1, "}")
        if end >= self.n:
            raise self.error("unbalanced '{': reached end of file", start)
        self.pos = end + 1
        raw = self.text[start : end + 1]
        return self._clean_raw(raw) if dirty else raw

    def raw_value(self, stop: str = ",\n}") -> str:
        self.ws()
        start = self.pos
        end, dirty = self.scan_balanced(start, stop)
        self.pos = end
        raw = self.text[start:end].rstrip()
        if dirty:
            raw = self._clean_raw(raw)
        return raw

    @staticmethod
    def _clean_raw(raw: str) -> str:
        """Drop comments and fold line breaks of a multi-line raw value (strings untouched)."""
        out = []
        pos = 0
        for m in _STRING.finditer(raw):
            out.append(_strip_comments(raw[pos : m.start()]))
            out.append(m.group(0))
            pos = m.end()
        out.append(_strip_comments(raw[pos:]))
        return "".join(out).strip()

    # ---------------------------------------------------------------- shapes
    def fast_shape(self) -> Shape | None:
        """The common ``f32[2,3]{1,0}`` form in one regex; ``None`` sends anything else to the full grammar."""
        t = self.text
        m = _FAST_SHAPE.match(t, self.pos)
        if m is None:
            return None
        end = m.end()
        if m.group(3) is None and end < self.n:
            c = t[end]
            if c == "{" or ((c == " " or c == "\n") and t.startswith("{", _WS.match(t, end).end())):
                return None
        shape = self.shapes.get(m.group(0)) or self.new_shape(m.group(0), *m.groups())
        if shape is not None:
            self.pos = end
        return shape

    def new_shape(self, text: str, etype: str, dims_s: str, mtm_s: str | None) -> Shape | None:
        """The interned shape of a fast-path shape text, or ``None`` when the full grammar must report it."""
        if etype not in ELEMENT_TYPES or etype == "token":
            return None
        try:
            dims = tuple(map(_int, dims_s.split(","))) if dims_s else ()
            mtm = tuple(map(_int, mtm_s.split(","))) if mtm_s else ()
        except _LexError:
            return None  # the full grammar reports it with its position
        layout = None
        if mtm_s is not None:
            if mtm and sorted(mtm) != list(range(len(dims))):
                return None  # the full grammar reports it
            layout = self.layouts.get(mtm)
            if layout is None:
                layout = self.layouts.setdefault(mtm, Layout(mtm))
        shape = self.shapes[text] = Shape(etype, dims, layout)
        return shape

    def shape(self) -> Shape:
        self.ws()
        fast = self.fast_shape()
        if fast is not None:
            return fast
        t = self.text
        if self.pos < self.n and t[self.pos] == "(":
            self.pos += 1
            elems: list[Shape] = []
            if not self.accept(")"):
                while True:
                    elems.append(self.shape())
                    if self.accept(","):
                        continue
                    self.expect(")", " closing the tuple shape")
                    break
            return Shape("tuple", (), None, tuple(elems))
        m = self.match(_WORD, "a shape")
        return self.array_shape(m.group(0), m.start())

    def array_shape(self, etype: str, at: int) -> Shape:
        """The rest of an array shape after its element type (``[2,3]{1,0}``)."""
        if etype not in ELEMENT_TYPES:
            raise self.error(f"unknown element type {etype!r}", at, etype)
        self.expect("[", f" after element type {etype!r}")
        dims: list[int] = []
        dyn: list[bool] = []
        if not self.accept("]"):
            while True:
                self.ws()
                t = self.text
                p = self.pos
                if t.startswith("<=", p):
                    self.pos = p + 2
                    dims.append(self.integer(_UINT, "a dimension bound"))
                    dyn.append(True)
                elif t.startswith("?", p):
                    self.pos = p + 1
                    dims.append(-1)
                    dyn.append(True)
                else:
                    dims.append(self.integer(_UINT, "a dimension size"))
                    dyn.append(False)
                if self.accept(","):
                    continue
                self.expect("]", " closing the dimensions")
                break
        layout = None
        self.ws()
        if self.pos < self.n and self.text[self.pos] == "{":
            # `-> f32[2] {` : the brace may open a computation body, not a layout
            q = _WS.match(self.text, self.pos + 1).end()
            if q < self.n and (self.text[q].isdigit() or self.text[q] in ":}"):
                layout = self.layout(len(dims))
        if etype == "token" and dims:
            raise self.error("token shape must be token[]", at, etype)
        return Shape(etype, tuple(dims), layout, None, tuple(dyn) if any(dyn) else ())

    def layout(self, rank: int) -> Layout:
        start = self.pos
        self.expect("{")
        mtm: list[int] = []
        tiles: list[tuple[int, ...]] = []
        mem = None
        extra: list[str] = []
        if self.peek() not in (":", "}"):
            while True:
                mtm.append(self.integer(_UINT, "a layout dimension"))
                if not self.accept(","):
                    break
        if self.accept(":"):
            t = self.text
            while True:
                self.ws()
                if self.pos >= self.n:
                    raise self.error("unexpected end of file in layout")
                if t[self.pos] == "}":
                    break
                m = re.compile(r"[A-Z#*]+").match(t, self.pos)
                if m is None:
                    raise self.error("expected a layout item (T(...), S(n), E(n), ...)")
                item = m.group(0)
                self.pos = m.end()
                groups: list[str] = []
                while self.pos < self.n and t[self.pos] == "(":
                    end = t.find(")", self.pos)
                    if end < 0:
                        raise self.error("unbalanced '(' in layout")
                    groups.append(t[self.pos + 1 : end])
                    self.pos = end + 1
                if item == "T":
                    for g in groups:
                        try:
                            tiles.append(tuple(-1 if x.strip() == "*" else _int(x.strip()) for x in g.split(",") if x.strip()))
                        except ValueError as e:
                            raise self.error(f"bad tile T({g[:40]}): {e}") from None
                elif item == "S" and len(groups) == 1 and groups[0].strip().lstrip("-").isdigit():
                    mem = _int(groups[0].strip())
                else:
                    extra.append(item + "".join(f"({g})" for g in groups))
        self.expect("}", " closing the layout")
        if mtm and len(mtm) != rank:
            raise self.error(f"layout {{{','.join(map(str, mtm))}}} does not match rank {rank}", start)
        if mtm and sorted(mtm) != list(range(rank)):
            raise self.error(f"layout {{{','.join(map(str, mtm))}}} is not a permutation of 0..{rank - 1}", start)
        return Layout(tuple(mtm), tuple(tiles), mem, tuple(extra))
