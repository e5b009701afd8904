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
