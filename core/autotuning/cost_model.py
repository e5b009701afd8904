"""Estimating each candidate config without the target GPU, and ranking by it (fusegen's cost model step).

XLA's ``ConfigAssigner`` has no cost-model step; a cost model only filters Triton dot configs when
``xla_gpu_experimental_cost_model_gemm_tiling_options`` is set (``autotuner/triton.cc:167-180``, with the dot
fusion cost model). fusegen estimates every config of every instruction:

1. the backend's own estimate (:meth:`fusegen.codegen_backend.CodegenBackend.estimate_seconds`), recorded as
   ``backend:<name>``;
2. else, for a backend :attr:`~fusegen.codegen_backend.CodegenBackend.modelled_by_fusegen` (the built-in Triton
   backend), ``fusegen.perf`` on a copy of the instruction with the config applied (the tiled model reads the
   config's tiles), or, for a backend that replaces the instruction (the cuBLASLt fission backend, XLA's cuBLAS
   fallback for a GEMM fusion: :meth:`~fusegen.codegen_backend.CodegenBackend.fissioned`), ``fusegen.perf`` on what
   replaces it (the library call and the fusions around it, :func:`fusegen.perf.estimate.estimate_fission`);
3. else the config has **no estimate**.

:func:`rank_configs` is used two ways: without any timing (the default on a machine without the GPU) the
estimates pick the winner, and configs without one rank after every estimated config; with timing and
``cost_model_top_k > 0`` the best ``k`` estimated configs are timed *and* up to ``k`` configs without an
estimate beside them, so a backend without an estimate can never crowd the estimated configs out, nor be
crowded out itself (issue 30: "ranked after the estimated ones, or timed beside them, never instead of them").
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any, Sequence

import attrs

from fusegen.perf.dot_model import find_dot

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.codegen_backend import CodegenBackend, Config
    from fusegen.hlo.ir import Instruction


@attrs.frozen
class ConfigEstimate:
    """One config's estimate: ``seconds`` (``None``: no estimate; infinite: the model refuses the config, e.g. a
    tiling that would spill registers) and who made it (``fusegen.perf`` or ``backend:<name>``; ``""`` when none)."""

    seconds: float | None
    model: str = ""


def _with_config(instr: "Instruction", config: "Config", backend: "CodegenBackend") -> "Instruction":
    clone = copy.copy(instr)
    clone.attrs = dict(instr.attrs)
    backend.apply_config(clone, config)
    return clone


def estimate_config(instr: "Instruction", config: "Config", backend: "CodegenBackend | None",
                    device: Any) -> ConfigEstimate:
    """The estimate of ``config`` for ``instr`` on ``device`` (see the module docstring).

    A backend whose hook raises, or whose config fusegen's model cannot read, gives no estimate (logged at
    DEBUG); nothing here raises for a bad config.
    """
    import logging

    log = logging.getLogger("fusegen.autotuning")
    if backend is None:
        return ConfigEstimate(None)
    try:
        own = backend.estimate_seconds(instr, config, device)
    except Exception as e:  # noqa: BLE001 - a plugin's hook: its failure means "no estimate"
        log.debug("backend %s: estimate_seconds failed for %s: %s", backend.name, config.name, e)
        own = None
    if own is not None:
        try:
            v = float(own)
        except (TypeError, ValueError):
            v = math.nan
        if math.isfinite(v) and v >= 0:
            return ConfigEstimate(v, f"backend:{backend.name}")
        log.debug("backend %s: estimate_seconds gave %r for %s; ignored", backend.name, own, config.name)
    if not getattr(backend, "modelled_by_fusegen", False) or not hasattr(device, "memory_bandwidth"):
        return ConfigEstimate(None)
    from fusegen.perf import estimate_fusion

    hook = getattr(backend, "fissioned", None)
    try:
        fissioned = hook(instr, config) if hook is not None else None
    except Exception as e:  # noqa: BLE001 - a plugin's hook: its failure means "no estimate"
        log.debug("backend %s: fissioned failed for %s: %s", backend.name, config.name, e)
        return ConfigEstimate(None)
    if fissioned is not None:  # a library call in place of the fusion (XLA's fission backends)
        from fusegen.perf.estimate import estimate_fission

        try:
            return ConfigEstimate(estimate_fission(fissioned, device, instr.name).seconds, "fusegen.perf")
        except Exception as e:  # noqa: BLE001 - an unreadable replacement has no estimate
            log.debug("fusegen.perf cannot estimate %s for %%%s: %s", config.name, instr.name, e)
            return ConfigEstimate(None)
    try:
        est = estimate_fusion(_with_config(instr, config, backend), device, refuse_spills=True,
                              library_candidate=False)  # the config alone, never cuBLAS's time
    except Exception as e:  # noqa: BLE001 - an unreadable config has no estimate
        log.debug("fusegen.perf cannot estimate %s for %%%s: %s", config.name, instr.name, e)
        return ConfigEstimate(None)
    # infinite: XLA's model refuses the tiling (a tile that would spill): ranked after every other config
    return ConfigEstimate(est.seconds, "fusegen.perf")


def estimate_seconds(instr: "Instruction", values: dict, device: Any) -> float:
    """``fusegen.perf``'s estimate (seconds) of a Triton GEMM config ``values`` (``block_m``, ``block_n``,
    ``block_k``, ``num_stages``, ``num_warps``, ``split_k``) for ``instr``; any other instruction its estimate as
    it is.

    Raises:
        ValueError: ``device`` is not a device description.
    """
    from fusegen.perf import estimate_fusion
    from fusegen.perf.tiled import estimate_tiled_fusion, gemm_config

    if not hasattr(device, "memory_bandwidth"):
        raise ValueError(f"the cost model needs a device description (bandwidth, cores, clock), got {device!r}")
    if values and instr.opcode == "fusion" and find_dot(instr) is not None:
        return estimate_tiled_fusion(instr, device, gemm_config(instr, values), gemm="hardware").exec_time
    return estimate_fusion(instr, device).seconds


def rank_configs(instr: "Instruction", configs: Sequence["Config"], backends: dict[str, "CodegenBackend"],
                 device: Any, top_k: int) -> tuple[list["Config"], dict[str, ConfigEstimate]]:
    """The configs to time and every config's estimate by name.

    ``top_k <= 0``: every config, estimated ones first by estimate (stable on ties), then the ones without an
    estimate in their original order, then those the model refuses (an infinite estimate). ``top_k > 0``: the
    ``top_k`` best estimated configs plus the first ``top_k`` without an estimate (timed beside them), in the
    backends' preference order; refused configs only when nothing else is left.
    """
    est = {c.name: estimate_config(instr, c, backends.get(c.backend), device) for c in configs}
    sec = [est[c.name].seconds for c in configs]
    known = sorted((i for i, v in enumerate(sec) if v is not None and math.isfinite(v)), key=lambda i: (sec[i], i))
    unknown = [i for i, v in enumerate(sec) if v is None]
    refused = [i for i, v in enumerate(sec) if v is not None and not math.isfinite(v)]
    if top_k <= 0:
        return [configs[i] for i in known + unknown + refused], est
    keep = sorted(known[:top_k] + unknown[:top_k]) or refused[:top_k]
    return [configs[i] for i in keep], est
