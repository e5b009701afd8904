"""The spelled-out parts of a capture: XLA's GPU target config for a fusegen device, ``f32[64,128]`` argument specs,
partition specs as text, and seeded draws for arguments given only by shape and dtype."""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from fusegen.jax_capture.errors import CaptureError


def target_config_text(device: Any) -> str:
    """``device`` (a :class:`fusegen.device.DeviceDescription`) as the ``GpuTargetConfigProto`` text jaxlib
    reads (the fields of XLA's ``specs/*.txtpb`` that jaxlib 0.10 understands)."""
    d = device
    major, minor = d.compute_capability
    info = [("threads_per_block_limit", d.threads_per_block_limit), ("threads_per_warp", d.threads_per_warp),
            ("shared_memory_per_block", d.shared_memory_per_block), ("shared_memory_per_core", d.shared_memory_per_core),
            ("threads_per_core_limit", d.threads_per_core_limit), ("core_count", d.core_count),
            ("fpus_per_core", d.fpus_per_core), ("block_dim_limit_x", d.block_dim_limit[0]),
            ("block_dim_limit_y", d.block_dim_limit[1]), ("block_dim_limit_z", d.block_dim_limit[2]),
            ("memory_bandwidth", d.memory_bandwidth), ("l2_cache_size", d.l2_cache_size),
            ("clock_rate_ghz", d.clock_rate_ghz), ("device_memory_size", d.device_memory_size),
            ("shared_memory_per_block_optin", d.shared_memory_per_block_optin)]
    lines = ["gpu_device_info {"] + [f"  {k}: {v}" for k, v in info]
    lines += ["  cuda_compute_capability {", f"    major: {major}", f"    minor: {minor}", "  }",
              f"  registers_per_core_limit: {d.registers_per_core_limit}",
              f"  registers_per_block_limit: {d.registers_per_block_limit}", "}",
              f'platform_name: "{d.platform}"', "dnn_version_info {", "  major: 9", "  minor: 8", "}",
              f'device_description_str: "{d.model}"']
    return "\n".join(lines) + "\n"


def parse_arg_spec(text: str) -> tuple[tuple[int, ...], np.dtype]:
    """``f32[64,128]`` -> ``((64, 128), float32)`` (HLO element type spellings; ``f32[]`` is a scalar).

    Raises:
        CaptureError: not ``TYPE[dims]``.
    """
    from fusegen.hlo.dtypes import numpy_dtype

    m = re.fullmatch(r"\s*([a-z0-9]+)\[([\d,\s]*)\]\s*", text)
    if not m:
        raise CaptureError(f"--args {text!r}: expected TYPE[dims], e.g. f32[64,128]")
    try:
        dt = np.dtype(numpy_dtype(m.group(1)))
    except Exception:
        raise CaptureError(f"--args {text!r}: unknown element type {m.group(1)!r}") from None
    return tuple(int(x) for x in m.group(2).split(",") if x.strip()), dt


def parse_spec(text: str) -> tuple:
    """A partition spec: ``""`` (replicated), ``"d"``, ``"d,None"``, ``"None,d"`` -> a tuple for ``PartitionSpec``."""
    if not text.strip():
        return ()
    return tuple(None if t.strip() in ("None", "none", "_", "") else t.strip() for t in text.split(","))


def seeded(shape: tuple[int, ...], dt: np.dtype, rng: np.random.Generator) -> np.ndarray:
    """A seeded draw for an argument given by shape and dtype: floats ``N(0, 0.25)``, bools 0/1, integers
    ``[0, 8)`` (in range as indices of small dimensions)."""
    if dt.kind == "f" or dt.name in ("bfloat16",):
        return (rng.standard_normal(shape) * 0.5).astype(dt)
    if dt.kind == "b":
        return rng.integers(0, 2, shape).astype(dt)
    return rng.integers(0, 8, shape).astype(dt)
