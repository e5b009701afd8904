"""The HLO ``window`` attribute (``reduce-window``, ``select-and-scatter``, ``convolution``) read per dimension.

The parser keeps ``window={size=3x3 stride=2x2 pad=0_1x0_1 ...}`` as a dict of tuples
(:meth:`fusegen.hlo.parse_attributes.AttributeParser.window`); an instruction built by hand may hold the raw
text or ``base_dilation`` / ``window_dilation`` spelled as in XLA's proto. :func:`parse_window` gives every
field for every dimension, absent ones at XLA's defaults. It lives in the HLO layer so that the reference
evaluator and the kernel generators read the attribute alike without one importing the other.
"""

from __future__ import annotations

import re

from fusegen.hlo.ir import Instruction

__all__ = ["WindowError", "parse_window"]


class WindowError(ValueError):
    """A ``window`` attribute that does not fit its instruction (names the instruction)."""


def parse_window(inst: Instruction, rank: int) -> dict[str, list]:
    """The ``window`` attribute as lists per dim: size, stride, pad (lo, hi), lhs_dilate, rhs_dilate, rhs_reversal.

    Raises:
        WindowError: the window has a number of dimensions other than ``rank``.
    """
    w = inst.attrs.get("window")
    out: dict[str, list] = {
        "size": [1] * rank, "stride": [1] * rank, "pad": [(0, 0)] * rank,
        "lhs_dilate": [1] * rank, "rhs_dilate": [1] * rank, "rhs_reversal": [0] * rank,
    }
    if w is None:
        return out
    if isinstance(w, str):
        items = dict(m.groups() for m in re.finditer(r"(\w+)=([-\d_x]+)", w))
        parsed: dict = {}
        for key, val in items.items():
            parts = val.split("x")
            if key == "pad":
                parsed[key] = [tuple(int(v) for v in p.split("_")) for p in parts]
            else:
                parsed[key] = [int(p) for p in parts]
        w = parsed
    for key, val in w.items():
        key = {"base_dilation": "lhs_dilate", "window_dilation": "rhs_dilate"}.get(key, key)
        if key == "pad":
            out["pad"] = [tuple(int(v) for v in p) for p in val]
        elif key in out:
            out[key] = [int(v) for v in val]
    if len(out["size"]) != rank:
        raise WindowError(f"%{inst.name}: window has {len(out['size'])} dims, operand rank is {rank}")
    return out
