"""Patches to Triton's interpreter (idempotent), applied by :func:`fusegen.codegen.triton_runtime.run_interpreted`.

* :func:`patch_float_casts`: float downcasts to bf16/fp8 round to nearest even like the GPU;
* :func:`patch_reduce`: ``tl.reduce`` with fusegen's combine functions (:data:`COMBINE_PREFIX`) folds vectorised;
* :func:`patch_bool_logic`: ``&``, ``|``, ``^`` of ``int1`` tensors skip the interpreter's ``int8`` round trip;
* :func:`patch_overflow_check`: no dead integer-overflow checks while the interpreter's asserts are off;
* :func:`patch_np_dtype`: the interpreter's Triton -> numpy dtype lookup memoised;
* :func:`patch_select_gather`: ``tl.where`` as a bitwise select, 1-D ``tl.gather`` as ``np.take``;
* :func:`patch_dot`: ``tl.dot`` reads bf16/fp8 operands as their values (not raw bits), multiplies f32 operands
  at tf32 as the tensor cores do when ``input_precision="tf32"``, accumulates in f32 (s32 for 8-bit integers);
* :func:`patch_exp`: ``tl.exp`` of f32 as the GPU computes it, 2 to the f32-rounded ``x * log2(e)``;
* :func:`patch_inline_asm`: the inline asm fusegen's kernels use (``cvt.rna.tf32.f32``, ``.pragma "nounroll"``,
  XLA's atomics of :mod:`fusegen.codegen.atomic_asm`) in numpy;
* :func:`~fusegen.codegen.interpreter_fast_paths.patch_memory` (and the two below, in that module): loads and stores into the host buffers of the run (:func:`host_buffers`) as one numpy
  gather / scatter instead of Triton's per-lane C++ loop;
* :func:`patch_int_division`: integer ``//`` and ``%`` of non-negative operands as one numpy division (by a
  scalar where the divisor is a splat);
* :func:`patch_addptr`: pointer + offset as one fused cast-multiply-add.

From :func:`patch_memory` on, a patch falls back to Triton's method for every case it does not cover, and each
method it replaces keeps Triton's as ``__wrapped__`` (the tests compare the two).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Iterator, Sequence

import numpy as np

from fusegen.codegen import atomic_asm
from fusegen.codegen.interpreter_fast_paths import patch_addptr, patch_int_division, patch_memory
# shared with the reference evaluator, which rounds a tf32 dot's operands as the kernel does
from fusegen.hlo.dot_numerics import tf32_round, tf32_truncate


@functools.cache  # once per process
def patch_float_casts() -> None:
    """Make the interpreter round float downcasts to bf16/fp8 to nearest-even.

    Triton 3.9's interpreter converts f32 -> bf16 by *truncating* the mantissa (``_convert_float`` with no
    rounding mode) and its RTNE path rounds half up without carrying; the GPU's ``cvt.rn.bf16.f32`` (what
    compiled kernels use) rounds to nearest even. Conversions whose source or destination is bf16/fp8 are
    therefore done with ml_dtypes, which rounds like the hardware. Everything else is left to Triton.
    """
    import ml_dtypes
    import triton.language as tl
    from triton.runtime import interpreter as interp

    special = {tl.bfloat16: ml_dtypes.bfloat16, tl.float8e4nv: ml_dtypes.float8_e4m3fn,
               tl.float8e5: ml_dtypes.float8_e5m2}
    plain = {tl.float16: np.float16, tl.float32: np.float32, tl.float64: np.float64}
    builder = interp.InterpreterBuilder
    orig_cast, orig_fp_to_fp = builder.cast_impl, builder.create_fp_to_fp

    def _ml(ty: Any) -> Any:
        return special.get(ty) or plain.get(ty)

    def _convert(src: Any, dst_type: Any) -> Any:
        s, d = src.dtype.scalar, dst_type.scalar
        if (s in special or d in special) and _ml(s) is not None and _ml(d) is not None and s != d:
            data = src.data.view(_ml(s)) if s in special else src.data
            out = np.asarray(data).astype(_ml(d))
            if d in special:
                out = out.view(interp._get_np_dtype(d))
            return interp.TensorHandle(out, d)
        return None

    def cast_impl(self: Any, src: Any, dst_type: Any) -> Any:
        r = _convert(src, dst_type)
        return r if r is not None else orig_cast(self, src, dst_type)

    def create_fp_to_fp(self: Any, src: Any, dst_type: Any, rounding_mode: Any) -> Any:
        r = _convert(src, dst_type)
        return r if r is not None else orig_fp_to_fp(self, src, dst_type, rounding_mode)

    builder.cast_impl = cast_impl
    for name in ("create_si_to_fp", "create_ui_to_fp", "create_fp_to_si", "create_fp_to_ui", "create_fp_ext",
                 "create_fp_trunc"):
        setattr(builder, name, lambda self, src, dst_type: self.cast_impl(src, dst_type))
    builder.create_fp_to_fp = create_fp_to_fp


#: Name prefix of the ``@triton.jit`` combine functions fusegen generates for ``tl.reduce`` (reducer
#: computations written elementwise); the interpreter folds reductions with them vectorised.
COMBINE_PREFIX = "fg_combine_"

@functools.cache  # once per process
def patch_reduce() -> None:
    """Fold ``tl.reduce`` with a fusegen combine function as a vectorised pairwise tree in Triton's
    interpreter (idempotent).

    Triton 3.9's interpreter folds a generic ``tl.reduce`` one element at a time in Python. fusegen's
    combine functions (name prefix :data:`COMBINE_PREFIX`) are elementwise, so the fold is done as a
    pairwise tree over whole numpy arrays: the same values for an associative combiner, and the order of
    a compiled ``tl.reduce`` is a tree as well. Other combine functions keep the interpreter's path.
    """
    import triton.language as tl
    from triton.runtime import interpreter as interp

    ops = interp.ReduceOps
    original = ops.generic_reduce

    def generic_reduce(self: Any, input: Sequence[Any]) -> list[Any]:
        fn = getattr(self.combine_fn, "fn", None)
        if fn is None or not getattr(fn, "__name__", "").startswith(COMBINE_PREFIX):
            return original(self, input)
        original_axis = self.axis
        tensors, axis = self.unravel(input, self.axis)
        types = [t.dtype for t in tensors]
        datas = [np.moveaxis(t.handle.data, axis, -1) for t in tensors]
        n = datas[0].shape[-1]
        while n > 1:
            h = n // 2
            lhs = [np.ascontiguousarray(d[..., 0:2 * h:2]) for d in datas]
            rhs = [np.ascontiguousarray(d[..., 1:2 * h:2]) for d in datas]
            args = [self.to_tensor(x, ty) for x, ty in zip(lhs, types)] + \
                   [self.to_tensor(x, ty) for x, ty in zip(rhs, types)]
            res = fn(*args)
            res = res if isinstance(res, tuple) else (res,)
            merged = []
            for r, l in zip(res, lhs):
                data = r.handle.data if isinstance(r, tl.core.tensor) else np.asarray(r)
                merged.append(np.broadcast_to(np.asarray(data).astype(l.dtype, copy=False), l.shape))
            if n % 2:
                merged = [np.concatenate([m, d[..., -1:]], axis=-1) for m, d in zip(merged, datas)]
            datas = merged
            n = datas[0].shape[-1]
        outs = []
        for d, ty in zip(datas, types):
            o = d[..., 0] if n == 1 else np.zeros(d.shape[:-1], d.dtype)
            if self.keep_dims:
                if original_axis is not None:
                    o = np.expand_dims(o, axis)
                else:
                    o = o.reshape((1,) * len(tensors[0].handle.data.shape))
            elif original_axis is None:
                o = o.item()
            outs.append(self.to_tensor(np.ascontiguousarray(o) if isinstance(o, np.ndarray) else o, ty))
        return outs

    ops.generic_reduce = generic_reduce


@functools.cache  # once per process
def patch_bool_logic() -> None:
    """``&``, ``|`` and ``^`` of two ``int1`` tensors as numpy's boolean ops in Triton's interpreter
    (idempotent).

    Triton 3.9's interpreter widens every ``int1`` binary op to ``int8`` and back (three copies) so that
    ``+``/``-`` wrap like a 1-bit integer; for the bitwise logic ops numpy's boolean result is already that
    1-bit value, so they skip the round trip (the masks of sort networks are combined this way every step).
    """
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    for name, op in (("create_and", np.bitwise_and), ("create_or", np.bitwise_or), ("create_xor", np.bitwise_xor)):
        original = getattr(builder, name)

        def fast(self: Any, lhs: Any, rhs: Any, _op: Any = op, _orig: Any = original) -> Any:
            if lhs.data.dtype == np.bool_ and rhs.data.dtype == np.bool_:
                return interp.TensorHandle(_op(lhs.data, rhs.data), lhs.dtype.scalar)
            return _orig(self, lhs, rhs)

        setattr(builder, name, fast)


def patch_overflow_check() -> None:
    """Skip the interpreter's integer-overflow sanitizer while its asserts are off (idempotent).

    Triton 3.9's interpreter builds every ``int32`` ``+``/``-``/``*`` twice with ``sanitize_overflow``
    (``semantic.binary_op_sanitize_overflow_impl``): again in ``int64``, then two compares and an ``and``,
    and hands the result to ``device_assert``, which returns at once unless ``options.debug`` is set (it
    never is in the interpreter's ``InterpreterOptions``). The check's values are discarded, so turning it
    off changes no result; it was about a third of a GPT run's interpreter time.
    """
    import dataclasses

    from triton.runtime import interpreter as interp

    b = interp.interpreter_builder
    if b.options.sanitize_overflow and not b.options.debug:
        b.options = dataclasses.replace(b.options, sanitize_overflow=False)


@functools.cache  # once per process
def patch_np_dtype() -> None:
    """Memoise the interpreter's ``_get_np_dtype`` (Triton 3.9 builds a 19-entry dict on every call, several
    times per interpreted op); unknown types still go to the original (idempotent)."""
    import triton.language as tl
    from triton.runtime import interpreter as interp

    original = interp._get_np_dtype
    u64 = np.dtype(np.uint64)
    memo: dict[Any, np.dtype] = {}

    def get_np_dtype(tt_dtype: Any) -> np.dtype:
        if isinstance(tt_dtype, tl.pointer_type):
            return u64
        if isinstance(tt_dtype, tl.block_type):
            tt_dtype = tt_dtype.element_ty
            if isinstance(tt_dtype, tl.pointer_type):
                return u64
        hit = memo.get(tt_dtype)
        if hit is None:
            hit = memo[tt_dtype] = original(tt_dtype)
        return hit

    interp._get_np_dtype = get_np_dtype


_UNSIGNED = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}


def bitwise_select(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray | None:
    """``np.where(cond, a, b)`` as ``b ^ ((a ^ b) * cond)`` on the operands' bit patterns (so NaN payloads and
    -0.0 are kept), or ``None`` where that does not apply (non-bool ``cond``, shapes or dtypes that differ).

    numpy's ``where`` with a data-dependent mask (a sort network's swaps) runs about 4x slower than these
    three integer ops over the same elements."""
    if (cond.dtype != np.bool_ or a.dtype != b.dtype or a.ndim == 0 or a.shape != b.shape
            or a.shape != cond.shape or a.dtype.itemsize not in _UNSIGNED):
        return None
    u = _UNSIGNED[a.dtype.itemsize]
    au, bu = a.view(u), b.view(u)
    d = au ^ bu
    np.multiply(d, cond, out=d, casting="unsafe")  # the differing bits where cond, else 0
    d ^= bu
    return d.view(a.dtype)


@functools.cache  # once per process
def patch_select_gather() -> None:
    """``tl.where`` through :func:`bitwise_select` and a 1-D ``tl.gather`` through ``np.take`` in Triton's
    interpreter (idempotent; the same elements as Triton 3.9's ``np.where`` / ``np.take_along_axis``, which
    every other case still takes). ``np.take`` raises on an index out of range as ``take_along_axis`` does.
    The interpreted sort networks spend most of their time in these two."""
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original_select, original_gather = builder.create_select, builder.create_gather

    def create_select(self: Any, cond: Any, lhs: Any, rhs: Any) -> Any:
        out = bitwise_select(cond.data, lhs.data, rhs.data)
        if out is None:
            return original_select(self, cond, lhs, rhs)
        return interp.TensorHandle(out, rhs.dtype.scalar)

    def create_gather(self: Any, src: Any, indices: Any, axis: Any) -> Any:
        if src.data.ndim == 1 and indices.data.ndim == 1:
            return interp.TensorHandle(np.take(src.data, indices.data, axis=0), src.dtype.scalar)
        return original_gather(self, src, indices, axis)

    builder.create_select, builder.create_gather = create_select, create_gather


def _bit_float_types() -> dict[Any, Any]:
    """Triton type -> ml_dtypes type of the narrow floats the interpreter stores as raw bits (uint16/uint8)."""
    import ml_dtypes
    import triton.language as tl

    return {tl.bfloat16: ml_dtypes.bfloat16, tl.float8e4nv: ml_dtypes.float8_e4m3fn, tl.float8e5: ml_dtypes.float8_e5m2}


@functools.cache  # once per process
def patch_dot() -> None:
    """Make ``tl.dot`` in Triton's interpreter compute what the GPU kernel computes (idempotent).

    Triton 3.9's ``InterpreterBuilder.create_dot`` multiplies the operands' storage arrays: bf16 tiles are
    uint16 bit patterns there, so a bf16 ``tl.dot`` multiplies raw bits as integers; fp8 goes through
    ``_convert_float`` (no NaN); and f32 operands are multiplied in full f32 whatever ``input_precision`` says.
    Here the operands are read as their values (bf16/fp8 via ml_dtypes), f32 operands of a ``tf32`` dot are
    truncated to tf32 as the tensor core reads them, the products are formed in f32 (f64 for f64, int32 with
    wrap-around for 8-bit integers; every bf16/f16/fp8 and tf32 product is exact in f32), summed by numpy's BLAS
    and added to the accumulator, as ``D = A @ B + C`` of the MMA instructions. Other operand types keep the
    original.
    """
    from triton._C.libtriton import ir
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original = builder.create_dot
    bits = _bit_float_types()
    tf32 = ir.INPUT_PRECISION.TF32

    def operand(h: Any, precision: Any) -> np.ndarray | None:
        s = h.dtype.scalar if hasattr(h.dtype, "scalar") else h.dtype
        d = h.data
        if s in bits:
            return d.view(bits[s]).astype(np.float32)
        if d.dtype == np.float32:
            return tf32_truncate(d) if precision == tf32 else d
        if d.dtype in (np.float16, np.float64, np.int8, np.uint8):
            return d
        return None

    def create_dot(self: Any, a: Any, b: Any, d: Any, input_precision: Any, max_num_imprecise_acc: Any) -> Any:
        av, bv = operand(a, input_precision), operand(b, input_precision)
        acc = d.data
        if av is None or bv is None:
            return original(self, a, b, d, input_precision, max_num_imprecise_acc)
        if acc.dtype.kind == "i":
            prod = np.matmul(av.astype(np.int32), bv.astype(np.int32))
            out = (prod + acc.astype(np.int32)).astype(acc.dtype)
        else:
            wide = np.float64 if np.float64 in (av.dtype, bv.dtype, acc.dtype) else np.float32
            prod = np.matmul(av.astype(wide, copy=False), bv.astype(wide, copy=False))
            out = (prod + acc.astype(wide, copy=False)).astype(acc.dtype, copy=False)
        return interp.TensorHandle(np.ascontiguousarray(out), d.dtype.scalar)

    builder.create_dot = create_dot


#: PTX ``.pragma "nounroll";`` as inline asm: the loop whose header holds it stays a loop in ptxas (fusegen's
#: GEMM K loops, as XLA's kernels keep theirs); no value, so its interpreter result is a dummy int32 0.
NOUNROLL_ASM = '.pragma "nounroll";'



#: The inline-asm texts the interpreter runs: text -> numpy function of the input arrays giving the output.
_INLINE_ASM = {"cvt.rna.tf32.f32 $0, $1;": lambda vals: tf32_round(vals[0]),
               NOUNROLL_ASM: lambda vals: np.zeros(1, dtype=np.int32),
               **atomic_asm.INTERPRETED}


class _AsmCall:
    """What ``create_inline_asm`` returns: the results, read back through ``get_result(i)``."""

    def __init__(self, results: list[Any]):
        self.results = results

    def get_result(self, i: int) -> Any:
        return self.results[i]


@functools.cache  # once per process
def patch_inline_asm() -> None:
    """Run :data:`_INLINE_ASM`'s inline assembly (``tl.inline_asm_elementwise``) in Triton's interpreter, which
    otherwise raises ``NotImplementedError`` for any; every other text still does (idempotent). XLA's Triton
    pipeline rounds the f32 operands of a tf32 dot with ``cvt.rna.tf32.f32`` (its
    ``RoundF32ToTF32ForTf32DotRewritePass``), and fusegen's GEMM kernels emit that instruction as XLA does;
    their K loops carry :data:`NOUNROLL_ASM`, which computes nothing."""
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original = builder.create_inline_asm

    def create_inline_asm(self: Any, asm: str, constraints: str, values: list, types: list, is_pure: bool,
                          pack: int) -> Any:
        fn = _INLINE_ASM.get(" ".join(str(asm).split()))
        if fn is None or len(types) != 1:
            return original(self, asm, constraints, values, types, is_pure, pack)
        ty = types[0]
        scalar = ty.scalar if hasattr(ty, "scalar") else ty
        return _AsmCall([interp.TensorHandle(fn([v.data for v in values]), scalar)])

    builder.create_inline_asm = create_inline_asm


#: log2(e) as the f32 constant Triton's lowering of ``tl.exp`` multiplies by (``0f3FB8AA3B``)
LOG2E_F32 = np.float32(1.4426950408889634)


@functools.cache  # once per process
def patch_exp() -> None:
    """``tl.exp`` of an f32 tensor as compiled kernels compute it: Triton lowers it to ``ex2.approx.f32`` of
    ``x * log2(e)`` rounded to f32 (XLA's f16 / bf16 exponential is the same two instructions), so the result
    carries the product's rounding, up to ``|x| * 2**-24`` relative; Triton's interpreter takes ``np.exp`` of
    ``x``, which does not. Here ``np.exp2`` of the rounded product (``ex2.approx``'s own error, 2 ulp at most, is
    not modelled). Other types keep Triton's ``np.exp``; the method replaced is kept as ``__wrapped__``."""
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original = builder.create_exp

    def create_exp(self: Any, arg: Any) -> Any:
        if arg.data.dtype != np.float32:
            return original(self, arg)
        with np.errstate(over="ignore", invalid="ignore"):
            return interp.TensorHandle(np.exp2(arg.data * LOG2E_F32), arg.dtype.scalar)

    create_exp.__wrapped__ = original
    builder.create_exp = create_exp


def patch_all() -> None:
    """Every patch above (each applied once per process)."""
    patch_float_casts()
    patch_reduce()
    patch_bool_logic()
    patch_overflow_check()
    patch_np_dtype()
    patch_select_gather()
    patch_dot()
    patch_exp()
    patch_inline_asm()
    patch_memory()
    patch_int_division()
    patch_addptr()
