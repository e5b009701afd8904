"""Compile workers from a plain script (issue 31 item 3): no ``if __name__ == "__main__":`` guard is needed.

``multiprocessing``'s spawn/forkserver workers re-run the parent's script; fusegen's workers
(:mod:`fusegen.runtime.worker_pool`) start ``python -m fusegen.runtime.worker_pool`` instead. Each script below
prints a line when it starts: it must appear once, however many workers ran.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fusegen.runtime.worker_pool import WorkerDied, WorkerPool

REPO = Path(__file__).resolve().parents[2]


def _script(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = tmp_path / "plain_script.py"
    script.write_text("print('script started', flush=True)\n" + body)
    return subprocess.run([sys.executable, str(script)], capture_output=True, text=True, cwd=tmp_path, timeout=600)


def test_a_pool_in_a_script_without_main_guard_runs_the_script_once(tmp_path):
    p = _script(tmp_path, "import math\nfrom fusegen.runtime.worker_pool import WorkerPool\n"
                          "pool = WorkerPool(2)\n"
                          "print(sorted(f.result() for f in [pool.submit(math.factorial, n) for n in range(6)]))\n"
                          "pool.shutdown()\n")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["script started", "[1, 1, 2, 6, 24, 120]"]


@pytest.mark.slow
def test_compile_jobs_from_a_plain_script(tmp_path):
    """Two workers compile the example's kernels for sm_90 (the pool starts at the first compile)."""
    p = _script(tmp_path, f"import fusegen\nfrom fusegen.runtime.compile_jobs import CompileJobs\n"
                          f"plan = fusegen.explain({str(REPO / 'examples' / 'gpu_multi_output.h100_opt.hlo')!r})\n"
                          "jobs = CompileJobs(2, pool_after=1)\n"
                          "hs = [jobs.submit(i, e.kernels)[0] for i, (e, _r) in plan.rows if e is not None]\n"
                          "print([jobs.result(h)[0] for h in hs], jobs._pool is not None)\n"
                          "jobs.close()\n")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["script started", "['ok', 'ok'] True"]


def test_errors_and_a_dying_worker_reach_the_caller():
    pool = WorkerPool(1)
    try:
        with pytest.raises(ValueError, match="invalid literal"):
            pool.submit(int, "x").result(timeout=120)
        import os

        with pytest.raises(WorkerDied, match="exit code 3"):
            pool.submit(os._exit, 3).result(timeout=120)
        assert pool.submit(abs, -4).result(timeout=120) == 4  # a new worker took its place
    finally:
        pool.shutdown()


def test_the_autotuners_workers_from_a_plain_script(tmp_path):
    """The compile pool's and the profiling supervisor's processes (``start_method="module"``, the default)
    start without re-running the script, and answer over their connection; ``spawn`` would re-run it."""
    p = _script(tmp_path, "from fusegen.runtime.module_process import get_context\n"
                          "from fusegen.autotuning.supervised import _worker_main\n"
                          "ctx = get_context('module')\n"
                          "parent, child = ctx.Pipe(duplex=True)\n"
                          "proc = ctx.Process(target=_worker_main, args=(child,))\n"
                          "proc.start(); child.close()\n"
                          "parent.send(None); proc.join(120)\n"
                          "print(proc.exitcode, proc.is_alive())\n")
    assert p.returncode == 0, p.stderr[-2000:]
    assert p.stdout.splitlines() == ["script started", "0 False"]


def test_a_module_process_is_killed_and_its_sentinel_says_so():
    from multiprocessing.connection import wait

    from fusegen.runtime.module_process import ModuleProcess, get_context

    ctx = get_context("module")
    parent, child = ctx.Pipe(duplex=True)
    proc = ctx.Process(target=_echo, args=(child,))
    proc.start()
    child.close()
    parent.send("ping")
    assert parent.recv() == "ping" and proc.is_alive()
    proc.kill()
    assert wait([proc.sentinel], timeout=60) == [proc.sentinel]
    proc.join(10)
    assert proc.exitcode == -9 and not proc.is_alive()
    with pytest.raises(TypeError, match="not importable by name"):
        ModuleProcess(lambda c: None, (parent,))


def _echo(conn):
    """A worker target (importable by name: the worker gets this process's sys.path)."""
    while True:
        conn.send(conn.recv())
