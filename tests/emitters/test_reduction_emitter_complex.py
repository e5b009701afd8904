"""Complex (``c64``/``c128``) reductions in the reduction emitters: each kernel run in Triton's interpreter is
checked against float64/complex128 numpy (the independent oracle) and the reference evaluator, and compiles
for sm_90. Accumulators and ``tl.reduce`` carry a complex value as its (re, im) parts."""

from __future__ import annotations

import numpy as np
import pytest

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.dispatch import get_emitter_fusion_kind
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_module
from fusegen.plugin_manager import PluginManager
from fusegen_plugins.emitters.reduction import create_reduction_emitter


def _module(et: str, in_shape: str, out_shape: str, dims: str, op: str = "add", init: str = "(0, 0)",
            epilogue: str = "", out_et: str | None = None) -> str:
    out_et = out_et or et
    root = f"  ROOT e = {out_et}{out_shape} {epilogue}(r)" if epilogue else ""
    return f"""HloModule t
red {{
  a = {et}[] parameter(0)
  b = {et}[] parameter(1)
  ROOT s = {et}[] {op}(a, b)
}}
fused {{
  p = {et}{in_shape} parameter(0)
  c = {et}[] constant({init})
  {"" if epilogue else "ROOT "}r = {et}{out_shape} reduce(p, c), dimensions={{{dims}}}, to_apply=red
{root}
}}
ENTRY main {{
  p = {et}{in_shape} parameter(0)
  ROOT f = {out_et}{out_shape} fusion(p), kind=kInput, calls=fused
}}
"""


def _run(text: str, x: np.ndarray, emitter: str) -> np.ndarray:
    fusion = parse_module(text, "<complex>").entry.root
    analysis = FusionAnalysis.create(fusion)
    assert get_emitter_fusion_kind(analysis, PluginManager()).kind == "kReduction"
    em = create_reduction_emitter(analysis)
    assert type(em).__name__ == emitter
    emitted = em.emit()
    (out,) = triton_runtime.run_fusion(emitted, [x], fusion)
    ref = np.asarray(evaluate_instruction(fusion, [x]))
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5)
    for ks in emitted.kernels:
        r = triton_runtime.compile_for_target(ks)
        assert ".target sm_90a" in r.ptx and r.cubin_bytes > 0
    return out


def _cplx(rng: np.random.Generator, shape: tuple, dt) -> np.ndarray:
    return (rng.standard_normal(shape) + 1j * rng.standard_normal(shape)).astype(dt)


@pytest.mark.parametrize("et,dt,tol", [("c64", np.complex64, 2e-5), ("c128", np.complex128, 1e-12)])
def test_row_sum(et, dt, tol):
    x = _cplx(np.random.default_rng(0), (64, 300), dt)
    out = _run(_module(et, "[64,300]", "[64]", "1"), x, "RowReductionFusion")
    assert out.dtype == dt
    expect = x.astype(np.complex128).sum(1)
    np.testing.assert_allclose(out, expect, rtol=tol * 10, atol=tol * 10)
    assert np.abs(out.imag).max() > 1  # the imaginary parts are summed, not dropped


def test_column_sum_with_non_identity_init_applied_once():
    x = _cplx(np.random.default_rng(1), (300, 40), np.complex64)
    out = _run(_module("c64", "[300,40]", "[40]", "0", init="(1, -2)"), x, "ColumnReductionFusion")
    expect = x.astype(np.complex128).sum(0) + (1 - 2j)
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-4)


def test_small_column_product():
    rng = np.random.default_rng(2)
    # unit-modulus factors keep a product of 1024 finite; the phase is what must come out right
    x = np.exp(1j * rng.uniform(-np.pi, np.pi, (1024, 16))).astype(np.complex128)
    out = _run(_module("c128", "[1024,16]", "[16]", "0", op="multiply", init="(1, 0)"), x,
               "SmallColumnReductionFusion")
    np.testing.assert_allclose(out, np.prod(x, axis=0), rtol=1e-12, atol=1e-12)


def test_epilogue_takes_the_real_part():
    x = _cplx(np.random.default_rng(3), (32, 256), np.complex64)
    out = _run(_module("c64", "[32,256]", "[32]", "1", epilogue="real", out_et="f32"), x, "RowReductionFusion")
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, x.astype(np.complex128).sum(1).real, rtol=1e-5, atol=1e-4)
