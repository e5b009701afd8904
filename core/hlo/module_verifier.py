"""Verifying a module built or rewritten in memory (by a pass), as XLA's ``HloVerifier`` does between passes.

The parser checks what it reads (:mod:`fusegen.hlo.verifier`); a pass edits objects, so nothing checked its
result until now. :func:`verify_module` runs, over every computation of the module:

* structure (``HloVerifier::Run``, ``VerifyHloStructure``): an entry computation; unique computation names and
  instruction names per computation; every called computation belongs to the module; no call cycle; a root
  that belongs to its computation; every operand defined in the same computation and before its user (so the
  printed module parses back); parameter numbers ``0..N-1``;
* per instruction: the parser's operand-count / attribute / shape checks
  (:func:`fusegen.hlo.verifier.instruction_error`, :func:`~fusegen.hlo.verifier.called_error`) and the shape
  inference checks of :func:`fusegen.hlo.shape_checks.shape_problem` (dot contracting sizes, operand element
  types, reduce, concatenate, pad, slice, fusion parameters...);
* layouts (``LayoutUtil::ValidateLayoutInShape``): every minor-to-major list is a permutation of the
  shape's dimensions.

:func:`entry_signature` / :func:`signature_change` compare the entry computation's parameters and result
(with layouts) before and after a rewrite: a pass must not change what the module takes and gives.
"""

from __future__ import annotations

from typing import Iterator

import attrs

from fusegen.hlo import verifier
from fusegen.hlo.ir import Computation, Instruction, Module, Shape
from fusegen.hlo.shape_checks import shape_problem

__all__ = ["HloVerificationError", "verify_module", "check_module", "entry_signature", "signature_change",
           "layout_problem"]


class HloVerificationError(ValueError):
    """A module failed verification.

    Attributes:
        problems: one line per problem found (the first ``max_problems``), each naming the computation and
            the instruction.
    """

    def __init__(self, problems: list[str]):
        self.problems = list(problems)
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        super().__init__(f"{problems[0]}{more}" if problems else "invalid module")


def layout_problem(shape: Shape | None) -> str | None:
    """Why ``shape``'s layout is invalid (a minor-to-major list that is not a permutation of its
    dimensions, at any tuple depth), else ``None``."""
    if shape is None:
        return None
    if shape.is_tuple:
        for s in shape.tuple_shapes or ():
            e = layout_problem(s)
            if e:
                return e
        return None
    lay = shape.layout
    if lay is None or not shape.is_array:
        return None
    mtm = tuple(lay.minor_to_major)
    if sorted(mtm) != list(range(shape.rank)):
        return (f"layout {{{','.join(map(str, mtm))}}} of {shape.element_type}{list(shape.dimensions)} is not a "
                f"permutation of its {shape.rank} dimensions")
    return None


def _where(comp: Computation, inst: Instruction | None = None) -> str:
    return f"computation {comp.name!r}" + (f", %{inst.name}" if inst is not None else "")


def _computation_problems(comp: Computation, known: set[int]) -> Iterator[str]:
    pos = {id(i): k for k, i in enumerate(comp.instructions)}
    names: dict[str, Instruction] = {}
    if comp.root is None or id(comp.root) not in pos:
        yield f"{_where(comp)}: its root {'%' + comp.root.name if comp.root else '(none)'} is not one of its instructions"
    for k, inst in enumerate(comp.instructions):
        if inst.name in names and names[inst.name] is not inst:
            yield f"{_where(comp)}: instruction name %{inst.name} is used twice"
        names[inst.name] = inst
        if inst.parent is not None and inst.parent is not comp:
            yield f"{_where(comp, inst)}: its parent is computation {inst.parent.name!r}"
        for o in inst.operands:
            at = pos.get(id(o))
            if at is None:
                home = f" (it is in computation {o.parent.name!r})" if o.parent is not None else ""
                yield f"{_where(comp, inst)}: operand %{o.name} is not an instruction of this computation{home}"
            elif at >= k:
                yield (f"{_where(comp, inst)}: operand %{o.name} is defined after its user (instructions must be in "
                       f"an order where operands come first: fusegen.passes.kit.insert_before / topo_sort)")
        for c in inst.called_computations:
            if id(c) not in known:
                yield f"{_where(comp, inst)}: calls computation {c.name!r}, which is not in the module"
        e = layout_problem(inst.shape)
        if e:
            yield f"{_where(comp, inst)}: {e}"
            continue
        e = verifier.instruction_error(inst) or verifier.called_error(inst) or shape_problem(inst)
        if e:
            yield f"{_where(comp)}: {e}"
    bad = verifier.parameters_error(comp)
    if bad:
        yield f"{_where(comp)}: {bad[0]}"


def verify_module(module: Module, max_problems: int = 20) -> list[str]:
    """Every problem of ``module`` (up to ``max_problems``), one line each, naming the computation and the
    instruction; ``[]`` for a valid module. Nothing is changed. Linear in the module's size."""
    out: list[str] = []

    def add(lines) -> bool:
        for line in lines:
            out.append(line)
            if len(out) >= max_problems:
                return True
        return False

    if module.entry is None or all(c is not module.entry for c in module.computations):
        out.append(f"module {module.name}: no entry computation among its computations")
    seen: dict[str, Computation] = {}
    known = {id(c) for c in module.computations}
    for c in module.computations:
        if c.name in seen:
            out.append(f"module {module.name}: computation name {c.name!r} is used twice")
        seen[c.name] = c
    edges = {id(c): [(cc, i) for i in c.instructions for cc in i.called_computations] for c in module.computations}
    cycle = verifier.call_cycle(edges, module.computations)
    if cycle is not None:
        comp, inst = cycle
        out.append(f"computation {comp.name!r} calls itself (through %{getattr(inst, 'name', '?')})")
        return out  # shapes through a cycle are meaningless
    for c in module.computations:
        if add(_computation_problems(c, known)):
            break
    return out[:max_problems]


def check_module(module: Module) -> None:
    """Raise :class:`HloVerificationError` when :func:`verify_module` finds anything."""
    problems = verify_module(module)
    if problems:
        raise HloVerificationError(problems)


@attrs.frozen
class EntrySignature:
    """What a module takes and gives: the entry parameters' and root's shapes, with layouts.

    Attributes:
        parameters: ``print_shape`` of each entry parameter, in parameter-number order.
        result: ``print_shape`` of the entry root.
    """

    parameters: tuple[str, ...]
    result: str


def entry_signature(module: Module) -> EntrySignature:
    """The entry computation's signature (empty when the module has no entry)."""
    from fusegen.hlo.printer import print_shape

    e = module.entry
    if e is None:
        return EntrySignature((), "")
    params = tuple(print_shape(p.shape) for p in e.parameters)
    return EntrySignature(params, print_shape(e.root.shape) if e.root is not None else "")


def signature_change(before: EntrySignature, module: Module) -> str | None:
    """How ``module``'s entry signature differs from ``before`` (one line), else ``None``."""
    after = entry_signature(module)
    if len(after.parameters) != len(before.parameters):
        return f"the entry computation takes {len(after.parameters)} parameters, it took {len(before.parameters)}"
    for k, (a, b) in enumerate(zip(after.parameters, before.parameters)):
        if a != b:
            return f"entry parameter {k} is {a}, it was {b}"
    if after.result != before.result:
        return f"the entry computation returns {after.result}, it returned {before.result}"
    return None
