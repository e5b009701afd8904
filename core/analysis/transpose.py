"""Tiled-transpose detection and the transpose sub-emitter choice.

Mirrors ``GetDescriptionForTiledTransposeEmitter``, ``PackedTransposeDescription`` and
``GetPackedTransposeTileSizes`` (``xla/service/gpu/ir_emission_utils.cc``),
``ShapeUtil::GetNormalizedLogicalTransposeShape`` (``xla/shape_util.cc``),
``FindConsistentTransposeHero`` (``xla/service/gpu/hlo_fusion_analysis.cc``) and the choice in
``CreateTransposeFusion`` (``xla/backends/gpu/codegen/emitters/transpose.cc``).
"""

from __future__ import annotations

from typing import Sequence

import attrs

from fusegen.hlo.shape_util import (
    inverse_permutation,
    is_default_layout,
    is_reshape_or_transpose_bitcast,
    permute,
)
from fusegen.hlo.dtypes import bit_width
from fusegen.hlo.ir import Instruction, Shape

# ir_emission_utils.h constants.
MIN_DIMENSION_TO_TRANSPOSE_TILED = 16
MIN_DIMENSION_TO_TRANSPOSE_TILED2 = 8
MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED = 64 * 128
MAX_BITS_IN_MOST_MINOR_DIMENSION = 8 * 8
NUM_SHMEM_BANKS = 32
BANK_BITWIDTH = 32


def get_bitwidth(element_type: str) -> int:
    """``GetBitwidth``: ``pred`` counts 8 bits."""
    return 8 if element_type == "pred" else bit_width(element_type)


@attrs.frozen
class TransposeDescription:
    """A transpose the shared-memory emitter can tile (``TransposeDescription``).

    Attributes:
        instr: the transpose instruction (the hero).
        dimensions: normalized output dimensions (degenerate dims dropped, runs grouped).
        permutation: normalized permutation (output dim ``i`` = operand dim ``permutation[i]``).
        shmem_usage: shared memory the emitter needs, in bytes.
    """

    instr: Instruction = attrs.field(eq=False)
    dimensions: tuple[int, ...]
    permutation: tuple[int, ...]
    shmem_usage: int = 0

    @property
    def input_shape(self) -> Shape:
        return self.instr.operands[0].shape

    def is_equivalent(self, other: "TransposeDescription") -> bool:
        """Same normalized dims, permutation and element bit width (``IsEquivalent``)."""
        return (
            self.dimensions == other.dimensions
            and self.permutation == other.permutation
            and get_bitwidth(self.instr.shape.element_type) == get_bitwidth(other.instr.shape.element_type)
        )


def get_normalized_logical_transpose_shape(
    operand_shape: Shape, output_shape: Shape, dimensions: Sequence[int]
) -> tuple[tuple[int, ...], tuple[int, ...]] | None:
    """Normalize a transpose: drop size-1 dims, merge dims adjacent in both operand and output.

    Returns ``(normalized_output_dims, normalized_permutation)``; the permutation is empty when the
    normalized transpose is the identity (one group). ``None`` for non-default layouts (XLA only
    normalizes dim0-major layouts).

    Example: output ``[8,12,100,11]`` with ``dimensions={3,2,0,1}`` -> ``([8,12,1100], (2,1,0))``.
    """
    if not is_default_layout(operand_shape) or not is_default_layout(output_shape):
        return None
    out_dims = list(output_shape.dimensions)
    rank = len(out_dims)
    in_dims = permute(out_dims, inverse_permutation(dimensions))
    # delta[i]: number of degenerate operand dims before operand dim i.
    delta = [0] * (rank + 1)
    for i in range(rank):
        delta[i + 1] = delta[i] + (1 if in_dims[i] == 1 else 0)
    new_perm = []
    new_out = []
    for i in range(rank):
        if out_dims[i] != 1:
            new_perm.append(dimensions[i] - delta[dimensions[i]])
            new_out.append(out_dims[i])
    if not new_perm:
        return (), ()
    # Group runs of consecutive operand dims that stay consecutive in the output.
    segments: list[list[int]] = [[0]]
    for i in range(1, len(new_perm)):
        if new_perm[i] == new_perm[i - 1] + 1:
            segments[-1].append(i)
        else:
            segments.append([i])
    norm_dims = []
    for seg in segments:
        n = 1
        for i in seg:
            n *= new_out[i]
        norm_dims.append(n)
    if len(segments) == 1:
        return tuple(norm_dims), ()
    starts = sorted(new_perm[seg[0]] for seg in segments)
    rank_of = {s: k for k, s in enumerate(starts)}
    perm = tuple(rank_of[new_perm[seg[0]]] for seg in segments)
    return tuple(norm_dims), perm


@attrs.frozen
class PackedTransposeDescription:
    """Canonical ``[.., T2, A, T1, B]`` view of a normalized transpose (``PackedTransposeDescription``)."""

    element_type: str
    canonical_output_shape: tuple[int, ...]
    canonical_permutation: tuple[int, ...]
    canonical_inv_permutation: tuple[int, ...]
    canonical_input_shape: tuple[int, ...]

    @classmethod
    def from_description(cls, element_type: str, dims: Sequence[int], perm: Sequence[int]) -> "PackedTransposeDescription":
        out = list(dims)
        cperm = list(perm)
        if cperm[-1] != len(out) - 1:  # last dim transposed: add a size-1 B dim
            cperm.append(len(out))
            out.append(1)
        rank = len(out)
        if rank >= 3 and cperm[rank - 3] != rank - 3:  # insert a size-1 A dim
            out.insert(rank - 2, 1)
            cperm = [p + 1 if p > rank - 3 else p for p in cperm]
            cperm.insert(rank - 2, rank - 2)
        inv = inverse_permutation(cperm)
        return cls(element_type, tuple(out), tuple(cperm), inv, permute(out, inv))

    @property
    def canonical_rank(self) -> int:
        return len(self.canonical_input_shape)

    @property
    def dim_a_id(self) -> int:
        return self.canonical_rank - 3

    @property
    def dim_a(self) -> int:
        return self.canonical_input_shape[self.dim_a_id]

    @property
    def dim_b(self) -> int:
        return self.canonical_input_shape[-1]

    @property
    def dim_t1(self) -> int:
        return self.canonical_input_shape[self.canonical_rank - 2]

    @property
    def dim_t1_output_id(self) -> int:
        return self.canonical_inv_permutation[self.canonical_rank - 2]

    @property
    def dim_t2(self) -> int:
        return self.canonical_input_shape[self.canonical_permutation[self.canonical_rank - 2]]

    @property
    def dim_t2_output_id(self) -> int:
        return self.canonical_rank - 2


def get_packed_transpose_tile_sizes(spec: PackedTransposeDescription) -> tuple[int, ...] | None:
    """``GetPackedTransposeTileSizes``: per-output-dim tile sizes of the packed transpose, or ``None``
    when it does not apply (element of 32+ bits, fewer than ``10*vector_size`` populated shared
    memory rows/columns, ``B != 1`` or indivisible tiles)."""
    if spec.canonical_rank < 3:
        return None
    bits = get_bitwidth(spec.element_type)
    if bits >= BANK_BITWIDTH:
        return None
    vector_size = BANK_BITWIDTH // bits
    shmem_dim = NUM_SHMEM_BANKS * vector_size
    tile_t1 = min(spec.dim_t1, shmem_dim)
    tile_a = min(spec.dim_a, shmem_dim // tile_t1)
    tile_t2 = min(spec.dim_t2, shmem_dim)
    rows, cols = tile_t2, tile_a * tile_t1
    min_populated = 10 * vector_size
    if cols < min_populated or rows < min_populated:
        return None
    if spec.dim_b != 1 or rows % vector_size or cols % vector_size or (spec.dim_t2 % tile_t2) % vector_size:
        return None
    tiles = [1] * spec.canonical_rank
    tiles[spec.dim_t1_output_id] = tile_t1
    tiles[spec.dim_t2_output_id] = tile_t2
    tiles[spec.dim_a_id] = tile_a
    return tuple(tiles)


def get_description_for_tiled_transpose_emitter(hero: Instruction) -> TransposeDescription | None:
    """Whether ``hero`` is a transpose the tiled emitter handles, and how.

    Rules (in order) on the normalized transpose: packed transpose (sub-32-bit types); minor dim
    preserved ("021"): ``bits*minor <= 64`` and ``bits*minor*min(operand[-2], out[-2]) >= 128``;
    otherwise both minor dims ``>= 16``, or both ``>= 8`` with product ``>= 64*128`` (not 4-bit).
    """
    if hero.opcode != "transpose" or not hero.operands:
        return None
    key = (hero.operands[0].shape, hero.shape, tuple(hero.attrs.get("dimensions", ())))
    try:
        found = _DESCRIPTIONS.get(key, _UNSEEN)
    except TypeError:  # an unhashable shape built in memory: no caching
        found = _describe(*key)
    else:
        if found is _UNSEEN:
            if len(_DESCRIPTIONS) >= 4096:
                _DESCRIPTIONS.clear()
            found = _DESCRIPTIONS[key] = _describe(*key)
    return None if found is None else TransposeDescription(hero, *found)


#: (operand shape, result shape, dimensions) -> what :func:`_describe` answers: the rules depend on nothing else,
#: and a module repeats a few transposes many times (each costs ~20 us).
_DESCRIPTIONS: dict[tuple, tuple | None] = {}
_UNSEEN = object()


def _describe(operand_shape: Shape, shape: Shape, dimensions: tuple[int, ...]) -> tuple | None:
    """``(dimensions, permutation, shmem_usage)`` of :func:`get_description_for_tiled_transpose_emitter`'s
    description of a transpose from ``operand_shape`` to ``shape``, or ``None``."""
    norm = get_normalized_logical_transpose_shape(operand_shape, shape, dimensions)
    if norm is None:
        return None
    dims, perm = norm
    if len(perm) < 2:
        return None
    et = shape.element_type
    bits = get_bitwidth(et)
    operand_dims = permute(dims, inverse_permutation(perm))
    operand_minor = operand_dims[-1]
    if get_packed_transpose_tile_sizes(PackedTransposeDescription.from_description(et, dims, perm)) is not None:
        vector_size = BANK_BITWIDTH // bits
        shmem = NUM_SHMEM_BANKS * (BANK_BITWIDTH // 8) * NUM_SHMEM_BANKS * vector_size
        return dims, perm, shmem
    if perm[-1] == len(dims) - 1:
        operand_minor = operand_dims[-2]
        if bits * dims[-1] <= MAX_BITS_IN_MOST_MINOR_DIMENSION and bits * dims[-1] * min(operand_minor, dims[-2]) >= 8 * MIN_DIMENSION_TO_TRANSPOSE_TILED:
            shmem = -(-(NUM_SHMEM_BANKS * (NUM_SHMEM_BANKS + 1) * bits * dims[-1]) // 8)
            return dims, perm, shmem
    elif (operand_minor >= MIN_DIMENSION_TO_TRANSPOSE_TILED and dims[-1] >= MIN_DIMENSION_TO_TRANSPOSE_TILED) or (
        operand_minor >= MIN_DIMENSION_TO_TRANSPOSE_TILED2
        and dims[-1] >= MIN_DIMENSION_TO_TRANSPOSE_TILED2
        and operand_minor * dims[-1] >= MIN_TOTAL_DIMENSIONS_TO_TRANSPOSE_TILED
    ):
        if bits == 4:
            return None
        shmem = -(-(NUM_SHMEM_BANKS * (NUM_SHMEM_BANKS + 1) * bits) // 8)
        return dims, perm, shmem
    return None


def find_consistent_transpose_hero(roots: Sequence[Instruction], heroes: Sequence[Instruction]) -> TransposeDescription | None:
    """``FindConsistentTransposeHero``: all transpose heroes equivalent, and every other root's shape a
    reshape/transpose bitcast of the transpose input (element type ignored)."""
    found: TransposeDescription | None = None
    others: list[Instruction] = []
    for root, hero in zip(roots, heroes):
        d = get_description_for_tiled_transpose_emitter(hero)
        if d is not None:
            if found is None:
                found = d
            elif not found.is_equivalent(d):
                return None
        else:
            others.append(root)
    if found is None:
        return None
    for r in others:
        if r.shape.is_tuple or not is_reshape_or_transpose_bitcast(r.shape, found.input_shape, ignore_element_type=True):
            return None
    return found


def choose_transpose_emitter(description: TransposeDescription) -> str:
    """``CreateTransposeFusion``: ``"PackedTranspose"`` when the packed tile sizes exist, else
    ``"TransposeFusion"``."""
    spec = PackedTransposeDescription.from_description(
        description.instr.shape.element_type, description.dimensions, description.permutation
    )
    return "PackedTranspose" if get_packed_transpose_tile_sizes(spec) is not None else "TransposeFusion"
