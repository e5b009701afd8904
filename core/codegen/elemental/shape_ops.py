"""Data-movement ops: constant, iota, broadcast, reshape/bitcast, copy, transpose, slice, reverse,
pad, concatenate, dynamic-slice/update-slice, gather, tuple, get-tuple-element.

Mirrors the pure index transformations of XLA's ``elemental_hlo_to_mlir.cc``."""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction
from fusegen.codegen.elemental.reads import loads_only, reads_only
from fusegen.codegen.elemental.common import (COMPLEX_PARTS, Cx, Index, _LOW_FLOATS, _nest, int_list,
                                              is_float, parse_constant)


#: Ops whose value is their operand's at another index (one pure indexing map): a concatenate reads a parameter
#: through them with one load (ShapeOpsMixin._concatenate_pointers).
_INDEX_ONLY = frozenset({"slice", "reverse", "transpose", "broadcast", "copy"})


class ShapeOpsMixin:
    """Data-movement ops of :class:`ElementalGenerator` (a mixin; see the module docstring)."""

    def _constant(self, inst: Instruction, idx: Index) -> Any:
        et = inst.shape.element_type
        val = parse_constant(inst)
        if val.size == 1 and et in COMPLEX_PARTS:
            x = complex(val.reshape(-1)[0])
            pt = COMPLEX_PARTS[et]
            return Cx((self.ctx.emit(ts.float_constant(x.real, pt, self.ctx.block_shape), f"{inst.name}_re"),
                       self.ctx.emit(ts.float_constant(x.imag, pt, self.ctx.block_shape), f"{inst.name}_im")))
        if val.size == 1:
            x = val.reshape(-1)[0]
            if et == "pred":
                return self.ctx.emit(ts.int_constant(bool(x), "pred", self.ctx.block_shape), inst.name)
            if et in ts.BIT_FLOAT_TYPES:  # its storage byte
                byte = int(np.asarray(x).astype(dtypes.numpy_dtype(et)).reshape(1).view(np.uint8)[0])
                return self.ctx.emit(ts.int_constant(byte, "u8", self.ctx.block_shape), inst.name)
            if is_float(et):
                return self.ctx.emit(ts.float_constant(float(np.asarray(x).astype(np.float64)), et, self.ctx.block_shape), inst.name)
            return self.ctx.emit(ts.int_constant(int(x), et, self.ctx.block_shape), inst.name)
        ptr = self.ctx.constant_param(inst, val)
        return self._load(ptr, inst.shape, idx, inst)

    def _iota(self, inst: Instruction, idx: Index) -> str:
        d = int(inst.attrs.get("iota_dimension", 0))
        c = self.itensor(idx[d])
        et = inst.shape.element_type
        n = inst.shape.dimensions[d]
        if isinstance(c, str) and n > 1 and n & (n - 1) == 0:
            # the index is in [0, n): `& (n - 1)` (folded into a power-of-two remainder) tells LLVM the value is
            # non-negative, so signed remainders and compares on it fold as in XLA's kernel (w_iota_cmp)
            c = self.ctx.emit(f"{c} & {n - 1}", "iv")
        if et == "pred":
            return self.ctx.emit(f"{c} != 0", inst.name)
        if et in _LOW_FLOATS:
            return self.ctx.emit(f"{c}.to(tl.float32).to({self.tl(et)})", inst.name)
        # s4 / u4 live in a byte: the narrowing wraps there, not at 4 bits (an s4 iota of 16 is 0..7, -8..-1)
        return self.wrap_subbyte(self.ctx.emit(f"{c}.to({self.tl(et)})", inst.name), et, inst.name)

    # --------------------------------------------------------------------------- index transforms
    def _through_map(self, inst: Instruction, idx: Index) -> Any:
        """The operand's value at the index ``inst``'s output-to-input indexing map gives (a pure index
        transformation: broadcast, transpose, slice, reverse)."""
        return self.value(inst.operands[0], self.apply_map(self.operand_map(inst, 0), idx, inst))

    def _reshape(self, inst: Instruction, idx: Index) -> Any:
        """The operand at the index the reshape's map gives (:meth:`shape_map`); the linearize /
        delinearize of the row-major linear index where the map is not one pure map."""
        src = inst.operands[0]
        if src.shape.element_type != inst.shape.element_type:
            raise EmitterUnsupported(inst.opcode, inst.name, "reshape changes the element type")
        out_rm = tuple(range(inst.shape.rank - 1, -1, -1))
        in_rm = tuple(range(src.shape.rank - 1, -1, -1))
        m = self.shape_map(inst)
        if m is not None:
            return self.value(src, self.apply_shape_map(m, idx, inst, out_rm, in_rm))
        lin = self.linearize(idx, inst.shape.dimensions, out_rm)
        return self.value(src, self.delinearize(lin, src.shape.dimensions, in_rm))

    def _bitcast(self, inst: Instruction, idx: Index) -> Any:
        """Like :meth:`_reshape`, on the physical (layout) order: a transpose bitcast is a permutation, a
        layout-changing one transpose-reshape-transpose (``bitcast_map``); the element type may be
        reinterpreted between types of one width."""
        src = inst.operands[0]
        s_et, d_et = src.shape.element_type, inst.shape.element_type
        if dtypes.bit_width(s_et) != dtypes.bit_width(d_et):
            return self._bitcast_widths(inst, idx)
        if src.shape.numel != inst.shape.numel:
            raise EmitterUnsupported(inst.opcode, inst.name, "bitcast changes the element count")
        m = self.shape_map(inst)
        if m is not None:
            src_idx = self.apply_shape_map(m, idx, inst, tuple(inst.shape.minor_to_major()),
                                           tuple(src.shape.minor_to_major()))
        else:
            lin = self.linearize(idx, inst.shape.dimensions, inst.shape.minor_to_major())
            src_idx = self.delinearize(lin, src.shape.dimensions, src.shape.minor_to_major())
        v = self.value(src, src_idx)
        if s_et != d_et:
            return self._reinterpret(v, s_et, d_et, inst)
        return v

    def _bitcast_widths(self, inst: Instruction, idx: Index) -> str:
        """A ``bitcast`` that reinterprets the buffer as a type of another width (``f32[1000] -> u8[1000,4]``,
        what ``bitcast-convert`` becomes once layouts are assigned): output element ``i`` in physical order is
        bits ``[i * dw, (i + 1) * dw)`` of the buffer, little-endian, so narrowing takes one lane of source
        element ``i // r`` (``r = sw / dw``; lane ``i % r``, shifted and masked) and widening ORs ``r`` source
        elements ``i * r + k`` into place. The same lane arithmetic as ``bitcast-convert`` between widths;
        integer-lane types only (no pred, complex, sub-byte or bit-level float types)."""
        src = inst.operands[0]
        s_et, d_et = src.shape.element_type, inst.shape.element_type
        sw, dw = dtypes.bit_width(s_et), dtypes.bit_width(d_et)
        odd = {"pred", "c64", "c128"} | set(ts.BIT_FLOAT_TYPES)
        if s_et in odd or d_et in odd or min(sw, dw) < 8 or src.shape.numel * sw != inst.shape.numel * dw:
            raise EmitterUnsupported(inst.opcode, inst.name, f"bitcast {s_et}{list(src.shape.dimensions)} -> "
                                                            f"{d_et}{list(inst.shape.dimensions)}")
        em = self.ctx.emit
        lin = self.linearize(idx, inst.shape.dimensions, inst.shape.minor_to_major())
        s_dims, s_m2m = src.shape.dimensions, src.shape.minor_to_major()
        if sw > dw:  # narrowing: one lane of a wider source element
            r = sw // dw
            x = self.value(src, self.delinearize(self.idiv(lin, r), s_dims, s_m2m))
            xb = em(f"{x}.to(tl.uint{sw}, bitcast=True)", "bcn")
            lane = self.itensor(self.imod(lin, r))
            part = em(f"(({xb} >> ({lane}.to(tl.uint{sw}) * {dw})) & {(1 << dw) - 1}).to(tl.uint{dw})", "bcn")
            return self.emit(f"{part}.to({self.tl(d_et)}, bitcast=True)", inst)
        acc = None
        r = dw // sw
        for k in range(r):  # widening: OR r narrower source elements into place
            xk = self.value(src, self.delinearize(self.iadd(self.imul(lin, r), k), s_dims, s_m2m))
            term = em(f"({xk}.to(tl.uint{sw}, bitcast=True).to(tl.uint{dw}) << {k * sw})", "bcw")
            acc = term if acc is None else em(f"{acc} | {term}", "bcw")
        return self.emit(f"{acc}.to({self.tl(d_et)}, bitcast=True)", inst)

    def _reinterpret(self, v: str, s_et: str, d_et: str, inst: Instruction) -> str:
        if "pred" in (s_et, d_et) or dtypes.bit_width(s_et) < 8 or s_et in COMPLEX_PARTS or d_et in COMPLEX_PARTS:
            raise EmitterUnsupported(inst.opcode, inst.name, f"bit reinterpretation {s_et} -> {d_et}")
        return self.ctx.emit(f"{v}.to({self.tl(d_et)}, bitcast=True)", inst.name)

    def _copy(self, inst: Instruction, idx: Index) -> Any:
        return self.value(inst.operands[0], idx)

    _broadcast = _transpose = _reverse = _through_map

    def _slice(self, inst: Instruction, idx: Index) -> Any:
        """:meth:`_through_map`; a strided slice of a parameter's minor dimension first binds the whole group of
        ``stride`` neighbours as one vector (:meth:`bind_strided_group`: the even and odd halves of an
        interleaved rotary embedding are one load)."""
        src_idx = self.apply_map(self.operand_map(inst, 0), idx, inst)
        self.bind_strided_group(inst, idx, src_idx)
        self._slice_linear(inst, idx, src_idx)
        return self.value(inst.operands[0], src_idx)

    def _slice_linear(self, inst: Instruction, idx: Index, src_idx: Index) -> None:
        """Record the source's linear position of a slice that keeps every dimension but the minor one, taken
        with stride ``s`` from offset ``start < s`` over the whole row: ``s * L + start`` for the output's linear
        index ``L`` (``x[:, ::2]``: ``2 * lin``, not ``2 * (lin % 512) + 1024 * (lin // 512)``), so loads of
        the source index by it."""
        src = inst.operands[0]
        dims, m2m = tuple(inst.shape.dimensions), tuple(inst.shape.minor_to_major())
        sdims, sm2m = tuple(src.shape.dimensions), tuple(src.shape.minor_to_major())
        if m2m != sm2m or not dims or inst.shape.is_tuple:
            return
        lin = self._lookup(self._lin_of, (tuple(idx), dims, m2m))
        parts = inst.attrs.get("slice") or []  # (start, limit, stride) a dimension, as the slice's map read it
        if lin is None or len(parts) != len(dims):
            return
        d = m2m[0]
        for e, (lo, hi, st) in enumerate(parts):
            if e != d and (lo, hi, st) != (0, sdims[e], 1):
                return
        lo, _, st = parts[d]
        if st < 2 or lo >= st or dims[d] * st != sdims[d]:
            return
        self._lin_of[-1].setdefault((tuple(src_idx), sdims, sm2m), self.iadd(self.imul(lin, st), lo))

    def _pad(self, inst: Instruction, idx: Index) -> Any:
        """``pad`` from its output-to-operand map (``fusegen.indexing.analysis_shapes.pad_map``, XLA's
        ``ComputePadIndexingMap``): the map's domain is the set of output points that read the operand (low /
        high edges, negative padding, and the interior stride as ``(d - lo) mod (interior + 1) in [0, 0]``),
        its results the operand index there; every other point is the padding value."""
        src, pv = inst.operands
        if src.shape.numel == 0:
            return self.value(pv, ())
        m = self.operand_map(inst, 0)
        cond, cidx = self.domain_test(m, idx, inst)
        if cond is False:
            return self.value(pv, ())
        # computed values too at the top of the kernel or in a window masked there (see _reduce_window)
        reads = loads_only if len(self._scopes) == 1 or self.masked_window else reads_only
        if isinstance(cond, str) and not m.constraints and reads(src) and self.bindings is None:
            # a parameter read through index maps: the loads are masked by the domain test instead of reading
            # at a clamped index (XLA's kernel branches around the padding), so the index is the map's own
            with self.masked_by(cond, "mpad"):
                inner = self.value(src, self.apply_map(m, idx, inst))
            return self.where(cond, inner, self.value(pv, ()), inst.name)
        inner = self.value(src, self.apply_map(m, cidx, inst))
        if cond is True:
            return inner
        return self.where(cond, inner, self.value(pv, ()), inst.name)

    def _concatenate(self, inst: Instruction, idx: Index) -> Any:
        k = int_list(inst.attrs.get("dimensions"))[0]
        offsets = []
        off = 0
        for o in inst.operands:
            offsets.append(off)
            off += o.shape.dimensions[k]
        ck = idx[k]
        if isinstance(ck, int):
            for o, start in zip(inst.operands, offsets):
                if start <= ck < start + o.shape.dimensions[k]:
                    return self.value(o, idx[:k] + (ck - start,) + idx[k + 1:])
        selected = self._concatenate_pointers(inst, idx, k, offsets)
        if selected is not None:
            return selected
        result = None
        for o, start in reversed(list(zip(inst.operands, offsets))):
            size = o.shape.dimensions[k]
            if size == 0:
                continue
            local = self.iclamp(self.isub(ck, start), 0, size - 1)
            v = self.value(o, idx[:k] + (local,) + idx[k + 1:])
            if result is None:
                result = v
            else:
                result = self.where(f"{ck} < {start + size}", v, result, inst.name)
        if result is None:
            raise EmitterUnsupported(inst.opcode, inst.name, "empty concatenate")
        return result

    def _concatenate_pointers(self, inst: Instruction, idx: Index, k: int, offsets: list[int]) -> Any | None:
        """A concatenate's operands that read a fusion parameter through index transforms only (slice, reverse,
        transpose, broadcast, copy; the parameter itself) as one load through the selected operand's pointer,
        as XLA's elemental emitter branches to the operand and loads once (``EmitElementalConcatenate``: one
        ``ld.global`` a thread whatever the operand count); an operand computed otherwise is computed and
        selected where it lies. ``None`` (select every loaded value) when fewer than two operands are such
        reads, or the type is loaded other than plainly."""
        if self.bindings is not None or self.ctx.runs is not None or self.ctx.steps is not None:
            return None
        et = inst.shape.element_type
        if et in COMPLEX_PARTS or et in ts.BIT_FLOAT_TYPES or et == "pred" or dtypes.bit_width(et) < 8:
            return None
        ops = [(o, start) for o, start in zip(inst.operands, offsets) if o.shape.dimensions[k]]
        reads = [(o, start) for o, start in ops if self._parameter_read(o) is not None]
        if len(reads) < 2:
            return None
        ck, sel = idx[k], None
        for o, start in reversed(reads):
            local = idx[:k] + (self.isub(ck, start),) + idx[k + 1:]  # not clamped: only the selected address is read
            par = o
            while par.opcode != "parameter":
                local = self.apply_map(self.operand_map(par, 0), local, par)
                par = par.operands[0]
            ptr, shape = self.parameter_buffer(par)
            off = self.itensor(self.linearize(local, shape.dimensions, shape.minor_to_major()))
            p = self.ctx.emit(f"{ptr} + {off}", "ptr")
            end = start + o.shape.dimensions[k]
            sel = p if sel is None else self.ctx.emit(f"tl.where({ck} < {end}, {p}, {sel})", "ptr")
        other = "" if et.startswith("f8") else ", other=0"
        computed = [(o, start) for o, start in ops if (o, start) not in reads]
        mask = self.ctx.mask
        if computed:  # lanes of a computed operand read nothing here
            outside = " & ".join(f"(({ck} < {start}) | ({ck} >= {start + o.shape.dimensions[k]}))"
                                 for o, start in computed)
            mask = self.ctx.emit(f"{mask} & {outside}", "cmask")
        result = self.ctx.emit(f"tl.load({sel}, mask={mask}{other})", inst.name)
        for o, start in reversed(computed):
            size = o.shape.dimensions[k]
            v = self.value(o, idx[:k] + (self.iclamp(self.isub(ck, start), 0, size - 1),) + idx[k + 1:])
            result = self.where(f"({ck} >= {start}) & ({ck} < {start + size})", v, result, inst.name)
        return result

    def _parameter_read(self, o: Instruction) -> Instruction | None:
        """The fusion parameter ``o`` reads through index transforms only (each one pure output-to-operand
        map, the element type kept), else ``None``."""
        while o.opcode != "parameter":
            if (o.opcode not in _INDEX_ONLY or len(o.operands) != 1 or o.shape.is_tuple
                    or o.operands[0].shape.element_type != o.shape.element_type):
                return None
            try:
                self.operand_map(o, 0)
            except EmitterUnsupported:
                return None
            o = o.operands[0]
        return None if o.shape.is_tuple else o

    def _dynamic_slice(self, inst: Instruction, idx: Index) -> Any:
        src = inst.operands[0]
        starts = inst.operands[1:]
        if len(starts) != src.shape.rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "dynamic-slice needs one scalar start per dimension")
        src_idx = []
        for d, s in enumerate(starts):
            hi = src.shape.dimensions[d] - inst.shape.dimensions[d]
            st = self.scalar_index(s, 0, hi)
            src_idx.append(self.iadd(idx[d], st))
        return self.value(src, tuple(src_idx))

    def dus_starts(self, inst: Instruction) -> list[int | str]:
        """Clamped start indices of a dynamic-update-slice (``[0, dim - update_dim]``, as XLA)."""
        src, upd = inst.operands[0], inst.operands[1]
        starts = inst.operands[2:]
        if len(starts) != src.shape.rank:
            raise EmitterUnsupported(inst.opcode, inst.name, "dynamic-update-slice needs one scalar start per dimension")
        out = []
        for d, s in enumerate(starts):
            hi = src.shape.dimensions[d] - upd.shape.dimensions[d]
            out.append(self.scalar_index(s, 0, hi))
        return out

    def _dynamic_update_slice(self, inst: Instruction, idx: Index) -> Any:
        src, upd = inst.operands[0], inst.operands[1]
        if upd.shape.numel == 0:
            return self.value(src, idx)
        starts = self.dus_starts(inst)
        conds = []
        upd_idx = []
        for d, st in enumerate(starts):
            size = upd.shape.dimensions[d]
            rel = self.isub(idx[d], st)
            if isinstance(rel, int):
                if not (0 <= rel < size):
                    return self.value(src, idx)
                upd_idx.append(rel)
                continue
            conds.append(f"({rel} >= 0) & ({rel} < {size})")
            upd_idx.append(self.iclamp(rel, 0, size - 1))
        u = self.value(upd, tuple(upd_idx))
        base = self.value(src, idx)
        if not conds:
            return u
        cond = self.ctx.emit(" & ".join(conds), "inupd")
        return self.where(cond, u, base, inst.name)

    def _gather(self, inst: Instruction, idx: Index) -> Any:
        a = inst.attrs
        operand, indices = inst.operands
        # batching dims (StableHLO, what JAX emits for take_along_axis): operand dim operand_batching_dims[k]
        # is read at the output's batch coordinate of indices dim start_indices_batching_dims[k]
        op_batch = int_list(a.get("operand_batching_dims"))
        idx_batch = int_list(a.get("start_indices_batching_dims"))
        if len(op_batch) != len(idx_batch):
            raise EmitterUnsupported(inst.opcode, inst.name, "operand and start-indices batching dims differ in number")
        offset_dims = int_list(a.get("offset_dims"))
        collapsed = int_list(a.get("collapsed_slice_dims"))
        start_map = int_list(a.get("start_index_map"))
        ivd = int(a.get("index_vector_dim", indices.shape.rank)) if not isinstance(a.get("index_vector_dim"), str) \
            else int(a.get("index_vector_dim"))
        sizes = int_list(a.get("slice_sizes"))
        out_rank = inst.shape.rank
        batch_dims = [d for d in range(out_rank) if d not in offset_dims]
        batch_idx = [idx[d] for d in batch_dims]
        starts: dict[int, Any] = {}
        for k, od in enumerate(start_map):
            if ivd < indices.shape.rank:
                ii = batch_idx[:ivd] + [k] + batch_idx[ivd:]
            else:
                ii = list(batch_idx)
            if len(ii) != indices.shape.rank:
                raise EmitterUnsupported(inst.opcode, inst.name, "unexpected gather index rank")
            v = self.value(indices, tuple(ii))
            if not dtypes.is_integral(indices.shape.element_type):
                raise EmitterUnsupported(inst.opcode, inst.name, "gather indices must be integers")
            starts[od] = self.to_index(v, indices.shape.element_type, 0, operand.shape.dimensions[od] - sizes[od])
        # indices dim -> position among the batch coordinates (the indices dims other than index_vector_dim)
        batch_of = {sd: sd - (1 if sd > ivd else 0) for sd in idx_batch}
        src_idx = []
        j = 0
        for d in range(operand.shape.rank):
            base = starts.get(d, 0)
            if d in op_batch:
                pos = batch_of[idx_batch[op_batch.index(d)]]
                if pos >= len(batch_idx):
                    raise EmitterUnsupported(inst.opcode, inst.name, "gather batching dim out of range")
                src_idx.append(batch_idx[pos])
            elif d in collapsed:
                src_idx.append(base)
            else:
                if j >= len(offset_dims):
                    raise EmitterUnsupported(inst.opcode, inst.name, "gather offset dims do not match")
                src_idx.append(self.iadd(base, idx[offset_dims[j]]))
                j += 1
        return self.value(operand, tuple(src_idx))

    # ---------------------------------------------------------------------------- tuples & calls
    def _tuple(self, inst: Instruction, idx: Index) -> Any:
        return [self.value(o, idx) if not o.shape.is_tuple else self.value(o, idx) for o in inst.operands]

    def _gte(self, inst: Instruction, idx: Index) -> Any:
        # Follow get-tuple-element / tuple chains to the element itself, so only that element is read
        # (tuple elements may have other shapes than the one indexed here).
        path = [int(inst.attrs.get("index", 0))]
        src = inst.operands[0]
        while True:
            if src.opcode == "get-tuple-element":
                path.insert(0, int(src.attrs.get("index", 0)))
                src = src.operands[0]
            elif src.opcode == "tuple" and path:
                src = src.operands[path.pop(0)]
                if not path:
                    return self.value(src, idx)
            else:
                break
        if src.opcode == "parameter" and self.bindings is None and src.shape.is_tuple:
            shape, leaf = src.shape, 0
            for k in path:
                subs = shape.tuple_shapes or ()
                leaf += sum(len(t.leaves()) for t in subs[:k])
                shape = subs[k]
            if shape.is_tuple:
                n = len(shape.leaves())
                return _nest(shape, iter([self.tuple_parameter_leaf(src, leaf + j, idx) for j in range(n)]))
            return self.tuple_parameter_leaf(src, leaf, idx)
        v = self.value(inst.operands[0], idx)
        if not isinstance(v, list):
            raise EmitterUnsupported(inst.opcode, inst.name, "get-tuple-element of a non-tuple value")
        return v[int(inst.attrs.get("index", 0))]
