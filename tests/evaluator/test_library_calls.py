"""Every library call XLA:GPU emits for jax's linear algebra, convolutions and PRNG runs on the host (issue 29).

The programs (``tests/data/library_calls``, made by ``scripts/gen_library_calls.py``) are ``jax.numpy.linalg`` /
``lax.linalg`` / ``jax.scipy.linalg`` / ``lax.conv_general_dilated`` / ``jax.random`` programs compiled by XLA
for an H200; their expected outputs are the same jax programs run on XLA:CPU. Each one runs end to end through
``run_module`` with those outputs as ``--expected``: every custom call on the host, every fusion on its kernel,
and the verdict ``ok``. On a machine with a GPU the same calls are checked against the libraries themselves
(cuSOLVER, cuBLAS, cuDNN) through CuPy.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from conftest import REPO
from gpu_presence import _no_gpu

from fusegen.evaluator import conv_calls, prng_calls, solver_calls, solver_spectral
from fusegen.evaluator.common import EvaluationError, ffi_attrs
from fusegen.evaluator.custom_calls import library_targets
from fusegen.hlo.parser import parse_module
from fusegen.runtime.inputs import leaves, load_expected, load_inputs
from fusegen.verify.judged_run import run_module

DATA = REPO / "tests" / "data" / "library_calls"
PROGRAMS = sorted(p.name[: -len(".h200_opt.hlo")] for p in DATA.glob("*.h200_opt.hlo"))
#: The library targets with a program here (cuBLAS GEMMs, __cudnn$norm / fMHA and __gpu$TopK have their own).
COVERED = {**conv_calls.TARGETS, **solver_calls.TARGETS, **solver_spectral.TARGETS, **prng_calls.TARGETS}


def _load(name: str):
    m = parse_module((DATA / f"{name}.h200_opt.hlo").read_text(), f"{name}.h200_opt.hlo")
    types = [s.element_type for s in m.entry.root.shape.leaves()]
    return m, load_inputs(m, str(DATA / f"{name}.inputs.npz")), load_expected(str(DATA / f"{name}.expected.npz"),
                                                                                 len(types), types=types)


def _targets(m) -> set[str]:
    return {str(i.attrs.get("custom_call_target")) for i in m.all_instructions() if i.opcode == "custom-call"}


def _tolerance(dt: np.dtype) -> float:
    if dt in (np.float64, np.complex128):
        return 1e-10
    if dt in (np.float32, np.complex64):
        return 2e-5
    return 2e-2  # f16 / bf16 results (their products accumulate in f32 on both sides)


def test_every_library_target_has_a_program_from_jax():
    assert len(PROGRAMS) >= 60
    seen = set()
    for name in PROGRAMS:
        seen |= _targets(_load(name)[0])
    assert set(COVERED) - seen == set(), "a library target without a jax program in tests/data/library_calls"
    assert seen - set(library_targets()) == set(), "a target the host does not run"


@pytest.mark.parametrize("name", PROGRAMS)
def test_library_call_program_matches_xla_cpu(name):
    m, args, expected = _load(name)
    out, rep = run_module(m, args, compile_kernels=False, expected=expected)
    calls = [i.name for i in m.all_instructions() if i.opcode == "custom-call"]
    assert {n for n, _op, backend in rep.other_instructions if backend == "host"} >= set(calls)
    assert [f.name for f in rep.fusions if f.backend == "host" or f.status != "ok"] == []
    assert rep.status == "ok", rep.verdict.lines()
    got = leaves(out)
    assert len(got) == len(expected)
    for k, (g, w) in enumerate(zip(got, expected)):
        g, w = np.asarray(g), np.asarray(w)
        assert g.shape == w.shape and g.dtype == w.dtype, (k, g.shape, w.shape, g.dtype, w.dtype)
        if g.dtype.kind in "iub":
            assert np.array_equal(g, w), k
            continue
        gc, wc = g.astype(np.complex128), w.astype(np.complex128)
        assert np.array_equal(np.isnan(gc), np.isnan(wc)), k  # e.g. a Cholesky that failed: NaNs, like XLA:CPU's
        fin = np.isfinite(wc)
        scale = max(1.0, float(np.abs(wc[fin]).max(initial=0.0)))
        assert float(np.abs(gc[fin] - wc[fin]).max(initial=0.0)) <= _tolerance(g.dtype) * scale, k


def test_a_failed_cholesky_reports_lapack_info_and_jax_turns_it_into_nans():
    m, args, expected = _load("cholesky_not_pd")
    (call,) = [i for i in m.all_instructions() if i.opcode == "custom-call"]
    a = np.asarray(args[0])
    _, info = solver_calls._potrf(call, [a])
    assert int(info) == 3  # the leading minor of order 3 (a[2, 2] = -50) is not positive
    assert np.isnan(np.asarray(expected[0])[np.tril_indices(5)]).all()  # (jax zeroes the upper triangle)


def test_ffi_backend_configs_are_read_typed():
    m = parse_module("""HloModule t
ENTRY e {
  a = f32[4,4]{0,1} parameter(0)
  ROOT c = (f32[4,4]{0,1}, f32[4]{0}, s32[]) custom-call(a), custom_call_target="cusolver_syevd_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={algorithm = 2 : ui8, lower = false, magma = "auto", tol = 1.5e-3 : f32}
}
""")
    assert ffi_attrs(m.entry.root) == {"algorithm": 2, "lower": False, "magma": "auto", "tol": 1.5e-3}


def test_a_row_major_matrix_for_a_column_major_library_is_refused_by_name():
    m = parse_module("""HloModule t
ENTRY e {
  a = f32[4,4]{1,0} parameter(0)
  ROOT c = (f32[4,4]{1,0}, s32[]) custom-call(a), custom_call_target="cusolver_potrf_ffi", api_version=API_VERSION_TYPED_FFI, backend_config={lower = true}
}
""")
    with pytest.raises(EvaluationError, match=r"%c: cusolver_potrf_ffi reads operand 0 as column-major \{0,1\}; "
                                              r"its layout is \{1,0\}"):
        solver_calls._potrf(m.entry.root, [np.eye(4, dtype=np.float32)])


def test_lu_pivots_to_permutation_applies_swaps_in_order_and_skips_out_of_range():
    piv = np.array([[2, 2, 3, 9], [1, -1, 3, 3]])
    perm = solver_calls.lu_pivots_to_permutation(piv, 4)
    ref = []
    for row in piv:
        p = list(range(4))
        for i, j in enumerate(row):
            if 0 <= j < 4:
                p[i], p[j] = p[j], p[i]
        ref.append(p)
    assert perm.tolist() == ref == [[2, 0, 3, 1], [1, 0, 3, 2]]


def test_conv_backward_kinds_are_the_adjoints_of_the_forward_convolution():
    """<conv(x, w), dy> = <x, bw_input(dy, w)> = <w, bw_filter(x, dy)>, in f64, for a strided, padded, grouped,
    dilated 2-D convolution (dot-product test of the adjoint)."""
    from fusegen.evaluator.dot_conv import conv_general

    r = np.random.default_rng(3)
    window = {"size": [3, 2], "stride": [2, 1], "pad": [(1, 2), (0, -1)], "lhs_dilate": [1, 1],
              "rhs_dilate": [1, 2], "rhs_reversal": [0, 1]}
    labels = "bf01_oi01->bf01"
    x, w = r.standard_normal((2, 4, 7, 9)), r.standard_normal((6, 2, 3, 2))
    y = conv_general(x, w, window, labels, feature_group_count=2)
    dy = r.standard_normal(y.shape)
    dx = conv_calls.conv_backward_input(dy, w, window, labels, 2, x.shape, np.float64)
    dw = conv_calls.conv_backward_filter(x, dy, window, labels, 2, w.shape, np.float64)
    assert dx.shape == x.shape and dw.shape == w.shape
    assert np.isclose(np.vdot(y, dy), np.vdot(x, dx), rtol=1e-12)
    assert np.isclose(np.vdot(y, dy), np.vdot(w, dw), rtol=1e-12)


def test_threefry_known_answer():
    """Random123's known-answer vectors for Threefry-2x32-20 (jax's own test uses them)."""
    u = lambda *v: np.array(v, np.uint32)  # noqa: E731
    y0, y1 = prng_calls.threefry2x32(u(0, 0xFFFFFFFF, 0x13198A2E), u(0, 0xFFFFFFFF, 0x03707344),
                                     u(0, 0xFFFFFFFF, 0x243F6A88), u(0, 0xFFFFFFFF, 0x85A308D3))
    assert [hex(v) for v in y0] == ["0x6b200159", "0x1cb996fc", "0xc4923a9c"]
    assert [hex(v) for v in y1] == ["0x99ba4efe", "0xbb002be7", "0x483df7a0"]


# -------------------------------------------------------------------------------------- on a GPU, via CuPy
def _gpu():
    why = _no_gpu()
    if why:
        pytest.skip(f"GPU-only: {why}")
    import cupy

    return cupy


def _run_call(name: str):
    """The program's first custom call, run on the host on the operands the program gives it."""
    from fusegen.runtime.executor import Executor

    m, args, _ = _load(name)
    seen: dict = {}
    ex = Executor(m, compile_kernels=False)
    apply = ex._apply

    def spy(inst, ops):
        out = apply(inst, ops)
        if inst.opcode == "custom-call" and "call" not in seen:
            seen["call"] = (inst, [np.asarray(o) for o in ops], out)
        return out

    ex._apply = spy
    ex.run(args)
    return seen["call"]


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["cholesky_f32", "cholesky_c64", "qr_f32", "eigh_f32", "eigh_c64", "svd_f32",
                                  "lu_factor_f32", "trsm_left_lower"])
def test_cusolver_through_cupy_matches_the_host(name):
    cp = _gpu()
    import cupyx.scipy.linalg as cpl

    inst, ops, out = _run_call(name)
    a = cp.asarray(ops[0])
    target = inst.attrs["custom_call_target"]
    if target == "cusolver_potrf_ffi":
        ref, got = cp.linalg.cholesky(a).get(), np.tril(out[0])
    elif target == "cusolver_geqrf_ffi":  # compare R (unique up to the signs LAPACK and cuSOLVER both fix)
        ref, got = cp.linalg.qr(a, mode="r").get(), np.triu(out[0][: ops[0].shape[1]])
    elif target == "cusolver_syevd_ffi":
        ref, got = cp.linalg.eigvalsh(a).get(), out[1]
    elif target == "cusolver_gesvdj_ffi":
        ref, got = cp.linalg.svd(a, compute_uv=False).get(), out[1]
    elif target == "cusolver_getrf_ffi":
        lu, piv = cpl.lu_factor(a)
        ref, got = lu.get(), out[0]
        assert np.array_equal(piv.get() + 1, out[1])
    else:  # __cublas$triangularSolve
        ref, got = cpl.solve_triangular(a, cp.asarray(ops[1]), lower=True).get(), out[0]
    assert np.abs(ref - got).max() <= 1e-4 * max(1.0, float(np.abs(ref).max()))


@pytest.mark.gpu
@pytest.mark.parametrize("name", ["conv_grad_f32", "conv_grad_grouped_strided"])
def test_cudnn_convolution_gradients_through_cupy_match_the_host(name):
    cp = _gpu()
    from cupy.cuda import cudnn as _cudnn_lib  # noqa: F401  (CuPy built with cuDNN)
    import cupyx.cudnn as cudnn

    m, args, _ = _load(name)
    for inst in m.all_instructions():
        target = str(inst.attrs.get("custom_call_target", ""))
        if target not in ("__cudnn$convBackwardInput", "__cudnn$convBackwardFilter"):
            continue
        assert re.search(r"b01f_o01i->b01f", str(inst.attrs["dim_labels"]))
        r = np.random.default_rng(0)
        a = r.standard_normal(inst.operands[0].shape.dimensions).astype(np.float32)
        b = r.standard_normal(inst.operands[1].shape.dimensions).astype(np.float32)
        host = conv_calls._conv(inst, [a, b])[0]
        from fusegen.hlo.window import parse_window

        win = parse_window(inst, 2)
        pad, stride = tuple(p[0] for p in win["pad"]), tuple(win["stride"])
        groups = int(inst.attrs.get("feature_group_count", 1))
        to_nchw, to_oihw = (0, 3, 1, 2), (0, 3, 1, 2)
        if target == "__cudnn$convBackwardInput":
            dy, w = cp.asarray(a.transpose(to_nchw)), cp.asarray(b.transpose(to_oihw))
            dx = cp.empty(tuple(np.array(host.shape)[list(to_nchw)]), cp.float32)
            cudnn.convolution_backward_data(w, dy, None, dx, pad, stride, (1, 1), groups)
            dev = dx.get().transpose(0, 2, 3, 1)
        else:
            x, dy = cp.asarray(a.transpose(to_nchw)), cp.asarray(b.transpose(to_nchw))
            dw = cp.empty(tuple(np.array(host.shape)[list(to_oihw)]), cp.float32)
            cudnn.convolution_backward_filter(x, dy, dw, pad, stride, (1, 1), groups)
            dev = dw.get().transpose(0, 2, 3, 1)
        assert np.abs(dev - host).max() <= 1e-4 * max(1.0, float(np.abs(host).max()))
