"""``benchmarks/ptx_vs_xla.py``: PTX statistics of XLA's kernels and fusegen's for the same fusion."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _bench():
    spec = importlib.util.spec_from_file_location("ptx_vs_xla", ROOT / "benchmarks" / "ptx_vs_xla.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    if not (mod.LAUNCH / "LAUNCH.tsv").exists():
        pytest.skip(f"{mod.LAUNCH} is absent (the shared corpus is not checked out beside the project)")
    return mod


def test_ptx_stats_counts_vector_width_and_registers():
    b = _bench()
    text = """.visible .entry k(
  .param .u64 k_param_0
)
.reqntid 128, 1, 1
{
  .reg .pred %p<3>;
  .reg .b32 %r<9>;
  @%p1 ld.global.nc.v4.b32 { %r1, %r2, %r3, %r4 }, [ %rd1 + 0 ];
  ld.global.b16 %rs1, [%rd2];
  st.global.v2.b32 [ %rd3 + 0 ], { %r5, %r6 };
}
"""
    assert b.ptx_entry("// other\n" + text, "k").startswith(".entry k(") and b.ptx_entry(text, "q") is None
    s = b.ptx_stats(b.ptx_entry(text, "k"))
    assert s["mem_insts"] == 3 and s["max_bytes"] == 16 and s["registers"] == 2 + 8
    assert abs(s["mean_bytes"] - (16 + 2 + 8) / 3) < 1e-9


def test_loop_kernels_vectorise_like_xla():
    """The unrolled f32 multi-output loop (XLA: v4 loads, 16 B) and a bf16 loop, compiled for sm_90."""
    b = _bench()
    rows = [r for r in b.native_rows("new_loop_multi_output")]
    assert {r["fusion_name"] for r in rows} == {"loop_add_fusion", "loop_add_convert_multiply_fusion"}
    res = b.compare(rows, log=lambda *a: None)
    for r in res:
        assert "skipped" not in r, r
        assert r["fusegen"]["mean_bytes"] >= r["xla"]["mean_bytes"], r
        assert r["fusegen_threads"] == r["xla_threads"]  # same grid x threads
    big = next(r for r in res if r["fusion"] == "loop_add_convert_multiply_fusion")
    assert big["xla"]["max_bytes"] == 16 and big["fusegen"]["max_bytes"] == 16
    summary = b.summarize(res)
    assert summary["all"]["share_at_least_xla"] == 1.0 and summary["kLoop"]["kernels"] == 2
