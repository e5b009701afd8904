"""Type conversions: convert (saturating float->int), bitcast-convert, reduce-precision."""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegen.codegen import triton_source as ts
from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction
from fusegen.codegen.elemental import narrow_float
from fusegen.codegen.elemental.narrow_float import BIT_FLOATS
from fusegen.codegen.elemental.common import COMPLEX_PARTS, Cx, Index, _LOW_FLOATS, _int_range, is_float


class ConvertMixin:
    """Type conversions of :class:`ElementalGenerator` (a mixin; see the module docstring)."""

    def _convert(self, inst: Instruction, idx: Index) -> str:
        (x,) = self._operands(inst, idx)
        src = inst.operands[0].shape.element_type
        dst = inst.shape.element_type
        return self.convert(x, src, dst, inst)

    def convert(self, x: Any, src: str, dst: str, inst: Instruction) -> Any:
        """``convert`` with XLA semantics (saturating float->int, NaN->0, !=0 to pred); to a complex type
        the value becomes the real part, between complex types each part converts."""
        if src == dst:
            return x
        if dst in COMPLEX_PARTS:
            part = COMPLEX_PARTS[dst]
            if src in COMPLEX_PARTS:
                return Cx((self.convert(x.re, COMPLEX_PARTS[src], part, inst),
                           self.convert(x.im, COMPLEX_PARTS[src], part, inst)))
            return Cx((self.convert(x, src, part, inst), self.ctx.emit(ts.float_constant(0.0, part, self.ctx.block_shape), "k")))
        if src in COMPLEX_PARTS:
            raise EmitterUnsupported(inst.opcode, inst.name, f"convert {src} -> {dst}")
        if src in BIT_FLOATS:  # exact in f32, then f32's rules
            return self.convert(self.up(x, src), "f32", dst, inst)
        if dst in BIT_FLOATS:
            if src in ("f32", "f64"):
                return narrow_float.encode(self.ctx.emit, x, src, dst)
            if is_float(src):
                return narrow_float.encode(self.ctx.emit, self.up(x, src), "f32", dst)
            # integers and pred through f64, as the reference converts them (exact up to 32 bits)
            wide = self.emit(f"{x}.to(tl.float64)", inst)
            return narrow_float.encode(self.ctx.emit, wide, "f64", dst)
        if dst == "pred":
            if is_float(src):
                xc = self.up(x, src)
                return self.emit(f"{xc} != 0", inst)
            return self.emit(f"{x} != 0", inst)
        td = self.tl(dst)
        if src == "pred":
            if dst in _LOW_FLOATS:
                return self.emit(f"{x}.to(tl.float32).to({td})", inst)
            return self.emit(f"{x}.to({td})", inst)
        if is_float(src) and is_float(dst):
            if src in _LOW_FLOATS and dst in _LOW_FLOATS:
                xc = self.up(x, src)
                return self.emit(f"{xc}.to({td})", inst)
            return self.emit(f"{x}.to({td})", inst)
        if is_float(src):  # float -> int: saturate, NaN -> 0
            xc = self.up(x, src)
            ce = self.compute_type(src)
            fdt = np.float64 if ce == "f64" else np.float32
            lo, hi = _int_range(dst)
            hi_f = float(fdt(hi))
            if hi_f > hi:
                hi_f = float(np.nextafter(fdt(hi_f), fdt(0)))
            lo_f = float(fdt(lo))
            ct = self.tl(ce)
            xn = self.ctx.emit(f"tl.where({xc} != {xc}, tl.full({self.ctx.block_shape}, 0.0, {ct}), {xc})", "cvn")
            xcl = self.ctx.emit(f"tl.minimum(tl.maximum({xn}, {ts.float_literal(lo_f)}), {ts.float_literal(hi_f)})", "cvc")
            store_t = self.tl(dst) if dst not in ("s4", "s2", "u4", "u2") else self.tl(dst)
            r = self.ctx.emit(f"{xcl}.to({store_t})", "cvi")
            top = ts.float_literal(float(hi) + 1.0)
            return self.emit(f"tl.where({xn} >= {top}, tl.full({self.ctx.block_shape}, {hi}, {td}), {r})", inst)
        if is_float(dst):  # int -> float
            if dst in _LOW_FLOATS:
                return self.emit(f"{x}.to(tl.float32).to({td})", inst)
            return self.emit(f"{x}.to({td})", inst)
        r = self.emit(f"{x}.to({td})", inst)  # int -> int: truncate / extend by the source's signedness
        return self.wrap_subbyte(r, dst, inst.name)

    def _bitcast_convert(self, inst: Instruction, idx: Index) -> str:
        src = inst.operands[0].shape.element_type
        dst = inst.shape.element_type
        if inst.operands[0].shape.dimensions != inst.shape.dimensions or dtypes.bit_width(src) != dtypes.bit_width(dst):
            return self._bitcast_between_widths(inst, idx, src, dst)
        (x,) = self._operands(inst, idx)
        if src == dst:
            return x
        return self._reinterpret(x, src, dst, inst)

    def _bitcast_between_widths(self, inst: Instruction, idx: Index, src: str, dst: str) -> str:
        """``bitcast-convert`` between widths, little-endian as XLA defines it: narrowing adds a minor dimension
        (element ``j`` of it is bits ``[j * w, (j + 1) * w)`` of the source element), widening folds the source's
        minor dimension into one element. Types with a Triton integer of their width only (no pred, complex,
        sub-byte or bit-level float types)."""
        sw, dw = dtypes.bit_width(src), dtypes.bit_width(dst)
        sdims, ddims = tuple(inst.operands[0].shape.dimensions), tuple(inst.shape.dimensions)
        odd = {"pred", "c64", "c128"} | set(ts.BIT_FLOAT_TYPES)
        if src in odd or dst in odd or min(sw, dw) < 8 or (sw > dw and sdims + (sw // dw,) != ddims) or (
                sw < dw and ddims + (dw // sw,) != sdims) or sw == dw:
            raise EmitterUnsupported(inst.opcode, inst.name, f"bitcast-convert {src}{list(sdims)} -> {dst}{list(ddims)}")
        em = self.ctx.emit
        if sw > dw:  # narrowing
            x = self.value(inst.operands[0], tuple(idx[:-1]))
            xb = em(f"{x}.to(tl.uint{sw}, bitcast=True)", "bcn")
            j = self.itensor(idx[-1])
            part = em(f"(({xb} >> ({j}.to(tl.uint{sw}) * {dw})) & {(1 << dw) - 1}).to(tl.uint{dw})", "bcn")
            return self.emit(f"{part}.to({self.tl(dst)}, bitcast=True)", inst)
        acc = None
        for k in range(dw // sw):  # widening: OR the source bytes (or words) into place
            xk = self.value(inst.operands[0], tuple(idx) + (k,))
            term = em(f"({xk}.to(tl.uint{sw}, bitcast=True).to(tl.uint{dw}) << {k * sw})", "bcw")
            acc = term if acc is None else em(f"{acc} | {term}", "bcw")
        return self.emit(f"{acc}.to({self.tl(dst)}, bitcast=True)", inst)

    def _reduce_precision(self, inst: Instruction, idx: Index) -> str:
        (x,) = self._operands(inst, idx)
        et = inst.shape.element_type
        if not is_float(et):
            raise EmitterUnsupported(inst.opcode, inst.name, f"reduce-precision on {et}")
        eb = int(inst.attrs.get("exponent_bits", 8))
        mb = int(inst.attrs.get("mantissa_bits", 23))
        ce = "f64" if et == "f64" else "f32"
        xc = self.up(x, et)
        nbits, nexp, nman = (64, 11, 52) if ce == "f64" else (32, 8, 23)
        ut = f"tl.uint{nbits}"
        v = self.ctx.emit(f"{xc}.to({ut}, bitcast=True)", "rp")
        if mb < nman:
            last = 1 << (nman - mb)
            bias = (last >> 1) - 1
            trunc_mask = ((1 << nbits) - 1) & ~(last - 1)
            lastbit = self.ctx.emit(f"({v} & {last}) >> {nman - mb}", "rp")
            v = self.ctx.emit(f"({v} + ({lastbit} + {bias})) & {trunc_mask}", "rp")
        if eb < nexp:
            sign_mask = 1 << (nbits - 1)
            exp_mask = ((1 << nexp) - 1) << nman
            ebias = (1 << (nexp - 1)) - 1
            rbias = (1 << (eb - 1)) - 1
            max_e = (ebias + rbias) << nman
            min_e = (ebias - rbias) << nman
            e = self.ctx.emit(f"{v} & {exp_mask}", "rpe")
            sz = self.ctx.emit(f"{v} & {sign_mask}", "rps")
            v = self.ctx.emit(f"tl.where({e} > {max_e}, {sz} | {exp_mask}, tl.where({e} <= {min_e}, {sz}, {v}))", "rp")
        r = self.ctx.emit(f"{v}.to({self.tl(ce)}, bitcast=True)", "rp")
        r = self.emit(f"tl.where({xc} != {xc}, {xc}, {r})", inst)
        return self.down(r, et, inst.name)
