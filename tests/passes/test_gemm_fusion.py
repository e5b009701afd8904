"""The gemm-fusion pass against XLA's GemmFusion tests (corpus gemm_fusion__* cases) and the routing flags."""

from __future__ import annotations

import csv
import json

import pytest

from _backend_helpers import debug, device, plugin_manager
from conftest import corpus_path
from fusegen.hlo.parser import parse_file, parse_modules
from fusegen.passes.pipeline import PassError, PassOptions, run_pipeline
from fusegen_plugins.backends import triton_gemm_fusion as gf


def _cases():
    root = corpus_path("xla", "cases")
    rows = [r for r in csv.reader(open(root / "INDEX.tsv"), delimiter="\t") if r and r[0].startswith("gemm_fusion__")]
    return root, rows


def _run_case(root, row):
    """Run gemm-fusion under the flags the case notes; returns 'changed=true' / 'changed=false' / 'error: ...'."""
    name, expected, note = row[0], row[2], row[3]
    threshold = 100 if "threshold=100 (overrides" in note else 0
    dbg = debug(xla_gpu_triton_gemm_any=False, xla_gpu_gemm_rewrite_size_threshold=threshold)
    dev = device("a100")
    if "cc=Volta" in note:
        dev = device("a100", (7, 0))
    elif "cc=Hopper" in note:
        dev = device("h100")
    module = parse_modules((root / name).read_text(), name)[0]
    try:
        ch = gf.run(module, PassOptions(debug_options=dbg, device=dev,
                                        options={"v2": "gemm_fusion_v2=true" in note}))
    except gf.GemmFusionError as e:
        return f"error: {e}", module
    return f"changed={'true' if ch else 'false'}", module


def test_corpus_cases_agree_with_xla():
    root, rows = _cases()
    assert len(rows) >= 40
    agree, wrong = 0, []
    for row in rows:
        got, _ = _run_case(root, row)
        exp = row[2]
        ok = got.startswith("error: FailedPrecondition") if exp.startswith("error") else got == exp
        agree += ok
        if not ok:
            wrong.append((row[0], exp, got))
    assert agree / len(rows) >= 0.95, wrong


def test_bails_out_pre_ampere_with_xlas_message():
    root, rows = _cases()
    row = next(r for r in rows if "BailsOutPreAmpere" in r[0])
    got, _ = _run_case(root, row)
    assert got == ("error: FailedPrecondition: CUDA Triton support is only enabled for Ampere GPUs (compute "
                   "capability 8.0) and up, but got compute capability 7.0.")


def test_fused_computation_shape_of_a_changed_case():
    root, rows = _cases()
    row = next(r for r in rows if r[0].endswith("ParameterUsedElementwiseTwiceIsFused.hlo"))
    got, module = _run_case(root, row)
    assert got == "changed=true"
    fusion = module.entry.root
    assert fusion.opcode == "fusion" and fusion.attrs["kind"] == "kCustom"
    assert fusion.fusion_backend_kind == "__triton_gemm"
    assert fusion.name == "gemm_fusion_dot"
    ops = sorted(i.opcode for i in fusion.fused_computation.instructions)
    # exp, negate, add on the lhs and the convert on the rhs are all fused; two parameters remain
    assert ops == ["add", "convert", "dot", "exponential", "negate", "parameter", "parameter"]


def test_pure_matmul_is_fused_with_triton_gemm_any_default():
    text = """HloModule m
ENTRY e {
  p0 = bf16[1024] parameter(0)
  b0 = bf16[16,64] bitcast(p0)
  p1 = bf16[1024] parameter(1)
  b1 = bf16[64,16] bitcast(p1)
  ROOT d = bf16[16,16] dot(b0, b1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""
    m = parse_modules(text)[0]
    assert gf.run(m, PassOptions(debug_options=debug(xla_gpu_gemm_rewrite_size_threshold=0), device=device()))
    m = parse_modules(text)[0]
    assert not gf.run(m, PassOptions(debug_options=debug(xla_gpu_gemm_rewrite_size_threshold=0,
                                                         xla_gpu_triton_gemm_any=False), device=device()))
    # tiny under the default threshold 100? (16+16)*64 = 2048 >= 100: not tiny, fused
    m = parse_modules(text)[0]
    assert gf.run(m, PassOptions(device=device()))
    m = parse_modules(text)[0]
    assert not gf.run(m, PassOptions(debug_options=debug(xla_gpu_gemm_rewrite_size_threshold=4096),
                                     device=device()))


def test_disabled_triton_gemm_leaves_dots_alone():
    m = parse_file(corpus_path("jax", "gelu_matmul.pre.hlo"))
    assert not gf.run(m, PassOptions(debug_options=debug(xla_gpu_enable_triton_gemm=False), device=device()))
    assert any(i.opcode == "dot" for i in m.entry.instructions)


def _opt(args):
    from click.testing import CliRunner

    from fusegen.cli.opt import opt

    return CliRunner().invoke(opt, args)


def test_opt_cli_routes_gelu_matmul():
    path = str(corpus_path("jax", "gelu_matmul.pre.hlo"))
    r = _opt([path, "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["changed"] is True
    assert '"kind":"__triton_gemm"' in doc["module"] and "custom-call" not in doc["module"]
    r = _opt([path, "--xla-flag", "xla_gpu_enable_triton_gemm=false", "--json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert 'custom_call_target="__cublas$lt$matmul"' in doc["module"]
    assert "__triton_gemm" not in doc["module"]


def test_opt_cli_errors_are_one_line():
    path = str(corpus_path("jax", "gelu_matmul.pre.hlo"))
    r = _opt([path, "--passes", "gemm-fusion,nope"])
    assert r.exit_code == 2
    assert "unknown pass 'nope'" in r.output and "gemm-fusion" in r.output
    r = _opt([path, "--passes", "gemm-fusion", "--device", "rtxa6000"])
    assert r.exit_code == 0  # sm_86 is Ampere
    r = _opt([path, "--xla-flag", "xla_gpu_enable_tritn_gemm=false"])
    assert r.exit_code == 2 and "xla_gpu_enable_triton_gemm" in r.output


def test_pipeline_error_names_pass_and_plugin():
    m = parse_file(corpus_path("jax", "gelu_matmul.pre.hlo"))
    with pytest.raises(PassError, match=r"pass 'gemm-fusion' \(plugin 'triton'\).*compute capability 7.5"):
        run_pipeline(m, ["gemm-fusion"], pm=plugin_manager(), device=device("a100", (7, 5)))
