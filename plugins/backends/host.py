"""The host backend: runs any instruction on the CPU through the reference evaluator.

It ranks last among execution backends, so it serves every non-fusion instruction (library custom
calls with their backend-config semantics, control flow operands, ...) and every fusion whose kind
has no emitter yet. Trusted (XLA ``CanProduceWrongResults() == false``).
"""

from __future__ import annotations

from typing import Any

from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import ExecutionBackend

HOST_RANK = 1000


def _can_execute(inst: Instruction) -> bool:
    return True


def _execute(inst: Instruction, operands: list[Any], context: Any = None) -> Any:
    """Evaluate ``inst`` on logical numpy ``operands``.

    Raises:
        fusegen.evaluator.evaluator.UnsupportedOpError: the op (or custom-call target) is unknown.
    """
    return evaluate_instruction(inst, operands)


@hookimpl
def fusegen_execution_backends():
    return [ExecutionBackend(name="host", rank=HOST_RANK, can_execute=_can_execute, execute=_execute, trusted=True)]
