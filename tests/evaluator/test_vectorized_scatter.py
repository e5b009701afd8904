"""Scatter with an arbitrary update computation and select-and-scatter as array programs (issue 22): the rounds
of :mod:`fusegen.evaluator.vectorized_scatter` against a one-update-at-a-time numpy loop (the evaluator's path
before) and XLA:CPU (jaxlib), with duplicate indices whose combine order changes the answer."""

from __future__ import annotations

import numpy as np
import pytest

from xla_oracle import JAX_ERROR, run_xla

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.evaluator.vectorized_scatter import update_rounds
from fusegen.hlo.parser import parse_module

# acc' = acc * 0.5 + u: not commutative, so duplicate indices must combine in scatter-index order
SCATTER = """HloModule m
upd {
  a = f32[] parameter(0)
  u = f32[] parameter(1)
  h = f32[] constant(0.5)
  m = f32[] multiply(a, h)
  ROOT r = f32[] add(m, u)
}
ENTRY e {
  op = f32[16,3] parameter(0)
  idx = s32[40,1] parameter(1)
  up = f32[40,3] parameter(2)
  ROOT s = f32[16,3] scatter(op, idx, up), update_window_dims={1}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=upd
}
"""

# variadic: keep the larger value and its index (ties to the smaller index), as an argmax scatter
VARIADIC = """HloModule m
upd {
  av = f32[] parameter(0)
  ai = s32[] parameter(1)
  bv = f32[] parameter(2)
  bi = s32[] parameter(3)
  gt = pred[] compare(bv, av), direction=GT
  eq = pred[] compare(bv, av), direction=EQ
  lt = pred[] compare(bi, ai), direction=LT
  tie = pred[] and(eq, lt)
  take = pred[] or(gt, tie)
  v = f32[] select(take, bv, av)
  i = s32[] select(take, bi, ai)
  ROOT t = (f32[], s32[]) tuple(v, i)
}
ENTRY e {
  ov = f32[8] parameter(0)
  oi = s32[8] parameter(1)
  idx = s32[64,1] parameter(2)
  uv = f32[64] parameter(3)
  ui = s32[64] parameter(4)
  ROOT s = (f32[8], s32[8]) scatter(ov, oi, idx, uv, ui), update_window_dims={}, inserted_window_dims={0},
      scatter_dims_to_operand_dims={0}, index_vector_dim=1, to_apply=upd
}
"""

SELECT_AND_SCATTER = """HloModule m
ge {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT c = pred[] compare(a, b), direction=GE
}
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2,9,10] parameter(0)
  src = f32[2,5,5] parameter(1)
  zero = f32[] constant(0)
  ROOT r = f32[2,9,10] select-and-scatter(x, src, zero), window={size=1x3x3 stride=1x2x2 pad=0_0x1_1x1_0},
      select=ge, scatter=add
}
"""


def _loop_scatter(op, idx, up):
    out = op.copy()
    for s in range(idx.shape[0]):
        i = int(idx[s, 0])
        if 0 <= i < op.shape[0]:
            out[i] = out[i] * np.float32(0.5) + up[s]
    return out


def test_update_rounds_rank_duplicates_in_order():
    rank, rounds = update_rounds(np.array([3, 1, 3, 3, 0, 1]))
    assert rank.tolist() == [0, 0, 1, 2, 0, 1] and rounds == 3


def test_scatter_with_an_order_sensitive_combiner():
    rng = np.random.default_rng(0)
    op = rng.integers(-4, 4, (16, 3)).astype(np.float32)
    idx = rng.integers(-1, 17, (40, 1)).astype(np.int32)  # duplicates and out-of-bounds windows (skipped)
    idx[:6] = 5
    up = rng.integers(-4, 4, (40, 3)).astype(np.float32)
    got = evaluate_module(parse_module(SCATTER, "s"), [op, idx, up])
    assert np.array_equal(got, _loop_scatter(op, idx, up))
    if JAX_ERROR is None:
        (want,) = run_xla(SCATTER, [op, idx, up])
        assert np.array_equal(got, want)


def test_variadic_scatter_argmax():
    rng = np.random.default_rng(1)
    ov, oi = np.full(8, -np.inf, np.float32), np.full(8, -1, np.int32)
    idx = rng.integers(0, 8, (64, 1)).astype(np.int32)
    uv = rng.integers(0, 5, 64).astype(np.float32)  # ties between values
    ui = np.arange(64, dtype=np.int32)[::-1].copy()
    v, i = evaluate_module(parse_module(VARIADIC, "v"), [ov, oi, idx, uv, ui])
    for k in range(8):
        hits = np.flatnonzero(idx[:, 0] == k)
        if hits.size == 0:
            assert v[k] == -np.inf and i[k] == -1
            continue
        best = uv[hits].max()
        assert v[k] == best and i[k] == ui[hits][uv[hits] == best].min()
    if JAX_ERROR is None:
        xv, xi = run_xla(VARIADIC, [ov, oi, idx, uv, ui])
        assert np.array_equal(v, xv) and np.array_equal(i, xi)


def _loop_select_and_scatter(x, src):
    out = np.zeros_like(x)
    for b in range(2):
        for i in range(5):
            for j in range(5):
                best = None
                for di in range(3):
                    for dj in range(3):
                        r, c = i * 2 + di - 1, j * 2 + dj - 1
                        if 0 <= r < 9 and 0 <= c < 10 and (best is None or not x[b, best[0], best[1]] >= x[b, r, c]):
                            best = (r, c)
                out[b, best[0], best[1]] += src[b, i, j]
    return out


@pytest.mark.parametrize("ties", [False, True])
def test_select_and_scatter_max_pool_gradient(ties):
    rng = np.random.default_rng(2)
    x = (rng.integers(0, 3, (2, 9, 10)) if ties else rng.standard_normal((2, 9, 10))).astype(np.float32)
    src = rng.integers(1, 9, (2, 5, 5)).astype(np.float32)
    got = evaluate_module(parse_module(SELECT_AND_SCATTER, "sas"), [x, src])
    assert np.array_equal(got, _loop_select_and_scatter(x, src))
    if JAX_ERROR is None:
        (want,) = run_xla(SELECT_AND_SCATTER, [x, src])
        assert np.array_equal(got, want)
