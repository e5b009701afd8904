"""jax's GPU PRNG kernel: ``cu_threefry2x32_ffi`` (``jax_threefry_gpu_kernel_lowering``).

Threefry-2x32 with 20 rounds (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
block cipher ``jax.random`` builds on, as jaxlib's ``ThreeFry2x32Kernel`` (``jaxlib/gpu/prng_kernels.cu.cc``)
and jax's own HLO lowering (``jax/_src/random/threefry2x32.py``) compute it: operands ``key0, key1, x0, x1``
(``u32``, already broadcast to one shape by jax), result ``(y0, y1)``. Bit-exact; no floating point.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import EvaluationError
from fusegen.hlo.ir import Instruction

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))
_PARITY = np.uint32(0x1BD11BDA)


def threefry2x32(k0, k1, x0, x1) -> tuple[np.ndarray, np.ndarray]:
    """Threefry-2x32 (20 rounds) of counters ``(x0, x1)`` under key ``(k0, k1)``, all ``u32`` of one shape
    (or broadcastable); returns ``(y0, y1)``."""
    k0, k1, x0, x1 = np.broadcast_arrays(*(np.asarray(v, np.uint32) for v in (k0, k1, x0, x1)))
    ks = (k0, k1, k0 ^ k1 ^ _PARITY)
    a, b = x0 + ks[0], x1 + ks[1]
    for group in range(5):
        for r in _ROTATIONS[group % 2]:
            a = a + b
            b = (b << np.uint32(r)) | (b >> np.uint32(32 - r))
            b = a ^ b
        a = a + ks[(group + 1) % 3]
        b = b + ks[(group + 2) % 3] + np.uint32(group + 1)
    return a, b


def _threefry(inst: Instruction, ops: list):
    if len(ops) != 4 or not inst.shape.is_tuple:
        raise EvaluationError(f"custom-call %{inst.name}: cu_threefry2x32_ffi takes key0, key1, x0, x1 and "
                              "gives a pair")
    with np.errstate(over="ignore"):
        y0, y1 = threefry2x32(*ops)
    dims = tuple(inst.shape.tuple_shapes[0].dimensions)
    return (y0.reshape(dims), y1.reshape(dims))


TARGETS: dict[str, Callable] = {"cu_threefry2x32_ffi": _threefry}
