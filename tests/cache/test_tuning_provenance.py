"""Where each tuned figure came from: cache format 2, the host never tuned for a GPU key, estimates as hints.

The cache keeps one :class:`fusegen.cache.provenance.Source` per entry; format 1 files stay readable (their figure's
source is ``unknown``) and a version this fusegen does not know is refused, leaving the file in place. A GPU run
(here: a profiler that says it times with CUDA events, on the CPU) re-measures entries whose figure is not a GPU
measurement; a run without the GPU re-estimates format-1 entries and never applies a cached host winner.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

import fusegen
from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
from fusegen.autotuning.profiler import CpuWallTimeProfiler
from fusegen.autotuning.testing import DeclaredCostProfiler, FakeGemmBackend, make_gemm_module
from fusegen.cache import provenance
from fusegen.cache.format import CacheEntry, CacheFormatError, TuneResult, entry_from_text
from fusegen.cache.tiers import DirectoryTier
from fusegen.codegen_backend import Config
from fusegen.device import get_device

H200 = get_device("h200")
MLP = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "jax" / "gpu_mlp_bf16.default.h100_opt.hlo"


class GpuLikeProfiler(CpuWallTimeProfiler):
    """Times on the CPU but reports itself as CUDA events: the autotuner then behaves as on a GPU."""

    name = "cuda-events"


def _entry(source: provenance.Source, backend: str = "fake_triton", **values) -> tuple:
    (m, fusions) = make_gemm_module([(64, 64, 64)])
    f = fusions[0]
    t = Autotuner([FakeGemmBackend()], AutotuneOptions(compile_workers=0), H200)
    key = t.key_for(f)
    cfg = Config(backend, values or {"block_m": 32, "block_n": 32, "block_k": 16, "cost_us": 300})
    return f, key, CacheEntry(key, TuneResult(cfg, "1", 12.5, 0, 3, {}, source))


def test_format_2_round_trips_the_source_and_format_1_reads_as_unknown(tmp_path):
    src = provenance.estimated(H200.model)
    _, key, e = _entry(src)
    back = entry_from_text(e.dumps(), "x.json")
    assert back.result.source == src and back.result.source.label.startswith("estimated by fusegen.perf v")
    v1 = json.loads(e.dumps())
    v1["format_version"] = 1
    del v1["result"]["source"]
    old = entry_from_text(json.dumps(v1), "old.json")
    assert old.result.source.kind == "unknown" and old.result.config == e.result.config
    v9 = dict(v1, format_version=9)
    with pytest.raises(CacheFormatError, match=r"old.json: unsupported format_version 9 \(this fusegen reads 1, 2\)"):
        entry_from_text(json.dumps(v9), "old.json")
    bad = json.loads(e.dumps())
    bad["result"]["source"] = {"kind": "guessed"}
    with pytest.raises(CacheFormatError, match="result.source.kind must be one of"):
        entry_from_text(json.dumps(bad), "bad.json")


def test_an_unreadable_version_is_left_in_place_and_tuned_around(tmp_path):
    f, key, e = _entry(provenance.measured(H200.model))
    tier = DirectoryTier(tmp_path)
    path = tier.file_for(key.digest)
    future = json.loads(e.dumps())
    future["format_version"] = 9
    path.write_text(json.dumps(future))
    o = AutotuneOptions(compile_workers=0, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path),
                        xla_gpu_experimental_autotune_cache_mode="READ")
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with Autotuner([FakeGemmBackend()], o, H200, profiler=CpuWallTimeProfiler()) as t:
            rep = t.tune_instruction(f)
    assert rep.cache == "miss" and any("format_version 9" in str(x.message) for x in w)
    assert json.loads(path.read_text())["format_version"] == 9  # READ mode: the file is untouched


def test_an_entry_of_a_newer_format_is_never_overwritten(tmp_path):
    """UPDATE mode: a file a newer fusegen wrote (format_version 9, e.g. a GPU measurement in a shared directory)
    is tuned around and left as it is; the new result stays in this process's memory, with a warning."""
    f, key, e = _entry(provenance.measured(H200.model))
    path = DirectoryTier(tmp_path).file_for(key.digest)
    future = json.loads(e.dumps())
    future["format_version"] = 9
    path.write_text(json.dumps(future))
    before = path.read_bytes()
    o = AutotuneOptions(compile_workers=0, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with Autotuner([FakeGemmBackend()], o, H200, profiler=CpuWallTimeProfiler()) as t:
            rep = t.tune_instruction(f)
            assert rep.step == "tuned" and t.cache.memory.get(key) is not None
            assert t.cache.stats["writes_directory"] == 0
    assert path.read_bytes() == before
    assert any(f"{path}: format_version 9 was written by a newer fusegen; left in place, not overwritten"
               in str(x.message) for x in w), [str(x.message) for x in w]


@pytest.mark.parametrize("source,remeasured", [
    (provenance.estimated(H200.model), True), (provenance.cpu_interpreter(), True), (provenance.UNKNOWN, True),
    (provenance.measured(H200.model), False), (provenance.untimed("the only supported config"), False)])
def test_a_gpu_run_remeasures_every_figure_but_a_gpu_measurement(tmp_path, source, remeasured):
    f, key, e = _entry(source)
    o = AutotuneOptions(compile_workers=0, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path))
    DirectoryTier(tmp_path).put(e)
    with Autotuner([FakeGemmBackend()], o, H200, profiler=GpuLikeProfiler()) as t:
        assert t.timing == "measure"
        rep = t.tune_instruction(f)
    if remeasured:
        assert rep.step == "tuned" and rep.hint == f"{e.result.config.name} ({source.label})"
        assert rep.source["kind"] == "measured" and rep.source["device"] == H200.model
        assert entry_from_text(DirectoryTier(tmp_path).file_for(key.digest).read_text(), "f").result.source.is_measurement
    else:
        assert rep.step == "cache" and rep.hint is None and rep.source == source.to_json()
    # asked not to, a GPU run applies the hint as it is
    DirectoryTier(tmp_path).put(e)
    o2 = AutotuneOptions(compile_workers=0, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path),
                         remeasure_estimates=False)
    with Autotuner([FakeGemmBackend()], o2, H200, profiler=GpuLikeProfiler()) as t:
        assert t.tune_instruction(f).step == "cache"


def test_a_pick_made_without_timing_or_estimates_is_not_cached_for_a_gpu_run(tmp_path):
    """No config has an estimate and nothing is timed: the first that compiles is used, as level 0 does, and (as
    XLA never caches a level-0 pick) it is not cached: a GPU run sharing the directory tunes the instruction
    instead of applying the CPU's arbitrary choice, and an XLA export never sees it."""
    from fusegen.autotuning.testing import FakeLibraryBackend

    class SlowFirst(FakeLibraryBackend):  # algorithm ids: no estimate for either config; the first is the slower
        CONFIGS = FakeLibraryBackend.CONFIGS[::-1]

    (_, (f,)) = make_gemm_module([(64, 64, 64)])
    o = AutotuneOptions(compile_workers=0, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path))
    with Autotuner([SlowFirst()], o, H200) as t:
        if t.timing != "estimate":
            pytest.skip("a GPU is usable here: candidates are measured, not estimated")
        rep = t.tune_instruction(f)
    assert (rep.step, rep.source["kind"], rep.configs) == ("first-compilable", "untimed", 2)
    assert rep.winner == "fake_lib:algorithm=1,cost_us=1500,workspace=0"
    assert DirectoryTier(tmp_path).files() == [] and len(t.cache.memory) == 0
    class DeclaredGpuCost(DeclaredCostProfiler):  # the configs' declared cost as CUDA events (no wall-clock noise)
        name = "cuda-events"

    (_, (g,)) = make_gemm_module([(64, 64, 64)])
    with Autotuner([SlowFirst()], o, H200, profiler=DeclaredGpuCost()) as t:
        rep = t.tune_instruction(g)
    assert (rep.step, rep.source["kind"]) == ("tuned", "measured")
    assert rep.winner == "fake_lib:algorithm=0,cost_us=700,workspace=4096"  # 700 µs against 1500: measured, not guessed


def test_without_a_gpu_a_cached_host_winner_is_never_applied(tmp_path, caplog):
    from fusegen_plugins.backends.host import HostCodegenBackend

    from fusegen.cache.tiers import CacheWarning

    f, key, e = _entry(provenance.UNKNOWN, backend="host", impl="numpy")  # what fusegen before format 2 cached
    DirectoryTier(tmp_path).put(e)
    o = AutotuneOptions(compile_workers=0, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path))
    why = "'host' backend, which runs on the CPU and is not an XLA:GPU backend"
    # a CacheWarning (the CLI shows its one log line, not the Python warning with a source line)
    with pytest.warns(CacheWarning, match=why) as w:
        with Autotuner([FakeGemmBackend(), HostCodegenBackend()], o, H200) as t:
            if t.timing != "estimate":
                pytest.skip("a GPU is usable here: candidates are measured, not estimated")
            rep = t.tune_instruction(f)
    assert all(issubclass(x.category, RuntimeWarning) for x in w if why in str(x.message))
    assert [r.getMessage() for r in caplog.records if why in r.getMessage()] == [
        f"cached config host:impl=numpy for %{f.name} is the {why}; tuning %{f.name} again"]
    assert rep.winner.startswith("fake_triton:") and rep.source["kind"] == "estimated"
    assert all(not c.name.startswith("host") for c in (r.config for r in rep.results))


@pytest.mark.skipif(not MLP.exists(), reason="shared corpus module absent")
def test_no_tuned_entry_for_a_gpu_key_has_the_host_backend(tmp_path):
    res = fusegen.tune(MLP, retune=True, cache_dir=str(tmp_path))
    if res.timing != "estimate":
        pytest.skip("a GPU is usable here: this is the CPU-machine guarantee")
    files = DirectoryTier(tmp_path).files()
    assert files and res.ok
    for p in files:
        e = entry_from_text(p.read_text(), str(p))
        assert e.key.model.startswith("CUDA: 9.0") and e.result.config.backend != "host"
        assert e.result.source.kind in ("estimated", "untimed"), e.result.source
    assert all(r.source and r.source["kind"] in ("estimated", "untimed") for r in res.instructions)


def _triton_entry(hlo: str, source: provenance.Source) -> CacheEntry:
    from fusegen.cache.key import CacheKey

    key = CacheKey("CUDA: 9.0, Cores: 132", f"fusion kind=kCustom backend=__triton_gemm\nfused_computation {{\n{hlo}\n}}",
                   50, "fp")
    cfg = Config("triton", {"block_m": 32, "block_n": 32, "block_k": 32, "num_stages": 3, "num_warps": 4,
                            "num_ctas": 1})
    return CacheEntry(key, TuneResult(cfg, "1", 31.744, 0, 3, {}, source))


def test_cache_ls_and_an_xla_export_say_which_figures_are_estimates(tmp_path):
    from click.testing import CliRunner

    from fusegen.cache.xla_results import entries_from_text
    from fusegen.cli.cache import cache as cache_cli

    d = tmp_path / "c"
    measured = _triton_entry("ROOT a = f32[2] parameter(0)", provenance.measured(H200.model))
    estimate = _triton_entry("ROOT b = f32[4] parameter(0)", provenance.estimated(H200.model))
    DirectoryTier(d).put(measured)
    DirectoryTier(d).put(estimate)
    (tmp_path / "none.toml").write_text("")
    cli = ["--config", str(tmp_path / "none.toml"), "--cache-dir", str(d)]
    rows = {r["key"]: r for r in json.loads(CliRunner().invoke(cache_cli, [*cli, "ls", "--json"]).output)}
    assert rows[measured.digest]["source"]["label"] == f"measured on {H200.model}"
    assert rows[estimate.digest]["source"]["kind"] == "estimated"
    # XLA reads every run_time as its own measurement: the estimate is left out, and the summary says so
    out = tmp_path / "x.pbtxt"
    r = CliRunner().invoke(cache_cli, [*cli, "export", "--format", "xla", str(out)])
    assert r.exit_code == 0 and "1 not GPU measurements (estimates or CPU time) left out" in r.output, r.output
    assert out.read_text().count("results {") == 1 and "nanos: 31744" in out.read_text()
    # asked to, it is written marked and without run_time; read back, it is a hint, the other a measurement
    r = CliRunner().invoke(cache_cli, [*cli, "export", "--format", "xla", "--include-estimates", str(out)])
    text = out.read_text()
    assert r.exit_code == 0 and "1 estimates written marked" in r.output
    assert text.count("results {") == 2 and text.count("run_time {") == 1
    assert "# fusegen: estimated by fusegen.perf v" in text
    back = entries_from_text(text, "x.pbtxt").entries
    kinds = sorted({e.result.source.kind for e in back})
    assert kinds == ["measured", "unknown"]
