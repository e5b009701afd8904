"""The verdict's subscriber to a run: :class:`RunRecorder` judges each fusion execution against its error budget
and records what the module verdict reads (:func:`fusegen.verify.verdict.judge_module`): the fusion events in
execution order, the near-ties of sorts and argmax (:mod:`fusegen.verify.ties`) and of float compares
(:mod:`fusegen.verify.compare_ties`). An :class:`~fusegen.runtime.executor.Executor` publishes to it
(:class:`~fusegen.runtime.observer.FusionObserver`) when handed one, as :mod:`fusegen.verify.judged_run` does;
nothing here reads or writes the executor.
"""

from __future__ import annotations

from typing import Any, Callable

from fusegen.hlo.ir import Instruction, Module
from fusegen.runtime.observer import FusionObserver
from fusegen.verify.compare_ties import reference_recording
from fusegen.config.verify_options import VerifyOptions
from fusegen.verify.ties import record_ties
from fusegen.verify.verdict import record_fusion

__all__ = ["RunRecorder"]


class RunRecorder(FusionObserver):
    """What verify records of one module's run on the kernel path.

    Attributes:
        module: the module run; verify: its budgets and floors.
        events: a :class:`~fusegen.verify.verdict.FusionEvent` per compared fusion execution, in order.
        ties: near-ties of the sorts and argmax on the kernel path (:class:`~fusegen.verify.ties.Tie`), in order.
        compare_ties: near-ties of float compares (:class:`~fusegen.verify.compare_ties.CompareTie`).
        fusion_counts, tie_counts, compare_counts: executions so far per instruction name.
    """

    def __init__(self, module: Module, verify: VerifyOptions | None = None):
        self.module = module
        self.verify = verify or VerifyOptions()
        self.events: list = []
        self.ties: list = []
        self.compare_ties: list = []
        self.fusion_counts: dict[str, int] = {}
        self.tie_counts: dict[str, int] = {}
        self.compare_counts: dict[str, int] = {}
        self.loops: dict[int, list[str]] | None = None  # computation id -> enclosing while names, on first use
        self.is_choice: dict[int, tuple[Instruction, bool]] = {}  # id -> (instruction, a sort/argmax ties name)
        self.has_compares: dict[int, tuple[Instruction, bool]] = {}  # id -> (instruction, holds a float compare)

    def reference(self, inst: Instruction, ops: list[Any], evaluate: Callable[[Instruction, list[Any]], Any]) -> Any:
        return reference_recording(self, inst, ops, evaluate)

    def kernel_output(self, inst: Instruction, out: Any, ops: list[Any]) -> None:
        record_ties(self, inst, out, ops)

    def fusion_executed(self, rep: Any, inst: Instruction, out: Any, ref: Any, ops: list[Any] | None) -> None:
        record_fusion(self, rep, inst, out, ref, ops)
