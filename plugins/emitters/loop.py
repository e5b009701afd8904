"""The loop emitter: one Triton kernel over the linear index of the fusion's output.

Mirrors XLA's ``LoopFusion`` (``xla/backends/gpu/codegen/emitters/loop.cc``): every thread block covers a
contiguous range of the output's physical (minor-to-major) order, so writes are coalesced; each root is
computed elementally at its own index (:mod:`fusegen.codegen.elemental`). Several roots are written by
the same kernel; roots with fewer elements than the largest are masked (``lin < numel(root)``).

The launch is XLA's (``LoopFusion::launch_dimensions``, :func:`fusegen.codegen.launch.loop_geometry`): 128
threads per block (fewer for small outputs), each ``unroll`` consecutive elements (4 for a large
bf16/f32 output whose size 4 divides), so one Triton program is one XLA block of ``128 x unroll``
elements with 4 warps, on XLA's grid (``bf16[6,512,4096]``: 24576 blocks of 512 elements).
"""

from __future__ import annotations

from typing import Any

from fusegen.codegen.emitter import (EmitterUnsupported, FusionEmitter, build_linear_kernel, fusion_roots,
                                     store_line)
from fusegen.codegen.kernel import EmittedFusion, LaunchDimensions
from fusegen.codegen.launch import LoopGeometry, analysis_loop_geometry, element_shape
from fusegen.codegen.thread_indexing import compose_with_operand, default_thread_id_indexing_map
from fusegen.indexing import IndexingMap
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters._hero_kernel import flatten


class LoopFusion(FusionEmitter):
    """Loop emitter for ``kLoop`` fusions (and the fallback for everything elementwise).

    ``emit()`` raises :class:`EmitterUnsupported` naming the instruction when some op of the fused
    computation cannot be generated (the fusion then runs on the host backend with that reason).
    """

    name = "LoopFusion"

    def geometry(self) -> LoopGeometry:
        """XLA's launch (``LoopFusion::launch_dimensions``): ``CalculateLaunchDimensions`` of the element
        shape with ``ComputeLoopFusionConfig``'s unroll factor (the map's ``vector_index`` range)."""
        return analysis_loop_geometry(self.analysis)

    def launch_dimensions(self) -> LaunchDimensions:
        """XLA's launch dimensions for this fusion (the kernel's, too)."""
        return self.geometry().launch()

    def thread_id_to_output_indexing(self, root_index: int) -> IndexingMap:
        """``LoopFusion::ComputeThreadIdToOutputIndexing``: the default thread map of the launch with the
        unroll factor as the per-thread vector, over the element shape (``unroll_id`` = vector index)."""
        cached = self.__dict__.get("_thread_to_output")
        if cached is None:  # the same map for every root (XLA's element shape); built once
            geo = self.geometry()
            cached = default_thread_id_indexing_map(geo.launch(), geo.unroll, element_shape(self.analysis.roots))
            self.__dict__["_thread_to_output"] = cached
        return cached

    def thread_id_to_input_indexing(self, root_index: int, hero_operand_index: int) -> IndexingMap | None:
        """``LoopFusion::ComputeThreadIdToInputIndexing``: the output map composed with the root's
        output-to-input map of operand ``hero_operand_index``."""
        root = self.analysis.roots[root_index]
        return compose_with_operand(self.thread_id_to_output_indexing(root_index), root, hero_operand_index)

    def emit(self) -> EmittedFusion:
        comp = self.computation
        roots = fusion_roots(comp)
        leaves = self.fusion.shape.leaves()
        plan: list[tuple[Any, list[int]]] = []
        k = 0
        for r in roots:
            n = len(r.shape.leaves())
            plan.append((r, list(range(k, k + n))))
            k += n
        if k != len(leaves):
            raise EmitterUnsupported("fusion", self.fusion.name,
                                     f"fused computation has {k} output leaves, the fusion shape {len(leaves)}")
        for leaf in leaves:
            if not leaf.is_array:
                raise EmitterUnsupported("fusion", self.fusion.name, "token outputs")
        n_total = max((leaf.numel for leaf in leaves), default=0)
        if n_total == 0:
            return EmittedFusion(emitter=self.name)

        def body(gen, lin_c: str) -> None:
            ctx = gen.ctx
            ctx.complex_values = True  # complex values are (re, im) pairs; store_line writes both parts
            for root, lks in plan:
                ishape = leaves[lks[0]]
                n_r = ishape.numel
                if n_r == 0:
                    continue
                if n_r < n_total:
                    lin_r = gen.iexpr(f"tl.minimum(lin, {n_r - 1})", "lin_r")
                    mask_r = ctx.emit(f"lin < {n_r}", "mask_r")
                else:
                    lin_r, mask_r = lin_c, ctx.mask
                idx = gen.delinearize(lin_r, ishape.dimensions, ishape.minor_to_major())
                vals = flatten(gen.value(root, idx))
                for leaf_no, v in zip(lks, vals):
                    ls = leaves[leaf_no]
                    same = ls.dimensions == ishape.dimensions and ls.minor_to_major() == ishape.minor_to_major()
                    off = "lin" if same else gen.linearize(idx, ls.dimensions, ls.minor_to_major())
                    ptr = ctx.param("output", leaf_no, ls, f"out{leaf_no}")
                    store_line(gen, ptr, off, v, ls.element_type, mask_r)

        ks = build_linear_kernel(self, f"loop_{self.fusion.name}", n_total, body, geometry=self.geometry())
        return EmittedFusion(emitter=self.name, kernels=(ks,))


def _create(analysis: Any, context: Any = None) -> LoopFusion:
    return LoopFusion(analysis)


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="loop", kind="kLoop", rank=100, create=_create)]
