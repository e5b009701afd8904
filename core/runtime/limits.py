"""Resource limits of a run: memory estimated before anything is allocated, a wall-clock deadline and a
``while`` iteration budget checked while it runs.

A module or input file can ask for anything (``f32[100000,100000]``, two billion loop iterations); these
checks turn such a request into a one-line :class:`ResourceLimitError` before the machine runs out of memory
or time.

* :func:`estimate_peak_bytes` bounds what :func:`fusegen.verify.judged_run.run_module` keeps alive: the
  inputs, every value of the entry computation twice (kernels and the reference evaluator each keep theirs),
  the largest called computation's values, and the largest fusion's intermediates.
* :func:`static_trip_count` mirrors ``xla/service/while_loop_analysis.cc`` ``ComputeWhileLoopTripCount``
  for the pattern XLA matches (an induction variable in the loop tuple, started by a constant, stepped by a
  constant ``add`` in the body, compared with a constant in the condition) and reads the
  ``known_trip_count`` XLA writes into a while's backend config.
"""

from __future__ import annotations

import math
import os
import time
from typing import Any

import attrs

from fusegen.hlo.ir import Computation, Instruction, Module, Shape

__all__ = ["ResourceLimitError", "DeadlineError", "RunLimits", "default_max_memory", "parse_size",
           "estimate_peak_bytes", "static_trip_count", "check_module", "Budget"]

#: Share of the machine's memory a run may plan to use when ``--max-memory`` is not given.
DEFAULT_MEMORY_FRACTION = 0.5
#: ``while`` iterations one run may execute (all loops together) unless raised.
DEFAULT_MAX_WHILE_ITERATIONS = 1_000_000


class ResourceLimitError(ValueError):
    """A run would exceed a limit (memory, time, while iterations); the message is one line and says which."""


class DeadlineError(ResourceLimitError):
    """The run passed its ``--timeout`` (a :class:`ResourceLimitError`; the f64 oracle tells it from a while
    budget its own loops passed)."""


def _fmt_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB", "PiB"):
        if abs(n) < 1024 or unit == "PiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} PiB"  # pragma: no cover


def parse_size(text: str) -> int:
    """``"8G"``, ``"512MiB"``, ``"1e9"`` -> bytes (powers of 1024 for K/M/G/T).

    Raises:
        ValueError: not a positive size.
    """
    s = str(text).strip().lower().removesuffix("ib").removesuffix("b")
    mult = 1
    if s and s[-1] in "kmgt":
        mult = 1024 ** ("kmgt".index(s[-1]) + 1)
        s = s[:-1]
    try:
        v = float(s) * mult
    except ValueError:
        raise ValueError(f"not a size: {text!r} (use bytes or a K/M/G/T suffix, e.g. 8G)") from None
    if not math.isfinite(v) or v <= 0:
        raise ValueError(f"not a positive size: {text!r}")
    return int(v)


def default_max_memory() -> int:
    """Half the machine's physical memory, and no more than the process's address-space limit allows."""
    try:
        phys = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        phys = 8 << 30
    limit = int(phys * DEFAULT_MEMORY_FRACTION)
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY and soft > 0:
            limit = min(limit, int(soft * DEFAULT_MEMORY_FRACTION))
    except (ImportError, ValueError, OSError):
        pass
    return limit


@attrs.frozen
class RunLimits:
    """Limits of one run.

    Attributes:
        max_memory: bytes the estimated peak may reach (:func:`estimate_peak_bytes`).
        timeout: seconds of wall-clock time for executing the module, ``None`` for no deadline.
        max_while_iterations: ``while`` iterations allowed in one run, all loops together.
    """

    max_memory: int = attrs.field(factory=default_max_memory)
    timeout: float | None = None
    max_while_iterations: int = DEFAULT_MAX_WHILE_ITERATIONS


def _bytes(shape: Shape | None, promoted: bool = False) -> int:
    from fusegen.hlo import dtypes

    if shape is None:
        return 0
    if shape.is_tuple:
        return sum(_bytes(s, promoted) for s in shape.tuple_shapes or ())
    if shape.element_type in ("token", "opaque"):
        return 0
    try:
        width = max(dtypes.bit_width(shape.element_type), 8) // 8
        if promoted and dtypes.is_complex(shape.element_type):
            width = 16
        elif promoted and dtypes.is_floating(shape.element_type):
            width = 8
    except (KeyError, ValueError):
        width = 8
    return width * math.prod(max(d, 1) for d in shape.dimensions)


def _called(inst: Instruction) -> list[Computation]:
    return [c for c in inst.called_computations if isinstance(c, Computation)]


def estimate_peak_bytes(module: Module, promoted: bool = False) -> int:
    """An upper estimate of the bytes ``run_module`` keeps alive at once (see module doc).

    Values are counted as ``array`` bytes in their element type (sub-byte types as a byte). A value the
    executor produces is not an alias, so a tuple counts its elements again. ``promoted``: every floating
    value at 8 bytes and complex at 16, as the f64 oracle (:mod:`fusegen.evaluator.promote`) holds them.
    """
    entry = module.entry
    if entry is None:
        return 0
    # Bytes of one activation of each non-fused computation, including its deepest callee, bottom-up
    # over the call graph (a DAG: the parser rejects cycles), without recursion.
    act: dict[int, int] = {}
    fusion_peak = 0
    stack: list[tuple[Computation, bool]] = [(entry, False)]
    while stack:
        comp, expanded = stack.pop()
        if id(comp) in act:
            continue
        callees = [c for i in comp.instructions if i.opcode != "fusion" for c in _called(i)]
        if not expanded:
            stack.append((comp, True))
            stack.extend((c, False) for c in callees if id(c) not in act)
            continue
        own = sum(_bytes(i.shape, promoted) for i in comp.instructions)
        act[id(comp)] = own + max((act.get(id(c), 0) for c in callees), default=0)
        for i in comp.instructions:
            if i.opcode == "fusion":
                for c in _called(i):
                    fusion_peak = max(fusion_peak, sum(_bytes(x.shape, promoted) for x in c.instructions))
    inputs = sum(_bytes(p.shape, promoted) for p in entry.parameters)
    return inputs + 2 * act.get(id(entry), 0) + fusion_peak


def _const_int(inst: Instruction) -> int | None:
    if inst.opcode != "constant" or inst.shape is None or inst.shape.is_tuple or inst.shape.rank != 0:
        return None
    lit = inst.attrs.get("literal")
    try:
        return int(str(lit).strip())
    except (TypeError, ValueError):
        return None


def _binary(inst: Instruction) -> tuple[Instruction, list[Instruction]] | None:
    """``inst`` as ``(operation, [outer operands])``, looking through a fusion whose root is the operation.

    A fused parameter maps to the fusion's operand; a constant inside the fusion stays itself.
    """
    if inst.opcode != "fusion":
        return inst, list(inst.operands)
    fused = inst.attrs.get("calls")
    fused = fused[0] if isinstance(fused, list) and fused else fused
    if not isinstance(fused, Computation) or fused.root is None:
        return None
    out = []
    for o in fused.root.operands:
        if o.opcode == "parameter":
            n = o.attrs.get("parameter_number")
            if not isinstance(n, int) or n >= len(inst.operands):
                return None
            out.append(inst.operands[n])
        else:
            out.append(o)
    return fused.root, out


def _gte_index(inst: Instruction, param: Instruction) -> int | None:
    if inst.opcode == "get-tuple-element" and inst.operands and inst.operands[0] is param:
        idx = inst.attrs.get("index")
        return idx if isinstance(idx, int) else None
    return None


def static_trip_count(inst: Instruction) -> int | None:
    """The trip count of ``while`` instruction ``inst`` when it is known statically, else ``None``.

    Reads ``backend_config={"known_trip_count":{"n":"N"}}`` first, then matches XLA's pattern: loop tuple
    element ``k`` starts at a constant, the body's root sets it to ``gte(param, k) + constant`` and the
    condition's root compares ``gte(param, k)`` with a constant (LT, LE, GT, GE, NE).
    """
    bc = inst.attrs.get("backend_config")
    if isinstance(bc, dict) and isinstance(bc.get("known_trip_count"), dict):
        try:
            return max(0, int(bc["known_trip_count"].get("n")))
        except (TypeError, ValueError):
            pass
    cond, body = inst.attrs.get("condition"), inst.attrs.get("body")
    if not isinstance(cond, Computation) or not isinstance(body, Computation) or not inst.operands:
        return None
    init = inst.operands[0]
    c = _binary(cond.root) if cond.root is not None else None
    if c is None or c[0].opcode != "compare" or len(c[1]) != 2 or not cond.parameters:
        return None
    cparam = cond.parameters[0]
    direction = str(c[0].attrs.get("direction", ""))
    a, b = c[1]
    k, bound = _gte_index(a, cparam), _const_int(b)
    if k is None:  # `constant < i` is `i > constant`
        k, bound = _gte_index(b, cparam), _const_int(a)
        direction = {"LT": "GT", "GT": "LT", "LE": "GE", "GE": "LE"}.get(direction, direction)
    if k is None or bound is None or init.opcode != "tuple" or k >= len(init.operands):
        return None
    start = _const_int(init.operands[k])
    broot = body.root
    if start is None or broot is None or broot.opcode != "tuple" or k >= len(broot.operands) or not body.parameters:
        return None
    u = _binary(broot.operands[k])
    if u is None or u[0].opcode not in ("add", "subtract") or len(u[1]) != 2:
        return None
    upd = u[0]
    bparam = body.parameters[0]
    x, y = u[1]
    if _gte_index(x, bparam) == k and _const_int(y) is not None:
        step = _const_int(y)
    elif upd.opcode == "add" and _gte_index(y, bparam) == k and _const_int(x) is not None:
        step = _const_int(x)
    else:
        return None
    if upd.opcode == "subtract":
        step = -step
    if step == 0:
        return None
    span = {"LT": bound - start, "LE": bound - start + 1, "GT": start - bound, "GE": start - bound + 1}
    if direction in span:
        if (step > 0) != (direction in ("LT", "LE")):
            return None if span[direction] > 0 else 0  # never ends, or never starts
        return max(0, -(-span[direction] // abs(step)))
    if direction == "NE" and (bound - start) % step == 0 and (bound - start) // step >= 0:
        return (bound - start) // step
    return None


def check_module(module: Module, limits: RunLimits) -> None:
    """Refuse a module whose estimated peak memory or static ``while`` trip counts exceed ``limits``.

    Raises:
        ResourceLimitError: naming the module, what it needs and the limit (and the option that raises it).
    """
    need = estimate_peak_bytes(module)
    if need > limits.max_memory:
        raise ResourceLimitError(
            f"module {module.name} needs an estimated {_fmt_bytes(need)} of memory to run, more than the limit "
            f"of {_fmt_bytes(limits.max_memory)} (raise it with --max-memory)")
    for comp in module.computations:
        for inst in comp.instructions:
            if inst.opcode != "while":
                continue
            n = static_trip_count(inst)
            if n is not None and n > limits.max_while_iterations:
                raise ResourceLimitError(
                    f"while %{inst.name} in module {module.name} runs {n:,} iterations (static trip count), more "
                    f"than the budget of {limits.max_while_iterations:,} (raise it with --max-while-iterations)")


class Budget:
    """Counts ``while`` iterations and watches the deadline while a module runs.

    Raises :class:`ResourceLimitError` from :meth:`iteration` / :meth:`step` once a limit is passed.
    """

    __slots__ = ("limits", "deadline", "iterations", "_steps")

    def __init__(self, limits: RunLimits | None):
        self.limits = limits or RunLimits(max_memory=1 << 62)
        self.deadline = time.monotonic() + self.limits.timeout if self.limits.timeout else None
        self.iterations = 0
        self._steps = 0

    def step(self, what: Any = None) -> None:
        """One instruction executed; checks the deadline."""
        self._steps += 1
        if self.deadline is not None and time.monotonic() > self.deadline:
            where = f" (at %{what.name})" if isinstance(what, Instruction) else ""
            raise DeadlineError(f"the run took longer than --timeout {self.limits.timeout:g} s{where}")

    def another_run(self) -> "Budget":
        """A budget for another run of the same module (the reference beside the kernels): the same deadline,
        its own count of while iterations (``max_while_iterations`` is per run)."""
        b = Budget(self.limits)
        b.deadline = self.deadline
        return b

    def iteration(self, inst: Instruction) -> None:
        """One more iteration of while ``inst``."""
        self.iterations += 1
        if self.iterations > self.limits.max_while_iterations:
            raise ResourceLimitError(
                f"while %{inst.name} passed the budget of {self.limits.max_while_iterations:,} loop iterations "
                f"(raise it with --max-while-iterations)")
        self.step(inst)
