"""Triton GEMMs as XLA's program: ``tl.dot`` on the operands' own types (bf16, f16, fp8 with scales, int8 into s32;
f32 at tf32 with XLA's ``cvt.rna`` rounding where XLA:GPU uses tf32: default precision or a tf32 algorithm), XLA's small tiles (16x8, block_k below Triton's minimum padded),
contiguous 2-D tile loads, batch / split-K / transposed / nested forms.

Each kernel runs in Triton's interpreter as the GPU kernel itself (XLA's tiles and grid, ``interpret_variant``
off) and as its interpreter variant, and is checked against the reference evaluator (within the fusion's error
budget) and against float64 numpy on the operands (the independent oracle; f32 operands of a tf32 dot rounded to
tf32 as XLA's kernel reads them). The source is checked for a dtype-native ``tl.dot`` and no gathered index arrays, and the
sm_90 machine code (``ptxas`` of the Triton wheel, no GPU) for the tensor-core instruction.
"""

from __future__ import annotations

import csv
import json

import ml_dtypes
import numpy as np
import pytest

from conftest import REPO, corpus_path
from fusegen.codegen import sass, triton_runtime
from fusegen.hlo.dot_numerics import tf32_round
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo import dtypes
from fusegen.hlo.parser import parse_file, parse_module
from fusegen.runtime.compare import compare
from fusegen.verify.budget import judge, output_budgets
from fusegen.config.verify_options import VerifyOptions
from fusegen_plugins.backends.triton import _Analysis
from fusegen_plugins.backends.triton_configs import TritonGemmConfig
from fusegen_plugins.backends.triton_gemm_emitter import TritonGemmFusion

NO_TOOLS = sass.tools_unavailable_reason()
needs_ptxas = pytest.mark.skipif(NO_TOOLS is not None, reason=f"ptxas/cuobjdump cannot run: {NO_TOOLS}")

_GEMM = """HloModule m
fc {{
{params}
{body}
}}
ENTRY e {{
{entry_params}
  ROOT f = {out} fusion({args}), kind=kCustom, calls=fc,
    backend_config={{"fusion_backend_config":{{"kind":"__triton_gemm"}}}}
}}"""


def _fusion(params: list[str], body: str, out: str):
    """A ``__triton_gemm`` fusion of ``params`` (``"bf16[40,32]"``...) and ``body`` (instructions over p0, p1...)."""
    fp = "\n".join(f"  p{i} = {t} parameter({i})" for i, t in enumerate(params))
    ep = "\n".join(f"  a{i} = {t} parameter({i})" for i, t in enumerate(params))
    args = ", ".join(f"a{i}" for i in range(len(params)))
    return parse_module(_GEMM.format(params=fp, body=body, entry_params=ep, out=out, args=args)).entry.root


def _values(et: str, shape, rng) -> np.ndarray:
    if et == "s8":
        return rng.integers(-128, 128, shape).astype(np.int8)
    scale = 4.0 if et.startswith("f8") else 1.0
    return (rng.standard_normal(shape) * scale).astype(dtypes.numpy_dtype(et))


def _run(f, cfg, seed=0, gpu_kernel=True):
    """Run the fusion's kernels (the GPU kernel itself, or its interpreter variant) and check them against the
    reference evaluator within the fusion's budget; returns (operands, output)."""
    rng = np.random.default_rng(seed)
    ops = [_values(o.shape.element_type, o.shape.dimensions, rng) for o in f.operands]
    em = TritonGemmFusion(_Analysis(f), cfg, interpret_variant=not gpu_kernel).emit()
    out = triton_runtime.run_fusion(em, ops, f, interpret_max_programs=None if gpu_kernel else 16)[0]
    ref = np.asarray(evaluate_instruction(f, ops))
    (budget,) = output_budgets(f)
    j = judge(out, ref, budget, VerifyOptions())
    assert j.ratio <= 1, (cfg, budget, j)
    return ops, out, em.kernels[0]


def _f64(x: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(np.float64)


def _kernel_fn_source(ks) -> str:
    return ks.source[ks.source.index("def gemm("):]


# --------------------------------------------------------------------------------------------- dtype families
BF16 = (["bf16[40,40]", "bf16[40,24]", "bf16[24]"],
        """  d = f32[40,24] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  c = bf16[40,24] convert(d)
  b = bf16[40,24] broadcast(p2), dimensions={1}
  ROOT r = bf16[40,24] add(c, b)""", "bf16[40,24]")


@pytest.mark.parametrize("gpu_kernel", [True, False])
@pytest.mark.parametrize("cfg", [TritonGemmConfig(16, 8, 16, 1, 2), TritonGemmConfig(32, 16, 32, 1, 4),
                                 TritonGemmConfig(16, 8, 8, 1, 2)])
def test_bf16_gemm_with_bias_epilogue(cfg, gpu_kernel):
    # M=40 and K=40 leave tails at every tile; block_k 8 is below Triton's bf16 minimum (16): padded
    f = _fusion(*BF16)
    (a, b, c), out, ks = _run(f, cfg, gpu_kernel=gpu_kernel)
    want = _f64((_f64(a) @ _f64(b)).astype(np.float32).astype(ml_dtypes.bfloat16)) + _f64(c)
    np.testing.assert_allclose(_f64(out), want, rtol=2e-2, atol=2e-2)
    if gpu_kernel:
        src = _kernel_fn_source(ks)
        assert "acc = tl.dot(a, b, acc, out_dtype=tl.float32)" in src
        assert "a = a.to(" not in src and "b = b.to(" not in src  # multiplied as bf16, not widened
        assert (cfg.block_k < 16) == any("padded to 16" in n for n in ks.notes)


def test_f16_gemm_with_transposed_rhs_to_f32():
    # rhs [N, K]: contracting dim minor, each rhs tile loads along K
    f = _fusion(["f16[32,48]", "f16[24,48]"],
                "  ROOT d = f32[32,24] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={1}", "f32[32,24]")
    (a, b), out, ks = _run(f, TritonGemmConfig(16, 8, 16, 1, 2))
    np.testing.assert_allclose(out, _f64(a) @ _f64(b).T, rtol=1e-5, atol=1e-4)
    assert "acc = tl.dot(a, b, acc, out_dtype=tl.float32)" in ks.source and "a.to(" not in ks.source


FP8 = """  d = f32[32,16] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  s = f32[] multiply(p2, p3)
  sb = f32[32,16] broadcast(s), dimensions={}
  ROOT r = f32[32,16] multiply(d, sb)"""


@pytest.mark.parametrize("types", [("f8e4m3fn", "f8e4m3fn"), ("f8e5m2", "f8e4m3fn")])
@pytest.mark.parametrize("block_k", [16, 32])
@pytest.mark.parametrize("k", [64, 320])  # 320: a K loop of 20 / 10 steps (not unrolled), as XLA's z_fp8_mm
def test_fp8_gemm_with_per_tensor_scales(types, block_k, k):
    f = _fusion([f"{types[0]}[32,{k}]", f"{types[1]}[{k},16]", "f32[]", "f32[]"], FP8, "f32[32,16]")
    (a, b, sa, sb), out, ks = _run(f, TritonGemmConfig(16, 8, block_k, 1, 2))
    np.testing.assert_allclose(out, (_f64(a) @ _f64(b)) * (float(sa) * float(sb)), rtol=1e-5, atol=1e-3)
    src = _kernel_fn_source(ks)
    if block_k < 32:  # below fp8's tl.dot K: exact f16 tiles at K 16, as Triton's own fp8 mma.sync path
        assert "a = a.to(tl.float16)" in src and "b = b.to(tl.float16)" in src
    else:
        assert "a.to(" not in src and f"max_num_imprecise_acc={block_k}" in src
    # a K loop (over 8 steps) unrolled twice as XLA's LLVM does, unless the body upcasts fp8 tiles (XLA's does not)
    assert ("tl.range(" in src, "loop_unroll_factor=2" in src) == (k // block_k > 8, k // block_k > 8 and block_k >= 32)


@pytest.mark.parametrize("k,loop", [(64, False), (128, True), (256, True)])
def test_a_prologue_k_loop_of_more_than_four_steps_stays_a_loop(k, loop):
    """f16 operands converted to bf16 in the fusion (a prologue in the K loop's body), block_k 16: 4 steps
    unroll, 8 and 16 stay a loop as in XLA's kernel (fresh random program 100112: K 128, one load of each
    operand a step, a backward branch); plain operands unroll up to 8 steps (the bf16 family above)."""
    body = """  c0 = bf16[16,{k}] convert(p0)
  c1 = bf16[{k},16] convert(p1)
  d = bf16[16,16] dot(c0, c1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}
  ROOT r = f32[16,16] convert(d)""".format(k=k)
    f = _fusion([f"f16[16,{k}]", f"f16[{k},16]"], body, "f32[16,16]")
    (a, b), out, ks = _run(f, TritonGemmConfig(16, 8, 16, 1, 2))
    src = _kernel_fn_source(ks)
    assert ("tl.range(" in src and "nounroll" in src) == loop and ("for k0 in range(" in src) == (not loop)
    want = (a.astype(ml_dtypes.bfloat16).astype(np.float64) @ b.astype(ml_dtypes.bfloat16).astype(np.float64))
    np.testing.assert_allclose(out, want.astype(ml_dtypes.bfloat16).astype(np.float32), rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("block_k", [16, 32])
def test_int8_gemm_accumulates_in_s32(block_k):
    f = _fusion(["s8[32,96]", "s8[96,16]"],
                "  ROOT d = s32[32,16] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "s32[32,16]")
    (a, b), out, ks = _run(f, TritonGemmConfig(16, 8, block_k, 1, 2))
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))
    assert "tl.dot(a, b, acc, out_dtype=tl.int32)" in ks.source and "a.to(" not in ks.source
    assert bool(ks.notes) == (block_k < 32)


def test_u8_gemm_without_an_integer_tl_dot_sums_in_s32():
    # Triton's integer tl.dot takes s8 x s8 only: u8 x s8 multiplies and sums in s32 (no tensor cores)
    f = _fusion(["u8[16,40]", "s8[40,8]"],
                "  ROOT d = s32[16,8] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "s32[16,8]")
    rng = np.random.default_rng(5)
    a, b = rng.integers(0, 256, (16, 40)).astype(np.uint8), rng.integers(-128, 128, (40, 8)).astype(np.int8)
    em = TritonGemmFusion(_Analysis(f), TritonGemmConfig(16, 8, 16, 1, 2)).emit()
    out = triton_runtime.run_fusion(em, [a, b], f)[0]
    np.testing.assert_array_equal(out, a.astype(np.int64) @ b.astype(np.int64))
    np.testing.assert_array_equal(out, np.asarray(evaluate_instruction(f, [a, b])))


@pytest.mark.parametrize("precision,tf32", [("", True), (", operand_precision={high,default}", True),
                                            (", operand_precision={highest,highest}", False),
                                            (", operand_precision={default,highest}", False),
                                            (", algorithm=dot_f32_f32_f32", False),
                                            (", algorithm=dot_tf32_tf32_f32", True)])
def test_f32_gemm_precision(precision, tf32):
    """tf32 where XLA:GPU uses it (the algorithm unset at DEFAULT/HIGH precision, or a tf32 algorithm: XLA's
    cvt.rna.tf32.f32 on both operands, then a tf32 MMA), IEEE f32 elsewhere; the reference evaluator rounds the
    operands as the kernel does, so the two agree to f32's rounding."""
    f = _fusion(["f32[32,48]", "f32[48,16]"],
                f"  ROOT d = f32[32,16] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}{precision}",
                "f32[32,16]")
    (a, b), out, ks = _run(f, TritonGemmConfig(16, 8, 16, 1, 2))
    ref = np.asarray(evaluate_instruction(f, [a, b]))
    assert compare(out, ref, "f32").ok, compare(out, ref, "f32")  # kernel vs reference at f32, not tf32
    assert not ks.notes
    if tf32:
        want = tf32_round(a).astype(np.float64) @ tf32_round(b)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ref, want, rtol=1e-5, atol=1e-5)
        assert 'input_precision="tf32"' in ks.source and "cvt.rna.tf32.f32" in ks.source
        assert np.abs(out - _f64(a) @ _f64(b)).max() > 1e-4  # really at tf32
    else:
        np.testing.assert_allclose(out, _f64(a) @ _f64(b), rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(ref, _f64(a) @ _f64(b), rtol=1e-5, atol=1e-5)
        assert 'input_precision="ieee"' in ks.source and "cvt.rna" not in ks.source
    assert output_budgets(f)[0].path_type == "f32"  # the reference rounds as the kernel does: an f32 budget


@pytest.mark.parametrize("how", ["flag", "config"])
def test_run_default_matmul_precision_option(tmp_path, how):
    """``fusegen run`` runs a default-precision f32 GEMM at tf32 (XLA:GPU's answer, exit 0 against the tf32
    reference); ``--default-matmul-precision highest`` or ``[pipeline] default_matmul_precision = "highest"``
    runs it at IEEE f32; a value JAX does not know is exit 2 naming the file and line."""
    from click.testing import CliRunner

    from fusegen.cli.main import cli

    text = _GEMM.format(params="  p0 = f32[32,48] parameter(0)\n  p1 = f32[48,16] parameter(1)",
                        body="  ROOT d = f32[32,16] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                        entry_params="  a0 = f32[32,48] parameter(0)\n  a1 = f32[48,16] parameter(1)",
                        out="f32[32,16]", args="a0, a1")
    hlo = tmp_path / "gemm.hlo"
    hlo.write_text(text)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((32, 48)).astype(np.float32), rng.standard_normal((48, 16)).astype(np.float32)
    np.savez(tmp_path / "in.npz", p0=a, p1=b)
    cfg = tmp_path / "fusegen.toml"
    cfg.write_text('[pipeline]\ndefault_matmul_precision = "highest"\n')
    off = ["--default-matmul-precision", "highest"] if how == "flag" else ["--config", str(cfg)]
    outs = {}
    for name, extra in (("tf32", []), ("ieee", off)):
        res = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--inputs", str(tmp_path / "in.npz"),
                                       "--save-outputs", str(tmp_path / f"{name}.npz")] + extra)
        assert res.exit_code == 0, res.output
        outs[name] = np.load(tmp_path / f"{name}.npz")["o0"]
    np.testing.assert_allclose(outs["tf32"], tf32_round(a).astype(np.float64) @ tf32_round(b), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(outs["ieee"], _f64(a) @ _f64(b), rtol=1e-5, atol=1e-5)
    assert np.abs(outs["tf32"] - outs["ieee"]).max() > 1e-4
    cfg.write_text('[pipeline]\ndefault_matmul_precision = "fastest"\n')
    res = CliRunner().invoke(cli, ["run", str(hlo), "--no-compile", "--config", str(cfg)])
    assert res.exit_code == 2 and "fusegen.toml:2" in res.output and "highest" in res.output, res.output


def test_tf32_budget_keeps_the_kernel_and_catches_bf16_operands_and_a_dropped_k_chunk():
    """The fusion's budget against the reference, which rounds the operands to tf32 as the kernel does, is f32's:
    the tf32 kernel is well within it; a kernel rounding its operands to bf16, or one skipping a block_k step,
    is out of it, after the conditioning and f64 second looks too (judge_fusion)."""
    from fusegen.verify.budget import judge_fusion

    f = _fusion(["f32[64,256]", "f32[256,32]"],
                "  ROOT d = f32[64,32] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[64,32]")
    (a, b), out, ks = _run(f, TritonGemmConfig(32, 16, 32, 1, 4))
    ref = np.asarray(evaluate_instruction(f, [a, b]))
    opts = VerifyOptions()
    good, budget = judge_fusion(f, [a, b], [out], ref, opts)
    assert budget.path_type == "f32" and good.ratio < 0.1, (budget, good)
    bf = ml_dtypes.bfloat16
    bf16 = (a.astype(bf).astype(np.float32) @ b.astype(bf).astype(np.float32)).astype(np.float32)
    dropped = (out - tf32_round(a[:, -32:]) @ tf32_round(b[-32:])).astype(np.float32)  # the last K step lost
    for name, bad in (("bf16 operands", bf16), ("dropped K chunk", dropped)):
        j, _ = judge_fusion(f, [a, b], [bad], ref, opts)
        # bf16 rounds 4x coarser than tf32: the f64 look allows rtol (4) x the reference's own tf32 error
        assert j.ratio > 1.5, (name, j)


def test_default_matmul_precision_highest_turns_tf32_off():
    """``--default-matmul-precision highest`` (JAX's jax_default_matmul_precision): DEFAULT dots become HIGHEST
    (IEEE f32, no cvt.rna); a dot with its own precision or algorithm keeps it."""
    from fusegen.hlo.dot_numerics import DotNumericsError, apply_default_matmul_precision, dot_numerics

    text = _GEMM.format(params="  p0 = f32[32,48] parameter(0)\n  p1 = f32[48,16] parameter(1)",
                        body="  ROOT d = f32[32,16] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}",
                        entry_params="  a0 = f32[32,48] parameter(0)\n  a1 = f32[48,16] parameter(1)",
                        out="f32[32,16]", args="a0, a1")
    m = parse_module(text)
    dot = m.entry.root.fused_computation.root
    assert dot_numerics(dot).input_precision == "tf32"
    assert apply_default_matmul_precision(m, "default") == 0 and apply_default_matmul_precision(m, None) == 0
    assert apply_default_matmul_precision(m, "highest") == 1
    assert dot.attrs["operand_precision"] == "{highest,highest}" and dot_numerics(dot).input_precision == "ieee"
    (a, b), out, ks = _run(m.entry.root, TritonGemmConfig(16, 8, 16, 1, 2))
    assert 'input_precision="ieee"' in ks.source and "cvt.rna" not in ks.source
    np.testing.assert_allclose(out, _f64(a) @ _f64(b), rtol=1e-5, atol=1e-5)
    with pytest.raises(DotNumericsError, match="unknown default matmul precision 'fastest'; known: default"):
        apply_default_matmul_precision(m, "fastest")


def test_mixed_16_bit_float_operands_multiply_exactly_at_tf32():
    # bf16 x f16 (no common 16-bit type): both widened to f32, exact in tf32, so on the tensor cores unrounded
    f = _fusion(["bf16[32,48]", "f16[48,16]"],
                "  ROOT d = f32[32,16] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[32,16]")
    (a, b), out, ks = _run(f, TritonGemmConfig(16, 8, 16, 1, 2))
    np.testing.assert_allclose(out, _f64(a) @ _f64(b), rtol=1e-5, atol=1e-4)
    assert 'input_precision="tf32"' in ks.source and "cvt.rna" not in ks.source


def test_bf16x3_algorithm_splits_the_f32_operands():
    f = _fusion(["f32[32,48]", "f32[48,16]"],
                "  ROOT d = f32[32,16] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, "
                "algorithm=dot_bf16_bf16_f32_x3", "f32[32,16]")
    (a, b), out, ks = _run(f, TritonGemmConfig(16, 16, 16, 1, 2))
    np.testing.assert_allclose(out, _f64(a) @ _f64(b), rtol=1e-3, atol=1e-3)  # about 16 bits per operand
    assert ks.source.count("tl.dot(") == 3 and "tl.bfloat16" in ks.source


# --------------------------------------------------------------------------------------------- GEMM shapes
def test_split_k_form_and_batch_dims():
    """XLA's split-K shape (SplitkRewriter): K split into a batch dimension of the dot, the partial products
    summed by a reduce outside the GEMM fusion; every partial product matches."""
    f = _fusion(["bf16[4,24,16]", "bf16[4,16,40]"],
                "  ROOT d = f32[4,24,40] dot(p0, p1), lhs_batch_dims={0}, rhs_batch_dims={0}, "
                "lhs_contracting_dims={2}, rhs_contracting_dims={1}", "f32[4,24,40]")
    for cfg, gpu in ((TritonGemmConfig(16, 8, 16, 1, 2), True), (TritonGemmConfig(16, 16, 16, 1, 2), False)):
        (a, b), out, ks = _run(f, cfg, gpu_kernel=gpu)
        np.testing.assert_allclose(out, np.matmul(_f64(a), _f64(b)), rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(out.sum(0), np.einsum("smk,skn->mn", _f64(a), _f64(b)), rtol=1e-5, atol=1e-3)


def test_nested_gemm_with_a_layer_norm_prologue_takes_xla_tiles():
    """gpt12's first GEMM (scale and shift of the layer norm fused into the lhs), nested form, XLA's 16x8 tile and
    the block_k of the dot's ``sizes``, at a size the interpreter runs as the GPU kernel."""
    big = parse_file(corpus_path("jax", "launch", "gpt12.h200_opt.hlo"))
    f = next(i for i in big.entry.instructions if i.name == "gemm_fusion_dot")
    bc = json.dumps(f.backend_config)  # XLA's: block_level_fusion_config 16x8, 2 warps, 1 stage
    m = parse_module(f"""HloModule m
%gc (parameter_0: bf16[32,48], parameter_1: bf16[48], parameter_2: bf16[48], parameter_3: bf16[48,24]) -> bf16[32,24] {{
  %parameter_0 = bf16[32,48]{{1,0}} parameter(0)
  %parameter_1 = bf16[48]{{0}} parameter(1)
  %mul.0 = bf16[32,48]{{1,0}} broadcast(%parameter_1), dimensions={{1}}
  %mul.1 = bf16[32,48]{{1,0}} multiply(%parameter_0, %mul.0)
  %parameter_2 = bf16[48]{{0}} parameter(2)
  %add.48 = bf16[32,48]{{1,0}} broadcast(%parameter_2), dimensions={{1}}
  %add.49 = bf16[32,48]{{1,0}} add(%mul.1, %add.48)
  %parameter_3 = bf16[48,24]{{1,0}} parameter(3)
  ROOT %dot.98 = bf16[32,24]{{1,0}} dot(%add.49, %parameter_3), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, backend_config={{"sizes":["16"]}}
}}
ENTRY %e (a: bf16[32,48], b: bf16[48], c: bf16[48], d: bf16[48,24]) -> bf16[32,24] {{
  %a = bf16[32,48]{{1,0}} parameter(0)
  %b = bf16[48]{{0}} parameter(1)
  %c = bf16[48]{{0}} parameter(2)
  %d = bf16[48,24]{{1,0}} parameter(3)
  ROOT %gemm_fusion_dot = bf16[32,24]{{1,0}} fusion(%a, %b, %c, %d), kind=kCustom, calls=%gc, backend_config={bc}
}}""")
    g = m.entry.root
    (x, s, t, w), out, ks = _run(g, None)
    assert ks.launch.grid == (2 * 3,) and ks.launch.num_warps == 2 and "range(0, 48, 16)" in ks.source
    lhs = (_f64((x.astype(np.float32) * s.astype(np.float32)).astype(ml_dtypes.bfloat16)) + _f64(t))
    want = lhs.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64) @ _f64(w)
    np.testing.assert_allclose(_f64(out), want, rtol=2e-2, atol=5e-2)


# --------------------------------------------------------------------------------------------- source and SASS
def test_tiles_load_contiguously_without_index_arrays():
    """The operand and output tiles are 2-D tensors indexed by broadcast ``tl.arange`` ranges: no flattened index
    arrays (``tl.reshape`` / ``tl.broadcast_to``), no clamping (``tl.minimum``), each parameter one masked load."""
    f = _fusion(*BF16)
    ks = TritonGemmFusion(_Analysis(f), TritonGemmConfig(16, 8, 16, 1, 2), interpret_variant=False).emit().kernels[0]
    for banned in ("tl.reshape", "tl.broadcast_to", "tl.minimum", "tl.reduce"):
        assert banned not in ks.source, banned
    assert ks.source.count("tl.load(") == 3 and "off_2 = i_k + i_m * 40" in ks.source


@needs_ptxas
def test_sm90_machine_code_has_the_tensor_core_instructions(tmp_path):
    """bf16 at XLA's 16x8 tile: ``HMMA.16816.F32.BF16`` with 8-byte lhs loads staged through ``LDSM``."""
    f = _fusion(["bf16[64,64]", "bf16[64,32]"],
                "  ROOT d = f32[64,32] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}", "f32[64,32]")
    ks = TritonGemmFusion(_Analysis(f), TritonGemmConfig(16, 8, 16, 1, 2)).emit().kernels[0]
    st = sass.kernel_sass_stats(ks, cache_dir=tmp_path)
    assert any(op.startswith("HMMA.16816.F32.BF16") for op in st.tensor_core_ops), st.tensor_core_ops
    assert max(st.global_loads) >= 8 and st.shared_ops.get("LDSM", 0) > 0 and st.spill_bytes == 0


@needs_ptxas
def test_xla_f32_gemm_at_default_precision_runs_on_tensor_cores(tmp_path):
    """XLA's own f32 GEMM at default precision (jax ``a @ b``, tests/data/launch_extra/gemm_f32_f32, no
    operand_precision): tf32 MMA on the tensor cores after cvt.rna, as XLA:GPU runs it, with the 1024 bytes of
    shared memory XLA launched it with (LAUNCH.tsv)."""
    m = parse_file(REPO / "tests" / "data" / "launch_extra" / "gemm_f32_f32.h200_opt.hlo")
    f = next(i for c in m.computations for i in c.instructions if i.name == "gemm_fusion_dot")
    ks = TritonGemmFusion(_Analysis(f)).emit().kernels[0]
    assert 'input_precision="tf32"' in ks.source and "cvt.rna.tf32.f32" in ks.source and not ks.notes
    st = sass.kernel_sass_stats(ks, cache_dir=tmp_path)
    assert any(op.startswith("HMMA.1688.F32.TF32") for op in st.tensor_core_ops), st.tensor_core_ops
    assert st.shared_bytes == 1024 and st.spill_bytes == 0 and ks.launch.grid == (8192,)


@needs_ptxas
def test_xla_fp8_gemm_k_loop_is_xlas(tmp_path):
    """XLA's own fp8 GEMM (tests/data/xla_gemm/z_fp8_mm: e4m3 x e4m3 -> f32, split-K 2, 16x8 tiles, block_k 16 over
    K 1024): its K loop is not unrolled (the fp8 -> f16 upcast a step makes the body too large for XLA's LLVM
    unroller), so per step XLA's SASS has one 4-byte lhs load, one 2-byte rhs load and one HMMA (README there, from
    XLA's PTX). fusegen's kernel: the same loads, one HMMA.16816.F32 on f16, one 8-byte store a thread, XLA's grid,
    warps and 512 bytes of shared memory, no spills (it unrolled twice: 2 loads of each, 1.67x XLA's memory
    instructions per output)."""
    m = parse_file(REPO / "tests" / "data" / "xla_gemm" / "z_fp8_mm.h200_opt.hlo")
    f = next(i for c in m.computations for i in c.instructions if i.name == "gemm_fusion_dot")
    ks = TritonGemmFusion(_Analysis(f)).emit().kernels[0]
    assert ks.launch.grid == (16384,) and ks.launch.num_warps == 2 and not ks.notes
    st = sass.kernel_sass_stats(ks, cache_dir=tmp_path)
    assert st.tensor_core_ops == {"HMMA.16816.F32": 1}, st.tensor_core_ops
    assert st.global_loads == {4: 1, 2: 1} and st.global_stores == {8: 1}, (st.global_loads, st.global_stores)
    assert st.has_loop and st.shared_bytes == 512 and st.spill_bytes == 0
    assert "loop_unroll_factor" not in ks.source and "a = a.to(tl.float16)" in ks.source


@pytest.mark.slow
@needs_ptxas
@pytest.mark.parametrize("et,out,op", [("s8", "s32", "IMMA.16832.S8.S8"), ("f32", "f32", "HMMA.1688.F32.TF32"),
                                       ("f8e4m3fn", "f32", "HMMA.16816.F32"), ("f16", "f32", "HMMA.16816.F32")])
def test_sm90_machine_code_per_dtype(tmp_path, et, out, op):
    f = _fusion([f"{et}[64,64]", f"{et}[64,32]"],
                f"  ROOT d = {out}[64,32] dot(p0, p1), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}",
                f"{out}[64,32]")
    ks = TritonGemmFusion(_Analysis(f), TritonGemmConfig(16, 8, 32, 1, 2)).emit().kernels[0]
    st = sass.kernel_sass_stats(ks, cache_dir=tmp_path)
    assert any(k.startswith(op) for k in st.tensor_core_ops), st.tensor_core_ops


def _xla_gemm_rows():
    out = []
    for d in (corpus_path("jax", "launch"), REPO / "tests" / "data" / "launch_extra"):
        with open(d / "LAUNCH.tsv") as fh:
            out += [(d, r) for r in csv.DictReader(fh, delimiter="\t")
                    if "gemm" in r["backend_kind"] and not r["note"].startswith("kernel_reused")]
    return out


@pytest.mark.slow
@needs_ptxas
def test_xla_gemm_launches_tensor_cores_and_shared_memory(tmp_path):
    """Every GEMM XLA launched in the launch corpora (its thunk's grid, threads and shared memory): fusegen's kernel
    has XLA's grid and warps, reaches the tensor cores, and allocates XLA's shared memory unless its notes say why
    not (int8 block_k 16 padded to 32, sub-byte operands)."""
    modules, differ = {}, []
    rows = _xla_gemm_rows()
    assert len(rows) >= 8 + 14
    for d, r in rows:
        if (d, r["module_file"]) not in modules:
            modules[d, r["module_file"]] = parse_file(d / r["module_file"])
        m = modules[d, r["module_file"]]
        f = next(i for c in m.computations for i in c.instructions if i.name == r["fusion_name"])
        ks = TritonGemmFusion(_Analysis(f)).emit().kernels[0]
        assert ks.launch.grid == (int(r["grid_x"]),) and 32 * ks.launch.num_warps == int(r["threads_x"])
        st = sass.kernel_sass_stats(ks, cache_dir=tmp_path)
        assert st.tensor_core_instructions > 0, r["fusion_name"]
        if st.shared_bytes != int(r["shared_memory_bytes"]):
            assert ks.notes, (r["module_file"], st.shared_bytes, r["shared_memory_bytes"])
            differ.append(r["module_file"].removesuffix(".h200_opt.hlo"))
    assert sorted(differ) == ["gemm_bf16_s4", "gemm_s8_s8_s32"], differ


@pytest.mark.parametrize("side,sizes,split", [
    ("lhs", (48, 32), True),   # XLA's dot merger on M (u_swiglu's dot(concat(w1, w2), x)): 16-row tiles
    ("rhs", (16, 24, 8), True),  # q, k, v weights concatenated along N: 8-column tiles
    ("rhs", (12, 36), False),  # a piece that starts inside a tile: the pointer is selected per element
    ("lhs", (16, 1), True),  # a last piece one row long (found by an adversarial check: read before its buffer)
    ("rhs", (8, 24, 16, 1), True),
])
def test_operand_concatenated_at_tile_boundaries_gets_a_k_loop_per_piece(side, sizes, split):
    """A dot operand that is a concatenate along its M (N) dimension: where every piece starts on a tile
    boundary each tile reads one piece, and the K loop is written once per piece under a test of the tile
    index, as XLA's kernel unswitches it (u_swiglu: two loops of 2 HMMA, XLA's 8:4/4:4 loads); else the
    concatenate selects its operand's pointer per element. Both match the evaluator and float64 numpy."""
    total = sum(sizes)
    if side == "lhs":
        params = [f"bf16[{s},40]" for s in sizes] + ["bf16[40,8]"]
        names = ", ".join(f"p{i}" for i in range(len(sizes)))
        body = (f"  c = bf16[{total},40] concatenate({names}), dimensions={{0}}\n"
                f"  ROOT d = f32[{total},8] dot(c, p{len(sizes)}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
        out = f"f32[{total},8]"
    else:
        params = ["bf16[32,40]"] + [f"bf16[40,{s}]" for s in sizes]
        names = ", ".join(f"p{i + 1}" for i in range(len(sizes)))
        body = (f"  c = bf16[40,{total}] concatenate({names}), dimensions={{1}}\n"
                f"  ROOT d = f32[32,{total}] dot(p0, c), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}")
        out = f"f32[32,{total}]"
    f = _fusion(params, body, out)
    ops, res, ks = _run(f, TritonGemmConfig(16, 8, 16, 1, 2))
    src = _kernel_fn_source(ks)
    assert (("if m_t * 16 <" in src or "if n_t * 8 <" in src) and "_tile_1(" in src) == split, src
    if side == "lhs":
        want = np.concatenate([_f64(o) for o in ops[:-1]], 0) @ _f64(ops[-1])
    else:
        want = _f64(ops[0]) @ np.concatenate([_f64(o) for o in ops[1:]], 1)
    np.testing.assert_allclose(res, want, rtol=1e-2, atol=1e-2)
    triton_runtime.compile_for_target(ks, capability=90)
