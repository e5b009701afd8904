"""GEMM epilogues through bitcasts, reshapes and transposes after the dot (issue 10), checked against the
reference evaluator on the Triton interpreter (at f32: both round these default-precision f32 dots' operands
to tf32, as XLA:GPU does), and against float64 numpy on the operands rounded to tf32 (``cvt.rna``)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from fusegen.codegen import triton_runtime
from fusegen.codegen.emitter import EmitterUnsupported
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.dot_numerics import tf32_round
from fusegen.hlo import dtypes
from fusegen.hlo.parser import parse_file, parse_module
from fusegen.runtime.compare import compare
from fusegen_plugins.backends.triton import _Analysis
from fusegen_plugins.backends.triton_configs import TritonGemmConfig
from fusegen_plugins.backends.triton_gemm_emitter import TritonGemmFusion

_MODULE = """HloModule m
fc {{
  p0 = f32[{m},{k}]{{1,0}} parameter(0)
  p1 = f32[{k},{n}]{{1,0}} parameter(1)
  p2 = f32[{n}]{{0}} parameter(2)
{body}
}}
ENTRY e {{
  a = f32[{m},{k}]{{1,0}} parameter(0)
  b = f32[{k},{n}]{{1,0}} parameter(1)
  c = f32[{n}]{{0}} parameter(2)
  ROOT f = {out} fusion(a, b, c), kind=kCustom, calls=fc,
    backend_config={{"fusion_backend_config":{{"kind":"__triton_gemm"}}}}
}}"""


def _fusion(body: str, out: str, m=24, k=40, n=20):
    mod = parse_module(_MODULE.format(m=m, k=k, n=n, body=body, out=out))
    return mod.entry.root


def _check(f, cfg, seed=0):
    rng = np.random.default_rng(seed)
    ops = [rng.standard_normal(o.shape.dimensions).astype(dtypes.numpy_dtype(o.shape.element_type))
           for o in f.operands]
    emitted = TritonGemmFusion(_Analysis(f), cfg).emit()
    out = triton_runtime.run_fusion(emitted, ops, f)[0]
    ref = np.asarray(evaluate_instruction(f, ops))
    assert out.shape == ref.shape
    c = compare(out, ref, f.shape.element_type)
    assert c.ok, (cfg, c)
    return ops, out


def _t(x: np.ndarray) -> np.ndarray:
    """An f32 dot operand as XLA's tf32 dot reads it (rounded to tf32), in float64 for the oracle."""
    return tf32_round(x).astype(np.float64)


# dot computed transposed ({0,1} layout) and bitcast to the row-major [m, n] the user wanted, plus a bias: the
# shape XLA's GEMM fusions of keras-hub/flax dense layers have (bert, gemma, flax_block, equinox_mlp).
_LAYOUT_BITCAST = """  d = f32[20,24]{0,1} dot(p1, p0), lhs_contracting_dims={0}, rhs_contracting_dims={1}
  bc = f32[24,20]{1,0} bitcast(d)
  bb = f32[24,20]{1,0} broadcast(p2), dimensions={1}
  ROOT r = f32[24,20]{1,0} add(bc, bb)"""

# reshape splitting N into heads, then a transpose, then an elementwise op
_RESHAPE_TRANSPOSE = """  d = f32[24,20]{1,0} dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  bb = f32[24,20]{1,0} broadcast(p2), dimensions={1}
  s = f32[24,20]{1,0} subtract(d, bb)
  rs = f32[24,4,5]{2,1,0} reshape(s)
  t = f32[4,24,5]{2,1,0} transpose(rs), dimensions={1,0,2}
  ROOT e = f32[4,24,5]{2,1,0} exponential(t)"""


@pytest.mark.parametrize("cfg", [TritonGemmConfig(16, 8, 16, 1, 2), TritonGemmConfig(32, 32, 32, 1, 4)])
def test_layout_bitcast_epilogue(cfg):
    f = _fusion(_LAYOUT_BITCAST, "f32[24,20]{1,0}")
    (a, b, c), out = _check(f, cfg)
    want = _t(a) @ _t(b) + c
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("cfg", [TritonGemmConfig(16, 8, 16, 1, 2), TritonGemmConfig(16, 16, 64, 1, 4)])
def test_reshape_and_transpose_epilogue(cfg):
    f = _fusion(_RESHAPE_TRANSPOSE, "f32[4,24,5]{2,1,0}")
    (a, b, c), out = _check(f, cfg)
    want = np.exp((_t(a) @ _t(b) - c).reshape(24, 4, 5).transpose(1, 0, 2))
    np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4)
    triton_runtime.compile_for_target(TritonGemmFusion(_Analysis(f), cfg).emit().kernels[0], capability=90)


def test_epilogue_mixing_arrangements_is_declined():
    body = """  d = f32[24,24]{1,0} dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[24,24]{1,0} transpose(d), dimensions={1,0}
  ROOT r = f32[24,24]{1,0} add(d, t)"""
    f = _fusion(body, "f32[24,24]{1,0}", n=24)
    with pytest.raises(EmitterUnsupported, match="differently arranged"):
        TritonGemmFusion(_Analysis(f)).emit()


def test_real_model_gemm_fusions_with_bitcast_epilogues_run_on_triton():
    """Every GEMM fusion of the flax block (two end in a layout bitcast) is emitted and matches."""
    m = parse_file(REPO / "tests" / "data" / "real_models" / "flax_block.h200_opt.hlo")
    gemms = [i for i in m.entry.instructions if i.opcode == "fusion" and "gemm" in (i.fusion_backend_kind or "")]
    with_bitcast = [f for f in gemms if any(i.opcode == "bitcast" and i.operands[0].opcode == "dot"
                                            for i in f.fused_computation.instructions)]
    assert len(with_bitcast) == 2
    for f in with_bitcast:
        _check(f, None)


def test_gemm_fusion_pass_output_with_a_transposed_epilogue_runs():
    """fusegen's own gemm-fusion pass fuses a transpose and a scale after the dot; the emitter takes it."""
    from _backend_helpers import device, plugin_manager
    from fusegen.passes.pipeline import optimize_if_needed

    m = parse_module("""HloModule m
ENTRY e {
  p0 = f32[48,40] parameter(0)
  p1 = f32[40,24] parameter(1)
  d = f32[48,24] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  t = f32[24,48] transpose(d), dimensions={1,0}
  s = f32[] constant(0.5)
  sb = f32[24,48] broadcast(s), dimensions={}
  ROOT r = f32[24,48] multiply(t, sb)
}""")
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = m.entry.root
    assert f.fusion_backend_kind == "__triton_gemm"
    assert {"transpose", "multiply", "dot"} <= {i.opcode for i in f.fused_computation.instructions}
    (a, b), out = _check(f, TritonGemmConfig(16, 16, 16, 1, 2))
    np.testing.assert_allclose(out, 0.5 * (_t(a) @ _t(b)).T, rtol=1e-4, atol=1e-4)
