"""The compare-and-swap path of the scatter emitter (``cas``): XLA's ``EmitAtomicOperationUsingCAS`` as Triton code.

One lane per update element reads the word holding its target element, combines, and swaps if the word is
unchanged, else retries with the word the swap saw; a sub-word element is combined inside its aligned 32-bit word,
so neighbours written at the same time survive.
"""

from __future__ import annotations

import types

from typing import Any

from fusegen.codegen import triton_source as ts
from fusegen.codegen.atomic_asm import (SUBWORD_CAS_OPS, SUBWORD_STORE_ASM, WORD_CAS_OPS, subword_cas_asm,
                                         word_cas_asm)
from fusegen.codegen.elemental import ElementalGenerator, KernelContext
from fusegen.hlo.ir import Computation

#: element types the compare-and-swap path handles: bits of the element (pred is stored as one byte)
CAS_BITS = types.MappingProxyType({"pred": 8, "s8": 8, "u8": 8, "s16": 16, "u16": 16, "f16": 16, "bf16": 16,
                                   "s32": 32, "u32": 32, "f32": 32, "s64": 64, "u64": 64, "f64": 64})


def _per_thread_loop(ctx: KernelContext, asm: str, value_constraint: str, ptr: str, o: str, vbits: str, mask: str) -> None:
    """One statement running ``asm`` (a PTX per-thread loop, :mod:`fusegen.codegen.atomic_asm`) per lane as
    ``tl.inline_asm_elementwise``: operands the element's address ``ptr + o`` (64-bit), ``vbits`` (the
    update's bits, in a register of ``value_constraint``: ``"r"`` 32-bit, ``"l"`` 64-bit) and ``mask`` as
    int32 (lanes with 0 do nothing); an int32 result nobody reads."""
    ctx.body.line(f"tl.inline_asm_elementwise({asm!r}, '=r,l,{value_constraint},r', "
                  f"[({ptr} + {o}).to(tl.int64), {vbits}, {mask}.to(tl.int32)], dtype=tl.int32, "
                  f"is_pure=False, pack=1)")


def cas_lines(gen: ElementalGenerator, combiner: Computation, overwrite: bool, ptr: str, off: Any, val: str,
              mask: str, et: str) -> None:
    """XLA's compare-and-swap loop (``EmitAtomicOperationUsingCAS``): read the word holding the element,
    combine, swap if unchanged, else retry with the word the swap saw. Lanes not pending swap a word with
    itself (``tl.atomic_cas`` has no mask), at offset 0. ``combiner``: the scatter's ``to_apply`` (element, update)
    -> element; ``overwrite``: it returns the update. Where the combine is one PTX instruction the loop is XLA's
    per-thread loop itself (:mod:`fusegen.codegen.atomic_asm`), on the element or, 16 bits wide, on the word holding
    it; else a Triton loop while any lane is pending."""
    ctx = gen.ctx
    bits = CAS_BITS[et]
    o = ctx.emit(f"tl.where({mask}, {gen.itensor(off)}, 0)", "coff")
    if bits < 32 and overwrite:
        _per_thread_loop(ctx, SUBWORD_STORE_ASM[bits], "r", ptr, o, _bits_of(ctx, val, et, bits), mask)
        return
    op = subword_cas_op(combiner, et)
    if op is not None:  # XLA's per-thread loop on the word holding the element, the combine one PTX instruction
        _per_thread_loop(ctx, subword_cas_asm(op), "r", ptr, o, _bits_of(ctx, val, et, bits), mask)
        return
    op = word_cas_op(combiner, et)
    if op is not None:  # XLA's per-thread loop itself: the combine is one PTX instruction
        _per_thread_loop(ctx, word_cas_asm(op), "l" if bits == 64 else "r", ptr, o, _bits_of(ctx, val, et, bits),
                         mask)
        return
    word = "tl.int32" if bits <= 32 else "tl.int64"
    wptr = ctx.emit(f"{ptr}.to(tl.pointer_type({word}), bitcast=True)", "wptr")
    if bits < 32:
        per = 32 // bits
        woff = ctx.emit(f"{o} // {per}", "woff")
        sh = ctx.emit(f"(({o} % {per}) * {bits}).to(tl.int32)", "sh")
        lowmask = (1 << bits) - 1
        keep = ctx.emit(f"~({lowmask} << {sh})", "keep")
    else:
        woff = o
    old, pend, res = ctx.names.fresh("old"), ctx.names.fresh("pend"), ctx.names.fresh("res")
    ctx.body.line(f"{old} = tl.load({wptr} + {woff}, mask={mask}, other=0)")
    ctx.body.line(f"{pend} = {mask}")
    ctx.body.line(f"while tl.reduce({pend}.to(tl.int32), 0, tl.standard._sum_combine) > 0:")
    ctx.body.indent()
    gen.push_scope()
    try:
        raw = ctx.emit(f"(({old} >> {sh}) & {lowmask})", "raw") if bits < 32 else old
        cur = _value_of(ctx, raw, et, bits)
        new = gen.call_computation(combiner, [cur, val])
        nbits = _bits_of(ctx, new, et, bits)
        nword = ctx.emit(f"({old} & {keep}) | ({nbits} << {sh})", "nword") if bits < 32 else nbits
        ctx.body.line(f"{res} = tl.atomic_cas({wptr} + {woff}, {old}, tl.where({pend}, {nword}, {old}), "
                      f"sem=\"relaxed\")")
        ctx.body.line(f"{pend} = {pend} & ({res} != {old})")
        ctx.body.line(f"{old} = tl.where({pend}, {res}, {old})")
    finally:
        gen.pop_scope()
        ctx.body.dedent()

def word_cas_op(combiner: Computation, et: str) -> str | None:
    """The PTX instruction of a 32/64-bit combiner ``p0 * p1`` (either order) or ``p0 - p1`` of the element
    type, which :func:`~fusegen.codegen.atomic_asm.word_cas_asm` loops over; ``None``: other."""
    root = combiner.root
    bits = CAS_BITS.get(et, 0)
    if bits < 32 or root is None or root.opcode not in ("multiply", "subtract") or len(root.operands) != 2:
        return None
    nums = [x.parameter_number if x.opcode == "parameter" else None for x in root.operands]
    if root.shape.element_type != et or not (nums == [0, 1] or (root.opcode == "multiply" and nums == [1, 0])):
        return None
    if et in ("f32", "f64"):
        op = f"{'mul' if root.opcode == 'multiply' else 'sub'}.rn.{et}"
    elif et in ("s32", "u32", "s64", "u64"):
        op = f"{'mul.lo' if root.opcode == 'multiply' else 'sub'}.s{bits}"
    else:
        return None
    return op if op in WORD_CAS_OPS else None

def subword_cas_op(combiner: Computation, et: str) -> str | None:
    """The 16-bit PTX instruction of a combiner ``maximum(p0, p1)`` / ``minimum(p0, p1)`` (either order) of a bf16,
    f16, s16 or u16 element, which :func:`~fusegen.codegen.atomic_asm.subword_cas_asm` loops over (the float ones
    propagate NaN, as XLA's ``max.NaN.bf16``); ``None``: other."""
    root = combiner.root
    if et not in ("bf16", "f16", "s16", "u16") or root is None or root.opcode not in ("maximum", "minimum"):
        return None
    nums = sorted(x.parameter_number if x.opcode == "parameter" else -1 for x in root.operands)
    if root.shape.element_type != et or nums != [0, 1]:
        return None
    name = root.opcode[:3]
    op = f"{name}.NaN.{et}" if et in ("bf16", "f16") else f"{name}.{et}"
    return op if op in SUBWORD_CAS_OPS else None


def _value_of(ctx: KernelContext, raw: str, et: str, bits: int) -> str:
    """The element of type ``et`` whose storage bits are ``raw`` (an int32 word's low bits, or the word)."""
    if et == "pred":
        return ctx.emit(f"{raw} != 0", "cur")
    if bits < 32:
        narrow = ctx.emit(f"{raw}.to(tl.int{bits})", "rawn")
        return narrow if et == f"s{bits}" else ctx.emit(f"{narrow}.to({ts.tl_dtype(et)}, bitcast=True)", "cur")
    return ctx.emit(f"{raw}.to({ts.tl_dtype(et)}, bitcast=True)", "cur")

def _bits_of(ctx: KernelContext, value: str, et: str, bits: int) -> str:
    """``value``'s storage bits: zero-extended into an int32 below 32 bits, else the same-width integer."""
    if et == "pred":
        return ctx.emit(f"{value}.to(tl.int32)", "nbits")
    if bits < 32:
        return ctx.emit(f"({value}.to(tl.int{bits}, bitcast=True).to(tl.int32) & {(1 << bits) - 1})", "nbits")
    return ctx.emit(f"{value}.to(tl.int{bits}, bitcast=True)", "nbits")
