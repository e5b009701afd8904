"""Batched program ids: Triton's interpreter runs several programs of a launch as one (fusegen; no XLA counterpart).

Triton 3.9's interpreter runs a grid's programs one after another (``GridExecutor``), and what a program costs is
mostly per op, whatever its tile's size: Triton's semantic layer (type checks, broadcasting, tensor objects) takes
about 0.1-0.2 ms an op on the shared 2-core machine, numpy a few microseconds on a tile of 128 lanes. A
block-level fusion at XLA's tiles (``f32[16,4,144,17]``, tiles ``[1,4,16,2]``: 1296 programs of ~60 ops) spends
nearly all its time there. :func:`run_grid` runs the programs of a 1-D grid ``B`` at a time: every value of a
batch is one numpy array with a leading program axis (:class:`BatchedHandle`), so each op is paid once per batch.
The kernel, its constexprs and its grid are the ones given (the compiled program, not a wider variant).

A batch gives exactly what running its programs one after another gives, or it is undone and they run one after
another (each store is journalled with the bytes it overwrites). A batch is undone when

* control flow differs between its programs (an ``if``, a loop bound or an index that is not the same for all),
* one of its programs reads or writes bytes another of its programs writes (programs a GPU would race on; the
  sequential interpreter orders them, a batch would not),
* it reaches an op whose effect depends on the order of programs (atomics, XLA's atomic inline asm, prints,
  histograms, tensor descriptors), or anything else raises (the sequential rerun raises a real error for the
  program that has it).

The first program runs alone and measures the widest value a program holds; ``B`` is :data:`BATCH_LANES` over
that (at most :data:`MAX_BATCH`); below :data:`MIN_BATCH` programs whose tiles are already wide (numpy's work
outweighs the per-op cost there) run one at a time as before. Batching
stops for the rest of a launch after an order-dependent op, a conflict, an unexpected error or two divergences.
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import inspect
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from fusegen.codegen import atomic_asm
from fusegen.codegen.interpreter_fast_ops import tensor_methods

__all__ = ["BATCH_LANES", "MAX_BATCH", "MIN_BATCH", "run_grid", "batching", "batched_handle_class", "like"]

#: Elements a batch's widest value may hold (programs per batch x the widest value of one program): above it
#: numpy's per-element work outweighs the per-op overhead a batch saves.
BATCH_LANES = 1 << 16

#: Programs per batch at most (bounds the journal and the conflict check).
MAX_BATCH = 256
#: Fewer programs than this a batch (programs wider than BATCH_LANES / MIN_BATCH): one at a time.
MIN_BATCH = 8

#: Builder methods whose effect depends on the order of programs (or that print per program): never batched.
_ORDERED = frozenset({
    "create_atomic_cas", "create_atomic_rmw", "create_atomic_load", "create_atomic_store", "create_atomic_poll",
    "create_histogram", "create_print", "create_dot_scaled", "create_extern_elementwise",
    "create_make_tensor_descriptor", "create_descriptor_load", "create_descriptor_store",
    "create_descriptor_gather", "create_descriptor_scatter"})


class _Undo(Exception):
    """Ends a batch: its stores are undone and its programs run one after another. ``persistent``: batching stops
    for the rest of the launch."""

    def __init__(self, reason: str, persistent: bool = True):
        super().__init__(reason)
        self.persistent = persistent


class _Batch:
    """The programs ``positions`` running as one: their journal of stores and memory accesses."""

    def __init__(self, positions: np.ndarray):
        self.positions = positions
        self.n = len(positions)
        self.stores: list[tuple[Any, Any, Any]] = []  # (pointers, mask or None, old values): handles, in order
        self.accesses: list[tuple[np.ndarray, np.ndarray | None, int, bool]] = []  # (addresses, mask, bytes, store)

    def record(self, ptrs: np.ndarray, mask: np.ndarray | None, nbytes: int, store: bool) -> None:
        self.accesses.append((ptrs, mask, nbytes, store))

    def _lanes(self, accesses: list, grain: int) -> tuple[np.ndarray, np.ndarray]:
        """(byte address in units of ``grain``, program) of every active lane of ``accesses``."""
        addrs, progs = [], []
        prog = np.arange(self.n)
        for p, m, nbytes, _ in accesses:
            a = p.reshape(self.n, -1)
            pr = np.broadcast_to(prog[:, None], a.shape)
            if m is not None:
                mm = m.reshape(self.n, -1)
                a, pr = a[mm], pr[mm]
            a, pr = a.reshape(-1), pr.reshape(-1)
            if nbytes > grain:
                a = (a[:, None] + np.arange(0, nbytes, grain, dtype=np.uint64)).reshape(-1)
                pr = np.repeat(pr, nbytes // grain)
            addrs.append(a)
            progs.append(pr)
        if not addrs:
            return np.zeros(0, np.uint64), np.zeros(0, np.int64)
        return np.concatenate(addrs), np.concatenate(progs)

    @staticmethod
    def _span(p: np.ndarray, m: np.ndarray | None, nbytes: int) -> tuple[int, int] | None:
        """[first byte, last byte + 1) of an access's active lanes; None when none is active."""
        a = p if m is None else p[np.broadcast_to(m, p.shape)]
        return (int(a.min()), int(a.max()) + nbytes) if a.size else None

    def check(self) -> None:
        """Raise :class:`_Undo` if a program of the batch touches bytes another program of it stores."""
        stores = [x for x in self.accesses if x[3]]
        if self.n < 2 or not stores:
            return
        spans = [s for s in (self._span(p, m, nb) for p, m, nb, _ in stores) if s is not None]
        if not spans:
            return
        lo, hi = min(s[0] for s in spans), max(s[1] for s in spans)
        loads = []  # those that can reach the stored bytes: most read operands no program writes
        for x in self.accesses:
            if not x[3]:
                sp = self._span(x[0], x[1], x[2])
                if sp is not None and sp[0] < hi and lo < sp[1]:
                    loads.append(x)
        grain = min(nbytes for _, _, nbytes, _ in stores + loads)
        if any(int(np.bitwise_or.reduce(p, axis=None)) % grain for p, _, _, _ in stores + loads if p.size):
            grain = 1  # an address off the smallest access's grain: compare byte by byte
        sa, sp = self._lanes(stores, grain)
        order = np.argsort(sa, kind="stable")
        sa, sp = sa[order], sp[order]
        if bool(((sa[1:] == sa[:-1]) & (sp[1:] != sp[:-1])).any()):
            raise _Undo("two programs of a batch store to the same bytes")
        la, lp = self._lanes(loads, grain)
        if la.size and sa.size:
            pos = np.minimum(np.searchsorted(sa, la), sa.size - 1)
            if bool(((sa[pos] == la) & (sp[pos] != lp)).any()):
                raise _Undo("a program of a batch reads bytes another stores")

    def undo(self, builder: Any) -> None:
        """Write back what every store of the batch overwrote, last store first (``builder`` unbatched)."""
        for ptrs, mask, old in reversed(self.stores):
            if mask is None:
                builder.create_store(ptrs, old, None)
            else:
                builder.create_masked_store(ptrs, old, mask, None)


#: The batch in progress (None outside :func:`_run_batch`).
_BATCH: contextvars.ContextVar[_Batch | None] = contextvars.ContextVar("fusegen_interpreter_batch", default=None)
#: Whether :func:`run_grid` batches by default (:func:`batching`).
_ENABLED: contextvars.ContextVar[bool] = contextvars.ContextVar("fusegen_interpreter_batching", default=True)


@contextlib.contextmanager
def batching(enabled: bool) -> Iterator[None]:
    """While the block runs, :func:`run_grid` batches programs (``True``, the default) or runs them one after
    another as Triton does (``False``: the reference a batched run is compared with)."""
    token = _ENABLED.set(bool(enabled))
    try:
        yield
    finally:
        _ENABLED.reset(token)


@functools.cache
def batched_handle_class() -> type:
    """``TensorHandle`` of a batch: its ``data`` has a leading axis, one entry per program of the batch."""
    from triton.runtime.interpreter import TensorHandle

    return type("BatchedHandle", (TensorHandle,), {"__module__": __name__, "__doc__": batched_handle_class.__doc__})


def like(handle: Any, inputs: Sequence[Any]) -> Any:
    """``handle`` marked as batched when one of ``inputs`` (handles) is: for values computed outside the builder
    from their inputs' data, elementwise (the interpreter's ``libdevice`` stand-in)."""
    bh = batched_handle_class()
    if any(type(h) is bh for h in inputs):
        handle.__class__ = bh
    return handle


def _any_batched(args: Sequence[Any], kwargs: dict[str, Any]) -> bool:
    bh = batched_handle_class()
    for a in (*args, *kwargs.values()):
        if type(a) is bh or (type(a) in (list, tuple) and any(type(x) is bh for x in a)):
            return True
    return False


def _mark(out: Any) -> Any:
    """Mark what a builder method returned for a batch as batched."""
    from triton.runtime import interpreter as interp

    if isinstance(out, interp.TensorHandle):
        out.__class__ = batched_handle_class()
    elif isinstance(out, (list, tuple)):
        for o in out:
            _mark(o)
    elif hasattr(out, "results") and hasattr(out, "get_result"):  # inline asm's results
        _mark(out.results)
    return out


def _lift(h: Any, shape: tuple[int, ...]) -> Any:
    """``h`` (a handle, batched or not) as a batched handle of data shape ``shape``, C-contiguous."""
    bh = batched_handle_class()
    if type(h) is bh and h.data.shape == shape:
        return h
    out = bh(np.ascontiguousarray(np.broadcast_to(h.data, shape)), h.dtype)
    out.attr = h.attr
    return out


def _batched_shape(n: int, handles: Sequence[Any]) -> tuple[int, ...]:
    bh = batched_handle_class()
    for h in handles:
        if type(h) is bh:
            return h.data.shape
    first = next(h for h in handles if h is not None)
    return (n,) + first.data.shape


def _element_bytes(ptrs: Any) -> int:
    return max(1, ptrs.get_element_ty().primitive_bitwidth // 8)


# --------------------------------------------------------------------------------------------------
# the builder of a batch: every method takes and gives batched handles
# --------------------------------------------------------------------------------------------------
def _elementwise(fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _BATCH.get() is None or not _any_batched(args, kwargs):
            return fn(self, *args, **kwargs)
        return _mark(fn(self, *args, **kwargs))  # numpy broadcasts an unbatched operand over the program axis
    return method


def _ordered(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    def method(self: Any, *args: Any, **kwargs: Any) -> Any:
        if _BATCH.get() is not None:
            raise _Undo(f"{name} depends on the order of programs")
        return fn(self, *args, **kwargs)
    return method


def _special(base: type) -> dict[str, Callable[..., Any]]:
    """The methods whose batched form differs from Triton's on the same data (shapes, axes, memory)."""
    from triton.runtime import interpreter as interp

    bh = batched_handle_class()

    def unbatched(name: str) -> Callable[..., Any]:
        return getattr(base, name)

    def create_get_program_id(self: Any, axis: Any) -> Any:
        b = _BATCH.get()
        if b is None:
            return unbatched("create_get_program_id")(self, axis)
        saved, ids = self.grid_idx, []
        try:
            for x in b.positions:  # each program's id as the builder (and any mapping of ids) gives it
                self.grid_idx = (int(x), *saved[1:])
                ids.append(unbatched("create_get_program_id")(self, axis).data.reshape(1))
        finally:
            self.grid_idx = saved
        return bh(np.stack(ids), interp.tl.int32)

    def create_splat(self: Any, ret_ty: Any, arg: Any) -> Any:
        if type(arg) is not bh:
            return unbatched("create_splat")(self, ret_ty, arg)
        shape, n = tuple(ret_ty.shape), arg.data.shape[0]
        first = arg.data.reshape(n, -1)[:, :1].reshape((n,) + (1,) * len(shape))  # each program's value
        return bh(np.broadcast_to(first, (n,) + shape).astype(interp._get_np_dtype(arg.dtype)), arg.dtype.scalar)

    def create_unsplat(self: Any, arg: Any) -> Any:
        if type(arg) is not bh:
            return unbatched("create_unsplat")(self, arg)
        n = arg.data.shape[0]
        return bh(arg.data.reshape(n, -1)[:, :1].astype(interp._get_np_dtype(arg.dtype)), arg.dtype.scalar)

    def create_reshape(self: Any, arg: Any, shape: Any, allow_reorder: Any) -> Any:
        if type(arg) is not bh:
            return unbatched("create_reshape")(self, arg, shape, allow_reorder)
        return bh(arg.data.reshape((arg.data.shape[0], *shape)), arg.dtype.scalar)

    def create_trans(self: Any, arg: Any, perm: Any) -> Any:
        if type(arg) is not bh:
            return unbatched("create_trans")(self, arg, perm)
        return bh(np.transpose(arg.data, (0, *(int(p) + 1 for p in perm))), arg.dtype.scalar)

    def create_expand_dims(self: Any, arg: Any, axis: Any) -> Any:
        if type(arg) is not bh:
            return unbatched("create_expand_dims")(self, arg, axis)
        return bh(np.expand_dims(arg.data, axis + 1 if axis >= 0 else axis), arg.dtype.scalar)

    def create_broadcast(self: Any, arg: Any, shape: Any) -> Any:
        if type(arg) is not bh:
            return unbatched("create_broadcast")(self, arg, shape)
        return bh(np.broadcast_to(arg.data, (arg.data.shape[0], *shape)), arg.dtype.scalar)

    def two(lhs: Any, rhs: Any) -> tuple[np.ndarray, np.ndarray]:
        n = _BATCH.get().n  # type: ignore[union-attr]
        return tuple(h.data if type(h) is bh else np.broadcast_to(h.data, (n, *h.data.shape)) for h in (lhs, rhs))

    def create_cat(self: Any, lhs: Any, rhs: Any) -> Any:
        if not _any_batched((lhs, rhs), {}):
            return unbatched("create_cat")(self, lhs, rhs)
        return bh(np.concatenate(two(lhs, rhs), axis=1), lhs.dtype.scalar)

    def create_join(self: Any, lhs: Any, rhs: Any) -> Any:
        if not _any_batched((lhs, rhs), {}):
            return unbatched("create_join")(self, lhs, rhs)
        return bh(np.stack(two(lhs, rhs), axis=-1), lhs.dtype.scalar)

    def create_gather(self: Any, src: Any, indices: Any, axis: Any) -> Any:
        if not _any_batched((src, indices), {}):
            return unbatched("create_gather")(self, src, indices, axis)
        s, i = two(src, indices)
        return bh(np.take_along_axis(s, i, axis=axis + 1 if axis >= 0 else axis), src.dtype.scalar)

    # memory: every access of a batch is journalled per program (unbatched operands lifted to the batch)
    def create_masked_load(self: Any, ptrs: Any, mask: Any, other: Any, cache_policy: Any, is_volatile: Any) -> Any:
        b = _BATCH.get()
        if b is None:
            return unbatched("create_masked_load")(self, ptrs, mask, other, cache_policy, is_volatile)
        shape = _batched_shape(b.n, (ptrs, mask, other))
        p = _lift(ptrs, shape)
        m, o = (None if h is None else _lift(h, shape) for h in (mask, other))
        b.record(p.data, None if m is None else m.data, _element_bytes(p), store=False)
        return _mark(unbatched("create_masked_load")(self, p, m, o, cache_policy, is_volatile))

    def create_load(self: Any, ptr: Any, cache_policy: Any, is_volatile: Any) -> Any:
        b = _BATCH.get()
        if b is None:
            return unbatched("create_load")(self, ptr, cache_policy, is_volatile)
        p = _lift(ptr, _batched_shape(b.n, (ptr,)))
        b.record(p.data, None, _element_bytes(p), store=False)
        return _mark(unbatched("create_load")(self, p, cache_policy, is_volatile))

    def create_masked_store(self: Any, ptrs: Any, value: Any, mask: Any, cache_policy: Any) -> Any:
        b = _BATCH.get()
        if b is None:
            return unbatched("create_masked_store")(self, ptrs, value, mask, cache_policy)
        shape = _batched_shape(b.n, (ptrs, value, mask))
        p, v = _lift(ptrs, shape), _lift(value, shape)
        m = None if mask is None else _lift(mask, shape)
        old = unbatched("create_masked_load")(self, p, m, None, None, False) if m is not None \
            else unbatched("create_load")(self, p, None, False)
        b.stores.append((p, m, old))
        b.record(p.data, None if m is None else m.data, _element_bytes(p), store=True)
        return unbatched("create_masked_store")(self, p, v, m, cache_policy)

    def create_store(self: Any, ptr: Any, val: Any, cache_policy: Any) -> Any:
        b = _BATCH.get()
        if b is None:
            return unbatched("create_store")(self, ptr, val, cache_policy)
        shape = _batched_shape(b.n, (ptr, val))
        p, v = _lift(ptr, shape), _lift(val, shape)
        b.stores.append((p, None, unbatched("create_load")(self, p, None, False)))
        b.record(p.data, None, _element_bytes(p), store=True)
        return unbatched("create_store")(self, p, v, cache_policy)

    def create_inline_asm(self: Any, asm: Any, constraints: Any, values: Any, types: Any, is_pure: Any,
                          pack: Any) -> Any:
        if _BATCH.get() is not None and " ".join(str(asm).split()) in atomic_asm.INTERPRETED:
            raise _Undo("atomic inline asm depends on the order of programs")
        return _elementwise(unbatched("create_inline_asm"))(self, asm, constraints, values, types, is_pure, pack)

    return {f.__name__: f for f in (create_get_program_id, create_splat, create_unsplat, create_reshape, create_trans,
                                    create_expand_dims, create_broadcast, create_cat, create_join, create_gather,
                                    create_masked_load, create_load, create_masked_store, create_store,
                                    create_inline_asm)}


_OPS = ("cast_impl", "binary_op", "unary_op", "ternary_op")


@functools.cache
def _batched_builder_class(base: type) -> type:
    """``base`` (the builder class of the run) with every method batch-aware (see the module docstring)."""
    special = _special(base)
    ns: dict[str, Any] = {"__module__": __name__}
    for name, fn in inspect.getmembers(base, inspect.isfunction):
        if name in special or not (name.startswith("create_") or name in _OPS):
            continue
        ns[name] = _ordered(name, fn) if name in _ORDERED else _elementwise(fn)
    ns.update(special)
    return type(base.__name__ + "Batched", (base,), ns)


@functools.cache
def _measuring_builder_class(base: type) -> type:
    """``base`` noting the widest value it makes (in the builder's ``fusegen_widest``, set and removed by
    :func:`_run_programs` around the first program of a launch)."""
    from triton.runtime import interpreter as interp

    def measuring(fn: Callable[..., Any]) -> Callable[..., Any]:
        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            out = fn(self, *args, **kwargs)
            if isinstance(out, interp.TensorHandle) and out.data.size > self.fusegen_widest:
                self.fusegen_widest = out.data.size
            return out
        return method

    ns = {name: measuring(fn) for name, fn in inspect.getmembers(base, inspect.isfunction)
          if name.startswith("create_") or name in _OPS}
    return type(base.__name__ + "Measuring", (base,), {"__module__": __name__, **ns})



# --------------------------------------------------------------------------------------------------
# reductions, scans and tensor methods of a batch
# --------------------------------------------------------------------------------------------------
def _batched_tensors(inputs: tuple[Any, ...], n: int, axis: Any) -> tuple[tuple[Any, ...], int, int]:
    """``inputs`` as plain tensors whose first dimension is the program axis, and the axis to reduce / scan."""
    from triton.runtime import interpreter as interp

    tl, bh = interp.tl, batched_handle_class()
    rank = len(inputs[0].type.shape) if inputs[0].type.is_block() else 0
    out = []
    for t in inputs:
        d = t.handle.data if type(t.handle) is bh else np.broadcast_to(t.handle.data, (n, *t.handle.data.shape))
        if axis is None:
            d = d.reshape(n, -1)
        d = np.ascontiguousarray(d)
        out.append(tl.tensor(interp.TensorHandle(d, t.handle.dtype), tl.block_type(t.dtype, list(d.shape))))
    ax = 1 if axis is None else axis + 1 if axis >= 0 else axis
    return tuple(out), ax, rank


def _unbatched_results(res: Sequence[Any], n: int, shape: tuple[int, ...] | None) -> tuple[Any, ...]:
    """Results over the program axis as batched tensors of the per-program type (``shape``: every result's data
    per program, for a kept-dimension reduction of all axes)."""
    from triton.runtime import interpreter as interp

    tl, bh = interp.tl, batched_handle_class()
    out = []
    for r in res:
        d = r.handle.data.reshape((n, *shape)) if shape is not None else r.handle.data
        if d.ndim == 1:  # one scalar a program
            out.append(tl.tensor(bh(d.reshape(n, 1), r.handle.dtype), r.dtype))
        else:
            out.append(tl.tensor(bh(d, r.handle.dtype), tl.block_type(r.dtype, list(d.shape[1:]))))
    return tuple(out)


@functools.cache
def _batched_ops_class(base: type, scan: bool) -> type:
    """``base`` (the interpreter's ``ReduceOps``, or ``ScanOps`` with ``scan``) folding a batch's tensors along the
    same axis of each program: the program axis leads, so the fold runs one axis further in."""
    def apply(self: Any, input: Any) -> Any:
        if not isinstance(input, tuple):
            return self.apply((input,))[0]
        b = _BATCH.get()
        if b is None or not any(type(t.handle) is batched_handle_class() for t in input):
            return base.apply(self, input)
        tensors, ax, rank = _batched_tensors(input, b.n, self.axis)
        res = base(ax, self.combine_fn, self.reverse if scan else self.keep_dims).apply(tensors)
        keep_all = (1,) * rank if not scan and self.axis is None and self.keep_dims else None
        return _unbatched_results(res, b.n, keep_all)

    return type("Batched" + base.__name__, (base,), {"__module__": __name__, "apply": apply})


def _tensor_methods() -> dict[str, Any]:
    """``tl.tensor``'s ``__bool__``, ``__index__`` and ``T`` as the interpreter defines them, and for a batch the
    same per program when all its programs agree (else the batch is undone)."""
    from triton.runtime import interpreter as interp

    tl, bh = interp.tl, batched_handle_class()

    def per_program(self: Any) -> np.ndarray | None:
        d = self.handle.data
        return d.reshape(d.shape[0], -1) if type(self.handle) is bh else None

    def __bool__(self: Any) -> bool:
        v = per_program(self)
        if v is None:
            d = self.handle.data
            return bool(d) if d.size == 1 else True
        if v.shape[1] != 1:
            return True
        t = v[:, 0].astype(bool)
        if t.all():
            return True
        if not t.any():
            return False
        raise _Undo("a branch differs between the programs of a batch", persistent=False)

    def __index__(self: Any) -> int:
        v = per_program(self)
        if v is None:
            return int(self.handle.data.squeeze())
        if v.shape[1] != 1 or not bool((v == v[0]).all()):
            raise _Undo("an index differs between the programs of a batch", persistent=False)
        return int(v[0, 0])

    def transposed(self: Any) -> Any:
        batched = type(self.handle) is bh
        data = np.swapaxes(self.handle.data, -1, -2) if batched else np.transpose(self.handle.data)
        block_shape = list(self.type.shape)
        block_shape[-1], block_shape[-2] = block_shape[-2], block_shape[-1]
        return tl.core.tensor((bh if batched else interp.TensorHandle)(data, self.handle.dtype),
                              tl.core.block_type(self.dtype, block_shape))

    return {"__bool__": __bool__, "__index__": __index__, "T": property(transposed)}


# --------------------------------------------------------------------------------------------------
# running a grid
# --------------------------------------------------------------------------------------------------
def _run_batch(fn: Callable[..., Any], args: dict[str, Any], builder: Any, x0: int, x1: int) -> None:
    """Programs ``x0 .. x1 - 1`` as one batch; on :class:`_Undo` (raised again) their stores are undone."""
    from triton.runtime import interpreter as interp

    batch = _Batch(np.arange(x0, x1))
    cls, saved = type(builder), (interp.ReduceOps, interp.ScanOps)
    builder.__class__ = _batched_builder_class(cls)
    interp.ReduceOps, interp.ScanOps = _batched_ops_class(saved[0], False), _batched_ops_class(saved[1], True)
    token = _BATCH.set(batch)
    failure: _Undo | None = None
    try:
        builder.set_grid_idx(x0, 0, 0)
        fn(**args)
        batch.check()
    except _Undo as e:
        failure = e
    except Exception as e:  # noqa: BLE001 - rerun one by one: a real error is raised there for its program
        failure = _Undo(f"{type(e).__name__}: {e}")
    finally:
        _BATCH.reset(token)
        builder.__class__ = cls
        interp.ReduceOps, interp.ScanOps = saved
    if failure is not None:
        batch.undo(builder)
        raise failure


def _run_programs(fn: Callable[..., Any], args: dict[str, Any], grid: tuple[int, int, int], batch: bool) -> int:
    """Run every program of ``grid``; returns how many ran in batches."""
    from triton.runtime import interpreter as interp

    b = interp.interpreter_builder
    nx, ny, nz = grid
    if not batch or ny * nz != 1 or nx < 3:
        for x in range(nx):
            for y in range(ny):
                for z in range(nz):
                    b.set_grid_idx(x, y, z)
                    fn(**args)
        return 0
    cls = type(b)
    b.__class__, b.fusegen_widest = _measuring_builder_class(cls), 1
    try:
        b.set_grid_idx(0, 0, 0)
        fn(**args)
        widest = b.fusegen_widest
    finally:
        b.__class__ = cls
        del b.fusegen_widest
    size, x, undone, batched = min(MAX_BATCH, BATCH_LANES // widest), 1, 0, 0
    if size < MIN_BATCH:  # programs this wide are numpy's work already: batching them saves little
        size = 1
    while x < nx:
        # a power of two at most: a batch's values are Triton blocks over (programs, ...) inside a reduction
        end = nx if size < 2 else x + (1 << (min(size, nx - x).bit_length() - 1))
        if size < 2 or end - x < 2:
            for i in range(x, end):
                b.set_grid_idx(i, 0, 0)
                fn(**args)
        else:
            try:
                _run_batch(fn, args, b, x, end)
                batched += end - x
            except _Undo as e:
                undone += 1
                if e.persistent or undone >= 2:
                    size = 1
                for i in range(x, end):
                    b.set_grid_idx(i, 0, 0)
                    fn(**args)
        x = end
    return batched


@functools.cache
def _grid_executor_class() -> type:
    from triton.runtime import interpreter as interp

    class GridExecutor(interp.GridExecutor):
        """Triton's ``GridExecutor`` whose grid loop is :func:`_run_programs` (the rest is Triton's ``__call__``)."""

        batch = True
        batched = 0  # programs the last call ran in batches

        def __call__(self, *args_dev: Any, **kwargs: Any) -> None:
            import triton

            argspec = inspect.getfullargspec(self.fn)
            kwargs = {k: v for k, v in kwargs.items() if k in argspec.args or k in argspec.kwonlyargs}
            args_hst, kwargs_hst = self._init_args_hst(args_dev, kwargs)
            for hook in self.pre_run_hooks:
                hook(*args_hst, **kwargs_hst)
            patch_scope = interp._patch_lang(self.fn)
            try:
                tensor = interp.tl.tensor
                fast = tensor_methods(lambda name: getattr(tensor, name))  # over Triton's, just installed
                for name, value in {**fast, **_tensor_methods()}.items():
                    patch_scope.set_attr(tensor, name, value)
                args = inspect.getcallargs(self.fn, *args_hst, **kwargs_hst)
                args = {name: arg if name in self.constexprs else interp._implicit_cvt(arg)
                        for name, arg in args.items()}
                grid = self.grid(args) if callable(self.grid) else self.grid
                assert len(grid) <= 3, "grid must have at most 3 dimensions"
                grid = tuple(grid) + (1,) * (3 - len(grid))
                interp.interpreter_builder.set_grid_dim(*grid)
                try:
                    self.batched = _run_programs(self.fn, args, grid, self.batch)
                except Exception as e:
                    if triton.knobs.compilation.front_end_debugging:
                        raise
                    raise interp.InterpreterError(repr(e)) from e
            finally:
                patch_scope.restore()
            self._restore_args_dev(args_dev, args_hst, kwargs, kwargs_hst)

    return GridExecutor


def run_grid(fn: Callable[..., Any], grid: Sequence[int], args: Sequence[Any], kwargs: dict[str, Any],
             batch: bool | None = None) -> int:
    """Run the ``@triton.jit`` function ``fn`` (its Python function) over ``grid`` in Triton's interpreter, as
    ``InterpretedFunction(fn)[grid](*args, **kwargs)`` does, with the programs of a 1-D grid run in batches
    (``batch=False``: one after another, as Triton does; ``None``: as :func:`batching` says, by default batched).
    Call it inside fusegen's interpreter scope (:func:`fusegen.codegen.interpreter_patches.patched_interpreter`).
    Returns how many programs ran in batches (the others ran one at a time).

    Raises:
        triton.runtime.errors.InterpreterError: a program failed (raised by the one-by-one run of its batch).
    """
    from triton.runtime import interpreter as interp

    ifn = interp.InterpretedFunction(fn)
    ex = _grid_executor_class()(ifn.rewrite(), ifn.arg_names, tuple(grid), ifn.pre_run_hooks)
    ex.batch = _ENABLED.get() if batch is None else batch
    ex(*args, **kwargs)
    return ex.batched
