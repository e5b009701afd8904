"""fusegen plugin: XLA's historical input-slices emitter (``kInputSlices``).

Mirrors, from XLA as of 2025-06 (snapshot 271f80b):

* the dispatch rule in ``GetEmitterFusionKind`` (``xla/service/gpu/hlo_fusion_analysis.cc``, lines
  288-294 then): a fusion with more than one root, every root a ``slice`` with unit strides, and all
  slice operands of equal shape ignoring the element type (``IsInputFusibleNonStridedSlices``), is
  ``kInputSlices`` — asked right before the several-roots question, so this plugin ranks its matcher
  250 (transpose is 200, several roots 300);
* ``InputSlicesFusion`` (``xla/backends/gpu/codegen/emitters/input_slices.cc``): the launch covers the
  common operand shape (``GetConsistentInputShapeForRootSlices``) with the loop emitter's linear
  blocking; each lane computes the slice operands at its input index and, for every root whose slice
  contains that index, stores the value at ``index - start`` in that root's output.

Nothing in fusegen knows about this module: the ``fusegen.emitters`` entry point ``input_slices`` in
this distribution's ``pyproject.toml`` is how fusegen finds it.
"""

from __future__ import annotations

from typing import Any

from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, build_linear_kernel, store_line
from fusegen.codegen.kernel import EmittedFusion
from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, KindMatcher

__version__ = "0.1.0"

#: The fusion kind this plugin adds (XLA's spelling, ``EmitterFusionKind::kInputSlices``).
INPUT_SLICES = "kInputSlices"

#: Rank of the kind matcher: after ``consistent-tiled-transpose`` (200), before ``several-roots`` (300).
MATCHER_RANK = 250


def _slice_spec(inst: Instruction) -> list[tuple[int, int, int]]:
    return [(int(s), int(lim), int(st)) for s, lim, st in (inst.attrs.get("slice") or [])]


def is_input_fusible_non_strided_slices(roots: list[Instruction]) -> bool:
    """``IsInputFusibleNonStridedSlices``: every root is a unit-stride ``slice`` and all slice operands
    have one shape, element type ignored (dimensions and layout must agree)."""
    if not roots or any(r.opcode != "slice" or r.shape.is_tuple for r in roots):
        return False
    if any(st != 1 for r in roots for _s, _l, st in _slice_spec(r)):
        return False
    first = roots[0].operands[0].shape
    return all(r.operands[0].shape.dimensions == first.dimensions
               and r.operands[0].shape.minor_to_major() == first.minor_to_major() for r in roots)


def match_input_slices(analysis: Any) -> str | None:
    """Kind matcher: ``kInputSlices`` for multi-root fusions of non-strided slices, else ``None``."""
    roots = list(analysis.roots)
    if len(roots) > 1 and is_input_fusible_non_strided_slices(roots):
        return INPUT_SLICES
    return None


class InputSlicesFusion(FusionEmitter):
    """Emitter for ``kInputSlices`` fusions (XLA ``InputSlicesFusion``).

    One kernel over the linear index of the common slice-operand shape (physical order of the first
    slice's operand). Per root ``k``, the lanes whose index lies in ``[start, limit)`` on every dimension
    store the operand value at ``index - start`` in output leaf ``k``; other lanes store nothing.

    Raises (from :meth:`emit`):
        EmitterUnsupported: the roots are not non-strided slices of one shape, or an op of the fused
            computation cannot be generated.
    """

    name = "InputSlicesFusion"

    def emit(self) -> EmittedFusion:
        roots = list(self.analysis.roots)
        if not is_input_fusible_non_strided_slices(roots):
            raise EmitterUnsupported("fusion", self.fusion.name, "roots are not non-strided slices of one shape")
        leaves = self.fusion.shape.leaves()
        if len(leaves) != len(roots):
            raise EmitterUnsupported("fusion", self.fusion.name,
                                     f"{len(roots)} slice roots but {len(leaves)} output leaves")
        in_shape = roots[0].operands[0].shape
        n_total = in_shape.numel
        if n_total == 0 or all(leaf.numel == 0 for leaf in leaves):
            return EmittedFusion(emitter=self.name)

        def body(gen: Any, lin_c: str) -> None:
            ctx = gen.ctx
            idx = gen.delinearize(lin_c, in_shape.dimensions, in_shape.minor_to_major())
            for k, root in enumerate(roots):
                leaf = leaves[k]
                if leaf.numel == 0:
                    continue
                conds: list[str] = []
                inside = True
                for d, (start, limit, _st) in enumerate(_slice_spec(root)):
                    c = idx[d]
                    if isinstance(c, int):  # size-1 dimension: decided now
                        inside = inside and start <= c < limit
                        continue
                    if start > 0:
                        conds.append(f"({c} >= {start})")
                    if limit < in_shape.dimensions[d]:
                        conds.append(f"({c} < {limit})")
                if not inside:
                    continue
                mask_k = ctx.emit(" & ".join([ctx.mask, *conds]), "in_slice") if conds else ctx.mask
                value = gen.value(root.operands[0], idx)
                out_idx = tuple(gen.isub(c, start) for c, (start, _l, _s) in zip(idx, _slice_spec(root)))
                offset = gen.linearize(out_idx, leaf.dimensions, leaf.minor_to_major())
                ptr = ctx.param("output", k, leaf, f"out{k}")
                store_line(gen, ptr, offset, value, leaf.element_type, mask_k)

        ks = build_linear_kernel(self, f"input_slices_{self.fusion.name}", n_total, body, [in_shape])
        return EmittedFusion(emitter=self.name, kernels=(ks,))


def _create(analysis: Any, context: Any = None) -> InputSlicesFusion | None:
    roots = list(analysis.roots)
    if len(roots) > 1 and is_input_fusible_non_strided_slices(roots):
        return InputSlicesFusion(analysis)
    return None


@hookimpl
def fusegen_fusion_kind_matchers():
    return [KindMatcher(name="input-slices", rank=MATCHER_RANK, match=match_input_slices)]


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="input_slices", kind=INPUT_SLICES, rank=100, create=_create)]


@hookimpl
def fusegen_conformance_capabilities():
    return {
        "kinds": [INPUT_SLICES],
        "dtypes": ["f32", "f16", "bf16", "s32", "pred"],
        "devices": ["cpu-interpreter", "sm_90"],
        "generators": {INPUT_SLICES: "input-slices"},
    }
