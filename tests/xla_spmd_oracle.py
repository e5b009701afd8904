"""XLA:CPU running a per-partition HLO module on N host devices: the oracle of the SPMD collective tests.

:func:`run_xla_spmd` runs several cases in one subprocess (``XLA_FLAGS=--xla_force_host_platform_device_count=8``
must be set before jax starts, and the test process may already have jax with one device). Each case is
``(hlo_text, num_partitions, replica_count, per_device_inputs)``; the module's entry parameters and root carry
``sharding={manual}`` so XLA's SPMD partitioner leaves the hand-written collectives as they are. The answer
per case is, per device (``replica * P + partition``), its output leaves, or the error text XLA gave.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

_SCRIPT = r"""
import json, os, sys
import numpy as np
import jax
from jax._src import xla_bridge as xb
from jaxlib import _hlo, _jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec

spec = json.load(open(sys.argv[1]))
backend = xb.get_backend("cpu")
results = {}
for k, case in enumerate(spec):
    try:
        n = case["p"] * case["r"]
        mod = _hlo.hlo_module_from_text(case["text"])
        mlir = _jax.mlir.hlo_to_stablehlo(mod.as_serialized_hlo_module_proto())
        opts = _jax.CompileOptions()
        bo = opts.executable_build_options
        bo.num_partitions, bo.num_replicas = case["p"], case["r"]
        bo.use_spmd_partitioning = case["p"] > 1
        bo.device_assignment = _jax.DeviceAssignment.create(np.arange(n).reshape(case["r"], case["p"]))
        devs = backend.local_devices()[:n]
        exe = backend.compile_and_load(mlir, _jax.DeviceList(tuple(devs)), opts)
        mesh = Mesh(np.array(devs), ("d",))
        data = np.load(case["inputs"])
        args = []
        for i in range(case["nargs"]):
            shards = [jax.device_put(data[f"d{d}_p{i}"], devs[d]) for d in range(n)]
            shape = (n * shards[0].shape[0],) + shards[0].shape[1:]  # arrays of rank >= 1 only
            args.append(jax.make_array_from_single_device_arrays(shape, NamedSharding(mesh, PartitionSpec("d")), shards))
        out = exe.execute_sharded(args).disassemble_into_single_device_arrays()
        arrays = {f"d{d}_o{j}": np.asarray(per_dev[d]) for j, per_dev in enumerate(out) for d in range(n)}
        np.savez(case["outputs"], **arrays)
        results[k] = {"outputs": len(out)}
    except Exception as e:
        results[k] = {"error": f"{type(e).__name__}: {e}"}
json.dump(results, open(sys.argv[2], "w"))
"""


def run_xla_spmd(cases: list[tuple[str, int, int, list[list[np.ndarray]]]]) -> list[list[list[np.ndarray]] | str]:
    """Per case: per device its output arrays (XLA:CPU), or the error text. Raises RuntimeError when the
    subprocess itself fails (jax missing)."""
    with tempfile.TemporaryDirectory() as tmp:
        tmp_path = Path(tmp)
        spec = []
        for k, (text, p, r, inputs) in enumerate(cases):
            f = tmp_path / f"in{k}.npz"
            np.savez(f, **{f"d{d}_p{i}": np.asarray(a) for d, args in enumerate(inputs) for i, a in enumerate(args)})
            spec.append({"text": text, "p": p, "r": r, "inputs": str(f), "outputs": str(tmp_path / f"out{k}.npz"),
                         "nargs": len(inputs[0])})
        (tmp_path / "spec.json").write_text(json.dumps(spec))
        (tmp_path / "run.py").write_text(_SCRIPT)
        env = dict(os.environ, XLA_FLAGS="--xla_force_host_platform_device_count=8", JAX_PLATFORMS="cpu")
        proc = subprocess.run([sys.executable, str(tmp_path / "run.py"), str(tmp_path / "spec.json"),
                               str(tmp_path / "res.json")], env=env, capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(f"XLA:CPU subprocess failed: {proc.stderr[-2000:]}")
        res = json.loads((tmp_path / "res.json").read_text())
        answers: list = []
        for k, (_, p, r, _) in enumerate(cases):
            got = res[str(k)]
            if "error" in got:
                answers.append(got["error"])
                continue
            with np.load(tmp_path / f"out{k}.npz") as z:
                answers.append([[z[f"d{d}_o{j}"] for j in range(got["outputs"])] for d in range(p * r)])
        return answers
