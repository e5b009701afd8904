"""fusegen's hardware GEMM model (fusegen.perf.gemm_model) and cuBLASLt as a candidate.

The anchors are a measurement from issue 45 (a 4096^3 bf16 GEMM runs in 176 µs on an H100, 780 TFLOP/s) and the
public cuBLAS H100 figures of triton-lang/triton#2339 (2048 x 512..8192 x 512..8192 f16); the fixed costs come
from XLA's measured H100 small-transfer time. The other checks are worked by hand from the model's stated terms
(waves, L2 reuse, pipelining, split-K) or are bounds any GEMM obeys (the roofline, monotonicity in every
dimension, of one kernel, of cuBLASLt's best and of the config the tuner picks).
"""

from __future__ import annotations

import itertools

import pytest

import fusegen
from fusegen.device import H100, H200
from fusegen.perf import dot_model, gemm_model
from fusegen.perf.dot_model import DotProblem
from fusegen.perf.gemm_model import GemmKernel, estimate_gemm, library_gemm

MEASURED_4096_US = 176.0  # issue 45: 4096^3 bf16 on an H100 SXM

GEMM_4096 = """HloModule gemm4096
ENTRY e {
  a = bf16[4096,4096]{1,0} parameter(0)
  b = bf16[4096,4096]{1,0} parameter(1)
  ROOT d = bf16[4096,4096]{1,0} dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}
"""


def bf16(m, n, k, b=1):
    return DotProblem(b, m, n, k, "bf16", "bf16", "bf16")


def test_4096_cubed_bf16_within_1_25x_of_the_h100_measurement():
    lib = library_gemm(bf16(4096, 4096, 4096), H100)
    assert MEASURED_4096_US / 1.25 <= lib.seconds * 1e6 <= MEASURED_4096_US * 1.25
    assert lib.bound == "compute"  # not memory-bound: the tiles' re-reads come from L2
    # the module estimate (what explain reports): XLA's best of its Triton config and cuBLASLt
    doc = fusegen.explain(GEMM_4096, device=H100).to_json()
    (row,) = doc["fusions"]
    e = row["estimate"]
    assert e["gemm"]["picked"] == "cublas" and e["gemm"]["library_us"] == pytest.approx(lib.seconds * 1e6)
    assert e["kernel_us"] == pytest.approx(min(e["gemm"]["library_us"], e["gemm"]["triton_us"]))
    assert MEASURED_4096_US / 1.25 <= e["kernel_us"] <= MEASURED_4096_US * 1.25
    assert doc["estimated_us"]["us"] == pytest.approx(e["us"])


def test_4096_cubed_triton_configs_and_xlas_default_tile_read_each_operand_once_from_dram():
    from fusegen_plugins.backends.triton_configs import HOPPER_CONFIGS

    p = bf16(4096, 4096, 4096)
    times = {c: estimate_gemm(p, GemmKernel(c[0], c[1], c[2], c[3], c[4], tma=c[6]), H100).seconds
             for c in HOPPER_CONFIGS}
    # the library's cluster multicast halves the shared operand's L2 traffic: no Triton config of XLA's beats it
    assert library_gemm(p, H100).seconds <= min(times.values())
    # XLA's default 64x64x32 tile: A and B read from DRAM once each (B, 32 MiB, stays in the 37.5 MiB of usable L2
    # beside a 64-row band of A), the output written once: 3 x 32 MiB, not a re-read per tile. Its time is the L2
    # traffic of 4096 tiles x 128 K steps x (64x32 + 32x64) bf16 at 6.65 TB/s.
    d = estimate_gemm(p, GemmKernel(64, 64, 32, 1, 4), H100)
    assert d.dram_bytes == 3 * 4096 * 4096 * 2 and d.bound == "l2"
    l2_bytes = 4096 * 128 * (64 * 32 + 32 * 64) * 2
    assert d.l2_bytes == l2_bytes and d.seconds == pytest.approx(l2_bytes / 6.65e12, rel=0.05)


def test_estimates_stay_above_the_roofline_and_grow_with_every_dimension():
    sizes = (256, 512, 1024, 2048, 4096)
    for dt, peak in (("bf16", 989e12), ("f32", 495e12)):
        eb = 2 if dt == "bf16" else 4
        lib, tri = {}, {}
        for m, n, k in itertools.product(sizes, repeat=3):
            p = DotProblem(1, m, n, k, dt, dt, dt)
            # no GEMM beats the datasheet tensor-core peak, nor moves its operands and result faster than HBM
            floor = max(2 * m * n * k / peak, (m * k + k * n + m * n) * eb / 3.35232e12)
            lib[m, n, k] = library_gemm(p, H100).seconds
            tri[m, n, k] = estimate_gemm(p, GemmKernel(128, 128, 32, 3, 4, tma=True), H100).seconds
            assert floor < lib[m, n, k] <= tri[m, n, k] * 1.5 and floor < tri[m, n, k]
        for t in (lib, tri):
            for (m, n, k), v in t.items():
                for bigger in ((2 * m, n, k), (m, 2 * n, k), (m, n, 2 * k)):
                    if bigger in t:
                        assert v <= t[bigger] * 1.0001, ((m, n, k), bigger)
        big = lib[4096, 4096, 4096]
        assert 2 * 4096 ** 3 / big > 0.6 * peak  # large GEMMs run near the tensor-core rate


def test_wave_quantization_one_tile_past_a_full_wave_costs_a_second_round():
    # one 128x256 tile per SM (its 4-stage pipeline fills the shared memory): 132 tiles are one round, 133 two
    k = GemmKernel(128, 256, 64, 4, 8, tma=True)
    full = estimate_gemm(bf16(128 * 132, 256, 4096), k, H100)
    tail = estimate_gemm(bf16(128 * 133, 256, 4096), k, H100)
    assert (full.occupancy, full.tiles_per_sm, tail.tiles_per_sm) == (1, 1, 2)
    fixed = gemm_model.KERNEL_FLOOR_S + gemm_model.DRAM_LATENCY_S  # paid once a kernel, not once a round
    assert tail.seconds - fixed == pytest.approx(2 * (full.seconds - fixed), rel=0.02)


def test_main_loop_step_is_the_slowest_of_tensor_cores_l2_and_exposed_latency():
    """One K step of a 128x128x64 bf16 block on an H100, worked by hand from the model's constants."""
    k = GemmKernel(128, 128, 64, 1, 4, tma=False)
    m, n, kk = 128 * 132, 128, 64 * 10  # one tile per SM, 10 K steps
    t = estimate_gemm(bf16(m, n, kk), k, H100)
    per_sm_peak = 989e12 * gemm_model.SUSTAINED_TENSOR_FRACTION / 132
    mma = 2 * 128 * 128 * 64 / per_sm_peak
    l2 = (128 * 64 * 2 + 64 * 128 * 2) / (gemm_model.L2_BYTES_PER_CLOCK_PER_SM * 1.98e9)
    # both operands fit in L2: each byte comes from DRAM once; but one round of blocks runs its K loop in step, so
    # every load waits on DRAM (a cold line, or one a neighbour of the same round has in flight)
    dram = (m * kk + kk * n + m * n) * 2
    latency = gemm_model.DRAM_LATENCY_S
    # one stage, one block per SM: every step waits for its load, computes, pays the cp.async loop overhead
    lat = latency + mma + dot_model.LEGACY_LOOP_OVERHEAD_S
    assert lat > max(mma, l2) > mma and t.bound == "latency"
    epilogue = 128 * 128 * 2 / (3_352_320_000_000 * gemm_model.DRAM_EFFICIENCY / 132)
    assert t.dram_bytes == dram
    # and once a kernel: the launch-to-retire floor and the last stores' DRAM round trip
    fixed = gemm_model.KERNEL_FLOOR_S + gemm_model.DRAM_LATENCY_S
    assert t.seconds == pytest.approx(10 * lat + gemm_model.DRAM_LATENCY_S + epilogue + fixed, rel=1e-9)
    # pipelined (3 stages, TMA, wgmma) the load latency hides behind the next steps, two loads in flight, and the
    # TMA loop overhead behind the asynchronous MMAs: a step is the slowest of the MMA, the L2 traffic and half the
    # DRAM latency; this short K leaves the grid bound by its DRAM bytes
    piped = estimate_gemm(bf16(m, n, kk), GemmKernel(128, 128, 64, 3, 4, tma=True), H100)
    assert dot_model.TMA_LOOP_OVERHEAD_S < mma
    main = 10 * max(mma, l2, latency / 2) + gemm_model.DRAM_LATENCY_S + epilogue
    dram_s = dram / (3_352_320_000_000 * gemm_model.DRAM_EFFICIENCY)
    assert piped.main_s == pytest.approx(main, rel=1e-9) and dram_s > main and piped.bound == "dram"
    assert piped.seconds == pytest.approx(dram_s + fixed, rel=1e-9) and piped.seconds < t.seconds
    # one such block alone: its L2 bytes at one SM's 64 B/clock, its steps the MMA's (the loop overhead does not add
    # to a wgmma step); with warps that form no warpgroup (mma.sync, XLA's 0.63 derate) it adds
    alone = estimate_gemm(bf16(128, 128, 64 * 10), GemmKernel(128, 128, 64, 3, 4, tma=True), H100)
    l2_one = (128 * 64 * 2 + 64 * 128 * 2) / (gemm_model.L2_BYTES_PER_CLOCK_ONE_SM * 1.98e9)
    assert max(l2_one, latency / 2) < mma and alone.bound == "compute"
    assert alone.main_s == pytest.approx(10 * mma + gemm_model.DRAM_LATENCY_S + 128 * 128 * 2 / (
        3_352_320_000_000 * gemm_model.DRAM_EFFICIENCY), rel=1e-9)
    sync = estimate_gemm(bf16(128, 128, 64 * 10), GemmKernel(128, 128, 64, 3, 6, tma=True), H100)
    assert sync.main_s == pytest.approx(alone.main_s + 10 * (mma / 0.63 - mma + dot_model.TMA_LOOP_OVERHEAD_S),
                                        rel=1e-9)


def test_l2_reuse_and_grouped_raster():
    """8192 x 8192 x 8192 bf16, 128x128 tiles: B (128 MiB) never fits in L2. Row-major (XLA's Triton order) reads B
    once per band of one tile row (64 bands); a grouped raster of 8 rows once per 8 rows (8 bands)."""
    p = bf16(8192, 8192, 8192)
    mib = 1 << 20
    row = gemm_model.dram_bytes(p, GemmKernel(128, 128, 64, 3, 4), H100, resident=1)
    grouped = gemm_model.dram_bytes(p, GemmKernel(128, 128, 64, 3, 4, group_m=8), H100, resident=1)
    a = b = c = 128 * mib
    # a wave of 132 tiles covers two 64-tile bands of row-major order: the two share their sweep of B
    assert row == a + 32 * b + c
    assert grouped == a + 8 * b + c
    # both operands fit in L2 (50 MiB, 37.5 usable): each is read once, whatever the order
    small = bf16(2048, 2048, 2048)
    assert gemm_model.dram_bytes(small, GemmKernel(64, 64, 32, 1, 4), H100, resident=8) == 3 * 2048 * 2048 * 2


def test_split_k_fills_the_sms_for_a_long_k():
    p = bf16(256, 256, 65536)  # 4 output tiles of 128x128: 128 SMs idle without split-K
    one = estimate_gemm(p, GemmKernel(128, 128, 64, 3, 4, tma=True), H100)
    split = estimate_gemm(p, GemmKernel(128, 128, 64, 3, 4, split_k=16, tma=True), H100)
    assert split.seconds < one.seconds / 4
    assert split.tiles == 64 and split.extra_launches == 1  # the f32 partials are summed by a second kernel
    # the partials: 16 x 256 x 256 f32 written by the GEMM, then read back with the bf16 output written
    assert split.written_bytes == 256 * 256 * 2
    assert split.dram_bytes >= 16 * 256 * 256 * 4 + 256 * 256 * 2
    assert library_gemm(p, H100).kernel.split_k > 1  # the library splits K too


def test_h200_is_no_slower_than_h100_and_a_tile_that_cannot_fit_is_infinite():
    for m, n, k in ((4096, 4096, 4096), (8192, 1024, 8192), (64, 8192, 8192)):
        assert library_gemm(bf16(m, n, k), H200).seconds <= library_gemm(bf16(m, n, k), H100).seconds * 1.0001
    huge = estimate_gemm(bf16(4096, 4096, 4096), GemmKernel(256, 256, 128, 4, 8), H100)  # 512 KiB of stages
    assert huge.is_infinite
    with pytest.raises(dot_model.DotUnsupported):
        estimate_gemm(bf16(0, 16, 16), GemmKernel(16, 16, 16), H100)


def test_the_tuner_ranks_triton_configs_alone_and_xlas_model_stays_for_xlas_tests():
    """tune's cost model never sees cuBLAS's time (every config would tie); estimate_tiled_fusion's default is XLA's
    dot cost model (tests/perf/test_perf_model_xla.py), which still calls the default tile memory-bound at 698 µs."""
    from fusegen.autotuning.cost_model import estimate_seconds
    from fusegen.perf.tiled import estimate_tiled_fusion, gemm_config

    m = fusegen.load(GEMM_4096)
    fusegen.api.prepare([m], fusegen.api.session(device=H100))
    (f,) = m.fusion_instructions()
    small = {"block_m": 64, "block_n": 64, "block_k": 32, "num_stages": 1, "num_warps": 4}
    big = {"block_m": 128, "block_n": 128, "block_k": 64, "num_stages": 3, "num_warps": 4, "is_tma_allowed": True}
    p = bf16(4096, 4096, 4096)
    assert estimate_seconds(f, big, H100) == pytest.approx(
        estimate_gemm(p, GemmKernel(128, 128, 64, 3, 4, tma=True), H100).seconds)
    assert estimate_seconds(f, big, H100) < estimate_seconds(f, small, H100)
    xla = estimate_tiled_fusion(f, H100, gemm_config(f, small))
    assert xla.exec_time == estimate_tiled_fusion(f, H100, gemm_config(f, small), gemm="xla").exec_time
    assert round(xla.exec_time * 1e6 + 1) == 698  # with the 1 µs launch, the figure issue 45 quotes
    assert xla.bytes_read == 4096 * 128 * (64 * 32 + 32 * 64) * 2  # XLA's model: every tile's reads as traffic
    hw = estimate_tiled_fusion(f, H100, gemm_config(f, small), gemm="hardware")
    assert hw.bytes_read == 2 * 4096 * 4096 * 2  # the GEMM model: each operand from DRAM once


# triton-lang/triton#2339 (2023): cuBLAS on an H100, f16, TFLOP/s -> µs (triton.testing.do_bench: CUDA events around
# each call, L2 flushed before it)
PUBLIC_CUBLAS_H100_F16 = {(2048, 512, 512): 102.612946, (2048, 1024, 1024): 243.148053,
                          (2048, 2048, 2048): 515.231193, (2048, 4096, 4096): 613.742094,
                          (2048, 8192, 8192): 721.600670}


@pytest.mark.parametrize("mnk", sorted(PUBLIC_CUBLAS_H100_F16))
def test_public_cublas_h100_figures_within_1_25x(mnk):
    m, n, k = mnk
    measured = 2 * m * n * k / (PUBLIC_CUBLAS_H100_F16[mnk] * 1e12)
    est = library_gemm(DotProblem(1, m, n, k, "f16", "f16", "f16"), H100).seconds
    assert measured / 1.25 <= est <= measured * 1.25, (mnk, est * 1e6, measured * 1e6)


def test_fixed_costs_come_from_xlas_measured_small_transfer():
    """A kernel's floor: XLA's measured H100 time for a transfer of 1 MiB or less (every such row of its bandwidth
    table takes 5.0-5.5 µs) less the transfer's load and store round trips; no GEMM kernel is faster than that
    transfer, and the smallest ones sit a K loop above it."""
    small = [b / (g * (1 << 30)) for b, g in dot_model.HBM_TABLE_H100 if b <= 1 << 20]
    assert all(abs(t / gemm_model.SMALL_TRANSFER_S - 1) < 0.06 for t in small)
    assert gemm_model.KERNEL_FLOOR_S == pytest.approx(gemm_model.SMALL_TRANSFER_S - 2 * gemm_model.DRAM_LATENCY_S)
    assert 3.5e-6 < gemm_model.KERNEL_FLOOR_S < 4.5e-6
    for dt in ("bf16", "f32"):
        t = library_gemm(DotProblem(1, 256, 256, 256, dt, dt, dt), H100).seconds
        assert gemm_model.SMALL_TRANSFER_S < t < 8e-6
        tri = estimate_gemm(DotProblem(1, 256, 256, 256, dt, dt, dt), GemmKernel(64, 64, 64, 3, 4, tma=True), H100)
        assert gemm_model.SMALL_TRANSFER_S < tri.seconds < 8e-6
    # a Triton split-K GEMM is two kernels: the reduction pays a small transfer's time besides its bytes
    p = bf16(256, 256, 65536)
    one = estimate_gemm(p, GemmKernel(128, 128, 64, 3, 4, split_k=16, tma=True), H100, reduction_kernel=False)
    two = estimate_gemm(p, GemmKernel(128, 128, 64, 3, 4, split_k=16, tma=True), H100)
    assert two.seconds - one.seconds == pytest.approx(gemm_model.SMALL_TRANSFER_S)


def _tune_pick(b, m, n, k, dt):
    """The best Triton config `fusegen tune --device h100` finds without a GPU, computed from the GEMM model
    directly: the fastest of XLA's Hopper Triton configs (a config that does not fit an SM, over 255 registers a
    thread or its stages over the shared memory, is infinite; the tiled model's 40%-of-registers rule for a tile
    no longer applies to GEMMs, so XLA's 128x256 configs compete)."""
    from fusegen_plugins.backends.triton_configs import HOPPER_CONFIGS

    p = DotProblem(b, m, n, k, dt, dt, dt)
    return min(estimate_gemm(p, GemmKernel(c[0], c[1], c[2], c[3], c[4], tma=c[6]), H100).seconds
               for c in HOPPER_CONFIGS)


def test_the_tuners_figure_is_the_gemm_models_and_grows_with_every_dimension():
    """The Triton configs' figure in `tune` is the picked config's estimate (tests/autotuning/test_run_autotune.py checks it is
    the cost model's); here it is the GEMM model's best Triton config, and it grows with batch, M, N and K (with the
    cuBLAS fallback, tests/autotuning/test_cublas_fallback.py, tune reports the better of it and the library call)."""
    from fusegen.autotuning import cost_model
    from fusegen.plugin_manager import default_plugin_manager

    triton = next(b for b in default_plugin_manager().codegen_backends() if b.name == "triton")
    for b, m, n, k, dt in ((1, 256, 256, 256, "bf16"), (2, 512, 1024, 256, "f32")):
        bd, dims = (f"{b},", "lhs_batch_dims={0}, rhs_batch_dims={0}, ") if b > 1 else ("", "")
        c = 2 if b > 1 else 1
        mod = fusegen.load(f"HloModule g\nENTRY e {{\n  a = {dt}[{bd}{m},{k}] parameter(0)\n"
                           f"  b = {dt}[{bd}{k},{n}] parameter(1)\n  ROOT d = {dt}[{bd}{m},{n}] dot(a, b), {dims}"
                           f"lhs_contracting_dims={{{c}}}, rhs_contracting_dims={{{c - 1}}}\n}}\n")
        fusegen.api.prepare([mod], fusegen.api.session(device=H100))
        (f,) = mod.fusion_instructions()
        order, est = cost_model.rank_configs(f, triton.get_supported_configs(f), {"triton": triton}, H100, top_k=0)
        assert est[order[0].name].seconds == pytest.approx(_tune_pick(b, m, n, k, dt), rel=1e-9)
    # the small end: a 256^3 GEMM is a small transfer plus a short K loop, not the ~1.4 µs of a roofline
    assert 5e-6 < _tune_pick(1, 256, 256, 256, "bf16") < 8e-6
    sizes = (256, 1024, 4096)
    for dt in ("bf16", "f32"):
        t = {(b, m, n, k): _tune_pick(b, m, n, k, dt)
             for b, m, n, k in itertools.product((1, 2, 4), sizes, sizes, sizes)}
        for (b, m, n, k), v in t.items():
            for bigger in ((2 * b, m, n, k), (b, 4 * m, n, k), (b, m, 4 * n, k), (b, m, n, 4 * k)):
                if bigger in t:
                    assert v <= t[bigger] * 1.0001, ((b, m, n, k), bigger, dt)


def test_the_grid_benchmark_reports_the_tuners_figure_and_the_bound():
    """``benchmarks/gemm_model_grid.py`` (its summary is in docs/perf-model.md): a fixed sample of issue 45's grid,
    both types, and per shape the tuner's figure, cuBLASLt's and the roofline-plus-3-µs bound."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "gemm_model_grid.py"
    spec = importlib.util.spec_from_file_location("fusegen_bench_gemm_model_grid", path)
    g = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(g)
    shapes = g.grid(200)
    assert len(shapes) == len(set(shapes)) == 200 and {s[4] for s in shapes} == {"bf16", "f32"}
    assert len(g.grid(0)) == 4 * 5 ** 3 * 2
    row = g.estimate(1, 256, 256, 256, "bf16")
    assert row["triton"] == pytest.approx(_tune_pick(1, 256, 256, 256, "bf16"), rel=1e-9)
    assert row["library"] == pytest.approx(library_gemm(bf16(256, 256, 256), H100).seconds)
    assert row["explain"] == min(row["triton"], row["library"])
    # tune's pick: cuBLASLt is a hair faster at 256^3, but within 2 us the config without a workspace wins
    assert row["library"] < row["triton"] < row["library"] + 2e-6
    assert row["pick"] == "triton" and row["tune"] == pytest.approx(row["triton"], rel=1e-12)
    big = g.estimate(1, 4096, 4096, 4096, "bf16")  # the library call is tune's pick and figure: 194 us vs 176
    assert big["pick"] == "cublaslt_fission" and big["tune"] == pytest.approx(big["library"], rel=1e-12)
    assert big["tune"] < 1.25 * 176e-6
    line = g.tune_vs_explain([row, big])
    assert line.endswith("above 1.25x 0 of 2; tune picks cuBLASLt for 1, a Triton config for 1"), line
    assert row["bound"] == pytest.approx(max(2 * 256 ** 3 / 989e12, 3 * 256 * 256 * 2 / 3.35e12) + 3e-6)
    assert any(line.startswith("| tune | all | 1 |") for line in g.summary([row], "tune"))
