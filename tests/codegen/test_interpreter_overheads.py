"""Interpreter overhead cuts that must not change values: the dead overflow sanitizer, the dtype memo,
the CLI's single-threaded OpenBLAS default, the bitwise select and 1-D gather, and the numpy loads/stores,
integer division and pointer arithmetic (each against Triton's own method, bit for bit)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import types

import attrs
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
    from fusegen.codegen.interpreter_patches import fusegen_builder

    opts = fusegen_builder().options
    assert not opts.sanitize_overflow and not opts.debug  # the check could only matter with debug asserts on
    assert interp.interpreter_builder.options.sanitize_overflow  # Triton's own builder keeps its sanitizer


def test_dtype_memo_answers_like_triton():
    import triton.language as tl
    from triton.runtime import interpreter as interp

    from fusegen.codegen.interpreter_patches import patch_np_dtype

    memo = patch_np_dtype()
    for ty, want in ((tl.int1, np.bool_), (tl.bfloat16, np.uint16), (tl.float8e4nv, np.uint8), (tl.float32, np.float32),
                     (tl.pointer_type(tl.float16), np.uint64), (tl.block_type(tl.int64, [4]), np.int64),
                     (tl.block_type(tl.pointer_type(tl.int8), [2]), np.uint64)):
        assert memo(ty) == interp._get_np_dtype(ty) == np.dtype(want)
        assert memo(ty) == np.dtype(want)  # a second look-up, from the memo


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


# --------------------------------------------------------------------------------------------------
# numpy loads/stores, integer division and addptr (patch_memory, patch_int_division, patch_addptr):
# each patched builder method against Triton's original (its __wrapped__), bit for bit
# --------------------------------------------------------------------------------------------------
def _builder():
    """Triton's interpreter module, fusegen's builder class (a subclass of Triton's) and its instance."""
    from triton.runtime import interpreter as interp

    from fusegen.codegen.interpreter_patches import fusegen_builder

    b = fusegen_builder()
    return interp, type(b), b


def _addresses(arr: np.ndarray, elems, itemsize: int | None = None) -> np.ndarray:
    """uint64 addresses of the elements ``elems`` (any shape, may be negative or past the end) of ``arr``."""
    k = arr.itemsize if itemsize is None else itemsize
    return np.uint64(arr.ctypes.data) + (np.asarray(elems, np.int64) * k).astype(np.uint64)


def _bits(a: np.ndarray) -> bytes:
    return np.ascontiguousarray(a).tobytes()


def _storage_cases():
    """(triton type, storage array) for the element types the interpreter keeps in memory."""
    import ml_dtypes
    import triton.language as tl

    rng = np.random.default_rng(3)
    f32 = rng.standard_normal(300).astype(np.float32)
    f32[:4] = np.array([0x7FC00001, 0xFFC12345, 0x80000000, 0x7F800000], np.uint32).view(np.float32)
    bf16 = rng.standard_normal(300).astype(ml_dtypes.bfloat16).view(np.uint16)
    bf16[:2] = [0x7FC1, 0xFF81]  # NaN payloads
    fp8 = rng.integers(0, 256, 300).astype(np.uint8)
    return [(tl.float32, f32), (tl.bfloat16, bf16), (tl.float8e4nv, fp8),
            (tl.int1, rng.random(300) < 0.5), (tl.int64, rng.integers(-2**62, 2**62, 300)),
            (tl.float16, rng.standard_normal(300).astype(np.float16)), (tl.int8, rng.integers(-128, 128, 300).astype(np.int8))]


@contextlib.contextmanager
def _fast_memory(interp, buffers):
    """Register ``buffers`` and make Triton's C++ load/store raise: what runs inside took the numpy path."""
    from fusegen.codegen.interpreter_fast_paths import host_buffers

    def refuse(*a, **k):
        raise AssertionError("Triton's per-lane C++ load/store ran")

    saved = interp._interpreter
    interp._interpreter = types.SimpleNamespace(load=refuse, store=refuse)
    try:
        with host_buffers(buffers):
            yield
    finally:
        interp._interpreter = saved


def _load_both(interp, B, b, ty, buf, elems, mask, other):
    """The patched masked load (numpy path) and Triton's original, on the same addresses."""
    import triton.language as tl

    ptrs = interp.TensorHandle(_addresses(buf, elems), tl.pointer_type(ty))
    m = interp.TensorHandle(np.asarray(mask), tl.int1)
    o = None if other is None else interp.TensorHandle(other, ty)
    with _fast_memory(interp, [buf]):
        got = B.create_masked_load(b, ptrs, m, o, None, False)
    want = B.create_masked_load.__wrapped__(b, ptrs, m, o, None, False)
    return got, want


def test_masked_load_equals_triton_bit_for_bit():
    interp, B, b = _builder()
    rng = np.random.default_rng(11)
    for ty, buf in _storage_cases():
        for shape in ((256,), (8, 32), (2, 4, 16)):
            n = int(np.prod(shape))
            inside = rng.integers(0, buf.size, n).reshape(shape)  # gathers, repeats included
            wild = rng.integers(-10**9, 10**9, shape)  # where masked-out lanes point: anywhere
            mask = rng.random(shape) < 0.7
            other = buf[rng.integers(0, buf.size, n)].reshape(shape)
            for m, o in ((mask, other), (mask, None), (np.ones(shape, bool), None), (np.ones(shape, bool), other),
                         (np.zeros(shape, bool), other), (np.zeros(shape, bool), None)):
                got, want = _load_both(interp, B, b, ty, buf, np.where(m, inside, wild), m, o)
                assert got.data.dtype == want.data.dtype and got.data.shape == want.data.shape == shape
                assert got.dtype == want.dtype
                assert _bits(got.data) == _bits(want.data), (ty, shape)
            # the values themselves: active lanes read the buffer, the others give `other`
            got, _ = _load_both(interp, B, b, ty, buf, np.where(mask, inside, wild), mask, other)
            want = np.where(mask, buf[inside], other)
            assert _bits(got.data) == _bits(want)


def test_plain_load_and_store_take_the_numpy_path_and_match():
    import triton.language as tl

    interp, B, b = _builder()
    src = np.arange(512, dtype=np.int64) * 3 - 700
    elems = (np.arange(16)[:, None] * 32 + np.arange(32)[None, :])[:, ::-1] % 512  # a 2-D block, each row reversed
    ptrs = interp.TensorHandle(_addresses(src, elems), tl.pointer_type(tl.int64))
    with _fast_memory(interp, [src]):
        got = B.create_load(b, ptrs, None, False)
    want = B.create_load.__wrapped__(b, ptrs, None, False)
    np.testing.assert_array_equal(got.data, src[elems])
    assert _bits(got.data) == _bits(want.data)
    dst_fast, dst_orig = np.zeros(512, np.int64), np.zeros(512, np.int64)
    val = interp.TensorHandle(got.data * 5, tl.int64)
    with _fast_memory(interp, [dst_fast]):
        B.create_store(b, interp.TensorHandle(_addresses(dst_fast, elems), tl.pointer_type(tl.int64)), val, None)
    B.create_store.__wrapped__(b, interp.TensorHandle(_addresses(dst_orig, elems), tl.pointer_type(tl.int64)), val, None)
    np.testing.assert_array_equal(dst_fast, dst_orig)
    np.testing.assert_array_equal(dst_fast[elems], src[elems] * 5)


def test_masked_store_keeps_the_last_lane_of_a_repeated_address():
    import triton.language as tl

    interp, B, b = _builder()
    rng = np.random.default_rng(5)
    for ty, buf in _storage_cases():
        for shape, elems in (((256,), np.arange(256) % 7),                      # many lanes, seven addresses
                             ((256,), np.arange(256)[::-1]),                    # unique, decreasing
                             ((16, 16), np.arange(256).reshape(16, 16).T),      # transposed 2-D block
                             ((8, 32), rng.integers(0, 40, (8, 32))),           # random with repeats
                             ((4, 64), np.arange(256).reshape(4, 64))):         # contiguous
            mask = rng.random(shape) < 0.6
            value = buf[rng.integers(0, buf.size, shape)]
            for m in (mask, np.ones(shape, bool), np.zeros(shape, bool)):
                e = np.where(m, elems, -(10**12))  # masked-out lanes far outside the buffer
                fast, orig = buf.copy(), buf.copy()
                v = interp.TensorHandle(value, ty)
                mh = interp.TensorHandle(m, tl.int1)
                with _fast_memory(interp, [fast]):
                    B.create_masked_store(b, interp.TensorHandle(_addresses(fast, e), tl.pointer_type(ty)), v, mh, None)
                B.create_masked_store.__wrapped__(b, interp.TensorHandle(_addresses(orig, e), tl.pointer_type(ty)), v, mh, None)
                assert _bits(fast) == _bits(orig), (ty, shape)
                # the real values: each written address holds its last active lane's value, the rest is untouched
                want = buf.copy()
                for lane in range(m.size):
                    if m.reshape(-1)[lane]:
                        want[e.reshape(-1)[lane]] = value.reshape(-1)[lane]
                assert _bits(fast) == _bits(want)


def test_scatter_last_wins_in_lane_order():
    from fusegen.codegen.interpreter_fast_paths import scatter_last_wins

    rng = np.random.default_rng(9)
    for _ in range(20):
        idx = rng.integers(0, 50, 300)
        vals = rng.integers(0, 10**6, 300)
        dst = np.full(60, -1, np.int64)
        scatter_last_wins(dst, idx, vals)
        want = np.full(60, -1, np.int64)
        for i, v in zip(idx, vals):
            want[i] = v
        np.testing.assert_array_equal(dst, want)


def test_memory_fast_path_declines_what_it_cannot_do_exactly():
    from fusegen.codegen import interpreter_fast_paths as ip
    from fusegen.codegen.interpreter_fast_paths import _host_elements, host_buffers

    a, other = np.zeros(128, np.float32), np.zeros(128, np.float32)
    lanes = np.arange(100)
    with host_buffers([a]):
        assert _host_elements(_addresses(a, lanes), None, 4, store=False) is not None
        assert _host_elements(_addresses(other, lanes), None, 4, store=False) is None      # not a run buffer
        assert _host_elements(_addresses(a, lanes + 29), None, 4, store=False) is None     # runs past the end
        assert _host_elements(_addresses(a, lanes - 1), None, 4, store=False) is None      # starts before it
        assert _host_elements(_addresses(a, lanes, 2), None, 4, store=False) is None       # off element boundaries
        assert _host_elements(_addresses(a, lanes), np.zeros(100, bool), 4, store=False) == ()
    assert _host_elements(_addresses(a, lanes), None, 4, store=False) is None              # outside the block
    with host_buffers([np.zeros(128, object), np.zeros((8, 16), np.float32)[:, ::2], np.zeros(0, np.int8)]):
        assert ip._HOST_BUFFERS.get() == ()  # object arrays, strided views and empty arrays are not registered
    ro = np.zeros(128, np.float32)
    ro.flags.writeable = False
    with host_buffers([ro]):
        assert _host_elements(_addresses(ro, lanes), None, 4, store=True) is None
        assert _host_elements(_addresses(ro, lanes), None, 4, store=False) is not None


def _c_div(a: int, b: int) -> tuple[int, int]:
    """C's truncating quotient and remainder (b != 0)."""
    q = abs(a) // abs(b) * (1 if (a < 0) == (b < 0) else -1)
    return q, a - q * b


def test_integer_division_equals_triton_and_truncates_like_c():
    import triton.language as tl

    interp, B, b = _builder()
    rng = np.random.default_rng(2)
    cases = []
    for dt, ty in ((np.int8, tl.int8), (np.int16, tl.int16), (np.int32, tl.int32), (np.int64, tl.int64),
                   (np.uint8, tl.uint8), (np.uint16, tl.uint16), (np.uint32, tl.uint32), (np.uint64, tl.uint64)):
        info = np.iinfo(dt)
        lo = max(info.min, -1000)
        nonneg = rng.integers(0, min(info.max, 10**6), 256).astype(dt)
        mixed = rng.integers(lo, min(info.max, 1000), 256).astype(dt)
        posdiv = rng.integers(1, min(info.max, 97), 256).astype(dt)
        anydiv = rng.integers(lo, min(info.max, 97), 256).astype(dt)
        for lhs, rhs in ((nonneg, posdiv), (nonneg, np.full(256, 7, dt)), (nonneg, np.full(256, 1, dt)),
                         (mixed, posdiv), (mixed, anydiv), (nonneg, anydiv), (mixed, np.full(256, 5, dt)),
                         (nonneg, np.full(256, 0, dt)), (nonneg, np.where(posdiv > 3, posdiv, 0).astype(dt)),
                         (nonneg[:10], posdiv[:10])):
            cases.append((ty, lhs, rhs))
        if info.min < 0:
            cases.append((ty, np.full(256, info.min, dt), np.full(256, -1, dt)))
            cases.append((ty, np.full(256, info.min, dt), anydiv))
            cases.append((ty, rng.integers(info.min // 2, 0, 256).astype(dt), np.full(256, -3, dt)))
    from fusegen.codegen.interpreter_fast_paths import _nonnegative_division

    n, d = np.arange(256, dtype=np.int32), np.arange(1, 257, dtype=np.int32)
    assert _nonnegative_division(n, d, 1) is not None and _nonnegative_division(n, d * 0 + 9, 1)[1] == 9
    assert _nonnegative_division(n, d * 0, 0) is not None and _nonnegative_division(n, d * 0, 1) is None
    assert _nonnegative_division(n - 1, d, 0) is None and _nonnegative_division(n, -d, 0) is None
    for ty, lhs, rhs in cases:
        lh, rh = interp.TensorHandle(lhs, ty), interp.TensorHandle(rhs, ty)
        for name in ("create_sdiv", "create_udiv", "create_srem", "create_urem", "create_idiv"):
            fast = getattr(B, {"create_sdiv": "create_idiv", "create_udiv": "create_idiv"}.get(name, name))
            with np.errstate(all="ignore"):  # as run_interpreted runs kernels
                got = getattr(B, name)(b, lh, rh)
                want = fast.__wrapped__(b, lh, rh)
            assert got.data.dtype == want.data.dtype == lhs.dtype and got.dtype == want.dtype
            assert _bits(got.data) == _bits(want.data), (name, lhs.dtype, lhs[:4], rhs[:4])
            # real values: C's truncating division wherever the quotient exists and fits
            div = name in ("create_sdiv", "create_udiv", "create_idiv")
            for x, y, g in zip(lhs.tolist(), rhs.tolist(), got.data.tolist()):
                if y != 0 and not (x == np.iinfo(lhs.dtype).min and y == -1):
                    assert g == _c_div(x, y)[0 if div else 1], (name, x, y, g)
                elif y == 0:
                    assert g == 0


def test_addptr_equals_triton_modulo_2_64():
    import triton.language as tl

    interp, B, b = _builder()
    rng = np.random.default_rng(4)
    base = np.uint64(0x7F0000001000)
    # (a pointer to pointers steps by its innermost element's width, as Triton's get_element_ty gives it)
    for ty, width in ((tl.float32, 4), (tl.bfloat16, 2), (tl.int1, 1), (tl.int8, 1), (tl.float64, 8),
                      (tl.pointer_type(tl.int16), 2)):
        for off in (rng.integers(-2**31, 2**31, (8, 32)).astype(np.int32), rng.integers(-2**40, 2**40, 256),
                    rng.integers(0, 256, 256).astype(np.uint8), np.array([-1, 0, 1, 2**31 - 1] * 64, np.int32),
                    rng.integers(0, 2**63, (4, 8, 8), dtype=np.uint64), np.array([5], np.int16)):
            for ptr in (np.full(off.shape, base, np.uint64), base + np.arange(off.size, dtype=np.uint64).reshape(off.shape),
                        np.broadcast_to(np.uint64(base), off.shape)):
                ph, oh = interp.TensorHandle(ptr, tl.pointer_type(ty)), interp.TensorHandle(off, tl.int64)
                got, want = B.create_addptr(b, ph, oh), B.create_addptr.__wrapped__(b, ph, oh)
                assert got.data.dtype == want.data.dtype == np.uint64 and got.dtype == want.dtype
                assert got.data.shape == want.data.shape and _bits(got.data) == _bits(want.data)
                expect = [(int(p) + width * int(o)) % 2**64 for p, o in zip(ptr.reshape(-1), off.reshape(-1))]
                assert got.data.reshape(-1).tolist() == expect
        # a scalar pointer plus a block of offsets broadcasts as before
        ph = interp.TensorHandle(np.array([base], np.uint64), tl.pointer_type(ty))
        oh = interp.TensorHandle(np.arange(-64, 64, dtype=np.int32), tl.int32)
        got, want = B.create_addptr(b, ph, oh), B.create_addptr.__wrapped__(b, ph, oh)
        assert _bits(got.data) == _bits(want.data)


def test_new_patches_apply_once():
    from fusegen.codegen import interpreter_patches as ip

    interp, B, b = _builder()
    before = (B.create_masked_load, B.create_masked_store, B.create_idiv, B.create_srem, B.create_addptr)
    ip.patch_memory(), ip.patch_int_division(), ip.patch_addptr()
    assert ip.fusegen_builder() is b and type(b) is B  # one builder per process, its class built once
    assert (B.create_masked_load, B.create_masked_store, B.create_idiv, B.create_srem, B.create_addptr) == before
    # one level of wrapping: the original is Triton's own method, and Triton's class is untouched
    assert B.create_masked_load.__wrapped__ is interp.InterpreterBuilder.create_masked_load
    assert not hasattr(B.create_masked_load.__wrapped__, "__wrapped__")


_BLOCK2D_SRC = '''import triton
import triton.language as tl

@triton.jit
def k(a, o, q, R: tl.constexpr, C: tl.constexpr, BR: tl.constexpr, BC: tl.constexpr):
    rows = tl.program_id(0) * BR + tl.arange(0, BR)[:, None]
    cols = tl.arange(0, BC)[None, :]
    inside = (rows < R) & (cols < C)
    x = tl.load(a + rows * C + cols, mask=inside, other=-7.5)
    # transposed store (addresses not increasing along a row), masked
    tl.store(o + cols * R + rows, x * 2.0, mask=inside)
    lin = rows * C + cols
    tl.store(q + lin, (lin // 3) * 1000 + lin % 3, mask=inside)
'''


def test_interpreted_2d_block_masked_transpose_and_division():
    f32_in, f32_out, s32 = Shape("f32", (10 * 12,)), Shape("f32", (12 * 10,)), Shape("s32", (10 * 12,))
    ks = KernelSource(name="k", source=_BLOCK2D_SRC, entry="k", constexprs={"R": 10, "C": 12, "BR": 8, "BC": 16},
                      params=(KernelParam("operand", 0, f32_in), KernelParam("output", 0, f32_out),
                              KernelParam("output", 1, s32)))
    from fusegen.codegen.kernel import LaunchDimensions

    ks = attrs.evolve(ks, launch=LaunchDimensions((2,)))
    a = np.arange(120, dtype=np.float32) - 60.25
    out_shape = Shape("tuple", tuple_shapes=(f32_out, s32))
    out = triton_runtime.run_fusion(EmittedFusion("t", kernels=(ks,)), [a], ([f32_in], out_shape))
    np.testing.assert_array_equal(out[0], (a.reshape(10, 12).T * 2).reshape(-1))
    lin = np.arange(120, dtype=np.int32)
    np.testing.assert_array_equal(out[1], (lin // 3) * 1000 + lin % 3)
