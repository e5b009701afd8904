"""Mutation score of ``fusegen run``'s verdict (issue 9): plant kernel bugs, count how many it catches.

For every module of the corpus (``../shared/corpus/jax/gpu_*.hlo``, XLA:GPU-optimised, seeded random
inputs), every real-model program of ``tests/data/real_models`` (their real weights and inputs) and the
integer-output programs of the op sweep (``../shared/corpus/sweep``, :data:`INT_SWEEP`, their edge-value
inputs: integer outputs compare exactly), each
fusion that gets a Triton kernel is run on the operands of a real run of the module, then with one bug
planted at a time (:mod:`fusegen.verify.mutate`: off-by-one index, dropped mask, wrong accumulator type,
swapped operand, missed clamp, lost NaN; up to ``--sites`` sites per kind and kernel). A mutant is caught
when its kernel fails or the fusion leaves its error budget (the run's exit code would be 1). Also checks
the unmutated kernels: any error/budget above 1 is a false alarm.

Prints one row per kind and the total score; ``--json FILE`` writes every mutant. Exit 1 when the score is
under ``--min-score`` (default 0.95) or there is a false alarm.

Usage: ``python benchmarks/verdict.py [--quick] [--sites N] [--max-fusions N] [--json FILE]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT.parent / "shared" / "corpus" / "jax"
REAL = ROOT / "tests" / "data" / "real_models"
SWEEP = ROOT.parent / "shared" / "corpus" / "sweep"
#: Sweep programs with integer (and pred) outputs, on their edge-value inputs: integer-output mutants, which
#: the verdict must catch exactly (issue 21).
INT_SWEEP = ("int_arith_s8", "int_arith_s32", "int_arith_u32", "int_arith_u64", "int_minmax_s64", "int_bitwise_u64",
             "int_shift_s8", "int_shift_u32", "int_shift_s64", "int_bitcount_u64", "int_ipow_s8", "int_arith_s4",
             "cumprod_s32_ax0_33x65", "reduce_argmax_s32_ax1", "segment_min_s32", "top_k_s32_k7_257x33",
             "reduce_and_bool_ax0", "reduce_or_bool_ax1", "dynamic_update_slice_u8")


def real_inputs(path, module):
    from fusegen.runtime.inputs import load_inputs

    p = Path(path)
    npz = p.with_name(p.name.removesuffix(".h200_opt.hlo") + ".inputs.npz")
    return load_inputs(module, str(npz)) if p.name.endswith(".h200_opt.hlo") and npz.exists() else None


def main(argv=None) -> int:
    import fusegen
    from fusegen.verify.mutate import KINDS, run_check, score

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="corpus gpu_* modules only")
    ap.add_argument("--sites", type=int, default=2, help="sites per mutation kind and kernel")
    ap.add_argument("--max-fusions", type=int, default=8, help="kernel fusions per module")
    ap.add_argument("--min-score", type=float, default=0.95)
    ap.add_argument("--json", dest="json_path")
    a = ap.parse_args(argv)
    paths = sorted(CORPUS.glob("gpu_*.hlo")) if CORPUS.is_dir() else []
    if not a.quick:
        paths += sorted(REAL.glob("*.h200_opt.hlo"))
        paths += [SWEEP / f"{n}.h200_opt.hlo" for n in INT_SWEEP if (SWEEP / f"{n}.h200_opt.hlo").exists()]
    if not paths:
        print("no modules found (../shared/corpus absent and no tests/data/real_models)")
        return 0
    t0 = time.perf_counter()
    modules = ((p, m) for p in paths for m in fusegen.load_all(str(p)))  # fusegen's default preparation
    controls, mutants = run_check(modules, KINDS, a.sites, a.max_fusions, inputs_for=real_inputs)
    by = {k: Counter(m.outcome for m in mutants if m.kind == k) for k in KINDS}
    print(f"{'kind':18s} {'planted':>7s} {'caught':>6s} {'missed':>6s} {'not a bug':>9s}")
    for k in KINDS:
        c = by[k]
        print(f"{k:18s} {sum(c.values()):7d} {c['caught']:6d} {c['missed']:6d} "
              f"{c['not-exercised'] + c['equivalent']:9d}")
    caught, exercised, s = score(mutants)
    false_alarms = [(m, f, r) for m, f, r in controls if r > 1.0]
    print(f"modules {len(paths)}, kernel fusions {len(controls)}, mutants {len(mutants)}: caught {caught} of "
          f"{exercised} that change the result: mutation score {s:.1%}; false alarms on the unmutated kernels: "
          f"{len(false_alarms)}; {time.perf_counter() - t0:.0f} s")
    for m in mutants:
        if m.outcome == "missed":
            print(f"  missed: {m.module} %{m.fusion} {m.kind} site {m.site}: error/budget {m.ratio:.3g}")
    for m, f, r in false_alarms:
        print(f"  FALSE ALARM: {m} %{f}: error/budget {r:.3g}")
    if a.json_path:
        Path(a.json_path).write_text(json.dumps({
            "score": s, "caught": caught, "exercised": exercised, "false_alarms": len(false_alarms),
            "mutants": [{"module": m.module, "fusion": m.fusion, "kind": m.kind, "site": m.site,
                         "outcome": m.outcome, "error_budget_ratio": m.ratio, "note": m.note} for m in mutants],
        }, indent=1))
    return 0 if s >= a.min_score and not false_alarms else 1


if __name__ == "__main__":
    sys.exit(main())
