"""Seeded default inputs follow each parameter's uses (fusegen.runtime.input_uses, make_inputs): small modules,
each checked with numpy statistics of the drawn values and, where it matters, with the module evaluated on them."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import REPO
from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_module
from fusegen.runtime.input_uses import parameter_uses
from fusegen.runtime.inputs import make_inputs

# a variance through a fusion and a while loop: layer norm's rsqrt(var + eps), var a parameter
RSQRT = """HloModule m
fused_norm {
  x = f32[4096] parameter(0)
  v = f32[] parameter(1)
  eps = f32[] constant(1e-5)
  ve = f32[] add(v, eps)
  r = f32[] rsqrt(ve)
  rb = f32[4096] broadcast(r), dimensions={}
  ROOT y = f32[4096] multiply(x, rb)
}
ENTRY e {
  x = f32[4096] parameter(0)
  var = f32[64,64] parameter(1)
  vb = f32[4096] bitcast(var)
  vs = f32[1] slice(vb), slice={[7:8]}
  v = f32[] reshape(vs)
  ROOT y = f32[4096] fusion(x, v), kind=kLoop, calls=fused_norm
}"""


def test_a_parameter_reaching_rsqrt_gets_positive_values():
    m = parse_module(RSQRT)
    uses = parameter_uses(m)
    assert 0 not in uses and uses[1].bounds == (-np.float32(1e-5), np.inf)  # var + eps > 0
    x, var = make_inputs(m, 0)
    assert var.min() >= 0.5 - 1e-5  # |N(0,1)| + 0.5 above the bound
    assert abs(float(np.median(var)) - (0.6745 + 0.5)) < 0.05  # the half-normal's median, shifted
    assert (x < 0).mean() > 0.45  # the data keeps its sign
    y = evaluate_module(m, [x, var])
    np.testing.assert_allclose(y, x.astype(np.float64) / np.sqrt(var.reshape(-1)[7] + 1e-5), rtol=1e-5)


# Adam's bias correction: (count + 1) ** -0.8, and v / (1 - b ** t) under a sqrt, the state carried by a while
ADAM = """HloModule m
body {
  p = (s32[], f32[512], s32[]) parameter(0)
  c = s32[] get-tuple-element(p), index=0
  v = f32[512] get-tuple-element(p), index=1
  i = s32[] get-tuple-element(p), index=2
  one = s32[] constant(1)
  c1 = s32[] add(c, one)
  cf = f32[] convert(c1)
  e = f32[] constant(-0.8)
  pw = f32[] power(cf, e)
  pb = f32[512] broadcast(pw), dimensions={}
  s = f32[512] sqrt(v)
  v2 = f32[512] multiply(s, pb)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[512], s32[]) tuple(c1, v2, i1)
}
cond {
  p = (s32[], f32[512], s32[]) parameter(0)
  i = s32[] get-tuple-element(p), index=2
  n = s32[] constant(3)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  count = s32[] parameter(0)
  v = f32[512] parameter(1)
  g = f32[512] parameter(2)
  zero = s32[] constant(0)
  two = f32[] constant(2)
  twob = f32[512] broadcast(two), dimensions={}
  g2 = f32[512] power(g, twob)
  vv = f32[512] add(v, g2)
  t = (s32[], f32[512], s32[]) tuple(count, vv, zero)
  w = (s32[], f32[512], s32[]) while(t), condition=cond, body=body
  ROOT out = f32[512] get-tuple-element(w), index=1
}"""


def test_uses_inside_a_while_body_reach_the_loop_state_parameters():
    m = parse_module(ADAM)
    uses = parameter_uses(m)
    # count + 1 reaches power's base (count > -1); v reaches sqrt through add; g only squared (an integral
    # exponent: any sign is fine)
    assert uses[0].bounds == (-1, np.inf) and uses[1].positive
    assert 2 not in uses
    count, v, g = make_inputs(m, 0)
    assert 0 <= int(count) <= 15 and v.min() >= 0.5 and (g < 0).any()
    out = evaluate_module(m, [count, v, g])
    assert np.isfinite(out).all()
    ref, c = v.astype(np.float64) + g.astype(np.float64) ** 2, int(count)
    for _ in range(3):
        c += 1
        ref = np.sqrt(ref) * float(c) ** -0.8
    np.testing.assert_allclose(out, ref, rtol=1e-5)


# 2 atanh(x) as log(1 + x) - log(1 - x): x in (-1, 1), from a bound each way
ATANH = """HloModule m
ENTRY e {
  x = f32[4096] parameter(0)
  c1 = f32[] constant(1)
  one = f32[4096] broadcast(c1), dimensions={}
  a = f32[4096] add(one, x)
  b = f32[4096] subtract(one, x)
  la = f32[4096] log(a)
  lb = f32[4096] log(b)
  ROOT r = f32[4096] subtract(la, lb)
}"""


def test_bounds_from_both_sides_give_values_inside_the_interval():
    m = parse_module(ATANH)
    assert parameter_uses(m)[0].bounds == (-1, 1)
    (x,) = make_inputs(m, 0)
    assert np.abs(x).max() < 0.9 and (x < -0.5).mean() > 0.1 and (x > 0.5).mean() > 0.1
    np.testing.assert_allclose(evaluate_module(m, [x]), 2 * np.arctanh(x.astype(np.float64)), rtol=1e-5, atol=1e-6)


VAR = """HloModule m
add {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  ROOT s = f32[] add(a, b)
}
ENTRY e {
  x = f32[2048] parameter(0)
  xx = f32[2048] multiply(x, x)
  z = f32[] constant(0)
  ss = f32[] reduce(xx, z), dimensions={0}, to_apply=add
  n = f32[] constant(2048)
  ms = f32[] divide(ss, n)
  m1 = f32[] reduce(x, z), dimensions={0}, to_apply=add
  mean = f32[] divide(m1, n)
  mm = f32[] multiply(mean, mean)
  var = f32[] subtract(ms, mm)
  vp = f32[] maximum(var, z)
  ROOT r = f32[] rsqrt(vp)
}"""


def test_a_square_or_a_clamp_at_zero_satisfies_a_root_and_leaves_the_data_alone():
    m = parse_module(VAR)
    assert parameter_uses(m) == {}
    (x,) = make_inputs(m, 0)
    np.testing.assert_array_equal(x, np.random.default_rng(0).standard_normal(2048, dtype=np.float32))


# x @ w1 @ w2 ... in f16: N(0, 1) weights grow each layer by sqrt(256) = 16 and overflow f16 by the fifth
CHAIN = """HloModule m
ENTRY e {
  x = f16[64,256] parameter(0)
  w0 = f16[256,256] parameter(1)
  w1 = f16[256,256] parameter(2)
  w2 = f16[256,256] parameter(3)
  w3 = f16[256,256] parameter(4)
  w4 = f16[256,256] parameter(5)
  w5t = f16[256,256] parameter(6)
  h0 = f16[64,256] dot(x, w0), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h1 = f16[64,256] dot(h0, w1), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h2 = f16[64,256] dot(h1, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h3 = f16[64,256] dot(h2, w3), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  h4 = f16[64,256] dot(h3, w4), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  w5 = f16[256,256] transpose(w5t), dimensions={1,0}
  ROOT h5 = f16[64,256] dot(h4, w5), lhs_contracting_dims={1}, rhs_contracting_dims={0}
}"""


def test_dot_operands_get_fan_in_scaled_values_and_a_deep_chain_stays_finite():
    m = parse_module(CHAIN)
    uses = parameter_uses(m)
    assert {n: u.fan_in for n, u in uses.items()} == {n: 256 for n in range(7)}
    args = make_inputs(m, 0)
    for a in args:  # N(0, 1/256): std 1/16, mean 0
        a = a.astype(np.float64)
        assert abs(a.std() - 1 / 16) < 0.02 / 16 * 3 and abs(a.mean()) < 3 / 16 / np.sqrt(a.size)
    out = np.asarray(evaluate_module(m, args), np.float64)
    h = args[0].astype(np.float64)
    for w in args[1:6]:
        h = h @ w.astype(np.float64)
    h = h @ args[6].astype(np.float64).T
    assert np.isfinite(out).all()
    assert 1e-3 < h.std() < 1  # x is scaled too: std 1/16, kept through depth
    np.testing.assert_allclose(out, h, atol=2e-2 * h.std())


def test_a_split_k_dot_counts_every_part_of_its_contraction():
    """XLA's own split-K (examples/gpu_mlp_bf16: [256,512] x [512,1024] as [256,4,128] x [4,128,1024] in a gemm
    fusion, then a reduce over the 4 parts): each output sums 512 products."""
    path = REPO / "examples" / "gpu_mlp_bf16.h100_opt.hlo"
    m = parse_module(path.read_text(), str(path))
    dot = next(i for i in m.all_instructions() if i.opcode == "dot")
    assert dot.operands[0].shape.dimensions == (256, 4, 128)
    uses = parameter_uses(m)
    assert uses[0].fan_in == uses[1].fan_in == 512 and 2 not in uses  # the bias is no dot operand
    x, w, b = make_inputs(m, 0)
    for a in (x, w):
        assert abs(a.astype(np.float64).std() - 512 ** -0.5) < 0.01 * 512 ** -0.5
    assert abs(b.astype(np.float64).std() - 1) < 0.1


def test_cudnn_convolution_weights_get_their_taps_times_input_features():
    """XLA's cuDNN forward convolutions of a ResNet (b01f_o01i kernels, transposed from the HWIO parameters)."""
    path = REPO / "tests" / "data" / "real_models" / "resnet.h200_opt.hlo"
    m = parse_module(path.read_text(), str(path))
    shapes = {p.parameter_number: p.shape.dimensions for p in m.entry.parameters}
    uses = parameter_uses(m)
    # 3x3x3 stem, 3x3x64 blocks, the 1x1x64 projection shortcut
    assert {n: uses[n].fan_in for n in (0, 3, 6, 9, 12)} == {0: 27, 3: 576, 6: 576, 9: 576, 12: 64}
    assert all(shapes[n][0] * shapes[n][1] * shapes[n][2] == uses[n].fan_in for n in (0, 3, 6, 9, 12))
    args = make_inputs(m, 0)
    assert abs(args[3].std() - 576 ** -0.5) < 0.03 * 576 ** -0.5


CONV_SCAN = """HloModule m
body {
  p = (s32[], f32[8,32,32], f32[4,32]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  ws = f32[8,32,32] get-tuple-element(p), index=1
  h = f32[4,32] get-tuple-element(p), index=2
  z = s32[] constant(0)
  w = f32[1,32,32] dynamic-slice(ws, i, z, z), dynamic_slice_sizes={1,32,32}
  w2 = f32[32,32] bitcast(w)
  h2 = f32[4,32] dot(h, w2), lhs_contracting_dims={1}, rhs_contracting_dims={0}
  one = s32[] constant(1)
  i1 = s32[] add(i, one)
  ROOT t = (s32[], f32[8,32,32], f32[4,32]) tuple(i1, ws, h2)
}
cond {
  p = (s32[], f32[8,32,32], f32[4,32]) parameter(0)
  i = s32[] get-tuple-element(p), index=0
  n = s32[] constant(8)
  ROOT lt = pred[] compare(i, n), direction=LT
}
ENTRY e {
  img = f32[2,16,16,8] parameter(0)
  k = f32[3,3,8,24] parameter(1)
  ws = f32[8,32,32] parameter(2)
  h = f32[4,32] parameter(3)
  c = f32[2,16,16,24] convolution(img, k), window={size=3x3 pad=1_1x1_1}, dim_labels=b01f_01io->b01f
  z = s32[] constant(0)
  t = (s32[], f32[8,32,32], f32[4,32]) tuple(z, ws, h)
  w = (s32[], f32[8,32,32], f32[4,32]) while(t), condition=cond, body=body
  hh = f32[4,32] get-tuple-element(w), index=2
  ROOT r = (f32[2,16,16,24], f32[4,32]) tuple(c, hh)
}"""


def test_convolution_kernels_and_scanned_weights_get_their_fan_in():
    m = parse_module(CONV_SCAN)
    uses = parameter_uses(m)
    # 3 * 3 * 8 taps per output for both conv operands; a layer of the stacked weights contracts 32
    assert {n: u.fan_in for n, u in uses.items()} == {0: 72, 1: 72, 2: 32, 3: 32}
    img, k, ws, h = make_inputs(m, 0)
    assert abs(k.std() - 72 ** -0.5) < 0.06 * 72 ** -0.5
    assert abs(ws.std() - 32 ** -0.5) < 0.03 * 32 ** -0.5
    conv, hh = evaluate_module(m, [img, k, ws, h])
    ref = h.astype(np.float64)
    for layer in ws.astype(np.float64):
        ref = ref @ layer
    assert 0.02 < ref.std() < 1  # unit-variance weights would give 32 ** 4 times larger
    np.testing.assert_allclose(hh, ref, rtol=2e-2, atol=2e-2 * ref.std())
    assert 0.05 < np.asarray(conv).std() < 1


# jax's take: the index wrapped for negatives by select(i < 0, i + n, i), then gathered from a [64, 32] table
GATHER = """HloModule m
ENTRY e {
  table = f32[64,32] parameter(0)
  ids = s32[4096] parameter(1)
  c0 = s32[] constant(0)
  zero = s32[4096] broadcast(c0), dimensions={}
  lt = pred[4096] compare(ids, zero), direction=LT
  c64 = s32[] constant(64)
  n = s32[4096] broadcast(c64), dimensions={}
  wrapped = s32[4096] add(ids, n)
  idx = s32[4096] select(lt, wrapped, ids)
  i2 = s32[4096,1] bitcast(idx)
  ROOT g = f32[4096,1,32] gather(table, i2), offset_dims={1,2}, collapsed_slice_dims={}, start_index_map={0}, index_vector_dim=1, slice_sizes={1,32}
}"""


def test_an_index_through_jax_negative_wrap_gets_every_in_range_row():
    m = parse_module(GATHER)
    uses = parameter_uses(m)
    assert uses[1].index_high == 63 and 0 not in uses  # 64 rows, one at a time
    table, ids = make_inputs(m, 0)
    assert ids.min() >= 0 and ids.max() <= 63
    assert len(np.unique(ids)) == 64  # 4096 draws cover all 64 rows
    np.testing.assert_array_equal(np.asarray(evaluate_module(m, [table, ids]))[:, 0, :], table[ids])


def test_a_denominator_count_gets_positive_integers():
    m = parse_module("""HloModule m
    ENTRY e {
      s = f32[1000] parameter(0)
      n = s32[1000] parameter(1)
      nf = f32[1000] convert(n)
      ROOT q = f32[1000] divide(s, nf)
    }""")
    uses = parameter_uses(m)
    assert uses[1].positive and 0 not in uses  # a quotient of any sign is fine: only the denominator
    s, n = make_inputs(m, 0)
    assert n.min() >= 1 and n.max() <= 16 and len(np.unique(n)) == 16
    np.testing.assert_allclose(evaluate_module(m, [s, n]), s / n.astype(np.float32), rtol=1e-6)


@pytest.mark.parametrize("seed", [0, 3])
def test_constrained_draws_leave_the_other_parameters_values_unchanged(seed):
    """A parameter's use changes only its own values: every draw takes the same random stream."""
    m = parse_module("""HloModule m
    ENTRY e {
      a = f32[100] parameter(0)
      w = f32[100,50] parameter(1)
      b = f32[50] parameter(2)
      d = f32[50] dot(a, w), lhs_contracting_dims={0}, rhs_contracting_dims={0}
      ROOT s = f32[50] sqrt(b)
    }""")
    a, w, b = make_inputs(m, seed)
    rng = np.random.default_rng(seed)
    a0, w0, b0 = (rng.standard_normal(s, dtype=np.float32) for s in (100, (100, 50), 50))
    np.testing.assert_allclose(a, a0 / 10, rtol=1e-6)
    np.testing.assert_allclose(w, w0 / 10, rtol=1e-6)
    np.testing.assert_allclose(b, np.abs(b0) + 0.5, rtol=1e-6)
