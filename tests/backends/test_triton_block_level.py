"""The block-level Triton emitter on __triton fusions (XLA's softmax fusion from the H100 corpus module)."""

from __future__ import annotations

import numpy as np
import pytest

from _backend_helpers import plugin_manager
from conftest import corpus_path
from hlo_modules import _SOFTMAX_T
from fusegen.codegen import triton_runtime
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_file, parse_module
from fusegen.runtime.inputs import make_inputs
from fusegen.verify.judged_run import run_module
from fusegen_plugins.backends.triton import _Analysis
from fusegen_plugins.backends.triton_block_level import TritonBlockLevelFusion


def test_softmax_runs_the_block_level_kernel():
    m = parse_file(corpus_path("jax", "gpu_softmax.default.h100_opt.hlo"))
    _, rep = run_module(m, make_inputs(m, 0), pm=plugin_manager(), compile_kernels=True)
    assert rep.ok
    (f,) = rep.fusions
    assert (f.kind, f.emitter, f.backend) == ("kTriton", "TritonBlockLevelFusion", "triton")
    # one program per [1,4096] output tile, the config's 4 warps, and the compiled kernel's shared memory
    # (what XLA launches a Triton fusion with; tests/corpus/test_launch_corpus.py compares it with XLA's)
    shared = triton_runtime.compile_for_target(f.kernels[0]).shared_bytes
    assert f.launch == f"grid=64 warps=4 smem={shared}B" and f.compiled == "ok"
    assert f.kernels[0].launch.to_json()["shared_memory_bytes"] == shared > 0
    assert f.max_abs_error is not None and f.max_abs_error < 1e-6


def _fusion(text):
    return parse_module(text).entry.root


@pytest.mark.parametrize("R,C,TR,TC,W", [(6, 100, 1, 128, 4), (5, 64, 2, 64, 2), (3, 33, 4, 64, 8)])
def test_masked_tiles_and_several_rows_per_tile(R, C, TR, TC, W):
    f = _fusion(_SOFTMAX_T.format(R=R, C=C, TR=TR, TC=TC, W=W))
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    k = em.kernels[0]
    assert k.launch.grid == (-(-R // TR),) and k.launch.num_warps == W
    x = np.random.default_rng(0).standard_normal((R, C)).astype(np.float32) * 5
    out = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_allclose(out, evaluate_instruction(f, [x]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("R,C,TR,TC", [(4, 64, 1, 32), (3, 40, 2, 8), (5, 33, 1, 1)])
def test_tile_not_covering_the_reduction_reduces_a_sub_tile(R, C, TR, TC):
    """Output tiles narrower than the reduced row (XLA's [1,1,8] tiles of RMS norms in backward passes): each
    program reduces its rows once, on the output tile's rows by the whole row (the reduce's operand tile, as
    XLA's tile propagation gives it), the softmax's sum over an exponential of the row's maximum an ordinary
    reduce of that tile, not a [lanes, row] sub-tile per lane nor a nested one per lane of that."""
    f = _fusion(_SOFTMAX_T.format(R=R, C=C, TR=TR, TC=TC, W=4))
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    assert em.kernels[0].launch.grid == (-(-R // TR) * -(-C // TC),)
    assert "row_tile" in em.kernels[0].source and "red_tile" not in em.kernels[0].source
    x = np.random.default_rng(1).standard_normal((R, C)).astype(np.float32) * 5
    out = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_allclose(out, evaluate_instruction(f, [x]), rtol=1e-5, atol=1e-6)
    e = np.exp(x.astype(np.float64) - x.max(axis=1, keepdims=True))
    np.testing.assert_allclose(out, e / e.sum(axis=1, keepdims=True), rtol=1e-5, atol=1e-6)


_REVERSED_STAT = """HloModule m
ad {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}
c {
  p = f32[6,24] parameter(0)
  z = f32[] constant(0)
  s = f32[6] reduce(p, z), dimensions={1}, to_apply=ad
  rv = f32[6] reverse(s), dimensions={0}
  sb = f32[6,24] broadcast(rv), dimensions={0}
  ROOT d = f32[6,24] subtract(p, sb)
}
ENTRY e {
  x = f32[6,24] parameter(0)
  ROOT f = f32[6,24] fusion(x), kind=kCustom, calls=c, backend_config={"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"2","output_tiles":[{"sizes":["2","32"]}],"num_ctas":1,"num_stages":1}}}
}"""


def test_reduction_read_at_other_rows_than_the_tiles():
    """A row statistic read at other indices than the tile's own (here reversed) is reduced on a sub-tile at
    the indices read."""
    f = _fusion(_REVERSED_STAT)
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    x = np.random.default_rng(2).standard_normal((6, 24)).astype(np.float32)
    out = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_allclose(out, evaluate_instruction(f, [x]), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(out, x - x.astype(np.float64).sum(axis=1)[::-1, None], rtol=1e-5, atol=1e-5)
    triton_runtime.compile_for_target(em.kernels[0], capability=90)  # the sub-tile function compiles for sm_90


def test_real_model_backward_norms_run_on_the_block_level_kernel():
    """gemma's RMS-norm fusions tiled [1,1,8] over rows of 32 (XLA's config) match the evaluator."""
    from conftest import REPO
    from fusegen.runtime.inputs import random_value

    m = parse_file(REPO / "tests" / "data" / "real_models" / "gemma.h200_opt.hlo")
    f = m.entry.instruction("fusion.77")
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    assert em.kernels[0].launch.grid == (2 * 8 * 4,)
    rng = np.random.default_rng(0)
    ops = [random_value(o.shape, rng) for o in f.operands]
    ref = evaluate_instruction(f, ops)
    out = triton_runtime.run_fusion(em, ops, f)[0]
    np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-6)
    # the interpreter's variant: [2,8,32] in one tile, the row reduced on the tile itself
    em2 = TritonBlockLevelFusion(_Analysis(f)).emit()
    (k,) = em2.kernels
    assert k.interpret_variant is not None and k.interpret_variant.constexprs["N"] == 1
    assert "row_tile" in k.source and "row_tile" not in k.interpret_variant.source
    triton_runtime.compile_for_target(k, capability=90)
    np.testing.assert_allclose(triton_runtime.run_fusion(em2, ops, f)[0], ref, rtol=1e-5, atol=1e-6)


def test_split_k_partial_sum_inside_a_layer_norm_runs_on_the_block_level_kernel():
    """gpt12's __triton layer norms start with a reduce over 4 split-K partials (not a tile reduction):
    the block-level emitter computes it per lane instead of declining to the host."""
    import numpy as np

    from conftest import corpus_path
    from fusegen.hlo.parser import parse_modules
    from fusegen.runtime.executor import Executor
    from fusegen.runtime.inputs import random_value
    from fusegen.verify.recorder import RunRecorder

    path = corpus_path("jax", "gpt12.h200_opt.hlo")
    m = parse_modules(path.read_text(), str(path))[0]
    inst = m.entry.instruction("triton_softmax.142")
    ex = Executor(m, compile_kernels=True, observer=RunRecorder(m))  # the verdict's errors and budget
    rng = np.random.default_rng(0)
    ex._run_fusion(inst, [random_value(o.shape, rng) for o in inst.operands])
    rep = ex.reports["triton_softmax.142"]
    assert (rep.emitter, rep.backend, rep.status, rep.compiled) == ("TritonBlockLevelFusion", "triton", "ok", "ok")
    assert rep.max_abs_error is not None


def test_row_maximum_keeps_nans_on_the_gpu_as_xla():
    """XLA's maximum propagates NaN (its softmax kernels use ``max.NaN.f32``); the block-level kernel's tile
    maximum does too on sm_90 (Triton's ``tl.max`` drops NaNs there), and in the interpreter a NaN row gives NaN."""
    f = _fusion(_SOFTMAX_T.format(R=4, C=64, TR=1, TC=64, W=2))
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    ptx = triton_runtime.compile_for_target(em.kernels[0], pointer_alignment=16).ptx
    assert "max.NaN.f32" in ptx and "max.f32" not in ptx
    x = np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32)
    x[2, 5] = np.nan
    out = triton_runtime.run_fusion(em, [x], f)[0]
    ref = evaluate_instruction(f, [x])
    assert np.isnan(out[2]).all() and np.isnan(ref[2]).all()
    np.testing.assert_allclose(out[[0, 1, 3]], ref[[0, 1, 3]], rtol=1e-5, atol=1e-6)


_VARIANCE_T = """HloModule m
ad {{
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] add(a, b)
}}
c {{
  p = bf16[{R},{C}] parameter(0)
  x = f32[{R},{C}] convert(p)
  z = f32[] constant(0)
  s = f32[{R}] reduce(x, z), dimensions={{1}}, to_apply=ad
  k = f32[] constant({INV})
  kb = f32[{R}] broadcast(k), dimensions={{}}
  mean = f32[{R}] multiply(s, kb)
  mb = f32[{R},{C}] broadcast(mean), dimensions={{0}}
  d = f32[{R},{C}] subtract(x, mb)
  sq = f32[{R},{C}] multiply(d, d)
  ss = f32[{R}] reduce(sq, z), dimensions={{1}}, to_apply=ad
  ROOT v = f32[{R}] multiply(ss, kb)
}}
ENTRY e {{
  x = bf16[{R},{C}] parameter(0)
  ROOT f = f32[{R}] fusion(x), kind=kCustom, calls=c, backend_config={{"fusion_backend_config":{{"kind":"__triton","block_level_fusion_config":{{"num_warps":"2","output_tiles":[{{"sizes":["{TR}"]}}],"num_ctas":1,"num_stages":1}}}}}}
}}"""


@pytest.mark.parametrize("R,C,TR", [(8, 64, 4), (6, 100, 4), (5, 33, 1)])
def test_variance_reduces_the_rows_the_output_tile_lacks_on_one_extended_tile(R, C, TR):
    """``var(x)`` over rows with a 1-D output tile (XLA's z_var_bf16: f32[1024] in tiles of 4 over bf16 rows of
    4096): the row tile is the output tile extended by the whole row, as XLA's tile propagation gives the
    reduce's operand; both reductions run on it (no per-lane loop over the row, none nested in another), and
    the GPU kernel gives the evaluator's and float64 numpy's variances."""
    import ml_dtypes

    f = _fusion(_VARIANCE_T.format(R=R, C=C, TR=TR, INV=1.0 / C))
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    (k,) = em.kernels
    assert k.launch.grid == (-(-R // TR),) and "ext_tile" in k.source
    assert "for r" not in k.source  # the elemental generator's per-lane reduction loop
    x = (np.random.default_rng(3).standard_normal((R, C)) * 3 + 1).astype(ml_dtypes.bfloat16)
    out = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_allclose(out, evaluate_instruction(f, [x]), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(out, x.astype(np.float64).var(axis=1), rtol=1e-5, atol=1e-6)
    triton_runtime.compile_for_target(k, capability=90)


_UNIT_BITCAST = """HloModule m
c {
  p = f32[1,{R},{C}] parameter(0)
  b2 = f32[{R},{C}] bitcast(p)
  ninf = f32[] constant(-inf)
  m = f32[{R}] reduce(b2, ninf), dimensions={{1}}, to_apply=mx
  mb = f32[1,{R},{C}] broadcast(m), dimensions={{1}}
  ROOT d = f32[1,{R},{C}] subtract(p, mb)
}
ENTRY e {
  x = f32[1,{R},{C}] parameter(0)
  ROOT f = f32[1,{R},{C}] fusion(x), kind=kCustom, calls=c, backend_config={{"fusion_backend_config":{{"kind":"__triton","block_level_fusion_config":{{"num_warps":"1","output_tiles":[{{"sizes":["1","{TR}","{C}"]}}],"num_ctas":1,"num_stages":1}}}}}}
}
mx { ROOT hi = f32[] maximum(f32[] parameter(0), f32[] parameter(1)) }"""


@pytest.mark.parametrize("R,C,TR", [(41, 21, 1), (6, 64, 2), (5, 100, 1)])
def test_a_row_statistic_of_a_unit_dim_bitcast_is_a_tile_reduce(R, C, TR):
    """``reduce(bitcast([1,R,C] -> [R,C]))`` read back at the lane's row (fresh random program 100149's
    ``x - max(x)``): the bitcast only drops a unit dimension, so the reduce is the tile's own, one load a lane
    (XLA's kernel: one load), not a loop over the row per lane."""
    text = _UNIT_BITCAST.replace("{R}", str(R)).replace("{C}", str(C)).replace("{TR}", str(TR))
    f = _fusion(text.replace("{{", "{").replace("}}", "}"))
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    src = em.kernels[0].source
    assert "tl.reduce(" in src and "for r in range" not in src
    x = np.random.default_rng(3).standard_normal((1, R, C)).astype(np.float32)
    out = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_array_equal(out, evaluate_instruction(f, [x]))
    np.testing.assert_array_equal(out, x - x.max(axis=2, keepdims=True))


_SCALAR_NORM = """HloModule m
c {
  p = f32[{N}] parameter(0)
  z = f32[] constant(0)
  s = f32[] reduce(p, z), dimensions={{0}}, to_apply=ad
  sb = f32[{N}] broadcast(s), dimensions={{}}
  d = f32[{N}] divide(p, sb)
  ROOT o = f32[{N},{C}] broadcast(d), dimensions={{0}}
}
ENTRY e {
  x = f32[{N}] parameter(0)
  ROOT f = f32[{N},{C}] fusion(x), kind=kCustom, calls=c, backend_config={{"fusion_backend_config":{{"kind":"__triton","block_level_fusion_config":{{"num_warps":"4","output_tiles":[{{"sizes":["{TN}","{TC}"]}}],"num_ctas":1,"num_stages":1}}}}}}
}
ad { ROOT sum = f32[] add(f32[] parameter(0), f32[] parameter(1)) }"""


@pytest.mark.parametrize("N,C,TN,TC", [(1025, 17, 16, 17), (300, 4, 8, 4), (7, 3, 1, 4)])
def test_a_scalar_statistic_is_reduced_once_per_program(N, C, TN, TC):
    """A sum over the whole operand broadcast over the tile (fresh random program 100138's normaliser): one
    tile reduce of the whole array per program (XLA's tile propagation: no loop, 13 loads a thread for 1025
    bf16), not a loop over the array per lane."""
    text = _SCALAR_NORM
    for k, v in (("{N}", N), ("{C}", C), ("{TN}", TN), ("{TC}", TC)):
        text = text.replace(k, str(v))
    f = _fusion(text.replace("{{", "{").replace("}}", "}"))
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    src = em.kernels[0].source
    assert "def whole_tile(" in src and "for r in range" not in src
    x = (np.random.default_rng(4).random(N) + 0.5).astype(np.float32)
    out = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_allclose(out, evaluate_instruction(f, [x]), rtol=2e-6)
    x64 = x.astype(np.float64)
    np.testing.assert_allclose(out, np.broadcast_to((x64 / x64.sum())[:, None], (N, C)), rtol=2e-6)
    triton_runtime.compile_for_target(em.kernels[0], capability=90)


@pytest.mark.parametrize("shape,tile,axis", [((32, 257, 1), (1, 128, 1), 1), ((1, 2), (1, 1), 1),
                                             ((4, 1, 40), (1, 1, 16), 2)])
def test_a_unit_dim_bitcast_row_statistic_over_a_partial_tile(shape, tile, axis):
    """The same bitcast, the output tile a piece of the row (fresh random programs 100106: [32,257,1] at
    [1,128,1], a softmax's max and sum; 100119: [1,2] at [1,1], a max to a scalar): the row statistic is
    reduced once per program on the row's tile (the operand read at the tile's index without its unit
    dimensions), as for the tile's own array, not per lane."""
    dims = ",".join(map(str, shape))
    kept = [n for d, n in enumerate(shape) if n != 1]
    red = [d for d, n in enumerate(shape) if n != 1].index(axis)
    out = [n for i, n in enumerate(kept) if i != red]
    bdims = [d for d in range(len(shape)) if shape[d] != 1 and d != axis]
    text = f"""HloModule m
c {{
  p = f32[{dims}] parameter(0)
  b2 = f32[{",".join(map(str, kept))}] bitcast(p)
  ninf = f32[] constant(-inf)
  m = f32[{",".join(map(str, out))}] reduce(b2, ninf), dimensions={{{red}}}, to_apply=mx
  mb = f32[{dims}] broadcast(m), dimensions={{{",".join(map(str, bdims))}}}
  ROOT d = f32[{dims}] subtract(p, mb)
}}
ENTRY e {{
  x = f32[{dims}] parameter(0)
  ROOT f = f32[{dims}] fusion(x), kind=kCustom, calls=c, backend_config={{"fusion_backend_config":{{"kind":"__triton","block_level_fusion_config":{{"num_warps":"1","output_tiles":[{{"sizes":[{",".join(f'"{t}"' for t in tile)}]}}],"num_ctas":1,"num_stages":1}}}}}}
}}
mx {{ ROOT hi = f32[] maximum(f32[] parameter(0), f32[] parameter(1)) }}"""
    f = _fusion(text)
    em = TritonBlockLevelFusion(_Analysis(f), interpret_variant=False).emit()
    src = em.kernels[0].source
    assert "def row_tile(" in src and "for r in range" not in src
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    got = triton_runtime.run_fusion(em, [x], f)[0]
    np.testing.assert_array_equal(got, evaluate_instruction(f, [x]))
    np.testing.assert_array_equal(got, x - x.max(axis=axis, keepdims=True))
    triton_runtime.compile_for_target(em.kernels[0], capability=90)
