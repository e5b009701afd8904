"""Parse + dispatch time of fusegen against jaxlib's C++ HLO parser, on the largest corpus modules.

Prints, per module, fusegen's parse time, parse+dispatch time (every fusion analysed and given a
kind), jaxlib's ``hlo_module_from_text`` time on the same text in the same run, and the ratio
fusegen/jaxlib (lower is better; goal: <= 3x on gpt12 and on the last row). A last row sums the ``--total``
largest corpus files taken together (identical texts once; files either parser rejects, e.g. the hostile ones,
left out).
``--indexing`` adds the cost of ``fusegen explain`` with indexing maps against plain explain on gpt12
(every fusion planned; plus every fusion's thread-id indexing maps; goal: <= 2x).

Times are the best of ``--repeat`` runs on the process CPU clock by default (``--clock wall`` for wall
time): on a shared machine CPU time is what both parsers cost, wall time mostly measures the neighbours.
Run: ``make bench`` or ``python benchmarks/parse_dispatch.py [--top 5] [--total 30] [--indexing]``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
GPT12 = SHARED / "corpus" / "jax" / "gpt12.h200_opt.hlo"


def best(fn, repeat: int, clock) -> float:
    t = float("inf")
    for _ in range(repeat):
        t0 = clock()
        fn()
        t = min(t, clock() - t0)
    return t


def largest_files():
    """Corpus ``.hlo`` files, largest first, identical texts once."""
    files = sorted(SHARED.glob("corpus/**/*.hlo"), key=lambda p: (-p.stat().st_size, str(p)))
    seen: set[str] = set()
    for f in files:
        text = f.read_text(errors="replace")
        if text not in seen:
            seen.add(text)
            yield f


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--top", type=int, default=5, help="how many of the largest corpus modules to list")
    ap.add_argument("--total", type=int, default=30, help="how many of the largest corpus files to sum (0: none)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--indexing", action="store_true", help="also time explain with indexing maps on gpt12")
    a = ap.parse_args()
    clock = time.process_time if a.clock == "cpu" else time.perf_counter

    from fusegen import dispatch
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.device import get_device
    from fusegen.hlo.errors import HloParseError
    from fusegen.hlo.parser import parse_modules
    from fusegen.plugin_manager import default_plugin_manager

    try:
        from jaxlib import _hlo as jax_hlo
    except ImportError:
        jax_hlo = None
    pm = default_plugin_manager()
    device = get_device("h200")

    def measure(f: Path) -> tuple[int, float, float, float] | None:
        """(fusions, parse s, parse+dispatch s, jaxlib s) of one file; None when a parser rejects it."""
        text = f.read_text()

        def parse_and_dispatch():
            n = 0
            for m in parse_modules(text, str(f)):
                for inst in m.fusion_instructions():
                    dispatch.get_emitter_fusion_kind(FusionAnalysis.create(inst, device), pm)
                    n += 1
            return n

        try:
            n = parse_and_dispatch()
        except HloParseError:
            return None
        t_parse = best(lambda: parse_modules(text, str(f)), a.repeat, clock)
        t_all = best(parse_and_dispatch, a.repeat, clock)
        t_jax = float("nan")
        if jax_hlo is not None:
            parts = [p for p in text.split("// -----") if p.strip()]
            try:
                t_jax = best(lambda: [jax_hlo.hlo_module_from_text(p) for p in parts], a.repeat, clock)
            except Exception:  # noqa: BLE001 - a text jaxlib's parser rejects has no peer time
                return None
        return n, t_parse, t_all, t_jax

    print(f"clock: {a.clock}, best of {a.repeat}; ratio = (parse + dispatch) / jaxlib")
    print(f"{'module':48} {'KB':>6} {'fusions':>7} {'parse ms':>9} {'+dispatch ms':>12} {'jaxlib ms':>9} {'ratio':>7}")
    rows = {}
    for f in largest_files():
        if len(rows) >= max(a.top, a.total):
            break
        r = measure(f)
        if r is not None:
            rows[f] = r
    for f in list(rows)[: a.top]:
        n, t_parse, t_all, t_jax = rows[f]
        print(f"{f.name[:48]:48} {f.stat().st_size / 1024:6.0f} {n:7d} {t_parse * 1e3:9.1f} {t_all * 1e3:12.1f} "
              f"{t_jax * 1e3:9.1f} {t_all / t_jax:7.1f}x")
    if a.total:
        chosen = list(rows)[: a.total]
        s = [sum(rows[f][k] for f in chosen) for k in range(4)]
        kb = sum(f.stat().st_size for f in chosen) / 1024
        label = f"{len(chosen)} largest files together"
        print(f"{label:48} {kb:6.0f} {s[0]:7d} {s[1] * 1e3:9.1f} {s[2] * 1e3:12.1f} {s[3] * 1e3:9.1f} "
              f"{s[2] / s[3]:7.1f}x")
    if a.indexing:
        explain_with_indexing(a, clock, device, pm)


def explain_with_indexing(a, clock, device, pm) -> None:
    """``fusegen explain`` (every fusion planned: kind, emitter, kernel, launch) with and without every
    fusion's thread-id indexing maps, on gpt12."""
    from fusegen.codegen.thread_indexing import fusion_thread_indexing
    from fusegen.hlo.parser import parse_modules
    from fusegen.indexing import clear_caches
    from fusegen.runtime.executor import Executor

    text = GPT12.read_text()

    def explain(indexing: bool) -> None:
        clear_caches()  # each repeat as a fresh `fusegen explain` process: no maps cached by an earlier one
        for m in parse_modules(text, str(GPT12)):
            ex = Executor(m, device, compile_kernels=False)
            for inst in m.fusion_instructions():
                ex.plan_fusion(inst)
                if indexing:
                    fusion_thread_indexing(inst, device, pm)

    repeat = max(1, min(a.repeat, 3))
    t_plain = best(lambda: explain(False), repeat, clock)
    t_idx = best(lambda: explain(True), repeat, clock)
    print(f"explain gpt12: {t_plain * 1e3:.0f} ms; with every fusion's indexing maps: {t_idx * 1e3:.0f} ms "
          f"({t_idx / t_plain:.2f}x)")


if __name__ == "__main__":
    main()
