"""The scatter's dimension numbers, normalised (XLA's ``ScatterDescription`` / ``GetScatterDescription``)
and the sub-emitter choice (``CreateScatterFusion``, ``emitters/scatter.cc``)."""

from __future__ import annotations

from typing import Any

import attrs

from fusegen.codegen.elemental import int_list
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.hlo.ir import Instruction

#: XLA's scatter constants (``scatter.cc:105-106``).
NUM_WARPS_PER_BLOCK = 4
MAX_VECTORIZED_BITS = 128


def _attr_int(inst: Instruction, key: str, default: int) -> int:
    v = inst.attrs.get(key)
    if v is None:
        return default
    if isinstance(v, (list, tuple)):
        return int(v[0])
    return int(str(v).strip("{}"))


def _attr_bool(inst: Instruction, key: str) -> bool:
    v = inst.attrs.get(key, False)
    if isinstance(v, str):
        return v.strip().lower() == "true"
    return bool(v)


@attrs.frozen
class ScatterDescription:
    """The dimension numbers of one scatter, normalised (``GetScatterDescription``).

    Attributes:
        scatter: the scatter instruction.
        n: number of scattered operands (variadic scatter: several).
        operands, indices, updates: the scatter's operand instructions.
        update_window_dims, inserted_window_dims, scatter_dims_to_operand_dims, index_vector_dim,
        input_batching_dims, scatter_indices_batching_dims: the HLO attributes.
        update_scatter_dims: update dims that are not window dims (they enumerate the slices).
        window_operand_dims: operand dims covered by the window, matching ``update_window_dims`` in order.
        window_sizes: window extent per operand dim (1 for inserted and batching dims).
        num_slices: number of update slices (windows); ``slice_size``: elements per window.
        indices_are_sorted, unique_indices: the hints.
    """

    scatter: Instruction
    n: int
    operands: tuple[Instruction, ...]
    indices: Instruction
    updates: tuple[Instruction, ...]
    update_window_dims: tuple[int, ...]
    inserted_window_dims: tuple[int, ...]
    scatter_dims_to_operand_dims: tuple[int, ...]
    index_vector_dim: int
    input_batching_dims: tuple[int, ...]
    scatter_indices_batching_dims: tuple[int, ...]
    update_scatter_dims: tuple[int, ...]
    window_operand_dims: tuple[int, ...]
    window_sizes: tuple[int, ...]
    num_slices: int
    slice_size: int
    indices_are_sorted: bool
    unique_indices: bool

    @property
    def operand_dims(self) -> tuple[int, ...]:
        return tuple(self.operands[0].shape.dimensions)

    @property
    def scatter_shape(self) -> tuple[int, ...]:
        ud = self.updates[0].shape.dimensions
        return tuple(ud[d] for d in self.update_scatter_dims)

    @property
    def window_shape(self) -> tuple[int, ...]:
        ud = self.updates[0].shape.dimensions
        return tuple(ud[d] for d in self.update_window_dims)


def describe_scatter(scatter: Instruction) -> ScatterDescription:
    """Read a scatter's dimension numbers.

    Raises:
        EmitterUnsupported: not a scatter, or inconsistent dimension numbers.
    """
    if scatter.opcode != "scatter":
        raise EmitterUnsupported(scatter.opcode, scatter.name, "not a scatter")
    ops = list(scatter.operands)
    if len(ops) < 3 or len(ops) % 2 == 0:
        raise EmitterUnsupported("scatter", scatter.name, f"scatter with {len(ops)} operands")
    n = (len(ops) - 1) // 2
    operands, indices, updates = ops[:n], ops[n], ops[n + 1:]
    a = scatter.attrs
    uwd = int_list(a.get("update_window_dims"))
    iwd = int_list(a.get("inserted_window_dims"))
    sd2od = int_list(a.get("scatter_dims_to_operand_dims"))
    ivd = _attr_int(scatter, "index_vector_dim", indices.shape.rank)
    ibd = int_list(a.get("input_batching_dims"))
    sibd = int_list(a.get("scatter_indices_batching_dims"))
    rank = operands[0].shape.rank
    upd_shape = updates[0].shape
    usd = tuple(d for d in range(upd_shape.rank) if d not in uwd)
    wod = tuple(d for d in range(rank) if d not in iwd and d not in ibd)
    if len(wod) != len(uwd):
        raise EmitterUnsupported("scatter", scatter.name,
                                 f"{len(uwd)} update window dims for {len(wod)} operand window dims")
    sizes = [1] * rank
    for od, ud in zip(wod, uwd):
        sizes[od] = upd_shape.dimensions[ud]
    num_slices = 1
    for d in usd:
        num_slices *= upd_shape.dimensions[d]
    slice_size = 1
    for d in uwd:
        slice_size *= upd_shape.dimensions[d]
    idx_rank_wo = indices.shape.rank - (1 if ivd < indices.shape.rank else 0)
    if idx_rank_wo != len(usd):
        raise EmitterUnsupported("scatter", scatter.name, "indices and update scatter dims do not match")
    vec = indices.shape.dimensions[ivd] if ivd < indices.shape.rank else 1
    if vec != len(sd2od):
        raise EmitterUnsupported("scatter", scatter.name, "index vector size differs from scatter_dims_to_operand_dims")
    return ScatterDescription(
        scatter=scatter, n=n, operands=tuple(operands), indices=indices, updates=tuple(updates),
        update_window_dims=uwd, inserted_window_dims=iwd, scatter_dims_to_operand_dims=sd2od, index_vector_dim=ivd,
        input_batching_dims=ibd, scatter_indices_batching_dims=sibd, update_scatter_dims=usd,
        window_operand_dims=wod, window_sizes=tuple(sizes), num_slices=num_slices, slice_size=slice_size,
        indices_are_sorted=_attr_bool(scatter, "indices_are_sorted"),
        unique_indices=_attr_bool(scatter, "unique_indices"),
    )


def choose_scatter_emitter(desc: ScatterDescription, device: Any) -> str:
    """XLA's sub-emitter choice (``CreateScatterFusion``, ``scatter.cc``): ``"ScatterWithDistributedIndices"``
    when the indices are hinted sorted and not unique and ``num_slices > 4 * core_count``, else
    ``"ScatterWithDistributedUpdates"``."""
    max_active_warps = NUM_WARPS_PER_BLOCK * int(getattr(device, "core_count", 0) or 0)
    if desc.indices_are_sorted and not desc.unique_indices and desc.num_slices > max_active_warps:
        return "ScatterWithDistributedIndices"
    return "ScatterWithDistributedUpdates"
