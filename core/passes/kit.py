"""The pass author's kit: everything a plugin's HLO pass needs to find and rewrite instructions.

One import for a third-party pass (``from fusegen.passes import kit``); every name here is public and stable,
re-exported from where it lives (those modules' imports keep working):

* **The pass interface**: :class:`HloPass` (``HloPass(name, run, options=[ConfigOption(...)],
  error_budget=0.0)``), :class:`PassOptions` (what ``run(module, options)`` gets: ``options.options`` is the
  pass's ``[pipeline.options.<name>]`` table with defaults filled in, ``options.device``, ``options.log``),
  :class:`ConfigOption`.
* **The IR**: :class:`Module`, :class:`Computation`, :class:`Instruction`, :class:`Shape`
  (:mod:`fusegen.hlo.ir`); :func:`with_element_type` (a shape with another element type, same dimensions and
  layout).
* **Where to look**: :func:`computations_outside_fusions` (the entry and control-flow bodies: what a pass
  rewrites; never a fused computation or a reducer, XLA's ``GetFusibleComputations``) and
  :func:`instructions_outside_fusions` (``(computation, instruction)`` over them, operands first).
* **Reading a dot**: :func:`contracting_sizes` (the sizes of its contracting dimensions, lhs and rhs),
  :func:`dot_dimensions` (its dimension numbers).
* **Editing**: :func:`add_instruction` (a new instruction with a module-unique name, placed before or after
  an anchor), :func:`insert_before` / :func:`insert_after` (place an instruction you built),
  :func:`replace_all_uses` (point every user, and the root, at another instruction; users the new one is
  computed from keep theirs, so ``convert(dot)`` can take the dot's place), :func:`replace_operand` (one
  user's operand),
  :func:`replace_instruction` (that, then drop the old one), :func:`remove_dead`, :func:`topo_sort`,
  :class:`NameUniquer`.
* **Checking**: :func:`verify_module` / :func:`check_module` (what the pipeline runs after every pass:
  :mod:`fusegen.hlo.module_verifier`) and :func:`entry_signature`.

A pass must keep the module valid (verified after it, always), keep the entry signature, and keep the
outputs within its declared ``error_budget`` (0: exact; checked by the conformance suite and by
``[pipeline] verify = true``: :mod:`fusegen.passes.pass_checks`). Mirrors the pieces of XLA's
``HloComputation`` a pass uses (``AddInstruction``, ``ReplaceAllUsesWith``, ``ReplaceInstruction``,
``RemoveInstructionAndUnusedOperands``; ``xla/hlo/ir/hlo_computation.cc``). docs/plugins.md ("A pass")
walks through a pass built on it.
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import attrs

from fusegen.config.options import ConfigOption
from fusegen.hlo.ir import Computation, Instruction, Module, Shape
from fusegen.hlo.module_verifier import HloVerificationError, check_module, entry_signature, verify_module
from fusegen.hlo.shape_checks import contracting_sizes
from fusegen.passes.hlo_edit import NameUniquer, insert_before, remove_dead, topo_sort
from fusegen.passes.hlo_edit import fusible_computations as computations_outside_fusions
from fusegen.passes.pipeline import PassError, PassOptions, pass_options
from fusegen.registry import HloPass

__all__ = [
    "ConfigOption", "Computation", "DotDimensions", "HloPass", "HloVerificationError", "Instruction", "Module",
    "NameUniquer", "PassError", "PassOptions", "Shape", "add_instruction", "check_module",
    "computations_outside_fusions", "contracting_sizes", "dot_dimensions", "entry_signature", "insert_after",
    "insert_before", "instructions_outside_fusions", "pass_options", "remove_dead", "replace_all_uses",
    "replace_instruction", "replace_operand", "topo_sort", "verify_module", "with_element_type",
]


def instructions_outside_fusions(module: Module, opcode: str | None = None) -> Iterator[tuple[Computation, Instruction]]:
    """``(computation, instruction)`` of every instruction of :func:`computations_outside_fusions` (only those
    of ``opcode`` when given), operands before users. A list is taken first: rewriting while iterating is safe."""
    for comp in computations_outside_fusions(module):
        for inst in list(comp.post_order()):
            if opcode is None or inst.opcode == opcode:
                yield comp, inst


@attrs.frozen
class DotDimensions:
    """A ``dot``'s dimension numbers (``DotDimensionNumbers``), each a tuple of operand dimensions."""

    lhs_contracting: tuple[int, ...]
    rhs_contracting: tuple[int, ...]
    lhs_batch: tuple[int, ...]
    rhs_batch: tuple[int, ...]


def dot_dimensions(dot: Instruction) -> DotDimensions:
    """The dimension numbers of ``dot`` (empty tuples for absent attributes).

    Raises:
        ValueError: ``dot`` is not a dot.
    """
    if dot.opcode != "dot":
        raise ValueError(f"%{dot.name} ({dot.opcode}) is not a dot")
    a = dot.attrs
    return DotDimensions(*(tuple(a.get(k, ()) or ()) for k in ("lhs_contracting_dims", "rhs_contracting_dims",
                                                                  "lhs_batch_dims", "rhs_batch_dims")))


def with_element_type(shape: Shape, element_type: str) -> Shape:
    """``shape`` with ``element_type`` (dimensions and layout kept): ``f32[4,8]{0,1}`` -> ``bf16[4,8]{0,1}``.

    Raises:
        ValueError: ``shape`` is a tuple.
    """
    if shape.is_tuple:
        raise ValueError("with_element_type: a tuple shape has no element type")
    return attrs.evolve(shape, element_type=element_type)


def insert_after(comp: Computation, inst: Instruction, anchor: Instruction) -> Instruction:
    """Add ``inst`` to ``comp`` right after ``anchor`` (for an instruction that uses ``anchor``); returns it."""
    inst.parent = comp
    idx = next((k + 1 for k, i in enumerate(comp.instructions) if i is anchor), len(comp.instructions))
    comp.instructions.insert(idx, inst)
    comp.invalidate()
    return inst


def add_instruction(comp: Computation, opcode: str, shape: Shape, operands: Sequence[Instruction], *,
                    before: Instruction | None = None, after: Instruction | None = None, name: str | None = None,
                    attrs_: dict[str, Any] | None = None, uniq: NameUniquer | None = None,
                    module: Module | None = None) -> Instruction:
    """Build an instruction and place it in ``comp``: before ``before`` (an instruction that will use it) or
    after ``after`` (one it uses); at the end when neither is given.

    Args:
        name: its name's stem (default ``opcode``), made unique in the module (``convert.3``) with ``uniq`` (a
            :class:`NameUniquer` kept across one pass's edits), else one built for ``module``, else ``comp``'s.
        attrs_: its attributes (``{"lhs_contracting_dims": (1,), ...}``, see :data:`fusegen.hlo.ir.ATTRIBUTE_FORMS`).

    Raises:
        ValueError: both ``before`` and ``after`` given.
    """
    if before is not None and after is not None:
        raise ValueError("add_instruction: give before= or after=, not both")
    if uniq is None:
        uniq = NameUniquer(module) if module is not None else NameUniquer(Module("m", computations=[comp]))
    inst = Instruction(name=uniq.get(name or opcode), opcode=opcode, shape=shape, operands=list(operands),
                       attrs=dict(attrs_ or {}))
    if before is not None:
        return insert_before(comp, inst, before)
    if after is not None:
        return insert_after(comp, inst, after)
    return comp.add(inst)


def replace_all_uses(comp: Computation, old: Instruction, new: Instruction) -> None:
    """Point every use of ``old`` in ``comp``, and the root, at ``new`` (``ReplaceAllUsesWith``), except the
    uses by instructions ``new`` is computed from: after ``narrow = convert(dot)``, ``wide = convert(narrow)``,
    ``replace_all_uses(comp, dot, wide)`` moves the dot's users to ``wide`` and leaves ``narrow`` reading the
    dot (no cycle)."""
    upstream: set[int] = set()
    stack = [new]
    while stack:
        i = stack.pop()
        if id(i) in upstream or i is old:
            continue
        upstream.add(id(i))
        stack.extend(i.operands)
    for inst in comp.instructions:
        if id(inst) not in upstream and any(o is old for o in inst.operands):
            inst.operands = [new if o is old else o for o in inst.operands]
    if comp.root is old:
        comp.root = new
    comp.invalidate()


def replace_operand(comp: Computation, user: Instruction, old: Instruction, new: Instruction) -> None:
    """Point ``user``'s operands that are ``old`` at ``new`` (``HloInstruction::ReplaceOperandWith``)."""
    user.operands = [new if o is old else o for o in user.operands]
    comp.invalidate()


def replace_instruction(comp: Computation, old: Instruction, new: Instruction) -> None:
    """Point every use of ``old`` (and the root) at ``new``, then remove ``old`` and whatever only it used
    (``HloComputation::ReplaceInstruction``). ``new`` must already be in ``comp``, before ``old``'s users."""
    replace_all_uses(comp, old, new)
    remove_dead(comp)
