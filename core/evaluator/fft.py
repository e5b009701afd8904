"""Reference semantics of XLA's ``fft``: numpy's FFT (pocketfft) at the instruction's precision.

XLA:GPU keeps ``fft`` as an HLO instruction and runs it through a cuFFT thunk (``xla/service/gpu/runtime/
fft_thunk.cc``); fusegen runs it as a library call on the host. Semantics per the operation semantics page
(``FftType`` in ``xla/xla_data.proto``) over the innermost ``len(fft_length)`` dimensions (1 to 3):

* ``FFT``: complex -> complex forward transform; ``IFFT``: its inverse, scaled by ``1 / prod(fft_length)``;
* ``RFFT``: real -> complex, the innermost output dimension is ``fft_length[-1] // 2 + 1``;
* ``IRFFT``: complex -> real of shape ``fft_length`` in the transformed dimensions (the innermost input
  dimension is ``fft_length[-1] // 2 + 1``; its Hermitian half is implied).

f32 / c64 transform in single precision (numpy >= 2 keeps float32), f64 / c128 in double.
"""

from __future__ import annotations

import re
from typing import Callable

import numpy as np

from fusegen.evaluator.common import EvaluationError, as_array, shape_dtype
from fusegen.hlo.ir import Instruction

FFT_TYPES = ("FFT", "IFFT", "RFFT", "IRFFT")


def fft_lengths(inst: Instruction) -> list[int]:
    """``fft_length={a,b}`` of ``inst`` as ints (1 to 3 of them).

    Raises:
        EvaluationError: missing, empty or more than 3 lengths.
    """
    raw = inst.attrs.get("fft_length")
    vals = [int(v) for v in re.findall(r"-?\d+", raw)] if isinstance(raw, str) else [int(v) for v in (raw or ())]
    if not 1 <= len(vals) <= 3 or any(v < 0 for v in vals):
        raise EvaluationError(f"fft %{inst.name}: fft_length {raw!r} must hold 1 to 3 non-negative lengths")
    return vals


def fft_array(x: np.ndarray, fft_type: str, lengths: list[int], out_dtype: np.dtype) -> np.ndarray:
    """``x`` transformed as XLA's ``fft`` of ``fft_type`` with ``lengths`` over its innermost dimensions.

    Raises:
        EvaluationError: an unknown ``fft_type``, or a transformed dimension that does not match.
    """
    x = np.asarray(x)
    axes = tuple(range(x.ndim - len(lengths), x.ndim))
    if len(lengths) > x.ndim:
        raise EvaluationError(f"fft over {len(lengths)} dimensions of a rank-{x.ndim} operand")
    single = np.dtype(out_dtype) in (np.dtype(np.complex64), np.dtype(np.float32))
    cdt, rdt = (np.complex64, np.float32) if single else (np.complex128, np.float64)
    if fft_type in ("FFT", "IFFT"):
        xc = x.astype(cdt, copy=False)
        r = np.fft.fftn(xc, s=lengths, axes=axes) if fft_type == "FFT" else np.fft.ifftn(xc, s=lengths, axes=axes)
    elif fft_type == "RFFT":
        if list(x.shape[len(x.shape) - len(lengths):]) != lengths:
            raise EvaluationError(f"RFFT of shape {list(x.shape)} with fft_length {lengths}")
        r = np.fft.rfftn(x.astype(rdt, copy=False), s=lengths, axes=axes)
    elif fft_type == "IRFFT":
        if x.shape[-1] != lengths[-1] // 2 + 1:
            raise EvaluationError(f"IRFFT of shape {list(x.shape)}: innermost dimension must be "
                                  f"fft_length[-1] // 2 + 1 = {lengths[-1] // 2 + 1}")
        r = np.fft.irfftn(x.astype(cdt, copy=False), s=lengths, axes=axes)
    else:
        raise EvaluationError(f"unknown fft_type {fft_type!r} (one of {', '.join(FFT_TYPES)})")
    return as_array(r, out_dtype)


def _fft(inst: Instruction, ops: list) -> np.ndarray:
    fft_type = str(inst.attrs.get("fft_type", "FFT")).strip().upper()
    try:
        return fft_array(ops[0], fft_type, fft_lengths(inst), shape_dtype(inst.shape))
    except EvaluationError as e:
        raise EvaluationError(f"fft %{inst.name}: {e}") from None


HANDLERS: dict[str, Callable] = {"fft": _fft}
