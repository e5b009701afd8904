"""Autotuning options (XLA's debug options that steer tuning) and which codegen backends tune.

Mirrors the ``xla_gpu_autotune_*`` fields of ``DebugOptions`` (``xla/xla.proto``) and the backend selection
of ``xla_gpu_experimental_autotune_backends`` (``xla/service/gpu/autotuning/autotuner_pass.cc``).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Sequence

import attrs

from fusegen.autotuning.compile_pool import DEFAULT_TIMEOUT_S
from fusegen.autotuning.profiler import Profiler
from fusegen.autotuning.redzone import DEFAULT_REDZONE_BYTES
from fusegen.autotuning.selection import DEFAULT_SCRATCH_WINDOW_US
from fusegen.autotuning.supervised import DEFAULT_PROFILE_TIMEOUT_S
from fusegen.cache.tiers import normalize_mode
from fusegen.codegen_backend import CodegenBackend



#: fusegen's default ``cost_model_top_k`` when timing in Triton's interpreter (``--measure-on-cpu``): one run of
#: a small-tile config of a real GEMM takes minutes there (``gpu_mlp_bf16``: 8192 programs for 16x8 tiles), so
#: only the cost model's best 4 configs (and up to 4 without an estimate) are compiled and timed.
#: Override with ``--cost-model-top-k`` (0 times every config).
CPU_DEFAULT_TOP_K = 4

#: How candidates are timed (:func:`timing_mode`).
TIMING_MODES = ("measure", "estimate", "cpu")

#: Options whose value changes which config wins (fingerprinted into every cache key).
RESULT_CHANGING = ("xla_gpu_autotune_level", "xla_gpu_autotune_gemm_rtol", "xla_gpu_experimental_autotune_backends",
                   "xla_gpu_deterministic_ops", "xla_gpu_exclude_nondeterministic_ops", "scratch_bytes_window_us",
                   "cost_model_top_k")


@attrs.define
class AutotuneOptions:
    """Autotuner options under XLA's flag names (defaults as ``debug_options_flags.cc``).

    XLA flags: ``xla_gpu_autotune_level`` (4), ``xla_gpu_autotune_gemm_rtol`` (0.1),
    ``xla_gpu_redzone_padding_bytes`` (8 MiB per side), ``xla_gpu_per_fusion_autotune_cache_dir`` (""),
    ``xla_gpu_experimental_autotune_cache_mode`` ("UPDATE"), ``xla_gpu_require_complete_aot_autotune_results``
    (False), ``xla_gpu_experimental_autotune_backends`` ("" = all; ``"+triton,-cublaslt"`` or
    ``"triton,host"``), ``xla_gpu_crash_on_verification_failures`` (False), ``xla_gpu_cublas_fallback`` (True:
    cuBLASLt competes with the Triton configs of a GEMM fusion through the fission backend; False leaves every
    :attr:`~fusegen.codegen_backend.CodegenBackend.library_fallback` backend out, as XLA cancels their configs:
    "exclude_cublas_config is set.").

    fusegen's own: ``scratch_bytes_window_us`` (XLA's hard-coded 2 µs), ``cost_model_top_k`` (0 = off;
    ``None`` = fusegen's default: :data:`CPU_DEFAULT_TOP_K` when the autotuner times on the CPU because no
    GPU is usable and no profiler was given, else off; see :func:`default_top_k`),
    ``compile_workers`` (None = CPU count, 0 = in process), ``compile_timeout_s`` (debug option
    ``xla_gpu_autotune_compile_timeout``), ``profile_timeout_s`` (``xla_gpu_autotune_profile_timeout``),
    ``profile_in_worker`` (``pickled``: candidates compiled in a worker are profiled in a supervised worker,
    :mod:`fusegen.autotuning.supervised`; ``all``: every picklable one; ``none``), ``profile_runs`` (None:
    5 with CUDA events, 0 = the timed warm-up run on the CPU),
    ``seed`` (input data), ``tune_emitter_fusions`` (also tune emitter fusions' launch parameters),
    ``retune_configured`` (also tune instructions that already carry a config), ``measure_on_cpu`` (without a GPU,
    time candidates in Triton's interpreter / numpy instead of estimating them; recorded as CPU time, never as a
    GPU figure), ``remeasure_estimates`` (on a GPU, re-measure cache entries whose figure is not a GPU
    measurement; ``False`` applies them as they are).
    """

    xla_gpu_autotune_level: int = 4
    xla_gpu_autotune_gemm_rtol: float = 0.1
    xla_gpu_redzone_padding_bytes: int = DEFAULT_REDZONE_BYTES
    xla_gpu_per_fusion_autotune_cache_dir: str = ""
    xla_gpu_experimental_autotune_cache_mode: str = attrs.field(default="UPDATE", converter=normalize_mode)
    xla_gpu_require_complete_aot_autotune_results: bool = False
    xla_gpu_experimental_autotune_backends: str = ""
    xla_gpu_crash_on_verification_failures: bool = False
    xla_gpu_deterministic_ops: bool = False
    xla_gpu_exclude_nondeterministic_ops: bool = False
    xla_gpu_cublas_fallback: bool = True
    scratch_bytes_window_us: float = DEFAULT_SCRATCH_WINDOW_US
    cost_model_top_k: int | None = None
    compile_workers: int | None = None
    compile_timeout_s: float = DEFAULT_TIMEOUT_S
    profile_timeout_s: float = DEFAULT_PROFILE_TIMEOUT_S
    profile_in_worker: str = attrs.field(default="pickled", validator=attrs.validators.in_(("pickled", "all", "none")))
    profile_runs: int | None = None
    seed: int = 0
    tune_emitter_fusions: bool = False
    retune_configured: bool = False
    measure_on_cpu: bool = False
    remeasure_estimates: bool = True

    @classmethod
    def from_debug_options(cls, obj: Any, **overrides: Any) -> "AutotuneOptions":
        """Read every field this class knows from ``obj`` (e.g. ``fusegen.config.options.DebugOptions``)."""
        kw = {}
        for f in attrs.fields(cls):
            if hasattr(obj, f.name):
                kw[f.name] = getattr(obj, f.name)
        for flag, field in (("xla_gpu_autotune_compile_timeout", "compile_timeout_s"),
                            ("xla_gpu_autotune_profile_timeout", "profile_timeout_s")):
            if hasattr(obj, flag):
                kw[field] = float(getattr(obj, flag))
        kw.update(overrides)
        return cls(**kw)

    @property
    def check_correctness(self) -> bool:
        return self.xla_gpu_autotune_level >= 4

    @property
    def allow_autotuning(self) -> bool:
        """False for level 0 or deterministic ops (``config_assigner_pass.cc:276-279``)."""
        return (self.xla_gpu_autotune_level > 0 and not self.xla_gpu_deterministic_ops
                and not self.xla_gpu_exclude_nondeterministic_ops)

    def fingerprint(self, backends: Sequence[CodegenBackend] = ()) -> str:
        """sha256 hex of the result-changing options and the selected backends' ``name:version``."""
        d = {k: getattr(self, k) for k in RESULT_CHANGING}
        d["xla_gpu_experimental_autotune_backends"] = None  # represented by the selected set below
        d["backends"] = sorted(f"{b.name}:{b.version}" for b in backends)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()


def default_top_k(profiler: Profiler | None, device: Any, measure_on_cpu: bool = False) -> int:
    """``cost_model_top_k`` when the options leave it ``None``.

    :data:`CPU_DEFAULT_TOP_K` when the autotuner times in Triton's interpreter on request (``measure_on_cpu``,
    no profiler passed in, no usable GPU) and ``device`` is a description the cost model can use; else 0 (a GPU
    times every config; estimating needs no cut; a profiler passed in explicitly keeps every config), so an
    estimating CPU run and a GPU run share cache keys.
    """
    if profiler is not None or not hasattr(device, "memory_bandwidth") or not measure_on_cpu:
        return 0
    return 0 if gpu_available() else CPU_DEFAULT_TOP_K


def gpu_available() -> bool:
    """CuPy and a CUDA device are usable (CUDA-event timing)."""
    from fusegen.autotuning.profiler import CudaEventsProfiler

    return CudaEventsProfiler.availability()[0]


def timing_mode(profiler: Profiler | None, measure_on_cpu: bool = False) -> str:
    """How candidates are timed: ``measure`` (CUDA events on the GPU), ``estimate`` (no timing: the cost model's
    estimates pick, the default without a GPU) or ``cpu`` (CPU wall time: ``measure_on_cpu``, or a CPU profiler
    passed in explicitly)."""
    if profiler is not None:
        return "measure" if getattr(profiler, "name", "") == "cuda-events" else "cpu"
    if gpu_available():
        return "measure"
    return "cpu" if measure_on_cpu else "estimate"


def for_device(backends: Sequence[CodegenBackend], device: Any, spec: str = "") -> list[CodegenBackend]:
    """``backends`` without those that do not target the GPU (``targets_gpu = False``: the host) when ``device``
    is a GPU description (every fusegen preset; XLA's device key).

    Raises:
        ValueError: ``spec`` (``xla_gpu_experimental_autotune_backends``) asks for such a backend by name.
    """
    platform = getattr(device, "platform", "CUDA") if hasattr(device, "memory_bandwidth") else "CUDA"
    if platform not in ("CUDA", "ROCM", "SYCL"):
        return list(backends)
    host_only = [b for b in backends if not getattr(b, "targets_gpu", True)]
    asked = {s.strip().lstrip("+").lower() for s in (spec or "").split(",") if s.strip() and not s.strip().startswith("-")}
    for b in host_only:
        if b.name.lower() in asked:
            from fusegen.device import model_string

            key = model_string(device) if hasattr(device, "memory_bandwidth") else str(device)
            raise ValueError(f"backend {b.name!r} runs fusions on the CPU; it is not an XLA:GPU backend and is never "
                             f"tuned for a GPU device key ({key}); it stays the CPU's execution path")
    return [b for b in backends if getattr(b, "targets_gpu", True)]


def without_names(spec: str, names: set[str]) -> str:
    """``spec`` without the ``-name`` items for ``names`` (backends already left out, e.g. ``-host``)."""
    low = {n.lower() for n in names}
    items = [s.strip() for s in (spec or "").split(",") if s.strip()]
    return ",".join(s for s in items if not (s.startswith("-") and s[1:].strip().lower() in low))


# --------------------------------------------------------------------------------------------
# Backend selection and discovery
# --------------------------------------------------------------------------------------------

def select_backends(backends: Sequence[CodegenBackend], spec: str) -> list[CodegenBackend]:
    """Backends enabled by ``xla_gpu_experimental_autotune_backends`` (case-insensitive names).

    ``""`` keeps all; ``"a,b"`` keeps exactly those; ``"+a,-b"`` edits the full set (XLA's syntax).

    Raises:
        ValueError: an unknown name (listing the known ones), or plain names mixed with ``+``/``-``.
    """
    known = [b.name.lower() for b in backends]
    items = [s.strip() for s in (spec or "").split(",") if s.strip()]
    if not items:
        return list(backends)
    signed = [s[0] in "+-" for s in items]
    if any(signed) and not all(signed):
        raise ValueError(f"xla_gpu_experimental_autotune_backends={spec!r}: either list backends or edit the "
                         f"default set with +name/-name, not both")
    enabled = set(known) if all(signed) else set()
    for s in items:
        name = s[1:].strip().lower() if s[0] in "+-" else s.lower()
        if name not in known:
            from fusegen.config.xla_flags import did_you_mean
            from fusegen.plugin_manager import default_plugin_manager

            raise ValueError(f"xla_gpu_experimental_autotune_backends: unknown backend {name!r}"
                             f"{did_you_mean(name, known)}; registered: {', '.join(known) or '(none)'}"
                             f"{default_plugin_manager().quarantine_note()}")
        if s[0] == "-":
            enabled.discard(name)
        else:
            enabled.add(name)
    return [b for b in backends if b.name.lower() in enabled]


def discover_backends(pm: Any = None) -> list[CodegenBackend]:
    """Backends contributed through the ``fusegen_codegen_backends`` hook, sorted by ``rank`` (stable).

    Same order as ``PluginManager.codegen_backends`` for equal ranks. Names are owned (a plugin taking
    another's backend name without ``replaces`` is quarantined when it loads, so it is not among these);
    each backend's ``context`` is its plugin's :class:`fusegen.plugin_context.PluginContext`.
    """
    from fusegen.plugin_manager import default_plugin_manager

    pm = pm or default_plugin_manager()
    return sorted(pm.codegen_backends(), key=lambda b: b.rank)
