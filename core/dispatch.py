"""Dispatch: the fusion kind of an analysed fusion, and the emitter that serves it.

Mirrors ``GetEmitterFusionKind`` (``xla/service/gpu/hlo_fusion_analysis.cc``) and
``GetFusionEmitter`` (``xla/backends/gpu/codegen/fusions.cc``), but asks the ranked
:class:`~fusegen.registry.KindMatcher` and :class:`~fusegen.registry.EmitterFactory` registries of
the plugin manager instead of a hard-coded switch. Dispatch never imports an emitter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from fusegen import kinds
from fusegen.registry import EmitterFactory, KindMatcher

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.plugin_manager import PluginManager


class DispatchError(RuntimeError):
    """No matcher answered, or a matcher answered something that is not a kind name."""


@attrs.frozen
class Decision:
    """The outcome of asking the kind matchers.

    Attributes:
        kind: an EmitterFusionKind name (``"kLoop"``, ``"kReduction"``...).
        decided_by: the answering matcher's ``name``.
        plugin: the plugin that registered that matcher.
        matcher: the :class:`~fusegen.registry.KindMatcher` itself.
    """

    kind: str
    decided_by: str
    plugin: str
    matcher: KindMatcher | None = attrs.field(default=None, eq=False, repr=False)


def _pm(pm: "PluginManager | None") -> "PluginManager":
    if pm is not None:
        return pm
    from fusegen.plugin_manager import default_plugin_manager

    return default_plugin_manager()


def _takes_context(fn: Any) -> bool:
    from fusegen.plugin_manager import _positional_arity

    return _positional_arity(fn) > 1


def get_emitter_fusion_kind(analysis: "FusionAnalysis", pm: "PluginManager | None" = None) -> Decision:
    """Ask the ranked matchers for ``analysis``'s kind; the first non-``None`` answer wins.

    Side effects: sets ``analysis.kind`` / ``analysis.decided_by``; after a kLoop decision the heroes
    are reset to the roots and the transpose description dropped (as ``HloFusionAnalysis::Create``).

    Matchers that take a second argument get their plugin's :class:`fusegen.plugin_context.PluginContext`.

    Raises:
        fusegen.plugin_manager.PluginError: a matcher raised, or answered something that is not a kind some
            plugin declared (:meth:`~fusegen.plugin_manager.PluginManager.declared_kinds`: a typo such as
            ``kLooop``); the message names the plugin, the matcher and the fusion.
        DispatchError: no matcher answered.
    """
    from fusegen.plugin_manager import PluginError

    pm = _pm(pm)
    analysis.restore_heroes()
    device = getattr(analysis, "device", None)
    for m in pm.kind_matchers():
        # a matcher written as match(analysis) gets no context: none is built for it (asked for every fusion)
        ctx = pm.context_for(m.plugin, device=device) if _takes_context(m.match) else None
        kind = pm.call_plugin(m.plugin, f"kind matcher {m.name!r}", m.match, analysis, context=ctx)
        if kind is None:
            continue
        if not isinstance(kind, str) or kind not in pm.declared_kinds():
            from fusegen.config.xla_flags import did_you_mean

            declared = sorted(pm.declared_kinds())
            hint = did_you_mean(kind, declared) if isinstance(kind, str) else ""
            raise PluginError(m.plugin, f"kind matcher {m.name!r} answered {kind!r} for fusion %{analysis.name}, "
                                        f"which is no kind a plugin declares{hint} (declared: {', '.join(declared)})")
        if kind == kinds.LOOP:
            analysis.reset_heroes_to_roots()
        analysis.kind = kind
        analysis.decided_by = m.name
        return Decision(kind=kind, decided_by=m.name, plugin=m.plugin, matcher=m)
    raise DispatchError(f"no kind matcher answered for fusion {analysis.name!r} (is the 'loop' matcher registered?)")


def get_fusion_emitter(
    analysis: "FusionAnalysis", kind: str | None = None, pm: "PluginManager | None" = None, context: Any = None
) -> tuple[Any | None, EmitterFactory | None]:
    """The first emitter a factory of ``kind`` builds for ``analysis`` (factories in rank order,
    each may decline with ``None``).

    Args:
        kind: the fusion kind; default ``analysis.kind`` (dispatching first when unset).

    Returns:
        ``(emitter, factory)``, or ``(None, None)`` when no factory serves the fusion (it then runs
        on an execution backend).

    ``context`` defaults to each factory's plugin's :class:`fusegen.plugin_context.PluginContext`.

    Raises:
        fusegen.plugin_manager.PluginError: a factory raised, or returned something that is not an emitter
            (no ``emit`` method); names the plugin, the factory and the fusion.
    """
    from fusegen.plugin_manager import PluginError

    pm = _pm(pm)
    if kind is None:
        kind = analysis.kind or get_emitter_fusion_kind(analysis, pm).kind
    for f in pm.emitter_factories(kind):
        ctx = context if context is not None else pm.context_for(f.plugin, device=getattr(analysis, "device", None))
        emitter = pm.call_plugin(f.plugin, f"emitter factory {f.name!r} ({f.kind})", f.create, analysis, context=ctx)
        if emitter is not None:
            if not callable(getattr(emitter, "emit", None)):
                raise PluginError(f.plugin, f"emitter factory {f.name!r} ({f.kind}) returned {type(emitter).__name__} "
                                            f"for fusion %{analysis.name}, expected a FusionEmitter or None")
            return emitter, f
    return None, None
