"""The autotuner's steps and modes with small numpy backends (fusegen.autotuning.testing).

Every candidate computes a real matrix product, so correctness clustering compares real outputs;
behaviour switches in the config values make one config wrong, crash, hang or write out of bounds.
Run times are busy-waits (``cost_us``) far enough apart that the ranking is stable on a loaded CPU.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from fusegen.autotuning import cost_model
from fusegen.autotuning.autotuner import (AutotuneOptions, Autotuner, needs_config, select_backends, summary_table,
                                          tunable_instructions)
from fusegen.autotuning.config_runner import Candidate, ConfigRunner
from fusegen.autotuning.profiler import CpuWallTimeProfiler, CudaEventsProfiler, Profiler
from fusegen.autotuning.redzone import DEFAULT_REDZONE_BYTES, RedzoneAllocator
from fusegen.autotuning.replay import load_record, replay
from fusegen.autotuning.selection import AutotuneError, FailureKind
from fusegen.autotuning.testing import DeclaredCostProfiler, FakeGemmBackend, FakeLibraryBackend, GemmExecutable, make_gemm_module
from fusegen.codegen_backend import Config
from fusegen.device import get_device

H100 = get_device("h100")
DEVICE = "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 4800 GB/s, L2 cache: 50 MB, DNN version: 0.0.0"
_BASE_SPEC = "fusegen.autotuning.testing:FakeGemmBackend"


class Untrusted(FakeGemmBackend):
    """Untrusted Triton-like backend; its configs are set per test."""

    CONFIGS = [{"block_m": 16, "cost_us": 6000}, {"block_m": 32, "cost_us": 2000}, {"block_m": 64, "cost_us": 9000}]

    def worker_spec(self) -> str:  # compile behaviour is value-driven, identical to the base class
        return _BASE_SPEC


def untrusted(*configs: dict) -> Untrusted:
    b = Untrusted()
    b.CONFIGS = list(configs)
    return b


class Library(FakeLibraryBackend):
    CONFIGS = [{"algorithm": 0, "workspace": 4096, "cost_us": 7000}, {"algorithm": 1, "workspace": 0, "cost_us": 15000}]


class NoProfiling(Profiler):
    name = "must-not-run"

    def time_us(self, *a):
        raise AssertionError("this path must not profile")


def opts(**kw) -> AutotuneOptions:
    kw.setdefault("compile_workers", 0)
    kw.setdefault("xla_gpu_redzone_padding_bytes", 256)
    return AutotuneOptions(**kw)


def tuner(backends, cache_dir=None, profiler=None, **kw) -> Autotuner:
    if cache_dir is not None:
        kw["xla_gpu_per_fusion_autotune_cache_dir"] = str(cache_dir)
    device = H100 if kw.get("cost_model_top_k") else DEVICE  # the cost model needs a device description
    return Autotuner(backends, opts(**kw), device, profiler=profiler or DeclaredCostProfiler())


def gemm(m=32, n=32, k=32):
    module, fusions = make_gemm_module([(m, n, k)])
    return module, fusions[0]


# ------------------------------------------------------------------------------------------------
# Defaults and options
# ------------------------------------------------------------------------------------------------

def test_options_defaults_are_xlas():
    o = AutotuneOptions()
    assert (o.xla_gpu_autotune_level, o.xla_gpu_autotune_gemm_rtol, o.xla_gpu_redzone_padding_bytes) == (4, 0.1, 8 << 20)
    assert o.xla_gpu_redzone_padding_bytes == DEFAULT_REDZONE_BYTES
    assert (o.xla_gpu_per_fusion_autotune_cache_dir, o.xla_gpu_experimental_autotune_cache_mode) == ("", "UPDATE")
    assert not o.xla_gpu_require_complete_aot_autotune_results and not o.xla_gpu_crash_on_verification_failures
    assert o.xla_gpu_experimental_autotune_backends == "" and o.scratch_bytes_window_us == 2.0


def test_from_debug_options_reads_xla_names():
    options_mod = pytest.importorskip("fusegen.config.options")
    import attrs

    dbg = attrs.evolve(options_mod.DebugOptions(), xla_gpu_autotune_level=2, xla_gpu_autotune_gemm_rtol=0.25)
    o = AutotuneOptions.from_debug_options(dbg, compile_workers=0)
    assert (o.xla_gpu_autotune_level, o.xla_gpu_autotune_gemm_rtol, o.compile_workers) == (2, 0.25, 0)
    assert o.xla_gpu_redzone_padding_bytes == 8 << 20


def test_cache_mode_accepts_xla_enum_names():
    assert AutotuneOptions(xla_gpu_experimental_autotune_cache_mode="AUTOTUNE_CACHE_MODE_READ") \
        .xla_gpu_experimental_autotune_cache_mode == "READ"
    with pytest.raises(ValueError, match="UPDATE, READ, WRITE_ONLY"):
        AutotuneOptions(xla_gpu_experimental_autotune_cache_mode="sometimes")


def test_backend_selection_syntax():
    t, lib = Untrusted(), Library()
    assert select_backends([t, lib], "") == [t, lib]
    assert select_backends([t, lib], "FAKE_LIB") == [lib]
    assert select_backends([t, lib], "+fake_lib,-fake_triton") == [lib]
    assert select_backends([t, lib], "-fake_lib") == [t]
    with pytest.raises(ValueError, match="not both"):
        select_backends([t, lib], "fake_lib,-fake_triton")
    with pytest.raises(ValueError, match="unknown backend 'cudnn'; registered: fake_triton, fake_lib"):
        select_backends([t, lib], "+cudnn")


def test_which_instructions_need_a_config():
    module, fusions = make_gemm_module([(16, 16, 16), (32, 16, 16)])
    assert tunable_instructions(module) == fusions
    FakeGemmBackend().apply_config(fusions[0], Config("fake_triton", {"block_m": 16}))
    assert tunable_instructions(module) == [fusions[1]]
    assert tunable_instructions(module, retune=True) == fusions
    _, emitter = make_gemm_module([(16, 16, 16)], kind="__cudnn$fusion")
    assert needs_config(emitter[0])


# ------------------------------------------------------------------------------------------------
# Tuning
# ------------------------------------------------------------------------------------------------

def test_tunes_applies_winner_and_reports():
    module, f = gemm()
    with tuner([Untrusted(), Library()]) as t:
        rep = t.tune_instruction(f)
    assert rep.step == "tuned" and rep.cache == "miss"
    assert (rep.configs, rep.compiled, rep.failures, rep.tie_break) == (5, 5, {}, False)
    assert rep.winner == "fake_triton:block_m=32,cost_us=2000" and rep.duration_us == 2000
    fbc = f.backend_config["fusion_backend_config"]
    assert fbc["triton_gemm_config"] == {"block_m": 32, "cost_us": 2000} and fbc["kind"] == "__triton_gemm"
    from fusegen.hlo.printer import print_module

    assert '"triton_gemm_config":{"block_m":32,"cost_us":2000}' in print_module(module)


def test_summary_table_has_every_column():
    from rich.console import Console

    module, f = gemm()
    with tuner([Untrusted(), Library()]) as t:
        reps = t.tune_module(module)
    console = Console(record=True, width=250)
    console.print(summary_table(reps))
    text = console.export_text()
    for col in ("instruction", "cache", "configs", "failures", "winner", "time µs", "scratch B", "tie-break"):
        assert col in text
    assert "gemm.0" in text and "fake_triton:block_m=32,cost_us=2000" in text and "miss" in text


def test_scratch_tie_break_fires_and_is_reported():
    lib = Library()
    lib.CONFIGS = [{"algorithm": 0, "workspace": 1 << 20, "cost_us": 3000}, {"algorithm": 1, "workspace": 0, "cost_us": 3001.5}]
    _, f = gemm()
    with tuner([lib]) as t:
        rep = t.tune_instruction(f)
    assert rep.winner == "fake_lib:algorithm=1,cost_us=3001.5,workspace=0" and rep.scratch_bytes == 0
    assert rep.tie_break and rep.duration_us == 3001.5
    lib.CONFIGS[1]["cost_us"] = 3002.5  # outside the 2 us window: the fastest keeps it
    with tuner([lib]) as t:
        rep = t.tune_instruction(gemm()[1])
    assert rep.winner == "fake_lib:algorithm=0,cost_us=3000,workspace=1048576" and not rep.tie_break


def test_wall_time_profiler_ranks_by_measured_time():
    _, f = gemm()
    b = untrusted({"block_m": 16, "cost_us": 40000}, {"block_m": 32, "cost_us": 1000})
    with tuner([b], profiler=CpuWallTimeProfiler(3)) as t:
        rep = t.tune_instruction(f)
    assert rep.winner == "fake_triton:block_m=32,cost_us=1000" and rep.duration_us >= 1000
    assert rep.results[0].duration_us >= 40000


def test_exactly_one_config_is_used_without_compiling():
    _, f = gemm()
    with tuner([untrusted({"block_m": 16})], profiler=NoProfiling()) as t:
        rep = t.tune_instruction(f)
        assert t.compiles == 0
    assert rep.step == "single-config" and rep.winner == "fake_triton:block_m=16"


def test_one_compiled_candidate_is_used_without_profiling():
    _, f = gemm()
    b = untrusted({"block_m": 16, "fail_compile": True}, {"block_m": 32})
    with tuner([b], profiler=NoProfiling()) as t:
        rep = t.tune_instruction(f)
    assert (rep.step, rep.winner, rep.failures) == ("single-compiled", "fake_triton:block_m=32", {"COMPILATION_FAILED": 1})


def test_nothing_compiles_is_internal_error():
    _, f = gemm()
    b = untrusted({"block_m": 16, "fail_compile": True}, {"block_m": 32, "fail_compile": True})
    with tuner([b]) as t, pytest.raises(AutotuneError) as ei:
        t.tune_instruction(f)
    assert ei.value.code == "Internal"
    assert ei.value.message.startswith("No candidates could be compiled.\nFailures (2):\n")
    assert "needs more shared memory" in ei.value.message


def test_no_supported_configs_is_not_found():
    _, f = gemm()
    with tuner([untrusted()]) as t, pytest.raises(AutotuneError) as ei:
        t.tune_instruction(f)
    assert ei.value.code == "NotFound" and ei.value.message.startswith("No supported configs found for HLO: %gemm.0")


def test_execution_failure_fails_that_config_only():
    _, f = gemm()
    b = untrusted({"block_m": 16, "raise_run": True, "cost_us": 10}, {"block_m": 32, "cost_us": 2000},
                  {"block_m": 64, "cost_us": 6000})
    with tuner([b]) as t:
        rep = t.tune_instruction(f)
    assert rep.failures == {"EXECUTION_FAILED": 1} and rep.winner == "fake_triton:block_m=32,cost_us=2000"
    bad = rep.results[0]
    assert bad.failure.kind is FailureKind.EXECUTION_FAILED and "illegal memory access" in bad.failure.message


# ------------------------------------------------------------------------------------------------
# Correctness and red zones (level >= 4)
# ------------------------------------------------------------------------------------------------

def test_wrong_untrusted_backend_is_demoted():
    _, f = gemm()
    wrong = untrusted({"block_m": 16, "wrong": True, "cost_us": 100}, {"block_m": 32, "cost_us": 2000})
    with tuner([wrong, Library()]) as t:
        rep = t.tune_instruction(f)
    assert rep.failures == {"WRONG_RESULTS": 1}
    r = rep.results[0]
    assert r.name == "fake_triton:block_m=16,cost_us=100,wrong=true"
    assert r.failure.kind is FailureKind.WRONG_RESULTS
    assert r.failure.message == ("Output disagrees with winning cluster (member of cluster -1 of 1; winning cluster "
                                 "has 3 member(s), trusted=true).")
    assert rep.winner == "fake_triton:block_m=32,cost_us=2000"


def test_levels_below_4_do_not_check_correctness():
    _, f = gemm()
    wrong = untrusted({"block_m": 16, "wrong": True, "cost_us": 100}, {"block_m": 32, "cost_us": 4000})
    with tuner([wrong, Library()], xla_gpu_autotune_level=3) as t:
        rep = t.tune_instruction(f)
    assert rep.failures == {} and rep.winner == "fake_triton:block_m=16,cost_us=100,wrong=true"


def test_crash_on_verification_failures():
    _, f = gemm()
    wrong = untrusted({"block_m": 16, "wrong": True}, {"block_m": 32})
    with tuner([wrong, Library()], xla_gpu_crash_on_verification_failures=True) as t, \
            pytest.raises(AutotuneError, match="fake_triton:block_m=16,wrong=true"):
        t.tune_instruction(f)


def test_kernel_writing_past_its_output_is_caught_by_the_red_zone():
    _, f = gemm()
    b = untrusted({"block_m": 16, "oob": 3, "cost_us": 10}, {"block_m": 32, "cost_us": 2000})
    with tuner([b, Library()]) as t:
        rep = t.tune_instruction(f)
    bad = rep.results[0]
    assert bad.failure.kind is FailureKind.REDZONE_CHECK_FAILED
    msg = bad.failure.message
    assert msg.startswith("Autotuning candidate rejected: kernel wrote past its allocated buffer. "
                          "Redzone mismatch in RHS redzone of buffer 0x")
    assert msg.endswith("(output 0: f32[32,32]) at offset 0; expected ffffffff but was 00000000.")
    assert rep.failures == {"REDZONE_CHECK_FAILED": 1} and rep.winner == "fake_triton:block_m=32,cost_us=2000"


def test_redzone_allocator_names_side_buffer_and_offset():
    alloc = RedzoneAllocator(64)
    buf = alloc.allocate("input 1: f32[4]", 4, np.float32)
    assert buf.array.shape == (4,) and alloc.check() is None
    buf.backing[buf.user_offset - 8] = 0x12  # 8 bytes before the user bytes, in the LHS zone
    msg = alloc.check()
    assert msg is not None and "LHS redzone of buffer 0x" in msg and "(input 1: f32[4])" in msg
    # The LHS zone is 64 bytes; byte 56 sits in the 32-bit word at offset 56: ff ff ff ff -> 12 ff ff ff.
    assert msg.endswith("at offset 56; expected ffffffff but was ffffff12.")
    buf.reinit()
    assert alloc.check() is None
    with pytest.raises(ValueError, match="xla_gpu_redzone_padding_bytes"):
        RedzoneAllocator(-1)


def test_cpu_default_times_the_warm_up_run_only():
    _, f = gemm(8, 8, 8)
    runs = []

    class Counting(GemmExecutable):
        def run(self, inputs, outputs, scratch):
            runs.append(self.values["i"])
            super().run(inputs, outputs, scratch)

    cands = [Candidate(Config("x", {"i": i}), Counting(8, 8, 8, {"i": i, "cost_us": 3000 * (i + 1)}), True)
             for i in range(2)]
    res = ConfigRunner(CpuWallTimeProfiler(), redzone_bytes=64).profile_all(f, cands)
    assert runs == [0, 1]  # one interpreter run per candidate: the checked warm-up run is the measurement
    assert res[0].duration_us >= 3000 and res[1].duration_us >= 6000
    runs.clear()
    ConfigRunner(CpuWallTimeProfiler(2), redzone_bytes=64).profile_all(f, cands)
    assert runs == [0, 0, 0, 1, 1, 1]


def test_config_runner_shares_inputs_and_gives_fresh_outputs():
    _, f = gemm(8, 8, 8)
    seen_inputs, seen_outputs = [], []

    class Spy(GemmExecutable):
        def run(self, inputs, outputs, scratch):
            seen_inputs.append(inputs[0].__array_interface__["data"][0])
            seen_outputs.append(outputs[0].copy())
            super().run(inputs, outputs, scratch)

    cands = [Candidate(Config("x", {"i": i}), Spy(8, 8, 8, {}), True) for i in range(2)]
    runner = ConfigRunner(CpuWallTimeProfiler(1), redzone_bytes=64, seed=3)
    res = runner.profile_all(f, cands)
    assert [r.failure for r in res] == [None, None] and res[0].cluster == res[1].cluster == 0
    assert len(set(seen_inputs)) == 1  # one shared input buffer
    # Outputs start with different random garbage per candidate, so an unwritten element would show up.
    assert not np.array_equal(seen_outputs[0], seen_outputs[2])


# ------------------------------------------------------------------------------------------------
# Level 0 and AOT results
# ------------------------------------------------------------------------------------------------

def test_level0_takes_first_compilable_config():
    _, f = gemm()
    b = untrusted({"block_m": 16, "fail_compile": True}, {"block_m": 32}, {"block_m": 64})
    with tuner([b, Library()], profiler=NoProfiling(), xla_gpu_autotune_level=0) as t:
        rep = t.tune_instruction(f)
        assert t.compiles == 2  # stops at the first that compiles
    assert (rep.step, rep.winner) == ("first-compilable", "fake_triton:block_m=32")
    assert f.backend_config["fusion_backend_config"]["triton_gemm_config"] == {"block_m": 32}


def test_level0_falls_back_to_default_config():
    _, f = gemm()
    b = untrusted({"block_m": 16, "fail_compile": True})
    lib = Library()
    lib.CONFIGS = [{"algorithm": 3, "fail_compile": True}]
    with tuner([b, lib], profiler=NoProfiling(), xla_gpu_autotune_level=0) as t:
        rep = t.tune_instruction(f)
    assert (rep.step, rep.winner) == ("default", "fake_lib:algorithm=0,workspace=4096")
    with tuner([b], profiler=NoProfiling(), xla_gpu_autotune_level=0) as t, pytest.raises(AutotuneError) as ei:
        t.tune_instruction(f)
    assert ei.value.code == "NotFound" and ei.value.message.startswith("No supported config found for HLO: %gemm.0")
    assert "Default config status" in ei.value.message


def test_deterministic_ops_turn_tuning_off():
    _, f = gemm()
    with tuner([untrusted({"block_m": 16}, {"block_m": 32})], profiler=NoProfiling(),
               xla_gpu_deterministic_ops=True) as t:
        assert t.tune_instruction(f).step == "first-compilable"


def test_require_complete_aot_results_miss_is_an_error(tmp_path):
    _, f = gemm()
    with tuner([Untrusted(), Library()], tmp_path, xla_gpu_require_complete_aot_autotune_results=True) as t:
        with pytest.raises(AutotuneError) as ei:
            t.tune_instruction(f)
        assert t.compiles == 0
    assert ei.value.code == "NotFound"
    assert ei.value.message == ("No cached config found for HLO instr: %gemm.0 = f32[32,32] fusion(%p0, %p1), "
                                "kind=kCustom, calls=%gemm_fusion.0, "
                                "backend_config={\"fusion_backend_config\":{\"kind\":\"__triton_gemm\"}}")
    # Once the results are in the cache, the same options succeed without compiling.
    with tuner([Untrusted(), Library()], tmp_path) as t:
        t.tune_instruction(gemm()[1])
    with tuner([Untrusted(), Library()], tmp_path, xla_gpu_require_complete_aot_autotune_results=True) as t:
        rep = t.tune_instruction(gemm()[1])
        assert t.compiles == 0 and rep.cache == "directory"


# ------------------------------------------------------------------------------------------------
# Cache behaviour through the tuner
# ------------------------------------------------------------------------------------------------

def test_warm_cache_compiles_nothing(tmp_path):
    shapes = [(16, 16, 16), (32, 16, 16), (16, 48, 16)]
    module, _ = make_gemm_module(shapes)
    with tuner([Untrusted(), Library()], tmp_path) as t:
        cold = t.tune_module(module)
        assert t.compiles == 15
    assert len(list(tmp_path.glob("*.json"))) == 3
    module2, fusions2 = make_gemm_module(shapes)
    with tuner([Untrusted(), Library()], tmp_path, profiler=NoProfiling()) as t:
        warm = t.tune_module(module2)
        assert t.compiles == 0 and t._pool is None
        assert t.cache.stats["hits_directory"] == 3
    assert [r.cache for r in warm] == ["directory"] * 3
    assert [r.winner for r in warm] == [r.winner for r in cold]
    for f in fusions2:
        assert "triton_gemm_config" in f.backend_config["fusion_backend_config"]


def test_identically_shaped_layers_share_one_entry(tmp_path):
    module, _ = make_gemm_module([(16, 16, 16), (16, 16, 16), (16, 16, 16)])
    with tuner([Untrusted(), Library()], tmp_path) as t:
        reps = t.tune_module(module)
        assert t.compiles == 5
    assert [r.cache for r in reps] == ["miss", "memory", "memory"]
    assert len({r.key for r in reps}) == 1 and len(list(tmp_path.glob("*.json"))) == 1


def test_read_mode_never_writes(tmp_path):
    module, _ = make_gemm_module([(16, 16, 16), (32, 16, 16)])
    with tuner([Untrusted(), Library()], tmp_path, xla_gpu_experimental_autotune_cache_mode="READ") as t:
        reps = t.tune_module(module)
        assert [r.step for r in reps] == ["tuned", "tuned"] and t.cache.stats["writes_directory"] == 0
    assert list(tmp_path.iterdir()) == []
    # READ still reads: warm the directory in UPDATE mode, then READ hits without compiling.
    with tuner([Untrusted(), Library()], tmp_path) as t:
        t.tune_module(make_gemm_module([(16, 16, 16)])[0])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    with tuner([Untrusted(), Library()], tmp_path, xla_gpu_experimental_autotune_cache_mode="READ") as t:
        reps = t.tune_module(make_gemm_module([(16, 16, 16), (32, 16, 16)])[0])
        assert [r.cache for r in reps] == ["directory", "miss"] and t.compiles == 5
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before


def test_write_only_mode_retunes_and_rewrites(tmp_path):
    with tuner([Untrusted(), Library()], tmp_path) as t:
        t.tune_module(make_gemm_module([(16, 16, 16)])[0])
    (f,) = tmp_path.glob("*.json")
    old = json.loads(f.read_text())["created"]
    with tuner([Untrusted(), Library()], tmp_path, xla_gpu_experimental_autotune_cache_mode="WRITE_ONLY") as t:
        (rep,) = t.tune_module(make_gemm_module([(16, 16, 16)])[0])
        assert rep.cache == "miss" and t.compiles == 5 and t.cache.stats["writes_directory"] == 1
    assert json.loads(f.read_text())["key"]["hlo"].startswith("fusion kind=kCustom backend=__triton_gemm")
    assert old


def test_results_of_other_options_are_not_recovered(tmp_path):
    with tuner([Untrusted(), Library()], tmp_path) as t:
        t.tune_instruction(gemm()[1])
    with tuner([Untrusted(), Library()], tmp_path, xla_gpu_autotune_gemm_rtol=0.01) as t:
        assert t.tune_instruction(gemm()[1]).cache == "miss"
    with tuner([Untrusted(), Library()], tmp_path, xla_gpu_experimental_autotune_backends="-fake_lib") as t:
        assert t.tune_instruction(gemm()[1]).cache == "miss"
    assert len(list(tmp_path.glob("*.json"))) == 3
    with tuner([Untrusted(), Library()], tmp_path) as t:
        assert t.tune_instruction(gemm()[1]).cache == "directory"


def test_cached_config_of_unregistered_backend_is_ignored(tmp_path):
    from fusegen.cache.format import CacheEntry, TuneResult

    with tuner([Untrusted(), Library()], tmp_path) as t:
        key = t.key_for(gemm()[1])
        t.cache.insert(CacheEntry(key, TuneResult(Config("cudnn", {"plan": 1}), "9")))
        with pytest.warns(RuntimeWarning, match="names backend 'cudnn', which is not registered"):
            rep = t.tune_instruction(gemm()[1])
    assert rep.step == "tuned"


# ------------------------------------------------------------------------------------------------
# Compile pool (worker processes)
# ------------------------------------------------------------------------------------------------

def test_crashing_compile_fails_one_config_only_and_the_pool_survives():
    _, f = gemm()
    b = untrusted({"block_m": 16, "cost_us": 6000}, {"block_m": 32, "crash": True, "cost_us": 10},
                  {"block_m": 64, "cost_us": 2000})
    with tuner([b], compile_workers=2) as t:
        rep = t.tune_instruction(f)
        crashed = rep.results[1]
        assert crashed.failure.kind is FailureKind.COMPILATION_FAILED
        assert crashed.failure.message == "compile worker crashed (exit code 13) while compiling this config"
        assert rep.failures == {"COMPILATION_FAILED": 1} and rep.winner == "fake_triton:block_m=64,cost_us=2000"
        assert t._pool.crashes == 1
        rep2 = t.tune_instruction(gemm(16, 16, 16)[1])  # same pool, replaced worker
        assert rep2.compiled == 2 and rep2.winner == "fake_triton:block_m=64,cost_us=2000"


def test_compile_past_timeout_fails_that_config_only():
    _, f = gemm()
    b = untrusted({"block_m": 16, "hang": True}, {"block_m": 32, "cost_us": 10}, {"block_m": 64, "cost_us": 3000})
    with tuner([b], compile_workers=2, compile_timeout_s=4) as t:
        rep = t.tune_instruction(f)
        assert t._pool.timeouts == 1
    assert rep.results[0].failure.message == "compilation timed out after 4 s"
    assert rep.winner == "fake_triton:block_m=32,cost_us=10"


# ------------------------------------------------------------------------------------------------
# Cost model, records, profilers
# ------------------------------------------------------------------------------------------------

def test_cost_model_prefers_larger_tiles_for_a_large_gemm():
    from fusegen.device import get_device

    _, f = gemm(4096, 4096, 4096)
    small, big = Config("t", {"block_m": 16, "block_n": 16, "block_k": 32}), Config("t", {"block_m": 128, "block_n": 128, "block_k": 32})
    dev = get_device("h100")
    e_small = cost_model.estimate_seconds(f, small.values, dev)
    e_big = cost_model.estimate_seconds(f, big.values, dev)
    # 16x16 tiles re-read A 256 times and B 256 times: memory bound, far slower than 128x128 tiles.
    assert e_small > 4 * e_big
    kept, est = cost_model.rank_configs(f, [small, big], {"t": FakeGemmBackend()}, dev, top_k=1)
    assert kept == [big] and set(est) == {small.name, big.name}
    assert est[big.name].model == "fusegen.perf" and est[big.name].seconds == e_big
    # a backend fusegen cannot read and that gives no estimate of its own: no estimate, never crowding out
    kept, est = cost_model.rank_configs(f, [small, big], {}, dev, top_k=1)
    assert kept == [small] and est[small.name].seconds is None


def test_cost_model_top_k_limits_compiles():
    _, f = gemm(256, 256, 256)
    b = untrusted({"block_m": 16, "block_n": 16, "block_k": 16}, {"block_m": 64, "block_n": 64, "block_k": 32},
                  {"block_m": 32, "block_n": 32, "block_k": 32})
    with pytest.raises(ValueError, match="needs a device description"):
        Autotuner([b], opts(cost_model_top_k=2), DEVICE)
    with tuner([b], cost_model_top_k=2) as t:
        rep = t.tune_instruction(f)
        assert t.compiles == 2 and rep.configs == 2
        _, est = cost_model.rank_configs(f, b.get_supported_configs(f), {b.name: b}, t.device, top_k=0)
    worst = max(est, key=lambda n: est[n].seconds)
    # fusegen's GEMM model: block_k=16 makes 16 main-loop steps; with one stage each waits for its load (an L2
    # hit) and pays the cp.async loop overhead, two 16x16 blocks per SM sharing that wait (256 blocks on 132
    # SMs): the worst estimate; it is not compiled.
    from fusegen.perf import dot_model, gemm_model

    assert worst == "fake_triton:block_k=16,block_m=16,block_n=16"
    assert est[worst].seconds > 2 * 16 * (gemm_model.L2_LATENCY_S + dot_model.LEGACY_LOOP_OVERHEAD_S) / 2
    assert sorted(r.name for r in rep.results) == sorted(n for n in est if n != worst)


def test_record_replays_to_the_same_winner(tmp_path):
    _, f = gemm()
    wrong = untrusted({"block_m": 16, "wrong": True, "cost_us": 100}, {"block_m": 32, "cost_us": 2000},
                      {"block_m": 64, "oob": 2, "cost_us": 50})
    t = Autotuner([wrong, Library()], opts(), DEVICE, profiler=DeclaredCostProfiler(), record_dir=tmp_path)
    with t:
        rep = t.tune_instruction(f)
    (path,) = tmp_path.glob("gemm.0.*.json")
    rec = json.loads(path.read_text())
    assert rec["window_us"] == 2.0 and rec["rtol"] == 0.1 and rec["check_correctness"] is True
    assert {c["name"]: c["failure"] for c in rec["candidates"]}["fake_triton:block_m=64,cost_us=50,oob=2"] == \
        "REDZONE_CHECK_FAILED"
    out = replay(load_record(rec, str(path)))
    assert out.winner == rep.winner
    assert out.failures == {r.name: r.failure.kind.name for r in rep.results if r.failed}
    assert out.failures["fake_triton:block_m=16,cost_us=100,wrong=true"] == "WRONG_RESULTS"


def test_cuda_events_profiler_needs_a_gpu():
    ok, why = CudaEventsProfiler.availability()
    if not ok:
        pytest.skip(f"CUDA events profiler unavailable on this machine: {why}")
    import cupy

    p = CudaEventsProfiler(runs=3)
    a = cupy.ones(1024, dtype=cupy.float32)

    class Add:
        def run(self, inputs, outputs, scratch):
            outputs[0][...] = inputs[0] + 1

    out = cupy.empty_like(a)
    t = p.time_us(Add(), [a], [out], None)
    assert t > 0 and float(out[0].get()) == 2.0


# ------------------------------------------------------------------------------------------------
# The command line
# ------------------------------------------------------------------------------------------------

def test_tune_cli_tunes_then_serves_from_cache(tmp_path, monkeypatch):
    from fusegen.autotuning import autotuner as autotuner_mod
    from fusegen.cli.tune import tune
    from fusegen.hlo.printer import print_module

    monkeypatch.setattr(autotuner_mod, "discover_backends", lambda pm=None: [Untrusted(), Library()])
    module, _ = make_gemm_module([(16, 16, 16), (32, 16, 16), (16, 16, 16)])
    hlo = tmp_path / "m.hlo"
    hlo.write_text(print_module(module))
    cache_dir = tmp_path / "cache"
    args = [str(hlo), "--cache-dir", str(cache_dir), "--workers", "0", "--json", "--config", str(tmp_path / "none.toml")]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "none.toml").write_text("")
    cold = CliRunner().invoke(tune, args + ["-o", str(tmp_path / "tuned.hlo")])
    assert cold.exit_code == 0, cold.output
    got = json.loads(cold.output)
    assert [i["cache"] for i in got["instructions"]] == ["miss", "miss", "memory"]
    assert "triton_gemm_config" in (tmp_path / "tuned.hlo").read_text()
    warm = CliRunner().invoke(tune, args)
    assert warm.exit_code == 0, warm.output
    got = json.loads(warm.output)
    assert [i["cache"] for i in got["instructions"]] == ["directory", "directory", "memory"]
    assert got["cache"]["misses"] == 0


def test_tune_cli_without_backends_is_a_one_line_error(tmp_path, monkeypatch):
    from fusegen.autotuning import autotuner as autotuner_mod
    from fusegen.cli.tune import tune
    from fusegen.hlo.printer import print_module

    monkeypatch.setattr(autotuner_mod, "discover_backends", lambda pm=None: [])
    hlo = tmp_path / "m.hlo"
    hlo.write_text(print_module(make_gemm_module([(16, 16, 16)])[0]))
    (tmp_path / "none.toml").write_text("")
    res = CliRunner().invoke(tune, [str(hlo), "--config", str(tmp_path / "none.toml")])
    assert res.exit_code == 2 and "no codegen backends are registered" in res.output


# ------------------------------------------------------------------------------------------------
# Plugins
# ------------------------------------------------------------------------------------------------

def _pm_with(*plugins):
    from fusegen.plugin_manager import PluginManager

    return PluginManager(autoload=False, extra_plugins=[(f"p{i}", p) for i, p in enumerate(plugins)])


def test_backends_come_from_the_hook_in_rank_order():
    from fusegen.autotuning.autotuner import discover_backends
    from fusegen.plugin_manager import hookimpl

    class Lib(Library):
        rank = 300

    class Tri(Untrusted):
        rank = 200

    class Plugin:
        @hookimpl
        def fusegen_codegen_backends(self):
            return [Lib(), Tri()]

    got = discover_backends(_pm_with(Plugin()))
    assert [b.name for b in got] == ["fake_triton", "fake_lib"]


def test_hook_errors_name_the_plugin():
    from fusegen.autotuning.autotuner import discover_backends
    from fusegen.plugin_manager import hookimpl

    class Twice:
        @hookimpl
        def fusegen_codegen_backends(self):
            return [Library()]

    pm = _pm_with(Twice(), Twice())  # the second taker of the name is quarantined; the first keeps it
    assert pm.broken["p1"].reason == ("registers codegen backend 'fake_lib', which plugin 'p0' (?) already "
                                      "registers; say replaces='fake_lib' on it to replace that one")
    assert [(b.name, b.plugin) for b in discover_backends(pm)] == [("fake_lib", "p0")]

    class NotABackend:
        @hookimpl
        def fusegen_codegen_backends(self):
            return ["cublas"]

    pm = _pm_with(NotABackend())
    assert pm.broken["p0"].reason == "returned str from fusegen_codegen_backends, expected CodegenBackend"
    assert discover_backends(pm) == []
