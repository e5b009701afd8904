"""Mutation check of the verdict: plant the kernel bugs real codegen has into generated kernels and count
how many ``fusegen run``'s verdict catches (issue 9, part 5).

Mutation kinds, each a source rewrite of a generated Triton kernel at one site:

``off_by_one``        a load reads the previous element (``ptr + off`` -> ``ptr + max(off - 1, 0)``)
``dropped_mask``      a mask loses its last bound check (``mask = ok & (R < NR)`` -> ``mask = ok``), a load
                      loses its ``mask=`` / ``other=``, or a ``tl.where(mask, x, identity)`` keeps ``x``
``wrong_accumulator`` a reduction / dot result is rounded through bf16 (a bf16 accumulator)
``swapped_operand``   ``a - b`` / ``a / b`` computes ``b - a`` / ``b / a``
``missed_clamp``      a value ``tl.minimum`` / ``tl.maximum`` / ``tl.clamp`` is dropped (its first operand kept;
                      index clamps against a bound are left alone: a mask covers their lanes)
``lost_nan``          XLA's NaN-propagating min/max becomes Triton's NaN-dropping one (run on inputs with NaNs)

The fusion's kernels run on the operands it gets in a real run of the module; a mutant is *caught* when its
kernel fails or the verdict puts the fusion out of its error budget (which makes the module a mismatch,
exit 1), *missed* when the verdict says ok, and *not a bug* when its output is bitwise the unmutated
kernel's (the inputs never reach the changed code: an index clamp on in-range indices, a mask on a shape
that fills its tiles) or no further from the fusion's f64 evaluation than the unmutated kernel's (an
equivalent mutant, e.g. softmax's max rounded: the shift cancels), which no verdict can or should flag;
the score is caught / (caught + missed).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Iterator

import attrs
import numpy as np

from fusegen.hlo.ir import Instruction, Module
from fusegen.verify.budget import judge_fusion
from fusegen.config.verify_options import VerifyOptions

KINDS = ("off_by_one", "dropped_mask", "wrong_accumulator", "swapped_operand", "missed_clamp", "lost_nan")


def _call_args(src: str, start: int) -> tuple[int, list[tuple[int, int]]] | None:
    """For a call whose ``(`` is at ``start``: (index after ``)``, [(begin, end) of each top-level argument])."""
    depth, args, begin = 0, [], start + 1
    for i in range(start, len(src)):
        ch = src[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                args.append((begin, i))
                return i + 1, args
        elif ch == "," and depth == 1:
            args.append((begin, i))
            begin = i + 1
    return None


def _calls(src: str, name: str) -> Iterator[tuple[int, int, list[str]]]:
    """(start, end, argument texts) of every ``name(...)`` call in ``src``."""
    for m in re.finditer(re.escape(name) + r"\(", src):
        got = _call_args(src, m.end() - 1)
        if got is not None:
            end, spans = got
            yield m.start(), end, [src[a:b].strip() for a, b in spans]


def _off_by_one(src: str) -> Iterator[str]:
    for m in re.finditer(r"tl\.load\((\w+) \+ (\w+)", src):
        yield src[:m.start()] + f"tl.load({m.group(1)} + tl.maximum({m.group(2)} - 1, 0)" + src[m.end():]


def _dropped_mask(src: str) -> Iterator[str]:
    # a mask built without its last bound check (``mask = okab & (R < NR)`` -> ``mask = okab``)
    for m in re.finditer(r"^(\s*(?:\w*mask\w*|valid\w*) = )(.+) & (\([^()]*\))$", src, re.M):
        yield src[:m.start(2)] + m.group(2) + src[m.end(3):]
    for s, e, args in _calls(src, "tl.where"):
        if len(args) == 3 and re.search(r"\b(valid|mask)\w*", args[0]) and "!=" not in args[0]:
            yield src[:s] + f"({args[1]})" + src[e:]
    for s, e, args in _calls(src, "tl.load"):  # masked-off lanes read the (clamped) element, not ``other``
        kept = [a for a in args if not a.startswith(("mask=", "other="))]
        if len(kept) < len(args):
            yield src[:s] + f"tl.load({', '.join(kept)})" + src[e:]


def _wrong_accumulator(src: str) -> Iterator[str]:
    for m in re.finditer(r"^(\s*\w+ = )(tl\.(?:reduce|dot|sum)\(.*)$", src, re.M):
        got = _call_args(src, src.index("(", m.start(2)))
        if got is None or got[0] != m.end(2):
            continue
        yield src[:m.start(2)] + f"({m.group(2)}).to(tl.bfloat16).to(tl.float32)" + src[m.end(2):]


def _swapped_operand(src: str) -> Iterator[str]:
    for m in re.finditer(r"^(\s*\w+ = )(\w+) ([-/]) (\w+)$", src, re.M):
        if m.group(2) != m.group(4):
            yield src[:m.start(2)] + f"{m.group(4)} {m.group(3)} {m.group(2)}" + src[m.end(4):]


def _missed_clamp(src: str) -> Iterator[str]:
    # value clamps only: an index clamp (``tl.minimum(R, NR - 1)``) guards lanes a mask already drops
    for name in ("tl.minimum", "tl.maximum", "tl.clamp"):
        for s, e, args in _calls(src, name):
            if len(args) >= 2 and not re.fullmatch(r"\d+|.*- 1|\w+ - \w+", args[1]):
                yield src[:s] + f"({args[0]})" + src[e:]


# The NaN-propagating form is one ``max.NaN`` / ``min.NaN`` (``propagate_nan=ALL``); the older generator's
# ``where(x != x, x, ...)`` spelling is matched too.
_NAN_MINMAX = re.compile(r"tl\.where\((\w+) != \1, \1, tl\.where\((\w+) != \2, \2, (tl\.(?:maximum|minimum)\(\1, \2\))\)\)")
_PROPAGATE_NAN = re.compile(r",\s*propagate_nan=tl\.PropagateNan\.ALL")


def _lost_nan(src: str) -> Iterator[str]:
    for m in _NAN_MINMAX.finditer(src):
        yield src[:m.start()] + m.group(3) + src[m.end():]
    for m in _PROPAGATE_NAN.finditer(src):
        yield src[:m.start()] + src[m.end():]


MUTATORS: dict[str, Callable[[str], Iterator[str]]] = {
    "off_by_one": _off_by_one, "dropped_mask": _dropped_mask, "wrong_accumulator": _wrong_accumulator,
    "swapped_operand": _swapped_operand, "missed_clamp": _missed_clamp, "lost_nan": _lost_nan,
}


def _kernel_body(kernel) -> str:
    """The source the interpreter runs for ``kernel`` (its interpret variant when it has one)."""
    return (kernel.interpret_variant or kernel).source


def plant(emitted, kind: str, site: int):
    """``emitted`` with the ``site``-th ``kind`` mutation planted into the kernel the interpreter runs, or None.

    Sites are counted over the kernels in launch order. Only the generated code after the imports changes.
    """
    n = 0
    for ki, k in enumerate(emitted.kernels):
        run = k.interpret_variant or k
        cut = run.source.find("\n@")
        head, body = (run.source[:cut], run.source[cut:]) if cut >= 0 else ("", run.source)
        for mutated in MUTATORS[kind](body):
            if n == site:
                new_run = attrs.evolve(run, source=head + mutated)
                new_k = attrs.evolve(k, interpret_variant=new_run) if k.interpret_variant is not None else new_run
                kernels = list(emitted.kernels)
                kernels[ki] = new_k
                return attrs.evolve(emitted, kernels=tuple(kernels))
            n += 1
    return None


@attrs.define
class Mutant:
    """One planted bug and what the verdict said. ``outcome``: caught | missed | not-exercised."""

    module: str
    fusion: str
    kind: str
    site: int
    outcome: str
    ratio: float | None = None
    note: str = ""


def _with_nans(ops: list[Any]) -> list[Any]:
    """Operands with a NaN at a few positions of every floating array (for ``lost_nan``)."""
    out = []
    for v in ops:
        a = np.asarray(v) if not isinstance(v, tuple) else None
        if a is not None and a.dtype.kind == "f" or (a is not None and a.dtype.name == "bfloat16"):
            a = a.copy()
            flat = a.reshape(-1)
            for i in range(0, flat.size, max(1, flat.size // 5)):
                flat[i] = np.nan
            out.append(a)
        else:
            out.append(v)
    return out


def _ratio(inst: Instruction, ops: list[Any], out: list, ref: Any, options: VerifyOptions) -> float:
    worst = judge_fusion(inst, ops, out, ref, options)
    return worst[0].ratio if worst is not None else 0.0


def _as_accurate(inst: Instruction, ops: list[Any], out: list, base: list, ref: Any, factor: float) -> bool:
    """Whether ``out`` is within ``factor`` x the unmutated kernel's or the reference's distance to the fusion's
    f64 evaluation, on every leaf (the conditioning test of the module verdict, applied to one fusion)."""
    from fusegen.runtime.compare import abs_error
    from fusegen.runtime.inputs import leaves
    from fusegen.evaluator.promote import OracleUnavailable, evaluate_fusion_promoted

    try:
        exact = leaves(evaluate_fusion_promoted(inst, ops))
    except OracleUnavailable:
        return False
    for a, b, x, r in zip(out, base, exact, leaves(ref)):
        a, b, x, r = np.asarray(a), np.asarray(b), np.asarray(x), np.asarray(r)
        if a.dtype.kind in "biu" or a.dtype == np.bool_:
            if not np.array_equal(a, b):
                return False
            continue
        ea, eb, er = (abs_error(v, x)[0].max(initial=0.0) for v in (a, b, r))
        if not ea <= factor * max(eb, er):
            return False
    return True


def check_module(module: Module, args: list[Any], kinds=KINDS, max_sites: int = 2,
                 options: VerifyOptions | None = None, max_fusions: int | None = None,
                 ) -> tuple[list[tuple[str, float]], list[Mutant]]:
    """Plant every kind of bug at up to ``max_sites`` sites of each kernel fusion of ``module``.

    Returns:
        ``(controls, mutants)``: ``controls`` is ``(fusion, error/budget)`` of each unmutated kernel on
        its real operands (a value > 1 is a false alarm); ``mutants`` one :class:`Mutant` per planted bug.
    """
    from fusegen.codegen import triton_runtime
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen.runtime.executor import Executor

    options = options or VerifyOptions()
    captured: dict[str, tuple[Instruction, list[Any]]] = {}

    class Capturing(Executor):
        def _run_fusion(self, inst, ops):
            captured.setdefault(inst.name, (inst, list(ops)))
            return super()._run_fusion(inst, ops)

    ex = Capturing(module, compile_kernels=False, verify=options)
    ex.run(args)
    controls, mutants = [], []
    fusions = [(n, v) for n, v in captured.items() if ex._emitted.get(id(v[0]), (None,))[0] is not None
               and ex._emitted[id(v[0])][0].kernels]
    for name, (inst, ops) in fusions[:max_fusions]:
        emitted = ex._emitted[id(inst)][0]
        cache: dict[bool, tuple[list, Any]] = {}

        def baseline(nans: bool):
            if nans not in cache:
                o = _with_nans(ops) if nans else ops
                cache[nans] = (o, triton_runtime.run_fusion(emitted, o, inst), evaluate_instruction(inst, o))
            return cache[nans]

        o, base, ref = baseline(False)
        controls.append((name, _ratio(inst, o, base, ref, options)))
        for kind in kinds:
            for site in range(max_sites):
                bad = plant(emitted, kind, site)
                if bad is None:
                    break
                o, base, ref = baseline(kind == "lost_nan")
                try:
                    out = triton_runtime.run_fusion(bad, o, inst)
                except Exception as e:  # a kernel that fails is a failed fusion: status error, exit 1
                    mutants.append(Mutant(module.name, name, kind, site, "caught", None,
                                          f"kernel failed: {type(e).__name__}"))
                    continue
                same = all(np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True) for a, b in zip(out, base))
                if same:
                    mutants.append(Mutant(module.name, name, kind, site, "not-exercised"))
                    continue
                r = _ratio(inst, o, out, ref, options)
                if r <= 1.0 and _as_accurate(inst, o, out, base, ref, options.rtol):
                    mutants.append(Mutant(module.name, name, kind, site, "equivalent", r))
                    continue
                mutants.append(Mutant(module.name, name, kind, site, "caught" if r > 1.0 else "missed", r))
    return controls, mutants


def score(mutants: list[Mutant]) -> tuple[int, int, float]:
    """``(caught, exercised, caught / exercised)`` (1.0 when nothing was exercised)."""
    caught = sum(m.outcome == "caught" for m in mutants)
    exercised = sum(m.outcome in ("caught", "missed") for m in mutants)
    return caught, exercised, caught / exercised if exercised else 1.0


def run_check(modules, kinds=KINDS, max_sites: int = 2, max_fusions: int | None = None, seed: int = 0,
              options: VerifyOptions | None = None, inputs_for=None) -> tuple[list[tuple[str, str, float]], list[Mutant]]:
    """:func:`check_module` over ``modules``: ``(source, module)`` pairs, each module prepared as a run prepares it
    (``((p, m) for p in paths for m in fusegen.load_all(str(p)))``: fusegen's default preparation; a generator
    keeps one file's modules in memory at a time).

    ``inputs_for(source, module)`` may return the arguments (e.g. a real model's weights); default seeded random.
    Returns ``([(module, fusion, error/budget) of each unmutated kernel], mutants)``.
    """
    from fusegen.runtime.inputs import make_inputs

    controls, mutants = [], []
    for p, m in modules:
        args = (inputs_for(p, m) if inputs_for else None) or make_inputs(m, seed)
        c, ms = check_module(m, args, kinds, max_sites, options, max_fusions)
        controls.extend((m.name, f, r) for f, r in c)
        mutants.extend(ms)
    return controls, mutants
