"""The elemental generator reads pad, reshape and bitcast off the ops' indexing maps (issue 15): kernels run
in the Triton interpreter and are compared with numpy (and the reference evaluator)."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_harness import load, loop_fusions, operands_and_reference, run_and_compare


def _np_pad(x: np.ndarray, cfg: list[tuple[int, int, int]], value: float) -> np.ndarray:
    """XLA's pad in numpy: interior padding first, then low/high edges (negative ones cut)."""
    for d, (lo, hi, inner) in enumerate(cfg):
        n = x.shape[d]
        size = n + max(n - 1, 0) * inner
        shape = list(x.shape)
        shape[d] = size
        y = np.full(shape, value, x.dtype)
        sl = [slice(None)] * x.ndim
        sl[d] = slice(0, size, inner + 1)
        y[tuple(sl)] = x
        widths = [(0, 0)] * x.ndim
        widths[d] = (max(lo, 0), max(hi, 0))
        y = np.pad(y, widths, constant_values=value)
        sl = [slice(None)] * x.ndim
        sl[d] = slice(max(-lo, 0), y.shape[d] - max(-hi, 0))
        x = y[tuple(sl)]
    return x


def _run(text: str, args: list) -> list:
    m = load(text)
    (f,) = loop_fusions(m)
    ops, ref = operands_and_reference(m, f, args=args)
    emitted, outs = run_and_compare(f, ops, ref)
    assert emitted.emitter == "LoopFusion"
    return outs


def _pad_module(in_shape, cfg, layout: str = "") -> tuple[str, tuple[int, ...]]:
    out = [lo + hi + n + max(n - 1, 0) * inner for n, (lo, hi, inner) in zip(in_shape, cfg)]
    pad = "x".join(f"{lo}_{hi}_{inner}" for lo, hi, inner in cfg)
    ins = ",".join(map(str, in_shape))
    outs = ",".join(map(str, out))
    return f"""
HloModule t
fused {{
  p0 = f32[{ins}]{layout} parameter(0)
  v = f32[] parameter(1)
  pad = f32[{outs}] pad(p0, v), padding={pad}
  ROOT n = f32[{outs}] negate(pad)
}}
ENTRY main {{
  p0 = f32[{ins}]{layout} parameter(0)
  v = f32[] parameter(1)
  ROOT f = f32[{outs}] fusion(p0, v), kind=kLoop, calls=fused
}}
""", tuple(out)


@pytest.mark.parametrize("in_shape,cfg", [
    ((5, 7), [(1, 2, 1), (-1, 3, 0)]),             # interior + negative low edge
    ((6, 4), [(-3, -2, 2), (2, -1, 1)]),           # negative low/high with interior stride 3 and 2
    ((3, 4, 2), [(0, 0, 3), (-4, 1, 1), (2, 2, 0)]),
    ((4,), [(-2, -3, 4)]),                          # both edges negative, wide interior
    ((1, 3), [(2, 1, 5), (0, 0, 0)]),               # interior padding of a size-1 dimension is none
])
def test_pad_from_map_matches_numpy(in_shape, cfg):
    text, out_shape = _pad_module(in_shape, cfg)
    x = np.random.default_rng(3).standard_normal(in_shape).astype(np.float32)
    v = np.float32(7.5)
    want = -_np_pad(x, cfg, v)
    assert want.shape == out_shape
    (got,) = _run(text, [x, v])
    np.testing.assert_array_equal(got, want)


def test_pad_of_operand_with_non_default_layout():
    cfg = [(2, -1, 1), (-1, 2, 2)]
    text, _ = _pad_module((4, 5), cfg, "{0,1}")
    x = np.random.default_rng(4).standard_normal((4, 5)).astype(np.float32)
    (got,) = _run(text, [x, np.float32(-1.0)])
    np.testing.assert_array_equal(got, -_np_pad(x, cfg, np.float32(-1.0)))


def test_pad_everything_cut_is_the_padding_value():
    text, out_shape = _pad_module((3, 4), [(-3, 2, 0), (0, 0, 0)])
    x = np.ones((3, 4), np.float32)
    (got,) = _run(text, [x, np.float32(2.0)])
    np.testing.assert_array_equal(got, np.full(out_shape, -2.0, np.float32))
