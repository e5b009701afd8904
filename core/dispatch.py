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


def get_emitter_fusion_kind(analysis: "FusionAnalysis", pm: "PluginManager | None" = None) -> Decision:
    """Ask the ranked matchers for ``analysis``'s kind; the first non-``None`` answer wins.

    Side effects: sets ``analysis.kind`` / ``analysis.decided_by``; after a kLoop decision the heroes
    are reset to the roots and the transpose description dropped (as ``HloFusionAnalysis::Create``).

    Raises:
        fusegen.plugin_manager.PluginError: a matcher raised (names the plugin and matcher).
        DispatchError: no matcher answered, or one answered a non-string.
    """
    pm = _pm(pm)
    analysis.restore_heroes()
    for m in pm.kind_matchers():
        kind = pm.call_plugin(m.plugin, f"kind matcher {m.name!r}", m.match, analysis)
        if kind is None:
            continue
        if not isinstance(kind, str) or not kind:
            raise DispatchError(f"kind matcher {m.name!r} of plugin {m.plugin!r} answered {kind!r} for fusion {analysis.name!r}; expected a kind name")
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

    Raises:
        fusegen.plugin_manager.PluginError: a factory raised (names the plugin and factory).
    """
    pm = _pm(pm)
    if kind is None:
        kind = analysis.kind or get_emitter_fusion_kind(analysis, pm).kind
    for f in pm.emitter_factories(kind):
        emitter = pm.call_plugin(f.plugin, f"emitter factory {f.name!r} ({f.kind})", f.create, analysis, context)
        if emitter is not None:
            return emitter, f
    return None, None
