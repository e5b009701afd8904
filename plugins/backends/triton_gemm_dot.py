"""The ``tl.dot`` of a Triton GEMM kernel: operand types, input precision, accumulator, and the K-step lines.

XLA's Triton GEMMs multiply the operand tiles in their own types on the tensor cores (``HMMA.16816.F32.BF16``
for bf16, f16 alike; fp8 as f16 on ``mma.sync``, Triton's own lowering, or natively on ``wgmma``; ``IMMA``
for int8 into s32), accumulating in f32; f32 operands of a tf32 dot are rounded first with
``cvt.rna.tf32.f32`` (an f32 dot at default precision is one, as on XLA:GPU); see :mod:`fusegen.hlo.dot_numerics`
for the rules (``algorithm``, ``operand_precision``) and the XLA sources they mirror. :func:`plan` turns them
into a :class:`DotPlan` for one dot.

Triton's smallest ``tl.dot`` K is 16 for 16-bit operands, 32 for 8-bit, 8 for 32-bit and 4 for 64-bit (its
``min_dot_size`` on NVIDIA; M and N have no lower bound there, it pads them itself, so XLA's ``block_n = 8``
tiles go to ``mma.m16n8k16`` as they are). Below that K: fp8 tiles become exact f16 tiles at K 16 (what
Triton does with fp8 on ``mma.sync`` anyway); other tiles are padded in registers (:attr:`DotPlan.min_k`): the
tile is loaded ``min_k`` wide with the lanes past ``block_k`` masked to zero, so every K step still adds
exactly XLA's ``block_k`` products (XLA's Triton fork multiplies the narrower tile: 16-deep int8 tiles go to the
K-32 ``mma`` with each fragment repeated in both K halves, so XLA sums each step's products twice; the kernel's
``notes`` say so, its staged tiles and shared memory being larger).
"""

from __future__ import annotations

import attrs

from fusegen.codegen import triton_source as ts
from fusegen.hlo.dot_numerics import DotNumerics, dot_numerics
from fusegen.hlo.ir import Instruction

#: Triton's ``min_dot_size`` K on NVIDIA by operand bit width.
MIN_K = {8: 32, 16: 16, 32: 8, 64: 4}
_BITS = {"s8": 8, "u8": 8, "f8e4m3fn": 8, "f8e5m2": 8, "f16": 16, "bf16": 16, "f32": 32, "f64": 64}
#: operand widening order when the two operand types differ (XLA's dots have equal types, fp8 pairs aside)
_ORDER = ["s8", "u8", "f8e5m2", "f8e4m3fn", "f16", "bf16", "f32", "f64"]
_F32_MAX = "3.4028234663852886e+38"  # |x| <= it: x is finite (XLA's ZeroNaNs keeps x where inf > |x|)
_RNA = 'tl.inline_asm_elementwise("cvt.rna.tf32.f32 $0, $1;", "=r,r", [{x}], dtype=tl.float32, is_pure=True, pack=1)'


@attrs.frozen
class DotPlan:
    """How one GEMM multiplies its operand tiles.

    Attributes:
        lhs_type / rhs_type: the HLO types the tiles enter ``tl.dot`` with (after any conversion).
        acc_t: the accumulator's Triton type (``tl.float32``, ``tl.int32``, ``tl.float64``, ``tl.float16``).
        input_precision: ``tl.dot``'s ``input_precision`` for f32 tiles (``"ieee"``, ``"tf32"``, ``"tf32x3"``),
            ``None`` for other types (it does not apply to them).
        rna: round f32 tiles to tf32 (``cvt.rna.tf32.f32``) before the dot, as XLA's CUDA pipeline does.
        bf16_passes: 3, 6 or 9: the ``BF16_BF16_F32_X*`` split products, else 0.
        tensor_core: False where Triton has no ``tl.dot`` for the types (u8): a multiply-and-sum instead.
        numerics: XLA's rules the plan follows.
    """

    lhs_type: str
    rhs_type: str
    acc_t: str
    input_precision: str | None
    rna: bool
    bf16_passes: int
    tensor_core: bool
    numerics: DotNumerics

    @property
    def min_k(self) -> int:
        """Triton's smallest K for these operand types (``block_k`` below it is padded in registers)."""
        if not self.tensor_core:
            return 1
        if self.bf16_passes:
            return MIN_K[16]
        return MIN_K[max(_BITS[self.lhs_type], _BITS[self.rhs_type])]

    def cast_lines(self, indent: str, loaded: tuple[str, str]) -> list[str]:
        """Lines converting the loaded tiles ``a`` / ``b`` (of HLO types ``loaded``) to the dot's operand types."""
        out = []
        for var, src, dst in (("a", loaded[0], self.lhs_type), ("b", loaded[1], self.rhs_type)):
            if src != dst:
                out.append(f"{indent}{var} = {var}.to({ts.tl_dtype(dst)})")
            if self.rna and dst == "f32":
                out.append(f"{indent}{var} = {_RNA.format(x=var)}")
        return out

    def dot_lines(self, indent: str, tile_k: int) -> list[str]:
        """Lines adding ``a @ b`` (tiles ``[m, tile_k]`` and ``[tile_k, n]``, or with a leading batch dimension
        when :attr:`tensor_core`) into ``acc``."""
        if not self.tensor_core:
            return [f"{indent}acc += tl.reduce(a[:, :, None].to({self.acc_t}) * b[None, :, :].to({self.acc_t}), 1, tl.standard._sum_combine)"]
        if self.bf16_passes:
            return _split_bf16_lines(indent, self.bf16_passes)
        extra = ""
        if self.input_precision is not None:
            extra += f', input_precision="{self.input_precision}"'
        if self.lhs_type.startswith("f8") and self.rhs_type.startswith("f8"):
            # XLA never promotes an fp8 dot's partial sums (max_num_imprecise_acc = INT_MAX, like cuBLAS)
            extra += f", max_num_imprecise_acc={tile_k}"
        return [f"{indent}acc = tl.dot(a, b, acc, out_dtype={self.acc_t}{extra})"]


def _split_bf16_lines(indent: str, passes: int) -> list[str]:
    """``BF16_BF16_F32_X3/X6/X9`` (XLA's ``EmitBF16x3Matmul`` / ``x6`` / ``x9``): each f32 tile split into bf16
    parts (``hi = bf16(x)``, ``mid = bf16(x - hi)``, ``lo = bf16(x - hi - mid)``), the cross products summed
    from the smallest up in XLA's order, non-finite partial sums zeroed before the ``hi x hi`` product."""
    parts = 2 if passes == 3 else 3
    names = ["hi", "lo"] if parts == 2 else ["hi", "mid", "lo"]
    out = []
    for v in ("a", "b"):
        rest = v
        for i, n in enumerate(names):
            out.append(f"{indent}{v}_{n} = {rest}.to(tl.bfloat16)")
            if i < parts - 1:
                out.append(f"{indent}{v}_r{i} = {rest} - {v}_{n}.to(tl.float32)")
                rest = f"{v}_r{i}"
    if passes == 3:
        pairs = [("lo", "hi"), ("hi", "lo")]
    elif passes == 6:
        pairs = [("mid", "mid"), ("lo", "hi"), ("hi", "lo"), ("mid", "hi"), ("hi", "mid")]
    else:
        pairs = [("lo", "lo"), ("mid", "lo"), ("lo", "mid"), ("mid", "mid"), ("lo", "hi"), ("hi", "lo"),
                 ("mid", "hi"), ("hi", "mid")]
    out.append(f"{indent}part = tl.full(acc.shape, 0, tl.float32)")
    for x, y in pairs:
        out.append(f"{indent}part = tl.dot(a_{x}, b_{y}, part, out_dtype=tl.float32)")
    out.append(f"{indent}part = tl.where(tl.abs(part) <= {_F32_MAX}, part, tl.full(part.shape, 0, tl.float32))")
    out.append(f"{indent}part = tl.dot(a_hi, b_hi, part, out_dtype=tl.float32)")
    out.append(f"{indent}acc = acc + part")
    return out


def plan(dot: Instruction, block_k: int) -> DotPlan:
    """The :class:`DotPlan` of ``dot`` tiled ``block_k`` deep, under XLA's rules
    (:func:`fusegen.hlo.dot_numerics.dot_numerics`).

    fp8 tiles shallower than Triton's fp8 ``tl.dot`` (K 32) are converted to f16 (exactly: every e4m3/e5m2 value
    is an f16) and multiplied at K 16, as Triton itself multiplies fp8 on ``mma.sync`` (upcast to f16): the
    program XLA runs for such tiles, with its shared memory. int8 tiles below K 32 have no such exact
    alternative and are padded to 32 (:attr:`DotPlan.min_k`).

    Raises:
        fusegen.hlo.dot_numerics.DotNumericsError: an unknown algorithm or operand precision.
    """
    num = dot_numerics(dot)
    lt, rt = dot.operands[0].shape.element_type, dot.operands[1].shape.element_type
    acc_t = ts.tl_dtype(num.accumulator_type if num.accumulator_type != "bf16" else "f32")
    if num.operand_type is not None:
        lt = rt = num.operand_type
    elif lt != rt and not (lt.startswith("f8") and rt.startswith("f8")):
        common = max(lt, rt, key=lambda t: _ORDER.index(t) if t in _ORDER else len(_ORDER))
        if lt in ("f16", "bf16") and rt in ("f16", "bf16"):
            common = "f32"  # both exact in tf32 (10 mantissa bits or fewer)
        lt = rt = common
    if lt.startswith("f8") and rt.startswith("f8") and block_k < MIN_K[8]:
        lt = rt = "f16"
    if lt in ("s8", "u8") or rt in ("s8", "u8"):
        if lt == rt == "s8":
            return DotPlan(lt, rt, "tl.int32", None, False, 0, True, num)
        # Triton's integer tl.dot is s8 x s8 only: u8 tiles multiply and sum in s32 (both converted there)
        own = (dot.operands[0].shape.element_type, dot.operands[1].shape.element_type)
        return DotPlan(own[0], own[1], "tl.int32", None, False, 0, False, num)
    f32 = lt == "f32"
    precision = num.input_precision if f32 else None
    rna = f32 and precision == "tf32"
    if f32 and precision in ("ieee", "tf32") and num.algorithm == "ALG_UNSET" and all(
            dot.operands[i].shape.element_type in ("f16", "bf16") for i in (0, 1)):
        precision, rna = "tf32", False  # both widened from 16-bit floats: exact in tf32 (no rounding), on the MMA
    return DotPlan(lt, rt, acc_t, precision, rna, num.bf16_passes, lt in _BITS, num)
