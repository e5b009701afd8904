"""The configuration model: XLA's debug options fusegen honours, ``[device]``, ``[pipeline]``, ``[plugins]``.

Every :class:`DebugOptions` field carries XLA's flag name and XLA's default (``DefaultDebugOptionsIgnoringFlags``
in ``xla/debug_options_flags.cc``); its attrs metadata holds the help text, the value type, allowed values where
XLA restricts them, and the XLA source that reads the flag (file:line from ``reference/xla-facts.md`` when known).

Plugins declare their own typed keys with :class:`ConfigOption` through the ``fusegen_config_options`` hook;
those keys live under ``[plugins.<plugin name>]``.
"""

from __future__ import annotations

import typing
from typing import Any

import attrs

FLAGS_CC = "xla/debug_options_flags.cc"


def _flag(type_: type, default: Any, help: str, source: str, choices: tuple[str, ...] | None = None) -> Any:
    """One XLA debug option: an attrs field with its type, XLA default, help text and XLA source."""
    return attrs.field(
        default=default,
        metadata={"type": type_, "help": help, "xla_source": source, "choices": choices},
    )


@attrs.frozen
class DebugOptions:
    """XLA ``DebugOptions`` fields that fusegen honours, under XLA's flag names, with XLA's defaults.

    Values come from (highest first) ``--xla-flag NAME=VALUE`` on the command line, ``XLA_FLAGS`` in the
    environment, ``[debug_options]`` in the config file, then these defaults; see
    :func:`fusegen.config.loader.load_config`.
    """

    # --- GEMM routing (gpu_compiler.cc hlo normalization; gemm_fusion.cc) ---
    xla_gpu_enable_triton_gemm: bool = _flag(
        bool, True,
        "Let Triton claim dots (GemmFusion runs before GemmRewriter, so Triton gets first refusal); false sends "
        "dots to cuBLAS(Lt) through the gemm-rewriter.",
        f"{FLAGS_CC}:404; gpu_compiler.cc:371-377 (IsTritonGemmEnabled), 2114-2123")
    xla_gpu_triton_gemm_any: bool = _flag(
        bool, True,
        "Fuse every supported dot into a __triton_gemm fusion, also 'pure matmuls' that GemmFusion would otherwise "
        "leave to GemmRewriter.",
        f"{FLAGS_CC}:408; backends/gpu/transforms/gemm_fusion.cc:1533-1622 (CreateDotFusion)")
    xla_gpu_gemm_rewrite_size_threshold: int = _flag(
        int, 100,
        "Dots with (lhs_noncontracting + rhs_noncontracting) * contracting below this size stay with the classical "
        "emitters instead of becoming GEMM calls or Triton GEMM fusions (elements).",
        f"{FLAGS_CC} (kDefaultMinGemmRewriteSize); service/gpu/matmul_utils.cc:1167-1199; gemm_fusion.cc:1636-1701")
    xla_gpu_cublas_fallback: bool = _flag(
        bool, True,
        "Let cuBLASLt (the fission backend) compete with Triton for __triton_gemm fusions; false cancels "
        "CUBLASLT_FISSION candidates ('exclude_cublas_config is set.').",
        f"{FLAGS_CC} (DefaultDebugOptionsIgnoringFlags); backends/autotuner/codegen_orchestrator.cc:144-219")
    xla_gpu_enable_cublaslt: bool = _flag(
        bool, False,
        "Use cuBLASLt instead of legacy cuBLAS for GEMM custom calls produced by the gemm-rewriter (legacy cuBLAS "
        "was removed upstream, so GEMMs end in cuBLASLt either way).",
        f"{FLAGS_CC} (DefaultDebugOptionsIgnoringFlags: set_xla_gpu_enable_cublaslt(false))")
    xla_gpu_blas_max_algorithms: int = _flag(
        int, 0,
        "Most cuBLASLt algorithms to try when autotuning a GEMM; 0 means GemmConfig::kNumAlgorithms (128).",
        "service/gpu/matmul_utils.h:108; backends/gpu/autotuner/cublaslt.cc:121-127")
    xla_gpu_cudnn_gemm_fusion_level: int = _flag(
        int, 0,
        "cuDNN GEMM fusions: plain dots go to cuDNN only if level > 1 on Ampere+ or level > 0 on Blackwell+.",
        f"{FLAGS_CC}:430; backends/gpu/autotuner/cudnn.cc:117-166 (IsSupportedCudnnFusion)")
    xla_gpu_cudnn_gemm_max_plans: int = _flag(
        int, 5,
        "Most cuDNN execution plans to try per cuDNN GEMM fusion.",
        f"{FLAGS_CC} (DefaultDebugOptionsIgnoringFlags: set_xla_gpu_cudnn_gemm_max_plans(5))")
    xla_gpu_experimental_enable_conv_fusion: bool = _flag(
        bool, False,
        "Run ConvKindAssignment and ConvOperandCanonicalizer + ConvFusionRewriter (convolution fusions).",
        "nvptx_compiler.cc:196-290; fusion_pipeline.cc:54-97")
    xla_gpu_enable_cudnn_layer_norm: bool = _flag(
        bool, False,
        "Run CudnnNormRewriter (layer norm to cuDNN) at the start of post-layout-assignment optimization.",
        "nvptx_compiler.cc:309-356 (OptimizeHloPostLayoutAssignment part 1)")
    xla_allow_excess_precision: bool = _flag(
        bool, True,
        "Allow computing in a wider type than the HLO asks for (e.g. bf16 math in f32 without rounding between "
        "ops).",
        f"{FLAGS_CC} (DefaultDebugOptionsIgnoringFlags: set_xla_allow_excess_precision(true))")

    # --- Autotuning (config_assigner_pass.cc, config_assigner.cc, config_runner.cc) ---
    xla_gpu_autotune_level: int = _flag(
        int, 4,
        "0 off (first compilable or default config); 1 on; 2 on+init; 3 on+init+reinit; 4 on+init+reinit+check "
        "(red zones, output clustering); 5 also skips WRONG_RESULT configs.",
        f"{FLAGS_CC}:228 (help text 1704-1716); service/gpu/autotuning/config_assigner_pass.cc:276-279, 316-345")
    xla_gpu_autotune_gemm_rtol: float = _flag(
        float, 0.1,
        "Relative tolerance when comparing candidate outputs to the cluster representative (BufferComparator).",
        f"{FLAGS_CC}:489; backends/autotuner/config_runner.cc")
    xla_gpu_redzone_padding_bytes: int = _flag(
        int, 8 * 1024 * 1024,
        "Red-zone padding on each side of every autotuning buffer (bytes; total overhead is twice this). Used "
        "only at autotune level >= 4.",
        f"{FLAGS_CC}:366; stream_executor/gpu/redzone_allocator.h:49-51")
    xla_gpu_crash_on_verification_failures: bool = _flag(
        bool, False,
        "Fail (instead of demoting the config) when a candidate's output disagrees with the winning cluster.",
        "backends/autotuner/config_runner.cc; config_assigner_pass.cc:331-345")
    xla_gpu_exhaustive_tiling_search: bool = _flag(
        bool, False,
        "Search the whole generated Triton GEMM tiling space instead of filtering it by the per-platform default "
        "config hints.",
        "backends/gpu/autotuner/triton/dot_search_space.cc:158-199 (OptimizeConfigSet)")
    xla_gpu_experimental_enable_fusion_autotuner: bool = _flag(
        bool, True,
        "Autotune generic (non-GEMM) fusions across the native and block-level emitter backends; false removes "
        "NATIVE_EMITTER and BLOCK_LEVEL_EMITTER.",
        f"{FLAGS_CC} (DefaultDebugOptionsIgnoringFlags, upstream 2026: true); config_assigner_pass.cc:115-230, 377-429")
    xla_gpu_experimental_autotune_backends: str = _flag(
        str, "",
        "Comma-separated autotuner backends to use, or +NAME/-NAME edits of the full set; empty means all.",
        "service/gpu/autotuning/config_assigner_pass.cc:377-429")
    xla_gpu_deterministic_ops: bool = _flag(
        bool, False,
        "Deterministic results: no autotuning (first compilable config), Triton removed from the backends.",
        "service/gpu/autotuning/config_assigner_pass.cc:276-279, 377-429")
    xla_gpu_exclude_nondeterministic_ops: bool = _flag(
        bool, False,
        "Exclude non-deterministic ops; like xla_gpu_deterministic_ops it turns autotuning off.",
        "service/gpu/autotuning/config_assigner_pass.cc:276-279")

    # --- Autotune cache (autotuner_cache.cc, config_assigner.cc) ---
    xla_gpu_per_fusion_autotune_cache_dir: str = _flag(
        str, "",
        "Directory of the per-fusion autotune cache (one file per fusion); empty means no disk cache.",
        "service/gpu/autotuning/autotuner_cache.cc:86-144, 273-314")
    xla_gpu_experimental_autotune_cache_mode: str = _flag(
        str, "UPDATE",
        "UPDATE reads and writes the cache; READ only reads; WRITE_ONLY only writes. XLA's enum names "
        "(AUTOTUNE_CACHE_MODE_UPDATE ...) are accepted too.",
        f"{FLAGS_CC}:486-487; xla.proto:1730-1744; config_assigner_pass.cc:232-243",
        choices=("UPDATE", "READ", "WRITE_ONLY"))
    # --- fusegen's own autotuner limits, named in XLA's style (XLA has no such flags) ---
    xla_gpu_autotune_compile_timeout: float = _flag(
        float, 300.0,
        "Seconds one autotuning candidate may spend compiling in its worker process before it is killed and "
        "fails that config only (fusegen's own; --compile-timeout on `fusegen tune`).",
        "fusegen: fusegen/autotuning/compile_pool.py (CompilePool timeout_s)")
    xla_gpu_autotune_profile_timeout: float = _flag(
        float, 300.0,
        "Seconds one autotuning candidate may spend being profiled (unpickling, warm-up, timed runs) in its "
        "supervised worker before it is killed and fails that config only (fusegen's own).",
        "fusegen: fusegen/autotuning/supervised.py (ProfileSupervisor timeout_s)")
    xla_gpu_require_complete_aot_autotune_results: bool = _flag(
        bool, False,
        "Fail with 'No cached config found for HLO instr: ...' when an instruction is not in the cache instead "
        "of tuning it.",
        "backends/autotuner/config_assigner.cc:307-313")
    xla_gpu_load_autotune_results_from: str = _flag(
        str, "",
        "Load XLA AutotuneResults (text proto, .pbtxt) into the autotuner's memory before tuning; empty: none.",
        "service/gpu/autotuning/autotuner_util.cc (LoadAutotuneResultsFromFile); fusegen.cache.xla_results")
    xla_gpu_dump_autotune_results_to: str = _flag(
        str, "",
        "After tuning, write every result XLA can express as AutotuneResults text proto to this file; empty: none.",
        "service/gpu/autotuning/autotuner_util.cc (SerializeAutotuneResultsToFile); fusegen.cache.xla_results")


DEBUG_OPTION_FIELDS: dict[str, attrs.Attribute] = {a.name: a for a in attrs.fields(DebugOptions)}
"""Every honoured XLA flag name -> its attrs field (metadata: type, help, xla_source, choices)."""

CACHE_MODE_ENUM_PREFIX = "AUTOTUNE_CACHE_MODE_"


def normalize_choice(name: str, value: str) -> str:
    """Canonical spelling of an enum-like flag value (XLA's proto enum names are accepted as aliases)."""
    if name == "xla_gpu_experimental_autotune_cache_mode":
        v = value.upper()
        return v[len(CACHE_MODE_ENUM_PREFIX):] if v.startswith(CACHE_MODE_ENUM_PREFIX) else v
    return value


# ---------------------------------------------------------------------------------------------------------------
# Plugin-declared options


@attrs.frozen
class ConfigOption:
    """One typed key a plugin reads from ``[plugins.<plugin name>]``.

    Attributes:
        name: the TOML key.
        type: ``bool``, ``int``, ``float``, ``str``, ``list`` / ``list[str]`` / ``list[int]`` ..., or ``dict``.
            An ``int`` is accepted for a ``float`` option; ``bool`` is never accepted for ``int``.
        default: the value when the file does not set the key.
        help: one line shown by ``fusegen config show``.
        choices: allowed values, or None for any value of the type.
        plugin: set by fusegen to the declaring plugin's name.
    """

    name: str
    type: Any
    default: Any
    help: str = ""
    choices: tuple | None = None
    plugin: str = ""


def type_name(t: Any) -> str:
    """Human name of an option type (``int``, ``list[str]``)."""
    if typing.get_origin(t) is not None:
        args = ", ".join(type_name(a) for a in typing.get_args(t))
        return f"{typing.get_origin(t).__name__}[{args}]"
    return getattr(t, "__name__", str(t))


def value_type_name(v: Any) -> str:
    """Human name of a TOML value's type, as written in errors (``got str``)."""
    return {dict: "table", list: "list"}.get(type(v), type(v).__name__)


def check_value(value: Any, t: Any) -> tuple[bool, Any]:
    """Check a TOML value against an option type; returns ``(ok, converted value)``.

    ints widen to float; bool is not an int here (TOML keeps them apart, so should we).
    """
    origin = typing.get_origin(t)
    if origin is list:
        if not isinstance(value, list):
            return False, value
        (elem,) = typing.get_args(t) or (Any,)
        out = []
        for v in value:
            ok, cv = check_value(v, elem) if elem is not Any else (True, v)
            if not ok:
                return False, value
            out.append(cv)
        return True, out
    if t is Any:
        return True, value
    if t is float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False, value
        return True, float(value)
    if t is int:
        return (isinstance(value, int) and not isinstance(value, bool)), value
    if t is list:
        return isinstance(value, list), value
    return isinstance(value, t), value


# ---------------------------------------------------------------------------------------------------------------
# [device], [pipeline], [plugins]

DEVICE_PRESETS = ("h200", "h100", "a100", "rtxa6000")
"""Device presets accepted in ``[device] name`` when :mod:`fusegen.device` cannot be asked."""


@attrs.frozen
class DeviceOptions:
    """``[device]``: which device description the passes, emitters and autotuner assume.

    Attributes:
        name: a preset name (``h200`` by default; see ``fusegen.device``).
    """

    name: str = attrs.field(default="h200", metadata={"type": str, "help": "Device description preset."})


@attrs.frozen
class PipelineOptions:
    """``[pipeline]``: the ordered pass list and per-pass options.

    Attributes:
        passes: pass names in run order (names registered through ``fusegen_passes``), or None for the
            default pipeline.
        options: ``[pipeline.options.<pass>]`` tables, pass name -> {key: value}; passed to the pass's ``run``.
        verify: also evaluate the module on seeded inputs before the pipeline and after every pass that
            changes it, and fail a pass whose outputs move beyond its declared ``error_budget``
            (:mod:`fusegen.passes.pass_checks`). Verifying the rewritten module's structure and entry
            signature after every pass is always on.
        default_matmul_precision: written into every ``dot`` of ``DEFAULT`` operand precision after the
            pipeline, as JAX's ``jax_default_matmul_precision`` writes it into the HLO it lowers
            (:func:`fusegen.hlo.dot_numerics.apply_default_matmul_precision`); ``"default"`` changes nothing.
    """

    passes: list[str] | None = attrs.field(
        default=None, metadata={"type": list[str], "help": "Ordered pass names; unset means the default pipeline."})
    options: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    verify: bool = attrs.field(default=False, metadata={
        "type": bool, "help": "Evaluate the module before and after each pass; outputs must stay within the "
                              "pass's error_budget."})
    default_matmul_precision: str = attrs.field(default="default", metadata={
        "type": str, "help": "JAX's jax_default_matmul_precision for every dot of DEFAULT operand precision: "
                             "'default' (XLA:GPU runs f32 dots at tf32 on the tensor cores), 'high' "
                             "('tensorfloat32'), 'highest' ('float32': IEEE f32, no tensor cores)."})


@attrs.frozen
class PluginsOptions:
    """``[plugins]``: which plugins or registry entries (matchers, emitters, backends) to use, by name.

    Attributes:
        enable: names to use even where they would be off by default.
        disable: names to leave out (a plugin name drops everything it registers; a matcher, emitter-factory
            or backend name drops that entry).
        settings: plugin name -> its typed keys from ``[plugins.<name>]``, defaults filled in.
        strict: a plugin quarantined at load (import error, raising hook, taken name...) fails the command
            (exit 2) instead of being left out with a warning.
    """

    enable: list[str] = attrs.field(factory=list, metadata={"type": list[str], "help": "Names to enable."})
    disable: list[str] = attrs.field(factory=list, metadata={"type": list[str], "help": "Names to disable."})
    settings: dict[str, dict[str, Any]] = attrs.field(factory=dict)
    strict: bool = attrs.field(default=False, metadata={"type": bool, "help": "A quarantined plugin is an error."})
