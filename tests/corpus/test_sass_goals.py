"""Issue 28's goals, measured by ``benchmarks/ptx_vs_xla.py`` on every kernel launch of the six launch sets.

fusegen's sm_90 kernel for each fusion is assembled beside XLA's own (``ptxas -arch=sm_90a``, ``cuobjdump -sass``)
and compared statically: tensor cores wherever XLA uses them, no spills, no kernel narrower than XLA's (mean
bytes per global access), none over 1.5x XLA's global memory instructions per output, no runtime loop where
XLA's kernel has none, at most 5% of kernels over 1.25x XLA's registers, XLA's grid and block, and shared memory
equal to XLA's or differing for a cause the row names. The kernels that miss a goal today are listed below with
the reason; a fix that removes one must remove it here too (the lists are compared exactly), so the list is
what fusegen does not yet do. Slow (every kernel compiled: minutes cold); CI runs it.

Set ``r100000`` (issue 43) is a held-out sample: the 100 random programs of seeds 100000-100099 of
``../shared/tools/random_programs`` (``tests/data/xla_kernels_r100000/README.md``), never tuned against. Its misses,
register misses and spills included, are listed in its ``KNOWN.tsv`` (module, fusion, flag, reason); the 5% register
goal is asserted on the six sets fusegen was built against.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

from conftest import CORPUS

HERE = Path(__file__).resolve().parents[1]  # tests/
SETS = {"shared": CORPUS / "jax" / "launch", "x": HERE / "data" / "xla_kernels", "z": HERE / "data" / "xla_kernels_z",
        "w": HERE / "data" / "xla_kernels_w", "v": HERE / "data" / "xla_kernels_v",
        "u": HERE / "data" / "xla_kernels_u", "r100000": HERE / "data" / "xla_kernels_r100000"}
#: the sets fusegen was built against: at most 5% of their kernels over 1.25x XLA's registers
BUILT_AGAINST = ("shared", "x", "z", "w", "v", "u")


def _known_tsv(name: str) -> dict[tuple[str, str, str], dict[str, str]]:
    """A held-out set's ``KNOWN.tsv``: ``(set, module, fusion) -> {flag: reason}``."""
    out: dict[tuple[str, str, str], dict[str, str]] = {}
    path = SETS[name] / "KNOWN.tsv"
    for line in path.read_text().splitlines()[1:] if path.exists() else []:
        module, fusion, flag, reason = line.split("\t")
        out.setdefault((name, module, fusion), {})[flag] = reason
    return out


#: (set, module without .h200_opt.hlo, fusion) -> {flag: reason} of the kernels that miss a goal today
KNOWN: dict[tuple[str, str, str], dict[str, str]] = {**_known_tsv("r100000")}
#: rows whose shared memory differs from XLA's for no cause ptx_vs_xla names
UNEXPLAINED_SHARED: dict[tuple[str, str, str], str] = {
    ("r100000", "rand_100005", "input_reduce_fusion"): "XLA's 32 x 33 transposing tile (4224 bytes) for a reduction "
    "fusegen runs as a row reduction with Triton's scratch (512)",
    ("r100000", "rand_100066", "input_reduce_fusion.2"): "as rand_100005's: XLA's 32 x 33 tile, fusegen's 512 bytes",
    ("r100000", "rand_100051", "input_reduce_fusion"): "XLA's 16-byte cross-warp scratch, Triton's 512",
    ("r100000", "rand_100080", "loop_select_transpose_fusion"): "XLA's padded tile (7392 bytes), Triton's "
    "unpadded swizzled one (8192) of another shape",
    # rand_100017 fusion.3, 100079 fusion.7, 100085 fusion.13 and 100099 fusion.7 had it too, until their row
    # statistics were reduced on XLA's tile (9aa3a9d): now XLA's scratch, byte for byte
    ("r100000", "rand_100050", "fusion.5"): "a block-level kernel's reduction scratch: Triton's (64-256 bytes) over "
    "XLA's (8-128)",
}
#: rows whose launch differs from XLA's for no cause ptx_vs_xla names
UNEXPLAINED_LAUNCH: dict[tuple[str, str, str], str] = {}
# (rand_100030 fusion, 100059 fusion.4 and 100075 fusion, one-tile sorts of 2-element rows, had batched 512 rows a
# program: now a row a thread, XLA's launch or its threads in whole warps)
GOAL_FLAGS = ("narrower", "mem_insts_over_1_5", "loop_where_xla_has_none", "spills")

_RESULTS: dict[str, dict] = {}


def _ptx_vs_xla():
    spec = importlib.util.spec_from_file_location("ptx_vs_xla", HERE.parent / "benchmarks" / "ptx_vs_xla.py")
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod


def _compare(name: str) -> dict:
    from fusegen.codegen import sass

    if (why := sass.tools_unavailable_reason()) is not None:
        pytest.skip(f"ptxas/cuobjdump cannot run: {why}")
    where = SETS[name]
    if not (where / "LAUNCH.tsv").exists():
        pytest.skip(f"{where} is absent (the shared corpus is not checked out beside the project)")
    if name not in _RESULTS:
        _RESULTS[name] = _ptx_vs_xla().compare(where, jobs=2, log=lambda *a: None)
    return _RESULTS[name]


def _key(name: str, row: dict) -> tuple[str, str, str]:
    return name, row["module"].removesuffix(".h200_opt.hlo"), row["fusion"]


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(SETS))
def test_kernels_meet_xlas_on_every_launch(name):
    res = _compare(name)
    rows, a = res["rows"], res["summary"]["all"]
    assert a["kernels"] == len(rows) > 0 and a["failed"] == 0, [r.get("failure") for r in rows if r.get("failure")]
    assert a["tensor_cores_fusegen"] == a["tensor_cores_xla"], "a GEMM off the tensor cores"
    for flag in GOAL_FLAGS + (() if name in BUILT_AGAINST else ("registers_over_1_25",)):
        got = {_key(name, r) for r in rows if (r.get("flags") or {}).get(flag)}
        want = {k for k, v in KNOWN.items() if k[0] == name and flag in v}
        assert got == want, f"{flag}: new {sorted(got - want)}, fixed (remove from KNOWN) {sorted(want - got)}"
    launch = {_key(name, r) for r in rows if not r["launch_equal"] and "launch_difference" not in r}
    assert launch == {k for k in UNEXPLAINED_LAUNCH if k[0] == name}
    unexplained = {_key(name, r) for r in rows if r["launch_equal"] and not r["launch_shared_equal"]
                   and "shared_difference" not in r}
    want = {k for k in UNEXPLAINED_SHARED if k[0] == name}
    assert unexplained == want, f"new {sorted(unexplained - want)}, fixed {sorted(want - unexplained)}"


@pytest.mark.slow
def test_at_most_five_percent_of_kernels_over_a_quarter_more_registers():
    results = {name: _compare(name) for name in BUILT_AGAINST}
    over = [_key(n, r) for n, res in results.items() for r in res["rows"] if (r.get("flags") or {}).get(
        "registers_over_1_25")]
    total = sum(len(res["rows"]) for res in results.values())
    assert len(over) <= 0.05 * total, (len(over), total, over)
