"""Elementwise arithmetic, bitwise, shift, unary, compare, select and clamp ops, with XLA:GPU's
integer-division, shift and NaN semantics."""

from __future__ import annotations

import math
from typing import Any, Callable

from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction
from fusegen.codegen.elemental.common import COMPLEX_PARTS, Cx, Index, _CMP, _int_range, is_float, parse_constant


def scalar_int_constant(inst: Instruction) -> int | None:
    """The value (a Python int) of an integer operand that is one scalar ``constant`` reached through broadcast,
    reshape, copy and same-type bitcast, else ``None`` (also for an elided or unparsable literal). Used where
    XLA's guards depend on an operand's value: its integer division (``ElementalIrEmitter::EmitIntegerDivide`` /
    ``EmitIntegerRemainder`` in xla/service/elemental_ir_emitter.cc) selects around a zero and a ``MIN / -1``
    divisor, and with a constant divisor LLVM folds the selects away in XLA's kernel."""
    et = inst.shape.element_type
    while inst.opcode in ("broadcast", "reshape", "copy", "bitcast") and len(inst.operands) == 1:
        inst = inst.operands[0]
        if inst.shape.element_type != et:
            return None
    if inst.opcode != "constant" or not inst.shape.is_array or inst.shape.numel != 1 or not dtypes.is_integral(et):
        return None
    try:
        return int(parse_constant(inst).reshape(-1)[0])
    except EmitterUnsupported:
        return None


class ElementwiseMixin:
    """Elementwise, bitwise, compare, select, clamp ops of :class:`ElementalGenerator` (a mixin)."""

    # ------------------------------------------------------------------------------- elementwise
    def _operands(self, inst: Instruction, idx: Index) -> list[str]:
        vals = [self.value(o, idx) for o in inst.operands]
        for v, o in zip(vals, inst.operands):
            if isinstance(v, list):
                raise EmitterUnsupported(inst.opcode, inst.name, "tuple operand to an elementwise op")
        return vals

    def _unary_math(self, inst: Instruction, idx: Index, fn: str) -> str:
        et = inst.shape.element_type
        if not is_float(et):
            raise EmitterUnsupported(inst.opcode, inst.name, f"{inst.opcode} on {et}")
        (x,) = self._operands(inst, idx)
        xc = self.up(x, et)
        if fn == "exp" and et in ("f16", "bf16"):
            # XLA's f16/bf16 exponential: ex2.approx.f32 of x * log2(e) in f32 (Triton's tl.exp), not expf's
            # range reduction; its error is far inside the narrow result's rounding
            return self.down(self.ctx.emit(f"tl.exp({xc})", inst.name), et, inst.name)
        r = self.ctx.emit(f"libdevice.{fn}({xc})", inst.name)
        return self.down(r, et, inst.name)

    def _float_binary(self, inst: Instruction, a: str, b: str, expr: Callable[[str, str], str]) -> str:
        et = inst.shape.element_type
        ac, bc = self.up(a, et), self.up(b, et)
        r = self.ctx.emit(expr(ac, bc), inst.name)
        return self.down(r, et, inst.name)

    def _arith(self, inst: Instruction, idx: Index) -> str:
        op = inst.opcode
        et = inst.shape.element_type
        a, b = self._operands(inst, idx)
        if et == "pred":
            sym = {"add": "|", "multiply": "&", "subtract": "^", "maximum": "|", "minimum": "&",
                   "and": "&", "or": "|", "xor": "^"}.get(op)
            if sym is None:
                raise EmitterUnsupported(op, inst.name, f"{op} on pred")
            return self.emit(f"{a} {sym} {b}", inst)
        if is_float(et):
            if op in ("and", "or", "xor"):
                raise EmitterUnsupported(op, inst.name, f"{op} on {et}")
            if op in ("maximum", "minimum"):
                return self._float_binary(inst, a, b, lambda x, y: self._minmax_expr(op, x, y))
            if op == "power":
                return self._float_binary(inst, a, b, lambda x, y: f"libdevice.pow({x}, {y})")
            if op == "atan2":
                return self._float_binary(inst, a, b, lambda x, y: f"libdevice.atan2({x}, {y})")
            sym = {"add": "+", "subtract": "-", "multiply": "*", "divide": "/", "remainder": "%"}[op]
            return self._float_binary(inst, a, b, lambda x, y: f"{x} {sym} {y}")
        # integers
        if op in ("maximum", "minimum"):
            return self.emit(f"tl.{op}({a}, {b})", inst)
        if op in ("divide", "remainder"):
            return self._int_divrem(inst, a, b)
        if op == "power":
            return self._int_pow(inst, a, b)
        if op == "atan2":
            raise EmitterUnsupported(op, inst.name, f"{op} on integers")
        sym = {"add": "+", "subtract": "-", "multiply": "*", "and": "&", "or": "|", "xor": "^"}[op]
        r = self.emit(f"{a} {sym} {b}", inst)
        return self.wrap_subbyte(r, et, inst.name)

    def _int_pow(self, inst: Instruction, a: str, b: str) -> str:
        """Integer ``power``: exponentiation by squaring with wrap-around; a negative exponent gives
        ``1`` for base ``1``, ``±1`` for base ``-1`` by the exponent's parity, and ``0`` otherwise (XLA's
        ``EmitIntegerPow`` in ``elemental_ir_emitter.cc``, and the reference evaluator's ``_int_pow``)."""
        et = inst.shape.element_type
        t = self.tl(et)
        signed = dtypes.is_signed_int(et)
        bits = dtypes.bit_width(et)
        steps = bits - 1 if signed else bits  # bits of the largest exponent
        body = self.ctx.body
        acc = self.ctx.names.fresh("pw_acc")
        base = self.ctx.names.fresh("pw_base")
        e = self.ctx.names.fresh("pw_e")
        k = self.ctx.names.fresh("pw_k")
        neg = self.ctx.emit(f"{b} < 0", "pw_neg") if signed else None
        body.line(f"{acc} = {self.ctx.full(1, t)}")
        body.line(f"{base} = {a} + {self.ctx.full(0, t)}")
        body.line(f"{e} = tl.where({neg}, {self.ctx.full(0, t)}, {b})" if signed else f"{e} = {b} + {self.ctx.full(0, t)}")
        body.line(f"for {k} in range(0, {steps}):")
        body.indent()
        body.line(f"{acc} = tl.where(({e} & {self.ctx.full(1, t)}) != 0, {acc} * {base}, {acc})")
        body.line(f"{base} = {base} * {base}")
        body.line(f"{e} = {e} >> {self.ctx.full(1, t)}")
        body.dedent()
        r = acc
        if signed:
            one, zero, m_one = self.ctx.full(1, t), self.ctx.full(0, t), self.ctx.full(-1, t)
            sign = self.ctx.emit(f"tl.where(({b} & {one}) != 0, {m_one}, {one})", "pw_sign")
            unit = self.ctx.emit(f"tl.where({a} == {one}, {one}, tl.where({a} == {m_one}, {sign}, {zero}))", "pw_unit")
            r = self.emit(f"tl.where({neg}, {unit}, {acc})", inst)
        return self.wrap_subbyte(r, et, inst.name)

    def _minmax_expr(self, op: str, x: str, y: str) -> str:
        # NaN-propagating like XLA's GPU min/max (one max.NaN / min.NaN instruction, as XLA's kernels)
        return f"tl.{op}({x}, {y}, propagate_nan=tl.PropagateNan.ALL)"

    def _int_divrem(self, inst: Instruction, a: str, b: str) -> str:
        et = inst.shape.element_type
        t = self.tl(et)
        lo, hi = _int_range(et)
        one = f"tl.full({self.ctx.block_shape}, 1, {t})"
        c = scalar_int_constant(inst.operands[1])
        if c is not None and c != 0 and not (c == -1 and dtypes.is_signed_int(et)):
            # a constant divisor that is neither 0 nor -1: no special case can arise (in XLA's kernel the
            # guards fold away, and LLVM divides by multiplying)
            r = self.emit(f"{a} {'//' if inst.opcode == 'divide' else '%'} {b}", inst)
            return self.wrap_subbyte(r, et, inst.name)
        bad0 = self.ctx.emit(f"{b} == 0", "divz")
        if dtypes.is_signed_int(et):
            ovf = self.ctx.emit(f"({a} == {lo}) & ({b} == -1)", "ovf")
            safe = self.ctx.emit(f"tl.where({bad0} | {ovf}, {one}, {b})", "den")
            if inst.opcode == "divide":
                q = self.ctx.emit(f"{a} // {safe}", "q")
                r = self.emit(f"tl.where({bad0}, tl.full({self.ctx.block_shape}, -1, {t}), "
                              f"tl.where({ovf}, tl.full({self.ctx.block_shape}, {lo}, {t}), {q}))", inst)
            else:
                m = self.ctx.emit(f"{a} % {safe}", "m")
                r = self.emit(f"tl.where({bad0}, {a}, tl.where({ovf}, tl.full({self.ctx.block_shape}, 0, {t}), {m}))", inst)
        else:
            safe = self.ctx.emit(f"tl.where({bad0}, {one}, {b})", "den")
            if inst.opcode == "divide":
                q = self.ctx.emit(f"{a} // {safe}", "q")
                r = self.emit(f"tl.where({bad0}, tl.full({self.ctx.block_shape}, {hi}, {t}), {q})", inst)
            else:
                m = self.ctx.emit(f"{a} % {safe}", "m")
                r = self.emit(f"tl.where({bad0}, {a}, {m})", inst)
        return self.wrap_subbyte(r, et, inst.name)

    def _shift(self, inst: Instruction, idx: Index) -> str:
        et = inst.shape.element_type
        if not dtypes.is_integral(et) or dtypes.bit_width(et) < 8:
            raise EmitterUnsupported(inst.opcode, inst.name, f"{inst.opcode} on {et}")
        a, b = self._operands(inst, idx)
        bits = dtypes.bit_width(et)
        t = self.tl(et)
        signed = dtypes.is_signed_int(et)
        st = f"tl.int{bits}"
        ut = f"tl.uint{bits}"
        oob = self.ctx.emit(f"({b} < 0) | ({b} >= {bits})" if signed else f"{b} >= {bits}", "oob")
        s = self.ctx.emit(f"tl.where({oob}, tl.full({self.ctx.block_shape}, 0, {t}), {b})", "sh")
        zero = f"tl.full({self.ctx.block_shape}, 0, {t})"
        if inst.opcode == "shift-left":
            return self.emit(f"tl.where({oob}, {zero}, {a} << {s})", inst)
        if inst.opcode == "shift-right-logical":
            if signed:
                r = self.ctx.emit(f"({a}.to({ut}, bitcast=True) >> {s}.to({ut}, bitcast=True)).to({t}, bitcast=True)", "shr")
            else:
                r = self.ctx.emit(f"{a} >> {s}", "shr")
            return self.emit(f"tl.where({oob}, {zero}, {r})", inst)
        # arithmetic
        if signed:
            xs, ss = a, s
        else:
            xs = self.ctx.emit(f"{a}.to({st}, bitcast=True)", "sx")
            ss = self.ctx.emit(f"{s}.to({st}, bitcast=True)", "ss")
        r = self.ctx.emit(f"{xs} >> {ss}", "sar")
        fill = self.ctx.emit(f"tl.where({xs} < 0, tl.full({self.ctx.block_shape}, -1, {st}), tl.full({self.ctx.block_shape}, 0, {st}))", "fill")
        r = self.ctx.emit(f"tl.where({oob}, {fill}, {r})", "sar")
        return r if signed else self.emit(f"{r}.to({t}, bitcast=True)", inst)

    def _unary(self, inst: Instruction, idx: Index) -> str:
        op = inst.opcode
        et = inst.shape.element_type
        (x,) = self._operands(inst, idx)
        if op == "not":
            if et == "pred":
                return self.emit(f"{x} ^ True", inst)
            if not dtypes.is_integral(et):
                raise EmitterUnsupported(op, inst.name, f"not on {et}")
            return self.wrap_subbyte(self.emit(f"~{x}", inst), et, inst.name)
        if op == "negate":
            if et == "pred":
                return x
            if is_float(et):
                xc = self.up(x, et)
                return self.down(self.emit(f"-{xc}", inst), et, inst.name)
            return self.wrap_subbyte(self.emit(f"-{x}", inst), et, inst.name)
        if op == "abs":
            if dtypes.is_unsigned_int(et) or et == "pred":
                return x
            xc = self.up(x, et) if is_float(et) else x
            r = self.emit(f"tl.abs({xc})", inst)
            return self.down(r, et, inst.name) if is_float(et) else self.wrap_subbyte(r, et, inst.name)
        if op == "sign":
            if is_float(et):
                xc = self.up(x, et)
                ct = self.tl(self.compute_type(et))
                r = self.emit(f"tl.where({xc} != {xc}, {xc}, tl.where({xc} > 0, tl.full({self.ctx.block_shape}, 1.0, {ct}), "
                              f"tl.where({xc} < 0, tl.full({self.ctx.block_shape}, -1.0, {ct}), {xc})))", inst)
                return self.down(r, et, inst.name)
            if et == "pred":
                return x
            t = self.tl(et)
            if dtypes.is_unsigned_int(et):
                return self.emit(f"({x} != 0).to({t})", inst)
            return self.emit(f"({x} > 0).to({t}) - ({x} < 0).to({t})", inst)
        if op == "is-finite":
            src_et = inst.operands[0].shape.element_type
            if not is_float(src_et):
                raise EmitterUnsupported(op, inst.name, f"is-finite on {src_et}")
            xc = self.up(x, src_et)
            inf = self.fconst(math.inf, self.compute_type(src_et))
            return self.emit(f"tl.abs({xc}) < {inf}", inst)
        if op == "logistic":
            if not is_float(et):
                raise EmitterUnsupported(op, inst.name, f"logistic on {et}")
            xc = self.up(x, et)
            ct = self.tl(self.compute_type(et))
            r = self.emit(f"tl.full({self.ctx.block_shape}, 1.0, {ct}) / (tl.full({self.ctx.block_shape}, 1.0, {ct}) + libdevice.exp(-{xc}))", inst)
            return self.down(r, et, inst.name)
        if op in ("popcnt", "count-leading-zeros"):
            if not dtypes.is_integral(et) or dtypes.bit_width(et) < 8:
                raise EmitterUnsupported(op, inst.name, f"{op} on {et}")
            bits = dtypes.bit_width(et)
            t = self.tl(et)
            if bits == 64:
                xi = self.ctx.emit(f"{x}.to(tl.int64, bitcast=True)", "xi")
            elif bits == 32:
                xi = self.ctx.emit(f"{x}.to(tl.int32, bitcast=True)", "xi")
            else:
                xi = self.ctx.emit(f"{x}.to(tl.uint{bits}, bitcast=True).to(tl.uint32).to(tl.int32, bitcast=True)", "xi")
            if op == "popcnt":
                r = self.ctx.emit(f"libdevice.popc({xi})", "pc")
            else:
                r = self.ctx.emit(f"libdevice.clz({xi})", "lz")
                if bits < 32:
                    r = self.ctx.emit(f"{r} - {32 - bits}", "lz")
            return self.emit(f"{r}.to({t})", inst)
        raise EmitterUnsupported(op, inst.name, "unsupported unary op")

    def _compare(self, inst: Instruction, idx: Index) -> str:
        a, b = self._operands(inst, idx)
        et = inst.operands[0].shape.element_type
        direction = str(inst.attrs.get("direction", "")).upper()
        sym = _CMP.get(direction)
        if sym is None:
            raise EmitterUnsupported("compare", inst.name, f"unknown direction {direction!r}")
        ctype = str(inst.attrs.get("type", "")).upper()
        if et in COMPLEX_PARTS:
            if direction not in ("EQ", "NE"):
                raise EmitterUnsupported("compare", inst.name, f"compare {direction} on {et}")
            if direction == "EQ":
                return self.emit(f"({a.re} == {b.re}) & ({a.im} == {b.im})", inst)
            return self.emit(f"({a.re} != {b.re}) | ({a.im} != {b.im})", inst)
        if is_float(et):
            ac, bc = self.up(a, et), self.up(b, et)
            if ctype == "TOTALORDER":
                ce = self.compute_type(et)
                bits = dtypes.bit_width(ce)
                it = f"tl.int{bits}"
                mx = (1 << (bits - 1)) - 1
                keys = []
                for v in (ac, bc):
                    iv = self.ctx.emit(f"{v}.to({it}, bitcast=True)", "tok")
                    keys.append(self.ctx.emit(f"tl.where({iv} < 0, {iv} ^ {mx}, {iv})", "tok"))
                ac, bc = keys
            return self.emit(f"{ac} {sym} {bc}", inst)
        if et == "pred":
            a = self.ctx.emit(f"{a}.to(tl.int8)", "pi")
            b = self.ctx.emit(f"{b}.to(tl.int8)", "pi")
        return self.emit(f"{a} {sym} {b}", inst)

    def _select(self, inst: Instruction, idx: Index) -> Any:
        p = self.value(inst.operands[0], idx if inst.operands[0].shape.rank else ())
        a = self.value(inst.operands[1], idx)
        b = self.value(inst.operands[2], idx)
        if isinstance(a, (list, Cx)):
            return self.where(p, a, b, inst.name)
        return self.emit(f"tl.where({p}, {a}, {b})", inst)

    def _clamp(self, inst: Instruction, idx: Index) -> str:
        lo_i, x_i, hi_i = inst.operands
        et = inst.shape.element_type
        lo = self.value(lo_i, idx if lo_i.shape.rank else ())
        x = self.value(x_i, idx)
        hi = self.value(hi_i, idx if hi_i.shape.rank else ())
        if is_float(et):
            loc, xc, hic = self.up(lo, et), self.up(x, et), self.up(hi, et)
            m = self.ctx.emit(self._minmax_expr("maximum", xc, loc), "clo")
            r = self.emit(self._minmax_expr("minimum", m, hic), inst)
            return self.down(r, et, inst.name)
        if et == "pred":
            return self.emit(f"({x} | {lo}) & {hi}", inst)
        return self.emit(f"tl.minimum(tl.maximum({x}, {lo}), {hi})", inst)
