"""A statistic that a reduction's body reads through a broadcast (a variance's mean) is computed once, before the
reduction's loop, not once per step (``ReduceDotMixin._hoist_invariants`` in ``codegen/elemental/reduce_dot.py``).

Without it, a variance over rows of ``n`` ran ``n**2`` steps per lane, and random program 100067's block-level
fusion (a softmax's sums nested three deep under a column reduce) ran for minutes in the interpreter.
"""

from __future__ import annotations

import ast
import re

import numpy as np

from conftest import REPO
from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.device import get_device
from fusegen.codegen import triton_runtime
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_file, parse_module
from fusegen_plugins.backends.triton import _Analysis
from fusegen_plugins.backends.triton_block_level import TritonBlockLevelFusion
from fusegen_plugins.emitters.loop import LoopFusion

_VARIANCE = """HloModule var
c {
  p = f32[8,300] parameter(0)
  z = f32[] constant(0)
  s = f32[8] reduce(p, z), dimensions={1}, to_apply=ad
  n = f32[] constant(0.00333333333)
  nb = f32[8] broadcast(n), dimensions={}
  mean = f32[8] multiply(s, nb)
  mb = f32[8,300] broadcast(mean), dimensions={0}
  d = f32[8,300] subtract(p, mb)
  sq = f32[8,300] multiply(d, d)
  v = f32[8] reduce(sq, z), dimensions={1}, to_apply=ad
  var = f32[8] multiply(v, nb)
  vb = f32[8,300] broadcast(var), dimensions={0}
  ROOT o = f32[8,300] multiply(vb, p)
}
ENTRY e {
  x = f32[8,300] parameter(0)
  ROOT f = f32[8,300] fusion(x), kind=kLoop, calls=c
}
ad {
  lhs = f32[] parameter(0)
  rhs = f32[] parameter(1)
  ROOT sum = f32[] add(lhs, rhs)
}"""


def _nested_reduction_loops(source: str) -> list[str]:
    """Loop variables of ``for`` loops over a constant range inside another such loop (the block-level kernel's
    ``for t in range(0, BLOCK)`` over tiles is not a reduction loop and is left out, and so is the unrolled part of
    a loop, ``for r_u in tl.static_range``, inside its ``for r_o`` loop: :mod:`fusegen.codegen.loop_unroll`)."""

    def is_reduction_loop(node: ast.AST) -> bool:
        return (isinstance(node, ast.For) and isinstance(node.iter, ast.Call)
                and all(isinstance(a, ast.Constant) for a in node.iter.args)
                and not (isinstance(node.target, ast.Name) and node.target.id.endswith("_u")))

    nested = []

    def walk(node: ast.AST, inside: bool) -> None:
        for child in ast.iter_child_nodes(node):
            loop = is_reduction_loop(child)
            if loop and inside:
                nested.append(child.target.id)
            walk(child, inside or loop)

    walk(ast.parse(source), False)
    return nested


def test_a_variance_in_a_loop_fusion_computes_its_mean_once():
    f = parse_module(_VARIANCE).entry.root
    em = LoopFusion(FusionAnalysis.create(f, get_device("h200"))).emit()
    (k,) = em.kernels
    src = k.source
    loop = r"^\s+for (?!\w+_u in tl\.static_range)"  # the unrolled part of a loop is the same loop
    assert len(re.findall(loop, src, re.M)) == 2 and _nested_reduction_loops(src) == []
    # the variance is asked for first (the root reads nothing else before it); its mean's loop runs before its own
    loops = [m.start() for m in re.finditer(loop, src, re.M)]
    assert loops[0] < src.index("mean = acc_s") < loops[1]
    x = np.random.default_rng(0).standard_normal((8, 300)).astype(np.float32) * 3 + 2
    out = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_allclose(out, evaluate_instruction(f, [x]), rtol=1e-5, atol=1e-6)
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(axis=1, keepdims=True)
    np.testing.assert_allclose(out, (d * d).mean(axis=1, keepdims=True) * x64, rtol=1e-4, atol=1e-5)


def test_nested_row_sums_under_a_column_reduce_run_one_after_another():
    """Random program 100067's fusion.10 (held-out sample, tests/data/xla_kernels_r100000): a softmax's max and
    sum over rows of 257, an abs-sum over the normalised rows, and a column reduce of that statistic times a
    [3,128] operand, at XLA's [2] output tile. Its kernel's reduction loops follow one another."""
    m = parse_file(REPO / "tests" / "data" / "xla_kernels_r100000" / "rand_100067.h200_opt.hlo")
    f = m.entry.instruction("fusion.10")
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    (k,) = em.kernels
    assert _nested_reduction_loops(k.source) == []
    assert k.source.count("for r") == 3  # max, sum, abs-sum: each over the 257 of a row, once
    rng = np.random.default_rng(1)
    ops = [rng.standard_normal(o.shape.dimensions).astype(np.dtype(d)) for o, d in
           zip(f.operands, ("float32", "float32", "float16"))]
    import ml_dtypes

    ops[0] = ops[0].astype(ml_dtypes.bfloat16)
    ops[1] = ops[1].astype(ml_dtypes.bfloat16)
    out = triton_runtime.run_fusion(em, ops, f)[0]
    ref = evaluate_instruction(f, ops)
    np.testing.assert_allclose(out.astype(np.float32), ref.astype(np.float32), rtol=2e-2, atol=2e-2)
    # float64: mean over rows of |softmax| (= 1/257 of its row sum, 1), times the [3,128] operand, summed
    # over the 3 rows, halved, plus the [128] operand
    p2 = ops[2].astype(np.float64)
    e = np.exp(p2 - p2.max(axis=1, keepdims=True))
    stat = np.abs(e / e.sum(axis=1, keepdims=True)).sum(axis=1) * 0.00389105058
    want = (stat[:, None] * ops[1].astype(np.float64)).sum(axis=0) * 0.5 + ops[0].astype(np.float64)
    np.testing.assert_allclose(out.astype(np.float64), want, rtol=3e-2, atol=3e-2)
