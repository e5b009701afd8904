"""The canonical text of an HLO instruction: the ``hlo`` part of an autotune cache key, and the identity of
a fusion's kernels (identical fusions share one compile).

Mirrors ``AutotuneCacheKey``'s ``hlo_canonical`` (``xla/service/gpu/autotuning/autotune_cache_key.cc``, 34-53):
a fusion prints as its fused computation with operand shapes and no ids, any other instruction as itself with
its backend config, keys sorted. Every instruction is renamed ``tmp_<n>`` and every called computation
``comp_<n>`` in order of appearance; metadata, ids and control dependencies are dropped, so identically shaped
layers of a model print the same.
"""

from __future__ import annotations

import json
from typing import Any

from fusegen.hlo.ir import Computation, Instruction, Shape

__all__ = ["canonical_hlo", "shape_text"]

#: Attributes never part of the canonical text.
_DROPPED = {"metadata", "control-predecessors", "sharding", "statistics", "origin", "parameter_number", "literal",
            "backend_config"}
#: Constants with at most this many elements keep their literal ("only essential constants").
_MAX_LITERAL_ELEMENTS = 8


def shape_text(shape: "Shape") -> str:
    """``f32[2,3]{1,0}``, tuples ``(f32[2]{0}, s32[])``; layouts always printed (they change kernels)."""
    if shape.is_tuple:
        return "(" + ", ".join(shape_text(s) for s in shape.tuple_shapes or ()) + ")"
    dims = ",".join(f"<={d}" if (i < len(shape.dynamic) and shape.dynamic[i]) else str(d)
                    for i, d in enumerate(shape.dimensions))
    out = f"{shape.element_type}[{dims}]"
    if shape.element_type != "token" and shape.rank:
        lay = shape.layout
        m2m = ",".join(str(d) for d in shape.minor_to_major())
        extra = ""
        if lay is not None:
            if lay.tiles:
                extra += "".join("T(" + ",".join("*" if t == -1 else str(t) for t in tile) + ")" for tile in lay.tiles)
            if lay.memory_space:
                extra += f"S({lay.memory_space})"
            for e in lay.extra:
                extra += str(e)
        out += "{" + m2m + (":" + extra if extra else "") + "}"
    return out


def _ints(v) -> str:
    return "{" + ",".join(str(int(x)) for x in v) + "}"


class _Canonicalizer:
    def __init__(self) -> None:
        self.comp_names: dict[int, str] = {}
        self.comp_texts: list[str] = []

    def comp(self, c: "Computation") -> str:
        if id(c) not in self.comp_names:
            name = f"comp_{len(self.comp_names)}"
            self.comp_names[id(c)] = name
            self.comp_texts.append(self.computation(c, name))
        return self.comp_names[id(c)]

    def value(self, key: str, v: Any) -> str:
        if isinstance(v, Computation):
            return "%" + self.comp(v)
        if isinstance(v, bool):
            return "true" if v else "false"
        if isinstance(v, (int, float)):
            return str(v)
        if isinstance(v, str):
            return json.dumps(v) if key == "custom_call_target" else v
        if isinstance(v, dict):
            if key == "window":
                parts = []
                for k, x in v.items():
                    if x and isinstance(x, (list, tuple)) and isinstance(x[0], (list, tuple)):
                        parts.append(f"{k}=" + "x".join("_".join(str(int(a)) for a in p) for p in x))
                    elif isinstance(x, (list, tuple)):
                        parts.append(f"{k}=" + "x".join(str(int(a)) for a in x))
                    else:
                        parts.append(f"{k}={x}")
                return "{" + " ".join(parts) + "}"
            return json.dumps(v, sort_keys=True, separators=(",", ":"))
        if isinstance(v, (list, tuple)):
            if v and all(isinstance(x, Computation) for x in v):
                return "{" + ", ".join("%" + self.comp(x) for x in v) + "}"
            if key == "padding":
                return "x".join("_".join(str(int(a)) for a in p) for p in v)
            if key == "slice":
                return "{" + ", ".join(f"[{a}:{b}:{c}]" if c != 1 else f"[{a}:{b}]" for a, b, c in v) + "}"
            if all(isinstance(x, int) and not isinstance(x, bool) for x in v):
                return _ints(v)
            return json.dumps(v, sort_keys=True, default=str, separators=(",", ":"))
        return str(v)

    def instruction(self, inst: "Instruction", names: dict[int, str], root: bool, with_backend_config: bool) -> str:
        ops = ", ".join(f"{shape_text(o.shape)} {names.get(id(o), '?')}" for o in inst.operands)
        head = f"{'ROOT ' if root else ''}{names[id(inst)]} = {shape_text(inst.shape)} {inst.opcode}("
        if inst.opcode == "parameter":
            head += str(inst.attrs.get("parameter_number", 0))
        elif inst.opcode == "constant":
            lit = inst.attrs.get("literal")
            if lit is not None and not isinstance(lit, str):
                import numpy as np

                lit = json.dumps(np.asarray(lit).tolist())
            head += lit if (lit is not None and inst.shape.numel <= _MAX_LITERAL_ELEMENTS) else "{...}"
        else:
            head += ops
        head += ")"
        parts = []
        for k in sorted(inst.attrs):
            if k in _DROPPED:
                continue
            parts.append(f"{k}={self.value(k, inst.attrs[k])}")
        if with_backend_config and inst.attrs.get("backend_config") not in (None, "", {}):
            bc = inst.attrs["backend_config"]
            parts.append("backend_config=" + (json.dumps(bc, sort_keys=True, separators=(",", ":"))
                                              if isinstance(bc, dict) else json.dumps(str(bc))))
        return head + ("".join(", " + p for p in parts))

    def computation(self, comp: "Computation", name: str) -> str:
        names = {id(i): f"tmp_{k}" for k, i in enumerate(comp.instructions)}
        lines = [f"{name} {{"]
        for i in comp.instructions:
            lines.append("  " + self.instruction(i, names, i is comp.root, with_backend_config=False))
        lines.append("}")
        return "\n".join(lines)


def canonical_hlo(instr: "Instruction") -> str:
    """Canonical text of ``instr`` for the cache key (see the module docstring).

    A fusion: ``fusion kind=<kind> backend=<fusion backend kind>`` then every called computation
    (``comp_<n>``) and the fused computation (``fused_computation``), instructions ``tmp_<n>`` with
    operand shapes, no metadata, no backend configs inside. Anything else: the instruction with its
    operands ``tmp_0..`` and its backend config with sorted keys.
    """
    cz = _Canonicalizer()
    if instr.opcode == "fusion":
        body = cz.computation(instr.fused_computation, "fused_computation")
        head = f"fusion kind={instr.attrs.get('kind', '')} backend={instr.fusion_backend_kind or ''}"
        return "\n".join([head, *cz.comp_texts, body])
    names = {id(o): f"tmp_{k}" for k, o in enumerate(instr.operands)}
    names[id(instr)] = f"tmp_{len(instr.operands)}"
    text = cz.instruction(instr, names, True, with_backend_config=True)
    return "\n".join([*cz.comp_texts, text])
