"""Near-ties at discrete choices: a sort (top-k, argsort) or an argmax that turns on keys closer than their budget.

A mixture-of-experts router picks each token's top-k experts by sorting their probabilities. Two
probabilities one bf16 ulp apart are a near-tie: a kernel, the reference evaluator, the f64 oracle and
XLA:CPU (``--expected``) may each round them the other way, pick the other expert, and every value
downstream of that token differs by far more than any rounding: a false mismatch. The verdict tells such a
flip from a bug in three steps:

1. **Find the near-ties** on the kernel path (:func:`record_ties`, per execution of a ``sort`` with an
   integer payload, the element ids, whose keys are its first operand, or of an argmax / argmin, a
   ``reduce`` of floating keys and integer ids; top-level or the root of a fusion): adjacent sorted
   positions, or the chosen key and the closest other one of its row, whose keys differ by no more than
   the pair's own budget, ``(rtol(t) + floor(t)) * max(|a|, |b|)`` (the per-fusion tolerances of
   :mod:`fusegen.verify.budget` for the keys' type ``t``), and only where the keys are computed: keys that are
   entry parameters or constants moved without arithmetic are the same for every oracle
   (:func:`exact_operand`).
2. **Re-run the reference downstream with the other choice** (:func:`rerun`): the module's reference run
   again, where at each such sort execution the two tied elements are put in the kernels' order (the chain
   the kernels took), and for one tie at a time in the other order (the chain another oracle may have
   taken). A swap moves every output of the sort at the two positions together, so each element keeps its
   own key and payload; an argmax takes the other id with its own key.
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
from fusegen.config.verify_options import VerifyOptions

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


def choice_reduce(inst: Instruction) -> Instruction | None:
    """The argmax / argmin ``reduce`` whose value ``inst``'s is (itself or its fusion's root): two inputs, floating
    keys and integer ids, reduced together to ``(key, id)``; else ``None``."""
    r = inst.fused_computation.root if inst.opcode == "fusion" else inst
    if r.opcode != "reduce" or len(r.operands) != 4:
        return None
    t = [o.shape.element_type for o in r.operands[:2]]
    ops = {i.opcode for i in r.attrs["to_apply"].instructions} if r.attrs.get("to_apply") is not None else set()
    # a choice selects by a comparison; a combiner that adds or multiplies (a sum and a count) chooses nothing
    chooses = {"compare", "select"} <= ops and not ops & {"add", "multiply", "subtract", "divide"}
    return r if chooses and dtypes.is_floating(t[0]) and dtypes.is_integral(t[1]) else None


def _reduce_inputs(inst: Instruction, red: Instruction, ops: list[Any]) -> tuple[np.ndarray, np.ndarray]:
    """The keys and ids an argmax ``red`` reduces, as arrays with the reduced dimensions last and flattened
    (``inst``: ``red`` or its fusion, on operands ``ops``; inside a fusion they are evaluated from them)."""
    from fusegen.evaluator.evaluator import evaluate_instruction

    vals: dict[int, Any] = {}

    def value(x: Instruction) -> Any:
        stack = [x]
        while stack:
            i = stack[-1]
            if id(i) in vals:
                stack.pop()
            elif i.opcode == "parameter":
                vals[id(i)] = ops[i.parameter_number]
            elif all(id(o) in vals for o in i.operands):
                vals[id(i)] = evaluate_instruction(i, [vals[id(o)] for o in i.operands])
            else:
                stack.extend(o for o in i.operands if id(o) not in vals)
        return vals[id(x)]

    pair = ops[:2] if red is inst else [value(o) for o in red.operands[:2]]
    dims = sorted(int(d) for d in red.attrs.get("dimensions", ()))
    out = [np.moveaxis(np.asarray(a), dims, range(-len(dims), 0)) for a in pair]
    return tuple(a.reshape(a.shape[:a.ndim - len(dims)] + (-1,)) for a in out)


def _budget(t: str, a: np.ndarray, b: np.ndarray, options: VerifyOptions) -> np.ndarray:
    """The two keys' own budget, ``(rtol(t) + floor(t)) * max(|a|, |b|)``: relative to the pair, never to the
    rest of the row or array (one large key elsewhere must not make every pair a near-tie)."""
    with np.errstate(invalid="ignore"):
        return (tolerance(t)[0] + options.floor(t)) * np.maximum(np.abs(a), np.abs(b))


_PASS = frozenset({"bitcast", "copy", "reshape", "transpose", "broadcast", "slice"})


def exact_operand(inst: Instruction, x: Instruction) -> bool:
    """Whether ``x`` (an operand of a sort or compare inside ``inst``, a fusion, or at ``inst``'s own level)
    is an entry parameter or a constant moved around without arithmetic: every oracle then sees the same
    values, so their order cannot flip and no tie is a near-tie."""
    seen = 0
    while seen < 64:
        seen += 1
        while x.opcode in _PASS and x.operands:
            x = x.operands[0]
        if x.opcode in ("constant", "iota"):
            return True
        if x.opcode != "parameter" or x.parent is None:
            return False
        if inst is not None and inst.opcode == "fusion" and x.parent is inst.attrs.get("calls"):
            x, inst = inst.operands[x.parameter_number], None  # the fusion operand, in the caller
            continue
        return bool(x.parent.is_entry)
    return False


def _argmax_ties(inst: Instruction, red: Instruction, value: Any, ops: list[Any], options: VerifyOptions,
                 execution: int) -> list[Tie]:
    """Rows of an argmax whose chosen key has another within its budget (the closest such one)."""
    keys, ids = _reduce_inputs(inst, red, ops)
    keys = keys.astype(np.float64)
    chosen = np.asarray(value[1])[..., None]
    at = ids == chosen
    if keys.shape[-1] < 2 or not at.any(axis=-1).all():
        return []
    pos = np.argmax(at, axis=-1)[..., None]
    best = np.take_along_axis(keys, pos, -1)
    with np.errstate(invalid="ignore"):
        gap = np.where(at, np.inf, np.abs(keys - best))
    gap = np.where(np.isnan(gap), np.inf, gap)
    other = np.argmin(gap, axis=-1)[..., None]
    runner = np.take_along_axis(keys, other, -1)
    g = np.take_along_axis(gap, other, -1)[..., 0]
    budget = _budget(red.operands[0].shape.element_type, best, runner, options)[..., 0]
    near = np.isfinite(g) & (g <= budget)
    order = np.argsort(np.where(near, g / np.where(budget > 0, budget, 1.0), np.inf).reshape(-1), kind="stable")
    found = [np.unravel_index(int(f), near.shape) for f in order[:TIES_PER_EXECUTION] if near.reshape(-1)[f]]
    return [Tie(inst.name, execution, tuple(int(x) for x in f), int(pos[f][0]), int(chosen[f][0]),
                int(np.take_along_axis(ids, other, -1)[f][0]), float(best[f][0]), float(runner[f][0]), float(budget[f]))
            for f in found]


def find_ties(inst: Instruction, value: Any, options: VerifyOptions, execution: int,
              ops: list[Any] | None = None) -> list[Tie]:
    """The near-ties of one execution of ``inst`` (see :func:`choice_sort` and :func:`choice_reduce`) with value
    ``value`` (the sort's output tuple, or the argmax's ``(key, id)`` on operands ``ops``), closest first, at
    most :data:`TIES_PER_EXECUTION`. For an argmax, ``position`` is the chosen id's place in its row."""
    from fusegen.runtime.inputs import leaves

    s = choice_sort(inst)
    if s is None:
        red = choice_reduce(inst) if ops is not None else None
        if red is None or exact_operand(inst, red.operands[0]):
            return []
        return _argmax_ties(inst, red, value, ops, options, execution)
    if exact_operand(inst, s.operands[0]):
        return []
    outs = leaves(value)
    dim = int(s.attrs["dimensions"][0])
    t = s.operands[0].shape.element_type
    keys = _rows(outs[0], dim).astype(np.float64)
    ids = _rows(outs[_payload(s)], dim)
    if keys.shape[-1] < 2:
        return []
    a, b = keys[..., :-1], keys[..., 1:]
    with np.errstate(invalid="ignore"):
        gap = np.abs(a - b)
        budget = _budget(t, a, b, options)
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


def is_choice(inst: Instruction) -> bool:
    """Whether ``inst`` is a sort or argmax the tie rule looks at (:func:`choice_sort`, :func:`choice_reduce`)."""
    return choice_sort(inst) is not None or choice_reduce(inst) is not None


def record_ties(recorder: Any, inst: Instruction, out: Any, ops: list[Any]) -> None:
    """Count the execution of ``inst`` on the kernel path and append its near-ties to ``recorder.ties`` (the
    run's :class:`~fusegen.verify.recorder.RunRecorder`)."""
    sorts = recorder.is_choice
    if id(inst) not in sorts:
        sorts[id(inst)] = (inst, is_choice(inst))  # the instruction held: its id stays unique
    if not sorts[id(inst)][1]:
        return
    counts = recorder.tie_counts
    n = counts.get(inst.name, 0)
    counts[inst.name] = n + 1
    if len(recorder.ties) < TIES_PER_RUN:
        try:
            found = find_ties(inst, out, recorder.verify, n, ops)
        except Exception:  # an argmax's keys the evaluator cannot recompute: no ties to offer, nothing else
            found = []
        recorder.ties.extend(found[:TIES_PER_RUN - len(recorder.ties)])


def _force(inst: Instruction, value: Any, tie: Tie, first_first: bool, ops: list[Any]) -> tuple[Any, bool]:
    """``value`` (the sort's output) with ``tie``'s two elements in the order asked for (an argmax's: the id
    asked for, with its key, ``first`` or ``second``); True when changed."""
    s = choice_sort(inst)
    if s is None:
        red = choice_reduce(inst)
        keys, ids = (a[tie.row] for a in _reduce_inputs(inst, red, ops))
        want = tie.first if first_first else tie.second
        at = np.flatnonzero(ids == want)
        key, idx = (np.array(x) for x in value[:2])
        if not at.size or idx[tie.row] == want:
            return value, False
        key[tie.row], idx[tie.row] = keys[at[0]], want
        return (key, idx) + tuple(value[2:]), True
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


def rerun(module: Module, args: list[Any], ties: list[Any], flipped: Any = None,
          budget: Any = None) -> tuple[list[np.ndarray], list[Any]]:
    """The module's reference run with every tie of ``ties`` in the kernel path's order and ``flipped`` (one
    of them) in the other order; returns its output leaves and the ties whose order it had to change.
    ``ties`` may hold :class:`fusegen.verify.compare_ties.CompareTie` too: those compares' elements take the
    kernel chain's outcome (:func:`fusegen.verify.compare_ties.evaluate_forced`).

    Raises:
        what the reference evaluator raises; ResourceLimitError from ``budget``
        (a :class:`~fusegen.runtime.limits.Budget`).
    """
    from fusegen.evaluator.evaluator import _coerce_arg, evaluate_instruction
    from fusegen.runtime.executor import interpret
    from fusegen.runtime.inputs import leaves

    from fusegen.verify.compare_ties import CompareTie, compares, evaluate_forced

    at: dict[tuple[str, int], list[Tie]] = {}
    cat: dict[tuple[str, int], list[CompareTie]] = {}
    for t in ties:
        (cat if isinstance(t, CompareTie) else at).setdefault((t.instruction, t.execution), []).append(t)
    counts: dict[str, int] = {}
    ccounts: dict[str, int] = {}
    changed: list[Any] = []
    names = {t.instruction for t in ties if not isinstance(t, CompareTie)}
    cnames = {t.instruction for t in ties if isinstance(t, CompareTie)}

    def apply(inst: Instruction, ops: list[Any]) -> Any:
        if inst.name in cnames and compares(inst):  # executions counted as the kernel path counts them
            n = ccounts.get(inst.name, 0)
            ccounts[inst.name] = n + 1
            v = evaluate_forced(inst, ops, cat.get((inst.name, n), []), flipped, changed)
        else:
            v = evaluate_instruction(inst, ops)
        if inst.name in names and is_choice(inst):
            n = counts.get(inst.name, 0)
            counts[inst.name] = n + 1
            for t in at.get((inst.name, n), ()):
                v, swapped = _force(inst, v, t, t != flipped, ops)
                if swapped:
                    changed.append(t)
        return v

    params = module.entry.parameters
    out = interpret(module.entry, [_coerce_arg(p, a, module.filename) for p, a in zip(params, args)], apply, budget)
    return [np.asarray(x) for x in leaves(out)], changed


def rerun_rounded(module: Module, args: list[Any], rounded: Any, budget: Any = None,
                  at: str = "thresholds") -> list[np.ndarray] | None:
    """The module's reference run with values passed through ``rounded`` where XLA:GPU may have dropped a bf16
    rounding the expected answer's program kept: ``at="thresholds"``, the computed operands of every floating
    compare and remainder (:func:`fusegen.verify.compare_ties.evaluate_rounded`); ``at="converts"``, the
    operand of every convert between f16/f32/f64 (:func:`fusegen.verify.compare_ties.evaluate_rounded_converts`).
    Its output leaves, or ``None`` when the module has no such instruction.

    Raises:
        what the reference evaluator raises; ResourceLimitError from ``budget``.
    """
    from fusegen.evaluator.evaluator import _coerce_arg, evaluate_instruction
    from fusegen.runtime.executor import interpret
    from fusegen.runtime.inputs import leaves

    from fusegen.verify.compare_ties import compares, converts, evaluate_rounded, evaluate_rounded_converts

    find, evaluate = {"thresholds": (compares, evaluate_rounded),
                      "converts": (converts, evaluate_rounded_converts)}[at]
    seen = [False]

    def apply(inst: Instruction, ops: list[Any]) -> Any:
        if find(inst):
            seen[0] = True
            return evaluate(inst, ops, rounded)
        return evaluate_instruction(inst, ops)

    params = module.entry.parameters
    out = interpret(module.entry, [_coerce_arg(p, a, module.filename) for p, a in zip(params, args)], apply, budget)
    return [np.asarray(x) for x in leaves(out)] if seen[0] else None


def describe(ties: list[Tie]) -> str:
    """``ties`` for a reason: the first three described, then how many more."""
    more = f" and {len(ties) - 3} more" if len(ties) > 3 else ""
    return "; ".join(t.describe() for t in ties[:3]) + more
