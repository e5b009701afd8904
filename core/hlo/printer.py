"""HLO text printer: :mod:`fusegen.hlo.ir` objects back to XLA's HLO text format.

Mirrors ``HloModule::ToString`` / ``HloComputation::ToString`` / ``HloInstruction::ToString``
(``xla/hlo/ir/hlo_module.cc``, ``hlo_computation.cc``, ``hlo_instruction.cc``) and ``ShapeUtil::HumanStringWithLayout``
/ ``Layout::ToString`` (``xla/shape_util.cc``, ``xla/layout.cc``). Operands print as bare ``%name`` (XLA's
``print_operand_shape=false`` form). The output is accepted by :func:`fusegen.hlo.parser.parse_module` and, for
modules XLA itself produced, by XLA's own parser.

:func:`module_key` gives a hashable structural description used to check that parse/print round trips.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from fusegen.hlo.ir import COMPUTATION_ATTRIBUTES, Computation, Instruction, Layout, Module, Shape

__all__ = ["print_module", "print_computation", "print_instruction", "print_shape", "print_layout", "module_key",
           "escape_string"]

_INT_LIST_KEYS = frozenset(
    ["dimensions", "dynamic_slice_sizes", "lhs_contracting_dims", "rhs_contracting_dims", "lhs_batch_dims",
     "rhs_batch_dims"]
)
_UNQUOTED_METADATA = frozenset(["preserve_layout", "profile_type"])
_HIDDEN = frozenset(["literal", "parameter_number"])
# Layout items XLA prints after the memory space S(n).
_AFTER_MEMORY_SPACE = ("SC(",)


def escape_string(s: str) -> str:
    """C-escape ``s`` the way XLA prints strings (``absl::CEscape``), without the quotes."""
    if s.isprintable() and '"' not in s and "\\" not in s:
        return s
    out = []
    for ch in s:
        if ch == '"':
            out.append('\\"')
        elif ch == "\\":
            out.append("\\\\")
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif ch == "\r":
            out.append("\\r")
        elif ch.isprintable() or ord(ch) > 0x7F:
            out.append(ch)
        else:
            out.append("\\%03o" % ord(ch))
    return "".join(out)


def _quote(s: str) -> str:
    return '"' + escape_string(s) + '"'


def print_layout(layout: Layout) -> str:
    """``{1,0:T(8,128)(2,1)S(1)}``."""
    items = []
    if layout.tiles:
        items.append("T" + "".join("(" + ",".join("*" if d == -1 else str(d) for d in t) + ")" for t in layout.tiles))
    after = []
    for e in layout.extra:
        (after if e.startswith(_AFTER_MEMORY_SPACE) else items).append(e)
    if layout.memory_space is not None:
        items.append(f"S({layout.memory_space})")
    items.extend(after)
    mtm = ",".join(str(d) for d in layout.minor_to_major)
    return "{" + mtm + (":" + "".join(items) if items else "") + "}"


def print_shape(shape: Shape, with_layout: bool = True) -> str:
    """``f32[2,3]{1,0}``, ``(f32[2], s32[])``, ``token[]``, ``f32[<=4]``."""
    if shape.tuple_shapes is not None:
        return "(" + ", ".join(print_shape(s, with_layout) for s in shape.tuple_shapes) + ")"
    if shape.dynamic:
        dims = ",".join(
            ("?" if d < 0 else f"<={d}") if dyn else str(d) for d, dyn in zip(shape.dimensions, shape.dynamic)
        )
    else:
        dims = ",".join(str(d) for d in shape.dimensions)
    s = f"{shape.element_type}[{dims}]"
    if with_layout and shape.layout is not None:
        s += print_layout(shape.layout)
    return s


def _comp_ref(c: Any) -> str:
    return "%" + (c.name if isinstance(c, Computation) else str(c))


def _print_attr(key: str, v: Any) -> str:
    if key in COMPUTATION_ATTRIBUTES:
        if isinstance(v, (list, tuple)):
            return "{" + ", ".join(_comp_ref(c) for c in v) + "}"
        return _comp_ref(v)
    if key == "metadata" and isinstance(v, dict):
        parts = []
        for k, x in v.items():
            if isinstance(x, bool):
                parts.append(f"{k}={'true' if x else 'false'}")
            elif isinstance(x, int) or (isinstance(x, str) and k in _UNQUOTED_METADATA):
                parts.append(f"{k}={x}")
            else:
                parts.append(f"{k}={_quote(str(x))}")
        return "{" + " ".join(parts) + "}"
    if key == "backend_config":
        if isinstance(v, dict):
            return json.dumps(v, separators=(",", ":"), ensure_ascii=False)
        return _quote(str(v))
    if key == "frontend_attributes" and isinstance(v, dict):
        return "{" + ",".join(f"{k}={_quote(str(x))}" for k, x in v.items()) + "}"
    if key == "control-predecessors":
        return "{" + ", ".join("%" + (x.name if isinstance(x, Instruction) else str(x)) for x in v) + "}"
    if key == "custom_call_target":
        return _quote(str(v))
    if key == "slice":
        return "{" + ", ".join(f"[{a}:{b}]" if c == 1 else f"[{a}:{b}:{c}]" for a, b, c in v) + "}"
    if key == "padding" and isinstance(v, (list, tuple)):
        return "x".join(f"{d[0]}_{d[1]}" + (f"_{d[2]}" if len(d) > 2 and d[2] else "") for d in v)
    if key == "window" and isinstance(v, dict):
        parts = []
        for k, x in v.items():
            if k == "pad":
                parts.append("pad=" + "x".join(f"{a}_{b}" for a, b in x))
            else:
                parts.append(f"{k}=" + "x".join(str(d) for d in x))
        return "{" + " ".join(parts) + "}"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, np.integer)):
        return str(int(v))
    if isinstance(v, (tuple, list)) and all(isinstance(x, (int, np.integer)) for x in v):
        return "{" + ",".join(str(int(x)) for x in v) + "}"
    if isinstance(v, dict):
        return json.dumps(v, separators=(",", ":"))
    return str(v)


def print_instruction(inst: Instruction) -> str:
    """One instruction without the ``ROOT`` marker: ``%name = SHAPE opcode(%a, %b), attr=value, ...``."""
    if inst.opcode == "constant":
        lit = inst.attrs.get("literal")
        if lit is None:
            body = "{...}"
        elif isinstance(lit, str):
            body = lit
        else:
            from fusegen.hlo.literal import format_literal

            body = format_literal(np.asarray(lit), inst.shape)
    elif inst.opcode == "parameter":
        body = str(inst.attrs.get("parameter_number", 0))
    else:
        body = ", ".join("%" + o.name for o in inst.operands)
    parts = [f"%{inst.name} = {print_shape(inst.shape)} {inst.opcode}({body})"]
    for key, v in inst.attrs.items():
        if key in _HIDDEN or v is None:
            continue
        parts.append(f"{key}={_print_attr(key, v)}")
    return ", ".join(parts)


def print_computation(comp: Computation) -> str:
    """``[ENTRY] %name (p: f32[2]) -> f32[2] { ... }``."""
    params = ", ".join(f"{p.name}: {print_shape(p.shape, False)}" for p in comp.parameters)
    root = comp.root if comp.root is not None else (comp.instructions[-1] if comp.instructions else None)
    result = print_shape(root.shape, False) if root is not None else "()"
    lines = [f"{'ENTRY ' if comp.is_entry else ''}%{comp.name} ({params}) -> {result} {{"]
    for inst in comp.instructions:
        lines.append(("  ROOT " if inst is root else "  ") + print_instruction(inst))
    lines.append("}")
    return "\n".join(lines)


def print_module(module: Module) -> str:
    """The whole module as HLO text, parseable by :func:`fusegen.hlo.parser.parse_module`.

    Header attributes named ``fusegen.*`` (fusegen's own markers, which XLA would reject as header attributes)
    are printed as ``// fusegen.key=value`` comment lines that the parser reads back.
    """
    header = f"HloModule {module.name}"
    own = []
    for k, v in module.attrs.items():
        if k.startswith("fusegen."):
            own.append(f"// {k}={v}")
        else:
            header += f", {k}={v}"
    out = [header]
    out.extend(own)
    out.append("")
    for sec in module.extra_sections:
        out.append(sec)
        out.append("")
    for comp in module.computations:
        out.append(print_computation(comp))
        out.append("")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- module_key
def _freeze(v: Any) -> Any:
    if isinstance(v, Computation):
        return ("computation", v.name)
    if isinstance(v, Instruction):
        return ("instruction", v.name)
    if isinstance(v, dict):
        return ("dict", tuple(sorted((str(k), _freeze(x)) for k, x in v.items())))
    if isinstance(v, (list, tuple)):
        return tuple(_freeze(x) for x in v)
    if isinstance(v, np.ndarray):
        return ("array", str(v.dtype), v.shape, v.tobytes())
    if isinstance(v, float) and v != v:
        return ("nan",)
    return v


def module_key(module: Module) -> tuple:
    """Hashable, comparable structural description of ``module``.

    Covers the module name and header attributes, extra sections, every computation (name, entry flag, root)
    and every instruction (name, opcode, shape with layout, operand names, parsed attributes), and the entry.
    Source positions and the file name are left out, so ``module_key(parse(print(m))) == module_key(m)``.
    """
    comps = []
    for c in module.computations:
        insts = tuple(
            (i.name, i.opcode, i.shape, tuple(o.name for o in i.operands),
             tuple(sorted((k, _freeze(v)) for k, v in i.attrs.items())))
            for i in c.instructions
        )
        comps.append((c.name, c.is_entry, c.root.name if c.root is not None else None, insts))
    sections = tuple(tuple(line.strip() for line in s.strip().splitlines()) for s in module.extra_sections)
    return (
        module.name,
        tuple(sorted(module.attrs.items())),
        sections,
        tuple(comps),
        module.entry.name if module.entry is not None else None,
    )
