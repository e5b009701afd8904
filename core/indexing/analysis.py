"""The indexing analysis: which elements of its operands an HLO instruction (or fusion) reads per output
element, and which output elements an operand element feeds.

Mirrors XLA's ``xla/hlo/analysis/indexing_analysis.cc``:

* :func:`compute_output_to_input_indexing` (``ComputeOutputToInputIndexing``): for each operand, the set of
  maps from the instruction's output index (output ``output_id`` of a tuple-shaped one) to that operand's
  index. Fusions compose their body's maps from the root down to the parameters.
* :func:`compute_input_to_output_indexing` (``ComputeInputToOutputIndexing``): the inverse direction for
  the ops where XLA has it (elementwise, broadcast, bitcast, concatenate, reduce, reshape, reverse, slice,
  transpose, tuple); other ops give the unknown map.
* :func:`compute_grouped_output_to_input_indexing` (``ComputeGroupedOutputToInputIndexing``): the maps from
  one instruction of a fusion to every instruction it reads, keyed by instruction.
* the physical-layout variants (maps between physical, i.e. layout-ordered, indices) and
  :func:`compute_epilogue_input_to_output_indexing`.

An op XLA does not cover yields ``IndexingMap.unknown()`` per operand (printed ``unknown indexing``).
"""

from __future__ import annotations

from typing import Callable, Iterable

import attrs

from fusegen.hlo.shape_util import is_elementwise
from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen.indexing import analysis_ops as ops
from fusegen.indexing.analysis_shapes import (
    bitcast_map, is_identity_permutation_map, logical_to_physical_map, physical_to_logical_map, reshape_exprs,
    transpose_exprs,
)
from fusegen.indexing.analysis_types import InstructionIndexing, OperandIndexing, RuntimeVarIndexing, unique
from fusegen.indexing.expr import dim, sym
from fusegen.indexing.interval import Interval
from fusegen.indexing.compose import compose_indexing_maps
from fusegen.indexing.map import IndexingMap
from fusegen.indexing.simplify import simplify

_COLLECTIVE_ELEMENTWISE = frozenset({"map", "all-reduce-start", "all-reduce-done"})

_OUTPUT_TO_INPUT: dict[str, Callable[[Instruction], InstructionIndexing]] = {
    "bitcast": ops.bitcast,
    "all-gather": ops.all_gather,
    "broadcast": ops.broadcast,
    "concatenate": ops.concatenate,
    "convolution": ops.convolution,
    "dot": ops.dot,
    "dynamic-update-slice": ops.dynamic_update_slice,
    "dynamic-slice": ops.dynamic_slice,
    "gather": ops.gather,
    "get-tuple-element": ops.get_tuple_element,
    "pad": ops.pad,
    "ragged-dot": ops.ragged_dot,
    "reduce": ops.reduce,
    "reduce-window": ops.reduce_window,
    "reshape": ops.reshape,
    "reverse": ops.reverse,
    "scaled-dot": ops.scaled_dot,
    "slice": ops.slice_,
    "transpose": ops.transpose,
}
_NO_OPERANDS = frozenset({"constant", "iota", "parameter"})


def compute_output_to_input_indexing(instr: Instruction, output_id: int = 0) -> InstructionIndexing:
    """Maps from ``instr``'s output ``output_id`` to each operand (``ComputeOutputToInputIndexing``).

    Returns an :class:`InstructionIndexing` with one set per operand (none for constants, iotas,
    parameters); an uncovered op gives the unknown map for every operand.
    """
    op = instr.opcode
    if (is_elementwise(instr) and op != "bitcast") or op in _COLLECTIVE_ELEMENTWISE:
        return ops.elementwise(instr)
    if op in _NO_OPERANDS:
        return InstructionIndexing([])
    if op == "fusion":
        return _fusion_output_to_input(instr, output_id)
    if op == "scan":  # the only op besides fusions whose maps depend on which result
        return ops.scan(instr, output_id)
    fn = _OUTPUT_TO_INPUT.get(op)
    if fn is None:
        return InstructionIndexing.unknown(len(instr.operands))
    return fn(instr)


# ---------------------------------------------------------------------------------------- input -> output
def _i2o_broadcast(instr: Instruction, input_id: int) -> InstructionIndexing:
    in_shape = instr.operands[0].shape
    bdims = ops.int_list(instr.attrs.get("dimensions"))
    exprs, added = [], []
    for out_d, n in enumerate(instr.shape.dimensions):
        if out_d in bdims:
            exprs.append(dim(bdims.index(out_d)))
        else:
            exprs.append(sym(len(added)))
            added.append(n)
    return InstructionIndexing.from_maps([IndexingMap.from_tensor_sizes(exprs, in_shape.dimensions, added)])


def _i2o_concatenate(instr: Instruction, input_id: int) -> InstructionIndexing:
    cdim = ops.int_list(instr.attrs.get("dimensions"))[0]
    offset = sum(o.shape.dimensions[cdim] for o in instr.operands[:input_id])
    in_dims = instr.operands[input_id].shape.dimensions
    exprs = [dim(i) + offset if i == cdim else dim(i) for i in range(len(in_dims))]
    return InstructionIndexing.from_maps([IndexingMap.from_tensor_sizes(exprs, in_dims)])


def _i2o_reduce(instr: Instruction, input_id: int) -> InstructionIndexing:
    arity = len(instr.operands) // 2
    out = ops.output_shape(instr).dimensions
    if input_id >= arity:  # an init value feeds every output element
        m = IndexingMap.from_tensor_sizes([sym(i) for i in range(len(out))], [], out)
    else:
        red = set(ops.int_list(instr.attrs.get("dimensions")))
        in_dims = instr.operands[input_id].shape.dimensions
        m = IndexingMap.from_tensor_sizes([dim(i) for i in range(len(in_dims)) if i not in red], in_dims)
    return InstructionIndexing([[OperandIndexing(m)] for _ in range(arity)])


def _i2o_reshape(instr: Instruction, input_id: int) -> InstructionIndexing:
    src, dst = instr.operands[0].shape, instr.shape
    m = IndexingMap.from_tensor_sizes(reshape_exprs(dst.dimensions, src.dimensions), src.dimensions)
    return InstructionIndexing.from_maps([ops.simplify_preserving_point_dims(m)])


def _i2o_bitcast(instr: Instruction, input_id: int) -> InstructionIndexing:
    return InstructionIndexing.from_maps([ops.simplify_preserving_point_dims(
        bitcast_map(instr.operands[0].shape, instr.shape))])


def _i2o_slice(instr: Instruction, input_id: int) -> InstructionIndexing:
    spec = instr.attrs.get("slice") or []
    exprs = [(dim(i) - start).floordiv(stride) for i, (start, _l, stride) in enumerate(spec)]
    m = IndexingMap.from_tensor_sizes(exprs, instr.operands[0].shape.dimensions)
    for i, (start, _l, stride) in enumerate(spec):
        m = m.with_constraint(dim(i), Interval(start, (instr.shape.dimensions[i] - 1) * stride + start))
        m = m.with_constraint((dim(i) - start) % stride, Interval(0, 0))
    return InstructionIndexing.from_maps([m])


def _i2o_transpose(instr: Instruction, input_id: int) -> InstructionIndexing:
    perm = ops.int_list(instr.attrs.get("dimensions"))
    return InstructionIndexing.from_maps([IndexingMap.from_tensor_sizes(transpose_exprs(perm),
                                                                        instr.operands[0].shape.dimensions)])


_INPUT_TO_OUTPUT: dict[str, Callable[[Instruction, int], InstructionIndexing]] = {
    "bitcast": _i2o_bitcast,
    "broadcast": _i2o_broadcast,
    "concatenate": _i2o_concatenate,
    "reduce": _i2o_reduce,
    "reshape": _i2o_reshape,
    "reverse": lambda i, _k: ops.reverse(i),
    "slice": _i2o_slice,
    "transpose": _i2o_transpose,
}


def compute_input_to_output_indexing(instr: Instruction, input_id: int = 0) -> InstructionIndexing:
    """Maps from operand ``input_id``'s index to each output of ``instr`` (``ComputeInputToOutputIndexing``).

    One set per output (one for a non-tuple result); uncovered ops give the unknown map per output.
    """
    op = instr.opcode
    if (is_elementwise(instr) and op != "bitcast") or op in _COLLECTIVE_ELEMENTWISE:
        return InstructionIndexing.from_maps([ops.identity_map(instr.shape)])
    fn = _INPUT_TO_OUTPUT.get(op)
    if fn is not None:
        return fn(instr, input_id)
    if op == "tuple":
        return InstructionIndexing.from_maps([ops.identity_map(instr.shape.tuple_shapes[input_id])])
    return InstructionIndexing.unknown(len(instr.shape.tuple_shapes) if instr.shape.is_tuple else 1)


# ---------------------------------------------------------------------------------------- composition
def compose_operand_indexing(first: OperandIndexing, second: OperandIndexing) -> OperandIndexing:
    """``ComposeOperandIndexing`` (``indexing_analysis.cc``): ``second`` after ``first``. The records of the
    runtime variables are ``first``'s, then ``second``'s, each of those now a map from ``first``'s domain
    that keeps ``first``'s runtime variables (a dynamic-slice of a dynamic-slice: the inner slice's starts
    are read at ``(d0, d1){rt0, rt1} -> ()``, constrained by the outer starts). XLA keeps this record order
    although the composed map numbers its runtime variables ``second``'s first (``ComposeIndexingMaps``);
    the text XLA prints follows both, and so does this."""
    m = compose_indexing_maps(first.map, second.map)
    rts = first.rt_vars + tuple(RuntimeVarIndexing(r.instruction, compose_indexing_maps(first.map, r.map))
                                for r in second.rt_vars)
    if first.replica_id_map is not None and second.replica_id_map is not None:
        return OperandIndexing(IndexingMap.unknown())  # chained collectives: XLA does not support them
    replica = first.replica_id_map
    if second.replica_id_map is not None:
        replica = compose_indexing_maps(first.map, second.replica_id_map)
    return OperandIndexing(m, rts, replica)


def _passes_through(first: OperandIndexing, second: OperandIndexing) -> bool:
    """Whether ``second`` is an identity over a domain that provably holds all of ``first``'s results, so that
    the simplified composition is ``first`` itself (elementwise ops: the common case, and the costly one)."""
    m2, m1 = second.map, first.map
    if second.rt_vars or second.replica_id_map is not None or m2.syms or m2.rts or m2.constraints:
        return False
    if m1.is_undefined or m1.is_known_empty or m2.is_undefined or m2.is_known_empty:
        return False
    if m2.exprs != tuple(dim(i) for i in range(m2.num_dims)) or m1.num_results != m2.num_dims:
        return False
    from fusegen.indexing.linear import expr_range

    tables = {"d": m1.dims, "s": m1.syms, "r": m1.rts}
    bounds = lambda kind, i: tables[kind][i]  # noqa: E731
    return all(b.contains(expr_range(e, bounds, m1.constraints)) for e, b in zip(m1.exprs, m2.dims))


def _compose_simplified(first: OperandIndexing, second: OperandIndexing) -> OperandIndexing:
    """``ComposeOperandIndexing`` then ``Simplify`` and ``RemoveUnusedSymbols`` (``first`` itself when
    ``second`` passes it through unchanged)."""
    if _passes_through(first, second):
        return first
    return compose_operand_indexing(first, second).simplified()


@attrs.define
class FusionAdaptor:
    """XLA's ``HloFusionAdaptor``: the instructions of a fusion (post order, parameters left out) and how
    an operand resolves: a fused parameter is the fusion's operand outside."""

    instructions: list[Instruction]
    params: dict[int, Instruction] = attrs.field(factory=dict)  # id(fused parameter) -> outer operand
    roots: list[Instruction] = attrs.field(factory=list)

    @classmethod
    def for_instruction(cls, instr: Instruction) -> "FusionAdaptor":
        """``ForInstruction``: a fusion's body, or the single instruction."""
        if instr.opcode != "fusion":
            return cls([instr], {}, [instr])
        body = instr.fused_computation
        params = {id(p): instr.operands[p.parameter_number] for p in body.parameters}
        root = body.root
        roots = list(root.operands) if root.opcode == "tuple" else [root]
        order = [i for i in body.post_order()
                 if i.opcode != "parameter" and not (i is root and i.opcode == "tuple")]
        return cls(order, params, roots)

    @classmethod
    def for_computation(cls, comp: Computation) -> "FusionAdaptor":
        root = comp.root
        roots = list(root.operands) if root.opcode == "tuple" else [root]
        order = [i for i in comp.post_order() if i.opcode != "parameter" and not (i is root and i.opcode == "tuple")]
        return cls(order, {}, roots)

    @classmethod
    def for_producer_consumer(cls, producer: Instruction, consumer: Instruction) -> "FusionAdaptor":
        a, b = cls.for_instruction(producer), cls.for_instruction(consumer)
        return cls(a.instructions + b.instructions, {**a.params, **b.params}, b.roots)

    def contains(self, instr: Instruction) -> bool:
        return any(i is instr for i in self.instructions) or id(instr) in self.params

    def operand(self, instr: Instruction, k: int) -> Instruction:
        o = instr.operands[k]
        return self.params.get(id(o), o)


class GroupedIndexing(dict):
    """``GroupedByOpIndexing``: ``id(instruction) -> (instruction, [OperandIndexing, ...])`` in insertion order."""

    def add(self, instr: Instruction, items: Iterable[OperandIndexing]) -> None:
        entry = self.setdefault(id(instr), (instr, []))
        entry[1].extend(items)
        entry[1][:] = unique(entry[1])

    def get_maps(self, instr: Instruction) -> list[OperandIndexing]:
        return self.get(id(instr), (instr, []))[1]

    def by_name(self) -> dict[str, list[OperandIndexing]]:
        out: dict[str, list[OperandIndexing]] = {}
        for inst, items in self.values():
            out.setdefault(inst.name, [])
            out[inst.name] = unique(out[inst.name] + items)
        return out


def compute_grouped_output_to_input_indexing(fusion: FusionAdaptor, target: Instruction,
                                             op_cache: dict | None = None) -> GroupedIndexing:
    """``ComputeGroupedOutputToInputIndexing``: from ``target``'s output to every instruction it reads inside
    ``fusion`` (and the operands outside it), composing op maps in reverse post order, each composed map
    simplified and stripped of unused symbols.

    ``op_cache`` (``id(instruction) -> InstructionIndexing``) reuses each op's own maps across calls on the
    same fusion (the coalescing analysis asks once per hero operand)."""
    grouped = GroupedIndexing()
    initial = OperandIndexing(ops.identity_map(target.shape))
    if target.opcode == "parameter" and id(target) in fusion.params:
        grouped.add(fusion.params[id(target)], [initial])
        return grouped
    grouped.add(target, [initial])
    order = fusion.instructions
    start = next((k for k in range(len(order) - 1, -1, -1) if order[k] is target), None)
    if start is None:
        return grouped
    for k in range(start, -1, -1):
        instr = order[k]
        consumer_maps = list(grouped.get_maps(instr))
        if not consumer_maps:
            continue
        if op_cache is None:
            producer = compute_output_to_input_indexing(instr, 0)
        else:
            producer = op_cache.get(id(instr))
            if producer is None:
                producer = op_cache[id(instr)] = compute_output_to_input_indexing(instr, 0)
        for operand_id, items in enumerate(producer.indexing_maps):
            operand = fusion.operand(instr, operand_id)
            composed = [_compose_simplified(c, p) for p in items for c in consumer_maps]
            grouped.add(operand, composed)
    return grouped


def _fusion_output_to_input(fusion: Instruction, output_id: int) -> InstructionIndexing:
    adaptor = FusionAdaptor.for_instruction(fusion)
    grouped = compute_grouped_output_to_input_indexing(adaptor, adaptor.roots[output_id])
    return InstructionIndexing([list(grouped.get_maps(o)) for o in fusion.operands])


# ---------------------------------------------------------------------------------------- layouts, epilogue
def _permute_all(indexing: InstructionIndexing, first: IndexingMap, seconds: list[IndexingMap]) -> InstructionIndexing:
    out = []
    for items, second in zip(indexing.indexing_maps, seconds):
        new = []
        for it in items:
            m = it.map
            if m.is_undefined:
                new.append(it)
                continue
            if not is_identity_permutation_map(first):
                m = compose_indexing_maps(first, m)
            if not is_identity_permutation_map(second):
                m = compose_indexing_maps(m, second)
            new.append(OperandIndexing(simplify(m)[0], it.rt_vars, it.replica_id_map))
        out.append(unique(new))
    return InstructionIndexing(out)


def compute_output_to_input_indexing_physical(instr: Instruction, output_id: int = 0) -> InstructionIndexing:
    """The output-to-input maps between physical indices: the output's physical index (dimensions in its
    layout's major-to-minor order) to each operand's physical index."""
    indexing = compute_output_to_input_indexing(instr, output_id)
    first = physical_to_logical_map(ops.output_shape(instr, output_id))
    seconds = [logical_to_physical_map(instr.operands[i].shape) for i in range(len(indexing))]
    return _permute_all(indexing, first, seconds)


def compute_input_to_output_indexing_physical(instr: Instruction, input_id: int = 0) -> InstructionIndexing:
    """The input-to-output maps between physical indices (see the output-to-input variant)."""
    indexing = compute_input_to_output_indexing(instr, input_id)
    first = physical_to_logical_map(instr.operands[input_id].shape)
    seconds = [logical_to_physical_map(ops.output_shape(instr, i)) for i in range(len(indexing))]
    return _permute_all(indexing, first, seconds)


def find_use_chain(parent: Instruction, root: Instruction) -> list[Instruction]:
    """``HloFindUseChain``: a path of users from ``parent`` to ``root`` (inclusive), or ``[]``."""
    stack = [[parent]]
    seen: set[int] = set()
    while stack:
        path = stack.pop()
        node = path[-1]
        if node is root:
            return path
        if id(node) in seen:
            continue
        seen.add(id(node))
        for user in reversed(node.users):
            stack.append(path + [user])
    return []


def compute_epilogue_input_to_output_indexing(parent: Instruction, root: Instruction) -> IndexingMap:
    """``ComputeEpilogueInputToOutputIndexing``: ``parent``'s index to ``root``'s index along the use chain.

    Raises ``ValueError`` when ``root`` does not use ``parent`` (directly or transitively).
    """
    chain = find_use_chain(parent, root)
    if not chain:
        raise ValueError(f"%{root.name} does not use %{parent.name}")
    acc = OperandIndexing(ops.identity_map(parent.shape))
    for producer, user in zip(chain, chain[1:]):
        k = next(i for i, o in enumerate(user.operands) if o is producer)
        step = compute_input_to_output_indexing(user, k).indexing_maps[0][0]
        acc = compose_operand_indexing(acc, step).simplified()
    return acc.map


def output_shape_of(instr: Instruction, output_id: int = 0) -> Shape:
    return ops.output_shape(instr, output_id)
