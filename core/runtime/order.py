"""The order fusions are listed in by ``fusegen run`` and ``fusegen explain`` (one order for both)."""

from __future__ import annotations

from fusegen.hlo.ir import Computation, Instruction, Module

# Instructions whose computations the executor runs where they stand (``Executor.run_instruction``); every
# other called computation (reducers, comparators, fused bodies) belongs to its instruction.
_CONTROL_FLOW = {"call": ("to_apply",), "while": ("condition", "body"),
                 "conditional": ("branch_computations", "true_computation", "false_computation")}


def fusions_in_execution_order(module: Module) -> list[Instruction]:
    """Every ``fusion`` instruction of ``module``, in the order the executor first reaches it.

    The entry computation in post order, descending into ``call`` / ``while`` (condition, then body) /
    ``conditional`` (branches in order) computations where the instruction stands; a computation called twice
    is listed once. Fusions the entry never reaches (nested in a fused computation, or in a computation no one
    calls) follow in file order.
    """
    out: list[Instruction] = []
    seen: set[int] = set()

    def walk(comp: Computation) -> None:
        if id(comp) in seen:
            return
        seen.add(id(comp))
        for inst in comp.post_order():
            if inst.opcode == "fusion":
                out.append(inst)
            for key in _CONTROL_FLOW.get(inst.opcode, ()):
                v = inst.attrs.get(key)
                for c in v if isinstance(v, list) else [v]:
                    if isinstance(c, Computation):
                        walk(c)

    walk(module.entry)
    listed = {id(i) for i in out}
    out.extend(i for c in module.computations for i in c.instructions if i.opcode == "fusion" and id(i) not in listed)
    return out
