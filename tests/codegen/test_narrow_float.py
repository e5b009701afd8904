"""The bit-level float types (:mod:`fusegen.codegen.elemental.narrow_float`) against ml_dtypes, in Triton's
interpreter: every storage byte decodes to ml_dtypes' f32 value, and f32/f64 edge values (±0, denormals,
ties, the largest finite values and just past them, ±inf, NaN) encode to ml_dtypes' byte."""

from __future__ import annotations

import importlib.util
import sys
import tempfile
from pathlib import Path

import numpy as np
import pytest

from fusegen.codegen.elemental.narrow_float import BIT_FLOATS, decode, encode
from fusegen.hlo import dtypes

def _kernel(body: list[str], result: str, name: str):
    src = "\n".join([
        "import triton", "import triton.language as tl", "", "@triton.jit",
        f"def {name}(X, Y, N: tl.constexpr):", "    offs = tl.arange(0, N)", "    x = tl.load(X + offs)",
        *[f"    {ln}" for ln in body], f"    tl.store(Y + offs, {result})", ""])
    d = Path(tempfile.mkdtemp(prefix="nf_"))
    p = d / f"{name}.py"
    p.write_text(src)
    spec = importlib.util.spec_from_file_location(name, p)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def _emitter():
    lines: list[str] = []

    def emit(expr: str, hint: str) -> str:
        v = f"{hint}{len(lines)}"
        lines.append(f"{v} = {expr}")
        return v

    return lines, emit


def _launch(kernel, x: np.ndarray, y: np.ndarray) -> None:
    """One program over the whole array in Triton's interpreter (TRITON_INTERPRET stays unset, as in fusegen)."""
    from triton.runtime.interpreter import InterpretedFunction

    from fusegen.codegen.triton_runtime import NpPtr, patched_interpreter

    with patched_interpreter():
        InterpretedFunction(getattr(kernel, "fn", kernel))[(1,)](NpPtr(x), NpPtr(y), N=x.size)


@pytest.mark.parametrize("et", sorted(BIT_FLOATS))
def test_every_byte_decodes_to_ml_dtypes_value(et):
    dt = dtypes.numpy_dtype(et)
    n = 16 if et == "f4e2m1fn" else 256
    bits = np.arange(256, dtype=np.uint8)[:n]
    lines, emit = _emitter()
    r = decode(emit, "x", et)
    k = _kernel(lines, r, f"dec_{et}")
    y = np.zeros(n, np.float32)
    _launch(k, bits.copy(), y)
    want = bits.view(dt).astype(np.float32) if n == 256 else bits.astype(np.uint8).view(dt).astype(np.float32)
    np.testing.assert_array_equal(y, want)  # NaN positions equal too


def _edge_values(et: str, wide) -> np.ndarray:
    dt = dtypes.numpy_dtype(et)
    n = 16 if et == "f4e2m1fn" else 256
    grid = np.arange(n, dtype=np.uint8).view(dt).astype(np.float64)
    grid = grid[np.isfinite(grid)]
    pts = np.unique(np.concatenate([grid, (grid[:-1] + np.sort(grid)[1:]) / 2 if grid.size > 1 else grid]))
    srt = np.sort(grid)
    mids = (srt[:-1] + srt[1:]) / 2  # ties: round to even
    finfo = np.finfo(wide)
    extra = [0.0, -0.0, np.inf, -np.inf, np.nan, -np.nan, float(finfo.max), -float(finfo.max),
             float(finfo.smallest_subnormal), -float(finfo.smallest_subnormal), float(finfo.smallest_normal),
             1e-30, -1e-30, 1e30, 2.0 ** -127, 2.0 ** -128, 3 * 2.0 ** -128, 1.5, 0.75, 1e-40, -1e-40]
    vals = np.concatenate([pts, mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), srt * 1.0001,
                           srt * 0.9999, extra]).astype(wide)
    if wide == np.float32:
        vals = vals[np.isfinite(vals) | ~np.isfinite(vals.astype(np.float64))]
    return np.ascontiguousarray(vals)


@pytest.mark.parametrize("wide", [np.float32, np.float64], ids=["f32", "f64"])
@pytest.mark.parametrize("et", sorted(BIT_FLOATS))
def test_f32_and_f64_values_encode_to_ml_dtypes_byte(et, wide):
    dt = dtypes.numpy_dtype(et)
    x = _edge_values(et, wide)
    pad = 1 << max(0, (x.size - 1).bit_length())
    x = np.concatenate([x, np.zeros(pad - x.size, wide)])
    lines, emit = _emitter()
    r = encode(emit, "x", "f64" if wide == np.float64 else "f32", et)
    k = _kernel(lines, r, f"enc_{et}_{np.dtype(wide).name}")
    y = np.zeros(x.size, np.uint8)
    with np.errstate(all="ignore"):
        _launch(k, x, y)
        want = x.astype(dt).view(np.uint8)
    bad = np.flatnonzero(y != want)
    assert not bad.size, [(float(x[i]), int(y[i]), int(want[i])) for i in bad[:8]]


def test_the_bit_float_types_are_the_ones_triton_source_stores_as_bytes():
    from fusegen.codegen.triton_source import BIT_FLOAT_TYPES, tl_dtype

    assert set(BIT_FLOATS) == BIT_FLOAT_TYPES
    assert {tl_dtype(t) for t in BIT_FLOATS} == {"tl.uint8"}


def test_bitcast_convert_between_widths_runs_on_triton_little_endian():
    """f32 -> u8[..., 4], u8[..., 4] -> f32 and s64 -> s16[..., 4] (bit patterns of NaN, -0, inf, denormals and
    negative integers): kernels on Triton, equal to numpy's little-endian views."""
    from fusegen.hlo.parser import parse_module
    from fusegen.verify.judged_run import run_module

    path = Path(__file__).parents[1] / "data" / "bitcast_widths.hlo"
    m = parse_module(path.read_text(), str(path))
    rng = np.random.default_rng(5)
    x = rng.standard_normal((6, 5)).astype(np.float32)
    x.reshape(-1)[:6] = [np.nan, -0.0, np.inf, -np.inf, 1e-45, -3.4e38]
    y = rng.integers(0, 256, (6, 5, 4), dtype=np.uint8)
    z = rng.integers(-2 ** 62, 2 ** 62, (6, 5), dtype=np.int64)
    out, rep = run_module(m, [x, y, z], compile_kernels=False)
    assert [f.backend for f in rep.fusions] == ["triton"] * 3, [(f.name, f.reason) for f in rep.fusions]
    np.testing.assert_array_equal(out[0], x.view(np.uint8).reshape(6, 5, 4))
    np.testing.assert_array_equal(out[1].view(np.uint32), y.reshape(-1).view(np.uint32).reshape(6, 5))
    np.testing.assert_array_equal(out[2], z.view(np.int16).reshape(6, 5, 4))
