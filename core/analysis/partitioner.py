"""The computation partitioner: split a fused computation into subgraphs that are each safe to emit as one
function of the output index.

Mirrors ``PartitionedComputation`` (``xla/codegen/emitters/computation_partitioner.cc``, constructor and
``IsEvaluatedMoreThanOnce``; the design is described in the XLA emitters document, "Partitioning").

Walking the instructions users-first, every instruction gets a ``(function id, indexing id)`` pair:

* a non-root whose users are all elementwise, in one function, and read it "through the same indices" joins
  them. "The same indices" compares indexing maps: each instruction carries the map from its function's
  root index to its own index (composed from ``compute_output_to_input_indexing`` of the ops between), a
  user reads an operand through that map composed with its own output-to-operand map, and the reads must be
  semantically equal maps (:func:`fusegen.indexing.semantically_equal`). Indexing ids name those maps: two
  instructions of a function share an id exactly when their maps are equal. (Where a map is unknown, the
  users' ids are compared, as before maps);
* a root (no users, or ``is_subgraph_root``), an instruction with several users, or one that its single
  user reads at several indices (a ``gather`` reading a multi-column index operand, a ``concatenate``
  listing the operand twice) starts a new function;
* otherwise (one user, read at an index of its own, e.g. through a ``transpose``) it joins the user's
  function with a fresh indexing id.

So in ``add(log(p), transpose(log(p)))`` the ``log`` is read at ``(i, j)`` by the add and at ``(j, i)`` by the
transpose: it becomes its own function (called twice), instead of being recomputed along every path, which
grows exponentially with chained splits. The transpose stays with the add (one user).
"""

from __future__ import annotations

from typing import Callable, Iterable

import attrs

from fusegen.hlo.ir import Computation, Instruction
from fusegen.indexing import IndexingMap, compose_indexing_maps, semantically_equal, simplify

#: ``HloInstruction::IsOpElementwise`` opcodes (``map`` is not in XLA's opcode-level list).
ELEMENTWISE_OPCODES = frozenset({
    "abs", "add", "and", "atan2", "cbrt", "ceil", "clamp", "compare", "complex", "convert", "copy", "cosine",
    "count-leading-zeros", "divide", "erf", "exponential", "exponential-minus-one", "floor", "imag", "is-finite",
    "log", "log-plus-one", "logistic", "maximum", "minimum", "multiply", "negate", "not", "or", "popcnt", "power",
    "real", "reduce-precision", "remainder", "round-nearest-afz", "round-nearest-even", "rsqrt", "select",
    "shift-left", "shift-right-arithmetic", "shift-right-logical", "sign", "sine", "sqrt", "stochastic-convert",
    "subtract", "tan", "tanh", "xor", "bitcast-convert", "acos", "acosh", "asin", "asinh", "atanh", "cosh",
    "sinh", "atan",
})


@attrs.frozen(eq=False)
class Subgraph:
    """One function of a partitioned computation.

    Attributes:
        name: ``<computation>_<root names joined by _>`` (as XLA names the function).
        instructions: the instructions emitted in this function, in post order.
        roots: instructions whose values leave the function (no users, or a user in another subgraph),
            in post order; the function returns one value per root leaf.
        index_ranges: the function's index arguments: dimensions of the first root (its first leaf for tuples).
        indexing: instruction -> indexing id; instructions of one subgraph with equal ids are read at the
            same index (the root's), different ids mean a different index (the index-reading relation).
    """

    name: str
    instructions: tuple[Instruction, ...]
    roots: tuple[Instruction, ...]
    index_ranges: tuple[int, ...]
    indexing: dict[int, int] = attrs.field(factory=dict, repr=False)

    def contains(self, inst: Instruction) -> bool:
        return any(i is inst for i in self.instructions)

    def indexing_id(self, inst: Instruction) -> int:
        """Indexing id of ``inst`` (``KeyError`` if it is not in this subgraph)."""
        return self.indexing[id(inst)]

    def __str__(self) -> str:
        lines = [f"SUBGRAPH {self.name} {{"]
        root_ids = {id(r) for r in self.roots}
        for i in self.instructions:
            ops = ", ".join(f"%{o.name}" for o in i.operands)
            lines.append(f"  {'ROOT ' if id(i) in root_ids else ''}%{i.name} = {i.opcode}({ops})")
        lines.append("}")
        return "\n".join(lines)


@attrs.frozen(eq=False)
class PartitionedComputation:
    """A computation split into :class:`Subgraph` functions.

    Attributes:
        computation: the partitioned computation.
        subgraphs: the functions; ``subgraphs[0]`` holds the computation's root.
    """

    computation: Computation
    subgraphs: tuple[Subgraph, ...]
    _by_inst: dict[int, Subgraph] = attrs.field(factory=dict, repr=False)

    @property
    def root_subgraph(self) -> Subgraph:
        """The subgraph of the computation's root (``GetRootSubgraph``)."""
        return self.find_subgraph(self.computation.root)

    def find_subgraph(self, inst: Instruction) -> Subgraph:
        """The subgraph emitting ``inst``.

        Raises:
            KeyError: ``inst`` is not an instruction of the partitioned computation.
        """
        try:
            return self._by_inst[id(inst)]
        except KeyError:
            raise KeyError(f"%{inst.name} is not in computation %{self.computation.name}") from None

    def callees(self, subgraph: Subgraph) -> list[Subgraph]:
        """Subgraphs whose roots ``subgraph`` reads (the calls its function makes), without duplicates."""
        out: list[Subgraph] = []
        for i in subgraph.instructions:
            for o in i.operands:
                sg = self._by_inst.get(id(o))
                if sg is not None and sg is not subgraph and all(sg is not x for x in out):
                    out.append(sg)
        return out

    def __str__(self) -> str:
        return "\n".join([f"PartitionedComputation {self.computation.name}:"] + [str(s) for s in self.subgraphs])


def _all_identical(values: Iterable) -> bool:
    vals = list(values)
    return all(v == vals[0] for v in vals[1:])


def is_evaluated_more_than_once(inst: Instruction) -> bool:
    """Whether a direct user reads ``inst`` at several indices per element (``IsEvaluatedMoreThanOnce``):
    a ``gather`` whose index operand it is (rank >= 2, ``dims[1] > 1``), or a ``concatenate`` that lists it
    more than once. A ``reduce`` reads many elements, but in one loop with one indexing, so it does not count."""
    for user in inst.users:
        positions = [k for k, o in enumerate(user.operands) if o is inst]
        if user.opcode == "gather" and 1 in positions and inst.shape.is_array and inst.shape.rank >= 2 \
                and inst.shape.dimensions[1] > 1:
            return True
        if user.opcode == "concatenate" and len(positions) > 1:
            return True
    return False


def _read_map(user_map: IndexingMap, user: Instruction, operand: Instruction) -> IndexingMap:
    """The map from the user's function root index to ``operand``'s index as ``user`` reads it (its first
    operand slot and first map); unknown where the analysis has no single map."""
    from fusegen.indexing.analysis import compute_output_to_input_indexing

    if user_map.is_undefined:
        return user_map
    try:
        k = next(k for k, o in enumerate(user.operands) if o is operand)
        maps = compute_output_to_input_indexing(user).maps(k)
        if len(maps) != 1 or maps[0].is_undefined:
            return IndexingMap.unknown()
        return simplify(compose_indexing_maps(user_map, maps[0]))[0]
    except Exception:  # an op the analysis does not cover (tuple shapes, custom calls): no map
        return IndexingMap.unknown()


def _same_map(a: IndexingMap, b: IndexingMap) -> bool:
    return not a.is_undefined and not b.is_undefined and (a == b or semantically_equal(a, b))


class _IndexingIds:
    """Indexing ids per function, one per distinct (semantically equal) map; unknown maps get fresh ids."""

    def __init__(self) -> None:
        self.next = 0
        self.known: dict[int, list[tuple[IndexingMap, int]]] = {}

    def id_for(self, function: int, m: IndexingMap) -> int:
        seen = self.known.setdefault(function, [])
        if not m.is_undefined:
            for other, i in seen:
                if _same_map(m, other):
                    return i
        self.next += 1
        if not m.is_undefined:
            seen.append((m, self.next - 1))
        return self.next - 1


def _first_leaf_dims(inst: Instruction) -> tuple[int, ...]:
    s = inst.shape
    while s.is_tuple:
        if not s.tuple_shapes:
            return ()
        s = s.tuple_shapes[0]
    return tuple(s.dimensions)


def partition(computation: Computation,
              is_subgraph_root: Callable[[Instruction], bool] | None = None) -> PartitionedComputation:
    """Partition ``computation`` into subgraph functions (see the module docstring).

    Args:
        computation: a fused computation (or any computation: reducers, comparators).
        is_subgraph_root: instructions forced to start their own function (an emitter's heroes).

    Returns:
        The :class:`PartitionedComputation`; every instruction is in exactly one subgraph.

    Raises:
        ValueError: the computation has no root.
    """
    if computation.root is None:
        raise ValueError(f"computation %{computation.name} has no root")
    forced = is_subgraph_root or (lambda _i: False)
    pre_order = list(reversed(computation.post_order()))
    pos = {id(i): k for k, i in enumerate(pre_order)}
    ids: list[tuple[int, int]] = [(-1, -1)] * len(pre_order)
    maps: list[IndexingMap] = [IndexingMap.unknown()] * len(pre_order)  # function root index -> own index
    next_function = 0
    indexing = _IndexingIds()
    for k, inst in enumerate(pre_order):
        users = [u for u in inst.users if id(u) in pos]
        is_root = not users or inst is computation.root or bool(forced(inst))
        all_elementwise = all(u.opcode in ELEMENTWISE_OPCODES for u in users)
        reads = [_read_map(maps[pos[id(u)]], u, inst) for u in users] if not is_root and all_elementwise else []
        if any(r.is_undefined for r in reads):  # no maps to compare: the users' own ids decide
            same = _all_identical(ids[pos[id(u)]] for u in users)
        else:
            same = _all_identical(ids[pos[id(u)]][0] for u in users) and all(_same_map(r, reads[0]) for r in reads[1:])
        if not is_root and all_elementwise and same:
            ids[k] = ids[pos[id(users[0])]]
            maps[k] = reads[0] if not reads[0].is_undefined else maps[pos[id(users[0])]]
        elif is_root or len(users) > 1 or is_evaluated_more_than_once(inst):
            maps[k] = IndexingMap.identity(_first_leaf_dims(inst)) if inst.shape.is_array else IndexingMap.unknown()
            ids[k] = (next_function, indexing.id_for(next_function, maps[k]))
            next_function += 1
        else:
            fn = ids[pos[id(users[0])]][0]
            maps[k] = _read_map(maps[pos[id(users[0])]], users[0], inst)
            ids[k] = (fn, indexing.id_for(fn, maps[k]))

    functions: list[list[Instruction]] = [[] for _ in range(next_function)]
    for k in range(len(pre_order) - 1, -1, -1):  # post order inside each function
        functions[ids[k][0]].append(pre_order[k])

    subgraphs: list[Subgraph] = []
    by_inst: dict[int, Subgraph] = {}
    for fid, insts in enumerate(functions):
        roots = []
        for inst in insts:
            users = [u for u in inst.users if id(u) in pos]
            if not users or any(ids[pos[id(u)]][0] != fid for u in users):
                roots.append(inst)
        name = f"{computation.name}_" + "_".join(r.name for r in roots)
        name = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        sg = Subgraph(name=name, instructions=tuple(insts), roots=tuple(roots),
                      index_ranges=_first_leaf_dims(roots[0]) if roots else (),
                      indexing={id(i): ids[pos[id(i)]][1] for i in insts})
        subgraphs.append(sg)
        for i in insts:
            by_inst[id(i)] = sg
    return PartitionedComputation(computation=computation, subgraphs=tuple(subgraphs), by_inst=by_inst)


__all__ = ["Subgraph", "PartitionedComputation", "partition", "is_evaluated_more_than_once", "ELEMENTWISE_OPCODES"]
