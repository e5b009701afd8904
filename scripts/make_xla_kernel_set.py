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
``tests/test_kernel_vector_width.py`` compares fusegen's sm_90 kernels for them with XLA's; ``../shared/tools/sass_compare.py`` runs on the folder with
``FUSEGEN_SHARED_LAUNCH=tests/data/xla_kernels``. Needs the plugin (not a project dependency)::

    .venv/bin/python -m pip install jax-cuda12-plugin==0.10.2 jax-cuda12-pjrt==0.10.2
    .venv/bin/python scripts/make_xla_kernel_set.py tests/data/xla_kernels
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


if __name__ == "__main__":
    sys.exit(ground_truth.main(sys.argv, programs, keep_ptx=True))
