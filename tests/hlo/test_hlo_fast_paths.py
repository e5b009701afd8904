"""The parser's one-match fast paths (instruction heads, attribute keys, computation headers with or without
signature, metadata) read exactly what its general grammar reads: each corpus module is parsed as written and
again with ``/**/`` comments spliced in where only the general grammar accepts them, and both give the same
module."""

from __future__ import annotations

import re

import pytest

from fusegen.hlo import parser as hlo_parser
from fusegen.hlo.parser import parse_module, parse_modules
from fusegen.hlo.printer import print_module

from conftest import corpus_path

MODULES = [
    ("jax", "gpt12.h200_opt.hlo"),
    ("jax", "layer_bf16.cpu_opt.hlo"),
    ("jax", "launch", "new_sort_small.h200_opt.hlo"),
    ("xla", "cases", "lit_shared__loop__mof_reshapes.hlo"),
    ("hostile", "deepcall.hlo"),
    ("xla", "modules", "backends__gpu__tests__kernel_reuse.hlo"),
]

_INSTR_LINE = re.compile(r"^([ \t]+(?:ROOT[ \t]+)?%?[\w.\-]+) = ", re.M)
_ATTR = re.compile(r"(?<=[)}\w\"]), ([A-Za-z_][\w.\-]*)=(?=[^\"]*$)", re.M)
_ARROW = re.compile(r"^([^ \t\n][^\n]*\)) -> ", re.M)
_BARE_HEADER = re.compile(r"^((?:ENTRY[ \t]+)?%?[\w.\-]+)[ \t]*\{$", re.M)


def general_grammar_only(text: str) -> str:
    """The same module with comments where the fast paths' patterns stop matching (no line moves)."""
    text = _INSTR_LINE.sub(r"\1 =/**/ ", text)
    text = _ARROW.sub(r"\1 /**/-> ", text)
    text = _BARE_HEADER.sub(r"\1 /**/{", text)
    text = text.replace("metadata={", "metadata={/**/")
    return _ATTR.sub(r",/**/ \1=", text)


def snapshot(text: str, name: str) -> list[str]:
    out = []
    for m in parse_modules(text, name):
        out.append(print_module(m))
        for c in m.computations:
            out.append(f"{c.name} line {c.line} entry={c.is_entry} root={c.root.name}")
            out.extend(f"{i.name} line {i.line} {i.shape} ops={[o.name for o in i.operands]} "
                       f"{sorted((k, str(v)) for k, v in i.attrs.items())}" for i in c.instructions)
    return out


def fast_hits(monkeypatch, text: str, name: str) -> int:
    """How many instruction heads and computation headers the fast paths read in ``text``."""
    hits = []
    for meth in ("fast_instruction", "fast_computation_header"):
        orig = getattr(hlo_parser._Parser, meth)

        def counted(self, *a, _orig=orig):
            r = _orig(self, *a)
            hits.append(r is not None)
            return r

        monkeypatch.setattr(hlo_parser._Parser, meth, counted)
    parse_modules(text, name)
    monkeypatch.undo()
    return sum(hits)


@pytest.mark.parametrize("parts", MODULES, ids=lambda p: p[-1])
def test_fast_paths_match_general_grammar(parts, monkeypatch):
    path = corpus_path(*parts)
    if not path.exists():
        pytest.skip(f"{path} not in the shared corpus")
    text = path.read_text()
    slow = general_grammar_only(text)
    assert fast_hits(monkeypatch, text, path.name) > 0
    assert fast_hits(monkeypatch, slow, path.name) == 0  # the variant really takes the general grammar
    assert snapshot(slow, path.name) == snapshot(text, path.name)


def test_fusegen_comment_attributes_read_only_when_present():
    """``// fusegen.key=value`` lines (what the printer writes for module attributes) come back as module attributes;
    a text without any leaves none (the search for them is skipped)."""
    body = "HloModule m\n\nENTRY e {\n  p = f32[4]{0} parameter(0)\n  ROOT n = f32[4]{0} negate(p)\n}\n"
    with_comments = "// fusegen.synthesized_entry=true\n//   fusegen.origin.file=a.hlo\n" + body
    m = parse_module(with_comments)
    assert m.attrs["fusegen.synthesized_entry"] == "true" and m.attrs["fusegen.origin.file"] == "a.hlo"
    assert not any(k.startswith("fusegen.") for k in parse_module(body).attrs)
    assert print_module(m).count("fusegen.origin.file=a.hlo") == 1  # printed back, read back the same
    assert parse_module(print_module(m)).attrs == m.attrs
