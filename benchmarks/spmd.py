"""An 8-partition run against 8 single-partition runs of the same module (issue 20's goal: <= 1.5 x N x one).

For each 8-partition program of ``tests/data/spmd/`` whose per-partition module also runs as one device (an
all-reduce over a group of one is the identity there, a permute without a pair to itself gives zeros; no
all-gather or all-to-all, whose shapes need the other partitions), it times:

* ``N``: :func:`fusegen.verify.judged_run.run_spmd_module` on the global inputs split 8 ways (all 8 copies in
  lockstep, kernels generated once and reused by every partition, the 8-way reference and f64 oracle);
* ``one``: :func:`fusegen.verify.judged_run.run_module` on the same module with ``num_partitions=1`` and partition
  0's shards, in the same process after a warm-up (so both see Triton's warm caches);

both with ``--no-compile`` and ``jobs=1`` (everything in this process). Prints ``N / (8 x one)`` per program and
exits 1 if any is above 1.5.

    python benchmarks/spmd.py [--repeat 2] [--json out.json]
"""

from __future__ import annotations

import argparse
import copy
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = REPO / "tests" / "data" / "spmd"
PROGRAMS = ("tp_mlp_megatron", "dp_mlp_train", "ring_ppermute", "replicated_to_sharded", "partition_id_scale")
GOAL = 1.5


def _best(fn, repeat: int) -> float:
    """The fastest of ``repeat`` wall times of ``fn()``, in seconds."""
    import timeit

    return min(timeit.repeat(fn, number=1, repeat=repeat))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path, default=None)
    a = ap.parse_args()
    from fusegen.api import load_all
    from fusegen.verify.judged_run import run_module, run_spmd_module
    from fusegen.runtime.spmd_io import load_spmd_inputs
    from fusegen.evaluator.spmd_plan import plan_spmd

    rows = []
    for name in PROGRAMS:
        hlo = DATA / f"{name}.h200x8_opt.hlo"
        module = load_all(str(hlo))[0]
        plan = plan_spmd(module)
        args = load_spmd_inputs(module, plan, DATA / f"{name}.h200x8.inputs.npz")
        single = copy.deepcopy(module)
        single.attrs["num_partitions"] = "1"
        run_module(single, args[0], compile_kernels=False)  # warm Triton's caches for both
        t_one = _best(lambda: run_module(single, args[0], compile_kernels=False), a.repeat)
        t_n = _best(lambda: run_spmd_module(module, args, compile_kernels=False), a.repeat)
        ratio = t_n / (plan.devices * t_one)
        rows.append({"program": name, "partitions": plan.devices, "one_partition_s": round(t_one, 3),
                     "all_partitions_s": round(t_n, 3), "ratio_to_n_x_one": round(ratio, 3)})
        print(f"{name:24s} one {t_one:7.3f} s   {plan.devices} partitions {t_n:7.3f} s   "
              f"= {ratio:.2f} x ({plan.devices} x one)", flush=True)
    if a.json:
        a.json.write_text(json.dumps(rows, indent=2))
    worst = max(r["ratio_to_n_x_one"] for r in rows)
    print(f"worst {worst:.2f} x N x one (goal <= {GOAL})")
    return 0 if worst <= GOAL else 1


if __name__ == "__main__":
    sys.exit(main())
