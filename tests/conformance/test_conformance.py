"""The plugin conformance suite (``pytest -p fusegen.conformance --fusegen-plugin NAME``).

* every built-in plugin, and the example ``input_slices`` plugin when installed, passes it, run from an
  empty directory (the suite brings its own tests) with a JSON report;
* a deliberately broken copy of the example plugin (wrong output; an over-limit launch), installed as a
  fake distribution with an entry point, fails it with messages naming the failing check;
* xfail files (stale ids warned about), tolerance overrides, capability validation, and the
  ``fusegen_conformance_capabilities`` hook.
"""

from __future__ import annotations

import importlib.metadata as md
import json
import re
from pathlib import Path

import pytest

from fusegen.conformance import parse_tolerance
from fusegen.conformance.target import CapabilityError, PluginNotFound, Target, parse_capabilities
from fusegen.plugin_manager import PluginManager, hookimpl
from fusegen.registry import EmitterFactory

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "input-slices-plugin"
CORPUS = REPO.parent / "shared" / "corpus"
BUILTINS = ["loop", "memcpy", "in_place_dus", "reduction", "transpose", "concatenate", "scatter", "sort",
            "host", "triton", "cublaslt", "cudnn", "custom_fusion"]
INSTALL_EXAMPLE = f"pip install -e {EXAMPLE.relative_to(REPO)}"


def _installed(name: str) -> bool:
    return any(ep.name == name for g in ("fusegen.emitters", "fusegen.backends", "fusegen.plugins")
               for ep in md.entry_points(group=g))


def _run_suite(pytester, *args: str):
    return pytester.runpytest_subprocess("-p", "fusegen.conformance", "-p", "no:cacheprovider", *args)


@pytest.mark.parametrize("name", BUILTINS + ["input_slices"])
def test_plugin_passes_the_suite_from_an_empty_directory(pytester, name):
    if name == "input_slices" and not _installed(name):
        pytest.skip(f"example plugin not installed (CI runs: {INSTALL_EXAMPLE})")
    report = pytester.path / "report.json"
    # the Triton backend's configs run in the interpreter (seconds each): 4 of them keep CI time modest
    res = _run_suite(pytester, "--fusegen-plugin", name, "--fusegen-report", str(report), "-q",
                     "--fusegen-max-configs", "4")
    assert res.ret == 0, res.stdout.str()[-3000:]
    data = json.loads(report.read_text())
    assert data["suite_version"] and data["plugin"]["name"] == name
    assert data["plugin"]["version"] == (md.version("fusegen-input-slices") if name == "input_slices" else "0.1.0")
    assert data["device"]["compile_target"] == "sm_90" and "cpu-interpreter" in data["device"]["available"]
    outcomes = {r["outcome"] for r in data["results"]}
    assert "failed" not in outcomes and "error" not in outcomes
    assert data["summary"].get("passed", 0) >= 2  # at least the capability and declaration checks ran
    if name == "triton" and CORPUS.exists():  # its gemm-fusion pass and every-config checks ran
        ran = {r["test"].split("[")[0]: r for r in data["results"] if r["outcome"] == "passed"}
        assert {"test_pass_declared", "test_pass_rewrites_corpus", "test_codegen_results_within_tolerance"} <= set(ran)
        assert re.fullmatch(r"4 of \d+", next(r["configs_checked"] for r in data["results"] if "configs_checked" in r))
    if name in ("loop", "reduction", "transpose", "in_place_dus", "scatter", "input_slices") and CORPUS.exists():
        ran = {r["test"].split("[")[0] for r in data["results"] if r["outcome"] == "passed"}
        assert {"test_corpus_output", "test_compiles_sm90", "test_launch_within_limits",
                "test_deterministic_source", "test_generated_output"} <= ran, ran


@pytest.mark.third_party_plugins
@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")
def test_example_plugin_changes_the_kind_of_the_input_slices_cases():
    if not _installed("input_slices"):
        pytest.skip(f"example plugin not installed (CI runs: {INSTALL_EXAMPLE})")
    from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
    from fusegen.dispatch import get_emitter_fusion_kind
    from fusegen.hlo.parser import parse_module

    pm = PluginManager()
    assert [(m.name, m.rank) for m in pm.kind_matchers() if m.plugin == "input_slices"] == [("input-slices", 250)]
    for case in sorted((CORPUS / "xla" / "cases").glob("hist2025__input_slices__*.hlo")):
        f = entry_fusion(parse_module(case.read_text(), str(case)))
        d = get_emitter_fusion_kind(FusionAnalysis.create(f), pm)
        assert (d.kind, d.decided_by, d.plugin) == ("kInputSlices", "input-slices", "input_slices"), case.name
        # without the plugin, XLA's current rule (several roots) makes them kLoop
        d0 = get_emitter_fusion_kind(FusionAnalysis.create(f), PluginManager(autoload=False))
        assert (d0.kind, d0.decided_by) == ("kLoop", "several-roots")


BROKEN_TAIL = '''

# ---- deliberately broken copy (tests/conformance/test_conformance.py) ----
import os as _os
import re as _re

import attrs as _attrs

_good_emit = InputSlicesFusion.emit


def _broken_emit(self):
    e = _good_emit(self)
    kernels = []
    for k in e.kernels:
        if _os.environ["BROKEN_MODE"] == "wrong-output":
            k = _attrs.evolve(k, source=_re.sub(r"tl\\.store\\((.+?), (\\w+), mask=", r"tl.store(\\1, \\2 + 1, mask=",
                                                k.source))
        else:  # 64 warps = 2048 threads per block, over the 1024 limit
            k = _attrs.evolve(k, launch=_attrs.evolve(k.launch, num_warps=64))
        kernels.append(k)
    return _attrs.evolve(e, kernels=tuple(kernels))


InputSlicesFusion.emit = _broken_emit
FUSEGEN_CONFORMANCE = {"kinds": ["kInputSlices"], "dtypes": ["f32"], "devices": ["cpu-interpreter", "sm_90"]}
'''


def _install_broken_copy(pytester, monkeypatch, mode: str) -> None:
    """Write a broken copy of the example plugin plus a ``.dist-info`` with its entry point into the test dir."""
    src = (EXAMPLE / "fusegen_input_slices.py").read_text()
    src = src.replace("@hookimpl\ndef fusegen_conformance_capabilities():", "def _unused_capabilities():")
    (pytester.path / "broken_slices.py").write_text(src + BROKEN_TAIL)
    dist = pytester.path / "broken_slices-0.0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-slices\nVersion: 0.0.1\n")
    (dist / "entry_points.txt").write_text("[fusegen.emitters]\nbroken_slices = broken_slices\n")
    monkeypatch.setenv("PYTHONPATH", str(pytester.path))
    monkeypatch.setenv("BROKEN_MODE", mode)
    # only the broken copy (and core's matchers): the real example plugin, if installed, would win the tie
    monkeypatch.setenv("FUSEGEN_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("FUSEGEN_LOAD_PLUGINS", "broken_slices")


@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")
def test_broken_copy_with_wrong_output_fails_naming_the_check(pytester, monkeypatch):
    _install_broken_copy(pytester, monkeypatch, "wrong-output")
    report = pytester.path / "broken.json"
    res = _run_suite(pytester, "--fusegen-plugin", "broken_slices", "--fusegen-report", str(report), "-q",
                     "--fusegen-max-examples", "3")
    assert res.ret == 1
    out = res.stdout.str()
    assert "[output-matches-evaluator] plugin 'broken_slices', fusion %fusion: output" in out
    assert "differs from the reference evaluator" in out
    data = json.loads(report.read_text())
    failed = {r["test"] for r in data["results"] if r["outcome"] == "failed"}
    assert failed == {"test_corpus_output[hist2025__input_slices__simple:fusion]",
                      "test_corpus_output[hist2025__input_slices__zero_slice:fusion]",
                      "test_generated_output[kInputSlices]"}, failed
    assert {r["check"] for r in data["results"] if r["outcome"] == "failed"} == {"output-matches-evaluator"}
    assert data["plugin"] == {"name": "broken_slices", "version": "0.0.1", "distribution": "broken-slices",
                              "module": "broken_slices", "group": "fusegen.emitters"}
    passed = {r["test"].split("[")[0] for r in data["results"] if r["outcome"] == "passed"}
    assert {"test_launch_within_limits", "test_compiles_sm90", "test_matcher_claims_corpus"} <= passed


@pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")
def test_broken_copy_with_over_limit_launch_fails_naming_the_check(pytester, monkeypatch):
    _install_broken_copy(pytester, monkeypatch, "over-limit")
    report = pytester.path / "broken.json"
    res = _run_suite(pytester, "--fusegen-plugin", "broken_slices", "--fusegen-report", str(report), "-q",
                     "--fusegen-max-examples", "3")
    assert res.ret == 1
    out = res.stdout.str()
    assert ("[launch-within-limits] plugin 'broken_slices', fusion %fusion on h200: kernel input_slices_fusion: "
            "num_warps=64 gives 2048 threads per block, limit 1024") in out
    data = json.loads(report.read_text())
    by_test = {r["test"]: r for r in data["results"]}
    for case in ("hist2025__input_slices__simple:fusion", "hist2025__input_slices__zero_slice:fusion"):
        r = by_test[f"test_launch_within_limits[{case}]"]
        assert r["outcome"] == "failed" and r["check"] == "launch-within-limits"
        assert by_test[f"test_deterministic_source[{case}]"]["outcome"] == "passed"


def test_xfail_file_marks_tests_and_warns_about_stale_ids(pytester):
    xf = pytester.path / "xfails.txt"
    xf.write_text("# known problems\ntest_declares_capabilities[all]\ntest_that_does_not_exist  # stale\n")
    report = pytester.path / "r.json"
    res = _run_suite(pytester, "--fusegen-plugin", "host", "--fusegen-xfail", str(xf),
                     "--fusegen-report", str(report), "-q")
    assert res.ret == 0
    out = res.stdout.str()
    assert "stale xfail id 'test_that_does_not_exist'" in out
    data = json.loads(report.read_text())
    assert data["stale_xfail_ids"] == ["test_that_does_not_exist"]
    # the listed check passes for host: reported as an unexpected pass, not hidden
    r = next(r for r in data["results"] if r["test"] == "test_declares_capabilities[all]")
    assert r["outcome"] == "xpassed" and xf.name in r["message"]


def test_xfailed_check_is_reported_as_xfailed(pytester, monkeypatch):
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    _install_broken_copy(pytester, monkeypatch, "over-limit")
    xf = pytester.path / "xfails.txt"
    xf.write_text("test_launch_within_limits\ntest_corpus_output\ntest_compiles_sm90\ntest_generated_output\n")
    report = pytester.path / "r.json"
    res = _run_suite(pytester, "--fusegen-plugin", "broken_slices", "--fusegen-xfail", str(xf),
                     "--fusegen-report", str(report), "-q", "--fusegen-max-examples", "2")
    assert res.ret == 0, res.stdout.str()[-2000:]
    data = json.loads(report.read_text())
    by_test = {r["test"]: r["outcome"] for r in data["results"]}
    assert by_test["test_launch_within_limits[hist2025__input_slices__simple:fusion]"] == "xfailed"
    assert not data["stale_xfail_ids"]


def test_unknown_plugin_is_a_usage_error_naming_the_installed_ones(pytester):
    res = _run_suite(pytester, "--fusegen-plugin", "looop")
    assert res.ret == 4  # pytest's usage-error exit code
    err = res.stderr.str()
    assert "fusegen plugin 'looop' is not installed; did you mean 'loop'?" in err
    assert "installed: " in err and "reduction" in err


def test_tolerance_option_parses_and_bad_specs_are_usage_errors():
    assert parse_tolerance("test_corpus_output*=rtol:1e-3,atol:2e-5") == ("test_corpus_output*",
                                                                          {"rtol": 1e-3, "atol": 2e-5})
    with pytest.raises(pytest.UsageError, match="unknown key 'tol'"):
        parse_tolerance("x=tol:1")
    with pytest.raises(pytest.UsageError, match="expected PATTERN=rtol:X,atol:Y"):
        parse_tolerance("rtol:1")


def test_tolerance_override_beats_the_declared_one():
    t = Target("reduction")
    assert t.tolerance_for("test_corpus_output[x]") == {"rtol": 1e-4, "atol": 1e-4}  # built-in table, pattern "*"
    over = {"test_corpus_output*": {"rtol": 0.5, "atol": 0.0}}
    assert t.tolerance_for("test_corpus_output[x]", over) == {"rtol": 0.5, "atol": 0.0}
    assert Target("loop").tolerance_for("test_corpus_output[x]") is None


def test_loose_tolerance_on_the_command_line_lets_a_wrong_output_pass(pytester, monkeypatch):
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    _install_broken_copy(pytester, monkeypatch, "wrong-output")  # stores value + 1
    res = _run_suite(pytester, "--fusegen-plugin", "broken_slices", "-q", "-k", "test_corpus_output",
                     "--fusegen-tolerance", "test_corpus_output*=rtol:0,atol:1.5")
    res.assert_outcomes(passed=2, deselected=23)


def test_capabilities_are_validated_naming_the_plugin_and_key():
    with pytest.raises(CapabilityError, match="plugin 'p': unknown capability key 'kind'"):
        parse_capabilities("p", {"kind": ["kLoop"]}, "hook")
    with pytest.raises(CapabilityError, match="plugin 'p': unknown device 'sm90'"):
        parse_capabilities("p", {"devices": ["sm90"]}, "hook")
    with pytest.raises(CapabilityError, match="capability 'dtypes' must be a list of strings"):
        parse_capabilities("p", {"dtypes": "f32"}, "hook")
    with pytest.raises(CapabilityError, match="tolerance for '\\*' must be"):
        parse_capabilities("p", {"tolerances": {"*": {"rtol": "big"}}}, "hook")
    c = parse_capabilities("p", {"kinds": ["kLoop"]}, "hook")
    assert c.dtypes == ("f32",) and c.devices == ("cpu-interpreter", "sm_90")


class _Declares:
    """A plugin answering fusegen_conformance_capabilities (and a factory of a kind it declares)."""

    @hookimpl
    def fusegen_emitter_factories(self):
        return [EmitterFactory(name="nothing", kind="kLoop", rank=5, create=lambda a, c=None: None)]

    @hookimpl
    def fusegen_conformance_capabilities(self):
        return {"kinds": ["kLoop"], "dtypes": ["f16"], "devices": ["sm_90"], "generators": {"kLoop": "copy"}}


def test_hook_fusegen_conformance_capabilities_is_asked_of_the_plugin_under_test_only():
    pm = PluginManager(autoload=False, extra_plugins=[("declares", _Declares())])
    t = Target("declares", pm)
    caps = t.capabilities
    assert (caps.kinds, caps.dtypes, caps.devices, caps.source) == (
        ("kLoop",), ("f16",), ("sm_90",), "hook fusegen_conformance_capabilities")
    assert [f.name for f in t.factories] == ["nothing"]
    # built-ins declare nothing through the hook: their table entry applies
    assert Target("loop").capabilities.source == "built-in table"
    with pytest.raises(PluginNotFound, match="'nope' is not installed"):
        Target("nope", pm)
