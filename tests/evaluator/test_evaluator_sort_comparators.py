"""The evaluator's sort recognizes the standard comparators (LT/GT, the NaN-canonicalizing total order JAX emits,
key-value sorts led by one key) and sorts with numpy's stable argsort; other comparators keep the generic path.
float64 numpy and XLA:CPU (jaxlib) are the oracles."""

from __future__ import annotations

import numpy as np

from xla_oracle import JAX_ERROR, run_xla

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.evaluator.gather_scatter_sort import _simple_comparator
from fusegen.hlo.parser import parse_module

# jax.jit(lambda x: (jnp.sort(x), jnp.argsort(x))).lower(x).as_text("hlo") with jax 0.10
JAX_SORT = """HloModule jit_sort_argsort

region_0.1 {{
  sort.2 = f32[] parameter(0)
  ne.2 = pred[] compare(sort.2, sort.2), direction=NE
  constant.2 = f32[] constant(nan)
  constant.3 = f32[] constant(0)
  eq.2 = pred[] compare(sort.2, constant.3), direction=EQ
  select_n.4 = f32[] select(eq.2, constant.3, sort.2)
  select_n.5 = f32[] select(ne.2, constant.2, select_n.4)
  sort.3 = f32[] parameter(1)
  ne.3 = pred[] compare(sort.3, sort.3), direction=NE
  eq.3 = pred[] compare(sort.3, constant.3), direction=EQ
  select_n.6 = f32[] select(eq.3, constant.3, sort.3)
  select_n.7 = f32[] select(ne.3, constant.2, select_n.6)
  ROOT lt_to.1 = pred[] compare(select_n.5, select_n.7), direction=LT, type=TOTALORDER
}}

sort.2 {{
  Arg_0.1 = f32[{N}]{{0}} parameter(0)
  ROOT sort.5 = f32[{N}]{{0}} sort(Arg_0.1), dimensions={{0}}, is_stable=true, to_apply=region_0.1
}}

region_1.3 {{
  sort.12 = s32[] parameter(2)
  sort.13 = s32[] parameter(3)
  sort.10 = f32[] parameter(0)
  ne.6 = pred[] compare(sort.10, sort.10), direction=NE
  constant.6 = f32[] constant(nan)
  constant.7 = f32[] constant(0)
  eq.6 = pred[] compare(sort.10, constant.7), direction=EQ
  select_n.12 = f32[] select(eq.6, constant.7, sort.10)
  select_n.13 = f32[] select(ne.6, constant.6, select_n.12)
  sort.11 = f32[] parameter(1)
  ne.7 = pred[] compare(sort.11, sort.11), direction=NE
  eq.7 = pred[] compare(sort.11, constant.7), direction=EQ
  select_n.14 = f32[] select(eq.7, constant.7, sort.11)
  select_n.15 = f32[] select(ne.7, constant.6, select_n.14)
  ROOT lt_to.3 = pred[] compare(select_n.13, select_n.15), direction=LT, type=TOTALORDER
}}

argsort.4 {{
  Arg_0.3 = f32[{N}]{{0}} parameter(0)
  iota.1 = s32[{N}]{{0}} iota(), iota_dimension=0
  sort.17 = (f32[{N}]{{0}}, s32[{N}]{{0}}) sort(Arg_0.3, iota.1), dimensions={{0}}, is_stable=true, to_apply=region_1.3
  sort.18 = f32[{N}]{{0}} get-tuple-element(sort.17), index=0
  ROOT sort.19 = s32[{N}]{{0}} get-tuple-element(sort.17), index=1
}}

ENTRY main.5 {{
  x.1 = f32[{N}]{{0}} parameter(0)
  jit_sort_.1 = f32[{N}]{{0}} call(x.1), to_apply=sort.2
  jit_argsort_.1 = s32[{N}]{{0}} call(x.1), to_apply=argsort.4
  ROOT tuple.1 = (f32[{N}]{{0}}, s32[{N}]{{0}}) tuple(jit_sort_.1, jit_argsort_.1)
}}
"""

CUSTOM = """HloModule m
cmp {
  a = f32[] parameter(0)
  b = f32[] parameter(1)
  aa = f32[] abs(a)
  ab = f32[] abs(b)
  ROOT lt = pred[] compare(aa, ab), direction=LT
}
ENTRY e {
  x = f32[64] parameter(0)
  ROOT s = f32[64] sort(x), dimensions={0}, is_stable=true, to_apply=cmp
}
"""


def _input(n: int) -> np.ndarray:
    x = np.random.default_rng(0).standard_normal(n).astype(np.float32)
    x[::1000] = np.nan
    x[5::1000] = -np.float32(np.nan)  # a NaN with the sign bit set: JAX's comparator makes it +NaN
    x[7::997] = -0.0
    x[9::991] = 0.0
    return x


def test_jax_comparators_are_recognized():
    m = parse_module(JAX_SORT.format(N=16), "jax_sort")
    comps = {c.name: c for c in m.computations}
    assert _simple_comparator(comps["region_0.1"]) == (0, "LT", True, True)
    assert _simple_comparator(comps["region_1.3"]) == (0, "LT", True, True)  # key-value: key first, iota after
    assert _simple_comparator(parse_module(CUSTOM, "c").computations[0]) is None


def test_jax_sort_and_argsort_of_a_million_floats():
    """2**20 elements with NaNs of both signs and signed zeros: NaNs last, -0 and +0 equal (stable)."""
    n = 1 << 20
    x = _input(n)
    s, a = evaluate_module(parse_module(JAX_SORT.format(N=n), "jax_sort"), [x])
    order = np.argsort(x.astype(np.float64), kind="stable")  # numpy: NaN last, -0 == +0
    assert np.array_equal(a, order.astype(np.int32))
    # the values themselves are moved unchanged (NaN signs and zero signs kept), NaNs last in input order
    assert np.array_equal(s.view(np.int32), x[order].view(np.int32))
    assert np.isnan(s[-int(np.isnan(x).sum()):]).all()
    if JAX_ERROR is None:
        xs, xa = run_xla(JAX_SORT.format(N=n), [x])
        assert np.array_equal(s.view(np.int32), xs.view(np.int32)) and np.array_equal(a, xa)


def test_other_comparators_keep_the_generic_path():
    x = np.random.default_rng(1).standard_normal(64).astype(np.float32)
    s = evaluate_module(parse_module(CUSTOM, "c"), [x])
    assert np.array_equal(s, x[np.argsort(np.abs(x), kind="stable")])
