"""XLA's per-thread loop unrolling rule (``xla-gpu-optimize-loops``, ``GetUnrollingFactor``) and the Triton body
size it is given, checked on the rule's own arithmetic: whole up to 4 steps, else the largest divisor of the trip
count within 400 size units."""

from __future__ import annotations

import pytest

from fusegen.codegen import loop_unroll


@pytest.mark.parametrize("trip,size,factor", [
    (3, 10_000, 3),   # at most MaxUnrollFactor() steps: whole, whatever the size
    (4, 10_000, 4),
    (16, 5, 16),      # 400 // 5 = 80 >= 16: whole
    (64, 5, 64),
    (128, 5, 64),     # 80, down to a divisor of 128
    (14, 53, 7),      # 400 // 53 = 7 divides 14
    (32, 45, 8),      # 8
    (63, 42, 9),      # 9 divides 63
    (7, 100, 1),      # 4 does not divide 7, nor 3 or 2: the loop stays
    (8, 400, 1),
])
def test_unroll_factor_is_xlas(trip, size, factor):
    assert loop_unroll.unroll_factor(trip, size) == factor


def test_body_size_counts_values_and_charges_expensive_math():
    lines = ["i_3 = i_2 * 8",                                  # index arithmetic: XLA's apply_indexing, 0
             "off_2 = i_3 + B_c",
             "x = tl.load(p + off_2, mask=mask, other=0)",    # 1
             "y = libdevice.log(x)",                          # 20
             "z = tl.sqrt(y)",                                # cheap math: 1
             "w = tl.exp(z) + libdevice.tanh(z)",             # two expensive calls: 40
             "rr = zero + r",                                 # index: 0
             "up = acc.to(tl.float32)",                       # a 16-bit float's widening: 0 (XLA's loop is 16-bit)
             "k = tl.full([BLOCK], 2139095040, tl.uint32).to(tl.float32, bitcast=True)",  # a constant: 0
             "acc = w",                                       # a rename: 0
             "# a comment", ""]
    assert loop_unroll.body_size(lines) == 1 + 20 + 1 + 40


def test_unrolled_loop_headers():
    assert loop_unroll.unrolled_loop("it", "NIT", 8, 8) == (["for it in tl.static_range(0, NIT):"], "")
    assert loop_unroll.unrolled_loop("it", "NIT", 8, 1) == (["for it in range(0, NIT):"], "")
    head, extra = loop_unroll.unrolled_loop("it", "NIT", 14, 7)
    assert head == ["for it_o in range(0, NIT // 7):", "    for it_u in tl.static_range(0, 7):",
                    "        it = it_o * 7 + it_u"] and extra == "    "
    # a loop the rule leaves with more than 4 iterations keeps ptxas from unrolling it; a shorter one does not
    head, _ = loop_unroll.unrolled_loop("r", "31", 31, 1, keep=True)
    assert head[0] == "for r in range(0, 31):" and loop_unroll.NOUNROLL_ASM in head[1]
    head, _ = loop_unroll.unrolled_loop("r", "15", 15, 5, keep=True)
    assert head[0] == "for r_o in range(0, 3):" and not any("nounroll" in h for h in head)
    assert len(loop_unroll.unrolled_loop("r", "31", 31, 1)[0]) == 1


def test_only_named_math_functions_are_expensive_and_a_nested_loop_is_seen():
    assert loop_unroll.body_size(["x = tl.expand_dims(y, 1)", "z = libdevice.expm1(x)"]) == 1 + 20
    assert loop_unroll.holds_loop(["a = b + c", "    for k in range(0, 4):", "        a = a + k"])
    assert not loop_unroll.holds_loop(["a = b + c", "formula = a"])
