"""XLA:GPU's dense linear-algebra library calls: jax's cuSOLVER / cuBLAS / cuSPARSE FFI targets and XLA's
``__cublas$triangularSolve``, run on the host through LAPACK (``scipy.linalg.lapack``, the routines cuSOLVER
implements) on logical arrays.

Mirrors jax 0.10's GPU lowerings (``jax/_src/lax/linalg.py``: ``_cholesky_gpu_lowering``,
``_lu_cpu_gpu_lowering``, ``_geqrf_cpu_gpu_lowering``, ...) and their handlers (``jaxlib/gpu/
solver_kernels_ffi.cc``, ``linalg_kernels.cu.cc``, ``hybrid_kernels.cc``, ``sparse_kernels.cc``), and XLA's
``TriangularSolveRewriter`` (``xla/service/gpu/transforms/triangular_solve_rewriter.cc``). Common rules:

* layouts: jax asks for column-major matrices (``operand_layout_constraints``, minor-to-major
  ``{r-2, r-1, r-3, ..., 0}``) on every operand and result of the largest rank (row-major ``{r-1, ..., 0}``
  for ``cusolver_syrk_ffi`` and ``cu_cholesky_update_ffi``), so the library's matrix is the logical one; a
  different layout on such an operand is refused (:class:`EvaluationError`), never silently transposed;
* batch dimensions: every leading dimension (``frontend_attributes num_batch_dims``); one LAPACK call per
  matrix;
* ``info`` outputs (``s32[batch]``) hold LAPACK's ``info`` (0, or the failing minor / zero pivot, 1-based),
  which jax's own fusions turn into NaNs; workspace outputs (``s8[N]``) are zeros;
* f32 / f64 / c64 / c128 run in their own precision; f16 / bf16 (which jaxlib's handlers refuse on a GPU) in
  f32, rounded once.

Targets: ``cusolver_potrf_ffi``, ``cusolver_getrf_ffi``, ``cu_lu_pivots_to_permutation``,
``cusolver_geqrf_ffi``, ``cusolver_orgqr_ffi``, ``cusolver_ormqr_ffi``, ``cuhybrid_geqp3``,
``cusolver_syrk_ffi``, ``cu_cholesky_update_ffi``, ``cusparse_gtsv2_ffi``, ``cu_tridiagonal_solve_perturbed``,
``__cublas$triangularSolve``.
The spectral ones (eigh, SVD, eig, tridiagonal reduction) are in :mod:`fusegen.evaluator.solver_spectral`.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

from fusegen.evaluator.common import EvaluationError, as_array, ffi_attrs, is_complex, shape_dtype
from fusegen.hlo.ir import Instruction, Shape

_PREFIX = {np.dtype(np.float32): "s", np.dtype(np.float64): "d", np.dtype(np.complex64): "c",
           np.dtype(np.complex128): "z"}


def solver_dtype(dt: np.dtype) -> np.dtype:
    """The precision a solver call of element type ``dt`` runs in (f32 for f16 / bf16)."""
    dt = np.dtype(dt)
    return dt if dt in _PREFIX else np.dtype(np.float32)


def lapack(name: str, dt: np.dtype) -> Callable:
    """scipy's LAPACK wrapper ``{s,d,c,z}NAME`` for ``dt`` (``name`` as for the real types; ``orgqr`` ->
    ``ungqr``, ``ormqr`` -> ``unmqr``, ``syevd`` -> ``heevd``, ``sytrd`` -> ``hetrd`` for complex)."""
    import scipy.linalg.lapack as lp

    p = _PREFIX[solver_dtype(dt)]
    if p in "cz":
        name = {"orgqr": "ungqr", "ormqr": "unmqr", "syevd": "heevd", "sytrd": "hetrd"}.get(name, name)
    return getattr(lp, p + name)


def result_shapes(inst: Instruction) -> list[Shape]:
    """The result's array shapes, in order (one for a non-tuple result)."""
    return list(inst.shape.tuple_shapes or ()) if inst.shape.is_tuple else [inst.shape]


def pack(inst: Instruction, values: Sequence) -> tuple | np.ndarray:
    """``values`` (one per result shape; None for a workspace) as the instruction's result, each converted to
    its element type and shape."""
    shapes = result_shapes(inst)
    if len(values) != len(shapes):
        raise EvaluationError(f"custom-call %{inst.name}: {inst.attrs.get('custom_call_target')} gives "
                              f"{len(values)} results, the instruction has {len(shapes)}")
    out = []
    for v, s in zip(values, shapes):
        if v is None:
            out.append(np.zeros(s.dimensions, shape_dtype(s)))
            continue
        a = as_array(np.asarray(v), shape_dtype(s))
        if a.shape != tuple(s.dimensions):
            if a.size != s.numel:
                raise EvaluationError(f"custom-call %{inst.name}: result {len(out)} is {list(a.shape)}, the "
                                      f"instruction says {s.element_type}{list(s.dimensions)}")
            a = a.reshape(s.dimensions)
        out.append(a)
    return tuple(out) if inst.shape.is_tuple else out[0]


def _matrix_layout(rank: int, column_major: bool) -> tuple[int, ...]:
    if column_major and rank >= 2:
        return (rank - 2, rank - 1) + tuple(range(rank - 3, -1, -1))
    return tuple(range(rank - 1, -1, -1))


def check_layouts(inst: Instruction, column_major: bool = True) -> None:
    """Refuse operand / result layouts the library would read differently from the logical array.

    Arrays of the largest operand rank must be column-major matrices (``column_major``) or row-major; the
    others (tau, pivots, eigenvalues, info) row-major. Shapes without a layout are taken as required.

    Raises:
        EvaluationError: names the instruction, the array and both layouts.
    """
    arrays = [("operand", k, o.shape) for k, o in enumerate(inst.operands)]
    arrays += [("result", k, s) for k, s in enumerate(result_shapes(inst))]
    top = max((len(o.shape.dimensions) for o in inst.operands), default=0)
    for what, k, s in arrays:
        if s.is_tuple or s.layout is None or len(s.dimensions) < 2:
            continue
        want = _matrix_layout(len(s.dimensions), column_major and len(s.dimensions) == top)
        got = tuple(s.layout.minor_to_major)
        if got != want:
            raise EvaluationError(
                f"custom-call %{inst.name}: {inst.attrs.get('custom_call_target')} reads {what} {k} as "
                f"{'column' if want[:1] == (len(want) - 2,) else 'row'}-major {{{','.join(map(str, want))}}}; "
                f"its layout is {{{','.join(map(str, got))}}}")


def matrices(x: np.ndarray, dt: np.dtype | None = None, core: int = 2) -> tuple[np.ndarray, tuple[int, ...]]:
    """``x`` as ``[batch, *core dims]`` in the solver precision (``dt``, default from ``x``), and its batch
    shape."""
    x = np.asarray(x)
    cd = solver_dtype(dt if dt is not None else x.dtype)
    batch = x.shape[: x.ndim - core]
    return np.ascontiguousarray(x.astype(cd, copy=False).reshape((-1,) + x.shape[x.ndim - core:])), batch


def _call(inst: Instruction, fn: Callable, *args, **kw):
    """A LAPACK wrapper call; a negative ``info`` (an argument LAPACK rejects) is an error."""
    out = fn(*args, **kw)
    info = out[-1]
    if int(info) < 0:
        raise EvaluationError(f"custom-call %{inst.name}: LAPACK {fn.__name__} rejected argument {-int(info)}")
    return out


# ---------------------------------------------------------------------------------------------- factorizations
def _potrf(inst: Instruction, ops: list):
    """``cusolver_potrf_ffi`` (``lower``): ``(a_out, info)``; the named triangle holds the Cholesky factor, the
    other keeps the input (cuSOLVER writes one triangle; jax masks it)."""
    check_layouts(inst)
    lower = bool(ffi_attrs(inst).get("lower", True))
    a, batch = matrices(ops[0])
    fn = lapack("potrf", a.dtype)
    outs, infos = [], []
    for m in a:
        c, info = _call(inst, fn, m, lower=int(lower), clean=0)
        outs.append(c)
        infos.append(info)
    return pack(inst, [np.stack(outs), np.array(infos, np.int32)])


def _getrf(inst: Instruction, ops: list):
    """``cusolver_getrf_ffi``: ``(lu, pivots, info)``; partial pivoting, LAPACK's 1-based row swaps
    ``s32[..., min(m, n)]`` (jax subtracts 1), unit-lower L and U in one matrix."""
    check_layouts(inst)
    a, batch = matrices(ops[0])
    fn = lapack("getrf", a.dtype)
    lus, pivs, infos = [], [], []
    for m in a:
        lu, piv, info = _call(inst, fn, m)
        lus.append(lu)
        pivs.append(np.asarray(piv, np.int64) + 1)
        infos.append(info)
    return pack(inst, [np.stack(lus), np.stack(pivs), np.array(infos, np.int32)])


def lu_pivots_to_permutation(pivots: np.ndarray, size: int) -> np.ndarray:
    """The permutation ``s32[..., size]`` that 0-based row swaps ``pivots[..., k]`` (applied in order to the
    identity) make; out-of-range pivots are skipped (jaxlib's ``LuPivotsToPermutationKernel``)."""
    piv = np.asarray(pivots, np.int64)
    flat = piv.reshape(-1, piv.shape[-1]) if piv.ndim else piv.reshape(1, 1)
    perm = np.tile(np.arange(size, dtype=np.int64), (flat.shape[0], 1))
    rows = np.arange(flat.shape[0])
    for i in range(min(flat.shape[1], size)):
        p = flat[:, i]
        ok = (p >= 0) & (p < size)
        r, pp = rows[ok], p[ok]
        a, b = perm[r, i].copy(), perm[r, pp].copy()
        perm[r, i], perm[r, pp] = b, a
    return perm.reshape(piv.shape[:-1] + (size,))


def _lu_pivots_to_permutation(inst: Instruction, ops: list):
    size = result_shapes(inst)[0].dimensions[-1]
    return pack(inst, [lu_pivots_to_permutation(ops[0], size)])


def _geqrf(inst: Instruction, ops: list):
    """``cusolver_geqrf_ffi``: ``(a_out, tau)``: R above the diagonal, the Householder vectors below it
    (LAPACK's compact form), ``tau`` ``[..., min(m, n)]``."""
    check_layouts(inst)
    a, _ = matrices(ops[0])
    fn = lapack("geqrf", a.dtype)
    qrs, taus = [], []
    for m in a:
        qr, tau, _work, _info = _call(inst, fn, m)
        qrs.append(qr)
        taus.append(tau)
    return pack(inst, [np.stack(qrs), np.stack(taus)])


def _orgqr(inst: Instruction, ops: list):
    """``cusolver_orgqr_ffi`` (``lax.linalg.householder_product``): the ``m x n`` matrix with orthonormal
    columns of the first ``k = len(tau)`` reflectors of ``a``."""
    check_layouts(inst)
    a, _ = matrices(ops[0])
    tau, _ = matrices(ops[1], a.dtype, core=1)
    fn = lapack("orgqr", a.dtype)
    qs = [_call(inst, fn, m, t)[0] for m, t in zip(a, tau)]
    return pack(inst, [np.stack(qs)])


def _ormqr(inst: Instruction, ops: list):
    """``cusolver_ormqr_ffi`` (``left``, ``transpose``): ``op(Q) @ c`` (left) or ``c @ op(Q)`` with ``Q`` the
    product of ``a``'s reflectors; ``transpose`` is the conjugate transpose for complex types."""
    check_layouts(inst)
    cfg = ffi_attrs(inst)
    a, _ = matrices(ops[0])
    tau, _ = matrices(ops[1], a.dtype, core=1)
    c, _ = matrices(ops[2], a.dtype)
    side = "L" if cfg.get("left", True) else "R"
    trans = ("C" if is_complex(a.dtype) else "T") if cfg.get("transpose", False) else "N"
    fn = lapack("ormqr", a.dtype)
    outs = []
    for m, t, cm in zip(a, tau, c):
        lwork = max(1, cm.shape[1] if side == "L" else cm.shape[0]) * 64
        outs.append(_call(inst, fn, side, trans, m, t, cm, lwork)[0])
    return pack(inst, [np.stack(outs)])


def _geqp3(inst: Instruction, ops: list):
    """``cuhybrid_geqp3`` (QR with column pivoting, LAPACK ``geqp3`` on the host as jaxlib's hybrid kernel):
    ``(a_out, jpvt, tau)`` with 1-based column pivots. Only free columns (``jpvt`` input all zero, as jax
    passes) are supported."""
    check_layouts(inst)
    a, _ = matrices(ops[0])
    jp = np.asarray(ops[1])
    if np.any(jp != 0):
        raise EvaluationError(f"custom-call %{inst.name}: cuhybrid_geqp3 with pre-fixed columns (a nonzero "
                              "jpvt input) is not evaluated")
    fn = lapack("geqp3", a.dtype)
    qrs, pivs, taus = [], [], []
    for m in a:
        qr, jpvt, tau, _work, _info = _call(inst, fn, m)
        qrs.append(qr)
        pivs.append(np.asarray(jpvt, np.int64))  # scipy keeps LAPACK's 1-based jpvt
        taus.append(tau)
    return pack(inst, [np.stack(qrs), np.stack(pivs), np.stack(taus)])


def _syrk(inst: Instruction, ops: list):
    """``cusolver_syrk_ffi`` (``lax.linalg.symmetric_product``; row-major): lower triangle and diagonal of
    ``alpha * a @ a^T + beta * c`` (``a^T @ a`` with ``transpose``); the strict upper triangle keeps ``c``
    (cuBLAS ``syrk`` writes one triangle)."""
    check_layouts(inst, column_major=False)
    transpose = bool(ffi_attrs(inst).get("transpose", False))
    a, _ = matrices(ops[0])
    c, _ = matrices(ops[1], a.dtype)
    alpha = np.asarray(ops[2]).astype(a.dtype).reshape(())
    beta = np.asarray(ops[3]).astype(a.dtype).reshape(())
    at = np.swapaxes(a, -1, -2)
    prod = at @ a if transpose else a @ at
    full = alpha * prod + beta * c
    low = np.tril(np.ones(c.shape[-2:], bool))
    return pack(inst, [np.where(low, full, c)])


def cholesky_update(r: np.ndarray, w: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The rank-1 update of an upper Cholesky factor ``r`` by ``w`` with Givens rotations, row by row, as
    jaxlib's ``CholeskyUpdateKernel``: returns ``(r', w')``, ``r'^T r' = r^T r + w w^T``."""
    r, u = np.array(r), np.array(w)
    n = u.shape[0]
    for k in range(n):
        a, b = r[k, k], u[k]
        if b == 0:
            c, s = 1.0, 0.0
        else:
            den = max(abs(a), abs(b))
            a_, b_ = a / den, b / den
            rh = 1.0 / np.hypot(a_, b_)
            c, s = a_ * rh, -(b_ * rh)
        c, s = r.dtype.type(c), r.dtype.type(s)
        rk = r[k, k:].copy()
        r[k, k:] = c * rk - s * u[k:]
        u[k:] = s * rk + c * u[k:]
    return r, u


def _cholesky_update(inst: Instruction, ops: list):
    """``cu_cholesky_update_ffi`` (``lax.linalg.cholesky_update``, row-major, f32 / f64): ``(r', w')``."""
    check_layouts(inst, column_major=False)
    dt = solver_dtype(np.asarray(ops[0]).dtype)
    r, w = cholesky_update(np.asarray(ops[0]).astype(dt), np.asarray(ops[1]).astype(dt))
    return pack(inst, [r, w])


def _gtsv2(inst: Instruction, ops: list):
    """``cusparse_gtsv2_ffi`` (``lax.linalg.tridiagonal_solve``): ``x`` with ``T x = b`` for the tridiagonal
    ``T`` of ``dl`` (``dl[0]`` unused), ``d``, ``du`` (``du[-1]`` unused); Gaussian elimination with partial
    pivoting (LAPACK ``gtsv``), one system per batch."""
    check_layouts(inst)
    b, batch = matrices(ops[3])
    dl, d, du = (matrices(o, b.dtype, core=1)[0] for o in ops[:3])
    fn = lapack("gtsv", b.dtype)
    xs = []
    for lo, dg, hi, rhs in zip(dl, d, du, b):
        n = dg.shape[0]
        if n == 0:
            xs.append(rhs)
            continue
        xs.append(fn(lo[1:n], dg, hi[: n - 1], rhs)[3])  # a singular system gives LAPACK's partial x
    return pack(inst, [np.stack(xs)])


def _perturb_pivot(perturb, pivot, row: np.ndarray):
    """A pivot of magnitude below 1 made safe to divide by (LAPACK ``xLAGTS``' rule, as jaxlib's
    ``MaybePerturbPivot``): while dividing ``row`` by it would overflow, add ``perturb`` (doubling, with the
    pivot's sign); a pivot below the safe minimum that ``row`` does not need perturbed scales both up instead.
    Returns ``(pivot, row)``."""
    fi = np.finfo(np.real(pivot).dtype)
    real = fi.dtype.type
    one = real(1)
    small = one / fi.max
    safemin = fi.tiny if small < fi.tiny else small * (one + fi.eps)
    bignum = one / safemin
    a = abs(pivot)
    if a >= one:
        return pivot, row
    perturb = real(np.copysign(max(abs(perturb), safemin), np.real(pivot)))
    biggest = real(np.abs(row).max(initial=0))
    while a < one:
        if a < safemin:
            if a == 0 or biggest * safemin > a:
                pivot, perturb = pivot + perturb, perturb * real(2)
            else:
                return pivot * bignum, row * bignum
        elif biggest > a * bignum:
            pivot, perturb = pivot + perturb, perturb * real(2)
        else:
            break
        a = abs(pivot)
    return pivot, row


def tridiagonal_solve_perturbed(dl: np.ndarray, d: np.ndarray, du: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``x`` with ``T x = b`` for one tridiagonal ``T`` (``dl[0]`` and ``du[-1]`` unused) by Gaussian
    elimination with row pivoting, perturbing numerically singular pivots by ``eps * max|U|`` instead of
    dividing by them (LAPACK ``xLAGTF`` + ``xLAGTS``; jaxlib's ``tridiagonal_solve_perturbed.h``). In ``b``'s
    precision; ``b`` is ``[n, k]``."""
    n = d.shape[0]
    x = np.array(b)
    if n == 0:
        return x
    real = np.finfo(np.real(d).dtype).dtype.type
    eps = real(np.finfo(real).eps)
    if n == 1:
        p, row = _perturb_pivot(eps * abs(d[0]), d[0], b[0].copy())
        x[0] = row / p
        return x
    u = np.zeros((n, 3), d.dtype)  # diagonal, first and second superdiagonal of U
    u[0, 0], u[0, 1] = d[0], du[0]
    max_u = real(max(abs(u[0, 0]), abs(u[0, 1])))
    scale1 = real(abs(u[0, 0]) + abs(u[0, 1]))
    for k in range(n - 1):
        u[k + 1, 0] = d[k + 1]
        scale2 = real(abs(dl[k + 1]) + abs(u[k + 1, 0]))
        if k < n - 2:
            scale2 += real(abs(du[k + 1]))
        if dl[k + 1] == 0:
            scale1 = scale2
            u[k + 1, 1], u[k, 2] = du[k + 1], 0
            x[k + 1] = b[k + 1]
        else:
            piv1 = real(0) if u[k, 0] == 0 else real(abs(u[k, 0]) / scale1)
            piv2 = real(abs(dl[k + 1]) / scale2)
            if piv2 <= piv1:  # no row exchange
                scale1 = scale2
                f = dl[k + 1] / u[k, 0]
                u[k + 1, 0] -= f * u[k, 1]
                u[k + 1, 1], u[k, 2] = du[k + 1], 0
                x[k + 1] = b[k + 1] - f * x[k]
            else:  # exchange rows k and k + 1
                f = u[k, 0] / dl[k + 1]
                utmp = u[k, 1]
                u[k, 0] = dl[k + 1]
                u[k + 1, 0] = utmp - f * d[k + 1]
                u[k, 1] = d[k + 1]
                if k < n - 2:
                    u[k, 2] = du[k + 1]
                    u[k + 1, 1] = -f * du[k + 1]
                x[k + 1] = x[k] - f * b[k + 1]
                x[k] = b[k + 1]
                scale1 = real(abs(u[k + 1, 0]) + abs(u[k + 1, 1]))
        if k < n - 2:
            max_u = real(max(max_u, *np.abs(u[k])))
    max_u = real(max(max_u, abs(u[n - 1, 0])))
    perturb = eps * max_u
    for k in range(n - 1, -1, -1):  # back substitution with U (two superdiagonals)
        row = x[k].copy()
        if k + 1 < n:
            row = row - u[k, 1] * x[k + 1]
        if k + 2 < n:
            row = row - u[k, 2] * x[k + 2]
        p, row = _perturb_pivot(perturb, u[k, 0], row)
        x[k] = row * (d.dtype.type(1) / p)
    return x


def _tridiagonal_solve_perturbed(inst: Instruction, ops: list):
    """``cu_tridiagonal_solve_perturbed`` (``tridiagonal_solve(perturb_singular=True)``): ``x``, one system
    per batch, singular pivots perturbed (:func:`tridiagonal_solve_perturbed`)."""
    check_layouts(inst)
    b, _ = matrices(ops[3])
    dl, d, du = (matrices(o, b.dtype, core=1)[0] for o in ops[:3])
    with np.errstate(all="ignore"):
        xs = [tridiagonal_solve_perturbed(lo, dg, hi, rhs) for lo, dg, hi, rhs in zip(dl, d, du, b)]
    return pack(inst, [np.stack(xs) if xs else b])


def _cublas_trsm(inst: Instruction, ops: list):
    """``__cublas$triangularSolve`` (XLA's ``TriangularSolveRewriter``): the backend config's ``left_side``,
    ``lower``, ``unit_diagonal``, ``transpose_a`` as HLO ``triangular-solve``; result ``(x, workspace)``."""
    from fusegen.evaluator.linalg import triangular_solve

    cfg = ffi_attrs(inst)
    shapes = result_shapes(inst)
    cd = solver_dtype(shape_dtype(shapes[0]))
    a, b = (np.asarray(o).astype(cd) for o in ops[:2])
    x = triangular_solve(a, b, bool(cfg.get("left_side", False)), bool(cfg.get("lower", False)),
                         bool(cfg.get("unit_diagonal", False)), str(cfg.get("transpose_a", "NO_TRANSPOSE")))
    return pack(inst, [x] + [None] * (len(shapes) - 1))


TARGETS: dict[str, Callable] = {
    "cusolver_potrf_ffi": _potrf,
    "cusolver_getrf_ffi": _getrf,
    "cu_lu_pivots_to_permutation": _lu_pivots_to_permutation,
    "cusolver_geqrf_ffi": _geqrf,
    "cusolver_orgqr_ffi": _orgqr,
    "cusolver_ormqr_ffi": _ormqr,
    "cuhybrid_geqp3": _geqp3,
    "cusolver_syrk_ffi": _syrk,
    "cu_cholesky_update_ffi": _cholesky_update,
    "cusparse_gtsv2_ffi": _gtsv2,
    "cu_tridiagonal_solve_perturbed": _tridiagonal_solve_perturbed,
    "__cublas$triangularSolve": _cublas_trsm,
}
