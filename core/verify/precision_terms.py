"""The precision terms of a verdict's budget: mantissa bits per floating type, and how many terms an instruction
sums (XLA's tests scale their tolerances with both). Below :mod:`fusegen.verify.budget` and
:mod:`fusegen.verify.expected`, which both read them."""

from __future__ import annotations

import math

from fusegen.hlo.ir import Instruction

#: Mantissa bits per floating type (lower = less precise).
MANTISSA = {"f64": 52, "c128": 52, "f32": 23, "c64": 23, "tf32": 10, "f16": 10, "bf16": 7}
GROWTH_FREE_TERMS = 256


def mantissa_bits(element_type: str) -> int:
    """Explicit mantissa bits of a floating ``element_type`` (3 for f8/f4 types; 64 for non-float types)."""
    if element_type.startswith(("f8", "f4")):
        return 3
    return MANTISSA.get(element_type, 64)


def reduced_terms(inst: Instruction) -> int:
    """How many terms ``inst`` sums into each output element: a reduce's reduced elements, a dot's contracted
    size, a convolution's kernel elements per output feature, a reduce-window's window (1 otherwise)."""
    op = inst.opcode
    if op == "reduce":
        dims = inst.attrs.get("dimensions", ()) or ()
        src = inst.operands[0].shape
        return math.prod(src.dimensions[d] for d in dims if d < src.rank) if src.is_array else 1
    if op == "dot":
        dn = inst.attrs.get("lhs_contracting_dims", ()) or ()
        lhs = inst.operands[0].shape
        return math.prod(lhs.dimensions[d] for d in dn if d < lhs.rank)
    if op == "convolution":
        rhs, out = inst.operands[1].shape, inst.shape
        out_features = out.dimensions[-1] if out.is_array and out.rank else 1
        return max(1, rhs.numel // max(1, out_features))
    if op == "reduce-window":
        win = inst.attrs.get("window")
        sizes = getattr(win, "size", None) or (win.get("size") if isinstance(win, dict) else None)
        return math.prod(sizes) if sizes else 1
    return 1
