"""The memcpy "emitter": a loop fusion whose every root is ``copy(parameter)`` with identical layout.

Mirrors ``GetCopyFusion`` / ``MemcpyFusion`` (``xla/backends/gpu/codegen/fusions.cc``,
``codegen/copy.cc``): no kernel, one device-to-device copy per root.
"""

from __future__ import annotations

from typing import Any

from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, fusion_roots
from fusegen.codegen.kernel import EmittedFusion
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory


def copy_fusion_pairs(analysis: Any) -> list[tuple[int, int]] | None:
    """``[(operand, output_leaf)]`` when every root is ``copy(parameter)`` with the same layout, else None."""
    fusion = analysis.fusion
    comp = getattr(analysis, "computation", None) or fusion.fused_computation
    try:
        roots = fusion_roots(comp)
    except EmitterUnsupported:
        return None
    leaves = fusion.shape.leaves()
    if len(roots) != len(leaves) or not roots:
        return None
    pairs = []
    for k, r in enumerate(roots):
        if r.opcode != "copy" or r.shape.is_tuple:
            return None
        src = r.operands[0]
        if src.opcode != "parameter":
            return None
        if src.shape.dimensions != r.shape.dimensions or src.shape.element_type != r.shape.element_type:
            return None
        if src.shape.minor_to_major() != r.shape.minor_to_major():
            return None
        if leaves[k].minor_to_major() != r.shape.minor_to_major():
            return None
        pairs.append((src.parameter_number, k))
    return pairs


class MemcpyFusion(FusionEmitter):
    """Copies instead of a kernel (``EmittedFusion.copies``)."""

    name = "MemcpyFusion"

    def __init__(self, analysis: Any, pairs: list[tuple[int, int]] | None = None):
        super().__init__(analysis)
        self.pairs = pairs if pairs is not None else copy_fusion_pairs(analysis)
        if self.pairs is None:
            raise EmitterUnsupported("fusion", analysis.fusion.name, "not a copy(parameter) fusion")

    def emit(self) -> EmittedFusion:
        return EmittedFusion(emitter=self.name, copies=tuple(self.pairs))


def _create(analysis: Any, context: Any = None) -> MemcpyFusion | None:
    pairs = copy_fusion_pairs(analysis)
    return MemcpyFusion(analysis, pairs) if pairs is not None else None


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="memcpy", kind="kLoop", rank=10, create=_create)]
