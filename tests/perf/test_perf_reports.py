"""The estimate where users meet it: explain, run, run --profile, fusegen report and the library.

Every fusion row and library call carries ``estimate`` (labelled ``"estimate"``, with the model version), every
module ``estimated_us``; ``run --profile`` and the report rank fusions by it beside the interpreter seconds. The
library call's estimate is checked against a roofline computed here from its shapes (independently of the model).
"""

from __future__ import annotations

import io
import math
from pathlib import Path

import pytest

import fusegen
from fusegen import perf
from fusegen.perf import gemm_model
from fusegen.device import H200

CORPUS = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "jax"
LAUNCH = CORPUS / "launch"
needs_corpus = pytest.mark.skipif(not LAUNCH.is_dir(), reason="shared/corpus/jax/launch is not present")


@needs_corpus
def test_explain_gives_every_fusion_and_the_module_an_estimate_that_adds_up():
    res = fusegen.explain(LAUNCH / "new_column_reduce.h200_opt.hlo")
    doc = res.to_json()
    assert len(doc["fusions"]) == 6
    for f, plan in zip(doc["fusions"], res.fusions):
        e = f["estimate"]
        assert e["label"] == "estimate" and e["model_version"] == perf.MODEL_VERSION and e["device"] == "h200"
        assert e["us"] > e["kernel_us"] > 0 and e["us"] == pytest.approx(e["kernel_us"] + e["launches"])
        assert plan.estimate == e
    est = res.estimated_us
    assert est["us"] == pytest.approx(sum(f["estimate"]["us"] for f in doc["fusions"]), abs=1e-5)
    assert (est["label"], est["device"], est["unestimated"]) == ("estimate", "h200", 0)
    # the module estimate is what fusegen.perf gives for the planned module
    planned = fusegen.api.estimate_module(fusegen.load(LAUNCH / "new_column_reduce.h200_opt.hlo"))
    assert est["us"] == pytest.approx(planned.us, abs=1e-5)


@needs_corpus
def test_a_cublas_call_gets_the_library_gemm_model():
    path = LAUNCH / "gpu_mlp_bf16.notritongemm.h200_opt.hlo"
    doc = fusegen.explain(path).to_json()
    (call,) = [c for c in doc["library_calls"] if c["target"].startswith("__cublas")]
    m = fusegen.load(path)
    inst = next(i for i in m.entry.instructions if i.name == call["name"])
    lhs, out = inst.operands[0].shape, inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape
    dn = inst.backend_config["gemm_backend_config"]["dot_dimension_numbers"]
    k = math.prod(lhs.dimensions[int(d)] for d in dn["lhs_contracting_dimensions"])
    workspace = inst.shape.tuple_shapes[1]
    assert {o.shape.element_type for o in inst.operands} == {out.element_type} == {"bf16"}
    assert (workspace.element_type, workspace.dimensions) == ("s8", (4194304,))  # cuBLAS's scratch, not traffic
    nbytes = sum(o.shape.numel * 2 for o in inst.operands) + out.numel * 2  # bf16 x, w, bias and the bf16 result
    roof = max(2 * out.numel * k / 989e12, nbytes / 4.8e12)
    e = call["estimate"]
    # the library GEMM model (fusegen.perf.gemm_model): never under the roofline, the workspace never traffic
    assert e["model"] == "library" and e["gemm"]["picked"] == "cublas"
    # above the roofline: a kernel's launch-to-retire floor and its last stores' round trip, then latency and a
    # tile's epilogue
    fixed = (gemm_model.KERNEL_FLOOR_S + gemm_model.DRAM_LATENCY_S) * 1e6
    assert roof * 1e6 + fixed < e["kernel_us"] < roof * 1e6 + fixed + 3
    assert e["bytes_written"] == out.numel * 2
    assert doc["estimated_us"]["library_calls_us"] == pytest.approx(e["us"])


@needs_corpus
def test_run_json_carries_the_same_estimates_and_profile_ranks_by_them():
    from rich.console import Console

    from fusegen.cli.run import profile_table

    path = LAUNCH / "new_loop_bcast_odd.h200_opt.hlo"
    ex = {f["name"]: f["estimate"]["us"] for f in fusegen.explain(path).to_json()["fusions"]}
    res = fusegen.run(path, compile=False)
    doc = res.to_json()
    assert {f["name"]: f["estimate"]["us"] for f in doc["fusions"]} == ex
    assert doc["estimated_us"]["us"] == pytest.approx(sum(ex.values()), abs=1e-5)
    (report,) = res.reports
    buf = io.StringIO()
    Console(file=buf, width=300).print(profile_table(report))
    text = buf.getvalue()
    assert "estimate" in text and "CPU total s" in text
    want = sorted(ex, key=lambda n: -ex[n])
    found = sorted(want, key=lambda n: text.index(f" {n} "))
    assert found == want  # slowest estimate first


@needs_corpus
def test_report_ranks_fusions_by_estimate_beside_their_seconds_here(tmp_path):
    res = fusegen.report(LAUNCH / "new_loop_bcast_odd.h200_opt.hlo", output=tmp_path / "r.html", run=True,
                         compile=False)
    s = res.summary
    rows = s["by_estimate"]
    assert [r["us"] for r in rows] == sorted((r["us"] for r in rows), reverse=True) and len(rows) == 3
    assert all(r["interpreter_s"] is not None and r["interpreter_s"] > 0 for r in rows)
    assert s["estimated_us"]["label"] == "estimate" and s["estimated_us"]["us"] == pytest.approx(
        sum(r["us"] for r in rows), abs=1e-5)
    html = (tmp_path / "r.html").read_text()
    assert "Estimated h200 time" in html and "an estimate (fusegen.perf v" in html


def test_an_estimate_failure_never_breaks_explain(monkeypatch):
    from fusegen.perf import report

    def boom(*a, **k):
        raise RuntimeError("model exploded")

    monkeypatch.setattr(report, "estimate_fusion", boom)
    d = report.fusion_estimate_json(object(), H200)
    assert d["us"] is None and d["error"] == "RuntimeError: model exploded"
    assert report.estimate_cell(d) == "-" and report.estimate_cell({"us": None, "exec_us": None}) == "inf"


@needs_corpus
def test_explain_compile_estimates_with_the_kernels_machine_code():
    from fusegen.codegen.sass import tools_unavailable_reason

    why = tools_unavailable_reason()
    if why:
        pytest.skip(f"no ptxas/cuobjdump: {why}")
    path = LAUNCH / "gpu_transpose_add.default.h200_opt.hlo"
    plain = fusegen.explain(path).to_json()["fusions"][0]["estimate"]
    (f,) = fusegen.explain(path, compile=True).to_json()["fusions"]
    mc = f["estimate"]["machine_code"]
    assert mc["registers"] > 0 and mc["mean_access_bytes"] > 0 and mc["tensor_core_instructions"] == 0
    # the machine-code terms only ever add time (memory time scaled by loads in flight, spills)
    assert f["estimate"]["kernel_us"] == pytest.approx(plain["kernel_us"] + mc.get("memory_us_added", 0.0), abs=1e-6)


def test_report_help_gives_the_cost_model_default_the_tuner_uses():
    """Without a GPU and without --measure-on-cpu the tuner keeps every config (top-k 0) and ranks them by estimate;
    the report's help said "default 4 on a CPU" (the interpreter-timing default)."""
    from click.testing import CliRunner

    from fusegen.autotuning.options import default_top_k
    from fusegen.cli.report import report

    assert default_top_k(None, H200, measure_on_cpu=False) == 0
    text = " ".join(CliRunner().invoke(report, ["--help"]).output.split())
    assert "(0, the default: all)" in text and "default 4" not in text
