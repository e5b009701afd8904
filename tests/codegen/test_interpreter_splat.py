"""Shared splats (fusegen.codegen.interpreter_fast_paths.patch_splat): a large scalar splat is Triton's ``np.full``
array bit for bit, made once and handed out again read-only, the least recently used dropped past the byte budget."""

from __future__ import annotations

import numpy as np
import pytest

from fusegen.codegen import interpreter_fast_paths
from fusegen.codegen.interpreter_fast_paths import MIN_CACHED_SPLAT, patch_splat
from fusegen.codegen.interpreter_patches import fusegen_builder, patched_interpreter


def _handle(data, scalar):
    from triton.runtime import interpreter as interp

    return interp.TensorHandle(data, scalar)


def _splat(b, ty, value_data, scalar):
    return b.create_splat(ty, _handle(value_data, scalar))


@pytest.mark.parametrize("scalar, data", [
    ("float32", np.array([0x7FC00001], np.uint32).view(np.float32)),   # a NaN payload
    ("float32", np.array([-0.0], np.float32)),
    ("bfloat16", np.array([0xBF80], np.uint16)),                       # bf16 -1.0 as its raw bits
    ("int1", np.array([True])),
    ("int32", np.array([-7], np.int32)),
    ("float16", np.array([65504], np.float16)),
])
def test_a_large_splat_is_tritons_array_shared_and_read_only(scalar, data):
    import triton.language as tl

    sc = getattr(tl, scalar)
    ty = tl.block_type(sc, [4, MIN_CACHED_SPLAT // 4])
    with patched_interpreter():
        b = fusegen_builder()
        want = patch_splat()["create_splat"].__wrapped__(b, ty, _handle(data, sc))
        got = _splat(b, ty, data, sc)
        again = _splat(b, ty, data.copy(), sc)
    assert got.data.dtype == want.data.dtype and got.data.shape == want.data.shape == (4, MIN_CACHED_SPLAT // 4)
    np.testing.assert_array_equal(got.data.reshape(-1).view(np.uint8), want.data.reshape(-1).view(np.uint8))
    assert again.data is got.data and not got.data.flags.writeable and got.data.flags.c_contiguous
    assert got.dtype == sc


def test_small_splats_and_blocks_keep_tritons_method_and_the_budget_drops_the_oldest(monkeypatch):
    import triton.language as tl

    with patched_interpreter():
        b = fusegen_builder()
        small = tl.block_type(tl.float32, [MIN_CACHED_SPLAT // 2])
        one = np.array([1.5], np.float32)
        assert _splat(b, small, one, tl.float32).data is not _splat(b, small, one, tl.float32).data
        assert _splat(b, small, one, tl.float32).data.flags.writeable
        big = tl.block_type(tl.float32, [MIN_CACHED_SPLAT])
        monkeypatch.setattr(interpreter_fast_paths, "SPLAT_CACHE_BYTES", 2 * MIN_CACHED_SPLAT * 4)
        first = [_splat(b, big, np.array([v], np.float32), tl.float32).data for v in (10.0, 11.0, 12.0)]
        assert _splat(b, big, np.array([12.0], np.float32), tl.float32).data is first[2]  # kept
        assert _splat(b, big, np.array([10.0], np.float32), tl.float32).data is not first[0]  # dropped, made anew
        np.testing.assert_array_equal(first[1], np.full(MIN_CACHED_SPLAT, 11.0, np.float32))
