"""The descriptors plugins hand to fusegen through the registration hooks.

Each is a small frozen attrs class: the plugin manager collects them from every plugin, sorts them by
rank, and dispatch, the executor and the pipeline only ever see these descriptors (never a plugin module).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, Callable

import attrs

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.hlo.ir import Instruction, Module


def normalize_name(name: str) -> str:
    """A plugin, matcher, emitter or backend name as names are compared everywhere (``--fusegen-plugin``,
    ``[plugins] enable/disable``, ``[plugins.<name>]``, ``FUSEGEN_LOAD_PLUGINS``): the rule pip applies to
    distribution names (PEP 503), runs of ``-``, ``_`` and ``.`` are one ``-`` and letters are lower case,
    so ``input_slices``, ``input-slices`` and ``Input.Slices`` are one name."""
    return re.sub(r"[-_.]+", "-", name).lower()


@attrs.frozen
class KindMatcher:
    """One ranked question of dispatch (``GetEmitterFusionKind``, ``hlo_fusion_analysis.cc``).

    Attributes:
        name: stable identifier shown in ``decided_by`` (e.g. ``"real-reduction-hero"``).
        rank: lower ranks are asked first. Built-ins: stamp 0, reduction 100, transpose 200,
            several roots 300, scatter 400, sort 500, concatenate 600, loop 1000 (unconditional).
            A third-party matcher slots in between two by picking a rank between theirs.
        match: ``match(analysis) -> kind | None``; ``None`` passes to the next question.
        plugin: name of the plugin that registered it (filled in by the plugin manager).
    """

    name: str
    rank: int
    match: Callable[["FusionAnalysis"], str | None]
    plugin: str = ""


@attrs.frozen
class EmitterFactory:
    """Builds the emitter for one fusion kind (``GetFusionEmitter``, ``fusions.cc``).

    Attributes:
        name: the emitter family name (``"loop"``, ``"memcpy"``, ``"in_place_dus"``...).
        kind: the fusion kind it serves (``kLoop``, ``kReduction``...).
        rank: factories of one kind are tried in ascending rank; XLA's loop arm is memcpy (10),
            in-place DUS (20), loop (100).
        create: ``create(analysis, context) -> FusionEmitter | None``; ``None`` declines.
        plugin: registering plugin name (filled in by the plugin manager).
    """

    name: str
    kind: str
    rank: int
    create: Callable[["FusionAnalysis", Any], Any]
    plugin: str = ""


@attrs.frozen
class HloPass:
    """A named module pass (``HloPassInterface``).

    Attributes:
        name: the name used in pipelines (``gemm-fusion``, ``fusion``...).
        run: ``run(module, options) -> changed: bool``; edits the module in place.
        plugin: registering plugin name.
    """

    name: str
    run: Callable[["Module", Any], bool]
    plugin: str = ""


@attrs.frozen
class ExecutionBackend:
    """Something that can execute an instruction on buffers (host evaluator, library calls...).

    Attributes:
        name: shown in the ``backend`` column of ``fusegen run``.
        rank: lower ranks are asked first; the host backend ranks last (1000).
        can_execute: ``can_execute(instruction) -> bool``.
        execute: ``execute(instruction, operand_values, context) -> value`` (a numpy array, or a
            tuple of values for tuple shapes).
        trusted: ``not CanProduceWrongResults()`` in XLA's terms.
        plugin: registering plugin name.
    """

    name: str
    rank: int
    can_execute: Callable[["Instruction"], bool]
    execute: Callable[..., Any]
    trusted: bool = True
    plugin: str = ""
