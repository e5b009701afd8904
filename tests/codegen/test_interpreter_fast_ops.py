"""The tensor operators' fast paths (fusegen.codegen.interpreter_fast_ops) give, bit for bit, what Triton's semantic
layer gives: a kernel applying every operator they cover to tensors of one type and to Python scalars, in both
orders, over int32 / int64 / uint32 / fp32 / fp16 / fp64 operands with negative values, zero divisors and NaN, runs
through Triton's own interpreter loop (no fast path) and through fusegen's (fast paths, one by one and batched);
the outputs agree byte for byte and with numpy where the semantics are plain."""

from __future__ import annotations

import numpy as np

from interpreter_runs import _both

_OPS = '''def k(xi, xf, xh, xd, oi, of, oh, ob, od, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    lane = tl.arange(0, BLOCK)
    at = pid * BLOCK + lane
    i = tl.load(xi + at)
    f = tl.load(xf + at)
    h = tl.load(xh + at)
    d = tl.load(xd + at)
    j = (i * 7 + 3).to(tl.int32)
    u = i.to(tl.uint32)
    w = i.to(tl.int64)
    oi_ = oi + at * 12
    tl.store(oi_, i + j)
    tl.store(oi_ + 1, 5 - i * j - 2)
    tl.store(oi_ + 2, i // (j % 5))            # a zero divisor where j % 5 == 0, negative dividends
    tl.store(oi_ + 3, i % 7 + (2147483000 + i % 100))
    tl.store(oi_ + 4, (i & j) | (i ^ 12))
    tl.store(oi_ + 5, (w * 3000000000 // 7 % 1000).to(tl.int32))
    tl.store(oi_ + 6, (u // 3 + u % 5 + u * 2).to(tl.int32))
    tl.store(oi_ + 7, 3 * i + pid)
    tl.store(oi_ + 8, i.to(tl.int32) - pid * 2)
    tl.store(oi_ + 9, (i < j).to(tl.int32) + (i >= 3).to(tl.int32) * 2 + (u > 7).to(tl.int32) * 4)
    tl.store(oi_ + 10, (i == j).to(tl.int32) + (i != -3).to(tl.int32) * 2 + (i <= pid).to(tl.int32) * 4)
    tl.store(oi_ + 11, ((i > 0) & (j > 0)).to(tl.int32) + ((i > 0) ^ (j < 0)).to(tl.int32) * 2)
    of_ = of + at * 8
    g = f * 0.5 + 1
    tl.store(of_, f + g)
    tl.store(of_ + 1, 2.0 - f * g)
    tl.store(of_ + 2, f / g)
    tl.store(of_ + 3, f % g)
    tl.store(of_ + 4, f / 3 + 1e-40)
    tl.store(of_ + 5, 3 * f - 1e39)
    tl.store(of_ + 6, (f < g).to(tl.float32) + (f != f).to(tl.float32) * 2 + (f == 1.5).to(tl.float32) * 4)
    tl.store(of_ + 7, f.to(tl.float32) - i.to(tl.float32))
    oh_ = oh + at * 3
    tl.store(oh_, h * h + h)
    tl.store(oh_ + 1, h / (h + 1.0).to(tl.float16))
    tl.store(oh_ + 2, (h - 0.25).to(tl.float16))
    tl.store(ob + at, f > 0.5)
    od_ = od + at * 2
    tl.store(od_, d * 1.5 + d / 3)
    tl.store(od_ + 1, d % 2.5 - 7)
'''


def test_operators_on_one_type_and_scalars_match_tritons_semantic_layer():
    block, grid = 16, 12
    n = block * grid
    rng = np.random.default_rng(11)
    xi = rng.integers(-40, 40, n).astype(np.int32)
    xf = (rng.standard_normal(n) * 3).astype(np.float32)
    xf[::7] = np.nan
    xf[3::11] = 1.5
    xh = (rng.standard_normal(n) * 2).astype(np.float16)
    xd = rng.standard_normal(n) * 10
    (oi, of, oh, ob, od), batched = _both(_OPS, grid, [xi, xf, xh, xd],
                                          [("s32", 12 * n), ("f32", 8 * n), ("f16", 3 * n), ("pred", n),
                                           ("f64", 2 * n)], constexprs={"BLOCK": block})
    assert batched > 0
    oi, of = oi.reshape(n, 12), of.reshape(n, 8)
    j = xi * 7 + 3
    np.testing.assert_array_equal(oi[:, 0], xi + j)
    np.testing.assert_array_equal(oi[:, 1], 5 - xi * j - 2)
    np.testing.assert_array_equal(oi[:, 4], (xi & j) | (xi ^ 12))
    pid = np.repeat(np.arange(grid), block)
    np.testing.assert_array_equal(oi[:, 7], 3 * xi + pid)
    np.testing.assert_array_equal(oi[:, 9], (xi < j) + (xi >= 3) * 2 + (xi.view(np.uint32) > 7) * 4)
    np.testing.assert_array_equal(of[:, 0], xf + (xf * np.float32(0.5) + np.float32(1)))
    np.testing.assert_array_equal(ob.astype(bool), xf > 0.5)
