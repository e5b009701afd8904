"""HLO text parser: XLA's HLO text format to :mod:`fusegen.hlo.ir` objects.

Mirrors ``xla/hlo/parser/hlo_parser.cc`` (``HloParserImpl::ParseHloModule``, ``ParseComputation``,
``ParseInstruction``, ``ParseShape``, ``ParseLayout``, ``ParseAttributes``) for the subset of the grammar
XLA:GPU dumps and XLA's lit / unit tests use. Hand-written recursive descent over compiled regexes, one pass,
no backtracking beyond a token; computation references are resolved after the whole module is read so forward
references work.

Every failure, including internal ones, surfaces as :class:`fusegen.hlo.errors.HloParseError` carrying the
file name, 1-based line and column and the offending token.

The parser is three layers: :mod:`fusegen.hlo.lexer` (tokens, int64 numbers, escapes, shapes and layouts),
:mod:`fusegen.hlo.parse_attributes` (instruction attributes) and this module (modules, computations,
instructions, name resolution), with XLA's verifier checks in :mod:`fusegen.hlo.verifier`.

Files without ``ENTRY`` follow XLA's test conventions: if the last computation calls other computations through
``fusion``/``call``/``while``/``conditional`` it is the entry (``hlo-opt`` lit tests); otherwise it is a fused
computation (``fusion_to_mlir`` lit tests, ``xla/codegen/tools/test_lib.cc`` ``LoadTestModule``) and an entry
``main`` that wraps it in one ``kLoop`` fusion is synthesized (``Module.attrs["fusegen.synthesized_entry"]``).
"""

from __future__ import annotations

import functools

import re
from pathlib import Path
from typing import Any

from fusegen.hlo import verifier
from fusegen.hlo.errors import HloParseError
from fusegen.hlo.fast_paths import FastPaths, Pending as _Pending, gc_paused
from fusegen.hlo.ir import Computation, Instruction, Module, Shape
from fusegen.hlo.lexer import (
    _ATTR_KEY, _CALLER_OPCODES, _FUSEGEN_COMMENT, _LIT_RUN, _SECTION_LINE, _SECTION_NAMES, _SPLIT_MARK, _STRING,
    _NAME, _UINT, _WORD, _WORD_ANY, _WS, _int)
from fusegen.hlo.lexer import ELEMENT_TYPES, _LexError, parse_int_list
from fusegen.hlo.opcodes import SAME_SHAPE_OPCODES, is_known_opcode
from fusegen.hlo.parse_attributes import AttributeParser

__all__ = ["parse_module", "parse_file", "parse_modules", "parse_int_list", "ELEMENT_TYPES"]


class _Parser(FastPaths, AttributeParser):
    def __init__(self, text: str, filename: str):
        super().__init__(text, filename)
        self.module = Module(name="", filename=filename)
        # (instruction, attr key, [(name, pos)], single-valued?)
        self.comp_refs: list[tuple[Instruction, str, list[tuple[str, int]], bool]] = []
        self.inline_count = 0
        self.inst_pos: dict[int, int] = {}  # id(instruction) -> text position, for module-level checks
        self.fast_root: Instruction | None = None  # the last ROOT instruction the fast path read
        self.fast_root_pos = 0  # where the general grammar would stand after that ROOT keyword
        self.valid_signatures: set[str] = set()  # computation signatures whose shapes the fast path checked
        # Shapes the verifier already found valid (by id; the dict keeps them alive).
        self.valid_shapes: dict[int, Shape] = {}
        self.valid_literals: set[tuple[Any, int]] = set()

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
            first = self.text[start]
            if first == "H" and self.keyword("HloModule"):
                if seen_header or mod.computations:
                    raise self.error(
                        "a second HloModule header (split-input files separated by '// -----' need parse_modules)",
                        start, "HloModule")
                seen_header = True
                self.header()
                continue
            m = _WORD_ANY.match(self.text, self.pos) if first in "FS" else None  # FileNames ... StackFrames
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
        if "fusegen." in self.text:  # the line-anchored search costs ~10 ns a character; a substring test 1
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
        if inline_name is None:
            self.ws()
            header_pos = self.pos
            fast = self.fast_computation_header(header_pos)
            if fast is not None:
                is_entry, name = fast
            else:
                is_entry, name = self.computation_header()
        else:
            header_pos = self.pos - 1
            is_entry = False
            name = inline_name
        comp = Computation(name=name, is_entry=is_entry, line=self.line_of(header_pos))
        return self.computation_body(comp, header_pos)

    def computation_header(self) -> tuple[bool, str]:
        """``(is_entry, name)`` of a computation header, read up to and including the body's ``{``."""
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
        return is_entry, name

    def computation_body(self, comp: Computation, header_pos: int) -> Computation:
        """The instructions of ``comp`` after its ``{``, through the closing ``}``."""
        mod = self.module
        name = comp.name
        is_entry = comp.is_entry
        defined: dict[str, Instruction] = {}
        pendings: list[_Pending] = []
        root: Instruction | None = None
        t = self.text
        while True:
            if t.startswith("\n}", self.pos):  # the usual end of a body, right after its last instruction
                self.pos += 2
                break
            inst = self.fast_instruction(self.pos, comp, defined, pendings)  # blank lines and all
            if inst is None:
                self.ws()
                if self.pos >= self.n:
                    raise self.error(f"unexpected end of file inside computation {name!r} (missing '}}')")
                if self.text[self.pos] == "}":
                    self.pos += 1
                    break
                inst = self.fast_instruction(self.pos, comp, defined, pendings)  # after a comment
            if inst is not None:
                is_root = inst is self.fast_root
                ipos = self.fast_root_pos  # where the general grammar stands after the ROOT keyword
            else:
                is_root = self.keyword("ROOT")
                ipos = self.pos
                inst = self.instruction(comp, defined, pendings)
            if is_root:
                if root is not None:
                    raise self.error(f"computation {name!r} has two ROOT instructions", ipos)
                root = inst
        if not comp.instructions:
            raise self.error(f"computation {name!r} has no instructions", header_pos)
        comp.invalidate()  # the fast path appends without Computation.add
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
            end, dirty = self.scan_balanced(start, ")", _LIT_RUN)
            if end >= self.n:
                raise self.error("unexpected end of file in constant literal", end)
            lit = self.text[start:end].strip()
            if dirty:  # XLA's index comments (`{ /*i0=0*/ {...} }`, rank >= 4) carry no value: one text per literal
                lit = " ".join(self._clean_raw(lit).split())
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
        self.inst_pos[id(inst)] = name_pos
        comp.add(inst)
        pendings.append((inst, operand_names, preds, name_pos, None))
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

    # ---------------------------------------------------------------- resolution
    def resolve_operands(self, comp: Computation, defined: dict[str, Instruction], pendings: list[_Pending]) -> None:
        done: set[str] = set()  # names defined before the current instruction
        forward = False  # an operand defined after its user: only then can there be a cycle
        get = defined.__getitem__
        for inst, names, preds, ipos, span in pendings:
            if (span is not None or not names) and not preds and inst.shape is not None:  # plain names only
                try:
                    inst.operands = list(map(get, names))
                    if not forward and not done.issuperset(names):
                        forward = True
                    done.add(inst.name)
                    continue
                except KeyError:
                    pass  # the loop below reports it
            ops = []
            for nm in names:
                if span is None:
                    nm, npos = nm
                o = defined.get(nm)
                if o is None:
                    if span is not None:
                        npos = next(m.start() for m in _NAME.finditer(self.text, *span) if m.group(1) == nm)
                    raise self.error(f"undefined operand {nm!r} of %{inst.name} in computation {comp.name!r}", npos, nm)
                ops.append(o)
                if nm not in done:
                    forward = True
            done.add(inst.name)
            inst.operands = ops
            if preds:
                for nm, npos in preds:
                    if nm not in defined:
                        raise self.error(f"undefined control predecessor {nm!r} of %{inst.name}", npos, nm)
            if inst.shape is None:
                inst.shape = self.infer_shape(inst, ipos)
        if forward:
            self.check_acyclic(comp, {id(p[0]): p[3] for p in pendings})
        valid_shapes = self.valid_shapes
        valid_literals = self.valid_literals
        instruction_error = verifier.instruction_error
        numbers = []  # parameter numbers in text order
        for inst, _, _, ipos, _ in pendings:  # self.verify, inlined (one call per instruction less)
            s = inst.shape
            if inst.opcode == "parameter":
                numbers.append(inst.attrs.get("parameter_number"))
            if inst.opcode == "constant":
                lit = (inst.attrs.get("literal"), id(s))
                msg = instruction_error(inst, id(s) not in valid_shapes, lit not in valid_literals)
                if not msg:
                    valid_literals.add(lit)
            else:
                msg = instruction_error(inst, id(s) not in valid_shapes, False)
            if msg:
                raise self.error(msg, ipos, inst.name)
            valid_shapes[id(s)] = s
        bad = verifier.parameters_error(comp) if numbers != list(range(len(numbers))) else None
        if bad is not None:
            pos = next((p[3] for p in pendings if p[0] is bad[1]), None)
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
        s = inst.shape
        lit = (inst.attrs.get("literal"), id(s)) if inst.opcode == "constant" else None
        msg = verifier.instruction_error(inst, id(s) not in self.valid_shapes, lit not in self.valid_literals)
        if msg:
            raise self.error(msg, ipos, inst.name)
        self.valid_shapes[id(s)] = s
        if lit is not None:
            self.valid_literals.add(lit)

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
        if not self.calls_go_back():
            self.check_call_cycle()
        callers = verifier.CALLER_OPCODES
        for comp in self.module.computations:
            for inst in comp.instructions:
                if inst.opcode in callers:
                    msg = verifier.called_error(inst)
                    if msg:
                        raise self.error(msg, self.inst_pos.get(id(inst)), inst.name)

    def check_call_cycle(self) -> None:
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
    marks = list(_SPLIT_MARK.finditer(text)) if "-----" in text else []
    if marks and len(_split(text)) > 1:
        p = _Parser(text, filename)
        raise p.error("the text holds several modules separated by '// -----'; use parse_modules()",
                      marks[0].start(), "// -----")
    return _parse_one(text, filename)


def _parse_one(text: str, filename: str) -> Module:
    with gc_paused():
        return _parse_unpaused(text, filename)


def _parse_unpaused(text: str, filename: str) -> Module:
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
        if _WS.match(body).end() < len(body):  # anything but blanks and comments
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
    chunks = _split(text) if "-----" in text and _SPLIT_MARK.search(text) else [text]
    if not chunks:
        chunks = [text]
    with gc_paused():
        return [_parse_unpaused(c, filename) for c in chunks]


def parse_file(path: str | Path) -> Module:
    """Read and parse an HLO text file; errors name the file. See :func:`parse_module`."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise HloParseError(f"cannot read HLO file: {e}", str(path)) from e
    return parse_module(text, str(path))


@functools.lru_cache(maxsize=8)
def entry_root_from_text(hlo_text: str) -> Instruction:
    """The root of the entry computation of module text ``hlo_text`` (an autotune candidate sent to a compile
    worker as text), parsed once per distinct text (the last 8 kept).

    Raises:
        HloParseError: as :func:`parse_module`.
    """
    return parse_module(hlo_text, "<autotune candidate>").entry.root
