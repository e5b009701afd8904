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
  output, s32 for 8-bit integers into s32). fusegen deviates here (:data:`TF32_FOR_DEFAULT_PRECISION`);
* ``ALG_DOT_F32_F32_F32``: IEEE f32; ``ALG_DOT_TF32_TF32_F32``: tf32; ``ALG_DOT_TF32_TF32_F32_X3``: three tf32
  passes (Triton's ``tf32x3``); ``ALG_DOT_BF16_BF16_F32``: operands rounded to bf16;
  ``ALG_DOT_BF16_BF16_F32_X3/_X6/_X9``: f32 operands split into 2 or 3 bf16 parts multiplied in 3, 6 or 9 bf16
  passes; ``ALG_DOT_F16_F16_F32`` / ``_F16``: operands in f16 (accumulator f16 for the latter);
  ``ALG_DOT_BF16_BF16_BF16``: operands in bf16; ``ALG_DOT_F64_F64_F64``: f64.
"""

from __future__ import annotations

import attrs

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
#: Whether f32 dots with the algorithm unset and default precision run at tf32, as XLA:GPU runs them. False:
#: fusegen's reference evaluator multiplies them in f32 (as XLA:CPU, the tests' oracle, does), and a tf32
#: kernel's error compounds through a model's layers past any per-type floor of the verdict (a flax block on
#: random weights: 11% at its softmax, the f32 reference 3e-5 from f64), so until the reference models tf32
#: such dots run at IEEE f32 (no tensor cores; the GEMM kernel's ``notes`` say so). The tf32 algorithms
#: (``ALG_DOT_TF32_TF32_F32``...) always run at tf32.
TF32_FOR_DEFAULT_PRECISION = False
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


def dot_numerics(dot: Instruction) -> DotNumerics:
    """XLA:GPU's numerics of ``dot`` (see the module docstring).

    Raises:
        DotNumericsError: an unknown algorithm or operand precision.
    """
    alg = normalize_algorithm(dot.attrs.get("algorithm"))
    lhs, rhs = (o.shape.element_type for o in dot.operands[:2])
    out = dot.shape.element_type
    if alg == "ALG_UNSET":
        if lhs in ("s8", "u8") and rhs in ("s8", "u8"):
            acc = "s32" if out == "s32" else "f32"
        else:
            acc = "f64" if (lhs == "f64" and out == "f64") else "f32"
        floats = all(t in _FLOATS or t.startswith("f8") for t in (lhs, rhs, out))
        lp, rp = operand_precisions(dot)
        tf32 = floats and all(_PRECISIONS.index(p) <= 1 for p in (lp, rp)) and TF32_FOR_DEFAULT_PRECISION
        return DotNumerics(alg, None, "tf32" if tf32 else "ieee", 0, acc)
    if alg not in _ALGORITHMS:
        raise DotNumericsError(f"dot %{dot.name}: unknown algorithm {alg}")
    operand, precision, passes, acc = _ALGORITHMS[alg]
    return DotNumerics(alg, operand, precision, passes, acc or "f32")


def xla_uses_tf32(dot: Instruction) -> bool:
    """Whether XLA:GPU runs ``dot`` at tf32 (f32 operands, algorithm unset, both precisions at most ``HIGH``,
    or a tf32 algorithm), whatever :data:`TF32_FOR_DEFAULT_PRECISION` says."""
    alg = normalize_algorithm(dot.attrs.get("algorithm"))
    if alg != "ALG_UNSET":
        return alg in ("ALG_DOT_TF32_TF32_F32", "ALG_DOT_TF32_TF32_F32_X3")
    types = [o.shape.element_type for o in dot.operands[:2]]
    return "f32" in types and all(t in _FLOATS or t.startswith("f8") for t in types) and \
        all(_PRECISIONS.index(p) <= 1 for p in operand_precisions(dot))
