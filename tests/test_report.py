"""``fusegen report``: the report's data (fusions, dispatch path, graph, tuning) and the command's errors.

The page itself, opened in headless Chromium, is checked by ``test_report_browser.py``. Here: the tuning
section replays XLA's own clustering case (``config_runner__UntrustedVotesForTrustedCluster.json``) and must
list the same WRONG_RESULTS as XLA; the tie-break sentence appears exactly when PickBestConfig moved the
choice; every fusion of a while-loop module is a graph node inside the body cluster; the fusions and
their kinds are those ``fusegen explain`` gives; the sm_90 compile reports the registers ptxas reports.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CORPUS, corpus_path

pytest.importorskip("jinja2", reason="fusegen report needs jinja2 (a base dependency; reinstall fusegen)")
NO_DOT = shutil.which("dot") is None
needs_dot = pytest.mark.skipif(NO_DOT, reason="graphviz's `dot` is not installed (Debian: apt-get install graphviz; "
                                              "make test installs it when run as root)")


def _fusegen(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    return subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=cwd)


# -- tuning: replayed records ---------------------------------------------------------------------

def _outputs_for(case: dict) -> dict[str, list[float]]:
    """Outputs that reproduce the case's compare results: ``match(x vs y)`` pairs share an output."""
    short = {"a": "trusted_a", "b": "trusted_b", "ub": "untrusted_matches_b", "un": "untrusted_matches_none"}
    out = {c["n"]: [float(i)] for i, c in enumerate(case["cands"])}
    for r in case["compare_results"]:
        if r.startswith("match("):
            x, y = r[len("match("):-1].split(" vs ")
            out[short[x]] = out[short[y]]
    return out


def test_tuning_from_a_record_lists_the_wrong_results_xla_lists(tmp_path):
    from fusegen.report.tuning import from_record_dir

    case = json.loads(corpus_path("xla", "cases", "config_runner__UntrustedVotesForTrustedCluster.json").read_text())
    outs = _outputs_for(case)
    rec = {"instruction": "gemm", "window_us": 2, "rtol": 0.1, "check_correctness": case["check"],
           "candidates": [{"name": c["n"], "backend": "triton", "trusted": c["trusted"],
                           "duration_us": c["dur_s"] * 1e6, "scratch_bytes": 0, "failure": None,
                           "output": outs[c["n"]]} for c in case["cands"]]}
    (tmp_path / "gemm.0.json").write_text(json.dumps(rec))
    (entry,) = from_record_dir(tmp_path)
    expected = [None if f is None else "WRONG_RESULTS" for f in case["expected_failures"]]
    assert [c["failure"] for c in entry["candidates"]] == expected
    assert [f["name"] for f in entry["failures"]] == [c["n"] for c, e in zip(case["cands"], expected) if e]
    # the winning cluster holds trusted_b and the untrusted config that matched it; the fastest of them wins
    assert entry["winner"] == "untrusted_matches_b" and entry["fastest"] == "untrusted_matches_b"
    by_name = {c["name"]: c for c in entry["candidates"]}
    assert by_name["trusted_b"]["cluster"] == by_name["untrusted_matches_b"]["cluster"] >= 0
    assert entry["tie_break"] is False and entry["tie_break_sentence"] is None


def test_tie_break_sentence_names_both_configs(tmp_path):
    from fusegen.report.tuning import from_record_dir

    cands = [("fast_more_scratch", 10.0, 4096), ("close_less_scratch", 11.5, 0), ("slow_no_scratch", 12.5, 0)]
    rec = {"window_us": 2, "check_correctness": False,
           "candidates": [{"name": n, "backend": "triton", "duration_us": d, "scratch_bytes": s} for n, d, s in cands]}
    (tmp_path / "dot.1.json").write_text(json.dumps(rec))
    (entry,) = from_record_dir(tmp_path)
    assert entry["instruction"] == "dot"
    assert (entry["winner"], entry["fastest"], entry["tie_break"]) == ("close_less_scratch", "fast_more_scratch", True)
    assert entry["tie_break_sentence"] == (
        "PickBestConfig: chose close_less_scratch (11.500 us, 0 scratch bytes) over fastest fast_more_scratch "
        "(10.000 us, 4096 scratch bytes): fewer scratch bytes within the 2 us window")
    assert [c["in_window"] for c in entry["candidates"]] == [True, True, False]


def test_record_dir_errors_name_the_file(tmp_path):
    from fusegen.autotuning.replay import RecordError
    from fusegen.report.tuning import from_record_dir

    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(RecordError, match="bad.json: not valid JSON"):
        from_record_dir(tmp_path)


# -- data: dispatch path, graph, compile --------------------------------------------------------

def test_dispatch_path_marks_passed_answered_and_not_asked():
    from fusegen.plugin_manager import default_plugin_manager
    from fusegen.report.data import dispatch_path

    matchers = default_plugin_manager().kind_matchers()
    path = dispatch_path(matchers, "loop", "kLoop")
    assert [q["matcher"] for q in path] == [m.name for m in matchers]
    k = [q["matcher"] for q in path].index("loop")
    assert [q["state"] for q in path] == ["passed"] * k + ["answered"] + ["not asked"] * (len(path) - k - 1)
    assert path[k]["answer"] == "kLoop" and all(q["answer"] is None for i, q in enumerate(path) if i != k)


def test_summary_counts_and_status():
    from fusegen.report.data import summary

    def f(name, kind, backend, status, reason=""):
        return {"name": name, "kind": kind, "emitter": "E", "backend": backend, "status": status, "reason": reason,
                "host": backend == "host"}

    mod = {"fusions": [f("a", "kLoop", "triton", "ok"), f("b", "kLoop", "host", "ok", "no emitter for kLoop"),
                       f("c", "kTriton", "triton", "drift")],
           "library_calls": [{"opcode": "custom-call"}, {"opcode": "add"}]}
    s = summary([mod])
    assert (s["fusions"], s["library_calls"], s["other_instructions"]) == (3, 1, 1)
    assert s["by_kind"] == {"kLoop": 2, "kTriton": 1} and s["by_kind_backend"] == {"kLoop": {"triton": 1, "host": 1},
                                                                                   "kTriton": {"triton": 1}}
    assert s["host_fallbacks"] == [{"name": "b", "kind": "kLoop", "reason": "no emitter for kLoop", "card": ""}]
    assert s["status"] == "drift"
    mod["fusions"].append(f("d", "kLoop", "triton", "mismatch"))
    assert summary([mod])["status"] == "mismatch"
    assert summary([{"fusions": [f("e", "kLoop", "triton", "pending")], "library_calls": []}])["status"] == "not run"


def test_indexing_maps_come_from_fusegen_indexing_when_present():
    from fusegen.hlo.parser import parse_file
    from fusegen.report.data import computed_indexing_maps

    pytest.importorskip("fusegen.indexing.analysis", reason="the indexing-map feature (fusegen.indexing) is not in "
                                                            "this checkout; the report then shows no maps section")
    m = parse_file(corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo"))
    inst = next(i for i in m.entry.instructions if i.name == "loop_multiply_fusion")
    maps = computed_indexing_maps(inst)
    assert list(maps) == [f"%{o.name} (operand {i})" for i, o in enumerate(inst.operands)]
    # output [256,1024]; operand 0 is the bias b [1024], broadcast along dimension 1
    assert all(v.startswith("(d0, d1)") for v in maps.values())
    assert maps["%b.1 (operand 0)"].startswith("(d0, d1) -> (d1)")


def test_ptxas_verbose_parse():
    from fusegen.report.compile_info import parse_ptxas_verbose

    text = ("ptxas info    : Function properties for k\n    16 bytes stack frame, 8 bytes spill stores, 4 bytes "
            "spill loads\nptxas info    : Used 168 registers, used 1 barriers, 16 bytes cumulative stack size\n")
    assert parse_ptxas_verbose(text) == {"registers": 168, "spill_store_bytes": 8, "spill_load_bytes": 4,
                                         "stack_bytes": 16}
    assert parse_ptxas_verbose("") == {}


def test_while_body_fusion_is_a_node_in_its_cluster_and_a_host_fallback():
    from fusegen.device import get_device
    from fusegen.hlo.parser import parse_file
    from fusegen.plugin_manager import default_plugin_manager
    from fusegen.report.data import module_entry

    m = parse_file(corpus_path("xla", "cases", "custom__TupleOutputTwoDUS.hlo"))
    d = module_entry(m, get_device("h200"), default_plugin_manager(), compile_kernels=False)
    (f,) = d["fusions"]
    assert (f["name"], f["kind"], f["computation"], f["host"]) == ("fused", "kCustomFusion", "body", True)
    assert f["reason"]  # why it runs on the host
    g = d["graph"]
    labels = {c["id"]: c["label"] for c in g["clusters"]}
    assert sorted(labels.values()) == ["while %while: body %body", "while %while: condition %cond"]
    (node,) = [n for n in g["nodes"] if n["name"] == "fused"]
    assert labels[node["cluster"]] == "while %while: body %body" and node["host"]
    ids = {n["id"] for n in g["nodes"]}
    assert len(ids) == len(g["nodes"])  # `param` is in both bodies: node ids stay distinct
    assert all(a in ids and b in ids for a, b in g["edges"])


@needs_dot
def test_json_data_matches_explain_and_reports_the_compile(tmp_path):
    mlp = corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo")
    p = _fusegen("report", str(mlp), "-o", str(tmp_path / "r.html"), "--json-data", str(tmp_path / "r.json"))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    ex = json.loads(_fusegen("explain", str(mlp), "--json").stdout)
    (m,) = doc["modules"]
    assert [(f["name"], f["kind"], f["emitter"], f["backend"]) for f in m["fusions"]] == \
        [(f["name"], f["kind"], f["emitter"], f["backend"]) for f in ex["fusions"]]
    assert doc["summary"]["by_kind"] == {"kTriton": 1, "kLoop": 1} and doc["summary"]["status"] == "not run"
    gemm = json.loads(m["fusions"][0]["backend_config"])  # the tiling XLA chose, as the module carries it
    assert gemm["block_level_fusion_config"]["output_tiles"] == [{"sizes": ["1", "16", "8"]}]
    assert gemm["block_level_fusion_config"]["num_warps"] == "2"
    assert m["fusions"][0]["kernels"][0]["launch_dimensions"]["num_warps"] == 2
    for f in m["fusions"]:
        (k,) = f["kernels"]
        c = k["compile"]
        assert c["status"] == "ok" and 0 < c["registers"] <= 255 and c["spill_store_bytes"] >= 0
        assert k["launch_dimensions"]["grid"] and f"grid={'x'.join(map(str, k['launch_dimensions']['grid']))}" in f["launch"]
        assert "ROOT" in f["hlo"] and "ENTRY" not in f["hlo"]
    html = (tmp_path / "r.html").read_text()
    assert "<svg" in html and "gemm_fusion_dot" in html and "https://" not in html.split("<script>")[0]


@needs_dot
def test_without_dot_the_error_says_what_to_install(tmp_path):
    mlp = corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo")
    env = dict(os.environ, PATH=str(tmp_path))  # no `dot` on this PATH
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", "report", str(mlp), "--no-compile", "-o",
                        str(tmp_path / "r.html")], capture_output=True, text=True, env=env, timeout=600)
    assert p.returncode == 2 and p.stderr.strip() == (
        "fusegen: error: graphviz's `dot` is not installed (Debian: apt-get install graphviz)")
    assert not (tmp_path / "r.html").exists()


def test_bad_input_is_one_line_exit_2(tmp_path):
    p = _fusegen("report", str(tmp_path / "missing.hlo"))
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "missing.hlo" in p.stderr
    p = _fusegen("report", str(tmp_path / "missing.hlo"), "--record", str(tmp_path / "nope"))
    assert p.returncode == 2 and "--record" in p.stderr
    p = _fusegen("report", str(tmp_path / "missing.hlo"), "--cost-model-top-k", "2")
    assert p.returncode == 2 and "need --autotune" in p.stderr
