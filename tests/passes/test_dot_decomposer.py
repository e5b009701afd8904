"""``dot-decomposer`` (XLA's ``DotDecomposer``) in the default pipeline: dots with several batch / contracting /
non-contracting dimensions become ``[batch, m, k] x [batch, k, n]`` dots that GemmFusion takes, with the same
values (float64 numpy and XLA:CPU are the oracles); canonical dots and laid-out modules are left alone."""

from __future__ import annotations

import numpy as np
import pytest

from xla_oracle import JAX_ERROR, run_xla

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.dot_numerics import tf32_round
from fusegen.hlo.parser import parse_module
from fusegen.passes import dot_decomposer
from fusegen.passes.pipeline import run_pipeline

EINSUM = """HloModule jit_attn
ENTRY main.1 {
  q.1 = f32[2,4,32,16]{3,2,1,0} parameter(0)
  k.1 = f32[2,4,48,16]{3,2,1,0} parameter(1)
  ROOT dot_general.1 = f32[2,4,32,48]{3,2,1,0} dot(q.1, k.1), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, rhs_contracting_dims={3}
}
"""

TWO_CONTRACTING = """HloModule m
ENTRY e {
  a = f32[4,6,5] parameter(0)
  b = f32[6,7,5] parameter(1)
  ROOT d = f32[4,7] dot(a, b), lhs_contracting_dims={1,2}, rhs_contracting_dims={0,2}
}
"""


def _tf32(x: np.ndarray) -> np.ndarray:
    """An f32 operand of a default-precision dot as XLA:GPU multiplies it (cvt.rna to tf32), in f64."""
    return tf32_round(x).astype(np.float64)


def _dots(module):
    return [i for i in module.all_instructions() if i.opcode == "dot"]


def test_einsum_bhqd_bhkd_becomes_one_batch_dim_and_reaches_a_triton_gemm_fusion():
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 32, 16)).astype(np.float32)
    k = rng.standard_normal((2, 4, 48, 16)).astype(np.float32)
    expect = np.einsum("bhqd,bhkd->bhqk", _tf32(q), _tf32(k))  # a default-precision f32 dot: tf32 (XLA:GPU)
    m = parse_module(EINSUM, "einsum.hlo")
    res = run_pipeline(m)
    assert res.per_pass[0] == ("dot-decomposer", True)
    (dot,) = _dots(m)
    assert dot.shape.dimensions == (8, 32, 48)
    assert (dot.attrs["lhs_batch_dims"], dot.attrs["lhs_contracting_dims"]) == ([0], [2])
    assert (dot.attrs["rhs_batch_dims"], dot.attrs["rhs_contracting_dims"]) == ([0], [1])
    fusion = m.entry.root
    assert fusion.opcode == "fusion" and "__triton_gemm" in str(fusion.attrs.get("backend_config"))
    assert any(i is dot for i in fusion.fused_computation.instructions)
    out = evaluate_module(m, [q, k])
    np.testing.assert_allclose(out, expect, rtol=1e-5, atol=1e-5)
    if JAX_ERROR is None:  # XLA:CPU multiplies in IEEE f32
        exact = np.einsum("bhqd,bhkd->bhqk", q.astype(np.float64), k.astype(np.float64))
        np.testing.assert_allclose(run_xla(EINSUM, [q, k])[0], exact, rtol=1e-5, atol=1e-5)


def test_several_contracting_dims_become_one():
    rng = np.random.default_rng(1)
    a = rng.standard_normal((4, 6, 5)).astype(np.float32)
    b = rng.standard_normal((6, 7, 5)).astype(np.float32)
    m = parse_module(TWO_CONTRACTING, "two.hlo")
    assert dot_decomposer.run(m)
    (dot,) = _dots(m)
    assert [o.shape.dimensions for o in dot.operands] == [(4, 30), (30, 7)]
    assert dot_decomposer.is_canonical_dot(dot)
    np.testing.assert_allclose(evaluate_module(m, [a, b]),
                               np.einsum("ijk,jlk->il", _tf32(a), _tf32(b)),
                               rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("text", [
    # x @ W.T: one contracting and one non-contracting dim per side
    "HloModule m\nENTRY e {\n  a = f32[8,16] parameter(0)\n  b = f32[32,16] parameter(1)\n"
    "  ROOT d = f32[8,32] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={1}\n}\n",
    # one leading batch dim
    "HloModule m\nENTRY e {\n  a = f32[3,8,16] parameter(0)\n  b = f32[3,16,4] parameter(1)\n  ROOT d = f32[3,8,4] "
    "dot(a, b), lhs_batch_dims={0}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}\n}\n",
    # several batch dims, but a laid-out (optimized) module: its reshapes would not be bitcasts
    "HloModule m\nENTRY e {\n  a = f32[2,3,8,16]{2,3,1,0} parameter(0)\n  b = f32[2,3,16,4] parameter(1)\n"
    "  ROOT d = f32[2,3,8,4] dot(a, b), lhs_batch_dims={0,1}, lhs_contracting_dims={3}, rhs_batch_dims={0,1}, "
    "rhs_contracting_dims={2}\n}\n",
])
def test_canonical_dots_and_laid_out_modules_are_left_alone(text):
    m = parse_module(text, "c.hlo")
    assert not dot_decomposer.run(m)
    assert len(m.entry.instructions) == 3
