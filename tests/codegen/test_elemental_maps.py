"""The elemental generator reads pad, reshape and bitcast off the ops' indexing maps (issue 15): kernels run
in the Triton interpreter and are compared with numpy (and the reference evaluator)."""

from __future__ import annotations

import numpy as np
import pytest

from fusion_harness import load, loop_fusions, run_loop_text as _run


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


def _physical(x: np.ndarray, m2m: tuple[int, ...]) -> np.ndarray:
    """The elements of logical array ``x`` in memory order for layout minor-to-major ``m2m``."""
    return np.transpose(x, tuple(reversed(m2m))).reshape(-1)


def _logical(flat: np.ndarray, dims: tuple[int, ...], m2m: tuple[int, ...]) -> np.ndarray:
    order = tuple(reversed(m2m))
    return np.transpose(flat.reshape([dims[d] for d in order]), np.argsort(order))


@pytest.mark.parametrize("src_dims,src_m2m,dst_dims,dst_m2m", [
    ((2, 3, 4), (0, 2, 1), (6, 4), (1, 0)),         # layout-changing bitcast: transpose-reshape-transpose
    ((4, 6), (0, 1), (6, 4), (1, 0)),               # a transpose bitcast
    ((3, 1, 8), (2, 1, 0), (4, 3, 2), (0, 1, 2)),   # unit dimension, reversed output layout
    ((5, 6), (1, 0), (30,), (0,)),                  # a reshape bitcast
])
def test_bitcast_from_map_keeps_the_physical_order(src_dims, src_m2m, dst_dims, dst_m2m):
    def lay(m2m):
        return "{" + ",".join(map(str, m2m)) + "}"
    s, d = ",".join(map(str, src_dims)), ",".join(map(str, dst_dims))
    text = f"""
HloModule t
fused {{
  p = f32[{s}]{lay(src_m2m)} parameter(0)
  b = f32[{d}]{lay(dst_m2m)} bitcast(p)
  ROOT n = f32[{d}]{lay(dst_m2m)} negate(b)
}}
ENTRY main {{
  p = f32[{s}]{lay(src_m2m)} parameter(0)
  ROOT f = f32[{d}]{lay(dst_m2m)} fusion(p), kind=kLoop, calls=fused
}}
"""
    x = np.random.default_rng(6).standard_normal(src_dims).astype(np.float32)
    (got,) = _run(text, [x])
    np.testing.assert_array_equal(got, -_logical(_physical(x, src_m2m), dst_dims, dst_m2m))


def test_reshape_chain_from_maps_matches_numpy_and_reads_contiguously():
    text = """
HloModule t
fused {
  p = f32[24]{0} parameter(0)
  r = f32[4,6]{1,0} reshape(p)
  r2 = f32[2,3,4]{2,1,0} reshape(r)
  q = f32[2,3,4]{0,2,1} parameter(1)
  b = f32[6,4]{1,0} bitcast(q)
  b2 = f32[2,3,4]{2,1,0} reshape(b)
  t = f32[4,3,2]{2,1,0} transpose(r2), dimensions={2,1,0}
  r3 = f32[12,2]{1,0} reshape(t)
  r4 = f32[2,3,4]{2,1,0} reshape(r3)
  a = f32[2,3,4] add(r2, b2)
  ROOT s = f32[2,3,4] add(a, r4)
}
ENTRY main {
  p = f32[24]{0} parameter(0)
  q = f32[2,3,4]{0,2,1} parameter(1)
  ROOT f = f32[2,3,4] fusion(p, q), kind=kLoop, calls=fused
}
"""
    rng = np.random.default_rng(7)
    p = rng.standard_normal(24).astype(np.float32)
    q = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b2 = _physical(q, (0, 2, 1)).reshape(2, 3, 4)
    r4 = p.reshape(2, 3, 4).transpose(2, 1, 0).reshape(2, 3, 4)
    (got,) = _run(text, [p, q])
    np.testing.assert_allclose(got, p.reshape(2, 3, 4) + b2 + r4, rtol=1e-6)
    # the reshapes keep the linear index: both parameters are read at the kernel's own contiguous index
    m = load(text)
    (f,) = loop_fusions(m)
    from fusion_harness import pick_emitter
    from fusegen.analysis.fusion_analysis import FusionAnalysis

    src = pick_emitter(FusionAnalysis.create(f)).emit().kernels[0].source
    assert "tl.load(ope_p + lin_c," in src and "tl.load(ope_q + lin_c," in src, src


@pytest.mark.parametrize("src,dst", [
    ("f32[24]{0}", "f32[2,3,4]{2,1,0}"), ("f32[2,3,4]{2,1,0}", "f32[4,6]{1,0}"),
    ("f32[6,4]{1,0}", "f32[2,3,1,4]{3,2,1,0}"), ("f32[2,3,4]{0,2,1}", "f32[6,4]{1,0}"),
    ("f32[4,6]{0,1}", "f32[6,4]{1,0}"), ("f32[3,1,8]{2,1,0}", "f32[4,3,2]{0,1,2}"),
    ("s32[512,1]{1,0}", "s32[4,128]{1,0}"),
])
def test_generator_shape_map_is_the_analysis_map(src, dst):
    """The map codegen applies to reshape / bitcast is the relation ``compute_output_to_input_indexing``
    gives (checked point by point on the domain), only written without simplification."""
    from fusegen.codegen.elemental.index_maps import unsimplified_shape_map
    from fusegen.indexing import semantically_equal
    from fusegen.indexing.analysis import compute_output_to_input_indexing

    for op in ("reshape", "bitcast"):
        if op == "reshape" and (src.endswith("{0,2,1}") or "{0,1" in src or "{0,1" in dst):
            continue  # a reshape is logical (row-major) whatever the layouts; the bitcast case covers them
        m = load(f"HloModule t\nENTRY e {{\n  p = {src} parameter(0)\n  ROOT r = {dst} {op}(p)\n}}\n")
        inst = m.entry.root
        (want,) = compute_output_to_input_indexing(inst).maps(0)
        got = unsimplified_shape_map(inst)
        assert got is not None and semantically_equal(got, want), (op, str(got), str(want))


def test_pad_and_layout_bitcast_inside_a_row_reduction():
    """The reduction emitter reads its input through the same maps: a padded, bitcast operand summed per row."""
    from fusegen import dispatch
    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.codegen import triton_runtime
    from fusegen.plugin_manager import default_plugin_manager

    text = """
HloModule t
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
fused {
  p = f32[300,8]{0,1} parameter(0)
  b = f32[8,300]{1,0} bitcast(p)
  v = f32[] parameter(1)
  pad = f32[7,601] pad(b, v), padding=1_-2_0x-3_5_1
  z = f32[] constant(0)
  ROOT r = f32[7] reduce(pad, z), dimensions={1}, to_apply=add
}
ENTRY main {
  p = f32[300,8]{0,1} parameter(0)
  v = f32[] parameter(1)
  ROOT f = f32[7] fusion(p, v), kind=kInput, calls=fused
}
"""
    m = load(text)
    fusion = m.entry.root
    pm = default_plugin_manager()
    analysis = FusionAnalysis.create(fusion)
    kind = dispatch.get_emitter_fusion_kind(analysis, pm).kind
    emitter, _ = dispatch.get_fusion_emitter(analysis, kind, pm)
    assert "Reduction" in type(emitter).__name__
    x = np.random.default_rng(8).standard_normal((300, 8)).astype(np.float32)
    v = np.float32(0.25)
    (got,) = triton_runtime.run_fusion(emitter.emit(), [x, v], fusion)
    b = _logical(_physical(x, (0, 1)), (8, 300), (1, 0))  # the bitcast: f32[300,8]{0,1} is f32[8,300] row-major
    want = _np_pad(b.astype(np.float64), [(1, -2, 0), (-3, 5, 1)], 0.25).sum(axis=1)
    np.testing.assert_allclose(np.asarray(got).reshape(7), want, rtol=1e-5, atol=1e-4)
