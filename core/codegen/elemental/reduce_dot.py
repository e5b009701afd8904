"""Ops with a nested computation or a runtime loop: map, reduce, dot, reduce-window."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

from fusegen.codegen import loop_unroll
from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Computation, Instruction
from fusegen.codegen.elemental.common import ELEMENTWISE, Index, int_list, parse_constant
from fusegen.codegen.elemental.reads import loads_only, reads_only
from fusegen.codegen.elemental.vector_reads import plain_vector_type


class ReduceDotMixin:
    """Map, reduce, dot and reduce-window of :class:`ElementalGenerator` (a mixin; see the module docstring)."""

    def _map(self, inst: Instruction, idx: Index) -> Any:
        comp = inst.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported(inst.opcode, inst.name, "map without to_apply computation")
        args = [self.value(o, idx) for o in inst.operands]
        return self.call_computation(comp, args)

    def _reduce(self, inst: Instruction, idx: Index) -> Any:
        comp = inst.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce without to_apply computation")
        n = len(inst.operands) // 2
        inputs, inits = inst.operands[:n], inst.operands[n:]
        rdims = sorted(int_list(inst.attrs.get("dimensions")))
        in_shape = inputs[0].shape
        kept = [d for d in range(in_shape.rank) if d not in rdims]
        out_idx = list(idx) if not inst.shape.is_tuple else list(idx)
        if inst.shape.is_tuple:
            out_rank = inst.shape.tuple_shapes[0].rank
        else:
            out_rank = inst.shape.rank
        if len(out_idx) != out_rank or len(kept) != out_rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce index rank mismatch")
        comp, promoted = self._accumulating_reducer(comp, n, inputs[0].shape.element_type)
        init_vals = [self.value(i, ()) for i in inits]
        if promoted:
            init_vals = [self.up(init_vals[0], inputs[0].shape.element_type)]
        accs = []
        for k, v in enumerate(init_vals):
            accs.append(self.ctx.emit(v, f"acc_{inst.name}"))
        rsizes = [in_shape.dimensions[d] for d in rdims]
        total = 1
        for s in rsizes:
            total *= s
        if total == 0:
            accs = self._round_accumulators(accs, promoted, inputs[0].shape.element_type, inst)
            return accs if inst.shape.is_tuple else accs[0]
        plan = self._reduce_vector_plan(inst, rdims, total) if not inst.shape.is_tuple else None
        if plan is not None:
            self._reduce_vectors(inst, out_idx, plan, accs, comp, promoted)
            return self._round_accumulators(accs, promoted, inputs[0].shape.element_type, inst)[0]
        loop = total > 1
        r = None
        if loop:
            self._hoist_invariants(inputs, rdims, out_idx)
            r = self.ctx.names.fresh("r")
            header_at = len(self.ctx.body.lines)
            self.ctx.body.line(f"for {r} in range(0, {total}):")
            self.ctx.body.indent()
            self.push_scope()
        try:
            if loop:
                rv = self.iexpr(f"{self.ctx.zero} + {r}", "rr")
                comps: dict[int, Any] = {}
                stride = 1
                for d, size in reversed(list(zip(rdims, rsizes))):  # row-major over the reduced dims
                    comps[d] = self.imod(self.idiv(rv, stride), size) if size > 1 else 0
                    stride *= size
            else:
                comps = {d: 0 for d in rdims}
            src_idx = []
            j = 0
            for d in range(in_shape.rank):
                if d in comps:
                    src_idx.append(comps[d])
                else:
                    src_idx.append(out_idx[j])
                    j += 1
            xs = [self.value(i, tuple(src_idx)) for i in inputs]
            if promoted:
                xs = [self.up(xs[0], inputs[0].shape.element_type)]
            self._combine_into(accs, comp, xs, inst)
        finally:
            if loop:
                self.pop_scope()
                self.ctx.body.dedent()
        if loop:
            self._unroll_loop(header_at, r, total)
        accs = self._round_accumulators(accs, promoted, inputs[0].shape.element_type, inst)
        return accs if inst.shape.is_tuple else accs[0]

    def _reduce_vector_plan(self, inst: Instruction, rdims: list[int], total: int) -> tuple | None:
        """``(dim, parameter, top, vector)`` when a one-operand ``reduce`` sums (or folds) the whole minor dimension ``dim`` of
        a fusion parameter read through converts over same-type bitcasts (``top``: the instruction under the
        converts), and XLA's ``xla-gpu-optimize-loops`` writes its loop out whole (:mod:`fusegen.codegen.loop_unroll`):
        its steps are then read as vectors of up to 16 bytes (:meth:`_reduce_vectors`; of several rows, vectors that
        divide the row), as XLA's vectoriser reads the
        contiguous elements of the loop (``xla-vectorize-loads-stores``, a pass of the native emitters' pipeline,
        so not in a Triton backend's kernel: :attr:`KernelContext.native_loops`); ``None`` otherwise."""
        if (len(inst.operands) != 2 or len(rdims) != 1 or total < 2 or not self.ctx.native_loops
                or not self.vector_reads_apply()):
            return None
        d = rdims[0]
        found = _vector_source(inst.operands[0], d)
        if found is None:
            return None
        top, par, converts = found
        et = top.shape.element_type
        if total < 16 // (dtypes.bit_width(et) // 8):
            return None
        # the step XLA's rule sizes: the element read (a tensor.extract), its converts, and the reducer (one call
        # op: XLA's reducer is a pure call at that pass)
        if loop_unroll.unroll_factor(total, 2 + converts) < total:
            return None
        # XLA vectorises only reads whose offset the vector's size divides: each row starts at a multiple of it
        vmax, size = 16 // (dtypes.bit_width(et) // 8), top.shape.dimensions[d]
        if top.shape.numel > size:
            while vmax > 1 and size % vmax:
                vmax //= 2
            if vmax == 1:
                return None
        return d, par, top, vmax

    def _reduce_vectors(self, inst: Instruction, out_idx: list[Any], plan: tuple, accs: list[str],
                        comp: Computation, promoted: bool) -> None:
        """Fold the reduced minor dimension into ``accs`` in ascending order (the loop's order, so the result is
        the loop's bit for bit), reading each 16-byte chunk of the parameter as one ``[block, V]`` load split into
        its ``V`` columns (:meth:`vector_load`; a tail shorter than a vector in halves); the converts above the
        loaded values are applied per column."""
        d, par, top, vmax = plan
        src = inst.operands[0]
        kept = iter(out_idx)
        base_idx = tuple(0 if e == d else next(kept) for e in range(src.shape.rank))
        base = self.itensor(self.linearize(base_idx, top.shape.dimensions, top.shape.minor_to_major()))
        ptr, _ = self.parameter_buffer(par)
        size = top.shape.dimensions[d]
        self.push_scope()
        try:
            c = 0
            while c < size:
                v = vmax
                while c + v > size and v > 1:
                    v //= 2
                for k, x in enumerate(self.vector_load(ptr, self.itensor(self.iadd(base, c)) if c else base, v,
                                                       top.name)):
                    at = base_idx[:d] + (c + k,) + base_idx[d + 1:]
                    self.bind_value(top, at, x)
                    xs = [self.value(src, at)]
                    if promoted:
                        xs = [self.up(xs[0], src.shape.element_type)]
                    self._combine_into(accs, comp, xs, inst)
                c += v
        finally:
            self.pop_scope()

    def _unroll_loop(self, header_at: int, var: str, total: int) -> None:
        """The loop just written (header ``self.ctx.body.lines[header_at]``, ``for var in range(0, total)``) as
        XLA's ``xla-gpu-optimize-loops`` leaves its elemental loops (:mod:`fusegen.codegen.loop_unroll`): a step
        body the rule unrolls whole stays a counted loop, which LLVM and ptxas write out as they do now; a heavier
        one is unrolled by the rule's factor around a loop that stays one."""
        if not self.ctx.native_loops:
            return
        lines = self.ctx.body.lines
        if loop_unroll.holds_loop(lines[header_at + 1:]):
            return
        factor = loop_unroll.unroll_factor(total, loop_unroll.body_size(lines[header_at + 1:]))
        if factor < total:
            loop_unroll.unroll_in_place(lines, header_at, var, str(total), total, factor, keep=True)

    def _hoist_invariants(self, inputs: list[Instruction], rdims: list[int], out_idx: list[Any]) -> None:
        """Compute, before a reduction's loop, what its body reads through a broadcast at an index free of the
        reduced dimensions and that holds a loop itself (a reduce, dot or reduce-window): a variance's mean in
        ``sum((x - broadcast(mean(x)))**2)``. The body then finds it (the generator's values are looked up
        outward through the scopes) instead of running the inner loop once per step: per lane ``n`` steps, not
        ``n**2``, as XLA's emitters compute it once. Only chains of elementwise ops and broadcasts are followed."""
        rank = inputs[0].shape.rank
        kept = iter(out_idx)
        at = tuple(None if d in rdims else next(kept) for d in range(rank))  # None: a reduced (loop) component
        todo, seen = [(x, at) for x in inputs], set()
        while todo:
            x, idx = todo.pop()
            if (id(x), idx) in seen:
                continue
            seen.add((id(x), idx))
            if x.opcode == "broadcast" and len(x.operands) == 1:
                sub = tuple(idx[d] for d in int_list(x.attrs.get("dimensions")))
                if None not in sub:
                    if _holds_loop(x.operands[0]):
                        self.value(x.operands[0], sub)
                else:
                    todo.append((x.operands[0], sub))
            elif x.opcode in ELEMENTWISE and x.opcode != "map":
                todo.extend((o, idx) for o in x.operands if tuple(o.shape.dimensions) == tuple(x.shape.dimensions))

    def _combine_into(self, accs: list[str], comp: Computation, xs: list[Any], inst: Instruction) -> None:
        """``accs = comp(accs, xs)``: one step of a reducer, assigned back to the accumulator variables."""
        res = self.call_computation(comp, list(accs) + list(xs))
        res_list = res if isinstance(res, list) else [res]
        if len(res_list) != len(accs):
            raise EmitterUnsupported(inst.opcode, inst.name, "reducer returns the wrong number of values")
        for a, v in zip(accs, res_list):
            self.ctx.body.line(f"{a} = {v}")

    def _accumulating_reducer(self, comp: Computation, n: int, et: str) -> tuple[Computation, bool]:
        """The reducer to fold with, and whether it is an f32 copy of an f16/bf16 add/multiply (then
        the fold accumulates in f32 and rounds once, as the reference evaluator does)."""
        if n != 1:
            return comp, False
        from fusegen.codegen.reduction_codegen import promoted_reducer

        p = promoted_reducer(comp)
        return (p, True) if p is not None else (comp, False)

    def _round_accumulators(self, accs: list[str], promoted: bool, et: str, inst: Instruction) -> list[str]:
        if not promoted:
            return accs
        return [self.ctx.emit(f"{accs[0]}.to({self.tl(et)})", inst.name)]

    def _dot(self, inst: Instruction, idx: Index) -> str:
        """``dot`` as a runtime loop over the contracting elements (XLA's elemental dot,
        ``EmitElementalDot`` in ``elemental_ir_emitter.cc``): output index = batch, lhs free, rhs free.

        Floats narrower than f32 are multiplied and accumulated in f32 (f64 when an operand or the result
        is f64) and rounded once, as the reference evaluator does; integer dots accumulate in 64 bits and
        wrap to the result width.
        """
        lhs, rhs = inst.operands
        lb, rb = int_list(inst.attrs.get("lhs_batch_dims")), int_list(inst.attrs.get("rhs_batch_dims"))
        lc, rc = int_list(inst.attrs.get("lhs_contracting_dims")), int_list(inst.attrs.get("rhs_contracting_dims"))
        if len(lb) != len(rb) or len(lc) != len(rc):
            raise EmitterUnsupported(inst.opcode, inst.name, "dot with unmatched batch / contracting dims")
        if inst.attrs.get("sparsity") or len(inst.operands) != 2:
            raise EmitterUnsupported(inst.opcode, inst.name, "sparse dot")
        lf = [d for d in range(lhs.shape.rank) if d not in lb and d not in lc]
        rf = [d for d in range(rhs.shape.rank) if d not in rb and d not in rc]
        if len(idx) != len(lb) + len(lf) + len(rf):
            raise EmitterUnsupported(inst.opcode, inst.name, "dot index rank mismatch")
        et_l, et_r, et_o = lhs.shape.element_type, rhs.shape.element_type, inst.shape.element_type
        ints = [dtypes.is_integral(t) or t == "pred" for t in (et_l, et_r, et_o)]
        if all(ints):
            if "u64" in (et_l, et_r, et_o) or et_o == "pred":
                raise EmitterUnsupported(inst.opcode, inst.name, f"integer dot {et_l} x {et_r} -> {et_o}")
            acc_et = "s64"
        elif not any(ints):
            acc_et = "f64" if "f64" in (et_l, et_r, et_o) else "f32"
        else:
            raise EmitterUnsupported(inst.opcode, inst.name, f"mixed integer / float dot {et_l} x {et_r} -> {et_o}")
        at = self.tl(acc_et)
        nb = len(lb)
        lidx: list[Any] = [0] * lhs.shape.rank
        ridx: list[Any] = [0] * rhs.shape.rank
        for k, (dl, dr) in enumerate(zip(lb, rb)):
            lidx[dl] = ridx[dr] = idx[k]
        for k, d in enumerate(lf):
            lidx[d] = idx[nb + k]
        for k, d in enumerate(rf):
            ridx[d] = idx[nb + len(lf) + k]
        csizes = [lhs.shape.dimensions[d] for d in lc]
        if csizes != [rhs.shape.dimensions[d] for d in rc]:
            raise EmitterUnsupported(inst.opcode, inst.name, "contracting dimensions differ in size")
        total = 1
        for c in csizes:
            total *= c
        acc = self.ctx.emit(self.ctx.full(0.0 if acc_et != "s64" else 0, at), f"acc_{inst.name}")
        loop = total > 1
        if total > 0:
            if loop:
                r = self.ctx.names.fresh("kk")
                header_at = len(self.ctx.body.lines)
                self.ctx.body.line(f"for {r} in range(0, {total}):")
                self.ctx.body.indent()
                self.push_scope()
            try:
                comps: list[Any] = [0] * len(lc)
                if loop:
                    rv = self.iexpr(f"{self.ctx.zero} + {r}", "kk")
                    stride = 1
                    for j in reversed(range(len(lc))):  # row-major over the contracting dims
                        if csizes[j] > 1:
                            q = self.idiv(rv, stride)
                            comps[j] = q if stride * csizes[j] == total else self.imod(q, csizes[j])
                        stride *= csizes[j]
                for j, (dl, dr) in enumerate(zip(lc, rc)):
                    lidx[dl] = ridx[dr] = comps[j]
                a = self.value(lhs, tuple(lidx))
                b = self.value(rhs, tuple(ridx))
                xs = []
                for v, t in ((a, et_l), (b, et_r)):
                    if self.compute_type(t) != acc_et:
                        v = self.ctx.emit(f"{self.up(v, t)}.to({at})", "dv")
                    else:
                        v = self.up(v, t)
                    xs.append(v)
                self.ctx.body.line(f"{acc} = {acc} + {xs[0]} * {xs[1]}")
            finally:
                if loop:
                    self.pop_scope()
                    self.ctx.body.dedent()
            if loop:
                self._unroll_loop(header_at, r, total)
        if et_o == acc_et:
            return acc
        return self.wrap_subbyte(self.emit(f"{acc}.to({self.tl(et_o)})", inst), et_o, inst.name)

    def _reduce_window(self, inst: Instruction, idx: Index) -> Any:
        """``reduce-window``: a runtime loop over the window positions (row-major, as
        ``HloEvaluator::HandleReduceWindow``) folding ``to_apply`` into accumulators started at the init
        values. Window element ``w`` of output ``o`` reads padded position ``o*stride + w*window_dilation``;
        positions in the (low/high or base-dilation) padding read the init value."""
        from fusegen.hlo.window import parse_window

        comp = inst.attrs.get("to_apply")
        if not isinstance(comp, Computation):
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce-window without to_apply computation")
        n = len(inst.operands) // 2
        inputs, inits = inst.operands[:n], inst.operands[n:]
        in_shape = inputs[0].shape
        rank = in_shape.rank
        out_shape = inst.shape.tuple_shapes[0] if inst.shape.is_tuple else inst.shape
        if len(idx) != rank or out_shape.rank != rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "reduce-window index rank mismatch")
        try:
            w = parse_window(inst, rank)
        except Exception as e:  # malformed window: decline, the host backend reports it
            raise EmitterUnsupported(inst.opcode, inst.name, f"bad window: {e}") from None
        et = in_shape.element_type
        comp, promoted = self._accumulating_reducer(comp, n, et)
        init_vals = [self.value(i, ()) for i in inits]
        if promoted:
            init_vals = [self.up(init_vals[0], et)]
        accs = [self.ctx.emit(v, f"acc_{inst.name}") for v in init_vals]
        sizes = list(w["size"])
        total = 1
        for sz in sizes:
            total *= sz
        if total == 0 or out_shape.numel == 0:
            accs = self._round_accumulators(accs, promoted, et, inst)
            return accs if inst.shape.is_tuple else accs[0]
        vec = self._window_vector_plan(inst, idx, w, inputs[0])
        if vec is not None:
            self._reduce_window_vectors(inst, idx, w, vec, accs, init_vals, comp, promoted, et)
            accs = self._round_accumulators(accs, promoted, et, inst)
            return accs if inst.shape.is_tuple else accs[0]
        loop = total > 1
        # a window over a parameter read as it is (through index maps only): every access it makes is a masked
        # load, so positions in the padding need no clamped index
        # (computed values too when the window is in no other loop: inside one, a mask per step and window
        # position costs ptxas more registers than the clamped index saves)
        top = len(self._scopes) == 1
        masked = all((loads_only if top else reads_only)(i) for i in inputs) and \
            all(int(b) == 1 for b in w["lhs_dilate"])
        if loop:
            r = self.ctx.names.fresh("rw")
            header_at = len(self.ctx.body.lines)
            self.ctx.body.line(f"for {r} in range(0, {total}):")
            self.ctx.body.indent()
            self.push_scope()
        try:
            pos: list[int | str] = [0] * rank
            if loop:
                rv = self.iexpr(f"{self.ctx.zero} + {r}", "rw")
                stride = 1
                for d in reversed(range(rank)):  # row-major over the window dims
                    if sizes[d] > 1:
                        q = self.idiv(rv, stride)
                        pos[d] = q if stride * sizes[d] == total else self.imod(q, sizes[d])
                    stride *= sizes[d]
            conds: list[str] = []
            src_idx: list[int | str] = []
            for d in range(rank):
                lo = int(w["pad"][d][0])
                st, wd, bd = int(w["stride"][d]), int(w["rhs_dilate"][d]), int(w["lhs_dilate"][d])
                size_d = in_shape.dimensions[d]
                span = (size_d - 1) * bd  # last padded position holding an element
                p = self.isub(self.iadd(self.imul(idx[d], st), self.imul(pos[d], wd)), lo)
                # static range of p: decides which conditions can fail
                pmin = -lo
                pmax = (out_shape.dimensions[d] - 1) * st + (sizes[d] - 1) * wd - lo
                if isinstance(p, int):
                    if p < 0 or p > span or p % bd:
                        conds.append("False")
                    src_idx.append(min(max(p, 0), span) // bd)
                    continue
                parts = []
                if pmin < 0:
                    parts.append(f"({p} >= 0)")
                if pmax > span:
                    parts.append(f"({p} <= {span})")
                if bd > 1:
                    parts.append(f"(({self.iclamp(p, 0, span)} % {bd}) == 0)")
                if parts:
                    conds.append(self.ctx.emit(" & ".join(parts), "inwin"))
                # no base dilation: the position is not clamped, the loads are masked by the window test
                # instead (XLA's kernel branches around a position in the padding)
                q = self.iclamp(p, 0, span) if parts and (bd > 1 or not masked) else p
                src_idx.append(self.idiv(q, bd) if bd > 1 else q)
            if "False" in conds:
                xs = list(init_vals)
            else:
                cond = (conds[0] if len(conds) == 1 else self.ctx.emit(" & ".join(conds), "inwin")) if conds else None
                if cond is not None and masked:
                    with self.masked_by(cond, "mwin"):
                        self.masked_window, outer = top, self.masked_window
                        try:
                            xs = [self.value(i, tuple(src_idx)) for i in inputs]
                        finally:
                            self.masked_window = outer
                else:
                    xs = [self.value(i, tuple(src_idx)) for i in inputs]
                if promoted:
                    xs = [self.up(xs[0], et)]
                if cond is not None:
                    xs = [self.ctx.emit(f"tl.where({cond}, {x}, {iv})", "xw") for x, iv in zip(xs, init_vals)]
            self._combine_into(accs, comp, xs, inst)
        finally:
            if loop:
                self.pop_scope()
                self.ctx.body.dedent()
        if loop:
            self._unroll_loop(header_at, r, total)
        accs = self._round_accumulators(accs, promoted, et, inst)
        return accs if inst.shape.is_tuple else accs[0]

    #: the most padded positions a vectorised window walk reads per window position (a cumsum's 16-wide
    #: windows over a 16-wide row read the row once; a small window sliding over a long row is not vectorised)
    WINDOW_VECTOR_SPAN = 2
    #: the most positions a vectorised walk unrolls (XLA's cumsum kernels unroll 16; a long window keeps the loop)
    WINDOW_VECTOR_MAX = 64

    def _window_vector_plan(self, inst: Instruction, idx: Index, w: dict, src: Instruction) -> tuple | None:
        """``(dim, first, end, parameter, top)`` when the ``reduce-window`` reads its operand's minor dimension
        ``dim`` in contiguous windows (stride-1 positions, no dilation, every other window extent 1) from a fusion
        parameter through converts over bitcasts (``top``: the instruction under the converts; a bitcast keeps
        the physical offset): the padded positions ``[first, end)`` any of the block's windows touch are then
        read as 16-byte vectors of the parameter (:meth:`_reduce_window_vectors`), as XLA's unrolled window loop
        loads them; ``None`` otherwise."""
        if not self.vector_reads_apply() or len(inst.operands) != 2 or inst.shape.is_tuple:
            return None
        wide = [d for d, sz in enumerate(w["size"]) if int(sz) > 1]
        if len(wide) != 1 or any(int(b) != 1 for b in w["lhs_dilate"]):
            return None
        d = wide[0]
        if any((int(w["pad"][e][0]), int(w["pad"][e][1])) != (0, 0) for e in range(len(w["size"])) if e != d):
            return None  # a row in another dimension's padding is the init: the loop's window test says so
        if int(w["rhs_dilate"][d]) != 1:
            return None
        found = _vector_source(src, d)
        if found is None:
            return None
        top, par, _ = found
        et = top.shape.element_type
        size, lo, st = int(w["size"][d]), int(w["pad"][d][0]), int(w["stride"][d])
        if size < 16 // (dtypes.bit_width(et) // 8) or not _init_is_identity(inst):
            return None
        j = idx[d]
        jlo, jhi = (j, j) if isinstance(j, int) else (0, inst.shape.dimensions[d] - 1)
        first, end = max(0, jlo * st - lo), min(top.shape.dimensions[d], jhi * st - lo + size)
        if end <= first or end - first > min(self.WINDOW_VECTOR_SPAN * size, self.WINDOW_VECTOR_MAX):
            return None
        return d, first, end, par, top

    def _reduce_window_vectors(self, inst: Instruction, idx: Index, w: dict, plan: tuple, accs: list[str],
                               init_vals: list[str], comp: Computation, promoted: bool, et: str) -> None:
        """Fold padded positions ``[first, end)`` of the window dimension into ``accs`` in ascending order (the
        order of the window walk). The init value is the reducer's identity (:func:`_init_is_identity`), so a
        position outside this output's window may add it, and the padding the walk would add it for is left
        out, with the walk's result bit for bit. Each 16-byte aligned chunk of the parameter is one
        ``[block, V]`` load (``V`` lanes a thread, contiguous: Triton gives each thread one vector), split into
        its ``V`` columns in registers; the converts above the loaded values are applied per column."""
        d, first, end, par, top = plan
        src = inst.operands[0]
        ctx, em = self.ctx, self.ctx.emit
        size, lo, st = int(w["size"][d]), int(w["pad"][d][0]), int(w["stride"][d])
        base_idx = list(idx)
        base_idx[d] = 0
        for e in range(src.shape.rank):  # every other window dimension has extent 1: position = stride*o - lo
            if e != d:
                base_idx[e] = self.isub(self.imul(idx[e], int(w["stride"][e])), int(w["pad"][e][0]))
        base = self.itensor(self.linearize(tuple(base_idx), top.shape.dimensions, top.shape.minor_to_major()))
        ptr, _ = self.parameter_buffer(par)
        vmax = 16 // (dtypes.bit_width(top.shape.element_type) // 8)
        wstart = None if isinstance(idx[d], int) else self.isub(self.imul(idx[d], st), lo)
        c = first - first % vmax
        while c < end:
            v = vmax
            while c + v > top.shape.dimensions[d] and v > 1:
                v //= 2
            for k, x in enumerate(self.vector_load(ptr, self.itensor(self.iadd(base, c)), v, top.name)):
                p = c + k
                if wstart is None and not idx[d] * st - lo <= p < idx[d] * st - lo + size:
                    continue  # outside the static window [s0, s0 + size)
                if p < first or p >= end:
                    continue
                at = tuple(base_idx[:d]) + (p,) + tuple(base_idx[d + 1:])
                self.bind_value(top, at, x)
                xs = [self.value(src, at)]  # the converts over the column
                if promoted:
                    xs = [self.up(xs[0], et)]
                if wstart is not None:
                    cond = em(f"({wstart} <= {p}) & ({wstart} > {p - size})", "inwin")
                    xs = [em(f"tl.where({cond}, {xs[0]}, {init_vals[0]})", "xw")]
                self._combine_into(accs, comp, xs, inst)
            c += v


#: reducer root -> its identity (``None``: depends on the type: the lowest / highest value)
_IDENTITIES = MappingProxyType({"add": 0, "multiply": 1, "or": 0, "xor": 0, "maximum": None, "minimum": None})


def _vector_source(src: Instruction, d: int) -> tuple[Instruction, Instruction, int] | None:
    """``(top, parameter, converts)`` when ``src`` reads a fusion parameter through ``converts`` converts between
    plain vector types (:func:`plain_vector_type`) over same-type bitcasts, and dimension ``d`` is the minor one of
    ``top`` (the instruction under the converts): the reads a vector load may serve; ``None`` otherwise."""
    top, converts = src, 0
    while top.opcode == "convert" and plain_vector_type(top.shape.element_type) and \
            plain_vector_type(top.operands[0].shape.element_type):
        top, converts = top.operands[0], converts + 1
    et = top.shape.element_type
    if top.shape.minor_to_major()[0] != d or not plain_vector_type(et):
        return None
    par = top
    while par.opcode == "bitcast" and par.operands[0].shape.element_type == et:
        par = par.operands[0]
    if par.opcode != "parameter" or par.shape.is_tuple:
        return None
    return top, par, converts


def _peel_converts(x: Instruction) -> Instruction:
    while x.opcode == "convert" and x.operands:
        x = x.operands[0]
    return x


def _init_is_identity(inst: Instruction) -> bool:
    """Whether ``inst`` (a single-operand ``reduce-window``) starts from its reducer's identity: add 0, multiply
    1, or/xor 0, maximum the type's lowest value (-inf for floats), minimum its highest. Folding the identity
    changes no accumulator (an add started at +0 never holds -0), so the init may stand for positions outside
    a window and the padding may be left out."""
    import numpy as np

    comp, init = inst.attrs.get("to_apply"), _peel_converts(inst.operands[1])
    # converts around the reducer's op (a bf16 max applied to f32 accumulators) keep the identity: every
    # accumulator is the init or a converted result, so it survives the round trip exactly
    root = _peel_converts(comp.root) if isinstance(comp, Computation) and comp.root is not None else None
    if root is None or root.opcode not in _IDENTITIES or init.opcode != "constant" or init.shape.rank != 0 or \
            sorted(_peel_converts(o).opcode for o in root.operands) != ["parameter", "parameter"] or \
            len({_peel_converts(o).parameter_number for o in root.operands}) != 2:
        return False  # op(b, b) is no combiner with an identity: the padding's count would matter
    et = init.shape.element_type
    try:
        v = np.asarray(parse_constant(init)).reshape(-1)[0]
    except Exception:  # noqa: BLE001 - an unreadable constant is simply not the identity
        return False
    want = _IDENTITIES[root.opcode]
    if want is not None:
        return bool(v == want)  # +0 or -0 for add: neither changes an accumulator
    hi = root.opcode == "minimum"
    if et.startswith(("f", "bf")):
        return bool(np.isinf(v) and (v > 0) == hi)
    info = np.iinfo(dtypes.numpy_dtype(et))
    return int(v) == (info.max if hi else info.min)


_LOOPS = frozenset({"reduce", "dot", "reduce-window"})


def _holds_loop(inst: Instruction) -> bool:
    """Whether computing ``inst`` elementally runs a loop (a reduce, dot or reduce-window in its operands)."""
    todo, seen = [inst], set()
    while todo:
        x = todo.pop()
        if x.opcode in _LOOPS:
            return True
        if id(x) not in seen:
            seen.add(id(x))
            todo.extend(x.operands)
    return False
