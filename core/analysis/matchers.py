"""Core's dispatch questions, registered as the plugin ``fusegen.matchers``.

Each :class:`~fusegen.registry.KindMatcher` is one step of ``GetEmitterFusionKind``
(``xla/service/gpu/hlo_fusion_analysis.cc``), asked in ascending rank until one answers:

===== ============================ =====================================================
rank  name                         answers
===== ============================ =====================================================
0     backend-config-stamp         kCustomFusion / kTriton / kCuDnn from the stamp
100   real-reduction-hero          kReduction (compatible real reduction heroes)
200   consistent-tiled-transpose   kTranspose
300   several-roots                kLoop (more than one root)
400   scatter-root                 kScatter
500   sort-root                    kSort
600   concatenate                  kConcatenate (``UseConcatenateFusion``)
1000  loop                         kLoop (always)
===== ============================ =====================================================
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from fusegen import kinds
from fusegen.analysis.reduction import are_reductions_multi_output_fusion_compatible, is_real_reduction_hero
from fusegen.hlo.shape_util import elements_in
from fusegen.plugin_manager import hookimpl
from fusegen.registry import KindMatcher

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.analysis.fusion_analysis import FusionAnalysis


def match_backend_config_stamp(analysis: "FusionAnalysis") -> str | None:
    """Checks 1-3: the ``fusion_backend_config.kind`` stamp decides, uninspected. A ``kCustom`` fusion
    without a stamp (a sort fusion, say) is not stamped and falls through."""
    if analysis.backend_kind is None:
        return None
    return kinds.STAMP_TO_KIND.get(analysis.backend_kind)


def match_real_reduction_hero(analysis: "FusionAnalysis") -> str | None:
    """Check 4: the first root with a real reduction hero; every other root is a compatible real
    reduction hero or has as many elements as the first hero's input."""
    first = None
    for root, hero in zip(analysis.roots, analysis.heroes):
        if is_real_reduction_hero(root, hero, analysis.device):
            first = hero
            break
    if first is None:
        return None
    n_in = elements_in(first.operands[0].shape)
    for root, hero in zip(analysis.roots, analysis.heroes):
        if root is first:
            continue
        if not is_real_reduction_hero(root, hero, analysis.device):
            if elements_in(root.shape) != n_in:
                return None
        elif not are_reductions_multi_output_fusion_compatible(hero, first):
            return None
    return kinds.REDUCTION


def match_consistent_tiled_transpose(analysis: "FusionAnalysis") -> str | None:
    """Check 5: ``FindConsistentTransposeHero`` found a tiled transpose."""
    return kinds.TRANSPOSE if analysis.tiled_transpose is not None else None


def match_several_roots(analysis: "FusionAnalysis") -> str | None:
    """Check 6: a multi-output fusion without reduction/transpose hero is a loop fusion."""
    return kinds.LOOP if len(analysis.roots) > 1 else None


def match_scatter_root(analysis: "FusionAnalysis") -> str | None:
    """Check 7: the root is a ``scatter``."""
    return kinds.SCATTER if analysis.roots[0].opcode == "scatter" else None


def match_sort_root(analysis: "FusionAnalysis") -> str | None:
    """Check 8: the root is a ``sort``."""
    return kinds.SORT if analysis.roots[0].opcode == "sort" else None


def match_concatenate(analysis: "FusionAnalysis") -> str | None:
    """Check 9: ``UseConcatenateFusion``."""
    return kinds.CONCATENATE if analysis.use_concatenate_fusion() else None


def match_loop(analysis: "FusionAnalysis") -> str | None:
    """Check 10: everything else is a loop fusion."""
    return kinds.LOOP


BUILTIN_MATCHERS: tuple[KindMatcher, ...] = (
    KindMatcher("backend-config-stamp", 0, match_backend_config_stamp),
    KindMatcher("real-reduction-hero", 100, match_real_reduction_hero),
    KindMatcher("consistent-tiled-transpose", 200, match_consistent_tiled_transpose),
    KindMatcher("several-roots", 300, match_several_roots),
    KindMatcher("scatter-root", 400, match_scatter_root),
    KindMatcher("sort-root", 500, match_sort_root),
    KindMatcher("concatenate", 600, match_concatenate),
    KindMatcher("loop", 1000, match_loop),
)


@hookimpl
def fusegen_fusion_kind_matchers():
    """Core's ranked dispatch questions."""
    return list(BUILTIN_MATCHERS)
