"""XLA's cuBLAS fallback as a tuning candidate, and Triton GEMM configs that fit as their kernels do (issue 45).

XLA's autotuner times cuBLASLt beside the Triton configs of a ``__triton_gemm`` fusion (the ``CUBLASLT_FISSION``
backend, ``xla_gpu_cublas_fallback``, default true); fusegen's ``cublaslt_fission`` backend is that candidate,
estimated without a GPU as the library call (and the fusions of the rest) by ``fusegen.perf``. Its win is written
into the fusion's backend config, cached as XLA records a cuBLAS pick for a fusion (a ``gemm`` result), run and
estimated as the call. The tiled model's 40%-of-registers rule no longer refuses XLA's 128x256 Hopper configs: a
GEMM fits as its kernel does (registers <= 255 a thread, checked against Triton's sm_90 compiles).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import fusegen
from fusegen import perf
from fusegen.autotuning import cost_model
from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner, discover_backends
from fusegen.autotuning.instructions import needs_config
from fusegen.codegen.tuned_backend import (EXECUTION_BACKEND_FIELD, LIBRARY_CALL_FIELD, library_call,
                                              tuned_execution_backend)
from fusegen.codegen_backend import Config
from fusegen.device import H100, get_device
from fusegen.perf import gemm_model
from fusegen.perf.dot_model import DotProblem, find_dot
from fusegen.plugin_manager import default_plugin_manager

DATA = Path(__file__).parents[1] / "data"
GEMM_4096 = DATA / "xla_gemm" / "gemm_4096_bf16.h100_opt.hlo"
MEASURED_4096_US = 176.0  # issue 45: XLA's best of Triton and cuBLAS for 4096^3 bf16 on an H100


def _backends() -> dict:
    return {b.name: b for b in default_plugin_manager().codegen_backends()}


def _gemm_module(m: int, n: int, k: int, dt: str, epilogue: str = ""):
    """A Triton GEMM fusion ``[m, k] x [k, n]``: fused by fusegen's pipeline, or, with ``epilogue`` (HLO lines
    after the dot ``d``, the last the root), written as XLA fuses an epilogue into a ``__triton_gemm`` fusion."""
    dot = f"{dt}[{m},{n}] dot(a, b), lhs_contracting_dims={{1}}, rhs_contracting_dims={{0}}"
    if not epilogue:
        mod = fusegen.load(f"HloModule g\nENTRY e {{\n  a = {dt}[{m},{k}] parameter(0)\n"
                           f"  b = {dt}[{k},{n}] parameter(1)\n  ROOT d = {dot}\n}}\n")
        fusegen.api.prepare([mod], fusegen.api.session(device=H100))
    else:
        lines = epilogue.rstrip("\n").split("\n")
        lines[-1] = "  ROOT " + lines[-1].strip()
        out = lines[-1].split("=")[1].split()[0]
        mod = fusegen.load(
            f"HloModule g\nf {{\n  a = {dt}[{m},{k}] parameter(0)\n  b = {dt}[{k},{n}] parameter(1)\n  d = {dot}\n"
            + "\n".join(lines) + f"\n}}\n\nENTRY e {{\n  a = {dt}[{m},{k}] parameter(0)\n  b = {dt}[{k},{n}] "
            f"parameter(1)\n  ROOT g = {out} fusion(a, b), kind=kCustom, calls=f, "
            'backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}\n}\n')
    (f,) = [x for x in mod.fusion_instructions() if find_dot(x) is not None]
    assert f.fusion_backend_kind == "__triton_gemm", f.fusion_backend_kind
    return mod, f


def test_tune_4096_cubed_bf16_picks_cublaslt_and_reports_its_estimate(tmp_path):
    res = fusegen.tune(str(GEMM_4096), device=H100, retune=True, cache_dir=str(tmp_path))
    (rep,) = res.instructions
    assert res.ok and res.timing == "estimate" and rep.step == "tuned"
    # XLA's 25 Hopper configs and the library call, as XLA's autotuner times them side by side
    assert rep.supported == rep.configs == 26
    assert {r.config.backend for r in rep.results} == {"triton", "cublaslt_fission"}
    assert rep.winner == "cublaslt_fission:algorithm=0,workspace_bytes=4194304"
    # the reported estimate is the best of all candidates, within 1.25x of the measurement (194 us vs 176)
    assert rep.duration_us == min(r.duration_us for r in rep.results if not r.failed)
    assert MEASURED_4096_US / 1.25 <= rep.duration_us <= MEASURED_4096_US * 1.25
    assert rep.scratch_bytes == 4 << 20
    src = rep.source
    assert (src["kind"], src["model"], src["model_version"], src["label"]) == (
        "estimated", "fusegen.perf", perf.MODEL_VERSION, f"estimated by fusegen.perf v{perf.MODEL_VERSION}")
    # cached as XLA records a cuBLAS pick for a fusion: the library call's config under the fusion's key
    (entry,) = tmp_path.glob("*.json")
    body = json.loads(entry.read_text())
    assert body["key"]["hlo"].startswith("fusion kind=kCustom backend=__triton_gemm")
    assert body["result"]["config"] == {"backend": "cublaslt_fission",
                                        "values": {"algorithm": 0, "workspace_bytes": 4194304}}
    assert body["result"]["source"]["label"] == src["label"] and body["result"]["candidates"] == 26
    # applied: the fusion runs and is estimated as the call; it no longer needs a config
    (f,) = res.tuned_modules[0].fusion_instructions()
    assert library_call(f) == {"backend": "cublaslt_fission", "algorithm": 0, "workspace_bytes": 4194304}
    assert tuned_execution_backend(f) == "cublaslt" and not needs_config(f)
    est = perf.estimate_fusion(f, H100)
    assert est.model == "library" and est.gemm["picked"] == "cublas"
    assert est.seconds * 1e6 == pytest.approx(rep.duration_us)
    # the same command again is served from the cache
    again = fusegen.tune(str(GEMM_4096), device=H100, retune=True, cache_dir=str(tmp_path))
    assert again.instructions[0].step == "cache" and again.instructions[0].winner == rep.winner


def test_without_the_cublas_fallback_only_triton_configs_compete(tmp_path):
    res = fusegen.tune(str(GEMM_4096), device=H100, retune=True, cache_dir=str(tmp_path / "off"),
                       xla_flags=["xla_gpu_cublas_fallback=false"])
    (rep,) = res.instructions
    assert rep.supported == rep.configs == 25 and {r.config.backend for r in rep.results} == {"triton"}
    assert rep.winner.startswith("triton:block_k=64,block_m=128,block_n=256,")  # no longer refused (below)
    assert 250 < rep.duration_us < 300  # 268 us: XLA's 128x256 tile, was 343.7 with 128x128 when refused
    (f,) = res.tuned_modules[0].fusion_instructions()
    assert LIBRARY_CALL_FIELD not in f.backend_config["fusion_backend_config"]
    # the flag is the backend left out: the same selection, the same cache keys as "-cublaslt_fission"
    dev = get_device("h100")
    off = Autotuner(discover_backends(), AutotuneOptions(xla_gpu_cublas_fallback=False), dev)
    minus = Autotuner(discover_backends(), AutotuneOptions(xla_gpu_experimental_autotune_backends="-cublaslt_fission"),
                      dev)
    on = Autotuner(discover_backends(), AutotuneOptions(), dev)
    assert "cublaslt_fission" not in {b.name for b in off.backends}
    assert "cublaslt_fission" in {b.name for b in on.backends}
    assert off.fingerprint == minus.fingerprint != on.fingerprint
    # --measure-on-cpu times kernels in the interpreter: the library call's CPU stand-in (numpy) is not timed
    cpu = Autotuner(discover_backends(), AutotuneOptions(measure_on_cpu=True), dev)
    assert cpu.timing != "cpu" or "cublaslt_fission" not in {b.name for b in cpu.backends}


def test_a_small_gemm_stays_a_triton_config_where_the_model_says_so(tmp_path):
    mod, f = _gemm_module(256, 256, 256, "bf16")
    with Autotuner(discover_backends(), AutotuneOptions(xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path)),
                   H100) as t:
        (rep,) = t.tune_module(mod)
    lib = next(r for r in rep.results if r.config.backend == "cublaslt_fission")
    best_triton = min((r for r in rep.results if r.config.backend == "triton"), key=lambda r: r.duration_us)
    # cuBLASLt is a candidate and its estimate is a hair faster, but within XLA's 2 us scratch window a config
    # without a workspace wins (PickBestConfig)
    assert lib.duration_us < best_triton.duration_us <= lib.duration_us + 2.0
    assert rep.winner == best_triton.name and rep.winner.startswith("triton:")
    assert library_call(f) is None and "triton_gemm_config" in f.backend_config["fusion_backend_config"]


def test_the_fission_is_the_library_call_and_fusions_of_the_rest():
    b = _backends()["cublaslt_fission"]
    assert (b.rank, b.library_fallback, b.modelled_by_fusegen, b.can_produce_wrong_results()) == (400, True, True,
                                                                                                   False)
    _, plain = _gemm_module(512, 256, 128, "f32")
    (cfg,) = b.get_supported_configs(plain)  # no GPU: algorithm 0 (cuBLASLt's default) with the 4 MiB workspace
    assert cfg == Config("cublaslt_fission", {"algorithm": 0, "workspace_bytes": 4 << 20})
    m = b.fissioned(plain, cfg)
    ops = [i.opcode for i in m.entry.instructions]
    assert ops == ["parameter", "parameter", "custom-call", "get-tuple-element"]
    call = m.entry.instructions[2]
    assert call.attrs["custom_call_target"] == "__cublas$lt$matmul"
    assert call.backend_config["gemm_backend_config"]["selected_algorithm"] == "0"
    from fusegen.perf.estimate import estimate_fission

    est = estimate_fission(m, H100)
    lib = gemm_model.library_gemm(DotProblem(1, 512, 256, 128, "f32", "f32", "f32"), H100)
    assert est.model == "library" and est.launches == 1 and est.seconds == pytest.approx(lib.seconds)
    assert cost_model.estimate_config(plain, cfg, b, H100).seconds == pytest.approx(lib.seconds)
    # an epilogue cuBLASLt does not fold (a sine) is a loop fusion after the call: one more launch, its time added
    _, epi = _gemm_module(512, 256, 128, "f32", "  r = f32[512,256] sine(d)\n")
    m2 = b.fissioned(epi, cfg)
    kinds = [(i.opcode, i.attrs.get("kind")) for i in m2.entry.instructions if i.opcode in ("fusion", "custom-call")]
    assert kinds == [("custom-call", None), ("fusion", "kLoop")]
    e2 = estimate_fission(m2, H100)
    loop = perf.estimate_fusion(next(i for i in m2.entry.instructions if i.opcode == "fusion"), H100)
    assert e2.launches == 2 and e2.seconds == pytest.approx(lib.seconds + loop.seconds + 1e-6)
    # a tiny dot stays with the classical emitters (XLA's GemmRewriter threshold): no supported config
    _, tiny = _gemm_module(4, 4, 4, "f32", "  r = f32[4,4] negate(d)\n")
    assert b.get_supported_configs(tiny) == [] and b.fissioned(tiny, cfg) is None


def test_a_fusion_tuned_to_cublaslt_runs_and_applies_like_any_winner():
    b = _backends()["cublaslt_fission"]
    mod, f = _gemm_module(64, 48, 32, "f32", "  c = f32[] constant(2)\n  bc = f32[64,48] broadcast(c), dimensions={}\n"
                                             "  r = f32[64,48] multiply(d, bc)\n")
    rng = np.random.default_rng(45)
    a, w = rng.standard_normal((64, 32), np.float32), rng.standard_normal((32, 48), np.float32)
    want = np.asarray(fusegen.run(mod, inputs=[a, w], compile=False).outputs[0])
    cfg = b.get_supported_configs(f)[0]
    b.validate_config(f, cfg)
    exe = b.compile(f, cfg)  # without a GPU: the reference evaluator, what a cuBLAS call runs on here
    assert exe is not None
    b.apply_config(f, cfg)
    once = json.dumps(f.backend_config, sort_keys=True)
    b.apply_config(f, cfg)
    assert json.dumps(f.backend_config, sort_keys=True) == once  # idempotent
    fbc = f.backend_config["fusion_backend_config"]
    assert fbc[EXECUTION_BACKEND_FIELD] == "cublaslt" and fbc[LIBRARY_CALL_FIELD]["backend"] == "cublaslt_fission"
    r = fusegen.run(mod, inputs=[a, w], compile=False)
    assert r.status == "ok"
    np.testing.assert_allclose(np.asarray(r.outputs[0]), want, rtol=1e-5, atol=1e-5)
    # a Triton config applied afterwards takes the fusion back
    t = _backends()["triton"]
    t.apply_config(f, t.get_supported_configs(f)[0])
    fbc = f.backend_config["fusion_backend_config"]
    assert EXECUTION_BACKEND_FIELD not in fbc and LIBRARY_CALL_FIELD not in fbc


def test_xla_results_carry_a_cublas_pick_for_a_fusion_as_a_gemm_result():
    from fusegen.cache.xla_results import entries_from_text, entries_to_text

    text = ('version: 3\nresults {\n  device: "CUDA: 9.0, Cores: 132"\n  hlo: "{\\n  tmp_0 = bf16[64,64]{1,0} '
            'parameter(0)\\n}"\n  result { scratch_bytes: 4194304 run_time { nanos: 7000 } '
            'gemm { algorithm: 3 autotune_workspace_size: 4194304 } }\n}\n')
    rep = entries_from_text(text, "x.pbtxt")
    assert rep.skipped == 0 and len(rep.entries) == 2  # both Triton GEMM kinds, as a Triton result
    assert {e.result.config for e in rep.entries} == {Config("cublaslt_fission", {"algorithm": 3,
                                                                                  "workspace_bytes": 4194304})}
    assert {e.key.hlo.split("\n")[0] for e in rep.entries} == {
        "fusion kind=kCustom backend=__triton_gemm", "fusion kind=kCustom backend=__triton_nested_gemm_fusion"}
    out, back = entries_to_text(rep.entries)
    assert back.results == 1 and "gemm {" in out and "algorithm: 3" in out and "run_time" in out


# ------------------------------------------------------------------------------------------------ register rule

#: Triton's sm_90 compiles of fusegen's 4096^3 GEMM kernels (``ptxas -v`` through fusegen.codegen.sass): (type, bm,
#: bn, bk, warps) -> spills. The model's registers (gemm_model.registers) must be over 255 exactly where they spill.
COMPILED = {("bf16", 128, 256, 64, 8): False, ("bf16", 256, 128, 64, 8): False, ("bf16", 128, 256, 128, 8): False,
            ("bf16", 128, 128, 64, 4): False, ("bf16", 128, 256, 32, 4): True,
            ("f32", 128, 256, 64, 8): False, ("f32", 256, 128, 64, 8): False, ("f32", 128, 128, 32, 4): False,
            ("f32", 128, 128, 16, 4): False, ("f32", 128, 64, 64, 4): False, ("f32", 64, 16, 256, 4): False,
            ("f32", 128, 128, 64, 4): True, ("f32", 64, 128, 128, 4): True, ("f32", 128, 64, 128, 4): True,
            ("f32", 128, 256, 128, 8): True}


@pytest.mark.parametrize("case", sorted(COMPILED), ids=lambda c: "-".join(map(str, c)))
def test_gemm_registers_are_over_255_exactly_where_triton_spills(case):
    dt, bm, bn, bk, warps = case
    p = DotProblem(1, 4096, 4096, 4096, dt, dt, dt)
    regs = gemm_model.registers(p, gemm_model.GemmKernel(bm, bn, bk, 3, warps), 32 * warps)
    assert (regs > 255) == COMPILED[case], regs


def test_xlas_128x256_configs_are_estimated_not_refused_by_the_40_percent_rule():
    from fusegen.perf.tiled import estimate_tiled_fusion, gemm_config

    _, f = _gemm_module(4096, 4096, 4096, "bf16")
    t = _backends()["triton"]
    wide = Config("triton", {"block_m": 128, "block_n": 256, "block_k": 64, "num_stages": 3, "num_warps": 8,
                             "num_ctas": 1, "is_tma_allowed": False})
    e = cost_model.estimate_config(f, wide, t, H100)
    assert math.isfinite(e.seconds) and 250e-6 < e.seconds < 300e-6
    spills = Config("triton", {"block_m": 128, "block_n": 256, "block_k": 32, "num_stages": 4, "num_warps": 4,
                               "num_ctas": 1, "is_tma_allowed": False})
    assert cost_model.estimate_config(f, spills, t, H100).seconds == math.inf  # 256 accumulators a thread: spills
    too_big = Config("triton", {"block_m": 128, "block_n": 256, "block_k": 128, "num_stages": 3, "num_warps": 8,
                                "num_ctas": 1, "is_tma_allowed": True})
    assert cost_model.estimate_config(f, too_big, t, H100).seconds == math.inf  # 288 KiB of shared memory
    # XLA's own tiled model (its tests) keeps DoesTileFitInRegisters: the 128x256 tile is over 40% of 64K registers
    assert estimate_tiled_fusion(f, H100, gemm_config(f, wide.values), gemm="xla").is_infinite


def test_a_128x256_bf16_gemm_kernel_compiles_for_sm90_without_spilling():
    from fusegen.codegen.sass import kernel_sass_stats, tools_unavailable_reason

    why = tools_unavailable_reason(90)
    if why:
        pytest.skip(why)
    _, f = _gemm_module(4096, 4096, 4096, "bf16")
    cfg = Config("triton", {"block_m": 128, "block_n": 256, "block_k": 64, "num_stages": 3, "num_warps": 8,
                            "num_ctas": 1, "is_tma_allowed": False})
    (ks,) = _backends()["triton"]._emit(f, cfg).kernels
    st = kernel_sass_stats(ks)
    assert st.registers <= 255 and st.spill_bytes == 0 and st.tensor_core_instructions > 0
    p = DotProblem(1, 4096, 4096, 4096, "bf16", "bf16", "bf16")
    assert gemm_model.registers(p, gemm_model.GemmKernel(128, 256, 64, 3, 8), 256) <= 255
