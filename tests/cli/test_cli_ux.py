"""Small CLI behaviours: Ctrl-C is exit 130 in one line, a non-npz ``--inputs`` says so, ``explain`` and
``run`` list fusions in one order, and ``run`` names each non-fusion instruction a backend ran."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fusegen.cli.main import cli

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpu_multi_output.h100_opt.hlo"

# f1c runs first in the entry, fb inside the while body, f2c after the sort: file order is fb, f1c, f2c
ORDER = """HloModule order
fb {
  p = f32[8] parameter(0)
  ROOT n = f32[8] negate(p)
}
f1c {
  p = f32[8] parameter(0)
  ROOT e = f32[8] exponential(p)
}
f2c {
  p = f32[8] parameter(0)
  ROOT a = f32[8] abs(p)
}
body {
  t = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  x = f32[8] get-tuple-element(t), index=1
  one = s32[] constant(1)
  j = s32[] add(i, one)
  y = f32[8] fusion(x), kind=kLoop, calls=fb
  ROOT r = (s32[], f32[8]) tuple(j, y)
}
cond {
  t = (s32[], f32[8]) parameter(0)
  i = s32[] get-tuple-element(t), index=0
  three = s32[] constant(3)
  ROOT lt = pred[] compare(i, three), direction=LT
}
lt_cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=LT
}
ENTRY e {
  p = f32[8] parameter(0)
  a = f32[8] fusion(p), kind=kLoop, calls=f1c
  z = s32[] constant(0)
  t = (s32[], f32[8]) tuple(z, a)
  w = (s32[], f32[8]) while(t), condition=cond, body=body
  x = f32[8] get-tuple-element(w), index=1
  s = f32[8] sort(x), dimensions={0}, to_apply=lt_cmp
  ROOT b = f32[8] fusion(s), kind=kLoop, calls=f2c
}
"""

FOREVER = """HloModule forever
cond {
  s = s32[] parameter(0)
  ROOT t = pred[] constant(true)
}
body {
  s = s32[] parameter(0)
  one = s32[] constant(1)
  ROOT n = s32[] add(s, one)
}
ENTRY e {
  z = s32[] constant(0)
  ROOT w = s32[] while(z), condition=cond, body=body
}
"""


def fusegen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True)


def test_explain_and_run_list_fusions_in_one_order(tmp_path):
    src = tmp_path / "order.hlo"
    src.write_text(ORDER)
    run = json.loads(fusegen("run", str(src), "--json", "--no-compile").stdout)
    explain = json.loads(fusegen("explain", str(src), "--json").stdout)
    assert [f["name"] for f in run["fusions"]] == ["a", "y", "b"]  # first execution, not file order (y, a, b)
    assert [f["name"] for f in explain["fusions"]] == ["a", "y", "b"]


def test_run_names_each_non_fusion_instruction_it_sends_to_a_backend(tmp_path):
    src = tmp_path / "order.hlo"
    src.write_text(ORDER)
    d = json.loads(fusegen("run", str(src), "--json", "--no-compile").stdout)
    assert d["other_instructions"] == {"host": 8}  # 4 compares, 3 adds, 1 sort
    assert d["non_fusion_instructions"] == [{"name": "lt", "opcode": "compare", "backend": "host"},
                                            {"name": "j", "opcode": "add", "backend": "host"},
                                            {"name": "s", "opcode": "sort", "backend": "host"}]
    table = fusegen("run", str(src), "--no-compile").stdout
    assert "non-fusion instructions: 8 on host (%lt compare, %j add, %s sort)" in table


@pytest.mark.parametrize("content,says", [
    (b"hello\n", "not an .npz archive (it is not a zip archive"),
    (b"", "not an .npz archive (it is empty"),
    (b"PK\x03\x04garbage", "not a readable .npz archive"),
])
def test_non_npz_inputs_say_so(tmp_path, content, says):
    f = tmp_path / "in.npz"
    f.write_bytes(content)
    p = fusegen("run", str(EXAMPLE), "--inputs", str(f), "--no-compile")
    assert p.returncode == 2 and says in p.stderr and p.stderr.count("\n") == 1, p.stderr


def test_npy_inputs_say_they_are_one_array(tmp_path):
    npy = tmp_path / "x.npy"
    np.save(npy, np.zeros(3))
    p = fusegen("run", str(EXAMPLE), "--inputs", str(npy), "--no-compile")
    assert p.returncode == 2 and "not an .npz archive (it holds a single .npy array" in p.stderr


def test_keyboard_interrupt_is_one_line_and_exit_130(monkeypatch):
    import fusegen.verify.judged_run as judged_run

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(judged_run, "run_module", interrupted)
    r = CliRunner().invoke(cli, ["run", str(EXAMPLE), "--no-compile"])
    assert r.exit_code == 130, r.output
    assert r.output == "fusegen: interrupted\n"  # not click's "Aborted!" (exit 1 means a mismatch)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc to see the child's CPU time")
def test_sigint_to_a_running_fusegen_exits_130(tmp_path):
    src = tmp_path / "forever.hlo"
    src.write_text(FOREVER)
    p = subprocess.Popen([sys.executable, "-m", "fusegen.cli", "run", str(src), "--no-compile"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def cpu_seconds() -> float:
        f = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / 100

    try:
        t0 = time.monotonic()
        while cpu_seconds() < 3.0 and time.monotonic() - t0 < 60:  # past the imports, inside the endless loop
            time.sleep(0.1)
        p.send_signal(signal.SIGINT)
        _out, err = p.communicate(timeout=30)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 130 and err == "fusegen: interrupted\n"
