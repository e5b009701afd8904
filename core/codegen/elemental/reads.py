"""Which values are computed from parameters by loads alone: their every access is a masked load, so an index
outside the operand (a window or pad position in the padding) needs no clamp when the loads are masked."""

from __future__ import annotations

from fusegen.codegen.elemental.common import ELEMENTWISE
from fusegen.hlo.ir import Instruction

#: ops whose value at an index is a parameter's at another index (no arithmetic that could see a wild index)
INDEX_OPS = frozenset({"parameter", "bitcast", "reshape", "copy", "transpose", "slice", "broadcast", "convert"})

#: ... and leaves and elementwise ops with no memory access of their own: at a wild index, a wild value
_LOAD_OPS = INDEX_OPS | (ELEMENTWISE - {"map"}) | {"constant", "iota", "reverse", "pad"}


def _made_of(x: Instruction, ops: frozenset) -> bool:
    """Whether ``x`` and every instruction under it are arrays of opcodes in ``ops``."""
    stack, seen = [x], set()
    while stack:
        i = stack.pop()
        if id(i) in seen:
            continue
        seen.add(id(i))
        if i.opcode not in ops or i.shape.is_tuple:
            return False
        stack.extend(i.operands)
    return True


def reads_only(x: Instruction) -> bool:
    """Whether ``x`` is a fusion parameter read through index maps and converts alone."""
    return _made_of(x, INDEX_OPS)


def loads_only(x: Instruction) -> bool:
    """Whether every memory access ``x`` makes is a load of a parameter (or constant) at an index map of its
    own index: index maps, converts and elementwise arithmetic over parameters, constants and iotas. At a
    position whose loads are masked off, such a value is computed from the loads' ``other`` and discarded by
    the caller's select, as XLA's kernel branches around it. A nested ``pad`` tests its own domain at the
    wild index (its loads clamped or masked in turn); no gather, dynamic slice or reduction, whose loaded
    indices or loops would read at it."""
    return _made_of(x, _LOAD_OPS)
