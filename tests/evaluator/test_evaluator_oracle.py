"""The reference evaluator against XLA itself: corpus computations run through jaxlib's XLA:CPU client
(../shared/reference/toolchain-on-cpu.md §4) and through fusegen.evaluator on the same seeded inputs.

Each file is rewritten the same way for both sides: comments and ``backend_config`` stripped,
``fusion(...), kind=K, calls=%c`` turned into ``call(...), to_apply=%c`` (XLA:CPU rejects non-loop fusions), and a
file without ``ENTRY`` gets its last computation marked as the entry. XLA runs with
``xla_allow_excess_precision=false``, the evaluator's documented choice.

Inputs: floats standard normal, ints in [0, 4) except parameters that feed dynamic-slice / dynamic-update-slice
start indices or gather / scatter indices, which are drawn within the operand's valid range.

Files not here, and why: GPU custom calls (cuBLAS / cuDNN cannot run on XLA:CPU); modules whose layouts or
opcodes jaxlib's CPU compiler rejects (acos / asinh / ... are UNIMPLEMENTED there, some bitcast layouts fail
its layout assignment, scaled-dot does not lower); parameters over 2M elements (CI time); reduces whose init is
a parameter (a non-identity init is applied an unspecified number of times); bugs/B09.hlo, where jaxlib 0.10.2's
XLA:CPU reproduces the reported in-place-DUS bug ([1,1,1,1] instead of [1,1,2,3]; tests/evaluator/test_evaluator_corpus_bugs.py
asserts the right answer).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path

import numpy as np
import pytest

from fusegen.evaluator.evaluator import evaluate_module
from fusegen.evaluator.dot_conv import ieee_f32_dots
from fusegen.hlo.dtypes import numpy_dtype
from fusegen.hlo.ir import Computation, Instruction, Module, Shape
from fusegen.hlo.parser import parse_module

CORPUS = Path(__file__).parents[2].parent / "shared" / "corpus"

from xla_oracle import JAX_ERROR as _JAX_ERROR
from xla_oracle import run_xla

pytestmark = [
    pytest.mark.skipif(_JAX_ERROR is not None, reason=_JAX_ERROR or ""),
    pytest.mark.skipif(not CORPUS.is_dir(), reason=f"shared corpus not found at {CORPUS}"),
]

# Files whose float inputs are drawn positive: a sum of standard normals in a denominator cancels to ~0 and
# turns summation-order noise into large differences.
POSITIVE_INPUTS = {"bugs/B06.hlo"}

ORACLE_FILES = [
    # bugs
    "bugs/B04.hlo", "bugs/B05.hlo", "bugs/B06.hlo", "bugs/B13.hlo", "bugs/B15.hlo", "bugs/B18.hlo", "bugs/B19.hlo",
    "bugs/B20.hlo",
    # JAX programs: unoptimized, XLA:CPU-optimized, XLA:GPU-optimized without custom calls
    "jax/gelu_matmul.cpu_opt.hlo", "jax/gelu_matmul.pre.hlo", "jax/layer_bf16.cpu_opt.hlo", "jax/layer_bf16.pre.hlo",
    "jax/reduce.cpu_opt.hlo", "jax/reduce.pre.hlo", "jax/softmax.cpu_opt.hlo", "jax/softmax.pre.hlo",
    "jax/transpose_add.cpu_opt.hlo", "jax/transpose_add.pre.hlo", "jax/gpu_colsum.default.h100_opt.hlo",
    "jax/gpu_multi_output.default.h100_opt.hlo", "jax/gpu_rowsum.default.h100_opt.hlo",
    "jax/gpu_softmax.default.h100_opt.hlo", "jax/gpu_transpose_add.default.h100_opt.hlo",
    # emitter lit tests shared by CPU and GPU (fused computations wrapped as the entry)
    "xla/cases/lit_shared__concatenate__concat_1d.hlo", "xla/cases/lit_shared__concatenate__epilogue_side_param.hlo",
    "xla/cases/lit_shared__concatenate__test_small_dim.hlo",
    "xla/cases/lit_shared__dynamic_update_slice__operand_subgraph_two_roots.hlo",
    "xla/cases/lit_shared__dynamic_update_slice__simple.hlo", "xla/cases/lit_shared__loop__broadcast.hlo",
    "xla/cases/lit_shared__loop__broadcast_constant.hlo", "xla/cases/lit_shared__loop__broadcast_constant_s4.hlo",
    "xla/cases/lit_shared__loop__broadcast_non_scalar_constant_s4.hlo", "xla/cases/lit_shared__loop__dot_fp8.hlo",
    "xla/cases/lit_shared__loop__dynamic_update_slice.hlo", "xla/cases/lit_shared__loop__gather_start_index_map.hlo",
    "xla/cases/lit_shared__loop__pred_mul.hlo", "xla/cases/lit_shared__loop__pred_not.hlo",
    "xla/cases/lit_shared__loop__variadic_reduce.hlo", "xla/cases/lit_shared__loop__vectorize_x1_too_small.hlo",
    "xla/cases/lit_shared__loop__vectorize_x4.hlo",
    # whole modules from XLA's tests
    "xla/modules/backends__gpu__codegen__emitters__tests__reduce_column_small__input_layout.hlo",
    "xla/modules/backends__gpu__codegen__emitters__tests__transpose__multiple_roots_mixed_rank.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__broadcast__broadcast.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__collectives__all_reduce.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__concat__concat_fusion.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__dot__bf16_small_rhs_outer.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__dynamic_slice__dyn_slice_multiple_dimensions.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__dynamic_slice__dyn_slice_of_add.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__elementwise__chain_0d_scalars.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__elementwise__convert_int_to_pred.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__normalization__diamond_broadcast_1d.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__pad__high_pad_2d.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__reduce__multi_0d_broadcast.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__reshape__reshape_to_0d.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__slice__boundary_dynamic_slice.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__slice__slice_extra_out_padding.hlo",
    "xla/modules/backends__gpu__codegen__triton__tests__transpose__transpose_3d_tile_not_power_of_2.hlo",
    "xla/modules/backends__gpu__tests__triton_calling_convention.hlo",
    "xla/modules/codegen__emitters__tests__dynamic_update_slice__int4.hlo",
    "xla/modules/codegen__emitters__tests__dynamic_update_slice__mof.hlo",
    "xla/modules/codegen__emitters__tests__dynamic_update_slice__out_of_bounds.hlo",
    "xla/modules/codegen__emitters__tests__loop__dus_s64.hlo",
    "xla/modules/hlo__translate__hlo_to_mhlo__tests__fusion.hlo",
    "xla/modules/tools__multihost_hlo_runner__data__multiple_gemm_fusions.hlo",
]
# every test case and module from XLA's tests (those the oracle cannot run are skipped with the reason below)
ORACLE_FILES += sorted(
    str(p.relative_to(CORPUS)) for sub in ("xla/cases", "xla/modules") for p in (CORPUS / sub).glob("*.hlo")
    if str(p.relative_to(CORPUS)) not in ORACLE_FILES
) if CORPUS.is_dir() else []

_DENYLIST = {  # text in a file name or body that makes it unusable for the oracle, with the reason
    "by_zero": "XLA:CPU constant-folds the integer division by zero and the process dies of SIGFPE",
    "custom-call": "GPU custom call: XLA:CPU cannot run it",
    "// -----": "several modules in one file (split-input lit test)",
    "scaled-dot": "jaxlib 0.10.2 cannot lower scaled-dot to StableHLO",
}
_LAYOUT_REJECTED = "jaxlib rejects the module: 'layout minor_to_major field contains N elements, but shape has M'"
_BITCAST_REJECTED = "XLA:CPU layout assignment: 'Unexpected bitcast operation seen during layout assignment'"
_UNIMPLEMENTED = "XLA:CPU says UNIMPLEMENTED for this transcendental"
#: Files jaxlib 0.10.2's XLA:CPU refuses, by what it says.
ORACLE_REFUSES: dict[str, str] = {
    "xla/cases/cache_key_hlo__kDotFusionHloText.hlo": _LAYOUT_REJECTED,
    "xla/cases/cudnn__DotWithSplitNonContractingInOutExecutesCorrectly.hlo": _LAYOUT_REJECTED,
    "xla/cases/cudnn__DotWithSplitNonContractingInputExecutesCorrectly.hlo": _LAYOUT_REJECTED,
    "xla/cases/lit_gpu__transpose__packed_transpose_multiple_heroes.hlo": _LAYOUT_REJECTED,
    "xla/cases/lit_shared__loop__acos_f32.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__acos_f64.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__acosh_f64.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__asin_f64.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__asinh_f32.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__asinh_f64.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__atanh_f32.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__atanh_f64.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__cosh_f32.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__sinh_f32.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__sinh_f64.hlo": _UNIMPLEMENTED,
    "xla/cases/lit_shared__loop__bitcast_add.hlo": "bitcast changes the element type: no StableHLO reshape for it",
    "xla/cases/lit_shared__loop__broadcast_constant_block_dim_limit.hlo": "a 2.25 TiB intermediate",
    "xla/cases/lit_triton__bitcast__bitcast_non_norm_in_out.hlo": _LAYOUT_REJECTED,
    "xla/cases/lit_triton__bitcast__bitcast_non_norm_out.hlo": _LAYOUT_REJECTED,
    "xla/cases/lit_triton__bitcast__bitcast_transpose_or_reshape.hlo": _BITCAST_REJECTED,
    "xla/cases/lit_triton__bitcast__bitcast_transpose_permutation_inversion.hlo": _BITCAST_REJECTED,
    "xla/cases/lit_triton__collectives__all_gather.hlo": "all-gather over 2 replicas on a 1-device client",
    "xla/modules/backends__gpu__codegen__triton__tests__collectives__all_gather.hlo":
        "all-gather over 2 replicas on a 1-device client",
    "xla/modules/tools__print_indexing_test.hlo": "old-style broadcast without dimensions: the MLIR call rejects it",
}
MAX_PARAM_ELEMENTS = 2_000_000


# ------------------------------------------------------------------------------------------------ rewriting


def _strip_backend_config(text: str) -> str:
    out, i, key = [], 0, "backend_config="
    while True:
        j = text.find(key, i)
        if j < 0:
            out.append(text[i:])
            return "".join(out)
        pre = text[i:j].rstrip()
        out.append(pre[:-1] if pre.endswith(",") else pre)
        p = j + len(key)
        if text[p] == '"':
            p += 1
            while text[p] != '"':
                p += 2 if text[p] == "\\" else 1
            p += 1
        else:
            depth = 0
            while True:
                c = text[p]
                if c == "{":
                    depth += 1
                elif c == "}":
                    depth -= 1
                    if depth == 0:
                        p += 1
                        break
                elif c == '"':
                    p += 1
                    while text[p] != '"':
                        p += 2 if text[p] == "\\" else 1
                p += 1
        i = p


def oracle_text(raw: str) -> str:
    """The file as both sides run it (see the module docstring)."""
    text = re.sub(r"//[^\n]*", "", raw)
    text = _strip_backend_config(text)
    text = re.sub(r"(?<=[\]})])(\s+)fusion\(", r"\1call(", text)
    text = re.sub(r",\s*kind=k\w+", "", text)
    text = re.sub(r"\bcalls=", "to_apply=", text)
    if not re.search(r"^\s*ENTRY\b", text, re.M):
        heads = [h for h in re.finditer(r"^\s*(%?[\w.\-]+)[^\n=]*\{\s*$", text, re.M) if h.group(1) != "HloModule"]
        if not heads:
            raise ValueError("no computation header")
        text = text[: heads[-1].start()] + "ENTRY " + text[heads[-1].start():]
    if "HloModule" not in text:
        text = "HloModule oracle_case\n" + text
    if _only_default_layouts(text):
        # jaxlib's HLO -> StableHLO path mislays bitcasts; with default layouts a bitcast is a reshape
        text = re.sub(r"(?<=[\]})])(\s+)bitcast\(", r"\1reshape(", text)
    return text


_LAYOUT = re.compile(r"\[[\d,\s]*\]\{([\d,\s]*)(?:[:}])")


def _only_default_layouts(text: str) -> bool:
    for m in _LAYOUT.finditer(text):
        dims = [int(v) for v in m.group(1).replace(" ", "").split(",") if v]
        if dims != sorted(dims, reverse=True):
            return False
    return True


# --------------------------------------------------------------------------------------------------- inputs


def _callers(module: Module) -> dict[int, list[Instruction]]:
    out: dict[int, list[Instruction]] = {}
    for inst in module.all_instructions():
        for c in inst.called_computations:
            out.setdefault(id(c), []).append(inst)
    return out


def _entry_param(inst: Instruction, callers: dict, entry: Computation) -> int | None:
    """The entry parameter number ``inst`` forwards unchanged through call / fusion operands, else ``None``."""
    seen = 0
    while inst.opcode == "parameter" and seen < 32:
        if inst.parent is entry:
            return inst.parameter_number
        sites = callers.get(id(inst.parent), [])
        if len(sites) != 1 or sites[0].opcode not in ("call", "fusion"):
            return None
        inst = sites[0].operands[inst.parameter_number]
        seen += 1
    return None


def index_bounds(module: Module) -> dict[int, int]:
    """Entry parameter -> largest in-range value, for parameters used as start indices / gather-scatter indices."""
    callers = _callers(module)
    bounds: dict[int, int] = {}

    def note(idx_inst: Instruction, bound: int) -> None:
        p = _entry_param(idx_inst, callers, module.entry)
        if p is not None:
            bounds[p] = max(0, min(bounds.get(p, bound), bound))

    for inst in module.all_instructions():
        ops = inst.operands
        if inst.opcode == "dynamic-slice" and ops:
            sizes = inst.shape.dimensions
            for k, o in enumerate(ops[1:]):
                if k < len(sizes):
                    note(o, ops[0].shape.dimensions[k] - sizes[k])
        elif inst.opcode == "dynamic-update-slice" and len(ops) > 2:
            for k, o in enumerate(ops[2:]):
                note(o, ops[0].shape.dimensions[k] - ops[1].shape.dimensions[k])
        elif inst.opcode == "gather" and len(ops) > 1:
            note(ops[1], min(ops[0].shape.dimensions or (1,)) - 1)
        elif inst.opcode == "scatter" and len(ops) > 2:
            n = (len(ops) - 1) // 2
            note(ops[n], min(ops[0].shape.dimensions or (1,)) - 1)
    return bounds


def make_input(shape: Shape, rng: np.random.Generator, bound: int | None, positive: bool):
    if shape.is_tuple:
        return tuple(make_input(s, rng, None, positive) for s in shape.tuple_shapes or ())
    et = shape.element_type
    dt = numpy_dtype(et)
    dims = shape.dimensions
    if et == "pred":
        return rng.integers(0, 2, dims).astype(bool)
    if et[0] in "su":
        hi = 4 if bound is None else bound + 1
        return rng.integers(0, max(hi, 1), dims).astype(dt)
    if et[0] == "c":
        return (rng.standard_normal(dims) + 1j * rng.standard_normal(dims)).astype(dt)
    x = rng.uniform(0.5, 2.0, dims) if positive else rng.standard_normal(dims)
    return x.astype(np.float32).astype(dt)


# --------------------------------------------------------------------------------------------------- oracle


def _leaves(v) -> list:
    if isinstance(v, tuple):
        return [x for e in v for x in _leaves(e)]
    return [v]


def _tolerance(dt: np.dtype) -> float:
    if dt.itemsize <= 1:
        return 0.13  # f8: one ulp at 3 mantissa bits
    if dt.itemsize == 2:
        return 2e-2  # bf16 / f16 (a different f32 summation order can flip a final rounding)
    return 1e-4  # f32 / f64: transcendental approximations and summation order


@pytest.mark.parametrize("rel", ORACLE_FILES)
def test_evaluator_matches_xla_cpu(rel: str):
    path = CORPUS / rel
    if rel in ORACLE_REFUSES:
        pytest.skip(ORACLE_REFUSES[rel])
    raw = path.read_text()
    for marker, why in _DENYLIST.items():
        if marker in rel or marker in raw:
            pytest.skip(why)
    text = oracle_text(raw)
    module = parse_module(text, str(path))
    ieee_f32_dots(module)  # XLA:CPU multiplies f32 dots in IEEE f32; fusegen's reference (XLA:GPU) at tf32
    params = module.entry.parameters
    if sum(p.shape.numel for p in params if p.shape.is_array) > MAX_PARAM_ELEMENTS:
        pytest.skip(f"parameters over {MAX_PARAM_ELEMENTS} elements")
    for inst in module.all_instructions():
        if inst.opcode in ("reduce", "reduce-window") and any(
            o.opcode == "parameter" for o in inst.operands[len(inst.operands) // 2:]
        ):
            pytest.skip("reduce init is a parameter: XLA may apply a non-identity init more than once")
    rng = np.random.default_rng(0)
    bounds = index_bounds(module)
    args = [make_input(p.shape, rng, bounds.get(p.parameter_number), rel in POSITIVE_INPUTS) for p in params]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mine = _leaves(evaluate_module(module, args))
    theirs = run_xla(text, _leaves(tuple(args)))
    assert len(mine) == len(theirs)
    for k, (a, b) in enumerate(zip(mine, theirs)):
        a, b = np.asarray(a), np.asarray(b)
        assert a.shape == b.shape, f"output {k}: shape {a.shape} vs XLA {b.shape}"
        assert a.dtype == b.dtype, f"output {k}: dtype {a.dtype} vs XLA {b.dtype}"
        if a.dtype.kind in "biu" or a.dtype.itemsize == 0:
            mism = np.argwhere(a != b)
            assert mism.size == 0, f"output {k}: {len(mism)} of {a.size} differ, first at {mism[0].tolist()}"
            continue
        wide = np.complex128 if a.dtype.kind == "c" else np.float64
        af, bf = a.astype(wide), b.astype(wide)
        tol = _tolerance(a.dtype)
        ok = np.isclose(af, bf, rtol=tol, atol=tol, equal_nan=True)
        assert ok.all(), (f"output {k} ({a.dtype}): {int((~ok).sum())} of {a.size} differ, max abs err "
                          f"{np.nanmax(np.abs(af - bf)):.3g}")
