"""Autotuner compile speed: cold vs warm cache, and parallel vs serial candidate compilation.

Prints, in one run:

* cold vs warm: tuning a module with a dozen distinct GEMM shapes into an empty cache directory
  (including the start of the compile workers), then the same module again with a fresh
  process-memory tier (served from the directory); the ratio is cold / warm (higher is better; the
  warm run compiles nothing);
* parallel vs serial: compiling the candidates of one GEMM in ``--workers`` processes vs in process,
  and the speed-up.

The codegen backend is :class:`fusegen.autotuning.testing.SlowCompileGemmBackend`: every compile
burns ``--compile-cost`` CPU seconds, standing in for a Triton compile until the Triton GEMM backend
lands. Run: ``python benchmarks/autotune.py`` (or ``make bench``).
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time


SHAPES = [(64 * (1 + i % 4), 32 * (1 + i // 4), 64) for i in range(12)]  # 12 distinct (m, n, k)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 2, help="compile worker processes")
    ap.add_argument("--compile-cost", type=float, default=0.05, help="CPU seconds per fake compile")
    a = ap.parse_args()
    os.environ["FUSEGEN_FAKE_COMPILE_COST_S"] = str(a.compile_cost)

    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
    from fusegen.autotuning.profiler import CpuWallTimeProfiler
    from fusegen.autotuning.testing import SlowCompileGemmBackend, make_gemm_module
    from fusegen.device import get_device

    backends = [SlowCompileGemmBackend()]
    device = get_device("h100")
    n_cfg = len(SlowCompileGemmBackend.CONFIGS)
    print(f"{len(SHAPES)} distinct GEMM shapes x {n_cfg} configs, {a.compile_cost:g} CPU s per compile, "
          f"{a.workers} compile workers, {os.cpu_count()} CPUs")

    with tempfile.TemporaryDirectory() as cache_dir:
        opts = AutotuneOptions(compile_workers=a.workers, xla_gpu_redzone_padding_bytes=4096,
                               xla_gpu_per_fusion_autotune_cache_dir=cache_dir)
        module, _ = make_gemm_module(SHAPES)
        with Autotuner(backends, opts, device, profiler=CpuWallTimeProfiler(1)) as tuner:
            t0 = time.perf_counter()
            tuner.tune_module(module)
            cold = time.perf_counter() - t0
            cold_compiles = tuner.compiles
        module, _ = make_gemm_module(SHAPES)
        with Autotuner(backends, opts, device, profiler=CpuWallTimeProfiler(1)) as tuner:
            t0 = time.perf_counter()
            reps = tuner.tune_module(module)
            warm = time.perf_counter() - t0
            assert tuner.compiles == 0 and all(r.cache == "directory" for r in reps)
    print(f"cold vs warm: cold {cold:.3f} s ({cold_compiles} compiles), warm {warm * 1e3:.2f} ms (0 compiles), "
          f"ratio {cold / warm:.0f}x")

    _, (instr,) = make_gemm_module([(256, 256, 256)])
    configs = backends[0].get_supported_configs(instr)
    times = {}
    for workers in (0, a.workers):
        opts = AutotuneOptions(compile_workers=workers)
        with Autotuner(backends, opts, device) as tuner:
            if workers:
                # Warm the workers (spawn + imports) so the comparison is of compiling only.
                tuner.compile_configs(instr, configs[: workers])
            t0 = time.perf_counter()
            outs = tuner.compile_configs(instr, configs)
            times[workers] = time.perf_counter() - t0
            assert all(o.ok for o in outs)
    print(f"parallel vs serial compile of {len(configs)} candidates: serial {times[0]:.3f} s, "
          f"{a.workers} workers {times[a.workers]:.3f} s, speed-up {times[0] / times[a.workers]:.2f}x")


if __name__ == "__main__":
    main()
