"""Fast paths of the HLO text parser (:mod:`fusegen.hlo.parser`) for the lines XLA prints most.

A one-line instruction ``[ROOT] %name = f32[2,3]{1,0} opcode(%a, %b), key=value, ...``, a one-line computation
header with simple shapes and ``metadata={...}`` in XLA's field order are each read with one or two regex
matches. Anything else (and anything malformed) makes a fast path return ``None`` without consuming text, and
the general grammar reads or reports it, so results and error messages are those of the general grammar.
Also: the call-graph cycle search is skipped when every call names an earlier computation, and cyclic garbage
collection is paused while a module is built.
"""

from __future__ import annotations

import contextlib
import gc
import re
from typing import Any

from fusegen.hlo.ir import Computation, Instruction
from fusegen.hlo.lexer import _FAST_SHAPE, _NAME, _WS, _LexError, _int, unescape_string
from fusegen.hlo.opcodes import KNOWN_OPCODES, is_known_opcode

# The usual one-line instruction head `%name = f32[2,3]{1,0} opcode(` in one match (anything else takes the
# general grammar); groups: ROOT, name, shape text, element type, dimensions, minor_to_major, opcode.
_FAST_HEAD = re.compile(r"(ROOT[ \t]+)?%?([A-Za-z0-9_][\w.\-]*)[ \t]*=[ \t]*(([a-z][a-z0-9]*)\[((?:\d+(?:,\d+)*)?)\]"
                        r"(?:\{((?:\d+(?:,\d+)*)?)\})?)[ \t]+([a-z][a-z0-9\-]*)\(")
# Plain operand names up to the closing parenthesis (`%a, %b)`); inline operand instructions don't match.
_FAST_OPERANDS = re.compile(r"[ \t]*((?:%?[A-Za-z0-9_][\w.\-]*[ \t]*,[ \t]*)*%?[A-Za-z0-9_][\w.\-]*)?[ \t]*\)")
# The blank lines and indent before an instruction, its head and (when they are plain names) its operands, in one
# match: groups 1-7 as _FAST_HEAD's, 8 the operand list (None when empty), 9 the `)` (None: not plain names).
_FAST_INSTRUCTION = re.compile(r"[ \t\n]*" + _FAST_HEAD.pattern + r"(?:" + _FAST_OPERANDS.pattern[:-2] + r"(\)))?")
# `, key=` (group 1: the key), or with group 1 None the end of an instruction's attributes (nothing consumed): the
# next line starts the next instruction or closes the body.
_FAST_ATTR_OR_END = re.compile(r"[ \t]*(?:,[ \t]*([A-Za-z_][\w.\-]*)[ \t]*=[ \t]*|(?=\n[ \t]*[%A-Za-z0-9_}]))")
# A one-line computation header `[ENTRY] %name (p: f32[4]{0}, ...) -> f32[4]{0} {` with fast-path shapes only.
_SIG_SHAPE = r"[a-z][a-z0-9]*\[(?:\d+(?:,\d+)*)?\](?:\{(?:\d+(?:,\d+)*)?\})?"
_SIG_PARAM = r"[ \t]*%?[A-Za-z0-9_][\w.\-]*[ \t]*:[ \t]*" + _SIG_SHAPE + r"[ \t]*"
_FAST_COMP_HEAD = re.compile(r"(ENTRY[ \t]+)?%?([A-Za-z0-9_][\w.\-]*)[ \t]*\(((?:" + _SIG_PARAM + r",)*(?:" + _SIG_PARAM
                             + r")?)[ \t]*\)[ \t]*->[ \t]*(" + _SIG_SHAPE + r")[ \t]*\{"
                             r"((?=[ \t]*\n[ \t]*[%A-Za-z_]))?")  # group 5 "": the body starts on the next line
# A header without signature, as XLA's tests write them: `[ENTRY] name {`.
_FAST_BARE_HEAD = re.compile(r"(ENTRY[ \t]+)?%?([A-Za-z0-9_][\w.\-]*)[ \t]*\{")
_FAST_LITERAL = re.compile(r"([^{}()\[\]\"/\n]*)\)")
_FAST_PARAMETER = re.compile(r"[ \t]*(\d+)[ \t]*\)")
# XLA's OpMetadata fields in the order it prints them (int-valued ones marked): metadata written that way is read
# in one match; any other order, field or value form takes the item-by-item path.
_XLA_METADATA_FIELDS = (("op_type", False), ("op_name", False), ("source_file", False), ("source_line", True),
                        ("source_end_line", True), ("source_column", True), ("source_end_column", True),
                        ("deduplicated_name", False), ("scheduling_name", False), ("stack_frame_id", True))
_XLA_METADATA = re.compile(r"\{" + "".join(
    rf'(?:\s*{k}=(\d+)(?=[\s}}]))?' if is_int else rf'(?:\s*{k}="([^"\\]*(?:\\.[^"\\]*)*)")?'
    for k, is_int in _XLA_METADATA_FIELDS) + r"\s*\}", re.S)

#: Operand names of one instruction, resolved when its computation's body is complete:
#: (instruction, operands, [(control predecessor, position)] or None, position, span): the operands are
#: [(name, position)], or with a (start, end) span of the operand list just the names (positions found on error).
Pending = tuple[Instruction, list, "list[tuple[str, int]] | None", int, "tuple[int, int] | None"]


# The forms XLA:GPU dumps print most (`{op_name="..." scheduling_name="..." stack_frame_id=6}`, any of the
# first and last left out), without escapes: a few groups instead of ten.
_XLA_METADATA_COMMON = re.compile(r'\{(?:op_name="([^"\\]*)" )?scheduling_name="([^"\\]*)"(?: stack_frame_id=(\d+))?\}')


def xla_metadata(text: str, pos: int) -> tuple[dict[str, Any], int] | None:
    """``(fields, end)`` of metadata at ``pos`` written in XLA's field order, else ``None``."""
    m = _XLA_METADATA_COMMON.match(text, pos)
    if m is not None:
        op_name, sched, frame = m.groups()
        out: dict[str, Any] = {} if op_name is None else {"op_name": op_name}
        out["scheduling_name"] = sched
        if frame is not None:
            out["stack_frame_id"] = int(frame) if len(frame) < 19 else _int(frame)
        return out, m.end()
    m = _XLA_METADATA.match(text, pos)
    if m is None:
        return None
    out = {}
    for (key, is_int), v in zip(_XLA_METADATA_FIELDS, m.groups()):
        if v is not None:
            out[key] = _int(v) if is_int else unescape_string(v) if "\\" in v else v
    return out, m.end()


@contextlib.contextmanager
def gc_paused():
    """No cyclic garbage collection while a module is built.

    A parse allocates ~40 container objects per instruction and frees almost none, so the collector would
    run its full passes over the whole heap several times per module for nothing (half the parse time).
    """
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class FastPaths:
    """Mixed into :class:`fusegen.hlo.parser._Parser` (which supplies the lexer and attribute grammar)."""

    text: str
    n: int
    pos: int
    fast_root: Instruction | None
    fast_root_pos: int
    valid_signatures: set[str]

    def fast_instruction(self, pos: int, comp: Computation, defined: dict[str, Instruction],
                         pendings: list[Pending]) -> Instruction | None:
        """A one-line ``[ROOT] name = shape opcode(%a, %b)`` head after blank lines and indent at ``pos``, in one
        regex match, or ``None`` (nothing consumed) for anything the general grammar must read or report. A ROOT
        is also left in ``fast_root`` with, in ``fast_root_pos``, where the general grammar stands after the
        ROOT keyword."""
        t = self.text
        m = _FAST_INSTRUCTION.match(t, pos)
        if m is None:
            return None
        root, name, shape_text, etype, dims_s, mtm_s, opcode, names, close = m.groups()
        name_pos = m.start(2) - (t[m.start(2) - 1] == "%")
        if (root is None and name == "ROOT") or name in defined or (
                opcode not in KNOWN_OPCODES and not is_known_opcode(opcode)):
            return None
        shape = self.shapes.get(shape_text) or self.new_shape(shape_text, etype, dims_s, mtm_s)  # type: ignore
        if shape is None:
            return None
        attrs: dict[str, Any] = {}
        operand_names: list[str] = []
        span = None
        end = m.end()
        if opcode == "constant":
            if close is not None:  # `(1.5)`: _FAST_LITERAL would read the same text
                attrs["literal"] = names or ""
            else:
                a = _FAST_LITERAL.match(t, m.end(7) + 1)  # a one-line literal without brackets or strings: `-inf`
                if a is None:
                    return None
                attrs["literal"] = a.group(1).strip()
                end = a.end()
        elif opcode == "parameter":
            if close is not None and names is not None and names.isdecimal():  # str.isdecimal is re's \d
                number = names
            else:
                a = _FAST_PARAMETER.match(t, m.end(7) + 1)
                if a is None:
                    return None
                number = a.group(1)
                end = a.end()
            if len(number) < 19:  # fits int64: int() is what _int would give
                attrs["parameter_number"] = int(number)
            else:
                try:
                    attrs["parameter_number"] = _int(number)
                except _LexError:
                    return None
        elif close is None:
            return None
        elif names is not None:
            span = m.span(8)
            operand_names = _NAME.findall(t, *span)
        self.pos = end
        last_pos, last_line = self._line_at  # type: ignore[attr-defined]  # self.line_of, inlined
        if name_pos >= last_pos:
            line = last_line + t.count("\n", last_pos, name_pos)
            self._line_at = (name_pos, line)
        else:
            line = self.line_of(name_pos)  # type: ignore[attr-defined]
        inst = Instruction(name, opcode, shape, [], attrs, comp, line)
        if root is not None:
            self.fast_root = inst
            self.fast_root_pos = m.start(1) + 4
        first = _FAST_ATTR_OR_END.match(t, end)
        if first is not None and first.group(1) is None:
            preds = None  # no attributes
        else:
            preds = self.attributes(inst, first)  # type: ignore[attr-defined]
        defined[name] = inst
        self.inst_pos[id(inst)] = name_pos  # type: ignore[attr-defined]
        comp.instructions.append(inst)  # Computation.add without its (still empty) use-list reset
        pendings.append((inst, operand_names, preds, name_pos, span))
        return inst

    def fast_computation_header(self, pos: int) -> tuple[bool, str] | None:
        """``(is_entry, name)`` of a one-line header with simple shapes, read up to its ``{``; ``None``
        (nothing consumed) for anything the general grammar must read or report."""
        t = self.text
        m = _FAST_COMP_HEAD.match(t, pos)
        if m is None:
            m = _FAST_BARE_HEAD.match(t, pos)
            if m is None or (m.group(1) is None and m.group(2) == "ENTRY"):
                return None
            self.pos = m.end()
            return m.group(1) is not None, m.group(2)
        if m.group(1) is None and m.group(2) == "ENTRY":
            return None
        sig = t[m.start(3):m.end(4)]
        if sig not in self.valid_signatures:  # modules repeat signatures: each one's shapes checked once
            for sm in _FAST_SHAPE.finditer(sig):
                if sm.group(0) not in self.shapes and self.new_shape(sm.group(0), *sm.groups()) is None:  # type: ignore
                    return None
            self.valid_signatures.add(sig)
        if "{" not in m.group(4) and m.group(5) is None:
            # `-> f32[4] {1}`: the full grammar decides whether that brace is a layout
            q = _WS.match(t, m.end()).end()
            if q < self.n and (t[q].isdigit() or t[q] in ":}"):
                return None
        self.pos = m.end()
        return m.group(1) is not None, m.group(2)

    def calls_go_back(self) -> bool:
        """Whether every call names a computation defined before the caller (callees first, as XLA prints):
        then the call graph has no cycle and the search for one can be skipped."""
        index = {id(c): i for i, c in enumerate(self.module.computations)}  # type: ignore[attr-defined]
        for inst, key, _, _ in self.comp_refs:  # type: ignore[attr-defined]
            if inst.parent is None:
                continue
            caller = index.get(id(inst.parent))
            v = inst.attrs[key]
            for c in v if isinstance(v, list) else (v,):
                callee = index.get(id(c))
                if caller is None or callee is None or callee >= caller:
                    return False
        return True
