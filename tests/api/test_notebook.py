"""fusegen from a notebook (issue 31): capture with pytrees and static arguments, run with pytree inputs and JAX's
outputs as expected, results as attributes and DataFrames, progress, and every mistake refused before any work.

The captures here use ``compiler="fusegen"`` (jax's lowering, fused by fusegen's pipeline), which CPU jax (CI's)
can do; XLA's deviceless H200 compile needs jax's CUDA plugin and is exercised by the README session
(``tests/api/test_library_api.py``) and ``tests/jax_capture/test_jax_capture.py`` where the plugin is installed. The answers are
independent: XLA:CPU's outputs of the same function through jax.
"""

from __future__ import annotations

import json
import sys

import numpy as np
import pytest

jax = pytest.importorskip("jax")
jnp = jax.numpy

import fusegen  # noqa: E402
from fusegen.jax_capture import CaptureError  # noqa: E402
from fusegen.runtime.inputs import InputError  # noqa: E402


def step(params, batch, scale):
    """A pytree in, a pytree out, a static float: a layer, its loss and an update."""
    h = jnp.tanh(batch["x"] @ params["w"] + params["b"])
    loss = jnp.mean((h - batch["y"]) ** 2)
    return {"w": params["w"] - scale * h.T.mean() , "h": h}, loss


@pytest.fixture(scope="module")
def arrays():
    rng = np.random.default_rng(0)
    params = {"w": jnp.asarray(rng.standard_normal((16, 8)), jnp.float32) * 0.3, "b": jnp.zeros(8, jnp.float32)}
    batch = {"x": jnp.asarray(rng.standard_normal((4, 16)), jnp.float32),
             "y": jnp.asarray(rng.standard_normal((4, 8)), jnp.float32)}
    return params, batch


@pytest.fixture(scope="module")
def captured(arrays):
    params, batch = arrays
    return fusegen.capture(step, params, batch, 0.5, static_argnums=2, compiler="fusegen")


@pytest.fixture(scope="module")
def jax_out(arrays):
    params, batch = arrays
    return jax.jit(step, static_argnums=2)(params, batch, 0.5)


@pytest.fixture(scope="module")
def result(captured, arrays, jax_out):
    params, batch = arrays
    return fusegen.run(captured, inputs=(params, batch), expected=jax_out, compile=False)


def test_capture_is_a_function_of_the_package_whatever_was_imported():
    import fusegen.jax_capture  # the package of the capture is another name: it cannot shadow the function
    import fusegen.report.data  # the report package is callable as fusegen.report.reporting.report

    assert fusegen.capture is fusegen.jax_capture.capture and callable(fusegen.report)
    assert fusegen.report.data.SCHEMA


def test_capture_keeps_the_trees_and_the_static_argument(captured, arrays, jax_out):
    params, batch = arrays
    assert captured.in_tree == jax.tree_util.tree_structure((params, batch))
    assert captured.out_tree == jax.tree_util.tree_structure(jax_out)
    assert captured.static == {2: 0.5} and captured.arg_count == 3 and captured.devices == 1
    assert len(captured.module.entry.parameters) == 4  # b, w, x, y in jax's (sorted-key) order
    for got, want in zip(jax.tree_util.tree_leaves(captured.expected), jax.tree_util.tree_leaves(jax_out)):
        np.testing.assert_array_equal(np.asarray(got), np.asarray(want))


def test_run_takes_and_gives_pytrees(result, arrays, jax_out):
    params, batch = arrays
    assert result.status in ("ok", "drift") and result.ok, result.status
    new, loss = result.outputs
    assert sorted(new) == ["h", "w"] and loss.shape == () and new["h"].shape == (4, 8)
    # XLA:CPU's answer, up to tf32: fusegen runs the f32 dots of default precision at tf32 as XLA:GPU does
    # (operands rounded to 10 mantissa bits, 2^-11 relative; the verdict judged that against jax_out above)
    np.testing.assert_allclose(new["h"], np.asarray(jax_out[0]["h"]), rtol=2e-3, atol=2e-3)
    assert np.abs(new["h"] - np.asarray(jax_out[0]["h"])).max() > 1e-6  # really at tf32
    np.testing.assert_allclose(loss, np.asarray(jax_out[1]), rtol=2e-3)
    assert result.verdict.outputs and all(o.expected_error is not None for o in result.verdict.outputs)


def test_static_arguments_may_be_given_equal_and_one_argument_bare(captured, arrays, jax_out):
    params, batch = arrays
    ins, exp = captured.flatten((params, batch, 0.5), jax_out)
    assert len(ins) == 4 and len(exp) == 3
    with pytest.raises(InputError, match=r"static argument 2 was captured as 0.5, got 0.25"):
        captured.flatten((params, batch, 0.25), None)
    one = fusegen.capture(lambda p: {"s": jnp.sum(p["a"] * 2.0)}, {"a": jnp.ones(4)}, compiler="fusegen", name="one")
    ins, _ = one.flatten({"a": jnp.arange(4.0, dtype=jnp.float32)}, None)
    assert [a.tolist() for a in ins] == [[0.0, 1.0, 2.0, 3.0]]


def test_a_wrong_expected_is_refused_before_the_run(captured, arrays, jax_out, monkeypatch):
    from fusegen.verify import judged_run

    params, batch = arrays
    monkeypatch.setattr(judged_run, "run_module", lambda *a, **k: pytest.fail("the run started"))
    short = jax.tree_util.tree_leaves(jax_out)[:2]
    with pytest.raises(InputError, match=r"expected has 2 leaves: f32\[4,8\], f32\[16,8\].*output has 3 leaves: "
                                         r"f32\[4,8\], f32\[16,8\], f32\[\]"):
        fusegen.run(captured, inputs=(params, batch), expected=short, compile=False)
    with pytest.raises(InputError, match=r"expected has 3 leaves.*output has 3 leaves"):
        fusegen.run(captured, inputs=(params, batch), expected={"a": jax_out[1], "b": jax_out[0]}, compile=False)
    with pytest.raises(InputError, match=r"inputs do not have the structure.*got 1 argument"):
        fusegen.run(captured, inputs=(params,), compile=False)
    # a leaf of another shape is named by its path in the arguments, in the function's terms
    with pytest.raises(InputError, match=r"step: input \[1\]\['x'\] has shape \[2, 16\], the function was captured "
                                         r"with f32\[4,16\]$"):
        fusegen.run(captured, inputs=(params, {**batch, "x": batch["x"][:2]}), compile=False)


def test_a_plain_module_refuses_a_wrong_expected_naming_leaves_and_shapes(monkeypatch):
    from fusegen.verify import judged_run

    m = "examples/gpu_multi_output.h100_opt.hlo"
    monkeypatch.chdir(str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    monkeypatch.setattr(judged_run, "run_module", lambda *a, **k: pytest.fail("the run started"))
    with pytest.raises(InputError, match=r"expected has 1 leaf: f32\[128\]; the module has 2 output leaves "
                                         r"\(f32\[128\], f32\[128,512\]\)"):
        fusegen.run(m, expected=[np.zeros(128, np.float32)], compile=False)
    with pytest.raises(InputError, match=r"expected leaf 1 has shape \[512\], output 1 is f32\[128,512\]"):
        fusegen.run(m, expected=(np.zeros(128, np.float32), np.zeros(512, np.float32)), compile=False)


def test_one_dtype_rule_for_jax_and_numpy_inputs(monkeypatch):
    from fusegen.verify import judged_run

    m = "examples/gpu_multi_output.h100_opt.hlo"
    monkeypatch.chdir(str(__import__("pathlib").Path(__file__).resolve().parents[2]))
    monkeypatch.setattr(judged_run, "run_module", lambda *a, **k: pytest.fail("the run started"))
    for x in (np.zeros((128, 512), np.float16), jnp.zeros((128, 512), jnp.float16)):
        with pytest.raises(InputError, match=r"parameter 0 \(%x.1\) has dtype float16, expected float32"):
            fusegen.run(m, inputs=[x], compile=False)


def test_capture_mistakes_are_clear_before_compiling(arrays):
    params, batch = arrays
    with pytest.raises(CaptureError, match=r"static argument 2 \(list\) is not hashable"):
        fusegen.capture(step, params, batch, [0.5], static_argnums=2, compiler="fusegen")
    with pytest.raises(CaptureError, match=r"keyword argument\(s\) \['scale'\] are not static"):
        fusegen.capture(step, params, batch, compiler="fusegen", scale=0.5)
    with pytest.raises(CaptureError, match=r"in_shardings name mesh axis 'model', the mesh has \['d'\]"):
        fusegen.capture(step, params, batch, 0.5, static_argnums=2, mesh=2, in_shardings=(None, {"x": "model", "y": None}))
    with pytest.raises(CaptureError, match=r"in_shardings name mesh axis 'd', but there is no mesh"):
        fusegen.capture(step, params, batch, 0.5, static_argnums=2, in_shardings=(None, {"x": "d,None", "y": None}))
    with pytest.raises(CaptureError, match=r"compiler='fusegen' compiles one device.*fusegen\[capture\]"):
        fusegen.capture(step, params, batch, 0.5, static_argnums=2, mesh=8, compiler="fusegen")
    with pytest.raises(CaptureError, match=r"in_shardings is not a pytree prefix"):
        fusegen.capture(step, params, batch, 0.5, static_argnums=2, mesh=2, in_shardings=(None, {"z": "d"}))
    with pytest.raises(CaptureError, match=r"argument leaf of type object is not an array"):
        fusegen.capture(step, params, {"x": object(), "y": batch["y"]}, 0.5, static_argnums=2, compiler="fusegen")


def test_a_compile_error_whose_first_line_is_a_status_keeps_its_reason(arrays):
    """XLA's errors put the status on the first line and the reason on the next ("UNIMPLEMENTED: \nCan't
    lower one or more integer convolutions ..."): the capture's one-line error keeps both."""
    def unlowerable(params, batch, scale):
        raise RuntimeError("UNIMPLEMENTED: \nCan't lower one or more integer convolutions\n\nmore detail")

    params, batch = arrays
    with pytest.raises(CaptureError, match=r"compiling unlowerable: RuntimeError: UNIMPLEMENTED: Can't lower one or "
                                           r"more integer convolutions$"):
        fusegen.capture(unlowerable, params, batch, 0.5, static_argnums=2, compiler="fusegen")


def test_without_the_cuda_plugin_capture_names_the_extra(arrays, monkeypatch):
    from jax.experimental import topologies

    def missing(**_kw):
        raise NotImplementedError("topology not implemented for cuda")

    monkeypatch.setattr(topologies, "get_topology_desc", missing)
    params, batch = arrays
    with pytest.raises(CaptureError, match=r"no deviceless XLA:GPU compile .*pip install 'fusegen\[capture\]'.*"
                                           r"JAX_PLATFORMS=cpu.*compiler='fusegen'"):
        fusegen.capture(step, params, batch, 0.5, static_argnums=2)


def test_every_json_key_is_an_attribute(result, captured):
    doc = result.to_json()
    missing = [k for k in doc if k != "outputs" and not hasattr(result, k)]  # .outputs: the arrays (verdict: .verdict)
    assert missing == []
    for f, row in zip(result.fusions, doc["fusions"]):
        assert [k for k in row if not hasattr(f, k)] == []
        assert f.launch_dimensions == row["launch_dimensions"]
    plan = fusegen.explain(captured)
    edoc = plan.to_json()
    assert [k for k in edoc if not hasattr(plan, k)] == []
    for f, row in zip(plan.fusions, edoc["fusions"]):
        assert [k for k in row if not hasattr(f, k)] == [] and f.launch_dimensions == row["launch_dimensions"]
    tuned = fusegen.tune(captured, cost_model_top_k=1)
    assert [k for k in tuned.to_json() if not hasattr(tuned, k)] == []
    for r, row in zip(tuned.instructions, tuned.to_json()["instructions"]):
        assert [k for k in row if not hasattr(r, k)] == []


def test_dataframes_of_run_explain_and_tune(result, captured):
    pd = pytest.importorskip("pandas")
    df = result.to_dataframe()
    assert isinstance(df, pd.DataFrame) and list(df["name"]) == [f.name for f in result.fusions]
    assert list(df["max_abs_error"]) == [f.max_abs_error for f in result.fusions]
    assert list(df["launch_dimensions.grid"]) == [(f.launch_dimensions or {}).get("grid") for f in result.fusions]
    edf = fusegen.explain(captured).to_dataframe()
    assert list(edf["kind"]) == list(df["kind"]) and "kernels" not in edf.columns
    # retune: an earlier test's tune wrote its winners into the module (tune applies them in place)
    tdf = fusegen.tune(captured, cost_model_top_k=1, retune=True).to_dataframe()
    assert len(tdf) >= 1 and {"name", "step", "winner"} <= set(tdf.columns)


def test_without_pandas_to_dataframe_says_how_to_get_it(result, monkeypatch):
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(ImportError, match=r"to_dataframe\(\) needs pandas: pip install pandas"):
        result.to_dataframe()


def test_progress_events_of_a_run(captured):
    events = []
    res = fusegen.run(captured, compile=False, progress=events.append)
    run = [e for e in events if e.task == "running fusions"]
    assert run[0].done == 0 and run[0].total == len(res.fusions)
    assert run[-1].finished and run[-1].done == len(res.fusions)
    assert {e.note for e in run if e.note} == {f.name for f in res.fusions}
    with pytest.raises(ValueError, match="progress='bar'"):
        fusegen.run(captured, compile=False, progress="bar")


def test_report_in_python_and_report_run_with_inputs_and_expected(captured, arrays, jax_out, tmp_path):
    from click.testing import CliRunner

    from fusegen.cli.main import cli

    params, batch = arrays
    page = fusegen.report(captured, run=True, inputs=(params, batch), expected=jax_out, compile=False,
                          output=tmp_path / "step.html")
    assert page.ok and page.path.read_text(encoding="utf-8") == page.html
    assert page.options["inputs"] == "arrays" and page.run.status == page.status
    files = captured.write(tmp_path)
    args = ["report", str(files.hlo), "--run", "--no-compile", "--inputs", str(files.inputs), "-o",
            str(tmp_path / "cli.html"), "--json-data", str(tmp_path / "cli.json")]
    res = CliRunner().invoke(cli, [*args, "--expected", str(files.expected)])
    assert res.exit_code == 0, res.output
    doc = json.loads((tmp_path / "cli.json").read_text())
    assert doc["options"]["inputs"] == str(files.inputs) and doc["summary"]["status"] in ("ok", "drift")
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, **{f"o{i}": np.asarray(o) + 1.0 for i, o in enumerate(captured.expected_flat)})
    res = CliRunner().invoke(cli, [*args, "--expected", str(wrong)])
    assert res.exit_code == 1, res.output  # written, and the known answer is a mismatch
    res = CliRunner().invoke(cli, ["report", str(files.hlo), "--inputs", str(files.inputs)])
    assert res.exit_code == 2 and "--inputs and --expected need --run" in res.output


def test_progress_tqdm_draws_a_bar_per_task_or_says_how_to_get_tqdm(captured, monkeypatch, capsys):
    from fusegen.api.progress import ProgressEvent, progress_sink

    auto = pytest.importorskip("tqdm.auto")
    closed = []

    class Recorded(auto.tqdm):
        def close(self):
            closed.append((self.desc, self.n, self.total, self.postfix))
            super().close()

    monkeypatch.setattr(auto, "tqdm", Recorded)
    sink = progress_sink("tqdm")
    tid = sink.add_task("running fusions", total=3)
    for name in ("a", "b", "c"):
        sink.update(tid, advance=1, description=name)
    sink.finish()
    assert closed[0] == ("running fusions", 3, 3, "c")  # tqdm may close again when collected
    assert "running fusions" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "tqdm", None)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(ImportError, match=r"progress='tqdm' needs tqdm: pip install tqdm"):
        progress_sink("tqdm")
    assert ProgressEvent("t", 1, 2).finished is False
