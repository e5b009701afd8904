"""Passes with the bugs pass authors make (tests/conformance/test_conformance_planted.py): each makes f32 dots read bf16
operands, as docs/plugins.md's ``dot-bf16`` does, and gets one thing wrong.

* ``dot-bf16-swapped`` (plugin ``dot_swap``) builds the new dot with its operands swapped: a valid module
  with wrong values on a square matmul, contracting sizes that differ on any other;
* ``dot-bf16-unplaced`` (plugin ``dot_unplaced``) builds the converts but never adds them to the
  computation: the dot reads instructions the module does not hold (invalid HLO, which ``opt`` printed).
"""

from fusegen.hlo.ir import Instruction
from fusegen.passes import kit
from fusegen.plugin_manager import hookimpl


def _f32_dots(module):
    for comp, dot in kit.instructions_outside_fusions(module, "dot"):
        if dot.shape.element_type == "f32" and all(o.shape.element_type == "f32" for o in dot.operands):
            yield comp, dot


def _converts(comp, dot, uniq, place=True):
    out = []
    for o in dot.operands:
        shape = kit.with_element_type(o.shape, "bf16")
        if place:
            out.append(kit.add_instruction(comp, "convert", shape, [o], before=dot, uniq=uniq))
        else:  # the bug: built, never inserted
            out.append(Instruction(name=uniq.get(f"{o.name}.bf16"), opcode="convert", shape=shape, operands=[o]))
    return out


def swapped(module, options) -> bool:
    uniq, changed = kit.NameUniquer(module), False
    for comp, dot in _f32_dots(module):
        lhs, rhs = _converts(comp, dot, uniq)
        new = kit.add_instruction(comp, "dot", dot.shape, [rhs, lhs], before=dot, attrs_=dict(dot.attrs), uniq=uniq)
        kit.replace_instruction(comp, dot, new)
        changed = True
    return changed


def unplaced(module, options) -> bool:
    uniq, changed = kit.NameUniquer(module), False
    for comp, dot in _f32_dots(module):
        dot.operands = _converts(comp, dot, uniq, place=False)
        changed = True
    return changed


class _Plugin:
    def __init__(self, name, run):
        self.name, self.run = name, run

    @hookimpl
    def fusegen_passes(self):
        return [kit.HloPass(name=self.name, run=self.run, error_budget=2.0 ** -6)]


dot_swap = _Plugin("dot-bf16-swapped", swapped)
dot_unplaced = _Plugin("dot-bf16-unplaced", unplaced)
