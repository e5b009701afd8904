"""What each conformance test runs on: corpus fusions, corpus instructions, generated kinds.

:func:`build_params` fills the suite's parameter lists for the plugin under test and records, for every
list left empty, why (``_State.skip_reasons``): no capability, no corpus, the device, or what the corpus
limits (``--fusegen-max-elements``, ``--fusegen-max-codegen-elements``) left out. Items over a limit are
never dropped silently: the count is in the skip reason and in the report's ``corpus`` section.
"""

from __future__ import annotations

from typing import Any

import pytest

NO_CORPUS = ("no corpus: the shared corpus is not beside the fusegen checkout (../shared/corpus) and "
             "FUSEGEN_CORPUS names no directory")


def _with(base: str, dropped: Any) -> str:
    more = dropped.reason()
    return f"{base}; {more}" if more else base


def build_params(st: Any) -> dict[str, list]:
    """Test name -> ``pytest.param`` list for ``st`` (the session's ``_State``); fills ``st.skip_reasons`` and
    ``st.dropped``."""
    from fusegen.conformance.corpus import Dropped, expected_kind, fusions_served_by, index_rows, \
        instructions_for_backend

    t = st.target
    roots = st.corpus_roots
    p: dict[str, list] = {}
    drop = st.dropped = {"fusions": Dropped(st.max_elements, "--fusegen-max-elements"),
                         "execution": Dropped(st.max_elements, "--fusegen-max-elements"),
                         "codegen": Dropped(st.max_codegen_elements, "--fusegen-max-codegen-elements")}

    # emitter checks over corpus fusions
    fusions = []
    if not t.factories:
        st.skip_reasons["corpus"] = f"plugin {t.name!r} registers no emitter factory"
    elif not roots:
        st.skip_reasons["corpus"] = NO_CORPUS
    else:
        n: dict = {}
        fusions = fusions_served_by(t, roots, st.max_corpus, st.max_elements, drop["fusions"], n)
        if not fusions:
            kinds = sorted(set(t.capabilities.kinds) | {f.kind for f in t.factories})
            st.skip_reasons["corpus"] = _with(
                f"none of the {n['searched']} corpus fusions searched ({', '.join(str(r) for r in roots)}) is served "
                f"by plugin {t.name!r}'s emitters: {n['of_kind']} dispatch to its kinds {kinds}"
                + (f", its emitters declined {n['declined']}" if n["declined"] else "")
                + "; put fusions it serves in a directory named by FUSEGEN_CORPUS", drop["fusions"])
    fparams = [pytest.param(f, id=f.test_id) for f in fusions]
    for n in ("test_corpus_output", "test_compiles_sm90", "test_launch_within_limits", "test_deterministic_source"):
        p[n] = fparams

    # matcher checks: every corpus fusion (answers), and the INDEX rows labelled with the plugin's kinds
    kinds = set(t.capabilities.kinds)
    rows_mine, rows_other = [], []
    if not t.matchers:
        st.skip_reasons["matcher"] = st.skip_reasons["matcher-answers"] = f"plugin {t.name!r} registers no kind matcher"
    elif not roots:
        st.skip_reasons["matcher"] = st.skip_reasons["matcher-answers"] = NO_CORPUS
    else:
        for root in roots:
            cases = root / "xla" / "cases"
            for file, expected, _note in index_rows(root):
                k = expected_kind(expected)
                if not k.startswith("k") or not (cases / file).exists():
                    continue
                (rows_mine if k in kinds else rows_other).append((cases / file, k))
        if not rows_mine:
            st.skip_reasons["matcher"] = (f"no corpus case (xla/cases/INDEX.tsv) is labelled with the plugin's kinds "
                                          f"{sorted(kinds)}")
    p["test_matcher_answers_over_corpus"] = [pytest.param(roots, id="corpus")] if t.matchers and roots else []
    p["test_matcher_claims_corpus"] = [pytest.param(r, id=r[0].stem) for r in rows_mine]
    p["test_matcher_claims_nothing_else"] = [pytest.param(rows_other, id="other-kinds")] if rows_mine else []

    # generated fusions per declared kind
    gparams = []
    for kind in t.capabilities.kinds:
        name, make = t.generator_for(kind)
        if make is None:
            why = (f"declared generator {name!r} is neither the suite's nor the plugin's" if name else
                   f"the suite has no fusion generator for {kind}; the plugin can bring one through the "
                   f"fusegen_conformance_generators hook")
            gparams.append(pytest.param(None, id=kind, marks=pytest.mark.skip(reason=why)))
        else:
            gparams.append(pytest.param((kind, name), id=kind))
    if not t.capabilities.kinds:
        st.skip_reasons["generated"] = f"plugin {t.name!r} declares no fusion kinds"
    p["test_generated_output"] = gparams
    runnable = [g.values[0][0] for g in gparams if g.values[0] is not None]
    p["test_emitters_exercised"] = [pytest.param((fusions, runnable), id="emitters")] if t.factories else []
    if not t.factories:
        st.skip_reasons["exercised"] = f"plugin {t.name!r} registers no emitter factory"

    # execution backends
    p["test_execution_backend_declared"] = [pytest.param(b, id=b.name) for b in t.execution_backends]
    if not t.execution_backends:
        st.skip_reasons["execution"] = f"plugin {t.name!r} registers no execution backend"
    eparams = []
    limit = max(1, min(st.max_corpus, 4))
    if t.execution_backends and roots and _runs_here(st):
        for b in t.execution_backends:
            for loc in instructions_for_backend(roots, t.capabilities.corpus, _exec_accept(b), limit,
                                                st.max_elements, drop["execution"]):
                eparams.append(pytest.param((b, loc), id=f"{b.name}-{loc[0].stem}:{loc[2]}"))
    if not eparams:
        st.skip_reasons["execution-results"] = (
            st.skip_reasons.get("execution") or (NO_CORPUS if not roots else None) or _device_reason(st)
            or _with(f"no corpus instruction in {_where(t)} is accepted by plugin {t.name!r}'s execution backends",
                     drop["execution"]))
    p["test_execution_backend_results"] = eparams

    # codegen backends
    p["test_codegen_backend_declared"] = [pytest.param(b, id=b.name) for b in t.codegen_backends]
    if not t.codegen_backends:
        st.skip_reasons["codegen-declared"] = f"plugin {t.name!r} registers no codegen backend"
    cparams = []
    st.codegen_first = {}
    if t.codegen_backends and roots and _runs_here(st):
        for b in t.codegen_backends:
            for loc in instructions_for_backend(roots, t.capabilities.corpus, _codegen_accept(b),
                                                max(1, min(st.max_corpus, 2)), st.max_codegen_elements,
                                                drop["codegen"]):
                st.codegen_first.setdefault(b.name, loc)  # every config is checked on this one
                cparams.append(pytest.param((b, loc), id=f"{b.name}-{loc[0].stem}:{loc[2]}"))
    if not cparams:
        st.skip_reasons["codegen"] = (
            st.skip_reasons.get("codegen-declared") or (NO_CORPUS if not roots else None) or _device_reason(st)
            or _with(f"no corpus instruction in {_where(t)} has supported configs of plugin {t.name!r}'s codegen "
                     f"backends", drop["codegen"]))
    for n in ("test_supported_configs", "test_scratch_bytes", "test_compile_apply_roundtrip",
              "test_codegen_results_within_tolerance"):
        p[n] = cparams
    _pass_params(st, p, roots)
    return p


def _pass_params(st: Any, p: dict[str, list], roots: list) -> None:
    """The pass checks' parameters: each pass, and each (pass, corpus module it changes)."""
    from fusegen.conformance.corpus import Dropped
    from fusegen.conformance.pass_corpus import modules_changed_by

    t = st.target
    p["test_pass_declared"] = [pytest.param(q, id=q.name) for q in t.passes]
    if not t.passes:
        st.skip_reasons["passes"] = st.skip_reasons["pass-modules"] = f"plugin {t.name!r} registers no pass"
        p["test_pass_rewrites_corpus"] = []
        return
    drop = st.dropped["passes"] = Dropped(st.max_elements, "--fusegen-max-elements")
    mparams, searched = [], 0
    if roots:
        for q in t.passes:
            mods, searched = modules_changed_by(t, q, roots, max(1, min(st.max_corpus, 4)), st.max_elements, drop,
                                                st.device)
            mparams.extend(pytest.param((q, m), id=f"{q.name}-{m.test_id}") for m in mods)
    if not mparams:
        names = ", ".join(repr(q.name) for q in t.passes)
        st.skip_reasons["pass-modules"] = NO_CORPUS if not roots else _with(
            f"plugin {t.name!r}'s passes {names} change none of the {searched} corpus modules searched (all of "
            f"{', '.join(str(r) for r in roots)}); put modules they rewrite in a directory named by FUSEGEN_CORPUS",
            drop)
    p["test_pass_rewrites_corpus"] = mparams


def _where(t: Any) -> str:
    return str(list(t.capabilities.corpus)) if t.capabilities.corpus else "the corpus"


def _runs_here(st: Any) -> bool:
    return bool(set(st.target.capabilities.devices) & set(st.available))


def _device_reason(st: Any) -> str | None:
    if _runs_here(st):
        return None
    return (f"plugin {st.plugin_name!r} declares devices {', '.join(st.target.capabilities.devices)}; "
            f"this machine offers {', '.join(st.available)}")


_NOT_RUN = ("parameter", "tuple", "get-tuple-element", "constant", "while", "conditional", "call")


def _exec_accept(backend: Any):
    def accept(inst: Any) -> bool:
        return inst.opcode not in _NOT_RUN and bool(backend.can_execute(inst))

    return accept


def _codegen_accept(backend: Any):
    def accept(inst: Any) -> bool:
        return bool(backend.get_supported_configs(inst))

    return accept
