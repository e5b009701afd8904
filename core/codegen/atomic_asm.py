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


#: normalised asm text -> the numpy function of its input arrays that the interpreter runs for it
INTERPRETED = types.MappingProxyType({
    **{" ".join(t.split()): _subword_store(b) for b, t in SUBWORD_STORE_ASM.items()},
    **{" ".join(word_cas_asm(op).split()): _word_cas(op) for op in WORD_CAS_OPS}})
