"""What of a valid module fusegen cannot run, found before anything runs.

An instruction is unsupported when no execution backend takes it (a plugin's ``can_execute``; the host
backend takes what the reference evaluator implements, :func:`fusegen.evaluator.evaluator.implements`) and,
inside a fusion's body, when the reference evaluator does not implement it (the fusion's reference needs it).
``fusegen run`` refuses such a module with exit 4 and ``fusegen explain`` warns about it; neither is a plugin
failure. The list of what remains unsupported is in the README (``docs/library_calls.md``).
"""

from __future__ import annotations

from typing import Any

from fusegen.evaluator.evaluator import UnsupportedOpError, implements
from fusegen.hlo.ir import Module


class UnsupportedInstructionError(UnsupportedOpError):
    """A valid module holds instructions fusegen has no implementation of (raised before any run).

    ``str(err)`` is the first one's :class:`~fusegen.evaluator.evaluator.UnsupportedOpError` line, followed by
    ``(and N more: %a, %b)`` when there are several.

    Attributes:
        unsupported: every instruction's :class:`UnsupportedOpError`, in module order; the first one's
            ``opcode``, ``instruction``, ``computation``, ``target`` and ``what`` are this error's own.
    """

    def __init__(self, unsupported: list[UnsupportedOpError]):
        first = unsupported[0]
        super().__init__(str(first))
        self.opcode, self.instruction, self.computation = first.opcode, first.instruction, first.computation
        self.target, self.what = first.target, first.what
        self.unsupported = list(unsupported)
        if len(unsupported) > 1:
            more = ", ".join(f"%{u.instruction}" for u in unsupported[1:6])
            more += ", ..." if len(unsupported) > 6 else ""
            self.args = (f"{first} (and {len(unsupported) - 1} more: {more})",)


def unsupported_instructions(module: Module, pm: Any = None) -> list[UnsupportedOpError]:
    """One :class:`UnsupportedOpError` per instruction of ``module`` that nothing can run, in module order.

    ``pm`` (default: the process's plugin manager) gives the execution backends; a non-fusion instruction some
    backend's ``can_execute`` takes is supported even where the evaluator lacks it.
    """
    from fusegen.plugin_manager import default_plugin_manager

    pm = pm or default_plugin_manager()
    backends = [b for b in pm.execution_backends() if b.name != "host"]
    fused = {id(i.fused_computation) for c in module.computations for i in c.instructions if i.opcode == "fusion"}
    out = []
    for comp in module.computations:
        for inst in comp.instructions:
            if implements(inst):
                continue
            if id(comp) not in fused and any(pm.call_plugin(b.plugin, f"{b.name}.can_execute", b.can_execute, inst)
                                             for b in backends):
                continue
            target = str(inst.attrs.get("custom_call_target", "")).strip('"') if inst.opcode == "custom-call" \
                else None
            out.append(UnsupportedOpError(inst, target=target))
    return out


def check_supported(module: Module, pm: Any = None) -> None:
    """Raise :class:`UnsupportedInstructionError` when ``module`` holds an instruction nothing can run."""
    found = unsupported_instructions(module, pm)
    if found:
        raise UnsupportedInstructionError(found)
