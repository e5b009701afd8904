"""Whether a kernel launch fits the device: what a CUDA launch refuses (``CUDA_ERROR_INVALID_VALUE``, ``TOO MANY
RESOURCES REQUESTED``), checked before anything is launched.

* :func:`launch_problems`: what is known from the emitted kernels alone (``explain`` and ``run`` both check it):
  grid axes 1 to 3, ``grid.x <= 2**31 - 1``, ``y, z <= 65535`` (``block_dim_limit``), threads per block
  ``<= threads_per_block_limit`` (1024), shared memory ``<= shared_memory_per_block_optin``;
* :func:`compiled_problems`: what the sm_90 compile adds (``run`` checks it after compiling): the compiled
  shared memory, and registers: at most 255 per thread and ``registers x threads <= registers_per_block_limit``.

Mirrors the checks of XLA's ``LaunchDimensions`` / ``CalculateLaunchDimensions``
(``xla/service/gpu/launch_dimensions.cc``) and the limits of ``stream_executor::DeviceDescription``
(``threads_per_block_limit``, ``block_dim_limit``, ``registers_per_block_limit``).
"""

from __future__ import annotations

import struct
from typing import Any, Sequence

__all__ = ["launch_problems", "compiled_problems", "cubin_registers", "MAX_REGISTERS_PER_THREAD"]

#: Registers one thread may use on every NVIDIA architecture since Kepler (``ptxas`` caps at 255).
MAX_REGISTERS_PER_THREAD = 255


def _threads(ld: Any, device: Any) -> int:
    """Threads per block of the Triton launch: ``num_warps`` warps (``ld.threads`` is the XLA launch it stands
    for, informational)."""
    return int(ld.num_warps) * device.threads_per_warp


def launch_problems(emitted: Any, device: Any) -> list[str]:
    """One line per launch of ``emitted``'s kernels outside ``device``'s limits (``[]`` when all fit)."""
    import numpy as np

    out = []
    for ks in emitted.kernels:
        ld = ks.launch
        grid = tuple(ld.grid)
        if not 1 <= len(grid) <= 3:
            out.append(f"kernel {ks.name}: grid {grid} has {len(grid)} axes (1 to 3 allowed)")
        for axis, (g, lim) in enumerate(zip(grid, device.block_dim_limit)):
            if not isinstance(g, (int, np.integer)) or g < 1 or g > lim:
                out.append(f"kernel {ks.name}: grid[{axis}]={g} outside [1, {lim}]")
        threads = _threads(ld, device)
        if ld.num_warps < 1 or threads > device.threads_per_block_limit:
            out.append(f"kernel {ks.name}: num_warps={ld.num_warps} gives {threads} threads per block, "
                       f"limit {device.threads_per_block_limit}")
        if ld.shared_memory_bytes > device.shared_memory_per_block_optin:
            out.append(f"kernel {ks.name}: {ld.shared_memory_bytes} bytes of shared memory, limit "
                       f"{device.shared_memory_per_block_optin}")
    return out


def compiled_problems(kernels: Sequence[Any], shared: Sequence[int], registers: Sequence[int], device: Any) -> list[str]:
    """One line per compiled kernel over ``device``'s limits: ``shared`` bytes and ``registers`` per thread of
    each (from the sm_90 compile; 0 where unknown) against its launch's threads."""
    out = []
    for k, ks in enumerate(kernels):
        smem = int(shared[k]) if k < len(shared) else 0
        regs = int(registers[k]) if k < len(registers) else 0
        if smem > device.shared_memory_per_block_optin:
            out.append(f"kernel {ks.name} compiled to {smem} bytes of shared memory, limit "
                       f"{device.shared_memory_per_block_optin}")
        threads = _threads(ks.launch, device)
        if regs > MAX_REGISTERS_PER_THREAD:
            out.append(f"kernel {ks.name} uses {regs} registers per thread, limit {MAX_REGISTERS_PER_THREAD}")
        elif device.registers_per_block_limit and regs * threads > device.registers_per_block_limit:
            out.append(f"kernel {ks.name} uses {regs} registers per thread x {threads} threads = "
                       f"{regs * threads} registers per block, limit {device.registers_per_block_limit}")
    return out


_EIATTR_REGCOUNT = 0x2F
_EIFMT_SVAL = 0x04


def cubin_registers(cubin: bytes) -> int:
    """Registers per thread of the kernel in an sm_90 cubin: the largest ``EIATTR_REGCOUNT`` of its ``.nv.info``
    sections (what ``cuobjdump --dump-resource-usage`` prints as ``REG``); 0 when the cubin has none or is not
    an ELF64 file."""
    b = bytes(cubin or b"")
    if len(b) < 0x40 or b[:4] != b"\x7fELF" or b[4] != 2:
        return 0
    try:
        shoff = struct.unpack_from("<Q", b, 0x28)[0]
        shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
        hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
        names = hdrs[shstrndx][4]
        best = 0
        for h in hdrs:
            name = b[names + h[0]:b.index(b"\0", names + h[0])]
            if not name.startswith(b".nv.info"):
                continue
            data, i = b[h[4]:h[4] + h[5]], 0
            while i + 4 <= len(data):
                fmt, attr, size = data[i], data[i + 1], struct.unpack_from("<H", data, i + 2)[0]
                if fmt != _EIFMT_SVAL:
                    i += 4
                    continue
                if attr == _EIATTR_REGCOUNT and size >= 8:
                    best = max(best, struct.unpack_from("<I", data, i + 8)[0])
                i += 4 + size
        return best
    except (struct.error, ValueError, IndexError):
        return 0
