"""The descriptors plugins hand to fusegen through the registration hooks.

Each is a small frozen attrs class: the plugin manager collects them from every plugin, sorts them by
rank, and dispatch, the executor and the pipeline only ever see these descriptors (never a plugin module).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

import attrs

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.hlo.ir import Instruction, Module


@attrs.frozen
class KindMatcher:
    """One ranked question of dispatch (``GetEmitterFusionKind``, ``hlo_fusion_analysis.cc``).

    Attributes:
        name: stable identifier shown in ``decided_by`` (e.g. ``"real-reduction-hero"``).
        rank: lower ranks are asked first. Built-ins: stamp 0, reduction 100, transpose 200,
            several roots 300, scatter 400, sort 500, concatenate 600, loop 1000 (unconditional).
            A third-party matcher slots in between two by picking a rank between theirs.
        match: ``match(analysis) -> kind | None``, or ``match(analysis, context)`` (a
            :class:`fusegen.plugin_context.PluginContext`) when it takes a second argument; ``None`` passes
            to the next question. An answer that is no kind a plugin declared (XLA's kinds, an emitter
            factory's ``kind``, a matcher's ``kinds``) fails the fusion naming the plugin.
        plugin: name of the plugin that registered it (filled in by the plugin manager).
        kinds: new kind names this matcher may answer that no emitter factory serves (rarely needed).
        replaces: the name of another plugin's matcher this one takes the place of (names are owned:
            registering a taken name without saying so quarantines the plugin).
    """

    name: str
    rank: int
    match: Callable[..., str | None]
    plugin: str = ""
    kinds: tuple[str, ...] = attrs.field(default=(), converter=tuple)
    replaces: str | None = None


@attrs.frozen
class EmitterFactory:
    """Builds the emitter for one fusion kind (``GetFusionEmitter``, ``fusions.cc``).

    Attributes:
        name: the emitter family name (``"loop"``, ``"memcpy"``, ``"in_place_dus"``...).
        kind: the fusion kind it serves (``kLoop``, ``kReduction``...).
        rank: factories of one kind are tried in ascending rank; XLA's loop arm is memcpy (10),
            in-place DUS (20), loop (100).
        create: ``create(analysis, context) -> FusionEmitter | None`` (``context``: a
            :class:`fusegen.plugin_context.PluginContext`); ``None`` declines; anything else that is not an
            emitter fails the fusion naming the plugin.
        plugin: registering plugin name (filled in by the plugin manager).
        replaces: the name of another plugin's factory this one takes the place of (e.g. ``"loop"``).
    """

    name: str
    kind: str
    rank: int
    create: Callable[["FusionAnalysis", Any], Any]
    plugin: str = ""
    replaces: str | None = None


@attrs.frozen
class HloPass:
    """A named module pass (``HloPassInterface``).

    Attributes:
        name: the name used in pipelines (``gemm-fusion``, ``fusion``...).
        run: ``run(module, options) -> changed: bool``; edits the module in place. ``options`` is a
            :class:`fusegen.passes.pipeline.PassOptions` (``.options``: this pass's
            ``[pipeline.options.<name>]`` table; ``.context``: the plugin's
            :class:`fusegen.plugin_context.PluginContext`).
        plugin: registering plugin name.
        options: the keys ``[pipeline.options.<name>]`` may set (:class:`fusegen.config.options.ConfigOption`,
            checked with file:line like a plugin's own keys); ``()``: the pass takes none.
        replaces: the name of another plugin's pass this one takes the place of.
        error_budget: how far the rewrite may move the module's outputs, as a fraction of each output's
            largest magnitude: after the pass, ``max |after - before| <= error_budget * max |before|`` per
            output on seeded inputs, both evaluated by the reference evaluator (checked by the conformance
            suite and by ``[pipeline] verify = true``; :mod:`fusegen.passes.pass_checks`). ``0`` (the default)
            declares an exact rewrite: outputs bit for bit equal. A precision pass declares what its rounding
            costs (e.g. ``2**-7`` for operands rounded to bf16). Integer outputs must always be equal.
    """

    name: str
    run: Callable[["Module", Any], bool]
    plugin: str = ""
    options: tuple = attrs.field(default=(), converter=tuple)
    replaces: str | None = None
    error_budget: float = attrs.field(default=0.0, converter=float, validator=attrs.validators.ge(0.0))


@attrs.frozen
class ExecutionBackend:
    """Something that can execute an instruction on buffers (host evaluator, library calls...).

    Attributes:
        name: shown in the ``backend`` column of ``fusegen run``.
        rank: lower ranks are asked first; the host backend ranks last (1000).
        can_execute: ``can_execute(instruction) -> bool``.
        execute: ``execute(instruction, operand_values, context) -> value`` (a numpy array, or a
            tuple of values for tuple shapes; ``context``: a :class:`fusegen.plugin_context.PluginContext`
            whose ``executor`` is the running executor).
        trusted: ``not CanProduceWrongResults()`` in XLA's terms.
        plugin: registering plugin name.
        replaces: the name of another plugin's execution backend this one takes the place of.
    """

    name: str
    rank: int
    can_execute: Callable[["Instruction"], bool]
    execute: Callable[..., Any]
    trusted: bool = True
    plugin: str = ""
    replaces: str | None = None
