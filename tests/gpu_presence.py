"""Whether this machine can run the GPU-only tests: a CUDA driver, a device, and CuPy reaching it."""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1)
def _no_gpu() -> str | None:
    import ctypes

    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return "no CUDA driver (libcuda.so.1 not found)"
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as e:
        return f"CuPy cannot reach a CUDA device ({type(e).__name__}: {e})"
    return None
