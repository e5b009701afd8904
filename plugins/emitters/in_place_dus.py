"""In-place dynamic-update-slice: a kernel over the update's elements writing into the operand's buffer.

Mirrors ``InPlaceDynamicUpdateSliceFusion`` (``xla/backends/gpu/codegen/emitters/in_place_dynamic_update_slice.cc``)
and its precondition ``CanEmitFusedDynamicUpdateSliceInPlaceForGpu`` (``xla/codegen/ir_emission_utils.cc``):
every root is a DUS (or bitcast of one) whose operand 0 is a fusion parameter (after one optional bitcast),
the parameter has no users that could read what the kernel overwrites (only elementwise ops, bitcasts,
tuples, and dynamic-slices at the very same start indices), and all updates have the same shape. Otherwise
the factory declines and the loop emitter computes the DUS out of place (bug B09: an update that is a
``slice`` of the written operand must not be done in place).
"""

from __future__ import annotations

from collections import deque
from typing import Any

from fusegen.codegen.elemental import ELEMENTWISE
from fusegen.codegen.emitter import (EmitterUnsupported, FusionEmitter, build_linear_kernel, fusion_roots,
                                     store_line)
from fusegen.codegen.kernel import EmittedFusion, LaunchDimensions
from fusegen.codegen.launch import LoopGeometry, analysis_loop_geometry
from fusegen.codegen.thread_indexing import default_thread_id_indexing_map
from fusegen.indexing import IndexingMap
from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory


def _strip_bitcasts(i: Instruction) -> Instruction:
    while i.opcode == "bitcast":
        i = i.operands[0]
    return i


def output_dus(analysis: Any) -> list[Instruction] | None:
    """The output-defining DUS of each root (``IsDynamicUpdateSliceFusion``), or None."""
    comp = getattr(analysis, "computation", None) or analysis.fusion.fused_computation
    try:
        roots = fusion_roots(comp)
    except EmitterUnsupported:
        return None
    if not roots:
        return None
    out = []
    for r in roots:
        d = _strip_bitcasts(r)
        if d.opcode != "dynamic-update-slice":
            return None
        out.append(d)
    return out


def can_emit_in_place(analysis: Any) -> bool:
    """``CanEmitFusedDynamicUpdateSliceInPlaceForGpu`` without buffer assignment (see module doc)."""
    comp = getattr(analysis, "computation", None) or analysis.fusion.fused_computation
    roots = fusion_roots(comp)
    dus_list = output_dus(analysis)
    if dus_list is None or len(dus_list) != len(roots):
        return False
    if len({id(d) for d in dus_list}) != len(dus_list):
        return False
    update_dims = {tuple(d.operands[1].shape.dimensions) for d in dus_list}
    if len(update_dims) != 1:
        return False
    root = comp.root
    for r, d in zip(roots, dus_list):
        # a single path DUS -> (bitcast)* -> root / tuple
        node = d
        while node is not r:
            users = node.users
            if len(users) != 1 or users[0].opcode != "bitcast":
                return False
            node = users[0]
        if r is not root:
            if [u for u in r.users] != [root]:
                return False
        elif r.users:
            return False
        op0 = d.operands[0]
        if op0.opcode == "bitcast":
            op0 = op0.operands[0]
        if op0.opcode != "parameter":
            return False
        update = d.operands[1]
        seen = {id(op0)}
        q = deque([op0])
        while q:
            inst = q.popleft()
            for user in inst.users:
                if user.opcode == "dynamic-slice" and _strip_bitcasts(user.operands[0]) is op0 \
                        and user.shape.dimensions == update.shape.dimensions:
                    same = [id(x) for x in user.operands[1:]] == [id(x) for x in d.operands[2:]]
                    if not (update.shape.numel == 1 or same):
                        return False
                elif user is not d and user.opcode not in ELEMENTWISE and user.opcode not in ("bitcast", "tuple"):
                    return False
                if id(user) not in seen:
                    seen.add(id(user))
                    q.append(user)
    return True


class InPlaceDynamicUpdateSliceFusion(FusionEmitter):
    """Writes only the update region; the output buffer aliases DUS operand 0 (``output_aliases``)."""

    name = "InPlaceDynamicUpdateSliceFusion"

    def geometry(self) -> LoopGeometry | None:
        """XLA's launch (``InPlaceDynamicUpdateSliceFusion::launch_dimensions``): ``CalculateLaunchDimensions``
        of the update shape with ``ComputeLoopFusionConfig``'s unroll factor for that shape (a large bf16
        update: 4 elements a thread, 8-byte accesses); ``None`` without an update."""
        dus_list = output_dus(self.analysis)
        if not dus_list or dus_list[0].operands[1].shape.numel == 0:
            return None
        return analysis_loop_geometry(self.analysis, dus_list[0].operands[1].shape)

    def launch_dimensions(self) -> LaunchDimensions | None:
        geo = self.geometry()
        return geo.launch() if geo is not None else None

    def thread_id_to_output_indexing(self, root_index: int) -> None:
        """``InPlaceDynamicUpdateSliceFusion::ComputeThreadIdToOutputIndexing``: none (runtime offsets)."""
        return None

    def thread_id_to_input_indexing(self, root_index: int, hero_operand_index: int) -> IndexingMap | None:
        """The default thread map over the update (operand 1 of the DUS hero); none for the other operands."""
        geo = self.geometry()
        if hero_operand_index != 1 or geo is None:
            return None
        return default_thread_id_indexing_map(geo.launch(), geo.unroll,
                                              output_dus(self.analysis)[root_index].operands[1].shape)

    def emit(self) -> EmittedFusion:
        dus_list = output_dus(self.analysis)
        if dus_list is None:
            raise EmitterUnsupported("fusion", self.fusion.name, "not a dynamic-update-slice fusion")
        leaves = self.fusion.shape.leaves()
        if len(leaves) != len(dus_list):
            raise EmitterUnsupported("fusion", self.fusion.name, "output leaves do not match the DUS roots")
        aliases: dict[int, int] = {}
        for k, d in enumerate(dus_list):
            op0 = d.operands[0]
            if op0.opcode == "bitcast":
                op0 = op0.operands[0]
            aliases[k] = op0.parameter_number
        upd_shape = dus_list[0].operands[1].shape
        n = upd_shape.numel
        if n == 0:
            return EmittedFusion(emitter=self.name, output_aliases=aliases)

        def body(gen, lin_c: str) -> None:
            rm = tuple(range(upd_shape.rank - 1, -1, -1))
            uidx = gen.delinearize(lin_c, upd_shape.dimensions, rm)
            for k, d in enumerate(dus_list):
                starts = gen.dus_starts(d)
                oidx = tuple(gen.iadd(u, s) for u, s in zip(uidx, starts))
                v = gen.value(d.operands[1], uidx)
                off = gen.linearize(oidx, d.shape.dimensions, d.shape.minor_to_major())
                ptr = gen.ctx.param("output", k, leaves[k], f"out{k}")
                store_line(gen, ptr, off, v, leaves[k].element_type, gen.ctx.mask)

        ks = build_linear_kernel(self, f"dus_{self.fusion.name}", n, body, geometry=self.geometry())
        return EmittedFusion(emitter=self.name, kernels=(ks,), output_aliases=aliases)


def _create(analysis: Any, context: Any = None) -> InPlaceDynamicUpdateSliceFusion | None:
    if output_dus(analysis) is None or not can_emit_in_place(analysis):
        return None
    return InPlaceDynamicUpdateSliceFusion(analysis)


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="in_place_dus", kind="kLoop", rank=20, create=_create)]
