"""Autotuner compile speed: cold vs warm cache, and parallel vs serial candidate compilation.

Prints, in one run:

* cold vs warm: tuning a module with a dozen distinct GEMM shapes into an empty cache directory
  (including the start of the compile workers), then the same module again with a fresh
  process-memory tier (served from the directory); the ratio is cold / warm (higher is better; the
  warm run compiles nothing);
* parallel vs serial: compiling the candidates of one GEMM in ``--workers`` processes vs in process,
  and the speed-up;
* 1 vs 2 Ray workers: tuning the same module with ``fusegen.autotuning.distributed`` on a local Ray
  instance of 1 CPU and of 2 CPUs (workers warmed first; compile-bound, so the goal is >= 1.6x on two
  cores). Skipped with a note when Ray (extra ``distributed``) is not installed.

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
    ap.add_argument("--no-ray", action="store_true", help="skip the 1 vs 2 Ray workers comparison")
    ap.add_argument("--only-ray", action="store_true", help="run only the 1 vs 2 Ray workers comparison")
    a = ap.parse_args()
    os.environ["FUSEGEN_FAKE_COMPILE_COST_S"] = str(a.compile_cost)

    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
    from fusegen.autotuning.profiler import CpuWallTimeProfiler
    from fusegen.autotuning.testing import SlowCompileGemmBackend, make_gemm_module
    from fusegen.device import get_device

    backends = [SlowCompileGemmBackend()]
    device = get_device("h100")
    n_cfg = len(SlowCompileGemmBackend.CONFIGS)
    if a.only_ray:
        ray_workers(backends, device)
        return
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
    if not a.no_ray:
        ray_workers(backends, device)


def ray_workers(backends, device) -> None:
    """Wall time of tuning SHAPES on a local Ray instance with 1 and with 2 CPUs, and the ratio."""
    try:
        import ray
    except ImportError:
        print("1 vs 2 Ray workers: skipped (Ray is not installed: pip install 'fusegen[distributed]')")
        return
    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
    from fusegen.autotuning.distributed import RayOptions, tune_on_ray
    from fusegen.autotuning.profiler import CpuWallTimeProfiler
    from fusegen.autotuning.testing import make_gemm_module

    times = {}
    for cpus in (1, 2):
        ray.init(num_cpus=cpus, include_dashboard=False, log_to_driver=False, configure_logging=False)
        try:
            opts = AutotuneOptions(xla_gpu_redzone_padding_bytes=4096)
            with Autotuner(backends, opts, device, profiler=CpuWallTimeProfiler(1)) as tuner:
                # Warm the workers (start + imports) on shapes of their own, so the timing is of tuning only.
                tune_on_ray(tuner, [make_gemm_module([(16, 16, 8 * (i + 1)) for i in range(2 * cpus)])[0]])
            with Autotuner(backends, opts, device, profiler=CpuWallTimeProfiler(1)) as tuner:
                t0 = time.perf_counter()
                run = tune_on_ray(tuner, [make_gemm_module(SHAPES)[0]], RayOptions())
                times[cpus] = time.perf_counter() - t0
                assert len(run.tuned) == len(set(SHAPES)) and not any(r.error for r in run.reports)
        finally:
            ray.shutdown()
    n = len(SHAPES) * len(backends[0].CONFIGS)
    print(f"1 vs 2 Ray workers, tuning {len(SHAPES)} GEMMs ({n} compile tasks): 1 worker {times[1]:.3f} s, "
          f"2 workers {times[2]:.3f} s, ratio {times[1] / times[2]:.2f}x")


if __name__ == "__main__":
    main()
