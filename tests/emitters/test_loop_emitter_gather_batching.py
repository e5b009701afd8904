"""Gather with ``operand_batching_dims`` / ``start_indices_batching_dims`` in the loop emitter (what JAX emits for
``take_along_axis``): kernels run in Triton's interpreter against numpy formulas and XLA:CPU (jaxlib), and compile
for sm_90."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from fusion_harness import load, operands_and_reference, run_and_compare
from xla_oracle import JAX_ERROR, run_xla

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import triton_runtime
from fusegen.dispatch import get_emitter_fusion_kind

BUGS = Path(__file__).parents[2].parent / "shared" / "corpus" / "bugs"


def _wrap(entry_params: list[str], gather: str, out: str) -> str:
    """A module whose entry is one kLoop fusion of ``gather`` over the given parameters."""
    params = "\n".join(f"  p{i} = {s} parameter({i})" for i, s in enumerate(entry_params))
    return (f"HloModule g\nfused {{\n{params}\n  ROOT g = {out} {gather}\n}}\nENTRY e {{\n{params}\n"
            f"  ROOT f = {out} fusion({', '.join(f'p{i}' for i in range(len(entry_params)))}), kind=kLoop, "
            f"calls=fused\n}}\n")


def _run(text: str, args: list[np.ndarray]) -> np.ndarray:
    m = load(text)
    fusion = m.entry.root
    analysis = FusionAnalysis.create(fusion)
    assert get_emitter_fusion_kind(analysis).kind == "kLoop"
    ops, ref = operands_and_reference(m, fusion, args=args)
    emitted, outs = run_and_compare(fusion, ops, ref)
    assert emitted.emitter == "LoopFusion"
    assert ".target sm_90a" in triton_runtime.compile_for_target(emitted.kernels[0]).ptx
    return outs[0]


@pytest.mark.skipif(not BUGS.is_dir(), reason=f"shared corpus not found at {BUGS}")
def test_b39_two_batching_dims_and_a_permuted_start_index_map():
    z = np.load(BUGS / "B39_gather_batching_dims.npz")
    x, idx = z["p0"], z["p1"]
    gather = ("gather(p0, p1), offset_dims={2,3}, collapsed_slice_dims={}, start_index_map={3,2}, "
              "operand_batching_dims={0,1}, start_indices_batching_dims={0,1}, index_vector_dim=2, "
              "slice_sizes={1,1,2,2}")
    out = _run(_wrap(["f32[2,3,4,5]", "s32[2,3,2]"], gather, "f32[2,3,2,2]"), [x, idx])
    expect = np.empty((2, 3, 2, 2), np.float32)
    for b0 in range(2):
        for b1 in range(3):
            r0 = min(max(int(idx[b0, b1, 1]), 0), 2)
            c0 = min(max(int(idx[b0, b1, 0]), 0), 3)
            expect[b0, b1] = x[b0, b1, r0:r0 + 2, c0:c0 + 2]
    assert np.array_equal(out, expect)
    if JAX_ERROR is None:
        assert np.array_equal(run_xla((BUGS / "B39_gather_batching_dims.hlo").read_text(), [x, idx])[0], expect)


@pytest.mark.skipif(JAX_ERROR is not None, reason=JAX_ERROR or "")
def test_take_along_axis_with_index_vector_dim_first_and_a_middle_batching_dim():
    """operand [5,3,4] batched on dim 1; indices [1,6,3] with index_vector_dim=0 and the batch on indices dim 2."""
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    idx = rng.integers(-2, 7, (1, 6, 3)).astype(np.int32)
    gather = ("gather(p0, p1), offset_dims={2}, collapsed_slice_dims={0}, start_index_map={0}, "
              "operand_batching_dims={1}, start_indices_batching_dims={2}, index_vector_dim=0, slice_sizes={1,1,4}")
    text = _wrap(["f32[5,3,4]", "s32[1,6,3]"], gather, "f32[6,3,4]")
    out = _run(text, [x, idx])
    expect = np.stack([np.stack([x[min(max(int(idx[0, i, b]), 0), 4), b, :] for b in range(3)]) for i in range(6)])
    assert np.array_equal(out, expect)
    oracle = f"HloModule o\nENTRY e {{\n  p0 = f32[5,3,4] parameter(0)\n  p1 = s32[1,6,3] parameter(1)\n" \
             f"  ROOT g = f32[6,3,4] {gather}\n}}\n"
    assert np.array_equal(run_xla(oracle, [x, idx])[0], expect)
