"""Make the SPMD test programs of ``tests/data/spmd/``: seven small JAX programs sharded over N H200s.

The same seven programs as ``../shared/corpus/spmd/`` (there for 2 devices), for N partitions:
``python scripts/gen_spmd_programs.py --partitions 8``. Each is compiled by XLA deviceless for a topology of N
H200s (``get_topology_desc(platform="cuda", topology="1x1xN")``, as ``../shared/tools/jax_gpu_hlo/`` does) and run by
XLA:CPU over N host devices with the same shardings for the expected outputs, through :func:`fusegen.capture`
(needs jax's CUDA plugin, ``pip install -e '.[capture]'``; no GPU). Writes per program
``NAME.h200xN_opt.hlo`` (the per-partition module), ``NAME.h200xN.inputs.npz`` (global, seeded) and
``NAME.h200xN.expected.npz`` (global).
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def programs(n: int):
    """``[(name, fn, in_specs, out_specs, global input shapes)]`` over a 1-D mesh axis ``d`` of ``n`` devices."""
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.sharding import PartitionSpec as P

    def dp_mlp_train(w1, b1, w2, b2, x, y):
        def loss(params):
            w1, b1, w2, b2 = params
            h = jnp.tanh(x @ w1 + b1)
            return jnp.mean((h @ w2 + b2 - y) ** 2)

        value, grads = jax.value_and_grad(loss)((w1, b1, w2, b2))
        return tuple(p - 0.1 * g for p, g in zip((w1, b1, w2, b2), grads)) + (value,)

    def megatron(x, w1, b1, w2, b2):
        return jax.nn.gelu(x @ w1 + b1) @ w2 + b2

    def seqpar(x, w1, b1, w2, b2):
        full = lax.all_gather(x, "d", axis=0, tiled=True)
        h = jax.nn.gelu(full @ w1 + b1) @ w2
        return lax.psum_scatter(h, "d", scatter_dimension=0, tiled=True) + b2

    def ring(x):
        perm = [(i, (i + 1) % n) for i in range(n)]

        def step(_, acc):
            return 0.5 * acc + lax.ppermute(acc, "d", perm)

        return lax.fori_loop(0, n - 1, step, x)

    def moe(x, w):
        t = lax.all_to_all(x, "d", 0, 0, tiled=True)
        e = jax.nn.gelu(t @ w[0])
        return lax.all_to_all(e, "d", 0, 0, tiled=True)

    def colsum(x):
        return jnp.sum(x, axis=0)

    def rep_to_sharded(x, w):
        return jnp.tanh(x @ w)

    def scaled(x):
        return x * (1.0 + lax.axis_index("d").astype(jnp.float32))

    return [
        ("dp_mlp_train", dp_mlp_train, (P(), P(), P(), P(), P("d"), P("d")), (P(), P(), P(), P(), P()),
         [(64, 128), (128,), (128, 16), (16,), (64, 64), (64, 16)], None),
        ("tp_mlp_megatron", megatron, (P(), P(None, "d"), P("d"), P("d", None), P()), P(),
         [(32, 128), (128, 512), (512,), (512, 128), (128,)], None),
        ("tp_mlp_seqpar", seqpar, (P("d"), P(None, "d"), P("d"), P("d", None), P()), P("d"),
         [(64, 128), (128, 512), (512,), (512, 128), (128,)], "shard_map"),
        ("ring_ppermute", ring, (P("d"),), P("d"), [(64, 256)], "shard_map"),
        ("all_to_all_moe", moe, (P("d"), P("d")), P("d"), [(128, 64), (n, 64, 64)], "shard_map"),
        ("sum_reduce_scatter", colsum, (P("d"),), P("d"), [(256, 128)], None),
        ("replicated_to_sharded", rep_to_sharded, (P(), P()), P("d"), [(64, 128), (128, 128)], None),
        ("partition_id_scale", scaled, (P(), ), P("d"), [(64, 128)], "shard_map_replicated_in"),
    ]


def build(n: int, out_dir: Path) -> None:
    import jax
    import numpy as np

    from fusegen import capture

    for k, (name, fn, in_specs, out_specs, shapes, kind) in enumerate(programs(n)):
        f = fn
        if kind and kind.startswith("shard_map"):
            def f(*xs, mesh, fn=fn, in_specs=in_specs, out_specs=out_specs, kind=kind):
                return jax.shard_map(fn, mesh=mesh, in_specs=in_specs, out_specs=out_specs,
                                     check_vma=kind == "shard_map")(*xs)
        rng = np.random.default_rng(1000 + k)
        args = [rng.standard_normal(s).astype(np.float32) * (0.5 if len(s) > 1 else 0.1) for s in shapes]
        outs = list(out_specs) if isinstance(out_specs, tuple) else out_specs
        res = capture(f, *args, mesh=n, in_shardings=list(in_specs), out_shardings=outs, name=name, out_dir=out_dir)
        print(f"{name}: num_partitions={n}, {len(res.text)} chars -> {res.files.hlo}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--partitions", type=int, default=8)
    ap.add_argument("--out", type=Path, default=ROOT / "tests" / "data" / "spmd")
    a = ap.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={a.partitions}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # XLA:CPU runs; the CUDA plugin still compiles for the topology
    sys.path.insert(0, str(ROOT))
    build(a.partitions, a.out)


if __name__ == "__main__":
    main()
