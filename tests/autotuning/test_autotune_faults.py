"""Profiling faults in the autotuner: an executable whose unpickling hangs, a run() that hangs, a run() that
kills its process. Each fails its own config (EXECUTION_FAILED) and nothing more: the tuner carries on, the
other configs are profiled and the best of them wins."""

from __future__ import annotations

import pytest

from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
from fusegen.autotuning.selection import FailureKind
from fusegen.autotuning.supervised import PickledExecutable
from fusegen.autotuning.testing import DeclaredCostProfiler, FakeGemmBackend, make_gemm_module

DEVICE = "CUDA: 9.0, Cores: 132, GPU clock: 1.98 GHz, Memory bandwidth: 4800 GB/s, L2 cache: 50 MB, DNN version: 0.0.0"


class Faulty(FakeGemmBackend):
    name = "faulty"

    def worker_spec(self) -> str:  # compile behaviour is value-driven, the same as the base class
        return "fusegen.autotuning.testing:FakeGemmBackend"


FAULTS = {
    "hang_unpickle": "profiling timed out after 3 s (xla_gpu_autotune_profile_timeout)",
    "hang_run": "profiling timed out after 3 s (xla_gpu_autotune_profile_timeout)",
    "exit_run": "profiling worker crashed (exit code 17) while running this config",
}


def _tune(configs, **kw):
    b = Faulty()
    b.CONFIGS = configs
    kw.setdefault("compile_workers", 1)
    o = AutotuneOptions(xla_gpu_redzone_padding_bytes=256, profile_timeout_s=3, **kw)
    module, fusions = make_gemm_module([(32, 32, 32)])
    with Autotuner([b], o, DEVICE, profiler=DeclaredCostProfiler()) as t:
        rep = t.tune_instruction(fusions[0])
        sup = t._supervisor
        return rep, fusions[0], (sup.crashes, sup.timeouts) if sup is not None else None


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_profiling_fault_fails_one_config_only(fault):
    configs = [{"block_m": 16, "cost_us": 3000}, {"block_m": 32, "cost_us": 10, fault: True},
               {"block_m": 64, "cost_us": 900}, {"block_m": 128, "cost_us": 5000}]
    rep, fusion, (crashes, timeouts) = _tune(configs)
    kinds = [r.failure.kind if r.failure else None for r in rep.results]
    assert kinds == [None, FailureKind.EXECUTION_FAILED, None, None]
    assert rep.results[1].failure.message == FAULTS[fault]
    # the other configs were profiled as usual (each once, in the replacement worker too) and the best won
    assert [r.duration_us for r in rep.results if not r.failure] == [3000, 900, 5000]
    assert rep.winner == "faulty:block_m=64,cost_us=900" or "block_m=64" in rep.winner
    assert fusion.backend_config["fusion_backend_config"]["triton_gemm_config"]["block_m"] == 64
    assert (crashes, timeouts) == ((1, 0) if fault == "exit_run" else (0, 1))


def test_two_faults_in_one_instruction_and_a_second_instruction_after_them():
    b = Faulty()
    b.CONFIGS = [{"block_m": 16, "exit_run": True}, {"block_m": 32, "hang_run": True},
                 {"block_m": 64, "cost_us": 700}, {"block_m": 128, "cost_us": 400}]
    o = AutotuneOptions(xla_gpu_redzone_padding_bytes=256, profile_timeout_s=3, compile_workers=1)
    module, fusions = make_gemm_module([(32, 32, 32), (16, 32, 32)])
    with Autotuner([b], o, DEVICE, profiler=DeclaredCostProfiler()) as t:
        reps = t.tune_module(module, raise_on_error=False)
    for rep in reps:
        assert [bool(r.failure) for r in rep.results] == [True, True, False, False]
        assert "block_m=128" in rep.winner and not rep.error


def test_in_process_compiles_are_supervised_with_profile_in_worker_all():
    configs = [{"block_m": 16, "cost_us": 300}, {"block_m": 32, "exit_run": True}, {"block_m": 64, "cost_us": 900}]
    rep, _, (crashes, _) = _tune(configs, compile_workers=0, profile_in_worker="all")
    assert rep.results[1].failure.message == FAULTS["exit_run"] and crashes == 1
    assert "block_m=16" in rep.winner


def test_executables_from_compile_workers_stay_bytes_in_the_tuning_process():
    from fusegen.autotuning.compile_pool import CompilePool, CompileTask, instruction_to_text
    from fusegen.codegen_backend import Config

    _, fusions = make_gemm_module([(8, 8, 8)])
    task = CompileTask(0, "fusegen.autotuning.testing:FakeGemmBackend",
                       Config("fake_triton", {"block_m": 16, "hang_unpickle": True}).to_json(),
                       instruction_to_text(fusions[0]))
    with CompilePool(1, timeout_s=60) as pool:
        (out,) = pool.compile_all([task])
    # receiving it did not unpickle it (that would have slept for an hour)
    assert isinstance(out.executable, PickledExecutable) and out.executable._loaded is None


def test_compile_timeout_comes_from_the_debug_option_and_the_command_line():
    from click.testing import CliRunner

    from fusegen.config.options import DebugOptions

    o = AutotuneOptions.from_debug_options(DebugOptions(xla_gpu_autotune_compile_timeout=7.5,
                                                        xla_gpu_autotune_profile_timeout=9.0))
    assert (o.compile_timeout_s, o.profile_timeout_s) == (7.5, 9.0)
    assert AutotuneOptions.from_debug_options(DebugOptions()).compile_timeout_s == 300.0
    from fusegen.cli.main import cli

    r = CliRunner().invoke(cli, ["tune", "x.hlo", "--compile-timeout", "0"])
    assert r.exit_code == 2 and "compile-timeout" in r.output
