"""Damaged autotune cache entries: each kind is reported once, ignored, re-tuned and rewritten; nothing else is
touched, nothing hangs, nothing escapes as a traceback."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings

import pytest

from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
from fusegen.autotuning.testing import DeclaredCostProfiler, FakeGemmBackend, FakeLibraryBackend, make_gemm_module
from fusegen.cache.format import MAX_ENTRY_BYTES, CacheFormatError, read_bounded
from fusegen.cache.tiers import CacheWarning, DirectoryTier

SHAPES = [(16, 16, 16), (32, 16, 16)]
DEVICE = "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 4800 GB/s, L2 cache: 50 MB, DNN version: 0.0.0"


def _tune(cache_dir):
    o = AutotuneOptions(compile_workers=0, xla_gpu_redzone_padding_bytes=256,
                        xla_gpu_per_fusion_autotune_cache_dir=str(cache_dir))
    with Autotuner([FakeGemmBackend(), FakeLibraryBackend()], o, DEVICE, profiler=DeclaredCostProfiler()) as t:
        return t.tune_module(make_gemm_module(SHAPES)[0])


def _nested(path):
    path.write_text("[" * 100_000 + "]" * 100_000)


def _fifo(path):
    os.mkfifo(path)


def _dev_zero(path):
    path.symlink_to("/dev/zero")


def _directory(path):
    path.mkdir()
    (path / "keep.txt").write_text("someone's data")


def _huge(path):
    path.write_bytes(b" " * (MAX_ENTRY_BYTES + 1))


def _rejected_by_backend(path):
    doc = json.loads(path.read_text())
    doc["result"]["config"]["values"]["block_m"] = -7  # passes the format check, not the backend's
    path.write_text(json.dumps(doc))


DAMAGE = {"nested": (_nested, "nested deeper than"), "fifo": (_fifo, "is a FIFO"),
          "symlink_dev_zero": (_dev_zero, "symbolic link"), "directory": (_directory, "is a directory"),
          "oversized": (_huge, "more than the 1,048,576"),
          "backend_rejects": (_rejected_by_backend, "rejected by backend 'fake_triton': block_m=-7")}


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_damaged_entry_is_reported_once_ignored_retuned_and_rewritten(tmp_path, kind):
    damage, why = DAMAGE[kind]
    first = _tune(tmp_path)
    bad = tmp_path / f"{first[0].key}.json"
    good = tmp_path / f"{first[1].key}.json"
    good_bytes = good.read_bytes()
    if kind != "backend_rejects":
        bad.unlink()
    damage(bad)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        again = _tune(tmp_path)
    ours = [w for w in caught if issubclass(w.category, CacheWarning)]
    assert len(ours) == 1, [str(w.message) for w in ours]
    assert str(bad) in str(ours[0].message) and why in str(ours[0].message)
    assert [r.cache for r in again] == ["miss", "directory"]
    assert again[0].step == "tuned" and again[0].winner == first[0].winner
    # rewritten as a regular entry; the other entry untouched
    assert not bad.is_symlink() and bad.is_file()
    assert json.loads(read_bounded(bad))["result"]["config"]["values"]["block_m"] > 0
    assert good.read_bytes() == good_bytes
    if kind == "directory":  # moved aside, never deleted
        aside = [p for p in tmp_path.iterdir() if p.name.startswith(f".{bad.name}.not-an-entry-")]
        assert len(aside) == 1 and (aside[0] / "keep.txt").read_text() == "someone's data"
    # a third run is served from the rewritten file
    assert [r.cache for r in _tune(tmp_path)] == ["directory", "directory"]


@pytest.mark.parametrize("kind", ["nested", "fifo", "symlink_dev_zero", "directory"])
def test_cache_ls_show_and_clear_flag_damaged_entries_without_hanging(tmp_path, kind):
    first = _tune(tmp_path)
    bad = tmp_path / f"{first[0].key}.json"
    bad.unlink()
    DAMAGE[kind][0](bad)
    env = dict(os.environ)
    env.pop("FUSEGEN_DEBUG", None)

    def cli(*args):
        return subprocess.run([sys.executable, "-m", "fusegen.cli", "cache", "--cache-dir", str(tmp_path), *args],
                              capture_output=True, text=True, env=env, timeout=60)

    p = cli("ls", "--json")
    assert p.returncode == 0, p.stderr
    rows = {r["key"]: r for r in json.loads(p.stdout)}
    assert DAMAGE[kind][1] in rows[first[0].key]["problem"] and "winner" in rows[first[1].key]
    p = cli("show", first[0].key[:12])
    assert p.returncode == 2 and "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1
    p = cli("export", str(tmp_path.parent / f"{kind}-bundle.json"))
    assert p.returncode == 0 and "exported 1 entries" in p.stdout


def test_cache_import_refuses_nested_fifo_and_dev_zero_bundles(tmp_path):
    nested = tmp_path / "nested.json"
    _nested(nested)
    fifo = tmp_path / "fifo.json"
    os.mkfifo(fifo)
    zero = tmp_path / "zero.json"
    zero.symlink_to("/dev/zero")
    env = dict(os.environ)
    env.pop("FUSEGEN_DEBUG", None)
    for bundle, why in ((nested, "nested"), (fifo, "FIFO"), (zero, "symbolic link")):
        p = subprocess.run([sys.executable, "-m", "fusegen.cli", "cache", "--cache-dir", str(tmp_path / "c"),
                            "import", str(bundle)], capture_output=True, text=True, env=env, timeout=60)
        assert p.returncode == 2 and why in p.stderr, p.stderr
        assert "Traceback" not in p.stderr and len(p.stderr.strip().splitlines()) == 1


def test_read_bounded_refuses_everything_but_small_regular_files(tmp_path):
    f = tmp_path / "ok.json"
    f.write_text("{}")
    assert read_bounded(f) == "{}"
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "missing.json")
    for kind in ("nested",):
        g = tmp_path / f"{kind}.json"
        DAMAGE[kind][0](g)
        assert len(read_bounded(g, 1 << 20)) == 200_000  # reading is fine, parsing refuses (above)
    d = tmp_path / "dir.json"
    d.mkdir()
    with pytest.raises(CacheFormatError, match="is a directory"):
        read_bounded(d)
    big = tmp_path / "big.json"
    big.write_bytes(b"x" * 11)
    with pytest.raises(CacheFormatError, match="11 bytes, more than the 10"):
        read_bounded(big, 10)


def test_triton_backend_rejects_damaged_configs():
    from fusegen.codegen_backend import Config, ConfigError
    from fusegen_plugins.backends.triton import TritonBackend

    _, fusions = make_gemm_module([(64, 64, 64)])
    b = TritonBackend()
    good = b.get_supported_configs(fusions[0])[0]
    b.validate_config(fusions[0], good)
    for bad, why in (({"block_m": -7}, "block_m=-7"), ({"split_k": 4}, "split-k"),
                     ({"num_warps": 10**6}, "num_warps=1000000 is outside 1..32")):
        with pytest.raises(ConfigError, match=why):
            b.validate_config(fusions[0], Config(b.name, {**good.values, **bad}))
    assert "fusion_backend_config" in fusions[0].backend_config  # the instruction itself is untouched
    assert fusions[0].backend_config["fusion_backend_config"].get("triton_gemm_config") is None


def test_directory_tier_reports_each_bad_file_once(tmp_path):
    from fusegen.cache.format import entry_from_text

    first = _tune(tmp_path)
    bad = tmp_path / f"{first[0].key}.json"
    key = entry_from_text(bad.read_text(), str(bad)).key
    bad.write_text("{")
    tier = DirectoryTier(tmp_path)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert all(tier.get(key) is None for _ in range(3))
    assert len([w for w in caught if issubclass(w.category, CacheWarning)]) == 1
