"""Triton's interpreter computes ``tl.dot`` as the GPU does (:func:`fusegen.codegen.interpreter_patches.patch_dot`):
bf16/fp8 operands by value (Triton 3.9 multiplies bf16's raw uint16 bits), f32 operands of a tf32 dot truncated to
tf32 as the tensor core reads them, and XLA's ``cvt.rna.tf32.f32`` rounding; checked against float64 numpy."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from fusegen.codegen import triton_runtime
from fusegen.hlo.dot_numerics import tf32_round, tf32_truncate
from fusegen.codegen.kernel import KernelParam, KernelSource, LaunchDimensions
from fusegen.hlo.ir import Shape

_SRC = """\
import triton
import triton.language as tl


@triton.jit
def dot_kernel(a, b, c, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):
    rm = tl.arange(0, M)
    rn = tl.arange(0, N)
    rk = tl.arange(0, K)
    x = tl.load(a + rm[:, None] * K + rk[None, :])
    y = tl.load(b + rk[:, None] * N + rn[None, :])
{prep}    acc = tl.full([M, N], {init}, {acc})
    acc = tl.dot(x, y, acc, out_dtype={acc}{extra})
    tl.store(c + rm[:, None] * N + rn[None, :], acc)
"""

_RNA = '''    x = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
    y = tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [y], dtype=tl.float32, is_pure=True, pack=1)
'''


def _run(et_a: str, et_b: str, acc_et: str, a: np.ndarray, b: np.ndarray, init: float = 0.0, extra: str = "",
         prep: str = "") -> np.ndarray:
    from fusegen.hlo import dtypes

    (m, k), n = a.shape, b.shape[1]
    acc_tl = {"f32": "tl.float32", "s32": "tl.int32", "f16": "tl.float16"}[acc_et]
    src = _SRC.format(acc=acc_tl, init=init if acc_et != "s32" else int(init), extra=extra, prep=prep)
    ks = KernelSource(name="dot_kernel", source=src, entry="dot_kernel",
                      params=(KernelParam("operand", 0, Shape(et_a, (m, k))), KernelParam("operand", 1, Shape(et_b, (k, n))),
                              KernelParam("output", 0, Shape(acc_et, (m, n)))),
                      constexprs={"M": m, "N": n, "K": k}, launch=LaunchDimensions((1,)))
    out = np.zeros(m * n, dtype=dtypes.numpy_dtype(acc_et))
    triton_runtime.run_interpreted(ks, [triton_runtime.to_storage(a.reshape(-1), et_a),
                                        triton_runtime.to_storage(b.reshape(-1), et_b), out])
    return out.reshape(m, n)


def _values(et: str, shape: tuple[int, int], seed: int) -> np.ndarray:
    from fusegen.hlo import dtypes

    rng = np.random.default_rng(seed)
    if et == "s8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    return (rng.standard_normal(shape) * 2).astype(dtypes.numpy_dtype(et))


@pytest.mark.parametrize("et_a,et_b", [("bf16", "bf16"), ("f16", "f16"), ("f8e4m3fn", "f8e4m3fn"),
                                       ("f8e5m2", "f8e5m2"), ("f8e4m3fn", "f8e5m2")])
def test_narrow_float_dot_multiplies_values_not_bits(et_a, et_b):
    # M=16, N=8: XLA's smallest tile, which Triton 3.9 takes for tl.dot as it is
    a, b = _values(et_a, (16, 32), 1), _values(et_b, (32, 8), 2)
    got = _run(et_a, et_b, "f32", a, b, init=0.5)
    want = a.astype(np.float64) @ b.astype(np.float64) + 0.5  # every product is exact in f32; sums of 32 terms
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)


def test_int8_dot_accumulates_in_s32():
    a, b = _values("s8", (16, 64), 3), _values("s8", (64, 16), 4)
    got = _run("s8", "s8", "s32", a, b, init=7)
    np.testing.assert_array_equal(got, a.astype(np.int64) @ b.astype(np.int64) + 7)


def test_f32_dot_ieee_is_full_precision_and_tf32_truncates_the_operands():
    a, b = _values("f32", (16, 16), 5), _values("f32", (16, 16), 6)
    ieee = _run("f32", "f32", "f32", a, b, extra=', input_precision="ieee"')
    np.testing.assert_allclose(ieee, a.astype(np.float64) @ b.astype(np.float64), rtol=1e-6, atol=1e-5)
    tf32 = _run("f32", "f32", "f32", a, b, extra=', input_precision="tf32"')
    want = tf32_truncate(a).astype(np.float64) @ tf32_truncate(b).astype(np.float64)
    np.testing.assert_allclose(tf32, want, rtol=1e-6, atol=1e-5)
    assert np.abs(tf32 - ieee).max() > 1e-4  # the 13 low mantissa bits were dropped


def test_cvt_rna_tf32_inline_asm_rounds_to_nearest_ties_away():
    # the bit patterns: just below / at / above half a tf32 ulp (0x1000), a tie at an odd mantissa, a carry
    # into the exponent, the largest finite value (rounds to inf), inf, NaN and a negative tie
    bits = np.array([0x3F800FFF, 0x3F801000, 0x3F801001, 0x3F803000, 0x3FFFF000, 0x7F7FFFFF, 0x7F800000,
                     0x7FC00001, 0xBF801000], dtype=np.uint32)
    x = bits.view(np.float32)
    want = np.array([0x3F800000, 0x3F802000, 0x3F802000, 0x3F804000, 0x40000000, 0x7F800000, 0x7F800000,
                     0x7FC00001, 0xBF802000], dtype=np.uint32)
    got = tf32_round(x).view(np.uint32)
    np.testing.assert_array_equal(got[:7], want[:7])
    assert np.isnan(got.view(np.float32)[7]) and got[8] == want[8]
    # and inside a kernel: rounded operands, then a tf32 dot (truncation is then a no-op)
    a, b = _values("f32", (16, 16), 7), _values("f32", (16, 16), 8)
    out = _run("f32", "f32", "f32", a, b, extra=', input_precision="tf32"', prep=_RNA)
    want = tf32_round(a).astype(np.float64) @ tf32_round(b).astype(np.float64)
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-5)


def test_bf16_reference_values_are_those_of_ml_dtypes():
    # a bf16 dot of small integers is exact: the interpreter must give exactly the integer products' sums
    a = np.arange(-8, 8, dtype=np.float32).reshape(1, 16).repeat(16, 0).astype(ml_dtypes.bfloat16)
    b = np.ones((16, 8), dtype=ml_dtypes.bfloat16)
    got = _run("bf16", "bf16", "f32", a, b)
    np.testing.assert_array_equal(got, np.full((16, 8), -8.0, dtype=np.float32))


@pytest.mark.parametrize("et", ["f8e4m3fn", "f8e5m2"])
def test_fp8_dot_reads_nan_and_the_largest_values(et):
    # e4m3fn has no inf: 0x7f is NaN and 448 its largest value; e5m2 has inf and 57344
    dt = ml_dtypes.float8_e4m3fn if et == "f8e4m3fn" else ml_dtypes.float8_e5m2
    a = np.ones((16, 32), dtype=np.float32)
    a[0, 0] = np.nan
    a[1, 0] = float(ml_dtypes.finfo(dt).max)
    a = a.astype(dt)
    b = np.ones((32, 8), dtype=dt)
    got = _run(et, et, "f32", a, b)
    want = a.astype(np.float64) @ b.astype(np.float64)
    assert np.isnan(got[0]).all() and not np.isnan(got[1:]).any()
    np.testing.assert_array_equal(got[1:], want[1:])
