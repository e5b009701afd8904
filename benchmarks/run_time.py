"""Time of ``fusegen run`` on gpt12 and the ``../shared/corpus/jax`` modules: cold, warm, ``--jobs 1`` vs ``--jobs 2``.

Each row runs ``fusegen run MODULE --json`` in a fresh process (as a user does) and reads the run's own
``"timings"`` (:mod:`fusegen.runtime.timings`):

* ``no-compile``: ``run --no-compile`` (the interpreter and the reference only), with the default jobs (the
  usable cores: the module's reference run and f64 oracle beside the kernels, :mod:`fusegen.runtime.oracles`)
  and ``nc j1`` with ``--jobs 1`` (everything in sequence);
* ``cold``: ``run`` with an empty kernel directory and Triton cache (``FUSEGEN_KERNEL_DIR`` in a temporary
  directory), ``--jobs 1``;
* ``warm j1`` / ``warm j2``: ``run`` again on that now-warm cache with ``--jobs 1`` / ``--jobs 2``.

Printed beside the absolute wall times (seconds, the child's whole life: start-up, parse, run, verdict) and
the CPU seconds the child and its workers used, as ratios in the same run: ``warm/nc`` (warm ``--jobs 2``
over no-compile, both beside their oracles; the issue's goal: <= 2 once warm), ``cold/warm`` (``--jobs 1``
both), ``j1/j2`` (warm) and ``nc j1/nc``. On a busy machine wall times grow and CPU seconds do not: read both.
The ``reference`` section (issue 22) runs ``run --no-compile --json`` once on each program of
``benchmarks/data/`` (programs whose time is in the reference evaluator: a 2**20 ``jnp.sort`` plus a 2**16
``jnp.argsort``, a (key, value, iota) sort of f32[64,2048], ``lax.top_k`` of f32[512,32000] with k=50, a
variadic argmax reduce of f32[4096,4096]) and prints, side by side, the kernels' share (dispatch, codegen,
Triton's interpreter, compare: this process) and the reference's share: the fusions' references plus the
wait for the module's reference and f64 oracle in this process, and those two runs' own seconds in the
process beside the kernels (``reference_profile``). Budget: 60 s wall each (goal 30 s) on the 2-core machine.

Run: ``python benchmarks/run_time.py [--only gpt12] [--skip-cold] [--section modules|reference]``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def run_once(path: Path, kernel_dir: str, *flags: str, timeout: float) -> dict:
    """One ``fusegen run --json`` in a child; ``{"wall", "cpu", "status", "timings"}`` (``status`` ``timeout``
    or ``exit N`` when it did not finish with a report)."""
    env = dict(os.environ, FUSEGEN_KERNEL_DIR=kernel_dir)
    env.pop("TRITON_CACHE_DIR", None)  # Triton's cache lives in the kernel directory
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "fusegen.cli", "run", str(path), "--json", *flags],
                           capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return {"wall": time.perf_counter() - t0, "cpu": float("nan"), "status": "timeout", "timings": {}}
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    try:
        doc = json.loads(p.stdout)
    except ValueError:
        return {"wall": wall, "cpu": cpu, "status": f"exit {p.returncode}", "timings": {}}
    return {"wall": wall, "cpu": cpu, "status": doc.get("status", "?"), "timings": doc.get("timings", {}),
            "reference_profile": doc.get("reference_profile", {}),
            "fusion_reference": sum(f.get("timings", {}).get("reference", 0.0) for f in doc.get("fusions", []))}


DATA = Path(__file__).resolve().parent / "data"
REFERENCE_BUDGET_S = 60.0


def reference_section(only: str | None, timeout: float) -> None:
    """The ``reference`` rows (see the module docstring)."""
    files = [f for f in sorted(DATA.glob("*.h200_opt.hlo")) if only is None or only in f.name]
    if not files:
        return
    print(f"reference: run --no-compile (default jobs), budget {REFERENCE_BUDGET_S:.0f} s wall each (goal 30 s)")
    print(f"{'program':24} {'wall':>7} {'cpu':>7} | {'kernels':>8} {'fusion ref':>10} {'wait R+O':>8} | "
          f"{'R (beside)':>10} {'O (beside)':>10} | status")
    for f in files:
        r = run_once(f, tempfile.mkdtemp(prefix="fusegen-ref-"), "--no-compile", timeout=timeout)
        t, prof = r["timings"], r.get("reference_profile", {})
        kernels = sum(t.get(k, 0.0) for k in ("dispatch", "codegen", "compile", "interpret", "compare"))
        fusion_ref = r.get("fusion_reference", 0.0)
        wait = t.get("reference", 0.0) - fusion_ref  # the module's reference phase less its fusions': the wait
        print(f"{f.name.split('.')[0][:24]:24} {r['wall']:7.2f} {r['cpu']:7.2f} | {kernels:8.2f} {fusion_ref:10.2f} "
              f"{wait:8.2f} | {prof.get('reference_s', float('nan')):10.2f} {prof.get('f64_s', float('nan')):10.2f} | "
              f"{r['status']}{'' if r['wall'] <= REFERENCE_BUDGET_S else ' OVER BUDGET'}", flush=True)
        for row in prof.get("instructions", [])[:3]:
            print(f"    {row['name']:28} {row['opcode']:12} R {row['reference_s']:7.2f} s  O {row['f64_s']:7.2f} s")
        for note in prof.get("per_element", []):
            print(f"    per element: %{note['name']} ({note['opcode']}): {note['reason']}")


def ratio(a: float, b: float) -> str:
    return f"{a / b:6.2f}" if b and b == b and a == a else "     -"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None, help="run only modules whose file name contains this")
    ap.add_argument("--skip-cold", action="store_true", help="reuse --kernel-dir as it is (no cold row)")
    ap.add_argument("--kernel-dir", default=None, help="kernel directory to warm (default: a temporary one)")
    ap.add_argument("--timeout", type=float, default=1800.0, help="seconds per fusegen run")
    ap.add_argument("--section", choices=("all", "modules", "reference"), default="all",
                    help="the corpus modules' rows, the reference programs' rows, or both")
    a = ap.parse_args()
    if a.section in ("all", "reference"):
        reference_section(a.only, a.timeout)
        if a.section == "reference":
            return
    files = sorted((SHARED / "corpus" / "jax").glob("*_opt.hlo"))
    files = [f for f in files if a.only is None or a.only in f.name]
    if not files:
        sys.exit(f"no modules under {SHARED / 'corpus' / 'jax'}")
    tmp = tempfile.TemporaryDirectory(prefix="fusegen-run-time-")
    kdir = a.kernel_dir or tmp.name
    print(f"cores usable: {len(os.sched_getaffinity(0))}; kernel dir {kdir}")
    head = (f"{'module':40} {'no-compile':>10} {'nc j1':>7} {'cold j1':>8} {'warm j1':>8} {'warm j2':>8} | "
            f"{'warm/nc':>7} {'cold/warm':>9} {'j1/j2':>6} {'nc j1/nc':>8} | cpu s: {'nc':>6} {'nc j1':>6} "
            f"{'w j1':>6} {'w j2':>6} | status")
    print(head)
    for f in files:
        nc = run_once(f, kdir, "--no-compile", timeout=a.timeout)
        nc1 = run_once(f, kdir, "--no-compile", "--jobs", "1", timeout=a.timeout)
        cold = None if a.skip_cold else run_once(f, kdir, "--jobs", "1", timeout=a.timeout)
        w1 = run_once(f, kdir, "--jobs", "1", timeout=a.timeout)
        w2 = run_once(f, kdir, "--jobs", "2", timeout=a.timeout)
        c = cold["wall"] if cold else float("nan")
        statuses = {r["status"] for r in (nc, nc1, cold, w1, w2) if r}
        print(f"{f.name[:40]:40} {nc['wall']:10.2f} {nc1['wall']:7.2f} {c:8.2f} {w1['wall']:8.2f} {w2['wall']:8.2f} | "
              f"{ratio(w2['wall'], nc['wall']):>7} {ratio(c, w1['wall']):>9} {ratio(w1['wall'], w2['wall']):>6} "
              f"{ratio(nc1['wall'], nc['wall']):>8} | "
              f"       {nc['cpu']:6.1f} {nc1['cpu']:6.1f} {w1['cpu']:6.1f} {w2['cpu']:6.1f} | "
              f"{','.join(sorted(statuses))}", flush=True)
        t = nc["timings"]
        if t:
            print("    no-compile phases: " + ", ".join(f"{k} {v:.2f}" for k, v in t.items()), flush=True)
        if w1["timings"]:
            print(f"    warm j1 compile {w1['timings'].get('compile', 0):.2f} s; "
                  f"cold j1 compile {cold['timings'].get('compile', 0) if cold and cold['timings'] else float('nan'):.2f} s",
                  flush=True)
    tmp.cleanup()


if __name__ == "__main__":
    main()
