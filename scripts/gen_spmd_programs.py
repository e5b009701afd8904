"""Make the SPMD test programs of ``tests/data/spmd/``: seven small JAX programs sharded over N H200s.

The same seven programs as ``../shared/corpus/spmd/`` (there for 2 devices), for N partitions:
``python scripts/gen_spmd_programs.py --partitions 8``. Each is compiled by XLA deviceless for a topology of N
H200s (``get_topology_desc(platform="cuda", topology="1x1xN")``, as ``../shared/tools/jax_gpu_hlo/`` does) and run by
XLA:CPU over N host devices with the same shardings for the expected outputs, through :func:`fusegen.capture`
(needs jax's CUDA plugin, ``pip install -e '.[capture]'``; no GPU). Writes per program
``NAME.h200xN_opt.hlo`` (the per-partition module), ``NAME.h200xN.inputs.npz`` (global, seeded) and
``NAME.h200xN.expected.npz`` (global).

``--mesh2d`` makes the 2-D mesh programs instead (``dp=2 x tp=4``, 8 H200s: a data x tensor parallel training
step), each also with ``NAME.h200x8.shardings.json`` (the output shardings jax states, written by the capture)
and ``NAME.h200x8.parts/part{K}.{inputs,expected}.npz``: partition K's shards as jax places them on XLA:CPU's
devices (``Array.addressable_shards``; partition K is the mesh's K-th device in row-major order).
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


def mesh_programs():
    """``[(name, fn, mesh axes, input specs, output specs, example args)]`` over a 2-D mesh (the specs one per
    argument leaf / output leaf, in the arguments' / outputs' pytree form)."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    from jax.sharding import PartitionSpec as P

    def dp_tp_mlp_train(params, momentum, x, y):
        """One SGD-with-momentum step of a 2-layer MLP: weights sharded on tp, the batch on dp."""
        def loss(p):
            w1, b1, w2, b2 = p
            return jnp.mean((jax.nn.gelu(x @ w1 + b1) @ w2 + b2 - y) ** 2)

        value, grads = jax.value_and_grad(loss)(params)
        new_m = tuple(0.9 * m + g for m, g in zip(momentum, grads))
        return tuple(p - 0.05 * m for p, m in zip(params, new_m)), new_m, value

    d, h, b = 16, 32, 8
    rng = np.random.default_rng(2029)
    f32 = lambda *s: (rng.standard_normal(s) * (0.5 if len(s) > 1 else 0.1)).astype(np.float32)  # noqa: E731
    params = (f32(d, h), f32(h), f32(h, d), f32(d))
    momentum = tuple(0.1 * f32(*p.shape) for p in params)
    specs = (P(None, "tp"), P("tp"), P("tp", None), P())
    return [("dp_tp_mlp_train", dp_tp_mlp_train, {"dp": 2, "tp": 4}, (specs, specs, P("dp", None), P("dp", None)),
             (specs, specs, P()), (params, momentum, f32(b, d), f32(b, d)))]


def build_mesh(out_dir: Path) -> None:
    """The 2-D mesh programs: the capture's files, and per-partition shards as jax places them."""
    import math

    import jax
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    from fusegen import capture

    for name, fn, axes, in_specs, out_specs, args in mesh_programs():
        res = capture(fn, *args, mesh=axes, in_shardings=in_specs, out_shardings=out_specs, name=name,
                      out_dir=out_dir)
        n = math.prod(axes.values())
        mesh = Mesh(np.array(jax.devices("cpu")[:n]).reshape(tuple(axes.values())), tuple(axes))
        flat = list(mesh.devices.flat)
        leaves, tree = jax.tree_util.tree_flatten(args)
        specs = jax.tree_util.tree_leaves(in_specs, is_leaf=lambda x: isinstance(x, P))
        placed = [jax.device_put(v, NamedSharding(mesh, s)) for v, s in zip(leaves, specs)]
        outs_tree = jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), out_specs,
                                           is_leaf=lambda x: isinstance(x, P))
        outs = jax.jit(fn, out_shardings=outs_tree)(*tree.unflatten(placed))
        parts = Path(f"{res.files.hlo}".removesuffix("_opt.hlo") + ".parts")
        parts.mkdir(exist_ok=True)

        def by_partition(arrays: list) -> list[dict]:
            per = [{} for _ in range(n)]
            for i, a in enumerate(arrays):
                for sh in a.addressable_shards:
                    per[flat.index(sh.device)][i] = np.asarray(sh.data)
            return per

        for k, (ins, exp) in enumerate(zip(by_partition(placed), by_partition(jax.tree_util.tree_leaves(outs)))):
            np.savez(parts / f"part{k}.inputs.npz", **{f"p{i}": a for i, a in ins.items()})
            np.savez(parts / f"part{k}.expected.npz", **{f"o{i}": a for i, a in exp.items()})
        print(f"{name}: mesh {axes}, {len(res.text)} chars -> {res.files.hlo}, {res.files.shardings.name}, "
              f"{parts.name}")


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
    ap.add_argument("--mesh2d", action="store_true", help="the 2-D mesh programs (dp=2 x tp=4) instead")
    a = ap.parse_args()
    os.environ["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={8 if a.mesh2d else a.partitions}"
    os.environ.setdefault("JAX_PLATFORMS", "cpu")  # XLA:CPU runs; the CUDA plugin still compiles for the topology
    sys.path.insert(0, str(ROOT))
    if a.mesh2d:
        build_mesh(a.out)
    else:
        build(a.partitions, a.out)


if __name__ == "__main__":
    main()
