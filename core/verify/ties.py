"""Near-ties at discrete choices: a sort (top-k, argsort) whose order turns on keys closer than their budget.

A mixture-of-experts router picks each token's top-k experts by sorting their probabilities. Two
probabilities one bf16 ulp apart are a near-tie: a kernel, the reference evaluator, the f64 oracle and
XLA:CPU (``--expected``) may each round them the other way, pick the other expert, and every value
downstream of that token differs by far more than any rounding: a false mismatch. The verdict tells such a
flip from a bug in three steps:

1. **Find the near-ties** on the kernel path (:func:`record_ties`, per execution of a ``sort`` with an
   integer payload, the element ids, whose keys are its first operand, top-level or the root of a
   fusion): adjacent sorted positions whose keys differ by no more than the keys' budget at that point,
   ``rtol(t) * max(|a|, |b|) + floor(t) * max|keys|`` (the per-fusion budget of
   :mod:`fusegen.verify.budget` for the keys' type ``t``).
2. **Re-run the reference downstream with the other choice** (:func:`rerun`): the module's reference run
   again, where at each such sort execution the two tied elements are put in the kernels' order (the chain
   the kernels took), and for one tie at a time in the other order (the chain another oracle may have
   taken). A swap moves every output of the sort at the two positions together, so each element keeps its
   own key and payload.
3. **Judge the rest** (:mod:`fusegen.verify.verdict`): an output that differs from the reference is
   re-judged against the re-run that took the kernels' choices; elements that differ from ``--expected``
   are explained where a re-run with one tie flipped gives the expected value within the same allowance.
   What the ties explain is ``drift``, the reason naming each tie (instruction, execution, row, the two
   ids and keys, the budget); anything else stays a mismatch.

The rule never touches a fusion's own comparison (its kernel and reference sort the same operands, so
any difference there is a bug: a comparator the wrong way round is out of budget), and it only
absorbs a flip whose keys really are within their budget.

No XLA counterpart (XLA's tests compare a top-k's values, not its indices, where ties are possible:
``xla/service/gpu/tests/topk_test.cc``).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction, Module
from fusegen.runtime.compare import tolerance
from fusegen.verify.options import VerifyOptions

#: Near-ties kept per sort execution and per run (the closest by gap / budget), and re-runs tried per verdict.
TIES_PER_EXECUTION = 16
TIES_PER_RUN = 256
FLIPS_TRIED = 8


@attrs.frozen
class Tie:
    """Two elements of one sorted row whose keys are within their budget of each other.

    Attributes:
        instruction: the sort (or the fusion whose root it is); ``execution`` its 0-based execution.
        row: the row's index over the sort's other dimensions.
        position: where the kernel path put ``first`` (``second`` followed it, at ``position + 1``).
        first / second: the two elements' ids (the sort's integer payload: an expert, a column).
        first_key / second_key: their keys on the kernel path; ``budget``: the keys' budget there.
    """

    instruction: str
    execution: int
    row: tuple[int, ...]
    position: int
    first: int
    second: int
    first_key: float
    second_key: float
    budget: float

    @property
    def ratio(self) -> float:
        return abs(self.first_key - self.second_key) / self.budget if self.budget > 0 else 0.0

    def describe(self) -> str:
        ex = f" execution {self.execution}" if self.execution else ""
        return (f"%{self.instruction}{ex} row {list(self.row)}: ids {self.first} and {self.second} (keys "
                f"{self.first_key:.6g} and {self.second_key:.6g}, {abs(self.first_key - self.second_key):.3g} apart, "
                f"budget {self.budget:.3g})")

    def to_json(self) -> dict:
        return {"instruction": self.instruction, "execution": self.execution, "row": list(self.row),
                "position": self.position, "ids": [self.first, self.second],
                "keys": [self.first_key, self.second_key], "budget": self.budget}


def _reads(comp, wanted: set[int]) -> bool:
    """Whether the comparator ``comp`` reads every parameter in ``wanted``."""
    return wanted <= {p.parameter_number for p in comp.parameters if p.users}


def choice_sort(inst: Instruction) -> Instruction | None:
    """The ``sort`` whose value ``inst``'s is: ``inst`` itself or its fusion's root, when that sort orders by
    a floating first operand (its comparator reads parameters 0 and 1; XLA's top-k comparator also reads the
    ids, to break exact ties by index) and carries an integer payload (ids); else ``None``."""
    s = inst
    if inst.opcode == "fusion":
        s = inst.fused_computation.root
    if s.opcode != "sort" or len(s.operands) < 2:
        return None
    types = [o.shape.element_type for o in s.operands]
    if not (dtypes.is_floating(types[0]) and any(dtypes.is_integral(t) for t in types[1:])):
        return None
    cmp = s.attrs.get("to_apply")
    if cmp is None or not _reads(cmp, {0, 1}):
        return None
    return s


def _payload(sort: Instruction) -> int:
    return next(i for i, o in enumerate(sort.operands) if i and dtypes.is_integral(o.shape.element_type))


def _rows(a: np.ndarray, dim: int) -> np.ndarray:
    return np.moveaxis(np.asarray(a), dim, -1)


def find_ties(inst: Instruction, value: Any, options: VerifyOptions, execution: int) -> list[Tie]:
    """The near-ties of one execution of ``inst`` (see :func:`choice_sort`) with value ``value`` (the sort's
    output tuple), closest first, at most :data:`TIES_PER_EXECUTION`."""
    from fusegen.runtime.inputs import leaves

    s = choice_sort(inst)
    if s is None:
        return []
    outs = leaves(value)
    dim = int(s.attrs["dimensions"][0])
    t = s.operands[0].shape.element_type
    keys = _rows(outs[0], dim).astype(np.float64)
    ids = _rows(outs[_payload(s)], dim)
    if keys.shape[-1] < 2:
        return []
    fin = np.isfinite(keys)
    scale = float(np.abs(keys[fin]).max()) if fin.any() else 0.0
    a, b = keys[..., :-1], keys[..., 1:]
    with np.errstate(invalid="ignore"):
        gap = np.abs(a - b)
        budget = tolerance(t)[0] * np.maximum(np.abs(a), np.abs(b)) + options.floor(t) * scale
        near = np.isfinite(gap) & (gap <= budget) & (ids[..., :-1] != ids[..., 1:])
    found = np.argwhere(near)
    if not found.size:
        return []
    with np.errstate(invalid="ignore", divide="ignore"):
        ratio = np.where(budget > 0, gap / np.where(budget > 0, budget, 1.0), 0.0)[near]
    found = found[np.argsort(ratio, kind="stable")[:TIES_PER_EXECUTION]]
    return [Tie(inst.name, execution, tuple(int(x) for x in f[:-1]), int(f[-1]), int(ids[tuple(f)]),
                int(ids[tuple(f[:-1]) + (f[-1] + 1,)]), float(a[tuple(f)]), float(b[tuple(f)]), float(budget[tuple(f)]))
            for f in found]


def record_ties(executor: Any, inst: Instruction, out: Any) -> None:
    """Count the execution of ``inst`` on the kernel path and append its near-ties to ``executor.ties``."""
    sorts = executor.__dict__.setdefault("_tie_sorts", {})
    if id(inst) not in sorts:
        sorts[id(inst)] = choice_sort(inst) is not None
    if not sorts[id(inst)]:
        return
    counts = executor.__dict__.setdefault("_tie_counts", {})
    n = counts.get(inst.name, 0)
    counts[inst.name] = n + 1
    if len(executor.ties) < TIES_PER_RUN:
        executor.ties.extend(find_ties(inst, out, executor.verify, n)[:TIES_PER_RUN - len(executor.ties)])


def _force(inst: Instruction, value: Any, tie: Tie, first_first: bool) -> tuple[Any, bool]:
    """``value`` (the sort's output) with ``tie``'s two elements in the order asked for; True when swapped."""
    s = choice_sort(inst)
    dim = int(s.attrs["dimensions"][0])
    outs = list(value) if isinstance(value, tuple) else [value]
    ids = _rows(outs[_payload(s)], dim)[tie.row]
    pa, pb = np.flatnonzero(ids == tie.first), np.flatnonzero(ids == tie.second)
    if not (pa.size and pb.size) or (pa[0] < pb[0]) == first_first:
        return value, False
    swapped = []
    for o in outs:
        o = np.array(o)
        row = _rows(o, dim)[tie.row]  # a view into the copy
        row[[pa[0], pb[0]]] = row[[pb[0], pa[0]]]
        swapped.append(o)
    return (tuple(swapped) if isinstance(value, tuple) else swapped[0]), True


def rerun(module: Module, args: list[Any], ties: list[Tie], flipped: Tie | None = None,
          budget: Any = None) -> tuple[list[np.ndarray], list[Tie]]:
    """The module's reference run with every tie of ``ties`` in the kernel path's order and ``flipped`` (one
    of them) in the other order; returns its output leaves and the ties whose order it had to change.

    Raises:
        what the reference evaluator raises; ResourceLimitError from ``budget``
        (a :class:`~fusegen.runtime.limits.Budget`).
    """
    from fusegen.evaluator.evaluator import _coerce_arg, evaluate_instruction
    from fusegen.runtime.executor import interpret
    from fusegen.runtime.inputs import leaves

    at: dict[tuple[str, int], list[Tie]] = {}
    for t in ties:
        at.setdefault((t.instruction, t.execution), []).append(t)
    counts: dict[str, int] = {}
    changed: list[Tie] = []
    names = {t.instruction for t in ties}

    def apply(inst: Instruction, ops: list[Any]) -> Any:
        v = evaluate_instruction(inst, ops)
        if inst.name in names and choice_sort(inst) is not None:
            n = counts.get(inst.name, 0)
            counts[inst.name] = n + 1
            for t in at.get((inst.name, n), ()):
                v, swapped = _force(inst, v, t, t != flipped)
                if swapped:
                    changed.append(t)
        return v

    params = module.entry.parameters
    out = interpret(module.entry, [_coerce_arg(p, a, module.filename) for p, a in zip(params, args)], apply, budget)
    return [np.asarray(x) for x in leaves(out)], changed


def describe(ties: list[Tie]) -> str:
    """``ties`` for a reason: the first three described, then how many more."""
    more = f" and {len(ties) - 3} more" if len(ties) > 3 else ""
    return "; ".join(t.describe() for t in ties[:3]) + more
