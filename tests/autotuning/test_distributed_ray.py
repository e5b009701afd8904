"""``fusegen tune --cluster ray``: tuning fanned out as Ray tasks on a local instance with 2 CPUs.

The corpus run tunes the ``gpu_*`` modules and ``gpt12`` (``--retune --measure-on-cpu``: without it a CPU
ranks by the H200 model on the driver and nothing is timed; the cost model's top 2 per GEMM, timed in Triton's
interpreter), kills one worker on purpose
(``--inject-worker-kill``: Ray re-runs its task), and checks: every unique instruction tuned once, every
entry there and valid, and each cache winner equal to ``fusegen tune --replay`` of the same record.
"""

from __future__ import annotations

import json
import os
import sys

import pytest
from click.testing import CliRunner

ray = pytest.importorskip("ray", reason="Ray is not installed (pip install 'fusegen[distributed]'; make test does)")

from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner  # noqa: E402
from fusegen.autotuning.distributed import RayOptions, parse_cluster, tune_on_ray  # noqa: E402
from fusegen.autotuning.testing import (DeclaredCostProfiler, FakeGemmBackend, FakeLibraryBackend,  # noqa: E402
                                        make_gemm_module)
from fusegen.cache.tiers import DirectoryTier  # noqa: E402

SHAPES = [(16, 16, 16), (32, 16, 16), (16, 32, 16), (16, 16, 16), (32, 32, 16)]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, configure_logging=False)
    try:
        yield ray
    finally:
        ray.shutdown()


def test_parse_cluster():
    assert parse_cluster("ray") is None
    assert parse_cluster("ray://head:10001") == "ray://head:10001"
    assert parse_cluster("ray:auto") == "auto"
    with pytest.raises(ValueError, match="expected ray"):
        parse_cluster("dask://x")


@pytest.mark.slow  # 1-3 minutes of Triton interpreter on 2 cores; CI runs it (FUSEGEN_SLOW=1)
def test_corpus_on_ray_matches_replay_and_survives_a_killed_worker(local_ray, tmp_path, corpus):
    from fusegen.cli.tune import tune

    mods = sorted(str(p) for p in (corpus / "jax").glob("gpu_*.hlo")) + [str(corpus / "jax" / "gpt12.h200_opt.hlo")]
    cache, rec, kill = tmp_path / "cache", tmp_path / "records", tmp_path / "killed"
    res = CliRunner().invoke(tune, [*mods, "--retune", "--measure-on-cpu", "--cluster", "ray", "--cost-model-top-k", "2", "--json",
                                    "--cache-dir", str(cache), "--record", str(rec), "--inject-worker-kill", str(kill)])
    assert res.exit_code == 0, res.output[-3000:]
    doc = json.loads(res.stdout)
    rows = doc["instructions"]
    assert len(rows) == 73 + 3 and not [r for r in rows if r["error"]]
    # 10 unique keys: the 8 GEMM fusions tuned on the cluster, once each; the cuBLASLt call and the cuDNN
    # convolution settled on the driver (no backend can tune them without a GPU: their configs are kept).
    tuned = doc["cluster"]["tuned"]
    assert len(tuned) == 8 and set(tuned.values()) == {1} and doc["cluster"]["settled"] == 2
    assert doc["cluster"]["cpus"] == 2
    for key in tuned:
        steps = sorted(r["step"] for r in rows if r["key"] == key)
        assert steps.count("tuned") == 1 and set(steps) <= {"tuned", "cache"}
    assert sorted(r["step"] for r in rows if r["key"] not in tuned) == ["kept", "kept"]
    # A worker was killed (its task re-run by Ray), and no entry is lost or damaged.
    assert kill.exists() and int(kill.read_text()) != os.getpid()
    entries = list(DirectoryTier(cache).entries())
    assert [p for _, e, p in entries if e is None] == []
    winners = {e.digest: e.result.config.name for _, e, _ in entries}
    assert set(winners) == set(tuned)
    # The winners are what one process's replay of the same measurements picks.
    records = sorted(rec.glob("*.json"))
    assert len(records) == 8
    for r in records:
        key = json.loads(r.read_text())["key"]
        rep = CliRunner().invoke(tune, ["--replay", str(r), "--json"])
        assert rep.exit_code == 0, rep.output
        assert json.loads(rep.stdout)["winner"] == winners[key], r.name
    # Every instruction of a key got the key's winner.
    for key, w in winners.items():
        assert {r["winner"] for r in rows if r["key"] == key} == {w}


def _tuner(cache_dir, retries: int = 3) -> Autotuner:
    opts = AutotuneOptions(compile_workers=0, xla_gpu_redzone_padding_bytes=256,
                           xla_gpu_per_fusion_autotune_cache_dir=str(cache_dir))
    return Autotuner([FakeGemmBackend(), FakeLibraryBackend()], opts, "test-device", profiler=DeclaredCostProfiler())


def test_ray_winners_equal_one_process(local_ray, tmp_path):
    single = tmp_path / "single"
    with _tuner(single) as t:
        expect = [(r.name, r.winner) for r in t.tune_module(make_gemm_module(SHAPES)[0])]
    with _tuner(tmp_path / "ray") as t:
        run = tune_on_ray(t, [make_gemm_module(SHAPES)[0]], RayOptions())
    assert [(r.name, r.winner) for r in run.reports] == expect
    assert [r.step for r in run.reports] == ["tuned", "tuned", "tuned", "cache", "tuned"]
    assert run.gpus == 0 and [m["gpu_ids"] for m in run.measured_on.values()] == [[]] * 4  # CPU workers
    assert {e.digest: e.result.to_json() for _, e, _ in DirectoryTier(tmp_path / "ray").entries()} == \
        {e.digest: e.result.to_json() for _, e, _ in DirectoryTier(single).entries()}


# Workers cannot import this test module: ship its classes by value.
ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])


class _CrashOnBigGemm(FakeGemmBackend):
    """Every compile of the 32x32 GEMM kills its worker: the task fails for good after Ray's retries."""

    name = "fake_triton"

    def compile(self, instr, config):
        if instr.shape.dimensions == (32, 32):
            os._exit(13)
        return super().compile(instr, config)


def test_a_task_that_fails_for_good_costs_only_its_instruction(local_ray, tmp_path):
    opts = AutotuneOptions(compile_workers=0, xla_gpu_redzone_padding_bytes=256,
                           xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path))
    with Autotuner([_CrashOnBigGemm(), FakeLibraryBackend()], opts, "test-device",
                   profiler=DeclaredCostProfiler()) as t:
        run = tune_on_ray(t, [make_gemm_module(SHAPES)[0]], RayOptions(max_retries=1))
    errors = {r.name: r.error for r in run.reports if r.error}
    assert list(errors) == ["gemm.4"] and "Internal" in errors["gemm.4"]
    good = [e for _, e, _ in DirectoryTier(tmp_path).entries()]
    assert len(good) == 3 and all(e is not None for e in good)  # the other three unique keys are all there
