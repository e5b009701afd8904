"""What XLA:GPU computes for a ``dot``: the operand type its products are formed at and the tensor-core input
precision, from the dot's ``algorithm`` and ``operand_precision`` (``PrecisionConfig``).

Mirrors ``xla/service/algorithm_util.cc`` (``GetAllowedOperandsTypeForAlgorithm``, ``HasTf32InputType``,
``GetDotAccumulatorType``), XLA's Triton dot lowering (``backends/gpu/codegen/triton/dot_algorithms.cc``:
``GetAlgUnsetAccumulatorType``, ``GetForceOperandsType``; ``transforms/stablehlo_lower_to_triton.cc``:
``IsTf32Allowed``, ``InferFpDotPrecision``, ``GetAlgorithmEmitter``) and its CUDA pipeline's
``RoundF32ToTF32ForTf32DotRewritePass`` (f32 operands of a tf32 dot rounded with ``cvt.rna.tf32.f32``).

Rules (``tsl::tensor_float_32_execution_enabled()`` is on by default, as in JAX and TensorFlow):

* algorithm unset: the operands keep their types; a float dot runs at tf32 when both operand precisions are at
  most ``HIGH`` (``DEFAULT`` included), else IEEE f32; the accumulator is f32 (f64 for f64 operands and
  output, s32 for 8-bit integers into s32). So an f32 GEMM at default precision runs on the tensor cores with
  its operands rounded to tf32 (``cvt.rna``: half a tf32 ulp, ``2**-11`` relative, per operand) and its
  products (exact) summed in f32; so does a cuBLAS GEMM of that ``precision_config``. The reference evaluator
  rounds such a dot's f32 operands the same way (:func:`tf32_round`; ``fusegen.evaluator.dot_conv``,
  ``custom_calls``), so kernel and reference agree to f32's rounding, and the verdict judges the tf32 error
  against the f64 oracle and ``--expected`` by the reference's own (``fusegen.verify``). There is no switch
  here: ``--default-matmul-precision highest`` (``[pipeline] default_matmul_precision``, JAX's
  ``jax_default_matmul_precision``) writes ``HIGHEST`` into every ``DEFAULT`` dot of the module, i.e. IEEE
  f32 (:func:`apply_default_matmul_precision`), as JAX writes it into the HLO it lowers;
* ``ALG_DOT_F32_F32_F32``: IEEE f32; ``ALG_DOT_TF32_TF32_F32``: tf32; ``ALG_DOT_TF32_TF32_F32_X3``: three tf32
  passes (Triton's ``tf32x3``); ``ALG_DOT_BF16_BF16_F32``: operands rounded to bf16;
  ``ALG_DOT_BF16_BF16_F32_X3/_X6/_X9``: f32 operands split into 2 or 3 bf16 parts multiplied in 3, 6 or 9 bf16
  passes; ``ALG_DOT_F16_F16_F32`` / ``_F16``: operands in f16 (accumulator f16 for the latter);
  ``ALG_DOT_BF16_BF16_BF16``: operands in bf16; ``ALG_DOT_F64_F64_F64``: f64.
"""

from __future__ import annotations

import types

import attrs
import numpy as np

from fusegen.hlo.ir import Instruction

#: algorithm -> (operand type forced on both operands or None, input precision, bf16 passes, accumulator type)
_ALGORITHMS: dict[str, tuple[str | None, str, int, str | None]] = {
    "ALG_DOT_F32_F32_F32": ("f32", "ieee", 0, "f32"),
    "ALG_DOT_TF32_TF32_F32": ("f32", "tf32", 0, "f32"),
    "ALG_DOT_TF32_TF32_F32_X3": ("f32", "tf32x3", 0, "f32"),
    "ALG_DOT_BF16_BF16_F32": ("bf16", "ieee", 0, "f32"),
    "ALG_DOT_BF16_BF16_F32_X3": ("f32", "ieee", 3, "f32"),
    "ALG_DOT_BF16_BF16_F32_X6": ("f32", "ieee", 6, "f32"),
    "ALG_DOT_BF16_BF16_F32_X9": ("f32", "ieee", 9, "f32"),
    "ALG_DOT_F16_F16_F32": ("f16", "ieee", 0, "f32"),
    "ALG_DOT_F16_F16_F16": ("f16", "ieee", 0, "f16"),
    "ALG_DOT_BF16_BF16_BF16": ("bf16", "ieee", 0, "bf16"),
    "ALG_DOT_F64_F64_F64": ("f64", "ieee", 0, "f64"),
    "ALG_DOT_ANY_F8_ANY_F8_F32": (None, "ieee", 0, "f32"),
    "ALG_DOT_ANY_F8_ANY_F8_F32_FAST_ACCUM": (None, "ieee", 0, "f32"),
}
_PRECISIONS = ("DEFAULT", "HIGH", "HIGHEST", "PACKED_NIBBLE")
_FLOATS = ("f64", "f32", "f16", "bf16")
_MANTISSA = {"f64": 52, "f32": 23, "tf32": 10, "f16": 10, "bf16": 7}


class DotNumericsError(ValueError):
    """A dot whose ``algorithm`` or ``operand_precision`` XLA does not know (the message names the dot)."""


def normalize_algorithm(text: object) -> str:
    """``algorithm=dot_bf16_bf16_f32`` (HLO text) or ``ALG_DOT_BF16_BF16_F32`` -> the enum name; ``ALG_UNSET``
    when absent."""
    s = str(text or "").strip().upper()
    if not s or s in ("UNSET", "ALG_UNSET"):
        return "ALG_UNSET"
    return s if s.startswith("ALG_") else "ALG_" + s


def operand_precisions(dot: Instruction) -> tuple[str, str]:
    """``operand_precision={highest,default}`` -> ``("HIGHEST", "DEFAULT")`` (``DEFAULT`` where absent).

    Raises:
        DotNumericsError: a precision XLA does not define.
    """
    raw = str(dot.attrs.get("operand_precision", "") or "").strip().strip("{}")
    parts = [p.strip().upper() for p in raw.split(",") if p.strip()] if raw else []
    for p in parts:
        if p not in _PRECISIONS:
            raise DotNumericsError(f"dot %{dot.name}: unknown operand precision {p.lower()!r}")
    parts += ["DEFAULT"] * (2 - len(parts))
    return parts[0], parts[1]


@attrs.frozen
class DotNumerics:
    """How XLA:GPU multiplies one dot's operands.

    Attributes:
        algorithm: ``ALG_UNSET`` or XLA's ``PrecisionConfig.Algorithm`` name.
        operand_type: HLO type both operands are converted to before the product, or ``None`` (their own).
        input_precision: ``tt.dot``'s input precision for float operands: ``"ieee"``, ``"tf32"``, ``"tf32x3"``
            (only f32 operands are affected).
        bf16_passes: 3, 6 or 9 for the ``BF16_BF16_F32_X*`` algorithms, else 0.
        accumulator_type: HLO type of the accumulator (``f32``, ``f64``, ``s32``, ``f16``, ``bf16``).
    """

    algorithm: str
    operand_type: str | None
    input_precision: str
    bf16_passes: int
    accumulator_type: str

    def product_type(self, operand_type: str) -> str:
        """The type of least precision an operand of ``operand_type`` is rounded to for the products:
        ``"tf32"`` (10 mantissa bits) for an f32 operand of a tf32 dot (or of 3 bf16 passes), ``bf16``/``f16``
        where the algorithm rounds a wider operand to them; otherwise nothing is rounded (bf16, f16 and fp8
        products are exact in f32) and this is the accumulator type."""
        eff = self.operand_type or operand_type
        if eff == "f32" and (self.input_precision == "tf32" or self.bf16_passes == 3):
            eff = "tf32"
        if _MANTISSA.get(eff, 64) < _MANTISSA.get(operand_type, 0):
            return eff
        return self.accumulator_type

    def rounded_operand_type(self, operand_type: str) -> str | None:
        """What an operand of ``operand_type`` is rounded to before the products, where the reference evaluator
        rounds it as the kernel does: ``"tf32"`` (``cvt.rna``) for an f32 operand of a tf32 dot, ``bf16``/``f16``
        for an f32 operand the algorithm converts; ``None`` otherwise (not rounded, or split into bf16 or tf32
        passes, which are f32-accurate or nearly: the reference keeps f32 there)."""
        if operand_type != "f32" or self.bf16_passes:
            return None
        p = self.product_type(operand_type)
        if p == "tf32":
            return p if self.input_precision == "tf32" else None
        return p if p in ("bf16", "f16") else None


def dot_numerics(dot: Instruction) -> DotNumerics:
    """XLA:GPU's numerics of ``dot`` (see the module docstring).

    Raises:
        DotNumericsError: an unknown algorithm or operand precision.
    """
    lhs, rhs = (o.shape.element_type for o in dot.operands[:2])
    return numerics(lhs, rhs, dot.shape.element_type, dot.attrs.get("algorithm"), operand_precisions(dot),
                    f"dot %{dot.name}")


def numerics(lhs: str, rhs: str, out: str, algorithm: object, precisions: tuple[str, str],
             what: str) -> DotNumerics:
    """:func:`dot_numerics` from the parts: operand and result HLO types, the algorithm (HLO text or enum
    name, ``None`` unset) and the two operand precisions (``"DEFAULT"``...); ``what`` names the dot in errors
    (a cuBLAS GEMM's ``gemm_backend_config.precision_config`` carries the same fields).

    Raises:
        DotNumericsError: an unknown algorithm or operand precision.
    """
    alg = normalize_algorithm(algorithm)
    for p in precisions:
        if p not in _PRECISIONS:
            raise DotNumericsError(f"{what}: unknown operand precision {str(p).lower()!r}")
    if alg == "ALG_UNSET":
        if lhs in ("s8", "u8") and rhs in ("s8", "u8"):
            acc = "s32" if out == "s32" else "f32"
        else:
            acc = "f64" if (lhs == "f64" and out == "f64") else "f32"
        floats = all(t in _FLOATS or t.startswith("f8") for t in (lhs, rhs, out))
        tf32 = floats and is_tf32_precision(precisions)
        return DotNumerics(alg, None, "tf32" if tf32 else "ieee", 0, acc)
    if alg not in _ALGORITHMS:
        raise DotNumericsError(f"{what}: unknown algorithm {alg}")
    operand, precision, passes, acc = _ALGORITHMS[alg]
    return DotNumerics(alg, operand, precision, passes, acc or "f32")


#: Mask keeping a float32's sign, exponent and the 10 mantissa bits of tf32 (19 bits in all).
TF32_MASK = np.uint32(0xFFFFE000)


def tf32_truncate(x: np.ndarray) -> np.ndarray:
    """``x`` (float32) with the 13 low mantissa bits cleared: what an sm_80/sm_90 tensor core reads of an f32
    operand of a ``.tf32`` MMA (``mma.sync``/``wgmma`` take the upper 19 bits and ignore the rest)."""
    return (np.ascontiguousarray(x, dtype=np.float32).view(np.uint32) & TF32_MASK).view(np.float32)


def tf32_round(x: np.ndarray) -> np.ndarray:
    """``cvt.rna.tf32.f32`` in numpy: float32 ``x`` rounded to tf32, to nearest with ties away from zero
    (adding half a tf32 ulp to the magnitude bits, then truncating; a carry rounds up into the exponent, to
    inf past the largest value); NaN stays NaN. XLA rounds a tf32 dot's f32 operands so
    (``RoundF32ToTF32ForTf32DotRewritePass``)."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    u = x.view(np.uint32)
    r = ((u + np.uint32(0x1000)) & TF32_MASK).view(np.float32)
    nan = np.isnan(x)
    return np.where(nan, x, r) if nan.any() else r


#: ``--default-matmul-precision`` values (JAX's ``jax_default_matmul_precision`` names) -> operand precision.
MATMUL_PRECISIONS = types.MappingProxyType({"default": "DEFAULT", "bfloat16": "DEFAULT", "high": "HIGH",
                                           "tensorfloat32": "HIGH", "highest": "HIGHEST", "float32": "HIGHEST"})


def apply_default_matmul_precision(module, precision: str | None) -> int:
    """Give every ``dot`` of ``module`` whose operand precisions are both ``DEFAULT`` (or absent) the operand
    precision ``precision`` names (:data:`MATMUL_PRECISIONS`: ``"highest"``/``"float32"`` -> ``HIGHEST``,
    IEEE f32 without tensor cores for f32 operands; ``"high"``/``"tensorfloat32"`` -> ``HIGH``; ``"default"``
    or ``None`` changes nothing), in place, as JAX's ``jax_default_matmul_precision`` writes
    ``operand_precision`` into the HLO it lowers; dots with an ``algorithm`` or another precision keep theirs.
    Returns how many dots changed.

    Raises:
        DotNumericsError: an unknown ``precision`` (the message lists the known ones).
    """
    if precision is None:
        return 0
    key = str(precision).strip().lower()
    if key not in MATMUL_PRECISIONS:
        raise DotNumericsError(f"unknown default matmul precision {precision!r}; known: "
                               f"{', '.join(MATMUL_PRECISIONS)}")
    want = MATMUL_PRECISIONS[key]
    if want == "DEFAULT":
        return 0
    changed = 0
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode != "dot" or normalize_algorithm(inst.attrs.get("algorithm")) != "ALG_UNSET":
                continue
            if operand_precisions(inst) == ("DEFAULT", "DEFAULT"):
                inst.attrs["operand_precision"] = "{" + f"{want.lower()},{want.lower()}" + "}"
                changed += 1
    return changed


def gemm_operand_precisions(precision_config: dict | None) -> tuple[str, str]:
    """The two operand precisions of a cuBLAS GEMM's ``gemm_backend_config.precision_config`` (upper case,
    ``"DEFAULT"`` where absent), as :func:`numerics` takes them."""
    raw = [str(p).upper() for p in ((precision_config or {}).get("operand_precision") or [])]
    raw += ["DEFAULT", "DEFAULT"]
    return raw[0], raw[1]


def is_tf32_precision(precisions: tuple[str, str]) -> bool:
    """Whether operand precisions leave an f32 dot with the algorithm unset at tf32 (both at most ``HIGH``)."""
    return all(p in _PRECISIONS and _PRECISIONS.index(p) <= 1 for p in precisions)
