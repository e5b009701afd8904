"""XLA:GPU's scatter atomics that Triton has no operation for, as inline PTX, and what Triton's interpreter runs for
each (:data:`INTERPRETED`, installed by :func:`fusegen.codegen.interpreter_patches.patch_inline_asm`).

XLA emits a sub-word atomic store, and a combine without a native atomic, as a relaxed compare-and-swap loop per
thread (``EmitAtomicOperationUsingCAS``; its PTX for new_scatter's bf16 overwrite and z_scatter_mul_f32's
multiply). A Triton loop is uniform over its program, so the per-thread loop is written here as PTX.
"""

from __future__ import annotations

import types

import numpy as np


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
SUBWORD_STORE_ASM = types.MappingProxyType({b: _subword_store_asm(b) for b in (8, 16)})


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
WORD_CAS_OPS = types.MappingProxyType({
    "mul.rn.f32": (np.float32, np.multiply), "mul.rn.f64": (np.float64, np.multiply),
    "sub.rn.f32": (np.float32, np.subtract), "sub.rn.f64": (np.float64, np.subtract),
    "mul.lo.s32": (np.int32, np.multiply), "mul.lo.s64": (np.int64, np.multiply),
    "sub.s32": (np.int32, np.subtract), "sub.s64": (np.int64, np.subtract),
})


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


def _rounds(ptrs: np.ndarray) -> list[np.ndarray]:
    """Lane indices of each round: the k-th lane on an address runs in round k (lane order within an address),
    so no round has two lanes on one address."""
    order = np.argsort(ptrs, kind="stable")
    first = np.r_[True, ptrs[order][1:] != ptrs[order][:-1]]
    starts = np.maximum.accumulate(np.where(first, np.arange(order.size), 0))
    rank = np.empty(order.size, dtype=np.int64)
    rank[order] = np.arange(order.size) - starts
    return [np.flatnonzero(rank == k) for k in range(int(rank.max()) + 1)]


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
            for lanes in _rounds(ptrs):
                p = np.ascontiguousarray(ptrs[lanes])
                on = np.ones(p.shape, dtype=bool)
                cur = _interpreter.load(p, on, np.zeros(p.shape, dtype=dtype), np.dtype(dtype))
                with np.errstate(all="ignore"):
                    new = fn(cur, upd[lanes]).astype(dtype, copy=False)
                _interpreter.store(p, np.ascontiguousarray(new), on)
        return np.zeros(np.shape(vals[0]), dtype=np.int32)

    return run


def _pos_zero_first(a: np.ndarray, b: np.ndarray, want_max: bool) -> np.ndarray:
    """IEEE 754-2019 maximum / minimum of float arrays: NaN if either is NaN, and -0.0 below +0.0."""
    with np.errstate(invalid="ignore"):
        pick_a = (a > b) if want_max else (a < b)
        tie = (a == b) & (np.signbit(b) if want_max else ~np.signbit(b))
    return np.where(pick_a | tie, a, b)


def _half_op(op: str):
    """``(storage dtype, numpy function on storage bits)`` of a 16-bit PTX combine of :data:`SUBWORD_CAS_OPS`."""
    import ml_dtypes

    name, _, t = op.rpartition(".")
    want_max = name.startswith("max")
    if t in ("bf16", "f16"):
        ft = ml_dtypes.bfloat16 if t == "bf16" else np.float16

        def fn(cur: np.ndarray, upd: np.ndarray) -> np.ndarray:
            a, b = cur.view(ft).astype(np.float32), upd.view(ft).astype(np.float32)
            r = _pos_zero_first(a, b, want_max).astype(ft).view(np.uint16)
            return np.where(np.isnan(a) | np.isnan(b), np.uint16(0x7FFF), r)  # PTX's canonical NaN
        return np.uint16, fn
    it = np.int16 if t == "s16" else np.uint16
    return np.uint16, lambda cur, upd: (np.maximum if want_max else np.minimum)(cur.view(it), upd.view(it)).view(np.uint16)


#: 16-bit PTX combines :func:`subword_cas_asm` loops over (XLA's sub-word compare-and-swap loops for a scatter's
#: maximum / minimum: ``max.NaN.bf16`` between the swaps in XLA's PTX for a bf16 max scatter).
SUBWORD_CAS_OPS = ("max.NaN.bf16", "min.NaN.bf16", "max.NaN.f16", "min.NaN.f16",
                   "max.s16", "min.s16", "max.u16", "min.u16")


def subword_cas_asm(op: str) -> str:
    """``*$1 = *$1 OP $2`` where ``$3 != 0`` for a 16-bit element combined by one PTX instruction ``OP`` of
    :data:`SUBWORD_CAS_OPS`, as XLA:GPU applies such a scatter combiner: a relaxed 32-bit compare-and-swap loop per
    thread on the aligned word holding the element (``EmitAtomicOperationUsingCAS``), the combine done on the
    element's 16 bits between the swaps. Constraints ``"=r,l,r,r"`` (dummy, element address as int64, the update's
    16 bits zero-extended in an int32, predicate); ``is_pure=False``."""
    return ("{ .reg .pred %fgp, %fgr; .reg .b32 %fgsh, %fgm, %fgw, %fgold, %fgnew, %fgres; "
            ".reg .b16 %fgh, %fgu, %fgo; .reg .b64 %fglo, %fgwa; "
            "setp.ne.b32 %fgp, $3, 0; @!%fgp bra FG_DONE; "
            "and.b64 %fglo, $1, 2; sub.s64 %fgwa, $1, %fglo; cvta.to.global.u64 %fgwa, %fgwa; "
            "cvt.u32.u64 %fgsh, %fglo; shl.b32 %fgsh, %fgsh, 3; "
            "mov.b32 %fgm, 65535; shl.b32 %fgm, %fgm, %fgsh; not.b32 %fgm, %fgm; cvt.u16.u32 %fgu, $2; "
            "ld.global.b32 %fgold, [%fgwa]; "
            "FG_LOOP: shr.u32 %fgw, %fgold, %fgsh; cvt.u16.u32 %fgh, %fgw; "
            f"{op} %fgo, %fgh, %fgu; "
            "cvt.u32.u16 %fgw, %fgo; shl.b32 %fgw, %fgw, %fgsh; and.b32 %fgnew, %fgold, %fgm; or.b32 %fgnew, %fgnew, %fgw; "
            "atom.relaxed.gpu.global.cas.b32 %fgres, [%fgwa], %fgold, %fgnew; "
            "setp.ne.b32 %fgr, %fgres, %fgold; mov.b32 %fgold, %fgres; @%fgr bra FG_LOOP; "
            "FG_DONE: mov.b32 $0, 0; }")


def _subword_cas(op: str):
    """The interpreter's :func:`subword_cas_asm`: the selected lanes' updates on their 16-bit elements, the k-th lane
    on an address in round k (lane order), as :func:`_word_cas` (one program at a time: no swap ever retries)."""
    storage, fn = _half_op(op)

    def run(vals: list) -> np.ndarray:
        from triton._C.libtriton import interpreter as _interpreter

        addr, value, pred = (np.ravel(np.asarray(v)) for v in vals)
        sel = np.flatnonzero(pred != 0)
        if sel.size:
            ptrs = addr[sel].astype(np.uint64)
            upd = (value[sel].astype(np.int64) & 0xFFFF).astype(storage)
            for lanes in _rounds(ptrs):
                p = np.ascontiguousarray(ptrs[lanes])
                on = np.ones(p.shape, dtype=bool)
                cur = _interpreter.load(p, on, np.zeros(p.shape, dtype=storage), np.dtype(storage))
                _interpreter.store(p, np.ascontiguousarray(fn(np.asarray(cur, dtype=storage), upd[lanes])), on)
        return np.zeros(np.shape(vals[0]), dtype=np.int32)

    return run


#: normalised asm text -> the numpy function of its input arrays that the interpreter runs for it
INTERPRETED = types.MappingProxyType({
    **{" ".join(t.split()): _subword_store(b) for b, t in SUBWORD_STORE_ASM.items()},
    **{" ".join(word_cas_asm(op).split()): _word_cas(op) for op in WORD_CAS_OPS},
    **{" ".join(subword_cas_asm(op).split()): _subword_cas(op) for op in SUBWORD_CAS_OPS}})
