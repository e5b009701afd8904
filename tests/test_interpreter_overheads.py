"""Interpreter overhead cuts that must not change values: the dead overflow sanitizer, the dtype memo,
and the CLI's single-threaded OpenBLAS default."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np

from fusegen.codegen import triton_runtime
from fusegen.codegen.kernel import EmittedFusion, KernelParam, KernelSource
from fusegen.hlo.ir import Shape

_WRAP_SRC = '''import triton
import triton.language as tl

@triton.jit
def k(a, b, o, BLOCK: tl.constexpr):
    lane = tl.arange(0, BLOCK)
    x = tl.load(a + lane)
    y = tl.load(b + lane)
    tl.store(o + lane, x * y + x - y)
'''


def test_int32_arithmetic_wraps_like_numpy_without_the_sanitizer():
    from triton.runtime import interpreter as interp

    s32 = Shape("s32", (8,))
    ks = KernelSource(name="k", source=_WRAP_SRC, entry="k", constexprs={"BLOCK": 8},
                      params=(KernelParam("operand", 0, s32), KernelParam("operand", 1, s32), KernelParam("output", 0, s32)))
    a = np.array([2**31 - 1, -2**31, 65536, 46341, -1, 0, 123456789, -987654321], np.int32)
    b = np.array([2, -1, 65536, 46341, 2**31 - 1, -2**31, 1000, 3], np.int32)
    out = triton_runtime.run_fusion(EmittedFusion("t", kernels=(ks,)), [a, b], ([s32, s32], s32))
    with np.errstate(over="ignore"):
        want = a * b + a - b  # numpy int32 wraps two's complement, as the GPU does
    np.testing.assert_array_equal(out[0], want)
    opts = interp.interpreter_builder.options
    assert not opts.sanitize_overflow and not opts.debug  # the check could only matter with debug asserts on


def test_dtype_memo_answers_like_triton():
    import triton.language as tl
    from triton.runtime import interpreter as interp

    triton_runtime.patch_all()
    for ty, want in ((tl.int1, np.bool_), (tl.bfloat16, np.uint16), (tl.float8e4nv, np.uint8), (tl.float32, np.float32),
                     (tl.pointer_type(tl.float16), np.uint64), (tl.block_type(tl.int64, [4]), np.int64),
                     (tl.block_type(tl.pointer_type(tl.int8), [2]), np.uint64)):
        assert interp._get_np_dtype(ty) == np.dtype(want)


def _blas_threads(env: dict[str, str]) -> str:
    code = "import os, fusegen.cli; print(os.environ['OPENBLAS_NUM_THREADS'])"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_cli_runs_openblas_on_one_thread_unless_told_otherwise():
    env = {k: v for k, v in os.environ.items() if k != "OPENBLAS_NUM_THREADS"}
    assert _blas_threads(env) == "1"
    assert _blas_threads({**env, "OPENBLAS_NUM_THREADS": "3"}) == "3"


_SELECT_GATHER_SRC = '''import triton
import triton.language as tl

@triton.jit
def k(a, b, c, o, BLOCK: tl.constexpr):
    lane = tl.arange(0, BLOCK)
    x = tl.load(a + lane)
    y = tl.load(b + lane)
    cond = tl.load(c + lane) != 0
    tl.store(o + lane, tl.where(cond, x, y))
    tl.store(o + BLOCK + lane, tl.gather(x, (lane * 5 + 3) % BLOCK, 0))
'''


def test_bitwise_select_equals_np_where_bit_for_bit():
    from fusegen.codegen.interpreter_patches import bitwise_select

    rng = np.random.default_rng(7)
    cond = rng.random(257) < 0.5
    nan_payload = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x7F800000], np.uint32).view(np.float32)
    for dt in (np.float32, np.float64, np.float16, np.int8, np.int16, np.int32, np.int64, np.uint64, np.bool_):
        a = (rng.standard_normal(257) * 100).astype(dt)
        b = (rng.standard_normal(257) * 100).astype(dt)
        if dt is np.float32:
            a[:4] = nan_payload
            b[4:8] = nan_payload
        got = bitwise_select(cond, a, b)
        want = np.where(cond, a, b)
        assert got.dtype == want.dtype
        np.testing.assert_array_equal(got.view(np.uint8), want.view(np.uint8))
    # what it does not cover goes back to np.where
    assert bitwise_select(cond.astype(np.int8), a, b) is None
    assert bitwise_select(cond, a[:1], b) is None
    assert bitwise_select(cond, a.astype(np.int32), b.astype(np.int64)) is None


def test_interpreted_where_and_gather_keep_every_bit():
    f32, s32, f32x2 = Shape("f32", (16,)), Shape("s32", (16,)), Shape("f32", (32,))
    ks = KernelSource(name="k", source=_SELECT_GATHER_SRC, entry="k", constexprs={"BLOCK": 16},
                      params=(KernelParam("operand", 0, f32), KernelParam("operand", 1, f32),
                              KernelParam("operand", 2, s32), KernelParam("output", 0, f32x2)))
    bits = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0, 0x3F800000, 0xBF800000, 0x7F800000, 0xFF800000,
                     0x00000001, 0x807FFFFF, 0x7FBFFFFF, 0x12345678, 0x40490FDB, 0xC0490FDB, 0x7F7FFFFF, 0x1],
                    np.uint32)
    a = bits.view(np.float32)
    b = bits[::-1].copy().view(np.float32)
    c = np.array([1, 0] * 8, np.int32)
    out = triton_runtime.run_fusion(EmittedFusion("t", kernels=(ks,)), [a, b, c], ([f32, f32, s32], f32x2))
    got = out[0].view(np.uint32)
    np.testing.assert_array_equal(got[:16], np.where(c != 0, a, b).view(np.uint32))
    np.testing.assert_array_equal(got[16:], a[(np.arange(16) * 5 + 3) % 16].view(np.uint32))
