"""The pass manager: runs named module passes in order (XLA's ``HloPassPipeline``).

Passes are registered by plugins through ``fusegen_passes`` (:class:`fusegen.registry.HloPass`) and looked up
by name. The default pipeline starts with ``dot-decomposer`` (XLA's ``DotDecomposer``, run in
``GpuCompiler::OptimizeHloModule``: dots with several batch / contracting / non-contracting dimensions become
``[batch, m, k]`` dots), then mirrors the GEMM routing order of ``GpuCompiler::OptimizeHloPostLayoutAssignment``
and ``RunFusionPasses`` (``xla/service/gpu/gpu_compiler.cc:2114-2123`` then ``2002-2028``, then the fusion
pipeline ``fusion_pipeline.cc:54-97``): ``gemm-fusion`` (Triton gets first refusal of every dot), then
``gemm-rewriter`` (the dots left become cuBLAS custom calls), then ``fusion`` (producer-consumer fusion of what
remains).

:func:`is_unoptimized` tells whether a module still needs that pipeline (``jax.jit(f).lower(...).as_text("hlo")``
output: fusible ops but no fusion), so ``fusegen run`` / ``explain`` can run it first.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Sequence

import attrs

from fusegen.passes.pass_error import PassError

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.config.options import DebugOptions
    from fusegen.device import DeviceDescription
    from fusegen.hlo.ir import Module
    from fusegen.plugin_manager import PluginManager

#: XLA's order: dot canonicalization (``OptimizeHloModule``), the GEMM routing passes, the fusion pipeline.
DEFAULT_PIPELINE: tuple[str, ...] = ("dot-decomposer", "gemm-fusion", "gemm-rewriter", "fusion")
#: :data:`DEFAULT_PIPELINE` as every help text says it.
DEFAULT_PIPELINE_TEXT = ",".join(DEFAULT_PIPELINE)

#: Opcodes that a fusion pass would put into a fusion (their presence without any fusion marks the module
#: as unoptimized).
_FUSIBLE = frozenset({
    "add", "subtract", "multiply", "divide", "maximum", "minimum", "exponential", "log", "tanh", "negate",
    "abs", "convert", "select", "compare", "reduce", "broadcast", "transpose", "concatenate", "slice", "pad",
    "dot", "power", "rsqrt", "sqrt", "erf", "logistic", "and", "or", "xor", "not", "iota", "reverse", "gather",
    "scatter", "dynamic-slice", "dynamic-update-slice", "sine", "cosine", "floor", "ceil", "clamp", "remainder",
    "exponential-minus-one", "log-plus-one", "sign", "round-nearest-even", "round-nearest-afz", "atan2",
    "reduce-precision", "copy", "sort", "cbrt", "tan", "is-finite", "popcnt", "shift-left",
    "shift-right-arithmetic", "shift-right-logical", "bitcast-convert", "map", "reshape",
})


@attrs.define
class PassOptions:
    """What every pass receives as its ``options`` argument.

    Attributes:
        debug_options: XLA debug options in force (:class:`fusegen.config.options.DebugOptions`).
        device: the target :class:`fusegen.device.DeviceDescription` (compute capability, ...).
        options: this pass's ``[pipeline.options.<pass>]`` table, the defaults of the keys it declares
            (``HloPass.options``) filled in.
        log: messages a pass wants shown once (``"cuBLASLt unavailable: ..."``), appended in order.
        context: the pass's plugin's :class:`fusegen.plugin_context.PluginContext` (its ``[plugins.<name>]``
            settings, the device); None when the pass is run by hand.
    """

    debug_options: Any = None
    device: Any = None
    options: dict[str, Any] = attrs.field(factory=dict)
    log: list[str] = attrs.field(factory=list)
    context: Any = None

    def __attrs_post_init__(self) -> None:
        if self.debug_options is None:
            from fusegen.config.options import DebugOptions

            self.debug_options = DebugOptions()
        if self.device is None:
            from fusegen.device import get_device

            self.device = get_device("h200")


def pass_options(options: Any) -> PassOptions:
    """Normalise a pass's ``options`` argument (``None``, a :class:`PassOptions`, or a plain dict)."""
    if isinstance(options, PassOptions):
        return options
    if options is None:
        return PassOptions()
    if isinstance(options, dict):
        return PassOptions(options=dict(options))
    return PassOptions(debug_options=getattr(options, "debug_options", None), device=getattr(options, "device", None),
                       options=dict(getattr(options, "options", {}) or {}), context=getattr(options, "context", None))


@attrs.define
class PipelineResult:
    """Outcome of :func:`run_pipeline`: overall ``changed`` and, per pass, whether it changed the module."""

    changed: bool
    per_pass: list[tuple[str, bool]]
    log: list[str]

    @property
    def passes(self) -> list[str]:
        """The pass names run, in order."""
        return [n for n, _ in self.per_pass]


def resolve_pass_names(names: Sequence[str], registry: dict[str, Any], pm: "PluginManager | None" = None,
                       where: str = "") -> list[str]:
    """The registered pass each of ``names`` means: names compare as plugin names do
    (:func:`fusegen.config.names.normalize_name`: ``dot_bf16`` is ``dot-bf16``).

    Raises:
        PassError: a name no pass has, with a did-you-mean, the known passes and, when plugins are quarantined,
            their reasons (a quarantined plugin's passes are not registered).
    """
    from fusegen.config.names import normalize_name

    by_key = {normalize_name(n): n for n in registry}
    out = []
    for n in names:
        hit = n if n in registry else by_key.get(normalize_name(n))
        if hit is None:
            raise PassError(unknown_pass_message(n, registry, pm, where))
        out.append(hit)
    return out


def unknown_pass_message(name: str, known: Any, pm: "PluginManager | None" = None, where: str = "") -> str:
    """``unknown pass 'x'[ in WHERE]; did you mean 'y'?; known passes: ...``, then each quarantined plugin's
    reason (its passes never registered)."""
    from fusegen.config.xla_flags import did_you_mean

    known = sorted(known)
    msg = f"unknown pass {name!r}{f' in {where}' if where else ''}{did_you_mean(name, known)}; known passes: " \
          f"{', '.join(known) or '(none)'}"
    if pm is not None:
        from fusegen.plugin_diagnostics import quarantine_note

        msg += quarantine_note(pm)
    return msg


def run_pipeline(module: "Module", passes: Sequence[str] | None = None, *, pm: "PluginManager | None" = None,
                 debug_options: "DebugOptions | None" = None, device: "DeviceDescription | None" = None,
                 pass_options_by_name: dict[str, dict[str, Any]] | None = None,
                 check_values: bool = False) -> PipelineResult:
    """Run ``passes`` (names; default :data:`DEFAULT_PIPELINE`) over ``module`` in place, in order.

    After every pass the module is verified and its entry signature compared with the one before
    (:func:`fusegen.passes.pass_checks.check_after_pass`; linear in the module's size); with ``check_values``
    (``[pipeline] verify = true``) the reference evaluator also runs the module on seeded inputs before the
    pipeline and after every pass that changed it, and the outputs must stay within the pass's
    ``error_budget`` (:func:`fusegen.passes.pass_checks.check_values`).

    Args:
        module: the module (edited in place).
        passes: pass names registered through ``fusegen_passes`` (compared as plugin names are: ``dot_bf16``
            is ``dot-bf16``).
        pm: plugin manager (default: the process-wide one).
        debug_options: XLA flags in force (default: XLA's defaults).
        device: target device (default H200).
        pass_options_by_name: ``[pipeline.options.<pass>]`` tables (keys normalised as pass names).
        check_values: also compare the outputs before and after each pass.

    Returns:
        :class:`PipelineResult`.

    Raises:
        PassError: an unknown pass name (the message lists the known ones and any quarantined plugin), or a
            pass raised (the message names the pass and its plugin).
        fusegen.passes.pass_checks.PassCheckError: a pass produced an invalid module, changed the entry
            signature, or (``check_values``) changed the outputs beyond its budget.
    """
    from fusegen.hlo.module_verifier import entry_signature
    from fusegen.passes import pass_checks
    from fusegen.plugin_manager import default_plugin_manager
    from fusegen.config.names import normalize_name

    pm = pm or default_plugin_manager()
    registry = pm.passes()
    names = resolve_pass_names(list(DEFAULT_PIPELINE if passes is None else passes), registry, pm)
    by_key = {normalize_name(k): v for k, v in (pass_options_by_name or {}).items()}
    opts = PassOptions(debug_options=debug_options, device=device)
    per: list[tuple[str, bool]] = []
    changed = False
    inputs, values = None, None
    if check_values and names:
        try:
            inputs, values = pass_checks.seeded_outputs(module)
        except Exception as e:  # the input cannot be evaluated: nothing to compare with (said once)
            opts.log.append(f"[pipeline] verify: outputs not compared, the module before the passes does not "
                            f"evaluate: {type(e).__name__}: {e}")
    for n in names:
        p = registry[n]
        opts.options = {o.name: o.default for o in p.options} | dict(by_key.get(normalize_name(n), {}))
        opts.context = pm.context_for(p.plugin, device=opts.device)
        signature = entry_signature(module)
        try:
            ch = bool(p.run(module, opts))
        except PassError:
            raise
        except Exception as e:
            raise PassError(f"{pass_checks.pass_label(p, pm)} failed on module {module.name}: "
                            f"{type(e).__name__}: {e}") from e
        for c in module.computations:  # a pass may edit lists in place: no cache may outlive it
            c.invalidate()
        pass_checks.check_after_pass(module, p, signature, pm)
        if ch and values is not None:
            values = pass_checks.check_values(p, pm, values, module, inputs)
        per.append((n, ch))
        changed = changed or ch
    return PipelineResult(changed, per, list(opts.log))


def is_unoptimized(module: "Module") -> bool:
    """Whether ``module`` looks like un-fused HLO: no ``fusion`` instruction anywhere, but some fusible op
    (elementwise, reduce, dot, ...) in a non-reducer computation.

    Such modules (``jax.jit(f).lower(...).as_text("hlo")``) get the default pipeline before ``run``/``explain``.
    """
    from fusegen.passes.hlo_edit import fusible_computations

    if any(i.opcode == "fusion" for i in module.all_instructions()):
        return False
    for comp in fusible_computations(module):
        for i in comp.instructions:
            if i.opcode in _FUSIBLE:
                return True
    return False


def optimize_if_needed(module: "Module", *, pm: "PluginManager | None" = None,
                       debug_options: "DebugOptions | None" = None,
                       device: "DeviceDescription | None" = None, passes: Sequence[str] | None = None,
                       pass_options_by_name: dict[str, dict[str, Any]] | None = None,
                       check_values: bool = False) -> PipelineResult | None:
    """Run ``passes`` (default :data:`DEFAULT_PIPELINE`; ``[pipeline] passes`` / ``--passes`` in the CLI) when
    :func:`is_unoptimized` says so; ``None`` when the module was left alone. ``check_values``: see
    :func:`run_pipeline`."""
    if not is_unoptimized(module):
        return None
    return run_pipeline(module, passes, pm=pm, debug_options=debug_options, device=device,
                        pass_options_by_name=pass_options_by_name, check_values=check_values)
