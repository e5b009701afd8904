"""What every pass promises about the module it rewrites, checked after it runs (XLA runs ``HloVerifier``
between the passes of a pipeline: ``HloPassPipeline::RunInvariantCheckers``).

* **valid**: the module verifies (:func:`fusegen.hlo.module_verifier.verify_module`: shapes, operand types,
  layouts, structure);
* **same signature**: the entry computation takes and returns the same shapes, layouts included;
* **same values** (opt-in, ``[pipeline] verify = true``): the reference evaluator gives the same outputs on
  seeded inputs before and after, within the pass's declared :attr:`fusegen.registry.HloPass.error_budget`
  (0: bit for bit; a precision pass declares its own).

A broken promise is a :class:`PassCheckError` naming the pass and its plugin:
``pass 'dot-bf16' (plugin 'dot_bf16' from fusegen-dot-bf16) produced an invalid module: ...``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from fusegen.passes.pass_error import PassError

#: Check names, as the conformance suite reports them.
CHECK_VALID, CHECK_SIGNATURE, CHECK_VALUES = "pass-module-verifies", "pass-keeps-signature", "pass-keeps-values"


class PassCheckError(PassError):
    """A pass broke one of its promises.

    Attributes:
        pass_name: the pass.
        plugin: the plugin registering it.
        check: :data:`CHECK_VALID`, :data:`CHECK_SIGNATURE` or :data:`CHECK_VALUES`.
        detail: what was wrong (the message without the pass's label).
    """

    def __init__(self, label: str, pass_name: str, plugin: str, check: str, verb: str, detail: str):
        self.pass_name, self.plugin, self.check, self.detail = pass_name, plugin, check, detail
        super().__init__(f"{label} {verb}: {detail}")


def pass_label(p: Any, pm: Any = None) -> str:
    """``pass 'NAME' (plugin 'P')``, with ``from DIST`` when the plugin's distribution has another name."""
    dist = ""
    if pm is not None:
        info = pm.infos.get(p.plugin) if p.plugin else None
        d = getattr(info, "distribution", "") or ""
        if d and d not in ("?", "fusegen") and d != p.plugin:
            dist = f" from {d}"
    return f"pass {p.name!r} (plugin {p.plugin!r}{dist})"


def check_after_pass(module: Any, p: Any, signature: Any, pm: Any = None) -> None:
    """Raise :class:`PassCheckError` when ``module`` (just rewritten by pass ``p``) does not verify or its entry
    signature is no longer ``signature`` (:func:`fusegen.hlo.module_verifier.entry_signature` before the pass)."""
    from fusegen.hlo.module_verifier import signature_change, verify_module

    problems = verify_module(module, max_problems=3)
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise PassCheckError(pass_label(p, pm), p.name, p.plugin, CHECK_VALID, "produced an invalid module",
                             problems[0] + more)
    change = signature_change(signature, module)
    if change:
        raise PassCheckError(pass_label(p, pm), p.name, p.plugin, CHECK_SIGNATURE,
                             "changed the module's entry signature", change)


def seeded_outputs(module: Any, seed: int = 0, args: Sequence[Any] | None = None) -> tuple[list[Any], list[np.ndarray]]:
    """``(inputs, output leaves)`` of the reference evaluator on ``module`` with seeded inputs
    (:func:`fusegen.runtime.inputs.make_inputs`; ``args`` when given).

    Raises:
        fusegen.evaluator.common.EvaluationError, UnsupportedOpError, InputError: as the evaluator does.
    """
    from fusegen.evaluator.evaluator import evaluate_module
    from fusegen.runtime.inputs import leaves, make_inputs

    inputs = list(args) if args is not None else make_inputs(module, seed=seed)
    with np.errstate(all="ignore"):
        out = evaluate_module(module, inputs)
    return inputs, [np.asarray(x) for x in leaves(out)]


def output_difference(before: Sequence[np.ndarray], after: Sequence[np.ndarray], budget: float,
                      element_types: Sequence[str] = ()) -> str | None:
    """Why ``after`` is not ``before`` within ``budget`` (one line), else ``None``.

    Per output leaf: the same shape; NaN and infinities at the same places; integer, ``pred`` and (with
    ``budget == 0``) every output bit for bit equal (``-0.0 == 0.0``); otherwise
    ``max |after - before| <= budget * max |before|`` over the finite elements (the scale of the output, so a
    rounding change of a precision pass is measured against the values it rounds).
    """
    if len(before) != len(after):
        return f"{len(after)} outputs, there were {len(before)}"
    for k, (b, a) in enumerate(zip(before, after)):
        et = element_types[k] if k < len(element_types) else str(b.dtype)
        if b.shape != a.shape:
            return f"output {k} has shape {list(a.shape)}, it had {list(b.shape)}"
        if b.size == 0:
            continue
        exact = et.startswith(("s", "u", "pred")) if k < len(element_types) else b.dtype.kind in "iub"
        if exact:
            if not np.array_equal(a, b):
                n = int(np.count_nonzero(a != b))
                return f"output {k} ({et}) differs in {n} of {b.size} elements (integer outputs must be equal)"
            continue
        wide = np.complex128 if b.dtype.kind == "c" or a.dtype.kind == "c" else np.float64
        bw, aw = np.asarray(b, dtype=wide), np.asarray(a, dtype=wide)
        nb, na = np.isnan(bw), np.isnan(aw)
        ib, ia = np.isinf(bw), np.isinf(aw)
        if not np.array_equal(nb, na) or not np.array_equal(ib, ia) or not np.array_equal(bw[ib], aw[ia]):
            n = int(np.count_nonzero((nb != na) | (ib != ia)))
            return f"output {k} ({et}): NaN or infinity at different places ({max(n, 1)} of {b.size} elements)"
        fin = ~(nb | ib)
        diff = np.abs(aw[fin] - bw[fin])
        worst = float(diff.max()) if diff.size else 0.0
        if budget == 0:
            if worst != 0.0:
                n = int(np.count_nonzero(diff))
                return (f"output {k} ({et}) differs in {n} of {b.size} elements, max abs change {worst:.3g} "
                        f"(the pass declares error_budget=0: an exact rewrite)")
            continue
        scale = float(np.abs(bw[fin]).max()) if diff.size else 0.0
        rel = worst / max(scale, np.finfo(np.float64).tiny)
        if rel > budget:
            return (f"output {k} ({et}) changed by {worst:.3g}, {rel:.3g} of its largest value {scale:.3g}; the pass "
                    f"declares error_budget={budget:g}")
    return None


def check_values(p: Any, pm: Any, before: Sequence[np.ndarray], module: Any, inputs: Sequence[Any]) -> list[np.ndarray]:
    """Evaluate the rewritten ``module`` on ``inputs`` and compare with ``before`` (its outputs before pass
    ``p``) within ``p.error_budget``; returns the new outputs.

    Raises:
        PassCheckError: the outputs changed beyond the budget, or the rewritten module cannot be evaluated.
    """
    try:
        _, after = seeded_outputs(module, args=inputs)
    except Exception as e:
        raise PassCheckError(pass_label(p, pm), p.name, p.plugin, CHECK_VALUES,
                             "produced a module the reference evaluator cannot run",
                             f"{type(e).__name__}: {e}") from e
    types = [s.element_type for s in module.entry.root.shape.leaves()] if module.entry.root is not None else []
    diff = output_difference(before, after, float(getattr(p, "error_budget", 0.0) or 0.0), types)
    if diff:
        raise PassCheckError(pass_label(p, pm), p.name, p.plugin, CHECK_VALUES,
                             "changed the module's outputs on seeded inputs", diff)
    return after
