"""Parse + dispatch time of fusegen against jaxlib's C++ HLO parser, on the largest corpus modules.

Prints, per module, fusegen's parse time, parse+dispatch time (every fusion analysed and given a
kind), jaxlib's ``hlo_module_from_text`` time on the same text in the same run, and the ratio
fusegen/jaxlib (lower is better). Best of ``--repeat`` runs each. Run: ``make bench``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

SHARED = Path(__file__).resolve().parents[1].parent / "shared"


def best(fn, repeat: int) -> float:
    t = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--top", type=int, default=5, help="how many of the largest corpus modules")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()

    from fusegen import dispatch
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.device import get_device
    from fusegen.hlo.parser import parse_modules
    from fusegen.plugin_manager import default_plugin_manager

    try:
        from jaxlib import _hlo as jax_hlo
    except ImportError:
        jax_hlo = None
    files = sorted((p for p in SHARED.glob("corpus/**/*.hlo")), key=lambda p: p.stat().st_size, reverse=True)[: a.top]
    pm = default_plugin_manager()
    device = get_device("h200")
    print(f"{'module':48} {'KB':>6} {'fusions':>7} {'parse ms':>9} {'+dispatch ms':>12} {'jaxlib ms':>9} {'ratio':>7}")
    for f in files:
        text = f.read_text()

        def parse_and_dispatch():
            n = 0
            for m in parse_modules(text, str(f)):
                for inst in m.fusion_instructions():
                    dispatch.get_emitter_fusion_kind(FusionAnalysis.create(inst, device), pm)
                    n += 1
            return n

        n = parse_and_dispatch()
        t_parse = best(lambda: parse_modules(text, str(f)), a.repeat)
        t_all = best(parse_and_dispatch, a.repeat)
        if jax_hlo is not None:
            try:
                parts = [p for p in text.split("// -----") if p.strip()]
                t_jax = best(lambda: [jax_hlo.hlo_module_from_text(p) for p in parts], a.repeat)
            except Exception:
                t_jax = float("nan")
        else:
            t_jax = float("nan")
        print(f"{f.name[:48]:48} {len(text) / 1024:6.0f} {n:7d} {t_parse * 1e3:9.1f} {t_all * 1e3:12.1f} "
              f"{t_jax * 1e3:9.1f} {t_all / t_jax:7.1f}x")


if __name__ == "__main__":
    main()
