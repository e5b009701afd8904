"""Sort at scale on the CPU: the reference evaluator's ``sort`` of 2**20 f32 (``jnp.sort`` and ``jnp.argsort`` as JAX
emits them, NaN-canonicalizing total-order comparator) against XLA:CPU (jaxlib) on the same module in the same run,
and against numpy's stable argsort (the floor). Budget (issue 10): the 1M-element sort + argsort in <= 30 s on the
CPU. Prints one row per peer (and writes them with ``--json PATH``); exits 1 over the budget.

    python benchmarks/sort.py [--n 1048576] [--repeat 3] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from test_sort_comparators import JAX_SORT, _input  # noqa: E402  (the module JAX emits, and its input)

from fusegen.evaluator.evaluator import evaluate_module  # noqa: E402
from fusegen.hlo.parser import parse_module  # noqa: E402

BUDGET_S = 30.0


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1 << 20)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", default=None, help="write the figures to this file")
    args = ap.parse_args()
    text = JAX_SORT.format(N=args.n)
    module = parse_module(text, "jax_sort")
    x = _input(args.n)
    rows = {"fusegen evaluator": _best(lambda: evaluate_module(module, [x]), args.repeat),
            "numpy stable argsort x2": _best(lambda: (np.sort(x, kind="stable"), np.argsort(x, kind="stable")),
                                             args.repeat)}
    try:
        from xla_oracle import JAX_ERROR, run_xla

        if JAX_ERROR is None:
            run_xla(text, [x])  # compile once outside the timing
            rows["XLA:CPU (jaxlib, incl. compile)"] = _best(lambda: run_xla(text, [x]), args.repeat)
    except Exception as e:  # the peer is optional
        print(f"XLA:CPU peer unavailable: {e}", file=sys.stderr)
    ours = rows["fusegen evaluator"]
    print(f"sort + argsort of {args.n} f32 (best of {args.repeat}); budget {BUDGET_S:.0f} s")
    for name, t in rows.items():
        print(f"  {name:34s} {t:8.3f} s   fusegen/peer {ours / t:6.2f}")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"n": args.n, "seconds": rows, "budget_s": BUDGET_S,
                                               "within_budget": ours <= BUDGET_S}, indent=2))
    return 0 if ours <= BUDGET_S else 1


if __name__ == "__main__":
    sys.exit(main())
