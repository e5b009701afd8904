"""The scatter emitter: ``ScatterWithDistributedUpdates`` and ``ScatterWithDistributedIndices`` as Triton kernels.

Mirrors ``CreateScatterFusion`` and the two emitters of ``xla/backends/gpu/codegen/emitters/scatter.cc``:

* selection (``scatter.cc:944-1003``): indices hinted sorted, *not* hinted unique and more update slices than
  ``kNumWarpsPerBlock (4) * core_count`` -> ``ScatterWithDistributedIndices``; everything else
  ``ScatterWithDistributedUpdates``.
* the output aliases the scatter operand (``EmittedFusion.output_aliases``: the output buffer starts as a copy of
  it); an operand that is not a plain fusion parameter is first written by an init kernel.
* a slice (update window) is applied only if the *whole* window lies inside the operand; otherwise the
  window is skipped (HLO scatter semantics, ``HloEvaluator::HandleScatter``).

How the combiner (``to_apply``) is applied:

* ``atomic``: a plain binary op of its two parameters with a native atomic for the element type:
  ``tl.atomic_add`` (f32, f64, f16, bf16, s32/u32/s64/u64; f32 add is the hardware float atomic add, never a
  compare-and-swap loop: bug B07; c64/c128: one f32/f64 atomic add per (re, im) part, complex buffers
  holding interleaved parts), ``tl.atomic_max``/``atomic_min`` (32/64-bit integers; f32, f64 with NaN
  propagated: a first kernel gives NaNs already in the targeted elements the sign the atomics keep), ``tl.atomic_and``/``or``/``xor`` (32/64-bit integers).
* ``store``: an overwrite combiner (returns its update parameters) with ``unique_indices=true``, or of a 32/64-bit
  type whatever the indices: a plain store (XLA's atomic store of a whole word; which of two updates of one element
  wins is unspecified on a GPU).
* ``cas``: any other single-operand combiner of an 8/16/32/64-bit type (multiply, f16/bf16 max, pred or,
  sub-word overwrite with possibly repeated indices...): XLA's compare-and-swap loop
  (``EmitAtomicOperationUsingCAS``), one lane per update element on XLA's launch. A sub-word element is
  combined inside its aligned 32-bit word, so neighbours written at the same time survive. The loop runs while
  any lane of the program has not swapped (a sum over the block). Where the combine is one PTX instruction, the
  loop is XLA's per-thread loop itself, as inline PTX: an overwrite of a sub-word type
  (:data:`~fusegen.codegen.atomic_asm.SUBWORD_STORE_ASM`, which the interpreter runs as the ordered store
  it is), a 32/64-bit multiply or ``current - update`` (:func:`~fusegen.codegen.atomic_asm.\
  word_cas_asm`) and a 16-bit maximum / minimum (``max.NaN.bf16`` and the like inside the word, as XLA's PTX
  has it: :func:`~fusegen.codegen.atomic_asm.subword_cas_asm`), which the interpreter applies lane by lane in order.
* ``keep``: a combiner returning its operand parameters: the output is the operand.
* ``serial``: what is left (variadic scatters, complex other than add, types without an 8-64 bit storage word,
  update layouts whose linear order is not the slices' order): one program walks the slices in order, loading,
  combining and storing each window (a barrier between slices), which gives the reference's in-order semantics.

Triton's interpreter runs one program at a time over ascending update elements, so ``store`` and ``cas`` apply
repeated indices in slice order there, as the reference does; a GPU picks an unspecified order, as XLA's does.

``ScatterWithDistributedIndices`` with an atomic combiner: each program walks a contiguous run of slices,
combining consecutive updates of the same target element in registers and flushing with one atomic when the
target changes (sorted indices make runs long); other combiners use the paths above.

Complex (``c64``/``c128``) values are ``(re, im)`` pairs of the part type throughout (loaded, combined by the
elemental generator's complex arithmetic, stored per part), as XLA:GPU lowers complex types the hardware lacks.
"""

from __future__ import annotations

import ctypes
from typing import Any, Sequence

from fusegen.pow2 import next_pow2
from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental import (COMPLEX_PARTS, Cx, ElementalGenerator, KernelContext, choose_index_dtype,
                                       deep_recursion)
from fusegen.codegen.emitter import EmitterUnsupported, FusionEmitter, build_linear_kernel, fusion_roots, store_line
from fusegen.codegen.interpreter_patches import register_builder_mixin
from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.codegen.launch import scatter_geometry
from fusegen.codegen.thread_indexing import default_thread_id_indexing_map
from fusegen.indexing import IndexingMap
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Shape
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory

from fusegen_plugins.emitters._scatter_cas import CAS_BITS, cas_lines
from fusegen_plugins.emitters._scatter_description import (MAX_VECTORIZED_BITS, NUM_WARPS_PER_BLOCK,  # noqa: F401
                                                            ScatterDescription, choose_scatter_emitter,
                                                            describe_scatter)

_ATOMIC_FN = {"add": "tl.atomic_add", "maximum": "tl.atomic_max", "minimum": "tl.atomic_min",
              "and": "tl.atomic_and", "or": "tl.atomic_or", "xor": "tl.atomic_xor"}
_INT_ATOMIC_TYPES = ("s32", "u32", "s64", "u64")


def classify_combiner(comp: Computation, n: int, element_type: str) -> tuple[str, str | None]:
    """``(strategy, op)`` for a scatter combiner over ``n`` operands of ``element_type``.

    strategy is ``"atomic"`` (op = HLO opcode with a native Triton atomic), ``"assign"`` (returns the update
    parameters), ``"keep"`` (returns the operand parameters) or ``"serial"``.
    """
    root = comp.root
    if root is None:
        return "serial", None
    leaves = list(root.operands) if root.opcode == "tuple" else [root]
    if len(leaves) == n and all(x.opcode == "parameter" for x in leaves):
        nums = [x.parameter_number for x in leaves]
        if nums == list(range(n, 2 * n)):
            return "assign", None
        if nums == list(range(n)):
            return "keep", None
    if n != 1 or root.opcode not in _ATOMIC_FN or len(root.operands) != 2:
        return "serial", None
    a, b = root.operands
    if a.opcode != "parameter" or b.opcode != "parameter" or {a.parameter_number, b.parameter_number} != {0, 1}:
        return "serial", None
    if root.shape.element_type != element_type:
        return "serial", None
    op = root.opcode
    if op == "add" and element_type in ("f32", "f64", "f16", "bf16", "c64", "c128") + _INT_ATOMIC_TYPES:
        return "atomic", op
    if op in ("maximum", "minimum") and element_type in ("f32", "f64") + _INT_ATOMIC_TYPES:
        return "atomic", op
    if op in ("and", "or", "xor") and element_type in _INT_ATOMIC_TYPES:
        return "atomic", op
    return "serial", None


# --------------------------------------------------------------------------------------------------
# interpreter support
# --------------------------------------------------------------------------------------------------
class Bf16AtomicAdd:
    """Interpreter builder mixin (:func:`~fusegen.codegen.interpreter_patches.register_builder_mixin`): Triton
    3.9's interpreter raises "Unsupported data type" for ``atomic_add`` on bf16 (the compiler emits
    ``red.add.noftz.bf16`` on sm_90); here lanes are applied one after another, each rounded to nearest even like
    the hardware. Every other atomic keeps Triton's."""

    def create_atomic_rmw(self, rmwOp: Any, ptr: Any, val: Any, mask: Any, sem: Any, scope: Any) -> Any:
        import ml_dtypes
        import numpy as np
        import triton.language as tl
        from triton._C.libtriton import interpreter as _interp_c
        from triton.runtime import interpreter as interp

        if val.dtype.scalar == tl.bfloat16 and self.ir_rmw_op_to_interpreter_rmw_op.get(rmwOp) == _interp_c.RMW_OP.FADD:
            addrs = np.asarray(ptr.data).reshape(-1)
            vals = np.asarray(val.data).reshape(-1).view(ml_dtypes.bfloat16)
            m = np.broadcast_to(np.asarray(mask.data), np.asarray(ptr.data).shape).reshape(-1)
            old = np.zeros(addrs.shape, dtype=np.uint16)
            for k in range(addrs.size):
                if not m[k]:
                    continue
                cell = ctypes.c_uint16.from_address(int(addrs[k]))
                old[k] = cell.value
                cur = np.array([cell.value], dtype=np.uint16).view(ml_dtypes.bfloat16).astype(np.float32)
                new = (cur + vals[k].astype(np.float32)).astype(ml_dtypes.bfloat16)
                cell.value = int(new.view(np.uint16)[0])
            return interp.TensorHandle(old.reshape(np.asarray(ptr.data).shape), tl.bfloat16)
        return super().create_atomic_rmw(rmwOp, ptr, val, mask, sem, scope)  # type: ignore[misc]


register_builder_mixin(Bf16AtomicAdd)  # used only inside fusegen's runs; Triton itself is left alone


# --------------------------------------------------------------------------------------------------
# the emitter
# --------------------------------------------------------------------------------------------------
class _Kernel:
    """A kernel being written with a custom prologue (the serial and distributed-indices kernels)."""

    def __init__(self, emitter: "ScatterFusion", block: int, extra: Sequence[Shape] = ()):
        fusion = emitter.fusion
        op_shapes = [o.shape for o in fusion.operands]
        self.idx_t = choose_index_dtype(op_shapes + [fusion.shape] + list(extra), block)
        self.ctx = KernelContext(self.idx_t, op_shapes)
        self.ctx.complex_values = True  # c64/c128 values are (re, im) pairs (loaded, combined, stored per part)
        for n in ("lane", "zero", "mask", "BLOCK", "w", "wc", "s_vec", "acc", "acc_re", "acc_im", "prev_off",
                  "prev_ok"):
            self.ctx.names.reserve(n)
        self.gen = ElementalGenerator(self.ctx, emitter.computation)
        self.block = block


class ScatterFusion(FusionEmitter):
    """Scatter emitter for ``kScatter`` fusions; :attr:`name` is the XLA sub-emitter chosen by
    :func:`choose_scatter_emitter` (set per instance).

    ``emit()`` raises :class:`EmitterUnsupported` naming the instruction when the scatter or a fused producer
    of its operands cannot be generated.
    """

    name = "ScatterWithDistributedUpdates"

    def __init__(self, analysis: Any):
        super().__init__(analysis)
        self.error: EmitterUnsupported | None = None
        self.strategy, self.atomic_op, self.overwrite = "serial", None, False
        try:
            self._describe()
        except EmitterUnsupported as e:  # reported by emit(), so the fallback names the reason
            self.error = e

    def _describe(self) -> None:
        roots = fusion_roots(self.computation)
        if len(roots) != 1 or roots[0].opcode != "scatter":
            raise EmitterUnsupported("fusion", self.fusion.name, "the root of a scatter fusion must be the scatter")
        self.scatter = roots[0]
        self.desc = describe_scatter(self.scatter)
        self.name = choose_scatter_emitter(self.desc, getattr(self.analysis, "device", None))
        et = self.desc.operands[0].shape.element_type
        comp = self.scatter.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported("scatter", self.scatter.name, "scatter without a to_apply computation")
        self.combiner = comp
        strategy, op = classify_combiner(comp, self.desc.n, et)
        self.overwrite = strategy == "assign"
        bits = CAS_BITS.get(et)
        parallel = self.desc.n == 1 and bits is not None and self._updates_in_slice_order()
        if strategy == "assign":
            if self.desc.unique_indices or (parallel and bits >= 32):
                strategy = "store"
            else:
                strategy = "cas" if parallel else "serial"
        elif strategy == "serial" and parallel:
            strategy = "cas"
        self.strategy = strategy
        self.atomic_op = op
        d = self.desc
        self.geometry = scatter_geometry(
            self.analysis, d.updates[0].shape, d.window_shape, d.operand_dims, len(d.scatter_dims_to_operand_dims),
            d.num_slices, et, d.indices.shape.element_type, d.indices_are_sorted and not d.unique_indices)

    def _updates_in_slice_order(self) -> bool:
        """Whether the updates' linear order (their layout) meets a target element's updates in slice order (the
        scatter dims major to minor as the slices count them), so that the interpreter's ascending lanes apply
        repeated indices as the reference does."""
        u = self.desc.updates[0].shape
        order = [dim for dim in reversed(u.minor_to_major()) if dim in self.desc.update_scatter_dims]
        return order == sorted(self.desc.update_scatter_dims)

    def launch_dimensions(self) -> LaunchDimensions | None:
        """XLA's launch for the scatter kernel (``ScatterFusion::launch_dimensions``)."""
        if self.error is not None or self.desc.num_slices == 0 or self.desc.slice_size == 0:
            return None
        return self.geometry.launch()

    def thread_id_to_output_indexing(self, root_index: int) -> None:
        """``ScatterFusion``: no thread-to-output map (targets come from the indices at run time)."""
        return None

    def thread_id_to_input_indexing(self, root_index: int, hero_operand_index: int) -> IndexingMap | None:
        """``ScatterWithDistributedUpdates``: the default thread map (vector size as unroll) over an update
        operand; none for the scattered operands, the indices, and ``ScatterWithDistributedIndices``."""
        launch = self.launch_dimensions()
        geo = self.geometry
        if launch is None or geo.updates is None or hero_operand_index <= self.desc.n:
            return None
        return default_thread_id_indexing_map(launch, geo.vector_size, self.desc.updates[0].shape)

    # ------------------------------------------------------------------------------------ helpers
    def _leaves(self) -> list[Shape]:
        return self.fusion.shape.leaves()

    def _target(self, gen: ElementalGenerator, uidx: Sequence[Any]) -> tuple[str | None, tuple]:
        """``(in-bounds condition or None, operand index)`` of the update element at ``uidx``."""
        d = self.desc
        ctx = gen.ctx
        sidx = [uidx[k] for k in d.update_scatter_dims]
        rank = len(d.operand_dims)
        starts: list[Any] = [0] * rank
        conds: list[str] = []
        ind = d.indices
        iet = ind.shape.element_type
        if not dtypes.is_integral(iet):
            raise EmitterUnsupported("scatter", self.scatter.name, f"scatter indices of type {iet}")
        wide = dtypes.bit_width(iet) == 64
        check_t = "tl.int64" if wide else "tl.int32"
        if (ivd := d.index_vector_dim) < ind.shape.rank:  # the index vector as one load a thread, as XLA's
            gen.bind_parameter_vectors(ind, tuple(sidx[:ivd]) + (0,) + tuple(sidx[ivd:]), ivd)
        for k, od in enumerate(d.scatter_dims_to_operand_dims):
            if d.index_vector_dim < ind.shape.rank:
                ii = tuple(sidx[:d.index_vector_dim]) + (k,) + tuple(sidx[d.index_vector_dim:])
            else:
                ii = tuple(sidx)
            v = gen.value(ind, ii)
            if iet == "pred":
                v = ctx.emit(f"{v}.to(tl.int32)", "sidx")
            elif dtypes.is_unsigned_int(iet) and dtypes.bit_width(iet) in (32, 64):
                v = ctx.emit(f"{v}.to({check_t}, bitcast=True)", "sidx")  # huge values turn negative: out of bounds
            else:
                v = ctx.emit(f"{v}.to({check_t})", "sidx")
            hi = d.operand_dims[od] - d.window_sizes[od]
            if hi < 0:
                conds.append("False")
                starts[od] = 0
                continue
            conds.append(ctx.emit(f"({v} >= 0) & ({v} <= {hi})", "inb"))
            # not clamped: every access through the target is masked by its in-bounds condition (a compare-and-
            # swap, which has no mask, takes a masked lane's offset as 0), as XLA's kernel branches around it
            starts[od] = gen.iexpr(f"{v}.to({ctx.idx_t})", "st") if check_t != ctx.idx_t else v
        idx_dims_wo = [x for x in range(ind.shape.rank) if x != d.index_vector_dim]
        for od, idd in zip(d.input_batching_dims, d.scatter_indices_batching_dims):
            starts[od] = sidx[idx_dims_wo.index(idd)]
        target: list[Any] = list(starts)
        for od, ud in zip(d.window_operand_dims, d.update_window_dims):
            target[od] = gen.iadd(starts[od], uidx[ud])
        if "False" in conds:
            return "False", tuple(target)
        cond = None
        if conds:
            cond = conds[0] if len(conds) == 1 else ctx.emit(" & ".join(f"({c})" for c in conds), "inb")
        return cond, tuple(target)

    def _aliases_and_init(self) -> tuple[dict[int, int], list[KernelSource]]:
        """Output leaf -> aliased fusion operand; init kernels for operands that are not plain parameters."""
        leaves = self._leaves()
        aliases: dict[int, int] = {}
        need_init: list[int] = []
        for k, op in enumerate(self.desc.operands):
            if op.opcode == "parameter" and op.parameter_number < len(self.fusion.operands):
                src = self.fusion.operands[op.parameter_number].shape
                if src.dimensions == leaves[k].dimensions and src.minor_to_major() == leaves[k].minor_to_major() \
                        and src.element_type == leaves[k].element_type:
                    aliases[k] = op.parameter_number
                    continue
            need_init.append(k)
        kernels: list[KernelSource] = []
        if need_init:
            n_total = leaves[0].numel

            def body(gen: ElementalGenerator, lin_c: str) -> None:
                gen.ctx.complex_values = True
                for k in need_init:
                    ls = leaves[k]
                    idx = gen.delinearize(lin_c, ls.dimensions, ls.minor_to_major())
                    v = gen.value(self.desc.operands[k], idx)
                    ptr = gen.ctx.param("output", k, ls, f"out{k}")
                    store_line(gen, ptr, "lin", v, ls.element_type, gen.ctx.mask)

            kernels.append(build_linear_kernel(self, f"scatter_init_{self.fusion.name}", n_total, body))
        return aliases, kernels

    def _atomic_line(self, gen: ElementalGenerator, ptr: str, off: Any, val: str, mask: str, et: str) -> None:
        ctx = gen.ctx
        o = gen.itensor(off)
        fn = _ATOMIC_FN[self.atomic_op]
        if et in COMPLEX_PARTS:
            # add only (classify_combiner). Complex buffers hold interleaved (re, im) parts and a complex add
            # is one float add per part, so each part gets its own float atomic (there is no complex atomic).
            o2 = ctx.emit(f"{o} * 2", "off")
            for part, v in enumerate(val):
                ctx.body.line(f"{fn}({ptr} + {o2} + {part}, {v}, mask={mask}, sem=\"relaxed\")")
            return
        if self.atomic_op in ("maximum", "minimum") and et in ("f32", "f64"):
            # NaN must win. Non-NaN lanes take Triton's float max/min (signed max / unsigned min of the bits for
            # max, the mirror for min); a NaN lane does an integer max on the bit pattern: +NaN (0x7fc0..) beats
            # every signed pattern of a max result, -NaN (0xffc0..) every unsigned pattern of a min result, and
            # the float trick then never replaces them. NaNs already in the operand were given that sign by
            # the canonicalization kernel that runs first.
            isn = ctx.emit(f"{val} != {val}", "isnan")
            ctx.body.line(f"{fn}({ptr} + {o}, {val}, mask={mask} & ~{isn}, sem=\"relaxed\")")
            it, nan_bits = self._nan_bits(et)
            iptr = ctx.emit(f"{ptr}.to(tl.pointer_type({it}), bitcast=True)", "iptr")
            ctx.body.line(f"tl.atomic_max({iptr} + {o}, tl.full([BLOCK], {nan_bits}, {it}), mask={mask} & {isn}, "
                          f"sem=\"relaxed\")")
            return
        ctx.body.line(f"{fn}({ptr} + {o}, {val}, mask={mask}, sem=\"relaxed\")")

    def _flush_line(self, gen: ElementalGenerator, ptr: str, off: Any, val: Any, mask: str, et: str) -> None:
        """Combine ``val`` into the output element at ``ptr + off`` where ``mask``, by the strategy."""
        if self.strategy == "atomic":
            self._atomic_line(gen, ptr, off, val, mask, et)
        elif self.strategy == "cas":
            cas_lines(gen, self.combiner, self.overwrite, ptr, off, val, mask, et)
        else:
            store_line(gen, ptr, off, val, et, mask)

    # --------------------------------------------------------------------------------- kernels
    def _nan_bits(self, et: str) -> tuple[str, int]:
        """Integer view and bit pattern of the NaN a float max (+NaN) / min (-NaN) atomic keeps."""
        bits = dtypes.bit_width(et)
        qnan = 0x7FC00000 if bits == 32 else 0x7FF8000000000000
        if self.atomic_op == "maximum":
            return f"tl.int{bits}", qnan
        return f"tl.uint{bits}", qnan | (1 << (bits - 1))

    def _needs_nan_canonicalization(self) -> bool:
        et = self._leaves()[0].element_type
        return self.strategy == "atomic" and self.atomic_op in ("maximum", "minimum") and et in ("f32", "f64")

    def _distributed_updates_kernel(self, canonicalize_nans: bool = False) -> KernelSource:
        """One lane per update element. With ``canonicalize_nans`` the kernel only rewrites NaNs already in the
        targeted output elements to the sign the float max/min atomics keep (run before the atomic kernel)."""
        d = self.desc
        leaves = self._leaves()
        upd = d.updates[0].shape
        n_total = upd.numel

        def body(gen: ElementalGenerator, lin_c: str) -> None:
            ctx = gen.ctx
            ctx.complex_values = True  # a complex update is an (re, im) pair, added part by part
            uidx = gen.delinearize(lin_c, upd.dimensions, upd.minor_to_major())
            cond, tidx = self._target(gen, uidx)
            if cond == "False":
                return
            m = ctx.mask if cond is None else ctx.emit(f"{ctx.mask} & {cond}", "m")
            for k in range(d.n):
                ls = leaves[k]
                off = gen.linearize(tidx, ls.dimensions, ls.minor_to_major())
                ptr = ctx.param("output", k, ls, f"out{k}")
                if canonicalize_nans:
                    o = gen.itensor(off)
                    it, nan_bits = self._nan_bits(ls.element_type)
                    cur = ctx.emit(f"tl.load({ptr} + {o}, mask={m}, other=0)", "cur")
                    iptr = ctx.emit(f"{ptr}.to(tl.pointer_type({it}), bitcast=True)", "iptr")
                    ctx.body.line(f"tl.store({iptr} + {o}, tl.full([BLOCK], {nan_bits}, {it}), mask={m} & ({cur} != {cur}))")
                    continue
                v = gen.value(d.updates[k], uidx)
                self._flush_line(gen, ptr, off, v, m, ls.element_type)

        tag = "nan_canon" if canonicalize_nans else self.strategy
        return build_linear_kernel(self, f"scatter_{tag}_{self.fusion.name}", n_total, body,
                                   geometry=self.geometry.updates)

    def _window_index(self, gen: ElementalGenerator, s: str, w: str) -> tuple:
        """Update index of slice ``s`` (index tensor), window element ``w`` (row-major in the window)."""
        d = self.desc
        sm = gen.delinearize(s, d.scatter_shape, tuple(range(len(d.scatter_shape) - 1, -1, -1)))
        wm = gen.delinearize(w, d.window_shape, tuple(range(len(d.window_shape) - 1, -1, -1)))
        uidx: list[Any] = [0] * d.updates[0].shape.rank
        for k, ud in enumerate(d.update_scatter_dims):
            uidx[ud] = sm[k]
        for k, ud in enumerate(d.update_window_dims):
            uidx[ud] = wm[k]
        return tuple(uidx)

    def _serial_kernel(self) -> KernelSource:
        """One program applying the slices in order, a window (vector) at a time."""
        d = self.desc
        leaves = self._leaves()
        W = max(1, d.slice_size)
        block = min(next_pow2(W), 1024)
        nch = -(-W // block)
        kb = _Kernel(self, block)
        ctx, gen = kb.ctx, kb.gen
        s = ctx.names.fresh("s")
        c = ctx.names.fresh("c")
        with deep_recursion():
            ctx.body.line(f"for {s} in range(0, S):")
            ctx.body.indent()
            ctx.body.line(f"for {c} in range(0, NCH):")
            ctx.body.indent()
            gen.push_scope()
            try:
                w = ctx.emit(f"lane + {c} * BLOCK", "w")
                ctx.body.line(f"mask = {w} < W")
                wc = gen.iexpr(f"tl.minimum({w}, W - 1)", "wc")
                sv = gen.iexpr(f"zero + {s}", "sv")
                uidx = self._window_index(gen, sv, wc)
                cond, tidx = self._target(gen, uidx)
                if cond != "False":
                    m = ctx.mask if cond is None else ctx.emit(f"{ctx.mask} & {cond}", "m")
                    curs, offs, ptrs = [], [], []
                    for k in range(d.n):
                        ls = leaves[k]
                        off = gen.itensor(gen.linearize(tidx, ls.dimensions, ls.minor_to_major()))
                        ptr = ctx.param("output", k, ls, f"out{k}")
                        if ls.element_type in COMPLEX_PARTS:
                            o2 = ctx.emit(f"{off} * 2", "off")
                            cur = Cx(ctx.emit(f"tl.load({ptr} + {o2} + {p}, mask={m}, other=0)", "cur")
                                     for p in (0, 1))
                        else:
                            cur = ctx.emit(f"tl.load({ptr} + {off}, mask={m}, other=0)", "cur")
                        if ls.element_type == "pred":
                            cur = ctx.emit(f"{cur} != 0", "cur")
                        curs.append(cur)
                        offs.append(off)
                        ptrs.append(ptr)
                    ups = [gen.value(u, uidx) for u in d.updates]
                    res = gen.call_computation(self.combiner, curs + ups)
                    vals = res if isinstance(res, list) else [res]
                    if len(vals) != d.n:
                        raise EmitterUnsupported("scatter", self.scatter.name, "combiner returns the wrong arity")
                    for k in range(d.n):
                        store_line(gen, ptrs[k], offs[k], vals[k], leaves[k].element_type, m)
                ctx.body.line("tl.debug_barrier()")
            finally:
                gen.pop_scope()
                ctx.body.dedent()
                ctx.body.dedent()
        entry = ts.sanitize_identifier(f"scatter_serial_{self.fusion.name}", "k")
        prologue = ["lane = tl.arange(0, BLOCK)", f"zero = tl.full([BLOCK], 0, {kb.idx_t})"]
        source = ctx.render(entry, ["BLOCK", "S", "W", "NCH"], prologue)
        return KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                            constexprs={"BLOCK": block, "S": d.num_slices, "W": W, "NCH": nch},
                            launch=LaunchDimensions(grid=(1,), num_warps=max(1, min(4, block // 32))), num_stages=1)

    def _distributed_indices_kernel(self, device: Any) -> KernelSource:
        """Programs own runs of consecutive slices; equal consecutive targets combine in registers."""
        d = self.desc
        (ls,) = self._leaves()
        et = ls.element_type
        W = max(1, d.slice_size)
        block = min(next_pow2(W), 1024)
        nch = -(-W // block)
        geo = self.geometry
        if geo.emitter == "ScatterWithDistributedIndices":  # XLA's blocks: 4 warps of indices_per_warp slices
            warps = NUM_WARPS_PER_BLOCK
            per = NUM_WARPS_PER_BLOCK * geo.indices_per_warp
        else:
            warps = max(1, min(4, block // 32))
            programs = max(1, NUM_WARPS_PER_BLOCK * int(getattr(device, "core_count", 0) or 1) // max(1, nch))
            per = -(-d.num_slices // programs)
        programs = -(-d.num_slices // per)
        kb = _Kernel(self, block)
        ctx, gen = kb.ctx, kb.gen
        # a complex accumulator is the pair (acc_re, acc_im) of its part type
        accs = ("acc_re", "acc_im") if et in COMPLEX_PARTS else ("acc",)
        acc: Any = Cx(accs) if et in COMPLEX_PARTS else "acc"
        t_et = ts.tl_dtype(COMPLEX_PARTS.get(et, et))
        ptr = ctx.param("output", 0, ls, "out0")
        t = ctx.names.fresh("t")
        with deep_recursion():
            for a in accs:
                ctx.body.line(f"{a} = tl.full([BLOCK], 0, {t_et})")
            ctx.body.line(f"prev_off = tl.full([BLOCK], -1, {kb.idx_t})")
            ctx.body.line("prev_ok = lane < 0")
            ctx.body.line(f"for {t} in range(0, PER):")
            ctx.body.indent()
            gen.push_scope()
            try:
                ctx.body.line(f"s_vec = zero + (tl.program_id(0) * PER + {t})")
                ctx.body.line("mask = (w < W) & (s_vec < S)")
                sv = gen.iexpr("tl.minimum(s_vec, S - 1)", "sv")
                uidx = self._window_index(gen, sv, "wc")
                cond, tidx = self._target(gen, uidx)
                if cond is None:
                    ok = ctx.emit("mask", "ok")
                elif cond == "False":
                    ok = ctx.emit("mask & (lane < 0)", "ok")
                else:
                    ok = ctx.emit(f"mask & {cond}", "ok")
                off = gen.itensor(gen.linearize(tidx, ls.dimensions, ls.minor_to_major()))
                v = gen.value(d.updates[0], uidx)
                same = ctx.emit(f"prev_ok & {ok} & ({off} == prev_off)", "same")
                flush = ctx.emit(f"prev_ok & {ok} & ~{same}", "flush")
                self._flush_line(gen, ptr, "prev_off", acc, flush, et)
                merged = gen.call_computation(self.combiner, [acc, v])
                parts = zip(accs, merged, v) if et in COMPLEX_PARTS else [("acc", merged, v)]
                for a, mv, vv in parts:
                    ctx.body.line(f"{a} = tl.where({same}, {mv}, tl.where({ok}, {vv}, {a}))")
                ctx.body.line(f"prev_off = tl.where({ok}, {off}, prev_off)")
                ctx.body.line(f"prev_ok = prev_ok | {ok}")
            finally:
                gen.pop_scope()
                ctx.body.dedent()
            self._flush_line(gen, ptr, "prev_off", acc, "prev_ok", et)
        entry = ts.sanitize_identifier(f"scatter_sorted_{self.fusion.name}", "k")
        prologue = ["lane = tl.arange(0, BLOCK)", f"zero = tl.full([BLOCK], 0, {kb.idx_t})",
                    "w = lane + tl.program_id(1) * BLOCK", "wc = tl.minimum(w, W - 1)"]
        source = ctx.render(entry, ["BLOCK", "S", "W", "PER"], prologue)
        return KernelSource(name=entry, source=source, entry=entry, params=tuple(ctx.params),
                            constexprs={"BLOCK": block, "S": d.num_slices, "W": W, "PER": per},
                            launch=LaunchDimensions(grid=(programs, nch), num_warps=warps), num_stages=1)

    # ------------------------------------------------------------------------------------ emit
    def emit(self) -> EmittedFusion:
        if self.error is not None:
            raise self.error
        d = self.desc
        leaves = self._leaves()
        if len(leaves) != d.n:
            raise EmitterUnsupported("fusion", self.fusion.name, "output leaves do not match the scattered operands")
        for ls in leaves:
            if ls.element_type not in ("pred",) + tuple(COMPLEX_PARTS):
                try:
                    ts.tl_dtype(ls.element_type)
                except dtypes.UnsupportedTypeError:
                    raise EmitterUnsupported("scatter", self.scatter.name,
                                             f"element type {ls.element_type} has no Triton type") from None
        aliases, kernels = self._aliases_and_init()
        if d.num_slices == 0 or d.slice_size == 0 or self.strategy == "keep":
            return EmittedFusion(emitter=self.name, kernels=tuple(kernels), output_aliases=aliases)
        if self._needs_nan_canonicalization():
            kernels.append(self._distributed_updates_kernel(canonicalize_nans=True))
        if self.strategy == "serial":
            kernels.append(self._serial_kernel())
        elif self.strategy in ("atomic", "store", "cas") and self.name == "ScatterWithDistributedIndices":
            kernels.append(self._distributed_indices_kernel(getattr(self.analysis, "device", None)))
        else:
            kernels.append(self._distributed_updates_kernel())
        return EmittedFusion(emitter=self.name, kernels=tuple(kernels), output_aliases=aliases,
                             primary=len(kernels) - 1)


def _create(analysis: Any, context: Any = None) -> ScatterFusion | None:
    try:
        roots = fusion_roots(getattr(analysis, "computation", None) or analysis.fusion.fused_computation)
    except EmitterUnsupported:
        return None
    if len(roots) != 1 or roots[0].opcode != "scatter":
        return None
    return ScatterFusion(analysis)


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="scatter", kind="kScatter", rank=100, create=_create)]
