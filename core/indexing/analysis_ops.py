"""Per-opcode output-to-input indexing of one HLO instruction (the ``Compute*OpIndexing`` functions of
XLA's ``xla/hlo/analysis/indexing_analysis.cc`` and ``indexing_analysis_utils.cc``).

Every function takes an :class:`~fusegen.hlo.ir.Instruction` and returns an
:class:`~fusegen.indexing.analysis_types.InstructionIndexing` whose ``i``-th entry is the set of maps from the
instruction's output index to operand ``i``'s index.
"""

from __future__ import annotations

import re
from typing import Sequence

from fusegen.hlo.shape_util import inverse_permutation
from fusegen.hlo.ir import Instruction, Shape
from fusegen.indexing.analysis_shapes import (
    bitcast_map, pad_map, reshape_exprs, transpose_exprs, window_map,
)
from fusegen.indexing.analysis_types import InstructionIndexing, OperandIndexing, RuntimeVarIndexing
from fusegen.indexing.expr import AffineExpr, const, dim, rt, sym
from fusegen.indexing.interval import Interval
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify import remove_unused_vars, simplify


def output_shape(inst: Instruction, output_id: int = 0) -> Shape:
    """``GetOutputShape``: the ``output_id``-th tuple element, or the shape itself."""
    if inst.shape.is_tuple:
        return inst.shape.tuple_shapes[output_id]
    return inst.shape


def identity_map(shape: Shape) -> IndexingMap:
    """``CreateIdentityMap`` (a tuple: its first element, as for variadic reduce)."""
    if shape.is_tuple:
        return identity_map(shape.tuple_shapes[0])
    return IndexingMap.identity(shape.dimensions)


def scalar_map(shape: Shape) -> IndexingMap:
    """``CreateScalarIndexingMap``: every output point reads the one element of a scalar."""
    return IndexingMap.from_tensor_sizes([], shape.dimensions)


def int_list(value) -> list[int]:
    """An attribute that is a tuple already, or raw text such as ``{1,2,3}``."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [int(v) for v in value]
    return [int(v) for v in re.findall(r"-?\d+", str(value))]


# ---------------------------------------------------------------------------------------- elementwise
def elementwise(inst: Instruction) -> InstructionIndexing:
    """``ComputeOutputToInputCwiseOpIndexing``: identity; a scalar operand of a non-scalar op (``select``'s
    predicate) reads its one element."""
    shape = output_shape(inst)
    out = []
    for o in inst.operands:
        m = scalar_map(shape) if (not o.shape.dimensions and shape.dimensions) else identity_map(shape)
        out.append([OperandIndexing(m)])
    return InstructionIndexing(out)


def broadcast(inst: Instruction) -> InstructionIndexing:
    """``broadcast``: the output dims listed in ``dimensions`` index the operand; XLA
    ``ComputeOutputToInputBroadcastOpIndexing``."""
    return InstructionIndexing.from_maps([IndexingMap.from_tensor_sizes(
        [dim(d) for d in int_list(inst.attrs.get("dimensions"))], inst.shape.dimensions)])


def concatenate(inst: Instruction) -> InstructionIndexing:
    """Each operand's map is the identity shifted by its offset, on the slice of the output it fills."""
    cdim = int_list(inst.attrs.get("dimensions"))[0]
    dims = [Interval(0, n - 1) for n in inst.shape.dimensions]
    exprs = [dim(i) for i in range(inst.shape.rank)]
    out, offset = [], 0
    for o in inst.operands:
        size = o.shape.dimensions[cdim]
        exprs[cdim] = dim(cdim) - offset
        dims[cdim] = Interval(offset, offset + size - 1)
        out.append(IndexingMap(list(exprs), list(dims)))
        offset += size
    return InstructionIndexing.from_maps(out)


def transpose(inst: Instruction) -> InstructionIndexing:
    """``transpose``: the inverse permutation of the output index; XLA ``ComputeOutputToInputTransposeOpIndexing``.
    ``transpose``: the inverse permutation of the output index; XLA ``ComputeOutputToInputTransposeOpIndexing``."""
    perm = inverse_permutation(int_list(inst.attrs.get("dimensions")))
    return InstructionIndexing.from_maps([IndexingMap.from_tensor_sizes(transpose_exprs(perm), inst.shape.dimensions)])


def reshape(inst: Instruction) -> InstructionIndexing:
    """``reshape``: the row-major linear index re-split into the operand's dims; XLA
    ``ComputeOutputToInputReshapeOpIndexing``."""
    src, dst = inst.operands[0].shape, inst.shape
    m = IndexingMap.from_tensor_sizes(reshape_exprs(src.dimensions, dst.dimensions), dst.dimensions)
    return InstructionIndexing.from_maps([simplify_preserving_point_dims(m)])


def bitcast(inst: Instruction) -> InstructionIndexing:
    """``bitcast`` (transpose, reshape or transpose-reshape-transpose by the layouts); XLA
    ``ComputeOutputToInputBitcastOpIndexing``."""
    m = bitcast_map(inst.shape, inst.operands[0].shape)
    return InstructionIndexing.from_maps([simplify_preserving_point_dims(m)])


def simplify_preserving_point_dims(m: IndexingMap) -> IndexingMap:
    """``Simplify(SimplifyPointDimensions::kPreserve)`` where the map library offers it."""
    if m.is_undefined:
        return m
    return simplify(m, fold_point_vars=False)[0]


def reverse_map(dims_sizes: Sequence[int], reversed_dims: Sequence[int]) -> IndexingMap:
    """``ComputeReverseIndexingMap``: ``d -> size - 1 - d`` on the reversed dimensions (its own inverse)."""
    rev = set(reversed_dims)
    return IndexingMap.from_tensor_sizes(
        [(-dim(i) + (n - 1)) if i in rev else dim(i) for i, n in enumerate(dims_sizes)], dims_sizes)


def reverse(inst: Instruction) -> InstructionIndexing:
    """``reverse``: ``size - 1 - d`` on the reversed dims; XLA ``ComputeReverseOpIndexing``."""
    return InstructionIndexing.from_maps([reverse_map(inst.shape.dimensions, int_list(inst.attrs.get("dimensions")))])


def slice_(inst: Instruction) -> InstructionIndexing:
    """``slice``: ``start + d * stride`` per dim; XLA ``ComputeOutputToInputSliceOpIndexing``."""
    spec = inst.attrs.get("slice") or []
    exprs = [dim(i) * stride + start for i, (start, _limit, stride) in enumerate(spec)]
    return InstructionIndexing.from_maps([IndexingMap.from_tensor_sizes(exprs, inst.shape.dimensions)])


def pad(inst: Instruction) -> InstructionIndexing:
    """``pad``: the operand map on the non-padding points (interior points by a ``mod`` constraint) and the padding
    value as a scalar; XLA ``ComputeOutputToInputPadOpIndexing``."""
    cfg = inst.attrs.get("padding") or []
    m = pad_map(inst.shape.dimensions, [c[0] for c in cfg], [c[1] for c in cfg], [c[2] for c in cfg])
    return InstructionIndexing.from_maps([m, scalar_map(inst.shape)])


# ---------------------------------------------------------------------------------------- reductions
def reduce_input_map(input_dims: Sequence[int], output_dims: Sequence[int], reduced: Sequence[int]) -> IndexingMap:
    """``ComputeReduceInputIndexingMap``: kept dimensions from the output, reduced ones as symbols."""
    red = set(reduced)
    exprs, sym_sizes, out_id = [], [], 0
    for i, n in enumerate(input_dims):
        if i in red:
            exprs.append(sym(len(sym_sizes)))
            sym_sizes.append(n)
        else:
            exprs.append(dim(out_id))
            out_id += 1
    return IndexingMap.from_tensor_sizes(exprs, output_dims, sym_sizes)


def reduce(inst: Instruction) -> InstructionIndexing:
    """``reduce`` (and variadic): each input read over the reduced dims as symbols, each init value as a scalar; XLA
    ``ComputeOutputToInputReduceOpIndexing``."""
    n_inputs = len(inst.operands) // 2
    out = output_shape(inst)
    m = reduce_input_map(inst.operands[0].shape.dimensions, out.dimensions, int_list(inst.attrs.get("dimensions")))
    return InstructionIndexing.from_maps([m] * n_inputs + [scalar_map(out)] * (len(inst.operands) - n_inputs))


def scan(inst: Instruction, output_id: int = 0) -> InstructionIndexing:
    """``scan`` (operands: inputs, then ``num_carries`` carries; results: outputs, then carries): XLA
    ``ComputeOutputToInputScanOpIndexing``. A scalar result (a carry) reads every operand as a scalar; an
    array result reads each input at its own index (identity over the result) and each carry as a scalar."""
    n = len(inst.operands)
    num_carries = int(inst.attrs.get("num_carries") or 0)
    out = output_shape(inst, output_id)
    if not out.dimensions:
        return InstructionIndexing.from_maps([scalar_map(out)] * n)
    ident = IndexingMap.from_tensor_sizes([dim(i) for i in range(out.rank)], out.dimensions, [])
    return InstructionIndexing.from_maps([ident] * (n - num_carries) + [scalar_map(out)] * num_carries)


def reduce_window(inst: Instruction) -> InstructionIndexing:
    """``reduce-window``: window, stride, padding and dilations as symbols and constraints; XLA
    ``ComputeOutputToInputReduceWindowOpIndexing``."""
    n_inputs = len(inst.operands) // 2
    out = output_shape(inst)
    m = window_map(inst.operands[0].shape.dimensions, out.dimensions, inst.attrs.get("window") or {})
    return InstructionIndexing.from_maps([m] * n_inputs + [scalar_map(out)] * (len(inst.operands) - n_inputs))


# ---------------------------------------------------------------------------------------- dot / conv
def _dot_exprs(lhs_rank: int, rhs_rank: int, lhs_batch: Sequence[int], rhs_batch: Sequence[int],
               lhs_contracting: Sequence[int], rhs_contracting: Sequence[int],
               rhs_skip: Sequence[int] = ()) -> tuple[list, list]:
    """Operand index expressions of a dot: batch, then lhs free, then rhs free dims (``rhs_skip`` left out)
    are the output dims ``d0..``; contracting pair ``k`` is the symbol ``s_k``; skipped dims stay ``None``."""
    lhs_e: list[AffineExpr | None] = [None] * lhs_rank
    rhs_e: list[AffineExpr | None] = [None] * rhs_rank
    o = 0
    for lb, rb in zip(lhs_batch, rhs_batch):
        lhs_e[lb] = rhs_e[rb] = dim(o)
        o += 1
    for exprs, batch, skip in ((lhs_e, lhs_batch, lhs_contracting),
                               (rhs_e, rhs_batch, tuple(rhs_contracting) + tuple(rhs_skip))):
        for i in range(len(exprs)):
            if i not in batch and i not in skip:
                exprs[i] = dim(o)
                o += 1
    for k, (lc, rc) in enumerate(zip(lhs_contracting, rhs_contracting)):
        lhs_e[lc] = rhs_e[rc] = sym(k)
    return lhs_e, rhs_e


def dot_operand_maps(lhs: Sequence[int], rhs: Sequence[int], out: Sequence[int], lhs_batch: Sequence[int],
                     rhs_batch: Sequence[int], lhs_contracting: Sequence[int],
                     rhs_contracting: Sequence[int]) -> tuple[IndexingMap, IndexingMap]:
    """``ComputeDotOperandsIndexing``: batch then lhs then rhs free dims are output dims; contracting
    dims are shared symbols."""
    lhs_e, rhs_e = _dot_exprs(len(lhs), len(rhs), lhs_batch, rhs_batch, lhs_contracting, rhs_contracting)
    sizes = [lhs[lc] for lc in lhs_contracting]
    return (IndexingMap.from_tensor_sizes(lhs_e, out, sizes), IndexingMap.from_tensor_sizes(rhs_e, out, sizes))


def _dot_maps(inst: Instruction) -> tuple[IndexingMap, IndexingMap]:
    a = inst.attrs
    return dot_operand_maps(inst.operands[0].shape.dimensions, inst.operands[1].shape.dimensions,
                            inst.shape.dimensions, int_list(a.get("lhs_batch_dims")), int_list(a.get("rhs_batch_dims")),
                            int_list(a.get("lhs_contracting_dims")), int_list(a.get("rhs_contracting_dims")))


def dot(inst: Instruction) -> InstructionIndexing:
    """``dot``: batch and free dims from the output, contracting dims as symbols; XLA
    ``ComputeOutputToInputDotOpIndexing``."""
    return InstructionIndexing.from_maps(list(_dot_maps(inst)))


def ragged_dot(inst: Instruction) -> InstructionIndexing:
    """``ComputeOutputToInputRaggedDotOpIndexing``: for a ragged non-contracting dimension, lhs ``[m, k]``,
    rhs ``[g, k, n]`` and group sizes ``[..., g]`` over the contracting symbols and a group symbol (any group
    may own a row); ragged contracting or batch dimensions: unknown."""
    a = inst.attrs
    lhs_b, rhs_b = int_list(a.get("lhs_batch_dims")), int_list(a.get("rhs_batch_dims"))
    lhs_c, rhs_c = int_list(a.get("lhs_contracting_dims")), int_list(a.get("rhs_contracting_dims"))
    ragged = int_list(a.get("lhs_ragged_dims"))
    group = int_list(a.get("rhs_group_dims"))
    if len(inst.operands) != 3 or not ragged or not group or ragged[0] in lhs_c or ragged[0] in lhs_b:
        return InstructionIndexing.unknown(len(inst.operands))
    lhs, rhs, gs = (o.shape.dimensions for o in inst.operands)
    sym_sizes = [lhs[d] for d in lhs_c] + [gs[-1]]
    g = sym(len(lhs_c))
    lhs_e, rhs_e = _dot_exprs(len(lhs), len(rhs), lhs_b, rhs_b, lhs_c, rhs_c, rhs_skip=group[:1])
    rhs_e[group[0]] = g
    gs_e = [dim(i) for i in range(len(lhs_b))][:len(gs) - 1] + [g]
    out = inst.shape.dimensions
    return InstructionIndexing.from_maps([IndexingMap.from_tensor_sizes(e, out, sym_sizes)
                                          for e in (lhs_e, rhs_e, gs_e)])


def _rescale(m: IndexingMap, operand: Sequence[int], scale: Sequence[int]) -> IndexingMap:
    """``RescaleIndexingMap``: each result divided by ``operand_dim / scale_dim``."""
    exprs = [e if s == n else e.floordiv(n // s) for e, n, s in zip(m.exprs, operand, scale)]
    return m.replace(exprs=exprs)


def scaled_dot(inst: Instruction) -> InstructionIndexing:
    """``scaled-dot``: the dot maps, scale operands rescaled by their block sizes; XLA
    ``ComputeOutputToInputScaledDotOpIndexing``."""
    lhs, rhs = _dot_maps(inst)
    shapes = [o.shape.dimensions for o in inst.operands]
    return InstructionIndexing.from_maps([lhs, rhs, _rescale(lhs, shapes[0], shapes[2]), _rescale(rhs, shapes[1], shapes[3])])


def _conv_labels(inst: Instruction) -> tuple[str, str, str]:
    text = str(inst.attrs.get("dim_labels") or "")
    m = re.fullmatch(r"(\w+)_(\w+)->(\w+)", text)
    if not m:
        raise ValueError(f"%{inst.name}: unreadable dim_labels {text!r}")
    return m.group(1), m.group(2), m.group(3)


def convolution(inst: Instruction) -> InstructionIndexing:
    """``ComputeOutputToInputConvolutionOpIndexing``: spatial dims through the window map, the input
    feature dim a symbol (offset by the feature group), kernel spatial dims symbols (reversed where the
    window says so)."""
    lhs_l, rhs_l, out_l = _conv_labels(inst)
    in_shape, k_shape, out = (inst.operands[0].shape, inst.operands[1].shape, inst.shape)
    rank = out.rank
    spatial = rank - 2
    in_sp = [lhs_l.index(str(i)) for i in range(spatial)]
    k_sp = [rhs_l.index(str(i)) for i in range(spatial)]
    out_sp = [out_l.index(str(i)) for i in range(spatial)]
    window = dict(inst.attrs.get("window") or {})
    win = window_map([in_shape.dimensions[d] for d in in_sp], [out.dimensions[d] for d in out_sp], window)
    to_out = {dim(i): dim(out_sp[i]) for i in range(spatial)}
    in_e: list[AffineExpr | None] = [None] * rank
    for i in range(spatial):
        in_e[in_sp[i]] = win.exprs[i].replace(to_out)
    constraints = [(e.replace(to_out), b) for e, b in win.constraints.items()]
    in_syms = list(win.syms)
    k_e: list[AffineExpr | None] = [None] * rank
    reversal = list(window.get("rhs_reversal", ())) or [0] * spatial
    for i in range(spatial):
        k_e[k_sp[i]] = (-sym(i) + (k_shape.dimensions[k_sp[i]] - 1)) if reversal[i] else sym(i)
    out_f = dim(out_l.index("f"))
    k_e[rhs_l.index("o")] = out_f
    k_syms = [Interval(0, k_shape.dimensions[d] - 1) for d in k_sp]
    group = k_shape.dimensions[rhs_l.index("i")]
    feature = sym(len(in_syms))
    in_syms.append(Interval(0, group - 1))
    k_e[rhs_l.index("i")] = sym(len(k_syms))
    k_syms.append(Interval(0, group - 1))
    fgc = int(inst.attrs.get("feature_group_count", 1) or 1)
    if fgc > 1:
        per_group = out.dimensions[out_l.index("f")] // fgc
        feature = out_f.floordiv(per_group) * group + feature
    in_e[lhs_l.index("f")] = feature
    batch = dim(out_l.index("b"))
    bgc = int(inst.attrs.get("batch_group_count", 1) or 1)
    if bgc > 1:
        in_e[lhs_l.index("b")] = sym(len(in_syms)) * out.dimensions[out_l.index("b")] + batch
        in_syms.append(Interval(0, bgc - 1))
    else:
        in_e[lhs_l.index("b")] = batch
    dims = [Interval(0, n - 1) for n in out.dimensions]
    lhs_map = remove_unused_vars(simplify(IndexingMap(in_e, dims, in_syms, (), constraints))[0], dims=False)[0]
    rhs_map = remove_unused_vars(simplify(IndexingMap(k_e, dims, k_syms))[0], dims=False)[0]
    return InstructionIndexing.from_maps([lhs_map, rhs_map])


# ---------------------------------------------------------------------------------------- runtime values
def literal_scalar(inst: Instruction) -> int | None:
    """The integer value of a scalar (or one-element) constant, else ``None``."""
    lit = inst.attrs.get("literal")
    if lit is None:
        return None
    nums = re.findall(r"-?\d+", str(lit))
    if len(nums) != 1 or inst.shape.numel != 1:
        return None
    try:
        return int(str(lit).strip("{} "))
    except ValueError:
        return None


def optimize_rt_var(inst: Instruction, rt_map: IndexingMap, feasible: Interval) -> AffineExpr | None:
    """``OptimizeHloRTVar``: a constant in range is its value; an iota is the index along its dimension."""
    if inst.opcode == "constant":
        if all(e.is_const for e in rt_map.exprs):
            v = literal_scalar(inst)
            if v is not None and feasible.contains(v):
                return const(v)
        return None
    if inst.opcode == "iota":
        d = int(inst.attrs.get("iota_dimension", 0))
        if d < rt_map.num_results:
            return rt_map.exprs[d]
    return None


def with_rt_vars(exprs: list[AffineExpr], dims: list[Interval],
                 rt_vars: list[tuple[Interval, Instruction, IndexingMap]]) -> OperandIndexing:
    """``CreateOperandIndexingWithRTVars``: folds runtime variables that are constants or iotas, then drops
    the unused ones."""
    subst = {}
    for i, (feasible, inst, m) in enumerate(rt_vars):
        folded = optimize_rt_var(inst, m, feasible)
        if folded is not None:
            subst[rt(i)] = folded
    exprs = [e.replace(subst) for e in exprs]
    m = IndexingMap(exprs, dims, (), [f for f, _, _ in rt_vars])
    return OperandIndexing(m, tuple(RuntimeVarIndexing(inst, rm) for _, inst, rm in rt_vars)).without_unused_symbols()


def dynamic_slice(inst: Instruction) -> InstructionIndexing:
    """``dynamic-slice``: offsets as runtime variables clamped into range (constants and iotas folded); XLA
    ``ComputeOutputToInputDynamicSliceOpIndexing``."""
    out = inst.shape
    src = inst.operands[0].shape
    sizes = int_list(inst.attrs.get("dynamic_slice_sizes"))
    start_map = scalar_map(out)
    if len(inst.operands) < 2 or inst.operands[1].shape.dimensions:
        return InstructionIndexing.unknown(len(inst.operands))  # the old vector-of-starts form
    exprs, rts = [], []
    for d, size in enumerate(sizes):
        feasible = Interval(0, src.dimensions[d] - size)
        offset = inst.operands[1 + d]
        folded = optimize_rt_var(offset, start_map, feasible)
        if folded is not None:
            exprs.append(dim(d) + folded)
        else:
            exprs.append(dim(d) + rt(len(rts)))
            rts.append((feasible, offset, start_map))
    first = with_rt_vars(exprs, [Interval(0, n - 1) for n in out.dimensions], rts)
    return InstructionIndexing.from_operand_indexing([first] + [OperandIndexing(start_map)] * (len(inst.operands) - 1))


def dynamic_update_slice(inst: Instruction) -> InstructionIndexing:
    """``dynamic-update-slice``: identity to the operand, the update at runtime offsets; XLA
    ``ComputeOutputToInputDynamicUpdateSliceOpIndexing``."""
    out = inst.shape
    update = inst.operands[1].shape
    start_map = scalar_map(out)
    exprs, rts = [], []
    for d, size in enumerate(update.dimensions):
        exprs.append(dim(d) - rt(d))
        rts.append((Interval(0, out.dimensions[d] - size), inst.operands[2 + d], start_map))
    upd = with_rt_vars(exprs, [Interval(0, n - 1) for n in out.dimensions], rts)
    return InstructionIndexing.from_operand_indexing(
        [OperandIndexing(IndexingMap.identity(out.dimensions)), upd]
        + [OperandIndexing(start_map)] * (len(inst.operands) - 2))


def _is_simplified_gather(inst: Instruction) -> bool:
    """``GatherSimplifier::IsSimplifiedGather``: indices ``[N, k]`` with the index vector last, no collapsed
    dims, and the offset dims ``1..rank-1``."""
    idx = inst.operands[1].shape
    return (idx.rank == 2 and int(inst.attrs.get("index_vector_dim", -1)) == 1
            and not int_list(inst.attrs.get("collapsed_slice_dims"))
            and int_list(inst.attrs.get("offset_dims")) == list(range(1, inst.shape.rank)))


def gather(inst: Instruction) -> InstructionIndexing:
    """``gather`` in XLA's simplified form (runtime variables for the start indices; otherwise unknown); XLA
    ``ComputeOutputToInputGatherOpIndexing``."""
    if not _is_simplified_gather(inst):
        return InstructionIndexing.unknown(len(inst.operands))
    operand, indices, out = inst.operands[0].shape, inst.operands[1].shape, inst.shape
    vec_len = indices.dimensions[1]
    dims = [Interval(0, n - 1) for n in out.dimensions]
    indices_map = IndexingMap([dim(0), sym(0)], dims, [Interval(0, vec_len - 1)])
    offset_dims = int_list(inst.attrs.get("offset_dims"))
    start_index_map = int_list(inst.attrs.get("start_index_map"))
    exprs, rts = [], []
    for d, size in enumerate(int_list(inst.attrs.get("slice_sizes"))):
        e = dim(offset_dims[d])
        if d in start_index_map:
            k = start_index_map.index(d)
            rt_map = IndexingMap([dim(0), const(k)], dims)
            rts.append((Interval(0, operand.dimensions[d] - size), inst.operands[1], rt_map))
            e = e + rt(len(rts) - 1)
        exprs.append(e)
    return InstructionIndexing.from_operand_indexing([with_rt_vars(exprs, dims, rts), OperandIndexing(indices_map)])


def all_gather(inst: Instruction) -> InstructionIndexing:
    """``ComputeOutputToInputAllGatherOpIndexing``: the gathered dim wraps per replica; the replica id is
    the gathered index divided by the operand's size."""
    gdim = int_list(inst.attrs.get("dimensions"))[0]
    n = inst.operands[0].shape.dimensions[gdim]
    out = inst.shape.dimensions
    exprs = [dim(i) % n if i == gdim else dim(i) for i in range(len(out))]
    replica = IndexingMap.from_tensor_sizes([dim(gdim).floordiv(n)], out)
    return InstructionIndexing.from_operand_indexing(
        [OperandIndexing(IndexingMap.from_tensor_sizes(exprs, out), (), replica)])


def get_tuple_element(inst: Instruction) -> InstructionIndexing:
    """``get-tuple-element``: the identity to the tuple operand's element."""
    return InstructionIndexing.from_maps([identity_map(inst.shape)])
