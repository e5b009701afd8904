"""Generate the XLA:GPU-optimized programs of ``benchmarks/data/`` (issue 22: the reference evaluator at scale).

Each program is lowered with ``jax.jit`` and compiled by XLA for an H200 without a GPU (the jax CUDA plugin's
deviceless compile, as ``../shared/tools/jax_gpu_hlo`` does); the module after XLA:GPU's optimizer is written
as ``benchmarks/data/NAME.h200_opt.hlo`` (what ``fusegen run`` takes):

* ``sort_argsort_1m``: ``jnp.sort`` of f32[2**20] and ``jnp.argsort`` of f32[2**16];
* ``sort_kv_iota``: ``lax.sort((key, value, iota), num_keys=1)`` of f32[64,2048] rows;
* ``top_k_50``: ``jax.lax.top_k`` of f32[512,32000] with k=50;
* ``argmax_4096``: ``jnp.argmax`` of f32[4096,4096] along the rows (a variadic (value, index) reduce).

Needs ``jax-cuda12-plugin[with-cuda]==0.10.2`` (the ``models`` extra); the committed files let the benchmark
run without it. Usage: ``python scripts/gen_reference_programs.py [--out benchmarks/data] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # the CUDA plugin still compiles for the topology

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT.parent / "shared" / "tools" / "jax_gpu_hlo" / "h200_min.txtpb"


def programs():
    import jax
    import jax.numpy as jnp
    from jax import lax

    def sort_argsort(x, y):
        return jnp.sort(x), jnp.argsort(y)

    def kv_iota(k, v):
        iota = lax.broadcasted_iota(jnp.int32, k.shape, 1)
        return lax.sort((k, v, iota), dimension=1, num_keys=1, is_stable=True)

    def top_k(x):
        return lax.top_k(x, 50)

    def argmax(x):
        return jnp.argmax(x, axis=1)

    f32 = jnp.float32
    return {
        "sort_argsort_1m": (sort_argsort, [((1 << 20,), f32), ((1 << 16,), f32)]),
        "sort_kv_iota": (kv_iota, [((64, 2048), f32), ((64, 2048), f32)]),
        "top_k_50": (top_k, [((512, 32000), f32)]),
        "argmax_4096": (argmax, [((4096, 4096), f32)]),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "data"))
    ap.add_argument("names", nargs="*")
    a = ap.parse_args()
    import jax
    from jax.experimental import topologies
    from jax.sharding import SingleDeviceSharding

    dev = topologies.get_topology_desc(platform="cuda", topology="1x1x1", target_config=SPEC.read_text()).devices[0]
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    for name, (f, specs) in programs().items():
        if a.names and name not in a.names:
            continue
        args = [jax.ShapeDtypeStruct(s, d, sharding=SingleDeviceSharding(dev)) for s, d in specs]
        text = jax.jit(f).lower(*args).compile().as_text()
        (out / f"{name}.h200_opt.hlo").write_text(text)
        print(f"{name}: {len(text)} characters", file=sys.stderr)


if __name__ == "__main__":
    main()
