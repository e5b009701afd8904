"""Where `fusegen run`'s time goes (``--json`` ``"timings"``, ``--profile``), and the interpreter variants that
make it short: they must compute bit for bit what the emitted kernel computes."""

from __future__ import annotations

import json
import subprocess
import sys

import attrs
import numpy as np
import pytest

from conftest import corpus_path
from hlo_modules import _SOFTMAX_T
from fusegen.codegen import triton_runtime
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.parser import parse_module
from fusegen.runtime.timings import FUSION_PHASES, MODULE_PHASES
from fusegen_plugins.backends.triton import _Analysis
from fusegen.codegen.kernel import interpret_tile_sizes
from fusegen_plugins.backends.triton_block_level import TritonBlockLevelFusion


def _fusegen(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True)


def test_interpret_tile_sizes_grow_innermost_first_within_the_lane_budget():
    # gpt12's layer norm: [1,1,768] tiles (1024 lanes) over [4,128,768] grow along dim 1 to 128 rows
    assert interpret_tile_sizes((4, 128, 768), [1, 1, 768]) == [1, 128, 768]
    assert interpret_tile_sizes((4, 128, 768), [1, 1, 768], max_lanes=4096) == [1, 4, 768]
    # a dimension grows at most to its size (non-power-of-two sizes stay masked)
    assert interpret_tile_sizes((6, 100), [1, 128]) == [6, 128]
    # already past the budget: unchanged
    assert interpret_tile_sizes((2, 1 << 18), [1, 1 << 18]) == [1, 1 << 18]


@pytest.mark.parametrize("R,C,TR,TC,W", [(6, 100, 1, 128, 4), (37, 64, 2, 64, 2), (19, 33, 4, 64, 8)])
def test_block_level_interpret_variant_is_bitwise_the_kernel(R, C, TR, TC, W):
    f = parse_module(_SOFTMAX_T.format(R=R, C=C, TR=TR, TC=TC, W=W)).entry.root
    em = TritonBlockLevelFusion(_Analysis(f)).emit()
    (k,) = em.kernels
    assert k.interpret_variant is not None and k.interpret_variant.params == k.params
    assert k.launch.grid == (-(-R // TR),)  # the launch XLA makes is kept for reports and compiling
    assert k.interpret_variant.launch.grid == (1,)
    x = np.random.default_rng(1).standard_normal((R, C)).astype(np.float32) * 5
    wide = triton_runtime.run_fusion(em, [x], f)[0]
    plain = attrs.evolve(em, kernels=(attrs.evolve(k, interpret_variant=None),))
    narrow = triton_runtime.run_fusion(plain, [x], f)[0]
    assert np.array_equal(wide.view(np.uint32), narrow.view(np.uint32))
    np.testing.assert_allclose(wide, evaluate_instruction(f, [x]), rtol=1e-5, atol=1e-6)


def test_run_json_has_timings_per_module_and_fusion_and_profile_names_the_slowest():
    path = corpus_path("jax", "gpu_softmax.default.h100_opt.hlo")
    p = _fusegen("run", str(path), "--no-compile", "--json", "--profile")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    t = doc["timings"]
    assert set(t) == set(MODULE_PHASES) | {"seconds"}
    assert all(v >= 0 for v in t.values()) and t["parse"] > 0 and t["interpret"] > 0 and t["reference"] > 0
    assert t["compile"] == 0  # --no-compile
    parts = sum(v for k, v in t.items() if k != "seconds")
    assert parts <= t["seconds"] * 1.01 + 1e-3  # phases never add up to more than the wall time
    (f,) = doc["fusions"]
    ft = f["timings"]
    assert set(ft) == set(FUSION_PHASES) | {"seconds"}
    assert ft["interpret"] > 0 and ft["dispatch"] > 0
    assert ft["seconds"] == pytest.approx(sum(ft[k] for k in FUSION_PHASES), abs=1e-5)
    assert ft["interpret"] <= t["interpret"] + 1e-6
    # the profile goes to stderr with --json, the fusion's row carries its phase times
    assert "largest estimated h200 time (estimate" in p.stderr and "triton_softmax.2" in p.stderr
    assert f"{ft['interpret']:.3f}" in p.stderr


def test_profile_with_compile_records_compile_time():
    path = corpus_path("jax", "gpu_softmax.default.h100_opt.hlo")
    p = _fusegen("run", str(path), "--json")
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    assert doc["fusions"][0]["compiled_sm90"] == "ok"
    assert doc["timings"]["compile"] >= doc["fusions"][0]["timings"]["compile"] > 0


_TWO_SOFTMAXES = _SOFTMAX_T.replace("ENTRY e {{", "c2 {{\n" + _SOFTMAX_T.split("c {{\n")[1].split("}}\nENTRY")[0].replace(
    "ROOT d =", "ROOT d2 =") + "}}\nENTRY e {{").replace(
    "  ROOT f = f32[{R},{C}] fusion(x), kind=kCustom, calls=c,",
    "  f1 = f32[{R},{C}] fusion(x), kind=kCustom, calls=c, backend_config={{}}\n"
    "  ROOT f = f32[{R},{C}] fusion(f1), kind=kCustom, calls=c2,")


@pytest.mark.parametrize("jobs,pool_after", [(1, 4), (2, 1)])
def test_identical_fusions_compile_once_in_process_or_on_the_pool(jobs, pool_after):
    from fusegen.runtime.compile_jobs import CompileJobs
    from fusegen.runtime.executor import Executor
    from fusegen.verify.recorder import RunRecorder

    text = _TWO_SOFTMAXES.format(R=8, C=64, TR=1, TC=64, W=4)
    # f1 runs on its own config (none: the host), so give it the same tiling as f
    bc = text.split("ROOT f = ")[1].split("backend_config=")[1].split("\n")[0]
    m = parse_module(text.replace("backend_config={}", f"backend_config={bc}"))
    ex = Executor(m, compile_kernels=True, jobs=jobs, observer=RunRecorder(m))
    ex.compiles = CompileJobs(jobs, pool_after=pool_after)
    x = np.random.default_rng(0).standard_normal((8, 64)).astype(np.float32)
    try:
        out = ex.run([x])
    finally:
        ex.finish_compiles()
    np.testing.assert_allclose(out, evaluate_instruction(m.entry.root, [evaluate_instruction(
        m.entry.instruction("f1"), [x])]), rtol=1e-6)
    reps = [ex.reports["f1"], ex.reports["f"]]
    assert [r.compiled for r in reps] == ["ok", "ok"] and [r.status for r in reps] == ["ok", "ok"]
    assert ex.compiles.distinct == 1  # c2 is c renamed: one compile serves both
    assert reps[0].timings.get("compile") > 0


def test_gemm_interpret_variant_with_larger_tiles_is_the_smaller_one(monkeypatch):
    """Wider GEMM tiles (block_m/block_n; block_k is the variant's own in both) give every output element the
    same f32 sums up to their order: numpy's BLAS sums a K step in an order that depends on the tile shape, so
    the two runs may differ in the last bits (a few f32 ulps of the sum of |products|), never more."""
    from fusegen.hlo.parser import parse_file
    from fusegen.runtime.executor import Executor
    from fusegen.runtime.inputs import random_value
    from fusegen_plugins.backends.triton_gemm_emitter import TritonGemmFusion

    m = parse_file(corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo"))
    inst = next(i for i in m.entry.instructions if i.opcode == "fusion" and "gemm" in i.fusion_backend_kind)
    rng = np.random.default_rng(0)
    ops = [random_value(o.shape, rng) for o in inst.operands]
    outs, grids = [], []
    for tile in (32, TritonGemmFusion.INTERPRET_TILE):
        monkeypatch.setattr(TritonGemmFusion, "INTERPRET_TILE", tile)
        em, rep = Executor(m, compile_kernels=False).plan_fusion(inst)
        (k,) = em.kernels
        grids.append((k.interpret_variant or k).launch.grid[0])
        outs.append(triton_runtime.run_fusion(em, ops, inst)[0])
    assert grids[1] < grids[0]
    # the bound: K x f32 epsilon x sum of |products| per element (the reordering of one f32 sum)
    a, b = (np.abs(np.asarray(x, dtype=np.float64)) for x in ops)
    bound = np.einsum("mbk,bkn->bmn", a, b) * a.shape[-1] * np.finfo(np.float32).eps
    assert np.all(np.abs(np.asarray(outs[0], np.float64) - outs[1]) <= bound)
    assert np.mean(np.asarray(outs[0]) == np.asarray(outs[1])) > 0.5  # mostly the same bits


_LOG_SOFTMAX_RESHAPED = """HloModule m
mx {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT r = f32[] maximum(a, b)
}
c {
  p = f32[8,64] parameter(0)
  x = f32[2,4,64] bitcast(p)
  ninf = f32[] constant(-inf)
  m = f32[8] reduce(p, ninf), dimensions={1}, to_apply=mx
  mb = f32[2,4] bitcast(m)
  b = f32[2,4,64] broadcast(mb), dimensions={0,1}
  ROOT s = f32[2,4,64] subtract(x, b)
}
ENTRY e {
  x = f32[8,64] parameter(0)
  ROOT f = f32[2,4,64] fusion(x), kind=kCustom, calls=c, backend_config={"fusion_backend_config":{"kind":"__triton","block_level_fusion_config":{"num_warps":"4","output_tiles":[{"sizes":["1","1","64"]}],"num_ctas":1,"num_stages":1}}}
}"""


def test_reduce_of_a_reshaped_tile_is_a_tile_reduction_not_a_per_lane_loop():
    """gpt12's final log-softmax reduces f32[512,8192] and bitcasts the row maxima to [4,128]: the emitter
    folds the tile's own rows (a per-lane loop over 8192 elements took minutes in the interpreter)."""
    f = parse_module(_LOG_SOFTMAX_RESHAPED).entry.root
    em = TritonBlockLevelFusion(_Analysis(f)).emit()
    (k,) = em.kernels
    assert "tl.reduce(" in k.source and "for r in range" not in k.source
    x = np.random.default_rng(2).standard_normal((8, 64)).astype(np.float32)
    out = triton_runtime.run_fusion(em, [x], f)[0]
    assert np.array_equal(out, evaluate_instruction(f, [x]))
