"""fusegen's sm_90 PTX against XLA's own kernel for the same fusion (a static proxy for bandwidth).

For every native-emitter fusion of ``../shared/corpus/jax/launch/`` (loop, reduction, transpose,
concatenate, scatter, in-place DUS, sort: the rows of ``LAUNCH.tsv`` XLA emits as ``kLoop`` / ``kInput`` or
as a sort kernel, one per distinct kernel), XLA's PTX is the ``.entry`` of that kernel in ``NAME.xla.ptx``;
fusegen's is its generated kernel compiled for ``GPUTarget("cuda", 90, 32)`` on the CPU
(:func:`fusegen.codegen.triton_runtime.compile_for_target`). Per kernel, counted statically in the PTX:

* **vector width**: mean bytes moved per ``ld.global*`` / ``st.global*`` instruction (``.v4.b32`` = 16 B);
* **global memory instructions per output element**: static ``ld/st.global`` count x threads launched
  (grid x threads per block) / output elements (exact for straight-line kernels; both sides alike);
* **registers**: virtual registers declared (``.reg .b32 %r<N>``: N - 1 each, summed).

Printed per emitter kind: kernels, median fusegen / XLA ratio of each, and the share of kernels whose
vector width is at least XLA's (goal: >= 90%). ``--module SUBSTR`` limits the programs, ``--limit N`` the
kernels, ``--json`` prints the rows. Compiling takes about 1-15 s per kernel on a CPU.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import statistics
import sys
from collections import defaultdict
from pathlib import Path

LAUNCH = Path(__file__).resolve().parents[1].parent / "shared" / "corpus" / "jax" / "launch"

_GLOBAL = re.compile(r"^\s*(?:@!?%p\d+\s+)?(ld|st)\.global[.\w]*?(?:\.v(\d))?\.([bfsu])(\d+)\b", re.M)
_REG = re.compile(r"\.reg\s+\.\w+\s+%\w+<(\d+)>;")


def ptx_entry(ptx: str, name: str) -> str | None:
    """The text of ``.entry NAME(`` up to its closing brace, or ``None``."""
    m = re.search(r"\.entry\s+" + re.escape(name) + r"\s*\(", ptx)
    if m is None:
        return None
    start = ptx.find("{", m.end())
    depth, i = 0, start
    while i < len(ptx):
        c = ptx[i]
        depth += c == "{"
        depth -= c == "}"
        if depth == 0:
            return ptx[m.start():i + 1]
        i += 1
    return ptx[m.start():]


def ptx_stats(text: str) -> dict:
    """``{"mem_insts", "mean_bytes", "max_bytes", "registers"}`` of one kernel's PTX."""
    sizes = []
    for _op, vec, _t, bits in _GLOBAL.findall(text):
        sizes.append(int(vec or 1) * int(bits) // 8)
    regs = sum(max(0, int(n) - 1) for n in _REG.findall(text))
    return {"mem_insts": len(sizes), "mean_bytes": statistics.fmean(sizes) if sizes else 0.0,
            "max_bytes": max(sizes, default=0), "registers": regs}


def native_rows(module_filter: str = "") -> list[dict]:
    """LAUNCH.tsv rows of native-emitter kernels, one per distinct kernel (reused kernels dropped)."""
    with open(LAUNCH / "LAUNCH.tsv") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t")]
    out = []
    for r in rows:
        if r["thunk_kind"] != "kCustomKernel" or r["hlo_opcode"] != "fusion":
            continue
        if not (r["fusion_kind"] in ("kLoop", "kInput") or r["note"].startswith("kernel_named_after_inner")):
            continue
        if r["note"].startswith("kernel_reused") or module_filter not in r["module_file"]:
            continue
        out.append(r)
    return out


def compare(rows: list[dict], limit: int | None = None, log=print) -> list[dict]:
    """One result per row: kind, XLA's and fusegen's :func:`ptx_stats`, threads and output elements."""
    from fusegen.codegen import triton_runtime
    from fusegen.device import get_device
    from fusegen.hlo.parser import parse_module
    from fusegen.runtime.executor import Executor

    device = get_device("h200")
    cache: dict[str, tuple] = {}
    results = []
    for r in rows[:limit]:
        mf = r["module_file"]
        if mf not in cache:
            m = parse_module((LAUNCH / mf).read_text(), mf)
            ptx_file = LAUNCH / mf.replace(".h200_opt.hlo", ".xla.ptx")
            ptx = ptx_file.read_text() if ptx_file.exists() else ""
            fus = {i.name: i for c in m.computations for i in c.instructions if i.opcode == "fusion"}
            cache[mf] = (Executor(m, device, compile_kernels=False), fus, ptx)
        ex, fus, ptx = cache[mf]
        xla_text = ptx_entry(ptx, r["kernel_name"])
        emitted, rep = ex.plan_fusion(fus[r["fusion_name"]])
        row = {"module": mf, "fusion": r["fusion_name"], "kind": rep.kind, "emitter": rep.emitter}
        if xla_text is None or emitted is None or not emitted.kernels:
            row["skipped"] = "no XLA PTX" if xla_text is None else f"no fusegen kernel ({rep.reason})"
            results.append(row)
            continue
        ks = emitted.kernels[emitted.primary]
        try:
            ours = triton_runtime.compile_for_target(ks, pointer_alignment=16).ptx
        except Exception as e:  # a kernel that does not compile is a finding, not a crash
            row["skipped"] = f"sm_90 compile failed: {type(e).__name__}"
            results.append(row)
            continue
        out_elems = sum(s.numel for s in fus[r["fusion_name"]].shape.leaves() if s.is_array)
        grid = int(r["grid_x"]) * int(r["grid_y"]) * int(r["grid_z"])
        threads = int(r["threads_x"]) * int(r["threads_y"]) * int(r["threads_z"])
        lj = ks.launch.to_json()
        our_threads = lj["grid"][0] * lj["grid"][1] * lj["grid"][2] * 32 * ks.launch.num_warps
        row.update(xla=ptx_stats(xla_text), fusegen=ptx_stats(ours), xla_threads=grid * threads,
                   fusegen_threads=our_threads, output_elements=max(1, out_elems))
        for side, t in (("xla", grid * threads), ("fusegen", our_threads)):
            row[side]["insts_per_output"] = row[side]["mem_insts"] * t / row["output_elements"]
        log(f"{rep.kind:13} {r['fusion_name'][:36]:36} bytes/inst fusegen {row['fusegen']['mean_bytes']:5.1f} "
            f"xla {row['xla']['mean_bytes']:5.1f}  regs {row['fusegen']['registers']:4d} / {row['xla']['registers']:4d}")
        results.append(row)
    return results


def summarize(results: list[dict]) -> dict:
    """Per kind: kernels, median ratios (fusegen / XLA) and the share with vector width >= XLA's."""
    by_kind = defaultdict(list)
    for r in results:
        if "xla" in r:
            by_kind[r["kind"]].append(r)
    out = {}
    for kind, rs in sorted(by_kind.items()):
        def ratio(key: str) -> float:
            vals = [r["fusegen"][key] / r["xla"][key] for r in rs if r["xla"][key]]
            return statistics.median(vals) if vals else float("nan")
        wide = sum(1 for r in rs if r["fusegen"]["mean_bytes"] + 1e-9 >= r["xla"]["mean_bytes"])
        out[kind] = {"kernels": len(rs), "vector_width_ratio": ratio("mean_bytes"),
                     "insts_per_output_ratio": ratio("insts_per_output"), "registers_ratio": ratio("registers"),
                     "vector_width_at_least_xla": wide}
    total = sum(v["kernels"] for v in out.values())
    wide = sum(v["vector_width_at_least_xla"] for v in out.values())
    out["all"] = {"kernels": total, "vector_width_at_least_xla": wide,
                  "share_at_least_xla": wide / total if total else float("nan"),
                  "skipped": sum(1 for r in results if "skipped" in r)}
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--module", default="", help="only programs whose file name contains this")
    ap.add_argument("--limit", type=int, default=None, help="at most this many kernels")
    ap.add_argument("--json", action="store_true", help="print rows and summary as JSON")
    a = ap.parse_args(argv)
    if not (LAUNCH / "LAUNCH.tsv").exists():
        print(f"{LAUNCH} is absent: nothing to compare", file=sys.stderr)
        return 0
    log = (lambda *x: print(*x, file=sys.stderr)) if a.json else print
    results = compare(native_rows(a.module), a.limit, log)
    summary = summarize(results)
    if a.json:
        print(json.dumps({"rows": results, "summary": summary}, indent=2))
        return 0
    print(f"\n{'kind':14} {'kernels':>7} {'vec width':>10} {'insts/out':>10} {'registers':>10} {'vec >= XLA':>11}")
    for kind, v in summary.items():
        if kind == "all":
            continue
        print(f"{kind:14} {v['kernels']:7d} {v['vector_width_ratio']:10.2f} {v['insts_per_output_ratio']:10.2f} "
              f"{v['registers_ratio']:10.2f} {v['vector_width_at_least_xla']:>5d}/{v['kernels']:<5d}")
    al = summary["all"]
    print(f"vector width >= XLA's: {al['vector_width_at_least_xla']}/{al['kernels']} "
          f"({100 * al['share_at_least_xla']:.0f}%, goal 90%); skipped {al['skipped']}")
    for r in results:
        if "skipped" in r:
            print(f"  skipped {r['module']} {r['fusion']}: {r['skipped']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
