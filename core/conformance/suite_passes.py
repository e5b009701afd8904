"""The conformance checks of a plugin's HLO passes (collected with :mod:`fusegen.conformance.suite`).

For every pass the plugin registers, over every corpus module the pass changes
(:func:`fusegen.conformance.pass_corpus.modules_changed_by`): the rewritten module verifies, keeps its entry
signature and evaluates to the same outputs on seeded inputs within the pass's declared ``error_budget``
(:mod:`fusegen.passes.pass_checks`, the checks ``fusegen opt`` / ``run`` make, all of them on).
"""

from __future__ import annotations

from typing import Any

import pytest

from fusegen.conformance.checks import CheckFailed


def _need(st: Any, case: Any, what: str) -> None:
    if case is None:
        pytest.skip(st.skip_reasons.get(what, f"nothing to check: {what}"))


def test_pass_declared(st: Any, case: Any) -> None:
    """A pass has a name, a callable ``run``, a non-negative float ``error_budget`` and typed options."""
    _need(st, case, "passes")
    from fusegen.config.options import ConfigOption

    p = case
    where = f"plugin {st.target.name!r}: pass {p.name!r}"
    if not (isinstance(p.name, str) and p.name and callable(p.run)):
        raise CheckFailed("pass-declared", f"{where} needs a name and a callable run(module, options)")
    if not isinstance(p.error_budget, float) or p.error_budget < 0:
        raise CheckFailed("pass-declared", f"{where}: error_budget={p.error_budget!r} is not a non-negative float")
    bad = [o for o in p.options if not isinstance(o, ConfigOption)]
    if bad:
        raise CheckFailed("pass-declared", f"{where}: options {bad!r} are not ConfigOption")


def test_pass_rewrites_corpus(st: Any, case: Any) -> None:
    """On a corpus module the pass changes: it runs, the result verifies (shapes, operand types, layouts),
    keeps the entry signature, and gives the same outputs on seeded inputs within its ``error_budget``."""
    _need(st, case, "pass-modules")
    from fusegen.conformance.pass_corpus import load_module, run_pass
    from fusegen.hlo.module_verifier import entry_signature
    from fusegen.passes import pass_checks

    p, cm = case
    t = st.target
    on = f"{cm.path.name}" + (f" (module {cm.module_index})" if cm.module_index else "")
    module = load_module(cm.path, cm.module_index)
    signature = entry_signature(module)
    try:
        inputs, before = pass_checks.seeded_outputs(module)
    except Exception as e:
        pytest.skip(f"{on}: the module before the pass does not evaluate ({type(e).__name__}: {e}); nothing to "
                    f"compare the rewrite with")
    try:
        run_pass(t, p, module, st.device)
    except Exception as e:
        raise CheckFailed("pass-runs", f"plugin {t.name!r}: {pass_checks.pass_label(p, t.pm)} raised on {on}: "
                                       f"{type(e).__name__}: {e}") from e
    try:
        pass_checks.check_after_pass(module, p, signature, t.pm)
        pass_checks.check_values(p, t.pm, before, module, inputs)
    except pass_checks.PassCheckError as e:
        raise CheckFailed(e.check, f"{e} (on {on})") from None
