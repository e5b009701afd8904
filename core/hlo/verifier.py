"""Structural checks on parsed HLO that XLA's verifier makes before anything runs.

Mirrors the parts of ``xla/service/hlo_verifier.cc`` (``ShapeVerifier::HandleTranspose``,
``HandleBroadcast``, ``HandleReduce``, ``HandleReshape``, ``HandleSlice``, ``HandleGetTupleElement``,
``HloVerifier`` parameter-count and call-graph checks) and ``xla/shape_util.cc``
``ShapeUtil::ValidateShapeSize`` whose violation would otherwise surface later as an ``IndexError`` in the
evaluator, an allocation of an impossible size, or endless recursion. Each check returns the message of the
first violation (one line, naming the instruction) or ``None``; the parser turns a message into an
:class:`~fusegen.hlo.errors.HloParseError` at the instruction's position.
"""

from __future__ import annotations

from typing import Iterable

from fusegen.hlo.ir import Computation, Instruction, Shape
from fusegen.hlo.opcodes import SAME_SHAPE_OPCODES

__all__ = ["INT64_MAX", "shape_error", "instruction_error", "parameters_error", "call_cycle"]

#: Largest value of XLA's ``int64_t`` dimensions and byte sizes.
INT64_MAX = 2**63 - 1


def _byte_width(element_type: str) -> float:
    from fusegen.hlo import dtypes

    try:
        return max(dtypes.bit_width(element_type), 1) / 8
    except (KeyError, ValueError):
        return 1


def shape_error(shape: Shape | None) -> str | None:
    """A shape whose element count or byte size does not fit in int64 (``ShapeUtil::ValidateShapeSize``)."""
    if shape is None:
        return None
    if shape.is_tuple:
        for s in shape.tuple_shapes or ():
            e = shape_error(s)
            if e:
                return e
        return None
    n = 1
    for d in shape.dimensions:
        if d > INT64_MAX:
            return f"dimension {d} of {shape.element_type}{list(shape.dimensions)} exceeds int64"
        n *= max(d, 1)
    if n * _byte_width(shape.element_type) > INT64_MAX:
        return f"shape {shape.element_type}{list(shape.dimensions)} has a byte size that overflows int64"
    return None


def _dims_in_range(dims: Iterable[int], rank: int) -> int | None:
    for d in dims:
        if not 0 <= d < rank:
            return d
    return None


def _rank(inst: Instruction, k: int = 0) -> int | None:
    if k >= len(inst.operands):
        return None
    s = inst.operands[k].shape
    return None if s is None or s.is_tuple else s.rank


def instruction_error(inst: Instruction) -> str | None:  # noqa: C901 - one branch per opcode
    """The first shape/attribute inconsistency of ``inst`` (operands resolved), else ``None``."""
    op = inst.opcode
    s = inst.shape
    e = shape_error(s)
    if e:
        return f"%{inst.name}: {e}"
    if s is None:
        return None
    if op == "get-tuple-element" and inst.operands:
        t = inst.operands[0].shape
        idx = inst.attrs.get("index")
        if t is not None and isinstance(idx, int):
            if not t.is_tuple:
                return f"get-tuple-element %{inst.name} reads from %{inst.operands[0].name}, which is not a tuple"
            if not 0 <= idx < len(t.tuple_shapes or ()):
                return (f"get-tuple-element %{inst.name}: index {idx} is out of range for a tuple of "
                        f"{len(t.tuple_shapes or ())} elements")
    if s.is_tuple:
        return None
    dims = inst.attrs.get("dimensions")
    dims = tuple(dims) if isinstance(dims, tuple) else None
    if op in SAME_SHAPE_OPCODES and op not in ("select", "clamp"):
        for o in inst.operands:
            if o.shape is not None and not o.shape.is_tuple and o.shape.dimensions != s.dimensions \
                    and o.shape.dimensions != ():
                return (f"%{inst.name} ({op}) has shape {list(s.dimensions)} but operand %{o.name} has "
                        f"{list(o.shape.dimensions)}")
    if op == "parameter":
        n = inst.attrs.get("parameter_number")
        if isinstance(n, int) and n < 0:
            return f"parameter %{inst.name} has a negative number {n}"
    elif op == "transpose" and dims is not None:
        rank = _rank(inst)
        if rank is not None:
            if sorted(dims) != list(range(rank)):
                return (f"transpose %{inst.name}: dimensions={{{','.join(map(str, dims))}}} is not a permutation "
                        f"of the operand's {rank} dimensions")
            want = [inst.operands[0].shape.dimensions[d] for d in dims]
            if not s.dynamic and list(s.dimensions) != want:
                return f"transpose %{inst.name}: result shape {list(s.dimensions)} should be {want}"
    elif op == "broadcast" and dims is not None:
        rank = _rank(inst)
        if rank is not None:
            if len(dims) != rank:
                return (f"broadcast %{inst.name}: {len(dims)} dimensions given for a rank-{rank} operand "
                        f"(one per operand dimension)")
            bad = _dims_in_range(dims, s.rank)
            if bad is not None:
                return f"broadcast %{inst.name}: dimension {bad} is out of range for a rank-{s.rank} result"
            src = inst.operands[0].shape.dimensions
            for i, d in enumerate(dims):
                if src[i] != s.dimensions[d] and not s.dynamic:
                    return (f"broadcast %{inst.name}: operand dimension {i} has size {src[i]} but result "
                            f"dimension {d} has size {s.dimensions[d]}")
    elif op in ("reduce", "reverse") and dims is not None:
        rank = _rank(inst)
        if rank is not None:
            bad = _dims_in_range(dims, rank)
            if bad is not None:
                verb = "reduces" if op == "reduce" else "reverses"
                return f"{op} %{inst.name} {verb} dimension {bad} of a rank-{rank} operand"
            if len(set(dims)) != len(dims):
                return f"{op} %{inst.name}: dimensions={{{','.join(map(str, dims))}}} repeats a dimension"
    elif op == "concatenate" and dims is not None:
        if len(dims) != 1:
            return f"concatenate %{inst.name}: dimensions= must name exactly one dimension"
        if _dims_in_range(dims, s.rank) is not None:
            return f"concatenate %{inst.name}: dimension {dims[0]} is out of range for rank {s.rank}"
        for o in inst.operands:
            if o.shape is not None and not o.shape.is_tuple and o.shape.rank != s.rank:
                return f"concatenate %{inst.name}: operand %{o.name} has rank {o.shape.rank}, result {s.rank}"
    elif op == "iota":
        d = inst.attrs.get("iota_dimension")
        if isinstance(d, int) and not 0 <= d < max(s.rank, 1):
            return f"iota %{inst.name}: iota_dimension {d} is out of range for rank {s.rank}"
    elif op == "slice":
        e = _slice_error(inst)
        if e:
            return e
    elif op == "reshape":
        return _reshape_error(inst)
    elif op == "constant" and isinstance(inst.attrs.get("literal"), str):
        from fusegen.hlo.literal import parse_literal

        try:
            parse_literal(inst.attrs["literal"], s)
        except ValueError as ex:
            return f"constant %{inst.name}: bad literal for {s.element_type}: {ex}"
    return None


def _slice_error(inst: Instruction) -> str | None:
    sl = inst.attrs.get("slice")
    rank = _rank(inst)
    if not isinstance(sl, list) or rank is None:
        return None
    if len(sl) != rank:
        return f"slice %{inst.name}: {len(sl)} slice ranges for a rank-{rank} operand"
    src = inst.operands[0].shape.dimensions
    for i, (start, limit, stride) in enumerate(sl):
        if stride < 1 or not 0 <= start <= limit <= max(src[i], 0) and src[i] >= 0:
            return (f"slice %{inst.name}: [{start}:{limit}:{stride}] is out of bounds for dimension {i} "
                    f"of size {src[i]}")
    return None


def _reshape_error(inst: Instruction) -> str | None:
    if len(inst.operands) != 1:
        return f"reshape %{inst.name} expects 1 operand, has {len(inst.operands)}"
    src = inst.operands[0].shape
    dst = inst.shape
    if src is None or dst is None or src.is_tuple or dst.is_tuple or src.dynamic or dst.dynamic:
        return None
    if src.element_type == "token" or dst.element_type == "token":
        return None
    if src.numel != dst.numel:
        return (f"reshape %{inst.name} changes the element count: result {dst.element_type}{list(dst.dimensions)} "
                f"has {dst.numel} elements but operand %{inst.operands[0].name} has {src.numel}")
    return None


def parameters_error(comp: Computation) -> tuple[str, Instruction] | None:
    """Parameter numbers of ``comp`` must be ``0..N-1``, each once (``HloComputation::AddParameter``)."""
    params = comp.parameters
    seen: dict[int, Instruction] = {}
    for p in params:
        n = p.attrs.get("parameter_number")
        if not isinstance(n, int):
            continue
        if n in seen:
            return f"parameter number {n} is used twice in computation {comp.name!r} (%{seen[n].name}, %{p.name})", p
        seen[n] = p
        if n >= len(params):
            return (f"parameter({n}) of %{p.name}: computation {comp.name!r} has {len(params)} parameter"
                    f"{'s' if len(params) != 1 else ''}, numbered 0..{len(params) - 1}"), p
    return None


def call_cycle(edges: dict[int, list[tuple[Computation, object]]], roots: list[Computation]) -> tuple[Computation, object] | None:
    """A computation that (transitively) calls itself; ``edges[id(caller)]`` lists ``(callee, where)``.

    Returns ``(computation, where)`` of the call that closes the cycle, else ``None``. Iterative, so a
    chain of thousands of ``call`` levels is fine.
    """
    state: dict[int, int] = {}  # 1 = on the stack, 2 = done
    for root in roots:
        if id(root) in state:
            continue
        state[id(root)] = 1
        stack = [(root, 0)]
        while stack:
            comp, k = stack.pop()
            out = edges.get(id(comp), [])
            if k < len(out):
                stack.append((comp, k + 1))
                callee, where = out[k]
                st = state.get(id(callee))
                if st == 1:
                    return callee, where
                if st is None:
                    state[id(callee)] = 1
                    stack.append((callee, 0))
            else:
                state[id(comp)] = 2
    return None
