"""``fusegen report``: the report's data (fusions, dispatch path, graph, tuning) and the command's errors.

The page itself, opened in headless Chromium, is checked by ``test_report_browser.py``. Here: the tuning
section replays XLA's own clustering case (``config_runner__UntrustedVotesForTrustedCluster.json``) and must
list the same WRONG_RESULTS as XLA; the tie-break sentence appears exactly when PickBestConfig moved the
choice; every fusion of a while-loop module is a graph node inside the body cluster; the fusions and
their kinds are those ``fusegen explain`` gives; the sm_90 compile reports the registers ptxas reports;
with no Graphviz on ``PATH`` the page still holds every fusion in its graph (DOT text the page's vendored
Graphviz-in-WebAssembly lays out; ``test_report_browser.py`` checks that it draws), edges sized in bytes.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import CORPUS, corpus_path
from tuning_cases import _outputs_for

pytest.importorskip("jinja2", reason="fusegen report needs jinja2 (a base dependency; reinstall fusegen)")


def _fusegen(*args: str, cwd: Path | None = None, path: str | None = None) -> subprocess.CompletedProcess:
    """``fusegen ARGS`` in a subprocess; ``path``: its whole ``PATH`` (a folder without Graphviz's ``dot``)."""
    env = dict(os.environ)
    env.pop("XLA_FLAGS", None)
    if path is not None:
        env["PATH"] = path
    return subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True, env=env,
                          timeout=600, cwd=cwd)


def page_graphs(html: str) -> list[dict]:
    """The module graphs a report page embeds: ``[{"dot": DOT text, "search": {html id: text}}]``."""
    m = re.search(r"^  var graphs = (.*);$", html, re.M)
    assert m, "the page embeds no graphs"
    return json.loads(m.group(1))


def dot_nodes(dot: str) -> dict[str, dict[str, str]]:
    """Node statements of DOT text as the ``graphviz`` package writes them: ``{node id: {attribute: value}}``."""
    out = {}
    for line in dot.splitlines():
        m = re.match(r'\t("(?:[^"\\]|\\.)*"|[\w.]+) \[(.*)\]$', line)
        if m and " -> " not in line and m.group(1) not in ("graph", "node", "edge"):  # not the defaults
            out[m.group(1).strip('"')] = dict((k, v.strip('"')) for k, v in
                                              re.findall(r'(\w+)=("(?:[^"\\]|\\.)*"|<.*?>(?= \w+=|$)|[^ ]+)', m.group(2)))
    return out


# -- tuning: replayed records ---------------------------------------------------------------------

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


def test_a_tuning_served_from_the_cache_says_so_instead_of_an_empty_chart():
    from fusegen.report.data import build_report
    from fusegen.report.render import render_html

    measured = {"instruction": "b", "step": "tuned", "error": None, "window_us": 2.0, "winner": "x", "fastest": "x",
                "tie_break": False, "tie_break_sentence": None, "failures": [], "source": "autotune", "cache": "miss",
                "configs": 1, "supported": 1, "duration_us": 3.0, "scratch_bytes": 0,
                "candidates": [{"name": "x", "backend": "triton", "trusted": False, "duration_us": 3.0,
                                "scratch_bytes": 0, "failure": None, "message": "", "cluster": 0, "winner": True,
                                "fastest": True, "in_window": True}]}
    cached = {**measured, "instruction": "a", "step": "cache", "cache": "directory", "candidates": []}
    doc = build_report("m.hlo", "h200", [{"name": "m", "fusions": [], "library_calls": [],
                                          "graph": {"nodes": [], "edges": [], "edge_bytes": [], "clusters": [],
                                                    "hidden_parameters": 0}}],
                       [cached, measured], {"parse": 0.1}, {})
    html = render_html(doc, plotly_js="/* plotly */")
    assert "Nothing measured: the winner came from the autotune cache." in html
    assert 'id="chart-tuning-0"' not in html and 'id="chart-tuning-1"' in html
    assert 'figs["chart-tuning-1"]' in html and 'figs["chart-tuning-0"]' not in html


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
    # a library call the host runs is a fallback too; a module that ran with no fusions still has a status
    lib = {"fusions": [], "status": "ok", "library_calls": [
        {"name": "gemm", "opcode": "custom-call", "target": "__cublas$lt$matmul", "backend": "host"}]}
    s = summary([lib])
    assert s["status"] == "ok" and [h["name"] for h in s["host_fallbacks"]] == ["gemm"]
    assert "__cublas$lt$matmul" in s["host_fallbacks"][0]["reason"]
    # every fusion within tolerance, but the module's outputs drift from the f64 oracle (the verdict)
    assert summary([{"fusions": [f("g", "kLoop", "triton", "ok")], "library_calls": [], "status": "drift"}])["status"] \
        == "drift"


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


def test_graph_outlines_mismatches_and_marks_host_fallbacks():
    from fusegen.report.graph import HOST_COLOR, STATUS_COLORS, render_dot

    def node(name, status, host=False):
        return {"id": f"n_{name}", "name": name, "type": "fusion", "label": "kLoop · LoopFusion", "kind": "kLoop",
                "host": host, "cluster": None, "card": f"card-{name}", "status": status, "tooltip": f"%{name}: {status}"}

    graph = {"nodes": [node("good", "ok"), node("bad", "mismatch"), node("cpu", "ok", host=True)],
             "edges": [["n_good", "n_bad"], ["n_bad", "n_cpu"]], "edge_bytes": [4096, 1 << 22], "clusters": [],
             "hidden_parameters": 0}
    dot = render_dot(graph)
    nodes = dot_nodes(dot)
    assert (nodes["n_bad"]["color"], nodes["n_bad"]["penwidth"]) == (STATUS_COLORS["mismatch"], "4")
    assert nodes["n_cpu"]["color"] == HOST_COLOR and "dashed" in nodes["n_cpu"]["style"]
    assert "color" not in nodes["n_good"] and "penwidth" not in nodes["n_good"]  # the default outline
    assert (nodes["n_bad"]["tooltip"], nodes["n_bad"]["href"], nodes["n_bad"]["id"]) == \
        ("%bad: mismatch", "#card-bad", "gn-card-bad")
    # edges: the module's smallest one thinnest, its largest thickest, each tooltip with its size
    edges = re.findall(r'\t(\S+) -> (\S+) \[.*?color="(#\w+)" penwidth=([\d.]+) tooltip="([^"]*)"', dot)
    assert edges == [("n_good", "n_bad", "#b0b0b6", "0.70", "%good -> %bad: 4 KiB"),
                     ("n_bad", "n_cpu", "#38383e", "5.00", "%bad -> %cpu: 4 MiB")]


def test_edges_carry_the_bytes_of_what_the_consumer_reads():
    """Through a multi-output fusion's get-tuple-elements, a bitcast and the ROOT tuple: each edge the bytes of
    the value it stands for (the shape's element count times its type's size), summed where one consumer
    reads two outputs of the same producer."""
    import ml_dtypes
    import numpy as np

    from fusegen.device import get_device
    from fusegen.hlo.parser import parse_module
    from fusegen.plugin_manager import default_plugin_manager
    from fusegen.report.data import module_entry

    text = """HloModule m

fused_two {
  p = f32[64,32] parameter(0)
  n = f32[64,32] negate(p)
  c = bf16[64,32] convert(p)
  ROOT t = (f32[64,32], bf16[64,32]) tuple(n, c)
}

fused_add {
  a = f32[64,32] parameter(0)
  b = bf16[2048] parameter(1)
  bb = bf16[64,32] bitcast(b)
  cb = f32[64,32] convert(bb)
  ROOT s = f32[64,32] add(a, cb)
}

ENTRY e {
  x = f32[64,32] parameter(0)
  two = (f32[64,32], bf16[64,32]) fusion(x), kind=kLoop, calls=fused_two
  g0 = f32[64,32] get-tuple-element(two), index=0
  g1 = bf16[64,32] get-tuple-element(two), index=1
  flat = bf16[2048] bitcast(g1)
  sum = f32[64,32] fusion(g0, flat), kind=kLoop, calls=fused_add
  ROOT out = (f32[64,32], bf16[64,32]) tuple(sum, g1)
}
"""
    d = module_entry(parse_module(text), get_device("h200"), default_plugin_manager(), compile_kernels=False)
    g = d["graph"]
    sizes = {tuple(e): b for e, b in zip(g["edges"], g["edge_bytes"])}
    f32, bf16 = np.dtype(np.float32).itemsize, np.dtype(ml_dtypes.bfloat16).itemsize
    assert sizes == {("n0_x", "n0_two"): 64 * 32 * f32,
                     ("n0_two", "n0_sum"): 64 * 32 * (f32 + bf16),  # g0 and the bitcast of g1
                     ("n0_sum", "n_ROOT"): 64 * 32 * f32,
                     ("n0_two", "n_ROOT"): 64 * 32 * bf16}  # g1 only: the tuple's element, not all of %two


def test_vendored_viz_js_is_the_recorded_npm_file():
    """``core/report/vendor`` (``scripts/update-viz-js`` writes it): the file's sha256 and size are those recorded,
    its header names the recorded version, and the licences it carries are listed."""
    from fusegen.report.graph import viz_js

    vendor = Path(__file__).resolve().parents[2] / "core" / "report" / "vendor"
    meta = json.loads((vendor / "viz-js.json").read_text())
    data = (vendor / "viz-global.js").read_bytes()
    assert hashlib.sha256(data).hexdigest() == meta["sha256"] and len(data) == meta["bytes"]
    assert data[:200].decode().splitlines()[1] == f"Viz.js {meta['version']}"
    assert f'graphvizVersion="{meta["graphviz"]}"' in data.decode()
    text, loaded = viz_js()
    assert loaded == meta and text.encode() == data
    licences = (vendor / "LICENSES.txt").read_text()
    assert all(x in licences for x in ("Michael Daines", "Eclipse Public License - v 1.0", "Expat"))


def test_a_damaged_vendored_viz_js_is_named(tmp_path, monkeypatch):
    from fusegen.report import graph

    vendor = Path(graph.__file__).parent / "vendor"
    (tmp_path / "vendor").mkdir()
    (tmp_path / "vendor" / "viz-js.json").write_text((vendor / "viz-js.json").read_text())
    (tmp_path / "vendor" / "viz-global.js").write_bytes((vendor / "viz-global.js").read_bytes()[:-10])
    monkeypatch.setattr(graph.resources, "files", lambda package: tmp_path)
    graph.viz_js.cache_clear()
    try:
        with pytest.raises(graph.VendorError, match="viz-global.js: sha256 differs from viz-js.json"):
            graph.viz_js()
        (tmp_path / "vendor" / "viz-global.js").unlink()
        with pytest.raises(graph.VendorError, match="cannot read the vendored Viz.js"):
            graph.viz_js()
    finally:
        graph.viz_js.cache_clear()


def test_the_page_of_a_while_loop_needs_no_graphviz(monkeypatch):
    """In-process with ``PATH`` empty: a while loop's body and condition are clusters in the page's DOT, the
    fusion inside the body a node in its cluster with its card link (the browser tests lay such pages out)."""
    from fusegen.device import get_device
    from fusegen.hlo.parser import parse_file
    from fusegen.plugin_manager import default_plugin_manager
    from fusegen.report.data import build_report, module_entry
    from fusegen.report.render import render_html

    monkeypatch.setenv("PATH", "")
    m = parse_file(corpus_path("xla", "cases", "custom__TupleOutputTwoDUS.hlo"))
    entry = module_entry(m, get_device("h200"), default_plugin_manager(), compile_kernels=False)
    html = render_html(build_report("w.hlo", "h200", [entry], [], {"parse": 0.1}, {}), plotly_js="/* plotly */")
    (g,) = page_graphs(html)
    clusters = {re.search(r'label="([^"]*)"', text).group(1): text
                for text in re.findall(r"\n\tsubgraph cluster_\d+ \{(.*?)\n\t\}", g["dot"], re.S)}
    assert sorted(clusters) == sorted(c["label"] for c in entry["graph"]["clusters"]) == \
        ["while %while: body %body", "while %while: condition %cond"]
    assert re.search(r'\n\t\tn\d+_fused \[.*href="#card-fused".*id="gn-card-fused"', clusters["while %while: body %body"])
    meta = json.loads((Path(__file__).resolve().parents[2] / "core" / "report" / "vendor" / "viz-js.json").read_text())
    assert 'id="card-fused"' in html and f"Graphviz {meta['graphviz']} (compiled to WebAssembly" in html


@pytest.mark.parametrize("module, flags", [("gpt12.h200_opt.hlo", ["--no-compile"]),
                                           ("gpu_mlp_bf16.default.h100_opt.hlo", ["--autotune", "--no-compile"])],
                         ids=["gpt12", "tuned-mlp"])
def test_report_without_graphviz_on_path_holds_every_fusion_in_its_graph(tmp_path, module, flags):
    """``PATH`` is an empty folder: no ``dot`` (nor anything else) to run; the page must still carry the graph."""
    empty = tmp_path / "bin"
    empty.mkdir()
    out = tmp_path / "r.html"
    p = _fusegen("report", str(corpus_path("jax", module)), "-o", str(out), "--json-data", str(tmp_path / "r.json"),
                 *flags, path=str(empty))
    assert p.returncode == 0, p.stderr[-3000:]
    doc = json.loads((tmp_path / "r.json").read_text())
    html = out.read_text()
    (m,) = doc["modules"]
    (g,) = page_graphs(html)
    nodes = dot_nodes(g["dot"])
    fusions = m["fusions"]
    assert len(fusions) == doc["summary"]["fusions"] > 0
    for f in fusions:  # every fusion a node that links to its card, findable by name
        node = nodes[f"n0_{f['name']}"]
        assert (node["href"], node["id"]) == (f"#{f['card']}", f"gn-{f['card']}")
        assert g["search"][f"gn-{f['card']}"].startswith(f["name"].lower() + " ")
        assert 'class="card' in html.split(f'id="{f["card"]}"')[0][-60:]
    assert len(nodes) == len(m["graph"]["nodes"])
    assert len(re.findall(r"^\t\S+ -> \S+ \[", g["dot"], re.M)) == len(m["graph"]["edges"])
    assert all(b > 0 for b in m["graph"]["edge_bytes"])
    if "--autotune" in flags:
        (t,) = doc["tuning"]
        assert t["instruction"] == "gemm_fusion_dot" and t["winner"]
        # no GPU: every candidate (the Triton configs and the cuBLASLt call, XLA's cuBLAS fallback) is ranked by the
        # H200 model's estimate (none on the host); the fastest wins, or one with less scratch within 2 µs of it
        cands = t["candidates"]
        assert t["figures"]["kind"] == "estimated" and len(cands) > 4
        assert {c["backend"] for c in cands} == {"triton", "cublaslt_fission"}
        assert all(c["duration_us"] > 0 for c in cands)
        fastest = min(c["duration_us"] for c in cands)
        assert t["winner"] in {c["name"] for c in cands if c["duration_us"] <= fastest + 2.0}
        assert 'id="chart-tuning-0"' in html
    else:
        assert len(fusions) == 183
    assert "https://" not in html.split("<script>")[0]  # nothing to fetch


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
    (g,) = page_graphs(html)
    assert set(dot_nodes(g["dot"])) == {n["id"] for n in m["graph"]["nodes"]} and "https://" not in html.split("<script>")[0]


def test_bad_input_is_one_line_exit_2(tmp_path):
    p = _fusegen("report", str(tmp_path / "missing.hlo"))
    assert p.returncode == 2 and p.stderr.strip().count("\n") == 0 and "missing.hlo" in p.stderr
    p = _fusegen("report", str(tmp_path / "missing.hlo"), "--record", str(tmp_path / "nope"))
    assert p.returncode == 2 and "--record" in p.stderr
    p = _fusegen("report", str(tmp_path / "missing.hlo"), "--cost-model-top-k", "2")
    assert p.returncode == 2 and "need --autotune" in p.stderr
    # --run keeps fusegen run's limits: a 2e9-iteration loop is refused before it starts, nothing written
    p = _fusegen("report", str(corpus_path("hostile", "while_huge.hlo")), "--run", "-o", str(tmp_path / "h.html"))
    assert p.returncode == 2 and "2,000,000,000 iterations" in p.stderr and p.stderr.strip().count("\n") == 0
    assert not (tmp_path / "h.html").exists()
