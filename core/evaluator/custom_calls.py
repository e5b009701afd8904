"""XLA:GPU library custom calls, evaluated from their backend configs.

Targets and the semantics mirrored (XLA ``xla/service/gpu/transforms/gemm_rewriter.cc``,
``cudnn_fused_conv_rewriter.cc``, ``cudnn_norm_rewriter.cc``, ``cudnn_fused_mha_rewriter.cc``,
``backend_configs.proto``):

* ``__cublas$gemm``, ``__cublas$lt$matmul``, ``__cublas$lt$matmul$f8`` (``gemm_backend_config``):
  ``D = epilogue(alpha * dot(A, B) + beta * C + bias)`` with ``dot_dimension_numbers`` on the logical operand
  dims, the operands rounded as a ``dot`` of the config's ``precision_config`` rounds them (f32 at ``DEFAULT`` or
  ``HIGH``: tf32, as XLA's cuBLAS compute type); ``alpha = alpha_real + i*alpha_imag``; ``C`` is the operand after ``B`` when ``beta != 0``; the bias
  (epilogues ``BIAS*``) is the next operand and runs along the trailing (rhs non-contracting) logical dims of
  the output, whatever the output layout (GemmRewriter only fuses a bias broadcast along those dims; a bias
  along the lhs rows stays an ``add``, see bug B13). Epilogues: DEFAULT, BIAS, RELU, BIAS_RELU, GELU (tanh
  approximation, as cuBLASLt), BIAS_GELU, SILU, BIAS_SILU, and the ``*_AUX`` forms whose aux output is the
  pre-activation value. The product and epilogue are computed in f32 (f64/complex for those types) and rounded
  once. A tuple result is ``(D, [aux], workspace)``; the workspace is zeros. ``$f8``: operands after A, B (and C)
  are a_scale, b_scale, c_scale, d_scale; ``D = epilogue(a_scale * b_scale * alpha * AB + beta * c_scale * C)
  * d_scale`` (best effort).
* the cuDNN convolution family (forward, backward input / filter, bias + activation):
  :mod:`fusegen.evaluator.conv_calls`; the solver families: :mod:`fusegen.evaluator.solver_calls` and
  :mod:`fusegen.evaluator.solver_spectral`; the threefry PRNG: :mod:`fusegen.evaluator.prng_calls`.
* ``__cudnn$norm`` (``cudnn_norm_backend_config``, best effort): layer norm over the trailing dims of ``x``
  that the scale covers, ``y = (x - mean) * rsqrt(var + epsilon) * scale + bias``; training forms also give
  mean and 1/stddev.
* ``__cudnn$fmhaSoftmax`` and relatives (``cudnn_fmha_backend_config``, best effort): ``softmax(fmha_scale *
  bmm1(Q, K) [+ bias], causal mask if mask_type is CAUSAL) `` then ``bmm2(P, V)``.
* ``__gpu$TopK``: ``(values, indices)`` of the ``k`` largest along the last dim, ``k`` from the result shape.

Any other target raises :class:`~fusegen.evaluator.common.UnsupportedOpError` naming it.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from fusegen.evaluator.common import (
    EvaluationError,
    UnsupportedOpError,
    as_array,
    attr_int,
    backend_config,
    ints,
    is_complex,
    shape_dtype,
    up,
    zeros_for,
)
from fusegen.evaluator.dot_conv import accumulate_dtype, conv_general, dot_general, parse_dim_labels
from fusegen.hlo.ir import Instruction


def _gelu_tanh(x: np.ndarray) -> np.ndarray:
    c = math.sqrt(2.0 / math.pi)
    return 0.5 * x * (1.0 + np.tanh(c * (x + 0.044715 * x * x * x)))


def _dnums(cfg: dict) -> tuple[tuple[int, ...], ...]:
    d = cfg.get("dot_dimension_numbers") or {}
    return (ints(d.get("lhs_batch_dimensions", [])), ints(d.get("rhs_batch_dimensions", [])),
            ints(d.get("lhs_contracting_dimensions", [])), ints(d.get("rhs_contracting_dimensions", [])))


def _result_shapes(inst: Instruction):
    """(main result shape, other tuple element shapes)."""
    if inst.shape.is_tuple:
        shapes = list(inst.shape.tuple_shapes or ())
        return shapes[0], shapes[1:]
    return inst.shape, []


def _pack(inst: Instruction, main: np.ndarray, aux: np.ndarray | None = None):
    if not inst.shape.is_tuple:
        return main
    first, rest = _result_shapes(inst)
    out = [main]
    for s in rest:
        if aux is not None and s.is_array and tuple(s.dimensions) == tuple(first.dimensions):
            out.append(as_array(aux, shape_dtype(s)))
            aux = None
        else:
            out.append(zeros_for(s))
    return tuple(out)


def _gemm_operands(inst: Instruction, cfg: dict, a: np.ndarray, b: np.ndarray, out_type: str) -> tuple:
    """The operands as cuBLAS multiplies them: XLA's ``precision_config`` picks the compute type as for a
    ``dot`` (``GetBlasComputationType``: f32 at ``DEFAULT``/``HIGH`` with the algorithm unset computes as
    tf32, the operands rounded to tf32 here; :func:`fusegen.evaluator.dot_conv.dot_operands`)."""
    from fusegen.evaluator.dot_conv import dot_operands
    from fusegen.hlo.dot_numerics import DotNumericsError, gemm_operand_precisions, numerics

    pc = cfg.get("precision_config") or {}
    types = [inst.operands[i].shape.element_type for i in (0, 1)]
    try:
        num = numerics(types[0], types[1], out_type, pc.get("algorithm"), gemm_operand_precisions(pc),
                       f"custom-call %{inst.name}")
    except DotNumericsError as e:
        raise EvaluationError(str(e)) from None
    return dot_operands(inst, a, b, num)


def _gemm(inst: Instruction, ops: list):
    cfg = backend_config(inst).get("gemm_backend_config")
    if not isinstance(cfg, dict):
        raise EvaluationError(f"custom-call %{inst.name}: {inst.attrs.get('custom_call_target')} has no "
                              "gemm_backend_config")
    main_shape, _ = _result_shapes(inst)
    out_dt = shape_dtype(main_shape)
    lb, rb, lc, rc = _dnums(cfg)
    target = str(inst.attrs.get("custom_call_target", ""))
    fp8 = target.endswith("$f8")
    a, b = _gemm_operands(inst, cfg, np.asarray(ops[0]), np.asarray(ops[1]), main_shape.element_type)
    acc = dot_general(up(a), up(b), lb, rb, lc, rc, out_dt)
    cd = accumulate_dtype(acc.dtype, out=out_dt)
    acc = acc.astype(cd)
    alpha = float(cfg.get("alpha_real", 1) or 0)
    alpha_i = float(cfg.get("alpha_imag", 0) or 0)
    beta = float(cfg.get("beta", 0) or 0)
    alpha_v = complex(alpha, alpha_i) if is_complex(cd) else alpha
    rest = list(ops[2:])
    c = rest.pop(0) if (beta != 0 or (fp8 and len(rest) >= 5)) and rest else None
    scales = []
    if fp8:
        scales = [up(np.asarray(rest.pop(0))).astype(np.float32).reshape(()) for _ in range(min(4, len(rest)))]
    epilogue = str(cfg.get("epilogue", "DEFAULT")).upper()
    bias = rest.pop(0) if epilogue.startswith("BIAS") and rest else None
    a_s = scales[0] if len(scales) > 0 else 1.0
    b_s = scales[1] if len(scales) > 1 else 1.0
    c_s = scales[2] if len(scales) > 2 else 1.0
    d_s = scales[3] if len(scales) > 3 else 1.0
    r = acc * (alpha_v * a_s * b_s)
    if c is not None and beta != 0:
        r = r + beta * c_s * up(np.asarray(c)).astype(cd).reshape(r.shape)
    if bias is not None:
        bv = up(np.asarray(bias)).astype(cd)
        if bv.ndim > r.ndim or tuple(r.shape[r.ndim - bv.ndim:]) != bv.shape:
            raise EvaluationError(
                f"custom-call %{inst.name}: bias {bv.shape} does not match the trailing output dims {r.shape}")
        r = r + bv.reshape((1,) * (r.ndim - bv.ndim) + bv.shape)
    pre = r
    act = epilogue.replace("BIAS_", "").replace("BIAS", "").replace("_AUX", "")
    if act == "RELU":
        r = np.maximum(r, 0)
    elif act == "GELU":
        r = _gelu_tanh(r)
    elif act == "SILU":
        r = r / (1.0 + np.exp(-r))
    elif act not in ("", "DEFAULT"):
        raise EvaluationError(f"custom-call %{inst.name}: unsupported gemm epilogue {epilogue}")
    if fp8:
        r = r * d_s
    out = as_array(r, out_dt).reshape(main_shape.dimensions)
    return _pack(inst, out, pre if epilogue.endswith("_AUX") else None)


def _norm(inst: Instruction, ops: list):
    cfg = backend_config(inst).get("cudnn_norm_backend_config") or {}
    eps = float(cfg.get("epsilon", 1e-5))
    kind = str(cfg.get("kind", "LAYER_FWD_INFER")).upper()
    if "BWD" in kind:
        raise EvaluationError(f"custom-call %{inst.name}: __cudnn$norm kind {kind} is not evaluated")
    x = up(np.asarray(ops[0])).astype(np.float32)
    scale = up(np.asarray(ops[1])).astype(np.float32)
    bias = up(np.asarray(ops[2])).astype(np.float32) if len(ops) > 2 else np.zeros((), np.float32)
    sshape = list(scale.shape)
    while sshape and sshape[0] == 1:
        sshape.pop(0)
    n = len(sshape)
    if n == 0 or tuple(x.shape[x.ndim - n:]) != tuple(sshape):
        raise EvaluationError(f"custom-call %{inst.name}: cannot tell the normalised dims of {x.shape} "
                              f"from scale {scale.shape}")
    axes = tuple(range(x.ndim - n, x.ndim))
    mean = x.mean(axis=axes, keepdims=True)
    var = ((x - mean) ** 2).mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(var + eps)
    bias = bias.reshape(sshape) if bias.size == int(np.prod(sshape)) else bias
    y = (x - mean) * inv * scale.reshape(sshape) + bias
    main_shape, rest = _result_shapes(inst)
    out = [as_array(y, shape_dtype(main_shape)).reshape(main_shape.dimensions)]
    extras = [mean, inv]
    for s in rest:
        if extras and s.is_array and s.numel == extras[0].size and s.element_type not in ("u8", "s8"):
            out.append(as_array(extras.pop(0), shape_dtype(s)).reshape(s.dimensions))
        else:
            out.append(zeros_for(s))
    return tuple(out) if inst.shape.is_tuple else out[0]


def _fmha(inst: Instruction, ops: list):
    cfg = backend_config(inst).get("cudnn_fmha_backend_config") or {}
    q, k, v = (up(np.asarray(o)).astype(np.float32) for o in ops[:3])
    d1 = cfg.get("bmm1_dot_dimension_numbers") or {}
    d2 = cfg.get("bmm2_dot_dimension_numbers") or {}
    s = dot_general(q, k, ints(d1.get("lhs_batch_dimensions", [])), ints(d1.get("rhs_batch_dimensions", [])),
                    ints(d1.get("lhs_contracting_dimensions", [])), ints(d1.get("rhs_contracting_dimensions", [])))
    s = s * float(cfg.get("fmha_scale", 1.0) or 1.0)
    target = str(inst.attrs.get("custom_call_target", ""))
    if "Bias" in target or (len(ops) > 3 and np.asarray(ops[3]).ndim >= 2):
        s = s + up(np.asarray(ops[3])).astype(np.float32)
    if str(cfg.get("mask_type", "NO_MASK")).upper() == "CAUSAL":
        sq, sk = s.shape[-2], s.shape[-1]
        s = np.where(np.arange(sk)[None, :] > np.arange(sq)[:, None], -np.inf, s)
    s = s - s.max(axis=-1, keepdims=True)
    p = np.exp(s)
    p = p / p.sum(axis=-1, keepdims=True)
    o = dot_general(p, v, ints(d2.get("lhs_batch_dimensions", [])), ints(d2.get("rhs_batch_dimensions", [])),
                    ints(d2.get("lhs_contracting_dimensions", [])), ints(d2.get("rhs_contracting_dimensions", [])))
    main_shape, _ = _result_shapes(inst)
    if tuple(o.shape) != tuple(main_shape.dimensions):
        if o.size != main_shape.numel:
            raise EvaluationError(f"custom-call %{inst.name}: fMHA result {o.shape} vs {main_shape.dimensions}")
        o = o.reshape(main_shape.dimensions)
    return _pack(inst, as_array(o, shape_dtype(main_shape)))


def _topk(inst: Instruction, ops: list):
    from fusegen.evaluator.gather_scatter_sort import topk_arrays

    vs, is_ = inst.shape.tuple_shapes[0], inst.shape.tuple_shapes[1]
    vals, idx = topk_arrays(ops[0], vs.dimensions[-1], largest=True)
    return (as_array(vals, shape_dtype(vs)), idx.astype(shape_dtype(is_)))


TARGETS: dict[str, Callable] = {
    "__cublas$gemm": _gemm,
    "__cublas$lt$matmul": _gemm,
    "__cublas$lt$matmul$f8": _gemm,
    "__cudnn$norm": _norm,
    "__cudnn$fmhaSoftmax": _fmha,
    "__cudnn$fmhaScaleBiasSoftmax": _fmha,
    "__cudnn$fmhaScaleMaskSoftmax": _fmha,
    "__gpu$TopK": _topk,
}


def library_targets() -> dict[str, Callable]:
    """Every custom-call target the host runs (target -> ``handler(inst, operands)``): the ones above, cuDNN's
    convolutions, the solver families and the threefry PRNG (see the module docstring)."""
    from fusegen.evaluator import conv_calls, prng_calls, solver_calls, solver_spectral

    return {**TARGETS, **conv_calls.TARGETS, **solver_calls.TARGETS, **solver_spectral.TARGETS,
            **prng_calls.TARGETS}


def _custom_call(inst: Instruction, ops: list):
    target = str(inst.attrs.get("custom_call_target", "")).strip('"')
    fn = library_targets().get(target)
    if fn is None:
        raise UnsupportedOpError(inst, target=target)
    return fn(inst, ops)


HANDLERS: dict[str, Callable] = {"custom-call": _custom_call}
