"""Where fusegen's GEMM estimates sit over a grid like issue 45's held-back H100 test (no GPU needed).

For every GEMM ``[batch, m, k] x [batch, k, n]`` with batch in {1, 2, 3, 4} and m, n, k in {256, 512, 1024, 2048,
4096}, bf16 and f32 (2000 shapes; ``--sample N`` takes a fixed random N of them, seed 45, 200 by default), on the
H100 preset:

* ``tune``: what ``fusegen tune --device h100 --retune`` reports without a GPU: the cost model's estimate
  (``fusegen.autotuning.cost_model.rank_configs``) of the candidate PickBestConfig picks among XLA's Hopper Triton
  configs and the cuBLASLt call (the ``cublaslt_fission`` backend, XLA's cuBLAS fallback; its 4 MiB workspace loses
  to a Triton config within 2 us, XLA's scratch-bytes tie-break); ``pick`` is the candidate's backend;
* ``triton``: the best Triton config's estimate (``tune`` with ``xla_gpu_cublas_fallback=false``);
* ``library``: cuBLASLt's estimate (``fusegen.perf.gemm_model.library_gemm``); ``explain``: the faster of ``triton``
  and ``library``, what ``explain`` and ``run`` give the fusion (XLA's autotuner's choice between Triton and cuBLAS);
* ``bound``: an independent sanity bound, ``max(flops / datasheet peak, bytes / HBM bandwidth) + 3 us`` (989
  TFLOP/s bf16, 495 TFLOP/s tf32 for f32, 3.35 TB/s; each operand and the result moved once; 3 us for a
  kernel's launch-to-retire floor as a profiler sees it). No GEMM can beat it by much; it is a floor to read the
  estimates against, not a prediction.

It prints the distribution of ``tune / bound``, ``triton / bound``, ``library / bound`` and ``explain / bound`` (all,
bf16, f32, by the bound's size) and of ``tune / explain``, and with ``--rows`` every shape. ``--xla`` adds XLA's
dot fusion cost model's tune pick (the estimator before
issue 45, ``gemm="xla"``). Run: ``python benchmarks/gemm_model_grid.py [--sample 200|0] [--rows] [--xla]``
(0: the whole grid; about 0.1 s a shape on the shared 2-core machine, 20 s for the default 200).
"""

from __future__ import annotations

import argparse
import itertools
import math
import statistics

SIZES = (256, 512, 1024, 2048, 4096)
BATCHES = (1, 2, 3, 4)
DTYPES = ("bf16", "f32")
PEAK = {"bf16": 989e12, "f32": 495e12}  # H100 SXM dense tensor-core rates (tf32 for f32: XLA's default precision)
HBM = 3.35e12
FLOOR_S = 3e-6


def grid(sample: int) -> list[tuple[int, int, int, int, str]]:
    shapes = list(itertools.product(BATCHES, SIZES, SIZES, SIZES, DTYPES))
    if sample and sample < len(shapes):
        import random

        shapes = sorted(random.Random(45).sample(shapes, sample))
    return shapes


def hlo(b: int, m: int, n: int, k: int, dt: str) -> str:
    bd, dims = (f"{b},", "lhs_batch_dims={0}, rhs_batch_dims={0}, ") if b > 1 else ("", "")
    c = 2 if b > 1 else 1
    return (f"HloModule g\nENTRY e {{\n  a = {dt}[{bd}{m},{k}] parameter(0)\n  b = {dt}[{bd}{k},{n}] parameter(1)\n"
            f"  ROOT d = {dt}[{bd}{m},{n}] dot(a, b), {dims}lhs_contracting_dims={{{c}}}, "
            f"rhs_contracting_dims={{{c - 1}}}\n}}\n")


def bound_s(b: int, m: int, n: int, k: int, dt: str) -> float:
    eb = 2 if dt == "bf16" else 4
    return max(2 * b * m * n * k / PEAK[dt], b * (m * k + k * n + m * n) * eb / HBM) + FLOOR_S


def estimate(b: int, m: int, n: int, k: int, dt: str, xla: bool = False) -> dict:
    """One shape's estimates (seconds) and the picked Triton config."""
    import fusegen
    from fusegen.autotuning import cost_model
    from fusegen.autotuning.selection import ProfileResult, pick_best_config
    from fusegen.device import H100
    from fusegen.perf.dot_model import DotProblem, find_dot
    from fusegen.perf.gemm_model import library_gemm
    from fusegen.plugin_manager import default_plugin_manager

    backends = {x.name: x for x in default_plugin_manager().codegen_backends()
                if x.name in ("triton", "cublaslt_fission")}
    triton = backends["triton"]
    mod = fusegen.load(hlo(b, m, n, k, dt))
    fusegen.api.prepare([mod], fusegen.api.session(device=H100))
    f = next(x for x in mod.fusion_instructions() if find_dot(x) is not None)
    configs = triton.get_supported_configs(f)
    order, est = cost_model.rank_configs(f, configs, {triton.name: triton}, H100, top_k=0)
    every = configs + backends["cublaslt_fission"].get_supported_configs(f)
    _, est_all = cost_model.rank_configs(f, every, backends, H100, top_k=0)
    # the tuner's pick: PickBestConfig over the estimates (the fewest scratch bytes within 2 us of the fastest)
    results = [ProfileResult(c.name, est_all[c.name].seconds * 1e6, backends[c.backend].scratch_bytes(c), config=c)
               for c in every if math.isfinite(est_all[c.name].seconds or math.inf)]
    pick = pick_best_config(results).result
    lib = library_gemm(DotProblem(b, m, n, k, dt, dt, dt), H100)
    row = {"shape": (b, m, n, k, dt), "tune": pick.duration_us * 1e-6, "pick": pick.config.backend,
           "triton": est[order[0].name].seconds, "config": order[0].values,
           "library": lib.seconds, "library_kernel": lib.kernel.name, "bound": bound_s(b, m, n, k, dt)}
    row["explain"] = min(row["triton"], row["library"])
    if xla:
        from fusegen.perf.tiled import estimate_tiled_fusion, gemm_config

        old = []
        for c in configs:
            t = estimate_tiled_fusion(f, H100, gemm_config(f, c.values), gemm="xla").exec_time
            old.append(t)
        row["xla"] = min(old)
    return row


def summary(rows: list[dict], key: str) -> list[str]:
    """Lines: for each group, the median and quartiles of ``key / bound`` and the share within 1.5x and 2x."""
    groups = {"all": rows, "bf16": [r for r in rows if r["shape"][4] == "bf16"],
              "f32": [r for r in rows if r["shape"][4] == "f32"],
              "bound < 10 us": [r for r in rows if r["bound"] < 10e-6],
              "bound 10-200 us": [r for r in rows if 10e-6 <= r["bound"] < 200e-6],
              "bound >= 200 us": [r for r in rows if r["bound"] >= 200e-6]}
    out = []
    for name, rs in groups.items():
        if not rs:
            continue
        q = sorted(r[key] / r["bound"] for r in rs)
        qs = statistics.quantiles(q, n=4) if len(q) > 1 else [q[0]] * 3
        w15 = sum(x <= 1.5 for x in q) / len(q)
        w2 = sum(x <= 2 for x in q) / len(q)
        out.append(f"| {key} | {name} | {len(q)} | {qs[1]:.2f} | {qs[0]:.2f}-{qs[2]:.2f} | {q[0]:.2f}-{q[-1]:.2f} "
                   f"| {w15:.0%} | {w2:.0%} |")
    return out


def tune_vs_explain(rows: list[dict]) -> str:
    """One line: ``tune / explain`` over the rows (median, largest, share above 1.25x) and how often the cuBLASLt
    call is tune's pick."""
    q = sorted(r["tune"] / r["explain"] for r in rows)
    lib = sum(r["pick"] == "cublaslt_fission" for r in rows)
    above = sum(x > 1.25 for x in q)
    return (f"tune / explain: median {statistics.median(q):.3f}, max {q[-1]:.3f}, above 1.25x {above} of {len(q)}; "
            f"tune picks cuBLASLt for {lib}, a Triton config for {len(rows) - lib}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sample", type=int, default=200, help="shapes, a fixed random sample of the grid (0: all 2000)")
    ap.add_argument("--rows", action="store_true", help="print every shape")
    ap.add_argument("--xla", action="store_true", help="add XLA's dot fusion cost model's tune pick")
    a = ap.parse_args()
    rows = [estimate(*s, xla=a.xla) for s in grid(a.sample)]
    if a.rows:
        print("| batch | m | n | k | type | bound us | tune us | pick | triton us | library us | explain us | "
              "tune / bound |" + (" xla us |" if a.xla else "") + " triton config |")
        for r in rows:
            c = r["config"]
            cfg = f"{c['block_m']}x{c['block_n']}x{c['block_k']} s{c['num_stages']} w{c['num_warps']}"
            print(f"| {' | '.join(map(str, r['shape']))} | {r['bound'] * 1e6:.1f} | {r['tune'] * 1e6:.1f} | "
                  f"{r['pick']} | {r['triton'] * 1e6:.1f} | {r['library'] * 1e6:.1f} | {r['explain'] * 1e6:.1f} | "
                  f"{r['tune'] / r['bound']:.2f} |" + (f" {r['xla'] * 1e6:.1f} |" if a.xla else "") + f" {cfg} |")
        print()
    print(f"{len(rows)} shapes; ratio = estimate / (max(flops / peak, bytes / HBM) + 3 us)")
    print("| estimate | shapes | n | median | quartiles | range | <= 1.5x | <= 2x |")
    print("|---|---|---|---|---|---|---|---|")
    for key in ("tune", "triton", "library", "explain") + (("xla",) if a.xla else ()):
        for line in summary(rows, key):
            print(line)
    print()
    print(tune_vs_explain(rows))
    if not all(math.isfinite(r["tune"]) for r in rows):
        print("note: some shapes have no finite tune estimate")


if __name__ == "__main__":
    main()
