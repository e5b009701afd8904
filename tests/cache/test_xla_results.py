"""XLA's AutotuneResults text proto in and out of the cache (``cache export --format xla``, ``cache import``,
``xla_gpu_load_autotune_results_from`` / ``xla_gpu_dump_autotune_results_to``).

The example entry is the one XLA's own ``autotuner_util_test.cc`` loads (``kResultText``); the corpus dumps
are ``../shared/corpus/jax/xla_dump_h200/*.autotune_results.pbtxt`` (what ``jax`` on an H200 wrote).
"""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from fusegen.cache.format import CacheEntry, TuneResult
from fusegen.cache.key import CacheKey, canonical_hlo
from fusegen.cache.tiers import DirectoryTier
from fusegen.cache.xla_results import (XlaResultsError, entries_from_text, entries_to_text, parse_text_proto,
                                       read_file)
from fusegen.codegen_backend import Config

DEVICE = "CUDA: 8.0, Cores: 108, GPU clock: 1.41 GHz, Memory bandwidth: 1555 GB/s, L2 cache: 40 MB"
FUSED = ("{\\n  tmp_0 = f16[1,16,17,3]{3,2,1,0} parameter(0)\\n  tmp_1 = f16[16,51]{1,0} bitcast(f16[1,16,17,3]{3,2,1,0} "
         "tmp_0)\\n  tmp_2 = s8[16,17,3]{2,1,0} parameter(1)\\n  tmp_3 = s8[51,16]{0,1} bitcast(s8[16,17,3]{2,1,0} tmp_2)"
         "\\n  tmp_4 = f16[51,16]{0,1} convert(s8[51,16]{0,1} tmp_3)\\n  tmp_5 = f16[16,16]{1,0} dot(f16[16,51]{1,0} "
         "tmp_1, f16[51,16]{0,1} tmp_4), lhs_contracting_dims={1}, rhs_contracting_dims={0}\\n  ROOT tmp_6 = "
         "f16[1,16,16]{2,1,0} bitcast(f16[16,16]{1,0} tmp_5)\\n}")
TRITON = f"""version: 3
results {{
  device: "{DEVICE}"
  hlo: "{FUSED}"
  result {{
    run_time {{
      nanos: 31744
    }}
    triton {{
      block_m: 32
      block_n: 32
      block_k: 32
      split_k: 1
      num_stages: 1
      num_warps: 4
      num_ctas: 1
    }}
  }}
}}
"""
CUBLAS_HLO = ('ROOT tmp_2 = (f32[16,16]{1,0}, s8[4194304]{0}) custom-call(f32[16,8]{1,0} tmp_0, f32[8,16]{1,0} tmp_1), '
              'custom_call_target=\\"__cublas$lt$matmul\\"')
CUBLAS = f"""version: 3
results {{ device: "{DEVICE}" hlo: "{CUBLAS_HLO}"
  result {{ scratch_bytes: 4194304 run_time {{ nanos: 5120 }} gemm {{ algorithm: 7 autotune_workspace_size: 4194304 }} }} }}
"""
CUDNN = f"""version: 3
results {{ device: "{DEVICE}" hlo: "{FUSED}"
  result {{ scratch_bytes: 1024 run_time {{ seconds: 1 nanos: 500 }}
    algorithm {{ algo_id: 12 math_type: TENSOR_OP_MATH tuning_knobs {{ key: 2 value: 1 }} is_cudnn_frontend: true
                 workspace_size {{ value: 1024 }} }} }} }}
"""
XLA_HLO_MODULE = """HloModule t

fused {
  p0 = f16[1,16,17,3]{3,2,1,0} parameter(0)
  b0 = f16[16,51]{1,0} bitcast(p0)
  p1 = s8[16,17,3]{2,1,0} parameter(1)
  b1 = s8[51,16]{0,1} bitcast(p1)
  c1 = f16[51,16]{0,1} convert(b1)
  d = f16[16,16]{1,0} dot(b0, c1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  ROOT r = f16[1,16,16]{2,1,0} bitcast(d)
}

ENTRY e {
  a = f16[1,16,17,3]{3,2,1,0} parameter(0)
  b = s8[16,17,3]{2,1,0} parameter(1)
  ROOT f = f16[1,16,16]{2,1,0} fusion(a, b), kind=kCustom, calls=fused, backend_config={"fusion_backend_config":{"kind":"__triton_gemm"}}
}
"""


def _roundtrip(text: str) -> list[CacheEntry]:
    first = entries_from_text(text, "in.pbtxt", "fp")
    out, rep = entries_to_text(first.entries)
    assert rep.skipped == 0 and rep.notes == []
    second = entries_from_text(out, "out.pbtxt", "fp")
    assert [e.to_json() | {"created": 0} for e in second.entries] == [e.to_json() | {"created": 0} for e in first.entries]
    assert entries_to_text(second.entries)[0] == out  # and the text is stable
    return first.entries


def test_triton_result_round_trips_for_both_triton_gemm_kinds():
    a, b = _roundtrip(TRITON)
    assert [e.key.hlo.splitlines()[0] for e in (a, b)] == ["fusion kind=kCustom backend=__triton_gemm",
                                                           "fusion kind=kCustom backend=__triton_nested_gemm_fusion"]
    assert a.key.model == DEVICE and a.key.options_fingerprint == "fp"
    assert a.result.config == Config("triton", {"block_m": 32, "block_n": 32, "block_k": 32, "num_stages": 1,
                                                "num_warps": 4, "num_ctas": 1, "is_tma_allowed": False})
    assert (a.result.duration_us, a.result.scratch_bytes) == (31.744, 0)


def test_xla_key_text_is_fusegen_canonical_hlo():
    """XLA's key of the example fusion is exactly the fused computation fusegen's key holds."""
    from fusegen.hlo.parser import parse_module

    fusion = parse_module(XLA_HLO_MODULE, "t").entry.root
    (a, _) = entries_from_text(TRITON, "in", "fp").entries
    assert canonical_hlo(fusion) == a.key.hlo


def test_cublaslt_result_round_trips():
    (e,) = _roundtrip(CUBLAS)
    assert e.result.config == Config("cublaslt", {"algorithm": 7, "workspace_bytes": 4194304})
    assert e.key.hlo.startswith("ROOT tmp_2 = ") and '"__cublas$lt$matmul"' in e.key.hlo
    assert (e.result.duration_us, e.result.scratch_bytes) == (5.12, 4194304)


def test_cudnn_result_round_trips():
    (e,) = _roundtrip(CUDNN)
    assert e.key.hlo.startswith("fusion kind=kCustom backend=__cudnn$fusion\nfused_computation {")
    assert e.result.config == Config("cudnn", {"plan_id": 12, "workspace_bytes": 1024, "math_type": "TENSOR_OP_MATH",
                                               "tuning_knobs": {"2": 1}, "is_cudnn_frontend": True})
    assert e.result.duration_us == 1_000_000.5


def test_corpus_dumps_import_export_import(corpus):
    dumps = sorted((corpus / "jax" / "xla_dump_h200").glob("*.autotune_results.pbtxt"))
    assert dumps
    for p in dumps:
        rep = read_file(p, "fp")
        assert (rep.results, rep.entries, rep.notes) == (0, [], [])  # version 3, nothing tuned (CPU-less dumps)
        text, _ = entries_to_text(rep.entries)
        assert parse_text_proto(text, "x")[0].value == 3 and read_file(p, "fp").entries == []
        _roundtrip(p.read_text())


def test_unknown_fields_versions_and_unmapped_kinds_are_reported():
    text = TRITON.replace("split_k: 1", "split_k: 1\n      future_knob: 9").replace(
        "version: 3", "version: 3\nfuture_top { a: 1 }")
    rep = entries_from_text(text, "f.pbtxt", "")
    assert len(rep.entries) == 2 and len(rep.notes) == 2
    assert rep.notes[0].startswith("f.pbtxt:2: unknown field future_top")
    assert "f.pbtxt:15: unknown field results.result.triton.future_knob" in rep.notes[1]
    with pytest.raises(XlaResultsError, match=r"f.pbtxt:1: AutotuneResults version 2; fusegen reads version 3"):
        entries_from_text(TRITON.replace("version: 3", "version: 2"), "f.pbtxt", "")
    conv = f'version: 3\nresults {{ device: "d" hlo: "x" result {{ conv {{ algorithm: 1 }} }} }}\n'
    rep = entries_from_text(conv, "c.pbtxt", "")
    assert rep.entries == [] and rep.skipped == 1 and "result kind 'conv' has no fusegen backend" in rep.notes[0]
    failed = TRITON.replace("run_time {", "failure { kind: WRONG_RESULT msg: \"x\" }\n    run_time {")
    rep = entries_from_text(failed, "w.pbtxt", "")
    assert rep.entries == [] and "a failed result (WRONG_RESULT); entry skipped" in rep.notes[0]
    with pytest.raises(XlaResultsError, match=r"b.pbtxt:\d+: missing '}'"):
        entries_from_text(TRITON.rstrip().rstrip("}"), "b.pbtxt", "")


def test_host_entries_are_left_out_of_an_export_with_a_note():
    host = CacheEntry(CacheKey("dev", "fusion kind=kCustom backend=__triton_gemm\nfused_computation {\n}", 50, "fp"),
                      TuneResult(Config("host", {"impl": "numpy"}), "1", 3.0))
    text, rep = entries_to_text([host])
    assert text == "version: 3\n" and rep.skipped == 1 and "not expressible" in rep.notes[0]


def test_cli_import_export_import_and_load_dump_flags(tmp_path):
    from fusegen.cli.cache import cache as main

    src = tmp_path / "xla.pbtxt"
    src.write_text(TRITON + CUBLAS.replace("version: 3\n", ""))
    r = CliRunner().invoke(main, ["--cache-dir", str(tmp_path / "c1"), "import", str(src)])
    assert r.exit_code == 0, r.output
    assert "imported 3 entries from 2 XLA results" in r.output
    r = CliRunner().invoke(main, ["--cache-dir", str(tmp_path / "c1"), "export", "--format", "xla",
                                  str(tmp_path / "out.pbtxt")])
    assert r.exit_code == 0 and "3 entries (2 XLA results)" in r.output, r.output
    r = CliRunner().invoke(main, ["--cache-dir", str(tmp_path / "c2"), "import", str(tmp_path / "out.pbtxt")])
    assert r.exit_code == 0, r.output
    one = {e.digest: e.result.to_json() for _, e, _ in DirectoryTier(tmp_path / "c1").entries()}
    assert one == {e.digest: e.result.to_json() for _, e, _ in DirectoryTier(tmp_path / "c2").entries()}
    bad = tmp_path / "bad.pbtxt"
    bad.write_text("version: 9\n")
    r = CliRunner().invoke(main, ["--cache-dir", str(tmp_path / "c3"), "import", str(bad)])
    assert r.exit_code == 2 and "version 9" in r.output


def test_tune_loads_xla_results_and_dumps_them(tmp_path):
    """XLA's result for the example fusion is used by `tune` without tuning, and dumped back out."""
    from fusegen.cli.tune import tune
    from fusegen.device import get_device, model_string

    mod = tmp_path / "m.hlo"
    mod.write_text(XLA_HLO_MODULE)
    src = tmp_path / "in.pbtxt"
    src.write_text(TRITON.replace(DEVICE, model_string(get_device("h200"))))
    out = tmp_path / "out.pbtxt"
    flags = f"--xla_gpu_load_autotune_results_from={src} --xla_gpu_dump_autotune_results_to={out}"
    r = CliRunner().invoke(tune, [str(mod), "--json", "--backends", "triton", "--cost-model-top-k", "0"],
                           env={"XLA_FLAGS": flags})
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    (row,) = doc["instructions"]
    assert (row["step"], row["cache"]) == ("cache", "memory")
    assert row["winner"] == "triton:block_k=32,block_m=32,block_n=32,is_tma_allowed=false,num_ctas=1,num_stages=1,num_warps=4"
    assert doc["xla_results_loaded"]["entries"] == 2 and doc["xla_results_dumped"]["results"] == 1
    assert [e.result.config for e in read_file(out).entries] == [e.result.config for e in read_file(src).entries]


def test_run_autotune_loads_and_dumps_xla_results(tmp_path):
    """`run --autotune` with the two flags: XLA's result is applied (no tuning) and the run uses it."""
    from fusegen.cli.run import run
    from fusegen.device import get_device, model_string

    mod = tmp_path / "m.hlo"
    mod.write_text(XLA_HLO_MODULE)
    src, out = tmp_path / "in.pbtxt", tmp_path / "dump.pbtxt"
    src.write_text(TRITON.replace(DEVICE, model_string(get_device("h200"))))
    flags = f"--xla_gpu_load_autotune_results_from={src} --xla_gpu_dump_autotune_results_to={out}"
    r = CliRunner().invoke(run, [str(mod), "--autotune", "--json"], env={"XLA_FLAGS": flags})
    assert r.exit_code == 0, r.output[-2000:]
    doc = json.loads(r.stdout)
    (tuned,) = doc["autotune"]
    assert (tuned["cache"], tuned["duration_us"], doc["autotune_compiles"]) == ("memory", 31.744, 0)
    assert doc["status"] == "ok"
    assert [e.result.config for e in read_file(out).entries] == [e.result.config for e in read_file(src).entries]
