"""Where the reference evaluator's and the f64 oracle's time goes: seconds per instruction (``run --profile``).

:class:`InstructionTimes` wraps the ``apply`` an interpreter run hands every instruction to
(:func:`fusegen.runtime.executor.interpret`) and adds up wall-clock seconds and calls per instruction name (a
``fusion`` counts as one instruction: its reference is the evaluation of its whole body; an instruction inside
a ``while`` body adds up over iterations). :func:`per_element_notes` names, once per instruction, every
called computation the evaluator cannot lift to whole arrays (control flow or non-scalar values inside), so
it runs once per element (or once per comparison for a sort): the usual reason a reference is slow.

No XLA counterpart: XLA's ``HloExecutionProfile`` plays this role for compiled code.
"""

from __future__ import annotations

import time
from typing import Any, Callable

from fusegen.hlo.ir import Computation, Instruction, Module

__all__ = ["InstructionTimes", "per_element_notes", "merge_profiles"]

#: instructions whose called computation the evaluator runs per element when it cannot lift it
_CALLERS = {"sort": ("to_apply",), "reduce": ("to_apply",), "reduce-window": ("to_apply",), "map": ("to_apply",),
            "scatter": ("to_apply",), "select-and-scatter": ("select", "scatter")}


class InstructionTimes:
    """Seconds and calls per instruction of one evaluator run (``rows``: name -> ``[opcode, seconds, calls]``)."""

    __slots__ = ("rows",)

    def __init__(self) -> None:
        self.rows: dict[str, list] = {}

    def wrap(self, apply: Callable[[Instruction, list[Any]], Any]) -> Callable[[Instruction, list[Any]], Any]:
        """``apply`` timed: every call adds its wall seconds to the instruction's row (also when it raises)."""
        rows = self.rows

        def timed(inst: Instruction, ops: list[Any]) -> Any:
            t0 = time.perf_counter()
            try:
                return apply(inst, ops)
            finally:
                row = rows.get(inst.name)
                if row is None:
                    row = rows[inst.name] = [inst.opcode, 0.0, 0]
                row[1] += time.perf_counter() - t0
                row[2] += 1

        return timed

    @property
    def total(self) -> float:
        """Seconds over every instruction."""
        return sum(r[1] for r in self.rows.values())


def per_element_notes(module: Module) -> list[dict[str, str]]:
    """``[{"name", "opcode", "computation", "reason"}]``: each sort / reduce / reduce-window / map / scatter /
    select-and-scatter of ``module`` (fusion bodies included) whose computation runs per element, once each."""
    from fusegen.evaluator.reduce import per_element_reason

    notes = []
    for comp in module.computations:
        for inst in comp.instructions:
            for key in _CALLERS.get(inst.opcode, ()):
                callee = inst.attrs.get(key)
                callee = callee[0] if isinstance(callee, list) and callee else callee
                if not isinstance(callee, Computation):
                    continue
                reason = per_element_reason(callee)
                if reason is not None:
                    what = "one comparison at a time" if inst.opcode == "sort" else "one element at a time"
                    notes.append({"name": inst.name, "opcode": inst.opcode, "computation": callee.name,
                                  "reason": f"{reason}: evaluated {what}"})
                    break
    return notes


def merge_profiles(reference: dict[str, list], f64: dict[str, list], n: int | None = None) -> list[dict]:
    """Rows ``{"name", "opcode", "reference_s", "f64_s", "calls"}``, slowest (either run) first, ``n`` at most."""
    names = list(dict.fromkeys(list(reference) + list(f64)))
    rows = []
    for name in names:
        r, o = reference.get(name), f64.get(name)
        rows.append({"name": name, "opcode": (r or o)[0], "reference_s": round(r[1], 6) if r else 0.0,
                     "f64_s": round(o[1], 6) if o else 0.0, "calls": (r or o)[2]})
    rows.sort(key=lambda d: -max(d["reference_s"], d["f64_s"]))
    return rows if n is None else rows[:n]
