"""Dump every generated kernel source of the corpus, diff two dumps, and run a sample of the kernels.

    python scripts/kernel_dump.py dump OUT.json [--glob 'jax/**/*.hlo']
    python scripts/kernel_dump.py diff BASE.json NEW.json          # which kernels changed, and how
    python scripts/kernel_dump.py run  NEW.json [--changed BASE.json] [--sample 40] [--seed 0]

``dump`` plans every fusion of every corpus module (``../shared/corpus``; the ``bugs/*big*`` files are left
out) without compiling and stores ``{"file:module:fusion": kernel source | "ERR ..."}``. ``diff`` counts,
per changed kernel, ``//`` and ``%`` index operations, arithmetic operators, lines, loads and loads at the
kernel's own contiguous index (``lin`` / ``lin_c``), and lists the kernels that got worse in any of them.
``run`` runs a seeded sample of the dumped fusions (only those that changed against ``--changed``, if
given) in the Triton interpreter on random operands and compares each with the reference evaluator
(:func:`fusegen.evaluator.evaluator.evaluate_instruction`); exit 1 on any mismatch. For a change to codegen:
dump before (e.g. from ``git archive`` of the base on ``PYTHONPATH``) and after, diff, run the changed.
"""

from __future__ import annotations

import argparse
import glob
import json
import random
import re
import sys
import time
from pathlib import Path

CORPUS = Path(__file__).resolve().parents[1].parent / "shared" / "corpus"
_OPS = re.compile(r" (?:\+|-|\*|//|%) ")
_CONTIGUOUS = re.compile(r"tl\.load\(\w+ \+ lin(?:_c)?,")


def _files(pattern: str) -> list[str]:
    return [f for f in sorted(glob.glob(str(CORPUS / pattern), recursive=True))
            if not ("/bugs/" in f and "big" in f)]


def _modules(f: str):
    from fusegen.api import load_all, prepare, session

    s = session(device="h200")
    mods = load_all(f)
    prepare(mods, s)
    return mods, s.device


def dump(out_path: str, pattern: str) -> None:
    from fusegen.runtime.executor import Executor
    from fusegen.runtime.order import fusions_in_execution_order

    out: dict[str, str] = {}
    for f in _files(pattern):
        try:
            mods, dev = _modules(f)
            for m in mods:
                ex = Executor(m, dev, compile_kernels=False)
                for inst in fusions_in_execution_order(m):
                    key = f"{f}:{m.name}:{inst.name}"
                    try:
                        em, _ = ex.plan_fusion(inst)
                        out[key] = "".join(k.source for k in (em.kernels if em else ()))
                    except Exception as e:  # noqa: BLE001 - recorded, compared between dumps
                        out[key] = f"ERR {type(e).__name__}: {str(e)[:200]}"
        except Exception as e:  # noqa: BLE001
            out[f] = f"MODERR {type(e).__name__}"
    Path(out_path).write_text(json.dumps(out, indent=0, sort_keys=True))
    print(f"{len(out)} fusions -> {out_path}")


def _measures(src: str) -> tuple[int, ...]:
    return (len(re.findall(r" // | % ", src)), len(_OPS.findall(src)), src.count("\n"), src.count("tl.load("),
            -len(_CONTIGUOUS.findall(src)))


def diff(base_path: str, new_path: str) -> int:
    a, b = json.loads(Path(base_path).read_text()), json.loads(Path(new_path).read_text())
    changed = [k for k in a if a[k] != b.get(k)]
    worse, fewer_div = [], 0
    for k in changed:
        sa, sb = a[k], b.get(k, "ERR missing")
        if sa.startswith("ERR") or sb.startswith("ERR"):
            worse.append((k, "error", sa[:80], sb[:80]))
            continue
        ma, mb = _measures(sa), _measures(sb)
        if any(y > x for x, y in zip(ma, mb)):
            worse.append((k, ma, mb))
        fewer_div += mb[0] < ma[0]
    print(f"{len(a)} fusions, {len(changed)} kernels changed, {fewer_div} with fewer // and %, "
          f"{len(worse)} worse in (div/mod, arith ops, lines, loads, -contiguous loads):")
    for w in worse:
        print("  ", *w)
    return 1 if any(w[1] == "error" for w in worse) else 0


def run(new_path: str, changed_from: str | None, sample: int, seed: int) -> int:
    import numpy as np

    from fusegen.codegen import triton_runtime
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen.runtime.compare import compare
    from fusegen.runtime.executor import Executor
    from fusegen.runtime.inputs import leaves, random_value

    b = json.loads(Path(new_path).read_text())
    keys = [k for k, v in b.items() if v and not v.startswith(("ERR", "MODERR"))]
    if changed_from:
        a = json.loads(Path(changed_from).read_text())
        keys = [k for k in keys if a.get(k) != b[k]]
    keys = sorted(random.Random(seed).sample(keys, min(sample, len(keys))))
    by_file: dict[str, list[tuple[str, str]]] = {}
    for k in keys:
        f, mod, name = k.rsplit(":", 2)
        by_file.setdefault(f, []).append((mod, name))
    rng = np.random.default_rng(seed)
    bad = 0
    for f, wanted in by_file.items():
        mods, dev = _modules(f)
        for m in mods:
            ex = Executor(m, dev, compile_kernels=False)
            insts = {i.name: i for c in m.computations for i in c.instructions}
            for mod, name in wanted:
                if mod != m.name or name not in insts:
                    continue
                inst = insts[name]
                t0 = time.perf_counter()
                try:
                    em, _ = ex.plan_fusion(inst)
                    ops = [random_value(o.shape, rng, None) for o in inst.operands]
                    ref = evaluate_instruction(inst, ops)
                    outs = triton_runtime.run_fusion(em, ops, inst)
                    ok = all(compare(o, r, s.element_type).ok
                             for o, r, s in zip(outs, leaves(ref), inst.shape.leaves()))
                    why = "" if ok else "differs from the reference"
                except Exception as e:  # noqa: BLE001 - reported per fusion
                    ok, why = False, f"{type(e).__name__}: {str(e)[:160]}"
                bad += not ok
                print(f"{'ok  ' if ok else 'FAIL'} {time.perf_counter() - t0:6.1f}s {f}:{name} {why}", flush=True)
    print(f"{len(keys) - bad}/{len(keys)} sampled kernels match the reference evaluator")
    return 1 if bad else 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("dump")
    d.add_argument("out")
    d.add_argument("--glob", default="**/*.hlo", help="files under ../shared/corpus")
    c = sub.add_parser("diff")
    c.add_argument("base")
    c.add_argument("new")
    r = sub.add_parser("run")
    r.add_argument("dump")
    r.add_argument("--changed", help="only the kernels that differ from this dump")
    r.add_argument("--sample", type=int, default=40)
    r.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.cmd == "dump":
        dump(a.out, a.glob)
        return 0
    if a.cmd == "diff":
        return diff(a.base, a.new)
    return run(a.dump, a.changed, a.sample, a.seed)


if __name__ == "__main__":
    sys.exit(main())
