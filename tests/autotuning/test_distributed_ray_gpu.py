"""Profiling tasks ask for one GPU each when the cluster has GPUs (a local Ray instance declaring one).

No CUDA is needed: Ray schedules by declared resources, so the profiling tasks must run holding GPU 0
(``ray.get_gpu_ids()``), one at a time, and time with whatever profiler the worker has (the CPU here).
"""

from __future__ import annotations

import pytest

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'fusegen[distributed]'; make test does)")

from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner  # noqa: E402
from fusegen.autotuning.distributed import RayOptions, tune_on_ray  # noqa: E402
from fusegen.autotuning.testing import DeclaredCostProfiler, FakeGemmBackend, FakeLibraryBackend, make_gemm_module  # noqa: E402


@pytest.fixture(scope="module")
def ray_with_a_gpu():
    ray.init(num_cpus=2, num_gpus=1, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_profiling_tasks_hold_one_gpu_each(ray_with_a_gpu):
    opts = AutotuneOptions(compile_workers=0, xla_gpu_redzone_padding_bytes=256)
    with Autotuner([FakeGemmBackend(), FakeLibraryBackend()], opts, "test-device", profiler=DeclaredCostProfiler()) as t:
        run = tune_on_ray(t, [make_gemm_module([(16, 16, 16), (32, 16, 16)])[0]], RayOptions())
    assert run.gpus == 1 and len(run.tuned) == 2
    assert [m["gpu_ids"] for m in run.measured_on.values()] == [["0"], ["0"]]
    assert [r.step for r in run.reports] == ["tuned", "tuned"]
