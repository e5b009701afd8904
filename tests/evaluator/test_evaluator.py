"""Reference evaluator (fusegen.evaluator): tricky HLO semantics, each expected value computed independently here
with plain numpy / Python formulas (never through the evaluator)."""

from __future__ import annotations

import math
import time
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fusegen.evaluator.evaluator import (
    UnsupportedOpError,
    evaluate_computation,
    evaluate_instruction,
    evaluate_module,
    supported_opcodes,
)
from fusegen.evaluator.shape_ops import ElidedConstantWarning
from fusegen.hlo.dot_numerics import tf32_round
from fusegen.hlo.parser import parse_file, parse_module

CORPUS = Path(__file__).parents[2].parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}")
BF16 = ml_dtypes.bfloat16


def run(text: str, *args):
    return evaluate_module(parse_module(text, "<test>"), list(args))


def binop(op: str, ty: str, n: int, extra: str = "") -> str:
    return f"""HloModule t
ENTRY e {{
  a = {ty}[{n}] parameter(0)
  b = {ty}[{n}] parameter(1)
  ROOT r = {ty}[{n}] {op}(a, b){extra}
}}"""


# ------------------------------------------------------------------------------------------ integer division


def _c_div(a: int, b: int, bits: int, signed: bool) -> int:
    if b == 0:
        return -1 if signed else (1 << bits) - 1
    if signed and a == -(1 << (bits - 1)) and b == -1:
        return a
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _c_rem(a: int, b: int, bits: int, signed: bool) -> int:
    if b == 0:
        return a
    if signed and a == -(1 << (bits - 1)) and b == -1:
        return 0
    return a - _c_div(a, b, bits, signed) * b


def test_signed_divide_and_remainder_edge_cases():
    imin = -(2**31)
    a = np.array([7, -7, 7, -7, 5, -5, imin, imin, 0, 3], dtype=np.int32)
    b = np.array([2, 2, -2, -2, 0, 0, -1, 1, 0, 7], dtype=np.int32)
    div = run(binop("divide", "s32", 10), a, b)
    rem = run(binop("remainder", "s32", 10), a, b)
    assert div.tolist() == [_c_div(int(x), int(y), 32, True) for x, y in zip(a, b)]
    assert rem.tolist() == [_c_rem(int(x), int(y), 32, True) for x, y in zip(a, b)]
    assert div.dtype == np.int32 and rem.dtype == np.int32


def test_unsigned_divide_by_zero_is_all_ones():
    a = np.array([9, 0, 200, 255], dtype=np.uint8)
    b = np.array([0, 0, 7, 16], dtype=np.uint8)
    assert run(binop("divide", "u8", 4), a, b).tolist() == [_c_div(int(x), int(y), 8, False) for x, y in zip(a, b)]
    assert run(binop("remainder", "u8", 4), a, b).tolist() == [_c_rem(int(x), int(y), 8, False) for x, y in zip(a, b)]


def test_float_remainder_has_sign_of_dividend():
    a = np.array([5.5, -5.5, 5.5, -5.5], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0], np.float32)
    r = run(binop("remainder", "f32", 4), a, b)
    assert r.tolist() == [math.fmod(float(x), float(y)) for x, y in zip(a, b)]


def test_integer_power():
    a = np.array([2, 3, -2, 1, -1, 2, 0, 5, -1, 0], np.int32)
    b = np.array([10, 3, 3, -5, -3, -1, 0, 14, -4, -2], np.int32)
    r = run(binop("power", "s32", 10), a, b)

    def ipow(x, y):
        if y < 0:  # XLA:CPU gives the same (tests/emitters/test_loop_emitter_gaps.py::test_integer_power asks it)
            return (-1 if y % 2 else 1) if x == -1 else int(x == 1)
        v = x**y % (1 << 32)
        return v - (1 << 32) if v >= (1 << 31) else v

    assert r.tolist() == [ipow(int(x), int(y)) for x, y in zip(a, b)]


def test_shifts_out_of_range():
    a = np.array([1, -8, -8, 0x40000000, -1, 5], np.int32)
    b = np.array([31, 1, 40, 2, 32, -1], np.int32)

    def sl(x, y):
        if not 0 <= y < 32:
            return 0
        v = (x << y) & 0xFFFFFFFF
        return v - (1 << 32) if v >= (1 << 31) else v

    def srl(x, y):
        if not 0 <= y < 32:
            return 0
        v = (x & 0xFFFFFFFF) >> y
        return v - (1 << 32) if v >= (1 << 31) else v

    def sra(x, y):
        if not 0 <= y < 32:
            return -1 if x < 0 else 0
        return x >> y

    assert run(binop("shift-left", "s32", 6), a, b).tolist() == [sl(int(x), int(y)) for x, y in zip(a, b)]
    assert run(binop("shift-right-logical", "s32", 6), a, b).tolist() == [srl(int(x), int(y)) for x, y in zip(a, b)]
    assert run(binop("shift-right-arithmetic", "s32", 6), a, b).tolist() == [sra(int(x), int(y)) for x, y in zip(a, b)]


# ------------------------------------------------------------------------------------------------ floats


def test_maximum_minimum_propagate_nan():
    a = np.array([np.nan, 1.0, 2.0, -np.inf], np.float32)
    b = np.array([1.0, np.nan, 3.0, 0.0], np.float32)
    mx = run(binop("maximum", "f32", 4), a, b)
    mn = run(binop("minimum", "f32", 4), a, b)
    assert np.isnan(mx[0]) and np.isnan(mx[1]) and mx[2] == 3.0 and mx[3] == 0.0
    assert np.isnan(mn[0]) and np.isnan(mn[1]) and mn[2] == 2.0 and mn[3] == -np.inf


def test_reduce_max_with_nan_is_nan():
    text = """HloModule t
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT m = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[2,5] parameter(0)
  init = f32[] constant(-inf)
  ROOT r = f32[2] reduce(x, init), dimensions={1}, to_apply=mx
}"""
    x = np.array([[1, 2, np.nan, 4, 0], [1, 9, 3, -1, 2]], np.float32)
    r = run(text, x)
    assert np.isnan(r[0]) and r[1] == 9.0


def test_convert_float_to_int_saturates_and_nan_is_zero():
    text = """HloModule t
ENTRY e {
  x = f32[8] parameter(0)
  ROOT r = s8[8] convert(x)
}"""
    x = np.array([np.nan, 1e10, -1e10, 127.9, -128.9, -3.7, 3.7, np.inf], np.float32)
    expect = [0 if math.isnan(v) else max(-128, min(127, math.trunc(v))) if math.isfinite(v) else 127 for v in x.tolist()]
    assert run(text, x).tolist() == expect


def test_convert_to_pred_and_u32():
    text = """HloModule t
ENTRY e {
  x = f32[5] parameter(0)
  p = pred[5] convert(x)
  u = u32[5] convert(x)
  ROOT r = (pred[5], u32[5]) tuple(p, u)
}"""
    x = np.array([0.0, -0.0, 0.5, -2.0, 5e9], np.float32)
    p, u = run(text, x)
    assert p.tolist() == [v != 0 for v in x]
    assert u.tolist() == [0, 0, 0, 0, 2**32 - 1]


def test_bf16_elementwise_computes_in_f32_then_rounds():
    text = """HloModule t
ENTRY e {
  a = bf16[3] parameter(0)
  b = bf16[3] parameter(1)
  s = bf16[3] add(a, b)
  m = bf16[3] multiply(s, b)
  ROOT r = bf16[3] exponential(m)
}"""
    a = np.array([1.0, 256.0, -3.5], BF16)
    b = np.array([0.00390625, 1.0, 0.1], BF16)
    s = (a.astype(np.float32) + b.astype(np.float32)).astype(BF16)
    m = (s.astype(np.float32) * b.astype(np.float32)).astype(BF16)
    with np.errstate(over="ignore"):
        expect = np.exp(m.astype(np.float32)).astype(BF16)  # exp(257) overflows to inf in f32 as well
    r = run(text, a, b)
    assert r.dtype == BF16
    assert r.view(np.uint16).tolist() == expect.view(np.uint16).tolist()


def test_round_modes_sign_and_is_finite():
    text = """HloModule t
ENTRY e {
  x = f32[7] parameter(0)
  a = f32[7] round-nearest-afz(x)
  n = f32[7] round-nearest-even(x)
  s = f32[7] sign(x)
  f = pred[7] is-finite(x)
  ROOT r = (f32[7], f32[7], f32[7], pred[7]) tuple(a, n, s, f)
}"""
    x = np.array([0.5, 1.5, 2.5, -0.5, -2.5, np.inf, -3.2], np.float32)
    a, n, s, f = run(text, x)
    afz = [math.copysign(math.floor(abs(v) + 0.5), v) if math.isfinite(v) else v for v in x.tolist()]
    assert a.tolist() == afz
    assert n.tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, np.inf, -3.0]
    assert s.tolist() == [1.0, 1.0, 1.0, -1.0, -1.0, 1.0, -1.0]
    assert f.tolist() == [math.isfinite(v) for v in x.tolist()]


def test_compare_totalorder():
    text = """HloModule t
ENTRY e {
  a = f32[4] parameter(0)
  b = f32[4] parameter(1)
  ROOT r = pred[4] compare(a, b), direction=LT, type=TOTALORDER
}"""
    a = np.array([-0.0, np.inf, -np.nan, 1.0], np.float32)
    b = np.array([0.0, np.nan, -np.inf, 1.0], np.float32)
    # total order: -NaN < -inf < ... < -0 < +0 < ... < inf < +NaN
    assert run(text, a, b).tolist() == [True, True, True, False]


def test_popcnt_clz():
    text = """HloModule t
ENTRY e {
  x = u32[5] parameter(0)
  p = u32[5] popcnt(x)
  c = u32[5] count-leading-zeros(x)
  ROOT r = (u32[5], u32[5]) tuple(p, c)
}"""
    x = np.array([0, 1, 0xFFFFFFFF, 0x00F0F000, 0x80000000], np.uint32)
    p, c = run(text, x)
    assert p.tolist() == [bin(int(v)).count("1") for v in x]
    assert c.tolist() == [32 - int(v).bit_length() for v in x]


def test_reduce_precision_matches_narrow_formats():
    rng = np.random.default_rng(1)
    x = (rng.standard_normal(1000) * 10).astype(np.float32)
    text = """HloModule t
ENTRY e {
  x = f32[1000] parameter(0)
  b = f32[1000] reduce-precision(x), exponent_bits=8, mantissa_bits=7
  h = f32[1000] reduce-precision(x), exponent_bits=5, mantissa_bits=10
  ROOT r = (f32[1000], f32[1000]) tuple(b, h)
}"""
    b, h = run(text, x)
    assert np.array_equal(b, x.astype(BF16).astype(np.float32))
    normal = np.abs(x) >= 2.0**-14
    assert np.array_equal(h[normal], x[normal].astype(np.float16).astype(np.float32))
    big = np.array([1e6, -1e6, 1e-9], np.float32)
    text2 = text.replace("1000", "3")
    _, h2 = run(text2, big)
    assert h2.tolist() == [np.inf, -np.inf, 0.0]  # overflow to inf, below f16's normal range to zero


def test_bitcast_convert_width_changes():
    text = """HloModule t
ENTRY e {
  x = f32[2] parameter(0)
  n = u16[2,2] bitcast-convert(x)
  ROOT w = f32[2] bitcast-convert(n)
}"""
    x = np.array([1.0, -2.5], np.float32)
    m = parse_module(text)
    comp = m.entry
    n = evaluate_instruction(comp.instruction("n"), [x])
    bits = [int(v) for v in x.view(np.uint32)]
    assert n.tolist() == [[b & 0xFFFF, b >> 16] for b in bits]  # little-endian: low half first
    assert evaluate_module(m, [x]).tolist() == x.tolist()


# ----------------------------------------------------------------------------------------- shape ops


def test_dynamic_update_slice_clamps_start_indices():
    text = """HloModule t
ENTRY e {
  x = s32[6,4] parameter(0)
  u = s32[2,3] parameter(1)
  i = s32[] parameter(2)
  j = s32[] parameter(3)
  ROOT r = s32[6,4] dynamic-update-slice(x, u, i, j)
}"""
    x = np.arange(24, dtype=np.int32).reshape(6, 4)
    u = -np.arange(1, 7, dtype=np.int32).reshape(2, 3)
    for i, j in [(5, 3), (-4, -1), (2, 1), (100, 0)]:
        ci, cj = min(max(i, 0), 6 - 2), min(max(j, 0), 4 - 3)
        expect = x.copy()
        expect[ci:ci + 2, cj:cj + 3] = u
        got = run(text, x, u, np.int32(i), np.int32(j))
        assert got.tolist() == expect.tolist(), (i, j)
    assert x.tolist() == np.arange(24).reshape(6, 4).tolist()  # the operand is not modified in place


def test_dynamic_slice_clamps_start_indices():
    text = """HloModule t
ENTRY e {
  x = f32[5,5] parameter(0)
  i = s64[] parameter(1)
  j = s64[] parameter(2)
  ROOT r = f32[3,2] dynamic-slice(x, i, j), dynamic_slice_sizes={3,2}
}"""
    x = np.arange(25, dtype=np.float32).reshape(5, 5)
    for i, j in [(4, 4), (-1, 2), (1, 1)]:
        ci, cj = min(max(i, 0), 2), min(max(j, 0), 3)
        assert run(text, x, np.int64(i), np.int64(j)).tolist() == x[ci:ci + 3, cj:cj + 2].tolist()


def test_pad_negative_and_interior():
    text = """HloModule t
ENTRY e {
  x = f32[3,4] parameter(0)
  z = f32[] constant(-1)
  ROOT r = f32[6,5] pad(x, z), padding=1_0_1x-2_1_1
}"""
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    # dim 0: low 1, interior 1 -> size 1 + 5 = 6; dim 1: interior 1 gives 7, crop 2 low, add 1 high -> 6? no: 7-2+1=6
    r = run(text.replace("f32[6,5] pad", "f32[6,6] pad"), x)
    rows = [None] + [0, None, 1, None, 2]
    cols_full = [0, None, 1, None, 2, None, 3][2:] + [None]
    expect = [[-1.0 if (ri is None or ci is None) else float(x[ri, ci]) for ci in cols_full] for ri in rows]
    assert r.tolist() == expect


def test_bitcast_follows_layouts():
    text = """HloModule t
ENTRY e {
  x = f32[2,3]{0,1} parameter(0)
  ROOT r = f32[3,2]{1,0} bitcast(x)
}"""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    # column-major [2,3] holds x[0,0], x[1,0], x[0,1], ... : read back row-major as [3,2] it is x transposed
    assert run(text, x).tolist() == x.T.tolist()


def test_broadcast_transpose_reverse_iota():
    text = """HloModule t
ENTRY e {
  x = f32[2,3] parameter(0)
  b = f32[3,4,2] broadcast(x), dimensions={2,0}
  t = f32[2,3,4] transpose(b), dimensions={2,0,1}
  v = f32[2,3,4] reverse(t), dimensions={0,2}
  i = s32[2,3,4] iota(), iota_dimension=2
  ROOT r = (f32[2,3,4], s32[2,3,4]) tuple(v, i)
}"""
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    v, i = run(text, x)
    for p in range(2):
        for q in range(3):
            for s in range(4):
                # b[a, k, c] = x[c, a]; t[p, q, s] = b[q, s, p]; v = t reversed on dims 0, 2
                assert v[p, q, s] == x[1 - p, q]
                assert i[p, q, s] == s


def test_elided_constant_is_deterministic_and_warns():
    text = """HloModule t
ENTRY e {
  ROOT c = f32[4,4] constant({...})
}"""
    with pytest.warns(ElidedConstantWarning, match="%c"):
        a = run(text)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = run(text)
    assert a.shape == (4, 4) and np.array_equal(a, b) and np.unique(a).size > 1


# --------------------------------------------------------------------------------------- scatter / gather


SCATTER = """HloModule t
comb {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] COMBINER(a, b)
}
ENTRY e {
  x = f32[5,3] parameter(0)
  idx = s32[4,1] parameter(1)
  upd = f32[4,2,3] parameter(2)
  ROOT r = f32[5,3] scatter(x, idx, upd), update_window_dims={1,2}, inserted_window_dims={},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=comb
}"""


@pytest.mark.parametrize("combiner", ["add", "multiply", "subtract"])
def test_scatter_skips_out_of_bounds_windows(combiner):
    x = np.arange(15, dtype=np.float32).reshape(5, 3)
    idx = np.array([[0], [4], [-1], [3]], np.int32)  # 4 and -1: the 2-row window does not fit -> skipped whole
    upd = (np.arange(24, dtype=np.float32).reshape(4, 2, 3) + 1) / 4
    f = {"add": lambda a, b: a + b, "multiply": lambda a, b: a * b, "subtract": lambda a, b: a - b}[combiner]
    expect = x.copy()
    for k in range(4):
        s = int(idx[k, 0])
        if 0 <= s <= 5 - 2:
            for r in range(2):
                for c in range(3):
                    expect[s + r, c] = f(expect[s + r, c], upd[k, r, c])
    got = run(SCATTER.replace("COMBINER", combiner), x, idx, upd)
    np.testing.assert_allclose(got, expect, rtol=1e-6)


def test_scatter_duplicate_indices_accumulate():
    text = """HloModule t
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] add(a, b)
}
ENTRY e {
  t = f32[4,2] parameter(0)
  ids = s32[6,1] parameter(1)
  u = f32[6,2] parameter(2)
  ROOT r = f32[4,2] scatter(t, ids, u), update_window_dims={1}, inserted_window_dims={0},
    scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=add
}"""
    t = np.zeros((4, 2), np.float32)
    ids = np.array([[1], [1], [3], [7], [1], [0]], np.int32)
    u = np.ones((6, 2), np.float32)
    expect = np.zeros((4, 2))
    for k, i in enumerate(ids[:, 0]):
        if 0 <= i < 4:
            expect[i] += u[k]
    assert run(text, t, ids, u).tolist() == expect.tolist()


def test_gather_rows_with_clamping():
    text = """HloModule t
ENTRY e {
  x = f32[6,4] parameter(0)
  i = s32[3,1] parameter(1)
  ROOT g = f32[3,2,4] gather(x, i), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0},
    index_vector_dim=1, slice_sizes={2,4}
}"""
    x = np.arange(24, dtype=np.float32).reshape(6, 4)
    i = np.array([[0], [5], [-3]], np.int32)
    expect = [x[min(max(int(s), 0), 4): min(max(int(s), 0), 4) + 2].tolist() for s in i[:, 0]]
    assert run(text, x, i).tolist() == expect


def test_gather_embedding_lookup():
    text = """HloModule t
ENTRY e {
  emb = f32[10,3] parameter(0)
  tok = s32[2,4] parameter(1)
  ROOT g = f32[2,4,3] gather(emb, tok), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0},
    index_vector_dim=2, slice_sizes={1,3}
}"""
    emb = np.random.default_rng(0).standard_normal((10, 3)).astype(np.float32)
    tok = np.array([[0, 9, 3, 3], [1, 2, 8, 4]], np.int32)
    assert np.array_equal(run(text, emb, tok), emb[tok])


# ------------------------------------------------------------------------------------------------- sort


SORT = """HloModule t
cmp {
  a = KT[] parameter(0)
  b = KT[] parameter(1)
  c = s32[] parameter(2)
  d = s32[] parameter(3)
  ROOT r = pred[] compare(a, b), direction=DIR
}
ENTRY e {
  k = KT[2,8] parameter(0)
  v = s32[2,8] iota(), iota_dimension=1
  ROOT s = (KT[2,8], s32[2,8]) sort(k, v), dimensions={1}, is_stable=true, to_apply=cmp
}"""


@pytest.mark.parametrize("direction", ["LT", "GT"])
def test_stable_sort_keeps_equal_keys_in_order(direction):
    keys = np.array([[3, 1, 3, 2, 1, 3, 0, 2], [5, 5, 5, 5, 4, 4, 6, 6]], np.int32)
    ks, vs = run(SORT.replace("KT", "s32").replace("DIR", direction), keys)
    for row in range(2):
        items = list(zip(keys[row].tolist(), range(8)))
        ordered = sorted(items, key=lambda t: (-t[0] if direction == "GT" else t[0]))  # Python's sort is stable
        assert ks[row].tolist() == [k for k, _ in ordered]
        assert vs[row].tolist() == [i for _, i in ordered]


def test_sort_with_general_comparator():
    # descending by |key| via a comparator that is not a plain parameter compare: takes the cmp_to_key path
    text = """HloModule t
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  aa = f32[] abs(a)
  ab = f32[] abs(b)
  ROOT r = pred[] compare(aa, ab), direction=GT
}
ENTRY e {
  k = f32[7] parameter(0)
  ROOT s = f32[7] sort(k), dimensions={0}, is_stable=true, to_apply=cmp
}"""
    k = np.array([1.0, -3.0, 2.0, 3.0, -1.0, 0.5, -2.0], np.float32)
    expect = sorted(k.tolist(), key=lambda v: -abs(v))
    assert run(text, k).tolist() == expect


# ------------------------------------------------------------------------------------ reduce / windows


def test_variadic_argmax_reduce():
    text = """HloModule t
argmax {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(av, bv), direction=GT
  eq = pred[] compare(av, bv), direction=EQ
  lt = pred[] compare(ai, bi), direction=LT
  tie = pred[] and(eq, lt)
  take_a = pred[] or(gt, tie)
  v = f32[] select(take_a, av, bv)
  i = s32[] select(take_a, ai, bi)
  ROOT r = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  x = f32[3,37] parameter(0)
  ix = s32[3,37] iota(), iota_dimension=1
  ninf = f32[] constant(-inf)
  zero = s32[] constant(0)
  ROOT r = (f32[3], s32[3]) reduce(x, ix, ninf, zero), dimensions={1}, to_apply=argmax
}"""
    x = np.random.default_rng(3).integers(0, 5, (3, 37)).astype(np.float32)  # many ties
    v, i = run(text, x)
    assert v.tolist() == x.max(axis=1).tolist()
    assert i.tolist() == [int(np.argmax(r)) for r in x]  # first maximum wins


def test_reduce_multiple_dims_and_int_wraparound():
    text = """HloModule t
add {
  a = s8[] parameter(0)
  b = s8[] parameter(1)
  ROOT c = s8[] add(a, b)
}
ENTRY e {
  x = s8[3,4,5] parameter(0)
  z = s8[] constant(1)
  ROOT r = s8[4] reduce(x, z), dimensions={0,2}, to_apply=add
}"""
    x = np.random.default_rng(0).integers(-128, 128, (3, 4, 5)).astype(np.int8)
    expect = [((int(x[:, j, :].astype(np.int64).sum()) + 1 + 128) % 256) - 128 for j in range(4)]
    assert run(text, x).tolist() == expect


def test_reduce_window_with_padding_stride_and_dilation():
    text = """HloModule t
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = f32[] maximum(a, b)
}
ENTRY e {
  x = f32[7,6] parameter(0)
  init = f32[] constant(-inf)
  ROOT r = f32[4,3] reduce-window(x, init), window={size=3x2 stride=2x2 pad=1_1x0_1 rhs_dilate=1x2}, to_apply=mx
}"""
    x = np.random.default_rng(5).standard_normal((7, 6)).astype(np.float32)
    xp = np.full((9, 7), -np.inf, np.float32)
    xp[1:8, 0:6] = x
    expect = np.empty((4, 3), np.float32)
    for i in range(4):
        for j in range(3):
            expect[i, j] = max(xp[2 * i + a, 2 * j + 2 * b] for a in range(3) for b in range(2))
    assert np.array_equal(run(text, x), expect)


def test_reduce_window_cumulative_sum():
    text = """HloModule t
add {
  a = s32[] parameter(0)
  b = s32[] parameter(1)
  ROOT c = s32[] add(a, b)
}
ENTRY e {
  x = s32[10] parameter(0)
  z = s32[] constant(0)
  ROOT r = s32[10] reduce-window(x, z), window={size=10 pad=9_0}, to_apply=add
}"""
    x = np.arange(10, dtype=np.int32) * 3 - 7
    assert run(text, x).tolist() == np.cumsum(x.astype(np.int64)).tolist()


# -------------------------------------------------------------------------------------- dot / convolution


def test_dot_batch_and_contracting_dims_in_any_order():
    text = """HloModule t
ENTRY e {
  a = f32[3,4,2,5] parameter(0)
  b = f32[5,2,6,4] parameter(1)
  ROOT d = f32[2,4,3,6] dot(a, b), lhs_batch_dims={2,1}, rhs_batch_dims={1,3}, lhs_contracting_dims={3},
    rhs_contracting_dims={0}
}"""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((3, 4, 2, 5)).astype(np.float32)
    b = rng.standard_normal((5, 2, 6, 4)).astype(np.float32)
    # a default-precision f32 dot runs at tf32 (XLA:GPU): operands rounded with cvt.rna, products summed in f32
    ta, tb = (tf32_round(x).astype(np.float64) for x in (a, b))
    expect = np.einsum("mqpk,kpnq->pqmn", ta, tb)
    np.testing.assert_allclose(run(text, a, b), expect, rtol=1e-5, atol=1e-5)
    highest = text.replace("rhs_contracting_dims={0}", "rhs_contracting_dims={0}, operand_precision={highest,highest}")
    expect = np.einsum("mqpk,kpnq->pqmn", a.astype(np.float64), b.astype(np.float64))
    np.testing.assert_allclose(run(highest, a, b), expect, rtol=1e-5, atol=1e-5)


def test_bf16_dot_accumulates_in_f32():
    text = """HloModule t
ENTRY e {
  a = bf16[1,512] parameter(0)
  b = bf16[512,1] parameter(1)
  ROOT d = bf16[1,1] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    a = np.full((1, 512), 1.0, BF16)
    b = np.full((512, 1), 1.0 / 256, BF16)
    b[0, 0] = 256.0  # a bf16 accumulator would stall at 256 + k/256 ... ; f32 gets 256 + 511/256
    r = run(text, a, b)
    assert float(r[0, 0]) == float(BF16(256.0 + 511 / 256))


def _naive_conv(x, w, stride, pad, lhs_dil, rhs_dil, groups):
    """NHWC x HWIO -> NHWC, written with explicit loops."""
    n, h, wd, c = x.shape
    kh, kw, ci, o = w.shape
    xd = np.zeros((n, (h - 1) * lhs_dil[0] + 1, (wd - 1) * lhs_dil[1] + 1, c), np.float64)
    xd[:, ::lhs_dil[0], ::lhs_dil[1]] = x
    xp = np.zeros((n, xd.shape[1] + pad[0][0] + pad[0][1], xd.shape[2] + pad[1][0] + pad[1][1], c), np.float64)
    xp[:, pad[0][0]:pad[0][0] + xd.shape[1], pad[1][0]:pad[1][0] + xd.shape[2]] = xd
    ekh, ekw = (kh - 1) * rhs_dil[0] + 1, (kw - 1) * rhs_dil[1] + 1
    oh = (xp.shape[1] - ekh) // stride[0] + 1
    ow = (xp.shape[2] - ekw) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, oh, ow, o))
    for b in range(n):
        for i in range(oh):
            for j in range(ow):
                for f in range(o):
                    g = f // og
                    acc = 0.0
                    for p in range(kh):
                        for q in range(kw):
                            for k in range(ci):
                                acc += xp[b, i * stride[0] + p * rhs_dil[0], j * stride[1] + q * rhs_dil[1],
                                          g * ci + k] * w[p, q, k, f]
                    out[b, i, j, f] = acc
    return out


@pytest.mark.parametrize("groups", [1, 2])
def test_convolution_window_and_groups(groups):
    rng = np.random.default_rng(groups)
    x = rng.standard_normal((2, 5, 6, 4)).astype(np.float32)
    w = rng.standard_normal((3, 2, 4 // groups, 6)).astype(np.float32)
    expect = _naive_conv(x, w, (2, 1), ((1, 2), (0, 1)), (1, 2), (1, 2), groups)
    oh, ow = expect.shape[1:3]
    text = f"""HloModule t
ENTRY e {{
  x = f32[2,5,6,4] parameter(0)
  w = f32[3,2,{4 // groups},6] parameter(1)
  ROOT c = f32[2,{oh},{ow},6] convolution(x, w), window={{size=3x2 stride=2x1 pad=1_2x0_1 lhs_dilate=1x2 rhs_dilate=1x2}},
    dim_labels=b01f_01io->b01f, feature_group_count={groups}
}}"""
    np.testing.assert_allclose(run(text, x, w), expect, rtol=1e-4, atol=1e-4)


def test_convolution_nchw_output_labels():
    rng = np.random.default_rng(7)
    x = rng.standard_normal((1, 3, 4, 4)).astype(np.float32)  # NCHW
    w = rng.standard_normal((5, 3, 3, 3)).astype(np.float32)  # OIHW
    text = """HloModule t
ENTRY e {
  x = f32[1,3,4,4] parameter(0)
  w = f32[5,3,3,3] parameter(1)
  ROOT c = f32[1,5,4,4] convolution(x, w), window={size=3x3 pad=1_1x1_1}, dim_labels=bf01_oi01->bf01
}"""
    expect = _naive_conv(x.transpose(0, 2, 3, 1), w.transpose(2, 3, 1, 0), (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1)
    np.testing.assert_allclose(run(text, x, w), expect.transpose(0, 3, 1, 2), rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------------------------------ control flow


def test_while_loop_and_conditional():
    text = """HloModule t
cond {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(5)
  ROOT lt = pred[] compare(i, n), direction=LT
}
body {
  p = (s32[], f32[3]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  v = f32[3] get-tuple-element(p), index=1
  one = s32[] constant(1)
  two = f32[] constant(2)
  b = f32[3] broadcast(two), dimensions={}
  i2 = s32[] add(i, one)
  v2 = f32[3] multiply(v, b)
  ROOT t = (s32[], f32[3]) tuple(i2, v2)
}
neg {
  x = f32[3] parameter(0)
  ROOT n = f32[3] negate(x)
}
ident {
  x = f32[3] parameter(0)
  ROOT c = f32[3] copy(x)
}
sq {
  x = f32[3] parameter(0)
  ROOT m = f32[3] multiply(x, x)
}
ENTRY e {
  x = f32[3] parameter(0)
  k = s32[] parameter(1)
  z = s32[] constant(0)
  init = (s32[], f32[3]) tuple(z, x)
  w = (s32[], f32[3]) while(init), condition=cond, body=body
  v = f32[3] get-tuple-element(w), index=1
  ROOT c = f32[3] conditional(k, v, v, v), branch_computations={neg, ident, sq}
}"""
    x = np.array([1.0, -2.0, 0.5], np.float32)
    v = x * 2**5
    assert run(text, x, np.int32(0)).tolist() == (-v).tolist()
    assert run(text, x, np.int32(1)).tolist() == v.tolist()
    assert run(text, x, np.int32(7)).tolist() == (v * v).tolist()  # out of range -> last branch
    assert run(text, x, np.int32(-1)).tolist() == (v * v).tolist()


def test_pred_conditional_and_map():
    text = """HloModule t
f {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  m = f32[] multiply(a, b)
  ROOT s = f32[] subtract(m, a)
}
tb {
  x = f32[4] parameter(0)
  ROOT y = f32[4] map(x, x), dimensions={0}, to_apply=f
}
fb {
  x = f32[4] parameter(0)
  ROOT y = f32[4] abs(x)
}
ENTRY e {
  p = pred[] parameter(0)
  x = f32[4] parameter(1)
  ROOT c = f32[4] conditional(p, x, x), branch_computations={tb, fb}
}"""
    x = np.array([1.0, -2.0, 3.0, 0.5], np.float32)
    assert run(text, np.bool_(True), x).tolist() == [v * v - v for v in x.tolist()]
    assert run(text, np.bool_(False), x).tolist() == [abs(v) for v in x.tolist()]


def test_fusion_call_async_and_copy_start():
    text = """HloModule t
fused {
  p0 = f32[4] parameter(0)
  p1 = f32[4] parameter(1)
  ROOT a = f32[4] add(p0, p1)
}
callee {
  q = f32[4] parameter(0)
  ROOT n = f32[4] negate(q)
}
ENTRY e {
  x = f32[4] parameter(0)
  y = f32[4] parameter(1)
  f = f32[4] fusion(x, y), kind=kLoop, calls=fused
  s = ((f32[4]), f32[4], s32[]) async-start(f), calls=callee
  d = f32[4] async-done(s)
  cs = (f32[4], f32[4], u32[]) copy-start(d)
  cd = f32[4] copy-done(cs)
  ROOT o = f32[4] opt-barrier(cd)
}"""
    x = np.arange(4, dtype=np.float32)
    y = np.ones(4, np.float32)
    assert run(text, x, y).tolist() == (-(x + y)).tolist()


# ------------------------------------------------------------------------------------------ custom calls


def _gelu_tanh(v):
    return 0.5 * v * (1 + math.tanh(math.sqrt(2 / math.pi) * (v + 0.044715 * v**3)))


def test_cublas_lt_bias_gelu_epilogue_and_workspace():
    cfg = ('{"gemm_backend_config":{"alpha_real":0.5,"beta":0,"dot_dimension_numbers":{"lhs_contracting_dimensions":'
           '["1"],"rhs_contracting_dimensions":["0"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},'
           '"alpha_imag":0,"epilogue":"BIAS_GELU"}}')
    text = f"""HloModule t
ENTRY e {{
  x = f32[3,4] parameter(0)
  w = f32[4,5] parameter(1)
  b = f32[5] parameter(2)
  g = (f32[3,5], s8[64]) custom-call(x, w, b), custom_call_target="__cublas$lt$matmul", backend_config={cfg}
  r = f32[3,5] get-tuple-element(g), index=0
  ws = s8[64] get-tuple-element(g), index=1
  ROOT t = (f32[3,5], s8[64]) tuple(r, ws)
}}"""
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in [(3, 4), (4, 5), (5,)])
    r, ws = run(text, x, w, b)
    tx, tw = tf32_round(x), tf32_round(w)  # no precision_config: DEFAULT, which cuBLAS computes at tf32
    expect = [[_gelu_tanh(0.5 * sum(float(tx[i, k]) * float(tw[k, j]) for k in range(4)) + float(b[j]))
               for j in range(5)] for i in range(3)]
    np.testing.assert_allclose(r, expect, rtol=1e-5, atol=1e-5)
    assert ws.dtype == np.int8 and not ws.any()


def test_cublas_gemm_beta_uses_c_operand():
    cfg = ('{"gemm_backend_config":{"alpha_real":2,"beta":-1,"dot_dimension_numbers":{"lhs_contracting_dimensions":'
           '["0"],"rhs_contracting_dimensions":["1"],"lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},'
           '"epilogue":"RELU"}}')
    text = f"""HloModule t
ENTRY e {{
  a = f32[4,3] parameter(0)
  b = f32[2,4] parameter(1)
  c = f32[3,2] parameter(2)
  ROOT g = f32[3,2] custom-call(a, b, c), custom_call_target="__cublas$gemm", backend_config={cfg}
}}"""
    rng = np.random.default_rng(1)
    a, b, c = (rng.standard_normal(s).astype(np.float32) for s in [(4, 3), (2, 4), (3, 2)])
    ta, tb = (tf32_round(v).astype(np.float64) for v in (a, b))  # DEFAULT precision: tf32 (XLA's cuBLAS)
    np.testing.assert_allclose(run(text, a, b, c), np.maximum(2 * (ta.T @ tb.T) - c, 0), rtol=1e-5, atol=1e-5)
    highest = text.replace('"epilogue":"RELU"', '"epilogue":"RELU","precision_config":{"operand_precision":'
                                                '["HIGHEST","HIGHEST"],"algorithm":"ALG_UNSET"}')
    expect = np.maximum(2 * (a.astype(np.float64).T @ b.astype(np.float64).T) - c, 0)
    np.testing.assert_allclose(run(highest, a, b, c), expect, rtol=1e-5, atol=1e-5)


def test_cudnn_conv_bias_relu():
    cfg = ('{"cudnn_conv_backend_config":{"activation_mode":"kRelu","conv_result_scale":1.5,"side_input_scale":0.5,'
           '"leakyrelu_alpha":0}}')
    text = f"""HloModule t
ENTRY e {{
  x = f32[1,4,4,2] parameter(0)
  w = f32[3,3,2,3] parameter(1)
  b = f32[3] parameter(2)
  s = f32[1,4,4,3] parameter(3)
  c = (f32[1,4,4,3], u8[0]) custom-call(x, w, b, s), window={{size=3x3 pad=1_1x1_1}}, dim_labels=b01f_01io->b01f,
    custom_call_target="__cudnn$convBiasActivationForward", backend_config={cfg}
  ROOT r = f32[1,4,4,3] get-tuple-element(c), index=0
}}"""
    rng = np.random.default_rng(2)
    x, w, b, s = (rng.standard_normal(sh).astype(np.float32) for sh in [(1, 4, 4, 2), (3, 3, 2, 3), (3,), (1, 4, 4, 3)])
    conv = _naive_conv(x, w, (1, 1), ((1, 1), (1, 1)), (1, 1), (1, 1), 1)
    expect = np.maximum(1.5 * conv + 0.5 * s + b.reshape(1, 1, 1, 3), 0)
    np.testing.assert_allclose(run(text, x, w, b, s), expect, rtol=1e-4, atol=1e-4)


def test_cudnn_layer_norm_custom_call():
    cfg = '{"cudnn_norm_backend_config":{"epsilon":0.001,"kind":"LAYER_FWD_TRAIN"}}'
    text = f"""HloModule t
ENTRY e {{
  x = f32[2,3,4,1] parameter(0)
  s = f32[1,1,4,1] parameter(1)
  b = f32[1,1,4,1] parameter(2)
  n = (f32[2,3,4,1], f32[2,3,1,1], f32[2,3,1,1], s8[16]) custom-call(x, s, b), custom_call_target="__cudnn$norm",
    backend_config={cfg}
  y = f32[2,3,4,1] get-tuple-element(n), index=0
  m = f32[2,3,1,1] get-tuple-element(n), index=1
  v = f32[2,3,1,1] get-tuple-element(n), index=2
  ROOT r = (f32[2,3,4,1], f32[2,3,1,1], f32[2,3,1,1]) tuple(y, m, v)
}}"""
    rng = np.random.default_rng(9)
    x, sc, bi = (rng.standard_normal(sh).astype(np.float32) for sh in [(2, 3, 4, 1), (1, 1, 4, 1), (1, 1, 4, 1)])
    y, mean, inv = run(text, x, sc, bi)
    for i in range(2):
        for j in range(3):
            row = [float(v) for v in x[i, j, :, 0]]
            mu = sum(row) / 4
            var = sum((v - mu) ** 2 for v in row) / 4
            r = 1 / math.sqrt(var + 1e-3)
            assert mean[i, j, 0, 0] == pytest.approx(mu, rel=1e-5, abs=1e-6)
            assert inv[i, j, 0, 0] == pytest.approx(r, rel=1e-5)
            for k in range(4):
                assert y[i, j, k, 0] == pytest.approx((row[k] - mu) * r * sc[0, 0, k, 0] + bi[0, 0, k, 0], rel=1e-4,
                                                      abs=1e-5)


def test_gpu_topk_custom_call():
    text = """HloModule t
ENTRY e {
  x = f32[2,6] parameter(0)
  ROOT t = (f32[2,3], s32[2,3]) custom-call(x), custom_call_target="__gpu$TopK"
}"""
    x = np.array([[1, 5, 3, 5, 0, 2], [-1, -2, -3, 4, 4, 4]], np.float32)
    v, i = run(text, x)
    for r in range(2):
        order = sorted(range(6), key=lambda k: (-x[r, k], k))[:3]
        assert i[r].tolist() == order and v[r].tolist() == [x[r, k] for k in order]


# ------------------------------------------------------------------------------------------- errors / API


def test_unsupported_opcode_error_names_op_and_instruction():
    text = """HloModule t
ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = f32[4] rng(x, x), distribution=rng_uniform
}"""
    with pytest.raises(UnsupportedOpError, match=r"^fusegen has no implementation of HLO op 'rng' \(instruction %c, "
                                                 r"computation %main, line 4\)$"):
        run(text, np.ones(4, np.float32))


def test_unsupported_custom_call_names_target():
    text = """HloModule t
ENTRY main {
  x = f32[4] parameter(0)
  ROOT c = f32[4] custom-call(x), custom_call_target="my_kernel"
}"""
    with pytest.raises(UnsupportedOpError, match=r"of custom-call target 'my_kernel' \(instruction %c,") as ei:
        run(text, np.ones(4, np.float32))
    assert ei.value.target == "my_kernel" and ei.value.instruction == "c"


def test_evaluate_computation_and_instruction_api():
    m = parse_module(binop("add", "f32", 3))
    a, b = np.ones(3, np.float32), np.arange(3, dtype=np.float32)
    assert evaluate_computation(m.entry, [a, b]).tolist() == [1.0, 2.0, 3.0]
    assert evaluate_instruction(m.entry.root, [a, b]).tolist() == [1.0, 2.0, 3.0]
    assert {"add", "scatter", "custom-call", "while", "convolution"} <= supported_opcodes()


@needs_corpus
def test_every_corpus_opcode_is_supported():
    from fusegen.hlo.parser import parse_modules

    seen: set[str] = set()
    for f in sorted(CORPUS.rglob("*.hlo")):
        if f.name in ("B01.hlo", "B02.hlo") or f.parent.name == "hostile":  # refused on purpose
            continue
        for m in parse_modules(f.read_text(), str(f)):
            seen.update(i.opcode for i in m.all_instructions())
    assert seen - supported_opcodes() == set()


@needs_corpus
def test_gpt12_module_evaluates_in_seconds():
    m = parse_file(CORPUS / "jax" / "gpt12.h200_opt.hlo")
    rng = np.random.default_rng(0)
    args = []
    for p in m.entry.parameters:
        if p.shape.element_type == "s32":
            args.append(rng.integers(0, 8192, p.shape.dimensions).astype(np.int32))
        else:
            args.append((rng.standard_normal(p.shape.dimensions) * 0.05).astype(np.float32).astype(BF16))
    t0 = time.perf_counter()
    out = evaluate_module(m, args)
    elapsed = time.perf_counter() - t0
    logits = np.asarray(out, np.float32)
    assert logits.shape == (4, 128, 8192) and np.isfinite(logits).all()
    # logits of different tokens differ (the embedding gather and the layers were applied)
    assert not np.allclose(logits[0, 0], logits[0, 1])
    assert elapsed < 120, f"gpt12 took {elapsed:.1f}s"  # ~5 s on 2 idle cores, 90% of it in the GEMMs
