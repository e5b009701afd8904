"""``fft`` runs as a library call on the host (numpy's FFT at the instruction's precision): every ``fft_type``
over 1 to 3 dimensions, against XLA:CPU's own answer (``jax.numpy.fft`` through jaxlib), and against cuFFT
(CuPy) on a machine with a GPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpu_presence import _no_gpu

from fusegen.evaluator.common import EvaluationError
from fusegen.evaluator.fft import fft_array
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import make_inputs
from fusegen.verify.judged_run import run_module

jax = pytest.importorskip("jax", reason="XLA:CPU's FFT comes through jaxlib (the test extra)")
jax.config.update("jax_enable_x64", True)

#: (fft_type, input type, fft_length, batch dims): ranks 1-3, single and double precision, odd lengths.
CASES = [
    ("FFT", "c64", [64], [8]), ("FFT", "c128", [6, 10], [3]), ("FFT", "c64", [4, 6, 5], [2]),
    ("IFFT", "c64", [33], [5]), ("IFFT", "c128", [8, 7], []), ("IFFT", "c64", [3, 4, 6], [2]),
    ("RFFT", "f32", [64], [4]), ("RFFT", "f64", [9, 12], [2]), ("RFFT", "f32", [4, 5, 8], []),
    ("IRFFT", "c64", [64], [4]), ("IRFFT", "c128", [6, 9], [2]), ("IRFFT", "c64", [2, 4, 6], [3]),
]


def _shapes(fft_type: str, et: str, lengths: list[int], batch: list[int]) -> tuple[str, str, str]:
    out_t = {"RFFT": {"f32": "c64", "f64": "c128"}, "IRFFT": {"c64": "f32", "c128": "f64"}}.get(fft_type, {}).get(et, et)
    inner = list(lengths)
    if fft_type == "IRFFT":
        inner[-1] = lengths[-1] // 2 + 1
    outer = list(lengths)
    if fft_type == "RFFT":
        outer[-1] = lengths[-1] // 2 + 1
    return (f"{et}[{','.join(map(str, batch + inner))}]", f"{out_t}[{','.join(map(str, batch + outer))}]", out_t)


def _module(fft_type: str, et: str, lengths: list[int], batch: list[int]):
    src, dst, _ = _shapes(fft_type, et, lengths, batch)
    text = f"""HloModule fft_{fft_type.lower()}

ENTRY e {{
  x = {src} parameter(0)
  ROOT f = {dst} fft(x), fft_type={fft_type}, fft_length={{{','.join(map(str, lengths))}}}
}}
"""
    return parse_module(text, f"fft_{fft_type}.hlo")


def _xla_cpu(fft_type: str, x: np.ndarray, lengths: list[int]) -> np.ndarray:
    import jax.numpy as jnp

    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    fn = {"FFT": jnp.fft.fftn, "IFFT": jnp.fft.ifftn, "RFFT": jnp.fft.rfftn, "IRFFT": jnp.fft.irfftn}[fft_type]
    return np.asarray(fn(jnp.asarray(x), s=lengths, axes=axes))


@pytest.mark.parametrize("fft_type,et,lengths,batch", CASES, ids=[f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2]))}" for c in CASES])
def test_fft_runs_on_the_host_and_matches_xla_cpu(fft_type, et, lengths, batch):
    m = _module(fft_type, et, lengths, batch)
    args = make_inputs(m, seed=1)
    out, rep = run_module(m, args, compile_kernels=False)
    assert rep.other_instructions == [("f", "fft", "host")]
    assert rep.status == "ok", rep.verdict.lines()
    got, want = np.asarray(out), _xla_cpu(fft_type, args[0], lengths)
    _, dst, out_t = _shapes(fft_type, et, lengths, batch)
    assert got.shape == want.shape and str(got.dtype) == {"c64": "complex64", "c128": "complex128",
                                                          "f32": "float32", "f64": "float64"}[out_t]
    # single precision: pocketfft vs XLA:CPU's ducc in f32 differ by rounding, ~eps * log2(n) * max|x|
    tol = 1e-5 if out_t in ("c64", "f32") else 1e-12
    scale = max(1.0, float(np.abs(want).max()))
    assert np.abs(got.astype(np.complex128) - want).max() <= tol * scale
    # and in f64 the oracle agrees to double precision (the module's f64 oracle is numpy's c128 FFT)
    ref64 = fft_array(args[0].astype(np.complex128 if et.startswith("c") else np.float64), fft_type, lengths,
                      np.dtype(np.complex128 if out_t.startswith("c") else np.float64))
    assert np.abs(ref64 - want.astype(np.complex128)).max() <= (1e-5 if tol == 1e-5 else 1e-12) * scale


def test_fft_with_mismatched_lengths_is_a_clear_error():
    with pytest.raises(EvaluationError, match="innermost dimension must be fft_length"):
        fft_array(np.zeros((4, 8), np.complex64), "IRFFT", [8], np.dtype(np.float32))
    with pytest.raises(EvaluationError, match="unknown fft_type"):
        fft_array(np.zeros((4, 8), np.complex64), "DCT", [8], np.dtype(np.complex64))


@pytest.mark.gpu
@pytest.mark.parametrize("fft_type,et,lengths,batch", CASES, ids=[f"{c[0]}-{c[1]}-{'x'.join(map(str, c[2]))}" for c in CASES])
def test_cufft_through_cupy_matches_the_host_fft(fft_type, et, lengths, batch):
    why = _no_gpu()
    if why:
        pytest.skip(f"GPU-only: {why}")
    import cupy

    m = _module(fft_type, et, lengths, batch)
    x = make_inputs(m, seed=2)[0]
    _, _, out_t = _shapes(fft_type, et, lengths, batch)
    host = fft_array(x, fft_type, lengths, np.dtype({"c64": np.complex64, "c128": np.complex128,
                                                     "f32": np.float32, "f64": np.float64}[out_t]))
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    fn = {"FFT": cupy.fft.fftn, "IFFT": cupy.fft.ifftn, "RFFT": cupy.fft.rfftn, "IRFFT": cupy.fft.irfftn}[fft_type]
    dev = cupy.asnumpy(fn(cupy.asarray(x), s=lengths, axes=axes))
    assert dev.dtype == host.dtype
    tol = 1e-5 if out_t in ("c64", "f32") else 1e-12
    assert np.abs(dev.astype(np.complex128) - host).max() <= tol * max(1.0, float(np.abs(host).max()))
