"""Triton GEMMs whose operand is a strided slice (issue 42 item 3: ``x[:, ::2] @ w``).

In a one-dimensional block a slice strided along its parameter's minor dimension is read as one vector of each
element's group of neighbours (:mod:`fusegen.codegen.elemental.vector_reads`); a GEMM's operand tile has two or
three dimensions, so there the slice is read through its index map, one strided load an element (the vector read
added its axis after the tile's first and split a shape it had cut out of ``"zero.shape"``: the interpreter's
"Cannot make_shape_compatible ... 16 and 2"). Each kernel runs in Triton's interpreter as the GPU kernel itself (XLA's
16x8 tile, block_k 16) and is checked against float64 numpy on the operands (the independent answer: f32
operands rounded to tf32 as XLA's default-precision dot reads them) and against the reference evaluator within
the fusion's error budget; the issue's program, as XLA:GPU emits it for an H200, also compiles for sm_90.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from _backend_helpers import plugin_manager
from fusegen.codegen import sass, triton_runtime
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo import dtypes
from fusegen.hlo.dot_numerics import tf32_round
from fusegen.hlo.parser import parse_module
from fusegen.verify.budget import judge, output_budgets
from fusegen.config.verify_options import VerifyOptions
from fusegen.verify.judged_run import run_module
from fusegen_plugins.backends.triton import _Analysis
from fusegen_plugins.backends.triton_gemm_emitter import TritonGemmFusion

NO_TOOLS = sass.tools_unavailable_reason()

_BLOCK_LEVEL = ('"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion","block_level_fusion_config":'
                '{"num_warps":"2","output_tiles":[{"sizes":["16","8"]}],"num_ctas":1,"num_stages":1,'
                '"is_tma_allowed":false,"is_warp_specialization_allowed":false,"waves_per_eu":0}}')

#: ``jax.jit(lambda x, w: x[:, ::2] @ w)`` on bf16[32,128] and bf16[64,16], as XLA:GPU optimizes it for an H200
#: (``fusegen.capture``; metadata and shardings left out)
XLA_LHS_MINOR_STRIDE_2 = """HloModule jit__lambda, entry_computation_layout={(bf16[32,128]{1,0}, bf16[64,16]{1,0})->bf16[32,16]{1,0}}

%gemm_fusion_dot_general.1_computation (parameter_0: bf16[32,128], parameter_1: bf16[64,16]) -> bf16[32,16] {
  %parameter_0 = bf16[32,128]{1,0} parameter(0)
  %slice.0 = bf16[32,64]{1,0} slice(%parameter_0), slice={[0:32:1], [0:128:2]}
  %parameter_1 = bf16[64,16]{1,0} parameter(1)
  ROOT %dot_general.0 = bf16[32,16]{1,0} dot(%slice.0, %parameter_1), lhs_contracting_dims={1}, rhs_contracting_dims={0}, backend_config={"sizes":["16"]}
}

ENTRY %main.1 (x.1: bf16[32,128], w.1: bf16[64,16]) -> bf16[32,16] {
  %w.1 = bf16[64,16]{1,0} parameter(1)
  %x.1 = bf16[32,128]{1,0} parameter(0)
  ROOT %gemm_fusion_dot_general.1 = bf16[32,16]{1,0} fusion(%x.1, %w.1), kind=kCustom, calls=%gemm_fusion_dot_general.1_computation, backend_config={"operation_queue_id":"0",BLOCK_LEVEL,"force_earliest_schedule":false}
}
""".replace("BLOCK_LEVEL", _BLOCK_LEVEL)

#: the same on bf16[128,512] and bf16[256,64]: XLA splits K into 8 batch indices (a reshape of the slice), so the
#: operand tile is three-dimensional; a loop fusion then sums the 8 partial products
XLA_LHS_MINOR_STRIDE_2_SPLIT_K = """HloModule jit__lambda, entry_computation_layout={(bf16[128,512]{1,0}, bf16[256,64]{1,0})->bf16[128,64]{1,0}}

%gemm_fusion_dot_computation (parameter_0: bf16[128,512], parameter_1: bf16[8,32,64]) -> f32[8,128,64] {
  %parameter_0 = bf16[128,512]{1,0} parameter(0)
  %slice.0 = bf16[128,256]{1,0} slice(%parameter_0), slice={[0:128:1], [0:512:2]}
  %reshape.2 = bf16[128,8,32]{2,1,0} reshape(%slice.0)
  %parameter_1 = bf16[8,32,64]{2,1,0} parameter(1)
  ROOT %dot.1 = f32[8,128,64]{2,1,0} dot(%reshape.2, %parameter_1), lhs_batch_dims={1}, lhs_contracting_dims={2}, rhs_batch_dims={0}, rhs_contracting_dims={1}, backend_config={"sizes":["16"]}
}

%dot.reduce_sub_computation (lhs: f32[], rhs: f32[]) -> f32[] {
  %rhs = f32[] parameter(1)
  %lhs = f32[] parameter(0)
  ROOT %add.1 = f32[] add(%lhs, %rhs)
}

%fused_reduce (param_0.1: f32[8,128,64]) -> bf16[128,64] {
  %param_0.1 = f32[8,128,64]{2,1,0} parameter(0)
  %constant_2 = f32[] constant(0)
  %reduce.2 = f32[128,64]{1,0} reduce(%param_0.1, %constant_2), dimensions={0}, to_apply=%dot.reduce_sub_computation
  ROOT %convert.2 = bf16[128,64]{1,0} convert(%reduce.2)
}

ENTRY %main.1 (x.1: bf16[128,512], w.1: bf16[256,64]) -> bf16[128,64] {
  %w.1 = bf16[256,64]{1,0} parameter(1)
  %bitcast.1 = bf16[8,32,64]{2,1,0} bitcast(%w.1)
  %x.1 = bf16[128,512]{1,0} parameter(0)
  %gemm_fusion_dot = f32[8,128,64]{2,1,0} fusion(%x.1, %bitcast.1), kind=kCustom, calls=%gemm_fusion_dot_computation, backend_config={"operation_queue_id":"0",BLOCK_LEVEL,"force_earliest_schedule":false}
  ROOT %loop_reduce_fusion = bf16[128,64]{1,0} fusion(%gemm_fusion_dot), kind=kLoop, calls=%fused_reduce
}
""".replace("BLOCK_LEVEL", _BLOCK_LEVEL.replace('["16","8"]', '["1","16","8"]'))


def _operands(f, seed):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(o.shape.dimensions).astype(dtypes.numpy_dtype(o.shape.element_type))
            for o in f.operands]


def _kernel_output(f, ops):
    """The GPU kernel itself (XLA's tiles and grid) run in the interpreter; judged against the reference evaluator
    within the fusion's error budget."""
    em = TritonGemmFusion(_Analysis(f), interpret_variant=False).emit()
    out = triton_runtime.run_fusion(em, ops, f)[0]
    (budget,) = output_budgets(f)
    j = judge(out, np.asarray(evaluate_instruction(f, ops)), budget, VerifyOptions())
    assert j.ratio <= 1, (budget, j)
    return out, em.kernels[0]


def _f64(x):
    return np.asarray(x).astype(np.float64)


def _assert_f64_close(out, a, b, out_type: str):
    """``out`` against ``a @ b`` in float64: an f32 accumulation of K products errs by at most about
    ``K * 2**-24`` of ``|a| @ |b|`` (1e-5 of it is ample for K <= 64), plus the rounding to ``out_type``."""
    want, scale = _f64(a) @ _f64(b), np.abs(_f64(a)) @ np.abs(_f64(b))
    rel = {"f32": 0.0, "bf16": 2.0 ** -8}[out_type]
    err = np.abs(_f64(out) - want)
    bound = 1e-5 * scale + rel * np.abs(want) + 1e-30
    assert (err <= bound).all(), (float(err.max()), np.unravel_index(np.argmax(err - bound), err.shape))


def test_xla_program_with_an_lhs_strided_along_k_runs_at_xlas_tile():
    """The issue's program: the lhs slice steps by 2 along K, its parameter's minor dimension (the slice reads
    all of it: every element's pair of neighbours lies in range, the case the vector read took)."""
    f = parse_module(XLA_LHS_MINOR_STRIDE_2).entry.root
    x, w = ops = _operands(f, seed=1)
    out, ks = _kernel_output(f, ops)
    assert ks.launch.grid == (2 * 2,) and ks.launch.num_warps == 2 and "range(0, 64, 16)" in ks.source
    assert "tl.split" not in ks.source and out.dtype == ml_dtypes.bfloat16
    _assert_f64_close(out, x[:, ::2], w, "bf16")


def test_xla_split_k_program_with_a_three_dimensional_strided_tile():
    """The larger program, whose slice XLA reshapes into 8 K pieces (a batch of 3-D tiles), end to end through
    ``run_module`` (the GEMM's interpreter variant groups the batch indices), against float64 numpy."""
    m = parse_module(XLA_LHS_MINOR_STRIDE_2_SPLIT_K)
    rng = np.random.default_rng(2)
    x = rng.standard_normal((128, 512)).astype(ml_dtypes.bfloat16)
    w = rng.standard_normal((256, 64)).astype(ml_dtypes.bfloat16)
    out, rep = run_module(m, [x, w], pm=plugin_manager(), compile_kernels=False)
    assert rep.ok, [(r.name, r.status, r.reason) for r in rep.fusions]
    gemm = next(r for r in rep.fusions if r.name == "gemm_fusion_dot")
    assert gemm.emitter == "TritonGemmFusion" and gemm.launch.startswith("grid=512 warps=2")
    _assert_f64_close(out, x[:, ::2], w, "bf16")


# (stride, start, tail): the sliced dimension reads `n` elements from a source of start + stride * (n - 1) + 1 +
# tail; the source is a multiple of the stride or not, and the last element's group of `stride` neighbours
# (starting at a multiple of the stride) lies within the source (the vector read's case) or past its end
SPECS = [(2, 0, 1), (2, 1, 0), (2, 0, 0), (3, 1, 0), (4, 1, 2)]


def _nested_gemm(et: str, side: str, dim: int, stride: int, start: int, tail: int, layout: str = "1,0",
                 m=24, n=20, k=37):
    """``f32[m, n] = lhs[m, k] @ rhs[k, n]`` as a nested GEMM fusion (XLA's 16x8 tile, block_k 16) whose ``side``
    operand is a nested ``__triton_nested_gemm_fusion`` slicing dimension ``dim`` of a bigger parameter (that
    operand's arrays in ``layout``, minor to major)."""
    shapes = {"lhs": [m, k], "rhs": [k, n]}
    sliced = shapes[side]
    src = list(sliced)
    src[dim] = start + stride * (sliced[dim] - 1) + 1 + tail
    spec = ", ".join(f"[{start}:{src[d]}:{stride}]" if d == dim else f"[0:{src[d]}:1]" for d in range(2))

    def t(s, lay="1,0"):
        return f"{et}[{','.join(map(str, s))}]{{{lay}}}"

    p = {"lhs": t(shapes["lhs"]), "rhs": t(shapes["rhs"]), side: t(src, layout)}
    a, b = ("%op", "%p1") if side == "lhs" else ("%p0", "%op")
    nested = ('backend_config={"fusion_backend_config":{"kind":"__triton_nested_gemm_fusion",'
              '"block_level_fusion_config":{"output_tiles":[{"sizes":["%d","%d"]}]}}}'
              % ((16, 16) if side == "lhs" else (16, 8)))
    hlo = f"""HloModule m
%{side}_operand (q: {t(src, layout)}) -> {t(sliced, layout)} {{
  %q = {t(src, layout)} parameter(0)
  ROOT %s = {t(sliced, layout)} slice(%q), slice={{{spec}}}
}}
%gemm (p0: {p['lhs']}, p1: {p['rhs']}) -> f32[{m},{n}] {{
  %p0 = {p['lhs']} parameter(0)
  %p1 = {p['rhs']} parameter(1)
  %op = {t(sliced, layout)} fusion(%p{0 if side == 'lhs' else 1}), kind=kCustom, calls=%{side}_operand, {nested}
  ROOT %d = f32[{m},{n}]{{1,0}} dot({a}, {b}), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}, backend_config={{"sizes":["16"]}}
}}
ENTRY %e (x: {p['lhs']}, y: {p['rhs']}) -> f32[{m},{n}] {{
  %x = {p['lhs']} parameter(0)
  %y = {p['rhs']} parameter(1)
  ROOT %f = f32[{m},{n}]{{1,0}} fusion(%x, %y), kind=kCustom, calls=%gemm, backend_config={{{_BLOCK_LEVEL}}}
}}"""
    sl = tuple(slice(start, src[d], stride) if d == dim else slice(None) for d in range(2))
    return parse_module(hlo).entry.root, sl


@pytest.mark.parametrize("stride,start,tail", SPECS)
@pytest.mark.parametrize("side,dim,layout", [("lhs", 1, "1,0"), ("lhs", 0, "1,0"), ("lhs", 0, "0,1"),
                                             ("rhs", 0, "1,0"), ("rhs", 1, "1,0"), ("rhs", 0, "0,1")],
                         ids=["lhs-K-minor", "lhs-M-major", "lhs-M-minor", "rhs-K-major", "rhs-N-minor", "rhs-K-minor"])
@pytest.mark.parametrize("et", ["bf16", "f32"])
def test_strided_operand_of_a_nested_gemm(et, side, dim, layout, stride, start, tail):
    f, sl = _nested_gemm(et, side, dim, stride, start, tail, layout)
    a, b = ops = _operands(f, seed=stride * 10 + start + tail)
    out, ks = _kernel_output(f, ops)
    if side == "lhs":
        a = a[sl]
    else:
        b = b[sl]
    assert a.shape == (24, 37) and b.shape == (37, 20)
    if et == "f32":  # XLA's default-precision f32 dot: tf32 operands, rounded with cvt.rna
        a, b = tf32_round(a), tf32_round(b)
    _assert_f64_close(out, a, b, "f32")


@pytest.mark.parametrize("et,side,dim,stride,start,tail",
                         [("bf16", "lhs", 1, 2, 0, 1), ("f32", "rhs", 1, 3, 1, 0), ("f32", "lhs", 1, 4, 1, 2)])
def test_strided_operand_of_a_nested_gemm_compiles_for_sm90(et, side, dim, stride, start, tail):
    f, _ = _nested_gemm(et, side, dim, stride, start, tail)
    ks = TritonGemmFusion(_Analysis(f), interpret_variant=False).emit().kernels[0]
    res = triton_runtime.compile_for_target(ks, capability=90)
    assert ".target sm_90a" in res.ptx and res.num_warps == 2


@pytest.mark.skipif(NO_TOOLS is not None, reason=f"ptxas/cuobjdump cannot run: {NO_TOOLS}")
def test_xla_program_compiles_for_sm90_onto_the_tensor_cores(tmp_path):
    """sm_90 machine code of the issue's kernel: bf16 HMMA, no spills; a thread reads the strided lhs one 2-byte
    element a load (its K neighbours are 4 bytes apart: 4 a K step, 4 steps unrolled) and the contiguous rhs two
    elements a load (its 16x8 tile over 64 threads)."""
    f = parse_module(XLA_LHS_MINOR_STRIDE_2).entry.root
    ks = TritonGemmFusion(_Analysis(f), interpret_variant=False).emit().kernels[0]
    st = sass.kernel_sass_stats(ks, cache_dir=tmp_path)
    assert any(op.startswith("HMMA.16816.F32.BF16") for op in st.tensor_core_ops), st.tensor_core_ops
    assert st.spill_bytes == 0 and st.global_loads == {2: 16, 4: 4}, st.global_loads
