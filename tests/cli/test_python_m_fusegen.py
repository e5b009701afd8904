"""``python -m fusegen`` (core/__main__.py) is the ``fusegen`` script: the same help, JSON, errors and exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpu_multi_output.h100_opt.hlo"
SCRIPT = Path(sys.executable).parent / "fusegen"


def _both(*args: str, cwd: Path) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    if not SCRIPT.exists():
        pytest.skip(f"no fusegen script beside {sys.executable} (not installed with pip install -e .)")
    run = [subprocess.run(cmd, capture_output=True, text=True, cwd=cwd, timeout=300)
           for cmd in ([sys.executable, "-m", "fusegen", *args], [str(SCRIPT), *args])]
    return run[0], run[1]


def test_help_and_a_bad_input_are_the_scripts(tmp_path):
    m, s = _both("--help", cwd=tmp_path)  # an empty directory: nothing from the checkout on the path
    assert (m.returncode, m.stdout, m.stderr) == (s.returncode, s.stdout, s.stderr) and m.returncode == 0
    assert m.stdout.startswith("Usage: fusegen [OPTIONS] COMMAND") and "explain" in m.stdout
    m, s = _both("run", str(tmp_path / "missing.hlo"), cwd=tmp_path)
    assert m.returncode == s.returncode == 2 and m.stderr == s.stderr and "missing.hlo" in m.stderr


def test_run_json_on_the_bundled_example(tmp_path):
    # one run (the script's own is tests/cli/test_cli.py's): the same keys and rows the script prints
    p = subprocess.run([sys.executable, "-m", "fusegen", "run", str(EXAMPLE), "--json", "--no-compile"],
                       capture_output=True, text=True, cwd=tmp_path, timeout=300)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert {"module", "fusions", "status", "outputs"} <= set(doc) and doc["module"] == "jit_multi"
    rows = [(f["name"], f["kind"], f["emitter"], f["backend"], f["status"]) for f in doc["fusions"]]
    assert rows == [("wrapped_tanh", "kLoop", "LoopFusion", "triton", "ok"),
                    ("input_multiply_reduce_fusion", "kReduction", "RowReductionFusion", "triton", "ok")]
    assert doc["status"] == "ok"
