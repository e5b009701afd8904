"""Launch dimensions against XLA's own: ``../shared/corpus/jax/launch/LAUNCH.tsv`` and ``tests/data/launch_extra/``
(H200, deviceless compiles; the second made by ``scripts/make_launch_ground_truth.py``).

``fusegen explain --json`` must report, per fusion, the grid / threads / shared memory XLA's thunk launches:
for >= 95% of the fusions XLA emits with a native emitter (loop, reduction, transpose, concatenate,
scatter, in-place DUS, sort) and, for grid and threads, every stamped Triton fusion. The kernel realises
the launch: one Triton program per XLA block, ``num_warps = threads / 32``. A Triton fusion's shared memory
is its compiled kernel's (known after the sm_90 compile), compared row by row with XLA's.
"""

from __future__ import annotations

import csv
import json
from collections import Counter
from pathlib import Path

import pytest
from click.testing import CliRunner

from hlo_modules import GELU

from fusegen.cli.main import cli

LAUNCH = Path(__file__).resolve().parents[2].parent / "shared" / "corpus" / "jax" / "launch"
#: More ground truth of the same kind, committed with the project (integer, pred, f16/bf16/f8 loop fusions
#: with expensive ops and multi-output roots; Triton GEMMs of every dtype pair; block-level fusions).
EXTRA = Path(__file__).resolve().parents[1] / "data" / "launch_extra"

#: Native-emitter fusions whose launch differs from XLA's, with the reason.
KNOWN_MISSES: dict[tuple[str, str], str] = {}
TRITON_KINDS = ("__triton", "__triton_nested_gemm_fusion", "__triton_gemm")
#: Kernels that launch XLA's geometry with more warps than XLA's block, on purpose (the reason).
WIDER_KERNELS = {
    ("transpose_10_s4_packed.h200_opt.hlo", "wrapped_transpose"):
        "packed transpose of 256x256 s4 tiles: 65536 lanes a program, above transpose.WIDE_BLOCK, take 8 warps "
        "(Triton register pressure) for XLA's 128 threads",
}


def _rows(where: Path = LAUNCH) -> list[dict]:
    """Kernel rows of fusions in ``where/LAUNCH.tsv``, each with ``dir`` set to ``where``."""
    if not (where / "LAUNCH.tsv").exists():
        pytest.skip(f"{where} is absent (the shared corpus is not checked out beside the project)")
    with open(where / "LAUNCH.tsv") as f:
        return [dict(r, dir=where) for r in csv.DictReader(f, delimiter="\t") if r["thunk_kind"] == "kCustomKernel"
                and r["hlo_opcode"] == "fusion"]


def _explain(module_file: str, where: Path = LAUNCH, *extra: str) -> dict:
    res = CliRunner().invoke(cli, ["explain", str(where / module_file), "--json", *extra])
    assert res.exit_code == 0, res.output
    return {f["name"]: f for f in json.loads(res.output)["fusions"]}


def _want(r: dict) -> dict:
    return {"grid": [int(r["grid_x"]), int(r["grid_y"]), int(r["grid_z"])],
            "threads": [int(r["threads_x"]), int(r["threads_y"]), int(r["threads_z"])],
            "shared_memory_bytes": int(r["shared_memory_bytes"])}


def _compare(rows: list[dict], *extra: str) -> list[tuple[dict, dict | None]]:
    explained: dict[tuple, dict] = {}
    out = []
    for r in rows:
        key = (r["dir"], r["module_file"])
        if key not in explained:
            explained[key] = _explain(r["module_file"], r["dir"], *extra)
        kernel = r["kernel_name"]
        if "__" in kernel and kernel.rsplit("__", 1)[1].isdigit():  # a later kernel of a multi-kernel sort
            continue
        out.append((r, explained[key].get(r["fusion_name"])))
    return out


@pytest.fixture(scope="module")
def compared() -> list[tuple[dict, dict | None]]:
    return _compare(_rows() + _rows(EXTRA))


def _native(r: dict) -> bool:
    return r["fusion_kind"] in ("kLoop", "kInput") or r["note"].startswith("kernel_named_after_inner")


def test_native_emitters_launch_as_xla(compared):
    per_kind: Counter = Counter()
    hits: Counter = Counter()
    misses = {}
    for r, f in compared:
        if not _native(r):
            continue
        kind = f["kind"] if f else "?"
        per_kind[kind] += 1
        got = f.get("launch_dimensions") if f else None
        if got == _want(r):
            hits[kind] += 1
        else:
            misses[(r["module_file"], r["fusion_name"])] = (got, _want(r))
    total = sum(per_kind.values())
    assert total >= 175, per_kind  # every native-emitter fusion of the 24 + 42 programs
    unexplained = {k: v for k, v in misses.items() if k not in KNOWN_MISSES}
    assert not unexplained, unexplained
    assert sum(hits.values()) / total >= 0.95, (hits, per_kind)
    for kind in ("kLoop", "kReduction", "kTranspose", "kConcatenate"):
        assert hits[kind] == per_kind[kind] > 0, kind


def test_stamped_triton_fusions_grid_and_threads_as_xla(compared):
    n = 0
    for r, f in compared:
        if r["backend_kind"] not in TRITON_KINDS:
            continue
        n += 1
        got = f["launch_dimensions"]
        want = _want(r)
        assert (got["grid"], got["threads"]) == (want["grid"], want["threads"]), (r["fusion_name"], got, want)
    assert n >= 110 + 17


def _smem_class(r: dict) -> str:
    """Why fusegen's compiled kernel may allocate other shared memory than XLA's for a Triton row."""
    if r["backend_kind"] in ("__triton_nested_gemm_fusion", "__triton_gemm"):
        # XLA's GEMMs are fusegen's program (tests/backends/test_triton_gemm_native.py) but for the kinds its kernel notes:
        # int8 block_k 16 padded to upstream Triton's 32, sub-byte operands XLA packs two to a byte
        return "gemm-" + r["module_file"].removesuffix(".h200_opt.hlo")
    # Block-level fusions: XLA's emitter builds its own TTIR (size-1 dims, reshapes, broadcasts), whose layout
    # conversions through shared memory differ from those of fusegen's kernel of the same tile.
    return "block-level-ir"


@pytest.mark.slow
def test_triton_shared_memory_is_the_compiled_kernels():
    """Every Triton row: ``explain --compile`` reports the sm_90 compile's shared memory (an int, never a
    placeholder 0 or null), and it is compared with XLA's; rows that differ are of the two known kinds."""
    rows = [r for r in _rows() + _rows(EXTRA) if r["backend_kind"] in TRITON_KINDS]
    agree, differ = [], {}
    for r, f in _compare(rows, "--compile"):
        got = f["launch_dimensions"]["shared_memory_bytes"]
        assert isinstance(got, int) and "shared_memory_reason" not in f, (r["fusion_name"], f)
        assert f["launch"].endswith(f"smem={got}B") or got == 0, f["launch"]
        if got == int(r["shared_memory_bytes"]):
            agree.append((r["module_file"], r["fusion_name"]))
        else:
            differ.setdefault(_smem_class(r), []).append((r["fusion_name"], int(r["shared_memory_bytes"]), got))
    assert len(agree) + sum(map(len, differ.values())) >= 130
    # 2026-12-01: 18 of 130 rows agreed (row-wise block-level fusions of 32 bytes, f32 GEMMs, a block-level
    # fusion without shared memory); since GEMMs are XLA's program, every GEMM row but the two noted ones agrees
    # (f32 GEMMs at default precision at tf32 again, as XLA runs them, since 2026-12-02)
    assert len(agree) >= 18 + 18, (agree, differ)
    assert set(differ) <= {"gemm-gemm_s8_s8_s32", "gemm-gemm_bf16_s4", "block-level-ir"}, differ


@pytest.mark.slow
def test_run_reports_the_compiled_shared_memory_of_a_triton_fusion(tmp_path, monkeypatch):
    """``run`` compiles for sm_90 and puts the compiled shared memory into ``launch_dimensions`` and the
    ``launch`` column; ``explain`` has it only from the compile records (``null`` with the reason before),
    ``explain --compile`` fills it. The row-wise softmax's 32 bytes are XLA's too."""
    module = EXTRA / "triton_softmax_f32.h200_opt.hlo"
    (row,) = [r for r in _rows(EXTRA) if r["module_file"] == module.name]
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(tmp_path / "kernels"))
    (f,) = _explain(module.name, EXTRA).values()
    assert f["launch_dimensions"]["shared_memory_bytes"] is None
    assert "fusegen explain --compile" in f["shared_memory_reason"]
    res = CliRunner().invoke(cli, ["run", str(module), "--json"])
    assert res.exit_code == 0, res.output
    (g,) = json.loads(res.output)["fusions"]
    assert g["launch_dimensions"] == _want(row) and g["launch"] == "grid=128 warps=4 smem=32B", g
    (f,) = _explain(module.name, EXTRA).values()
    assert f["launch_dimensions"] == _want(row) and "shared_memory_reason" not in f
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(tmp_path / "other"))  # no record there: --compile makes one
    (f,) = _explain(module.name, EXTRA, "--compile").values()
    assert f["launch_dimensions"] == _want(row)


def test_kernel_realises_the_launch(compared):
    """One program per XLA block and 32 * num_warps threads whenever XLA's block is whole warps of a
    power of two (the ``launch`` string is the kernel's)."""
    checked = 0
    for r, f in compared:
        if not _native(r) or not f or f.get("launch_dimensions") != _want(r):
            continue
        ld = f["launch_dimensions"]
        grid = [int(x) for x in f["launch"].split()[0].removeprefix("grid=").split("x")]
        warps = int(f["launch"].split()[1].removeprefix("warps="))
        assert grid + [1] * (3 - len(grid)) == ld["grid"], (r["fusion_name"], f["launch"], ld)
        t = ld["threads"][0]
        if t >= 32 and t & (t - 1) == 0 and (r["module_file"], r["fusion_name"]) not in WIDER_KERNELS:
            assert warps * 32 == t, (r["fusion_name"], f["launch"], ld)
            checked += 1
    assert checked >= 120


def test_seed_gelu_loop_fusion_launch(tmp_path):
    """The emitters doc's GELU: ``grid [24576,1,1] threads [128,1,1]``, vector size 4 (512 elements a block)."""
    p = tmp_path / "gelu.hlo"
    p.write_text(GELU)
    res = CliRunner().invoke(cli, ["explain", str(p), "--json", "--fusion", "loop_gelu_fusion"])
    assert res.exit_code == 0, res.output
    (f,) = json.loads(res.output)["fusions"]
    assert f["launch_dimensions"] == {"grid": [24576, 1, 1], "threads": [128, 1, 1], "shared_memory_bytes": 0}
    assert f["launch"] == "grid=24576 warps=4"
    src = f["kernels"][0]["source"]
    assert "BLOCK" in src

    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.hlo.parser import parse_module
    from fusegen_plugins.emitters.loop import LoopFusion

    m = parse_module(GELU, "gelu.hlo")
    fusion = next(i for i in m.entry.instructions if i.opcode == "fusion")
    em = LoopFusion(FusionAnalysis.create(fusion))
    geo = em.geometry()
    assert (geo.unroll, geo.threads, geo.blocks) == (4, 128, (24576, 1))
    ks = em.emit().kernels[0]
    assert ks.constexprs["BLOCK"] == 512 and ks.launch.num_warps == 4 and ks.launch.grid == (24576,)


def test_run_json_reports_xla_launch_dimensions():
    """``fusegen run --json`` carries the same structured launch as explain, for the kernels it ran."""
    rows = [r for r in _rows() if r["module_file"] == "new_concatenate.h200_opt.hlo"]
    res = CliRunner().invoke(cli, ["run", str(LAUNCH / "new_concatenate.h200_opt.hlo"), "--json", "--no-compile"])
    assert res.exit_code == 0, res.output
    fusions = {f["name"]: f for f in json.loads(res.output)["fusions"]}
    assert len(rows) == 3
    for r in rows:
        f = fusions[r["fusion_name"]]
        assert f["status"] == "ok" and f["launch_dimensions"] == _want(r), (f, r)
        assert "launch" in f  # the string stays beside it


@pytest.mark.slow
def test_compiles_on_the_pool_report_the_shared_memory_too():
    """``run --jobs 2``: compiles finished on the worker pool (``Executor.finish_compiles``) put the compiled
    shared memory into the report as a compile in the calling process does."""
    import numpy as np

    from fusegen.hlo.parser import parse_file
    from fusegen.runtime.compile_jobs import CompileJobs
    from fusegen.runtime.executor import Executor

    module = EXTRA / "triton_softmax_f32.h200_opt.hlo"
    (row,) = [r for r in _rows(EXTRA) if r["module_file"] == module.name]
    m = parse_file(module)
    ex = Executor(m, compile_kernels=True, jobs=2)
    ex.compiles = CompileJobs(2, pool_after=1)
    try:
        ex.run([np.random.default_rng(0).standard_normal((256, 1024)).astype(np.float32)])
    finally:
        ex.finish_compiles()
    rep = ex.reports[row["fusion_name"]]
    assert rep.compiled == "ok" and rep.launch == "grid=128 warps=4 smem=32B"
    assert next(k for k in rep.kernels if str(k.launch) == rep.launch).launch.to_json() == _want(row)


def test_compile_records_are_read_defensively(tmp_path, monkeypatch):
    """A compile record is a convenience: a damaged one reads as absent (``explain`` then says why it has no
    shared memory), and a kernel directory that cannot be written loses the record, not the run."""
    from fusegen.codegen import compile_record

    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(tmp_path / "k"))
    key = compile_record.compile_key(("fusion", 1))
    assert compile_record.lookup(key) is None
    compile_record.record(key, (768, 0), 90)
    assert compile_record.lookup(key) == [768, 0]
    assert compile_record.compile_key(("fusion", 2)) != key
    for bad in ("{", '{"shared": 768}', '{"shared": ["x"]}', "[]"):
        (tmp_path / "k" / "compiled" / f"{key}.json").write_text(bad)
        assert compile_record.lookup(key) is None, bad
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the kernel directory should be")
    monkeypatch.setenv("FUSEGEN_KERNEL_DIR", str(blocked))
    compile_record.record(key, (1,), 90)  # no exception
    assert compile_record.lookup(key) is None


def test_run_without_compile_reports_no_shared_memory_for_triton():
    """``run --no-compile`` has no compiled kernel: a Triton fusion's shared memory is ``null`` with the reason
    (never a placeholder 0); grid and threads are XLA's all the same."""
    module = EXTRA / "triton_softmax_f32.h200_opt.hlo"
    (row,) = [r for r in _rows(EXTRA) if r["module_file"] == module.name]
    res = CliRunner().invoke(cli, ["run", str(module), "--json", "--no-compile"])
    assert res.exit_code == 0, res.output
    (f,) = json.loads(res.output)["fusions"]
    assert f["launch_dimensions"] == {**_want(row), "shared_memory_bytes": None}
    assert "--no-compile" in f["shared_memory_reason"] and "smem=" not in f["launch"]
