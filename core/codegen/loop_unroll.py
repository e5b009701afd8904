"""How far a kernel's per-thread loop is unrolled: XLA's ``xla-gpu-optimize-loops`` rule.

Mirrors ``xla/backends/gpu/codegen/emitters/transforms/optimize_loops.cc`` (``GetUnrollingFactor``), the pass XLA's
native emitters run on their ``scf.for`` loops before LLVM: a loop of at most ``MaxUnrollFactor()`` (4) steps is
unrolled whole; a longer one by the largest divisor of its trip count that keeps the unrolled body within 400
(``kMaxSize``) units of XLA's rough size estimate, where an operation counts 1 and a float math function that
lowers to many instructions (``exp``, ``log``, ``tanh``, ``sin``...; not ``sqrt``, ``rsqrt``, ``abs``, rounding
or ``fma``) counts 20. A factor below the trip count leaves a loop (the rest is LLVM's, as in XLA's pipeline).

The rule is the one of XLA's pass pipeline in ``../shared/reference/xla-facts.md`` (section 1f: the pass still takes
``max_unroll_factor``). That version unrolls no loop whose body holds a call or another loop; the emitters leave such
a loop as they wrote it (:func:`holds_loop`). Newer XLA bounds the whole-unroll of up to 4 steps by the size too,
charges 20 for more arithmetic, and never unrolls a body with ``asin``-like functions; this module does not follow
those changes.

An emitter measures its generated loop body with :func:`body_size` and writes the loop
:func:`unrolled_loop` describes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from fusegen.codegen.interpreter_patches import NOUNROLL_ASM

#: ``MaxUnrollFactor()`` (``xla/service/gpu/gpu_fusible.h``): loops of at most this many steps are unrolled whole.
MAX_UNROLL_FACTOR = 4
#: ``kMaxSize`` of ``GetUnrollingFactor``: the unrolled body's size bound (XLA: "chosen empirically").
MAX_UNROLLED_SIZE = 400
#: What XLA's estimate charges a float math function other than its cheap ones.
EXPENSIVE_OP_SIZE = 20

# a float math function Triton lowers to a libdevice routine or an approximation sequence (XLA's non-cheap math ops)
_EXPENSIVE = re.compile(
    r"\b(?:libdevice|tl|math)\.(?:exp|exp2|expm1|log|log2|log10|log1p|sin|cos|tan|sinh|cosh|tanh|asin|acos|atan|atan2|"
    r"asinh|acosh|atanh|pow|erf|erfc|erfinv|cbrt|lgamma|tgamma)\(")
# a statement that only computes an index (the elemental generator's ``i_N``/``off_N``/``rr`` temporaries, range and
# window tests): XLA's loop holds one ``xla.apply_indexing`` per map where Triton source spells its arithmetic out
_INDEX = re.compile(r"^\s*(?:i|off|rr|kk|rw|inpad|inwin|inupd|mpad|start|R|R_c|mask)(?:_\d+)?\s*=")
# statements XLA's loop does not hold at that point: a rename, a constant (hoisted), a float width conversion of the
# generator's f32 arithmetic on 16-bit types (XLA's loop computes in the 16-bit type; its float conversion pass
# comes after the unrolling)
_FREE = re.compile(r"^\s*\w+ = (?:\w+|tl\.full\([^()]*\)(?:\.to\([^()]*\))?|\w+\.to\(tl\.\w+(?:, bitcast=True)?\))\s*$")


def body_size(lines: Sequence[str]) -> int:
    """XLA's rough size of a loop body given as the Triton statements of one step (``lines``, one statement each):
    each value statement counts 1, an expensive float function :data:`EXPENSIVE_OP_SIZE`, index arithmetic,
    renames, constants and 16-bit float conversions 0.

    Mirrors ``optimize_loops.cc`` (the size walk of ``GetUnrollingFactor``), over Triton source instead of MLIR.
    """
    size = 0
    for ln in lines:
        s = ln.strip()
        if not s or s.startswith("#") or _INDEX.match(ln) or _FREE.match(ln):
            continue
        size += EXPENSIVE_OP_SIZE * len(_EXPENSIVE.findall(s)) or 1
    return size


def holds_loop(lines: Sequence[str]) -> bool:
    """Whether a loop body (Triton statements) holds a loop of its own: XLA's rule does not unroll it."""
    return any(ln.lstrip().startswith("for ") for ln in lines)


def unroll_factor(trip_count: int, size: int) -> int:
    """How many steps of a ``trip_count``-step loop whose body has XLA size ``size`` are written out per iteration:
    ``trip_count`` (whole) up to :data:`MAX_UNROLL_FACTOR` steps, else the largest divisor of ``trip_count`` at most
    ``MAX_UNROLLED_SIZE // size`` (1: the loop stays as it is).

    Mirrors ``GetUnrollingFactor`` in ``xla/backends/gpu/codegen/emitters/transforms/optimize_loops.cc``.
    """
    if trip_count <= MAX_UNROLL_FACTOR:
        return max(trip_count, 1)
    factor = min(trip_count, MAX_UNROLLED_SIZE // max(size, 1))
    while factor > 1 and trip_count % factor:
        factor -= 1
    return max(factor, 1)


def nounroll_statement(name: str) -> str:
    """The Triton statement that puts PTX's ``.pragma "nounroll";`` (:data:`NOUNROLL_ASM`) in the loop it stands in,
    its dummy int32 result named ``name``: ptxas then keeps that loop a loop."""
    return f"{name} = tl.inline_asm_elementwise({NOUNROLL_ASM!r}, '=r', [], dtype=tl.int32, is_pure=False, pack=1)"


def unrolled_loop(var: str, trip: str, trip_count: int, factor: int, keep: bool = False) -> tuple[list[str], str]:
    """The loop header lines for ``for var in range(trip)`` unrolled by ``factor`` (``trip`` is the trip count's
    constexpr name or literal, ``trip_count`` its value), and the indentation the body then needs beyond the first
    header: ``tl.static_range`` when whole, ``range`` when ``factor == 1``, else a runtime loop over
    ``trip // factor`` iterations around a ``tl.static_range(factor)`` whose steps define ``var``. ``keep``: a loop
    left by the rule with more than :data:`MAX_UNROLL_FACTOR` iterations carries PTX's ``.pragma "nounroll"``
    (:data:`~fusegen.codegen.interpreter_patches.NOUNROLL_ASM`), so that ptxas keeps it as XLA's kernel keeps its loop
    (XLA's LLVM unrolls such a loop at run-time bounds, in a shape ptxas leaves; ptxas would write Triton's counted
    loop out whole). A loop of a few iterations is left to LLVM and ptxas, which unroll it in both pipelines."""
    left = trip_count // max(factor, 1)
    kept = keep and factor < trip_count and left > MAX_UNROLL_FACTOR
    pragma = ["    " + nounroll_statement(f"{var}_nounroll")] if kept else []
    if factor >= trip_count:
        return [f"for {var} in tl.static_range(0, {trip}):"], ""
    if factor <= 1:
        return [f"for {var} in range(0, {trip}):", *pragma], ""
    outer = str(trip_count // factor) if trip.isdigit() else f"{trip} // {factor}"
    return [f"for {var}_o in range(0, {outer}):", *pragma,
            f"    for {var}_u in tl.static_range(0, {factor}):",
            f"        {var} = {var}_o * {factor} + {var}_u"], "    "


def unroll_in_place(lines: list[str], header_at: int, var: str, trip: str, trip_count: int, factor: int,
                    keep: bool = False) -> None:
    """Rewrites the loop whose header is ``lines[header_at]`` (``for var in ...``, the step body after it, to the
    end of ``lines``) as :func:`unrolled_loop` writes it, at the header's indentation."""
    head, extra = unrolled_loop(var, trip, trip_count, factor, keep)
    h = lines[header_at]
    pad = h[:len(h) - len(h.lstrip())]
    lines[header_at:] = [pad + x for x in head] + [(extra + x) if x else x for x in lines[header_at + 1:]]
