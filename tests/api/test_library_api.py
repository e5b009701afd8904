"""The library API (``fusegen.load/explain/run/tune``, issue 19 point 6): the README's session runs as a
doctest; each result's ``to_json()`` has the keys (and for ``explain`` the values) of the command's
``--json``; errors are exceptions naming what is wrong, never ``SystemExit``."""

from __future__ import annotations

import doctest
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import fusegen
from fusegen.runtime.inputs import InputError

REPO = Path(__file__).resolve().parents[2]
HAS_PLUGIN = importlib.util.find_spec("jax_plugins") is not None and \
    importlib.util.find_spec("jax_plugins.xla_cuda12") is not None
EXAMPLE = REPO / "examples" / "gpu_multi_output.h100_opt.hlo"


def _cli(*args: str) -> dict:
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True, cwd=REPO)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def _no_timings(d):
    if isinstance(d, dict):
        return {k: _no_timings(v) for k, v in d.items() if k not in ("timings", "seconds")}
    if isinstance(d, list):
        return [_no_timings(x) for x in d]
    return d


def _readme_sessions() -> list[str]:
    """The ``python`` blocks of the README's section on Python: the one-device session, then the 8-device one."""
    text = (REPO / "README.md").read_text()
    section = re.search(r"\n## From Python[^\n]*\n(.*?)\n## ", text, re.S).group(1)
    return re.findall(r"```python\n(.*?)```", section, re.S)


def _run_doctest(source: str, globs: dict, name: str) -> None:
    test = doctest.DocTestParser().get_doctest(source, globs, name, "README.md", 0)
    assert len(test.examples) >= 4
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, clear_globs=False)
    assert runner.failures == 0, f"{runner.failures} README example(s) of {name} failed (see the output above)"


#: Runs the README's sessions in a fresh interpreter (jax reads JAX_PLATFORMS when it is imported; a test process
#: may have started jax already): argv[1] the compiler, argv[2] a JSON list of the sessions to run.
_SESSION_RUNNER = """
import doctest, functools, json, sys
import fusegen, fusegen.jax_capture
if sys.argv[1] == "fusegen":
    fusegen.capture = functools.partial(fusegen.jax_capture.capture, compiler="fusegen")
globs, failed = {}, 0
for k, source in enumerate(json.loads(sys.argv[2])):
    test = doctest.DocTestParser().get_doctest(source, globs, f"README.md session {k}", "README.md", 0)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    runner.run(test, clear_globs=False)
    globs = test.globs  # the next session goes on from this one's names
    failed += runner.failures
print("examples failed:", failed)
"""


@pytest.mark.parametrize("compiler", ["xla", "fusegen"])
def test_readme_notebook_session_runs_as_a_doctest(tmp_path, compiler):
    """The README's notebook session as written (capture of a pytree train step, run with pytree inputs and
    JAX's outputs as expected, a DataFrame, tune, report), then the same for 8 devices. With jax's CUDA plugin
    the capture is XLA's deviceless H200 compile; CI has CPU jax only, so there the same session runs with
    ``compiler="fusegen"`` (jax's lowering, fused by fusegen's own pipeline), which has no 8-device form."""
    pytest.importorskip("jax")
    pytest.importorskip("pandas")
    if compiler == "xla" and not HAS_PLUGIN:
        pytest.skip("jax's CUDA plugin is not installed (pip install -e '.[capture]'): the fusegen-compiler "
                    "variant runs the session")
    sessions = _readme_sessions()
    assert len(sessions) == 2 and "fusegen.capture(" in sessions[0] and "mesh=8" in sessions[1]
    run = sessions if compiler == "xla" else sessions[:1]
    env = {k: v for k, v in os.environ.items() if k != "JAX_PLATFORMS"}  # as a notebook starts
    p = subprocess.run([sys.executable, "-c", _SESSION_RUNNER, compiler, json.dumps(run)], capture_output=True,
                       text=True, cwd=tmp_path, env=env, timeout=900)
    assert p.returncode == 0 and p.stdout.strip().endswith("examples failed: 0"), (p.stdout + p.stderr)[-6000:]


def test_library_session_runs_as_a_doctest(monkeypatch):
    """The library's module-file session (docs/python.md): load, explain, run with arrays, to_json."""
    monkeypatch.chdir(REPO)
    text = (REPO / "docs" / "python.md").read_text()
    session = re.search(r"## A module file\n.*?```python\n(.*?)```", text, re.S).group(1)
    _run_doctest(session, {}, "docs/python.md (A module file)")


def test_explain_to_json_is_what_explain_json_prints():
    res = fusegen.explain(str(EXAMPLE), fusion="%wrapped_tanh", indexing=True)
    cli = _cli("explain", str(EXAMPLE), "--fusion", "wrapped_tanh", "--indexing", "--json")
    assert _no_timings(res.to_json()) == _no_timings(cli)
    assert res.module == cli["module"] and [f.name for f in res.fusions] == [f["name"] for f in cli["fusions"]]
    assert res.indexing == cli["fusions"][0]["indexing"] and res.fusions[0].kernels[0][1].startswith("# Generated")


def test_run_to_json_has_the_keys_of_run_json():
    res = fusegen.run(EXAMPLE, compile=False)
    cli = _cli("run", str(EXAMPLE), "--no-compile", "--json")
    mine = res.to_json()
    assert set(mine) == set(cli)
    assert [set(f) for f in mine["fusions"]] == [set(f) for f in cli["fusions"]]
    assert [(f["name"], f["kind"], f["status"], f["launch_dimensions"]) for f in mine["fusions"]] == \
        [(f["name"], f["kind"], f["status"], f["launch_dimensions"]) for f in cli["fusions"]]
    assert mine["status"] == cli["status"] == res.status == "ok" and res.ok
    # the same seeded inputs: the same errors
    assert [f["max_abs_error"] for f in mine["fusions"]] == [f["max_abs_error"] for f in cli["fusions"]]


def test_run_result_attributes_read_one_document(monkeypatch):
    """Issue 44: RunResult's attributes rebuilt the whole to_json() document on every read; now the first read
    builds it and the rest read it, while to_json() still gives a fresh copy each call."""
    import fusegen.runtime.run_json as run_json

    res = fusegen.run(EXAMPLE, compile=False)
    calls = []
    real = run_json.report_json
    monkeypatch.setattr(run_json, "report_json", lambda reports: calls.append(1) or real(reports))
    doc = res.to_json()
    assert (res.timings, res.seconds, res.outputs_match, res.other_instructions) == (
        doc["timings"], doc["seconds"], doc["outputs_match"], doc["other_instructions"])
    assert res.estimated_us == doc["estimated_us"] and len(calls) == 2  # to_json(), then the first attribute read
    assert res.to_json() is not res.to_json() and len(calls) == 4


def test_run_takes_text_a_sequence_of_inputs_and_judges_a_wrong_expected_answer():
    text = ("HloModule neg\nfused {\n  p = f32[6]{0} parameter(0)\n  ROOT n = f32[6]{0} negate(p)\n}\n"
            "ENTRY e {\n  p = f32[6]{0} parameter(0)\n  ROOT f = f32[6]{0} fusion(p), kind=kLoop, calls=fused\n}\n")
    x = [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # a plain list takes the parameter's f32
    res = fusegen.run(text, inputs=[x], compile=False)
    assert res.status == "ok" and res.outputs.tolist() == [-0.0, -1.0, -2.0, -3.0, -4.0, -5.0]
    bad = fusegen.run(text, inputs=[x], expected=[np.zeros(6, np.float32)], compile=False)
    assert bad.status == "mismatch" and not bad.ok
    assert bad.to_json()["outputs"][0]["kernel_vs_expected"] == 5.0


def test_errors_are_exceptions_naming_what_is_wrong(tmp_path):
    with pytest.raises(fusegen.api.LoadError, match="nope.hlo: No such file"):
        fusegen.load(tmp_path / "nope.hlo")
    from fusegen.hlo.errors import HloParseError

    with pytest.raises(HloParseError, match=r"<text>:4:1: error: expected an operand name"):
        fusegen.load("HloModule broken\nENTRY e {\n  ROOT x = f32[2] add(\n}\n")
    with pytest.raises(InputError, match=r"no input for parameter p0 \(%x.1\)"):
        fusegen.run(EXAMPLE, inputs={}, compile=False)
    with pytest.raises(InputError, match=r"array 'p0' for parameter 0 \(%x.1\) has shape \[3\], expected \[128, 512\]"):
        fusegen.run(EXAMPLE, inputs=[np.zeros(3)], compile=False)
    with pytest.raises(KeyError, match="no fusion named 'nope'"):
        fusegen.explain(EXAMPLE, fusion="nope")
    with pytest.raises(ValueError, match="unknown device|h200"):
        fusegen.explain(EXAMPLE, device="h9000")
    # a JAX function (or anything but a module) is named, with the call that makes a module of it
    with pytest.raises(TypeError, match=r"got function; for a JAX function: fusegen.capture\(fn, \*args\)"):
        fusegen.run(lambda x: x, compile=False)
    for call in (fusegen.explain, fusegen.tune):
        with pytest.raises(TypeError, match=r"expected a path, HLO text, .* got int$"):
            call([EXAMPLE, 3])


def test_tune_without_tunable_instructions_and_its_json_keys():
    res = fusegen.tune(EXAMPLE, workers=0)
    assert res.ok and res.instructions == ()
    assert set(res.to_json()) == {"module", "modules", "instructions", "cache", "timing", "note"}
    assert res.module.endswith("gpu_multi_output.h100_opt.hlo")
    # nothing to tune says why, naming the library's spelling of the CLI's --retune
    assert res.note.startswith("nothing to tune") and "retune=True" in res.note and res.to_json()["note"] == res.note


def test_import_fusegen_stays_light():
    code = "import sys, fusegen; print('fusegen.api' in sys.modules, 'triton' in sys.modules, callable(fusegen.run))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ).stdout
    assert out.split() == ["False", "False", "True"]


class _RaisingEmitter:
    """A plugin whose kLoop emitter raises in ``emit`` (the library reports the row, naming the plugin)."""

    from fusegen.plugin_manager import hookimpl as _hookimpl

    @_hookimpl
    def fusegen_emitter_factories(self):
        from fusegen.codegen.emitter import FusionEmitter
        from fusegen.registry import EmitterFactory

        class Broken(FusionEmitter):
            name = "Broken"

            def emit(self):
                raise RuntimeError("emit is broken")

        return [EmitterFactory(name="broken", kind="kLoop", rank=5, create=lambda a, c=None: Broken(a))]


def test_a_plugin_failing_at_run_time_is_an_error_row_naming_it():
    from fusegen.plugin_manager import PluginManager

    pm = PluginManager(extra_plugins=[("raising_emitter", _RaisingEmitter())])
    res = fusegen.run(EXAMPLE, compile=False, pm=pm)
    assert not res.ok and res.status == res.to_json()["status"] == "error"
    (line,) = res.errors
    assert line.startswith("fusion %wrapped_tanh: ") and "raising_emitter" in line and "emit is broken" in line
    row = next(f for f in res.to_json()["fusions"] if f["name"] == "wrapped_tanh")
    assert row["status"] == "error"
    plan = fusegen.explain(EXAMPLE, pm=pm)
    assert [e.split(":")[0] for e in plan.errors] == ["fusion %wrapped_tanh"]


def test_plugins_disable_of_one_call_does_not_hold_for_the_next(tmp_path):
    off, on = tmp_path / "off.toml", tmp_path / "on.toml"
    off.write_text('[plugins]\ndisable = ["loop"]\n')
    on.write_text("[plugins]\ndisable = []\n")
    emitters = lambda cfg: {f.name: f.emitter for f in fusegen.explain(EXAMPLE, config=cfg).fusions}  # noqa: E731
    assert emitters(off)["wrapped_tanh"] == "-"  # no kLoop emitter left
    assert emitters(on)["wrapped_tanh"] == "LoopFusion"
    assert emitters(off)["wrapped_tanh"] == "-" and emitters(None)["wrapped_tanh"] == "LoopFusion"
    assert [f.emitter for f in fusegen.run(EXAMPLE, config=off, compile=False).fusions][0] == "-"
    assert [f.emitter for f in fusegen.run(EXAMPLE, config=on, compile=False).fusions][0] == "LoopFusion"


def test_library_inputs_are_checked_as_the_cli_checks_an_npz(tmp_path):
    x = np.linspace(-1, 1, 128 * 512).reshape(128, 512)  # float64, the parameter is f32
    with pytest.raises(InputError, match=r"array 'p0' for parameter 0 \(%x.1\) has dtype float64, expected float32"):
        fusegen.run(EXAMPLE, inputs={"p0": x}, compile=False)
    np.savez(tmp_path / "in.npz", p0=x)
    with pytest.raises(InputError, match=r"in.npz: array 'p0' for parameter 0 \(%x.1\) has dtype float64, expected"):
        fusegen.run(EXAMPLE, inputs=tmp_path / "in.npz", compile=False)
    with pytest.raises(InputError, match=r"arrays \['p_0'\] match no parameter of the entry computation"):
        fusegen.run(EXAMPLE, inputs={"p0": x.astype(np.float32), "p_0": x}, compile=False)
    assert fusegen.run(EXAMPLE, inputs={"p0": x.astype(np.float32)}, compile=False).status == "ok"


def test_expected_keyed_o0_o1_follows_the_output_numbers_past_ten(tmp_path):
    """``dict(np.load(OUT.npz))`` as expected: o0 ... o11 by number, not as text sorts them (o10 before o2)."""
    n = 12
    body = "\n".join(f"  c{i} = f32[] constant({i})\n  b{i} = f32[4] broadcast(c{i}), dimensions={{}}\n"
                     f"  m{i} = f32[4] multiply(x, b{i})" for i in range(n))
    text = (f"HloModule twelve\n\nENTRY e {{\n  x = f32[4] parameter(0)\n{body}\n"
            f"  ROOT t = ({', '.join(['f32[4]'] * n)}) tuple({', '.join(f'm{i}' for i in range(n))})\n}}\n")
    x = np.arange(1, 5, dtype=np.float32)
    np.savez(tmp_path / "out.npz", **{f"o{i}": x * i for i in range(n)})
    for expected in (dict(np.load(tmp_path / "out.npz")), np.load(tmp_path / "out.npz")):
        res = fusegen.run(text, inputs=[x], expected=expected, compile=False)
        assert res.status == "ok", [o for o in res.to_json()["outputs"] if o["status"] != "ok"][:1]
    with pytest.raises(InputError, match=r"keyed by output \(11 keys\) but the module has 12 output leaves, "
                                         r"o0..o11; missing \['o11'\]"):
        fusegen.run(text, inputs=[x], expected={f"o{i}": x * i for i in range(11)}, compile=False)
