"""The module modes of ``fusegen indexing``: the indexing analysis and the read-coalescing analysis of one
instruction or fusion of an HLO file.

    fusegen indexing MODULE.hlo --instruction NAME (--output-to-input [--output-id N] | --input-to-output
        --input-id N) [--physical-layout] [--grouped] [--json]
    fusegen indexing MODULE.hlo --fusion NAME --coalescing [--device NAME] [--json]

``--json`` prints ``{"operands": [[map, ...], ...]}`` (for input-to-output: one list per output), with
``--grouped`` ``{"grouped": {"instruction name": [map, ...]}}``, with ``--coalescing``
``{"coalesced": [bool per operand]}``; each map is XLA's text form (``unknown indexing`` where unknown, as
``HloInstructionIndexing::ToString`` prints an undefined map; ``KNOWN EMPTY``). ``"details"`` adds each map's runtime variables and replica-id map. Without ``--json`` the text
is XLA's ``HloInstructionIndexing::ToString``. Bad input is one line on stderr and exit code 2.
"""

from __future__ import annotations

import json

import click

from fusegen.cli.common import fail, load_module
from fusegen.hlo.ir import Instruction, Module
from fusegen.indexing.analysis import (
    FusionAdaptor, GroupedIndexing, compute_grouped_output_to_input_indexing, compute_input_to_output_indexing,
    compute_input_to_output_indexing_physical, compute_output_to_input_indexing,
    compute_output_to_input_indexing_physical,
)
from fusegen.indexing.analysis_types import InstructionIndexing, OperandIndexing


def find_instruction(module: Module, name: str) -> Instruction | None:
    """The instruction called ``name`` (a leading ``%`` is ignored); the ENTRY computation is searched first,
    then the others in text order."""
    name = name.lstrip("%")
    comps = ([module.entry] if module.entry is not None else []) + [c for c in module.computations
                                                                     if c is not module.entry]
    for c in comps:
        for i in c.instructions:
            if i.name == name:
                return i
    return None


def calling_fusion(module: Module, instr: Instruction) -> Instruction | None:
    """The ``fusion`` instruction whose body holds ``instr`` (``None`` outside fused computations)."""
    for f in module.all_instructions():
        if f.opcode == "fusion":
            c = f.attrs.get("calls")
            bodies = c if isinstance(c, list) else [c]
            if any(b is instr.parent for b in bodies):
                return f
    return None


def _text(m) -> str:
    """A map's text; an undefined one as ``HloInstructionIndexing::ToString`` prints it (``unknown indexing``)."""
    return "unknown indexing" if m.is_undefined else str(m)


def _details(item: OperandIndexing) -> dict:
    """A map with the records of its runtime variables, each map kept whole: a runtime variable read at a
    point that itself depends on runtime variables (a slice of a slice) keeps its ``{rt0, ...}`` and their
    constraints, as XLA's ``RuntimeVarIndexing::ToString`` prints them."""
    return {
        "map": _text(item.map),
        "runtime_variables": [{"instruction": str(r).split(";", 1)[0], "map": _text(r.map)} for r in item.rt_vars],
        "replica_id": None if item.replica_id_map is None else _text(item.replica_id_map),
    }


def indexing_json(indexing: InstructionIndexing) -> dict:
    return {"operands": [[_text(it.map) for it in items] for items in indexing],
            "details": [[_details(it) for it in items] for items in indexing]}


def grouped_json(grouped: GroupedIndexing) -> dict:
    by_name = grouped.by_name()
    return {"grouped": {k: [_text(it.map) for it in v] for k, v in by_name.items()},
            "details": {k: [_details(it) for it in v] for k, v in by_name.items()}}


def grouped_for(module: Module, instr: Instruction, output_id: int) -> GroupedIndexing:
    """Grouped output-to-input indexing: from a fusion's root (``output_id``-th of a multi-output one) or
    from an instruction inside a fused computation, over its fusion; else over the instruction alone."""
    if instr.opcode == "fusion":
        adaptor = FusionAdaptor.for_instruction(instr)
        if not 0 <= output_id < len(adaptor.roots):
            fail(f"%{instr.name} has {len(adaptor.roots)} output(s); --output-id {output_id} is out of range")
        return compute_grouped_output_to_input_indexing(adaptor, adaptor.roots[output_id])
    fusion = calling_fusion(module, instr)
    adaptor = FusionAdaptor.for_instruction(fusion) if fusion is not None else FusionAdaptor.for_instruction(instr)
    return compute_grouped_output_to_input_indexing(adaptor, instr)


def _num_outputs(instr: Instruction) -> int:
    return len(instr.shape.tuple_shapes) if instr.shape.is_tuple else 1


def run_module_mode(module_path: str, *, instruction: str | None = None, fusion: str | None = None,
                    output_to_input: bool = False, input_to_output: bool = False, output_id: int | None = None,
                    input_id: int | None = None, physical_layout: bool = False, grouped: bool = False,
                    coalescing: bool = False, as_json: bool = False, device_name: str | None = None) -> int:
    """Runs one module mode of ``fusegen indexing`` and prints its answer; returns the exit code (0).

    Bad input (unreadable or malformed HLO, unknown instruction, conflicting or missing flags, ids out of
    range) prints one line and exits with code 2.
    """
    if instruction and fusion and instruction != fusion:
        fail("give either --instruction or --fusion, not both")
    name = instruction or fusion
    if not name:
        fail(f"{module_path}: name the instruction with --instruction NAME (or --fusion NAME)")
    module = load_module(module_path)
    instr = find_instruction(module, name)
    if instr is None:
        fail(f"{module_path}: no instruction %{name.lstrip('%')}")
    if coalescing:
        if output_to_input or input_to_output or grouped or physical_layout:
            fail("--coalescing does not combine with --output-to-input/--input-to-output/--grouped/--physical-layout")
        return _run_coalescing(module_path, instr, as_json, device_name)
    if output_to_input == input_to_output:
        fail("give exactly one of --output-to-input and --input-to-output")
    if input_to_output:
        if grouped:
            fail("--grouped is an output-to-input analysis")
        if input_id is None:
            fail("--input-to-output needs --input-id N")
        if not 0 <= input_id < len(instr.operands):
            fail(f"%{instr.name} has {len(instr.operands)} operand(s); --input-id {input_id} is out of range")
        fn = compute_input_to_output_indexing_physical if physical_layout else compute_input_to_output_indexing
        result = fn(instr, input_id)
    else:
        oid = output_id or 0
        if oid < 0 or (instr.opcode != "fusion" and oid >= _num_outputs(instr)):
            fail(f"%{instr.name} has {_num_outputs(instr)} output(s); --output-id {oid} is out of range")
        if grouped:
            if physical_layout:
                fail("--grouped does not combine with --physical-layout")
            g = grouped_for(module, instr, oid)
            if as_json:
                click.echo(json.dumps(grouped_json(g)))
            else:
                for inst, items in g.values():
                    for it in items:
                        click.echo(f"{inst.name}: {it}")
            return 0
        if instr.opcode == "fusion":
            n_roots = len(FusionAdaptor.for_instruction(instr).roots)
            if oid >= n_roots:
                fail(f"%{instr.name} has {n_roots} output(s); --output-id {oid} is out of range")
        fn = compute_output_to_input_indexing_physical if physical_layout else compute_output_to_input_indexing
        result = fn(instr, oid)
    if as_json:
        click.echo(json.dumps(indexing_json(result)))
    else:
        click.echo(result.to_string("\n"), nl=False)
    return 0


def _run_coalescing(module_path: str, instr: Instruction, as_json: bool, device_name: str | None) -> int:
    from fusegen.codegen.coalescing import CoalescingError, coalescing_for_fusion

    if instr.opcode != "fusion":
        fail(f"{module_path}: %{instr.name} is a {instr.opcode}, not a fusion (--coalescing needs --fusion NAME)")
    try:
        flags = coalescing_for_fusion(instr, device_name=device_name)
    except CoalescingError as e:
        fail(f"{module_path}: %{instr.name}: {e}")
    if as_json:
        click.echo(json.dumps({"coalesced": flags}))
    else:
        for o, f in zip(instr.operands, flags):
            click.echo(f"{o.name}: {'coalesced' if f else 'not coalesced'}")
    return 0
