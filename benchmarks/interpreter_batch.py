"""Programs of a launch run several at a time (``fusegen.codegen.interpreter_batch``) against Triton's one-by-one
loop, in the same run, on kernels at XLA's own launch (the compiled program, as ``fusegen.runtime.compiled_program``
runs it): the block-level fusion of issue 42 item 8 (``f32[16,4,144,17]``, XLA's tiles ``[1,4,16,2]``: 1296
programs of 128 lanes, ``tests/data/block_level_1296``) and the block-level and GEMM fusions of the shared corpus's
launch set up to ``--max-programs`` programs. The judged run's interpreter variant (fewer, wider programs) is
printed beside as a second peer.

Columns: programs, CPU seconds one by one, batched, and through the variant, the ratio one-by-one / batched (goal:
>= 10 on the 1296-program fusion) and the per-program cost of each. Both runs are checked to give the same bits;
a difference exits 1. CPU time of this process (``time.process_time``): on the shared machine wall time mostly
measures the neighbours.

    python benchmarks/interpreter_batch.py [--max-programs 2048] [--corpus]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import attrs
import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from fusion_harness import load, operands_and_reference  # noqa: E402

from fusegen.analysis.fusion_analysis import FusionAnalysis  # noqa: E402
from fusegen.codegen import triton_runtime  # noqa: E402
from fusegen.codegen.interpreter_batch import batching  # noqa: E402
from fusegen.device import get_device  # noqa: E402
from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter  # noqa: E402

BLOCK_1296 = REPO / "tests" / "data" / "block_level_1296" / "softmax_dim1_tiles_1x4x16x2.hlo"
LAUNCH = REPO.parent / "shared" / "corpus" / "jax" / "launch"
GOAL = 10.0


def _cpu(fn) -> tuple[float, object]:
    t0 = time.process_time()
    out = fn()
    return time.process_time() - t0, out


def measure(path: Path, emitters: tuple[str, ...], max_programs: int) -> list[tuple]:
    """(module, fusion, programs, one-by-one s, batched s, variant s, same bits) for each fusion of ``path``."""
    m = load(path)
    rows = []
    for f in (i for i in m.entry.instructions if i.opcode == "fusion"):
        a = FusionAnalysis.create(f, get_device("h200"))
        get_emitter_fusion_kind(a)
        em, factory = get_fusion_emitter(a)
        if em is None or factory is None or factory.name not in emitters:
            continue
        emitted = em.emit()
        programs = sum(int(np.prod(k.launch.grid)) for k in emitted.kernels)
        if not emitted.kernels or programs > max_programs:
            continue
        at_xla = attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in emitted.kernels))
        ops, _ = operands_and_reference(m, f, seed=0)
        triton_runtime.run_fusion(emitted, ops, f)  # load the kernels once, outside the timings
        t_var, _ = _cpu(lambda: triton_runtime.run_fusion(emitted, ops, f))
        with batching(False):
            t_one, one = _cpu(lambda: triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None))
        t_bat, got = _cpu(lambda: triton_runtime.run_fusion(at_xla, ops, f, interpret_max_programs=None))
        same = all(np.array_equal(*(np.asarray(v).reshape(-1).view(np.uint8) for v in xy)) for xy in zip(one, got))
        rows.append((path.name, f.name, programs, t_one, t_bat, t_var, same))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--max-programs", type=int, default=2048)
    ap.add_argument("--corpus", action="store_true", help="also the block-level and GEMM fusions of the launch set")
    a = ap.parse_args()
    rows = measure(BLOCK_1296, ("triton_block_level",), 1 << 20)
    if a.corpus:
        for p in sorted(LAUNCH.glob("*.hlo")):
            rows += measure(p, ("triton_block_level", "triton_gemm"), a.max_programs)
    print("CPU seconds (time.process_time); one-by-one / batched is the speed-up; the variant is the judged run's")
    print(f"{'module':36} {'fusion':24} {'programs':>8} {'one-by-one':>10} {'batched':>8} {'variant':>8} "
          f"{'ratio':>6} {'ms/prog 1x1':>11} {'ms/prog b':>9} bits")
    bad = False
    for mod, fus, n, t1, tb, tv, same in rows:
        print(f"{mod[:36]:36} {fus[:24]:24} {n:8d} {t1:10.2f} {tb:8.2f} {tv:8.2f} {t1 / max(tb, 1e-9):6.1f} "
              f"{1e3 * t1 / n:11.2f} {1e3 * tb / n:9.3f} {'same' if same else 'DIFFERENT'}")
        bad |= not same
    first = rows[0]
    ratio = first[3] / max(first[4], 1e-9)
    print(f"goal: {first[1]} ({first[2]} programs) one-by-one / batched >= {GOAL:g}: {ratio:.1f} "
          f"{'met' if ratio >= GOAL else 'NOT met'}")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
