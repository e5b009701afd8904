"""``benchmarks/emitters.py``: the ``--quick`` run prints and writes one row per emitter with real compile numbers,
and the pieces of its GPU part that do not need a GPU (XLA's module for a fusion, the device buffer binding, the
CUPTI trace reader, the bytes a fusion moves) give the right values on the CPU."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

from conftest import REPO, corpus_path

BENCH = REPO / "benchmarks" / "emitters.py"


def _bench():
    spec = importlib.util.spec_from_file_location("fusegen_bench_emitters", BENCH)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


E = _bench()


def _candidate(rel: str, name: str | None = None):
    """A :class:`Candidate` for fusion ``name`` (default: the first) of corpus file ``rel``."""
    from fusegen.hlo.parser import parse_module
    from fusegen.passes.pipeline import optimize_if_needed
    from fusegen.runtime.executor import Executor

    path = corpus_path(*rel.split("/"))
    m = parse_module(path.read_text(), rel)
    optimize_if_needed(m)
    inst = next(i for i in m.fusion_instructions() if name is None or i.name == name)
    emitted, rep = Executor(m, compile_kernels=False).plan_fusion(inst)
    assert emitted is not None and emitted.kernels, rep.reason
    return E.Candidate(rel, inst, rep.kind, emitted.emitter, emitted, 0.0)


def test_quick_run_prints_a_row_per_emitter_with_compile_numbers(tmp_path, corpus):
    out = tmp_path / "emitters.json"
    no_gpu = E.gpu_unavailable_reason()
    cmd = [sys.executable, str(BENCH), "--quick", "--json", str(out)] + (["--gpu"] if no_gpu else [])
    # fusegen's built-ins plus the bundled example plugin (its kInputSlices row), whatever else is installed
    env = dict(os.environ, TRITON_CACHE_DIR=str(tmp_path / "tc"), FUSEGEN_LOAD_PLUGINS="input-slices")
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=REPO, env=env)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    report = json.loads(out.read_text())
    rows = {(r["kind"], r["emitter"]): r for r in report["cpu"]["rows"]}
    # every emitter row the issue names is reached by the corpus and compiled for sm_90
    for kind, emitter in E.ROWS:
        r = rows[(kind, emitter)]
        assert 1 <= r["fusions"] <= 2 and r["kernels"] >= r["fusions"], (kind, emitter, r)
        assert 0 < r["compile_s_median"] <= r["compile_s_max"] < 120, (kind, emitter, r)
        assert r["ptx_bytes_median"] > 1000 and r["num_warps"] and set(r["num_warps"]) <= {1, 2, 4, 8, 16, 32}
        ok = [d for d in r["detail"] if not d["error"]]
        assert all(d["ptx_bytes"] > 0 and d["cubin_bytes"] > 0 for d in ok)
        # the printed table has this row with its numbers
        line = next((ln for ln in p.stdout.splitlines() if f" {emitter} " in ln and f" {kind} " in ln), None)
        assert line is not None, emitter
        cells = [c.strip() for c in line.strip("│ ").split("│")]
        assert f"{r['compile_s_median']:.2f}" == cells[4] and f"{r['compile_s_max']:.2f}" == cells[5]
    # tiled transposes stage their tile in shared memory; a row reduction of many rows does too
    for emitter in ("TransposeFusion", "PackedTranspose"):
        assert rows[("kTranspose", emitter)]["shared_bytes_max"] >= 4096
    assert rows[("kLoop", "LoopFusion")]["shared_bytes_max"] == 0
    if no_gpu:
        assert report["gpu"] == {"skipped": no_gpu}
        assert f"GPU part skipped: {no_gpu}" in p.stdout.replace("\n", "")


def test_xla_module_of_a_fusion_matches_the_evaluator_on_jaxlib_cpu(corpus):
    pytest.importorskip("jaxlib")
    # a layout bitcast (gpt12), a {0,1} operand layout, an in-place DUS (donated operand), a scatter
    cases = [("jax/gpt12.h200_opt.hlo", "input_transpose_fusion.1"),
             ("xla/modules/backends__gpu__codegen__emitters__tests__reduce_column_small__input_layout.hlo", None),
             ("xla/cases/lit_shared__dynamic_update_slice__simple.hlo", None),
             ("xla/cases/lit_gpu__scatter__add.hlo", None)]
    for rel, name in cases:
        c = _candidate(rel, name)
        text = E.standalone_module_text(c.fusion)
        assert " bitcast(" not in text and "metadata=" not in text
        got = E.xla_cpu_check(c)
        assert got["status"] == "ok", (rel, got)


def test_bitcast_becomes_transpose_reshape_transpose():
    from fusegen.hlo.parser import parse_module

    m = parse_module("""
HloModule t
fused {
  p = f32[4,6]{0,1} parameter(0)
  ROOT b = f32[3,8]{1,0} bitcast(p)
}
ENTRY e {
  p = f32[4,6]{0,1} parameter(0)
  ROOT f = f32[3,8]{1,0} fusion(p), kind=kLoop, calls=fused
}
""", "t")
    (b,) = [i for i in m.entry.root.fused_computation.instructions if i.opcode == "bitcast"]
    lines = E._bitcast_lines(b)
    # physical order of p is [6,4] (dim 1 major); reinterpreted as [3,8] row-major: no last transpose
    assert [n for n, _ in lines] == ["b.fg_phys", "b"]
    assert "f32[6,4] transpose(%p), dimensions={1,0}" in lines[0][1]
    assert "f32[3,8] reshape(%b.fg_phys)" in lines[1][1]
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    from fusegen.hlo.layout_util import bitcast

    expect = bitcast(x, b.operands[0].shape, b.shape)
    np.testing.assert_array_equal(np.ascontiguousarray(x.T).reshape(3, 8), expect)


@pytest.mark.parametrize("rel,name", [
    ("xla/cases/lit_shared__dynamic_update_slice__simple.hlo", None),  # output aliases operand 0
    ("xla/cases/lit_gpu__reduce_row__side_output.hlo", None),  # two output leaves
    ("xla/cases/lit_gpu__scatter__add.hlo", None),  # atomics into the aliased operand
    ("jax/gpt12.h200_opt.hlo", "input_transpose_fusion.1"),  # bf16 storage, shared-memory tiles
    ("jax/launch/new_sort_small.h200_opt.hlo", "fusion.3"),  # multi-launch sort: scalar launches, scratch
])
def test_device_buffer_binding_runs_in_the_interpreter(rel, name, corpus):
    from fusegen.evaluator.evaluator import evaluate_instruction

    c = _candidate(rel, name)
    ops = E.fusion_inputs(c.fusion)
    ref = evaluate_instruction(c.fusion, ops)
    dev = E.FusegenOnDevice(c.emitted, c.fusion, ops, xp=np, interpret=True)
    dev.run()
    ok, err = E.check_outputs(c.fusion, dev.outputs(), ref)
    assert ok, (rel, err)


def test_trace_segments_split_runs_at_the_flush_kernel():
    jp = pytest.importorskip("jax.profiler")
    # two runs: flush, 2 kernels (+ an H2D copy that is not the kernel's) ; XLA Ops repeats a kernel
    proto = """planes {
  id: 1
  name: "/device:GPU:0"
  lines { id: 1 name: "Stream #7(Compute)" timestamp_ns: 1000
    events { metadata_id: 1 offset_ps: 0 duration_ps: 60000000 }
    events { metadata_id: 2 offset_ps: 61000000 duration_ps: 4000000 }
    events { metadata_id: 3 offset_ps: 66000000 duration_ps: 2500000 }
    events { metadata_id: 1 offset_ps: 100000000 duration_ps: 60000000 }
    events { metadata_id: 4 offset_ps: 150000000 duration_ps: 90000000 }
    events { metadata_id: 2 offset_ps: 161000000 duration_ps: 5000000 }
    events { metadata_id: 3 offset_ps: 167000000 duration_ps: 3000000 }
  }
  lines { id: 2 name: "XLA Ops" timestamp_ns: 1000
    events { metadata_id: 2 offset_ps: 61000000 duration_ps: 4000000 }
  }
  event_metadata { key: 1 value { id: 1 name: "fg_l2_flush" } }
  event_metadata { key: 2 value { id: 2 name: "loop_add_fusion" } }
  event_metadata { key: 3 value { id: 3 name: "loop_mul_fusion" } }
  event_metadata { key: 4 value { id: 4 name: "MemcpyH2D" } }
}
planes { id: 2 name: "/host:CPU" }
"""
    segs = E.trace_segments(jp.ProfileData.from_text_proto(proto))
    assert segs == [(7.5, 2), (9.0, 2)]


def test_fusion_bytes_count_the_update_region_of_in_place_outputs(corpus):
    dus = _candidate("xla/cases/lit_shared__dynamic_update_slice__simple.hlo")
    assert dus.emitted.output_aliases == {0: 0}
    # updates f32[5,6] + two s32 starts read; the f32[5,6] region of the aliased f32[20,30] read and written
    assert E.fusion_bytes(dus) == 120 + 4 + 4 + 2 * 120
    rows = _candidate("xla/cases/lit_gpu__reduce_row__side_output.hlo")
    f = rows.fusion
    expect = sum(E.shape_bytes(o.shape) for o in f.operands) + E.shape_bytes(f.shape)
    assert E.fusion_bytes(rows) == expect > 0


def test_reduce_init_parameters_get_the_combiner_identity(corpus):
    c = _candidate("xla/cases/lit_gpu__reduce_row__side_output_unsigned.hlo")
    ops = E.fusion_inputs(c.fusion)
    # u32 add: the init operand (parameter 1) is 0, so XLA folding it in any number of times agrees
    assert np.asarray(ops[1]).dtype == np.uint32 and int(ops[1]) == 0
    assert np.asarray(ops[0]).shape == (8, 2048)


def test_gpu_tables_render_notes_with_hlo_shapes_verbatim():
    from rich.console import Console

    gpu = {"device": "test", "runs": 3, "xla_skipped": "jax has no CUDA backend [cuda12]", "budget_skipped": [],
           "fusions": [{"fusion": "x.hlo:%f", "emitter": "LoopFusion", "bytes": 2_000_000, "fusegen_ok": True,
                        "xla_ok": False, "fusegen_gbps": 1000.0, "xla_gbps": 500.0, "ratio": 2.0, "xla_method": "cupti",
                        "note": "XLA: f32[4] vs s32[4]"}],
           "rows": [{"kind": "kLoop", "emitter": "LoopFusion", "fusions": 1, "fusegen_ok": 1, "xla_ok": 0,
                     "fusegen_gbps_median": 1000.0, "xla_gbps_median": 500.0, "ratio_median": 2.0,
                     "ratio_geomean": 2.0}]}
    con = Console(record=True, width=200)
    E.print_gpu_tables(con, gpu)
    text = con.export_text()
    assert "f32[4] vs s32[4]" in text and "[cuda12]" in text
    assert re.search(r"LoopFusion\s.*1000\s.*500\s.*2\.00", text)


def test_flush_kernel_compiles_for_sm90():
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fusegen.codegen import triton_runtime
    from fusegen.codegen.kernel import KernelSource

    fn = triton_runtime.load_kernel(KernelSource(E.FLUSH_KERNEL, E.FLUSH_SOURCE, E.FLUSH_KERNEL, ()))
    ck = triton.compile(ASTSource(fn=fn, signature={"ptr": "*i32", "n": "i32", "BLOCK": "constexpr"},
                                  constexprs={"BLOCK": 4096}),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
    ptx = ck.asm["ptx"]
    assert f".entry {E.FLUSH_KERNEL}" in ptx and "st.global" in ptx


def test_xla_run_path_donates_in_place_operands_on_jaxlib_cpu(corpus):
    """The GPU part's XLA path (compile, fresh donated arguments per run, profiler session) on the CPU client."""
    jax = pytest.importorskip("jax")
    from fusegen.evaluator.evaluator import evaluate_instruction

    c = _candidate("xla/cases/lit_shared__dynamic_update_slice__simple.hlo")
    ops = E.fusion_inputs(c.fusion)
    ref = evaluate_instruction(c.fusion, ops)
    exe, fresh, ok, note = E._xla_prepare(c, ops, ref, warmup=2, platform_name="cpu")
    assert ok and note == ""
    args = [fresh() for _ in range(3)]
    with E._Cupti() as prof:
        outs = [jax.block_until_ready(exe.execute(a)) for a in args]
    # the operand was donated (aliased in place, XLA's input_output_alias), the others were not
    assert all(a[0].is_deleted() and not a[1].is_deleted() for a in args)
    for out in outs:  # every run starts from its own copy of the donated operand
        assert E.check_outputs(c.fusion, [np.asarray(o) for o in out], ref)[0]
    assert prof.segments() == []  # no GPU plane on the CPU


def test_sort_benchmark_runs_and_reports_within_budget(tmp_path):
    out = tmp_path / "sort.json"
    p = subprocess.run([sys.executable, str(REPO / "benchmarks" / "sort.py"), "--n", "4096", "--repeat", "1",
                        "--json", str(out)], capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert "fusegen evaluator" in p.stdout and "numpy stable argsort" in p.stdout
    d = json.loads(out.read_text())
    assert d["n"] == 4096 and d["within_budget"] and d["seconds"]["fusegen evaluator"] > 0


def _load(name: str):
    spec = importlib.util.spec_from_file_location(f"fusegen_bench_{name}", REPO / "benchmarks" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def test_sass_benchmark_on_a_gemm_module(tmp_path, corpus, capsys):
    """``benchmarks/ptx_vs_xla.py`` on ``gpu_mlp_bf16.default`` (a Triton GEMM and a loop): XLA's side as its own
    PTX says, the derived figures and the summary counts recomputed from the rows."""
    from fusegen.codegen import sass, sass_text

    if (why := sass.tools_unavailable_reason()) is not None:
        pytest.skip(f"ptxas/cuobjdump cannot run: {why}")
    P = _load("ptx_vs_xla")
    module = "gpu_mlp_bf16.default"
    assert P.main(["--module", module, "--jobs", "1", "--cache-dir", str(tmp_path), "--kernels", "--markdown"]) == 0
    printed = capsys.readouterr().out
    res = P.compare(module_filter=module, jobs=1, cache_dir=tmp_path, log=lambda *a: None)  # cache hits
    rows = {r["kernel"]: r for r in res["rows"]}
    assert set(rows) == {"gemm_fusion_dot", "loop_multiply_fusion"} and all("ratios" in r for r in rows.values())
    gemm, loop = rows["gemm_fusion_dot"], rows["loop_multiply_fusion"]
    assert (gemm["kind"], gemm["xla_kind"], loop["kind"]) == ("kTriton.gemm", "kTriton.gemm", "kLoop")
    ptx = sass_text.ptx_module_of(corpus_path("jax", "launch", f"{module}.xla.ptx").read_text(), "gemm_fusion_dot")
    assert gemm["xla"]["tensor_core_instructions"] == len(re.findall(r"\bmma\.sync\.", ptx)) == 8
    # LAUNCH.tsv: grid 8192 x 64 threads; the output bf16[8,128,1024] (1 Mi elements)
    assert gemm["xla"]["threads"] == 8192 * 64 and gemm["output_elements"] == 8 * 128 * 1024
    x = gemm["xla"]
    assert x["mem_insts_per_output"] == x["global_memory_instructions"] * x["threads"] / gemm["output_elements"]
    assert gemm["ratios"]["registers"] == gemm["fusegen"]["registers"] / x["registers"]
    # fusegen's loop launches XLA's grid and block
    assert loop["launch_equal"] and loop["fusegen_launch"]["grid"] == loop["xla_launch"]["grid"]
    a = res["summary"]["all"]
    assert a["kernels"] == 2 and a["failed"] == 0 and a["tensor_cores_xla"] == 1
    assert a["tensor_cores_fusegen"] == int(gemm["fusegen"]["tensor_core_instructions"] > 0)
    assert a["registers_over_1_25"] == sum(r["ratios"]["registers"] > 1.25 for r in rows.values())
    assert a["narrower"] == sum(r["fusegen"]["mean_global_access_bytes"] < r["xla"]["mean_global_access_bytes"]
                                for r in rows.values())
    assert f"| kTriton.gemm | 1 | 0 | {a['tensor_cores_fusegen']}/1 |" in printed
    assert f"tensor cores where XLA uses them: {a['tensor_cores_fusegen']}/1" in printed
    assert "gemm_fusion_dot" in printed and "loop_multiply_fusion" in printed


def test_launch_pairing_of_a_multi_launch_sort(corpus):
    """XLA's ``sort_N``, ``sort_N__1``, ... get fusegen's launches in order after its preparation kernel."""
    import attrs

    from fusegen.codegen.kernel import EmittedFusion

    L = _load("launch_rows")
    rows, left = L.read_rows(L.SHARED_LAUNCH, "new_sort_small")
    assert [r["kernel_name"] for r in rows] == ["sort_40_1", "sort_28_1", "sort_20_1", "sort_13_1"]
    assert {x["reason"] for x in left} == {"kCopy thunk (no kernel)"}
    (ln,) = [x for x in L.plan_launches(L.SHARED_LAUNCH, rows[:1], log=lambda *a: None)]
    assert ln.kind == "kSort" and ln.failure is None and ln.how == "primary kernel"
    prep, step = attrs.evolve(ln.kernel, name="prep"), attrs.evolve(ln.kernel, name="steps",
                                                                   scalar_launches=((0,), (1,), (2,)))
    emitted = EmittedFusion("SortFusion", (prep, step), primary=1)
    three = [dict(rows[0], kernel_name=n) for n in ("sort_40_1", "sort_40_1__1", "sort_40_1__2")]
    assert [(k.name, how) for k, how in L.pair_launches(three, emitted)] == [
        ("steps", "launch 1 of 3"), ("steps", "launch 2 of 3"), ("steps", "launch 3 of 3")]
    # counts that do not agree: by launch dimensions, else the primary kernel
    two = three[:2]
    assert all(k.name == "steps" for k, _ in L.pair_launches(two, emitted))


def _gpu_check():
    from importlib.machinery import SourceFileLoader

    loader = SourceFileLoader("fusegen_gpu_check", str(REPO / "scripts" / "gpu-check"))
    spec = importlib.util.spec_from_loader(loader.name, loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def test_gpu_check_dry_run_plans_every_gemm_and_says_no_gpu(tmp_path, corpus):
    p = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu-check"), "--dry-run", "--no-sass", "--out",
                        str(tmp_path)],
                       capture_output=True, text=True, timeout=600, cwd=REPO)
    assert p.returncode == 3, p.stdout[-2000:] + p.stderr[-2000:]
    assert "no GPU (--dry-run given); dry run only, nothing timed -> exit 3" in p.stdout
    report = json.loads((tmp_path / "gpu-check-report.json").read_text())
    assert report["skipped"] == "no GPU: --dry-run given" and report["ok"] is False
    gemms = report["fusions_planned"]["kTriton/TritonGemmFusion"]
    # every dtype pair of the held-out-style GEMMs, and XLA's bf16 MLP GEMM of the launch corpus
    for name in ("gemm_bf16_bf16", "gemm_f8e4m3_f8e4m3", "gemm_s8_s8_s32", "gemm_f16_f16", "gemm_bf16_s4"):
        assert any(f"launch_extra/{name}.h200_opt.hlo:" in g for g in gemms), name
    assert any("launch/gpu_mlp_bf16.default.h200_opt.hlo:%gemm_fusion_dot" in g for g in gemms)
    assert len(gemms) == len(set(gemms))
    for row in ("kLoop/LoopFusion", "kReduction/RowReductionFusion", "kTranspose/TransposeFusion", "kSort/SortFusion"):
        assert 1 <= len(report["fusions_planned"][row]) <= 2, row


def test_gpu_check_rows_from_a_gpu_run(corpus, capsys):
    """The GPU half's arithmetic on a run's numbers (made up here: no GPU): GEMM TFLOP/s from the dot's shape,
    the model's estimate against fusegen's CUPTI time, the >= 0.9x counts."""
    G = _gpu_check()
    c = _candidate("jax/launch/gpu_mlp_bf16.default.h200_opt.hlo", "gemm_fusion_dot")
    (dot,) = [i for i in c.fusion.fused_computation.instructions if i.opcode == "dot"]
    lhs, rhs = dot.operands
    k = lhs.shape.dimensions[dot.attrs["lhs_contracting_dims"][0]]
    assert G.dot_flops(c.fusion) == 2 * dot.shape.numel * k == 2 * 8 * 128 * 1024 * k
    base = {"fusion": c.label, "kind": "kTriton", "emitter": "TritonGemmFusion", "bytes": 1, "fusegen_ok": True,
            "xla_ok": True, "fusegen_events_us": 12.0, "fusegen_cupti_us": 10.0, "xla_us": 8.0, "xla_method": "cupti",
            "ratio": 0.8, "note": ""}
    loop = dict(base, fusion="x.hlo:%loop", kind="kLoop", emitter="LoopFusion", ratio=0.95, xla_method="wall",
                fusegen_cupti_us=None)
    rows = G.report_rows({"fusions": [base, loop]}, {("kTriton", "TritonGemmFusion"): [c]}, {c.label: 14.0})
    g, lp = rows
    assert g["fusegen_us"] == 10.0 and g["estimate_over_measured"] == 1.4
    assert g["fusegen_tflops"] == pytest.approx(G.dot_flops(c.fusion) / 10e-6 / 1e12)
    assert lp["fusegen_us"] == 12.0 and "fusegen_tflops" not in lp and lp["estimate_us"] is None
    G.print_report(rows, None)
    out = capsys.readouterr().out
    assert "emitters: median 0.95, 1/1 >= 0.9x" in out and "GEMMs: median 0.80, 0/1 >= 0.9x" in out
    assert "model estimate within 1.5x of the measured time: 1/1" in out


def test_sass_benchmark_explains_shared_memory_it_cannot_match():
    """``shared_difference``: XLA's padded R x (C + 1) tiles (the launch corpus's transposes 4096 / 4224 bytes and
    column reductions 8192 / 8320) and a block-level XLA kernel's extra layout conversion through shared memory
    (gpu_softmax's triton_softmax_2: 18 STS + 16 LDSM + 2 LDS, 2048 bytes, against fusegen's reduction scratch of 16)
    are explained, and so are a tiled sort's packed keys (8 bytes an element where XLA holds every operand) and an
    int8 GEMM's tiles XLA stages 16 deep for its K-32 IMMA (z_i8_mm: 512 bytes, fusegen's padded 768);
    other differences are not."""
    P = _load("ptx_vs_xla")

    def row(kind, ours, xla, ours_ops=None, xla_ops=None, emitter=None):
        return {"kind": kind, "emitter": emitter, "fusegen": {"shared_bytes": ours, "shared_ops": ours_ops or {}},
                "xla": {"shared_bytes": xla, "shared_ops": xla_ops or {}}}

    assert "32-column" in P.shared_difference(row("kTranspose", 4096, 4224))
    assert "+64 B" in P.shared_difference(row("kTranspose", 2048, 2112))
    assert "64-column" in P.shared_difference(row("kReduction", 8192, 8320, emitter="ColumnReductionFusion"))
    assert "128-column" in P.shared_difference(row("kReduction", 16384, 16512, emitter="ColumnReductionFusion"))
    # a row reduction's cross-warp scratch, 32 warps a row: XLA's 33 elements (x_rowsum_long: 128 / 132)
    assert "32 warps a row" in P.shared_difference(row("kReduction", 128, 132, emitter="RowReductionFusion"))
    assert P.shared_difference(row("kReduction", 8192, 8320, emitter="RowReductionFusion")) is None
    softmax = row("kTriton.block", 16, 2048, {"STS": 2, "LDS": 2}, {"STS": 18, "LDSM": 16, "LDS": 2})
    assert "18 STS, 18 LDS/LDSM" in P.shared_difference(softmax)
    # not explained: a row reduction's scratch (64 / 24), a sort's (8192 / 10240), fusegen's tile wider than XLA's,
    # a block-level kernel with XLA's scratch but no extra conversion
    assert P.shared_difference(row("kReduction", 64, 24)) is None
    assert P.shared_difference(row("kSort", 8192, 10240)) is None  # no launch: no tile to read the bytes by

    def sort_row(ours, xla, threads):
        return {**row("kSort", ours, xla), "xla_launch": {"grid": [4, 1, 1], "threads": [threads, 1, 1]}}

    # new_sort_small: sort_28_1 (bf16 + 2 x s32, 1024-element tile), sort_40_1 (f32 + 2 x s32), sort_20_1 (one warp)
    assert "(10 B an element)" in P.shared_difference(sort_row(8192, 10240, 256))
    assert "(12 B an element)" in P.shared_difference(sort_row(32768, 49152, 1024))
    assert "warp shuffles" in P.shared_difference(sort_row(0, 1024, 32))
    # not explained: bytes that are not one s64 key an element (a comparator network's carried tensors), no
    # shared memory on a block of more than one warp
    assert P.shared_difference(sort_row(16384, 10240, 256)) is None
    assert P.shared_difference(sort_row(0, 10240, 256)) is None
    assert P.shared_difference(row("kTranspose", 4224, 4096)) is None
    assert P.shared_difference(row("kTriton.block", 16, 32, {"STS": 2, "LDS": 2}, {"STS": 2, "LDS": 2})) is None

    def gemm_row(ours, xla, ops, f_loads, x_loads):
        r = row("kTriton.gemm", ours, xla)
        r["fusegen"].update(tensor_core_ops=dict(ops), global_loads=f_loads)
        r["xla"].update(tensor_core_ops=dict(ops), global_loads=x_loads)
        return r

    # z_i8_mm's gemm_fusion_dot (block_k 16): both IMMA.16832 x 2, fusegen's 32-deep padded tiles 768 B against
    # XLA's 16-deep 512 B, every load twice XLA's width
    imma = {"IMMA.16832.S8.S8.SAT": 2}
    i8 = P.shared_difference(gemm_row(768, 512, imma, {"4": 2, "8": 2}, {"2": 2, "4": 2}))
    assert "repeated in both K halves" in i8 and "+256 B" in i8
    # not explained: loads as wide as XLA's, more loads, an HMMA GEMM, fusegen's shared memory smaller
    assert P.shared_difference(gemm_row(768, 512, imma, {"4": 2, "2": 2}, {"2": 2, "4": 2})) is None
    assert P.shared_difference(gemm_row(768, 512, imma, {"4": 2, "8": 4}, {"2": 2, "4": 2})) is None
    assert P.shared_difference(gemm_row(768, 512, {"HMMA.16816.F32": 1}, {"4": 2, "8": 2}, {"2": 2, "4": 2})) is None
    assert P.shared_difference(gemm_row(256, 512, imma, {"4": 2, "8": 2}, {"2": 2, "4": 2})) is None


def test_sass_benchmark_compares_the_block_triton_launches(tmp_path):
    """XLA runs new_reduce_scalar's ``input_reduce_fusion.1`` on 192 threads (6 warps, 3 a row); fusegen's launch
    dimensions say 192 too, but Triton launches ``num_warps`` x 32 = 256: not equal, and the row says why."""
    from fusegen.codegen import sass

    if (why := sass.tools_unavailable_reason()) is not None:
        pytest.skip(f"ptxas/cuobjdump cannot run: {why}")
    P = _load("ptx_vs_xla")
    res = P.compare(module_filter="new_reduce_scalar", limit=3, jobs=1, cache_dir=tmp_path, log=lambda *a: None)
    rows = {r["kernel"]: r for r in res["rows"]}
    r = rows["input_reduce_fusion_1"]
    assert r["xla_launch"]["threads"] == r["fusegen_launch"]["threads"] == [192, 1, 1]
    assert r["fusegen"]["num_warps"] == 8 and not r["launch_equal"]
    assert "256 threads for XLA's 192 (6 warps)" in r["launch_difference"]
    assert rows["input_reduce_fusion"]["launch_equal"] and "launch_difference" not in rows["input_reduce_fusion"]
    assert res["summary"]["all"]["launch_equal"] == 2
