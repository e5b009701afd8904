"""The evaluator's sort recognizes the standard comparators (LT/GT, the NaN-canonicalizing total order JAX emits,
key-value sorts led by one key) and sorts with numpy's stable argsort; other comparators keep the generic path.
float64 numpy and XLA:CPU (jaxlib) are the oracles."""

from __future__ import annotations

import numpy as np

from sort_programs import JAX_SORT, _input
from xla_oracle import JAX_ERROR, run_xla

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.evaluator.gather_scatter_sort import _simple_comparator
from fusegen.hlo.parser import parse_module

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
