"""Which values are a parameter read through index maps: their every access is a masked load, so an index
outside the operand (a window or pad position in the padding) needs no clamp when the loads are masked."""

from __future__ import annotations

from fusegen.hlo.ir import Instruction

#: ops whose value at an index is a parameter's at another index (no arithmetic that could see a wild index)
INDEX_OPS = frozenset({"parameter", "bitcast", "reshape", "copy", "transpose", "slice", "broadcast", "convert"})


def reads_only(x: Instruction) -> bool:
    """Whether ``x`` is a fusion parameter read through index maps and converts alone."""
    stack = [x]
    while stack:
        i = stack.pop()
        if i.opcode not in INDEX_OPS or i.shape.is_tuple:
            return False
        stack.extend(i.operands)
    return True


