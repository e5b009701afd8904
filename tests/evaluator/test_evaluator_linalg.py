"""triangular-solve and cholesky in the reference evaluator, against XLA:CPU (jaxlib) and float64 numpy."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from xla_oracle import JAX_ERROR, run_xla

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.hlo.parser import parse_module

TRSM = """HloModule m
ENTRY e {{
  a = {t}[{b}4,4] parameter(0)
  x = {t}[{b}{bs}] parameter(1)
  ROOT s = {t}[{b}{bs}] triangular-solve(a, x), left_side={left}, lower={lower}, unit_diagonal={unit}, transpose_a={tr}
}}"""

CASES = list(itertools.product([True, False], [True, False], [True, False], ["NO_TRANSPOSE", "TRANSPOSE", "ADJOINT"]))


def _inputs(rng, batch, left, dt):
    a = rng.standard_normal(batch + (4, 4)) + 4 * np.eye(4)  # well conditioned
    b = rng.standard_normal(batch + ((4, 3) if left else (3, 4)))
    return a.astype(dt), b.astype(dt)


def _module(left, lower, unit, tr, batch=(), t="f32"):
    bpre = "".join(f"{d}," for d in batch)
    return TRSM.format(t=t, b=bpre, bs="4,3" if left else "3,4", left=str(left).lower(), lower=str(lower).lower(),
                       unit=str(unit).lower(), tr=tr)


@pytest.mark.parametrize("left,lower,unit,tr", CASES)
def test_triangular_solve_solves_the_named_triangle(left, lower, unit, tr):
    rng = np.random.default_rng(3)
    a, b = _inputs(rng, (2,), left, np.float64)
    x = evaluate_module(parse_module(_module(left, lower, unit, tr, (2,), "f64")), [a, b])
    # float64 numpy: rebuild op(a) from the triangle it reads and check op(a) @ x == b (or x @ op(a) == b)
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        t[..., range(4), range(4)] = 1
    if tr != "NO_TRANSPOSE":
        t = np.swapaxes(t, -1, -2)
    got = t @ x if left else x @ t
    np.testing.assert_allclose(got, b, rtol=1e-12, atol=1e-12)


@pytest.mark.skipif(JAX_ERROR is not None, reason=str(JAX_ERROR))
@pytest.mark.parametrize("left,lower,unit,tr", CASES)
def test_triangular_solve_matches_xla_cpu(left, lower, unit, tr):
    rng = np.random.default_rng(5)
    a, b = _inputs(rng, (), left, np.float32)
    text = _module(left, lower, unit, tr)
    (want,) = run_xla(text, [a, b])
    got = evaluate_module(parse_module(text), [a, b])
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(JAX_ERROR is not None, reason=str(JAX_ERROR))
@pytest.mark.parametrize("lower", [True, False])
def test_cholesky_matches_xla_cpu(lower):
    rng = np.random.default_rng(7)
    m = rng.standard_normal((2, 5, 5)).astype(np.float32)
    spd = (m @ np.swapaxes(m, -1, -2) + 5 * np.eye(5)).astype(np.float32)
    text = f"""HloModule m
ENTRY e {{
  a = f32[2,5,5] parameter(0)
  ROOT c = f32[2,5,5] cholesky(a), lower={str(lower).lower()}
}}"""
    (want,) = run_xla(text, [spd])
    got = evaluate_module(parse_module(text), [spd])
    tri = np.tril if lower else np.triu  # the other triangle is implementation-defined
    np.testing.assert_allclose(tri(got), tri(want), rtol=1e-5, atol=1e-5)
    lo = tri(got) if lower else np.conj(np.swapaxes(tri(got), -1, -2))
    np.testing.assert_allclose(lo @ np.swapaxes(lo, -1, -2), spd, rtol=1e-4, atol=1e-4)
