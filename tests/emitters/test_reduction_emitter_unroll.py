"""A reduction's per-thread step loop unrolled as XLA's ``xla-gpu-optimize-loops`` unrolls it: a column reduction
whose step body holds a ``log`` (20 size units) keeps a runtime loop around a partial unroll, where the same
reduction of plain values is written out whole; both match the reference evaluator in the interpreter, and the
heavy one's sm_90 code keeps a loop (fewer memory instructions than 63 written-out steps)."""

from __future__ import annotations

import re

import pytest
from fusion_harness import load, operands_and_reference, run_and_compare
from hlo_modules import binary_reducer

from fusegen.analysis.fusion_analysis import FusionAnalysis
from fusegen.codegen import loop_unroll, triton_runtime
from fusegen.device import get_device
from fusegen_plugins.emitters.reduction import create_reduction_emitter

# the shape of a random program's column max (rand_100132: bf16[2002,8] -> [8], where XLA keeps a loop)
_COLMAX = """
HloModule t
{reducer}
fused {{
  p = f32[{rows},8] parameter(0)
  a = f32[{rows},8] abs(p)
  one = f32[] constant(1)
  ones = f32[{rows},8] broadcast(one), dimensions={{}}
  s = f32[{rows},8] add(a, ones)
  {body}
  c = f32[] constant(-inf)
  ROOT r = f32[8] reduce(v, c), dimensions={{0}}, to_apply=mx
}}
ENTRY main {{
  p = f32[{rows},8] parameter(0)
  ROOT f = f32[8] fusion(p), kind=kInput, calls=fused
}}
"""


def _emit(body: str):
    m = load(_COLMAX.format(body=body.format(rows=1024), rows=1024, reducer=binary_reducer("mx", "maximum")))
    f = m.entry.root
    emitter = create_reduction_emitter(FusionAnalysis.create(f, get_device("h200")))
    emitted = emitter.emit()
    ops, ref = operands_and_reference(m, f, seed=3)
    run_and_compare(f, ops, ref, emitted)
    (ks,) = emitted.kernels
    return ks


@pytest.mark.parametrize("body,heavy", [("v = f32[{rows},8] log(s)", True), ("v = f32[{rows},8] multiply(s, s)", False)])
def test_step_loop_unrolled_by_xlas_rule(body, heavy):
    ks = _emit(body)
    nit = ks.constexprs["NIT"]
    assert nit > loop_unroll.MAX_UNROLL_FACTOR
    m = re.search(r"for it_o in range\(0, NIT // (\d+)\):", ks.source)
    if heavy:
        assert m, ks.source
        factor = int(m.group(1))
        assert 1 < factor < nit and nit % factor == 0
        # the step body as written (between the inner header's assignment and the loop's end) sets the factor
        lines = ks.source.splitlines()
        start = next(k for k, ln in enumerate(lines) if ln.strip().startswith("it = it_o *"))
        ind = len(lines[start]) - len(lines[start].lstrip())
        step = [ln for ln in lines[start + 1:]][:next(k for k, ln in enumerate(lines[start + 1:])
                                                       if ln.strip() and len(ln) - len(ln.lstrip()) < ind)]
        assert loop_unroll.unroll_factor(nit, loop_unroll.body_size(step)) == factor
        # LLVM keeps the runtime loop: one load per written-out step, not one per step
        loads = re.findall(r"ld\.global", triton_runtime.compile_for_target(ks, pointer_alignment=16).ptx)
        assert len(loads) == factor, (len(loads), factor, nit)
    else:
        assert m is None and "for it in tl.static_range(0, NIT):" in ks.source
