"""The multi-launch sort's kernels as XLA's (issue 28): one kernel per XLA launch on XLA's own grid and block
(``tests/data/launch_sort``: XLA's thunk sequences of four long sorts), each specialised by its step constants
as ``tl.constexpr`` with no runtime loop over steps and no runtime scalars, the tiled launches holding their
tile in registers (one load and one store per buffer); a tiled launch compiled for sm_90 uses at most 1.25x
the registers of XLA's kernel for the same launch (``../shared/corpus/jax/launch``), without spills."""

from __future__ import annotations

import csv
import re
import subprocess
from pathlib import Path

import pytest

from conftest import CORPUS

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.device import get_device
from fusegen.dispatch import get_fusion_emitter
from fusegen.hlo.parser import parse_module
from fusegen_plugins.emitters.sort_scale import launch_schedule

H200 = get_device("h200")
DATA = Path(__file__).resolve().parents[1] / "data" / "launch_sort"
LAUNCH = CORPUS / "jax" / "launch"


def _sort_fusion(path: Path, name: str):
    m = parse_module(path.read_text(), path.name)
    inst = next(i for c in m.computations for i in c.instructions if i.name == name)
    em, factory = get_fusion_emitter(FusionAnalysis.create(inst, H200))
    assert factory is not None and factory.name == "sort"
    return em, em.emit()


def _xla_rows(where: Path) -> dict[tuple[str, str], list[dict]]:
    with open(where / "LAUNCH.tsv") as f:
        rows = [r for r in csv.DictReader(f, delimiter="\t") if r["note"].startswith("kernel_named_after_inner")]
    out: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        out.setdefault((r["module_file"], r["fusion_name"]), []).append(r)
    return out


@pytest.mark.parametrize("module", ["sort_big", "argsort_big", "sort_kv_rows", "sort_bf16_rows"])
def test_one_specialised_kernel_per_xla_launch(module):
    (key, rows), = [(k, v) for k, v in _xla_rows(DATA).items() if k[0] == f"{module}.h200_opt.hlo"]
    em, emitted = _sort_fusion(DATA / key[0], key[1])
    # XLA's launches, in XLA's order, on XLA's grid and block
    assert [(k.launch.grid3, k.launch.threads3) for k in emitted.kernels] == [
        ((int(r["grid_x"]), 1, 1), (int(r["threads_x"]), 1, 1)) for r in rows]
    schedule = launch_schedule(em.npad.bit_length() - 1, emitted.kernels[0].constexprs["TILE"])
    assert len(schedule) == len(rows)
    for k, (ks, (kind, (s0, s1, mtop, mbot))) in enumerate(zip(emitted.kernels, schedule)):
        body = ks.source[ks.source.index("@triton.jit"):]
        loops = re.findall(r"^\s*for .*$", body, re.M)
        assert all("tl.static_range(" in line for line in loops), loops  # unrolled at trace time
        assert not ks.scalar_types and not ks.scalar_launches and ks.interpret_variant is not None
        if kind == "tile":
            # the launch's steps: stages S0..S1, from min(s, MTOP) down to MBOT (a later launch's stage enters
            # only as s > MTOP, so every later tiled launch shares one compiled kernel)
            cx = ks.constexprs
            assert (cx["MTOP"], cx["MBOT"]) == (mtop, mbot) and len(loops) == 2
            assert (cx["S0"], cx["S1"]) == ((s0, s1) if k == 0 else (mtop + 1, mtop + 1))
            # the tile is held on chip: each buffer loaded once and stored once, partners fetched by tl.gather
            stores = body.count("tl.store(")
            assert stores == len(em.leaf_operand) + sum(p.kind == "scratch" for p in ks.params)
            assert "tl.gather(key, pl, 0)" in body and body.count("tl.load(") <= 2 * stores
        else:  # XLA's unrolled compare bodies: U sub-steps of one pair a thread (BLOCK = the block's threads)
            assert ks.constexprs["M"] == mtop == mbot and s0 == s1 and len(loops) == 1
            assert ks.constexprs["BLOCK"] == ks.launch.threads3[0] and ks.constexprs["U"] == 4
            assert "tl.gather" not in body


def _ptxas_registers(ptx: str, entry: str) -> tuple[int, int]:
    """``(registers, spill bytes)`` of ``entry`` in ``ptx`` by the Triton wheel's ``ptxas -v``."""
    from triton.backends.nvidia.compiler import get_ptxas

    import tempfile

    with tempfile.TemporaryDirectory() as d:
        src = Path(d) / "k.ptx"
        src.write_text(ptx)
        p = subprocess.run([get_ptxas(90).path, "-arch=sm_90a", "-v", "-o", str(Path(d) / "k.cubin"), str(src)],
                           capture_output=True, text=True, check=True)
    log = p.stdout + p.stderr
    block = log[log.index(f"Function properties for {entry}"):]
    regs = int(re.search(r"Used (\d+) registers", block).group(1))
    spill = sum(int(x) for x in re.search(r"(\d+) bytes spill stores, (\d+) bytes spill loads", block).groups())
    return regs, spill


def _xla_ptx_module(path: Path, entry: str) -> str:
    """The PTX module of ``path`` (XLA's modules, each after a ``// ==== name ====`` line) defining ``entry``."""
    text = path.read_text()
    parts = re.split(r"(?m)^// ==== .* ====$", text)
    return next(p for p in parts if re.search(rf"\.entry {entry}\(", p))


#: ``new_sort_small``'s sorts (fusion, XLA's kernel): each is one tiled launch.
NEW_SORT_SMALL = [("fusion.3", "sort_40_1"), ("fusion.2", "sort_28_1"), ("fusion.1", "sort_20_1"),
                  ("fusion", "sort_13_1")]


@pytest.mark.parametrize("fusion,kernel", NEW_SORT_SMALL)
def test_tiled_launch_compiles_within_xla_registers(fusion, kernel):
    """``new_sort_small``'s sorts (``jnp.sort`` / ``argsort`` / key-value, one tiled launch each): fusegen's
    kernel for sm_90 against XLA's own, both through the same ``ptxas``: no spills, at most 1.25x XLA's
    registers, global accesses at least as wide as XLA's."""
    if not (LAUNCH / "new_sort_small.xla.ptx").exists():
        pytest.skip(f"{LAUNCH} is absent (the shared corpus is not checked out beside the project)")
    em, emitted = _sort_fusion(LAUNCH / "new_sort_small.h200_opt.hlo", fusion)
    (ks,) = emitted.kernels
    xla_ptx = _xla_ptx_module(LAUNCH / "new_sort_small.xla.ptx", kernel)
    xla_regs, xla_spill = _ptxas_registers(xla_ptx, kernel)
    r = triton_runtime.compile_for_target(ks, pointer_alignment=16)
    regs, spill = _ptxas_registers(r.ptx, ks.entry)
    assert spill == 0 == xla_spill
    assert regs <= 1.25 * xla_regs, (regs, xla_regs)
    assert _mean_access_bytes(r.ptx) >= _mean_access_bytes(xla_ptx, kernel)


def _mean_access_bytes(ptx: str, entry: str | None = None) -> float:
    """Mean bytes a thread moves per global load or store instruction in ``entry``'s PTX (the module's first
    entry by default)."""
    if entry is not None:
        ptx = ptx[ptx.index(f".entry {entry}("):]
        nxt = ptx.find(".entry ", 1)
        ptx = ptx if nxt < 0 else ptx[:nxt]
    widths = []
    for m in re.finditer(r"\b(?:ld|st)\.global\S*", ptx):  # ld.global[.qualifiers][.vN].tBITS
        vec = re.search(r"\.v([248])\.", m.group(0))
        bits = re.search(r"\.[bsuf](8|16|32|64)$", m.group(0))
        widths.append((int(vec.group(1)) if vec else 1) * int(bits.group(1)) // 8)
    assert widths, "no global loads or stores"
    return sum(widths) / len(widths)


#: ``new_sort_small``'s fusions at other shapes (fusion, text replaced): a sort along the major dimension (every
#: access a strided scalar one), and rows of several tiles (the first launch's positions need each tile's start).
RESHAPED = [("fusion.1", (("s32[16,100]{1,0} iota(), iota_dimension=1", "s32[1000,16]{1,0} iota(), iota_dimension=0"),
                          ("dimensions={1}, to_apply=%region_1.3", "dimensions={0}, to_apply=%region_1.3"),
                          ("[16,100]", "[1000,16]"))),
            ("fusion", (("[1000]", "[5000]"),))]


@pytest.mark.parametrize("fusion,edits", RESHAPED, ids=["major_dimension", "rows_of_two_tiles"])
def test_tiled_launches_do_not_spill(fusion, edits, tmp_path):
    """Every tiled launch of these sorts compiles for sm_90 without spills under its register cap."""
    if not (LAUNCH / "new_sort_small.h200_opt.hlo").exists():
        pytest.skip(f"{LAUNCH} is absent (the shared corpus is not checked out beside the project)")
    text = (LAUNCH / "new_sort_small.h200_opt.hlo").read_text()
    for old, new in edits:
        assert old in text
        text = text.replace(old, new)
    path = tmp_path / "reshaped.hlo"
    path.write_text(text)
    em, emitted = _sort_fusion(path, fusion)
    tiled = {(k.source, tuple(sorted(k.constexprs.items()))): k for k in emitted.kernels if "TILE" in k.constexprs}
    assert tiled
    for ks in tiled.values():
        r = triton_runtime.compile_for_target(ks, pointer_alignment=16)
        regs, spill = _ptxas_registers(r.ptx, ks.entry)
        assert spill == 0 and regs <= ks.max_registers, (ks.name, regs, spill)
