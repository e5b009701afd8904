"""Malformed HLO gives HloParseError with file, line, column and token (never another exception)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fusegen.hlo.errors import HloParseError
from fusegen.hlo.parser import parse_file, parse_module, parse_modules

SHARED = Path(__file__).parents[2].parent / "shared"
CORPUS = SHARED / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}")

BASE = """HloModule m

ENTRY main {
  x = f32[4,8]{1,0} parameter(0)
  y = f32[4,8]{1,0} negate(x)
  ROOT s = f32[4,8]{1,0} add(x, y)
}
"""


def line_col(text: str, index: int) -> tuple[int, int]:
    line = text.count("\n", 0, index) + 1
    col = index - (text.rfind("\n", 0, index) + 1) + 1
    return line, col


def expect_error(text: str, at: int, token: str, *words: str) -> HloParseError:
    with pytest.raises(HloParseError) as ei:
        parse_module(text, "bad.hlo")
    e = ei.value
    assert e.filename == "bad.hlo"
    assert (e.line, e.column) == line_col(text, at), str(e)
    assert e.token == token, str(e)
    for w in words:
        assert w in e.message, str(e)
    assert str(e).startswith(f"bad.hlo:{e.line}:{e.column}: error: ")
    return e


def test_valid_base_parses():
    assert parse_module(BASE).entry.root.name == "s"


def test_truncated_file():
    text = BASE[: BASE.index("add(") + 6]  # "...add(x,"
    expect_error(text, len(text), "<end of file>", "end of file")
    text = BASE[: BASE.rindex("}")]
    expect_error(text, len(text), "<end of file>", "end of file", "main")


def test_empty_text():
    expect_error("", 0, "<end of file>", "no computations")
    expect_error("// only a comment\n", len("// only a comment\n"), "<end of file>", "no computations")


def test_unknown_opcode():
    text = BASE.replace("negate(x)", "negatee(x)")
    expect_error(text, text.index("negatee"), "negatee", "unknown opcode", "negatee")


def test_bad_shape():
    text = BASE.replace("y = f32[4,8]", "y = f33[4,8]")
    expect_error(text, text.index("f33"), "f33", "unknown element type", "f33")
    text = BASE.replace("y = f32[4,8]", "y = f32[4,x]")
    expect_error(text, text.index("x]"), "x", "dimension")
    text = BASE.replace("{1,0} parameter", "{1,1} parameter")
    expect_error(text, text.index("{1,1}"), "{", "layout")


def test_unbalanced_braces_and_parens():
    text = BASE.replace("add(x, y)", "add(x, y")
    expect_error(text, text.rindex("}"), "}", "expected ')'", "add")
    text = BASE.replace("{1,0} negate", "{1,0 negate")
    expect_error(text, text.index("negate"), "negate", "expected '}'")
    text = BASE.replace("negate(x)", "negate(x), sharding={devices=[2]0,1")
    expect_error(text, text.index("{devices"), "{", "unbalanced", "next instruction")
    text = BASE.replace("ROOT s = f32[4,8]{1,0} add(x, y)\n}", "ROOT s = f32[4,8]{1,0} add(x, y), sharding={a={")
    expect_error(text, text.index("a={") + 2, "{", "unbalanced", "end of file")  # innermost open brace
    text = BASE + "}\n"
    expect_error(text, len(BASE), "}")


def test_undefined_operand_and_duplicates():
    text = BASE.replace("add(x, y)", "add(x, w)")
    expect_error(text, text.index("w)"), "w", "undefined operand", "'w'")
    text = BASE.replace("y = f32", "x = f32")
    expect_error(text, text.index("x = f32[4,8]{1,0} negate"), "x", "duplicate instruction name")
    text = BASE + "\nmain {\n  ROOT z = f32[] constant(0)\n}\n"
    expect_error(text, text.rindex("main"), "main", "duplicate computation", "main")
    text = BASE + "\nENTRY other {\n  ROOT z = f32[] constant(0)\n}\n"
    expect_error(text, text.rindex("ENTRY"), "ENTRY", "second ENTRY")


def test_unknown_computation_reference():
    text = BASE.replace("negate(x)", "negate(x), to_apply=%nothere")
    expect_error(text, text.index("%nothere"), "nothere", "unknown computation", "nothere")


@needs_corpus
def test_b01_brace_wrapped_missing_computation():
    """bugs/INDEX.md B01: `to_apply={%missing_fn}` must be a clean error naming the computation."""
    path = CORPUS / "bugs" / "B01.hlo"
    text = path.read_text()
    with pytest.raises(HloParseError) as ei:
        parse_file(path)
    e = ei.value
    assert e.filename == str(path)
    assert "missing_fn" in e.message and "unknown computation" in e.message
    assert e.token == "missing_fn"
    assert (e.line, e.column) == line_col(text, text.index("%missing_fn"))


def test_inline_computation_body_is_not_a_reference():
    text = BASE.replace(
        "ROOT s = f32[4,8]{1,0} add(x, y)",
        "z = f32[] constant(0)\n  ROOT s = f32[4] reduce(y, z), dimensions={1}, to_apply={\n"
        "    a = f32[] parameter(0)\n    b = f32[] parameter(1)\n    ROOT c = f32[] add(a, b)\n  }",
    )
    m = parse_module(text)
    body = m.entry.root.attrs["to_apply"]
    assert body.root.opcode == "add" and body in m.computations
    # a broken inline body is reported inside the body
    bad = text.replace("ROOT c = f32[] add(a, b)", "ROOT c = f32[] add(a, q)")
    expect_error(bad, bad.index("q)"), "q", "undefined operand")


@needs_corpus
def test_b02_reshape_element_count():
    """bugs/INDEX.md B02: f32[31] reshape(f32[4,8]) is a recoverable error naming the reshape, 31 vs 32."""
    path = CORPUS / "bugs" / "B02.hlo"
    text = path.read_text()
    with pytest.raises(HloParseError) as ei:
        parse_file(path)
    e = ei.value
    assert "%r" in e.message and "reshape" in e.message
    assert "31" in e.message and "32" in e.message
    assert (e.line, e.column) == line_col(text, text.index("ROOT r") + len("ROOT "))


def test_non_string_input():
    with pytest.raises(HloParseError):
        parse_module(b"HloModule m")  # type: ignore[arg-type]


def test_unreadable_file(tmp_path: Path):
    with pytest.raises(HloParseError) as ei:
        parse_file(tmp_path / "missing.hlo")
    assert "missing.hlo" in str(ei.value)


# ------------------------------------------------------------------------------------------ fuzzing
def _seed_files() -> list[str]:
    if not CORPUS.is_dir():
        return [BASE]
    files = sorted(CORPUS.rglob("*.hlo"))
    # small files keep each example fast; include the bugs and a mix of lit / JAX modules
    return [p.read_text() for p in files if p.stat().st_size < 6000][::3]


SEEDS = _seed_files()
_TOKENS = re.compile(r"%?[\w.\-]+|\s+|\S")


@st.composite
def mutated(draw):
    text = draw(st.sampled_from(SEEDS))
    for _ in range(draw(st.integers(1, 3))):
        if not text:
            break
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "truncate", "token_delete", "token_dup",
                                     "token_swap", "insert"]))
        i = draw(st.integers(0, len(text) - 1))
        if kind == "delete":
            text = text[:i] + text[i + 1:]
        elif kind == "duplicate":
            text = text[:i] + text[i] + text[i:]
        elif kind == "swap":
            j = draw(st.integers(0, len(text) - 1))
            a, b = sorted((i, j))
            if a < b:
                text = text[:a] + text[b] + text[a + 1:b] + text[a] + text[b + 1:]
        elif kind == "truncate":
            text = text[:i]
        elif kind == "insert":
            text = text[:i] + draw(st.sampled_from(list('{}()[],=%":<>x-/*\n0'))) + text[i:]
        else:
            toks = _TOKENS.findall(text)
            k = draw(st.integers(0, len(toks) - 1))
            if kind == "token_delete":
                del toks[k]
            elif kind == "token_dup":
                toks.insert(k, toks[k])
            else:
                m = draw(st.integers(0, len(toks) - 1))
                toks[k], toks[m] = toks[m], toks[k]
            text = "".join(toks)
    return text


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=mutated())
def test_mutated_corpus_parses_or_raises_hlo_parse_error(text):
    for parse in (parse_module, parse_modules):
        try:
            parse(text, "fuzz.hlo")
        except HloParseError as e:
            assert e.filename == "fuzz.hlo"
            assert e.line >= 1 and e.column >= 1
            assert "internal parser error" not in e.message, e
