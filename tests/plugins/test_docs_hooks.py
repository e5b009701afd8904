"""docs/plugins.md stays true: every hookspec is documented with its signature and has a test; the
guide's code blocks run (the minimal emitter and backend plugins work; tests/plugins/test_docs_plugins_installed.py
installs every plugin of the guide into a venv and runs the conformance suite on it); the environment variables, ``[plugins] enable/disable`` and ``fusegen plugins --hook``
behave as documented."""

from __future__ import annotations

import importlib
import inspect
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from fusegen import hookspecs
from fusegen.plugin_manager import PluginManager

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "plugins.md"
TESTS = Path(__file__).resolve().parents[1]
CORPUS = REPO.parent / "shared" / "corpus"
BLOCK = re.compile(r"```(\w+)\n(.*?)```", re.S)


def _hookspecs() -> dict[str, inspect.Signature]:
    return {name: inspect.signature(fn) for name, fn in vars(hookspecs).items()
            if callable(fn) and hasattr(fn, "fusegen_spec")}


def _blocks(lang: str) -> list[str]:
    return [body for lg, body in BLOCK.findall(DOC.read_text()) if lg == lang]


def _file_blocks() -> dict[str, str]:
    out = {}
    for body in _blocks("python"):
        first = body.splitlines()[0]
        if first.startswith("# file: "):
            out[first[len("# file: "):].strip()] = body
    return out


def test_hookspecs_are_found():
    assert {"fusegen_emitter_factories", "fusegen_fusion_kind_matchers", "fusegen_conformance_capabilities"} <= set(
        _hookspecs())


@pytest.mark.parametrize("name", sorted(_hookspecs()))
def test_every_hookspec_is_documented_with_its_signature(name):
    sig = _hookspecs()[name]
    params = ", ".join(sig.parameters)
    text = DOC.read_text()
    assert f"### `{name}({params})`" in text, f"docs/plugins.md has no '### `{name}({params})`' heading"
    section = text.split(f"### `{name}({params})`", 1)[1].split("\n## ", 1)[0].split("\n### ", 1)[0]
    assert len(section.split()) >= 25, f"the section on {name} does not state its contract"


@pytest.mark.parametrize("name", sorted(_hookspecs()))
def test_every_hookspec_has_a_test(name):
    """Some test module other than this one implements or calls the hook, or this one has test_hook_<name>..."""
    others = [p for p in TESTS.rglob("test_*.py") if p.name != Path(__file__).name and name in p.read_text()]
    here = re.search(rf"def test_hook_{name}\w*\(", Path(__file__).read_text()) is not None
    assert others or here, f"no test exercises hook {name}"


def test_code_blocks_are_valid_python_and_toml():
    for body in _blocks("python"):
        compile(body, "docs/plugins.md", "exec")
    tomls = [tomllib.loads(b) for b in _blocks("toml")]
    eps = [t["project"]["entry-points"] for t in tomls if "project" in t]
    assert eps and all(set(e) <= {"fusegen.emitters", "fusegen.backends", "fusegen.plugins"} for e in eps)
    assert {"negate": "fusegen_negate"} in [e.get("fusegen.emitters") for e in eps]


@pytest.fixture
def doc_modules(tmp_path, monkeypatch):
    """The guide's ``# file:`` blocks written out and importable."""
    files = _file_blocks()
    assert {"fusegen_negate.py", "try_negate.py", "fusegen_numpy_dot.py"} <= set(files)
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    monkeypatch.syspath_prepend(str(tmp_path))
    for mod in ("fusegen_negate", "try_negate", "fusegen_numpy_dot"):
        sys.modules.pop(mod, None)
    yield tmp_path
    for mod in ("fusegen_negate", "try_negate", "fusegen_numpy_dot"):
        sys.modules.pop(mod, None)


def test_minimal_emitter_plugin_from_the_guide_works(doc_modules):
    kind, plugin, launch, is_sm90 = importlib.import_module("try_negate").main()
    assert (kind, plugin, is_sm90) == ("kLoop", "negate", True)
    assert launch.grid == (3,) and launch.num_warps == 4  # 2100 elements in 1024-element programs


def test_hook_fusegen_config_options_of_the_guide_plugin_is_validated(doc_modules, tmp_path):
    from fusegen.config.loader import load_config
    from fusegen.config.toml import ConfigError

    pm = PluginManager(autoload=False, extra_plugins=[("negate", importlib.import_module("fusegen_negate"))])
    cfg_file = tmp_path / "fusegen.toml"
    cfg_file.write_text("[plugins.negate]\nmin_elements = 4096\n")
    cfg = load_config(cfg_file, pm=pm, env={})
    assert cfg.plugin_settings("negate") == {"min_elements": 4096}
    cfg_file.write_text("[plugins.negate]\nmin_element = 1\n")
    with pytest.raises(ConfigError, match="did you mean 'min_elements'"):
        load_config(cfg_file, pm=pm, env={})


def test_negate_factory_declines_other_fusions(doc_modules):
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter
    from fusegen.hlo.parser import parse_module

    pm = PluginManager(extra_plugins=[("negate", importlib.import_module("fusegen_negate"))])
    assert [f.name for f in pm.emitter_factories("kLoop")] == ["memcpy", "in_place_dus", "negate", "loop"]
    text = ("HloModule m\nfused {\n  p = f32[8]{0} parameter(0)\n  ROOT a = f32[8]{0} abs(p)\n}\n"
            "ENTRY e {\n  p = f32[8]{0} parameter(0)\n  ROOT f = f32[8]{0} fusion(p), kind=kLoop, calls=fused\n}\n")
    a = FusionAnalysis.create(parse_module(text, "abs").entry.root)
    _em, factory = get_fusion_emitter(a, get_emitter_fusion_kind(a, pm).kind, pm)
    assert factory.plugin == "loop"


@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")
def test_hook_fusegen_execution_backends_of_the_guide_plugin_runs_the_dot(doc_modules):
    from fusegen.hlo.parser import parse_file
    from fusegen.verify.judged_run import run_module
    from fusegen.runtime.inputs import make_inputs

    mod = importlib.import_module("fusegen_numpy_dot")
    pm = PluginManager(extra_plugins=[("numpy_dot", mod)])
    m = parse_file(CORPUS / "jax" / "gelu_matmul.pre.hlo")
    dot = next(i for i in m.all_instructions() if i.opcode == "dot")
    assert next(b for b in pm.execution_backends() if b.can_execute(dot)).name == "numpy_dot"
    _out, rep = run_module(m, make_inputs(m, 0), pm=pm, compile_kernels=False)
    assert rep.ok and rep.other.get("numpy_dot") == 1, rep.other


def test_guide_emitter_reads_the_operand_its_parameter_names(doc_modules):
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.codegen import triton_runtime
    from fusegen.dispatch import get_fusion_emitter
    from fusegen.hlo.parser import parse_module

    pm = PluginManager(autoload=False, extra_plugins=[("negate", importlib.import_module("fusegen_negate"))])
    text = ("HloModule m\nfused {\n  a = f32[5]{0} parameter(0)\n  b = f32[5]{0} parameter(1)\n"
            "  ROOT n = f32[5]{0} negate(b)\n}\nENTRY e {\n  a = f32[5]{0} parameter(0)\n  b = f32[5]{0} parameter(1)\n"
            "  ROOT f = f32[5]{0} fusion(a, b), kind=kLoop, calls=fused\n}\n")
    fusion = parse_module(text, "two.hlo").entry.root
    em, factory = get_fusion_emitter(FusionAnalysis.create(fusion), "kLoop", pm)
    assert factory.name == "negate"
    a, b = np.arange(5, dtype=np.float32), np.arange(10, 15, dtype=np.float32)
    (out,) = triton_runtime.run_fusion(em.emit(), [a, b], fusion)
    assert out.tolist() == [-10.0, -11.0, -12.0, -13.0, -14.0]


def _fusegen(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True,
                          env={**os.environ, **(env or {})})


def test_plugins_hook_option_filters_and_rejects_unknown_hooks():
    out = _fusegen("plugins", "--json", "--hook", "fusegen_codegen_backends")
    assert out.returncode == 0, out.stderr
    names = {r["name"] for r in json.loads(out.stdout)["plugins"]}
    assert {"triton", "cudnn", "cublaslt"} <= names and "loop" not in names
    bad = _fusegen("plugins", "--hook", "fusegen_emitter_factory")
    assert bad.returncode == 2
    assert "unknown hook 'fusegen_emitter_factory'; did you mean 'fusegen_emitter_factories'?" in bad.stderr


def test_autoload_off_loads_only_the_listed_entry_points():
    out = _fusegen("plugins", "--json", env={"FUSEGEN_DISABLE_PLUGIN_AUTOLOAD": "1", "FUSEGEN_LOAD_PLUGINS": "loop,host"})
    assert out.returncode == 0, out.stderr
    rows = {r["name"]: r["group"] for r in json.loads(out.stdout)["plugins"]}
    assert {n for n, g in rows.items() if g != "builtin"} == {"loop", "host"}


def test_plugins_disable_from_the_resolved_config(tmp_path):
    from fusegen.config.loader import load_config

    (tmp_path / "fusegen.toml").write_text('[plugins]\ndisable = ["memcpy", "several-roots"]\n')
    cfg = load_config(cwd=tmp_path, pm=PluginManager(), env={})
    assert cfg.plugins.disable == ["memcpy", "several-roots"]
    pm = PluginManager(config=cfg)
    assert "memcpy" not in pm.infos and "memcpy" not in [f.name for f in pm.emitter_factories()]
    assert "several-roots" not in [m.name for m in pm.kind_matchers()]
    assert [f.name for f in pm.emitter_factories("kLoop")] == ["in_place_dus", "loop"]
    # the default constructor is unchanged
    assert [f.name for f in PluginManager().emitter_factories("kLoop")][0] == "memcpy"
    # after construction too
    pm2 = PluginManager()
    pm2.apply_config(cfg)
    assert "memcpy" not in pm2.infos and "several-roots" not in [m.name for m in pm2.kind_matchers()]


def test_plugins_enable_loads_an_entry_point_with_autoload_off(tmp_path):
    from fusegen.config.options import PluginsOptions

    pm = PluginManager(autoload=False, config=PluginsOptions(enable=["reduction"]))
    assert "reduction" in pm.infos and "loop" not in pm.infos
    assert [f.name for f in pm.emitter_factories("kReduction")] == ["reduction"]


def test_trace_variable_is_documented_and_works():
    assert "FUSEGEN_TRACE_PLUGINS=1" in DOC.read_text()
    out = _fusegen("plugins", "--json", env={"FUSEGEN_TRACE_PLUGINS": "1"})
    assert "[fusegen-trace] fusegen_fusion_kind_matchers() from fusegen.matchers -> [KindMatcher(" in out.stderr


def test_documented_ranks_match_the_registries():
    pm = PluginManager(autoload=False, extra_plugins=[])
    text = DOC.read_text()
    for m in pm.kind_matchers():
        assert re.search(rf"\|\s*{m.rank}\s*\|\s*`{re.escape(m.name)}`", text), m
    full = PluginManager()
    for f in full.emitter_factories():
        if full.infos[f.plugin].distribution == "fusegen":
            assert re.search(rf"\|\s*{f.kind}\s*\|\s*{f.rank}\s*\|\s*`{re.escape(f.name)}`", text), f
    for b in full.execution_backends():
        if full.infos[b.plugin].distribution == "fusegen":
            assert f"`{b.name}` {b.rank}" in text, b
