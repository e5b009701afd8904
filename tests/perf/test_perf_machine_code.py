"""What a kernel's sm_90 machine code changes in its estimate (fusegen.perf.machine_code), on real ptxas/SASS.

The statistics come from the tools' own output (tests/data/sass, made by the Triton wheel's ptxas and
cuobjdump); the kernels are the corpus fusions they were compiled from (shared/corpus/jax/launch).
"""

from __future__ import annotations

from pathlib import Path

import attrs
import pytest

import fusegen
from fusegen import perf
from fusegen.codegen.sass import stats_from_text
from fusegen.device import H200
from fusegen.perf import machine_code
from fusegen.perf.device_rates import PerfDevice

SASS = Path(__file__).parents[1] / "data" / "sass"
LAUNCH = Path(__file__).resolve().parents[2] / ".." / "shared" / "corpus" / "jax" / "launch"
DEV = PerfDevice.of(H200)


def _stats(name: str, entry: str, **kw):
    sass = SASS / f"{name}.sass"
    return stats_from_text(entry, (SASS / f"{name}.ptxas.txt").read_text(), sass.read_text() if sass.exists() else "",
                           **kw)


def _gemm():
    m = fusegen.load(LAUNCH / "gpu_mlp_bf16.default.h200_opt.hlo")
    return next(f for f in m.fusion_instructions() if f.name == "gemm_fusion_dot")


needs_corpus = pytest.mark.skipif(not LAUNCH.is_dir(), reason="shared/corpus/jax/launch is not present")


@needs_corpus
def test_gemm_without_wgmma_gets_xlas_hopper_derate():
    """XLA's own GEMM kernel uses HMMA (mma.sync), not wgmma: 0.63 of the tensor-core peak on an H200."""
    stats = _stats("xla_gemm_fusion_dot", "gemm_fusion_dot", num_warps=2)
    assert stats.tensor_core_instructions == 8 and not any("GMMA" in k for k in stats.tensor_core_ops)
    adj = machine_code.adjustments(stats, DEV, H200)
    assert adj.dot_peak(_gemm(), DEV) == pytest.approx(989e12 * 0.63)


@needs_corpus
def test_gemm_without_tensor_cores_runs_at_the_cuda_core_peak_and_is_slower():
    stats = _stats("xla_gemm_fusion_dot", "gemm_fusion_dot", num_warps=2)
    no_tc = attrs.evolve(stats, tensor_core_ops={})
    f = _gemm()
    plain = perf.estimate_fusion(f, H200, library_candidate=False)  # the Triton kernel, not cuBLAS's time
    with_mma = perf.estimate_fusion(f, H200, sass=stats)
    scalar = perf.estimate_fusion(f, H200, sass=no_tc)
    assert machine_code.adjustments(no_tc, DEV, H200).dot_peak(f, DEV) == pytest.approx(67e12)
    # XLA already derates a 16-row tile on Hopper (no wgmma below tile_m 64): the HMMA kernel changes nothing
    assert plain.data.compute_time == with_mma.data.compute_time < scalar.data.compute_time
    # compute time scales with the peak: 0.63 x 989 against 67 TFLOP/s (the fusion has no other flops)
    assert scalar.data.compute_time / plain.data.compute_time == pytest.approx(989 * 0.63 / 67, rel=1e-6)
    assert scalar.machine_code["tensor_core_instructions"] == 0


def test_loads_in_flight_bound_from_load_width_and_occupancy():
    """Little's law: resident warps x 32 x access bytes x loads, per SM, over the 600 ns latency."""
    adj = machine_code.Adjustments(kernel="k", registers=32, blocks_per_sm=16, warps_per_block=4,
                                   mean_access_bytes=2.0, global_loads=1)
    bw = machine_code.in_flight_bandwidth(adj, DEV, num_blocks=100_000)
    assert bw == pytest.approx(132 * 16 * 4 * 32 * 2.0 * 1 / 600e-9)
    wide = attrs.evolve(adj, mean_access_bytes=16.0, global_loads=4)
    assert machine_code.in_flight_bandwidth(wide, DEV, 100_000) > DEV.memory_bandwidth  # saturates DRAM
    # a launch of fewer blocks than SMs keeps only that many SMs busy, one block each
    assert machine_code.in_flight_bandwidth(adj, DEV, num_blocks=10) == pytest.approx(10 * 4 * 32 * 2.0 / 600e-9)


@needs_corpus
def test_a_kernel_without_loads_has_no_loads_in_flight_bound():
    """A store-only kernel (new_loop_multi_output's f32[333,777] iota-and-add, no operands) waits on no load: its
    estimate stays its write time at the DRAM bandwidth (the bound counted one phantom load before)."""
    m = fusegen.load(LAUNCH / "new_loop_multi_output.h200_opt.hlo")
    f = next(x for x in m.fusion_instructions() if x.name == "loop_add_fusion")
    assert not f.operands
    adj = machine_code.Adjustments(kernel="loop_loop_add_fusion", registers=8, blocks_per_sm=16, warps_per_block=4,
                                   mean_access_bytes=4.0, global_loads=0)
    assert machine_code.in_flight_bandwidth(adj, DEV, num_blocks=2022) is None
    plain = perf.estimate_fusion(f, H200)
    est = machine_code.apply(plain, adj, DEV)
    assert est.seconds == plain.seconds
    assert est.data.write_time == pytest.approx(333 * 777 * 4 / 4.8e12) and est.machine_code["global_loads"] == 0


@needs_corpus
def test_narrow_loads_slow_a_memory_bound_kernel_by_the_shortfall():
    m = fusegen.load(LAUNCH / "gpu_transpose_add.default.h200_opt.hlo")
    f = m.fusion_instructions()[0]
    stats = _stats("xla_transpose", "input_transpose_fusion_2", threads_per_block=128)
    base_est = perf.estimate_fusion(f, H200)
    narrow = attrs.evolve(stats, global_loads={2: 1}, global_stores={2: 1})
    est = perf.estimate_fusion(f, H200, sass=narrow)
    bw = est.machine_code["in_flight_bandwidth_gbps"] * 1e9
    assert bw < DEV.memory_bandwidth
    memory = base_est.data.read_time + base_est.data.write_time
    assert est.seconds - base_est.seconds == pytest.approx(memory * (DEV.memory_bandwidth / bw - 1), rel=1e-3)


def test_spills_add_local_memory_traffic_and_a_kernel_that_cannot_launch_is_infinite():
    m = fusegen.load("HloModule a\nf {\n p = f32[1048576] parameter(0)\n ROOT n = f32[1048576] negate(p)\n}\n"
                     "ENTRY e {\n p = f32[1048576] parameter(0)\n ROOT r = f32[1048576] fusion(p), kind=kLoop, calls=f\n}")
    f = m.entry.root
    stats = _stats("fusegen_block_level_maxnreg32", "block_level", num_warps=4)  # ptxas: 568 + 676 spill bytes
    assert stats.spill_bytes == 568 + 676
    plain = perf.estimate_fusion(f, H200)
    est = perf.estimate_fusion(f, H200, sass=stats)
    local = (568 + 676) * plain.threads_per_block * plain.num_blocks
    assert est.machine_code["spill_traffic_bytes"] == local
    assert est.machine_code["registers"] == 32
    added = est.machine_code["memory_us_added"] * 1e-6
    assert est.seconds - plain.seconds == pytest.approx(added, abs=1e-12)
    assert added >= local / (DEV.memory_bandwidth * 2.5)  # at least the spill traffic at L2 speed
    stuck = machine_code.apply(plain, attrs.evolve(machine_code.adjustments(stats, DEV, H200), blocks_per_sm=0), DEV)
    assert stuck.data.is_infinite and stuck.machine_code["cannot_launch"]


def test_a_given_tiling_that_xla_refuses_is_still_estimated_for_display_but_not_for_tuning():
    """XLA's model is infinite for a tile over 40% of a block's registers (a tiling search prunes it); a kernel
    that exists with that tiling gets an estimate and a note, while the tuner's cost model gives it none."""
    text = (Path(__file__).parents[1] / "data" / "perf_xla" / "softmax_register_spill.hlo").read_text()
    text = text.replace('{"fusion_backend_config": {"kind":"__triton"}}',
                        '{"fusion_backend_config": {"kind":"__triton","block_level_fusion_config":'
                        '{"output_tiles":[{"sizes":["2","16000"]}],"num_warps":"8"}}}')
    f = fusegen.load(text).entry.root
    shown = perf.estimate_fusion(f, H200)
    assert shown.seconds > 0 and shown.seconds != float("inf") and "refuses this tiling" in shown.note
    assert perf.estimate_fusion(f, H200, refuse_spills=True).data.is_infinite
    from fusegen.autotuning import cost_model
    from fusegen.autotuning.testing import FakeGemmBackend

    class Blocky(FakeGemmBackend):
        def apply_config(self, instr, config):  # keeps the fusion's block-level tiling
            pass

    e = cost_model.estimate_config(f, fusegen.codegen_backend.Config("b", {}), Blocky(), H200)
    assert e.seconds == float("inf") and e.model == "fusegen.perf"  # refused: ranked after every other config
    ok = fusegen.codegen_backend.Config("c", {})
    kept, _ = cost_model.rank_configs(f, [fusegen.codegen_backend.Config("b", {}), ok], {"b": Blocky()}, H200, 1)
    assert kept == [ok]  # the config without an estimate is timed; the refused one is not
