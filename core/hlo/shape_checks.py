"""Per-instruction shape and element-type checks of a built module: what XLA's shape inference says an
instruction's result must be, given its operands.

Mirrors ``xla/service/hlo_verifier.cc`` ``ShapeVerifier`` (``HandleElementwiseBinary``, ``HandleDot``,
``HandleConvert``, ``HandleReduce``, ``HandleConcatenate``, ``HandlePad``, ``HandleSlice``,
``HandleDynamicSlice``, ``HandleDynamicUpdateSlice``, ``HandleSelect``, ``HandleClamp``, ``HandleTuple``,
``HandleGetTupleElement``, ``HandleSort``, ``HandleBitcast``, ``HandleFusion`` /
``HloVerifier::CheckFusionInstruction``) and the rules of
``xla/service/shape_inference.cc`` they apply (``InferBinaryOpShape``, ``InferDotOpShape``,
``InferReduceShape``...). Shapes are compared as ``ShapeUtil::Compatible`` does (element type and
dimensions, layouts ignored), as XLA's verifier does for every opcode whose layout may change.

:func:`shape_problem` is what :func:`fusegen.hlo.module_verifier.verify_module` asks of every instruction
after the parser's checks (:func:`fusegen.hlo.verifier.instruction_error`).
"""

from __future__ import annotations

from fusegen.hlo.ir import Computation, Instruction, Shape

__all__ = ["shape_problem", "compatible", "shape_text", "contracting_sizes"]

_ARITH = frozenset("add subtract multiply divide maximum minimum power remainder atan2".split())
_LOGIC = frozenset("and or xor".split())
_SHIFT = frozenset("shift-left shift-right-arithmetic shift-right-logical".split())
_SAME_TYPE_UNARY = frozenset("""negate exponential exponential-minus-one log log-plus-one logistic tanh sine cosine
    tan sqrt rsqrt cbrt floor ceil round-nearest-afz round-nearest-even sign erf copy reduce-precision not popcnt
    count-leading-zeros acos acosh asin asinh atanh cosh sinh""".split())
_TO_REAL = frozenset(["real", "imag"])
_SAME_TYPE_SHAPE_OPS = frozenset(["transpose", "broadcast", "reshape", "reverse", "slice", "bitcast"])


def shape_text(s: Shape | None) -> str:
    """``f32[2,3]``, ``(f32[2], s32[])``: a shape without its layout, for messages."""
    if s is None:
        return "?"
    if s.is_tuple:
        return "(" + ", ".join(shape_text(t) for t in s.tuple_shapes or ()) + ")"
    return f"{s.element_type}[{','.join(map(str, s.dimensions))}]"


def compatible(a: Shape | None, b: Shape | None) -> bool:
    """Same element types and dimensions, layouts ignored (``ShapeUtil::Compatible``)."""
    if a is b or a is None or b is None:  # the parser interns shapes: equal texts are one object
        return True
    if a.is_tuple or b.is_tuple:
        ta, tb = a.tuple_shapes or (), b.tuple_shapes or ()
        return a.is_tuple == b.is_tuple and len(ta) == len(tb) and all(compatible(x, y) for x, y in zip(ta, tb))
    return a.element_type == b.element_type and tuple(a.dimensions) == tuple(b.dimensions)


def _array(s: Shape | None) -> bool:
    return s is not None and not s.is_tuple and s.element_type != "token"


def _real_of(et: str) -> str:
    return {"c64": "f32", "c128": "f64"}.get(et, et)


def _is_float(et: str) -> bool:
    return et.startswith(("f", "bf"))


def _is_int(et: str) -> bool:
    return et.startswith(("s", "u"))


def contracting_sizes(dot: Instruction) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(lhs sizes, rhs sizes)`` of a ``dot``'s contracting dimensions, in ``lhs_contracting_dims`` /
    ``rhs_contracting_dims`` order (equal for a valid dot: ``InferDotOpShape``).

    Raises:
        ValueError: ``dot`` is not a dot, or a contracting dimension is out of its operand's range.
    """
    if dot.opcode != "dot" or len(dot.operands) < 2:
        raise ValueError(f"%{dot.name} ({dot.opcode}) is not a dot with two operands")
    out = []
    for side, o in (("lhs", dot.operands[0]), ("rhs", dot.operands[1])):
        dims = tuple(dot.attrs.get(f"{side}_contracting_dims", ()) or ())
        rank = o.shape.rank
        if any(not 0 <= d < rank for d in dims):
            raise ValueError(f"dot %{dot.name}: {side}_contracting_dims={{{','.join(map(str, dims))}}} out of range "
                             f"for rank-{rank} operand %{o.name}")
        out.append(tuple(o.shape.dimensions[d] for d in dims))
    return out[0], out[1]


def _dot(inst: Instruction) -> str | None:
    lhs, rhs = inst.operands[0], inst.operands[1]
    if not (_array(lhs.shape) and _array(rhs.shape)):
        return None
    a = inst.attrs
    lc, rc = tuple(a.get("lhs_contracting_dims", ()) or ()), tuple(a.get("rhs_contracting_dims", ()) or ())
    lb, rb = tuple(a.get("lhs_batch_dims", ()) or ()), tuple(a.get("rhs_batch_dims", ()) or ())
    name = f"dot %{inst.name}"
    for what, dims, o in (("lhs_contracting_dims", lc, lhs), ("rhs_contracting_dims", rc, rhs),
                          ("lhs_batch_dims", lb, lhs), ("rhs_batch_dims", rb, rhs)):
        if any(not 0 <= d < o.shape.rank for d in dims):
            return f"{name}: {what}={{{','.join(map(str, dims))}}} out of range for %{o.name} {shape_text(o.shape)}"
        if len(set(dims)) != len(dims):
            return f"{name}: {what} repeats a dimension"
    if set(lc) & set(lb) or set(rc) & set(rb):
        return f"{name}: a dimension is both contracting and batch"
    if len(lc) != len(rc):
        return f"{name}: {len(lc)} lhs contracting dimensions but {len(rc)} rhs ones"
    if len(lb) != len(rb):
        return f"{name}: {len(lb)} lhs batch dimensions but {len(rb)} rhs ones"
    ls, rs = lhs.shape.dimensions, rhs.shape.dimensions
    for i, j in zip(lc, rc):
        if ls[i] != rs[j]:
            return (f"{name}: contracting dimension sizes differ: lhs %{lhs.name} {shape_text(lhs.shape)} dimension {i} "
                    f"is {ls[i]}, rhs %{rhs.name} {shape_text(rhs.shape)} dimension {j} is {rs[j]}")
    for i, j in zip(lb, rb):
        if ls[i] != rs[j]:
            return f"{name}: batch dimension sizes differ: lhs dimension {i} is {ls[i]}, rhs dimension {j} is {rs[j]}"
    lt, rt = lhs.shape.element_type, rhs.shape.element_type
    if lt != rt and not (_is_float(lt) and _is_float(rt)) and not (_is_int(lt) and _is_int(rt)):
        return f"{name}: operand types {lt} and {rt} cannot be multiplied (both floating or both integral)"
    want = [ls[d] for d in lb] + [d for i, d in enumerate(ls) if i not in lc and i not in lb] + \
        [d for i, d in enumerate(rs) if i not in rc and i not in rb]
    if not inst.shape.dynamic and list(inst.shape.dimensions) != want:
        return (f"{name}: result {shape_text(inst.shape)} should have dimensions {want} (batch, lhs non-contracting, "
                f"rhs non-contracting)")
    return None


def _reduce(inst: Instruction) -> str | None:
    n = len(inst.operands) // 2
    inputs, inits = inst.operands[:n], inst.operands[n:]
    dims = tuple(inst.attrs.get("dimensions", ()) or ())
    results = inst.shape.tuple_shapes if inst.shape.is_tuple else (inst.shape,)
    if len(results) != n:
        return f"reduce %{inst.name} reduces {n} inputs but has {len(results)} results"
    for k, (x, init, r) in enumerate(zip(inputs, inits, results)):
        if not (_array(x.shape) and _array(init.shape) and _array(r)):
            continue
        if init.shape.rank != 0:
            return f"reduce %{inst.name}: init value %{init.name} is {shape_text(init.shape)}, not a scalar"
        if x.shape.dimensions != inputs[0].shape.dimensions:
            return f"reduce %{inst.name}: inputs {shape_text(inputs[0].shape)} and {shape_text(x.shape)} differ in shape"
        want = [d for i, d in enumerate(x.shape.dimensions) if i not in dims]
        if list(r.dimensions) != want and not r.dynamic:
            return (f"reduce %{inst.name}: result {k} is {shape_text(r)} but reducing dimensions {list(dims)} of "
                    f"{shape_text(x.shape)} gives {want}")
        if r.element_type != init.shape.element_type:
            return (f"reduce %{inst.name}: result {k} is {r.element_type} but its init value %{init.name} is "
                    f"{init.shape.element_type}")
    comp = inst.attrs.get("to_apply")
    if isinstance(comp, Computation) and comp.root is not None:
        params = comp.parameters
        if len(params) != 2 * n:
            return f"reduce %{inst.name}: to_apply {comp.name!r} takes {len(params)} parameters, needs {2 * n}"
        scalars = tuple(Shape(init.shape.element_type, ()) for init in inits if _array(init.shape))
        root = comp.root.shape
        got = root.tuple_shapes if root.is_tuple else (root,)
        if len(scalars) == n and (len(got) != n or not all(compatible(g, s) for g, s in zip(got, scalars))):
            return (f"reduce %{inst.name}: to_apply {comp.name!r} returns {shape_text(root)}, expected "
                    f"{', '.join(shape_text(s) for s in scalars)}")
    return None


def _elementwise(inst: Instruction) -> str | None:  # noqa: C901 - one branch per opcode family
    op, s = inst.opcode, inst.shape
    ops = inst.operands
    if not _array(s) or not all(_array(o.shape) for o in ops):
        return None
    et = s.element_type
    if op in _ARITH or op in _LOGIC or op in _SHIFT:
        a, b = ops[0].shape.element_type, ops[1].shape.element_type
        if a != b:
            return f"{op} %{inst.name}: operand types differ ({a} %{ops[0].name}, {b} %{ops[1].name})"
        if et != a:
            return f"{op} %{inst.name} is {et} but its operands are {a}"
        if op in _LOGIC and not (_is_int(a) or a == "pred"):
            return f"{op} %{inst.name}: operands are {a}, expected pred or an integer type"
        if op in _SHIFT and not _is_int(a):
            return f"{op} %{inst.name}: operands are {a}, expected an integer type"
        for o in ops:  # XLA's CheckElementwiseInstruction (hlo_verifier.cc): no implicit broadcast
            if tuple(o.shape.dimensions) != tuple(s.dimensions):
                return (f"{op} %{inst.name}: operand %{o.name} is {shape_text(o.shape)}, the result {shape_text(s)} "
                        f"(HLO has no implicit broadcast: broadcast the operand first)")
    elif op == "compare":
        a, b = ops[0].shape.element_type, ops[1].shape.element_type
        if a != b:
            return f"compare %{inst.name}: operand types differ ({a} %{ops[0].name}, {b} %{ops[1].name})"
        if et != "pred":
            return f"compare %{inst.name} is {et}, must be pred"
        if ops[0].shape.dimensions != ops[1].shape.dimensions or s.dimensions != ops[0].shape.dimensions:
            return (f"compare %{inst.name}: shapes differ ({shape_text(ops[0].shape)}, {shape_text(ops[1].shape)} "
                    f"-> {shape_text(s)})")
    elif op == "select":
        p, t, f = (o.shape for o in ops)
        if p.element_type != "pred":
            return f"select %{inst.name}: predicate %{ops[0].name} is {p.element_type}, must be pred"
        if not (compatible(t, s) and compatible(f, s)):
            return f"select %{inst.name} is {shape_text(s)} but selects {shape_text(t)} and {shape_text(f)}"
        if p.rank and p.dimensions != s.dimensions:
            return f"select %{inst.name}: predicate {shape_text(p)} does not match the result {shape_text(s)}"
    elif op == "clamp":
        lo, x, hi = (o.shape for o in ops)
        if not compatible(x, s):
            return f"clamp %{inst.name} is {shape_text(s)} but clamps {shape_text(x)}"
        for o, b in ((ops[0], lo), (ops[2], hi)):
            if b.element_type != et or (b.rank and b.dimensions != s.dimensions):
                return f"clamp %{inst.name}: bound %{o.name} {shape_text(b)} does not fit {shape_text(s)}"
    elif op in _SAME_TYPE_UNARY:
        if not compatible(ops[0].shape, s):
            return f"{op} %{inst.name} is {shape_text(s)} but its operand %{ops[0].name} is {shape_text(ops[0].shape)}"
    elif op == "abs" or op in _TO_REAL:
        want = _real_of(ops[0].shape.element_type)
        if et != want or s.dimensions != ops[0].shape.dimensions:
            return f"{op} %{inst.name} is {shape_text(s)}, expected {want}{list(ops[0].shape.dimensions)}"
    elif op == "is-finite":
        if et != "pred" or s.dimensions != ops[0].shape.dimensions:
            return f"is-finite %{inst.name} is {shape_text(s)}, expected pred{list(ops[0].shape.dimensions)}"
    elif op == "convert":
        if s.dimensions != ops[0].shape.dimensions:
            return (f"convert %{inst.name} changes dimensions: {shape_text(ops[0].shape)} %{ops[0].name} -> "
                    f"{shape_text(s)} (a convert changes the element type only)")
    elif op in _SAME_TYPE_SHAPE_OPS and op != "bitcast":
        if et != ops[0].shape.element_type:
            return (f"{op} %{inst.name} is {et} but its operand %{ops[0].name} is {ops[0].shape.element_type} "
                    f"(only convert changes the element type)")
    return None


def _concatenate(inst: Instruction) -> str | None:
    dims = tuple(inst.attrs.get("dimensions", ()) or ())
    s = inst.shape
    if len(dims) != 1 or not _array(s) or not all(_array(o.shape) for o in inst.operands):
        return None
    d = dims[0]
    total = 0
    for o in inst.operands:
        if o.shape.element_type != s.element_type:
            return f"concatenate %{inst.name} is {s.element_type} but operand %{o.name} is {o.shape.element_type}"
        if o.shape.rank != s.rank or not 0 <= d < s.rank:
            return None  # the parser's check names it
        for i, (a, b) in enumerate(zip(o.shape.dimensions, s.dimensions)):
            if i != d and a != b:
                return (f"concatenate %{inst.name}: operand %{o.name} {shape_text(o.shape)} differs from the result "
                        f"{shape_text(s)} in dimension {i}")
        total += o.shape.dimensions[d]
    if total != s.dimensions[d]:
        return f"concatenate %{inst.name}: operands add up to {total} along dimension {d}, the result has {s.dimensions[d]}"
    return None


def _pad(inst: Instruction) -> str | None:
    x, v = inst.operands[0].shape, inst.operands[1].shape
    cfg = inst.attrs.get("padding")
    s = inst.shape
    if not (_array(x) and _array(v) and _array(s)):
        return None
    if v.rank or v.element_type != x.element_type or s.element_type != x.element_type:
        return f"pad %{inst.name}: padding value {shape_text(v)} and result {s.element_type} must be scalar {x.element_type}"
    if isinstance(cfg, list) and len(cfg) == x.rank:
        want = [lo + hi + n + max(n - 1, 0) * interior for n, (lo, hi, interior) in zip(x.dimensions, cfg)]
        if list(s.dimensions) != want:
            return f"pad %{inst.name}: result {shape_text(s)} should have dimensions {want}"
    return None


def _slice(inst: Instruction) -> str | None:
    sl, x, s = inst.attrs.get("slice"), inst.operands[0].shape, inst.shape
    if not (isinstance(sl, list) and _array(x) and _array(s)) or len(sl) != x.rank:
        return None
    want = [max(0, -(-(limit - start) // stride)) for start, limit, stride in sl]
    if list(s.dimensions) != want and not s.dynamic:
        return f"slice %{inst.name}: result {shape_text(s)} should have dimensions {want}"
    return None


def _indices(inst: Instruction, start: int, rank: int) -> str | None:
    idx = inst.operands[start:]
    if len(idx) != rank:
        return f"{inst.opcode} %{inst.name}: {len(idx)} start indices for a rank-{rank} operand"
    for o in idx:
        if _array(o.shape) and (o.shape.rank or not _is_int(o.shape.element_type)):
            return f"{inst.opcode} %{inst.name}: start index %{o.name} is {shape_text(o.shape)}, not an integer scalar"
    return None


def _dynamic_slice(inst: Instruction) -> str | None:
    x, s = inst.operands[0].shape, inst.shape
    if not (_array(x) and _array(s)):
        return None
    e = _indices(inst, 1, x.rank)
    if e:
        return e
    sizes = tuple(inst.attrs.get("dynamic_slice_sizes", ()) or ())
    if list(s.dimensions) != list(sizes) or s.element_type != x.element_type:
        return f"dynamic-slice %{inst.name}: result {shape_text(s)} should be {x.element_type}{list(sizes)}"
    if any(not 0 <= z <= n for z, n in zip(sizes, x.dimensions)):
        return f"dynamic-slice %{inst.name}: sizes {list(sizes)} do not fit in {shape_text(x)}"
    return None


def _dynamic_update_slice(inst: Instruction) -> str | None:
    x, u, s = inst.operands[0].shape, inst.operands[1].shape, inst.shape
    if not (_array(x) and _array(u) and _array(s)):
        return None
    if not compatible(x, s):
        return f"dynamic-update-slice %{inst.name} is {shape_text(s)} but updates {shape_text(x)}"
    if u.element_type != x.element_type or u.rank != x.rank or any(a > b for a, b in zip(u.dimensions, x.dimensions)):
        return f"dynamic-update-slice %{inst.name}: update {shape_text(u)} does not fit in {shape_text(x)}"
    return _indices(inst, 2, x.rank)


def _tuple_ops(inst: Instruction) -> str | None:
    s = inst.shape
    if inst.opcode == "tuple":
        parts = s.tuple_shapes if s.is_tuple else None
        if parts is None or len(parts) != len(inst.operands) or not all(
                compatible(p, o.shape) for p, o in zip(parts, inst.operands)):
            got = "(" + ", ".join(shape_text(o.shape) for o in inst.operands) + ")"
            return f"tuple %{inst.name} is {shape_text(s)} but its operands are {got}"
        return None
    t = inst.operands[0].shape
    idx = inst.attrs.get("index")
    if t is not None and t.is_tuple and isinstance(idx, int) and 0 <= idx < len(t.tuple_shapes or ()):
        if not compatible(t.tuple_shapes[idx], s):
            return (f"get-tuple-element %{inst.name} is {shape_text(s)} but element {idx} of %{inst.operands[0].name} "
                    f"is {shape_text(t.tuple_shapes[idx])}")
    return None


def _fusion(inst: Instruction) -> str | None:
    comp = inst.attrs.get("calls")
    if isinstance(comp, list):
        comp = comp[0] if comp else None
    if not isinstance(comp, Computation):
        return None
    params = comp.parameters
    if len(params) != len(inst.operands):
        return f"fusion %{inst.name} has {len(inst.operands)} operands but {comp.name!r} takes {len(params)} parameters"
    for p, o in zip(params, inst.operands):
        if not compatible(p.shape, o.shape):
            return (f"fusion %{inst.name}: parameter {p.parameter_number} of {comp.name!r} is {shape_text(p.shape)} but "
                    f"operand %{o.name} is {shape_text(o.shape)}")
    if comp.root is not None and not compatible(comp.root.shape, inst.shape):
        return f"fusion %{inst.name} is {shape_text(inst.shape)} but {comp.name!r} returns {shape_text(comp.root.shape)}"
    return None


def _sort(inst: Instruction) -> str | None:
    ops, s = inst.operands, inst.shape
    if not all(_array(o.shape) for o in ops):
        return None
    first = ops[0].shape
    for o in ops[1:]:
        if o.shape.dimensions != first.dimensions:
            return f"sort %{inst.name}: operands {shape_text(first)} and {shape_text(o.shape)} differ in dimensions"
    results = s.tuple_shapes if s.is_tuple else (s,)
    if len(results) != len(ops) or not all(compatible(r, o.shape) for r, o in zip(results, ops)):
        return f"sort %{inst.name} is {shape_text(s)} but sorts {', '.join(shape_text(o.shape) for o in ops)}"
    comp = inst.attrs.get("to_apply")
    if isinstance(comp, Computation) and comp.root is not None:
        params = comp.parameters
        want = [Shape(o.shape.element_type, ()) for o in ops for _ in (0, 1)]
        if len(params) != len(want) or not all(compatible(p.shape, w) for p, w in zip(params, want)):
            return (f"sort %{inst.name}: comparator {comp.name!r} takes "
                    f"({', '.join(shape_text(p.shape) for p in params)}), expected "
                    f"({', '.join(shape_text(w) for w in want)})")
        if not compatible(comp.root.shape, Shape("pred", ())):
            return f"sort %{inst.name}: comparator {comp.name!r} returns {shape_text(comp.root.shape)}, not pred[]"
    return None


def _bits(et: str) -> int | None:
    from fusegen.hlo import dtypes

    try:
        return dtypes.bit_width(et)
    except Exception:
        return None


def _bitcast(inst: Instruction) -> str | None:
    a, s = inst.operands[0].shape, inst.shape
    if not (_array(a) and _array(s)) or a.dynamic or s.dynamic:
        return None
    x, y = _bits(a.element_type), _bits(s.element_type)
    if x is None or y is None or a.numel * x == s.numel * y:
        return None
    return (f"bitcast %{inst.name} changes the byte size: {shape_text(a)} %{inst.operands[0].name} -> {shape_text(s)} "
            f"(a bitcast reinterprets the same bytes)")


_HANDLERS = {"dot": _dot, "sort": _sort, "bitcast": _bitcast, "reduce": _reduce, "concatenate": _concatenate, "pad": _pad, "slice": _slice,
             "dynamic-slice": _dynamic_slice, "dynamic-update-slice": _dynamic_update_slice, "tuple": _tuple_ops,
             "get-tuple-element": _tuple_ops, "fusion": _fusion}
_MIN_OPERANDS = {"dot": 2, "sort": 1, "bitcast": 1, "reduce": 2, "pad": 2, "slice": 1, "dynamic-slice": 1, "dynamic-update-slice": 2,
                 "get-tuple-element": 1, "select": 3, "clamp": 3, "compare": 2}


def shape_problem(inst: Instruction) -> str | None:
    """The first way ``inst``'s result shape or element type disagrees with its operands (one line naming
    the instruction), else ``None``. Operand counts and attributes are the parser's checks
    (:func:`fusegen.hlo.verifier.instruction_error`); opcodes not listed above pass."""
    op = inst.opcode
    if len(inst.operands) < _MIN_OPERANDS.get(op, 0) or inst.shape is None:
        return None
    if op in _ARITH or op in _LOGIC or op in _SHIFT:
        if len(inst.operands) != 2:
            return None
    h = _HANDLERS.get(op)
    if h is not None:
        return h(inst)
    if not inst.operands:
        return None
    return _elementwise(inst)
