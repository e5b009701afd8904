"""How each entry parameter of a module is used, so that seeded default inputs exercise the program.

Random ``N(0, 1)`` values for every parameter test nothing on a real model: a variance that reaches ``rsqrt`` turns
negative, a step count that reaches ``power`` makes it NaN, an index out of range reads the fill value, and the
NaNs spread to every output. XLA's test input maker (``MakeFakeArguments``, ``xla/tests/test_utils.cc``) looks at
the uses of each parameter for the same reason (index operands get in-range values). Here each use site is traced
back to the entry parameters it reads, through fusions, calls, ``while`` and ``conditional`` bodies, tuples and the
ops that move or retype values without changing what they mean:

* **index**: start indices of ``dynamic-slice`` / ``dynamic-update-slice``, ``gather`` and ``scatter`` indices get
  integers in ``[0, high]``, ``high`` the largest start that keeps the slice inside the operand.
* **bounds** (an open interval the values must lie in): positive for the operands of ``sqrt``, ``rsqrt``,
  ``log``, the base of ``power`` (unless the exponent is an integral constant) and the denominator of ``divide`` /
  ``remainder``; above -1 for ``log-plus-one``. The interval is carried back through the ops that move values,
  ``select``, ``negate``, adding, subtracting, multiplying or dividing by a constant (``log(1 - x) + log(1 + x)``
  bounds ``x`` to ``(-1, 1)``; ``power(count + 1, -0.8)`` asks ``count > -1``), and, for a positive result,
  through a sum, a product, a numerator, a minuend, ``maximum``, ``minimum`` and add-reductions; it stops where
  the value is non-negative by construction (``x * x``, ``exp``, ``abs``, ``max(x, 0)``).
* **fan_in**: a ``dot`` / ``convolution`` operand (or a cuBLAS / cuDNN custom call's) that the op contracts over
  ``fan_in`` elements per output (a split-K dot's parts, summed by the reduce after it, count); with several
  uses, the largest.

The analysis is only a hint for friendlier inputs: a use it cannot see through leaves the parameter's default
distribution, and the run itself reports anything malformed.
"""

from __future__ import annotations

import math
from typing import Any, Callable, Iterable

import attrs
import numpy as np

from fusegen.hlo.ir import Computation, Instruction, Module

__all__ = ["ParameterUse", "parameter_uses", "index_uses"]

#: Ops whose result holds the same values as their operands, moved or retyped.
_MOVES = {"convert", "bitcast", "reshape", "copy", "broadcast", "transpose", "slice", "concatenate", "reverse"}
_INF = math.inf
#: Sinks of a bound: operand number, the open interval it must lie in.
_BOUND_SINKS = {"sqrt": (0, (0.0, _INF)), "rsqrt": (0, (0.0, _INF)), "log": (0, (0.0, _INF)),
                "log-plus-one": (0, (-1.0, _INF)), "power": (0, (0.0, _INF)), "divide": (1, (0.0, _INF)),
                "remainder": (1, (0.0, _INF))}
_POSITIVE = (0.0, _INF)
_TRACE_LIMIT = 200_000  # steps of one trace: a bound for pathological modules


@attrs.frozen
class ParameterUse:
    """What one entry parameter's uses ask of its values (all ``None`` / ``False``: nothing known).

    Attributes:
        index_high: largest in-range value (the parameter is an index operand); integers in ``[0, index_high]``.
        bounds: ``(low, high)``, the open interval its values must lie in (``-inf`` / ``inf`` for no bound), e.g.
            ``(0, inf)`` for a value reaching a root, log, power base or denominator.
        fan_in: elements a dot / convolution contracts per output along the parameter (the largest over its uses).
    """

    index_high: int | None = None
    bounds: tuple[float, float] | None = None
    fan_in: int | None = None

    @property
    def positive(self) -> bool:
        """The values must be positive (``bounds`` above 0 or more)."""
        return self.bounds is not None and self.bounds[0] >= 0


def _attr_ints(inst: Instruction, key: str) -> tuple[int, ...]:
    v = inst.attrs.get(key)
    if v is None:
        return ()
    if isinstance(v, str):
        return tuple(int(x) for x in v.strip().strip("{}").split(",") if x.strip())
    if isinstance(v, int):
        return (v,)
    return tuple(int(x) for x in v)


def index_uses(inst: Instruction) -> list[tuple[int, int]]:
    """(operand number, largest in-range value) for each index operand of ``inst``.

    Mirrors the clamping of XLA's ``dynamic-slice`` / ``dynamic-update-slice`` (start in ``[0, dim - size]``)
    and ``gather`` / ``scatter`` (start in ``[0, dim - window size]`` for every operand dim an index component
    addresses: ``start_index_map``, ``scatter_dims_to_operand_dims``).
    """
    op = inst.opcode
    if op == "dynamic-slice":
        src = inst.operands[0].shape
        sizes = _attr_ints(inst, "dynamic_slice_sizes") or tuple(src.dimensions)
        return [(k, max(0, src.dimensions[k - 1] - sizes[k - 1])) for k in range(1, len(inst.operands))
                if k - 1 < src.rank]
    if op == "dynamic-update-slice":
        src, upd = inst.operands[0].shape, inst.operands[1].shape
        return [(k, max(0, src.dimensions[k - 2] - upd.dimensions[k - 2])) for k in range(2, len(inst.operands))
                if k - 2 < src.rank]
    if op == "gather":
        dims = inst.operands[0].shape.dimensions
        sizes, mapped = _attr_ints(inst, "slice_sizes"), _attr_ints(inst, "start_index_map")
        if len(sizes) == len(dims) and mapped and all(0 <= d < len(dims) for d in mapped):
            return [(1, max(0, min(dims[d] - sizes[d] for d in mapped)))]
        return [(1, max(0, min(dims) - 1) if dims else 0)]
    if op == "scatter":
        n = (len(inst.operands) - 1) // 2
        dims = inst.operands[0].shape.dimensions
        return [(n, _scatter_high(inst, n, dims))]
    return []


def _scatter_high(inst: Instruction, n: int, dims: tuple[int, ...]) -> int:
    """The largest in-range scatter index: each addressed operand dim less its update window there."""
    mapped = _attr_ints(inst, "scatter_dims_to_operand_dims")
    not_window = set(_attr_ints(inst, "inserted_window_dims")) | set(_attr_ints(inst, "input_batching_dims"))
    uwd = _attr_ints(inst, "update_window_dims")
    window_dims = [d for d in range(len(dims)) if d not in not_window]
    upd = inst.operands[n + 1].shape.dimensions if len(inst.operands) > n + 1 else ()
    if not mapped or len(window_dims) != len(uwd) or any(u >= len(upd) for u in uwd):
        return max(0, min(dims) - 1) if dims else 0
    size = {d: upd[u] for d, u in zip(window_dims, uwd)}
    return max(0, min(dims[d] - size.get(d, 1) for d in mapped if 0 <= d < len(dims)))


def _constant_values(inst: Instruction) -> np.ndarray | None:
    """A constant's values through broadcasts and converts, or ``None`` (not a constant, or a large one)."""
    while inst.opcode in ("broadcast", "convert", "reshape", "bitcast", "copy") and inst.operands:
        inst = inst.operands[0]
    if inst.opcode != "constant" or inst.shape.is_tuple or inst.shape.numel > 4096:
        return None
    from fusegen.hlo.literal import parse_literal

    try:
        v = np.asarray(parse_literal(inst.attrs.get("literal"), inst.shape))
        return v.astype(np.float64) if v.dtype.kind in "biuf" else None
    except (ValueError, TypeError, OverflowError):
        return None


def _same_value(a: Instruction, b: Instruction, depth: int = 4) -> bool:
    """``a`` and ``b`` compute the same value (the same instruction, or clones a fusion made of one)."""
    if a is b:
        return True
    if depth == 0 or a.opcode != b.opcode or a.opcode in ("parameter", "constant", "rng") or a.shape != b.shape:
        return False
    if len(a.operands) != len(b.operands) or a.attrs.keys() - {"metadata"} != b.attrs.keys() - {"metadata"}:
        return False
    if any(a.attrs[k] != b.attrs[k] for k in a.attrs if k != "metadata"):
        return False
    return all(_same_value(x, y, depth - 1) for x, y in zip(a.operands, b.operands))


def _scalar(inst: Instruction) -> float | None:
    """The one finite value of a constant (through broadcasts), else ``None``."""
    c = _constant_values(inst)
    ok = c is not None and c.size and np.isfinite(c.flat[0]) and (c == c.flat[0]).all()
    return float(c.flat[0]) if ok else None


Bound = tuple[float, float]


def _bound_follow(inst: Instruction, bound: Bound) -> Iterable[tuple[int, Bound]]:
    """(operand number, open interval it must lie in) for ``inst``'s result to lie in ``bound``."""
    op, ops, (lo, hi) = inst.opcode, inst.operands, bound
    positive = lo >= 0 and hi == _INF
    if op in _MOVES or op in ("pad", "dynamic-update-slice"):
        return [(k, bound) for k in range(len(ops) if op != "dynamic-update-slice" else 2)]
    if op in ("dynamic-slice", "negate", "select", "clamp"):
        if op == "clamp" and (c := _scalar(ops[0])) is not None and c > lo and hi == _INF:
            return []  # clamp(c, x, hi) with c inside the bound
        k = {"dynamic-slice": (0,), "negate": (0,), "select": (1, 2), "clamp": (1,)}[op]
        return [(j, (-hi, -lo) if op == "negate" else bound) for j in k]
    if op in ("add", "subtract", "multiply", "divide") and len(ops) == 2:
        c0, c1 = _scalar(ops[0]), _scalar(ops[1])
        if c0 is not None and c1 is not None:
            return []
        if op == "add":
            if c0 is not None or c1 is not None:
                c = c1 if c1 is not None else c0
                return [(0 if c1 is not None else 1, (lo - c, hi - c))]
            return [(0, (lo / 2, hi / 2)), (1, (lo / 2, hi / 2))]
        if op == "subtract":
            if c1 is not None:
                return [(0, (lo + c1, hi + c1))]
            if c0 is not None:
                return [(1, (c0 - hi, c0 - lo))]
            return [(0, bound)] if positive else []  # best effort: the subtrahend is left free
        if op == "multiply" and _same_value(*ops):
            return []  # a square: non-negative
        c, k = (c1, 0) if c1 is not None else (c0, 1)
        if c is not None and op == "divide" and k == 1:
            return []  # c / x: x is a denominator, a sink of its own
        if c is not None and c != 0:
            f = c if op == "multiply" else 1 / c
            return [(k, (lo / f, hi / f) if f > 0 else (hi / f, lo / f))]
        if positive:
            return [(0, _POSITIVE), (1, _POSITIVE)] if op == "multiply" else [(0, _POSITIVE)]
        return []
    if op in ("maximum", "minimum"):
        cs = [_scalar(o) for o in ops]
        if op == "maximum" and hi == _INF and any(c is not None and c >= lo for c in cs):
            return []  # max(x, c) with c at or above the bound
        if op == "minimum" and lo == -_INF and any(c is not None and c <= hi for c in cs):
            return []
        return [(k, bound) for k, c in enumerate(cs) if c is None]
    if op in ("reduce", "reduce-window") and positive:
        body = inst.attrs.get("to_apply")
        if isinstance(body, Computation) and body.root.opcode in ("add", "maximum", "minimum", "multiply"):
            return [(k, _POSITIVE) for k in range(len(ops) // 2)]
    return []  # non-negative by construction (exp, abs, sqrt ...) or nothing known


def _index_follow(inst: Instruction, state: None) -> Iterable[tuple[int, None]]:
    """Operands whose values an index operand's values are."""
    op = inst.opcode
    if op in _MOVES or op == "bitcast-convert":
        return [(k, None) for k in (range(len(inst.operands)) if op == "concatenate" else (0,))]
    if op == "clamp":
        return [(1, None)]
    if op == "select":  # jax's negative-index wrap select(i < 0, i + n, i): its plain branch
        return [(1, None), (2, None)]
    return []


def _fan_follow(inst: Instruction, state: None) -> Iterable[tuple[int, None]]:
    """Operands whose values a dot / convolution operand's values are."""
    op = inst.opcode
    if op in _MOVES:
        return [(k, None) for k in (range(len(inst.operands)) if op == "concatenate" else (0,))]
    if op in ("dynamic-slice", "pad"):
        return [(0, None)]
    return []


def _dot_fans(inst: Instruction, split: Callable[[Instruction], int]) -> list[tuple[int, int]]:
    """(operand number, elements contracted per output) for a dot or convolution and their library calls;
    ``split(dot)`` is the split-K factor (:meth:`_Tracer.split_k`)."""
    op = inst.opcode
    if op == "dot" and len(inst.operands) >= 2:
        lhs = inst.operands[0].shape.dimensions
        k = math.prod(lhs[d] for d in _attr_ints(inst, "lhs_contracting_dims") if d < len(lhs))
        return [(0, k * split(inst)), (1, k * split(inst))]
    target = str(inst.attrs.get("custom_call_target", "")) if op == "custom-call" else ""
    if target.startswith("__cublas$") and len(inst.operands) >= 2:
        d = (inst.backend_config.get("gemm_backend_config") or {}).get("dot_dimension_numbers") or {}
        lhs = inst.operands[0].shape.dimensions
        k = math.prod(lhs[int(c)] for c in d.get("lhs_contracting_dimensions", []) if int(c) < len(lhs))
        return [(0, k), (1, k)]
    if (op == "convolution" or target.startswith("__cudnn$conv")) and len(inst.operands) >= 2:
        labels = str(inst.attrs.get("dim_labels", ""))
        try:
            (ls, rs), os_ = labels.split("->")[0].split("_"), labels.split("->")[1]
        except ValueError:
            return []
        x, w = inst.operands[0].shape.dimensions, inst.operands[1].shape.dimensions
        if target == "__cudnn$convBackwardFilter":  # (x, dy): contracts batch and output positions
            if len(w) != len(os_) or "f" not in os_:
                return []
            k = math.prod(w) // max(1, w[os_.index("f")])
        elif len(w) == len(rs) and "o" in rs and "i" in rs:
            k = math.prod(w) // max(1, w[rs.index("i" if target == "__cudnn$convBackwardInput" else "o")])
        else:
            return []
        return [(0, k), (1, k)]
    return []


class _Tracer:
    """Walks a value back to the entry parameters it is read from, across computation boundaries."""

    def __init__(self, module: Module):
        self.entry = module.entry
        # computation -> (caller, parameter number -> caller operand number)
        self.callers: dict[int, list[tuple[Instruction, Callable[[int], int | None]]]] = {}
        for comp in module.computations:
            for inst in comp.instructions:
                self._note_calls(inst)

    def _note_calls(self, inst: Instruction) -> None:
        op = inst.opcode
        if op in ("fusion", "call", "map", "async-start"):
            for c in inst.called_computations[:1]:
                self.callers.setdefault(id(c), []).append((inst, lambda n: n))
        elif op == "while":
            for key in ("body", "condition"):
                c = inst.attrs.get(key)
                if isinstance(c, Computation):
                    self.callers.setdefault(id(c), []).append((inst, lambda n: 0 if n == 0 else None))
        elif op == "conditional":
            branches = inst.attrs.get("branch_computations") or [
                inst.attrs.get("true_computation"), inst.attrs.get("false_computation")]
            for j, c in enumerate(branches):
                if isinstance(c, Computation):
                    self.callers.setdefault(id(c), []).append((inst, lambda n, j=j: j + 1 if n == 0 else None))

    def split_k(self, dot: Instruction) -> int:
        """The batch dims of ``dot`` that an add-reduce sums right after, multiplied: XLA's split-K rewrite makes
        ``[M, K] x [K, N]`` a batched ``[S, M, K/S] x [S, K/S, N]`` dot in a gemm fusion and a reduce over ``S``,
        so each output still sums ``K`` products (1 for any other dot)."""
        nb = len(_attr_ints(dot, "lhs_batch_dims"))
        comp = dot.parent
        if not nb or comp is None:
            return 1
        sources = [(u, dot) for u in dot.users]
        root = comp.root
        if root is dot or (root.opcode in ("convert", "bitcast") and root.operands and root.operands[0] is dot):
            sources += [(u, f) for f, _ in self.callers.get(id(comp), ()) if f.opcode == "fusion" for u in f.users]
        factor = 1
        for user, src in sources:
            reads = [user] if user.opcode == "reduce" else []
            if user.opcode == "fusion":
                params = user.fused_computation.parameters
                reads += [r for j, o in enumerate(user.operands) if o is src and j < len(params)
                          for r in params[j].users if r.opcode == "reduce"]
            for r in reads:
                body = r.attrs.get("to_apply")
                if isinstance(body, Computation) and body.root.opcode == "add":
                    dims = set(_attr_ints(r, "dimensions"))
                    factor = max(factor, math.prod(dot.shape.dimensions[b] for b in range(nb) if b in dims))
        return factor

    def trace(self, start: Instruction, follow: Callable[[Instruction, Any], Iterable[tuple[int, Any]]],
              state: Any = None, seen: set | None = None) -> set[tuple[int, Any]]:
        """(entry parameter number, state there) for each parameter whose values reach ``start`` with ``state``
        through ``follow(inst, state)``'s (operand number, operand's state) pairs."""
        seen = set() if seen is None else seen
        found: set[tuple[int, Any]] = set()
        stack: list[tuple[Instruction, tuple[int, ...], Any]] = [(start, (), state)]
        steps = 0
        while stack and steps < _TRACE_LIMIT:
            steps += 1
            inst, path, state = stack.pop()
            key = (id(inst), path, state)
            if key in seen:
                continue
            seen.add(key)
            op = inst.opcode
            if op == "parameter":
                if inst.parent is self.entry:
                    if not path:
                        found.add((inst.parameter_number, state))
                    continue
                for caller, operand in self.callers.get(id(inst.parent), ()):
                    k = operand(inst.parameter_number)
                    if k is not None and k < len(caller.operands):
                        stack.append((caller.operands[k], path, state))
            elif op == "get-tuple-element" and inst.operands:
                stack.append((inst.operands[0], path + (int(inst.attrs.get("index", 0)),), state))
            elif op == "tuple":
                if path and path[-1] < len(inst.operands):
                    stack.append((inst.operands[path[-1]], path[:-1], state))
            elif op in ("fusion", "call"):
                for c in inst.called_computations[:1]:
                    stack.append((c.root, path, state))
            elif op == "while":
                body = inst.attrs.get("body")
                if isinstance(body, Computation):
                    stack.append((body.root, path, state))
                if inst.operands:
                    stack.append((inst.operands[0], path, state))
            elif op == "conditional":
                stack.extend((c.root, path, state) for c in inst.called_computations)
            elif not path:
                stack.extend((inst.operands[k], (), s) for k, s in follow(inst, state) if k < len(inst.operands))
        return found


def _integral_exponent(inst: Instruction) -> bool:
    c = _constant_values(inst.operands[1]) if len(inst.operands) > 1 else None
    return c is not None and bool((c == np.round(c)).all())


def parameter_uses(module: Module) -> dict[int, ParameterUse]:
    """Entry parameter number -> what its uses ask of its values (parameters with no such use are left out).

    Args:
        module: a parsed module (any nesting of fusions, calls, ``while`` and ``conditional``).

    Returns:
        ``{parameter_number: ParameterUse}``; see the module docstring for the rules.
    """
    tracer = _Tracer(module)
    high: dict[int, int] = {}
    bounds: dict[int, Bound] = {}
    fan: dict[int, int] = {}
    bound_seen: set = set()  # keyed by the interval too, so one walk serves every sink
    for comp in module.computations:
        for inst in comp.instructions:
            for k, bound in index_uses(inst):
                if k < len(inst.operands):
                    for n, _ in tracer.trace(inst.operands[k], _index_follow):
                        high[n] = min(bound, high.get(n, bound))
            k, need = _BOUND_SINKS.get(inst.opcode, (None, None))
            if k is not None and k < len(inst.operands) and not (inst.opcode == "power" and _integral_exponent(inst)):
                for n, (lo, hi) in tracer.trace(inst.operands[k], _bound_follow, need, bound_seen):
                    was = bounds.get(n, (-_INF, _INF))
                    bounds[n] = (max(lo, was[0]), min(hi, was[1]))
            for k, f in _dot_fans(inst, tracer.split_k):
                if f > 1 and k < len(inst.operands):
                    for n, _ in tracer.trace(inst.operands[k], _fan_follow):
                        fan[n] = max(f, fan.get(n, f))
    # an empty interval (two uses that disagree) asks nothing one draw could give
    bounds = {n: b for n, b in bounds.items() if b[0] < b[1]}
    return {n: ParameterUse(high.get(n), bounds.get(n), fan.get(n)) for n in sorted(set(high) | set(bounds) | set(fan))}
