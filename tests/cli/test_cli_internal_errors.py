"""A plugin fusegen ships that fails on a valid module is fusegen's bug: exit 3 naming the fusion, the emitter and
how to report it; the same failure in a third-party plugin stays exit 2 naming the plugin. After either,
``--save-outputs`` writes nothing (the failed fusion's values would be the reference evaluator's) and says so."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

import fusegen_plugins.emitters.loop as loop_plugin
from fusegen.cli.main import cli
from fusegen.codegen import triton_runtime
from fusegen.plugin_manager import default_plugin_manager
from fusegen.runtime.plugin_failures import REPORT_BUG

MODULE = """HloModule tiny

fused_neg {
  p = f32[64] parameter(0)
  ROOT n = f32[64] negate(p)
}

ENTRY e {
  x = f32[64] parameter(0)
  ROOT f = f32[64] fusion(x), kind=kLoop, calls=fused_neg
}
"""


@pytest.fixture
def files(tmp_path):
    hlo = tmp_path / "tiny.hlo"
    hlo.write_text(MODULE)
    x = np.linspace(-3, 5, 64, dtype=np.float32)
    np.savez(tmp_path / "in.npz", p0=x)
    out = tmp_path / "out.npz"
    out.write_bytes(b"an earlier run's file")
    return hlo, tmp_path / "in.npz", out, x


def _run(hlo, inputs, out, *extra):
    return CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--jobs", "1", "--inputs", str(inputs),
                                    "--save-outputs", str(out), *extra])


def _errors(res) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.startswith("fusegen: error: ")]


def _emit_raises(monkeypatch):
    def emit(self, *args, **kwargs):
        raise RuntimeError("planted in emit")

    monkeypatch.setattr(loop_plugin.LoopFusion, "emit", emit)


def test_a_builtin_emitter_that_raises_is_an_internal_error_and_saves_nothing(files, monkeypatch):
    hlo, inputs, out, _ = files
    _emit_raises(monkeypatch)
    res = _run(hlo, inputs, out, "--json")
    assert res.exit_code == 3, res.stderr
    (line,) = _errors(res)
    assert line.startswith(f"fusegen: error: {hlo}: fusion %f: internal error in fusegen's emitter LoopFusion "
                           "(plugin 'loop'): ")
    assert "RuntimeError: planted in emit" in line and line.endswith(REPORT_BUG)
    assert "fusegen --version" in REPORT_BUG and "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    (row,) = doc["fusions"]  # the row keeps what dispatch found before the emitter failed
    assert (row["kind"], row["emitter"], row["plugin"], row["status"]) == ("kLoop", "LoopFusion", "loop", "error")
    assert doc["status"] == "error"
    assert [(e["fusion"], e["plugin"]) for e in doc["plugin_errors"]] == [("f", "loop")]
    # the reference evaluator ran in place of the kernel: no file passes its values off as the kernel's
    assert not out.exists()
    saved = doc["saved_outputs"]
    assert (saved["path"], saved["written"]) == (str(out), False) and "%f failed" in saved["reason"]
    assert f"--save-outputs {out}: not written: fusion %f failed" in res.stderr
    assert "the earlier" in saved["reason"]  # the stale file was removed, and it says so
    e = CliRunner().invoke(cli, ["explain", str(hlo)])
    assert e.exit_code == 3 and "internal error in fusegen's emitter LoopFusion" in e.stderr, e.stderr


def test_a_builtin_kernel_that_fails_to_run_is_an_internal_error(files, monkeypatch):
    hlo, inputs, out, _ = files

    def run_fusion(*args, **kwargs):
        raise ValueError("planted in the kernel run")

    monkeypatch.setattr(triton_runtime, "run_fusion", run_fusion)
    res = _run(hlo, inputs, out)
    assert res.exit_code == 3, res.stderr
    (line,) = _errors(res)
    assert line.startswith(f"fusegen: error: {hlo}: fusion %f: internal error in fusegen's emitter LoopFusion "
                           "(plugin 'loop'): plugin 'loop', LoopFusion.emit: kernel failed to load or run")
    assert "ValueError: planted in the kernel run" in line and line.endswith(REPORT_BUG)
    assert not out.exists() and "not written" in res.stderr


def test_the_same_failure_in_a_third_party_plugin_exits_2_naming_it(files, monkeypatch):
    hlo, inputs, out, _ = files
    _emit_raises(monkeypatch)
    # the emitter now belongs to a distribution other than fusegen, as a user's plugin does
    monkeypatch.setattr(default_plugin_manager().infos["loop"], "distribution", "acme-loop")
    res = _run(hlo, inputs, out, "--json")
    assert res.exit_code == 2, res.stderr
    (line,) = _errors(res)
    assert line.startswith(f"fusegen: error: {hlo}: fusion %f: plugin 'loop' LoopFusion.emit (emitter factory "
                           "'loop') failed on fusion %f: RuntimeError: planted in emit")
    assert "fusegen bug" not in res.stderr and "internal error" not in res.stderr
    doc = json.loads(res.stdout)
    assert [(e["fusion"], e["plugin"]) for e in doc["plugin_errors"]] == [("f", "loop")]
    assert doc["saved_outputs"]["written"] is False and not out.exists()


def test_a_builtin_failing_on_a_module_the_verifier_refuses_is_bad_input(tmp_path, monkeypatch):
    # negate of f32 declared s32: the parser lets it through, XLA's verifier (and fusegen's) does not
    bad = tmp_path / "bad.hlo"
    bad.write_text(MODULE.replace("ROOT n = f32[64] negate(p)", "ROOT n = s32[64] negate(p)")
                   .replace("ROOT f = f32[64] fusion", "ROOT f = s32[64] fusion"))
    _emit_raises(monkeypatch)
    res = CliRunner().invoke(cli, ["explain", str(bad)])
    assert res.exit_code == 2, res.stderr
    assert _errors(res)[-1] == f"fusegen: error: {bad}: invalid module: computation 'fused_neg': negate %n is " \
                               "s32[64] but its operand %p is f32[64]"
    assert "fusegen bug" not in res.stderr and "plugin 'loop' LoopFusion.emit" in res.stderr


def test_a_run_without_failures_saves_the_kernels_outputs(files):
    hlo, inputs, out, x = files
    res = _run(hlo, inputs, out, "--json")
    assert res.exit_code == 0, res.stderr
    assert json.loads(res.stdout)["saved_outputs"] == {"path": str(out), "written": True}
    np.testing.assert_array_equal(np.load(out)["o0"], -x)
    assert "not written" not in res.stderr
