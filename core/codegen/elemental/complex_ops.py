"""Complex arithmetic of the elemental generator (:class:`fusegen.codegen.elemental.ElementalGenerator`): values
of ``c64`` / ``c128`` instructions as ``(re, im)`` pairs of float tensors (:class:`Cx`)."""

from __future__ import annotations

from typing import Any

from fusegen.codegen import triton_source as ts
from fusegen.codegen.elemental.common import COMPLEX_PARTS, Cx, Index
from fusegen.codegen.emitter_unsupported import EmitterUnsupported
from fusegen.hlo.ir import Instruction


class ComplexOpsMixin:
    """Mixed into :class:`fusegen.codegen.elemental.ElementalGenerator`, which supplies ``ctx`` and ``_operands``."""

    def _complex_op(self, inst: Instruction, idx: Index) -> Any:
        """Complex arithmetic (``c64`` / ``c128``) on ``(re, im)`` pairs: add, subtract, multiply, divide
        (Smith's algorithm, as numpy), negate, abs (XLA's ``EmitComplexAbs``), tanh and tan (XLA's
        ``EmitComplexUnaryOp`` kTanh/kTan), power (``EmitComplexPower``), compare EQ/NE, select; ``complex``/``real``/``imag``."""
        op = inst.opcode
        name = inst.name
        em = self.ctx.emit
        if op == "complex":
            a, b = self._operands(inst, idx)
            return Cx((a, b))
        if op in ("real", "imag"):
            (x,) = self._operands(inst, idx)
            if not isinstance(x, Cx):  # real(x) = x, imag(x) = 0 for a real x
                et = inst.shape.element_type
                return x if op == "real" else self.ctx.emit(ts.float_constant(0.0, et, self.ctx.block_shape), name)
            return x.re if op == "real" else x.im
        vals = self._operands(inst, idx)
        if op == "negate":
            (x,) = vals
            return Cx((em(f"-{x.re}", name), em(f"-{x.im}", name)))
        if op == "abs":
            # XLA's EmitComplexAbs (elemental_ir_emitter.cc): max * sqrt(1 + (min / max)^2) with NaN-propagating
            # max/min, falling back to min + max where that is NaN ((0, 0), (inf, inf), a NaN part)
            return self._complex_abs(vals[0], name)
        if op in ("tanh", "tan"):
            return self._complex_tanh(vals[0], COMPLEX_PARTS[inst.shape.element_type], op == "tan", name)
        a, b = vals
        if op == "power":
            return self._complex_pow(a, b, COMPLEX_PARTS[inst.shape.element_type], name)
        if op in ("add", "subtract"):
            sym = "+" if op == "add" else "-"
            return Cx((em(f"{a.re} {sym} {b.re}", name), em(f"{a.im} {sym} {b.im}", name)))
        if op == "multiply":
            return Cx((em(f"{a.re} * {b.re} - {a.im} * {b.im}", name), em(f"{a.re} * {b.im} + {a.im} * {b.re}", name)))
        if op == "divide":
            big = em(f"tl.abs({b.re}) >= tl.abs({b.im})", "cdv")
            r1 = em(f"{b.im} / {b.re}", "cdv")
            d1 = em(f"{b.re} + {b.im} * {r1}", "cdv")
            r2 = em(f"{b.re} / {b.im}", "cdv")
            d2 = em(f"{b.re} * {r2} + {b.im}", "cdv")
            re = em(f"tl.where({big}, ({a.re} + {a.im} * {r1}) / {d1}, ({a.re} * {r2} + {a.im}) / {d2})", name)
            im = em(f"tl.where({big}, ({a.im} - {a.re} * {r1}) / {d1}, ({a.im} * {r2} - {a.re}) / {d2})", name)
            return Cx((re, im))
        raise EmitterUnsupported(op, name, f"{op} on {inst.operands[0].shape.element_type}")

    def _complex_abs(self, x: Cx, name: str) -> str:
        """XLA's EmitComplexAbs (elemental_ir_emitter.cc): max * sqrt(1 + (min / max)^2) with NaN-propagating
        max/min, falling back to min + max where that is NaN ((0, 0), (inf, inf), a NaN part)."""
        em = self.ctx.emit
        ar, ai = em(f"tl.abs({x.re})", "cab"), em(f"tl.abs({x.im})", "cab")
        mx = em(f"tl.where({ar} != {ar}, {ar}, tl.where({ai} != {ai}, {ai}, tl.maximum({ar}, {ai})))", "cab")
        mn = em(f"tl.where({ar} != {ar}, {ar}, tl.where({ai} != {ai}, {ai}, tl.minimum({ar}, {ai})))", "cab")
        q = em(f"{mn} / {mx}", "cab")
        r = em(f"{mx} * tl.sqrt_rn(1.0 + {q} * {q})", "cab")
        return em(f"tl.where({r} != {r}, {mn} + {mx}, {r})", name)

    def _complex_pow(self, x: Cx, y: Cx, part: str, name: str) -> Cx:
        """XLA's EmitComplexPower (elemental_ir_emitter.cc): ``|x|^c e^(-d arg x) (cos q + i sin q)``,
        ``q = c arg x + d ln|x|`` for ``y = c + di``, then its cases in order: ``0^(c >= 0 real)`` = 1 for
        c == 0 else 0; ``x^0`` = 1; ``1^y`` = 1; ``inf^(c > 0 real)`` = inf; ``inf^(c < 0 real)`` = 0."""
        em = self.ctx.emit
        a, b, c, d = x.re, x.im, y.re, y.im
        ab = self._complex_abs(x, "cpw")
        arg = em(f"libdevice.atan2({b}, {a})", "cpw")
        coeff = em(f"libdevice.pow({ab}, {c}) * libdevice.exp(-{d} * {arg})", "cpw")
        q = em(f"{c} * {arg} + {d} * libdevice.log({ab})", "cpw")
        re, im = em(f"{coeff} * libdevice.cos({q})", "cpw"), em(f"{coeff} * libdevice.sin({q})", "cpw")
        one, zero, inf = self.fconst(1.0, part), self.fconst(0.0, part), self.fconst(float("inf"), part)
        real_inf_base = f"({a} == {inf}) & ({b} == 0) & ({d} == 0)"
        for cond, r_val, i_val in (
                (f"({ab} == 0) & ({d} == 0) & ({c} >= 0)", f"tl.where({c} == 0, {one}, {zero})", zero),
                (f"({c} == 0) & ({d} == 0)", one, zero),
                (f"({a} == 1) & ({b} == 0)", one, zero),
                (f"{real_inf_base} & ({c} > 0)", inf, zero),
                (f"{real_inf_base} & ({c} < 0)", zero, zero)):
            k = em(cond, "cpw")
            re, im = em(f"tl.where({k}, {r_val}, {re})", "cpw"), em(f"tl.where({k}, {i_val}, {im})", "cpw")
        return Cx((em(re, name), em(im, name)))

    def _complex_tanh(self, x: Cx, part: str, is_tan: bool, name: str) -> Cx:
        """XLA's complex tanh (``elemental_ir_emitter.cc``, ``EmitComplexUnaryOp`` kTanh; kTan as
        ``tan(x + yi) = -i * tanh(-y + xi)``): ``(e^2a - e^-2a + i 4 cos b sin b) / (e^2a + e^-2a - 2 + 4 cos^2 b)``
        with expm1 for the exponentials, ``±1`` for the real part where ``e^2a + e^-2a`` overflows, and XLA's
        corner cases: real NaN where ``sin 2b`` is NaN and ``a`` finite, imag +0 where ``b == 0`` or
        (``a`` infinite and ``sin 2b`` NaN)."""
        em = self.ctx.emit
        a, b = (em(f"-{x.im}", "cth"), x.re) if is_tan else (x.re, x.im)
        e_p = em(f"libdevice.expm1({a} + {a})", "cth")
        e_n = em(f"libdevice.expm1(-({a} + {a}))", "cth")
        cb, sb = em(f"libdevice.cos({b})", "cth"), em(f"libdevice.sin({b})", "cth")
        e_sum = em(f"{e_p} + {e_n}", "cth")
        denom = em(f"{e_sum} + {cb} * {cb} * 4.0", "cth")
        inum = em(f"4.0 * ({cb} * {sb})", "cth")
        inf, nan, zero = self.fconst(float("inf"), part), self.fconst(float("nan"), part), self.fconst(0.0, part)
        # e_sum is +inf only for |a| large (never for a NaN a): the limit is copysign(1, a)
        re = em(f"tl.where({e_sum} == {inf}, tl.where({a} < 0, -1.0, 1.0).to({ts.tl_dtype(part)}), "
                f"({e_p} - {e_n}) / {denom})", "cth")
        im = em(f"{inum} / {denom}", "cth")
        a_inf = em(f"tl.abs({a}) == {inf}", "cth")
        s_nan = em(f"{inum} != {inum}", "cth")
        re = em(f"tl.where({s_nan} & ~{a_inf}, {nan}, {re})", "cth")
        im = em(f"tl.where(({b} == 0) | ({a_inf} & {s_nan}), {zero}, {im})", "cth")
        if is_tan:
            return Cx((em(im, name), em(f"-{re}", name)))
        return Cx((em(re, name), em(im, name)))
