"""What an :class:`~fusegen.runtime.executor.Executor` tells about a run as it goes: the events a verdict (or any
other subscriber) builds on, without the executor knowing who listens.

The executor calls, for every instruction it runs on the kernel path:

* :meth:`FusionObserver.reference` for a fusion (and a top-level compare): the reference value on the kernel
  path's operands, which the executor compares the kernel with (and falls back to when a kernel fails);
* :meth:`FusionObserver.kernel_output` for a fusion, sort or reduce: the value the kernel path produced;
* :meth:`FusionObserver.fusion_executed` for a fusion compared with its reference: the report to update.

This base class (the executor's default) evaluates the reference plainly, records nothing and calls every
compared fusion ``ok``; :class:`fusegen.verify.recorder.RunRecorder` (the verdict's subscriber, which
:mod:`fusegen.verify.judged_run` hands the executor) judges error budgets and records the events and near-ties
the module verdict reads.
"""

from __future__ import annotations

from typing import Any, Callable

from fusegen.hlo.ir import Instruction

__all__ = ["FusionObserver"]


class FusionObserver:
    """The executor's subscriber interface (see the module docstring); subclass it and override what you need."""

    def reference(self, inst: Instruction, ops: list[Any], evaluate: Callable[[Instruction, list[Any]], Any]) -> Any:
        """The reference value of ``inst`` on ``ops`` (``evaluate``: the executor's reference evaluator)."""
        return evaluate(inst, ops)

    def kernel_output(self, inst: Instruction, out: Any, ops: list[Any]) -> None:
        """``inst`` (a fusion, sort or reduce) gave ``out`` on ``ops`` on the kernel path."""

    def fusion_executed(self, rep: Any, inst: Instruction, out: Any, ref: Any, ops: list[Any] | None) -> None:
        """Fusion ``inst`` ran: its kernel's ``out`` against the reference's ``ref`` on ``ops``; update ``rep``
        (a :class:`~fusegen.runtime.executor.FusionReport`: ``status``, errors, budget)."""
        rep.status = "ok" if rep.status == "pending" else rep.status
