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
from fusegen.hlo.shape_checks import compatible, shape_text

__all__ = ["INT64_MAX", "shape_error", "instruction_error", "parameters_error", "call_cycle", "called_error"]

#: Largest value of XLA's ``int64_t`` dimensions and byte sizes.
INT64_MAX = 2**63 - 1

_BINARY = frozenset("""add atan2 and divide maximum minimum multiply or power remainder shift-left
    shift-right-arithmetic shift-right-logical subtract xor compare complex mulhi""".split())
_TERNARY = frozenset(["select", "clamp"])
#: Opcodes with exactly one operand (``HloVerifier`` ``CheckOperandCount``).
_UNARY = (SAME_SHAPE_OPCODES - _BINARY - _TERNARY) | frozenset(
    """transpose broadcast reshape slice reverse convert bitcast-convert bitcast get-tuple-element
    is-finite real imag reduce-precision""".split())
#: (fewest operands, operands must come in pairs) for variadic opcodes.
_AT_LEAST = {"gather": (2, False), "dynamic-slice": (2, False), "dynamic-update-slice": (3, False), "pad": (2, False),
             "dot": (2, False), "convolution": (2, False), "reduce": (2, True), "reduce-window": (2, True),
             "sort": (1, False), "concatenate": (1, False), "select-and-scatter": (3, False), "scatter": (3, False),
             "map": (1, False)}
_EXACTLY = {"gather": 2, "pad": 2, "dot": 2, "convolution": 2, "select-and-scatter": 3, "iota": 0, "parameter": 0,
            "constant": 0}
#: Attributes an opcode cannot do without (the parser of XLA requires them).
_REQUIRED = {"transpose": "dimensions", "slice": "slice", "get-tuple-element": "index",
             "concatenate": "dimensions", "reverse": "dimensions", "iota": "iota_dimension",
             "dynamic-slice": "dynamic_slice_sizes", "compare": "direction"}


#: Operand count of the fixed-arity opcodes (``_UNARY`` first, as the checks go).
_WANT = {**dict.fromkeys(_TERNARY, 3), **dict.fromkeys(_BINARY, 2), **dict.fromkeys(_UNARY, 1)}
#: Opcodes with a check of their own in :func:`instruction_error` after the operand-count ones.
_DETAIL_OPS = frozenset(["parameter", "transpose", "broadcast", "reduce", "reverse", "concatenate", "iota", "slice",
                         "reshape", "constant"])

#: Every opcode :func:`instruction_error` checks beyond the result shape (the rest have nothing to check).
_CHECKED = (frozenset(_WANT) | frozenset(_EXACTLY) | frozenset(_AT_LEAST) | frozenset(_REQUIRED) | SAME_SHAPE_OPCODES
            | _DETAIL_OPS | {"get-tuple-element"})


_BYTE_WIDTHS: dict[str, float] = {}


def _byte_width(element_type: str) -> float:
    w = _BYTE_WIDTHS.get(element_type)
    if w is None:
        from fusegen.hlo import dtypes  # here, not at the top: dtypes imports numpy and ml_dtypes

        try:
            w = max(dtypes.bit_width(element_type), 1) / 8
        except (KeyError, ValueError):
            w = 1
        if len(_BYTE_WIDTHS) < 256:  # element types are a few dozen words
            _BYTE_WIDTHS[element_type] = w
    return w


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


def instruction_error(inst: Instruction, check_shape: bool = True,  # noqa: C901 - one branch per opcode
                      check_literal: bool = True) -> str | None:
    """The first shape/attribute inconsistency of ``inst`` (operands resolved), else ``None``.

    ``check_shape=False`` / ``check_literal=False`` skip :func:`shape_error` / the constant's literal for a
    result shape / (literal, shape) pair the caller already found valid.
    """
    op = inst.opcode
    s = inst.shape
    e = shape_error(s) if check_shape else None
    if e:
        return f"%{inst.name}: {e}"
    if s is None or op not in _CHECKED:
        return None
    n = len(inst.operands)
    want = _WANT.get(op)
    if want is not None and n != want:
        return f"{op} %{inst.name} takes {want} operand{'s' if want > 1 else ''}, has {n}"
    if op in _EXACTLY and n != _EXACTLY[op]:
        return f"{op} %{inst.name} takes {_EXACTLY[op]} operand{'s' if _EXACTLY[op] != 1 else ''}, has {n}"
    if op in _AT_LEAST:
        least, pairs = _AT_LEAST[op]
        if n < least or (pairs and n % 2):
            return (f"{op} %{inst.name} takes at least {least} operands{' in (input, init) pairs' if pairs else ''}, "
                    f"has {n}")
    if op in _REQUIRED and _REQUIRED[op] not in inst.attrs:
        return f"{op} %{inst.name} needs the attribute {_REQUIRED[op]}="
    if op == "get-tuple-element" and inst.operands:
        t = inst.operands[0].shape
        idx = inst.attrs.get("index")
        if t is not None and isinstance(idx, int):
            if not t.is_tuple:
                return f"get-tuple-element %{inst.name} reads from %{inst.operands[0].name}, which is not a tuple"
            if not 0 <= idx < len(t.tuple_shapes or ()):
                return (f"get-tuple-element %{inst.name}: index {idx} is out of range for a tuple of "
                        f"{len(t.tuple_shapes or ())} elements")
    if s.tuple_shapes is not None:
        return None
    if op in SAME_SHAPE_OPCODES and op not in ("select", "clamp"):
        for o in inst.operands:
            if o.shape is not s and o.shape is not None and not o.shape.is_tuple \
                    and o.shape.dimensions != s.dimensions and o.shape.dimensions != ():
                return (f"%{inst.name} ({op}) has shape {list(s.dimensions)} but operand %{o.name} has "
                        f"{list(o.shape.dimensions)}")
    if op not in _DETAIL_OPS:
        return None
    dims = inst.attrs.get("dimensions")
    dims = tuple(dims) if isinstance(dims, tuple) else None
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
    elif op == "broadcast":
        dims = dims if dims is not None else ()  # lit tests omit dimensions={} for a scalar operand
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
    elif op == "constant" and check_literal and isinstance(inst.attrs.get("literal"), str):
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
    nums = [i.attrs.get("parameter_number") for i in comp.instructions if i.opcode == "parameter"]
    expected = list(range(len(nums)))
    if nums == expected:
        return None  # in text order (the usual case), without sorting
    try:
        if sorted(nums) == expected:
            return None  # the usual case, without sorting the instructions
    except TypeError:  # a number missing (None): the full check below skips it
        pass
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


_same = compatible  # equal shapes ignoring layouts (``ShapeUtil::Compatible``)
_text = shape_text


def _takes(inst: Instruction, comp: Computation, args: list[Shape | None], what: str) -> str | None:
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    if len(params) > 1:
        params.sort(key=lambda p: p.attrs.get("parameter_number", 0))  # Computation.parameters' order
    if len(params) != len(args):
        return (f"{inst.opcode} %{inst.name}: {what} {comp.name!r} takes {len(params)} parameter"
                f"{'s' if len(params) != 1 else ''}, given {len(args)}")
    for p, a in zip(params, args):  # Computation.parameters is in parameter-number order
        if not _same(p.shape, a):
            return (f"{inst.opcode} %{inst.name}: {what} {comp.name!r} parameter {p.attrs.get('parameter_number')} "
                    f"is {_text(p.shape)}, given {_text(a)}")
    return None


_CALLS = {"fusion": ("calls",), "call": ("to_apply",), "while": ("condition", "body"), "map": ("to_apply",),
          "reduce": ("to_apply",), "reduce-window": ("to_apply",), "sort": ("to_apply",), "scatter": ("to_apply",),
          "select-and-scatter": ("select", "scatter"), "all-reduce": ("to_apply",)}


#: Opcodes :func:`called_error` checks (any other instruction has nothing to check).
CALLER_OPCODES = frozenset(_CALLS) | {"conditional"}


def called_error(inst: Instruction) -> str | None:
    """Computation attributes of ``inst`` after they are resolved: present, and (for ``call``, ``while``,
    ``conditional``) taking and returning the shapes the instruction gives and expects
    (``HloVerifier::HandleCall`` / ``HandleWhile`` / ``HandleConditional``)."""
    op = inst.opcode
    if op not in _CALLS and op != "conditional":
        return None  # nothing to check (the usual case)
    for key in _CALLS.get(op, ()):
        if not isinstance(inst.attrs.get(key), (Computation, list)) or inst.attrs.get(key) == []:
            return f"{op} %{inst.name} needs the attribute {key}=<computation>"
    ops = [o.shape for o in inst.operands]
    if op == "call":
        comp = inst.attrs["to_apply"]
        e = _takes(inst, comp, ops, "to_apply") if isinstance(comp, Computation) else None
        if e:
            return e
        if isinstance(comp, Computation) and comp.root is not None and not _same(comp.root.shape, inst.shape):
            return f"call %{inst.name} is {_text(inst.shape)} but {comp.name!r} returns {_text(comp.root.shape)}"
    elif op == "while":
        cond, body = inst.attrs["condition"], inst.attrs["body"]
        if not isinstance(cond, Computation) or not isinstance(body, Computation):
            return f"while %{inst.name}: condition and body must each be one computation"
        if len(ops) != 1:
            return f"while %{inst.name} takes 1 operand, has {len(ops)}"
        if not _same(ops[0], inst.shape):
            return f"while %{inst.name} is {_text(inst.shape)} but its operand is {_text(ops[0])}"
        e = _takes(inst, cond, ops, "condition") or _takes(inst, body, ops, "body")
        if e:
            return e
        if cond.root is not None and not _same(cond.root.shape, Shape("pred", ())):
            return f"while %{inst.name}: condition {cond.name!r} returns {_text(cond.root.shape)}, not pred[]"
        if body.root is not None and not _same(body.root.shape, inst.shape):
            return f"while %{inst.name}: body {body.name!r} returns {_text(body.root.shape)}, not {_text(inst.shape)}"
    elif op == "conditional":
        branches = inst.attrs.get("branch_computations")
        if branches is None:
            t, f = inst.attrs.get("true_computation"), inst.attrs.get("false_computation")
            if not isinstance(t, Computation) or not isinstance(f, Computation):
                return (f"conditional %{inst.name} needs branch_computations= or true_computation= and "
                        f"false_computation=")
            branches = [t, f]
        if isinstance(branches, Computation):
            branches = [branches]
        if not branches or len(ops) != 1 + len(branches):
            return f"conditional %{inst.name} has {len(ops)} operands for {len(branches)} branches (needs 1 + branches)"
        sel = ops[0]
        if sel is not None and (sel.is_tuple or sel.rank != 0 or sel.element_type not in ("pred", "s32")):
            return f"conditional %{inst.name}: the branch selector is {_text(sel)}, not pred[] or s32[]"
        for k, b in enumerate(branches):
            e = _takes(inst, b, [ops[k + 1]], f"branch {k}")
            if e:
                return e
            if b.root is not None and not _same(b.root.shape, inst.shape):
                return f"conditional %{inst.name}: branch {b.name!r} returns {_text(b.root.shape)}, not {_text(inst.shape)}"
    return None
