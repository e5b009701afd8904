"""A loop fusion's reduce over the contiguous minor dimension of a parameter reads it as vectors of up to 16 bytes,
as XLA's vectoriser reads its written-out loop (random program 100179's ``x - mean(x)`` over 17 f32: XLA 10 bytes
an access, 8 memory instructions), in the loop's order: the sum is the sequential f32 sum bit for bit. Rows whose
length no vector divides keep their scalar loads (XLA's vectoriser needs offsets the vector size divides)."""

from __future__ import annotations

import numpy as np
import pytest
from fusion_harness import load, loop_fusions, operands_and_reference, run_and_compare
from hlo_modules import binary_reducer

from fusegen.codegen import sass

_CENTERED = """
HloModule t
{reducer}
fused {{
  z = f32[] constant(0)
  p = {et}[{rows},{n}] parameter(0)
  w = f32[{rows},{n}] convert(p)
  s = f32[{rows}] reduce(w, z), dimensions={{1}}, to_apply=add
  sb = f32[{rows},{n}] broadcast(s), dimensions={{0}}
  ROOT d = f32[{rows},{n}] subtract(w, sb)
}}
ENTRY main {{
  p = {et}[{rows},{n}] parameter(0)
  ROOT f = f32[{rows},{n}] fusion(p), kind=kLoop, calls=fused
}}
"""


@pytest.mark.parametrize("et,rows,n,width", [("f32", 1, 17, 10.0), ("f16", 1, 24, 6.0), ("f32", 3, 16, 10.0),
                                             ("f32", 2, 15, None)])
def test_reduce_of_a_contiguous_row_reads_vectors(et, rows, n, width):
    m = load(_CENTERED.format(et=et, rows=rows, n=n, reducer=binary_reducer("add", "add")))
    (f,) = loop_fusions(m)
    x = np.random.default_rng(11).standard_normal((rows, n)).astype(np.dtype(et.replace("f", "float")))
    ops, ref = operands_and_reference(m, f, args=[x])
    emitted, (out,) = run_and_compare(f, ops, ref)
    (ks,) = emitted.kernels
    assert ("[None, :]" in ks.source) == (width is not None), ks.source
    s = np.zeros(rows, np.float32)
    for k in range(n):  # the loop's order
        s = (s + x[:, k].astype(np.float32)).astype(np.float32)
    np.testing.assert_array_equal(out, x.astype(np.float32) - s[:, None])
    if width is not None:
        stats = sass.kernel_sass_stats(ks, use_cache=False).to_json()
        assert stats["mean_global_access_bytes"] >= width, stats
