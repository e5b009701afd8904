"""The ``gemm-fusion`` pass: wraps dots (with the producers and epilogues Triton can take) into ``__triton_gemm``
fusions.

Mirrors ``GemmFusion`` (``xla/backends/gpu/transforms/gemm_fusion.cc``: ``HandleDot``, ``CreateDotFusion``,
``FuseDotOperand``, ``FuseTowardUsers``), the legacy Triton support tables
(``xla/backends/gpu/codegen/triton/support_legacy.cc``: ``IsTritonSupportedInstruction``,
``IsDistributiveOverAddition``) and the profitability rules of the tiling propagation
(``xla/service/gpu/triton_tiling_propagation.cc``: ``GetPropagatedDimOrdersAndRequirementsIfProfitablyFusible``,
``IsInputWorthFusing``, ``IsOutputWorthFusing``, ``kIoToleranceBytes`` = 1024), with XLA's flags:

* ``xla_gpu_enable_triton_gemm`` (default true): false leaves every dot to the gemm-rewriter (XLA does not add
  the pass then);
* compute capability >= 8.0 on CUDA, else ``FailedPrecondition`` ("CUDA Triton support is only enabled for
  Ampere GPUs (compute capability 8.0) and up, but got compute capability X.Y.");
* ``xla_gpu_gemm_rewrite_size_threshold`` (default 100): tiny dots the classical emitters support stay dots;
* ``xla_gpu_triton_gemm_any`` (default true): false rejects a "pure matmul" (only parameter, bitcast, reshape and
  the dot) unless cuBLAS would need padding for it (``CublasRequiresPadding``).

Simplification: XLA's dimension-order propagation is replaced by a lighter check that tracks, per fused
instruction, how its dimensions map to the dot operand's (unknown after a reshape that is not a physical no-op).
Slices need a known mapping; concatenations need it too, along a non-contracting dimension with every piece a
multiple of 64; the "split of a contracting dimension by a transpose" refusals are not modelled.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from fusegen.hlo.ir import Computation, Instruction, Module
from fusegen.passes.hlo_edit import NameUniquer, fusible_computations, make_fusion, remove_dead, shape_bytes, topo_sort

IO_TOLERANCE_BYTES = 1024  # kIoToleranceBytes
MAX_PARAMS_PER_DOT_OPERAND = 4  # TritonFusionAnalysis::kMaxParameterPerDotOperand
SLICE_SMALL_K = 256  # slices of a producer with other users are fused only into dots with K up to this

TRITON_GEMM_KIND = "__triton_gemm"

_UNARY_ALL = {"convert", "abs", "negate"}
_UNARY_FLOAT = {"cosine", "exponential", "exponential-minus-one", "floor", "ceil", "log", "log-plus-one", "rsqrt",
                "sine", "sqrt", "cbrt", "tan", "tanh", "erf"}
_BINARY_ALL = {"add", "compare", "maximum", "minimum", "multiply", "subtract"}
_BINARY_FLOAT = {"atan2", "power", "divide"}
_BINARY_PRED = {"and", "or", "xor", "compare"}
_FLOATS = {"f32", "bf16", "f16", "f64"}
_ELEMENTWISE = {
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "convert", "copy", "cosine", "divide", "erf",
    "exponential", "exponential-minus-one", "floor", "is-finite", "log", "log-plus-one", "logistic", "maximum",
    "minimum", "multiply", "negate", "not", "or", "popcnt", "power", "reduce-precision", "remainder",
    "round-nearest-afz", "round-nearest-even", "rsqrt", "select", "shift-left", "shift-right-arithmetic",
    "shift-right-logical", "sign", "sine", "sqrt", "subtract", "tan", "tanh", "xor", "bitcast-convert", "constant",
    "count-leading-zeros", "atan", "real", "imag",
}
_DISTRIBUTIVE = {"multiply", "negate", "bitcast", "reshape", "copy", "transpose", "convert", "broadcast", "slice"}


class GemmFusionError(Exception):
    """XLA's ``FailedPrecondition`` from ``EnsureTritonSupportsComputeCapability``."""


# ------------------------------------------------------------------------------------------- support tables
def dot_output_type_supported(t: str, cc: tuple[int, int]) -> bool:
    """``IsTritonSupportedDotOutputType`` (CUDA)."""
    if t in ("f16", "f32", "bf16", "s32"):
        return True
    if t == "f8e5m2":
        return cc >= (8, 0)
    if t == "f8e4m3fn":
        return cc >= (9, 0)
    return False


def data_type_supported(t: str, cc: tuple[int, int], v2: bool = False) -> bool:
    """``IsTritonSupportedDataType`` (CUDA); the generic (``v2``) table also takes unsigned and 64-bit types."""
    if v2 and t in ("u8", "u16", "u32", "u64", "s64", "f64"):
        return True
    return dot_output_type_supported(t, cc) or t in ("pred", "s8", "s16", "s32")


def _types_ok(inst: Instruction, cc: tuple[int, int], v2: bool) -> bool:
    if inst.shape.is_tuple or not data_type_supported(inst.shape.element_type, cc, v2):
        return False
    for o in inst.operands:
        t = o.shape.element_type
        if inst.opcode == "convert" and t == "s4":
            continue
        if o.shape.is_tuple or not data_type_supported(t, cc, v2):
            return False
    return True


def _elementwise_supported(inst: Instruction, v2: bool) -> bool:
    if inst.opcode == "constant":
        return True
    t = inst.operands[0].shape.element_type if inst.operands else inst.shape.element_type
    op = inst.opcode
    if t == "pred":
        return op in ("convert", "not") or op in _BINARY_PRED or op in ("select", "clamp")
    ok = op in _UNARY_ALL or op in _BINARY_ALL or op in ("select", "clamp")
    if v2 and t not in _FLOATS:
        ok = ok or op in ("and", "or", "xor", "not", "shift-left", "shift-right-logical", "shift-right-arithmetic")
    if t in _FLOATS:
        ok = ok or op in _UNARY_FLOAT or op in ("atan2", "power") or (op == "divide" and t != "f16")
    return ok


def dot_supported(dot: Instruction, cc: tuple[int, int], v2: bool = False) -> tuple[bool, str]:
    """``IsTritonSupportedInstruction`` for a dot: ``(ok, reason)``."""
    lb, rb = dot.attrs.get("lhs_batch_dims") or (), dot.attrs.get("rhs_batch_dims") or ()
    lc, rc = dot.attrs.get("lhs_contracting_dims") or (), dot.attrs.get("rhs_contracting_dims") or ()
    lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
    if len(lb) + len(lc) == lhs.rank or len(rb) + len(rc) == rhs.rank:
        return False, "No non-contracting dimensions."
    prec = str(dot.attrs.get("operand_precision", "") or "")
    algorithm = str(dot.attrs.get("algorithm", "") or "")
    if not algorithm and prec and any(p.strip() not in ("default", "DEFAULT", "") for p in prec.strip("{}").split(",")):
        return False, "Having non-default operand precisions or TensorFloat-32 disabled for Dot op with unset algorithm."
    out = dot.shape.element_type
    if not dot_output_type_supported(out, cc):
        return False, "Unsupported output data type for Dot op."
    if not data_type_supported(lhs.element_type, cc, v2) or not data_type_supported(rhs.element_type, cc, v2):
        return False, "Unsupported input data type for Dot op."
    if out == "s32" and not (lhs.element_type in ("s8", "u8") and rhs.element_type in ("s8", "u8")):
        return False, "Currently, S32 output is only supported for 8-bit integral inputs."
    if len(lb) > 1:
        return False, "Multiple batch dimensions."
    return True, ""


def instruction_supported(inst: Instruction, cc: tuple[int, int], v2: bool = False) -> bool:
    """``legacy_triton::IsTritonSupportedInstruction`` for a non-dot instruction."""
    if inst.opcode in _ELEMENTWISE:
        return _types_ok(inst, cc, v2) and _elementwise_supported(inst, v2)
    if inst.opcode in ("bitcast", "transpose", "slice", "reshape", "concatenate", "broadcast", "parameter"):
        return True
    return False


def _non_contracting_size(shape, contracting, batch) -> int:
    n = 1
    for d, s in enumerate(shape.dimensions):
        if d not in contracting and d not in batch:
            n *= s
    return n


def is_matmul_tiny(dot: Instruction, threshold: int) -> bool:
    """``IsMatrixMultiplicationTooSmallForRewriting``: (lhs_nc + rhs_nc) * contracting < threshold."""
    lc = tuple(dot.attrs.get("lhs_contracting_dims") or ())
    rc = tuple(dot.attrs.get("rhs_contracting_dims") or ())
    lb = tuple(dot.attrs.get("lhs_batch_dims") or ())
    rb = tuple(dot.attrs.get("rhs_batch_dims") or ())
    lhs, rhs = dot.operands[0].shape, dot.operands[1].shape
    k = 1
    for d in lc:
        k *= lhs.dimensions[d]
    return (_non_contracting_size(lhs, lc, lb) + _non_contracting_size(rhs, rc, rb)) * k < threshold


def supported_by_classical_emitters(dot: Instruction) -> bool:
    """``IsDotSupportedByClassicalEmitters``: F16/F32/BF16 outputs."""
    return dot.shape.element_type in ("f16", "f32", "bf16")


_PADDING = (((7, 0), "s8", 4), ((7, 0), "f16", 8), ((8, 0), "bf16", 8))


def cublas_requires_padding(dot: Instruction, cc: tuple[int, int]) -> bool:
    """``CublasRequiresPadding`` (``service/gpu/cublas_padding_requirements.cc``): the two minor dimensions of an
    operand or the result are not multiples of the tensor-core requirement for the data type."""
    t = dot.operands[0].shape.element_type
    for min_cc, dt, mult in _PADDING:
        if cc >= min_cc and t == dt:
            for s in (dot.operands[0].shape, dot.operands[1].shape, dot.shape):
                for d in s.dimensions[-2:]:
                    if d % mult:
                        return True
    return False


def input_minus_output_bytes(inst: Instruction) -> int:
    return sum(shape_bytes(o.shape) for o in inst.operands) - shape_bytes(inst.shape)


def _all_operands_params_or_constants(inst: Instruction, single_user: bool) -> bool:
    for o in inst.operands:
        if o.opcode not in ("parameter", "constant"):
            return False
        if single_user and len(o.users) > 1:
            return False
    return True


def is_input_worth_fusing(inst: Instruction) -> bool:
    """``IsInputWorthFusing``."""
    if input_minus_output_bytes(inst) <= IO_TOLERANCE_BYTES:
        return True
    if len(inst.users) > 1:
        return False
    if inst.opcode == "slice" and _all_operands_params_or_constants(inst, False):
        return True
    return _all_operands_params_or_constants(inst, True)


def _cannot_be_fused_into_a_user(inst: Instruction) -> bool:
    comp = inst.parent
    if comp is not None and comp.root is inst:
        return True
    us = inst.users
    return len(us) == 1 and comp is not None and comp.root is us[0] and us[0].opcode == "tuple"


def is_output_worth_fusing(inst: Instruction) -> bool:
    """``IsOutputWorthFusing``."""
    return _cannot_be_fused_into_a_user(inst) or input_minus_output_bytes(inst) >= -IO_TOLERANCE_BYTES


# --------------------------------------------------------------------------------- dimension-map propagation
def _physical_nontrivial(shape) -> list[tuple[int, int]]:
    """(dim, size) in physical major-to-minor order, size-1 dims dropped."""
    m2m = shape.minor_to_major()
    return [(d, shape.dimensions[d]) for d in reversed(m2m) if shape.dimensions[d] != 1]


def _map_through(inst: Instruction, out_map: tuple | None, operand: Instruction) -> tuple | None:
    """Dimension map of ``operand`` given ``inst``'s (``out_map[d]`` = dot-operand dim of ``inst`` dim d)."""
    if out_map is None:
        return None
    op = inst.opcode
    r = operand.shape.rank
    if op in _ELEMENTWISE or op in ("slice", "concatenate", "pad"):
        return out_map if operand.shape.rank == inst.shape.rank else None
    if op == "transpose":
        perm = tuple(inst.attrs.get("dimensions") or ())
        res = [None] * r
        for i, p in enumerate(perm):
            res[p] = out_map[i]
        return tuple(res)
    if op == "broadcast":
        dims = tuple(inst.attrs.get("dimensions") or ())
        return tuple(out_map[d] for d in dims)
    if op in ("bitcast", "reshape"):
        a, b = _physical_nontrivial(inst.shape), _physical_nontrivial(operand.shape)
        if [s for _, s in a] != [s for _, s in b]:
            return None
        res = [None] * r
        for (od, _), (id_, _) in zip(a, b):
            res[id_] = out_map[od]
        # A size-1 dim is a fragment of the dot dim of the next more-major non-trivial dim (the last one's when
        # none is more major), as GetPropagatedDimOrdersForBitcast (triton_tiling_propagation.cc) groups them.
        major_first = list(operand.shape.minor_to_major())[::-1]
        owner = next((res[d] for d in major_first if operand.shape.dimensions[d] != 1), None)
        for d in major_first:
            if operand.shape.dimensions[d] != 1:
                owner = res[d]
            else:
                res[d] = owner
        return tuple(res)
    return None


def _slices_non_major_fragment(inst: Instruction, dmap: tuple) -> bool:
    """``GetRequirementsIfSupportedOrder`` (``triton_tiling_propagation.cc``): "Sliced non-major-most fragment."
    Of the dims of a slice that belong to one dot dimension (its fragments, physically minor to major), only
    the major-most may be sliced; a sliced dim that belongs to none (sliced to a degenerate dim that a reshape
    to a scalar drops: ``SliceToDegenerateIsSkipped``) cannot be tiled either."""
    operand = inst.operands[0]
    starts = [s for s, _l, _st in (inst.attrs.get("slice") or [])]
    by_target: dict[int, list[int]] = {}
    for d in inst.shape.minor_to_major():
        sliced = operand.shape.dimensions[d] != inst.shape.dimensions[d] or (d < len(starts) and starts[d])
        if dmap[d] is not None:
            by_target.setdefault(dmap[d], []).append(d)
        elif sliced:  # a sliced dim that is no fragment of any dot dim (SliceToDegenerateIsSkipped)
            return True
    for dims in by_target.values():
        for d in dims[:-1]:
            if operand.shape.dimensions[d] != inst.shape.dimensions[d] or (d < len(starts) and starts[d]):
                return True
    return False


class _Plan:
    """One dot's fusion: the member instructions (originals) and why others stayed outside."""

    def __init__(self, dot: Instruction):
        self.dot = dot
        self.members: list[Instruction] = []
        self.ids: set[int] = set()
        self.output: Instruction = dot

    def add(self, inst: Instruction) -> None:
        if id(inst) not in self.ids:
            self.ids.add(id(inst))
            self.members.append(inst)


def _operand_worth(inst: Instruction, dmap: tuple | None, ctx: dict, cc: tuple[int, int]) -> bool:
    """Output-to-input profitability at fusion level 2, with the broadcast exception."""
    if inst.opcode in _ELEMENTWISE and len(inst.operands) == 2 and len(inst.users) <= 1:
        for o in inst.operands:
            if o.opcode == "broadcast" and o.operands and o.operands[0].opcode in ("parameter", "constant"):
                return True
    if inst.opcode == "slice" and ctx["k"] <= SLICE_SMALL_K and len(inst.users) == 1:
        return True
    return is_input_worth_fusing(inst)


def _fusible_toward_operand(inst: Instruction, dmap: tuple | None, ctx: dict, cc: tuple[int, int], v2: bool) -> bool:
    op = inst.opcode
    if op in ("tuple", "get-tuple-element", "reduce", "pad", "dot", "parameter", "dynamic-slice"):
        return False
    if not instruction_supported(inst, cc, v2):
        return False
    # Legacy tiling propagation tracks each slice's dimensions into the dot's and refuses a slice it cannot
    # (after a bitcast that merges or splits them) or one of a non-major fragment; GemmFusion v2 tiles through
    # bitcasts it does not hoist (UnhoistedBitcastCanStillBeFused), so a slice there needs neither.
    if op == "slice" and not v2 and (dmap is None or _slices_non_major_fragment(inst, dmap)):
        return False
    if op == "concatenate":
        if dmap is None:
            return False
        d = int((inst.attrs.get("dimensions") or (0,))[0])
        target = dmap[d]
        if target is None or target in ctx["contracting"] or target in ctx["batch"]:
            return False
        if any(o.shape.dimensions[d] % 64 for o in inst.operands):
            return False
    return _operand_worth(inst, dmap, ctx, cc)


def _fuse_toward_operands(plan: _Plan, start: Instruction, dmap: tuple | None, ctx: dict, cc: tuple[int, int],
                          max_params: int | None, v2: bool) -> None:
    """BFS from ``start`` (``BuildFusionPlanTowardOperands``); fused nodes join ``plan``."""
    seen: set[tuple] = set()
    queue: deque = deque([(start, dmap)])
    inputs: set[int] = {id(start)}
    requeued = 0
    while len(queue) > requeued:
        inst, m = queue.popleft()
        if max_params is not None:
            added = 0 if inst.opcode == "parameter" or (inst.opcode == "constant" and inst.shape.rank) else \
                len(inst.operands) - 1
            if len(inputs) + added > max_params:
                queue.append((inst, m))
                requeued += 1
                continue
        requeued = 0
        if not _fusible_toward_operand(inst, m, ctx, cc, v2):
            continue
        inputs.discard(id(inst))
        plan.add(inst)
        for o in inst.operands:
            om = _map_through(inst, m, o)
            key = (id(o), om)
            if key in seen:
                continue
            seen.add(key)
            inputs.add(id(o))
            queue.append((o, om))


def _fuse_toward_users(plan: _Plan, cc: tuple[int, int], v2: bool) -> None:
    """``FuseTowardUsers``: single-user chains of distributive epilogue ops whose other operands are parameters or
    broadcasts of scalars."""
    cur = plan.dot
    while len(cur.users) == 1:
        user = cur.users[0]
        if (user.opcode not in _DISTRIBUTIVE and not (v2 and user.opcode in _ELEMENTWISE)) \
                or not instruction_supported(user, cc, v2) or user.shape.is_tuple:
            break
        others = [o for o in user.operands if o is not cur]
        ok = v2 or all(o.opcode == "parameter" or (o.opcode == "broadcast" and o.operands[0].shape.rank == 0)
                       for o in others)
        if not ok or not is_output_worth_fusing(user):
            break
        plan.add(user)
        for o in others:
            if o.opcode != "parameter":
                _fuse_toward_operands(plan, o, tuple(range(o.shape.rank)), {"contracting": (), "batch": (), "k": 0},
                                      cc, None, v2)
        cur = user
    plan.output = cur


def _is_pure_matmul(plan: _Plan) -> bool:
    return all(m.opcode in ("bitcast", "dot", "parameter", "reshape") for m in plan.members)


_ALGORITHMS_ALWAYS = {"ALG_DOT_BF16_BF16_F32_X9", "ALG_DOT_BF16_BF16_F32_X6", "ALG_DOT_BF16_BF16_F32_X3",
                      "ALG_DOT_BF16_BF16_F32", "ALG_DOT_TF32_TF32_F32", "ALG_DOT_TF32_TF32_F32_X3",
                      "ALG_DOT_F32_F32_F32"}


def plan_dot_fusion(dot: Instruction, debug: Any, cc: tuple[int, int], v2: bool = False) -> tuple[_Plan | None, str]:
    """Decide the fusion of one dot (``HandleDot`` + ``CreateDotFusion``): ``(plan, "")`` or ``(None, reason)``;
    ``v2`` selects the generic support tables (the pass's ``v2`` option)."""
    if is_matmul_tiny(dot, int(debug.xla_gpu_gemm_rewrite_size_threshold)) and supported_by_classical_emitters(dot):
        return None, "tiny dot left to the classical emitters"
    ok, why = dot_supported(dot, cc, v2)
    if not ok:
        return None, why
    plan = _Plan(dot)
    plan.add(dot)
    lhs, rhs = dot.operands
    k = 1
    for d in dot.attrs.get("lhs_contracting_dims") or ():
        k *= lhs.shape.dimensions[d]
    for side, operand in ((0, lhs), (1, rhs)):
        pre = "lhs" if side == 0 else "rhs"
        ctx = {"contracting": tuple(dot.attrs.get(f"{pre}_contracting_dims") or ()),
               "batch": tuple(dot.attrs.get(f"{pre}_batch_dims") or ()), "k": k}
        _fuse_toward_operands(plan, operand, tuple(range(operand.shape.rank)), ctx, cc, MAX_PARAMS_PER_DOT_OPERAND, v2)
    _fuse_toward_users(plan, cc, v2)
    if v2:
        # CreateDotFusionV2 (gemm_fusion.cc) returns the tileable fusion as it is: no int4 batch-dim refusal, no
        # "Pure Matmul" refusal under xla_gpu_triton_gemm_any=false (DoNotFuseConcatOnContractingDimension:
        # fusion(concatenate, parameter)).
        return plan, ""
    externals = _externals(plan)
    for p in externals:
        if p.shape.element_type == "s4" and not _int4_batch_ok(dot, plan):
            return None, "Fusion is not possible because the parameter with the type S4 has minor batch dimension."
    algorithm = str(dot.attrs.get("algorithm", "") or "").upper()
    if algorithm in _ALGORITHMS_ALWAYS or bool(debug.xla_gpu_triton_gemm_any):
        return plan, ""
    if _is_pure_matmul(plan):
        if cublas_requires_padding(dot, cc):
            return plan, ""
        return None, "Pure Matmul"
    return plan, ""


def _int4_batch_ok(dot: Instruction, plan: _Plan) -> bool:
    """S4 operands are refused when the dot's batch dimension is the operand's minor-most (physical) dimension."""
    for side, pre in ((0, "lhs"), (1, "rhs")):
        b = tuple(dot.attrs.get(f"{pre}_batch_dims") or ())
        op = dot.operands[side]
        if b and op.shape.minor_to_major()[0] == b[0]:
            if any(x.shape.element_type == "s4" for x in _chain_inputs(op, plan)):
                return False
    return True


def _chain_inputs(inst: Instruction, plan: _Plan) -> list[Instruction]:
    out, stack, seen = [], [inst], set()
    while stack:
        x = stack.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        if id(x) in plan.ids:
            stack.extend(x.operands)
        else:
            out.append(x)
    return out


def _externals(plan: _Plan) -> list[Instruction]:
    out, seen = [], set()
    for m in plan.members:
        for o in m.operands:
            if id(o) not in plan.ids and id(o) not in seen:
                seen.add(id(o))
                out.append(o)
    return out


def check_compute_capability(device: Any) -> None:
    """``EnsureTritonSupportsComputeCapability`` (``codegen/triton/support.cc``).

    Raises:
        GemmFusionError: CUDA below compute capability 8.0.
    """
    platform = str(getattr(device, "platform", "CUDA")).upper()
    if platform != "CUDA":
        return
    cc = tuple(device.compute_capability)
    if cc < (8, 0):
        raise GemmFusionError(
            "FailedPrecondition: CUDA Triton support is only enabled for Ampere GPUs (compute capability 8.0) "
            f"and up, but got compute capability {cc[0]}.{cc[1]}.")


def run(module: Module, options: Any = None) -> bool:
    """Run ``gemm-fusion`` over ``module`` in place.

    Options (``[pipeline.options.gemm-fusion]``): ``v2`` (bool, default false) uses the generic Triton support
    tables (unsigned and 64-bit types, bitwise integer ops) and fuses any supported elementwise epilogue with its
    other operands, as ``GemmFusion``'s v2 mode (``gemm_fusion_v2`` in XLA's tests) does.

    Returns:
        whether a dot was wrapped into a ``__triton_gemm`` fusion.

    Raises:
        GemmFusionError: the device is a CUDA GPU below compute capability 8.0 (XLA's ``FailedPrecondition``).
    """
    from fusegen.passes.pipeline import pass_options

    opts = pass_options(options)
    debug = opts.debug_options
    if not bool(debug.xla_gpu_enable_triton_gemm):
        return False
    check_compute_capability(opts.device)
    cc = tuple(opts.device.compute_capability)
    return _run(module, debug, cc, bool(opts.options.get("v2", False)))


def _run(module: Module, debug: Any, cc: tuple[int, int], v2: bool) -> bool:
    uniq = NameUniquer(module)
    changed = False
    for comp in list(fusible_computations(module)):
        for dot in [i for i in comp.post_order() if i.opcode in ("dot", "scaled-dot")]:
            if dot.parent is not comp or dot not in comp.instructions:
                continue
            if dot.opcode == "scaled-dot":
                plan = _Plan(dot)
                plan.add(dot)
            else:
                plan, _why = plan_dot_fusion(dot, debug, cc, v2)
                if plan is None:
                    continue
            name = "fusion_" + dot.name if dot.opcode == "scaled-dot" else f"gemm_fusion_{dot.name}"
            make_fusion(module, comp, plan.members, plan.output, "kCustom", name, f"gemm_fusion_{dot.name}_computation",
                        uniq, backend_config={"fusion_backend_config": {"kind": TRITON_GEMM_KIND}},
                        metadata=dot.attrs.get("metadata"))
            _rename_params(module, comp)
            remove_dead(comp)
            topo_sort(comp)
            changed = True
    return changed


def _rename_params(module: Module, comp: Computation) -> None:
    """XLA names the gemm fusion's parameters ``parameter_<n>``."""
    for i in comp.instructions:
        if i.opcode == "fusion" and i.fusion_backend_kind == TRITON_GEMM_KIND:
            fc = i.fused_computation
            for p in fc.parameters:
                if p.name.startswith("param_"):
                    p.name = "parameter_" + p.name[len("param_"):]
