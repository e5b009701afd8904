"""The module's reference run and f64 oracle beside the kernels (``run_module(jobs > 1)``): the same verdict as
in sequence, a process that never outlives the run, errors that surface as before."""

from __future__ import annotations

import json
import multiprocessing
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import corpus_path
from fusegen.evaluator.common import EvaluationError
from fusegen.hlo.parser import parse_module
from fusegen.runtime import executor, oracles
from fusegen.runtime.inputs import load_expected, load_inputs
from fusegen.runtime.limits import ResourceLimitError, RunLimits, estimate_peak_bytes
from fusegen.verify.judged_run import run_module

REAL = Path(__file__).parents[1] / "data" / "real_models"

WHILE = """HloModule loop

%body (s: (s32[], f32[64])) -> (s32[], f32[64]) {
  %s = (s32[], f32[64]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %one = s32[] constant(1)
  %n = s32[] add(%i, %one)
  %x = f32[64] get-tuple-element(%s), index=1
  %y = f32[64] fusion(%x), kind=kLoop, calls=%step
  ROOT %t = (s32[], f32[64]) tuple(%n, %y)
}

%step (a: f32[64]) -> f32[64] {
  %a = f32[64] parameter(0)
  %t = f32[64] tanh(%a)
  %k = f32[] constant(2.5)
  %kb = f32[64] broadcast(%k), dimensions={}
  ROOT %m = f32[64] multiply(%t, %kb)
}

%cond (s: (s32[], f32[64])) -> pred[] {
  %s = (s32[], f32[64]) parameter(0)
  %i = s32[] get-tuple-element(%s), index=0
  %lim = s32[] constant(TRIPS)
  ROOT %lt = pred[] compare(%i, %lim), direction=LT
}

ENTRY %main (x: f32[64]) -> f32[64] {
  %x = f32[64] parameter(0)
  %zero = s32[] constant(0)
  %init = (s32[], f32[64]) tuple(%zero, %x)
  %w = (s32[], f32[64]) while(%init), condition=%cond, body=%body
  ROOT %r = f32[64] get-tuple-element(%w), index=1
}
"""

BITCAST_CONVERT = """HloModule bc

%fused (p: f32[16]) -> s32[16] {
  %p = f32[16] parameter(0)
  %n = f32[16] negate(%p)
  ROOT %b = s32[16] bitcast-convert(%n)
}

ENTRY %main (x: f32[16]) -> s32[16] {
  %x = f32[16] parameter(0)
  ROOT %f = s32[16] fusion(%x), kind=kLoop, calls=%fused
}
"""


def _oracle_children() -> list:
    return [p for p in multiprocessing.active_children() if p.name == "fusegen-oracles"]


@pytest.fixture
def forked(monkeypatch) -> list[bool]:
    """Whether each ``ModuleOracles`` of the test forked its background process."""
    seen: list[bool] = []
    real = oracles.ModuleOracles.start

    def start(self):
        r = real(self)
        seen.append(self._proc is not None)
        return r

    monkeypatch.setattr(oracles.ModuleOracles, "start", start)
    return seen


def _same_report(a, b) -> None:
    ja, jb = a.verdict.to_json(), b.verdict.to_json()
    assert ja == jb
    assert [(f.name, f.status, f.max_abs_error, f.error_budget_ratio) for f in a.fusions] == \
        [(f.name, f.status, f.max_abs_error, f.error_budget_ratio) for f in b.fusions]
    assert a.output_max_abs_error == b.output_max_abs_error and a.status == b.status


@pytest.mark.parametrize("name", ["equinox_rnn_chaotic", "flax_batchnorm_offset"])
def test_background_oracles_give_the_verdict_in_sequence(name, forked):
    # two of the real programs whose verdict is drift: it rests on the f64 figures, so they must be the same
    path = REAL / f"{name}.h200_opt.hlo"
    m = parse_module(path.read_text(), str(path))
    args = load_inputs(m, str(REAL / f"{name}.inputs.npz"))
    expected = load_expected(REAL / f"{name}.expected.npz", len(m.entry.root.shape.leaves()))
    out1, seq = run_module(m, args, compile_kernels=False, expected=expected, jobs=1)
    out2, bg = run_module(m, args, compile_kernels=False, expected=expected, jobs=2)
    assert forked == [False, True]
    assert bg.verdict.oracle == "f64" and bg.status == "drift"
    _same_report(seq, bg)
    np.testing.assert_array_equal(np.asarray(out1), np.asarray(out2))
    assert not _oracle_children()


def test_background_oracle_unavailable_reads_as_in_sequence(forked, monkeypatch):
    import fusegen.evaluator.promote as promote

    def refuse(module):  # (float bitcast-converts have an oracle now: refuse every module instead)
        raise promote.OracleUnavailable("%r bitcast-converts a floating type (planted)")

    monkeypatch.setattr(promote, "promote_module", refuse)
    m = parse_module(BITCAST_CONVERT)
    x = np.linspace(-2, 2, 16, dtype=np.float32)
    _, seq = run_module(m, [x], compile_kernels=False, jobs=1)
    _, bg = run_module(m, [x], compile_kernels=False, jobs=2)
    assert forked == [False, True]
    assert bg.verdict.oracle.startswith("unavailable: ") and "bitcast-converts" in bg.verdict.oracle
    _same_report(seq, bg)


def test_a_while_loop_runs_its_iterations_in_both_processes(forked):
    m = parse_module(WHILE.replace("TRIPS", "40"))
    x = np.linspace(-1, 1, 64, dtype=np.float32)
    # the budget is per run: the kernel run and the reference run (in sequence or beside) may each do 40
    # (the reference in sequence used to count on from the kernel run's 40 and stop a loop the static
    # check had let through)
    limits = RunLimits(max_memory=1 << 40, max_while_iterations=40)
    _, seq = run_module(m, [x], compile_kernels=False, jobs=1, limits=limits)
    _, bg = run_module(m, [x], compile_kernels=False, jobs=2, limits=limits)
    assert forked[:2] == [False, True]
    _same_report(seq, bg)
    for jobs in (1, 2):
        with pytest.raises(ResourceLimitError, match="passed the budget of 39 loop iterations"):
            run_module(m, [x], compile_kernels=False, jobs=jobs,
                       limits=RunLimits(max_memory=1 << 40, max_while_iterations=39))
    assert not _oracle_children()


def test_a_run_that_stops_kills_the_background_process(monkeypatch, forked):
    m = parse_module(WHILE.replace("TRIPS", "1000000"))
    with pytest.raises(ResourceLimitError, match="took longer than --timeout 0.5 s"):
        run_module(m, [np.ones(64, np.float32)], compile_kernels=False, jobs=2,
                   limits=RunLimits(max_memory=1 << 40, timeout=0.5, max_while_iterations=10**7))
    assert forked == [True] and not _oracle_children()

    # a kernel path that fails at once, while the background would loop for a minute: killed, not awaited
    def fail(self, args):
        raise KeyboardInterrupt

    monkeypatch.setattr(executor.Executor, "run", fail)
    t0 = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_module(m, [np.ones(64, np.float32)], compile_kernels=False, jobs=2,
                   limits=RunLimits(max_memory=1 << 40, max_while_iterations=10**7))
    assert time.perf_counter() - t0 < 5 and forked == [True, True] and not _oracle_children()


def test_a_background_process_that_dies_is_a_one_line_error(monkeypatch):
    monkeypatch.setattr(oracles.ModuleOracles, "_child", lambda self, conn, parent: os._exit(3))
    m = parse_module(WHILE.replace("TRIPS", "3"))
    with pytest.raises(EvaluationError, match=r"died \(exit code 3\); run with --jobs 1"):
        run_module(m, [np.ones(64, np.float32)], compile_kernels=False, jobs=2)
    assert not _oracle_children()


def test_no_background_process_when_both_runs_would_pass_the_memory_limit(forked):
    m = parse_module(WHILE.replace("TRIPS", "3"))
    need, wide = estimate_peak_bytes(m), estimate_peak_bytes(m, promoted=True)
    assert need < wide < 2 * need  # f32 values at 8 bytes, the s32 loop counters as they are
    both = need + wide
    assert oracles.fits_beside(m, RunLimits(max_memory=both))
    assert not oracles.fits_beside(m, RunLimits(max_memory=both - 1))
    _, rep = run_module(m, [np.ones(64, np.float32)], compile_kernels=False, jobs=2,
                        limits=RunLimits(max_memory=both - 1))
    _, rep2 = run_module(m, [np.ones(64, np.float32)], compile_kernels=False, jobs=2,
                         limits=RunLimits(max_memory=both))
    assert forked == [False, True] and rep.verdict.oracle == "f64"
    _same_report(rep, rep2)


def test_cli_jobs_1_and_2_print_the_same_report():
    path = corpus_path("jax", "gpu_softmax.default.h100_opt.hlo")

    def run(jobs: str) -> dict:
        p = subprocess.run([sys.executable, "-m", "fusegen.cli", "run", str(path), "--no-compile", "--json",
                            "--jobs", jobs], capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        for d in [doc, *doc["fusions"]]:
            d.pop("timings", None)
            d.pop("seconds", None)
        for f in doc["fusions"]:  # which sampled programs ran as compiled depends on a time budget; the verdict not
            f["compiled_program"] = (f.get("compiled_program") or {}).get("status")
        prof = doc.pop("reference_profile")  # seconds differ; the instructions timed do not
        doc["profiled"] = sorted((r["name"], r["opcode"], r["calls"]) for r in prof["instructions"])
        return doc

    assert run("1") == run("2")


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc for the child's pid")
def test_the_background_process_dies_with_a_killed_parent(tmp_path):
    # SIGTERM ends the parent without a finally: the child must not be left running (nor blocked on a pipe
    # nobody reads)
    path = tmp_path / "long.hlo"
    path.write_text(WHILE.replace("TRIPS", "1000000"))
    p = subprocess.Popen([sys.executable, "-m", "fusegen.cli", "run", str(path), "--no-compile", "--jobs", "2",
                          "--max-while-iterations", "10000000"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    children: list[int] = []
    deadline = time.monotonic() + 60
    while not children and time.monotonic() < deadline and p.poll() is None:
        time.sleep(0.2)
        try:
            children = [int(c) for c in Path(f"/proc/{p.pid}/task/{p.pid}/children").read_text().split()]
        except OSError:
            pass
    assert children, "no background process appeared"
    p.terminate()
    assert p.wait(timeout=30) != 0
    deadline = time.monotonic() + 10
    while any(Path(f"/proc/{c}").exists() and "Z" not in _state(c) for c in children) and time.monotonic() < deadline:
        time.sleep(0.1)
    alive = [c for c in children if Path(f"/proc/{c}").exists() and "Z" not in _state(c)]
    for c in alive:
        os.kill(c, 9)
    assert not alive


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "Z"


HALVE = """HloModule halve

%add (a: f32[], b: f32[]) -> f32[] {
  %a = f32[] parameter(0)
  %b = f32[] parameter(1)
  ROOT %s = f32[] add(%a, %b)
}

%cond (s: f32[4]) -> pred[] {
  %s = f32[4]{0} parameter(0)
  %z = f32[] constant(0)
  %r = f32[] reduce(%s, %z), dimensions={0}, to_apply=%add
  ROOT %c = pred[] compare(%r, %z), direction=GT
}

%body (s: f32[4]) -> f32[4] {
  %s = f32[4]{0} parameter(0)
  %h = f32[] constant(0.5)
  %hb = f32[4]{0} broadcast(%h), dimensions={}
  ROOT %m = f32[4]{0} multiply(%s, %hb)
}

ENTRY %e (a: f32[4]) -> f32[4] {
  %a = f32[4]{0} parameter(0)
  ROOT %w = f32[4]{0} while(%a), condition=%cond, body=%body
}
"""


def test_the_f64_oracle_runs_alike_in_both_modes(corpus):
    # deep call chains: the oracle runs on the explicit stack in sequence too (it used to hit Python's
    # recursion limit there and be "unavailable" only with --jobs 1)
    deep = parse_module((corpus / "hostile" / "deepcall.hlo").read_text(), "deepcall.hlo")
    x = [np.ones([int(d) for d in p.shape.dimensions], np.float32) for p in deep.entry.parameters]
    _, seq = run_module(deep, x, compile_kernels=False, jobs=1)
    _, bg = run_module(deep, x, compile_kernels=False, jobs=2)
    assert seq.verdict.oracle == "f64"
    _same_report(seq, bg)
    # halving 1.0 to 0 takes 150 iterations in f32 and 1075 in f64: the f64 run's own loop passing the while
    # budget leaves the oracle unavailable, it does not fail the run (in either mode)
    m = parse_module(HALVE)
    limits = RunLimits(max_memory=1 << 40, max_while_iterations=1000)
    one = [np.ones(4, np.float32)]
    _, seq = run_module(m, one, compile_kernels=False, jobs=1, limits=limits)
    _, bg = run_module(m, one, compile_kernels=False, jobs=2, limits=limits)
    assert seq.verdict.oracle.startswith("unavailable: f64 evaluation failed: ResourceLimitError: while %w passed")
    _same_report(seq, bg)
    assert seq.status == "ok"


def test_no_fork_means_in_sequence(monkeypatch, forked):
    def no_fork():
        raise BlockingIOError(11, "Resource temporarily unavailable")

    m = parse_module(WHILE.replace("TRIPS", "3"))
    _, seq = run_module(m, [np.ones(64, np.float32)], compile_kernels=False, jobs=1)
    monkeypatch.setattr(os, "fork", no_fork)
    _, bg = run_module(m, [np.ones(64, np.float32)], compile_kernels=False, jobs=2)
    assert forked == [False, False]
    _same_report(seq, bg)


def test_the_background_process_warnings_show_once_as_in_sequence(tmp_path):
    path = tmp_path / "elided.hlo"
    path.write_text("""HloModule elided

%fused (p0: f32[16], p1: f32[16]) -> f32[16] {
  %p0 = f32[16]{0} parameter(0)
  %p1 = f32[16]{0} parameter(1)
  ROOT %a = f32[16]{0} add(%p0, %p1)
}

ENTRY %main (a: f32[16]) -> f32[16] {
  %a = f32[16]{0} parameter(0)
  %c = f32[16]{0} constant({...})
  ROOT %f = f32[16]{0} fusion(%a, %c), kind=kLoop, calls=%fused
}
""")
    err = {}
    for jobs in ("1", "2"):
        p = subprocess.run([sys.executable, "-m", "fusegen.cli", "run", str(path), "--no-compile", "--jobs", jobs],
                           capture_output=True, text=True)
        assert p.returncode == 0, p.stderr
        err[jobs] = [ln for ln in p.stderr.splitlines() if "ElidedConstantWarning" in ln]
    assert len(err["1"]) == 1 and err["1"] == err["2"]
