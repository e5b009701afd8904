"""A reverse along the minor dimension read as XLA reads it: each thread's run of lanes one vector at the run's
lowest address, reversed in registers (``UniformRunsMixin._load_reversed_runs``). Exact against numpy's flip,
at the interpreter's wider programs and at XLA's own block; in the PTX the loads are as wide as the stores."""

from __future__ import annotations

import attrs
import ml_dtypes
import numpy as np
import pytest

from fusion_harness import _only_fusion, _run_loop, load

from fusegen.codegen import triton_runtime


_REV = """HloModule m
fused {{
  x = {et}[{dims}] parameter(0)
  r = {et}[{dims}] reverse(x), dimensions={{{rdims}}}
  ROOT n = {et}[{dims}] negate(r)
}}
ENTRY e {{
  x = {et}[{dims}] parameter(0)
  ROOT f = {et}[{dims}] fusion(x), kind=kLoop, calls=fused
}}"""


@pytest.mark.parametrize("et,dims,rdims,vector", [
    ("f32", "2048,512", "1", True),  # v_reverse: one 16-byte load a thread, reversed in registers
    ("f16", "512,2048", "1", True),
    ("bf16", "768,1536", "0,1", True),  # both dimensions: the row offset (767 - r) * 1536 keeps runs aligned
    ("s8", "1024,2048", "1", True),
    ("f32", "1024,1024", "0", False),  # only the major dimension: the lanes rise, Triton's own vectorisation
    ("f32", "1000,1030", "1", False),  # 1030 is no multiple of a run: runs cross rows
    ("f32", "64,256,64", "1,2", True),
])
def test_reverse_reads_a_run_as_one_vector(et, dims, rdims, vector):
    """A reverse along the minor dimension reads each thread's run of lanes as one vector at the run's lowest
    address and reverses it in registers, as XLA loads 16 bytes and reverses them (v_reverse: 1 x LDG.128 a
    thread, was 4 x 4-byte loads). Exact against numpy's flip; in the PTX the loads are as wide as the stores."""
    from kernel_inspection import global_accesses

    shape = tuple(int(d) for d in dims.split(","))
    rng = np.random.default_rng(7)
    dt = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "s8": np.int8}[et]
    x = (rng.integers(-100, 100, shape) if et == "s8" else rng.standard_normal(shape)).astype(dt)
    text = _REV.format(et=et, dims=dims, rdims=rdims)
    outs, _, ops, emitted = _run_loop(text, [x])
    want = -np.flip(x, axis=tuple(int(d) for d in rdims.split(",")))
    np.testing.assert_array_equal(outs[0], want)
    # and at XLA's own block, whose exact-cover branch the interpreter's wider programs may not take
    raw = attrs.evolve(emitted, kernels=tuple(attrs.evolve(k, interpret_variant=None) for k in emitted.kernels))
    (at_xla,) = triton_runtime.run_fusion(raw, ops, _only_fusion(load(text)), interpret_max_programs=None)
    np.testing.assert_array_equal(at_xla, want)
    src = emitted.kernels[0].source
    assert ("tl.join(" in src) == vector, src
    if vector:
        ptx = triton_runtime.compile_for_target(emitted.kernels[0], pointer_alignment=16).ptx
        acc = global_accesses(ptx)
        widths = {kind: {n for k, n in acc if k == kind} for kind in ("ld", "st")}
        assert widths["ld"] == widths["st"] and len(widths["ld"]) == 1, acc  # a run's load as wide as its store
