"""Every plugin docs/plugins.md defines is a real package: each ``# file: X.py`` block with a ``@hookimpl`` is
written out with the guide's ``pyproject.toml`` block for it, pip-installed into a venv, and passes the
conformance suite there; the guide's commands (``fusegen run dense_relu.hlo``: the dot runs on
``numpy_dot``, with the config its tuner applied; ``fusegen explain transpose.hlo --indexing``: the remap
emitter's maps; ``fusegen opt mlp.hlo``: the ``dot-bf16`` pass on the pass kit) print what the guide says
(issues 19 and 30: the kits and the docs run in CI)."""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path

import pytest

from venv_plugins import PluginVenv

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "plugins.md"
CORPUS = REPO.parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _blocks() -> list[tuple[str, str]]:
    return BLOCK.findall(DOC.read_text())


def _files() -> dict[str, str]:
    """``# file: NAME`` (python) and ``// file: NAME`` (hlo) blocks by file name."""
    out = {}
    for lang, body in _blocks():
        m = re.match(r"(?:#|//) file: (\S+)\n", body)
        if m:
            out[m.group(1)] = body
    return out


def plugin_blocks() -> dict[str, str]:
    """Module name -> source of every python file block that defines a plugin (implements a hook)."""
    return {name[:-3]: body for name, body in _files().items() if name.endswith(".py") and "@hookimpl" in body}


def _pyprojects() -> dict[str, dict]:
    """Module name -> the parsed ``pyproject.toml`` block whose ``py-modules`` lists it."""
    out = {}
    for lang, body in _blocks():
        if lang != "toml" or "[project]" not in body:
            continue
        meta = tomllib.loads(body)
        for m in meta.get("tool", {}).get("setuptools", {}).get("py-modules", []):
            out[m] = {"text": body, "meta": meta}
    return out


def test_every_plugin_of_the_guide_has_a_pyproject_naming_its_entry_point():
    blocks, projects = plugin_blocks(), _pyprojects()
    assert {"fusegen_negate", "fusegen_numpy_dot", "fusegen_remap", "fusegen_dot_bf16"} <= set(blocks)
    for module in blocks:
        assert module in projects, f"docs/plugins.md: plugin {module}.py has no pyproject.toml block listing it"
        eps = projects[module]["meta"]["project"]["entry-points"]
        assert module in {v for table in eps.values() for v in table.values()}, (module, eps)


def _entry_points() -> list[tuple[str, str]]:
    """``(module, entry-point name)`` of every guide plugin."""
    projects = _pyprojects()
    out = []
    for module in sorted(plugin_blocks()):
        eps = projects.get(module, {}).get("meta", {}).get("project", {}).get("entry-points", {})
        out.extend((module, name) for table in eps.values() for name, v in table.items() if v == module)
    return out


@pytest.fixture(scope="module")
def guide_venv(tmp_path_factory):
    """A venv with every plugin of the guide pip-installed, and the guide's other files in ``files``."""
    root = tmp_path_factory.mktemp("guide-plugins")
    venv = PluginVenv(root / "venv")
    projects = _pyprojects()
    for module, body in plugin_blocks().items():
        src = root / module
        src.mkdir()
        (src / f"{module}.py").write_text(body)
        (src / "pyproject.toml").write_text(projects[module]["text"])
        venv.install(src)
    files = root / "files"
    files.mkdir()
    for name, body in _files().items():
        if not name.endswith(".py") or "@hookimpl" not in body:
            (files / name).write_text(body.split("\n", 1)[1] if body.startswith("//") else body)
    venv.files = files
    return venv


@needs_corpus
@pytest.mark.parametrize("module, plugin", _entry_points())
def test_guide_plugin_installed_in_a_venv_passes_the_conformance_suite(guide_venv, tmp_path, module, plugin):
    proc, data = guide_venv.conformance(plugin, tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert data["plugin"]["distribution"] == module.replace("_", "-") and data["plugin"]["version"] == "0.1.0"
    assert not [r for r in data["results"] if r["outcome"] in ("failed", "error")]
    passed = {r["test"].split("[")[0] for r in data["results"] if r["outcome"] == "passed"}
    want = {
        "negate": {"test_generated_output", "test_compiles_sm90", "test_launch_within_limits", "test_corpus_output",
                   "test_deterministic_source"},
        "remap": {"test_generated_output", "test_compiles_sm90", "test_launch_within_limits",
                  "test_deterministic_source"},
        "numpy_dot": {"test_execution_backend_results", "test_supported_configs", "test_scratch_bytes",
                      "test_compile_apply_roundtrip", "test_codegen_results_within_tolerance",
                      "test_codegen_backend_declared"},
        "dot_bf16": {"test_pass_declared", "test_pass_rewrites_corpus"},
    }.get(plugin, {"test_declares_capabilities"})
    assert want <= passed, (want - passed, data["results"])


def _fusegen(venv, *args, plugin: str):
    # fusegen's own plugins and the one named: the other guide plugins must not change the answer
    return venv.run("-m", "fusegen.cli", *args, cwd=venv.files,
                    env={"FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen", "FUSEGEN_LOAD_PLUGINS": plugin})


def _sh_block_after(marker: str) -> list[str]:
    text = DOC.read_text()
    body = text[text.index(marker):]
    return re.search(r"```sh\n(.*?)```", body, re.S).group(1).splitlines()


def test_guide_backend_runs_the_dot_of_dense_relu(guide_venv):
    proc = _fusegen(guide_venv, "run", "dense_relu.hlo", "--json", "--no-compile", plugin="numpy_dot")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    lines = _sh_block_after("// file: dense_relu.hlo")
    assert lines[0].startswith("$ fusegen run dense_relu.hlo --json")
    assert json.loads(lines[1]) == doc["non_fusion_instructions"] == [
        {"name": "d", "opcode": "dot", "backend": "numpy_dot"}]
    assert json.loads(lines[2]) == doc["status"] == "ok"
    # without the plugin the host backend runs it: the column is the plugin's doing
    plain = guide_venv.run("-m", "fusegen.cli", "run", "dense_relu.hlo", "--json", "--no-compile",
                           cwd=guide_venv.files, env={"FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen"})
    assert json.loads(plain.stdout)["non_fusion_instructions"][0]["backend"] == "host"


def test_guide_emitter_on_maps_explains_its_kernel_and_indexing_maps(guide_venv):
    proc = _fusegen(guide_venv, "explain", "transpose.hlo", "--fusion", "f", "--indexing", plugin="remap")
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = proc.stdout
    shown = [ln for ln in _sh_block_after("## 7. An emitter on indexing maps")[1:] if ln != "..."]
    for ln in shown:
        head = ln[:-len("domain: ...")] if ln.endswith("domain: ...") else ln
        assert head in out, f"the guide shows {ln!r}; explain printed:\n{out}"
    js = json.loads(_fusegen(guide_venv, "explain", "transpose.hlo", "--fusion", "f", "--indexing", "--json",
                             plugin="remap").stdout)
    (f,) = js["fusions"]
    assert (f["emitter"], f["decided_by"]) == ("RemapFusion", "loop")
    assert f["indexing"]["emitter"] == "RemapFusion"
    assert f["launch_dimensions"] == {"grid": [1, 1, 1], "threads": [32, 1, 1], "shared_memory_bytes": 0}


def test_guide_emitter_on_maps_is_under_80_lines_and_uses_the_kit():
    body = plugin_blocks()["fusegen_remap"]
    assert len(body.splitlines()) < 80
    for name in ("kit.logical_index", "kit.apply_indexing_map", "kit.physical_offset", "kit.store_line",
                 "kit.build_linear_kernel", "kit.LinearKernelIndexing", "gen.ctx.param"):
        assert name in body, name


def test_guide_library_session_runs_with_the_guide_plugins_installed(guide_venv):
    script = guide_venv.files / "library_session.py"
    script.write_text(_files()["library_session.py"])
    proc = guide_venv.run(str(script), cwd=guide_venv.files,
                          env={"FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen,fusegen-remap,fusegen-numpy-dot"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    text = DOC.read_text()
    shown = re.search(r"# file: library_session.py.*?```\n\nprints\n\n```json\n(.*?)```", text, re.S).group(1)
    assert json.loads(proc.stdout) == json.loads(shown)


def test_guide_emitter_on_maps_appears_in_the_report_with_its_thread_maps(guide_venv):
    proc = _fusegen(guide_venv, "report", "transpose.hlo", "-o", "transpose.html", "--json-data", "transpose.json",
                    plugin="remap")
    assert proc.returncode == 0, proc.stderr[-2000:]
    (f,) = json.loads((guide_venv.files / "transpose.json").read_text())["modules"][0]["fusions"]
    assert f["emitter"] == "RemapFusion" and f["kernels"][0]["launch"] == "grid=1 warps=1"
    explained = json.loads(_fusegen(guide_venv, "explain", "transpose.hlo", "--fusion", "f", "--indexing", "--json",
                                    plugin="remap").stdout)["fusions"][0]["indexing"]["roots"][0]
    assert f["thread_indexing"] == {"%t -> output": explained["thread_to_output"],
                                    "%t -> operand %p": explained["operands"][0]["thread_to_input"]}
    html = (guide_venv.files / "transpose.html").read_text()
    assert "Thread indexing (RemapFusion: launch ids → element)" in html and "%t -&gt; operand %p" in html


def test_guide_backend_runs_with_the_config_its_tuner_applied(guide_venv):
    # NumpyDotBackend.apply_config writes numpy_dot_config; the execution backend reads it back at run time
    text = (guide_venv.files / "dense_relu.hlo").read_text()
    bad = text.replace("rhs_contracting_dims={0}\n", 'rhs_contracting_dims={0}, backend_config={"numpy_dot_config":'
                                                      '{"split_k":0}}\n')
    assert bad != text
    (guide_venv.files / "dense_relu_split0.hlo").write_text(bad)
    proc = _fusegen(guide_venv, "run", "dense_relu_split0.hlo", "--no-compile", plugin="numpy_dot")
    assert proc.returncode == 2 and "plugin 'numpy_dot' raised in numpy_dot.execute" in proc.stderr, proc.stderr
    (guide_venv.files / "dense_relu_split2.hlo").write_text(bad.replace('"split_k":0', '"split_k":2'))
    proc = _fusegen(guide_venv, "run", "dense_relu_split2.hlo", "--no-compile", "--json", plugin="numpy_dot")
    assert proc.returncode == 0 and json.loads(proc.stdout)["status"] == "ok", proc.stderr[-2000:]


def test_guide_pass_on_the_kit_rewrites_and_runs_as_the_guide_shows(guide_venv):
    body = plugin_blocks()["fusegen_dot_bf16"]
    assert len(body.splitlines()) < 60
    for name in ("kit.instructions_outside_fusions", "kit.contracting_sizes", "kit.add_instruction", "before=",
                 "after=", "kit.replace_all_uses", "kit.replace_operand", "error_budget="):
        assert name in body, name
    lines = _sh_block_after("// file: mlp.hlo")
    assert lines[0] == "$ fusegen opt mlp.hlo --passes dot-bf16 --config bf16.toml"
    proc = _fusegen(guide_venv, "opt", "mlp.hlo", "--passes", "dot-bf16", "--config", "bf16.toml", plugin="dot_bf16")
    assert proc.returncode == 0, proc.stderr[-2000:]
    shown = lines[2:lines.index(next(ln for ln in lines if ln.startswith("$ fusegen run")))]
    assert [ln for ln in proc.stdout.splitlines() if ln.startswith("  %") or ln.startswith("  ROOT")][3:] == shown
    run_cmd = next(ln for ln in lines if ln.startswith("$ fusegen run"))
    assert run_cmd.startswith("$ fusegen run mlp.hlo --config bf16.toml --json")
    proc = _fusegen(guide_venv, "run", "mlp.hlo", "--config", "bf16.toml", "--json", "--no-compile", plugin="dot_bf16")
    assert proc.returncode == 0, proc.stderr[-2000:]
    doc = json.loads(proc.stdout)
    assert json.loads(lines[-1]) == [doc["status"], [f["emitter"] for f in doc["fusions"]]]
    plan = json.loads(_fusegen(guide_venv, "explain", "mlp.hlo", "--config", "bf16.toml", "--json",
                               plugin="dot_bf16").stdout)
    assert plan["passes"] == ["dot-bf16", "dot-decomposer", "gemm-fusion", "gemm-rewriter", "fusion"]
