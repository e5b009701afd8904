"""Constants as XLA prints them: ``Literal::ToString`` writes ``/*i0=0*/`` index comments into arrays of rank 4
and above. The texts come from XLA itself (JAX's lowering, or jaxlib's HLO parser printing a module back), and
the values fusegen reads from them are checked against the numpy arrays they were made from and against what
XLA:CPU computes for the same module."""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest

from fusegen.hlo.literal import parse_literal
from fusegen.hlo.parser import parse_module
from fusegen.hlo.printer import print_module
from xla_oracle import JAX_ERROR, run_xla

pytestmark = pytest.mark.skipif(JAX_ERROR is not None, reason=str(JAX_ERROR))


def _constants(text: str) -> dict:
    """``{name: value}`` of every entry constant fusegen parses out of ``text``."""
    m = parse_module(text, "xla-printed")
    return {i.name: parse_literal(i.attrs["literal"], i.shape) for i in m.entry.instructions if i.opcode == "constant"}


def _lowered(value: np.ndarray) -> str:
    """The HLO JAX lowers ``lambda: value`` to (the array as one constant, printed by XLA)."""
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
    import jax
    import jax.numpy as jnp

    with jax.enable_x64(True):
        return jax.jit(lambda: jnp.asarray(value)).lower().as_text("hlo")


def _arrays():
    rng = np.random.default_rng(7)
    edges = np.array([np.inf, -np.inf, np.nan, -0.0, 1 / 3, 1e-30, 6.5e4, -2.5], np.float64)
    out = []
    for dt, shape in [(np.float32, (2, 1, 2, 3)), (np.float64, (1, 2, 1, 1, 4)), (np.float16, (2, 2, 1, 2)),
                      (ml_dtypes.bfloat16, (1, 1, 2, 2, 2, 1)), (np.int8, (2, 1, 1, 3)), (np.uint64, (1, 2, 2, 2)),
                      (np.int64, (3, 1, 1, 1)), (np.bool_, (2, 2, 1, 2, 2)), (np.complex64, (1, 2, 1, 3)),
                      (np.complex128, (2, 1, 1, 1, 2)), (np.float32, (1, 1, 1, 1)), (np.int32, (2, 0, 1, 2))]:
        n = int(np.prod(shape))
        if dt == np.bool_:
            a = rng.random(n) < 0.5
        elif np.dtype(dt).kind in "iu":
            info = np.iinfo(dt)
            a = rng.integers(info.min, info.max, n, dtype=dt, endpoint=True)
        elif np.dtype(dt).kind == "c":
            a = rng.standard_normal(n) + 1j * rng.standard_normal(n)
            a[: min(n, 2)] = [complex(np.inf, np.nan), complex(-0.0, 1 / 3)][: min(n, 2)]
        else:
            a = rng.standard_normal(n) * 100
            a[: min(n, len(edges))] = edges[: min(n, len(edges))]
        out.append(np.asarray(a).astype(dt).reshape(shape))
    return out


@pytest.mark.parametrize("value", _arrays(), ids=lambda a: f"{a.dtype}{list(a.shape)}")
def test_a_constant_jax_lowers_reads_back_as_its_array(value):
    text = _lowered(value)
    assert value.size == 0 or value.ndim < 4 or "/*i0=0*/" in text  # XLA's index comments are there
    (got,) = _constants(text).values()
    _same([got], [value])
    assert np.array_equal(np.signbit(got.real.astype(np.float64)), np.signbit(value.real.astype(np.float64)))  # -0


# Element types JAX does not make constants of: XLA's parser reads this, prints it back (the text fusegen then
# parses) and XLA:CPU computes the values. c0, c1 and c2 are also the elements of _TUPLE's tuple constant.
_MODULE = """HloModule m
ENTRY e {
  a = s4[2,1,2,2] constant({ { { {1, -2}, {3, -8} } }, { { {7, 0}, {0, 1} } } })
  b = pred[1,1,1,2] constant({ { { {true, false} } } })
  c0 = f32[1,1,1,2] constant({ { { {1.5, -inf} } } })
  c1 = s32[] constant(7)
  c2 = c64[2] constant({(1, 2), (3, nan)})
  d = f8e5m2[1,2,1,1,3] constant({ { { { {0.5, inf, nan} } }, { { {-0, 3, -1.25} } } } })
  f = u4[1,1,3,1] constant({ { { {15}, {0}, {9} } } })
  ROOT t = (s4[2,1,2,2], pred[1,1,1,2], f32[1,1,1,2], s32[], c64[2], f8e5m2[1,2,1,1,3], u4[1,1,3,1])
    tuple(a, b, c0, c1, c2, d, f)
}
"""
# XLA:CPU does not run a tuple constant (no StableHLO form): XLA only prints it.
_TUPLE = """HloModule t
ENTRY e {
  ROOT c = (f32[1,1,1,2], s32[], c64[2]) constant(( { { { {1.5, -inf} } } }, 7, {(1, 2), (3, nan)} ))
}
"""
_ORDER = ("a", "b", "c0", "c1", "c2", "d", "f")


def _xla_printed(text: str) -> str:
    from jaxlib import _hlo

    opts = _hlo.HloPrintOptions()
    opts.print_large_constants = True
    return _hlo.hlo_module_from_text(text).to_string(opts)


def _flat(values) -> list[np.ndarray]:
    out = []
    for v in values:
        out.extend(_flat(v) if isinstance(v, tuple) else [np.asarray(v)])
    return out


def _same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype, (g, w)
        if g.dtype.kind in "biu":  # u64 and s64 exactly, not through float64
            assert np.array_equal(g, w), (g, w)
            continue
        # floats as float64 / complex128 (f8, bf16 and int4 convert exactly); NaN equals NaN
        kind = np.complex128 if g.dtype.kind == "c" else np.float64
        np.testing.assert_array_equal(g.astype(kind), w.astype(kind))


def test_every_element_type_and_a_tuple_as_xla_prints_them_equal_xla_cpus_values():
    printed = _xla_printed(_MODULE)
    assert printed.count("/*i0=0*/") >= 4 and "/*i2=0*/" in printed  # rank 5 has three index comments
    want = run_xla(_MODULE, [])
    got = _constants(printed)
    _same([got[n] for n in _ORDER], want)
    tuple_printed = _xla_printed(_TUPLE)
    assert "( { { /*i0=0*/ { /*i1=0*/" in tuple_printed
    (got_tuple,) = _constants(tuple_printed).values()
    _same(_flat(got_tuple), want[2:5])


def test_fusegens_printing_round_trips_through_fusegen_and_xla():
    printed = _xla_printed(_MODULE)
    again = print_module(parse_module(printed, "xla-printed"))
    assert "/*i0" not in again  # the comments are dropped, the values kept
    want = run_xla(_MODULE, [])
    got = _constants(again)
    _same([got[n] for n in _ORDER], want)  # fusegen reads its own printing
    _same(run_xla(again, []), want)  # and XLA reads it as the same module
    tuple_again = print_module(parse_module(_xla_printed(_TUPLE), "xla-printed"))
    _same(_flat(tuple(_constants(tuple_again).values())), want[2:5])
