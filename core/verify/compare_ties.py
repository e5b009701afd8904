"""Near-ties at compares: a ``compare`` (a ``jnp.where`` threshold, a mask) whose operands are within their budget.

A floating ``remainder`` is a threshold too: ``fmod(x, d)`` drops by ``|d|`` where ``x`` reaches a non-zero
multiple of ``d``, so a dividend within its budget of one is recorded the same way (direction ``REM``, the
outcome whether the result wrapped to near 0), and the re-run with it flipped moves the result by ``|d|``.

``jnp.where(x > t, a, b)`` with ``x`` one ulp from ``t`` is a choice like a top-k's (:mod:`fusegen.verify.ties`):
the kernels' chain, the reference evaluator and XLA:CPU (``--expected``) may round ``x`` either side of
``t`` and take the other branch, and every value downstream of that element differs by far more than any
rounding. The same three steps tell such a flip from a bug:

1. **Find the near-ties** on the kernel path (:func:`reference_recording`): each execution of a fusion whose
   computation has a floating ``compare`` (its own instructions, not called computations) has its reference
   evaluated on its kernel-path operands, as the executor does anyway, instruction by instruction; each
   element of such a compare whose operands differ by no more than their budget there,
   ``rtol(t) * max(|a|, |b|) + floor(t) * max|a, b|`` (ties.py's rule, for the operands' type ``t``), is a
   :class:`CompareTie` with the outcome the reference gave on those operands. A top-level compare is
   recorded the same way on its operands.
2. **Re-run the reference with that outcome** (:func:`evaluate_forced`, called by :func:`fusegen.verify.ties.rerun`):
   at each recorded element the compare's value is the kernel chain's outcome (or, for the one flipped, the
   other), only where the re-run's own operands there are within the same budget.
3. **Judge** as :mod:`fusegen.verify.verdict` does for sorts: the reason names the compare (instruction,
   fusion, execution, element, the two operand values, the budget).

The outcome forced is the reference evaluator's on the kernel-path operands, never the kernel's own value:
a kernel whose compare goes the wrong way on the same operands is out of budget at its fusion (the tie rule
then does not run), and a wrong direction in the program moves elements far from any tie as well.
Elements with a gap are kept before exact ties (a value both chains compute exactly rarely flips), closest
first, at most :data:`COMPARES_PER_EXECUTION` per execution and :data:`COMPARES_PER_RUN` per run (a full
run's list gives up its exact ties, earliest first, for later ones with a gap).

No XLA counterpart (XLA's tests compare outputs within an error bound, where a flipped select fails).
"""

from __future__ import annotations

from typing import Any, Callable

import attrs
import numpy as np

from fusegen.hlo import dtypes
from fusegen.hlo.ir import Instruction
from fusegen.config.verify_options import VerifyOptions

#: Compare elements kept per execution and per run (with a gap before exact ties, closest by gap / budget).
COMPARES_PER_EXECUTION = 16
COMPARES_PER_RUN = 256


@attrs.frozen
class CompareTie:
    """One element of a floating ``compare`` whose two operands were within their budget on the kernel path.

    Attributes:
        instruction: the fusion holding the compare (or the top-level compare); ``execution`` its 0-based
            execution.
        compare / direction: the compare instruction's name and direction (``GT``, ``EQ``, ...).
        index: the element's index in the compare's shape.
        lhs / rhs: its two operand values on the kernel path (widened to float); ``budget``: their budget.
        outcome: the compare's value there (the reference evaluator's, on the kernel-path operands); for a
            remainder (``direction`` ``REM``, ``lhs`` the dividend, ``rhs`` the divisor's nearest non-zero
            multiple), whether its result wrapped to near 0.
    """

    instruction: str
    execution: int
    compare: str
    direction: str
    index: tuple[int, ...]
    lhs: float
    rhs: float
    outcome: bool
    budget: float

    @property
    def ratio(self) -> float:
        return abs(self.lhs - self.rhs) / self.budget if self.budget > 0 else 0.0

    def describe(self) -> str:
        where = f" in %{self.instruction}" if self.instruction != self.compare else ""
        ex = f" execution {self.execution}" if self.execution else ""
        if self.direction == "REM":
            return (f"remainder %{self.compare}{where}{ex} at {list(self.index)}: dividend {self.lhs:.9g} is "
                    f"{abs(self.lhs - self.rhs):.3g} from the divisor's multiple {self.rhs:.9g} (budget "
                    f"{self.budget:.3g}), the kernels' chain {'wrapped' if self.outcome else 'did not wrap'}")
        return (f"compare %{self.compare} ({self.direction}){where}{ex} at {list(self.index)}: operands "
                f"{self.lhs:.9g} and {self.rhs:.9g} ({abs(self.lhs - self.rhs):.3g} apart, budget "
                f"{self.budget:.3g}), the kernels' chain took {str(self.outcome).lower()}")

    def to_json(self) -> dict:
        return {"kind": "compare", "instruction": self.instruction, "execution": self.execution,
                "compare": self.compare, "direction": self.direction, "index": list(self.index),
                "operands": [self.lhs, self.rhs], "outcome": self.outcome, "budget": self.budget}


def _float_compare(i: Instruction) -> bool:
    """A floating ``compare``, or a floating ``remainder``: ``fmod(x, d)`` jumps by ``|d|`` where ``x`` crosses
    a non-zero multiple of ``d``, a threshold as a compare's is (recorded with direction ``REM``)."""
    return i.opcode in ("compare", "remainder") and len(i.operands) == 2 and not i.shape.is_tuple and \
        dtypes.is_floating(i.operands[0].shape.element_type)


#: the floating types a convert chain through bf16 can stand between (``SimplifyFPConversions`` shortens
#: f32 -> bf16 -> f16 to f32 -> f16)
_WIDER_THAN_BF16 = frozenset({"f16", "f32", "f64"})


def narrowable_convert(i: Instruction) -> bool:
    """A ``convert`` between two floating types each with more mantissa than bf16 (f16, f32, f64): where XLA:GPU
    shortened a chain ``a -> bf16 -> b`` to ``a -> b`` under ``--xla_allow_excess_precision``
    (``simplify_fp_conversions.cc``), only such a convert is left of it."""
    return (i.opcode == "convert" and len(i.operands) == 1 and not i.shape.is_tuple
            and i.shape.element_type in _WIDER_THAN_BF16 and i.operands[0].shape.element_type in _WIDER_THAN_BF16
            and i.shape.element_type != i.operands[0].shape.element_type)


def _own(inst: Instruction, pick: Callable[[Instruction], bool]) -> list[Instruction]:
    """The instructions ``pick`` selects of ``inst``: itself (top-level) or its fused computation's own."""
    if inst.opcode == "fusion":
        return [i for i in inst.fused_computation.instructions if pick(i)]
    return [inst] if pick(inst) else []


def converts(inst: Instruction) -> list[Instruction]:
    """The :func:`narrowable_convert` instructions of ``inst``: itself (top-level) or its fused computation's own."""
    return _own(inst, narrowable_convert)


def compares(inst: Instruction) -> list[Instruction]:
    """The floating compares (and remainders) whose outcomes :func:`reference_recording` records for ``inst``:
    ``inst`` itself (top-level) or those among its fused computation's own instructions (a fusion)."""
    return _own(inst, _float_compare)


def _threshold(cmp: Instruction, a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The two sides whose order decides ``cmp`` (f64) and where that decision can flip: a compare's operands
    (everywhere); a remainder's dividend and the nearest multiple ``k * d`` of its divisor, where ``k != 0``
    (through ``k = 0`` ``fmod`` is continuous)."""
    if cmp.opcode != "remainder":
        return b, np.ones(a.shape, bool)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        k = np.round(a / b)
        return k * b, np.isfinite(k) & (k != 0)


def _outcome(cmp: Instruction, value: Any, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The side ``cmp`` took, as a bool array: a compare's value; for a remainder, whether it wrapped (its
    result is nearer 0 than ``|d|``: the dividend reached the multiple)."""
    v = np.asarray(value)
    if cmp.opcode != "remainder":
        return v.astype(bool)
    with np.errstate(invalid="ignore"):
        return np.abs(v.astype(np.float64)) < np.abs(b) / 2


def _evaluate(inst: Instruction, ops: list[Any], hook: Callable[[Instruction, list[Any], Any], Any],
              hooked: Callable[[Instruction], bool] = _float_compare) -> Any:
    """``evaluate_instruction(inst, ops)`` with ``hook(i, operands, value)`` giving the value of each
    instruction ``i`` that ``hooked`` selects (each float compare by default; a fusion's computation is
    evaluated instruction by instruction, as the evaluator does)."""
    from fusegen.evaluator import evaluator as ev
    from fusegen.evaluator.control_flow import _bind_operand

    if inst.opcode != "fusion":
        v = ev.evaluate_instruction(inst, ops)
        return hook(inst, ops, v) if hooked(inst) else v
    comp = inst.fused_computation
    params = {p.parameter_number: p for p in comp.parameters}
    args = [(_bind_operand(params[k], v, inst) if k in params else v) for k, v in enumerate(ops)]
    order, last = ev._plan(comp)
    vals: dict[int, Any] = {}
    for k, i in enumerate(order):
        if i.opcode == "parameter":
            v = args[i.parameter_number]
        else:
            got = [vals[id(o)] for o in i.operands]
            v = ev.evaluate_instruction(i, got)
            if hooked(i):
                v = hook(i, got, v)
        vals[id(i)] = v
        for o in i.operands:
            if last.get(id(o)) == k:
                vals.pop(id(o), None)
    return ev._check(inst, vals[id(comp.root)], inst.shape)


def _near(cmp: Instruction, a: Any, b: Any, options: VerifyOptions) -> tuple[np.ndarray, np.ndarray, np.ndarray,
                                                                                np.ndarray]:
    """The operands widened to f64, their budget (ties.py's rule) and where their gap is within it (finite)."""
    from fusegen.verify.ties import _budget

    a, b = (np.asarray(x).astype(np.float64) for x in (a, b))
    b, can = _threshold(cmp, a, b)
    with np.errstate(invalid="ignore"):
        gap = np.abs(a - b)
        budget = _budget(cmp.operands[0].shape.element_type, a, b, options)
    return a, b, budget, can & np.isfinite(gap) & (gap <= budget)


def find_compare_ties(inst: Instruction, cmp: Instruction, a: Any, b: Any, value: Any, options: VerifyOptions,
                      execution: int) -> list[CompareTie]:
    """The elements of ``cmp`` (in ``inst``, on operands ``a``, ``b`` with outcome ``value``) whose operands are
    within their budget: those with a gap first, closest first, at most :data:`COMPARES_PER_EXECUTION`."""
    from fusegen.verify.ties import exact_operand

    if exact_operand(inst, cmp.operands[0]) and exact_operand(inst, cmp.operands[1]):
        return []  # both sides are the same for every oracle: the outcome cannot flip
    d = np.asarray(b).astype(np.float64)
    a, b, budget, near = _near(cmp, a, b, options)
    flat = np.flatnonzero(near)
    if not flat.size:
        return []
    gap = np.abs(a - b).reshape(-1)[flat]
    bud = budget.reshape(-1)[flat]
    key = np.where(gap > 0, gap / np.where(bud > 0, bud, 1.0), 2.0)  # exact ties after any with a gap
    if flat.size > COMPARES_PER_EXECUTION:
        part = np.argpartition(key, COMPARES_PER_EXECUTION - 1)[:COMPARES_PER_EXECUTION]
        flat, key = flat[part], key[part]
    flat = flat[np.argsort(key, kind="stable")]
    out = _outcome(cmp, value, a, d).reshape(-1)
    direction = "REM" if cmp.opcode == "remainder" else str(cmp.attrs.get("direction", "?"))
    return [CompareTie(inst.name, execution, cmp.name, direction,
                       tuple(int(x) for x in np.unravel_index(int(f), a.shape)), float(a.reshape(-1)[f]),
                       float(b.reshape(-1)[f]), bool(out[f]), float(budget.reshape(-1)[f])) for f in flat]


def reference_recording(recorder: Any, inst: Instruction, ops: list[Any],
                        evaluate_instruction: Callable[[Instruction, list[Any]], Any]) -> Any:
    """The reference value of ``inst`` (a fusion, or a top-level compare) on the kernel path's operands ``ops``,
    counting the execution and appending its compares' near-ties to ``recorder.compare_ties`` (the run's
    :class:`~fusegen.verify.recorder.RunRecorder`);
    ``evaluate_instruction`` (the executor's) gives it where nothing is recorded.

    Raises:
        what :func:`fusegen.evaluator.evaluator.evaluate_instruction` raises.
    """
    known = recorder.has_compares
    if id(inst) not in known:
        known[id(inst)] = (inst, bool(compares(inst)))  # the instruction held: its id stays unique
    if not known[id(inst)][1]:
        return evaluate_instruction(inst, ops)
    counts = recorder.compare_counts
    n = counts.get(inst.name, 0)
    counts[inst.name] = n + 1
    found: list[CompareTie] = recorder.compare_ties
    if len(found) >= COMPARES_PER_RUN and all(t.lhs != t.rhs for t in found):
        return evaluate_instruction(inst, ops)

    def hook(cmp: Instruction, got: list[Any], v: Any) -> Any:
        for t in find_compare_ties(inst, cmp, got[0], got[1], v, recorder.verify, n):
            if len(found) < COMPARES_PER_RUN:
                found.append(t)
            elif t.lhs != t.rhs:  # a full run's list gives up an exact tie for one with a gap
                exact = next((k for k, x in enumerate(found) if x.lhs == x.rhs), None)
                if exact is None:
                    break
                del found[exact]
                found.append(t)
        return v

    return _evaluate(inst, ops, hook)


def evaluate_forced(inst: Instruction, ops: list[Any], ties: list[CompareTie], flipped: Any,
                    changed: list) -> Any:
    """``inst``'s reference value on ``ops`` with each of ``ties`` (this execution's) at the kernel chain's
    outcome, ``flipped`` (one of them, or another choice) at the other; each tie whose value it changed is
    appended to ``changed``. An element whose operands here are farther apart than its budget keeps its own
    value (the re-run did not reach that near-tie).

    Raises:
        what :func:`fusegen.evaluator.evaluator.evaluate_instruction` raises.
    """
    by: dict[str, list[CompareTie]] = {}
    for t in ties:
        by.setdefault(t.compare, []).append(t)

    def hook(cmp: Instruction, got: list[Any], v: Any) -> Any:
        mine = by.get(cmp.name)
        if not mine:
            return v
        a, d = (np.asarray(x).astype(np.float64) for x in got)
        b, can = _threshold(cmp, a, d)
        took = _outcome(cmp, v, a, d)
        out = None
        for t in mine:
            if t.index and (len(t.index) != a.ndim or any(i >= n for i, n in zip(t.index, a.shape))):
                continue
            want = t.outcome != (t == flipped)
            ai, bi = float(a[t.index]), float(b[t.index])
            if bool(took[t.index]) == want or not can[t.index] or not abs(ai - bi) <= t.budget:
                continue
            out = np.array(v) if out is None else out
            if cmp.opcode == "remainder":  # the other side of the multiple: |d| nearer 0, or |d| from it
                r, step = float(out[t.index]), abs(float(d[t.index]))
                out[t.index] = r - np.sign(r) * step if want else r + np.sign(ai) * step
            else:
                out[t.index] = want
            changed.append(t)
        return v if out is None else out

    return _evaluate(inst, ops, hook)


def evaluate_rounded(inst: Instruction, ops: list[Any], rounded: Any) -> Any:
    """``inst``'s reference value on ``ops`` with the operands of each floating compare and remainder in it
    (:func:`compares`) passed through ``rounded`` (an array -> array function) first, where an operand is
    computed (not :func:`fusegen.verify.ties.exact_operand`): the thresholds as a program that rounds there
    decides them.

    Raises:
        what :func:`fusegen.evaluator.evaluator.evaluate_instruction` raises.
    """
    from fusegen.evaluator import evaluator as ev
    from fusegen.verify.ties import exact_operand

    def hook(cmp: Instruction, got: list[Any], v: Any) -> Any:
        if all(exact_operand(inst, o) for o in cmp.operands):
            return v
        return ev.evaluate_instruction(cmp, [rounded(np.asarray(g)) for g in got])

    return _evaluate(inst, ops, hook)


def evaluate_rounded_converts(inst: Instruction, ops: list[Any], rounded: Any) -> Any:
    """``inst``'s reference value on ``ops`` with the operand of each :func:`narrowable_convert` in it passed
    through ``rounded`` first: the program with a bf16 step in every convert chain XLA:GPU may have shortened.

    Raises:
        what :func:`fusegen.evaluator.evaluator.evaluate_instruction` raises.
    """
    from fusegen.evaluator import evaluator as ev

    def hook(cvt: Instruction, got: list[Any], v: Any) -> Any:
        return ev.evaluate_instruction(cvt, [rounded(np.asarray(g)) for g in got])

    return _evaluate(inst, ops, hook, narrowable_convert)


def flip_order(ties: list[Any], tried: int) -> list[Any]:
    """The ties a verdict re-runs flipped, in order: the closest ``tried`` of the sorts' and argmaxes'
    (:class:`fusegen.verify.ties.Tie`), then the closest ``tried`` compares', those with a gap before exact
    ties (a causal mask's ``iota >= iota`` diagonal ties exactly on every chain and never flips)."""
    choices = sorted((t for t in ties if not isinstance(t, CompareTie)), key=lambda x: x.ratio)[:tried]
    cmps = sorted((t for t in ties if isinstance(t, CompareTie)), key=lambda x: (x.lhs == x.rhs, x.ratio))
    return choices + cmps[:tried]
