"""Triton GEMM configs: XLA's per-architecture default config sets and config parsing.

The sets are the numbers of XLA's ``xla/backends/gpu/autotuner/triton/default_configs/{a100,h100,b200}.txtpb``
(selected by ``TritonBackend`` in ``backends/gpu/autotuner/triton.cc:72-105``): Ampere 30 configs, Hopper 25,
Blackwell (SM 10.x) 40. Each row is ``(block_m, block_n, block_k, num_stages, num_warps, num_ctas, is_tma_allowed)``.
"""

from __future__ import annotations

from typing import Any

import attrs

#: a100.txtpb (30 configs)
AMPERE_CONFIGS: tuple[tuple[int, int, int, int, int, int, bool], ...] = (
    (16, 8, 128, 1, 2, 1, False),
    (16, 32, 64, 3, 2, 1, False),
    (64, 8, 16, 1, 2, 1, False),
    (64, 8, 128, 3, 4, 1, False),
    (64, 16, 16, 1, 2, 1, False),
    (64, 64, 16, 1, 2, 1, False),
    (64, 64, 32, 1, 2, 1, False),
    (64, 64, 32, 1, 4, 1, False),
    (64, 64, 32, 3, 4, 1, False),
    (64, 128, 16, 1, 2, 1, False),
    (64, 128, 16, 1, 2, 1, False),
    (64, 128, 16, 3, 2, 1, False),
    (64, 128, 64, 1, 4, 1, False),
    (64, 128, 64, 3, 4, 1, False),
    (64, 128, 128, 1, 4, 1, False),
    (128, 8, 32, 4, 2, 1, False),
    (128, 16, 64, 4, 4, 1, False),
    (128, 32, 16, 1, 4, 1, False),
    (128, 32, 64, 3, 4, 1, False),
    (128, 64, 16, 1, 2, 1, False),
    (128, 64, 16, 3, 2, 1, False),
    (128, 64, 128, 3, 4, 1, False),
    (128, 128, 16, 4, 4, 1, False),
    (128, 128, 32, 4, 4, 1, False),
    (128, 128, 32, 4, 8, 1, False),
    (128, 256, 16, 4, 8, 1, False),
    (128, 256, 32, 4, 8, 1, False),
    (128, 256, 64, 3, 8, 1, False),
    (128, 256, 64, 4, 8, 1, False),
    (256, 8, 16, 1, 2, 1, False),
)

#: h100.txtpb (25 configs)
HOPPER_CONFIGS: tuple[tuple[int, int, int, int, int, int, bool], ...] = (
    (16, 8, 16, 1, 2, 1, False),
    (16, 16, 128, 3, 2, 1, False),
    (16, 32, 64, 3, 2, 1, False),
    (64, 8, 64, 3, 2, 1, True),
    (64, 8, 128, 3, 4, 1, False),
    (64, 16, 256, 1, 4, 1, False),
    (64, 32, 64, 1, 4, 1, False),
    (64, 64, 16, 1, 2, 1, False),
    (64, 64, 32, 1, 2, 1, False),
    (64, 128, 64, 3, 4, 1, True),
    (64, 128, 128, 1, 4, 1, True),
    (128, 8, 32, 4, 4, 1, False),
    (128, 16, 64, 4, 4, 1, True),
    (128, 32, 64, 3, 4, 1, False),
    (128, 64, 16, 3, 2, 1, False),
    (128, 64, 32, 3, 2, 1, False),
    (128, 64, 32, 3, 4, 1, True),
    (128, 64, 128, 3, 4, 1, True),
    (128, 128, 16, 4, 4, 1, True),
    (128, 128, 32, 4, 4, 1, True),
    (128, 128, 64, 3, 4, 1, True),
    (128, 256, 64, 3, 8, 1, False),
    (128, 256, 64, 4, 8, 1, True),
    (128, 256, 128, 3, 8, 1, True),
    (256, 128, 64, 4, 8, 1, True),
)

#: b200.txtpb (40 configs)
BLACKWELL_CONFIGS: tuple[tuple[int, int, int, int, int, int, bool], ...] = (
    (16, 16, 128, 1, 2, 1, False),
    (32, 16, 64, 3, 2, 1, False),
    (32, 16, 256, 3, 2, 1, False),
    (32, 32, 32, 4, 2, 1, False),
    (64, 16, 128, 3, 2, 1, True),
    (64, 16, 128, 3, 4, 1, False),
    (64, 16, 256, 3, 4, 1, True),
    (64, 16, 128, 3, 4, 1, False),
    (64, 32, 64, 1, 2, 1, True),
    (64, 64, 16, 1, 32, 1, False),
    (64, 64, 64, 1, 2, 1, True),
    (64, 64, 128, 3, 4, 1, True),
    (64, 128, 16, 3, 2, 1, False),
    (64, 128, 64, 4, 4, 1, False),
    (64, 128, 64, 5, 4, 1, True),
    (128, 16, 256, 2, 4, 1, False),
    (128, 16, 128, 3, 4, 1, True),
    (128, 32, 64, 3, 4, 1, False),
    (128, 32, 64, 3, 4, 1, True),
    (128, 64, 128, 3, 4, 1, False),
    (128, 128, 64, 3, 4, 1, True),
    (128, 128, 64, 4, 4, 1, False),
    (128, 128, 128, 1, 8, 1, True),
    (128, 128, 128, 3, 4, 1, True),
    (128, 128, 256, 1, 8, 1, True),
    (128, 256, 16, 4, 4, 1, True),
    (128, 256, 32, 3, 4, 1, True),
    (128, 256, 32, 3, 8, 1, False),
    (128, 256, 32, 4, 4, 1, True),
    (128, 256, 64, 3, 4, 1, True),
    (128, 256, 64, 3, 8, 1, False),
    (128, 256, 64, 4, 4, 1, True),
    (256, 16, 32, 3, 2, 1, False),
    (256, 16, 64, 3, 4, 1, True),
    (256, 16, 64, 4, 4, 1, False),
    (256, 64, 64, 3, 4, 1, True),
    (256, 64, 128, 3, 4, 1, True),
    (256, 128, 32, 5, 8, 1, True),
    (256, 256, 32, 3, 8, 1, False),
    (256, 256, 32, 5, 8, 1, True),
)

@attrs.frozen
class TritonGemmConfig:
    """XLA's ``TritonGemmConfig`` (``service/gpu/matmul_utils.h``); ``split_k`` is always 1 (XLA rejects more)."""

    block_m: int
    block_n: int
    block_k: int
    num_stages: int = 1
    num_warps: int = 4
    num_ctas: int = 1
    is_tma_allowed: bool = False

    def to_values(self) -> dict[str, Any]:
        return attrs.asdict(self)

    def to_backend_config(self) -> dict[str, Any]:
        """The ``triton_gemm_config`` JSON object XLA writes into a ``__triton_gemm`` fusion."""
        return {"block_m": str(self.block_m), "block_n": str(self.block_n), "block_k": str(self.block_k),
                "split_k": "1", "num_stages": str(self.num_stages), "num_warps": str(self.num_warps),
                "num_ctas": str(self.num_ctas), "is_tma_allowed": self.is_tma_allowed}


def default_configs(compute_capability: tuple[int, int]) -> list[TritonGemmConfig]:
    """XLA's default set for a CUDA compute capability: 8.x Ampere, 9.x Hopper, 10.x Blackwell (others: Ampere's)."""
    major = compute_capability[0]
    rows = HOPPER_CONFIGS if major == 9 else BLACKWELL_CONFIGS if major == 10 else AMPERE_CONFIGS
    return [TritonGemmConfig(*r) for r in rows]


def _int(v: Any, default: int) -> int:
    try:
        return int(v)
    except (TypeError, ValueError):
        return default


class ConfigError(ValueError):
    """A malformed or unsupported Triton GEMM config (the message names the field)."""


def from_values(values: dict[str, Any]) -> TritonGemmConfig:
    """Parse a config from JSON values (``triton_gemm_config`` or a :class:`fusegen.codegen_backend.Config`).

    Raises:
        ConfigError: ``split_k`` > 1 ("TritonBackend no longer supports split-k (split_k > 1)."), or a block
            size that is not a positive power of two.
    """
    if _int(values.get("split_k", 1), 1) > 1:
        raise ConfigError("TritonBackend no longer supports split-k (split_k > 1).")
    cfg = TritonGemmConfig(
        block_m=_int(values.get("block_m"), 64), block_n=_int(values.get("block_n"), 64),
        block_k=_int(values.get("block_k"), 32), num_stages=_int(values.get("num_stages"), 1),
        num_warps=_int(values.get("num_warps"), 4), num_ctas=_int(values.get("num_ctas"), 1),
        is_tma_allowed=bool(values.get("is_tma_allowed", False)))
    for f in ("block_m", "block_n", "block_k"):
        v = getattr(cfg, f)
        if v <= 0 or v & (v - 1):
            raise ConfigError(f"{f}={v} is not a positive power of two")
    return cfg


#: Upper bounds of a usable Triton GEMM config (a CTA has at most 1024 threads = 32 warps; Triton's
#: pipelining depth and cluster size are small); larger values come only from a damaged cache entry.
LIMITS = {"block_m": 4096, "block_n": 4096, "block_k": 4096, "num_warps": 32, "num_stages": 16, "num_ctas": 16}


def check_limits(values: dict[str, Any]) -> TritonGemmConfig:
    """:func:`from_values` plus range checks (warps, stages and CTAs positive powers of two / in range).

    Raises:
        ConfigError: naming the field and its allowed range.
    """
    cfg = from_values(values)
    for f, hi in LIMITS.items():
        v = getattr(cfg, f)
        if not 1 <= v <= hi:
            raise ConfigError(f"{f}={v} is outside 1..{hi}")
    for f in ("num_warps", "num_ctas"):
        v = getattr(cfg, f)
        if v & (v - 1):
            raise ConfigError(f"{f}={v} is not a power of two")
    return cfg
