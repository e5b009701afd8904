"""jax's spectral cuSOLVER FFI targets (eigh, SVD, general eig, tridiagonal reduction) on the host.

The layout, batch, info and precision rules are :mod:`fusegen.evaluator.solver_calls`'s. Mirrors jax 0.10
(``jax/_src/lax/linalg.py``: ``_eigh_cpu_gpu_lowering``, ``_svd_gpu_sub_lowering``, ``_eig_gpu_lowering``,
``_tridiagonal_cpu_gpu_lowering``) and ``jaxlib/gpu/solver_kernels_ffi.cc`` / ``hybrid_kernels.cc``:

* ``cusolver_syevd_ffi`` (``lower``, ``algorithm`` 0 default / 1 QR / 2 Jacobi): ``(v, w, info)``,
  eigenvalues ascending, eigenvectors in the columns of ``v``; LAPACK ``syevd`` / ``heevd`` for every
  algorithm (they agree to rounding, up to each eigenvector's sign, which follows LAPACK as XLA:CPU's does);
* ``cusolver_gesvdj_ffi`` / ``cusolver_gesvdp_ffi`` (``full_matrices``, ``compute_uv``): ``(a, s, u, v,
  info)`` with ``V`` itself (jax transposes and conjugates it into ``V^H``); ``u`` / ``v`` are ``m x m`` /
  ``n x n``, or ``m x k`` / ``n x k`` when not ``full_matrices``, zeros without ``compute_uv``. Computed with
  LAPACK ``gesdd`` (XLA:CPU's SVD), so singular vectors carry its signs; the Jacobi / polar methods of the GPU
  may pick the other sign of a pair, as a real H200's run does;
* ``cusolver_gesvd_ffi`` (``full_matrices``, ``compute_uv``, ``transposed``): ``(a, s, u, vt, info)``; with
  ``transposed`` (``m < n``, row-major results) the library factors ``a^T``, so the third result is ``a``'s
  ``V^H`` and the fourth its ``U``. LAPACK ``gesvd``;
* ``cusolver_geev_ffi`` (``left``, ``right``): ``(a, w, vl, vr, info)``, complex ``w``; for real types the
  eigenvectors are LAPACK's packed real columns (a conjugate pair ``j, j+1`` as ``re, im``);
  ``cuhybrid_eig_real``: ``(wr, wi, vl, vr, info)`` with complex (unpacked) eigenvectors, and
  ``cuhybrid_eig_comp``: ``(w, vl, vr, info)`` (jaxlib runs LAPACK ``geev`` on the host for both);
* ``cusolver_sytrd_ffi`` (``lower``): ``(a, d, e, tau, info)``, LAPACK ``sytrd`` / ``hetrd``.

The overwritten input ``a`` of the SVD and eig targets (unspecified by cuSOLVER; jax drops it) is returned
unchanged.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import EvaluationError, ffi_attrs, is_complex
from fusegen.evaluator.solver_calls import _call, check_layouts, lapack, matrices, pack, result_shapes
from fusegen.hlo.ir import Instruction


def _syevd(inst: Instruction, ops: list):
    check_layouts(inst)
    lower = bool(ffi_attrs(inst).get("lower", True))
    a, _ = matrices(ops[0])
    fn = lapack("syevd", a.dtype)
    vs, ws, infos = [], [], []
    for m in a:
        w, v, info = _call(inst, fn, m, compute_v=1, lower=int(lower))
        vs.append(v)
        ws.append(w)
        infos.append(info)
    return pack(inst, [np.stack(vs), np.stack(ws), np.array(infos, np.int32)])


def _svd(a: np.ndarray, inst: Instruction, routine: str, compute_uv: bool, full: bool):
    """Per-matrix LAPACK SVD of ``a`` ``[batch, m, n]``: lists ``u, s, vt, info``."""
    fn = lapack(routine, a.dtype)
    us, ss, vts, infos = [], [], [], []
    for m in a:
        u, s, vt, info = _call(inst, fn, m, compute_uv=int(compute_uv), full_matrices=int(full))
        us.append(u)
        ss.append(s)
        vts.append(vt)
        infos.append(info)
    return us, ss, vts, np.array(infos, np.int32)


def _gesvdj(inst: Instruction, ops: list):
    check_layouts(inst)
    cfg = ffi_attrs(inst)
    full, compute_uv = bool(cfg.get("full_matrices", True)), bool(cfg.get("compute_uv", True))
    a, _ = matrices(ops[0])
    us, ss, vts, info = _svd(a, inst, "gesdd", compute_uv, full)
    shapes = result_shapes(inst)
    if compute_uv:
        u = np.stack(us)
        v = np.conj(np.swapaxes(np.stack(vts), -1, -2))
    else:
        u = v = None
    return pack(inst, [ops[0], np.stack(ss), u, v, info][: len(shapes)])


def _gesvd(inst: Instruction, ops: list):
    cfg = ffi_attrs(inst)
    transposed = bool(cfg.get("transposed", False))
    check_layouts(inst, column_major=not transposed)
    full, compute_uv = bool(cfg.get("full_matrices", True)), bool(cfg.get("compute_uv", True))
    a, _ = matrices(ops[0])
    us, ss, vts, info = _svd(a, inst, "gesvd", compute_uv, full)
    u = np.stack(us) if compute_uv else None
    vt = np.stack(vts) if compute_uv else None
    return pack(inst, [ops[0], np.stack(ss), vt, u, info] if transposed else [ops[0], np.stack(ss), u, vt, info])


def _geev(a: np.ndarray, inst: Instruction, left: bool, right: bool):
    """Per-matrix LAPACK ``geev``: ``(w complex, vl, vr, info)`` stacked, vectors packed for real types."""
    fn = lapack("geev", a.dtype)
    ws, vls, vrs, infos = [], [], [], []
    for m in a:
        if is_complex(a.dtype):
            w, vl, vr, info = _call(inst, fn, m, compute_vl=int(left), compute_vr=int(right))
        else:
            wr, wi, vl, vr, info = _call(inst, fn, m, compute_vl=int(left), compute_vr=int(right))
            w = wr + 1j * wi
        n = m.shape[-1]
        ws.append(w)
        vls.append(vl if left else np.zeros((n, n), a.dtype))
        vrs.append(vr if right else np.zeros((n, n), a.dtype))
        infos.append(info)
    return np.stack(ws), np.stack(vls), np.stack(vrs), np.array(infos, np.int32)


def unpack_eigenvectors(w: np.ndarray, v: np.ndarray) -> np.ndarray:
    """LAPACK's real packed eigenvectors ``v`` ``[..., n, n]`` as complex columns: for a conjugate pair
    ``w[j], w[j+1]`` (``imag(w[j]) > 0``), ``v[:, j] +- i v[:, j+1]``."""
    out = v.astype(np.result_type(v.dtype, np.complex64))
    wi = np.imag(w)
    for idx in np.ndindex(*w.shape[:-1]):
        j = 0
        n = w.shape[-1]
        while j < n:
            if wi[idx + (j,)] > 0 and j + 1 < n:
                re, im = v[idx + (slice(None), j)], v[idx + (slice(None), j + 1)]
                out[idx + (slice(None), j)] = re + 1j * im
                out[idx + (slice(None), j + 1)] = re - 1j * im
                j += 2
            else:
                j += 1
    return out


def _cusolver_geev(inst: Instruction, ops: list):
    check_layouts(inst)
    cfg = ffi_attrs(inst)
    a, _ = matrices(ops[0])
    w, vl, vr, info = _geev(a, inst, bool(cfg.get("left", False)), bool(cfg.get("right", True)))
    return pack(inst, [ops[0], w, vl, vr, info])


def _hybrid_eig(inst: Instruction, ops: list):
    check_layouts(inst)
    cfg = ffi_attrs(inst)
    a, _ = matrices(ops[0])
    left, right = bool(cfg.get("left", True)), bool(cfg.get("right", True))
    w, vl, vr, info = _geev(a, inst, left, right)
    if is_complex(a.dtype):
        return pack(inst, [w, vl, vr, info])
    return pack(inst, [w.real, w.imag, unpack_eigenvectors(w, vl), unpack_eigenvectors(w, vr), info])


def _sytrd(inst: Instruction, ops: list):
    check_layouts(inst)
    lower = bool(ffi_attrs(inst).get("lower", True))
    a, _ = matrices(ops[0])
    fn = lapack("sytrd", a.dtype)
    res = [_call(inst, fn, m, lower=int(lower)) for m in a]
    if not res:
        raise EvaluationError(f"custom-call %{inst.name}: cusolver_sytrd_ffi of an empty batch")
    cs, ds, es, taus, infos = zip(*res)
    return pack(inst, [np.stack(cs), np.stack(ds), np.stack(es), np.stack(taus), np.array(infos, np.int32)])


TARGETS: dict[str, Callable] = {
    "cusolver_syevd_ffi": _syevd,
    "cusolver_gesvdj_ffi": _gesvdj,
    "cusolver_gesvdp_ffi": _gesvdj,
    "cusolver_gesvd_ffi": _gesvd,
    "cusolver_geev_ffi": _cusolver_geev,
    "cuhybrid_eig_real": _hybrid_eig,
    "cuhybrid_eig_comp": _hybrid_eig,
    "cusolver_sytrd_ffi": _sytrd,
}
