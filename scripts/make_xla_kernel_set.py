"""XLA's own kernels for native-emitter and block-level programs: optimized HLO, thunks and PTX (H200, deviceless).

Compiles each program below the way ``scripts/make_launch_ground_truth.py`` does (jax + jax-cuda12-plugin/pjrt,
compile-only H200 topology, ``--xla_dump_to``) and keeps, besides the HLO, the thunk sequence and ``LAUNCH.tsv``,
XLA's PTX of the program (``NAME.xla.ptx``: the dumped ``*.ptx`` modules concatenated, each after a
``// ==== <file> ====`` line, as in ``../shared/corpus/jax/launch``). The programs are the shapes where a kernel's
memory instructions are easy to get wrong: fp8 dequantize / quantize with scalar, row and column scales, row
reductions (short, odd, long, with a broadcast scale), multi-row, column, small-column and scalar reductions,
2-D/3-D transposes, broadcast-heavy and int8 loops, multi-output loops, concatenates, scatter, in-place DUS and
block-level softmax / RMS norm / layer norm; ``y_*``: column and multi-output reductions, argmax, transposing,
pred, u8, f16 and odd loops, reduce-window, gather, pad, slice, a broadcast concatenate.
``tests/emitters/test_kernel_vector_width.py`` compares fusegen's sm_90 kernels for them with XLA's; ``../shared/tools/sass_compare.py`` runs on the folder with
``FUSEGEN_SHARED_LAUNCH=tests/data/xla_kernels``. Needs the plugin (not a project dependency)::

    .venv/bin/python -m pip install jax-cuda12-plugin==0.10.2 jax-cuda12-pjrt==0.10.2
    .venv/bin/python scripts/make_xla_kernel_set.py tests/data/xla_kernels
    .venv/bin/python scripts/make_xla_kernel_set.py --set z tests/data/xla_kernels_z   # the z_* programs
    .venv/bin/python scripts/make_xla_kernel_set.py --set w tests/data/xla_kernels_w   # the w_* programs
    .venv/bin/python scripts/make_xla_kernel_set.py --set v tests/data/xla_kernels_v   # the v_* programs
    .venv/bin/python scripts/make_xla_kernel_set.py --set u tests/data/xla_kernels_u   # the u_* programs
"""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import make_launch_ground_truth as ground_truth  # noqa: E402


def programs(jnp, jax):
    """``(name, function, [(shape, dtype), ...])`` of every program compiled."""
    lax = jax.lax
    f32, bf16, e4m3, i32, i8 = jnp.float32, jnp.bfloat16, jnp.float8_e4m3fn, jnp.int32, jnp.int8

    def rmsnorm(x, w):
        r = lax.rsqrt((x.astype(f32) ** 2).mean(-1, keepdims=True) + 1e-6).astype(bf16)
        return x * r * w

    def layernorm(x):
        return (x - x.mean(-1, keepdims=True)) / jnp.sqrt(x.var(-1, keepdims=True) + 1e-5)

    return [
        ("x_deq_scalar", lambda x, s: (x.astype(f32) * s).astype(bf16), [((2048, 1024), e4m3), ((), f32)]),
        ("x_deq_row", lambda x, s: (x.astype(f32) * s[:, None]).astype(bf16), [((2048, 1024), e4m3), ((2048,), f32)]),
        ("x_deq_col", lambda x, s: (x.astype(f32) * s[None, :]).astype(bf16), [((2048, 1024), e4m3), ((1024,), f32)]),
        ("x_quant", lambda x, s: (x / s).astype(e4m3), [((2048, 1024), bf16), ((), f32)]),
        ("x_rowsum_bf16", lambda x: x.astype(f32).sum(-1), [((4096, 1024), bf16)]),
        ("x_rowmax_f32_odd", lambda x: x.max(-1), [((1000, 300), f32)]),
        ("x_rowsum_scaled", lambda x, s: (x.astype(f32) * s[:, None]).sum(-1), [((2048, 768), bf16), ((2048,), f32)]),
        ("x_rowsum_long", lambda x: x.sum(-1), [((64, 16384), f32)]),
        ("x_multirow", lambda x: x.sum(-1), [((8192, 16), f32)]),
        ("x_colsum", lambda x: x.sum(0), [((1024, 1024), f32)]),
        ("x_colsum_bf16", lambda x: x.astype(f32).sum(0), [((4096, 512), bf16)]),
        ("x_smallcol", lambda x: x.sum(1), [((256, 64, 8), f32)]),
        ("x_scalar_sum", lambda x: x.sum(), [((1 << 20,), f32)]),
        ("x_t2d_bf16", lambda x: x.T * 2, [((1024, 2048), bf16)]),
        ("x_t2d_f32", lambda x: x.T + 1, [((2048, 1024), f32)]),
        ("x_t021", lambda x: jnp.transpose(x, (0, 2, 1)) * 3, [((16, 256, 512), bf16)]),
        ("x_t210", lambda x: jnp.transpose(x, (2, 1, 0)) * 3, [((64, 32, 128), f32)]),
        ("x_loop_bcast_mix", lambda x, b, c: jnp.tanh(x * b[None, :] + c[:, None]),
         [((1024, 4096), bf16), ((4096,), bf16), ((1024,), bf16)]),
        ("x_loop_i8", lambda x, y: (x + y) * 3, [((4096, 1024), i8), ((4096, 1024), i8)]),
        ("x_loop_multi", lambda x: (jnp.exp(x), x.astype(bf16), x > 0), [((2048, 1024), f32)]),
        ("x_concat", lambda a, b, c: jnp.concatenate([a, b * 2, c], axis=1),
         [((1024, 512), f32), ((1024, 256), f32), ((1024, 768), f32)]),
        ("x_concat0", lambda a, b: jnp.concatenate([a, b], axis=0), [((512, 1024), bf16), ((256, 1024), bf16)]),
        ("x_scatter_add", lambda o, i, u: o.at[i].add(u), [((1024, 256), f32), ((512,), i32), ((512, 256), f32)]),
        ("x_dus", lambda o, u, i: lax.dynamic_update_slice(o, u, (i, 0)),
         [((4096, 1024), bf16), ((512, 1024), bf16), ((), i32)]),
        ("x_softmax_bf16", lambda x: jax.nn.softmax(x.astype(f32), -1).astype(bf16), [((1024, 2048), bf16)]),
        ("x_rmsnorm", rmsnorm, [((4096, 4096), bf16), ((4096,), bf16)]),
        ("x_layernorm_f32", layernorm, [((2048, 1536), f32)]),
        ("y_colsum_scaled", lambda x, s: (x * s[None, :]).sum(0), [((2048, 1024), f32), ((1024,), f32)]),
        ("y_mean_var", lambda x: (x.mean(-1), (x * x).mean(-1)), [((4096, 512), f32)]),
        ("y_row_argmax", lambda x: jnp.argmax(x, -1), [((2048, 1000), f32)]),
        ("y_loop_transpose", lambda x: jnp.sin(x.T) + 1, [((2048, 1024), f32)]),
        ("y_loop_pred", lambda a, b: (a > b) & (a < 2 * b), [((2048, 1024), f32), ((2048, 1024), f32)]),
        ("y_loop_u8", lambda a: (a.astype(i32) * 3 + 1).astype(jnp.uint8), [((4096, 1024), jnp.uint8)]),
        ("y_loop_f16_bcast", lambda x, b: (x * b[:, None, None]).astype(jnp.float16),
         [((64, 256, 256), jnp.float16), ((64,), jnp.float16)]),
        ("y_loop_odd", lambda x: jnp.exp(x) * 2, [((1023, 1021), f32)]),
        ("y_reduce_window", lambda x: lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 2, 2, 1), "VALID"),
         [((16, 128, 128, 64), f32)]),
        ("y_gather_rows", lambda t, i: t[i], [((8192, 512), bf16), ((2048,), i32)]),
        ("y_iota_mask", lambda x: jnp.where(jnp.arange(1024)[None, :] < jnp.arange(2048)[:, None] % 1024, x, 0.0),
         [((2048, 1024), f32)]),
        ("y_softmax_bf16_3d", lambda x: jax.nn.softmax(x, -1), [((16, 512, 512), bf16)]),
        ("y_sum_bf16_major", lambda x: x.sum(0), [((64, 4096), bf16)]),
        ("y_scalar_max_bf16", lambda x: x.max(), [((1 << 20,), bf16)]),
        ("y_pad", lambda x: jnp.pad(x, ((1, 1), (3, 5))), [((2048, 1024), f32)]),
        ("y_slice", lambda x: x[:, 128:896] * 2, [((2048, 1024), f32)]),
        ("y_concat_bcast", lambda a, b: jnp.concatenate([a, jnp.broadcast_to(b, (1024, 256))], axis=1),
         [((1024, 768), f32), ((256,), f32)]),
    ]


def programs_z(jnp, jax):
    """``z_*``: programs written after the fixes above, to find what they missed (scatter combiners, block-level
    norms and softmax, fp8 / int8 / f16 / small f32 GEMMs, odd transposes and column reductions, cumsum, a
    5-operand concatenate); ``tests/data/xla_kernels_z``."""
    lax = jax.lax
    f32, bf16, f16, i32, i8, e4m3 = jnp.float32, jnp.bfloat16, jnp.float16, jnp.int32, jnp.int8, jnp.float8_e4m3fn

    def rms(x, w):
        xf = x.astype(f32)
        return (xf * lax.rsqrt((xf * xf).mean(-1, keepdims=True) + 1e-6)).astype(bf16) * w

    def ln_f32(x, g, b):
        m = x.mean(-1, keepdims=True)
        v = ((x - m) ** 2).mean(-1, keepdims=True)
        return (x - m) * lax.rsqrt(v + 1e-5) * g + b

    def attn(q, k, v):
        s = jnp.einsum("bqd,bkd->bqk", q, k) / 8.0
        return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1).astype(q.dtype), v)

    def mlp_f16(x, w1, w2):
        return jax.nn.relu(x @ w1) @ w2

    def fp8_mm(x, w, sx, sw):
        return (jnp.dot(x, w, preferred_element_type=f32) * (sx * sw)).astype(bf16)

    def i8_mm(x, w):
        return jnp.dot(x, w, preferred_element_type=i32)

    return [
        ("z_scatter_set_bf16", lambda o, i, u: o.at[i].set(u), [((8192,), bf16), ((1000,), i32), ((1000,), bf16)]),
        ("z_scatter_set_rows_f16", lambda o, i, u: o.at[i].set(u), [((512, 64), f16), ((300,), i32), ((300, 64), f16)]),
        ("z_scatter_mul_f32", lambda o, i, u: o.at[i].multiply(u), [((4096,), f32), ((700,), i32), ((700,), f32)]),
        ("z_scatter_max_bf16", lambda o, i, u: o.at[i].max(u), [((1024, 32), bf16), ((500,), i32), ((500, 32), bf16)]),
        ("z_scatter_min_f16", lambda o, i, u: o.at[i].min(u), [((2048,), f16), ((600,), i32), ((600,), f16)]),
        ("z_scatter_set_f32", lambda o, i, u: o.at[i].set(u), [((1000, 128), f32), ((400,), i32), ((400, 128), f32)]),
        ("z_scatter_add_bf16_rows", lambda o, i, u: o.at[i].add(u), [((1000, 256), bf16), ((2000,), i32), ((2000, 256), bf16)]),
        ("z_segment_max", lambda x, s: jax.ops.segment_max(x, s, num_segments=64), [((4096, 16), f32), ((4096,), i32)]),
        ("z_rms_bf16", rms, [((4096, 2048), bf16), ((2048,), bf16)]),
        ("z_ln_f32", ln_f32, [((2048, 1024), f32), ((1024,), f32), ((1024,), f32)]),
        ("z_softmax_f16", lambda x: jax.nn.softmax(x, -1), [((1024, 1000), f16)]),
        ("z_logsumexp", lambda x: jax.nn.logsumexp(x, -1), [((4096, 512), f32)]),
        ("z_argmax_bf16", lambda x: jnp.argmax(x, -1), [((2048, 1000), bf16)]),
        ("z_attn_bf16", attn, [((8, 256, 64), bf16), ((8, 256, 64), bf16), ((8, 256, 64), bf16)]),
        ("z_mlp_f16", mlp_f16, [((512, 1024), f16), ((1024, 2048), f16), ((2048, 1024), f16)]),
        ("z_fp8_mm", fp8_mm, [((1024, 2048), e4m3), ((2048, 1024), e4m3), ((), f32), ((), f32)]),
        ("z_i8_mm", i8_mm, [((512, 1024), i8), ((1024, 512), i8)]),
        ("z_mm_f32_small", lambda x, w: jnp.tanh(x @ w), [((64, 512), f32), ((512, 96), f32)]),
        ("z_t102_bf16", lambda x: jnp.transpose(x, (1, 0, 2)) + 1, [((64, 128, 96), bf16)]),
        ("z_t2d_f16_odd", lambda x: x.T * 2, [((1000, 700), f16)]),
        ("z_t2d_i8", lambda x: x.T + 1, [((2048, 1024), i8)]),
        ("z_colmax_f16", lambda x: x.max(0), [((2048, 1024), f16)]),
        ("z_colsum_odd", lambda x: x.sum(0), [((3000, 77), f32)]),
        ("z_var_bf16", lambda x: x.astype(f32).var(-1), [((1024, 4096), bf16)]),
        ("z_cumsum", lambda x: jnp.cumsum(x, -1), [((256, 512), f32)]),
        ("z_dus_bf16", lambda x, u, i: lax.dynamic_update_slice(x, u, (i, 0)), [((4096, 1024), bf16), ((16, 1024), bf16), ((), i32)]),
        ("z_concat5", lambda a, b, c, d, e: jnp.concatenate([a, b, c, d, e], 1),
         [((512, 100), f32), ((512, 28), f32), ((512, 64), f32), ((512, 36), f32), ((512, 128), f32)]),
        ("z_gelu_f16", lambda x, b: jax.nn.gelu(x + b), [((4096, 3072), f16), ((3072,), f16)]),
        ("z_where_i8", lambda x, y, m: jnp.where(m, x, y), [((4096, 1024), i8), ((4096, 1024), i8), ((4096, 1024), jnp.bool_)]),
        ("z_deq_int8", lambda q, s: q.astype(f32) * s[:, None], [((4096, 1024), i8), ((4096,), f32)]),
    ]



def programs_w(jnp, jax):
    """``w_*``: a second batch written to look for misses (row / middle-axis / prod / any reductions, argmin, iota
    selects, integer division, f16 sigmoid, erf, int8 rounding, 4-D broadcasts, 021 / 210 / head transposes,
    concatenates, DUS, dynamic slice, gathers, GEMMs with bias + GELU, batched scores, f16 -> f32, small M, e5m2,
    masked / log softmax, layer and RMS norms, scatter-adds); ``tests/data/xla_kernels_w``."""
    lax = jax.lax
    f32, bf16, f16, i32, i8 = jnp.float32, jnp.bfloat16, jnp.float16, jnp.int32, jnp.int8

    def meanvar(x):
        return x.mean(-1), x.var(-1)

    def ln_bf16(x, g, b):
        xf = x.astype(f32)
        m = xf.mean(-1, keepdims=True)
        v = ((xf - m) ** 2).mean(-1, keepdims=True)
        return ((xf - m) * lax.rsqrt(v + 1e-5)).astype(bf16) * g + b

    def masked_softmax(x, m):
        return jax.nn.softmax(jnp.where(m, x, -1e9), -1)

    def heads(x):
        b, s, h, d = x.shape
        return jnp.transpose(x, (0, 2, 1, 3)) * 0.125

    def gemm_bias_gelu(x, w, b):
        return jax.nn.gelu(x @ w + b)

    def scores(q, k):
        return jnp.einsum("bhqd,bhkd->bhqk", q, k)

    def emb_grad(g, ids):
        return jnp.zeros((8192, 256), f32).at[ids].add(g)

    return [
        ("w_rowsum_1000", lambda x: x.sum(-1), [((2048, 1000), f32)]),
        ("w_rowmean_bf16", lambda x: x.mean(-1), [((4096, 768), bf16)]),
        ("w_meanvar", meanvar, [((1024, 512), f32)]),
        ("w_argmin_f32", lambda x: jnp.argmin(x, -1), [((1024, 333), f32)]),
        ("w_mid_axis", lambda x: x.sum(1), [((64, 128, 96), f32)]),
        ("w_prod", lambda x: jnp.prod(x, -1), [((512, 64), f32)]),
        ("w_any", lambda x: jnp.any(x > 0, -1), [((4096, 256), f32)]),
        ("w_iota_cmp", lambda x: jnp.where(jnp.arange(x.shape[1]) % 3 == 0, x, -x), [((2048, 1024), bf16)]),
        ("w_intdiv", lambda a, b: (a // (b | 1)) + a % 7, [((1 << 20,), i32), ((1 << 20,), i32)]),
        ("w_sigmoid_f16", lambda x: jax.nn.sigmoid(x), [((4096, 1024), f16)]),
        ("w_erf", lambda x: jax.scipy.special.erf(x), [((1 << 20,), f32)]),
        ("w_round_clip", lambda x: jnp.clip(jnp.round(x * 127), -128, 127).astype(i8), [((4096, 1024), f32)]),
        ("w_bcast4d", lambda x, b: x + b[None, :, None, None], [((16, 64, 32, 32), bf16), ((64,), bf16)]),
        ("w_t021_f16", lambda x: jnp.transpose(x, (0, 2, 1)) + 1, [((8, 512, 256), f16)]),
        ("w_t210_bf16", lambda x: jnp.transpose(x, (2, 1, 0)) * 2, [((128, 16, 256), bf16)]),
        ("w_heads", heads, [((8, 256, 16, 64), bf16)]),
        ("w_concat3_bf16", lambda a, b, c: jnp.concatenate([a, b, c], 0), [((512, 256), bf16), ((256, 256), bf16), ((128, 256), bf16)]),
        ("w_concat2_axis1", lambda a, b: jnp.concatenate([a, b], 1), [((1024, 384), f32), ((1024, 128), f32)]),
        ("w_dus_f32", lambda x, u, i: lax.dynamic_update_slice(x, u, (0, i)), [((1024, 4096), f32), ((1024, 64), f32), ((), i32)]),
        ("w_dslice", lambda x, i: lax.dynamic_slice(x, (i, 0), (64, 1024)) * 2, [((4096, 1024), f32), ((), i32)]),
        ("w_gather_bf16", lambda t, i: t[i] * 2, [((32000, 512), bf16), ((4096,), i32)]),
        ("w_gemm_bias_gelu", gemm_bias_gelu, [((1024, 1024), bf16), ((1024, 4096), bf16), ((4096,), bf16)]),
        ("w_scores", scores, [((4, 8, 128, 64), bf16), ((4, 8, 128, 64), bf16)]),
        ("w_gemm_f16_f32", lambda x, w: jnp.dot(x, w, preferred_element_type=f32), [((512, 768), f16), ((768, 1024), f16)]),
        ("w_gemm_small_m", lambda x, w: x @ w, [((16, 4096), bf16), ((4096, 4096), bf16)]),
        ("w_gemm_e5m2", lambda x, w: jnp.dot(x, w, preferred_element_type=f32).astype(bf16),
         [((512, 1024), jnp.float8_e5m2), ((1024, 512), jnp.float8_e4m3fn)]),
        ("w_masked_softmax", masked_softmax, [((512, 1024), bf16), ((512, 1024), jnp.bool_)]),
        ("w_ln_bf16", ln_bf16, [((2048, 1024), bf16), ((1024,), bf16), ((1024,), bf16)]),
        ("w_log_softmax", lambda x: jax.nn.log_softmax(x, -1), [((2048, 512), f32)]),
        ("w_rms_f16", lambda x: x * lax.rsqrt((x.astype(f32) ** 2).mean(-1, keepdims=True) + 1e-6).astype(f16), [((1024, 2048), f16)]),
        ("w_emb_grad", emb_grad, [((4096, 256), f32), ((4096,), i32)]),
        ("w_scatter_add_2d", lambda o, i, u: o.at[i].add(u), [((512, 512), bf16), ((1024,), i32), ((1024, 512), bf16)]),
    ]


def programs_v(jnp, jax):
    """``v_*``: a third batch, written after the z/w misses were fixed, to look for more (cumulative products
    and maxima, a column cumsum, strided slices, roll, reverse, pad, one-hot, column softmax, group / batch norm
    over several axes, f16 layer norm, 3-D reductions over two axes, int reductions, transposes of 4-D tensors
    and odd f32 shapes, transposed-operand / batched / tall-skinny GEMMs, row sorts, argsort, top-k, gathers
    along an axis, 2-D scatter-adds, bitcast and bit ops); ``tests/data/xla_kernels_v``."""
    lax = jax.lax
    f32, bf16, f16, i32, i8, u8 = jnp.float32, jnp.bfloat16, jnp.float16, jnp.int32, jnp.int8, jnp.uint8

    def group_norm(x):  # [N, G, C/G, HW]
        m = x.mean((2, 3), keepdims=True)
        v = x.var((2, 3), keepdims=True)
        return (x - m) * lax.rsqrt(v + 1e-5)

    def batch_stats(x):  # NHWC
        return x.mean((0, 1, 2)), (x * x).mean((0, 1, 2))

    def ln_f16(x, g):
        xf = x.astype(f32)
        m = xf.mean(-1, keepdims=True)
        v = ((xf - m) ** 2).mean(-1, keepdims=True)
        return ((xf - m) * lax.rsqrt(v + 1e-5)).astype(f16) * g

    def topk(x):
        return lax.top_k(x, 8)

    def residual_mm(x, w, r):
        return (x @ w).astype(f32) + r

    return [
        ("v_cumprod", lambda x: jnp.cumprod(x, -1), [((512, 256), f32)]),
        ("v_cummax_bf16", lambda x: lax.cummax(x, axis=1), [((1024, 128), bf16)]),
        ("v_cumsum_axis0", lambda x: jnp.cumsum(x, 0), [((512, 256), f32)]),
        ("v_cumsum_bf16", lambda x: jnp.cumsum(x.astype(f32), -1).astype(bf16), [((1024, 1024), bf16)]),
        ("v_stride_slice", lambda x: x[:, ::2] * 2, [((2048, 1024), f32)]),
        ("v_roll", lambda x: jnp.roll(x, 3, axis=1), [((1024, 1024), bf16)]),
        ("v_reverse", lambda x: x[:, ::-1] + 1, [((2048, 512), f32)]),
        ("v_pad", lambda x: jnp.pad(x, ((1, 1), (2, 5))), [((1000, 500), bf16)]),
        ("v_one_hot", lambda i: jax.nn.one_hot(i, 1000, dtype=bf16), [((4096,), i32)]),
        ("v_softmax_axis0", lambda x: jax.nn.softmax(x, 0), [((1024, 512), f32)]),
        ("v_group_norm", group_norm, [((8, 32, 16, 1024), f32)]),
        ("v_batch_stats", batch_stats, [((32, 28, 28, 128), f32)]),
        ("v_ln_f16", ln_f16, [((4096, 768), f16), ((768,), f16)]),
        ("v_sum_02", lambda x: x.sum((0, 2)), [((64, 256, 128), f32)]),
        ("v_max_i32", lambda x: x.max(-1), [((2048, 1024), i32)]),
        ("v_sum_u8", lambda x: x.astype(i32).sum(-1), [((4096, 512), u8)]),
        ("v_t0312", lambda x: jnp.transpose(x, (0, 3, 1, 2)) * 2, [((16, 32, 32, 64), bf16)]),
        ("v_t120_f32", lambda x: jnp.transpose(x, (1, 2, 0)) + 1, [((100, 64, 48), f32)]),
        ("v_t2d_f32_odd", lambda x: x.T * 3, [((999, 517), f32)]),
        ("v_mm_lhs_t", lambda x, w: x.T @ w, [((1024, 512), bf16), ((1024, 768), bf16)]),
        ("v_bmm_f16", lambda a, b: jnp.einsum("bij,bjk->bik", a, b), [((16, 256, 128), f16), ((16, 128, 256), f16)]),
        ("v_mm_tall", lambda x, w: x @ w, [((8192, 64), bf16), ((64, 64), bf16)]),
        ("v_mm_residual", residual_mm, [((512, 1024), bf16), ((1024, 1024), bf16), ((512, 1024), f32)]),
        ("v_sort_rows", lambda x: jnp.sort(x, -1), [((512, 128), f32)]),
        ("v_argsort", lambda x: jnp.argsort(x, -1), [((256, 256), bf16)]),
        ("v_topk", topk, [((128, 4096), f32)]),
        ("v_take_along", lambda x, i: jnp.take_along_axis(x, i, 1), [((1024, 512), f32), ((1024, 16), i32)]),
        ("v_scatter_add_2d_idx", lambda o, i, u: o.at[i[:, 0], i[:, 1]].add(u),
         [((256, 256), f32), ((2048, 2), i32), ((2048,), f32)]),
        ("v_bitcast", lambda x: lax.bitcast_convert_type(x, i32) >> 23, [((1 << 20,), f32)]),
        ("v_bits_u8", lambda a, b: (a & b) | (a >> 1), [((4096, 1024), u8), ((4096, 1024), u8)]),
    ]


def programs_u(jnp, jax):
    """``u_*``: a fourth batch of model pieces (rotary embedding, SwiGLU, cross-entropy, an Adam step, embedding
    lookup, layer-norm backward, sequence mean-pooling, causal masked softmax, top-p style sort-free cumsum,
    quantize per row, attention with bias, GELU backward, clipping by global norm, segment sums, int8 GEMM with
    per-column scale, bf16 GEMM with transposed output); ``tests/data/xla_kernels_u``."""
    lax = jax.lax
    f32, bf16, i32, i8 = jnp.float32, jnp.bfloat16, jnp.int32, jnp.int8

    def rope(x, cos, sin):  # [B, S, H, D]
        x1, x2 = x[..., ::2], x[..., 1::2]
        return jnp.stack([x1 * cos - x2 * sin, x1 * sin + x2 * cos], -1).reshape(x.shape)

    def rope_half(x, cos, sin):
        d = x.shape[-1] // 2
        x1, x2 = x[..., :d], x[..., d:]
        return jnp.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    def swiglu(x, w1, w2):
        return jax.nn.silu(x @ w1) * (x @ w2)

    def xent(logits, labels):
        lse = jax.nn.logsumexp(logits, -1)
        return (lse - jnp.take_along_axis(logits, labels[:, None], -1)[:, 0]).mean()

    def adam(p, g, m, v):
        m2 = 0.9 * m + 0.1 * g
        v2 = 0.999 * v + 0.001 * g * g
        return p - 1e-3 * m2 / (jnp.sqrt(v2) + 1e-8), m2, v2

    def ln_bwd(x, dy, g):
        mu = x.mean(-1, keepdims=True)
        xc = x - mu
        r = lax.rsqrt((xc * xc).mean(-1, keepdims=True) + 1e-5)
        xh = xc * r
        dxh = dy * g
        dx = r * (dxh - dxh.mean(-1, keepdims=True) - xh * (dxh * xh).mean(-1, keepdims=True))
        return dx, (dy * xh).sum(0), dy.sum(0)

    def causal_softmax(s):
        n = s.shape[-1]
        m = jnp.tril(jnp.ones((n, n), bool))
        return jax.nn.softmax(jnp.where(m, s, -jnp.inf), -1)

    def quant_rows(x):
        s = jnp.abs(x).max(-1, keepdims=True) / 127.0
        return jnp.round(x / s).astype(i8), s

    def attn_bias(q, k, v, b):
        s = jnp.einsum("bhqd,bhkd->bhqk", q, k) * 0.125 + b
        return jnp.einsum("bhqk,bhkd->bhqd", jax.nn.softmax(s, -1).astype(q.dtype), v)

    def gelu_bwd(x, g):
        return jax.grad(lambda t: (jax.nn.gelu(t) * g).sum())(x)

    def clip_global(a, b):
        n = jnp.sqrt((a * a).sum() + (b * b).sum())
        c = jnp.minimum(1.0, 1.0 / n)
        return a * c, b * c

    def i8_scaled(x, w, s):
        return jnp.dot(x, w, preferred_element_type=i32).astype(f32) * s[None, :]

    return [
        ("u_rope_interleaved", rope, [((4, 128, 8, 64), bf16), ((128, 1, 32), bf16), ((128, 1, 32), bf16)]),
        ("u_rope_half", rope_half, [((4, 128, 8, 64), bf16), ((128, 1, 32), bf16), ((128, 1, 32), bf16)]),
        ("u_swiglu", swiglu, [((256, 512), bf16), ((512, 1024), bf16), ((512, 1024), bf16)]),
        ("u_xent", xent, [((512, 8192), f32), ((512,), i32)]),
        ("u_adam", adam, [((1 << 20,), f32)] * 4),
        ("u_embed", lambda t, i: t[i], [((50000, 768), bf16), ((2048,), i32)]),
        ("u_ln_bwd", ln_bwd, [((1024, 768), f32), ((1024, 768), f32), ((768,), f32)]),
        ("u_mean_pool", lambda x: x.mean(1), [((32, 512, 768), bf16)]),
        ("u_causal_softmax", causal_softmax, [((8, 256, 256), f32)]),
        ("u_quant_rows", quant_rows, [((2048, 1024), f32)]),
        ("u_attn_bias", attn_bias, [((2, 4, 128, 64), bf16)] * 3 + [((2, 4, 128, 128), bf16)]),
        ("u_gelu_bwd", gelu_bwd, [((2048, 1024), f32), ((2048, 1024), f32)]),
        ("u_clip_global", clip_global, [((1024, 1024), f32), ((4096,), f32)]),
        ("u_segment_sum", lambda x, s: jax.ops.segment_sum(x, s, num_segments=128), [((8192, 64), f32), ((8192,), i32)]),
        ("u_i8_scaled", i8_scaled, [((256, 512), i8), ((512, 1024), i8), ((1024,), f32)]),
        ("u_mm_out_t", lambda x, w: (x @ w).T, [((512, 256), bf16), ((256, 1024), bf16)]),
        ("u_sum_bf16_mid", lambda x: x.astype(f32).sum(1), [((128, 64, 256), bf16)]),
        ("u_sq_norm_rows", lambda x: jnp.sqrt((x.astype(f32) ** 2).sum(-1)), [((8192, 128), bf16)]),
        ("u_where_bcast", lambda x, m: jnp.where(m[:, None], x, 0), [((4096, 1024), bf16), ((4096,), jnp.bool_)]),
        ("u_iota_mask", lambda x: x * (jnp.arange(1024)[None, :] < jnp.arange(2048)[:, None] // 2), [((2048, 1024), f32)]),
    ]


#: ``--set NAME`` -> programs (default ``x``: tests/data/xla_kernels)
SETS = {"x": programs, "z": programs_z, "w": programs_w, "v": programs_v, "u": programs_u}

if __name__ == "__main__":
    args = sys.argv[1:]
    which = "x"
    if "--set" in args:
        i = args.index("--set")
        which = args[i + 1]
        del args[i:i + 2]
    sys.exit(ground_truth.main([sys.argv[0], *args], SETS[which], keep_ptx=True))
