"""Make launch ground truth the way ``../shared/corpus/jax/launch/`` was made: deviceless H200 compiles.

Each program below is compiled by XLA:GPU (jax + jax-cuda12-plugin/pjrt of the same version, compile-only
H200 topology from ``../shared/tools/jax_gpu_hlo/h200_min.txtpb``) with ``--xla_dump_to``; its optimized HLO
and XLA's thunk sequence are kept, and every kernel thunk of a fusion becomes a row of ``LAUNCH.tsv`` (the
shared corpus's columns). Needs the plugin, which is not a project dependency::

    .venv/bin/pip install jax-cuda12-plugin==0.10.2 jax-cuda12-pjrt==0.10.2   # the installed jax's version
    JAX_PLATFORMS=cpu .venv/bin/python scripts/make_launch_ground_truth.py tests/data/launch_extra

Writes ``OUT/NAME.h200_opt.hlo``, ``OUT/NAME.thunks.txt`` and ``OUT/LAUNCH.tsv``. Exit 2 when the plugin or
the target config is missing.
"""

from __future__ import annotations

import csv
import glob
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

SPEC = Path(__file__).resolve().parents[1].parent / "shared" / "tools" / "jax_gpu_hlo" / "h200_min.txtpb"
COLUMNS = ["module_file", "fusion_name", "kernel_name", "thunk_id", "thunk_kind", "scope", "grid_x", "grid_y",
           "grid_z", "threads_x", "threads_y", "threads_z", "shared_memory_bytes", "hlo_opcode", "fusion_kind",
           "backend_kind", "note"]
_THUNK = re.compile(r"^(\s*)(\d+): (\w+) \[[^\]]*\] (\S+)(?: grid: \[(\d+), (\d+), (\d+)\] threads: \[(\d+), (\d+), "
                    r"(\d+)\]\s+shared_memory: (\d+) bytes)?")


def programs(jnp, jax):
    """``(name, function, [(shape, dtype), ...])`` of every program compiled."""
    i32, i8, u8, i16, u16, i64 = jnp.int32, jnp.int8, jnp.uint8, jnp.int16, jnp.uint16, jnp.int64
    f32, f16, bf16 = jnp.float32, jnp.float16, jnp.bfloat16
    e4m3, e5m2, i4 = jnp.float8_e4m3fn, jnp.float8_e5m2, jnp.int4
    lax = jax.lax

    def divmod_(a, b):
        return a % b == 0, jnp.floor_divide(a, b), jnp.remainder(a, b)

    def int_bits(a, b):
        return (a << 3) ^ (b >> 2), lax.population_count(a), lax.clz(b), jnp.sign(a) * jnp.abs(b)

    def pred_logic(a, b):
        return jnp.logical_xor(a, b), jnp.logical_and(a, ~b)

    def s8_divide(a, b):
        return a // (b | 1), a % (b | 1)

    def small_ints(a, b, c):
        return (a.astype(u16) * b) >> 3, (c // 7).astype(i16)

    def s64_divide(a, b):
        return a // (b | 1), (a * b) > 0

    def f16_transcendental(x):
        return jnp.exp(x), jnp.log1p(jnp.abs(x)), jnp.tanh(x)

    def bf16_gelu_isnan(x):
        y = jax.nn.gelu(x, approximate=False)
        return y, jnp.isnan(x), lax.rsqrt(jnp.abs(x) + 1)

    def f8_scale(x, s):
        return (x.astype(f32) * s).astype(e4m3), jnp.exp(x.astype(bf16))

    def f8_e5m2(x):
        return (x.astype(f16) * 3).astype(e5m2), x.astype(f32) > 0

    def mixed_roots(x, n):
        return jnp.sin(x).astype(f16), (n * 3) // 5, x > 0

    def int4_small(a):
        return (a + 1).astype(i4), a > 2

    def pred_small(a, b):
        return a < b

    def reduce_window_small(x):
        return lax.reduce_window(x, -jnp.inf, lax.max, (1, 2, 2, 1), (1, 1, 1, 1), "SAME")

    def reduce_window_large(x):
        return lax.reduce_window(x, 0.0, lax.add, (1, 3, 3, 1), (1, 1, 1, 1), "SAME")

    def select_sign_f16(x, y):
        return jnp.where(x > y, jnp.sign(x), jnp.floor(y)), jnp.remainder(x, y)

    def mm(x, w):
        return x @ w

    def mm_mixed(x, w):
        return jnp.matmul(x, w.astype(x.dtype))

    def mm_s8(x, w):
        return lax.dot(x, w, preferred_element_type=i32)

    def mm_f8(x, w):
        return lax.dot(x, w, preferred_element_type=f32).astype(bf16)

    def softmax_f32(x):
        return jax.nn.softmax(x, axis=-1)

    def layer_norm_bf16(x):
        x32 = x.astype(f32)
        m = x32.mean(-1, keepdims=True)
        v = ((x32 - m) ** 2).mean(-1, keepdims=True)
        return ((x32 - m) * lax.rsqrt(v + 1e-5)).astype(bf16)

    def concat_11(*xs):
        return jnp.concatenate([x * 2 for x in xs], axis=1)

    def int4_big(a):
        return (a >> 1).astype(i4), (a & 7).astype(jnp.uint4)

    def odd_bf16(x, y):
        return jnp.exp(x) * y, x < y

    def odd_even_f8(x):
        return (x.astype(f32) * 0.5).astype(e5m2)

    def transpose_loop(x):
        return jnp.sin(x.T)

    def mm_batched(x, w):
        return jnp.einsum("bij,bjk->bik", x, w)

    def mm_bias_gelu(x, w, b):
        return jax.nn.gelu(x @ w + b)

    big, mat = (1024, 1024), (512, 512)
    return [
        ("loop_divmod_s32", divmod_, [(big, i32), (big, i32)]),
        ("loop_int_bits_s32", int_bits, [(big, i32), (big, i32)]),
        ("loop_pred_logic", pred_logic, [((2048, 1024), jnp.bool_), ((2048, 1024), jnp.bool_)]),
        ("loop_s8_divide", s8_divide, [((4096, 1024), i8), ((4096, 1024), i8)]),
        ("loop_small_ints", small_ints, [((1000, 999), u8), ((1000, 999), u16), ((1000, 999), i16)]),
        ("loop_s64_divide", s64_divide, [((512, 1024), i64), ((512, 1024), i64)]),
        ("loop_f16_transcendental", f16_transcendental, [((768, 1024), f16)]),
        ("loop_bf16_gelu_isnan", bf16_gelu_isnan, [((2048, 768), bf16)]),
        ("loop_f8e4m3_scale", f8_scale, [((1024, 1024), e4m3), ((1024, 1024), f32)]),
        ("loop_f8e5m2", f8_e5m2, [((1536, 512), e5m2)]),
        ("loop_mixed_roots", mixed_roots, [((1024, 1000), f32), ((1024, 1000), i32)]),
        ("loop_int4_small", int4_small, [((96,), i8)]),
        ("loop_pred_small", pred_small, [((200,), f32), ((200,), f32)]),
        ("loop_reduce_window_2x2", reduce_window_small, [((8, 128, 128, 64), f32)]),
        ("loop_reduce_window_3x3", reduce_window_large, [((8, 128, 128, 64), f32)]),
        ("loop_select_sign_f16", select_sign_f16, [(big, f16), (big, f16)]),
        ("loop_concat_11_operands", concat_11, [((256, 64), f32)] * 11),
        ("loop_int4_uint4_big", int4_big, [(big, i8)]),
        ("loop_bf16_odd", odd_bf16, [((999, 1001), bf16), ((999, 1001), bf16)]),
        ("loop_f8e5m2_odd", odd_even_f8, [((1023, 1025), f16)]),
        ("loop_transpose_sin", transpose_loop, [((64, 48), f32)]),
        # s4 transposes: the 4-bit refusal of the tiled emitter (transpose_10_s4, partial_tile_s4 shapes: loop),
        # the packed transpose (1024x1024) and the minor-dim-preserving one (transpose_102_s4) both tiled
        ("transpose_10_s4", lambda x: x.T, [((64, 64), i4)]),
        ("transpose_210_s4_partial_tile", lambda x: jnp.transpose(x, (2, 1, 0)), [((24, 2, 24), i4)]),
        ("transpose_10_s4_packed", lambda x: x.T, [(big, i4)]),
        ("transpose_102_s4", lambda x: jnp.transpose(x, (1, 0, 2)), [((64, 16, 4), i4)]),
        ("gemm_bf16_bf16", mm, [(mat, bf16), (mat, bf16)]),
        ("gemm_bf16_batched", mm_batched, [((8, 256, 128), bf16), ((8, 128, 256), bf16)]),
        ("gemm_f16_bias_gelu", mm_bias_gelu, [((256, 512), f16), ((512, 1024), f16), ((1024,), f16)]),
        ("gemm_f32_large", mm, [((2048, 1024), f32), ((1024, 2048), f32)]),
        ("gemm_f16_f16", mm, [(mat, f16), (mat, f16)]),
        ("gemm_f32_f32", mm, [(mat, f32), (mat, f32)]),
        ("gemm_s8_s8_s32", mm_s8, [(mat, i8), (mat, i8)]),
        ("gemm_f8e4m3_f8e4m3", mm_f8, [(mat, e4m3), (mat, e4m3)]),
        ("gemm_f8e5m2_f8e4m3", mm_f8, [(mat, e5m2), (mat, e4m3)]),
        ("gemm_bf16_s8", mm_mixed, [(mat, bf16), (mat, i8)]),
        ("gemm_f16_s8", mm_mixed, [(mat, f16), (mat, i8)]),
        ("gemm_f32_bf16", mm_mixed, [(mat, f32), (mat, bf16)]),
        ("gemm_bf16_s4", mm_mixed, [(mat, bf16), (mat, i4)]),
        ("gemm_bf16_f32_rect", mm_mixed, [((256, 1024), bf16), ((1024, 384), f32)]),
        ("triton_softmax_f32", softmax_f32, [((256, 1024), f32)]),
        ("triton_layer_norm_bf16", layer_norm_bf16, [((512, 768), bf16)]),
    ]


def _rows(name: str, hlo: str, thunks: str) -> list[dict]:
    """One row per kernel thunk of a fusion (thunk names map to fusions by the kernel's name, the fusion's
    name with punctuation replaced; the thunk metadata would give the same for these programs)."""
    fusions = {}
    for m in re.finditer(r"^\s*(?:ROOT )?%?([\w.\-]+) = .*? fusion\(.*?kind=(k\w+)(.*)$", hlo, re.M):
        bk = re.search(r'"kind":"(__[\w$]+)"', m.group(3))
        fusions[re.sub(r"[^\w]", "_", m.group(1))] = (m.group(1), m.group(2), bk.group(1) if bk else "")
    out = []
    for line in thunks.splitlines():
        t = _THUNK.match(line)
        if not t or t.group(5) is None:
            continue
        kernel = t.group(4)
        base = kernel.split("__")[0] if "__" in kernel and kernel.rsplit("__", 1)[1].isdigit() else kernel
        if base not in fusions:
            continue
        fname, fkind, bk = fusions[base]
        out.append(dict(zip(COLUMNS, [f"{name}.h200_opt.hlo", fname, kernel, t.group(2), t.group(3), "entry",
                                      *t.group(5, 6, 7, 8, 9, 10, 11), "fusion", fkind, bk, ""])))
    return out


def main(argv: list[str], progs: Any = None, keep_ptx: bool = False) -> int:
    """Compile ``progs`` (default :func:`programs`) into ``argv[1]``; ``keep_ptx``: also ``NAME.xla.ptx``, XLA's
    dumped PTX modules concatenated (each after a ``// ==== <file> ====`` line, as in the shared corpus)."""
    if len(argv) != 2:
        print(__doc__, file=sys.stderr)
        return 2
    out = Path(argv[1])
    out.mkdir(parents=True, exist_ok=True)
    if not SPEC.exists():
        print(f"error: {SPEC} is absent (the shared checkout beside the project)", file=sys.stderr)
        return 2
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    os.environ["JAX_SKIP_CUDA_CONSTRAINTS_CHECK"] = "1"
    with tempfile.TemporaryDirectory(prefix="xla_dump_") as dump:
        return _compile_all(out, dump, progs or programs, keep_ptx)


def _compile_all(out: Path, dump: str, progs: Any, keep_ptx: bool) -> int:
    os.environ["XLA_FLAGS"] = f"--xla_dump_to={dump}"
    import jax
    import jax.numpy as jnp
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    try:
        dev = topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=SPEC.read_text()).devices[0]
    except Exception as e:  # no plugin: say how to get it
        print(f"error: no deviceless CUDA topology ({e}); install jax-cuda12-plugin/pjrt=={jax.__version__}",
              file=sys.stderr)
        return 2
    rows = []
    for name, f, args in progs(jnp, jax):
        if keep_ptx:  # one program's modules at a time
            for old in glob.glob(f"{dump}/*"):
                os.remove(old)
        sds = [jax.ShapeDtypeStruct(s, d, sharding=SingleDeviceSharding(dev)) for s, d in args]
        before = set(glob.glob(f"{dump}/*thunk_sequence.txt"))
        hlo = jax.jit(f).lower(*sds).compile().as_text()
        new = sorted(set(glob.glob(f"{dump}/*thunk_sequence.txt")) - before)
        thunks = Path(new[-1]).read_text() if new else ""
        # source paths scrubbed: the stack-frame table's file names become placeholders
        hlo = re.sub(r'source_file="[^"]*"', 'source_file="<src>"', hlo)
        hlo = re.sub(r'(?m)^(\d+) "/[^"]*"$', r'\1 "<src>"', hlo)
        (out / f"{name}.h200_opt.hlo").write_text(hlo)
        (out / f"{name}.thunks.txt").write_text(thunks)
        if keep_ptx:
            (out / f"{name}.xla.ptx").write_text("".join(
                f"// ==== {Path(m).name} ====\n{Path(m).read_text()}" for m in sorted(glob.glob(f"{dump}/*.ptx"))
                if Path(m).stat().st_size))
        got = _rows(name, hlo, thunks)
        rows.extend(got)
        print(f"{name:28s} {len(got)} fusion kernel(s): " + ", ".join(
            f"{r['fusion_name']}[{r['backend_kind'] or r['fusion_kind']}] {r['grid_x']}x{r['threads_x']} "
            f"smem={r['shared_memory_bytes']}" for r in got))
    with open(out / "LAUNCH.tsv", "w", newline="") as fh:
        w = csv.DictWriter(fh, COLUMNS, delimiter="\t", lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
    print(f"{len(rows)} rows -> {out / 'LAUNCH.tsv'} (jax {jax.__version__})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
