"""A loop fusion's elemental reduce unrolled as XLA's ``xla-gpu-optimize-loops`` leaves it (rand_100240's shape: a
sum of ``exp`` over 31 rows): a heavy step body keeps a loop on sm_90, as XLA's kernel does (XLA: 20 registers,
5 memory instructions), where a light one is written out; both match the reference evaluator in the interpreter."""

from __future__ import annotations

import re

import numpy as np
import pytest
from fusion_harness import load, loop_fusions, operands_and_reference, run_and_compare
from hlo_modules import binary_reducer

from fusegen.codegen import loop_unroll, sass

_SUM = """
HloModule t
{reducer}
fused {{
  p = f16[31,16] parameter(0)
  q = f16[16] parameter(1)
  qb = f16[31,16] broadcast(q), dimensions={{1}}
  d = f16[31,16] subtract(p, qb)
  e = f16[31,16] {op}(d)
  w = f32[31,16] convert(e)
  z = f32[] constant(0)
  ROOT r = f32[16] reduce(w, z), dimensions={{0}}, to_apply=add
}}
ENTRY main {{
  p = f16[31,16] parameter(0)
  q = f16[16] parameter(1)
  ROOT f = f32[16] fusion(p, q), kind=kLoop, calls=fused
}}
"""


@pytest.mark.parametrize("op,kept", [("exponential", True), ("negate", False)])
def test_elemental_reduce_loop_by_xlas_rule(op, kept):
    m = load(_SUM.format(op=op, reducer=binary_reducer("add", "add")))
    (f,) = loop_fusions(m)
    rng = np.random.default_rng(7)
    args = [rng.standard_normal((31, 16)).astype(np.float16), rng.standard_normal(16).astype(np.float16)]
    ops, ref = operands_and_reference(m, f, args=args)
    emitted, _ = run_and_compare(f, ops, ref)
    (ks,) = emitted.kernels
    # 31 steps is prime: XLA's rule unrolls by 1 whatever the size, and a heavy body keeps the loop
    assert re.search(r"for r\w* in range\(0, 31\):", ks.source), ks.source
    assert (loop_unroll.NOUNROLL_ASM in ks.source) == kept
    stats = sass.kernel_sass_stats(ks, use_cache=False).to_json()
    # kept: one load a step in a loop (XLA's 20 registers); written out: 31 loads, no loop
    assert stats["has_loop"] == kept, stats
    assert (stats["global_memory_instructions"] <= 4) == kept, stats
