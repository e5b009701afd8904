"""The command line: `fusegen run` / `explain` on real modules, and one-line errors on bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "gpu_multi_output.h100_opt.hlo"


def fusegen(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True, cwd=cwd)


def test_run_json_on_the_bundled_example():
    p = fusegen("run", str(EXAMPLE), "--json")
    assert p.returncode == 0, p.stderr
    d = json.loads(p.stdout)
    assert d["module"] == "jit_multi"
    names = [f["name"] for f in d["fusions"]]
    assert names == ["wrapped_tanh", "input_multiply_reduce_fusion"]  # entry post order
    loop = d["fusions"][0]
    assert set(loop) >= {"name", "kind", "decided_by", "emitter", "backend", "launch", "max_abs_error",
                         "max_rel_error", "status"}
    assert (loop["kind"], loop["decided_by"], loop["emitter"], loop["backend"]) == ("kLoop", "loop", "LoopFusion", "triton")
    assert loop["launch"].startswith("grid=")
    assert loop["status"] == "ok" and loop["compiled_sm90"] == "ok"
    red = d["fusions"][1]
    assert (red["kind"], red["decided_by"]) == ("kReduction", "real-reduction-hero")


def test_run_table_and_explain_source():
    p = fusegen("run", str(EXAMPLE), "--no-compile")
    assert p.returncode == 0, p.stderr
    assert "wrapped_tanh" in p.stdout and "LoopFusion" in p.stdout and "outputs vs reference: match" in p.stdout
    e = fusegen("explain", str(EXAMPLE), "--fusion", "wrapped_tanh")
    assert e.returncode == 0, e.stderr
    assert "@triton.jit" in e.stdout and "tl.store" in e.stdout


def test_inputs_npz_round_trip_and_errors(tmp_path):
    x = np.random.default_rng(1).standard_normal((128, 512)).astype(np.float32)
    good = tmp_path / "in.npz"
    np.savez(good, p0=x)
    out = tmp_path / "out.npz"
    p = fusegen("run", str(EXAMPLE), "--inputs", str(good), "--save-outputs", str(out), "--no-compile")
    assert p.returncode == 0, p.stderr
    saved = np.load(out)
    # The module computes (sum(tanh(x), axis=1), 2*tanh(x)); check against numpy directly.
    o0, o1 = saved["o0"], saved["o1"]
    assert o0.shape == (128,) and np.allclose(o0, np.tanh(x).sum(1), rtol=1e-4, atol=1e-4)
    assert o1.shape == (128, 512) and np.allclose(o1, 2 * np.tanh(x), atol=1e-5)

    bad_shape = tmp_path / "bad_shape.npz"
    np.savez(bad_shape, p0=x[:3])
    p = fusegen("run", str(EXAMPLE), "--inputs", str(bad_shape))
    assert p.returncode == 2
    assert "has shape [3, 512], expected [128, 512]" in p.stderr and "Traceback" not in p.stderr
    bad_type = tmp_path / "bad_type.npz"
    np.savez(bad_type, p0=x.astype(np.float64))
    p = fusegen("run", str(EXAMPLE), "--inputs", str(bad_type))
    assert p.returncode == 2 and "dtype float64, expected float32" in p.stderr
    missing = tmp_path / "missing.npz"
    np.savez(missing, q=x)
    p = fusegen("run", str(EXAMPLE), "--inputs", str(missing))
    assert p.returncode == 2 and "no array for parameter 0" in p.stderr


GOOD = """HloModule m

%fused (p0: f32[8], p1: f32[8]) -> f32[8] {
  %p0 = f32[8]{0} parameter(0)
  %p1 = f32[8]{0} parameter(1)
  ROOT %mul = f32[8]{0} multiply(%p0, %p1)
}

ENTRY %main (a: f32[8], b: f32[8]) -> f32[8] {
  %a = f32[8]{0} parameter(0)
  %b = f32[8]{0} parameter(1)
  ROOT %f = f32[8]{0} fusion(%a, %b), kind=kLoop, calls=%fused
}
"""


@pytest.mark.parametrize("name,text,where", [
    ("truncated", GOOD[: GOOD.index("ROOT %f")], None),
    ("unknown_opcode", GOOD.replace("multiply(", "multiplyy("), (6, None)),
    ("bad_shape", GOOD.replace("%p1 = f32[8]{0}", "%p1 = f32[8{0}"), (5, None)),
    ("unbalanced", GOOD.replace("calls=%fused\n}", "calls=%fused\n"), None),
    ("cycle", GOOD.replace("multiply(%p0, %p1)", "multiply(%p0, %mul)"), (6, None)),
    ("shape_mismatch", GOOD.replace("ROOT %mul = f32[8]{0}", "ROOT %mul = f32[7]{0}"), (6, None)),
    ("bad_literal", GOOD.replace("%p1 = f32[8]{0} parameter(1)", "%p1 = f32[8]{0} parameter(1)\n  %k = f32[] constant(abc)"), (6, None)),
])
def test_malformed_hlo_is_one_line_with_position_and_exit_2(tmp_path, name, text, where):
    f = tmp_path / f"{name}.hlo"
    f.write_text(text)
    p = fusegen("run", str(f))
    assert p.returncode == 2, (p.stdout, p.stderr)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr
    assert lines[0].startswith(f"{f}:")
    _, line, col, _rest = lines[0].split(":", 3)
    assert int(line) >= 1 and int(col) >= 1
    if where is not None:
        assert int(line) == where[0]
    if name == "unknown_opcode":
        assert "multiplyy" in lines[0]
    if name == "cycle":
        assert "depends on itself" in lines[0]


def test_hostile_instruction_names_never_reach_kernel_source_raw(tmp_path):
    hostile = GOOD.replace("%mul", '%"mul\\"); import os; os.system(\\"x\\")#"').replace("%p0", "%p0.__class__")
    # Names with quotes are not valid HLO identifiers; use legal-but-nasty HLO names instead.
    text = GOOD.replace("%mul", "%__import__.os.system").replace("%p0", "%exec.eval.1")
    f = tmp_path / "nasty.hlo"
    f.write_text(text)
    p = fusegen("explain", str(f), "--fusion", "f", "--json")
    assert p.returncode == 0, p.stderr
    src = json.loads(p.stdout)["fusions"][0]["kernels"][0]["source"]
    assert "__import__.os.system" not in src and "exec.eval.1" not in src
    r = fusegen("run", str(f), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["fusions"][0]["status"] == "ok"
    del hostile


def test_unknown_device_is_a_clear_error():
    p = fusegen("run", str(EXAMPLE), "--device", "tpu9")
    assert p.returncode == 2 and "h200" in p.stderr and "Traceback" not in p.stderr


def _gelu_matmul():
    from conftest import corpus_path

    return corpus_path("jax", "gelu_matmul.pre.hlo")


def test_config_file_and_xla_flags_send_the_dot_to_cublas(tmp_path):
    src = _gelu_matmul()
    d = json.loads(fusegen("explain", str(src), "--json", cwd=tmp_path).stdout)
    assert [f["kind"] for f in d["fusions"] if f["name"].startswith("gemm_fusion")] == ["kTriton"]
    assert d["library_calls"] == []
    (tmp_path / "fusegen.toml").write_text("[debug_options]\nxla_gpu_enable_triton_gemm = false\n")
    d = json.loads(fusegen("explain", str(src), "--json", cwd=tmp_path).stdout)
    assert [c["target"] for c in d["library_calls"]] == ["__cublas$lt$matmul"]
    assert not any(f["kind"] == "kTriton" for f in d["fusions"])
    show = json.loads(fusegen("config", "show", "--json", cwd=tmp_path).stdout)
    src_of = show["options"]["debug_options.xla_gpu_enable_triton_gemm"]
    assert src_of["value"] is False and src_of["source"] == f"file:{tmp_path / 'fusegen.toml'}:2"
    (tmp_path / "fusegen.toml").unlink()
    env = {**__import__("os").environ, "XLA_FLAGS": "--xla_gpu_enable_triton_gemm=false"}
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", "explain", str(src), "--json"], capture_output=True,
                       text=True, cwd=tmp_path, env=env)
    assert [c["target"] for c in json.loads(p.stdout)["library_calls"]] == ["__cublas$lt$matmul"]
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", "config", "show", "--json"], capture_output=True,
                       text=True, cwd=tmp_path, env=env)
    assert json.loads(p.stdout)["options"]["debug_options.xla_gpu_enable_triton_gemm"]["source"] == "env:XLA_FLAGS"


def test_plugins_disable_in_config_takes_a_kind_back_to_the_host(tmp_path):
    from conftest import corpus_path

    src = corpus_path("jax", "gpu_transpose_add.default.h100_opt.hlo")
    (tmp_path / "fusegen.toml").write_text('[plugins]\ndisable = ["transpose"]\n')
    d = json.loads(fusegen("explain", str(src), "--json", cwd=tmp_path).stdout)
    assert [(f["kind"], f["backend"]) for f in d["fusions"]] == [("kTranspose", "host")]


def test_bad_npz_and_output_paths_are_one_line_errors(tmp_path):
    x = np.zeros((128, 512), np.float32)
    npy = tmp_path / "plain.npy"
    np.save(npy, x)
    p = fusegen("run", str(EXAMPLE), "--inputs", str(npy))
    assert p.returncode == 2 and "not an .npz archive" in p.stderr and "Traceback" not in p.stderr
    extra = tmp_path / "extra.npz"
    np.savez(extra, p0=x, p7=x)
    p = fusegen("run", str(EXAMPLE), "--inputs", str(extra))
    assert p.returncode == 2 and "['p7'] match no parameter" in p.stderr
    p = fusegen("run", str(EXAMPLE), "--save-outputs", str(tmp_path / "nodir" / "o.npz"))
    assert p.returncode == 2 and "does not exist" in p.stderr
    p = fusegen("run", str(EXAMPLE), "--seed", "-1")
    assert p.returncode == 2 and "Traceback" not in p.stderr


def test_disabling_the_loop_question_is_a_config_error_not_a_crash(tmp_path):
    (tmp_path / "fusegen.toml").write_text('[plugins]\ndisable = ["matcher:loop"]\n')
    p = fusegen("run", str(EXAMPLE), "--no-compile", cwd=tmp_path)
    assert p.returncode == 2 and "[plugins] disable" in p.stderr and "Traceback" not in p.stderr
    # a bare "loop" is the plugin loop (the LoopFusion factory), and nothing else: the kLoop question stays
    (tmp_path / "fusegen.toml").write_text('[plugins]\ndisable = ["loop"]\n')
    p = fusegen("explain", str(EXAMPLE), "--json", cwd=tmp_path)
    rows = {f["name"]: f for f in json.loads(p.stdout)["fusions"]}
    assert p.returncode == 0 and rows["wrapped_tanh"]["kind"] == "kLoop" and rows["wrapped_tanh"]["backend"] == "host"


FLOAT_TYPES = ["f16", "bf16", "f32", "f64", "f8e4m3fn", "f8e5m2", "f8e4m3fnuz", "f8e5m2fnuz", "f8e4m3b11fnuz",
               "f8e4m3", "f8e3m4", "f8e8m0fnu", "f4e2m1fn"]


def test_npz_round_trip_of_every_hlo_float_type(tmp_path):
    """ml_dtypes arrays saved by ``np.savez`` (stored as ``|V2`` / ``|V1``) are read as the parameter's type;
    ``--save-outputs`` writes what ``np.savez`` writes, so ``.view(ml_dtypes.X)`` reads it and it feeds back."""
    from fusegen.hlo.dtypes import numpy_dtype

    params = "\n".join(f"  p{i} = {t}[6] parameter({i})" for i, t in enumerate(FLOAT_TYPES))
    revs = "\n".join(f"  r{i} = {t}[6] reverse(p{i}), dimensions={{0}}" for i, t in enumerate(FLOAT_TYPES))
    tup = ", ".join(f"{t}[6]" for t in FLOAT_TYPES)
    src = tmp_path / "all_floats.hlo"
    src.write_text(f"HloModule all_floats\nENTRY e {{\n{params}\n{revs}\n"
                   f"  ROOT t = ({tup}) tuple({', '.join(f'r{i}' for i in range(len(FLOAT_TYPES)))})\n}}\n")
    vals = [0.5, 1.0, 2.0, 4.0, 0.25, 1.5]  # exact in every type (f8e8m0fnu: powers of two only)
    xs = []
    for t in FLOAT_TYPES:
        v = [0.5, 1.0, 2.0, 4.0, 0.25, 8.0] if t == "f8e8m0fnu" else vals
        xs.append(np.array(v, np.float32).astype(numpy_dtype(t)))
    inp = tmp_path / "in.npz"
    np.savez(inp, **{f"p{i}": x for i, x in enumerate(xs)})
    assert np.load(inp)["p1"].dtype.kind == "V"  # what numpy stores for bf16: raw bytes
    out = tmp_path / "out.npz"
    p = fusegen("run", str(src), "--inputs", str(inp), "--save-outputs", str(out), "--no-compile")
    assert p.returncode == 0, p.stderr
    saved = np.load(out)
    for i, (t, x) in enumerate(zip(FLOAT_TYPES, xs)):
        got = saved[f"o{i}"].view(numpy_dtype(t))
        assert got.dtype == numpy_dtype(t), t
        assert got.astype(np.float64).tolist() == x[::-1].astype(np.float64).tolist(), t
    # the outputs fed back as inputs reverse again
    back = tmp_path / "back.npz"
    np.savez(back, **{f"p{i}": saved[f"o{i}"] for i in range(len(FLOAT_TYPES))})
    out2 = tmp_path / "out2.npz"
    p = fusegen("run", str(src), "--inputs", str(back), "--save-outputs", str(out2), "--no-compile")
    assert p.returncode == 0, p.stderr
    again = np.load(out2)
    for i, (t, x) in enumerate(zip(FLOAT_TYPES, xs)):
        assert again[f"o{i}"].view(numpy_dtype(t)).astype(np.float64).tolist() == x.astype(np.float64).tolist(), t
    # raw bytes of the wrong width stay an error naming both types
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, **{f"p{i}": (xs[i] if i != 1 else xs[4]) for i in range(len(FLOAT_TYPES))})
    p = fusegen("run", str(src), "--inputs", str(wrong), "--no-compile")
    assert p.returncode == 2 and "parameter 1" in p.stderr and "bfloat16" in p.stderr
