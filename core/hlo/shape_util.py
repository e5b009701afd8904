"""Shape and permutation predicates the fusion analysis needs.

Mirrors the parts of ``xla/shape_util.cc``, ``xla/layout_util.cc``, ``xla/permutation_util.h`` and
``HloInstruction::IsElementwise`` (``xla/hlo/ir/hlo_instruction.cc``) that dispatch depends on.
Permutations follow XLA's conventions: a transpose's ``dimensions`` say output dim ``i`` is operand
dim ``dimensions[i]``; ``permute(v, p)[i] == v[p[i]]``.
"""

from __future__ import annotations

from typing import Sequence

from fusegen.hlo.dtypes import bit_width
from fusegen.hlo.ir import Instruction, Shape

# Unary, binary and ternary opcodes XLA treats as elementwise (IsOpElementwise).
ELEMENTWISE_OPCODES: frozenset[str] = frozenset(
    """
    abs acos acosh asin asinh atanh cosh sinh round-nearest-afz round-nearest-even ceil
    count-leading-zeros convert bitcast-convert copy cosine erf exponential exponential-minus-one floor
    imag is-finite log log-plus-one not negate popcnt real reduce-precision rsqrt logistic sign sine sqrt
    cbrt tan tanh add atan2 compare complex divide maximum minimum multiply power remainder subtract and
    or xor shift-left shift-right-arithmetic shift-right-logical stochastic-convert select clamp map
    """.split()
)


def is_elementwise(inst: Instruction) -> bool:
    """``HloInstruction::IsElementwise()``: elementwise opcodes; ``bitcast-convert`` only when the bit
    width is unchanged."""
    if inst.opcode == "bitcast-convert":
        if not inst.operands or not inst.shape.is_array or not inst.operands[0].shape.is_array:
            return False
        return bit_width(inst.shape.element_type) == bit_width(inst.operands[0].shape.element_type)
    return inst.opcode in ELEMENTWISE_OPCODES


def inverse_permutation(p: Sequence[int]) -> tuple[int, ...]:
    """``InversePermutation``: ``inv[p[i]] = i``."""
    inv = [0] * len(p)
    for i, v in enumerate(p):
        inv[v] = i
    return tuple(inv)


def permute(values: Sequence[int], p: Sequence[int]) -> tuple[int, ...]:
    """``Permute(values, p)[i] = values[p[i]]``."""
    return tuple(values[j] for j in p)


def compose_permutations(p1: Sequence[int], p2: Sequence[int]) -> tuple[int, ...]:
    """``ComposePermutations(p1, p2)[i] = p1[p2[i]]``."""
    return tuple(p1[j] for j in p2)


def is_default_layout(shape: Shape) -> bool:
    """``LayoutUtil::IsMonotonicWithDim0Major``: minor-to-major is ``rank-1 ... 0``."""
    return tuple(shape.minor_to_major()) == tuple(range(shape.rank - 1, -1, -1))


def are_dimensions_consecutive(shape: Shape, dims: Sequence[int]) -> bool:
    """``LayoutUtil::AreDimensionsConsecutive``: ``dims`` occupy consecutive positions of the layout's
    minor-to-major order (in any order)."""
    m2m = list(shape.minor_to_major())
    pos = sorted(m2m.index(d) for d in dims)
    return all(b - a == 1 for a, b in zip(pos, pos[1:]))


def equal_ignoring_element_type(a: Shape, b: Shape) -> bool:
    """Same dimensions and same effective layout."""
    return tuple(a.dimensions) == tuple(b.dimensions) and tuple(a.minor_to_major()) == tuple(b.minor_to_major())


def physical_strides(shape: Shape) -> list[int]:
    """Element strides of each logical dimension of ``shape`` in its own dense layout (minor-to-major)."""
    strides = [0] * shape.rank
    s = 1
    for d in shape.minor_to_major():
        strides[d] = s
        s *= shape.dimensions[d]
    return strides


def _logical_strides(dims: Sequence[int]) -> list[int]:
    strides = [0] * len(dims)
    s = 1
    for i in range(len(dims) - 1, -1, -1):
        strides[i] = s
        s *= dims[i]
    return strides


def _unravel(linear: int, dims: Sequence[int]) -> list[int]:
    idx = [0] * len(dims)
    for i in range(len(dims) - 1, -1, -1):
        if dims[i]:
            idx[i] = linear % dims[i]
            linear //= dims[i]
    return idx


def reshape_is_bitcast(a: Shape, b: Shape, ignore_element_type: bool = False) -> bool:
    """``ShapeUtil::ReshapeIsBitcast``: the logical reshape ``a -> b`` keeps every element at the same
    physical offset.

    As XLA does, this is checked on unit indices of both shapes (each non-degenerate dimension's
    index 1): the logical row-major position must land on the same physical offset in the other shape.
    """
    if not ignore_element_type and a.element_type != b.element_type:
        return False
    if a.numel != b.numel:
        return False
    if a.numel == 0:
        return True

    def check(src: Shape, dst: Shape) -> bool:
        src_log = _logical_strides(src.dimensions)
        src_phys = physical_strides(src)
        dst_phys = physical_strides(dst)
        for d in range(src.rank):
            if src.dimensions[d] <= 1:
                continue
            dst_idx = _unravel(src_log[d], dst.dimensions)
            dst_off = sum(i * s for i, s in zip(dst_idx, dst_phys))
            if dst_off != src_phys[d]:
                return False
        return True

    return check(a, b) and check(b, a)


def transpose_is_bitcast(operand: Shape, output: Shape, dimensions: Sequence[int], ignore_element_type: bool = False) -> bool:
    """``ShapeUtil::TransposeIsBitcast``: the permutation composed with the output layout equals the
    operand layout (``dimensions[out_m2m[i]] == in_m2m[i]``)."""
    if not ignore_element_type and operand.element_type != output.element_type:
        return False
    if operand.rank != output.rank or len(dimensions) != output.rank:
        return False
    return compose_permutations(dimensions, output.minor_to_major()) == tuple(operand.minor_to_major())


def deduce_transpose_dimensions_for_bitcast(a: Shape, b: Shape) -> tuple[int, ...] | None:
    """``ShapeUtil::DeduceTransposeDimensionsForBitcast``: the transpose ``a -> b`` that is a bitcast, if
    any (same rank, dimensions matching after the layout-derived permutation)."""
    if a.rank != b.rank:
        return None
    a_perm = tuple(reversed(a.minor_to_major()))  # major-to-minor
    b_perm = tuple(reversed(b.minor_to_major()))
    perm = compose_permutations(a_perm, inverse_permutation(b_perm))
    if permute(a.dimensions, perm) != tuple(b.dimensions):
        return None
    return perm


def is_reshape_or_transpose_bitcast(a: Shape, b: Shape, ignore_element_type: bool = False) -> bool:
    """``ShapeUtil::IsReshapeOrTransposeBitcast``."""
    if not ignore_element_type and a.element_type != b.element_type:
        return False
    if equal_ignoring_element_type(a, b):
        return True
    if reshape_is_bitcast(a, b, ignore_element_type=True):
        return True
    return deduce_transpose_dimensions_for_bitcast(a, b) is not None


def unique_operands(inst: Instruction) -> list[Instruction]:
    """Operands without repeats, in first-use order (``HloInstruction::unique_operands``)."""
    seen: set[int] = set()
    out = []
    for o in inst.operands:
        if id(o) not in seen:
            seen.add(id(o))
            out.append(o)
    return out


def elements_in(shape: Shape) -> int:
    """``ShapeUtil::ElementsIn`` for an array; for a tuple, its first array leaf (variadic ops)."""
    if shape.is_tuple:
        leaves = shape.leaves()
        return leaves[0].numel if leaves else 0
    return shape.numel


def array_bit_width(shape: Shape) -> int | None:
    """Bit width of an array shape's element type, ``None`` for tuples/tokens."""
    if not shape.is_array:
        return None
    return bit_width(shape.element_type)
