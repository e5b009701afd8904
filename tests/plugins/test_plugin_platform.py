"""The plugin platform as a plugin author meets it, with real distributions pip-installed into a venv
(``tests/plugin_packages``, ``plugin_venv`` fixture): owned names, quarantine of plugins that break while
loading, run-time failures that name the plugin, one pipeline for every command, and the context (device,
``[plugins.<name>]`` settings) every plugin callable is handed."""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

import pytest

from conftest import REPO, corpus_path
from plugin_venv import fusegen_in

EXAMPLE = REPO / "examples" / "gpu_multi_output.h100_opt.hlo"  # %wrapped_tanh (kLoop), a row reduction
BROKEN = "fusegen-test-broken"
BROKEN_LINES = {  # plugin -> (entry point, reason) as the one stderr line says them
    "broken_import": ("fusegen.emitters: broken_import = fusegen_test_broken_import",
                      "import failed at {site}/fusegen_test_broken_import.py:3: ModuleNotFoundError: No module "
                      "named 'fusegen_test_no_such_dependency'"),
    "broken_hook": ("fusegen.emitters: broken_hook = fusegen_test_broken:raising_hook",
                    "raised in fusegen_emitter_factories: RuntimeError: registry exploded"),
    "broken_type": ("fusegen.emitters: broken_type = fusegen_test_broken:ill_typed",
                    "returned str from fusegen_emitter_factories, expected EmitterFactory"),
    "broken_default": ("fusegen.plugins: broken_default = fusegen_test_broken:bad_default",
                       "declares option 'threshold' of type int with default 'ten'"),
    "broken_collide": ("fusegen.emitters: broken_collide = fusegen_test_broken:collide",
                       "registers emitter factory 'loop', which plugin 'loop' (fusegen) already registers; say "
                       "replaces='loop' on it to replace that one"),
    "loop": ("fusegen.emitters: loop = fusegen_test_broken:takes_the_name_loop",
             "plugin name 'loop' is taken by fusegen's plugin 'loop' (entry point fusegen_plugins.emitters.loop); "
             "set FUSEGEN_REPLACES = 'loop' in the plugin to replace it"),
}


def _toml(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text).lstrip())
    return path


def _warnings(stderr: str) -> list[str]:
    return [ln for ln in stderr.splitlines() if ln.startswith("fusegen: warning: plugin ")]


def _broken_lines(py: Path) -> dict[str, tuple[str, str]]:
    """:data:`BROKEN_LINES` with the venv's site-packages in the import failure's FILE:LINE."""
    site = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    return {k: (ep, reason.replace("{site}", site)) for k, (ep, reason) in BROKEN_LINES.items()}


def test_each_load_time_breakage_is_quarantined_in_one_line_and_listed(plugin_venv):
    p = fusegen_in(plugin_venv, "plugins", "--json", dists=BROKEN)
    assert p.returncode == 0, p.stderr
    lines = _warnings(p.stderr)
    assert len(lines) == len(BROKEN_LINES), lines
    broken = _broken_lines(plugin_venv)
    for name, (ep, reason) in broken.items():
        want = (f"fusegen: warning: plugin {name!r} (entry point {ep}; distribution {BROKEN} 0.3.0) quarantined: "
                f"{reason}")
        assert want in lines
    rows = {(r["name"], r["distribution"]): r for r in json.loads(p.stdout)["plugins"]}
    for name, (ep, reason) in broken.items():
        r = rows[(name, BROKEN)]
        assert (r["status"], r["reason"], r["entry_point"]) == ("broken", reason, ep.split(" = ")[1])
    assert rows[("loop", "fusegen")]["status"] == "loaded"  # the built-in keeps its name
    # the table says it too, and lists codegen backends
    p = fusegen_in(plugin_venv, "plugins", dists=BROKEN)
    assert p.stdout.count("BROKEN:") == len(BROKEN_LINES)
    assert "codegen triton@" in p.stdout and "codegen host@" in p.stdout


def test_commands_run_on_the_builtins_beside_broken_plugins(plugin_venv):
    p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), "--json", dists=BROKEN)
    assert p.returncode == 0, p.stderr
    assert len(_warnings(p.stderr)) == len(BROKEN_LINES)
    rows = {f["name"]: f for f in json.loads(p.stdout)["fusions"]}
    assert (rows["wrapped_tanh"]["emitter"], rows["wrapped_tanh"]["plugin"]) == ("LoopFusion", "loop")
    assert rows["input_multiply_reduce_fusion"]["kind"] == "kReduction"
    p = fusegen_in(plugin_venv, "run", str(EXAMPLE), "--no-compile", "--json", dists=BROKEN)
    assert p.returncode == 0, p.stderr
    assert [f["status"] for f in json.loads(p.stdout)["fusions"]] == ["ok", "ok"]


def test_a_quarantined_plugins_names_say_why_and_only_running_its_pass_fails(plugin_venv, tmp_path):
    _toml(tmp_path / "fusegen.toml", """
        [pipeline]
        passes = ["broken-import-pass", "fusion"]

        [plugins.broken_hook]
        threshold = 3
        """)
    broken = _broken_lines(plugin_venv)
    import_reason = f"plugin 'broken_import' ({BROKEN}) is quarantined: {broken['broken_import'][1]}"
    # every command still runs (fusegen plugins, run on a fused module); the warnings say why the names are missing
    for args in (["plugins"], ["run", str(EXAMPLE), "--no-compile"]):
        p = fusegen_in(plugin_venv, *args, dists=BROKEN, cwd=tmp_path)
        assert p.returncode == 0, (args, p.stderr[-3000:])
        warn = [ln for ln in p.stderr.splitlines() if "fusegen.toml:" in ln]
        assert len(warn) == 2, warn
        assert warn[0].startswith(f"fusegen: warning: {tmp_path / 'fusegen.toml'}:2: unknown pass 'broken-import-pass' "
                                  f"in [pipeline]; known passes: ") and import_reason in warn[0], warn[0]
        assert warn[1].endswith(":4: [plugins.broken_hook] configures plugin 'broken_hook', which is quarantined: "
                                "raised in fusegen_emitter_factories: RuntimeError: registry exploded; ignored"), warn[1]
    # running the pipeline is what fails: naming the pass and why it is missing
    unfused = _toml(tmp_path / "unfused.hlo", """
        HloModule u
        ENTRY e {
          x = f32[4] parameter(0)
          ROOT n = f32[4] negate(x)
        }
        """)
    p = fusegen_in(plugin_venv, "opt", str(unfused), dists=BROKEN, cwd=tmp_path)
    (err,) = [ln for ln in p.stderr.splitlines() if ln.startswith("fusegen: error:")]
    assert p.returncode == 2 and err.startswith(f"fusegen: error: {unfused}: unknown pass 'broken-import-pass'; "
                                                "known passes: ") and import_reason in err, err


def test_pass_names_compare_as_plugin_names_and_every_help_says_one_default_pipeline(plugin_venv, tmp_path):
    from fusegen.passes.pipeline import DEFAULT_PIPELINE_TEXT

    _toml(tmp_path / "fusegen.toml", """
        [pipeline]
        passes = ["dot_decomposer", "gemm_fusion", "Gemm.Rewriter", "fusion"]
        """)
    p = fusegen_in(plugin_venv, "explain", str(corpus_path("jax/gelu_matmul.pre.hlo")), "--json", cwd=tmp_path)
    assert p.returncode == 0 and json.loads(p.stdout)["passes"] == DEFAULT_PIPELINE_TEXT.split(","), p.stderr
    (tmp_path / "fusegen.toml").write_text('[pipeline]\npasses = ["gemm-fusoin"]\n')
    p = fusegen_in(plugin_venv, "explain", str(corpus_path("jax/gelu_matmul.pre.hlo")), cwd=tmp_path)
    assert p.returncode == 2 and "unknown pass 'gemm-fusoin' in [pipeline]; did you mean 'gemm-fusion'?" in p.stderr
    for cmd in ("opt", "run", "explain", "tune", "report"):
        text = fusegen_in(plugin_venv, cmd, "--help").stdout
        assert f"default:{DEFAULT_PIPELINE_TEXT})" in "".join(text.split()), (cmd, text)  # click wraps at '-' 


def test_strict_mode_turns_a_quarantine_into_exit_2(plugin_venv, tmp_path):
    strict = _toml(tmp_path / "strict.toml", "[plugins]\nstrict = true\n")
    for extra, env in ((["--strict-plugins"], {}), ([], {"FUSEGEN_STRICT_PLUGINS": "1"}),
                       (["--config", str(strict)], {})):
        p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), *extra, dists=BROKEN, env=env, cwd=tmp_path)
        assert p.returncode == 2, (extra, env, p.stderr)
        assert "quarantined" in p.stderr and "(strict plugins" in p.stderr and "Traceback" not in p.stderr
        p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), *extra, env=env, cwd=tmp_path)  # nothing broken
        assert p.returncode == 0, p.stderr
    p = fusegen_in(plugin_venv, "plugins", "--strict-plugins", dists=BROKEN)
    assert p.returncode == 2


STRICT_LIBRARY = """
import fusegen, sys
from fusegen.plugin_manager import PluginError
try:
    fusegen.explain(sys.argv[1])
except PluginError as e:
    print("raised:", e)
else:
    print("ran")
"""


def test_strict_plugins_is_a_boolean_and_holds_in_the_library(plugin_venv, tmp_path):
    for value, strict in (("false", False), ("no", False), ("OFF", False), ("0", False), ("", False),
                          ("true", True), ("yes", True), ("on", True), ("1", True)):
        p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), dists=BROKEN, env={"FUSEGEN_STRICT_PLUGINS": value},
                       cwd=tmp_path)
        assert p.returncode == (2 if strict else 0), (value, p.stderr)
    p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), env={"FUSEGEN_STRICT_PLUGINS": "maybe"}, cwd=tmp_path)
    assert p.returncode == 2 and "FUSEGEN_STRICT_PLUGINS: 'maybe' is not a boolean" in p.stderr, p.stderr
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGEN_") or k == "FUSEGEN_KERNEL_DIR"}
    for value, said in (("1", "raised: plugin 'broken"), ("no", "ran")):
        q = subprocess.run([str(plugin_venv), "-c", STRICT_LIBRARY, str(EXAMPLE)], capture_output=True, text=True,
                           cwd=tmp_path, timeout=300, env={**env, "FUSEGEN_AUTOLOAD_DISTRIBUTIONS": f"fusegen,{BROKEN}",
                                                           "FUSEGEN_STRICT_PLUGINS": value})
        assert q.stdout.startswith(said) and ("quarantined" in q.stdout or value != "1"), (value, q.stdout, q.stderr)


def test_disable_applies_before_a_plugin_is_imported(plugin_venv, tmp_path):
    cfg = _toml(tmp_path / "fusegen.toml", '[plugins]\ndisable = ["broken_import", "Broken-Hook", "loop"]\n')
    p = fusegen_in(plugin_venv, "plugins", "--json", dists=BROKEN, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    names = {r["name"] for r in json.loads(p.stdout)["plugins"]}
    # never imported: no quarantine, not listed; "loop" is the plugin (both entry points of that name)
    assert not {"broken_import", "broken_hook", "loop"} & names
    # with fusegen's `loop` out, the factory name `loop` is free: broken_collide's (declining) factory takes it
    assert {ln.split("'")[1] for ln in _warnings(p.stderr)} == {"broken_type", "broken_default"}
    assert "matcher loop@1000" in {r["name"]: r for r in json.loads(p.stdout)["plugins"]}["fusegen.matchers"][
        "provides"]  # disabling the plugin `loop` left the matcher `loop` alone
    p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), "--json", "--config", str(cfg), dists=BROKEN)
    rows = {f["name"]: f for f in json.loads(p.stdout)["fusions"]}
    assert (rows["wrapped_tanh"]["kind"], rows["wrapped_tanh"]["decided_by"]) == ("kLoop", "loop")
    assert rows["wrapped_tanh"]["backend"] == "host"  # no loop emitter: only that one thing went


def test_a_taken_name_is_refused_and_an_explicit_replacement_allowed(plugin_venv):
    p = fusegen_in(plugin_venv, "plugins", "--json", dists="fusegen-test-acme-loop")
    assert p.returncode == 0 and not _warnings(p.stderr), p.stderr
    rows = {r["name"]: r for r in json.loads(p.stdout)["plugins"]}
    assert "loop" not in rows  # replaced as a whole
    assert rows["acme_loop"]["replaces"] == ["replaces loop (fusegen)", "replaces matcher loop (fusegen.matchers)"]
    assert rows["acme_loop"]["provides"] == ["matcher loop@1000", "emitter loop:kLoop@100"]
    assert "matcher loop@1000" not in rows["fusegen.matchers"]["provides"]
    p = fusegen_in(plugin_venv, "plugins", dists="fusegen-test-acme-loop")
    assert "replaces loop (fusegen)" in p.stdout
    # rows decided and emitted by the replacement name it
    p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), "--json", dists="fusegen-test-acme-loop")
    tanh = {f["name"]: f for f in json.loads(p.stdout)["fusions"]}["wrapped_tanh"]
    assert (tanh["emitter"], tanh["plugin"], tanh["decided_by"], tanh["decided_by_plugin"]) == \
        ("AcmeLoopFusion", "acme_loop", "loop", "acme_loop")
    p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), dists="fusegen-test-acme-loop")
    assert "AcmeLoopFusion (acme_loop)" in p.stdout and "loop (acme_loop)" in p.stdout
    # without saying so, the same names are refused (test_each_load_time_breakage...: broken_collide, loop)
    p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), "--json", dists=BROKEN)
    tanh = {f["name"]: f for f in json.loads(p.stdout)["fusions"]}["wrapped_tanh"]
    assert (tanh["emitter"], tanh["plugin"], tanh["decided_by_plugin"]) == ("LoopFusion", "loop", "fusegen.matchers")


RUNTIME = {  # entry point -> (fusions that fail, words the message holds)
    "rt_matcher_raises": (2, ["plugin 'rt_matcher_raises' raised in kind matcher 'always-raises'",
                              "ValueError: cannot look at wrapped_tanh"]),
    "rt_typo": (2, ["plugin 'rt_typo' kind matcher 'typo' answered 'kLooop' for fusion %wrapped_tanh",
                    "did you mean 'kLoop'?"]),
    "rt_factory_string": (1, ["plugin 'rt_factory_string' emitter factory 'stringly' (kLoop) returned str for "
                              "fusion %wrapped_tanh, expected a FusionEmitter"]),
    "rt_emit_raises": (1, ["plugin 'rt_emit_raises' RaisingFusion.emit (emitter factory 'raising') failed on fusion "
                           "%wrapped_tanh: RuntimeError: emit exploded"]),
    "rt_bad_source": (1, ["plugin 'rt_bad_source', BadSourceFusion.emit: kernel failed to load or run at ",
                          ".py:9: SyntaxError"]),
    "rt_launch_fails": (1, ["plugin 'rt_launch_fails', LaunchFailsFusion.emit: kernel failed to load or run",
                            "(kernel neg_kernel (", ".py)): TypeError"]),
}


@pytest.mark.parametrize("plugin", sorted(RUNTIME))
def test_a_run_time_failure_exits_2_naming_the_plugin(plugin_venv, plugin):
    failing, words = RUNTIME[plugin]
    p = fusegen_in(plugin_venv, "run", str(EXAMPLE), "--no-compile", "--json", env={"FUSEGEN_LOAD_PLUGINS": plugin})
    assert p.returncode == 2, p.stderr
    errors = [ln for ln in p.stderr.splitlines() if ln.startswith("fusegen: error: ")]
    assert len(errors) == failing, p.stderr
    (line,) = [ln for ln in errors if ln.startswith(f"fusegen: error: {EXAMPLE}: fusion %wrapped_tanh: ")]
    for w in words:
        assert w in line, (w, line)
    assert "Traceback" not in p.stderr
    doc = json.loads(p.stdout)
    rows = {f["name"]: f for f in doc["fusions"]}  # every row is printed
    assert (rows["wrapped_tanh"]["status"], rows["wrapped_tanh"]["plugin"]) == ("error", plugin)
    other = rows["input_multiply_reduce_fusion"]
    assert other["status"] == ("error" if failing == 2 else "ok")
    # the module is an error naming the plugin, not a "mismatch" whose outputs all say ok
    assert doc["status"] == "error"
    assert [(e["fusion"], e["plugin"]) for e in doc["plugin_errors"]] == \
        [(n, plugin) for n, f in rows.items() if f["status"] == "error"]
    assert doc["plugin_errors"][[e["fusion"] for e in doc["plugin_errors"]].index("wrapped_tanh")]["reason"] \
        == rows["wrapped_tanh"]["reason"]


LIBRARY_RUN = """
import json, sys
import fusegen
res = fusegen.run(sys.argv[1], compile=False)
print(json.dumps({"status": res.status, "doc": res.to_json()["status"], "errors": res.errors,
                  "rows": [(f.name, f.status, f.plugin) for f in res.fusions]}))
"""


@pytest.mark.parametrize("plugin", ["rt_typo", "rt_bad_source"])
def test_a_run_time_failure_says_so_in_the_summary_and_the_library(plugin_venv, plugin):
    p = fusegen_in(plugin_venv, "run", str(EXAMPLE), "--no-compile", env={"FUSEGEN_LOAD_PLUGINS": plugin})
    assert p.returncode == 2, p.stderr
    (said,) = [ln for ln in p.stdout.splitlines() if ln.startswith("outputs vs reference:")]
    assert said.startswith(f"outputs vs reference: not judged: plugin {plugin!r} failed on fusion %wrapped_tanh")
    assert "MISMATCH" not in p.stdout
    env = {k: v for k, v in os.environ.items() if not k.startswith("FUSEGEN_") or k == "FUSEGEN_KERNEL_DIR"}
    q = subprocess.run([str(plugin_venv), "-c", LIBRARY_RUN, str(EXAMPLE)], capture_output=True, text=True,
                       env={**env, "FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen", "FUSEGEN_LOAD_PLUGINS": plugin},
                       timeout=300)
    got = json.loads(q.stdout.strip().splitlines()[-1])
    assert (got["status"], got["doc"]) == ("error", "error"), q.stderr
    assert got["errors"][0].startswith("fusion %wrapped_tanh: plugin ") and plugin in got["errors"][0]
    assert ["wrapped_tanh", "error", plugin] in got["rows"]


def test_a_kernel_that_does_not_compile_for_sm90_exits_2_naming_plugin_and_file(plugin_venv):
    p = fusegen_in(plugin_venv, "run", str(EXAMPLE), "--json", "--jobs", "1",
                   env={"FUSEGEN_LOAD_PLUGINS": "rt_compile_fails"})
    assert p.returncode == 2, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if ln.startswith("fusegen: error: ")]
    assert line.startswith(f"fusegen: error: {EXAMPLE}: fusion %wrapped_tanh: plugin 'rt_compile_fails', "
                           "CompileFailsFusion.emit: kernel neg_kernel (")
    assert ".py) did not compile for sm_90: failed" in line and "Unsupported function referenced" in line
    rows = {f["name"]: f for f in json.loads(p.stdout)["fusions"]}
    assert (rows["wrapped_tanh"]["status"], rows["wrapped_tanh"]["plugin"]) == ("error", "rt_compile_fails")
    assert rows["input_multiply_reduce_fusion"]["status"] == "ok"


def test_explain_exits_2_on_a_matcher_typo(plugin_venv):
    p = fusegen_in(plugin_venv, "explain", str(EXAMPLE), env={"FUSEGEN_LOAD_PLUGINS": "rt_typo"})
    assert p.returncode == 2 and "'kLooop'" in p.stderr and "wrapped_tanh" in p.stdout


def test_pipeline_passes_change_explain_and_run(plugin_venv, tmp_path):
    hlo = corpus_path("jax", "gelu_matmul.pre.hlo")
    log = tmp_path / "probe.jsonl"
    cfg = _toml(tmp_path / "cfg" / "fusegen.toml", f"""
        [pipeline]
        passes = ["probe-pass", "dot-decomposer", "fusion"]

        [pipeline.options.probe-pass]
        tag = "from the file"

        [plugins.probe]
        log = "{log}"
    """)

    def explain(*extra):
        p = fusegen_in(plugin_venv, "explain", str(hlo), "--json", *extra, dists="fusegen-test-probe", cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        d = json.loads(p.stdout)
        return d["passes"], sorted(f["kind"] for f in d["fusions"])

    assert explain() == (["dot-decomposer", "gemm-fusion", "gemm-rewriter", "fusion"], ["kLoop", "kTriton"])
    assert explain("--config", str(cfg)) == (["probe-pass", "dot-decomposer", "fusion"], ["kLoop"])
    assert explain("--config", str(cfg), "--passes", "dot-decomposer,gemm-fusion,fusion") == \
        (["dot-decomposer", "gemm-fusion", "fusion"], ["kLoop", "kTriton"])  # the command line beats the file
    p = fusegen_in(plugin_venv, "run", str(hlo), "--no-compile", "--json", "--config", str(cfg),
                   dists="fusegen-test-probe", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert [f["kind"] for f in d["fusions"]] == ["kLoop"] and d["non_fusion_instructions"][0]["opcode"] == "dot"
    passes = [json.loads(ln) for ln in log.read_text().splitlines() if '"pass"' in ln]
    assert [e["options"] for e in passes] == [{"tag": "from the file"}] * 2  # explain and run with the file
    # [pipeline.options.<pass>] is checked against what the pass declares
    bad = _toml(tmp_path / "bad.toml", '[pipeline.options.probe-pass]\ntagg = "x"\n')
    p = fusegen_in(plugin_venv, "run", str(hlo), "--config", str(bad), dists="fusegen-test-probe")
    assert p.returncode == 2 and f"{bad}:2: unknown key 'tagg' in [pipeline.options.probe-pass]; did you mean " \
                                 "'tag'?" in p.stderr
    p = fusegen_in(plugin_venv, "explain", str(hlo), "--passes", "dot-decomposer,fusoin")
    assert p.returncode == 2 and "unknown pass 'fusoin'" in p.stderr


PROBE_HLO = """HloModule probe
ENTRY e {
  p = f32[8,16] parameter(0)
  q = f32[16,4] parameter(1)
  n = f32[8,16] negate(p)
  ROOT d = f32[8,4] dot(n, q), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def test_every_plugin_callable_gets_its_settings_from_config_file(plugin_venv, tmp_path):
    hlo = tmp_path / "probe.hlo"
    hlo.write_text(PROBE_HLO)
    log = tmp_path / "probe.jsonl"
    cfg = _toml(tmp_path / "elsewhere" / "settings.toml", f"""
        [pipeline]
        passes = ["probe-pass", "fusion"]

        [plugins.probe]
        log = "{log}"
        min_elements = 10
    """)
    work = tmp_path / "work"
    work.mkdir()  # no fusegen.toml here: only --config FILE says it
    p = fusegen_in(plugin_venv, "run", str(hlo), "--no-compile", "--json", "--device", "h100", "--config", str(cfg),
                   dists="fusegen-test-probe", cwd=work)
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert (d["fusions"][0]["emitter"], d["fusions"][0]["plugin"]) == ("ProbeLoopFusion", "probe")
    assert d["non_fusion_instructions"] == [{"name": "d", "opcode": "dot", "backend": "probe-dot"}]
    code = ("import sys; from fusegen.cli.config import resolve_config; from fusegen.autotuning.options import "
            "discover_backends; resolve_config(sys.argv[1], ()); "
            "[b.get_supported_configs(None) for b in discover_backends() if b.name == 'probe-codegen']")
    import subprocess

    env = {"FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen,fusegen-test-probe"}
    subprocess.run([str(plugin_venv), "-c", code, str(cfg)], check=True, cwd=work, env={**__import__("os").environ,
                                                                                        **env})
    seen = [json.loads(ln) for ln in log.read_text().splitlines()]
    assert {e["callable"] for e in seen} == {"matcher", "factory", "pass", "execution backend", "codegen backend"}
    for e in seen:
        assert e["plugin"] == "probe" and e["settings"] == {"log": str(log), "min_elements": 10}, e
        if e["callable"] != "codegen backend":  # run with --device h100; the library call named none
            assert e["device"] == "h100", e
    # the factory reads min_elements: above the fusion's 128 elements it declines, fusegen's loop emitter serves it
    _toml(cfg, cfg.read_text().replace("min_elements = 10", "min_elements = 200"))
    p = fusegen_in(plugin_venv, "explain", str(hlo), "--json", "--config", str(cfg), dists="fusegen-test-probe",
                   cwd=work)
    f = json.loads(p.stdout)["fusions"][0]
    assert (f["emitter"], f["plugin"]) == ("LoopFusion", "loop")


def test_config_show_prints_list_values_as_written(plugin_venv, tmp_path):
    _toml(tmp_path / "fusegen.toml", '[plugins]\ndisable = ["loop", "memcpy"]\n[pipeline]\npasses = ["fusion"]\n')
    p = fusegen_in(plugin_venv, "config", "show", cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    rows = {ln.split("│")[1].strip(): ln.split("│")[2].strip() for ln in p.stdout.splitlines() if ln.count("│") >= 4}
    assert rows["plugins.disable"] == "[loop, memcpy]" and rows["pipeline.passes"] == "[fusion]"


def test_the_pipeline_of_the_file_holds_for_tune_and_report_too(plugin_venv, tmp_path):
    hlo = corpus_path("jax", "gelu_matmul.pre.hlo")
    _toml(tmp_path / "fusegen.toml", '[pipeline]\npasses = ["dot-decomposer", "fusion"]\n')

    def tuned(*extra):
        p = fusegen_in(plugin_venv, "tune", str(hlo), "--json", "--level", "0", "--workers", "0", *extra, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        return [i["name"] for i in json.loads(p.stdout)["instructions"]]

    assert tuned() == []  # no gemm-fusion in the file's pipeline: nothing to tune
    assert tuned("--passes", "dot-decomposer,gemm-fusion,fusion") == ["gemm_fusion_dot_general.1"]
    data = tmp_path / "report.json"
    p = fusegen_in(plugin_venv, "report", str(hlo), "--no-compile", "-o", str(tmp_path / "r.html"), "--json-data",
                   str(data), cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    assert [f["kind"] for m in json.loads(data.read_text())["modules"] for f in m["fusions"]] == ["kLoop"]
    # and a plugin failing on a fusion fails `report` as it fails `run` (the page is written all the same)
    p = fusegen_in(plugin_venv, "report", str(EXAMPLE), "--no-compile", "-o", str(tmp_path / "e.html"),
                   env={"FUSEGEN_LOAD_PLUGINS": "rt_emit_raises"})
    assert p.returncode == 2 and (tmp_path / "e.html").exists()
    assert "fusion %wrapped_tanh: plugin 'rt_emit_raises' RaisingFusion.emit" in p.stderr


REPLACES_NOSUCH = '''from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters.loop import LoopFusion


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="my_loop", kind="kLoop", rank=1, replaces={target!r},
                           create=lambda a, c=None: LoopFusion(a))]
'''


def test_replacing_a_name_nobody_registered_and_one_name_from_two_distributions_are_refused(tmp_path):
    from venv_plugins import PluginVenv, write_project

    venv = PluginVenv(tmp_path / "venv")
    for dist, mod, target in (("replaces-typo", "rep_typo", "lop"), ("same-name-a", "same_a", "my_loop"),
                              ("same-name-b", "same_b", "my_loop")):
        ep = "rep_typo" if mod == "rep_typo" else "same_name"
        venv.install(write_project(tmp_path / dist, dist, {mod: REPLACES_NOSUCH.format(target=target)},
                                   {"fusegen.emitters": {ep: mod}}))
    env = {"FUSEGEN_DISABLE_PLUGIN_AUTOLOAD": "0", "FUSEGEN_LOAD_PLUGINS": "", "FUSEGEN_STRICT_PLUGINS": "",
           "FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen,replaces-typo,same-name-a,same-name-b"}
    p = venv.run("-m", "fusegen.cli", "plugins", "--json", cwd=tmp_path, env=env)
    broken = {b["name"]: b for b in json.loads(p.stdout)["plugins"] if b["status"] == "broken"}
    assert broken["rep_typo"]["reason"] == ("emitter factory 'my_loop' says replaces='lop', but no plugin registers "
                                            "a emitter factory 'lop'; did you mean 'loop'?"), broken
    assert "plugin name 'same_name' is also an entry point of distribution(s) same-name-" in broken["same_name"]["reason"]
    assert not [i for i in json.loads(p.stdout)["plugins"] if i["name"] == "same_name" and i["status"] == "loaded"]
    p = venv.run("-m", "fusegen.cli", "explain", str(EXAMPLE), cwd=tmp_path, env=env)  # the rest still runs
    assert p.returncode == 0 and "LoopFusion" in p.stdout, p.stderr


SAME_NAME_REPLACEMENT = '''from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters.loop import LoopFusion

FUSEGEN_REPLACES = "loop"


class EltFusion(LoopFusion):
    name = "EltFusion"


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="loop", kind="kLoop", rank=1000, create=lambda a, c=None: EltFusion(a))]
'''


def test_a_plugin_replacing_loop_under_its_name_is_shown_with_its_distribution(tmp_path):
    from venv_plugins import PluginVenv, write_project

    venv = PluginVenv(tmp_path / "venv")
    venv.install(write_project(tmp_path / "elt", "elt-loop", {"elt_loop": SAME_NAME_REPLACEMENT},
                               {"fusegen.emitters": {"loop": "elt_loop"}}))
    p = venv.run("-m", "fusegen.cli", "explain", str(EXAMPLE), cwd=tmp_path,
                 env={"FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen,elt-loop", "FUSEGEN_DISABLE_PLUGIN_AUTOLOAD": "0"})
    assert p.returncode == 0, p.stderr
    assert "(loop from elt-loop)" in p.stdout, p.stdout
