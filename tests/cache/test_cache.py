"""The autotune cache: keys, tiers, modes, file validation, concurrency, and ``fusegen cache``."""

from __future__ import annotations

import json
import multiprocessing as mp
import warnings

import pytest
from click.testing import CliRunner

from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
from fusegen.autotuning.profiler import CpuWallTimeProfiler
from fusegen.autotuning.testing import (FakeGemmBackend, FakeLibraryBackend, hammer_writes, make_gemm_module,
                                        tune_into_directory)
from fusegen.cache.format import (CacheEntry, CacheFormatError, TuneResult, bundle_from_text, bundle_to_json,
                                  entry_from_text)
from fusegen.cache.key import CacheKey, canonical_hlo, format_model_string, make_key, model_string_for
from fusegen.cache.tiers import CacheWarning, DirectoryTier, TieredCache, normalize_mode
from fusegen.cli.cache import cache as cache_cli
from fusegen.codegen_backend import Config

MODEL = "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 4800 GB/s, L2 cache: 50 MB, DNN version: 0.0.0"


def entry(hlo="h", block=16, model=MODEL, fp="fp") -> CacheEntry:
    return CacheEntry(CacheKey(model, hlo, 50, fp), TuneResult(Config("fake_triton", {"block_m": block}), "1", 12.5,
                                                              0, 3, {"WRONG_RESULTS": 1}))


# ------------------------------------------------------------------------------------------------
# Keys
# ------------------------------------------------------------------------------------------------

def test_model_string_format():
    assert format_model_string("CUDA", "8.0", 108, 1.41, 1555.2e9, 40 << 20) == (
        "CUDA: 8.0, Cores: 108, GPU clock: 1.41 GHz, Memory bandwidth: 1555 GB/s, L2 cache: 40 MB, DNN version: 0.0.0")


def test_model_string_for_device_and_string():
    from fusegen.device import get_device, model_string

    h100 = get_device("h100")
    assert model_string_for(h100) == model_string(h100)
    assert model_string_for("custom model") == "custom model"


def test_identically_shaped_layers_share_a_key_and_shapes_or_layouts_do_not():
    _, (a, b, c) = make_gemm_module([(16, 32, 8), (16, 32, 8), (16, 32, 16)])
    assert a.name != b.name and a.fused_computation.name != b.fused_computation.name
    assert canonical_hlo(a) == canonical_hlo(b)
    assert make_key(a, MODEL).digest == make_key(b, MODEL).digest
    assert make_key(a, MODEL).digest != make_key(c, MODEL).digest
    assert make_key(a, MODEL, "x").digest != make_key(a, MODEL, "y").digest  # options fingerprint
    assert make_key(a, MODEL).digest != make_key(a, MODEL.replace("132", "114")).digest
    assert "gemm.0" not in canonical_hlo(a) and "gemm_fusion" not in canonical_hlo(a) and "param_0" not in canonical_hlo(a)


def test_canonical_hlo_drops_metadata_keeps_backend_kind():
    _, (a, b) = make_gemm_module([(16, 16, 16), (16, 16, 16)])
    a.fused_computation.root.attrs["metadata"] = {"op_name": "jit(f)/dot_general", "source_line": 12}
    assert canonical_hlo(a) == canonical_hlo(b)
    _, (cud,) = make_gemm_module([(16, 16, 16)], kind="__cudnn$fusion")
    assert canonical_hlo(cud) != canonical_hlo(b) and "backend=__cudnn$fusion" in canonical_hlo(cud)


def test_key_json_round_trip_and_to_string():
    k = CacheKey(MODEL, "hlo text", 50, "abc")
    assert CacheKey.from_json(k.to_json()) == k
    assert k.to_string() == f"<key model='{MODEL}', hlo='hlo text', version=50, options='abc'>"
    assert len(k.digest) == 64


# ------------------------------------------------------------------------------------------------
# Tiers and files
# ------------------------------------------------------------------------------------------------

def test_entry_json_round_trip_and_validation():
    e = entry()
    back = entry_from_text(e.dumps(), "f.json")
    assert back.key == e.key and back.result.config == e.result.config and back.result.failures == {"WRONG_RESULTS": 1}
    obj = json.loads(e.dumps())
    obj["result"]["scratch_bytes"] = "lots"
    with pytest.raises(CacheFormatError, match=r"^f\.json: field result\.'scratch_bytes' must be int"):
        from fusegen.cache.format import entry_from_json

        entry_from_json(obj, "f.json")
    with pytest.raises(CacheFormatError, match="truncated or corrupt"):
        entry_from_text(e.dumps()[:40], "f.json")


def test_memory_then_directory_with_promotion(tmp_path):
    d = DirectoryTier(tmp_path)
    e = entry()
    d.put(e)
    c = TieredCache(tmp_path)
    assert c.lookup(e.key)[1] == "directory" and len(c.memory) == 1
    assert c.lookup(e.key)[1] == "memory"
    assert c.stats == {"hits_memory": 1, "hits_directory": 1, "misses": 0, "writes_directory": 0}
    assert c.lookup(entry(hlo="other").key) == (None, "miss")


def test_modes(tmp_path):
    e = entry()
    ro = TieredCache(tmp_path, "READ")
    ro.insert(e)
    assert list(tmp_path.iterdir()) == [] and ro.lookup(e.key)[1] == "memory"
    DirectoryTier(tmp_path).put(e)
    assert TieredCache(tmp_path, "READ").lookup(e.key)[1] == "directory"
    wo = TieredCache(tmp_path, "WRITE_ONLY")
    assert wo.lookup(e.key) == (None, "miss")
    wo.insert(entry(block=64))
    assert entry_from_text(DirectoryTier(tmp_path).file_for(e.digest).read_text(), "x").result.config.values == \
        {"block_m": 64}
    assert normalize_mode(2) == "READ" and normalize_mode("write-only") == "WRITE_ONLY"


def test_atomic_write_leaves_no_temp_files(tmp_path):
    d = DirectoryTier(tmp_path)
    for i in range(5):
        d.put(entry(block=16 * (i + 1)))
    assert [p.name for p in tmp_path.iterdir()] == [f"{entry().digest}.json"]


def test_corrupt_or_foreign_file_is_reported_and_ignored(tmp_path):
    d = DirectoryTier(tmp_path)
    e, other = entry(), entry(hlo="other")
    d.put(e)
    d.put(other)
    f = d.file_for(e.digest)
    f.write_text(f.read_text()[:50])
    with pytest.warns(CacheWarning, match=rf"ignoring autotune cache file {f}: .*truncated or corrupt"):
        assert d.get(e.key) is None
    f.write_text(other.dumps())  # valid JSON but another key
    with pytest.warns(CacheWarning, match="holds a different key"):
        assert d.get(e.key) is None
    assert d.get(other.key) is not None and f.exists()


def test_corrupt_cache_file_is_retuned(tmp_path):
    backends = [FakeGemmBackend(), FakeLibraryBackend()]
    shapes = [(16, 16, 16), (32, 16, 16)]
    o = AutotuneOptions(compile_workers=0, xla_gpu_redzone_padding_bytes=256,
                        xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path))
    with Autotuner(backends, o, MODEL, profiler=CpuWallTimeProfiler(1)) as t:
        reps = t.tune_module(make_gemm_module(shapes)[0])
    bad = tmp_path / f"{reps[0].key}.json"
    good = tmp_path / f"{reps[1].key}.json"
    good_bytes = good.read_bytes()
    bad.write_text(bad.read_text()[: len(bad.read_text()) // 2])
    with Autotuner(backends, o, MODEL, profiler=CpuWallTimeProfiler(1)) as t:
        with pytest.warns(CacheWarning, match=str(bad)):
            reps2 = t.tune_module(make_gemm_module(shapes)[0])
        assert t.compiles == 5
    assert [r.cache for r in reps2] == ["miss", "directory"] and reps2[0].step == "tuned"
    assert entry_from_text(bad.read_text(), str(bad)).digest == reps[0].key  # rewritten whole
    assert good.read_bytes() == good_bytes


def test_two_processes_tuning_into_one_directory(tmp_path):
    shapes = [(16, 16, 16), (32, 16, 16), (16, 48, 16), (48, 16, 32), (16, 16, 64), (64, 16, 16)]
    ctx = mp.get_context("spawn")
    with ctx.Manager() as mgr, ctx.Pool(2) as pool:
        start = mgr.Event()
        jobs = [pool.apply_async(tune_into_directory, (str(tmp_path), shapes, start, 3)) for _ in range(2)]
        start.set()
        results = [j.get(timeout=240) for j in jobs]
    assert all(len(r) == len(shapes) and all(w for _, w in r) for r in results)
    files = sorted(tmp_path.iterdir())
    assert len(files) == len(shapes) and all(f.suffix == ".json" and not f.name.startswith(".tmp") for f in files)
    for f in files:
        e = entry_from_text(f.read_text(), str(f))
        assert e.digest == f.stem and e.result.config.backend in ("fake_triton", "fake_lib")
    # A third tuner reads everything back without compiling.
    o = AutotuneOptions(compile_workers=0, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path),
                        xla_gpu_experimental_autotune_cache_mode="READ")
    with Autotuner([FakeGemmBackend(), FakeLibraryBackend()], o, "test-device") as t:
        reps = t.tune_module(make_gemm_module(shapes)[0])
        assert t.compiles == 0 and {r.cache for r in reps} == {"directory"}


def test_readers_never_see_a_partial_file_under_concurrent_writers(tmp_path):
    ctx = mp.get_context("spawn")
    key = CacheKey("dev", "hlo " * 2000, 50, "fp")
    tier = DirectoryTier(tmp_path)
    with ctx.Manager() as mgr, ctx.Pool(2) as pool:
        start = mgr.Event()
        jobs = [pool.apply_async(hammer_writes, (str(tmp_path), 150, start)) for _ in range(2)]
        start.set()
        seen = 0
        with warnings.catch_warnings():
            warnings.simplefilter("error", CacheWarning)  # any partial read fails the test
            while not all(j.ready() for j in jobs):
                if tier.get(key) is not None:
                    seen += 1
        assert [j.get(60) for j in jobs] == [150, 150]
    assert seen > 0 and tier.get(key) is not None
    assert [p.name for p in tmp_path.iterdir()] == [f"{key.digest}.json"]


def test_no_pickle_on_any_cache_path():
    import fusegen.cache.format as f
    import fusegen.cache.key as k
    import fusegen.cache.tiers as t

    for mod in (f, k, t):
        src = open(mod.__file__).read()
        assert "import pickle" not in src and "pickle." not in src and "marshal" not in src


# ------------------------------------------------------------------------------------------------
# fusegen cache
# ------------------------------------------------------------------------------------------------

def _invoke(args, tmp_path):
    (tmp_path / "none.toml").write_text("")
    return CliRunner().invoke(cache_cli, ["--config", str(tmp_path / "none.toml"), *args])


def test_cache_cli_ls_show_export_import_clear(tmp_path):
    d = tmp_path / "c"
    tier = DirectoryTier(d)
    e1, e2 = entry(hlo="fusion kind=kCustom backend=__triton_gemm\nROOT tmp_2 = dot"), entry(hlo="second")
    tier.put(e1)
    tier.put(e2)
    (d / ("0" * 64 + ".json")).write_text("{not json")
    res = _invoke(["--cache-dir", str(d), "ls", "--json"], tmp_path)
    assert res.exit_code == 0, res.output
    rows = {r["key"]: r for r in json.loads(res.output)}
    assert rows[e1.digest]["winner"] == "fake_triton:block_m=16" and rows[e1.digest]["hlo"] == "ROOT tmp_2 = dot"
    assert "not valid JSON" in rows["0" * 64]["problem"]
    res = _invoke(["--cache-dir", str(d), "show", e1.digest[:10]], tmp_path)
    assert res.exit_code == 0 and json.loads(res.output)["key"]["hlo"] == e1.key.hlo
    res = _invoke(["--cache-dir", str(d), "show", "ffff0000"], tmp_path)
    assert res.exit_code == 2 and "no cache entry with key 'ffff0000'" in res.output
    bundle = tmp_path / "results.json"
    res = _invoke(["--cache-dir", str(d), "export", str(bundle)], tmp_path)
    assert res.exit_code == 0 and "exported 2 entries" in res.output and "skipping" in res.output
    assert {e.digest for e in bundle_from_text(bundle.read_text(), str(bundle))} == {e1.digest, e2.digest}
    res = _invoke(["--cache-dir", str(d), "clear"], tmp_path)
    assert res.exit_code == 0 and "removed 3 entries" in res.output and tier.files() == []
    fresh = tmp_path / "fresh"
    res = _invoke(["--cache-dir", str(fresh), "import", str(bundle)], tmp_path)
    assert res.exit_code == 0 and "imported 2 entries" in res.output
    assert TieredCache(fresh).lookup(e1.key)[1] == "directory"


def test_cache_cli_errors_are_one_line(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"format": "fusegen-autotune-results", "format_version": 1, "entries": [{"format": 1}]}))
    res = _invoke(["--cache-dir", str(tmp_path / "c"), "import", str(bad)], tmp_path)
    assert res.exit_code == 2 and f"{bad}: entries[0]: not a fusegen autotune cache entry" in res.output
    res = _invoke(["ls"], tmp_path)
    assert res.exit_code == 2 and "no cache directory" in res.output
    assert "Traceback" not in res.output


def test_bundle_round_trip():
    es = [entry(hlo=str(i)) for i in range(3)]
    text = json.dumps(bundle_to_json(es))
    assert [e.digest for e in bundle_from_text(text, "b")] == sorted(e.digest for e in es)


def test_cache_dir_after_the_subcommand(tmp_path):
    d = tmp_path / "c"
    DirectoryTier(d).put(entry())
    res = _invoke(["ls", "--json", "--cache-dir", str(d)], tmp_path)
    assert res.exit_code == 0 and [r["key"] for r in json.loads(res.output)] == [entry().digest]
