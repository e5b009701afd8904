"""Float types Triton lacks (f8e3m4, f8e4m3, the fnuz f8 types, f8e8m0fnu, f4e2m1fn) as bits on ``uint8`` lanes.

XLA:GPU lowers converts of types the hardware lacks to bit manipulation on integers
(``xla/service/gpu/fusions/triton`` and ``xla/service/elemental_ir_emitter.cc``, ``EmitF8e*ToF32`` /
``EmitF32ToF8e*``-style expansions; the per-type rules are ml_dtypes', which XLA shares through tsl). A
value of one of these types lives in a kernel as its storage byte (one element per byte, as numpy and
ml_dtypes keep them, f4e2m1fn in the low nibble); :func:`decode` widens it to f32 exactly and
:func:`encode` rounds an f32 or f64 value to it (round to nearest even), with each type's rules:

* ``ieee`` (f8e3m4, f8e4m3): ±inf and NaN (exponent all ones), ±0; overflow rounds to ±inf, NaN keeps its
  sign as the quiet NaN ``s.1..1.10..0``;
* ``fnuz`` (f8e4m3fnuz, f8e5m2fnuz, f8e4m3b11fnuz): no inf, no -0, one NaN ``0x80``; overflow, inf and
  NaN give ``0x80``, -0 gives ``0x00``;
* ``fn`` (f4e2m1fn): no inf or NaN; overflow and inf saturate to ±6, NaN gives a zero of the opposite sign
  (ml_dtypes' choice: implementation-defined);
* ``e8m0`` (f8e8m0fnu): unsigned powers of two ``2^(E - 127)``, ``0xFF`` NaN; ties round up; zero,
  negatives, NaN, inf and overflow give NaN; values below the smallest power round on the f32 bits as
  ml_dtypes does.
"""

from __future__ import annotations

from typing import Callable

import attrs

Emit = Callable[[str, str], str]


@attrs.frozen
class Format:
    """Exponent bits, mantissa bits, exponent bias and special-value rules (``ieee``/``fnuz``/``fn``/``e8m0``)."""

    e: int
    m: int
    bias: int
    kind: str


#: HLO element type -> its bit format (types Triton has natively, f8e4m3fn and f8e5m2, are not here).
BIT_FLOATS: dict[str, Format] = {
    "f8e3m4": Format(3, 4, 3, "ieee"),
    "f8e4m3": Format(4, 3, 7, "ieee"),
    "f8e4m3fnuz": Format(4, 3, 8, "fnuz"),
    "f8e5m2fnuz": Format(5, 2, 16, "fnuz"),
    "f8e4m3b11fnuz": Format(4, 3, 11, "fnuz"),
    "f8e8m0fnu": Format(8, 0, 127, "e8m0"),
    "f4e2m1fn": Format(2, 1, 1, "fn"),
}


def _f32(x: float) -> str:
    return repr(float(x))


def decode(emit: Emit, v: str, et: str) -> str:
    """The f32 value (exact) of the storage bytes ``v`` (a ``uint8`` tensor) of type ``et``."""
    f = BIT_FLOATS[et]
    b = emit(f"{v}.to(tl.uint32)", "nfd")
    if f.kind == "e8m0":
        p = emit(f"({b} << 23).to(tl.float32, bitcast=True)", "nfd")
        p = emit(f"tl.where({b} == 0, {_f32(2.0 ** -127)}, {p})", "nfd")
        return emit(f"tl.where({b} == 255, float('nan'), {p})", "nfd")
    s = emit(f"({b} >> {f.e + f.m}) & 1", "nfd")
    ex = emit(f"({b} >> {f.m}) & {(1 << f.e) - 1}", "nfd")
    mt = emit(f"{b} & {(1 << f.m) - 1}", "nfd")
    normal = emit(f"((({s} << 31) | (({ex} + {127 - f.bias}) << 23) | ({mt} << {23 - f.m})).to(tl.uint32))"
                  f".to(tl.float32, bitcast=True)", "nfd")
    sub = emit(f"{mt}.to(tl.float32) * {_f32(2.0 ** (1 - f.bias - f.m))}", "nfd")
    sub = emit(f"tl.where({s} == 1, -{sub}, {sub})", "nfd")
    val = emit(f"tl.where({ex} == 0, {sub}, {normal})", "nfd")
    if f.kind == "ieee":
        inf = emit(f"tl.where({s} == 1, float('-inf'), float('inf'))", "nfd")
        special = emit(f"tl.where({mt} == 0, {inf}, float('nan'))", "nfd")
        val = emit(f"tl.where({ex} == {(1 << f.e) - 1}, {special}, {val})", "nfd")
    elif f.kind == "fnuz":
        val = emit(f"tl.where({b} == 128, float('nan'), {val})", "nfd")
    return val


def encode(emit: Emit, x: str, src: str, et: str) -> str:
    """``x`` (an f32 or f64 tensor, ``src`` ``"f32"``/``"f64"``) rounded to type ``et``'s storage byte (``uint8``).

    An f64 value is rounded to f32 first, as ml_dtypes converts (so the reference evaluator and XLA:CPU's
    answers on the sweep corpus agree with it)."""
    f = BIT_FLOATS[et]
    if src == "f64":  # through f32, as ml_dtypes (the reference, and XLA:CPU on the sweep) converts
        x = emit(f"{x}.to(tl.float32)", "nfe")
    it, ut, man, ebias, nbits, magic = "tl.int32", "tl.uint32", 23, 127, 32, 2.0 ** 23
    u = emit(f"{x}.to({ut}, bitcast=True)", "nfe")
    s = emit(f"({u} >> {nbits - 1}).to(tl.int32)", "nfe")
    a = emit(f"({u} & {(1 << (nbits - 1)) - 1}).to({it})", "nfe")
    inf_bits = ((1 << (nbits - man - 1)) - 1) << man
    isnan = emit(f"{a} > {inf_bits}", "nfe")
    shift = man - f.m
    # round to nearest even on the bits: the exponent field carries on from the mantissa
    rn = emit(f"({a} + {(1 << (shift - 1)) - 1} + (({a} >> {shift}) & 1)) >> {shift}", "nfe")
    if f.kind == "e8m0":  # ties round up (away from zero), as ml_dtypes rounds to this type
        rn = emit(f"({a} + {1 << (shift - 1)}) >> {shift}", "nfe")
        # f32 denormals: 2^-127 (E = 0) up to 2^-127 itself, anything above it 2^-126 (ml_dtypes' rule)
        rn = emit(f"tl.where({a} < {1 << man}, ({a} > {1 << (man - 1)}).to({it}), {rn})", "nfe")
        mag = emit(f"({rn} - {(ebias - 127) << f.m}).to(tl.int32)", "nfe")
        bad = emit(f"{isnan} | ({s} == 1) | ({a} == 0) | ({mag} > 254) | ({mag} < 0)", "nfe")
        return emit(f"tl.where({bad}, 255, {mag}).to(tl.uint8)", "nfe")
    normal = emit(f"({rn} - {(ebias - f.bias) << f.m}).to(tl.int32)", "nfe")
    # below the smallest normal: M = rne(|x| / 2^(1 - bias - m)), exact scaling, rounded by adding 2^man
    af = emit(f"tl.abs({x})", "nfe")
    q = emit(f"((({af} * {_f32(2.0 ** (f.bias - 1 + f.m))}) + {_f32(magic)}) - {_f32(magic)}).to(tl.int32)", "nfe")
    small = emit(f"{a} < {(ebias + 1 - f.bias) << man}", "nfe")
    mag = emit(f"tl.where({small}, {q}, {normal})", "nfe")
    top = 1 << (f.e + f.m)
    if f.kind == "ieee":
        emax = ((1 << f.e) - 1) << f.m
        mag = emit(f"tl.where({isnan}, {emax | (1 << (f.m - 1))}, tl.where({mag} >= {emax}, {emax}, {mag}))", "nfe")
        return emit(f"(({s} << {f.e + f.m}) | {mag}).to(tl.uint8)", "nfe")
    if f.kind == "fnuz":
        r = emit(f"tl.where({mag} == 0, 0, ({s} << {f.e + f.m}) | {mag})", "nfe")
        return emit(f"tl.where({isnan} | ({mag} >= {top}), 128, {r}).to(tl.uint8)", "nfe")
    # fn (f4e2m1fn): saturate; NaN -> a zero of the opposite sign
    mag = emit(f"tl.minimum({mag}, {top - 1})", "nfe")
    r = emit(f"({s} << {f.e + f.m}) | {mag}", "nfe")
    return emit(f"tl.where({isnan}, (1 - {s}) << {f.e + f.m}, {r}).to(tl.uint8)", "nfe")
