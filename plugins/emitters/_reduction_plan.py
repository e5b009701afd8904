"""The roots of a reduction fusion sorted into reduction roots and side outputs.

A reduction kernel (:mod:`fusegen_plugins.emitters.reduction`) is built around the first reduction hero, as
XLA's ``ReductionFusion`` (``xla/backends/gpu/codegen/emitters/reduction.cc``) is; :class:`ReductionPlan` finds
it, checks that the other reduces fit the same kernel and that every other root is a side output as large as
the reduce input.
"""

from __future__ import annotations

from typing import Any

from fusegen.analysis.reduction import (ReductionDimensions, are_reductions_multi_output_fusion_compatible,
                                        get_reduction_kind_and_contiguous_components, is_real_reduction_hero)
from fusegen.codegen.elemental import int_list
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen.hlo.shape_util import are_dimensions_consecutive


def shape_leaves(shape: Shape) -> list[Shape]:
    """The leaf shapes of ``shape``: its leaves if it is a tuple, else itself."""
    return shape.leaves() if shape.is_tuple else [shape]


def usable_hero(root: Instruction, hero: Instruction) -> bool:
    """A reduce the kernel can be built around: kept or reduced dims consecutive in the input layout
    (``IsReductionFromOrToContiguousDimensions`` without the speed test). fusegen's kernels never split
    a reduced row across programs, so an epilogue is fine even where XLA's ``ReductionIsRaceFree`` fails."""
    if hero.opcode != "reduce" or not hero.operands:
        return False
    shape = hero.operands[0].shape
    reduced = set(int_list(hero.attrs.get("dimensions")))
    kept = [d for d in range(shape.rank) if d not in reduced]
    if not (are_dimensions_consecutive(shape, kept) or are_dimensions_consecutive(shape, sorted(reduced))):
        return False
    return True


class ReductionPlan:
    """Roots of a reduction fusion sorted into reduction roots and side outputs."""

    def __init__(self, analysis: Any, fusion: Instruction):
        first = analysis.find_hero_reduction()
        if first is None:  # not a kReduction by XLA's speed heuristics, but the kernel shape still applies
            first = next((h for r, h in zip(analysis.roots, analysis.non_trivial_heroes) if usable_hero(r, h)), None)
        if first is None:
            raise EmitterUnsupported("fusion", fusion.name, "no reduce whose kept or reduced dims are consecutive")
        self.first = first
        self.dims: ReductionDimensions = get_reduction_kind_and_contiguous_components(first)
        self.heroes: list[Instruction] = []
        self.reduction_roots: list[tuple[Instruction, Instruction, list[int]]] = []  # root, hero, leaves
        self.side_roots: list[tuple[Instruction, list[int]]] = []
        in_numel = first.operands[0].shape.numel
        k = 0
        for root, hero in zip(analysis.roots, analysis.non_trivial_heroes):
            n = len(shape_leaves(root.shape))
            lks = list(range(k, k + n))
            k += n
            if hero.opcode == "reduce" and (is_real_reduction_hero(root, hero, analysis.device) or usable_hero(root, hero)):
                if not are_reductions_multi_output_fusion_compatible(hero, first):
                    raise EmitterUnsupported("reduce", hero.name,
                                             f"reduction not compatible with %{first.name} in one kernel")
                if not any(h is hero for h in self.heroes):
                    self.heroes.append(hero)
                self.reduction_roots.append((root, hero, lks))
                continue
            if root.shape.is_tuple or not root.shape.is_array:
                raise EmitterUnsupported(root.opcode, root.name, "tuple-shaped side output")
            if root.shape.numel != in_numel:
                raise EmitterUnsupported(root.opcode, root.name,
                                         f"side output has {root.shape.numel} elements, the reduce input {in_numel}")
            self.side_roots.append((root, lks))
        leaves = shape_leaves(fusion.shape)
        if k != len(leaves):
            raise EmitterUnsupported("fusion", fusion.name,
                                     f"roots have {k} output leaves, the fusion shape {len(leaves)}")
        for hero in self.heroes:
            n = len(hero.operands) // 2
            if not isinstance(hero.attrs.get("to_apply"), Computation):
                raise EmitterUnsupported("reduce", hero.name, "reduce without to_apply computation")
            for x in hero.operands[:n]:
                if x.shape.dimensions != hero.operands[0].shape.dimensions:
                    raise EmitterUnsupported("reduce", hero.name, "variadic inputs of different shapes")
