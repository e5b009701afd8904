"""The gemm-rewriter pass (GemmRewriter) and the cuBLASLt codegen backend on a machine without a GPU."""

from __future__ import annotations

import logging

import numpy as np

from _backend_helpers import debug, device, plugin_manager
from conftest import corpus_path
from fusegen.codegen_backend import Config
from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_file, parse_module
from fusegen.hlo.printer import print_module
from fusegen.passes.pipeline import PassOptions, run_pipeline
from fusegen.runtime.inputs import make_inputs
from fusegen_plugins.backends import cublaslt


def _calls(module):
    return [i for i in module.entry.instructions if i.opcode == "custom-call"]


def test_gelu_matmul_becomes_lt_matmul_with_bias_gelu():
    m = parse_file(corpus_path("jax", "gelu_matmul.pre.hlo"))
    args = make_inputs(m, 3)
    ref = evaluate_module(m, args)
    assert cublaslt.run_gemm_rewriter(m, PassOptions())
    (call,) = _calls(m)
    assert call.attrs["custom_call_target"] == "__cublas$lt$matmul"
    g = call.backend_config["gemm_backend_config"]
    assert g["epilogue"] == "BIAS_GELU"
    assert g["dot_dimension_numbers"]["lhs_contracting_dimensions"] == ["1"]
    assert (g["lhs_stride"], g["rhs_stride"]) == ("2048", "8192")  # 32*64, 64*128
    assert "selected_algorithm" not in g  # left to the autotuner
    assert call.shape.tuple_shapes[1].dimensions == (cublaslt.WORKSPACE_BYTES,)
    assert len(call.operands) == 3 and call.operands[2].shape.dimensions == (128,)
    # the whole GELU chain is gone, the module computes the same values (tanh GELU epilogue)
    assert not any(i.opcode == "tanh" for i in m.entry.instructions)
    out = evaluate_module(m, args)
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    parse_module(print_module(m))  # prints as valid HLO


def test_b13_bias_along_rows_is_not_folded():
    m = parse_file(corpus_path("bugs", "B13.hlo"))
    assert cublaslt.run_gemm_rewriter(m, PassOptions())
    (call,) = _calls(m)
    assert call.backend_config["gemm_backend_config"]["epilogue"] == "DEFAULT"
    assert len(call.operands) == 2
    assert any(i.opcode == "add" for i in m.entry.instructions)
    a = np.zeros((8, 8), np.float32)
    bias = np.arange(1, 9, dtype=np.float32)
    out = np.asarray(evaluate_module(m, [a, bias]))
    # expected: out[j, i] = bias[i] (each row of out reads 1..8)
    np.testing.assert_array_equal(out, np.tile(bias, (4, 1)))


def test_b18_bias_folded_erf_gelu_is_not():
    m = parse_file(corpus_path("bugs", "B18.hlo"))
    args = make_inputs(m, 1)
    ref = evaluate_module(m, args)
    cublaslt.run_gemm_rewriter(m, PassOptions())
    (call,) = _calls(m)
    assert call.backend_config["gemm_backend_config"]["epilogue"] == "BIAS"
    assert any(i.opcode == "erf" for i in m.entry.instructions)
    np.testing.assert_allclose(evaluate_module(m, args), ref, rtol=1e-5, atol=1e-5)


def test_relu_epilogue_and_integer_gemm():
    m = parse_module("""HloModule m
ENTRY e {
  a = f16[64,32] parameter(0)
  b = f16[32,48] parameter(1)
  d = f16[64,48] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  z = f16[] constant(0)
  zb = f16[64,48] broadcast(z), dimensions={}
  ROOT r = f16[64,48] maximum(d, zb)
}""")
    cublaslt.run_gemm_rewriter(m, PassOptions())
    assert _calls(m)[0].backend_config["gemm_backend_config"]["epilogue"] == "RELU"
    m = parse_module("""HloModule m
ENTRY e {
  a = s8[64,32] parameter(0)
  b = s8[32,48] parameter(1)
  ROOT d = s32[64,48] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    cublaslt.run_gemm_rewriter(m, PassOptions())
    assert _calls(m)[0].attrs["custom_call_target"] == "__cublas$gemm"


def test_tiny_dot_stays_a_dot():
    m = parse_module("""HloModule m
ENTRY e {
  a = f32[2,3] parameter(0)
  b = f32[3,2] parameter(1)
  ROOT d = f32[2,2] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    assert not cublaslt.run_gemm_rewriter(m, PassOptions())  # (2+2)*3 = 12 < 100
    assert cublaslt.run_gemm_rewriter(m, PassOptions(debug_options=debug(xla_gpu_gemm_rewrite_size_threshold=0)))


def test_cublaslt_backend_without_gpu_says_why_once(caplog):
    m = parse_file(corpus_path("jax", "gpu_mlp_bf16.notritongemm.h100_opt.hlo"))
    call = next(i for i in m.entry.instructions if i.opcode == "custom-call")
    be = cublaslt.CublasLtBackend()
    assert be.name == "cublaslt" and not be.can_produce_wrong_results()
    reason = cublaslt.unavailable_reason()
    if reason is None:  # a GPU machine: the GPU-only tests cover it
        return
    assert reason == "cuBLASLt unavailable: libcuda.so.1 not found"
    cublaslt._SAID.discard(reason)
    with caplog.at_level(logging.WARNING, logger="fusegen.cublaslt"):
        assert be.get_supported_configs(call) == []
        assert be.get_supported_configs(call) == []
    assert [r.getMessage() for r in caplog.records].count(reason) == 1
    cfg = be.get_default_config(call)
    assert cfg == Config("cublaslt", {"algorithm": 0, "workspace_bytes": 4194304})
    be.apply_config(call, Config("cublaslt", {"algorithm": 3, "workspace_bytes": 1024}))
    g = call.backend_config["gemm_backend_config"]
    assert g["selected_algorithm"] == "3" and call.shape.tuple_shapes[1].dimensions == (1024,)
    assert cublaslt.CublasLtBackend()._limit() == 128 and cublaslt.CublasLtBackend(7)._limit() == 7


def test_pipeline_with_triton_off_runs_on_host():
    from fusegen.verify.judged_run import run_module

    m = parse_file(corpus_path("jax", "gelu_matmul.pre.hlo"))
    res = run_pipeline(m, None, pm=plugin_manager(), debug_options=debug(xla_gpu_enable_triton_gemm=False),
                       device=device())
    per = dict(res.per_pass)
    assert per["gemm-fusion"] is False and per["gemm-rewriter"] is True
    _, rep = run_module(m, make_inputs(m, 0), pm=plugin_manager(), compile_kernels=False)
    assert rep.ok and rep.other.get("host") == 1
