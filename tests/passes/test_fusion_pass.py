"""The fusion pass and the default pipeline on unoptimized JAX modules (../shared/corpus/jax/*.pre.hlo)."""

from __future__ import annotations

import numpy as np
import pytest

from _backend_helpers import device, plugin_manager
from conftest import CORPUS, corpus_path
from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_file, parse_module
from fusegen.hlo.printer import print_module
from fusegen.passes import fusion
from fusegen.passes.pipeline import DEFAULT_PIPELINE, is_unoptimized, optimize_if_needed
from fusegen.runtime.inputs import make_inputs
from fusegen.verify.judged_run import run_module

PRE = sorted(p.name for p in (CORPUS / "jax").glob("*.pre.hlo")) if CORPUS.exists() else []


def test_default_pipeline_order_is_xlas():
    assert DEFAULT_PIPELINE == ("dot-decomposer", "gemm-fusion", "gemm-rewriter", "fusion")
    assert {"gemm-fusion", "gemm-rewriter", "fusion"} <= set(plugin_manager().passes())


@pytest.mark.parametrize("name", PRE)
def test_pre_modules_fuse_and_run(name):
    m = parse_file(corpus_path("jax", name))
    assert is_unoptimized(m)
    args = make_inputs(m, 0)
    ref = evaluate_module(m, args)
    res = optimize_if_needed(m, pm=plugin_manager(), device=device())
    assert res is not None and res.changed
    assert not is_unoptimized(m)
    # the optimized module still computes the same function, and reprints as parseable HLO
    m = parse_module(print_module(m))
    out = evaluate_module(m, args)
    outs = out if isinstance(out, tuple) else (out,)
    refs = ref if isinstance(ref, tuple) else (ref,)
    for a, b in zip(outs, refs):
        # bf16 modules: the bias folded into the GEMM is added before rounding, one bf16 ulp apart
        np.testing.assert_allclose(np.asarray(a, np.float64), np.asarray(b, np.float64), rtol=5e-2, atol=5e-2)
    _, rep = run_module(m, args, pm=plugin_manager(), compile_kernels=False)
    assert rep.ok, [(f.name, f.status, f.reason) for f in rep.fusions]
    assert rep.fusions, "no fusion ran"
    assert all(f.backend == "triton" for f in rep.fusions), [(f.name, f.backend, f.reason) for f in rep.fusions]


def test_softmax_structure():
    m = parse_file(corpus_path("jax", "softmax.pre.hlo"))
    assert fusion.run(m)
    fus = [i for i in m.entry.instructions if i.opcode == "fusion"]
    kinds = sorted(i.attrs["kind"] for i in fus)
    # two reductions (kInput), exp and divide loops; the expensive exp is not duplicated into the reduction
    assert kinds == ["kInput", "kInput", "kLoop", "kLoop"]
    assert sum(1 for c in m.computations for i in c.instructions if i.opcode == "exponential") == 1
    assert not any(i.opcode in ("broadcast", "subtract", "reshape") for i in m.entry.instructions)


def test_cheap_producer_is_duplicated_expensive_is_not():
    m = parse_module("""HloModule m
ENTRY e {
  p = f32[64] parameter(0)
  n = f32[64] negate(p)
  x = f32[64] exponential(p)
  a = f32[64] add(n, x)
  b = f32[64] multiply(n, x)
  ROOT t = (f32[64], f32[64]) tuple(a, b)
}""")
    fusion.run(m)
    names = [i.opcode for i in m.entry.instructions]
    assert names.count("fusion") == 3  # add, multiply, and exp on its own
    negates = sum(1 for c in m.computations for i in c.instructions if i.opcode == "negate")
    assert negates == 2  # negate duplicated into both consumers


def test_sibling_reductions_become_one_multi_output_fusion():
    m = parse_module("""HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  p = f32[32,128] parameter(0)
  z = f32[] constant(0)
  sq = f32[32,128] multiply(p, p)
  r1 = f32[32] reduce(p, z), dimensions={1}, to_apply=add
  r2 = f32[32] reduce(sq, z), dimensions={1}, to_apply=add
  ROOT t = (f32[32], f32[32]) tuple(r1, r2)
}""")
    args = make_inputs(m, 0)
    ref = evaluate_module(m, args)
    fusion.run(m)
    fus = [i for i in m.entry.instructions if i.opcode == "fusion"]
    assert len(fus) == 1 and fus[0].shape.is_tuple and fus[0].attrs["kind"] == "kInput"
    out = evaluate_module(parse_module(print_module(m)), args)
    for a, b in zip(out, ref):
        np.testing.assert_allclose(a, b, rtol=1e-5)


def test_optimized_modules_are_left_alone():
    m = parse_file(corpus_path("jax", "gpu_softmax.default.h100_opt.hlo"))
    assert not is_unoptimized(m)
    assert optimize_if_needed(m, pm=plugin_manager()) is None
