"""How fusegen's runs change Triton's interpreter, only while they run (:func:`patched_interpreter`, entered by
:func:`fusegen.codegen.triton_runtime.run_interpreted`): a subclass of Triton's ``InterpreterBuilder`` whose methods
are the functions below, and a ``ReduceOps`` subclass, swapped in for the duration and restored afterwards. A
user's own kernel interpreted before or after a fusegen run gets plain Triton.

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
* :func:`patch_addptr`: pointer + offset as one fused cast-multiply-add;
* :func:`~fusegen.codegen.interpreter_fast_paths.patch_splat`: a large scalar splat made once and shared (read-only);
* :func:`patch_program_ids`: ``tl.program_id`` / ``tl.num_programs`` of a launch that runs some of its grid's programs
  (:func:`program_id_map`).

From :func:`patch_memory` on, a patch falls back to Triton's method for every case it does not cover, and each
method it replaces keeps Triton's as ``__wrapped__`` (the tests compare the two). Each ``patch_*`` function returns
its methods (name -> function; built once) and changes nothing itself; :func:`register_builder_mixin` adds a
plugin's. The module checks the installed Triton against :data:`PINNED_TRITON_VERSION` when it is imported
(:class:`TritonVersionWarning`) and the internals it overrides when a run starts (:class:`TritonInternalsError`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import importlib.metadata
import inspect
import threading
import warnings
from typing import Any, Iterator, Sequence

import numpy as np

from fusegen.codegen import atomic_asm
from fusegen.codegen.interpreter_fast_paths import patch_addptr, patch_int_division, patch_memory, patch_splat
# shared with the reference evaluator, which rounds a tf32 dot's operands as the kernel does
from fusegen.hlo.dot_numerics import tf32_round, tf32_truncate


@functools.cache  # once per process
def patch_float_casts() -> dict[str, Any]:
    """Builder methods that round float downcasts to bf16/fp8 to nearest-even.

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

    # (Triton's create_si_to_fp, create_fp_trunc and the like call self.cast_impl: the override serves them too)
    return {"cast_impl": cast_impl, "create_fp_to_fp": create_fp_to_fp}


#: Name prefix of the ``@triton.jit`` combine functions fusegen generates for ``tl.reduce`` (reducer
#: computations written elementwise); the interpreter folds reductions with them vectorised.
COMBINE_PREFIX = "fg_combine_"

@functools.cache  # once per process
def patch_reduce() -> dict[str, Any]:
    """Fold ``tl.reduce`` with a fusegen combine function as a vectorised pairwise tree, and ``tl.sum`` /
    ``_sum_combine`` in one order whatever the tensor's other dimensions: the ``ReduceOps`` methods
    (name -> function).

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

    def sum_rows(self: Any, input: Any) -> Any:
        # Triton's np.sum along the axis folds in an order that depends on the array's other dimensions
        # (pairwise along a contiguous axis, row by row otherwise); folding each row as a contiguous last axis
        # gives every row numpy's pairwise order, so a [8, 1] and an [8, 32] tile sum a column alike
        data = np.asarray(input.handle.data)
        if self.axis is None:
            out = np.sum(np.ascontiguousarray(data).reshape(-1))
            out = np.reshape(out, (1,) * data.ndim) if self.keep_dims else out
        else:
            out = np.sum(np.ascontiguousarray(np.moveaxis(data, self.axis, -1)), axis=-1)
            out = np.expand_dims(out, self.axis) if self.keep_dims else out
        return self.to_tensor(out, input.dtype)

    return {"generic_reduce": generic_reduce, "sum": sum_rows}


@functools.cache  # once per process
def patch_bool_logic() -> dict[str, Any]:
    """``&``, ``|`` and ``^`` of two ``int1`` tensors as numpy's boolean ops: the builder methods.

    Triton 3.9's interpreter widens every ``int1`` binary op to ``int8`` and back (three copies) so that
    ``+``/``-`` wrap like a 1-bit integer; for the bitwise logic ops numpy's boolean result is already that
    1-bit value, so they skip the round trip (the masks of sort networks are combined this way every step).
    """
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    methods = {}
    for name, op in (("create_and", np.bitwise_and), ("create_or", np.bitwise_or), ("create_xor", np.bitwise_xor)):
        original = getattr(builder, name)

        def fast(self: Any, lhs: Any, rhs: Any, _op: Any = op, _orig: Any = original) -> Any:
            if lhs.data.dtype == np.bool_ and rhs.data.dtype == np.bool_:
                return interp.TensorHandle(_op(lhs.data, rhs.data), lhs.dtype.scalar)
            return _orig(self, lhs, rhs)

        methods[name] = fast
    return methods


def patch_overflow_check(b: Any) -> None:
    """Skip the integer-overflow sanitizer of the interpreter builder ``b`` (fusegen's own instance) while its
    asserts are off.

    Triton 3.9's interpreter builds every ``int32`` ``+``/``-``/``*`` twice with ``sanitize_overflow``
    (``semantic.binary_op_sanitize_overflow_impl``): again in ``int64``, then two compares and an ``and``,
    and hands the result to ``device_assert``, which returns at once unless ``options.debug`` is set (it
    never is in the interpreter's ``InterpreterOptions``). The check's values are discarded, so turning it
    off changes no result; it was about a third of a GPT run's interpreter time.
    """
    import dataclasses

    if b.options.sanitize_overflow and not b.options.debug:
        b.options = dataclasses.replace(b.options, sanitize_overflow=False)


@functools.cache  # once per process
def patch_np_dtype() -> Any:
    """The interpreter's ``_get_np_dtype`` memoised (Triton 3.9 builds a 19-entry dict on every call, several
    times per interpreted op); unknown types still go to the original. Returns the function."""
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

    get_np_dtype.__wrapped__ = original  # type: ignore[attr-defined]
    return get_np_dtype


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
def patch_select_gather() -> dict[str, Any]:
    """``tl.where`` through :func:`bitwise_select` and a 1-D ``tl.gather`` through ``np.take``: the builder
    methods (the same elements as Triton 3.9's ``np.where`` / ``np.take_along_axis``, which
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

    return {"create_select": create_select, "create_gather": create_gather}


def _bit_float_types() -> dict[Any, Any]:
    """Triton type -> ml_dtypes type of the narrow floats the interpreter stores as raw bits (uint16/uint8)."""
    import ml_dtypes
    import triton.language as tl

    return {tl.bfloat16: ml_dtypes.bfloat16, tl.float8e4nv: ml_dtypes.float8_e4m3fn, tl.float8e5: ml_dtypes.float8_e5m2}


@functools.cache  # once per process
def patch_dot() -> dict[str, Any]:
    """The builder method that makes ``tl.dot`` in Triton's interpreter compute what the GPU kernel computes.

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

    return {"create_dot": create_dot}


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
def patch_inline_asm() -> dict[str, Any]:
    """The builder method running :data:`_INLINE_ASM`'s inline assembly (``tl.inline_asm_elementwise``) in Triton's
    interpreter, which otherwise raises ``NotImplementedError`` for any; every other text still does. XLA's Triton
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

    return {"create_inline_asm": create_inline_asm}


#: log2(e) as the f32 constant Triton's lowering of ``tl.exp`` multiplies by (``0f3FB8AA3B``)
LOG2E_F32 = np.float32(1.4426950408889634)


@functools.cache  # once per process
def patch_exp() -> dict[str, Any]:
    """The builder method computing ``tl.exp`` of an f32 tensor as compiled kernels compute it: Triton lowers it to ``ex2.approx.f32`` of
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
    return {"create_exp": create_exp}


#: ``(ids, grid)`` of the launch in progress where it runs some of its programs (:func:`program_id_map`).
_PROGRAM_IDS: contextvars.ContextVar[tuple[tuple[tuple[int, int, int], ...], tuple[int, int, int]] | None] = \
    contextvars.ContextVar("fusegen_program_ids", default=None)


@contextlib.contextmanager
def program_id_map(ids: Sequence[tuple[int, int, int]], grid: Sequence[int]) -> Iterator[None]:
    """While the block runs, a launch over the grid ``(len(ids), 1, 1)`` runs the programs ``ids`` of a launch over
    ``grid``: the kernel's program ``k`` sees ``tl.program_id(axis) == ids[k][axis]`` and ``tl.num_programs(axis)
    == grid[axis]`` (the kernel's source is unchanged). ``ids``: ``(x, y, z)`` each within ``grid`` (padded to 3
    axes with 1).

    Raises:
        ValueError: an id outside ``grid``.
    """
    g = tuple(grid) + (1,) * (3 - len(grid))
    ids = tuple(tuple(int(c) for c in i) for i in ids)
    if any(len(i) != 3 or not all(0 <= c < n for c, n in zip(i, g)) for i in ids):
        raise ValueError(f"program ids {ids} are not within the grid {g}")
    token = _PROGRAM_IDS.set((ids, g))
    try:
        yield
    finally:
        _PROGRAM_IDS.reset(token)


@functools.cache  # once per process
def patch_program_ids() -> dict[str, Any]:
    """The builder methods of ``tl.program_id`` and ``tl.num_programs`` that follow :func:`program_id_map` (Triton's
    where no map is set)."""
    import triton.language as tl
    from triton.runtime import interpreter as interp

    builder = interp.InterpreterBuilder
    original_id, original_num = builder.create_get_program_id, builder.create_get_num_programs

    def create_get_program_id(self: Any, axis: Any) -> Any:
        m = _PROGRAM_IDS.get()
        if m is None:
            return original_id(self, axis)
        return interp.TensorHandle(np.array([m[0][self.grid_idx[0]][axis]], dtype=np.int32), tl.int32)

    def create_get_num_programs(self: Any, axis: Any) -> Any:
        m = _PROGRAM_IDS.get()
        if m is None:
            return original_num(self, axis)
        return interp.TensorHandle(np.array([m[1][axis]], dtype=np.int32), tl.int32)

    return {"create_get_program_id": create_get_program_id, "create_get_num_programs": create_get_num_programs}


# --------------------------------------------------------------------------------------------------
# the scope: Triton's interpreter changed only while fusegen runs a kernel
# --------------------------------------------------------------------------------------------------
#: The Triton release the patches above are written for (``pyproject.toml`` pins it).
PINNED_TRITON_VERSION = "3.9.0"

#: The attributes of ``triton.runtime.interpreter`` that :func:`patched_interpreter` rebinds, and restores.
PATCHED_NAMES = ("interpreter_builder", "interpreter_semantic", "ReduceOps", "_get_np_dtype")


class TritonVersionWarning(UserWarning):
    """The installed Triton is not the release fusegen's interpreter patches are written for."""


class TritonInternalsError(RuntimeError):
    """An internal of Triton's interpreter that fusegen overrides is missing or takes other parameters (Triton is
    not the pinned release); raised when a run starts, never absorbed as one fusion's error."""


def installed_triton_version() -> str | None:
    """The installed Triton distribution's version, ``None`` where none is installed as a distribution."""
    try:
        return importlib.metadata.version("triton")
    except importlib.metadata.PackageNotFoundError:
        return None


_FIX = f"install the release fusegen pins (pip install 'triton=={PINNED_TRITON_VERSION}')"


def triton_version_problem(installed: str | None) -> str | None:
    """The warning for an ``installed`` Triton other than :data:`PINNED_TRITON_VERSION` (a local ``+...`` suffix
    ignored), ``None`` for the pinned release or an unknown one."""
    if installed is None or installed.split("+")[0] == PINNED_TRITON_VERSION:
        return None
    return (f"fusegen's interpreter patches are written for Triton {PINNED_TRITON_VERSION}, but Triton {installed} "
            f"is installed: {_FIX}. Interpreted kernels may compute otherwise, and an internal that was renamed "
            f"stops the first run with an error naming it.")


_VERSION_PROBLEM = triton_version_problem(installed_triton_version())
if _VERSION_PROBLEM:
    warnings.warn(_VERSION_PROBLEM, TritonVersionWarning, stacklevel=2)


_MIXINS: list[type] = []
_LOCK = threading.RLock()
_DEPTH = 0
_SAVED: list[tuple[Any, str, Any]] = []
_STATE: dict[str, Any] = {}  # "builder", "semantic": one instance per process; "checked": the internals last checked


def register_builder_mixin(cls: type) -> None:
    """Add ``cls`` to the builder fusegen's runs interpret with: a class (no ``__slots__``) whose methods override
    ``InterpreterBuilder``'s and fall back through ``super()``, put before fusegen's own in the method order. For
    plugins (core never imports one); idempotent; changes nothing in Triton.

    Raises:
        TypeError: ``cls`` is not a class.
    """
    if not isinstance(cls, type):
        raise TypeError(f"register_builder_mixin takes a class, got {cls!r}")
    with _LOCK:
        if cls not in _MIXINS:
            _MIXINS.append(cls)


@functools.cache
def _core_methods() -> dict[str, Any]:
    methods: dict[str, Any] = {}
    for part in (patch_float_casts(), patch_bool_logic(), patch_select_gather(), patch_dot(), patch_exp(),
                 patch_inline_asm(), patch_memory(), patch_int_division(), patch_addptr(), patch_program_ids(),
                 patch_splat()):
        assert not methods.keys() & part.keys(), "two patches override one builder method"
        methods.update(part)
    return methods


@functools.cache
def _builder_class(mixins: tuple[type, ...]) -> type:
    from triton.runtime import interpreter as interp

    core = type("FusegenInterpreterBuilder", (interp.InterpreterBuilder,),
                {"__module__": __name__, "__doc__": "Triton's InterpreterBuilder with fusegen's patches.",
                 **_core_methods()})
    return type(core.__name__, (*mixins, core), {"__module__": __name__}) if mixins else core


@functools.cache
def _reduce_ops_class() -> type:
    from triton.runtime import interpreter as interp

    return type("FusegenReduceOps", (interp.ReduceOps,), {"__module__": __name__, **patch_reduce()})


def fusegen_builder() -> Any:
    """fusegen's interpreter builder (one instance per process: kernel modules keep the semantic built on it).

    Raises:
        TritonInternalsError: see :func:`check_triton_internals`.
    """
    from triton.runtime import interpreter as interp

    with _LOCK:
        b = _STATE.get("builder")
        try:
            cls = _builder_class(tuple(_MIXINS))
            if b is None:
                b = cls()
                patch_overflow_check(b)
                _STATE["semantic"] = interp.TritonSemantic(b)
                _STATE["builder"] = b
        except (AttributeError, ImportError) as e:  # an internal the patches read while they are built
            raise TritonInternalsError(f"Triton's interpreter has no {e.name or e} that fusegen uses "
                                       f"(Triton {installed_triton_version()} is installed): {_FIX}") from None
        if type(b) is not cls:  # a mixin registered since: the same instance, the class composed anew
            b.__class__ = cls
        return b


def _parameters(fn: Any) -> list[str]:
    """The parameters a caller must pass (Triton's builder is called positionally; fusegen's overrides may add
    parameters with defaults)."""
    return [p.name for p in inspect.signature(fn).parameters.values() if p.default is inspect.Parameter.empty]


@functools.cache
def _overrides(cls: type) -> tuple[tuple[type, str, Any], ...]:
    """(Triton's class, method name, the override) of every method the builder class ``cls`` and ``ReduceOps``
    override."""
    from triton.runtime import interpreter as interp

    ours = [k for k in cls.__mro__ if k not in interp.InterpreterBuilder.__mro__]  # fusegen's and the mixins
    found = [(interp.InterpreterBuilder, n, f) for k in ours for n, f in vars(k).items()
             if inspect.isfunction(f) and not n.startswith("__")]
    return tuple(found + [(interp.ReduceOps, n, f) for n, f in patch_reduce().items()])


def check_triton_internals() -> None:
    """Check that every internal of ``triton.runtime.interpreter`` fusegen overrides is there and takes the
    parameters fusegen's override takes (cheap when nothing changed since the last check).

    Raises:
        TritonInternalsError: one is missing or changed; the message names it, the installed and the pinned
            Triton, and what to do.
    """
    from triton.runtime import interpreter as interp

    overrides = _overrides(type(fusegen_builder()))
    key = [getattr(interp, n, None) for n in PATCHED_NAMES] + [getattr(base, n, None) for base, n, _ in overrides]
    if _STATE.get("checked") == key:
        return
    problems = [f"triton.runtime.interpreter.{n} is missing" for n in PATCHED_NAMES if not hasattr(interp, n)]
    for base, name, fn in overrides:
        theirs = getattr(base, name, None)
        if theirs is None:
            problems.append(f"triton.runtime.interpreter.{base.__name__}.{name} is missing")
        elif len(_parameters(theirs)) != len(_parameters(fn)):
            problems.append(f"triton.runtime.interpreter.{base.__name__}.{name} takes "
                            f"({', '.join(_parameters(theirs))}), fusegen's override ({', '.join(_parameters(fn))})")
    fields = getattr(getattr(interp, "InterpreterOptions", None), "__dataclass_fields__", {})
    problems += [f"triton.runtime.interpreter.InterpreterOptions.{n} is missing" for n in ("debug", "sanitize_overflow")
                 if n not in fields]
    if problems:
        raise TritonInternalsError(f"fusegen cannot patch Triton {installed_triton_version()}'s interpreter (it is "
                                   f"written for {PINNED_TRITON_VERSION}): {'; '.join(problems)}; {_FIX}")
    _STATE["checked"] = key


def _install() -> None:
    from triton.runtime import interpreter as interp

    check_triton_internals()
    b = fusegen_builder()
    new = {"interpreter_builder": b, "interpreter_semantic": _STATE["semantic"], "ReduceOps": _reduce_ops_class(),
           "_get_np_dtype": patch_np_dtype()}
    for name in PATCHED_NAMES:
        _SAVED.append((interp, name, getattr(interp, name)))
        setattr(interp, name, new[name])


def _restore() -> None:
    while _SAVED:
        setattr(*_SAVED.pop())


@contextlib.contextmanager
def patched_interpreter() -> Iterator[None]:
    """While the block runs, Triton's interpreter runs kernels with fusegen's patches; afterwards it is as it was.

    Triton's ``GridExecutor`` and its ``tl`` stand-ins look up the module globals ``interpreter_builder`` and
    ``interpreter_semantic`` at each call, so one subclass instance of ``InterpreterBuilder`` (never the class
    itself) takes over every builder method the patches change; ``tl.reduce`` builds ``ReduceOps`` by its global
    name, so that is a subclass too. ``_get_np_dtype`` is a module function that the builder and ``ReduceOps``
    call by name: no hook reaches it, so it is rebound itself. These four
    (:data:`PATCHED_NAMES`) are set when the outermost block starts and restored when it ends, also when the
    kernel raises. Re-entrant, and thread-safe for fusegen's own runs: one count under a lock, so the patches
    stay until the last of concurrent runs ends. The limit: the swap is process-wide while any fusegen run is
    in it, so a user's own kernel interpreted in another thread meanwhile runs patched (Triton's interpreter
    itself swaps ``triton.language`` process-wide for every kernel it runs).

    Raises:
        TritonInternalsError: when the outermost block starts (:func:`check_triton_internals`).
    """
    global _DEPTH
    with _LOCK:
        if _DEPTH == 0:
            try:
                _install()
            except BaseException:
                _restore()
                raise
        _DEPTH += 1
    try:
        yield
    finally:
        with _LOCK:
            _DEPTH -= 1
            if _DEPTH == 0:
                _restore()
