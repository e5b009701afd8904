"""Generate the library-call programs of ``tests/data/library_calls/`` (issue 29): one small jax program per
library call XLA:GPU emits for ``jax.numpy.linalg``, ``lax.linalg``, ``jax.scipy.linalg``, convolutions and
the threefry PRNG, compiled by XLA for an H200 without a GPU (the jax CUDA plugin's deviceless compile, as
``scripts/gen_real_models.py`` does), with XLA:CPU's answer.

For each program NAME it writes:

* ``NAME.h200_opt.hlo``: the module after XLA:GPU's optimizer (``metadata={...}`` stripped to keep it small);
* ``NAME.inputs.npz``: its inputs ``p0``, ``p1``, ... in entry-parameter order;
* ``NAME.expected.npz``: the same jax program's outputs on XLA:CPU (``o0``, ``o1``, ...).

It prints each program's custom-call targets; ``--list`` prints them without writing (the discovery run).
Needs the ``models`` extra (``jax-cuda12-plugin``); the committed files let the tests run without it.
Usage: ``python scripts/gen_library_calls.py [--out tests/data/library_calls] [--list] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

os.environ.setdefault("JAX_PLATFORMS", "cpu")  # run on the CPU; the CUDA plugin still compiles for the topology

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "scripts"))

from gen_real_models import _gpu_device  # noqa: E402


def _rng(name: str) -> np.random.Generator:
    return np.random.default_rng(sum(map(ord, name)))


def _spd(r, n, dt, batch=()):
    a = r.standard_normal(batch + (n, n))
    if np.dtype(dt).kind == "c":
        a = a + 1j * r.standard_normal(batch + (n, n))
    return (a @ np.conj(np.swapaxes(a, -1, -2)) + n * np.eye(n)).astype(dt)


def _sym(r, n, dt, batch=()):
    a = r.standard_normal(batch + (n, n))
    if np.dtype(dt).kind == "c":
        a = a + 1j * r.standard_normal(batch + (n, n))
    return ((a + np.conj(np.swapaxes(a, -1, -2))) / 2).astype(dt)


def _mat(r, shape, dt):
    a = r.standard_normal(shape)
    if np.dtype(dt).kind == "c":
        a = a + 1j * r.standard_normal(shape)
    return a.astype(dt)


def _tri(r, n, dt, lower, batch=()):
    a = _mat(r, batch + (n, n), dt) * 0.3 + 2.0 * np.eye(n, dtype=dt)
    return (np.tril(a) if lower else np.triu(a)).astype(dt)


def _linalg_programs() -> dict:
    import jax
    import jax.numpy as jnp
    import jax.scipy.linalg as jsl
    from jax import lax

    from jax._src.lax.linalg import geqrf

    L = lax.linalg
    r = np.random.default_rng(0)
    f32, f64, c64, c128 = np.float32, np.float64, np.complex64, np.complex128
    bf16 = jnp.bfloat16
    not_pd = _sym(r, 5, f32)
    not_pd[2, 2] = -50.0
    return {
        # Cholesky (cusolver_potrf_ffi) and what builds on it (+ __cublas$triangularSolve)
        "cholesky_f32": (jnp.linalg.cholesky, [_spd(r, 8, f32)]),
        "cholesky_f64_batched": (jnp.linalg.cholesky, [_spd(r, 6, f64, (3,))]),
        "cholesky_c64": (jnp.linalg.cholesky, [_spd(r, 5, c64)]),
        "cholesky_not_pd": (jnp.linalg.cholesky, [not_pd]),
        "cho_solve": (lambda a, b: jsl.cho_solve(jsl.cho_factor(a), b), [_spd(r, 6, f32), _mat(r, (6, 3), f32)]),
        # triangular solve (XLA's __cublas$triangularSolve): sides, triangles, transposes, unit diagonal
        "trsm_left_lower": (lambda a, b: jsl.solve_triangular(a, b, lower=True),
                            [_tri(r, 8, f32, True), _mat(r, (8, 4), f32)]),
        "trsm_right_upper_t_unit": (lambda a, b: L.triangular_solve(a, b, left_side=False, lower=False,
                                                                     transpose_a=True, unit_diagonal=True),
                                    [_tri(r, 8, f32, False), _mat(r, (4, 8), f32)]),
        "trsm_batched_trans": (lambda a, b: jsl.solve_triangular(a, b, lower=False, trans=1),
                               [_tri(r, 6, f64, False, (3,)), _mat(r, (3, 6, 2), f64)]),
        "trsm_c64_adjoint": (lambda a, b: jsl.solve_triangular(a, b, lower=True, trans=2),
                             [_tri(r, 5, c64, True), _mat(r, (5, 3), c64)]),
        "trsm_bf16": (lambda a, b: jsl.solve_triangular(a, b, lower=True),
                      [_tri(r, 8, f32, True).astype(bf16), _mat(r, (8, 4), f32).astype(bf16)]),
        # LU (cusolver_getrf_ffi, cu_lu_pivots_to_permutation)
        "lu_factor_f32": (jsl.lu_factor, [_mat(r, (8, 8), f32)]),
        "lu_batched_perm": (lambda a: L.lu(a), [_mat(r, (3, 6, 6), f32)]),
        "lu_c128_rect": (lambda a: L.lu(a), [_mat(r, (6, 4), c128)]),
        "solve_f32": (jnp.linalg.solve, [_mat(r, (6, 6), f32) + 3 * np.eye(6, dtype=f32), _mat(r, (6, 2), f32)]),
        "inv_f64": (jnp.linalg.inv, [_mat(r, (5, 5), f64) + 3 * np.eye(5)]),
        "slogdet": (jnp.linalg.slogdet, [_mat(r, (6, 6), f32)]),
        # QR (cusolver_geqrf_ffi, cusolver_orgqr_ffi, cusolver_ormqr_ffi, cuhybrid_geqp3)
        "qr_f32": (jnp.linalg.qr, [_mat(r, (8, 6), f32)]),
        "qr_batched_complete": (lambda a: jnp.linalg.qr(a, mode="complete"), [_mat(r, (2, 6, 4), f32)]),
        "qr_c64": (jnp.linalg.qr, [_mat(r, (6, 4), c64)]),
        "qr_pivoting": (lambda a: L.qr(a, pivoting=True), [_mat(r, (8, 6), f32)]),
        "ormqr": (lambda a, c: L.ormqr(*geqrf(a), c, left=True, transpose=True),
                  [_mat(r, (8, 6), f32), _mat(r, (8, 3), f32)]),
        # eigh (cusolver_syevd_ffi: default, Jacobi, batched, complex)
        "eigh_f32": (jnp.linalg.eigh, [_sym(r, 8, f32)]),
        "eigh_batched": (jnp.linalg.eigh, [_sym(r, 5, f32, (3,))]),
        "eigh_c64": (jnp.linalg.eigh, [_sym(r, 6, c64)]),
        "eigh_f64": (jnp.linalg.eigvalsh, [_sym(r, 12, f64)]),
        # (the GPU program, and the same math on XLA:CPU, which has no Jacobi / polar method)
        "eigh_jacobi": ((lambda a: L.eigh(a, implementation=L.EighImplementation.JACOBI), L.eigh),
                        [_sym(r, 6, f32)]),
        "eigh_grad": (jax.grad(lambda a: jnp.sum(jnp.linalg.eigvalsh(a) ** 3)), [_sym(r, 6, f32)]),
        # SVD (cusolver_gesvdj_ffi, cusolver_gesvd_ffi incl. transposed, cusolver_gesvdp_ffi)
        "svd_f32": (jnp.linalg.svd, [_mat(r, (8, 6), f32)]),
        "svd_batched": (jnp.linalg.svd, [_mat(r, (3, 5, 4), f32)]),
        "svd_c64": (jnp.linalg.svd, [_mat(r, (5, 4), c64)]),
        "svd_econ_33": (lambda a: jnp.linalg.svd(a, full_matrices=False), [_mat(r, (36, 33), f32)]),
        "svdvals": (lambda a: jnp.linalg.svd(a, compute_uv=False), [_mat(r, (6, 9), f32)]),
        "svd_qr": (lambda a: L.svd(a, algorithm=L.SvdAlgorithm.QR), [_mat(r, (8, 6), f32)]),
        "svd_qr_wide": (lambda a: L.svd(a, algorithm=L.SvdAlgorithm.QR, full_matrices=False),
                        [_mat(r, (5, 9), f32)]),
        "svd_polar": ((lambda a: L.svd(a, algorithm=L.SvdAlgorithm.POLAR), L.svd), [_mat(r, (6, 5), f32)]),
        "pinv": (jnp.linalg.pinv, [_mat(r, (8, 5), f32)]),
        "lstsq": (lambda a, b: jnp.linalg.lstsq(a, b)[0], [_mat(r, (8, 5), f32), _mat(r, (8, 2), f32)]),
        # general eig (cusolver_geev_ffi; cuhybrid_eig_real with left vectors)
        "eig_right": (lambda a: L.eig(a, compute_left_eigenvectors=False), [_mat(r, (6, 6), f32)]),
        "eigvals_f64": (jnp.linalg.eigvals, [_mat(r, (6, 6), f64)]),
        "eig_left_right": (lambda a: L.eig(a), [_mat(r, (5, 5), f32)]),
        "eig_c64_hybrid": (lambda a: L.eig(a), [_mat(r, (4, 4), c64)]),
        # tridiagonal reduction and solve, symmetric product, Cholesky update
        "tridiagonal": (lambda a: L.tridiagonal(a), [_sym(r, 6, f32)]),
        "tridiagonal_solve": (lambda dl, d, du, b: L.tridiagonal_solve(dl, d, du, b),
                              [np.r_[0, r.standard_normal(7)].astype(f32), (r.standard_normal(8) + 4).astype(f32),
                               np.r_[r.standard_normal(7), 0].astype(f32), _mat(r, (8, 3), f32)]),
        # (only its lower triangle is defined: cuBLAS syrk writes one triangle, XLA:CPU both)
        "tridiagonal_solve_perturbed": (lambda dl, d, du, b: L.tridiagonal_solve(dl, d, du, b, perturb_singular=True),
                                        [np.r_[0, 1, 1, 1, 1, 1].astype(f32), np.r_[1, 1, 2, 1, 3, 2].astype(f32),
                                         np.r_[1, 1, 1, 1, 1, 0].astype(f32), _mat(r, (6, 2), f32)]),
        "tridiagonal_solve_perturbed_f64": (
            lambda dl, d, du, b: L.tridiagonal_solve(dl, d, du, b, perturb_singular=True),
            [np.r_[0, r.standard_normal(6)], r.standard_normal(7) * 0.1, np.r_[r.standard_normal(6), 0],
             _mat(r, (2, 7, 3), f64)[0]]),
        "symmetric_product": (lambda a, c: jnp.tril(L.symmetric_product(a, c, alpha=2.0, beta=0.5)),
                              [_mat(r, (6, 4), f32), _sym(r, 6, f32)]),
        "cholesky_update": (lambda rr, w: L.cholesky_update(rr, w),
                            [np.linalg.cholesky(_spd(r, 6, f64)).T.astype(f32), _mat(r, (6,), f32)]),
    }


def _conv_programs() -> dict:
    import jax
    import jax.numpy as jnp
    from jax import lax

    r = np.random.default_rng(1)
    f32, f16, f64, bf16 = np.float32, np.float16, np.float64, jnp.bfloat16
    nhwc = ("NHWC", "HWIO", "NHWC")
    nchw = ("NCHW", "OIHW", "NCHW")

    def conv(x, w, dn=nhwc, stride=(1, 1), pad="SAME", groups=1):
        return lax.conv_general_dilated(x, w, stride, pad, dimension_numbers=dn, feature_group_count=groups)

    def sq(f):
        return lambda *a: jnp.sum(f(*a).astype(jnp.float32) ** 2)

    x, w, b = _mat(r, (2, 8, 8, 4), f32), _mat(r, (3, 3, 4, 6), f32) * 0.3, _mat(r, (6,), f32)
    xg, wg = _mat(r, (2, 4, 9, 9), f32), _mat(r, (6, 2, 3, 3), f32) * 0.3
    return {
        "conv_f32": (conv, [x, w]),
        "conv_bf16": (conv, [x.astype(bf16), w.astype(bf16)]),
        "conv_f16": (conv, [x.astype(f16), w.astype(f16)]),
        "conv_f64_nchw": (lambda x, w: conv(x, w, nchw), [_mat(r, (2, 3, 6, 6), f64), _mat(r, (4, 3, 3, 3), f64)]),
        "conv_grouped_strided": (lambda x, w: conv(x, w, nchw, (2, 2), ((1, 1), (1, 1)), 2), [xg, wg]),
        "conv_depthwise": (lambda x, w: conv(x, w, groups=4), [x, _mat(r, (3, 3, 1, 4), f32)]),
        "conv_1d": (lambda x, w: conv(x, w, ("NWC", "WIO", "NWC"), (1,)), [_mat(r, (2, 16, 4), f32),
                                                                           _mat(r, (5, 4, 6), f32)]),
        "conv_3d": (lambda x, w: conv(x, w, ("NDHWC", "DHWIO", "NDHWC"), (1, 1, 1)),
                    [_mat(r, (2, 4, 4, 4, 3), f32), _mat(r, (3, 3, 3, 3, 5), f32)]),
        # training steps: __cudnn$convBackwardInput / __cudnn$convBackwardFilter
        "conv_grad_f32": (jax.grad(sq(conv), argnums=(0, 1)), [x, w]),
        "conv_grad_bf16": (jax.grad(sq(conv), argnums=(0, 1)), [x.astype(bf16), w.astype(bf16)]),
        "conv_grad_grouped_strided": (jax.grad(sq(lambda x, w: conv(x, w, nchw, (2, 2), ((1, 1), (1, 1)), 2)),
                                               argnums=(0, 1)), [xg, wg]),
        "conv_transpose": (lambda x, w: lax.conv_transpose(x, w, (2, 2), "SAME", dimension_numbers=nhwc),
                           [_mat(r, (2, 5, 5, 4), f32), _mat(r, (3, 3, 4, 3), f32)]),
        # __cudnn$convBiasActivationForward: relu, scaled side input, f16, unfused activations
        "conv_bias_relu": (lambda x, w, b: jax.nn.relu(conv(x, w) + b), [x, w, b]),
        "conv_bias_side_relu": (lambda x, w, b, s: jax.nn.relu(0.5 * conv(x, w) + b + 0.25 * s),
                                [x, w, b, _mat(r, (2, 8, 8, 6), f32)]),
        "conv_bias_relu_f16": (lambda x, w, b: jax.nn.relu(conv(x, w) + b),
                               [x.astype(f16), w.astype(f16), b.astype(f16)]),
        "conv_bias_elu": (lambda x, w, b: jax.nn.elu(conv(x, w) + b), [x, w, b]),
    }


def _random_programs() -> dict:
    import jax

    key = np.array([0, 42], np.uint32)
    return {  # cu_threefry2x32_ffi (with jax_threefry_gpu_kernel_lowering, as --xla... users turn on)
        "threefry_bits": (lambda k: jax.random.bits(jax.random.wrap_key_data(k), (100,)), [key]),
        "threefry_normal": (lambda k: jax.random.normal(jax.random.wrap_key_data(k), (7, 5)), [key]),
    }


def _bitcast_programs() -> dict:
    import jax.numpy as jnp
    from jax import lax

    r = np.random.default_rng(2)
    return {  # lax.bitcast_convert_type across widths: XLA:GPU makes it a `bitcast` between two fusions
        "bitcast_f32_to_u8": (lambda x: lax.bitcast_convert_type(x * 2.0, jnp.uint8) + jnp.uint8(1),
                              [r.standard_normal(1000).astype(np.float32)]),
        "bitcast_u8_to_f32": (lambda x: -lax.bitcast_convert_type(x | jnp.uint8(1), jnp.float32),
                              [r.integers(0, 60, (1000, 4)).astype(np.uint8)]),
    }


def programs() -> dict:
    return {**_linalg_programs(), **_conv_programs(), **_random_programs(), **_bitcast_programs()}


def _strip(hlo: str) -> str:
    return re.sub(r", metadata=\{[^{}]*\}", "", hlo)


def generate(name: str, f, args, out_dir: Path | None, device) -> list[str]:
    import jax
    from jax.sharding import SingleDeviceSharding

    sds = [jax.ShapeDtypeStruct(np.shape(a), np.asarray(a).dtype, sharding=SingleDeviceSharding(device))
           for a in args]
    f_gpu, f_cpu = f if isinstance(f, tuple) else (f, f)
    hlo = _strip(jax.jit(f_gpu).lower(*sds).compile().as_text())
    targets = sorted(set(re.findall(r'custom_call_target="([^"]+)"', hlo)))
    if out_dir is not None:
        expected = jax.tree_util.tree_leaves(jax.jit(f_cpu)(*[jax.numpy.asarray(a) for a in args]))
        (out_dir / f"{name}.h200_opt.hlo").write_text(hlo)
        np.savez_compressed(out_dir / f"{name}.inputs.npz", **{f"p{i}": np.asarray(a) for i, a in enumerate(args)})
        np.savez_compressed(out_dir / f"{name}.expected.npz",
                            **{f"o{i}": np.asarray(a) for i, a in enumerate(expected)})
    return targets


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", help="programs (default all)")
    ap.add_argument("--out", default=str(ROOT / "tests" / "data" / "library_calls"))
    ap.add_argument("--list", action="store_true", help="print each program's targets; write nothing")
    a = ap.parse_args(argv)
    import jax

    jax.config.update("jax_enable_x64", True)
    jax.config.update("jax_threefry_gpu_kernel_lowering", True)  # GPU lowering only; XLA:CPU runs its HLO
    out = None if a.list else Path(a.out)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
    device = _gpu_device()
    progs = programs()
    failed = 0
    for name in a.names or progs:
        f, args = progs[name]
        try:
            print(f"{name:28s} {' '.join(generate(name, f, args, out, device))}")
        except Exception as e:  # one program's failure must not stop the others
            failed += 1
            print(f"{name}: FAILED {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
