"""An optional roofline cost model that ranks configs before compiling (beyond today's XLA).

XLA's current ``ConfigAssigner`` has no cost-model step; a cost model only filters Triton dot configs
when ``xla_gpu_experimental_cost_model_gemm_tiling_options`` is set (``autotuner/triton.cc:167-180``).
fusegen offers it as a step for every instruction: each config gets an estimate

    max(bytes moved / memory bandwidth, padded flops / (peak flops * wave efficiency))

and, when enabled (``AutotuneOptions.cost_model_top_k > 0``), only the best ``k`` are compiled.

For a dot (the instruction, or the dot inside a fusion) with tiling values ``block_m``/``block_n``/
``block_k`` the estimate counts the operand re-reads of the tiling (each LHS tile row is read once
per N tile, each RHS column once per M tile), the padding of partial tiles, and wave quantisation
(``ceil(tiles / cores)`` waves). Without tiling values the instruction's own bytes and flops are used,
which ranks all configs of that instruction equally. A backend can override the estimate with
``CodegenBackend.estimate_seconds``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any, Sequence

import attrs

from fusegen.perf.fusion_model import shape_bytes as _bytes

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.codegen_backend import CodegenBackend, Config
    from fusegen.hlo.ir import Instruction, Shape


@attrs.frozen
class DeviceCaps:
    """What the roofline needs (bytes/s, flop/s, SM count)."""

    bandwidth: float
    peak_flops: float
    cores: int

    @classmethod
    def of(cls, device: Any) -> "DeviceCaps":
        """From a :class:`fusegen.device.DeviceDescription` (FP32 FMA peak: cores * fpus * 2 * clock).

        Raises:
            ValueError: ``device`` is not a device description (e.g. only a model string).
        """
        if not hasattr(device, "memory_bandwidth"):
            raise ValueError(f"the cost model needs a device description (bandwidth, cores, clock), got {device!r}")
        bw = float(getattr(device, "memory_bandwidth", 0) or 1e12)
        cores = int(getattr(device, "core_count", 0) or 1)
        fpus = int(getattr(device, "fpus_per_core", 0) or 64)
        clock = float(getattr(device, "clock_rate_ghz", 0) or 1.0)
        return cls(bw, cores * fpus * 2 * clock * 1e9, cores)


def find_dot(instr: "Instruction") -> "Instruction | None":
    """The instruction itself if it is a dot, else the first dot in its called computations."""
    if instr.opcode == "dot":
        return instr
    for comp in instr.called_computations:
        for i in comp.instructions:
            d = find_dot(i)
            if d is not None:
                return d
    return None


@attrs.frozen
class DotDims:
    batch: int
    m: int
    n: int
    k: int
    in_bits: int


def dot_dims(dot: "Instruction") -> DotDims:
    from fusegen.hlo.dtypes import bit_width

    lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
    lc = tuple(dot.attrs.get("lhs_contracting_dims", ()))
    rc = tuple(dot.attrs.get("rhs_contracting_dims", ()))
    lb = tuple(dot.attrs.get("lhs_batch_dims", ()))
    rb = tuple(dot.attrs.get("rhs_batch_dims", ()))
    prod = lambda dims, sh: math.prod(sh.dimensions[d] for d in dims)  # noqa: E731
    m = prod([d for d in range(lhs.rank) if d not in lc and d not in lb], lhs)
    n = prod([d for d in range(rhs.rank) if d not in rc and d not in rb], rhs)
    return DotDims(prod(lb, lhs), m, n, prod(lc, lhs), max(bit_width(lhs.element_type), bit_width(rhs.element_type)))


def estimate_seconds(instr: "Instruction", values: dict, device: Any) -> float:
    """Roofline estimate (seconds) of ``instr`` run with config ``values`` on ``device``."""
    caps = DeviceCaps.of(device)
    io_bytes = sum(_bytes(o.shape) for o in instr.operands) + _bytes(instr.shape)
    dot = find_dot(instr)
    if dot is None:
        return max(io_bytes / caps.bandwidth, instr.shape.numel / caps.peak_flops)
    d = dot_dims(dot)
    # Tensor cores for narrow inputs: about 8x the FP32 FMA rate on recent NVIDIA parts.
    peak = caps.peak_flops * (8.0 if d.in_bits <= 16 else 1.0)
    bm, bn, bk = (int(values.get(k, 0) or 0) for k in ("block_m", "block_n", "block_k"))
    if not (bm and bn):
        return max(io_bytes / caps.bandwidth, 2.0 * d.batch * d.m * d.n * d.k / peak)
    tm, tn = math.ceil(d.m / bm), math.ceil(d.n / bn)
    kp = math.ceil(d.k / bk) * bk if bk else d.k
    tiles = d.batch * tm * tn * max(1, int(values.get("split_k", 1) or 1))
    waves = math.ceil(tiles / caps.cores)
    efficiency = tiles / (waves * caps.cores)
    flops = 2.0 * d.batch * (tm * bm) * (tn * bn) * kp
    in_bytes = d.in_bits / 8.0
    traffic = d.batch * (d.m * d.k * in_bytes * tn + d.k * d.n * in_bytes * tm) + _bytes(instr.shape)
    return max(traffic / caps.bandwidth, flops / (peak * efficiency))


def rank_configs(instr: "Instruction", configs: Sequence["Config"], backends: dict[str, "CodegenBackend"],
                 device: Any, top_k: int) -> tuple[list["Config"], dict[str, float]]:
    """The ``top_k`` configs by estimate (stable on ties), and every config's estimate by name.

    A backend's own ``estimate_seconds`` wins over the roofline; ``top_k <= 0`` keeps everything in
    the original order.
    """
    est: dict[str, float] = {}
    for c in configs:
        b = backends.get(c.backend)
        e = b.estimate_seconds(instr, c, device) if b is not None else None
        est[c.name] = float(e) if e is not None else estimate_seconds(instr, c.values, device)
    if top_k <= 0:
        return list(configs), est
    order = sorted(range(len(configs)), key=lambda i: (est[configs[i].name], i))
    keep = sorted(order[:top_k])  # keep the backends' own preference order among survivors
    return [configs[i] for i in keep], est
