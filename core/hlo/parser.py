"""HLO text parser: XLA's HLO text format to :mod:`fusegen.hlo.ir` objects.

Mirrors ``xla/hlo/parser/hlo_parser.cc`` (``HloParserImpl::ParseHloModule``, ``ParseComputation``,
``ParseInstruction``, ``ParseShape``, ``ParseLayout``, ``ParseAttributes``) for the subset of the grammar
XLA:GPU dumps and XLA's lit / unit tests use. Hand-written recursive descent over compiled regexes, one pass,
no backtracking beyond a token; computation references are resolved after the whole module is read so forward
references work.

Every failure, including internal ones, surfaces as :class:`fusegen.hlo.errors.HloParseError` carrying the
file name, 1-based line and column and the offending token.

Files without ``ENTRY`` follow XLA's test conventions: if the last computation calls other computations through
``fusion``/``call``/``while``/``conditional`` it is the entry (``hlo-opt`` lit tests); otherwise it is a fused
computation (``fusion_to_mlir`` lit tests, ``xla/codegen/tools/test_lib.cc`` ``LoadTestModule``) and an entry
``main`` that wraps it in one ``kLoop`` fusion is synthesized (``Module.attrs["fusegen.synthesized_entry"]``).
"""

from __future__ import annotations

import bisect
import json
import re
from pathlib import Path
from typing import Any

from fusegen.hlo import verifier
from fusegen.hlo.errors import HloParseError
from fusegen.hlo.ir import COMPUTATION_ATTRIBUTES, Computation, Instruction, Layout, Module, Shape
from fusegen.hlo.opcodes import SAME_SHAPE_OPCODES, is_known_opcode

__all__ = ["parse_module", "parse_file", "parse_modules", "parse_int_list", "ELEMENT_TYPES"]

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
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"', re.S)
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
_layout_cache: dict[tuple[int, ...], Layout] = {}
_METADATA_ITEM = re.compile(r'\s*([\w.\-]+)=(?:"((?:[^"\\]|\\.)*)"|([^\s{}",]+))')
_FAST_METADATA = re.compile(r'\{((?:\s*[\w.\-]+=(?:"(?:[^"\\]|\\.)*"|[^\s{}",]+))*)\s*\}', re.S)
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

    out = _ESCAPE.sub(repl, body)
    # Octal/hex escapes encode UTF-8 bytes; re-decode them when they form valid UTF-8.
    if any(0x80 <= ord(ch) <= 0xFF for ch in out):
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


class _Pending:
    """Operand names of one instruction, resolved when its computation's body is complete."""

    __slots__ = ("inst", "names", "preds", "pos")

    def __init__(self, inst: Instruction, names: list[tuple[str, int]], preds: list[tuple[str, int]] | None,
                 pos: int):
        self.inst = inst
        self.names = names
        self.preds = preds
        self.pos = pos


class _Parser:
    def __init__(self, text: str, filename: str):
        self.text = text
        self.n = len(text)
        self.pos = 0
        self.filename = filename
        self._nl: list[int] | None = None
        self.module = Module(name="", filename=filename)
        # (instruction, attr key, [(name, pos)], single-valued?)
        self.comp_refs: list[tuple[Instruction, str, list[tuple[str, int]], bool]] = []
        self.inline_count = 0

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
        self.pos = _WS.match(self.text, self.pos).end()
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
        etype, dims_s, mtm_s = m.groups()
        end = m.end()
        if etype not in ELEMENT_TYPES or etype == "token":
            return None
        if mtm_s is None:
            if end < self.n:
                c = t[end]
                if c == "{" or ((c == " " or c == "\n") and t.startswith("{", _WS.match(t, end).end())):
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
            layout = _layout_cache.get(mtm)
            if layout is None:
                layout = _layout_cache.setdefault(mtm, Layout(mtm))
        self.pos = end
        return Shape(etype, dims, layout)

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

    # ---------------------------------------------------------------- module
    def parse(self) -> Module:
        mod = self.module
        seen_header = False
        names: dict[str, Computation] = {}
        while True:
            self.ws()
            if self.pos >= self.n:
                break
            start = self.pos
            if self.keyword("HloModule"):
                if seen_header or mod.computations:
                    raise self.error(
                        "a second HloModule header (split-input files separated by '// -----' need parse_modules)",
                        start, "HloModule")
                seen_header = True
                self.header()
                continue
            m = _WORD_ANY.match(self.text, self.pos)
            if m and m.group(0) in _SECTION_NAMES:
                j = m.end()
                eol = self.text.find("\n", j)
                rest = self.text[j : self.n if eol < 0 else eol]
                if not rest.strip():
                    self.section(m.group(0))
                    continue
            comp = self.computation()
            if comp.name in names:
                raise self.error(f"duplicate computation name {comp.name!r}", start)
            names[comp.name] = comp
        if not mod.computations:
            raise self.error("no computations in module (empty or truncated file?)", self.n)
        if not mod.name:
            stem = Path(self.filename).stem if self.filename and not self.filename.startswith("<") else ""
            stem = re.sub(r"[^\w.\-]", "_", stem)
            mod.name = stem or "module"
        for m in _FUSEGEN_COMMENT.finditer(self.text):
            mod.attrs[m.group(1)] = m.group(2)
        self.resolve_computations(names)
        self.check_call_graph()
        self.choose_entry(names)
        return mod

    def header(self) -> None:
        self.module.name = self.name("a module name")
        while True:
            # header attributes end at the first newline that is not inside brackets
            p = _WS.match(self.text, self.pos).end()
            if p < self.n and self.text[p] == ",":
                self.pos = p + 1
                key = self.match(_ATTR_KEY, "a module attribute name").group(0)
                self.expect("=", f" after module attribute {key!r}")
                self.module.attrs[key] = self.raw_value(",\n")
            else:
                break

    def section(self, title: str) -> None:
        t = self.text
        j = t.find("\n", self.pos)
        lines = [title]
        self.pos = self.n if j < 0 else j + 1
        while self.pos < self.n:
            m = _SECTION_LINE.match(t, self.pos)
            if m is None:
                break
            lines.append(m.group(0).strip())
            e = m.end()
            self.pos = e + 1 if e < self.n else e
        self.module.extra_sections.append("\n".join(lines))

    # ---------------------------------------------------------------- computations
    def computation(self, inline_name: str | None = None) -> Computation:
        mod = self.module
        if inline_name is None:
            self.ws()
            header_pos = self.pos
            is_entry = self.keyword("ENTRY")
            name = self.name("a computation name (or ENTRY)")
            if self.peek() == "(":
                self.signature()
                self.expect("-", " ('->' before the result shape)")
                self.expect(">", " ('->' before the result shape)")
                self.shape()
            while self.accept(","):  # e.g. execution_thread="..."
                self.match(_ATTR_KEY, "a computation attribute")
                self.expect("=")
                self.ws()
                self.match(_STRING if self.text.startswith('"', self.pos) else _WORD_ANY, "a value")
            self.expect("{", f" opening the body of computation {name!r}")
        else:
            header_pos = self.pos - 1
            is_entry = False
            name = inline_name
        comp = Computation(name=name, is_entry=is_entry, line=self.line_of(header_pos))
        defined: dict[str, Instruction] = {}
        pendings: list[_Pending] = []
        root: Instruction | None = None
        while True:
            self.ws()
            if self.pos >= self.n:
                raise self.error(f"unexpected end of file inside computation {name!r} (missing '}}')")
            if self.text[self.pos] == "}":
                self.pos += 1
                break
            is_root = self.keyword("ROOT")
            ipos = self.pos
            inst = self.instruction(comp, defined, pendings)
            if is_root:
                if root is not None:
                    raise self.error(f"computation {name!r} has two ROOT instructions", ipos)
                root = inst
        if not comp.instructions:
            raise self.error(f"computation {name!r} has no instructions", header_pos)
        self.resolve_operands(comp, defined, pendings)
        comp.root = root if root is not None else comp.instructions[-1]
        mod.computations.append(comp)
        if is_entry:
            if mod.entry is not None:
                raise self.error(f"second ENTRY computation {name!r}", header_pos)
            mod.entry = comp
        return comp

    def signature(self) -> None:
        self.expect("(")
        if self.accept(")"):
            return
        while True:
            self.name("a parameter name")
            self.expect(":", " between parameter name and shape")
            self.shape()
            if self.accept(","):
                continue
            self.expect(")", " closing the computation signature")
            return

    # ---------------------------------------------------------------- instructions
    def instruction(self, comp: Computation, defined: dict[str, Instruction], pendings: list[_Pending]) -> Instruction:
        name_pos = _WS.match(self.text, self.pos).end()
        name = self.name("an instruction name")
        if name in defined:
            raise self.error(f"duplicate instruction name {name!r} in computation {comp.name!r}", name_pos, name)
        self.expect("=", f" after instruction name {name!r}")
        shape, opcode, op_pos = self.shape_and_opcode()
        inst = self.instruction_tail(name, name_pos, shape, opcode, op_pos, comp, defined, pendings, True)
        return inst

    def shape_and_opcode(self) -> tuple[Shape | None, str, int]:
        self.ws()
        t = self.text
        shape = self.fast_shape()
        if shape is not None:
            pass
        elif self.pos < self.n and t[self.pos] == "(":
            shape = self.shape()
        else:
            m = self.match(_WORD, "a shape or opcode")
            word = m.group(0)
            if self.peek() == "[":
                shape = self.array_shape(word, m.start())
            else:
                return None, word, m.start()
        m = self.match(_WORD, "an opcode")
        return shape, m.group(0), m.start()

    def instruction_tail(self, name: str | None, name_pos: int, shape: Shape | None, opcode: str, op_pos: int,
                         comp: Computation, defined: dict[str, Instruction], pendings: list[_Pending],
                         with_attrs: bool) -> Instruction:
        if not is_known_opcode(opcode):
            raise self.error(f"unknown opcode {opcode!r}", op_pos, opcode)
        if shape is None and opcode != "tuple" and opcode not in SAME_SHAPE_OPCODES and opcode != "compare":
            raise self.error(f"missing shape for {opcode!r} (only tuple/elementwise shapes can be inferred)", op_pos,
                             opcode)
        self.expect("(", f" after opcode {opcode!r}")
        attrs: dict[str, Any] = {}
        operand_names: list[tuple[str, int]] = []
        inline: list[Instruction] = []
        if opcode == "constant":
            self.ws()
            start = self.pos
            end, _ = self.scan_balanced(start, ")", _LIT_RUN)
            if end >= self.n:
                raise self.error("unexpected end of file in constant literal", end)
            lit = self.text[start:end].strip()
            self.pos = end + 1
            attrs["literal"] = None if lit == "{...}" else lit
        elif opcode == "parameter":
            attrs["parameter_number"] = self.integer(_UINT, "a parameter number")
            self.expect(")", " closing parameter(...)")
        else:
            if not self.accept(")"):
                while True:
                    operand_names.append(self.operand(comp, defined, pendings))
                    if self.accept(","):
                        continue
                    self.expect(")", f" closing the operands of {opcode!r}")
                    break
        if name is None:
            self.inline_count += 1
            base = opcode
            k = self.inline_count
            while f"{base}.{k}" in defined:
                k += 1
            name = f"{base}.{k}"
        inst = Instruction(name=name, opcode=opcode, shape=shape, attrs=attrs,  # type: ignore[arg-type]
                           line=self.line_of(name_pos))
        preds = None
        if with_attrs:
            preds = self.attributes(inst)
        defined[name] = inst
        comp.add(inst)
        pendings.append(_Pending(inst, operand_names, preds, name_pos))
        return inst

    def operand(self, comp: Computation, defined: dict[str, Instruction], pendings: list[_Pending]) -> tuple[str, int]:
        self.ws()
        t = self.text
        p = self.pos
        shape: Shape | None = self.fast_shape()
        if shape is not None:
            pass
        elif p < self.n and t[p] == "(":
            shape = self.shape()
        else:
            m = _WORD.match(t, p)
            if m is not None and _WS.match(t, m.end()).end() < self.n and t[_WS.match(t, m.end()).end()] == "[":
                self.pos = m.end()
                shape = self.array_shape(m.group(0), p)
            else:
                shape = None
        self.ws()
        npos = self.pos
        nm = self.name("an operand name")
        if shape is not None and self.peek() == "(":
            # inline operand instruction: `f32[] constant(0)`
            inst = self.instruction_tail(None, npos, shape, nm, npos, comp, defined, pendings, False)
            return inst.name, npos
        return nm, npos

    def attributes(self, inst: Instruction) -> list[tuple[str, int]] | None:
        attrs = inst.attrs
        preds = None
        t = self.text
        while True:
            p = _WS.match(t, self.pos).end()
            if p >= self.n or t[p] != ",":
                return preds
            self.pos = p + 1
            kpos = _WS.match(t, self.pos).end()
            key = self.match(_ATTR_KEY, "an attribute name").group(0)
            self.expect("=", f" after attribute {key!r}")
            if key in attrs:
                raise self.error(f"duplicate attribute {key!r} on %{inst.name}", kpos, key)
            self.ws()
            if key in _INT_LIST_KEYS:
                m = _INT_LIST.match(t, self.pos)
                if m is None:
                    raise self.error(f"attribute {key!r} expects {{int,...}}")
                self.pos = m.end()
                body = m.group(1)
                attrs[key] = tuple(_int(x.strip()) for x in body.split(",")) if body.strip() else ()
            elif key in _INT_KEYS:
                attrs[key] = self.integer(_INT, f"an integer for attribute {key!r}")
            elif key in _WORD_KEYS:
                attrs[key] = self.match(_WORD_ANY, f"a value for attribute {key!r}").group(0)
            elif key in _BOOL_KEYS:
                attrs[key] = self.match(_BOOL, f"true/false for attribute {key!r}").group(0) == "true"
            elif key == "metadata":
                attrs[key] = self.metadata()
            elif key == "backend_config":
                attrs[key] = self.backend_config()
            elif key in COMPUTATION_ATTRIBUTES:
                attrs[key] = None  # placeholder keeps attribute order; filled by resolve_computations
                self.computation_ref(inst, key)
            elif key == "control-predecessors":
                preds = self.name_list(key)
                attrs[key] = [n for n, _ in preds]
            elif key == "custom_call_target":
                if t.startswith('"', self.pos):
                    m = self.match(_STRING, "a string")
                    attrs[key] = unescape_string(m.group(0)[1:-1])
                else:
                    attrs[key] = self.match(_WORD_ANY, "a custom-call target").group(0)
            elif key == "frontend_attributes":
                attrs[key] = self.string_dict(key)
            elif key == "slice":
                attrs[key] = self.slice_attr()
            elif key == "padding":
                m = _PADDING.match(t, self.pos)
                if m is None:
                    attrs[key] = []
                else:
                    self.pos = m.end()
                    attrs[key] = [_pad_triple(d) for d in m.group(0).split("x")]
            elif key == "window":
                attrs[key] = self.window()
            else:
                raw = self.raw_value()
                if not raw:
                    raise self.error(f"expected a value for attribute {key!r}")
                attrs[key] = raw

    def metadata(self) -> dict[str, Any]:
        t = self.text
        m = _FAST_METADATA.match(t, self.pos)
        if m is not None:  # the usual flat `{k="v" k=1 ...}` in one regex
            out: dict[str, Any] = {}
            for km in _METADATA_ITEM.finditer(m.group(1)):
                key, sv, bv = km.groups()
                if sv is not None:
                    out[key] = unescape_string(sv)
                else:
                    out[key] = _int(bv) if _INT.fullmatch(bv) else bv
            self.pos = m.end()
            return out
        self.expect("{", " opening metadata")
        out = {}
        while True:
            self.ws()
            if self.pos >= self.n:
                raise self.error("unexpected end of file in metadata")
            if t[self.pos] == "}":
                self.pos += 1
                return out
            if t[self.pos] == ",":
                self.pos += 1
                continue
            key = self.match(_ATTR_KEY, "a metadata field").group(0)
            self.expect("=", f" after metadata field {key!r}")
            self.ws()
            c = t[self.pos] if self.pos < self.n else ""
            if c == '"':
                m = self.match(_STRING, "a string")
                out[key] = unescape_string(m.group(0)[1:-1])
            elif c == "{":
                out[key] = self.braced()
            else:
                m = self.match(_BARE, f"a value for metadata field {key!r}")
                v = m.group(0)
                out[key] = _int(v) if _INT.fullmatch(v) else v

    def backend_config(self) -> dict | str:
        t = self.text
        if t.startswith('"', self.pos):
            m = self.match(_STRING, "a string")
            return _decode_backend_config(unescape_string(m.group(0)[1:-1]))
        if t.startswith("{", self.pos):
            try:
                v, end = _JSON.raw_decode(t, self.pos)
                if isinstance(v, dict):
                    self.pos = end
                    return v
            except (ValueError, RecursionError):
                pass
        raw = self.raw_value()
        if not raw:
            raise self.error("expected a value for attribute 'backend_config'")
        return _decode_backend_config(raw)

    def computation_ref(self, inst: Instruction, key: str) -> None:
        t = self.text
        single = key in ("to_apply", "condition", "body", "true_computation", "false_computation")
        if not t.startswith("{", self.pos):
            npos = self.pos
            nm = self.name(f"a computation name for {key!r}")
            self.comp_refs.append((inst, key, [(nm, npos)], key != "branch_computations"))
            return
        brace = self.pos
        self.pos += 1
        # inline body `{ p = f32[] parameter(0) ... }` vs list of references `{%a, %b}`
        save = self.pos
        is_body = False
        m = _NAME.match(t, _WS.match(t, save).end())
        if m is not None:
            after = _WS.match(t, m.end()).end()
            if after < self.n and t[after] == "=":
                is_body = True
            elif m.group(1) == "ROOT":
                is_body = True
        if is_body:
            cname = f"{inst.name}.{key}"
            k = 0
            existing = {c.name for c in self.module.computations}
            while cname in existing:
                k += 1
                cname = f"{inst.name}.{key}.{k}"
            self.computation(inline_name=cname)
            self.comp_refs.append((inst, key, [(cname, brace)], True))
            return
        refs = []
        if not self.accept("}"):
            while True:
                npos = _WS.match(t, self.pos).end()
                refs.append((self.name(f"a computation name in {key!r}"), npos))
                if self.accept(","):
                    continue
                self.expect("}", f" closing {key!r}")
                break
        if single and len(refs) != 1:
            raise self.error(f"attribute {key!r} takes exactly one computation, got {len(refs)}", brace)
        self.comp_refs.append((inst, key, refs, key != "branch_computations" and len(refs) == 1))

    def name_list(self, key: str) -> list[tuple[str, int]]:
        self.expect("{", f" opening {key!r}")
        out = []
        if self.accept("}"):
            return out
        while True:
            npos = _WS.match(self.text, self.pos).end()
            out.append((self.name(f"a name in {key!r}"), npos))
            if self.accept(","):
                continue
            self.expect("}", f" closing {key!r}")
            return out

    def string_dict(self, key: str) -> dict[str, str]:
        self.expect("{", f" opening {key!r}")
        out: dict[str, str] = {}
        t = self.text
        while True:
            self.ws()
            if self.pos >= self.n:
                raise self.error(f"unexpected end of file in {key!r}")
            if t[self.pos] == "}":
                self.pos += 1
                return out
            if t[self.pos] == ",":
                self.pos += 1
                continue
            k = self.match(_ATTR_KEY, f"a key in {key!r}").group(0)
            self.expect("=", f" after key {k!r} in {key!r}")
            self.ws()
            if t.startswith('"', self.pos):
                out[k] = unescape_string(self.match(_STRING, "a string").group(0)[1:-1])
            else:
                v = self.raw_value(",}\n")
                if not v:
                    raise self.error(f"expected a value for {k!r} in {key!r}")
                out[k] = v

    def slice_attr(self) -> list[tuple[int, int, int]]:
        self.expect("{", " opening slice")
        out = []
        if self.accept("}"):
            return out
        while True:
            m = self.match(_SLICE_DIM, "[start:limit(:stride)]")
            out.append((_int(m.group(1)), _int(m.group(2)), _int(m.group(3)) if m.group(3) else 1))
            if self.accept(","):
                continue
            self.expect("}", " closing slice")
            return out

    def window(self) -> dict[str, Any]:
        self.expect("{", " opening window")
        out: dict[str, Any] = {}
        t = self.text
        while True:
            self.ws()
            if self.pos >= self.n:
                raise self.error("unexpected end of file in window")
            if t[self.pos] == "}":
                self.pos += 1
                return out
            kpos = self.pos
            k = self.match(_ATTR_KEY, "a window field").group(0)
            self.expect("=", f" after window field {k!r}")
            self.ws()
            if k == "pad":
                m = self.match(_PADDING, "lo_hi pairs (1_1x0_0)")
                out[k] = [tuple(_int(x) for x in d.split("_")) for d in m.group(0).split("x")]
            elif k in ("size", "stride", "lhs_dilate", "rhs_dilate", "rhs_reversal"):
                m = self.match(_XDIMS, f"NxM for window field {k!r}")
                out[k] = tuple(_int(x) for x in m.group(0).split("x"))
            else:
                raise self.error(f"unknown window field {k!r}", kpos, k)

    # ---------------------------------------------------------------- resolution
    def resolve_operands(self, comp: Computation, defined: dict[str, Instruction], pendings: list[_Pending]) -> None:
        for pend in pendings:
            inst = pend.inst
            ops = []
            for nm, npos in pend.names:
                o = defined.get(nm)
                if o is None:
                    raise self.error(f"undefined operand {nm!r} of %{inst.name} in computation {comp.name!r}", npos, nm)
                ops.append(o)
            inst.operands = ops
            if pend.preds:
                for nm, npos in pend.preds:
                    if nm not in defined:
                        raise self.error(f"undefined control predecessor {nm!r} of %{inst.name}", npos, nm)
            ipos = pend.pos
            if inst.shape is None:
                inst.shape = self.infer_shape(inst, ipos)
        self.check_acyclic(comp, {id(p.inst): p.pos for p in pendings})
        for pend in pendings:
            self.verify(pend.inst, pend.pos, comp)
        bad = verifier.parameters_error(comp)
        if bad is not None:
            pos = next((p.pos for p in pendings if p.inst is bad[1]), None)
            raise self.error(bad[0], pos, bad[1].name)

    def check_acyclic(self, comp: Computation, pos: dict[int, int]) -> None:
        """An instruction that (transitively) uses itself is malformed HLO (XLA's verifier rejects it)."""
        state: dict[int, int] = {}  # 1 = on the DFS stack, 2 = done
        for start in comp.instructions:
            if id(start) in state:
                continue
            stack = [(start, 0)]
            state[id(start)] = 1
            while stack:
                node, k = stack.pop()
                if k < len(node.operands):
                    stack.append((node, k + 1))
                    child = node.operands[k]
                    st = state.get(id(child))
                    if st == 1:
                        raise self.error(f"cycle: %{child.name} depends on itself (through %{node.name}) in "
                                         f"computation {comp.name!r}", pos.get(id(node), 0), node.name)
                    if st is None:
                        state[id(child)] = 1
                        stack.append((child, 0))
                else:
                    state[id(node)] = 2

    def verify(self, inst: Instruction, ipos: int, comp: Computation) -> None:
        """XLA's verifier checks (:mod:`fusegen.hlo.verifier`) as a parse error at the instruction."""
        msg = verifier.instruction_error(inst)
        if msg:
            raise self.error(msg, ipos, inst.name)

    def infer_shape(self, inst: Instruction, ipos: int) -> Shape:
        ops = inst.operands
        if any(o.shape is None for o in ops):
            raise self.error(f"cannot infer the shape of %{inst.name}: an operand has no shape yet", ipos, inst.name)
        if inst.opcode == "tuple":
            return Shape("tuple", (), None, tuple(o.shape for o in ops))
        if not ops:
            raise self.error(f"cannot infer the shape of %{inst.name} without operands", ipos, inst.name)
        s = ops[1].shape if inst.opcode == "select" and len(ops) > 1 else ops[0].shape
        if inst.opcode == "compare":
            return Shape("pred", s.dimensions, s.layout, None, s.dynamic)
        return s

    def resolve_computations(self, names: dict[str, Computation]) -> None:
        for inst, key, refs, single in self.comp_refs:
            comps = []
            for nm, npos in refs:
                c = names.get(nm)
                if c is None:
                    c = next((x for x in self.module.computations if x.name == nm), None)
                if c is None:
                    raise self.error(f"unknown computation {nm!r} referenced by {key} of %{inst.name}", npos, nm)
                comps.append(c)
            inst.attrs[key] = comps[0] if single else comps

    def check_call_graph(self) -> None:
        """A computation may not call itself, directly or through others (XLA's call graph is a DAG)."""
        edges: dict[int, list[tuple[Computation, object]]] = {}
        for inst, key, refs, _ in self.comp_refs:
            if inst.parent is None:
                continue
            callees = inst.attrs[key] if isinstance(inst.attrs[key], list) else [inst.attrs[key]]
            for c, (_, npos) in zip(callees, refs):
                edges.setdefault(id(inst.parent), []).append((c, (inst, key, npos)))
        hit = verifier.call_cycle(edges, self.module.computations)
        if hit is not None:
            comp, (inst, key, npos) = hit
            raise self.error(f"computation {comp.name!r} calls itself ({key} of %{inst.name})", npos, comp.name)

    def choose_entry(self, names: dict[str, Computation]) -> None:
        mod = self.module
        if mod.entry is not None:
            return
        last = mod.computations[-1]
        if any(i.opcode in _CALLER_OPCODES for i in last.instructions):
            last.is_entry = True
            mod.entry = last
            return
        main_name = "main"
        k = 0
        taken = {c.name for c in mod.computations}
        while main_name in taken:
            k += 1
            main_name = f"main.{k}"
        entry = Computation(name=main_name, is_entry=True)
        params = []
        for idx, p in enumerate(last.parameters):
            params.append(entry.add(Instruction(name=f"p{idx}", opcode="parameter", shape=p.shape,
                                                attrs={"parameter_number": p.parameter_number})))
        fname = "fusion"
        root = Instruction(name=fname, opcode="fusion", shape=last.root.shape, operands=list(params),
                           attrs={"kind": "kLoop", "calls": last})
        entry.add(root)
        entry.root = root
        mod.computations.append(entry)
        mod.entry = entry
        mod.attrs["fusegen.synthesized_entry"] = "true"


def _strip_comments(s: str) -> str:
    s = re.sub(r"/\*.*?\*/", "", s, flags=re.S)
    s = re.sub(r"//[^\n]*", "", s)
    return re.sub(r"\s*\n\s*", " ", s)


def _pad_triple(d: str) -> tuple[int, int, int]:
    parts = [_int(x) for x in d.split("_")]
    if len(parts) == 2:
        parts.append(0)
    return (parts[0], parts[1], parts[2])


def parse_module(text: str, filename: str = "<string>") -> Module:
    """Parse HLO text into a :class:`~fusegen.hlo.ir.Module`.

    Args:
        text: HLO module text (an XLA dump, ``HloModule::ToString`` output or a lit-test file).
        filename: used in error messages and as the module name when the text has no ``HloModule`` line.

    Returns:
        The module; ``Module.entry`` is always set (synthesized for entry-less test files, see module doc).

    Raises:
        HloParseError: on any malformed input, with file, 1-based line/column and the offending token;
            also when the text holds several ``// -----``-separated modules (use :func:`parse_modules`).

    Mirrors ``xla/hlo/parser/hlo_parser.cc`` ``ParseAndReturnUnverifiedModule`` plus the verifier checks of
    reshape element counts (``xla/service/hlo_verifier.cc`` ``HandleReshape``).
    """
    if not isinstance(text, str):
        raise HloParseError(f"expected HLO text (str), got {type(text).__name__}", filename)
    marks = list(_SPLIT_MARK.finditer(text))
    if marks and len(_split(text)) > 1:
        p = _Parser(text, filename)
        raise p.error("the text holds several modules separated by '// -----'; use parse_modules()",
                      marks[0].start(), "// -----")
    return _parse_one(text, filename)


def _parse_one(text: str, filename: str) -> Module:
    p = _Parser(text, filename)
    try:
        return p.parse()
    except HloParseError:
        raise
    except RecursionError:
        raise p.error("nesting too deep") from None
    except _LexError as e:
        raise p.error(str(e)) from None
    except Exception as e:  # noqa: BLE001 - nothing but HloParseError may leave the parser
        raise p.error(f"internal parser error: {type(e).__name__}: {e}") from e


def _split(text: str) -> list[str]:
    """Chunks of a ``// -----`` split-input file, padded with newlines so line numbers stay right."""
    chunks = []
    pos = 0
    line = 0
    for m in list(_SPLIT_MARK.finditer(text)) + [None]:
        end = m.start() if m is not None else len(text)
        body = text[pos:end]
        if _WS.sub("", body).strip():
            chunks.append("\n" * line + body)
        if m is None:
            break
        line += text.count("\n", pos, m.end())
        pos = m.end()
    return chunks


def parse_modules(text: str, filename: str = "<string>") -> list[Module]:
    """Parse a ``// -----`` split-input file (XLA lit tests with ``--split-input-file``) into its modules.

    A text without separators gives a one-element list. Raises :class:`HloParseError` like :func:`parse_module`.
    """
    if not isinstance(text, str):
        raise HloParseError(f"expected HLO text (str), got {type(text).__name__}", filename)
    chunks = _split(text) if _SPLIT_MARK.search(text) else [text]
    if not chunks:
        chunks = [text]
    return [_parse_one(c, filename) for c in chunks]


def parse_file(path: str | Path) -> Module:
    """Read and parse an HLO text file; errors name the file. See :func:`parse_module`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HloParseError(f"cannot read HLO file: {e}", str(path)) from e
    return parse_module(text, str(path))
