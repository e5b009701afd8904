"""Patches to Triton's interpreter (idempotent), applied by :func:`fusegen.codegen.triton_runtime.run_interpreted`.

* :func:`patch_float_casts`: float downcasts to bf16/fp8 round to nearest even like the GPU;
* :func:`patch_reduce`: ``tl.reduce`` with fusegen's combine functions (:data:`COMBINE_PREFIX`) folds vectorised;
* :func:`patch_bool_logic`: ``&``, ``|``, ``^`` of ``int1`` tensors skip the interpreter's ``int8`` round trip;
* :func:`patch_overflow_check`: no dead integer-overflow checks while the interpreter's asserts are off;
* :func:`patch_np_dtype`: the interpreter's Triton -> numpy dtype lookup memoised;
* :func:`patch_select_gather`: ``tl.where`` as a bitwise select, 1-D ``tl.gather`` as ``np.take``;
* :func:`patch_dot`: ``tl.dot`` reads bf16/fp8 operands as their values (not raw bits), multiplies f32 operands
  at tf32 as the tensor cores do when ``input_precision="tf32"``, accumulates in f32 (s32 for 8-bit integers);
* :func:`patch_inline_asm`: the inline asm fusegen's kernels use (``cvt.rna.tf32.f32``, ``.pragma "nounroll"``,
  the sub-word atomic store :data:`SUBWORD_STORE_ASM`, the compare-and-swap loops :func:`word_cas_asm`) in numpy;
* :func:`patch_memory`: loads and stores into the host buffers of the run (:func:`host_buffers`) as one numpy
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



def _subword_store_asm(bits: int) -> str:
    """A ``bits``-wide (8 or 16) store of ``$2``'s low bits at address ``$1`` where ``$3 != 0``, as XLA:GPU emits
    a sub-word atomic store: a relaxed 32-bit compare-and-swap loop on the aligned word holding the element
    (``atom.relaxed.*.cas.b32``, seen in XLA's PTX for an overwrite scatter of bf16), so that neighbours in the
    word written at the same time are never lost. ``$0`` is a dummy result (``tl.inline_asm_elementwise`` must
    return one). The braces scope the labels: the text is repeated once per element."""
    low, mask = {16: (2, 0xFFFF), 8: (3, 0xFF)}[bits]
    return ("{ .reg .pred %fgp, %fgr; .reg .b32 %fgsh, %fgm, %fgv, %fgold, %fgnew, %fgres; .reg .b64 %fglo, %fgwa; "
            "setp.ne.b32 %fgp, $3, 0; @!%fgp bra FG_DONE; "
            f"and.b64 %fglo, $1, {low}; sub.s64 %fgwa, $1, %fglo; cvta.to.global.u64 %fgwa, %fgwa; "
            "cvt.u32.u64 %fgsh, %fglo; shl.b32 %fgsh, %fgsh, 3; "
            f"mov.b32 %fgm, {mask}; and.b32 %fgv, $2, %fgm; shl.b32 %fgv, %fgv, %fgsh; shl.b32 %fgm, %fgm, %fgsh; "
            "not.b32 %fgm, %fgm; ld.global.b32 %fgold, [%fgwa]; "
            "FG_LOOP: and.b32 %fgnew, %fgold, %fgm; or.b32 %fgnew, %fgnew, %fgv; "
            "atom.relaxed.gpu.global.cas.b32 %fgres, [%fgwa], %fgold, %fgnew; "
            "setp.ne.b32 %fgr, %fgres, %fgold; mov.b32 %fgold, %fgres; @%fgr bra FG_LOOP; "
            "FG_DONE: mov.b32 $0, 0; }")


#: ``bits -> text`` of :func:`_subword_store_asm` (constraints ``"=r,l,r,r"``: dummy, element address as int64,
#: value bits as int32, predicate as int32; ``is_pure=False``).
SUBWORD_STORE_ASM = {b: _subword_store_asm(b) for b in (8, 16)}


def _subword_store(bits: int):
    """The interpreter's :data:`SUBWORD_STORE_ASM`: the selected lanes' stores in lane order (Triton's
    interpreter runs one program at a time, so the compare-and-swap never retries; a repeated address keeps
    the last lane's value, as Triton's own sequential store does)."""
    storage = {16: np.uint16, 8: np.uint8}[bits]

    def run(vals: list) -> np.ndarray:
        from triton._C.libtriton import interpreter as _interpreter

        addr, value, pred = (np.asarray(v) for v in vals)
        sel = np.ravel(pred) != 0
        if sel.any():
            ptrs = np.ascontiguousarray(np.ravel(addr)[sel].astype(np.uint64))
            data = np.ascontiguousarray((np.ravel(value)[sel].astype(np.int64) & ((1 << bits) - 1)).astype(storage))
            _interpreter.store(ptrs, data, np.ones(ptrs.shape, dtype=bool))
        return np.zeros(np.shape(addr), dtype=np.int32)

    return run


#: PTX combine instructions of :func:`word_cas_asm` -> ``(numpy dtype, numpy function)`` (IEEE round-to-nearest
#: float products / differences with denormals kept, as numpy's; wrapping integer products / differences).
WORD_CAS_OPS = {
    "mul.rn.f32": (np.float32, np.multiply), "mul.rn.f64": (np.float64, np.multiply),
    "sub.rn.f32": (np.float32, np.subtract), "sub.rn.f64": (np.float64, np.subtract),
    "mul.lo.s32": (np.int32, np.multiply), "mul.lo.s64": (np.int64, np.multiply),
    "sub.s32": (np.int32, np.subtract), "sub.s64": (np.int64, np.subtract),
}


def word_cas_asm(op: str) -> str:
    """``*$1 = *$1 OP $2`` where ``$3 != 0``, for a 32/64-bit ``OP`` of :data:`WORD_CAS_OPS`, as XLA:GPU applies a
    scatter combiner without a native atomic: a relaxed compare-and-swap loop per thread
    (``atom.relaxed.*.cas.b32``, ``mul.rn.f32`` between, in XLA's PTX for a multiply scatter of f32). Constraints
    ``"=r,l,r,r"`` / ``"=r,l,l,r"`` (dummy, element address as int64, the update's bits as an integer of its width,
    predicate); ``is_pure=False``."""
    b = 64 if op.endswith("64") else 32
    return ("{ .reg .pred %fgp, %fgr; " f".reg .b{b} %fgold, %fgnew, %fgres; .reg .b64 %fga; "
            "setp.ne.b32 %fgp, $3, 0; @!%fgp bra FG_DONE; cvta.to.global.u64 %fga, $1; "
            f"ld.global.b{b} %fgold, [%fga]; "
            f"FG_LOOP: {op} %fgnew, %fgold, $2; atom.relaxed.gpu.global.cas.b{b} %fgres, [%fga], %fgold, %fgnew; "
            f"setp.ne.b{b} %fgr, %fgres, %fgold; mov.b{b} %fgold, %fgres; @%fgr bra FG_LOOP; "
            "FG_DONE: mov.b32 $0, 0; }")


def _word_cas(op: str):
    """The interpreter's :func:`word_cas_asm`: the selected lanes' updates in lane order. Triton's interpreter runs
    one program at a time, so the swap never retries; lanes on one address are applied one round each, in lane
    order, as the reference applies repeated scatter indices."""
    dtype, fn = WORD_CAS_OPS[op]

    def run(vals: list) -> np.ndarray:
        from triton._C.libtriton import interpreter as _interpreter

        addr, value, pred = (np.ravel(np.asarray(v)) for v in vals)
        sel = np.flatnonzero(pred != 0)
        if sel.size:
            ptrs = addr[sel].astype(np.uint64)
            upd = np.ascontiguousarray(value[sel]).view(dtype)  # the update's bits, passed as an integer
            # the k-th lane on an address runs in round k (stable: lane order within an address)
            order = np.argsort(ptrs, kind="stable")
            first = np.r_[True, ptrs[order][1:] != ptrs[order][:-1]]
            starts = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
            rank = np.empty(order.size, dtype=np.int64)
            rank[order] = np.arange(order.size) - starts
            for k in range(int(rank.max()) + 1):
                lanes = np.flatnonzero(rank == k)
                p = np.ascontiguousarray(ptrs[lanes])
                on = np.ones(p.shape, dtype=bool)
                cur = _interpreter.load(p, on, np.zeros(p.shape, dtype=dtype), np.dtype(dtype))
                with np.errstate(all="ignore"):
                    new = fn(cur, upd[lanes]).astype(dtype, copy=False)
                _interpreter.store(p, np.ascontiguousarray(new), on)
        return np.zeros(np.shape(vals[0]), dtype=np.int32)

    return run


#: The inline-asm texts the interpreter runs: text -> numpy function of the input arrays giving the output.
_INLINE_ASM = {"cvt.rna.tf32.f32 $0, $1;": lambda vals: tf32_round(vals[0]),
               NOUNROLL_ASM: lambda vals: np.zeros(1, dtype=np.int32),
               **{" ".join(t.split()): _subword_store(b) for b, t in SUBWORD_STORE_ASM.items()},
               **{" ".join(word_cas_asm(op).split()): _word_cas(op) for op in WORD_CAS_OPS}}


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


#: Below this many lanes a load, store or integer division keeps Triton's path, as quick there as the numpy
#: calls of the fast paths (which give the same values at any size).
MIN_FAST_LANES = 64

#: The host buffers of the interpreted run in progress, as ``(address, nbytes, array)`` (:func:`host_buffers`).
_HOST_BUFFERS: contextvars.ContextVar[tuple[tuple[int, int, np.ndarray], ...]] = contextvars.ContextVar(
    "fusegen_host_buffers", default=())


@contextlib.contextmanager
def host_buffers(arrays: Sequence[np.ndarray]) -> Iterator[None]:
    """While the block runs, loads and stores whose active lanes all address one of ``arrays`` (C-contiguous
    numpy arrays fusegen allocated for a kernel's parameters) take :func:`patch_memory`'s numpy path; every
    other address keeps Triton's. The arrays stay referenced (so their memory stays valid) until the block
    ends; nested blocks see only their own arrays."""
    spans = tuple((a.ctypes.data, a.nbytes, a) for a in arrays
                  if isinstance(a, np.ndarray) and a.flags.c_contiguous and a.nbytes and not a.dtype.hasobject)
    token = _HOST_BUFFERS.set(spans)
    try:
        yield
    finally:
        _HOST_BUFFERS.reset(token)


def _host_elements(ptrs: np.ndarray, mask: np.ndarray | None, itemsize: int,
                   store: bool) -> tuple[np.ndarray, np.ndarray] | tuple[()] | None:
    """Where the active lanes of ``ptrs`` (uint64 addresses; ``mask`` ``None`` for all lanes) point, as
    ``(u8, idx)``: ``u8`` is the byte view of the one :func:`host_buffers` array holding every active lane's
    ``itemsize`` bytes, ``idx`` (int64, ``ptrs``' shape) the element index of each lane into ``u8`` viewed as
    ``itemsize``-byte elements (inactive lanes index element 0 and must not be written). ``()`` when no lane
    is active; ``None`` where the numpy path does not apply (no registered buffer, a lane outside it or not
    on an element boundary, a read-only buffer for a store)."""
    spans = _HOST_BUFFERS.get()
    if not spans or ptrs.dtype != np.uint64 or itemsize & (itemsize - 1):
        return None
    first = 0
    if mask is not None:
        first = int(np.argmax(mask))  # the first active lane (argmax stops at the first True)
        if not mask.flat[first]:
            return ()
    a0 = int(ptrs.flat[first])
    for base, nbytes, arr in spans:
        if base <= a0 < base + nbytes:
            break
    else:
        return None
    if store and not arr.flags.writeable:
        return None
    off = ptrs - np.uint64(base)  # modulo 2**64: an address below the buffer becomes a huge offset
    if mask is not None:
        off *= mask  # inactive lanes: offset 0, never read from nor written to
    if int(off.max()) + itemsize > nbytes:
        return None
    if itemsize > 1:
        if int(np.bitwise_or.reduce(off, axis=None)) & (itemsize - 1):
            return None
        off >>= np.uint64(itemsize.bit_length() - 1)
    n = nbytes // itemsize
    return arr.reshape(-1).view(np.uint8)[:n * itemsize], off.view(np.int64)


def _lane_mask(mask: Any, shape: tuple[int, ...]) -> np.ndarray | None | bool:
    """A load's or store's mask handle as its bool array, ``None`` when every lane is active (no mask, or all
    set), ``False`` where the numpy path does not apply (a mask that is not bool or not of ``shape``)."""
    if mask is None:
        return None
    m = mask.data
    if m.dtype != np.bool_ or m.shape != shape:
        return False
    return None if m.all() else m


def scatter_last_wins(dst: np.ndarray, idx: np.ndarray, vals: np.ndarray) -> None:
    """``dst[idx[i]] = vals[i]`` for ``i`` in order (1-D ``idx``/``vals``): where an index repeats, the last
    lane's value stays, as Triton's sequential C++ store leaves it. numpy's fancy assignment does not promise
    an order for repeated indices, so those are first reduced to their last lane (``np.maximum.at`` of the
    lane numbers per index, exact in any order); indices that strictly increase (the common contiguous
    store) are unique already."""
    if idx.size > 1 and not bool((idx[1:] > idx[:-1]).all()):
        lanes = np.arange(idx.size, dtype=np.int64)
        lo = int(idx.min())
        rel = idx - lo
        owner = np.empty(int(rel.max()) + 1, np.int64)
        owner[rel] = lanes  # some lane per index
        np.maximum.at(owner, rel, lanes)  # the last lane per index
        keep = owner[rel] == lanes
        if not bool(keep.all()):
            idx, vals = idx[keep], vals[keep]
    dst[idx] = vals


@functools.cache  # once per process
def patch_memory() -> None:
    """``tl.load`` / ``tl.store`` into :func:`host_buffers` as one numpy gather / scatter in Triton's
    interpreter (idempotent).

    Triton 3.9's ``create_masked_load`` / ``create_masked_store`` (and ``create_load`` / ``create_store``,
    which add an all-true mask) copy lane by lane in C++ (``_interpreter.load`` / ``store``): for each lane
    whose mask is set, ``memcpy`` of the element's bytes from / to its address; a masked-out lane loads
    ``other``'s bytes (zeros without ``other``) and touches no memory. Here, when every active lane's address
    lies on an element boundary in one registered buffer, the lanes are turned into element indices
    (:func:`_host_elements`) and the buffer, viewed at the lanes' own storage dtype (``bool`` for ``int1``,
    ``uint16`` for bf16, ``uint8`` for fp8, ...), is gathered with ``np.take`` or assigned through
    :func:`scatter_last_wins`: raw element copies, so the same bytes as ``memcpy``; masked-out lanes get
    ``other`` through ``np.copyto(where=)`` and are dropped before a store; a repeated store address keeps the
    last lane's value. Anything else (fewer than :data:`MIN_FAST_LANES` lanes, a non-bool mask, shapes or
    ``other`` dtypes that differ, addresses outside the run's buffers) goes to Triton's original.
    """
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    orig_load, orig_store = builder.create_load, builder.create_store
    orig_masked_load, orig_masked_store = builder.create_masked_load, builder.create_masked_store

    def load(ptrs: Any, mask: Any, other: Any) -> Any:
        p = ptrs.data
        if p.size < MIN_FAST_LANES:
            return None
        m = _lane_mask(mask, p.shape)
        if m is False:
            return None
        dtype_tt = ptrs.get_element_ty()
        dtype_np = interp._get_np_dtype(dtype_tt)
        o = None
        if other is not None:
            o = other.data
            if o.dtype != dtype_np or o.shape != p.shape:
                return None
        got = _host_elements(p, m, dtype_np.itemsize, store=False)
        if got is None:
            return None
        if not got:  # no active lane
            out = np.zeros(p.shape, dtype_np) if o is None else np.array(o, dtype_np, copy=True)
            return interp.TensorHandle(out, dtype_tt)
        u8, idx = got
        out = np.take(u8.view(dtype_np), idx)
        if m is not None:
            np.copyto(out, np.zeros((), dtype_np) if o is None else o, where=~m)
        return interp.TensorHandle(out, dtype_tt)

    def store(ptrs: Any, value: Any, mask: Any) -> bool:
        p, v = ptrs.data, value.data
        if p.size < MIN_FAST_LANES or v.shape != p.shape:
            return False
        m = _lane_mask(mask, p.shape)
        if m is False:
            return False
        got = _host_elements(p, m, v.dtype.itemsize, store=True)
        if got is None:
            return False
        if not got:  # no active lane
            return True
        u8, idx = got
        if m is None:
            idx, vals = idx.reshape(-1), v.reshape(-1)
        else:
            idx, vals = idx[m], v[m]
        scatter_last_wins(u8.view(v.dtype), idx, vals)
        return True

    def create_load(self: Any, ptr: Any, cache_policy: Any, is_volatile: Any) -> Any:
        r = load(ptr, None, None)
        return r if r is not None else orig_load(self, ptr, cache_policy, is_volatile)

    def create_masked_load(self: Any, ptrs: Any, mask: Any, other: Any, cache_policy: Any, is_volatile: Any) -> Any:
        r = load(ptrs, mask, other)
        return r if r is not None else orig_masked_load(self, ptrs, mask, other, cache_policy, is_volatile)

    def create_store(self: Any, ptr: Any, val: Any, cache_policy: Any) -> Any:
        if not store(ptr, val, None):
            return orig_store(self, ptr, val, cache_policy)
        return None

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, cache_policy: Any) -> Any:
        if not store(ptrs, value, mask):
            return orig_masked_store(self, ptrs, value, mask, cache_policy)
        return None

    create_load.__wrapped__, create_store.__wrapped__ = orig_load, orig_store  # type: ignore[attr-defined]
    create_masked_load.__wrapped__ = orig_masked_load  # type: ignore[attr-defined]
    create_masked_store.__wrapped__ = orig_masked_store  # type: ignore[attr-defined]
    builder.create_load, builder.create_store = create_load, create_store
    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store


def _nonnegative_division(lhs: np.ndarray, rhs: np.ndarray, least_divisor: int) -> tuple[np.ndarray, Any] | None:
    """``(lhs, divisor)`` when ``lhs // rhs`` / ``lhs % rhs`` of two same-shape, same-dtype integer arrays have
    no negative dividend and no divisor below ``least_divisor`` (0 or 1), the divisor a numpy scalar of
    ``rhs``'s dtype where every element of ``rhs`` is the same (numpy divides by a scalar with a
    multiply-shift, about ten times faster); ``None`` otherwise."""
    if (lhs.dtype != rhs.dtype or lhs.dtype.kind not in "iu" or lhs.shape != rhs.shape
            or lhs.size < MIN_FAST_LANES):
        return None
    if lhs.dtype.kind == "i" and lhs.min() < 0:
        return None
    r0 = rhs.flat[0]
    if bool((rhs == r0).all()):
        return (lhs, r0) if r0 >= least_divisor else None
    if rhs.min() < least_divisor:
        return None
    return lhs, rhs


@functools.cache  # once per process
def patch_int_division() -> None:
    """Integer ``//`` and ``%`` of non-negative operands as one numpy division in Triton's interpreter
    (idempotent).

    Triton 3.9's ``create_idiv`` (``create_sdiv``/``create_udiv``) computes C's truncating quotient as
    ``(lhs - np.fmod(lhs, rhs)) // rhs`` and ``create_srem``/``create_urem`` the remainder as ``np.fmod``:
    a remainder, a subtraction and a flooring division per element. Where neither operand is negative
    (:func:`_nonnegative_division`: indices, sizes, strides) truncating and flooring division agree, so the
    quotient is ``lhs // rhs`` (a zero divisor gives 0, as Triton's ``(lhs - 0) // 0`` does) and, for divisors
    of at least 1, the remainder ``lhs - (lhs // rhs) * rhs`` (exact, no overflow: ``0 <= quotient * rhs <=
    lhs``; a zero divisor, whose ``fmod`` is 0, keeps Triton's path). A splat divisor is divided by as a
    scalar. Negative operands, mixed dtypes or shapes, bools and floats keep Triton's path.
    """
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    orig_idiv, orig_srem, orig_urem = builder.create_idiv, builder.create_srem, builder.create_urem

    def create_idiv(self: Any, lhs: Any, rhs: Any) -> Any:
        ops = _nonnegative_division(lhs.data, rhs.data, 0)
        if ops is None:
            return orig_idiv(self, lhs, rhs)
        return interp.TensorHandle(np.floor_divide(*ops), lhs.dtype.scalar)

    def remainder(lhs: Any, rhs: Any) -> Any:
        ops = _nonnegative_division(lhs.data, rhs.data, 1)
        if ops is None:
            return None
        a, d = ops
        q = np.floor_divide(a, d)
        np.multiply(q, d, out=q)
        np.subtract(a, q, out=q)
        return interp.TensorHandle(q, lhs.dtype.scalar)

    def create_srem(self: Any, lhs: Any, rhs: Any) -> Any:
        r = remainder(lhs, rhs)
        return r if r is not None else orig_srem(self, lhs, rhs)

    def create_urem(self: Any, lhs: Any, rhs: Any) -> Any:
        r = remainder(lhs, rhs)
        return r if r is not None else orig_urem(self, lhs, rhs)

    create_idiv.__wrapped__ = orig_idiv  # type: ignore[attr-defined]
    create_srem.__wrapped__, create_urem.__wrapped__ = orig_srem, orig_urem  # type: ignore[attr-defined]
    builder.create_idiv, builder.create_srem, builder.create_urem = create_idiv, create_srem, create_urem


@functools.cache  # once per process
def patch_addptr() -> None:
    """Pointer + integer offset as one fused cast-multiply and one add in Triton's interpreter (idempotent).

    Triton 3.9's ``create_addptr`` computes ``ptr + bytewidth * offset.astype(np.uint64)`` (the element's
    byte width, 1 for ``int1``) in three passes with two temporaries. The same uint64 arithmetic modulo
    2**64 (a negative offset sign-extends and wraps exactly as ``astype`` does) is done here by
    ``np.multiply(offset, bytewidth, dtype=uint64, casting="unsafe")`` (the cast happens inside the ufunc)
    and an in-place add of the pointers, with numpy's broadcasting as before. Non-integer offsets keep
    Triton's path.
    """
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original = builder.create_addptr
    u64 = np.dtype(np.uint64)

    def create_addptr(self: Any, ptr: Any, offset: Any) -> Any:
        p, o = ptr.data, offset.data
        if o.dtype.kind not in "iu" or p.dtype != u64:
            return original(self, ptr, offset)
        width = max(1, ptr.get_element_ty().primitive_bitwidth // 8)
        if width == 1:
            out = np.add(p, o, dtype=u64, casting="unsafe")
        else:
            out = np.multiply(o, np.uint64(width), dtype=u64, casting="unsafe")
            out = np.add(out, p, out=out) if out.shape == p.shape else np.add(out, p)
        return interp.TensorHandle(out, ptr.dtype)

    create_addptr.__wrapped__ = original  # type: ignore[attr-defined]
    builder.create_addptr = create_addptr


def patch_all() -> None:
    """Every patch above (each applied once per process)."""
    patch_float_casts()
    patch_reduce()
    patch_bool_logic()
    patch_overflow_check()
    patch_np_dtype()
    patch_select_gather()
    patch_dot()
    patch_inline_asm()
    patch_memory()
    patch_int_division()
    patch_addptr()
