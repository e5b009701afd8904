"""The executor publishes each execution to its observer (``fusegen.runtime.observer.FusionObserver``) and the
verdict subscribes (``fusegen.verify.recorder.RunRecorder``): issue 44, "verify reaches into the executor". The
executor's own default observer judges nothing; a judged run (``fusegen.verify.judged_run.run_module``) passes
the recorder in."""

from __future__ import annotations

import numpy as np

from fusegen.hlo.parser import parse_module
from fusegen.runtime.executor import Executor
from fusegen.runtime.observer import FusionObserver
from fusegen.verify.judged_run import run_module
from fusegen.verify.recorder import RunRecorder

_TWO_FUSIONS = """HloModule two
ENTRY e {
  x = f32[8] parameter(0)
  f1 = f32[8] fusion(x), kind=kLoop, calls=neg
  ROOT f2 = f32[8] fusion(f1), kind=kLoop, calls=dbl
}
neg { ROOT n = f32[8] negate(f32[8] parameter(0)) }
dbl {
  v = f32[8] parameter(0)
  ROOT twice = f32[8] add(v, v)
}"""


class _Log(FusionObserver):
    def __init__(self):
        self.calls = []

    def reference(self, inst, ops, evaluate):
        self.calls.append(("reference", inst.name))
        return super().reference(inst, ops, evaluate)

    def kernel_output(self, inst, out, ops):
        self.calls.append(("kernel_output", inst.name, np.asarray(out).tolist()))

    def fusion_executed(self, rep, inst, out, ref, ops):
        self.calls.append(("fusion_executed", inst.name))
        super().fusion_executed(rep, inst, out, ref, ops)


def test_a_subscriber_hears_every_execution_in_order():
    m = parse_module(_TWO_FUSIONS)
    x = np.arange(8, dtype=np.float32)
    log = _Log()
    ex = Executor(m, compile_kernels=False, observer=log)
    out = ex.run([x])
    np.testing.assert_array_equal(out, -2 * x)
    assert log.calls == [("reference", "f1"), ("fusion_executed", "f1"), ("kernel_output", "f1", (-x).tolist()),
                         ("reference", "f2"), ("fusion_executed", "f2"),
                         ("kernel_output", "f2", (-2 * x).tolist())]
    assert [r.status for r in ex.reports.values()] == ["ok", "ok"]  # the base observer judges nothing: ok


def test_the_verdict_records_on_its_own_recorder():
    m = parse_module(_TWO_FUSIONS)
    x = np.arange(8, dtype=np.float32)
    ex = Executor(m, compile_kernels=False, observer=RunRecorder(m))
    ex.run([x])
    rec = ex.observer
    assert [(e.fusion, e.execution) for e in rec.events] == [("f1", 0), ("f2", 0)]
    assert rec.fusion_counts == {"f1": 1, "f2": 1} and not vars(ex).keys() & {"_verify_counts", "_cmp_counts",
                                                                              "_tie_counts", "events", "ties"}
    _, rep = run_module(m, [x], compile_kernels=False)  # the judged run passes its recorder in
    assert rep.ok and rep.verdict.outputs[0].status == "ok"
    assert [(f.name, f.max_abs_error) for f in rep.fusions] == [("f1", 0.0), ("f2", 0.0)]


def test_the_executor_alone_judges_nothing():
    # runtime stands below verify (docs/layers.md): without an observer the executor publishes to a plain one
    m = parse_module(_TWO_FUSIONS)
    x = np.arange(8, dtype=np.float32)
    ex = Executor(m, compile_kernels=False)
    assert type(ex.observer) is FusionObserver
    np.testing.assert_array_equal(ex.run([x]), -2 * x)
    assert [(r.status, r.max_abs_error, r.error_budget_ratio) for r in ex.reports.values()] == [("ok", None, None)] * 2
