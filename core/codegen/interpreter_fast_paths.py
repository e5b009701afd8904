"""Fast paths of Triton's interpreter for what dominates a model's run: loads and stores into the run's host buffers
as one numpy gather / scatter (:func:`patch_memory`), integer ``//`` and ``%`` of non-negative operands
(:func:`patch_int_division`), pointer + offset (:func:`patch_addptr`). Each falls back to Triton's method for every
case it does not cover and keeps Triton's as ``__wrapped__`` (the tests compare the two). Each function returns
methods of fusegen's subclass of Triton's ``InterpreterBuilder``, which only fusegen's own runs interpret with
(:func:`fusegen.codegen.interpreter_patches.patched_interpreter`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
from typing import Any, Iterator, Sequence

import numpy as np


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
def patch_memory() -> dict[str, Any]:
    """``tl.load`` / ``tl.store`` into :func:`host_buffers` as one numpy gather / scatter: the builder methods
    (name -> function) that do it.

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
    return {"create_load": create_load, "create_store": create_store, "create_masked_load": create_masked_load,
            "create_masked_store": create_masked_store}


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
def patch_int_division() -> dict[str, Any]:
    """Integer ``//`` and ``%`` of non-negative operands as one numpy division: the builder methods (name ->
    function).

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
    return {"create_idiv": create_idiv, "create_srem": create_srem, "create_urem": create_urem}


@functools.cache  # once per process
def patch_addptr() -> dict[str, Any]:
    """Pointer + integer offset as one fused cast-multiply and one add: the builder method (name -> function).

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
    return {"create_addptr": create_addptr}


#: Splats kept for reuse, at most this many bytes together (:func:`patch_splat`).
SPLAT_CACHE_BYTES = 32 << 20
#: Smaller splats are made anew: np.full of them costs less than the look-up.
MIN_CACHED_SPLAT = 4096


@functools.cache  # once per process
def patch_splat() -> dict[str, Any]:
    """A scalar splat to a block of :data:`MIN_CACHED_SPLAT` elements or more as a shared read-only array: the
    builder method (name -> function).

    Triton 3.9's ``create_splat`` fills a new array (``np.full``) each time, and a kernel makes the same ones in
    every program and loop step (a GEMM tile's zero index blocks and all-true masks, an elementwise kernel's
    constants: about 4% of gpt12's interpreter time). Here the array ``np.full`` gives is kept, keyed by shape,
    dtype and the value's bytes (least recently used dropped past :data:`SPLAT_CACHE_BYTES`), and handed out
    again: the same values, C-contiguous as before; read-only, so a consumer writing into it would raise (none
    does: every builder method makes its result anew). Other splats keep Triton's method.
    """
    from collections import OrderedDict

    from triton.runtime import interpreter as interp

    original = interp.InterpreterBuilder.create_splat
    cache: OrderedDict[tuple, np.ndarray] = OrderedDict()
    held = [0]

    def create_splat(self: Any, ret_ty: Any, arg: Any) -> Any:
        shape = tuple(ret_ty.shape)
        n = 1
        for s in shape:
            n *= s
        if n < MIN_CACHED_SPLAT or arg.data.size != 1:
            return original(self, ret_ty, arg)
        dtype = interp._get_np_dtype(arg.dtype)
        key = (shape, dtype.str, arg.data.dtype.str, arg.data.tobytes())
        data = cache.get(key)
        if data is None:
            data = original(self, ret_ty, arg).data
            data.setflags(write=False)
            cache[key] = data
            held[0] += data.nbytes
            while held[0] > SPLAT_CACHE_BYTES and len(cache) > 1:
                held[0] -= cache.popitem(last=False)[1].nbytes
        else:
            cache.move_to_end(key)
        return interp.TensorHandle(data, arg.dtype.scalar)

    create_splat.__wrapped__ = original  # type: ignore[attr-defined]
    return {"create_splat": create_splat}
