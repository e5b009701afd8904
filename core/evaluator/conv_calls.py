"""XLA:GPU's cuDNN convolution custom calls (``cudnn_conv_backend_config``), evaluated on logical arrays.

Mirrors XLA's ``ConvRewriter`` / ``CudnnFusedConvRewriter`` (``xla/service/gpu/transforms/conv_rewriter.cc``,
``cudnn_fused_conv_rewriter.cc``) and ``GpuConvConfig`` (``xla/service/gpu/gpu_conv_runner.cc``). Every kind's
``window``, ``dim_labels`` and ``feature_group_count`` describe the *forward* convolution ``y = conv(x, w)``;
the kinds differ in which of ``x``, ``w``, ``y`` they take and which they produce:

* ``__cudnn$convForward``: ``(x, w) -> y``;
* ``__cudnn$convBackwardInput``: ``(dy, w) -> dx``, the adjoint of ``x -> conv(x, w)`` applied to ``dy``
  (a training step's input gradient, and every transposed / lhs-dilated convolution); ``dx`` has the result's
  shape;
* ``__cudnn$convBackwardFilter``: ``(x, dy) -> dw``, the adjoint of ``w -> conv(x, w)`` (the filter gradient);
* ``__cudnn$convBiasActivationForward``: ``(x, w, bias[, side_input]) -> act(conv_result_scale * conv(x, w)
  + side_input_scale * side_input + bias)``, bias along the output feature dim; ``activation_mode`` kNone /
  kRelu / kRelu6 / kReluX / kElu / kLeakyRelu (``leakyrelu_alpha``) / kSigmoid / kTanh.

``conv_result_scale`` multiplies every kind's result. Products accumulate in f32 for f16 / bf16 (f64 /
complex for those types) and are rounded once. The result tuple is ``(result, scratch u8[N])``; the scratch
is zeros.
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from fusegen.evaluator.common import EvaluationError, as_array, attr_int, backend_config, shape_dtype, up
from fusegen.evaluator.dot_conv import accumulate_dtype, conv_general, parse_dim_labels
from fusegen.hlo.ir import Instruction


def _activation(y: np.ndarray, mode: str, alpha: float) -> np.ndarray:
    m = mode.lower().lstrip("k")
    if m in ("none", "", "identity"):
        return y
    if m == "relu":
        return np.maximum(y, 0)
    if m == "relu6":
        return np.clip(y, 0, 6)
    if m == "relux":
        return np.clip(y, 0, alpha) if alpha else np.maximum(y, 0)
    if m == "elu":
        return np.where(y > 0, y, np.expm1(y))
    if m == "leakyrelu":
        return np.where(y > 0, y, alpha * y)
    if m == "sigmoid":
        return 1.0 / (1.0 + np.exp(-y))
    if m == "tanh":
        return np.tanh(y)
    raise EvaluationError(f"unsupported cuDNN activation_mode {mode!r}")


class _Geometry:
    """The forward convolution's canonical geometry: ``x`` as ``[n, c, spatial]``, ``w`` as ``[o, ci, k]``,
    ``y`` as ``[n, o, out spatial]``, the padded input extent and each spatial dim's tap slices."""

    def __init__(self, window: dict, labels: str, x_shape, w_shape, groups: int):
        self.ls, self.rs, self.os = parse_dim_labels(labels)
        self.nsp = nsp = len(self.ls) - 2
        self.window, self.groups = window, groups
        self.x_perm = [self.ls.index("b"), self.ls.index("f")] + [self.ls.index(str(i)) for i in range(nsp)]
        self.w_perm = [self.rs.index("o"), self.rs.index("i")] + [self.rs.index(str(i)) for i in range(nsp)]
        self.y_perm = [self.os.index("b"), self.os.index("f")] + [self.os.index(str(i)) for i in range(nsp)]
        xs = [x_shape[p] for p in self.x_perm]
        ws = [w_shape[p] for p in self.w_perm]
        self.n, self.c, self.xsp = xs[0], xs[1], xs[2:]
        self.o, self.ci, self.ksz = ws[0], ws[1], ws[2:]
        if self.c != self.ci * groups or self.o % groups:
            raise EvaluationError(f"convolution: {self.c} input features, {self.ci} per group, {self.o} outputs "
                                  f"and {groups} groups do not match")
        self.padded, self.osp = [], []
        for i in range(nsp):
            (lo, hi), ld = window["pad"][i], window["lhs_dilate"][i]
            p = lo + (max(self.xsp[i] - 1, 0) * ld + 1 if self.xsp[i] else 0) + hi
            span = (self.ksz[i] - 1) * window["rhs_dilate"][i] + 1
            self.padded.append(p)
            self.osp.append((p - span) // window["stride"][i] + 1 if p >= span else 0)

    def tap(self, pos) -> tuple:
        """Slices of the padded input (after ``[n, groups, ci]``) that tap ``pos`` of the kernel reads."""
        rd, st = self.window["rhs_dilate"], self.window["stride"]
        return (slice(None),) * 3 + tuple(slice(q * r, q * r + (m - 1) * s + 1, s) if m > 0 else slice(0, 0)
                                          for q, r, s, m in zip(pos, rd, st, self.osp))

    def canonical_w(self, w: np.ndarray, cd) -> np.ndarray:
        """``w`` as ``[groups, o / groups, ci, k]``, reversed where the window says so."""
        k = np.transpose(w, self.w_perm).astype(cd)
        for i in range(self.nsp):
            if self.window["rhs_reversal"][i]:
                k = np.flip(k, axis=2 + i)
        return k.reshape((self.groups, self.o // self.groups, self.ci) + tuple(self.ksz))

    def canonical_y(self, y: np.ndarray, cd) -> np.ndarray:
        """``y`` / ``dy`` as ``[n, groups, o / groups, P]`` (P = the output positions, flattened)."""
        yc = np.transpose(y, self.y_perm).astype(cd)
        if list(yc.shape[2:]) != self.osp or yc.shape[:2] != (self.n, self.o):
            raise EvaluationError(f"convolution: output gradient {list(yc.shape)} does not match the forward "
                                  f"convolution's output {[self.n, self.o] + self.osp}")
        return yc.reshape(self.n, self.groups, self.o // self.groups, -1)

    def padded_x(self, x: np.ndarray, cd) -> np.ndarray:
        from fusegen.evaluator.shape_ops import pad_array

        xc = np.transpose(x, self.x_perm).astype(cd)
        cfg = [(0, 0, 0), (0, 0, 0)] + [(lo, hi, ld - 1) for (lo, hi), ld in
                                        zip(self.window["pad"], self.window["lhs_dilate"])]
        xp = pad_array(xc, np.zeros((), cd), cfg)
        return xp.reshape((self.n, self.groups, self.ci) + xp.shape[2:])

    def unpad_x(self, g: np.ndarray) -> np.ndarray:
        """The gradient of the padded, dilated input ``[n, groups, ci, padded]`` at the input's own positions
        (``lo + j * lhs_dilation``; a position padding cropped away gets 0), as ``[n, c, spatial]``."""
        out = g.reshape((self.n, self.c) + g.shape[3:])
        for i in range(self.nsp):
            (lo, _), ld = self.window["pad"][i], self.window["lhs_dilate"][i]
            pos = lo + np.arange(self.xsp[i]) * ld
            ok = (pos >= 0) & (pos < self.padded[i])
            taken = np.take(out, np.where(ok, pos, 0), axis=2 + i)
            shape = [1] * taken.ndim
            shape[2 + i] = len(pos)
            out = np.where(ok.reshape(shape), taken, 0)
        return out

    def to_labels(self, canonical: np.ndarray, perm: list[int]) -> np.ndarray:
        return np.transpose(canonical, np.argsort(perm))


def conv_backward_input(dy: np.ndarray, w: np.ndarray, window: dict, labels: str, groups: int,
                        x_shape, out_dtype) -> np.ndarray:
    """``dx`` (shape ``x_shape`` in ``labels``' input order) of the forward convolution for output gradient
    ``dy``: ``dx = d/dx <conv(x, w), dy>``, in the accumulation dtype.

    Raises:
        EvaluationError: shapes that do not form the forward convolution.
    """
    g = _Geometry(window, labels, x_shape, w.shape, groups)
    cd = accumulate_dtype(np.asarray(dy).dtype, np.asarray(w).dtype, out=out_dtype)
    k = g.canonical_w(np.asarray(w), cd)
    dyc = g.canonical_y(np.asarray(dy), cd)
    grad = np.zeros((g.n, groups, g.ci) + tuple(g.padded), cd)
    for pos in np.ndindex(*g.ksz):
        kp = k[(slice(None),) * 3 + pos]  # [groups, og, ci]
        contrib = np.einsum("goc,ngop->ngcp", kp, dyc)
        grad[g.tap(pos)] += contrib.reshape(contrib.shape[:3] + tuple(g.osp))
    return g.to_labels(g.unpad_x(grad), g.x_perm)


def conv_backward_filter(x: np.ndarray, dy: np.ndarray, window: dict, labels: str, groups: int,
                         w_shape, out_dtype) -> np.ndarray:
    """``dw`` (shape ``w_shape`` in ``labels``' kernel order) of the forward convolution for output gradient
    ``dy``: ``dw = d/dw <conv(x, w), dy>``, in the accumulation dtype.

    Raises:
        EvaluationError: shapes that do not form the forward convolution.
    """
    g = _Geometry(window, labels, np.shape(x), w_shape, groups)
    cd = accumulate_dtype(np.asarray(x).dtype, np.asarray(dy).dtype, out=out_dtype)
    xp = g.padded_x(np.asarray(x), cd)
    dyc = g.canonical_y(np.asarray(dy), cd)
    dk = np.zeros((groups, g.o // groups, g.ci) + tuple(g.ksz), cd)
    for pos in np.ndindex(*g.ksz):
        sl = xp[g.tap(pos)].reshape(g.n, groups, g.ci, -1)
        dk[(slice(None),) * 3 + pos] = np.einsum("ngop,ngcp->goc", dyc, sl)
    dk = dk.reshape((g.o, g.ci) + tuple(g.ksz))
    for i in range(g.nsp):
        if window["rhs_reversal"][i]:
            dk = np.flip(dk, axis=2 + i)
    return g.to_labels(dk, g.w_perm)


def _conv(inst: Instruction, ops: list):
    from fusegen.hlo.window import parse_window
    from fusegen.evaluator.solver_calls import pack, result_shapes

    cfg = backend_config(inst).get("cudnn_conv_backend_config") or {}
    shapes = result_shapes(inst)
    main = shapes[0]
    out_dt = shape_dtype(main)
    labels = inst.attrs.get("dim_labels")
    if labels is None:
        raise EvaluationError(f"custom-call %{inst.name}: convolution custom call without dim_labels")
    nsp = len(parse_dim_labels(labels)[0]) - 2
    w = parse_window(inst, nsp)
    groups = attr_int(inst, "feature_group_count", 1)
    target = str(inst.attrs.get("custom_call_target", ""))
    a, b = up(np.asarray(ops[0])), up(np.asarray(ops[1]))
    try:
        if target == "__cudnn$convBackwardInput":
            y = conv_backward_input(a, b, w, labels, groups, main.dimensions, out_dt)
        elif target == "__cudnn$convBackwardFilter":
            y = conv_backward_filter(a, b, w, labels, groups, main.dimensions, out_dt)
        else:
            y = conv_general(a, b, w, labels, groups, attr_int(inst, "batch_group_count", 1), out_dt)
    except EvaluationError as e:
        raise EvaluationError(f"custom-call %{inst.name} ({target}): {e}") from None
    scale = cfg.get("conv_result_scale")
    y = y * float(scale if scale is not None else 1)
    if target == "__cudnn$convBiasActivationForward":
        if len(ops) > 3:
            s = float(cfg.get("side_input_scale", 0) or 0)
            if s:
                y = y + s * up(np.asarray(ops[3])).astype(y.dtype)
        if len(ops) > 2:
            bias = up(np.asarray(ops[2])).astype(y.dtype).reshape(-1)
            shp = [1] * y.ndim
            shp[parse_dim_labels(labels)[2].index("f")] = bias.size
            y = y + bias.reshape(shp)
        y = _activation(y, str(cfg.get("activation_mode", "kNone")), float(cfg.get("leakyrelu_alpha", 0) or 0))
    return pack(inst, [as_array(y, out_dt)] + [None] * (len(shapes) - 1))


TARGETS: dict[str, Callable] = {
    "__cudnn$convForward": _conv,
    "__cudnn$convBackwardInput": _conv,
    "__cudnn$convBackwardFilter": _conv,
    "__cudnn$convBiasActivationForward": _conv,
}
