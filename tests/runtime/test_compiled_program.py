"""Every run also runs each kernel as compiled (issue 44 item 1: fusegen.runtime.compiled_program): its own source,
constexprs and grid, on the judged run's operands, compared with what the judged run (an interpreter variant, a
widened BLOCK) wrote. A difference planted between a kernel and its variant is a mismatch naming both; the sample
holds the first, last and boundary programs; a small grid runs every program; corpus programs stay ``same``."""

from __future__ import annotations

import re

import attrs
import numpy as np
import pytest

from conftest import corpus_path

import fusegen
from fusegen.codegen import triton_runtime
from fusegen.hlo.parser import parse_module
from fusegen.runtime import compiled_program
from fusegen.runtime.compiled_program import sample_program_ids
from fusegen.runtime.executor import Executor

_SCALE = """HloModule m

fused {{
  p0 = f32[{n}] parameter(0)
  c = f32[] constant(3)
  b = f32[{n}] broadcast(c), dimensions={{}}
  ROOT m = f32[{n}] multiply(p0, b)
}}

ENTRY e {{
  x = f32[{n}] parameter(0)
  ROOT f = f32[{n}] fusion(x), kind=kLoop, calls=fused
}}
"""


def _x(n: int) -> np.ndarray:
    return (np.arange(1, n + 1, dtype=np.float32) * np.float32(0.37)).astype(np.float32)


def _planting(monkeypatch, plant) -> None:
    """Every fusion the executor plans runs ``plant(emitted)`` instead of its emitted kernels."""
    original = Executor._plan

    def planned(self, inst, rep):
        emitted, rep = original(self, inst, rep)
        if emitted is not None and emitted.kernels:
            emitted = plant(emitted)
            self._emitted[id(inst)] = (emitted, rep)
        return emitted, rep

    monkeypatch.setattr(Executor, "_plan", planned)


def _one_kernel(emitted, **changes):
    (k,) = emitted.kernels
    return attrs.evolve(emitted, kernels=(attrs.evolve(k, **changes),))


def _one_more_at_gpu_block(emitted, where: str):
    """The kernel storing its value plus one where ``where`` holds, only at the GPU's BLOCK of 128 (the
    interpreter's variant, at a larger BLOCK, never takes the branch)."""
    (k,) = emitted.kernels
    store = re.search(r"^(\s*)tl\.store\(out_out0 \+ lin, (\w+), mask=mask\)$", k.source, re.M)
    bad = (f"{store.group(0)}\n{store.group(1)}if BLOCK == 128:\n{store.group(1)}    "
           f"tl.store(out_out0 + lin, {store.group(2)} + 1.0, mask=mask & ({where}))")
    src = k.source.replace(store.group(0), bad)
    return _one_kernel(emitted, source=src, interpret_variant=attrs.evolve(k.interpret_variant, source=src))


def test_a_variant_computing_slightly_otherwise_is_a_mismatch_naming_it(monkeypatch):
    n = 4096
    cheat = "3.0000002"  # the f32 after 3.0: the judged values move by an ulp, well inside the fusion's budget

    def plant(em):
        (k,) = em.kernels
        v = k.interpret_variant
        assert v is not None and "tl.full([BLOCK], 3.0, tl.float32)" in v.source
        return _one_kernel(em, interpret_variant=attrs.evolve(v, source=v.source.replace("3.0,", f"{cheat},")))

    _planting(monkeypatch, plant)
    x = _x(n)
    res = fusegen.run(_SCALE.format(n=n), inputs=[x], compile=False)
    (f,) = res.fusions
    assert f.max_abs_error > 0 and f.error_budget_ratio <= 1  # the judged run alone would pass
    assert res.status == "mismatch" and not res.ok and f.status == "mismatch"
    cp = f.compiled_program.to_json()
    assert cp["status"] == "differs" and cp["variant"] == "interpret_variant" and cp["sampled"]
    first = int(np.flatnonzero(x * np.float32(3) != x * np.float32(cheat))[0])  # numpy's f32 products
    diff = cp["first_difference"]
    assert diff["buffer"] == "output 0" and diff["index"] == [first]
    assert diff["program"] == first // 128 and diff["compiled"].startswith(repr(float(x[first] * np.float32(3))))
    assert "interpret_variant" in f.reason and f"output 0 [{first}]" in f.reason
    assert res.to_json()["fusions"][0]["compiled_program"]["status"] == "differs"


def test_an_exact_cover_branch_wrong_only_at_the_gpu_block_is_caught_at_the_last_program(monkeypatch):
    n = 4096  # BLOCK 128: 32 programs; the variant's BLOCK 4096 never takes the planted branch

    _planting(monkeypatch, lambda em: _one_more_at_gpu_block(em, "lin == N - 1"))
    x = _x(n)
    res = fusegen.run(_SCALE.format(n=n), inputs=[x], compile=False)
    (f,) = res.fusions
    np.testing.assert_array_equal(res.outputs, x * np.float32(3))  # the judged run is right
    cp = f.compiled_program.to_json()
    assert res.status == "mismatch" and cp["status"] == "differs"
    assert cp["first_difference"]["index"] == [n - 1] and cp["first_difference"]["program"] == 31
    assert cp["first_difference"]["differing_elements"] == 1
    assert cp["kernels"][0]["ids"][:2] == [0, 31]
    assert f"output 0 [{n - 1}]" in f.reason and "interpret_variant" in f.reason


def test_a_small_grid_runs_every_program_and_a_sample_runs_first_last_and_boundary_ones(monkeypatch):
    x = _x(1024)  # 8 programs of 128: every one
    res = fusegen.run(_SCALE.format(n=1024), inputs=[x], compile=False)
    cp = res.fusions[0].compiled_program.to_json()
    assert res.status == "ok" and cp["status"] == "same" and cp["bitwise"]
    assert (cp["program_ids"], cp["programs"], cp["sampled"]) == (8, 8, False)
    assert cp["kernels"][0]["ids"] == list(range(8))
    # a larger grid with no time budget to spare beyond the first and last... and with all the time it wants
    monkeypatch.setattr(compiled_program, "MIN_BUDGET_S", 0.0)
    monkeypatch.setattr(compiled_program, "BUDGET_FRACTION", 0.0)
    tight = fusegen.run(_SCALE.format(n=8192), inputs=[_x(8192)], compile=False).fusions[0].compiled_program
    ids = tight.kernels[0].ids
    assert len(ids) == 3 and ids[:2] == (0, 63) and 0 < ids[2] < 63  # a random interior one, whatever the budget
    assert tight.kernels[0].sampled and tight.status == "same"
    monkeypatch.setattr(compiled_program, "MIN_BUDGET_S", 1e9)
    free = fusegen.run(_SCALE.format(n=8192), inputs=[_x(8192)], compile=False).fusions[0].compiled_program
    em, _ = Executor(parse_module(_SCALE.format(n=8192)), compile_kernels=False).plan_fusion(
        parse_module(_SCALE.format(n=8192)).entry.root)
    ids, sampled = sample_program_ids(em.kernels[0])
    assert sampled and list(free.kernels[0].ids) == ids and len(ids) > 2


def test_a_tile_origin_wrong_at_every_interior_program_is_caught_with_no_time_budget(monkeypatch):
    """rand_100621's block-level fusion placed a nested row statistic by a tile index of its own grid: right at
    the first programs, out of range at the last, wrong at every other one. Planted here as every program but the
    first and the last storing one more: the sample's random interior program runs even with no budget."""
    n = 8192  # BLOCK 128: 64 programs

    _planting(monkeypatch, lambda em: _one_more_at_gpu_block(em, "(lin >= 128) & (lin < N - 128)"))
    monkeypatch.setattr(compiled_program, "MIN_BUDGET_S", 0.0)
    monkeypatch.setattr(compiled_program, "BUDGET_FRACTION", 0.0)
    x = _x(n)
    res = fusegen.run(_SCALE.format(n=n), inputs=[x], compile=False)
    (f,) = res.fusions
    np.testing.assert_array_equal(res.outputs, x * np.float32(3))  # the judged run (the variant) is right
    cp = f.compiled_program.to_json()
    assert res.status == "mismatch" and cp["status"] == "differs"
    assert 0 < cp["first_difference"]["program"] < 63 and len(cp["kernels"][0]["ids"]) == 3


_GEMM = ("HloModule m\nENTRY e {\n  p0 = f32[50,40] parameter(0)\n  p1 = f32[40,26] parameter(1)\n"
         "  ROOT d = f32[50,26] dot(p0, p1), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}")


def test_the_sample_holds_the_tiles_at_the_end_of_each_dimension():
    """Which output elements each program of a GEMM's launch writes (each run alone as compiled, on sentinel
    buffers) is the independent answer: the sample holds a program other than the last whose tile reaches the
    last row, and one reaching the last column (50 x 26 in 16 x 8 tiles: partial tiles on both ends)."""
    from _backend_helpers import device, plugin_manager
    from fusegen.passes.pipeline import optimize_if_needed
    from fusegen_plugins.backends.triton import _Analysis
    from fusegen_plugins.backends.triton_configs import TritonGemmConfig
    from fusegen_plugins.backends.triton_gemm_emitter import TritonGemmFusion

    m = parse_module(_GEMM)
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = m.entry.root
    em = TritonGemmFusion(_Analysis(f), TritonGemmConfig(16, 8, 16)).emit()
    (k,) = em.kernels
    assert k.launch.grid == (4 * 4,) and k.interpret_variant is not None
    ids, sampled = sample_program_ids(k)
    assert sampled and ids[:2] == [0, 15] and len(set(ids)) == len(ids)
    assert ids == sample_program_ids(k)[0]  # seeded: the same ids every run

    def rows_cols(p: int) -> tuple[set[int], set[int]]:
        bufs = [np.zeros(50 * 40, np.float32), np.zeros(40 * 26, np.float32), np.full(50 * 26, np.nan, np.float32)]
        triton_runtime.run_programs(attrs.evolve(k, interpret_variant=None), bufs, [(p, 0, 0)])
        r, c = np.nonzero(~np.isnan(bufs[2].reshape(50, 26)))
        return set(r.tolist()), set(c.tolist())

    written = {p: rows_cols(p) for p in range(16)}
    assert set().union(*(w[0] for w in written.values())) == set(range(50))  # the oracle covers the output
    last_row = {p for p, (r, _) in written.items() if 49 in r and p != 15}
    last_col = {p for p, (_, c) in written.items() if 25 in c and p != 15}
    assert last_row & set(ids) and last_col & set(ids), (ids, last_row, last_col)


def test_atomics_run_whole_and_corpus_programs_stay_the_same(monkeypatch):
    """Corpus programs: every kernel's compiled programs agree with the judged run (GEMMs up to the grouping of
    their f32 sums, counted apart), and the scatter's atomics run every program instead of a sample (given the time:
    a whole run's budget depends on the machine)."""
    checked = 0
    for path in [corpus_path("jax", "gpu_softmax.default.h100_opt.hlo"), "examples/gpu_mlp_bf16.h100_opt.hlo",
                 "examples/gpu_multi_output.h100_opt.hlo", corpus_path("jax", "gpu_transpose_add.default.h100_opt.hlo"),
                 corpus_path("jax", "gpu_rowsum.default.h100_opt.hlo")]:
        res = fusegen.run(path, compile=False)
        assert res.status == "ok", (path, res.status)
        for f in res.fusions:
            cp = f.compiled_program.to_json()
            assert cp["status"] == "same", (path, f.name, cp["reason"])
            checked += cp["variant"] != "none"
    assert checked >= 5
    monkeypatch.setattr(compiled_program, "WHOLE_MIN_BUDGET_S", 1e9)
    s = corpus_path("sweep", "scatter_add_clip_bf16.h200_opt.hlo")
    res = fusegen.run(s, inputs=str(s).replace(".h200_opt.hlo", ".inputs.npz"), compile=False)
    (scatter,) = [f for f in res.fusions if f.emitter.startswith("Scatter")]
    k = scatter.compiled_program.kernels[-1]
    assert k.status == "same" and not k.sampled and k.program_ids == k.programs > 8 and "atomics" in k.reason


def test_gpt2_with_its_weights_stays_the_same():
    res = fusegen.run("tests/data/real_models/gpt2.h200_opt.hlo", inputs="tests/data/real_models/gpt2.inputs.npz",
                      compile=False)
    assert res.status in ("ok", "drift")
    cps = [f.compiled_program for f in res.fusions if f.compiled_program is not None]
    assert len(cps) == len([f for f in res.fusions if f.backend == "triton"]) > 10
    assert all(c.status == "same" for c in cps), [c.message for c in cps if c.status != "same"]
    assert any(c.checked_on for c in cps)  # fusions running another's kernels name the check they share
    assert {c.variant for c in cps} >= {"interpret_variant"}
