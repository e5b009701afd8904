"""Flops the model charges an HLO instruction (XLA's ``GpuHloCostAnalysis`` / ``FlopsPerElement``).

Mirrors ``GpuPerformanceModelWithIndexingAnalysis::FlopsPerElement`` (gpu_indexing_performance_model.cc):

* pure indexing (bitcast, broadcast, constant, (dynamic-)slice, dynamic-update-slice, gather, iota, pad,
  parameter, transpose, tuple; fusegen adds reshape, get-tuple-element and reverse, which
  ``HloCostAnalysis`` also charges nothing): 0;
* concatenate: 6 per element, 400 when it concatenates along a non-major dimension whose first operand is
  not a multiple of 32 wide (``HandleConcatenate``);
* elementwise ops: the architecture's measured op profile (:mod:`fusegen.perf.op_profiles`);
* reduce: ``(N - 1) x`` the reducer's flops for ``N`` reduced elements per output (XLA's "applied N-1 times");
* dot: ``2 x K`` per output element (an FMA is two flops, ``HloCostAnalysis::HandleDot``);
* the rest as ``HloCostAnalysis`` counts them, divided by the output's elements: convolution
  (``2 x`` input features per group ``x`` kernel window per output), reduce-window (``(window - 1) x``
  reducer), sort (``n log2 n`` compares per sorted row), scatter (updates ``x`` combiner), FFT
  (``5 n log2 n``), anything else 0.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from fusegen.hlo.shape_util import is_elementwise
from fusegen.perf.op_profiles import flops_per_element as profile_flops

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Computation, Instruction

ZERO_FLOP_OPCODES = frozenset({
    "bitcast", "broadcast", "constant", "dynamic-slice", "dynamic-update-slice", "gather", "iota", "pad",
    "parameter", "slice", "transpose", "tuple", "reshape", "get-tuple-element", "reverse", "after-all",
    "partition-id", "replica-id"})


def _first_leaf_elements(instr: "Instruction") -> int:
    shape = instr.shape
    while shape.is_tuple:
        if not shape.tuple_shapes:
            return 1
        shape = shape.tuple_shapes[0]
    return max(shape.numel, 1)


def computation_flops(comp: "Computation", cc: tuple[int, int]) -> int:
    """Flops of one evaluation of a scalar computation (a reducer or comparator): the sum over its instructions."""
    return sum(flops_per_element(i, cc) for i in comp.instructions)


def dot_flops(dot: "Instruction") -> int:
    """``2 x output elements x contracting size`` of a dot (``HloCostAnalysis::GetDotFlops``)."""
    lhs = dot.operands[0].shape
    k = math.prod(lhs.dimensions[d] for d in dot.attrs.get("lhs_contracting_dims", ()))
    return 2 * _first_leaf_elements(dot) * k


def instruction_flops(instr: "Instruction", cc: tuple[int, int]) -> int:
    """Flops of the whole instruction (its flops per element times its output elements, see the module doc)."""
    op = instr.opcode
    if op in ZERO_FLOP_OPCODES:
        return 0
    if op == "dot":
        return dot_flops(instr)
    if op == "convolution":
        # Per output element: one FMA per kernel element feeding it (the kernel's spatial window times its
        # input features, i.e. the kernel's elements over its output features).
        kernel = instr.operands[1].shape
        per_output = max(kernel.numel // max(_output_features(instr), 1), 1)
        return 2 * _first_leaf_elements(instr) * per_output
    if op == "reduce-window":
        from fusegen.hlo.window import parse_window

        size = math.prod(parse_window(instr, instr.operands[0].shape.rank)["size"])
        reducer = instr.called_computations[0] if instr.called_computations else None
        per = computation_flops(reducer, cc) if reducer is not None else 0
        return max(size - 1, 0) * per * _first_leaf_elements(instr)
    if op == "sort":
        shape = instr.operands[0].shape
        dim = int((instr.attrs.get("dimensions") or [shape.rank - 1])[0]) if shape.rank else 0
        n = shape.dimensions[dim] if shape.rank else 1
        rows = max(shape.numel // max(n, 1), 1)
        return int(rows * n * math.ceil(math.log2(max(n, 2))))
    if op == "scatter":
        updates = instr.operands[-1].shape
        comb = instr.called_computations[0] if instr.called_computations else None
        return max(updates.numel, 0) * (computation_flops(comb, cc) if comb is not None else 0)
    if op == "fft":
        n = max(instr.shape.numel if instr.shape.is_array else 1, 2)
        return int(5 * n * math.log2(n))
    return flops_per_element(instr, cc) * _first_leaf_elements(instr)


def _output_features(conv: "Instruction") -> int:
    from fusegen.evaluator.dot_conv import parse_dim_labels

    try:
        _, kernel, _ = parse_dim_labels(conv.attrs.get("dim_labels") or "")
        return conv.operands[1].shape.dimensions[kernel.index("o")]
    except Exception:  # noqa: BLE001 - unparsable labels: count the whole kernel per output
        return 1


def flops_per_element(instr: "Instruction", cc: tuple[int, int]) -> int:
    """``FlopsPerElement``: flops per output element of ``instr`` (see the module docstring).

    Args:
        instr: any HLO instruction (inside a fusion or not).
        cc: the device's compute capability, which selects the op profile.
    """
    op = instr.opcode
    if op in ZERO_FLOP_OPCODES:
        return 0
    if op == "concatenate":
        dim = int((instr.attrs.get("dimensions") or [0])[0])
        first = instr.operands[0].shape
        return 400 if dim > 0 and first.dimensions[dim] & 31 else 6
    if is_elementwise(instr):
        ty = instr.shape.element_type if instr.shape.is_array else "f32"
        return profile_flops(cc, op, ty)
    if op == "reduce":
        reducer = instr.called_computations[0]
        per = computation_flops(reducer, cc)
        operand = instr.operands[0].shape
        factor = max(operand.numel // _first_leaf_elements(instr), 1)
        return (factor - 1) * per
    if op in ("dot", "convolution", "reduce-window", "sort", "scatter", "fft"):
        return instruction_flops(instr, cc) // _first_leaf_elements(instr)
    if op in ("map", "select-and-scatter") and instr.called_computations:
        return computation_flops(instr.called_computations[0], cc)
    return 0
