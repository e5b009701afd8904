"""Instruction attributes for the HLO text parser (:mod:`fusegen.hlo.parser`).

Mirrors ``HloParserImpl::ParseAttributes`` (``xla/hlo/parser/hlo_parser.cc``): integer lists, words, booleans,
``metadata``, ``backend_config`` (JSON, relaxed), computation references or inline bodies, control
predecessors, ``frontend_attributes``, ``slice``, ``padding`` and ``window``; any other key is kept as raw text.
"""

from __future__ import annotations

import re
from typing import Any

from fusegen.hlo.fast_paths import _FAST_ATTR_OR_END, xla_metadata
from fusegen.hlo.ir import COMPUTATION_ATTRIBUTES, Instruction
from fusegen.hlo.lexer import (
    _ATTR_KEY, _BARE, _BOOL, _BOOL_KEYS, _CLOSE_BRACE, _INT, _INT_KEYS, _INT_LIST, _INT_LIST_KEYS, _JSON,
    _METADATA_ITEM, _NAME, _PADDING, _SLICE_DIM, _STRING, _WORD_ANY, _WORD_KEYS, _WS, _XDIMS,
    _decode_backend_config, _int, _pad_triple, unescape_string)
from fusegen.hlo.lexer import Lexer


class AttributeParser(Lexer):
    """The attribute grammar; :class:`fusegen.hlo.parser._Parser` adds modules, computations and instructions."""

    def attributes(self, inst: Instruction, first: re.Match | None = None) -> list[tuple[str, int]] | None:
        """The attributes after an instruction's operands into ``inst.attrs``; its control predecessors (name,
        position) when it has some. ``first``: the caller's ``_FAST_ATTR_OR_END`` match at ``self.pos``."""
        attrs = inst.attrs
        preds = None
        t = self.text
        while True:
            if first is not None:
                fast, first = first, None
            else:
                fast = _FAST_ATTR_OR_END.match(t, self.pos)
            if fast is not None:
                key = fast.group(1)
                if key is None:
                    return preds  # the line ends here
                kpos = fast.start(1)
                self.pos = fast.end()
            else:
                p = _WS.match(t, self.pos).end()
                if p >= self.n or t[p] != ",":
                    return preds
                self.pos = p + 1
                kpos = _WS.match(t, self.pos).end()
                key = self.match(_ATTR_KEY, "an attribute name").group(0)
                self.expect("=", f" after attribute {key!r}")
            if key in attrs:
                raise self.error(f"duplicate attribute {key!r} on %{inst.name}", kpos, key)
            p = self.pos
            if p >= self.n or not " " < t[p] < "\x7f" or t[p] == "/":  # self.ws() only where it has work
                self.ws()
            if key == "metadata":
                fast_md = xla_metadata(t, self.pos)
                if fast_md is not None:
                    attrs[key], self.pos = fast_md
                else:
                    attrs[key] = self.metadata()
            elif key in _INT_LIST_KEYS:
                m = _INT_LIST.match(t, self.pos)
                if m is None:
                    raise self.error(f"attribute {key!r} expects {{int,...}}")
                self.pos = m.end()
                body = m.group(1)
                if len(body) < 19:  # no int64 overflow possible: int() of each item as _int would give it
                    attrs[key] = tuple(map(int, body.split(","))) if body and not body.isspace() else ()
                else:
                    attrs[key] = tuple(_int(x.strip()) for x in body.split(",")) if body.strip() else ()
            elif key in _INT_KEYS:
                attrs[key] = self.integer(_INT, f"an integer for attribute {key!r}")
            elif key in _WORD_KEYS:
                attrs[key] = self.match(_WORD_ANY, f"a value for attribute {key!r}").group(0)
            elif key in _BOOL_KEYS:
                attrs[key] = self.match(_BOOL, f"true/false for attribute {key!r}").group(0) == "true"
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

    def _next_field(self, where: str, noun: str, suffix: str = "", commas: bool = True) -> tuple[str, int] | None:
        """The next ``key=`` of a braced field list (``metadata={...}``, ``window={...}``, a string dict),
        after its opening ``{``: ``(key, offset of the key)`` with the position past ``=`` and the blanks
        after it, or ``None`` with the closing ``}`` consumed. ``commas`` skips ``,`` between fields (the
        window has none). Errors (:class:`HloParseError`): ``unexpected end of file in {where}``, ``expected
        a {noun}{suffix}`` where no key stands, ``expected '=' after {noun} {key!r}{suffix}``."""
        t = self.text
        while True:
            self.ws()
            if self.pos >= self.n:
                raise self.error(f"unexpected end of file in {where}")
            c = t[self.pos]
            if c == "}":
                self.pos += 1
                return None
            if commas and c == ",":
                self.pos += 1
                continue
            kpos = self.pos
            key = self.match(_ATTR_KEY, f"a {noun}{suffix}").group(0)
            self.expect("=", f" after {noun} {key!r}{suffix}")
            self.ws()
            return key, kpos

    def metadata(self) -> dict[str, Any]:
        t = self.text
        fast = xla_metadata(t, self.pos)
        if fast is not None:
            self.pos = fast[1]
            return fast[0]
        if t.startswith("{", self.pos):  # the usual flat `{k="v" k=1 ...}`, one anchored match per item
            out: dict[str, Any] = {}
            end = self.pos + 1
            for m in iter(_METADATA_ITEM.scanner(t, end).match, None):
                key, sv, bv = m.groups()
                if bv is not None:
                    # str.isdecimal is exactly _INT's \d (Unicode Nd)
                    out[key] = _int(bv) if bv.isdecimal() or bv[0] in "+-" and bv[1:].isdecimal() else bv
                else:
                    out[key] = unescape_string(sv) if "\\" in sv else sv
                end = m.end()
            close = _CLOSE_BRACE.match(t, end)
            if close is not None:
                self.pos = close.end()
                return out
        self.expect("{", " opening metadata")
        out = {}
        while True:
            field = self._next_field("metadata", "metadata field")
            if field is None:
                return out
            key = field[0]
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
        single = key in ("to_apply", "condition", "body", "true_computation", "false_computation", "select", "scatter")
        if not t.startswith("{", self.pos):
            npos = self.pos
            m = _NAME.match(t, npos)
            if m is not None:  # the name right here (the caller skipped the blanks)
                self.pos = m.end()
                nm = m.group(1)
            else:
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
            field = self._next_field(repr(key), "key", f" in {key!r}")
            if field is None:
                return out
            k = field[0]
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
        while True:
            field = self._next_field("window", "window field", commas=False)
            if field is None:
                return out
            k, kpos = field
            if k == "pad":
                m = self.match(_PADDING, "lo_hi pairs (1_1x0_0)")
                out[k] = [tuple(_int(x) for x in d.split("_")) for d in m.group(0).split("x")]
            elif k in ("size", "stride", "lhs_dilate", "rhs_dilate", "rhs_reversal"):
                m = self.match(_XDIMS, f"NxM for window field {k!r}")
                out[k] = tuple(_int(x) for x in m.group(0).split("x"))
            else:
                raise self.error(f"unknown window field {k!r}", kpos, k)
