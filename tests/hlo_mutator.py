"""Seeded mutation of HLO text for the fuzz tests (tests/corpus/test_fuzz.py).

Two kinds of mutation: *lexical* ones (delete, duplicate or swap spans, flip characters, insert brackets,
quotes, escapes, huge numbers) that mostly break the syntax and exercise the parser's error paths, and
*semantic* ones (change a number, an element type, an opcode, an operand name, a dimension list) that
keep the text parsable more often and exercise the verifier, dispatch, emitters and the executor.
"""

from __future__ import annotations

import random
import re
from pathlib import Path

SHARED = Path(__file__).parents[1].parent / "shared" / "corpus"

#: Small modules that run in well under a second each; the fuzzer mutates these (and corpus seeds).
INLINE_SEEDS = [
    """HloModule elementwise
%fused (p0: f32[4,8], p1: f32[4,8]) -> f32[4,8] {
  %p0 = f32[4,8]{1,0} parameter(0)
  %p1 = f32[4,8]{1,0} parameter(1)
  %m = f32[4,8]{1,0} multiply(%p0, %p1)
  ROOT %e = f32[4,8]{1,0} exponential(%m)
}
ENTRY %main (a: f32[4,8], b: f32[4,8]) -> f32[4,8] {
  %a = f32[4,8]{1,0} parameter(0)
  %b = f32[4,8]{1,0} parameter(1)
  ROOT %f = f32[4,8]{1,0} fusion(%a, %b), kind=kLoop, calls=%fused
}
""",
    """HloModule reduce
%add (x: f32[], y: f32[]) -> f32[] {
  %x = f32[] parameter(0)
  %y = f32[] parameter(1)
  ROOT %s = f32[] add(%x, %y)
}
%fused (p0: f32[8,16]) -> f32[8] {
  %p0 = f32[8,16]{1,0} parameter(0)
  %z = f32[] constant(0)
  ROOT %r = f32[8]{0} reduce(%p0, %z), dimensions={1}, to_apply=%add
}
ENTRY %main (a: f32[8,16]) -> f32[8] {
  %a = f32[8,16]{1,0} parameter(0)
  ROOT %f = f32[8]{0} fusion(%a), kind=kInput, calls=%fused
}
""",
    """HloModule shapes
%fused (p0: f32[4,6], p1: f32[6]) -> f32[6,4] {
  %p0 = f32[4,6]{1,0} parameter(0)
  %p1 = f32[6]{0} parameter(1)
  %b = f32[4,6]{1,0} broadcast(%p1), dimensions={1}
  %a = f32[4,6]{1,0} add(%p0, %b)
  ROOT %t = f32[6,4]{1,0} transpose(%a), dimensions={1,0}
}
ENTRY %main (a: f32[4,6], b: f32[6]) -> f32[6,4] {
  %a = f32[4,6]{1,0} parameter(0)
  %b = f32[6]{0} parameter(1)
  ROOT %f = f32[6,4]{1,0} fusion(%a, %b), kind=kLoop, calls=%fused
}
""",
    """HloModule slices
%fused (p0: s32[10], p1: s32[3]) -> s32[8] {
  %p0 = s32[10]{0} parameter(0)
  %p1 = s32[3]{0} parameter(1)
  %s = s32[5]{0} slice(%p0), slice={[2:7]}
  %c = s32[8]{0} concatenate(%s, %p1), dimensions={0}
  %i = s32[8]{0} iota(), iota_dimension=0
  ROOT %r = s32[8]{0} add(%c, %i)
}
ENTRY %main (a: s32[10], b: s32[3]) -> s32[8] {
  %a = s32[10]{0} parameter(0)
  %b = s32[3]{0} parameter(1)
  ROOT %f = s32[8]{0} fusion(%a, %b), kind=kLoop, calls=%fused
}
""",
    """HloModule control
%body (s: (s32[], f32[4])) -> (s32[], f32[4]) {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %x = f32[4]{0} get-tuple-element(%s), index=1
  %one = s32[] constant(1)
  %i2 = s32[] add(%i, %one)
  %x2 = f32[4]{0} negate(%x)
  ROOT %t = (s32[], f32[4]{0}) tuple(%i2, %x2)
}
%cond (s: (s32[], f32[4])) -> pred[] {
  %s = (s32[], f32[4]{0}) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %n = s32[] constant(3)
  ROOT %lt = pred[] compare(%i, %n), direction=LT
}
%callee (p: f32[4]) -> f32[4] {
  %p = f32[4]{0} parameter(0)
  ROOT %a = f32[4]{0} abs(%p)
}
ENTRY %main (a: f32[4]) -> (s32[], f32[4]) {
  %a = f32[4]{0} parameter(0)
  %c = f32[4]{0} call(%a), to_apply=%callee
  %z = s32[] constant(0)
  %init = (s32[], f32[4]{0}) tuple(%z, %c)
  ROOT %w = (s32[], f32[4]{0}) while(%init), condition=%cond, body=%body
}
""",
    """HloModule dynamic
%fused (p0: f32[8,4], p1: s32[], p2: s32[]) -> f32[2,4] {
  %p0 = f32[8,4]{1,0} parameter(0)
  %p1 = s32[] parameter(1)
  %p2 = s32[] parameter(2)
  ROOT %d = f32[2,4]{1,0} dynamic-slice(%p0, %p1, %p2), dynamic_slice_sizes={2,4}
}
ENTRY %main (a: f32[8,4], i: s32[], j: s32[]) -> f32[2,4] {
  %a = f32[8,4]{1,0} parameter(0)
  %i = s32[] parameter(1)
  %j = s32[] parameter(2)
  ROOT %f = f32[2,4]{1,0} fusion(%a, %i, %j), kind=kLoop, calls=%fused
}
""",
]

#: Small corpus modules used as extra seeds when ../shared is present.
CORPUS_SEEDS = [
    "xla/modules/backends__gpu__codegen__triton__tests__pad__high_pad_2d.hlo",
    "xla/modules/backends__gpu__codegen__emitters__tests__transpose__side_outputs_inplace.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__elementwise__convert_int_to_pred.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__reduce__intra_warp_reduce_of_reduce.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__slice__slice_extra_out_padding.hlo",
    "xla/modules/codegen__emitters__tests__dynamic_update_slice__int4.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__bitcast__bitcast_expand_tiled_1.hlo",
    "hostile/small.hlo",
]


def seeds() -> list[tuple[str, str]]:
    """``(name, text)`` of every seed module available here."""
    out = [(f"inline{k}", t) for k, t in enumerate(INLINE_SEEDS)]
    for rel in CORPUS_SEEDS:
        p = SHARED / rel
        if p.is_file():
            out.append((rel, p.read_text()))
    return out


_NUMBER = re.compile(r"\d+")
_ETYPE = re.compile(r"\b(pred|s8|s16|s32|s64|u8|u32|f16|bf16|f32|f64)\[")
_OPCODE = re.compile(r"= *[a-z0-9\[\]{},]*\s+([a-z][a-z\-]*)\(")
_NAME = re.compile(r"%[\w.\-]+")
_DIMS = re.compile(r"dimensions=\{[\d,]*\}")
ETYPES = ["pred", "s8", "s32", "s64", "u8", "u32", "f16", "bf16", "f32", "f64", "c64", "s4", "f8e4m3fn", "token"]
OPCODES = ["add", "multiply", "negate", "abs", "transpose", "broadcast", "reduce", "slice", "reshape", "copy",
           "concatenate", "tuple", "get-tuple-element", "select", "compare", "convert", "bitcast", "iota",
           "dynamic-slice", "pad", "reverse", "exponential", "divide", "maximum", "call", "fusion", "sort", "dot",
           "while", "conditional", "custom-call", "parameter", "constant", "gather", "scatter"]
NUMBERS = ["0", "1", "2", "3", "5", "7", "16", "-1", "255", "65536", "2147483647", "2147483648",
           "9223372036854775807", "9223372036854775808", "4611686018427387904", "1" * 30]
TOKENS = ["{", "}", "(", ")", "[", "]", ",", "=", '"', "\\", "\\x", "/*", "//", "\n", "ROOT ", "ENTRY ", "%",
          "<=", "?", ":", "->", "{...}", "T(8,128)", "S(1)", "metadata={op_name=\"\\x\"}", "e" * 3, "nan", "inf"]


def _span(text: str, rng: random.Random) -> tuple[int, int]:
    a = rng.randrange(len(text) + 1)
    return a, min(len(text), a + rng.randint(1, 12))


def _sub_match(text: str, rx: re.Pattern, rng: random.Random, repl) -> str:
    ms = list(rx.finditer(text))
    if not ms:
        return text
    m = rng.choice(ms)
    return text[: m.start()] + repl(m) + text[m.end():]


def lexical(text: str, rng: random.Random) -> str:
    op = rng.randrange(6)
    a, b = _span(text, rng)
    if op == 0:
        return text[:a] + text[b:]
    if op == 1:
        return text[:a] + text[a:b] * 2 + text[a:]
    if op == 2:
        return text[:a] + rng.choice(TOKENS) + text[a:]
    if op == 3:
        return text[:a] + chr(rng.randrange(32, 127)) + text[a + 1:]
    if op == 4:
        lines = text.split("\n")
        i, j = rng.randrange(len(lines)), rng.randrange(len(lines))
        lines[i], lines[j] = lines[j], lines[i]
        return "\n".join(lines)
    return text[:a]  # truncated


def semantic(text: str, rng: random.Random) -> str:
    op = rng.randrange(6)
    if op == 0:
        return _sub_match(text, _NUMBER, rng, lambda m: rng.choice(NUMBERS))
    if op == 1:
        return _sub_match(text, _ETYPE, rng, lambda m: rng.choice(ETYPES) + "[")
    if op == 2:
        return _sub_match(text, _OPCODE, rng, lambda m: m.group(0).replace(m.group(1), rng.choice(OPCODES)))
    if op == 3:
        names = _NAME.findall(text)
        return _sub_match(text, _NAME, rng, lambda m: rng.choice(names)) if names else text
    if op == 4:
        return _sub_match(text, _DIMS, rng, lambda m: "dimensions={" + ",".join(
            str(rng.randrange(-1, 4)) for _ in range(rng.randrange(4))) + "}")
    return _sub_match(text, _NUMBER, rng, lambda m: str(int(m.group(0)) + rng.choice([-1, 1, 2])))


def mutate(text: str, rng: random.Random, semantic_share: float = 0.5) -> str:
    """One to three mutations of ``text``."""
    for _ in range(rng.randint(1, 3)):
        text = semantic(text, rng) if rng.random() < semantic_share else lexical(text, rng)
    return text


def mutants(count: int, seed: int, semantic_share: float = 0.5) -> list[tuple[str, str]]:
    """``count`` seeded ``(label, text)`` mutants of :func:`seeds`."""
    rng = random.Random(seed)
    base = seeds()
    out = []
    for k in range(count):
        name, text = base[k % len(base)]
        out.append((f"{name}#{k}", mutate(text, rng, semantic_share)))
    return out
