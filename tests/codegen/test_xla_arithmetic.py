"""XLA's arithmetic forms in generated loop kernels: integer division by a constant without the guards that
cannot fire, the f16 / bf16 exponential as XLA's ``ex2.approx.f32`` of ``x * log2(e)`` (and the interpreter's
``tl.exp`` rounding that product as the GPU does), an iota's range told to LLVM, and sub-byte iotas wrapping at
their width. Each checked against an independent answer (XLA's rules in Python ints, float64, numpy)."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from fusion_harness import load, loop_fusions, pick_emitter, run_loop_text

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime


_CONST_DIVISOR = """
HloModule t
fused {{
  a = {et}[{n}] parameter(0)
  c = {et}[] constant({c})
  b = {et}[{n}] broadcast(c), dimensions={{}}
  ROOT r = {et}[{n}] {op}(a, b)
}}
ENTRY main {{
  a = {et}[{n}] parameter(0)
  ROOT f = {et}[{n}] fusion(a), kind=kLoop, calls=fused
}}
"""


def _xla_divrem(op: str, x: int, c: int, info) -> int:
    """XLA's integer division in Python ints: truncating, x / 0 = -1 (all ones), x % 0 = x, MIN / -1 = MIN,
    MIN % -1 = 0."""
    if c == 0:
        return (-1 if info.min < 0 else info.max) if op == "divide" else x
    if c == -1 and x == info.min:
        return info.min if op == "divide" else 0
    q = abs(x) // abs(c) * (1 if (x < 0) == (c < 0) else -1)
    return q if op == "divide" else x - q * c


@pytest.mark.parametrize("op", ["divide", "remainder"])
@pytest.mark.parametrize("et", ["s32", "s8", "u32", "s64"])
@pytest.mark.parametrize("c", [3, -3, 7, 1, -1, 0])
def test_division_by_a_constant_drops_the_guards_that_cannot_fire(op, et, c):
    """A divisor that is one constant other than 0 and -1 divides plainly (XLA's kernel has no guard there;
    w_iota_cmp's `iota % 3` was 112 SASS instructions against XLA's 51); 0 and -1 keep XLA's special cases.
    Checked against XLA's rules written out in Python ints, and against the reference evaluator."""
    dt = np.dtype({"s32": np.int32, "s8": np.int8, "u32": np.uint32, "s64": np.int64}[et])
    info = np.iinfo(dt)
    if dt.kind == "u" and c < 0:
        pytest.skip("a negative constant is not a u32")
    vals = [7, -7, 8, -8, 0, 1, -1, 100, -101, int(info.min), int(info.max), int(info.min) + 1]
    a = np.array([v for v in vals if info.min <= v <= info.max], dtype=dt)
    text = _CONST_DIVISOR.format(et=et, n=a.size, c=c, op=op)
    (out,) = run_loop_text(text, [a])
    want = np.array([_xla_divrem(op, int(x), c, info) for x in a.tolist()]).astype(dt)
    np.testing.assert_array_equal(out, want)
    (f,) = loop_fusions(load(text))
    src = pick_emitter(FusionAnalysis.create(f)).emit().kernels[0].source
    guarded = c == 0 or (c == -1 and dt.kind == "i")
    assert ("divz" in src) == guarded, src


_EXP = """
HloModule t
fused {{
  a = {et}[{n}] parameter(0)
  ROOT r = {et}[{n}] exponential(a)
}}
ENTRY main {{
  a = {et}[{n}] parameter(0)
  ROOT f = {et}[{n}] fusion(a), kind=kLoop, calls=fused
}}
"""


@pytest.mark.parametrize("et", ["bf16", "f16", "f32"])
def test_narrow_exponential_is_ex2_of_x_log2e_as_xla(et):
    """XLA computes an f16 / bf16 exponential as ``ex2.approx.f32(x * log2(e))`` in f32 (its PTX for
    u_swiglu, z_softmax_f16, w_sigmoid_f16), f32 as expf (libdevice). fusegen's kernel does the same (Triton's
    ``tl.exp``: u_swiglu 14 -> 12 registers, XLA 11); the result is within one ulp of the narrow type against
    float64 (f32: expf's documented 2 ulp, which numpy's SIMD exp also keeps)."""
    dt = {"bf16": ml_dtypes.bfloat16, "f16": np.float16, "f32": np.float32}[et]
    x = np.linspace(-10.0, 10.0, 4096).astype(dt)
    text = _EXP.format(et=et, n=x.size)
    (out,) = run_loop_text(text, [x])
    ref = np.exp(x.astype(np.float64))
    ulp = {"bf16": 2.0 ** -7, "f16": 2.0 ** -10, "f32": 2.0 ** -22}[et]
    assert np.all(np.abs(out.astype(np.float64) - ref) <= ulp * ref), et
    (f,) = loop_fusions(load(text))
    ks = pick_emitter(FusionAnalysis.create(f)).emit().kernels[0]
    ptx = triton_runtime.compile_for_target(ks, pointer_alignment=16).ptx
    narrow = et != "f32"
    assert ("tl.exp(" in ks.source) == narrow and ("libdevice.exp(" in ks.source) != narrow
    assert bool(re.search(r"ex2\.approx\.f32", ptx)) == narrow, ptx


_IOTA_MOD = """
HloModule t
fused {{
  x = bf16[{m},{n}] parameter(0)
  i = s32[{n}] iota(), iota_dimension=0
  c = s32[] constant(3)
  b = s32[{n}] broadcast(c), dimensions={{}}
  r = s32[{n}] remainder(i, b)
  z = s32[] constant(0)
  zb = s32[{n}] broadcast(z), dimensions={{}}
  e = pred[{n}] compare(r, zb), direction=EQ
  eb = pred[{m},{n}] broadcast(e), dimensions={{1}}
  nx = bf16[{m},{n}] negate(x)
  ROOT s = bf16[{m},{n}] select(eb, x, nx)
}}
ENTRY main {{
  x = bf16[{m},{n}] parameter(0)
  ROOT f = bf16[{m},{n}] fusion(x), kind=kLoop, calls=fused
}}
"""


@pytest.mark.parametrize("m,n", [(64, 1024), (64, 1000)])
def test_power_of_two_iota_tells_llvm_its_range(m, n):
    """An iota along a power-of-two dimension is masked to its range (``& (n - 1)``, free after the index's
    remainder), so LLVM knows it is non-negative and ``iota % 3 == 0`` folds as in XLA's kernel (w_iota_cmp:
    18 -> 14 registers, XLA's 14). Exact against numpy for both a power-of-two and another size."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((m, n)).astype(ml_dtypes.bfloat16)
    text = _IOTA_MOD.format(m=m, n=n)
    (out,) = run_loop_text(text, [x])
    np.testing.assert_array_equal(out, np.where(np.arange(n) % 3 == 0, x, -x))
    (f,) = loop_fusions(load(text))
    src = pick_emitter(FusionAnalysis.create(f)).emit().kernels[0].source
    assert (f"& {n - 1}" in src) == (n & (n - 1) == 0), src


_EXP_KERNEL = """\
import triton
import triton.language as tl


@triton.jit
def exp_kernel(x, y, N: tl.constexpr):
    i = tl.arange(0, N)
    tl.store(y + i, tl.exp(tl.load(x + i)))
"""


@pytest.mark.parametrize("et", ["f32", "f64"])
def test_interpreter_exp_rounds_x_log2e_as_the_gpu(et):
    """Under the interpreter ``tl.exp`` of f32 is 2 to the f32-rounded ``x * log2(e)``, the product the GPU
    kernel's ``ex2.approx.f32`` reads (``interpreter_patches.patch_exp``); Triton's own interpreter takes
    ``np.exp(x)``, which differs where the product's rounding shows (large |x|). f64 keeps ``np.exp``."""
    from fusegen.codegen.interpreter_patches import LOG2E_F32
    from fusegen.codegen.kernel import KernelParam, KernelSource, LaunchDimensions
    from fusegen.hlo.ir import Shape

    dt = np.float32 if et == "f32" else np.float64
    x = np.linspace(-87.0, 88.0, 1024).astype(dt)
    ks = KernelSource(name="exp_kernel", source=_EXP_KERNEL, entry="exp_kernel",
                      params=(KernelParam("operand", 0, Shape(et, (1024,))), KernelParam("output", 0, Shape(et, (1024,)))),
                      constexprs={"N": 1024}, launch=LaunchDimensions((1,)))
    y = np.zeros_like(x)
    triton_runtime.run_interpreted(ks, [x.copy(), y])
    if et == "f64":
        np.testing.assert_array_equal(y, np.exp(x))
        return
    np.testing.assert_array_equal(y, np.exp2(x * LOG2E_F32))
    assert np.count_nonzero(y != np.exp(x)) > 100  # the product's rounding is visible, not a relabelled np.exp
    rel = np.abs(y.astype(np.float64) - np.exp(x.astype(np.float64))) / np.exp(x.astype(np.float64))
    assert rel.max() <= 128 * 2.0 ** -24  # within |x log2 e| * 2**-24 (+ exp2's rounding) of the true value


@pytest.mark.parametrize("et,n", [("s4", 16), ("s4", 17), ("u4", 17), ("u4", 32), ("s2", 8), ("u2", 8)])
def test_sub_byte_iota_wraps_at_its_width(et, n):
    """An s4 / u4 iota past its range wraps at 4 bits (s4: 0..7, -8..-1, 0..; u4: 0..15, 0..), also when
    converted to a wider type (the byte it lives in wrapped only at 8 bits; found by an adversarial check).
    Against numpy's modular arithmetic."""
    text = f"""
HloModule t
fused {{
  i = {et}[4,{n}] iota(), iota_dimension=1
  ROOT c = s32[4,{n}] convert(i)
}}
ENTRY main {{
  ROOT f = s32[4,{n}] fusion(), kind=kLoop, calls=fused
}}
"""
    bits = int(et[1:])
    col = np.arange(n) % (1 << bits)
    if et[0] == "s":
        col = np.where(col >= 1 << (bits - 1), col - (1 << bits), col)
    (out,) = run_loop_text(text, [])
    np.testing.assert_array_equal(out, np.broadcast_to(col, (4, n)))
