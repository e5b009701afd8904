"""``fusegen run --autotune``: tuning the corpus GEMM across the Triton configs without a GPU.

End to end on ``../shared/corpus/jax/gpu_mlp_bf16.default.h100_opt.hlo`` (one ``__triton_nested_gemm_fusion``,
bf16 [256,512] x [512,1024] as a batch-4 dot): the first run ranks XLA's 25 Hopper configs and the cuBLASLt call
(XLA's cuBLAS fallback) by the H200 performance model (the host backend is never a candidate for the H200's key) and
runs the winner; the cache entry and the record say the figure is an estimate; the same command again is served
from the cache directory without compiling; ``--measure-on-cpu`` times the cost model's top 4 Triton configs in
Triton's interpreter instead, recorded as CPU time. Also the pieces: the host codegen backend, Triton's
``apply_config`` on nested GEMM fusions, the top-k default.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from fusegen.autotuning.autotuner import CPU_DEFAULT_TOP_K, AutotuneOptions, Autotuner, default_top_k
from fusegen.autotuning.profiler import CpuWallTimeProfiler, CudaEventsProfiler
from fusegen.codegen.tuned_backend import EXECUTION_BACKEND_FIELD, tuned_execution_backend
from fusegen.codegen_backend import CompilationFailed, Config
from fusegen.device import get_device

SHARED = Path(__file__).parents[2].parent / "shared"
MLP = SHARED / "corpus" / "jax" / "gpu_mlp_bf16.default.h100_opt.hlo"
needs_mlp = pytest.mark.skipif(not MLP.exists(), reason=f"shared corpus module {MLP} is absent")
NO_GPU = not CudaEventsProfiler.availability()[0]


def _fusegen(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    e = dict(os.environ)
    e.pop("XLA_FLAGS", None)
    e.update(env or {})
    return subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True, env=e,
                          timeout=600)


def _json(p: subprocess.CompletedProcess) -> dict:
    assert p.returncode == 0, (p.returncode, p.stdout[-2000:], p.stderr[-4000:])
    return json.loads(p.stdout)


def _gemm(doc: dict) -> tuple[dict, dict]:
    (tuned,) = doc["autotune"]
    (fusion,) = [f for f in doc["fusions"] if f["name"] == "gemm_fusion_dot"]
    return tuned, fusion


def _parse_mlp():
    from fusegen.hlo.parser import parse_module

    m = parse_module(MLP.read_text(), str(MLP))
    return m, next(i for i in m.entry.instructions if i.name == "gemm_fusion_dot")


# ------------------------------------------------------------------------------------------------
# End to end (subprocesses: the second run must be served by the directory, not process memory)
# ------------------------------------------------------------------------------------------------

@needs_mlp
@pytest.mark.skipif(not NO_GPU, reason="on a GPU the candidates are measured with CUDA events, not estimated")
def test_run_autotune_ranks_by_estimate_without_a_gpu_then_serves_everything_from_the_cache(tmp_path):
    from fusegen import perf
    from fusegen.autotuning import cost_model
    from fusegen.plugin_manager import default_plugin_manager

    cache, rec = tmp_path / "cache", tmp_path / "records"
    cmd = ["run", str(MLP), "--autotune", "--autotune-cache-dir", str(cache), "--json"]
    first = _fusegen(*cmd, "--record", str(rec))
    doc = _json(first)
    tuned, fusion = _gemm(doc)
    # No GPU: every Triton config and the cuBLASLt call (XLA's cuBLAS fallback) are estimated (nothing timed, no
    # cut), the host is never a candidate.
    assert (tuned["cache"], tuned["cache_hit"], tuned["step"], tuned["error"]) == ("miss", False, "tuned", None)
    assert tuned["supported"] == tuned["configs"] == 26  # XLA's Hopper set and cuBLASLt; no host:impl=numpy
    module, gemm = _parse_mlp()
    backends = {b.name: b for b in default_plugin_manager().codegen_backends()}
    triton, lib = backends["triton"], backends["cublaslt_fission"]
    configs = triton.get_supported_configs(gemm) + lib.get_supported_configs(gemm)
    # the candidates are the configs XLA's model does not refuse (a tiling that would spill ranks last, unranked)
    refused = {c.name for c in configs if cost_model.estimate_config(gemm, c, backends[c.backend],
                                                                     get_device("h200")).seconds == float("inf")}
    assert {c["backend"] for c in tuned["candidates"]} == {"triton", "cublaslt_fission"}
    assert len(tuned["candidates"]) == 26 - len(refused) and not refused & {c["name"] for c in tuned["candidates"]}
    src = tuned["source"]
    assert (src["kind"], src["model"], src["model_version"]) == ("estimated", "fusegen.perf", perf.MODEL_VERSION)
    assert src["device"] == get_device("h200").model and src["label"] == f"estimated by fusegen.perf v{perf.MODEL_VERSION}"
    # The winner is XLA's PickBestConfig over the estimates (the fewest scratch bytes within 2 µs of the fastest: a
    # Triton config over cuBLASLt's 4 MiB workspace here), and each candidate's figure is fusegen.perf's.
    fastest = min(c["duration_us"] for c in tuned["candidates"])
    near = [c for c in tuned["candidates"] if c["duration_us"] <= fastest + 2.0]
    best = min(near, key=lambda c: (c["scratch_bytes"], c["duration_us"]))
    assert tuned["winner"] == best["name"] and tuned["duration_us"] == best["duration_us"]
    assert tuned["winner"].startswith("triton:")
    cfg = next(c for c in configs if c.name == tuned["winner"])
    assert cost_model.estimate_config(gemm, cfg, triton, get_device("h200")).seconds * 1e6 == \
        pytest.approx(tuned["duration_us"])
    assert doc["autotune_cache"]["writes_directory"] == 1
    (entry_file,) = cache.glob("*.json")
    body = json.loads(entry_file.read_text())
    assert body["format_version"] == 2 and body["result"]["source"]["kind"] == "estimated"
    assert fusion["emitter"] == "TritonGemmFusion" and fusion["status"] == "ok" and doc["status"] == "ok"
    assert "estimated by fusegen.perf" in first.stderr  # the summary table says where the time came from
    (record,) = sorted(rec.glob("*.json"))
    assert json.loads(record.read_text())["source"]["kind"] == "estimated"

    # The same command again: every instruction a cache hit, nothing compiled.
    again = _json(_fusegen(*cmd))
    tuned2, fusion2 = _gemm(again)
    assert all(t["cache_hit"] and t["cache"] == "directory" and t["step"] == "cache" for t in again["autotune"])
    assert (tuned2["compiled"], tuned2["candidates"], again["autotune_compiles"]) == (0, [], 0)
    assert tuned2["winner"] == tuned["winner"] and tuned2["source"]["kind"] == "estimated"

    # The cache directory from XLA_FLAGS is the same cache.
    env_run = _json(_fusegen("run", str(MLP), "--autotune", "--json", "--no-compile",
                             env={"XLA_FLAGS": f"--xla_gpu_per_fusion_autotune_cache_dir={cache}"}))
    assert [t["cache_hit"] for t in env_run["autotune"]] == [True] and env_run["autotune_compiles"] == 0

    # The record replays to the same winner.
    rep = _fusegen("tune", "--replay", str(record), "--json")
    assert json.loads(rep.stdout)["winner"] == tuned["winner"]


@needs_mlp
@pytest.mark.skipif(not NO_GPU, reason="--measure-on-cpu is for a machine without a GPU")
def test_measure_on_cpu_times_the_cost_models_top_k_in_the_interpreter_recorded_as_cpu_time(tmp_path):
    rec, cache = tmp_path / "records", tmp_path / "cache"
    doc = _json(_fusegen("run", str(MLP), "--autotune", "--measure-on-cpu", "--json", "--record", str(rec),
                         "--autotune-cache-dir", str(cache)))
    tuned, fusion = _gemm(doc)
    assert tuned["step"] == "tuned" and {c["backend"] for c in tuned["candidates"]} == {"triton"}
    # the cost model's best 4 (Triton's configs all have an estimate; refused ones are never timed)
    assert tuned["configs"] == CPU_DEFAULT_TOP_K and len(tuned["candidates"]) == CPU_DEFAULT_TOP_K
    assert tuned["source"]["kind"] == "cpu-interpreter" and "not a GPU figure" in tuned["source"]["label"]
    fastest = min(tuned["candidates"], key=lambda c: c["duration_us"])
    assert tuned["winner"] == fastest["name"]
    values = Config.from_json({"backend": "triton", "values": dict(
        kv.split("=") for kv in tuned["winner"].split(":", 1)[1].split(","))}).values
    bm, bn, warps = int(values["block_m"]), int(values["block_n"]), int(values["num_warps"])
    # The run's GEMM kernel is the winner's tiling: 4 batches x (256/bm) x (1024/bn) programs.
    # (then the compiled kernel's shared memory, as XLA's thunk launches a Triton fusion with it)
    smem = fusion["launch_dimensions"]["shared_memory_bytes"]
    assert fusion["launch"] == f"grid={4 * math.ceil(256 / bm) * math.ceil(1024 / bn)} warps={warps}" + \
        (f" smem={smem}B" if smem else "")
    assert (fusion["emitter"], fusion["status"], doc["status"]) == ("TritonGemmFusion", "ok", "ok")
    (entry_file,) = cache.glob("*.json")
    assert json.loads(entry_file.read_text())["result"]["source"]["kind"] == "cpu-interpreter"
    (record,) = rec.glob("*.json")
    body = json.loads(record.read_text())
    assert body["instruction"] == "gemm_fusion_dot" and body["key"] == tuned["key"]
    assert body["source"]["kind"] == "cpu-interpreter"
    assert {c["name"] for c in body["candidates"]} == {c["name"] for c in tuned["candidates"]}
    rep = _fusegen("tune", "--replay", str(record), "--json")
    assert json.loads(rep.stdout)["winner"] == tuned["winner"]


@needs_mlp
def test_the_host_backend_is_never_a_candidate_for_a_gpu_key(tmp_path):
    from fusegen.autotuning.autotuner import discover_backends

    # named on its own, it is refused with the reason; "-host" is accepted (it is out anyway)
    p = _fusegen("tune", str(MLP), "--retune", "--backends", "host", "--cache-dir", str(tmp_path))
    assert p.returncode == 2 and "not an XLA:GPU backend" in p.stderr and "CUDA: 9.0" in p.stderr, p.stderr
    t = Autotuner(discover_backends(), AutotuneOptions(xla_gpu_experimental_autotune_backends="-host"),
                  get_device("h200"))
    assert "host" not in {b.name for b in t.backends} and "host" in t.excluded
    module, gemm = _parse_mlp()
    assert all(c.backend != "host" for c in t.supported_configs(gemm))


def test_autotune_only_options_need_autotune(tmp_path):
    hlo = tmp_path / "m.hlo"
    hlo.write_text("HloModule m\nENTRY e {\n  ROOT p = f32[2] parameter(0)\n}\n")
    for extra in (["--record", str(tmp_path / "r")], ["--autotune-cache-dir", str(tmp_path / "c")],
                  ["--cost-model-top-k", "2"]):
        p = _fusegen("run", str(hlo), *extra)
        assert p.returncode == 2 and f"{extra[0]} needs --autotune" in p.stderr, p.stderr


# ------------------------------------------------------------------------------------------------
# Pieces
# ------------------------------------------------------------------------------------------------

def test_cpu_default_top_k():
    h200 = get_device("h200")
    assert default_top_k(CpuWallTimeProfiler(), h200, True) == 0  # an explicit profiler keeps every config
    assert default_top_k(None, "CUDA: 9.0, Cores: 132", True) == 0  # no description: no cost model
    assert default_top_k(None, h200, measure_on_cpu=True) == (CPU_DEFAULT_TOP_K if NO_GPU else 0)
    # estimating (the default without a GPU) needs no cut: an estimating run and a GPU run share cache keys
    assert default_top_k(None, h200) == 0
    t = Autotuner([], AutotuneOptions(), h200)
    assert t.options.cost_model_top_k == 0 and t.timing == ("estimate" if NO_GPU else "measure")
    assert t.fingerprint == Autotuner([], AutotuneOptions(cost_model_top_k=0), h200).fingerprint
    cpu = Autotuner([], AutotuneOptions(measure_on_cpu=True), h200)
    assert cpu.options.cost_model_top_k == default_top_k(None, h200, True)
    assert Autotuner([], AutotuneOptions(cost_model_top_k=0), h200).options.cost_model_top_k == 0
    # The resolved value is part of the cache key's options fingerprint.
    assert t.fingerprint != Autotuner([], AutotuneOptions(cost_model_top_k=7), h200).fingerprint


@needs_mlp
def test_host_codegen_backend_runs_the_reference_and_names_itself_in_the_backend_config():
    from fusegen.autotuning.config_runner import Candidate, ConfigRunner, fill_random
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen.plugin_manager import default_plugin_manager
    from fusegen.hlo.dtypes import numpy_dtype
    from fusegen.hlo.layout_util import from_physical
    from fusegen.runtime.executor import Executor
    from fusegen_plugins.backends.host import HOST_CONFIG, HostCodegenBackend

    module, gemm = _parse_mlp()
    host = HostCodegenBackend()
    assert (host.name, host.rank, host.can_produce_wrong_results()) == ("host", 1000, False)
    assert host.get_supported_configs(gemm) == [HOST_CONFIG] and HOST_CONFIG.name == "host:impl=numpy"
    assert host.get_supported_configs(gemm.operands[0]) == []  # a bitcast is not a fusion
    assert host.scratch_bytes(HOST_CONFIG) == 0
    with pytest.raises(CompilationFailed, match="one config"):
        host.compile(gemm, Config("host", {"impl": "other"}))
    # Through the config runner (shared physical buffers, red zones): the evaluator's values.
    runner = ConfigRunner(CpuWallTimeProfiler(), redzone_bytes=64)
    (res,) = runner.profile_all(gemm, [Candidate(HOST_CONFIG, host.compile(gemm, HOST_CONFIG), True)])
    assert res.failure is None and res.duration_us > 0
    rng = np.random.default_rng(0)  # the runner's seed: the same input values
    ops = []
    for o in gemm.operands:
        flat = np.empty(o.shape.numel, numpy_dtype(o.shape.element_type))
        fill_random(flat, rng)
        ops.append(from_physical(flat, o.shape))
    want = np.asarray(evaluate_instruction(gemm, ops), dtype=np.float32).reshape(-1)  # row-major layout
    np.testing.assert_array_equal(res.output[0], want)
    # apply_config routes the fusion to the host execution backend; the executor honours it.
    host.apply_config(gemm, HOST_CONFIG)
    assert tuned_execution_backend(gemm) == "host"
    assert gemm.backend_config["fusion_backend_config"]["kind"] == "__triton_nested_gemm_fusion"
    ex = Executor(module, get_device("h200"), default_plugin_manager(), compile_kernels=False)
    emitted, rep = ex.plan_fusion(gemm)
    assert emitted is None and (rep.decided_by, rep.backend, rep.emitter) == ("autotuner", "host", "-")
    out = ex.run_instruction(gemm, [ops[0], ops[1]])
    np.testing.assert_array_equal(np.asarray(out, np.float32).reshape(-1), want)
    assert ex.reports["gemm_fusion_dot"].status == "ok"


@needs_mlp
def test_triton_apply_config_replaces_the_nested_block_level_config():
    from fusegen.codegen.tuned_backend import set_execution_backend
    from fusegen_plugins.backends.triton import TritonBackend
    from fusegen_plugins.backends.triton_configs import from_values
    from fusegen_plugins.backends.triton_gemm_emitter import resolve_config

    module, gemm = _parse_mlp()
    old = gemm.backend_config["fusion_backend_config"]["block_level_fusion_config"]
    assert old["output_tiles"] == [{"sizes": ["1", "16", "8"]}]
    set_execution_backend(gemm, "host")  # an earlier host winner is overridden
    b = TritonBackend()
    cfg = Config("triton", {"block_m": 128, "block_n": 64, "block_k": 32, "num_stages": 3, "num_warps": 4,
                            "num_ctas": 1, "is_tma_allowed": True})
    b.apply_config(gemm, cfg)
    fbc = gemm.backend_config["fusion_backend_config"]
    assert fbc["kind"] == "__triton_nested_gemm_fusion" and EXECUTION_BACKEND_FIELD not in fbc
    assert fbc["triton_gemm_config"] == from_values(cfg.values).to_backend_config()
    blc = fbc["block_level_fusion_config"]
    assert blc["output_tiles"] == [{"sizes": ["1", "128", "64"]}]  # f32[4,256,1024]: batch tile 1
    assert (blc["num_warps"], blc["num_stages"], blc["num_ctas"], blc["is_tma_allowed"]) == ("4", 3, 1, True)
    assert blc["waves_per_eu"] == old["waves_per_eu"]  # fields the tiling does not set are kept
    dot = next(i for i in gemm.fused_computation.instructions if i.opcode == "dot")
    assert resolve_config(gemm, dot) == from_values(cfg.values)  # what the emitter uses is what was applied
    # The block-level config alone (block_k aside) gives the same tile: the two never disagree.
    only_blc = dict(fbc)
    del only_blc["triton_gemm_config"]
    gemm.attrs["backend_config"] = {**gemm.backend_config, "fusion_backend_config": only_blc}
    r = resolve_config(gemm, dot)
    assert (r.block_m, r.block_n, r.num_warps, r.num_stages) == (128, 64, 4, 3)
    # On a __triton_gemm fusion a stale block-level config is removed.
    gemm.attrs["backend_config"]["fusion_backend_config"] = {**only_blc, "kind": "__triton_gemm"}
    b.apply_config(gemm, cfg)
    fbc = gemm.backend_config["fusion_backend_config"]
    assert "block_level_fusion_config" not in fbc and fbc["triton_gemm_config"]["block_m"] == "128"


NOTRITON = SHARED / "corpus" / "jax" / "gpu_mlp_bf16.notritongemm.h100_opt.hlo"


@pytest.mark.skipif(not NOTRITON.exists(), reason=f"shared corpus module {NOTRITON} is absent")
@pytest.mark.skipif(not NO_GPU, reason="on a GPU cuBLASLt enumerates algorithms, so the call is tuned, not kept")
def test_retuning_keeps_a_configured_call_no_backend_can_tune_here(tmp_path):
    from fusegen.autotuning.autotuner import discover_backends
    from fusegen.autotuning.selection import AutotuneError
    from fusegen.hlo.parser import parse_module

    module = parse_module(NOTRITON.read_text(), str(NOTRITON))
    call = next(i for i in module.entry.instructions if i.opcode == "custom-call")
    before = json.dumps(call.backend_config, sort_keys=True)
    assert call.backend_config["gemm_backend_config"]["selected_algorithm"] == "0"
    opts = AutotuneOptions(retune_configured=True, xla_gpu_per_fusion_autotune_cache_dir=str(tmp_path))
    with Autotuner(discover_backends(), opts, get_device("h200")) as t:
        (rep,) = t.tune_module(module)
    assert (rep.name, rep.step, rep.error, rep.winner, rep.supported) == (call.name, "kept", None, None, 0)
    assert json.dumps(call.backend_config, sort_keys=True) == before and list(tmp_path.iterdir()) == []
    # Without a config to keep it is XLA's NotFound, as before.
    del call.backend_config["gemm_backend_config"]["selected_algorithm"]
    with Autotuner(discover_backends(), AutotuneOptions(retune_configured=True), get_device("h200")) as t:
        with pytest.raises(AutotuneError, match="No supported configs found for HLO"):
            t.tune_instruction(call)
