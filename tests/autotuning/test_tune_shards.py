"""``fusegen tune --shard K/N``: N processes tune disjoint shards of the unique instructions.

Coverage and determinism for N = 1, 2, 3 (shards disjoint, union every unique key, the same split whatever
the order of the modules), merged shard caches equal to one process's cache (deterministic profiler), and
the CLI on the corpus's ``gpu_*`` and ``gpt12`` modules.
"""

from __future__ import annotations

import json
import shutil

import pytest
from click.testing import CliRunner

from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
from fusegen.autotuning.sharding import parse_shard, shard, shard_range, tune_shard, unique_instructions
from fusegen.autotuning.testing import DeclaredCostProfiler, FakeGemmBackend, FakeLibraryBackend, make_gemm_module
from fusegen.cache.tiers import DirectoryTier

# Two modules sharing some shapes: 7 unique (m, n, k) among 10 GEMMs.
SHAPES_A = [(16, 16, 16), (32, 16, 16), (16, 32, 16), (32, 32, 16), (16, 16, 16), (48, 16, 16)]
SHAPES_B = [(32, 16, 16), (64, 16, 16), (16, 64, 16), (48, 16, 16)]
UNIQUE = len(set(SHAPES_A) | set(SHAPES_B))


def _modules():
    return [make_gemm_module(SHAPES_A, name="a")[0], make_gemm_module(SHAPES_B, name="b")[0]]


def _tuner(cache_dir=None) -> Autotuner:
    opts = AutotuneOptions(compile_workers=0, xla_gpu_redzone_padding_bytes=256,
                           xla_gpu_per_fusion_autotune_cache_dir=str(cache_dir) if cache_dir else "")
    return Autotuner([FakeGemmBackend(), FakeLibraryBackend()], opts, "test-device", profiler=DeclaredCostProfiler())


def _winners(cache_dir) -> dict[str, str]:
    return {e.digest: e.result.config.name for _, e, _ in DirectoryTier(cache_dir).entries()}


def test_parse_shard():
    assert parse_shard("0/1") == (0, 1) and parse_shard(" 2 / 3 ") == (2, 3)
    for bad, why in (("3/3", "K must be in 0..2"), ("1/0", "N must be at least 1"), ("a/2", "expected K/N"),
                     ("1", "expected K/N")):
        with pytest.raises(ValueError, match=why):
            parse_shard(bad)


def test_shard_ranges_are_ceil_sized_slices():
    assert [list(shard_range(7, k, 3)) for k in range(3)] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [list(shard_range(2, k, 3)) for k in range(3)] == [[0], [1], []]
    assert list(shard_range(0, 0, 2)) == []


@pytest.mark.parametrize("n", [1, 2, 3])
def test_shards_are_disjoint_complete_and_deterministic(n):
    tuner = _tuner()
    groups = unique_instructions(tuner, _modules())
    assert len(groups) == UNIQUE and sum(len(g.instructions) for g in groups) == len(SHAPES_A) + len(SHAPES_B)
    shards = [[g.digest for g in shard(groups, k, n)] for k in range(n)]
    flat = [d for s in shards for d in s]
    assert len(flat) == len(set(flat)) == UNIQUE  # disjoint, and their union is every unique key
    assert set(flat) == {g.digest for g in groups}
    # Another process, modules in the other order: the same split.
    again = unique_instructions(_tuner(), list(reversed(_modules())))
    assert [[g.digest for g in shard(again, k, n)] for k in range(n)] == shards


@pytest.mark.parametrize("n", [1, 2, 3])
def test_merged_shard_caches_equal_one_process(tmp_path, n):
    single = tmp_path / "single"
    with _tuner(single) as t:
        for m in _modules():
            t.tune_module(m)
    merged = tmp_path / "merged"
    tuned_keys: list[str] = []
    for k in range(n):
        d = tmp_path / f"shard{k}"
        with _tuner(d) as t:
            run = tune_shard(t, _modules(), k, n)
        assert run.unique == UNIQUE and all(r.error is None for r in run.reports)
        assert [r.step for r in run.reports].count("tuned") == len(run.keys)  # each key of the shard tuned once
        assert set(_winners(d)) == set(run.keys)  # a shard writes its own keys only
        tuned_keys += run.keys
        merged.mkdir(exist_ok=True)
        for f in d.glob("*.json"):
            shutil.copy(f, merged / f.name)
    assert sorted(tuned_keys) == sorted(_winners(single))
    assert _winners(merged) == _winners(single)


def test_cli_shards_cover_the_corpus_modules(tmp_path, corpus):
    from fusegen.cli.tune import tune

    mods = sorted(str(p) for p in (corpus / "jax").glob("gpu_*.hlo")) + [str(corpus / "jax" / "gpt12.h200_opt.hlo")]
    cache = tmp_path / "cache"
    seen, count, unique = [], 0, None
    for k in range(3):
        res = CliRunner().invoke(tune, [*mods, "--retune", "--backends", "triton", "--shard", f"{k}/3", "--json",
                                        "--cache-dir", str(cache)])
        assert res.exit_code == 0, res.output[-2000:]
        doc = json.loads(res.stdout)
        assert doc["shard"]["index"] == k and doc["shard"]["count"] == 3
        unique = doc["shard"]["unique"]
        seen += doc["shard"]["keys"]
        count += len(doc["instructions"])
        assert {r["key"] for r in doc["instructions"]} == set(doc["shard"]["keys"])
    # gpt12's 73 GEMM fusions (7 shapes), the MLP GEMM, a cuBLASLt call and a cuDNN convolution: 10 unique keys.
    assert unique == 10 and len(seen) == len(set(seen)) == 10 and count == 73 + 3
    # Retuning with Triton (ranked by estimate: no GPU) caches the 8 GEMM fusions; the library calls keep their
    # configs (nothing to tune here).
    assert len(DirectoryTier(cache).files()) == 8
    bad = CliRunner().invoke(tune, [mods[0], "--shard", "3/3"])
    assert bad.exit_code == 2 and "K must be in 0..2" in bad.output
