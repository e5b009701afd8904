"""``dot``, ``scaled-dot`` and ``convolution``.

* ``dot``: any batch / contracting dims; output dims are batch, lhs free, rhs free (XLA ``DotDimensionNumbers``).
  Floating operands narrower than f32 are multiplied and accumulated in f32 and the result is rounded once to
  the result type (XLA:GPU / cuBLAS accumulate bf16 and f16 GEMMs in f32). Integer dots accumulate with
  wrap-around in the result width (computed in 64 bits, then narrowed). f32 operands are first rounded as
  XLA:GPU's tensor cores take them (:func:`fusegen.hlo.dot_numerics.dot_numerics`): to tf32 with
  ``cvt.rna`` (:func:`~fusegen.hlo.dot_numerics.tf32_round`) for a tf32 dot (the algorithm unset at
  ``DEFAULT``/``HIGH`` precision, or ``ALG_DOT_TF32_TF32_F32``), to bf16/f16 where the algorithm forces that
  type; the products are then summed in f32, as the kernel sums them. Operands already wider than f32 (the
  f64 oracle's promoted copy) are never rounded: the oracle stays the exact answer.
* ``scaled-dot``: each operand is multiplied by its block scale (the scale repeated over each block), then ``dot``.
* ``convolution``: ``dim_labels``, ``window`` (size, stride, pad, lhs/rhs dilation, reversal),
  ``feature_group_count`` and ``batch_group_count`` as in XLA's operation semantics
  (``HloEvaluator::HandleConvolution``), accumulated like ``dot``.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import (
    EvaluationError,
    as_array,
    attr_int,
    attr_ints,
    backend_config,
    is_complex,
    is_int,
    shape_dtype,
    up,
)
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction


def accumulate_dtype(*dts: np.dtype, out: np.dtype | None = None) -> np.dtype:
    """dtype a GEMM/convolution of these operand types accumulates in."""
    all_dts = list(dts) + ([out] if out is not None else [])
    if any(is_complex(d) for d in all_dts):
        return np.dtype(np.complex128) if any(d in (np.complex128, np.float64) for d in all_dts) else np.dtype(np.complex64)
    if any(d == np.float64 for d in all_dts):
        return np.dtype(np.float64)
    if all(is_int(d) or d == np.bool_ for d in dts):
        return np.dtype(np.int64) if (out is None or is_int(out) or out == np.bool_) else np.dtype(np.float64)
    return np.dtype(np.float32)


def dot_general(lhs: np.ndarray, rhs: np.ndarray, lhs_batch, rhs_batch, lhs_contract, rhs_contract,
                out_dtype: np.dtype | None = None) -> np.ndarray:
    """XLA dot: result dims = batch + lhs free + rhs free, in the accumulation dtype (not yet rounded)."""
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    lb, rb, lc, rc = (list(v) for v in (lhs_batch, rhs_batch, lhs_contract, rhs_contract))
    lf = [d for d in range(lhs.ndim) if d not in lb and d not in lc]
    rf = [d for d in range(rhs.ndim) if d not in rb and d not in rc]
    cd = accumulate_dtype(lhs.dtype, rhs.dtype, out=out_dtype)
    bshape = [lhs.shape[d] for d in lb]
    mshape = [lhs.shape[d] for d in lf]
    nshape = [rhs.shape[d] for d in rf]
    b = int(np.prod(bshape, dtype=np.int64))
    m = int(np.prod(mshape, dtype=np.int64))
    n = int(np.prod(nshape, dtype=np.int64))
    k = int(np.prod([lhs.shape[d] for d in lc], dtype=np.int64))
    kr = int(np.prod([rhs.shape[d] for d in rc], dtype=np.int64))
    if k != kr:
        raise EvaluationError(f"dot: contracting sizes differ ({k} vs {kr})")
    lt = np.transpose(lhs, lb + lf + lc).reshape(b, m, k)
    rt = np.transpose(rhs, rb + rc + rf).reshape(b, k, n)
    lt = lt.astype(cd) if lt.dtype != cd else lt
    rt = rt.astype(cd) if rt.dtype != cd else rt
    res = np.matmul(lt, rt)
    return res.reshape(bshape + mshape + nshape)


def dot_operands(inst: Instruction, lhs, rhs, num=None) -> tuple[np.ndarray, np.ndarray]:
    """``dot`` ``inst``'s f32 operand values as XLA:GPU multiplies them (see the module docstring; ``num``: the
    :class:`~fusegen.hlo.dot_numerics.DotNumerics` to use, default the dot's own); others unchanged.

    Raises:
        EvaluationError: an algorithm or operand precision XLA does not know (names the dot).
    """
    from fusegen.hlo.dot_numerics import DotNumericsError, dot_numerics, tf32_round

    if num is None:
        try:
            num = dot_numerics(inst)
        except DotNumericsError as e:
            raise EvaluationError(str(e)) from None
    out = []
    for v in (lhs, rhs):
        a = np.asarray(v)
        t = num.rounded_operand_type("f32") if a.dtype == np.float32 else None
        if t == "tf32":
            a = tf32_round(a)
        elif t is not None:
            a = a.astype(dtypes.numpy_dtype(t)).astype(np.float32)
        out.append(a)
    return out[0], out[1]


def ieee_f32_dots(module) -> int:
    """Give every tf32 ``dot`` of ``module`` (algorithm unset, an f32 operand, both precisions at most
    ``HIGH``) and every cuBLAS GEMM custom call of that ``precision_config`` the precision ``HIGHEST``, in
    place, so that they multiply in IEEE f32: XLA:CPU's arithmetic (it never uses tf32), a second correct
    evaluation of the program beside XLA:GPU's. Returns how many changed."""
    from fusegen.hlo.dot_numerics import (DotNumericsError, dot_numerics, gemm_operand_precisions,
                                          is_tf32_precision, normalize_algorithm)

    changed = 0
    for inst in module.all_instructions():
        if inst.opcode == "dot":
            try:
                num = dot_numerics(inst)
            except DotNumericsError:
                continue
            if num.algorithm == "ALG_UNSET" and any(
                    num.rounded_operand_type(o.shape.element_type) == "tf32" for o in inst.operands[:2]):
                inst.attrs["operand_precision"] = "{highest,highest}"
                changed += 1
        elif inst.opcode == "custom-call" and "gemm_backend_config" in str(inst.attrs.get("backend_config", "")):
            cfg = backend_config(inst)
            gemm = cfg.get("gemm_backend_config")
            if not isinstance(gemm, dict) or not any(o.shape.is_array and o.shape.element_type == "f32"
                                                     for o in inst.operands[:2]):
                continue
            pc = dict(gemm.get("precision_config") or {})
            if normalize_algorithm(pc.get("algorithm")) == "ALG_UNSET" and \
                    is_tf32_precision(gemm_operand_precisions(pc)):
                pc["operand_precision"] = ["HIGHEST", "HIGHEST"]
                inst.attrs["backend_config"] = {**cfg, "gemm_backend_config": {**gemm, "precision_config": pc}}
                changed += 1
    return changed


def _dot(inst: Instruction, ops: list) -> np.ndarray:
    out = shape_dtype(inst.shape)
    lhs, rhs = dot_operands(inst, ops[0], ops[1])
    r = dot_general(lhs, rhs, attr_ints(inst, "lhs_batch_dims"), attr_ints(inst, "rhs_batch_dims"),
                    attr_ints(inst, "lhs_contracting_dims"), attr_ints(inst, "rhs_contracting_dims"), out)
    return as_array(r, out)


def _dequantize(x: np.ndarray, scale: np.ndarray) -> np.ndarray:
    x = up(np.asarray(x)).astype(np.float32) if not is_complex(np.asarray(x).dtype) else np.asarray(x)
    s = up(np.asarray(scale)).astype(np.float32)
    if s.ndim == 0:
        return x * s
    for d in range(x.ndim):
        if s.shape[d] != x.shape[d]:
            s = np.repeat(s, x.shape[d] // max(s.shape[d], 1), axis=d)
    return x * s


def _scaled_dot(inst: Instruction, ops: list) -> np.ndarray:
    out = shape_dtype(inst.shape)
    lhs = _dequantize(ops[0], ops[2]) if len(ops) > 2 else up(ops[0])
    rhs = _dequantize(ops[1], ops[3]) if len(ops) > 3 else up(ops[1])
    r = dot_general(lhs, rhs, attr_ints(inst, "lhs_batch_dims"), attr_ints(inst, "rhs_batch_dims"),
                    attr_ints(inst, "lhs_contracting_dims"), attr_ints(inst, "rhs_contracting_dims"), out)
    return as_array(r, out)


def parse_dim_labels(text: str) -> tuple[str, str, str]:
    """``b01f_01io->b01f`` -> (``b01f``, ``01io``, ``b01f``)."""
    try:
        operands, out = str(text).strip().split("->")
        lhs, rhs = operands.split("_")
    except ValueError:
        raise EvaluationError(f"bad dim_labels {text!r}") from None
    return lhs, rhs, out


def conv_general(lhs: np.ndarray, rhs: np.ndarray, window: dict, dim_labels: str, feature_group_count: int = 1,
                 batch_group_count: int = 1, out_dtype: np.dtype | None = None) -> np.ndarray:
    """XLA convolution in the accumulation dtype; result dims follow the output part of ``dim_labels``.

    ``window`` is :func:`fusegen.hlo.window.parse_window`'s dict over the spatial dims.
    """
    from fusegen.evaluator.shape_ops import pad_array

    ls, rs, os_ = parse_dim_labels(dim_labels)
    nsp = len(ls) - 2
    lhs, rhs = np.asarray(lhs), np.asarray(rhs)
    cd = accumulate_dtype(lhs.dtype, rhs.dtype, out=out_dtype)
    x = np.transpose(lhs, [ls.index("b"), ls.index("f")] + [ls.index(str(i)) for i in range(nsp)]).astype(cd)
    k = np.transpose(rhs, [rs.index("o"), rs.index("i")] + [rs.index(str(i)) for i in range(nsp)]).astype(cd)
    for i in range(nsp):
        if window["rhs_reversal"][i]:
            k = np.flip(k, axis=2 + i)
    x = pad_array(x, np.zeros((), cd), [(0, 0, 0), (0, 0, 0)] +
                  [(lo, hi, ld - 1) for (lo, hi), ld in zip(window["pad"], window["lhs_dilate"])])
    n, c = x.shape[:2]
    o, ci = k.shape[:2]
    ksz = k.shape[2:]
    rd, st = window["rhs_dilate"], window["stride"]
    osp = []
    for i in range(nsp):
        span = (ksz[i] - 1) * rd[i] + 1
        osp.append((x.shape[2 + i] - span) // st[i] + 1 if x.shape[2 + i] >= span else 0)
    fg, bg = feature_group_count, batch_group_count
    if c != ci * fg:
        raise EvaluationError(f"convolution: input features {c} != kernel input features {ci} x groups {fg}")
    nb = n // bg
    og = o // (fg * bg)
    p = int(np.prod(osp, dtype=np.int64))
    # x: [bg, nb, fg, ci, spatial]; kernel: [bg*fg, og, ci, ksz] (output features grouped contiguously)
    xg = x.reshape((bg, nb, fg, ci) + x.shape[2:])
    kg = k.reshape((bg, fg, og, ci) + ksz)
    acc = np.zeros((bg, nb, fg, og, p), dtype=cd)
    for pos in np.ndindex(*ksz):
        idx = (slice(None),) * 4 + tuple(
            slice(q * r, q * r + (m - 1) * s + 1, s) if m > 0 else slice(0, 0)
            for q, r, s, m in zip(pos, rd, st, osp)
        )
        sl = xg[idx].reshape(bg, nb, fg, ci, p)  # [bg, nb, fg, ci, p]
        kp = kg[(slice(None),) * 4 + pos]  # [bg, fg, og, ci]
        # out[bg, nb, fg, og, p] += sum_ci kp[bg, fg, og, ci] * sl[bg, nb, fg, ci, p]
        acc += np.matmul(kp[:, None], sl)
    # output feature index = (bg, fg, og) row-major; batch = nb
    res = acc.transpose(1, 0, 2, 3, 4).reshape((nb, o) + tuple(osp))
    perm = []
    for ch in os_:
        perm.append(0 if ch == "b" else 1 if ch == "f" else 2 + int(ch))
    return np.transpose(res, perm)


def _convolution(inst: Instruction, ops: list) -> np.ndarray:
    from fusegen.hlo.window import parse_window

    out = shape_dtype(inst.shape)
    labels = inst.attrs.get("dim_labels")
    if labels is None:
        raise EvaluationError(f"convolution %{inst.name} has no dim_labels")
    nsp = len(parse_dim_labels(labels)[0]) - 2
    w = parse_window(inst, nsp)
    r = conv_general(ops[0], ops[1], w, labels, attr_int(inst, "feature_group_count", 1),
                     attr_int(inst, "batch_group_count", 1), out)
    return as_array(r, out)


HANDLERS: dict[str, Callable] = {"dot": _dot, "scaled-dot": _scaled_dot, "convolution": _convolution}
