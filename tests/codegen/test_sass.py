"""``fusegen.codegen.sass``: the SASS statistics of a kernel, checked against the PTX it was assembled from.

The parser tests read real ``ptxas -v`` logs and ``cuobjdump -sass`` listings (``tests/data/sass``, how each was
made is in its README) and compare the instruction counts with an independent count over the PTX those came from
(XLA's own PTX in the shared corpus: every ``mma.sync`` is one ``HMMA``, every ``ldmatrix`` one ``LDSM``, every
``ld.global.v2.b32`` one 8-byte ``LDG``...). The occupancy tests use NVIDIA's published examples. The compile
tests run the Triton wheel's ``ptxas`` and skip, with the reason, where it cannot run.
"""

from __future__ import annotations

import multiprocessing as mp
import re
import time
from pathlib import Path

import attrs
import pytest

from conftest import REPO, corpus_path
from fusegen.codegen import sass, sass_text
from fusegen.codegen.occupancy import SM_LIMITS, occupancy
from fusegen.device import H200

DATA = REPO / "tests" / "data" / "sass"
NO_TOOLS = sass.tools_unavailable_reason()
needs_ptxas = pytest.mark.skipif(NO_TOOLS is not None, reason=f"ptxas/cuobjdump cannot run: {NO_TOOLS}")


def _ptx_global_widths(ptx: str, op: str) -> dict[int, int]:
    """Bytes per ``ld.global`` / ``st.global`` of a PTX text: ``.vN`` x the type's bits / 8 (independent of SASS)."""
    out: dict[int, int] = {}
    for vec, bits in re.findall(op + r"\.global(?:\.nc)?(?:\.v(\d))?\.[bfsu](\d+)\b", ptx):
        w = int(vec or 1) * int(bits) // 8
        out[w] = out.get(w, 0) + 1
    return out


def _xla_module(name: str, entry: str) -> str:
    mod = sass_text.ptx_module_of(corpus_path("jax", "launch", f"{name}.xla.ptx").read_text(), entry)
    assert mod is not None
    return mod


# --------------------------------------------------------------------------------------------------
# parsers, on real tool output
# --------------------------------------------------------------------------------------------------
def test_ptxas_info_of_two_functions_with_and_without_spills_and_smem():
    two = sass_text.parse_ptxas_info((DATA / "xla_two_loop_kernels.ptxas.txt").read_text())
    assert two == {"loop_tanh_fusion": {"registers": 14, "spill_store_bytes": 0, "spill_load_bytes": 0,
                                        "stack_frame_bytes": 0, "static_shared_bytes": 0},
                   "loop_add_fusion": {"registers": 12, "spill_store_bytes": 0, "spill_load_bytes": 0,
                                       "stack_frame_bytes": 0, "static_shared_bytes": 0}}
    tr = sass_text.parse_ptxas_info((DATA / "xla_transpose.ptxas.txt").read_text())["input_transpose_fusion_2"]
    assert tr["registers"] == 32 and tr["static_shared_bytes"] == 4224
    # the transpose's shared tile as XLA's PTX declares it: 4224 bytes (32 x 33 f32, padded against bank conflicts)
    decl = re.findall(r"\.shared\s+\.align\s+\d+\s+\.b8\s+\S+\[(\d+)\]", _xla_module("new_transpose_2d",
                                                                                  "input_transpose_fusion_2"))
    assert sum(map(int, decl)) == 4224
    sp = sass_text.parse_ptxas_info((DATA / "fusegen_block_level_maxnreg32.ptxas.txt").read_text())["block_level"]
    assert sp == {"registers": 32, "spill_store_bytes": 568, "spill_load_bytes": 676, "stack_frame_bytes": 440,
                  "static_shared_bytes": 0}


def test_split_listing_and_counts_match_the_ptx_of_each_function():
    funcs = sass_text.split_sass((DATA / "xla_two_loop_kernels.cuobjdump.txt").read_text())
    assert list(funcs) == ["loop_tanh_fusion", "loop_add_fusion"]
    for name, text in funcs.items():
        c = sass_text.sass_counts(text)
        ptx = _xla_module("new_loop_bcast_odd", name)
        assert c["global_loads"] == _ptx_global_widths(ptx, "ld"), name
        assert c["global_stores"] == _ptx_global_widths(ptx, "st"), name
        assert c["backward_branches"] == 0 and c["tensor_core_ops"] == {} and c["shared_ops"] == {}
    # every instruction line counted, NOPs and the closing branch-to-self excepted
    lines = [ln for ln in funcs["loop_add_fusion"].splitlines() if re.match(r"\s*/\*[0-9a-f]{4}\*/", ln)]
    nops = sum(" NOP" in ln for ln in lines)
    assert sass_text.sass_counts(funcs["loop_add_fusion"])["sass_instructions"] == len(lines) - nops - 1 == 28


def test_gemm_counts_tensor_cores_and_shared_memory_as_the_ptx_has_them():
    c = sass_text.sass_counts((DATA / "xla_gemm_fusion_dot.sass").read_text())
    ptx = _xla_module("gpu_mlp_bf16.default", "gemm_fusion_dot")
    mma = re.findall(r"mma\.sync\.aligned\.m16n8k16\.row\.col\.f32\.bf16\.bf16\.f32", ptx)
    assert c["tensor_core_ops"] == {"HMMA.16816.F32.BF16": len(mma)} and len(mma) == 8
    assert c["shared_ops"]["LDSM"] == len(re.findall(r"ldmatrix\.", ptx)) == 17
    assert c["shared_ops"]["STSM"] == len(re.findall(r"stmatrix\.", ptx)) == 9
    assert c["shared_ops"]["STS"] == len(re.findall(r"st\.shared\.", ptx))
    assert c["barriers"] == len(re.findall(r"\bbar\.sync\b", ptx)) == 18
    assert c["global_loads"] == _ptx_global_widths(ptx, "ld") == {4: 8, 8: 8}
    assert c["global_stores"] == _ptx_global_widths(ptx, "st") == {8: 1}
    st = sass.stats_from_text("gemm_fusion_dot", (DATA / "xla_gemm_fusion_dot.ptxas.txt").read_text(),
                              (DATA / "xla_gemm_fusion_dot.sass").read_text())
    assert st.tensor_core_instructions == 8 and st.global_memory_instructions == 17
    assert st.mean_global_access_bytes == pytest.approx((8 * 4 + 8 * 8 + 8) / 17)
    assert st.shared_memory_instructions == 17 + 9 + 8 and not st.has_loop


def test_transpose_shared_tile_and_a_looping_sort_step():
    c = sass_text.sass_counts((DATA / "xla_transpose.sass").read_text())
    ptx = _xla_module("new_transpose_2d", "input_transpose_fusion_2")
    assert c["shared_ops"] == {"STS": len(re.findall(r"st\.shared\.", ptx)), "LDS": len(re.findall(r"ld\.shared\.", ptx))}
    assert c["shared_ops"]["LDS"] == 8 and c["barriers"] == 1
    # fusegen's sort tile kernel: two loops (backward BRA to 0x1e0 and 0x160), the closing BRA-to-self not one
    st = sass.stats_from_text("sort_fusion_bitonic", (DATA / "fusegen_sort_fusion_tile.ptxas.txt").read_text(),
                              (DATA / "fusegen_sort_fusion_tile.sass").read_text())
    assert st.backward_branches == 2 and st.has_loop
    assert st.global_loads == {4: 8, 8: 4} and st.global_stores == {4: 8, 8: 4}


def test_access_width_modifiers():
    assert sass_text.access_bytes("E.128.CONSTANT".split(".")) == 16
    assert sass_text.access_bytes(["E", "U16"]) == 2 and sass_text.access_bytes(["E"]) == 4
    assert sass_text.access_bytes("E.BYPASS.LTC128B.128".split(".")) == 16  # LDGSTS: LTC128B is a cache hint
    assert sass_text.access_bytes("E.ADD.F64.RN.STRONG.GPU".split(".")) == 8


def test_ptx_modules_split_at_version_and_find_the_entry():
    text = corpus_path("jax", "launch", "new_loop_bcast_odd.xla.ptx").read_text()
    mods = sass_text.ptx_modules(text)
    assert len(mods) == 3 and all(m.lstrip().startswith(".version 8.8") for m in mods)
    assert [sass_text.ptx_entries(m) for m in mods] == [["loop_add_fusion"], ["loop_tanh_fusion"],
                                                        ["wrapped_exponential"]]
    assert sass_text.ptx_module_of(text, "loop_tanh") is None


def test_stats_json_round_trip():
    st = sass.stats_from_text("gemm_fusion_dot", (DATA / "xla_gemm_fusion_dot.ptxas.txt").read_text(),
                              (DATA / "xla_gemm_fusion_dot.sass").read_text(), dynamic_shared_bytes=8192,
                              threads_per_block=64)
    j = st.to_json()
    assert j["global_loads"] == {"4": 8, "8": 8} and j["shared_bytes"] == 8192 and j["tensor_core_instructions"] == 8
    assert sass.SassStats.from_json(j) == st


# --------------------------------------------------------------------------------------------------
# occupancy
# --------------------------------------------------------------------------------------------------
def test_occupancy_cuda_best_practices_example_on_sm70():
    # CUDA C++ Best Practices Guide, "Calculating Occupancy": compute capability 7.0, 37 registers a thread:
    # 128-thread blocks -> 12 resident blocks (75 %), 320-thread blocks -> 4 blocks
    v100 = attrs.evolve(H200, name="v100", compute_capability=(7, 0), shared_memory_per_core=98304,
                        shared_memory_per_block_optin=98304)
    a = occupancy(v100, registers=37, threads_per_block=128)
    assert a.blocks_per_sm == 12 and a.fraction == 0.75 and a.limited_by == ("registers",)
    assert occupancy(v100, registers=37, threads_per_block=320).blocks_per_sm == 4


def test_occupancy_on_h200_by_each_limit():
    full = occupancy(H200, registers=32, threads_per_block=128)
    assert full.blocks_per_sm == 16 and full.fraction == 1.0 and "warps" in full.limited_by
    # 64 registers: 2048 a warp, 8 warps per sub-partition -> 32 warps
    assert occupancy(H200, registers=64, threads_per_block=256).warps_per_sm == 32
    # 255 registers round to 8192 a warp: 2 warps per sub-partition
    assert occupancy(H200, registers=255, threads_per_block=128).blocks_per_sm == 2
    # shared memory: 100 KB + the 1 KB reserve, against 228 KB
    sm = occupancy(H200, registers=32, threads_per_block=128, shared_bytes=100 * 1024)
    assert sm.blocks_per_sm == 2 and sm.limited_by == ("shared_memory",) and sm.shared_bytes_per_block == 101 * 1024
    assert occupancy(H200, 32, 128, shared_bytes=H200.shared_memory_per_block_optin + 1).blocks_per_sm == 0
    # 1024 threads at 65 registers need 73728 registers: over the block's 65536
    assert occupancy(H200, registers=65, threads_per_block=1024).blocks_per_sm == 0
    assert occupancy(H200, registers=16, threads_per_block=32).blocks_per_sm == SM_LIMITS[(9, 0)].max_blocks_per_sm
    with pytest.raises(ValueError, match="compute capability"):
        occupancy(attrs.evolve(H200, compute_capability=(12, 0)), 32, 128)


# --------------------------------------------------------------------------------------------------
# compiling (the wheel's ptxas)
# --------------------------------------------------------------------------------------------------
def _loop_kernel():
    from fusegen.hlo.parser import parse_module
    from fusegen.runtime.executor import Executor

    path = corpus_path("jax", "launch", "new_loop_bcast_odd.h200_opt.hlo")
    m = parse_module(path.read_text(), path.name)
    fusion = next(i for i in m.fusion_instructions() if i.name == "loop_add_fusion")
    emitted, rep = Executor(m, compile_kernels=False).plan_fusion(fusion)
    assert emitted is not None, rep.reason
    return emitted.kernels[emitted.primary]


@needs_ptxas
def test_kernel_stats_agree_with_its_ptx_and_are_cached(tmp_path, monkeypatch):
    from fusegen.codegen import triton_runtime

    ks = _loop_kernel()
    st = sass.kernel_sass_stats(ks, cache_dir=tmp_path)
    ptx = triton_runtime.compile_for_target(ks, pointer_alignment=16).ptx
    assert st.kernel == ks.name and st.num_warps == ks.launch.num_warps and st.threads_per_block == 32 * st.num_warps
    assert st.global_loads == _ptx_global_widths(ptx, "ld") and st.global_stores == _ptx_global_widths(ptx, "st")
    assert 0 < st.registers <= 255 and st.spill_bytes == 0 and not st.has_loop and st.tensor_core_instructions == 0
    assert st.occupancy(H200).blocks_per_sm > 0
    # a second call reads the JSON entry: nothing is assembled again
    assert len(list(tmp_path.rglob("*.json"))) == 1
    monkeypatch.setattr(sass, "assemble", lambda *a, **k: pytest.fail("assembled again"))
    assert sass.kernel_sass_stats(ks, cache_dir=tmp_path) == st
    # a damaged entry is recompiled, not trusted
    monkeypatch.undo()
    next(tmp_path.rglob("*.json")).write_text("{not json")
    assert sass.kernel_sass_stats(ks, cache_dir=tmp_path) == st


@needs_ptxas
def test_xla_ptx_stats_of_one_entry_of_a_multi_module_file(tmp_path):
    text = corpus_path("jax", "launch", "new_loop_bcast_odd.xla.ptx").read_text()
    st = sass.ptx_sass_stats(text, "loop_tanh_fusion", cache_dir=tmp_path)
    ptx = sass_text.ptx_module_of(text, "loop_tanh_fusion")
    assert st.registers == 14 and st.threads_per_block == 128 and st.num_warps is None
    assert st.global_loads == _ptx_global_widths(ptx, "ld") == {4: 3}
    with pytest.raises(sass.SassError, match="no `.entry nope"):
        sass.ptx_sass_stats(text, "nope", cache_dir=tmp_path)


@needs_ptxas
def test_tool_errors_name_the_kernel(tmp_path, monkeypatch):
    bad = ".version 8.8\n.target sm_90a\n.address_size 64\n.visible .entry broken_kernel()\n{\n\tfoo.bar;\n}\n"
    with pytest.raises(sass.SassError, match=r"kernel broken_kernel: ptxas[-\w]* -arch=sm_90a failed"):
        sass.ptx_sass_stats(bad, "broken_kernel", cache_dir=tmp_path)
    assert not list(tmp_path.rglob("*.json"))  # failures are not cached
    monkeypatch.setenv("FUSEGEN_PTXAS", str(tmp_path / "no-ptxas"))
    with pytest.raises(sass.SassError, match="ptxas not found"):
        sass.ptx_sass_stats(bad, "broken_kernel", cache_dir=tmp_path)
    assert "ptxas not found" in sass.tools_unavailable_reason()


def _make_once(cache_dir: str, log: str) -> None:
    def make() -> dict:
        with open(log, "a") as f:
            f.write("made\n")
        time.sleep(0.5)
        return {"value": 7}

    assert sass._cached(Path(cache_dir), "k" * 32, make)["value"] == 7


# the children only take the file lock and write JSON: no thread of the parent (jax's, if another test started
# them) is needed after the fork
@pytest.mark.filterwarnings("ignore:os.fork:RuntimeWarning")
def test_concurrent_processes_compute_an_entry_once(tmp_path):
    ctx = mp.get_context("fork")
    log = tmp_path / "log"
    procs = [ctx.Process(target=_make_once, args=(str(tmp_path / "c"), str(log))) for _ in range(3)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(30)
    assert [p.exitcode for p in procs] == [0, 0, 0]
    assert log.read_text() == "made\n"
    assert not list((tmp_path / "c").rglob("*.tmp"))
