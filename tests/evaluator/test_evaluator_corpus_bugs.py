"""The reference evaluator on the reported-bug inputs (../shared/corpus/bugs/INDEX.md): the expected behaviour
each entry states, checked on the evaluator that every kernel is compared with."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.dot_numerics import tf32_round
from fusegen.hlo.parser import parse_file, parse_module

BUGS = Path(__file__).parents[2].parent / "shared" / "corpus" / "bugs"
pytestmark = pytest.mark.skipif(not BUGS.is_dir(), reason=f"shared corpus not found at {BUGS}")
BF16 = ml_dtypes.bfloat16


def test_b04_f16_min_over_two_reduced_dims_is_one():
    m = parse_file(BUGS / "B04.hlo")
    r = evaluate_module(m, [np.ones((2, 16385, 1), np.float16)])
    assert r.dtype == np.float16 and r.tolist() == [1.0, 1.0]


def test_b04_min_finds_the_single_small_value():
    # the same reduce must see every element of the 2^14+1 extent, the trailing size-1 dim included
    x = np.ones((2, 16385, 1), np.float16)
    x[0, 16384, 0] = -2.0
    x[1, 0, 0] = 0.5
    assert evaluate_module(parse_file(BUGS / "B04.hlo"), [x]).tolist() == [-2.0, 0.5]


def test_b09_dus_of_own_slice_shifts_rows():
    m = parse_file(BUGS / "B09.hlo")
    x = np.arange(4, dtype=np.int32).reshape(4, 1, 1)
    r = evaluate_module(m, [x])
    assert r.shape == (1, 4, 1)
    assert r.reshape(-1).tolist() == [1, 1, 2, 3]


def test_b19_bf16_round_trip_rounds():
    m = parse_file(BUGS / "B19.hlo")
    x = np.random.default_rng(0).standard_normal(100).astype(np.float32)
    r = evaluate_module(m, [x])
    assert r.dtype == np.float32
    expect = x.astype(BF16).astype(np.float32)
    assert np.array_equal(r, expect)
    assert not np.array_equal(r, x)  # excess precision is off: the narrowing is not dropped


def test_b20_inverse_permutation_of_argsort():
    m = parse_file(BUGS / "B20.hlo")
    rng = np.random.default_rng(4)
    for _ in range(5):
        x = rng.permutation(10).astype(np.int64)
        p, ip = evaluate_module(m, [x])
        assert p.dtype == np.int64 and ip.dtype == np.int64
        assert p.tolist() == sorted(range(10), key=lambda i: x[i])  # argsort
        assert ip.tolist() == x.tolist()  # argsort(argsort(x)) == x for a permutation


def test_b13_bias_follows_dot_rows():
    m = parse_file(BUGS / "B13.hlo")
    bias = np.arange(1, 9, dtype=np.float32)
    out = evaluate_module(m, [np.zeros((8, 8), np.float32), bias])
    assert out.shape == (4, 8)
    assert out.tolist() == [bias.tolist()] * 4  # out[j, i] = bias[i]


def test_b13_random_operands():
    m = parse_file(BUGS / "B13.hlo")
    rng = np.random.default_rng(13)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    bias = rng.standard_normal(8).astype(np.float32)
    out = evaluate_module(m, [a, bias])
    a64 = tf32_round(a).astype(np.float64)  # a default-precision f32 dot: tf32 on XLA:GPU
    s = np.array([[sum(a64[k, i] * a64[j, k] for k in range(8)) + bias[i] for j in range(8)] for i in range(8)])
    np.testing.assert_allclose(out, s[:, :4].T, rtol=1e-5, atol=1e-5)


# B13 as XLA:GPU rewrites it: the dot becomes a cuBLASLt call with the operands swapped and the BIAS epilogue
# on the trailing output dim; its {0,1} output layout makes the bitcast read it back as s[i, j].
B13_CUBLAS = """HloModule b13_cublas
ENTRY main {
  a = f32[8,8]{1,0} parameter(0)
  bias = f32[8]{0} parameter(1)
  g = (f32[8,8]{0,1}, s8[1024]{0}) custom-call(a, a, bias), custom_call_target="__cublas$lt$matmul",
    backend_config={"gemm_backend_config":{"alpha_real":1,"alpha_imag":0,"beta":0,
      "dot_dimension_numbers":{"lhs_contracting_dimensions":["1"],"rhs_contracting_dimensions":["0"],
      "lhs_batch_dimensions":[],"rhs_batch_dimensions":[]},"epilogue":"BIAS"}}
  st = f32[8,8]{0,1} get-tuple-element(g), index=0
  s = f32[8,8]{1,0} bitcast(st)
  cols = f32[8,4]{1,0} slice(s), slice={[0:8], [0:4]}
  ROOT out = f32[4,8]{1,0} transpose(cols), dimensions={1,0}
}"""


def test_b13_cublas_bias_epilogue_with_transposed_output_layout():
    m = parse_module(B13_CUBLAS, "b13_cublas")
    bias = np.arange(1, 9, dtype=np.float32)
    out = evaluate_module(m, [np.zeros((8, 8), np.float32), bias])
    assert out.tolist() == [bias.tolist()] * 4  # out[j, i] = bias[i], not bias[j]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((8, 8)).astype(np.float32)
    ref = evaluate_module(parse_file(BUGS / "B13.hlo"), [a, bias])
    np.testing.assert_allclose(evaluate_module(m, [a, bias]), ref, rtol=1e-5, atol=1e-5)


def test_b07_contended_scatter_add():
    m = parse_file(BUGS / "B07.hlo")
    table = np.zeros((399, 128), np.float32)
    upd = np.ones((40960, 128), np.float32)
    out = evaluate_module(m, [table, np.zeros((40960, 1), np.int32), upd])
    assert out[0].tolist() == [40960.0] * 128 and not out[1:].any()
    ids = (np.arange(40960) % 399).astype(np.int32).reshape(-1, 1)
    out = evaluate_module(m, [table, ids, upd])
    counts = np.bincount(ids[:, 0], minlength=399).astype(np.float32)
    assert np.array_equal(out, np.repeat(counts[:, None], 128, axis=1))


def test_b35_integer_power_negative_exponent():
    """B35: a negative exponent gives 1 for base 1, +-1 by parity for base -1, 0 otherwise (XLA:CPU's answer
    from INDEX.md); the old rule gave 0 for base -1."""
    m = parse_file(BUGS / "B35_int_pow_negative_exp.hlo")
    z = np.load(BUGS / "B35_int_pow_negative_exp.npz")
    r = evaluate_module(m, [z["p0"], z["p1"]])
    assert r.dtype == np.int32
    assert r.tolist() == [0, 1, -1, 1, 1, 9, -8, 1, -2147483648, 0]
