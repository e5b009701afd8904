"""The Triton GEMM emitter and codegen backend: interpreter runs against the evaluator, sm_90 compiles."""

from __future__ import annotations

import attrs
import numpy as np
import pytest

from _backend_helpers import device, plugin_manager
from conftest import corpus_path
from fusegen.codegen import triton_runtime
from fusegen.codegen_backend import Config
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo import dtypes
from fusegen.hlo.parser import parse_file, parse_module
from fusegen.passes.pipeline import optimize_if_needed
from fusegen.runtime.compare import compare
from fusegen.runtime.inputs import make_inputs
from fusegen.verify.budget import judge, output_budgets
from fusegen.config.verify_options import VerifyOptions
from fusegen.verify.judged_run import run_module
from fusegen_plugins.backends.triton import TritonBackend, _Analysis
from fusegen_plugins.backends.triton_configs import TritonGemmConfig, default_configs
from fusegen_plugins.backends.triton_gemm_emitter import TritonGemmFusion


def _gemm_fusion(path):
    m = parse_file(path)
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = next(i for i in m.entry.instructions if i.opcode == "fusion" and "gemm" in (i.fusion_backend_kind or ""))
    return m, f


def _operands(f, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(o.shape.dimensions).astype(dtypes.numpy_dtype(o.shape.element_type))
            for o in f.operands]


def _check(f, cfg=None, seed=0):
    emitted = TritonGemmFusion(_Analysis(f), cfg).emit()
    ops = _operands(f, seed)
    out = triton_runtime.run_fusion(emitted, ops, f)[0]
    ref = evaluate_instruction(f, ops)
    # within the fusion's error budget: f32 dots run at tf32 as in XLA (budget "tf32"), others as their type
    (budget,) = output_budgets(f)
    j = judge(out, np.asarray(ref), budget, VerifyOptions())
    assert j.ratio <= 1, (cfg, budget, j)
    return emitted


def test_default_config_sets_mirror_xla():
    assert [len(default_configs(cc)) for cc in ((8, 0), (9, 0), (10, 0))] == [30, 25, 40]
    h = default_configs((9, 0))
    assert h[0] == TritonGemmConfig(16, 8, 16, 1, 2, 1, False)
    assert h[-1] == TritonGemmConfig(256, 128, 64, 4, 8, 1, True)
    m, f = _gemm_fusion(corpus_path("jax", "gelu_matmul.pre.hlo"))
    be = TritonBackend((9, 0))
    assert be.can_produce_wrong_results() and be.get_default_config(f) is None
    cfgs = be.get_supported_configs(f)
    assert len(cfgs) == 25 and cfgs[0].values["block_n"] == 8
    assert be.get_supported_configs(m.entry.root) == [] or m.entry.root is f


def test_gelu_matmul_gemm_runs_in_interpreter_with_several_configs():
    _, f = _gemm_fusion(corpus_path("jax", "gelu_matmul.pre.hlo"))
    for cfg in (None, TritonGemmConfig(16, 8, 16, 1, 2), TritonGemmConfig(64, 32, 64, 3, 4),
                TritonGemmConfig(16, 16, 128, 3, 2)):
        e = _check(f, cfg)
        k = e.kernels[0]
        if cfg is not None:
            tiles = (-(-32 // cfg.block_m)) * (-(-128 // cfg.block_n))
            assert k.launch.grid == (tiles,) and k.launch.num_warps == cfg.num_warps
            assert k.num_stages == cfg.num_stages


def test_prologue_and_epilogue_are_fused():
    m = parse_module("""HloModule m
ENTRY e {
  p0 = s8[48,40] parameter(0)
  c0 = f16[48,40] convert(p0)
  p1 = f16[40,24] parameter(1)
  e1 = f16[40,24] negate(p1)
  d = f16[48,24] dot(c0, e1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f16[] constant(0.5)
  sb = f16[48,24] broadcast(s), dimensions={}
  ROOT r = f16[48,24] multiply(d, sb)
}""")
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = m.entry.root
    assert f.fusion_backend_kind == "__triton_gemm"
    assert {"convert", "negate", "multiply", "dot"} <= {i.opcode for i in f.fused_computation.instructions}
    for cfg in (TritonGemmConfig(16, 16, 16), TritonGemmConfig(32, 8, 32), TritonGemmConfig(64, 64, 64)):
        _check(f, cfg, seed=1)


def test_batched_transposed_operands():
    m = parse_module("""HloModule m
ENTRY e {
  p0 = f32[3,20,17]{1,2,0} parameter(0)
  p1 = f32[20,3,9] parameter(1)
  ROOT d = f32[3,17,9] dot(p0, p1), lhs_batch_dims={0}, rhs_batch_dims={1},
    lhs_contracting_dims={1}, rhs_contracting_dims={0}
}""")
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = m.entry.root
    assert f.fusion_backend_kind == "__triton_gemm"
    _check(f, TritonGemmConfig(16, 16, 16))
    _check(f, TritonGemmConfig(32, 8, 8))


def test_gelu_matmul_runs_and_compiles_through_fusegen_run():
    m = parse_file(corpus_path("jax", "gelu_matmul.pre.hlo"))
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    _, rep = run_module(m, make_inputs(m, 0), pm=plugin_manager(), compile_kernels=True)
    assert rep.ok
    gemm = next(r for r in rep.fusions if r.emitter == "TritonGemmFusion")
    assert gemm.kind == "kTriton" and gemm.compiled == "ok"


HOPPER = default_configs((9, 0))


@pytest.mark.parametrize("idx", [0, 9, 21])
def test_compiles_for_sm90_some_hopper_configs(idx):
    _, f = _gemm_fusion(corpus_path("jax", "gelu_matmul.pre.hlo"))
    be = TritonBackend((9, 0))
    exe = be.compile(f, Config("triton", HOPPER[idx].to_values()))
    k = exe.emitted.kernels[0]
    res = triton_runtime.compile_for_target(k, capability=90)
    assert ".target sm_90a" in res.ptx and res.num_warps == HOPPER[idx].num_warps


@pytest.mark.slow
@pytest.mark.parametrize("idx", range(len(HOPPER)))
def test_compiles_for_sm90_every_hopper_config(idx):
    _, f = _gemm_fusion(corpus_path("jax", "gelu_matmul.pre.hlo"))
    exe = TritonBackend((9, 0)).compile(f, Config("triton", HOPPER[idx].to_values()))
    assert exe.emitted.kernels[0].launch.num_warps == HOPPER[idx].num_warps


def test_apply_config_and_rejections():
    _, f = _gemm_fusion(corpus_path("jax", "gelu_matmul.pre.hlo"))
    be = TritonBackend()
    be.apply_config(f, Config("triton", HOPPER[3].to_values()))
    tgc = f.backend_config["fusion_backend_config"]["triton_gemm_config"]
    assert tgc["block_m"] == "64" and tgc["block_n"] == "8" and tgc["split_k"] == "1"
    # the emitter honours the stored config
    e = TritonGemmFusion(_Analysis(f)).emit()
    assert e.kernels[0].launch.grid == ((32 // 64 + 1) * (128 // 8),)
    from fusegen.codegen_backend import CompilationFailed

    with pytest.raises(CompilationFailed, match="split-k"):
        be.compile(f, Config("triton", {**HOPPER[0].to_values(), "split_k": 4}))


def test_notritongemm_mlp_module_runs():
    m = parse_file(corpus_path("jax", "gpu_mlp_bf16.notritongemm.h100_opt.hlo"))
    _, rep = run_module(m, make_inputs(m, 0), pm=plugin_manager(), compile_kernels=False)
    assert rep.ok and rep.other == {"host": 1}


@pytest.mark.slow
def test_default_mlp_module_runs_nested_gemm_kernel():
    """8192 tiles of 16x8 (the module's block_level_fusion_config) in the interpreter: about a minute."""
    m = parse_file(corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo"))
    _, rep = run_module(m, make_inputs(m, 0), pm=plugin_manager(), compile_kernels=True)
    assert rep.ok
    g = next(r for r in rep.fusions if r.name == "gemm_fusion_dot")
    # the launch carries the compiled kernel's shared memory, as XLA's thunk does (tests/corpus/test_launch_corpus.py)
    shared = triton_runtime.compile_for_target(g.kernels[0], capability=90).shared_bytes
    assert g.emitter == "TritonGemmFusion" and g.launch == f"grid=8192 warps=2 smem={shared}B" and g.compiled == "ok"


def test_default_mlp_nested_gemm_compiles_and_tiles():
    m = parse_file(corpus_path("jax", "gpu_mlp_bf16.default.h100_opt.hlo"))
    f = next(i for i in m.entry.instructions if i.name == "gemm_fusion_dot")
    e = TritonGemmFusion(_Analysis(f)).emit()
    k = e.kernels[0]
    assert k.launch.grid == (4 * (256 // 16) * (1024 // 8),) and k.launch.num_warps == 2
    assert triton_runtime.compile_for_target(k, capability=90).ptx
    # a smaller problem with the same fused computation runs in the interpreter
    small = parse_module(f"""HloModule m
%c (parameter_0: bf16[32,4,16], parameter_1: bf16[4,16,24]) -> f32[4,32,24] {{
  %parameter_0 = bf16[32,4,16]{{2,1,0}} parameter(0)
  %parameter_1 = bf16[4,16,24]{{2,1,0}} parameter(1)
  ROOT %dot.1 = f32[4,32,24]{{2,1,0}} dot(%parameter_0, %parameter_1), lhs_batch_dims={{1}}, lhs_contracting_dims={{2}}, rhs_batch_dims={{0}}, rhs_contracting_dims={{1}}
}}
ENTRY %e (a: bf16[32,4,16], b: bf16[4,16,24]) -> f32[4,32,24] {{
  %a = bf16[32,4,16]{{2,1,0}} parameter(0)
  %b = bf16[4,16,24]{{2,1,0}} parameter(1)
  ROOT %gemm_fusion_dot = f32[4,32,24]{{2,1,0}} fusion(%a, %b), kind=kCustom, calls=%c, backend_config={f.attrs['backend_config'] if isinstance(f.attrs['backend_config'], str) else __import__('json').dumps(f.attrs['backend_config'])}
}}""")
    _check(small.entry.root)


BATCHED = """HloModule m
ENTRY e {
  p0 = bf16[3,3,40,24] parameter(0)
  s = bf16[3,3] parameter(2)
  sb = bf16[3,3,40,24] broadcast(s), dimensions={0,1}
  a = bf16[3,3,40,24] multiply(p0, sb)
  p1 = bf16[3,3,24,20] parameter(1)
  d = f32[3,3,40,20] dot(a, p1), lhs_batch_dims={0,1}, rhs_batch_dims={0,1},
    lhs_contracting_dims={3}, rhs_contracting_dims={2}
  ROOT r = f32[3,3,40,20] negate(d)
}"""


@pytest.mark.parametrize("cfg", [TritonGemmConfig(16, 16, 16), TritonGemmConfig(16, 8, 16), TritonGemmConfig(32, 16, 32)])
def test_batched_interpret_variant_is_bitwise_the_per_batch_one(cfg):
    # 9 batch indices (the dot decomposer folds the two batch dims into one) and a prologue that reads a
    # per-batch scale: 16 per program would pad 7, so the interpreter variant takes 2 (one padded, masked)
    m = parse_module(BATCHED)
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = m.entry.root
    assert f.fusion_backend_kind == "__triton_gemm"
    em = TritonGemmFusion(_Analysis(f), cfg).emit()
    (k,) = em.kernels
    v = k.interpret_variant
    assert k.launch.grid == (9 * -(-40 // cfg.block_m) * -(-20 // cfg.block_n),)  # XLA's launch stays
    assert v.constexprs["N"] == 5 and "acc = tl.full([2, 64, 32], 0, tl.float32)" in v.source
    per_batch = attrs.evolve(cfg, block_m=64, block_n=32, block_k=32)  # the variant's tiles (block_k to 32 >= K)
    plain = TritonGemmFusion(_Analysis(f), per_batch, interpret_variant=False).emit()
    assert plain.kernels[0].constexprs["N"] == 9
    ops = _operands(f, seed=3)
    batched = triton_runtime.run_fusion(em, ops, f)[0]
    one_by_one = triton_runtime.run_fusion(plain, ops, f)[0]
    assert np.array_equal(batched.view(np.uint32), one_by_one.view(np.uint32))
    c = compare(batched, np.asarray(evaluate_instruction(f, ops)), "f32")
    assert c.ok, c


def test_a_prologue_operand_indexed_by_the_batch_alone_runs_and_compiles():
    # the per-batch scale's offset depends on the batch index only: as a scalar it made a scalar pointer
    # under a tile mask, which Triton refuses (in the interpreter and in the sm_90 compile alike)
    m = parse_module(BATCHED)
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = m.entry.root
    em = TritonGemmFusion(_Analysis(f), TritonGemmConfig(16, 16, 16), interpret_variant=False).emit()
    ops = _operands(f, seed=4)
    out = triton_runtime.run_fusion(em, ops, f)[0]
    c = compare(out, np.asarray(evaluate_instruction(f, ops)), "f32")
    assert c.ok, c
    assert triton_runtime.compile_for_target(em.kernels[0]).ptx.count(".entry") == 1
