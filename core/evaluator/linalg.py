"""Reference semantics of XLA's dense linear-algebra ops: ``triangular-solve`` and ``cholesky``.

Mirrors ``xla/service/cpu`` (Eigen's ``trsm`` and ``llt``, through ``TriangularSolveExpander`` and
``CholeskyExpander`` on GPU) and the operation semantics page: only the named triangle of ``a`` is read;
``unit_diagonal`` takes the diagonal as ones without reading it. Values are computed by substitution in
the program's precision (f32 for f32/f16/bf16, f64 for f64, complex as given) and rounded to the output type.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import EvaluationError, as_array, is_complex, shape_dtype
from fusegen.hlo.ir import Instruction


def _compute_dtype(dt: np.dtype) -> np.dtype:
    if is_complex(dt):
        return np.dtype(dt)
    return np.dtype(np.float64) if dt == np.float64 else np.dtype(np.float32)


def _flag(inst: Instruction, name: str) -> bool:
    v = inst.attrs.get(name, "false")
    return v is True or str(v).lower() == "true"


def _triangle(a: np.ndarray, lower: bool, unit: bool) -> np.ndarray:
    t = np.tril(a) if lower else np.triu(a)
    if unit:
        n = a.shape[-1]
        t = t.copy()
        t[..., np.arange(n), np.arange(n)] = 1
    return t


def triangular_solve(a: np.ndarray, b: np.ndarray, left_side: bool, lower: bool, unit_diagonal: bool,
                     transpose_a: str) -> np.ndarray:
    """Solve ``op(a) @ x = b`` (``left_side``) or ``x @ op(a) = b`` for ``x``.

    Shapes: ``a`` ``[..., M, M]``; ``b`` ``[..., M, N]`` (left side) or ``[..., N, M]``; ``x`` like ``b``.
    ``transpose_a``: ``NO_TRANSPOSE``, ``TRANSPOSE`` or ``ADJOINT`` (conjugate transpose).

    Raises:
        EvaluationError: an unknown ``transpose_a`` or mismatching shapes.
    """
    t = _triangle(a, lower, unit_diagonal)
    mode = str(transpose_a).upper()
    if mode == "TRANSPOSE":
        t, lower = np.swapaxes(t, -1, -2), not lower
    elif mode == "ADJOINT":
        t, lower = np.conj(np.swapaxes(t, -1, -2)), not lower
    elif mode != "NO_TRANSPOSE":
        raise EvaluationError(f"triangular-solve: unknown transpose_a={transpose_a!r}")
    if not left_side:  # x @ T = b  <=>  T^T @ x^T = b^T
        t, lower = np.swapaxes(t, -1, -2), not lower
        b = np.swapaxes(b, -1, -2)
    m = t.shape[-1]
    if b.shape[-2] != m:
        raise EvaluationError(f"triangular-solve: a is {m}x{m} but b has {b.shape[-2]} rows on the solved side")
    x = np.zeros(np.broadcast_shapes(t.shape[:-2], b.shape[:-2]) + b.shape[-2:], dtype=b.dtype)
    rows = range(m) if lower else range(m - 1, -1, -1)
    for i in rows:  # forward (lower) or back (upper) substitution, one row of x at a time
        acc = b[..., i, :] - np.einsum("...k,...kn->...n", t[..., i, :], x)
        x[..., i, :] = acc / t[..., i, i][..., None]
    return np.swapaxes(x, -1, -2) if not left_side else x


def _triangular_solve(inst: Instruction, ops: list) -> np.ndarray:
    out = shape_dtype(inst.shape)
    cd = _compute_dtype(out)
    a, b = (np.asarray(o).astype(cd) for o in ops)
    x = triangular_solve(a, b, _flag(inst, "left_side"), _flag(inst, "lower"), _flag(inst, "unit_diagonal"),
                         inst.attrs.get("transpose_a", "NO_TRANSPOSE"))
    return as_array(x, out)


def _cholesky(inst: Instruction, ops: list) -> np.ndarray:
    """``a = l @ l^H`` (``lower=true``) or ``a = u^H @ u``; a matrix that is not positive definite gives NaNs
    (as XLA's expander does) rather than an error. The other triangle is zero."""
    out = shape_dtype(inst.shape)
    cd = _compute_dtype(out)
    a = np.asarray(ops[0]).astype(cd)
    lower = _flag(inst, "lower")
    tri = np.tril(a) if lower else np.conj(np.swapaxes(np.triu(a), -1, -2))  # the read triangle, as lower
    herm = tri + np.conj(np.swapaxes(np.tril(tri, -1), -1, -2))
    flat = herm.reshape((-1,) + herm.shape[-2:])
    res = np.empty_like(flat)
    for k, mat in enumerate(flat):
        try:
            res[k] = np.linalg.cholesky(mat)
        except np.linalg.LinAlgError:
            res[k] = np.nan
    res = res.reshape(herm.shape)
    if not lower:
        res = np.conj(np.swapaxes(res, -1, -2))
    return as_array(res, out)


HANDLERS: dict[str, Callable] = {"triangular-solve": _triangular_solve, "cholesky": _cholesky}
