"""The conformance tests themselves (collected by the ``fusegen.conformance`` pytest plugin).

Each test is one check (its name, with ``test_`` dropped and ``_`` as ``-``, is what failure messages
say in brackets). Tests are parametrised over the plugin under test in ``pytest_generate_tests``:
emitter checks over the corpus fusions its factories serve and over the kinds it declares; backend
checks over its execution backends, codegen backends and the corpus instructions they accept; pass checks
(:mod:`fusegen.conformance.suite_passes`) over its passes and the corpus modules each one changes. A test
whose capability the plugin does not declare, or whose device this machine lacks, is skipped with the
reason.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from fusegen.conformance import checks, corpus, generators
from fusegen.conformance.checks import CheckFailed
from fusegen.conformance.suite_passes import test_pass_declared, test_pass_rewrites_corpus  # noqa: F401 (collected)

NONE = "none"


# ------------------------------------------------------------------------------------------ plumbing
def _state(config: Any) -> Any:
    from fusegen.conformance import get_state

    return get_state(config)


def pytest_generate_tests(metafunc: Any) -> None:
    st = _state(metafunc.config)
    name = metafunc.function.__name__
    params = st.params_for(name) if st is not None else None
    if params is None:
        metafunc.parametrize("case", [pytest.param(None, id=NONE)])
        return
    if not params:
        params = [pytest.param(None, id=NONE)]
    metafunc.parametrize("case", params)


@pytest.fixture
def st(request: Any) -> Any:
    s = _state(request.config)
    if s is None:
        pytest.skip("no plugin under test: run with --fusegen-plugin NAME")
    return s


def _need(st: Any, case: Any, what: str) -> None:
    if case is None:
        pytest.skip(st.skip_reasons.get(what, f"nothing to check: {what}"))


def _tol(st: Any, request: Any) -> dict | None:
    return st.target.tolerance_for(request.node.name, st.tolerance_overrides)


# ------------------------------------------------------------------------------ every plugin
def test_declares_capabilities(st: Any, case: Any) -> None:
    """Capabilities parse (checked when loading); every emitter factory's kind is declared and every declared
    kind is served by one of the plugin's factories."""
    t = st.target
    caps = t.capabilities
    undeclared = sorted({f.kind for f in t.factories} - set(caps.kinds))
    if undeclared:
        raise CheckFailed("declares-capabilities", f"plugin {t.name!r}: emitter factories serve {undeclared} but its "
                                                   f"capabilities ({caps.source}) declare kinds {list(caps.kinds)}")
    unserved = sorted(set(caps.kinds) - {f.kind for f in t.factories})
    if unserved:
        raise CheckFailed("declares-capabilities", f"plugin {t.name!r} declares kinds {unserved} but registers no "
                                                   f"emitter factory for them")
    if not (t.is_emitter_plugin or t.is_backend_plugin or t.passes or t.info.hooks):
        raise CheckFailed("declares-capabilities", f"plugin {t.name!r} implements no fusegen hook")


# ---------------------------------------------------------------------------- emitter plugins
def test_factory_kinds(st: Any, case: Any) -> None:
    """Each emitter factory has a name, a kind spelled like XLA's (``k...``), an int rank and a callable."""
    t = st.target
    if not t.factories:
        pytest.skip(f"plugin {t.name!r} registers no emitter factory")
    for f in t.factories:
        if not (isinstance(f.name, str) and f.name):
            raise CheckFailed("factory-kinds", f"plugin {t.name!r}: factory with empty name")
        if not (isinstance(f.kind, str) and f.kind.startswith("k") and f.kind[1:2].isupper()):
            from fusegen.config.xla_flags import did_you_mean

            raise CheckFailed("factory-kinds", f"plugin {t.name!r}: factory {f.name!r} kind {f.kind!r} is not a "
                                               f"kind name like 'kLoop'{did_you_mean(str(f.kind), _xla_kinds())}")
        if f.kind not in _xla_kinds() and (t.capabilities.source == "inferred" or f.kind not in t.capabilities.kinds):
            # a kind neither XLA's nor declared by the plugin: nothing ever answers it (e.g. 'kloop' for 'kLoop')
            from fusegen.config.xla_flags import did_you_mean

            raise CheckFailed("factory-kinds", f"plugin {t.name!r}: factory {f.name!r} serves kind {f.kind!r}, which "
                                               f"is not one of XLA's and the plugin does not declare it "
                                               f"(FUSEGEN_CONFORMANCE kinds){did_you_mean(f.kind, _xla_kinds())}")
        if not isinstance(f.rank, int) or isinstance(f.rank, bool):
            raise CheckFailed("factory-kinds", f"plugin {t.name!r}: factory {f.name!r} rank {f.rank!r} is not an int")
        if not callable(f.create):
            raise CheckFailed("factory-kinds", f"plugin {t.name!r}: factory {f.name!r} create is not callable")
    for m in t.matchers:
        if not (isinstance(m.rank, int) and callable(m.match) and m.name):
            raise CheckFailed("factory-kinds", f"plugin {t.name!r}: matcher {m.name!r} needs a name, an int rank and "
                                               f"a callable")


def _xla_kinds() -> set[str]:
    from fusegen.kinds import EMITTER_FUSION_KINDS

    return set(EMITTER_FUSION_KINDS)


def test_emitters_exercised(st: Any, case: Any) -> None:
    """A plugin with emitter factories has some kernel run: a corpus fusion its factories serve, or a
    generated fusion of a declared kind; otherwise the suite passing would say nothing about it."""
    _need(st, case, "exercised")
    t = st.target
    fusions, kinds = case
    if not fusions and not kinds:
        msg = (f"plugin {t.name!r}: nothing was exercised: no corpus fusion is served by its emitter factories "
               f"{[f'{f.name} ({f.kind})' for f in t.factories]} and no declared kind has a fusion generator; bring "
               f"one through the fusegen_conformance_generators hook, or put fusions it serves in a directory named "
               f"by FUSEGEN_CORPUS")
        if t.execution_backends or t.codegen_backends:  # its backends are checked: say it, as a skip
            pytest.skip(msg)
        raise CheckFailed("emitters-exercised", msg)


def _known_kinds(t: Any) -> set[str]:
    """Kinds an answer may name: XLA's, the plugin's declared ones, and those any installed factory serves."""
    from fusegen.kinds import EMITTER_FUSION_KINDS

    return set(EMITTER_FUSION_KINDS) | set(t.capabilities.kinds) | {f.kind for f in t.pm.emitter_factories()}


def test_matcher_answers_over_corpus(st: Any, case: Any) -> None:
    """Every kind matcher of the plugin, asked about every corpus fusion (``--fusegen-max-matcher-fusions``),
    answers ``None`` or a known kind name (XLA's, a declared one, or one an installed factory serves) and never
    raises."""
    _need(st, case, "matcher-answers")
    from fusegen.analysis.fusion_analysis import FusionAnalysis

    t = st.target
    known = _known_kinds(t)
    asked = 0
    raised: dict[str, list[str]] = {}
    wrong: dict[str, list[str]] = {}
    for path, _mi, inst in corpus.all_fusions(case):
        if st.max_matcher_fusions and asked >= st.max_matcher_fusions:
            break
        try:
            analysis = FusionAnalysis.create(inst, corpus.device_for(path))
        except Exception:
            continue  # fusions fusegen cannot analyse are the analysis tests' business
        asked += 1
        for m in t.matchers:
            where = f"%{inst.name} ({path.name})"
            try:  # as dispatch calls it (the plugin manager hands over what it hands over)
                ans = t.pm.call_plugin(m.plugin, f"kind matcher {m.name!r}", m.match, analysis)
            except Exception as e:
                cause = e.__cause__ or e
                raised.setdefault(m.name, []).append(f"{where}: {type(cause).__name__}: {cause}")
                continue
            if ans is not None and (not isinstance(ans, str) or ans not in known):
                wrong.setdefault(m.name, []).append(f"{where}: {ans!r}")
    problems = []
    for name, lines in raised.items():
        problems.append(f"kind matcher {name!r} raised on {len(lines)} of {asked} corpus fusions, first {lines[0]}")
    for name, lines in wrong.items():
        problems.append(f"kind matcher {name!r} answered something that is not a kind on {len(lines)} of {asked} "
                        f"corpus fusions, first {lines[0]} (known kinds: {', '.join(sorted(known))})")
    if problems:
        raise CheckFailed("matcher-answers", f"plugin {t.name!r}: " + "; ".join(problems))
    if not asked:
        pytest.skip("no corpus fusion could be analysed")


def test_matcher_claims_corpus(st: Any, case: Any) -> None:
    """A corpus case labelled with one of the plugin's kinds dispatches to it, decided by the plugin's matcher."""
    _need(st, case, "matcher")
    from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
    from fusegen.dispatch import get_emitter_fusion_kind

    t = st.target
    path, want = case
    module = corpus.parse_file(path)[0]
    d = get_emitter_fusion_kind(FusionAnalysis.create(entry_fusion(module), corpus.device_for(path)), t.pm)
    mine = {m.name for m in t.matchers}
    if d.kind != want or d.decided_by not in mine:
        raise CheckFailed("matcher-claims-corpus", f"plugin {t.name!r}: {path.name} is labelled {want} but dispatches "
                                                   f"to {d.kind} (decided by {d.plugin}:{d.decided_by})")


def test_matcher_claims_nothing_else(st: Any, case: Any) -> None:
    """No corpus case labelled with another kind is claimed by the plugin's matchers."""
    _need(st, case, "matcher")
    from fusegen.analysis.fusion_analysis import FusionAnalysis, entry_fusion
    from fusegen.dispatch import get_emitter_fusion_kind

    t = st.target
    mine = {m.name for m in t.matchers}
    wrong = []
    for path, want in case:
        try:
            module = corpus.parse_file(path)[0]
            d = get_emitter_fusion_kind(FusionAnalysis.create(entry_fusion(module), corpus.device_for(path)), t.pm)
        except Exception:
            continue
        if d.decided_by in mine and d.plugin == t.name:
            wrong.append(f"{path.name} ({want} -> {d.kind})")
    if wrong:
        raise CheckFailed("matcher-claims-corpus", f"plugin {t.name!r} claims {len(wrong)} corpus case(s) labelled with "
                                                   f"another kind: {', '.join(wrong[:5])}")


def _corpus_emit(st: Any, case: Any, check: str) -> tuple[Any, Any, Any]:
    module, fusion = corpus.load_fusion(case)
    _a, _f, emitted = checks.emit_with_plugin(st.target, fusion, corpus.device_for(case.path), check)
    return module, fusion, emitted


def test_corpus_output(st: Any, case: Any, request: Any) -> None:
    """Outputs of the plugin's kernels (Triton interpreter) equal the reference evaluator on corpus fusions."""
    _need(st, case, "corpus")
    st.require_device("cpu-interpreter")
    module, fusion, emitted = _corpus_emit(st, case, "output-matches-evaluator")
    ops, ref = corpus.operands_and_reference(module, fusion)  # inputs drawn again while an output is all NaN
    if corpus.vacuous_outputs(ref):
        pytest.skip(f"fusion %{fusion.name}: outputs {corpus.vacuous_outputs(ref)} are all NaN/inf for every "
                    "input drawn (seeded, positive, next seeds): comparison vacuous")
    checks.check_outputs(st.target, fusion, emitted, ops, ref, _tol(st, request), st.device)


def test_compiles_sm90(st: Any, case: Any) -> None:
    """Every kernel compiles for sm_90 (Hopper) with Triton, without a GPU."""
    _need(st, case, "corpus")
    st.require_device("sm_90")
    _m, fusion, emitted = _corpus_emit(st, case, "compiles-sm90")
    checks.check_compiles(st.target, fusion.name, emitted, st.device)


def test_launch_within_limits(st: Any, case: Any) -> None:
    """Grid, threads per block and shared memory within the device limits (``fusegen.device``)."""
    _need(st, case, "corpus")
    _m, fusion, emitted = _corpus_emit(st, case, "launch-within-limits")
    checks.check_launch(st.target, fusion.name, emitted, st.device)


def test_deterministic_source(st: Any, case: Any) -> None:
    """Emitting the same fusion twice (fresh parse, fresh analysis) gives the same kernels, byte for byte."""
    _need(st, case, "corpus")
    _m1, f1, e1 = _corpus_emit(st, case, "deterministic-source")
    _m2, f2, e2 = _corpus_emit(st, case, "deterministic-source")
    a, b = checks.source_fingerprint(e1), checks.source_fingerprint(e2)
    if a != b:
        diff = next((x[0] for x, y in zip(a, b) if x != y), "kernel count")
        raise CheckFailed("deterministic-source", f"plugin {st.target.name!r}, fusion %{f1.name}: two emissions differ "
                                                  f"({diff})")


def test_generated_output(st: Any, case: Any, request: Any) -> None:
    """Hypothesis-generated fusions of each declared kind: the plugin's kernels equal the reference evaluator,
    launch within the limits, and emit deterministically."""
    _need(st, case, "generated")
    st.require_device("cpu-interpreter")
    from hypothesis import HealthCheck, assume, given, settings
    from hypothesis.errors import Unsatisfiable

    from fusegen.analysis.fusion_analysis import FusionAnalysis
    from fusegen.codegen.emitter import EmitterUnsupported
    from fusegen.dispatch import get_emitter_fusion_kind, get_fusion_emitter
    from fusegen.hlo.parser import parse_module
    from fusegen.runtime.inputs import make_inputs
    from fusegen.evaluator.evaluator import evaluate_instruction

    kind, gen_name = case
    t = st.target
    strategy = t.generator_for(kind)[1](tuple(t.capabilities.dtypes))
    tol = _tol(st, request)
    seen: list[int] = []
    elsewhere: dict[str, int] = {}
    declined: list[str] = []

    @settings(max_examples=st.max_examples, deadline=None, database=None, derandomize=True,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(text: str) -> None:
        module = parse_module(text, f"<generated {gen_name}>")
        fusion = module.entry.root
        analysis = FusionAnalysis.create(fusion, st.device)
        got = get_emitter_fusion_kind(analysis, t.pm).kind
        if got != kind:
            elsewhere[got] = elsewhere.get(got, 0) + 1
        assume(got == kind)
        _em, factory = get_fusion_emitter(analysis, got, t.pm)
        if factory is None or factory.plugin != t.name:
            by = f"{factory.plugin}:{factory.name}" if factory is not None else "no emitter"
            elsewhere[f"{kind} ({by})"] = elsewhere.get(f"{kind} ({by})", 0) + 1
        assume(factory is not None and factory.plugin == t.name)
        try:
            _em.emit()
        except EmitterUnsupported as e:
            declined.append(str(e))
            assume(False)  # a documented decline, not a failure
        except Exception:
            pass  # reported below, naming the check
        seen.append(1)
        try:
            _a, _f, emitted = checks.emit_with_plugin(t, fusion, st.device, "output-matches-evaluator")
            _a, _f, again = checks.emit_with_plugin(t, parse_module(text, "<again>").entry.root, st.device,
                                                    "deterministic-source")
            if checks.source_fingerprint(emitted) != checks.source_fingerprint(again):
                raise CheckFailed("deterministic-source", f"plugin {t.name!r}: two emissions of one generated fusion "
                                                          f"differ")
            ops = make_inputs(module, seed=0)
            ref = evaluate_instruction(fusion, ops)
            checks.check_outputs(t, fusion, emitted, ops, ref, tol, st.device)
        except CheckFailed as e:
            raise CheckFailed(e.check, f"{str(e)[len(e.check) + 3:]}\ngenerated HLO:\n{text}") from None

    try:
        run()
    except Unsatisfiable:
        pass  # explained below
    if seen:
        return
    if declined and not elsewhere:
        pytest.skip(f"plugin {t.name!r}'s emitter declined every generated {gen_name} fusion (first: {declined[0]})")
    went = ", ".join(f"{k} x{n}" for k, n in sorted(elsewhere.items())) or (
        f"none drawn: the generator has nothing for dtypes {list(t.capabilities.dtypes)}")
    raise CheckFailed("generator-reaches-kind",
                      f"plugin {t.name!r}: no fusion generator {gen_name!r} drew dispatches to {kind} served by the "
                      f"plugin (they went to: {went}); name a generator for {kind} in the 'generators' capability "
                      f"or bring one through the fusegen_conformance_generators hook")


# ---------------------------------------------------------------------------- backend plugins
def test_execution_backend_declared(st: Any, case: Any) -> None:
    """Execution backends have a name, an int rank, callables, and declare ``trusted`` as a bool."""
    _need(st, case, "execution")
    b = case
    if not (isinstance(b.name, str) and b.name and isinstance(b.rank, int) and callable(b.can_execute)
            and callable(b.execute)):
        raise CheckFailed("backend-declared", f"plugin {st.target.name!r}: execution backend {b.name!r} needs a name, an "
                                              f"int rank and callables can_execute/execute")
    if not isinstance(b.trusted, bool):
        raise CheckFailed("can-produce-wrong-results-declared", f"plugin {st.target.name!r}: execution backend "
                                                                f"{b.name!r} trusted={b.trusted!r} is not a bool")


def test_execution_backend_results(st: Any, case: Any, request: Any) -> None:
    """An execution backend's result equals the reference evaluator on corpus instructions it accepts, or is at
    least as close to the f64 oracle as the reference (:func:`fusegen.conformance.checks.result_problem`: an
    IEEE-f32 BLAS beside the reference's tf32 dots)."""
    _need(st, case, "execution-results")
    st.require_device(*st.target.capabilities.devices)
    from fusegen.runtime.inputs import leaves

    b, (path, mi, name) = case
    module, inst = corpus.load_instruction(path, mi, name)
    ops, ref = corpus.operands_and_reference(module, inst)
    try:
        got = b.execute(inst, ops, None)
    except Exception as e:
        raise CheckFailed("results-within-tolerance", f"plugin {st.target.name!r}: backend {b.name!r} raised on "
                                                      f"%{inst.name} ({path.name}): {type(e).__name__}: {e}") from e
    tol = _tol(st, request)
    oracle = checks.F64Oracle(inst, ops)
    for k, (s, o, r) in enumerate(zip(inst.shape.leaves(), leaves(got), leaves(ref))):
        problem = checks.result_problem(o, r, s.element_type, tol, oracle, k)
        if problem:
            raise CheckFailed("results-within-tolerance", f"plugin {st.target.name!r}: backend {b.name!r} on %{inst.name} "
                                                          f"({path.name}) output {k}: {problem}")


def _codegen(st: Any, case: Any) -> tuple[Any, Any, Any, Any]:
    _need(st, case, "codegen")
    st.require_device(*st.target.capabilities.devices)
    backend, (path, mi, name) = case
    module, inst = corpus.load_instruction(path, mi, name)
    return backend, module, inst, path


def test_codegen_backend_declared(st: Any, case: Any) -> None:
    """A codegen backend has a name and version, and ``can_produce_wrong_results()`` answers a bool."""
    _need(st, case, "codegen-declared")
    b = case
    if not (isinstance(b.name, str) and b.name and isinstance(b.version, str) and b.version):
        raise CheckFailed("backend-declared", f"plugin {st.target.name!r}: codegen backend {b!r} needs a name and a version")
    v = b.can_produce_wrong_results()
    if not isinstance(v, bool):
        raise CheckFailed("can-produce-wrong-results-declared", f"plugin {st.target.name!r}: {b.name}."
                                                                f"can_produce_wrong_results() returned {v!r}, not a bool")


def test_supported_configs(st: Any, case: Any) -> None:
    """Supported configs are non-empty, JSON-serialisable (``Config.to_json`` round trip) and stable (asked
    twice, and of a backend rebuilt from ``worker_spec()``, the same list)."""
    from fusegen.codegen_backend import CodegenBackend, Config

    backend, _m, inst, path = _codegen(st, case)
    cfgs = backend.get_supported_configs(inst)
    where = f"plugin {st.target.name!r}: backend {backend.name!r} on %{inst.name} ({path.name})"
    if not cfgs:
        raise CheckFailed("supported-configs", f"{where}: no supported configs")
    for c in cfgs:
        if not isinstance(c, Config) or c.backend != backend.name:
            raise CheckFailed("supported-configs", f"{where}: {c!r} is not a Config of backend {backend.name!r}")
        try:
            again = Config.from_json(json.loads(json.dumps(c.to_json())))
        except Exception as e:
            raise CheckFailed("configs-serialisable", f"{where}: config {c} does not survive JSON: {e}") from e
        if again != c:
            raise CheckFailed("configs-serialisable", f"{where}: config {c} reads back as {again}")
    names = [c.name for c in cfgs]
    if [c.name for c in backend.get_supported_configs(inst)] != names:
        raise CheckFailed("configs-stable", f"{where}: asking twice gives different configs")
    try:
        fresh = CodegenBackend.from_worker_spec(backend.worker_spec())
    except Exception:
        fresh = None  # a backend that cannot be rebuilt compiles in process; stability across calls is checked
    if fresh is not None and [c.name for c in fresh.get_supported_configs(inst)] != names:
        raise CheckFailed("configs-stable", f"{where}: a backend rebuilt from {backend.worker_spec()!r} gives "
                                            f"different configs")


def test_scratch_bytes(st: Any, case: Any) -> None:
    """``scratch_bytes(config)`` is a non-negative int for every supported config."""
    backend, _m, inst, path = _codegen(st, case)
    for c in backend.get_supported_configs(inst)[:64]:
        n = backend.scratch_bytes(c)
        if not isinstance(n, int) or isinstance(n, bool) or n < 0:
            raise CheckFailed("scratch-bytes", f"plugin {st.target.name!r}: backend {backend.name!r} reports "
                                               f"scratch_bytes={n!r} for {c}")


def test_compile_apply_roundtrip(st: Any, case: Any) -> None:
    """A supported config compiles to an ``Executable``; ``apply_config`` writes it into the backend config,
    idempotently, and the module prints and parses back with the same backend config."""
    from fusegen.codegen_backend import Executable
    from fusegen.hlo.parser import parse_modules
    from fusegen.hlo.printer import print_module

    backend, module, inst, path = _codegen(st, case)
    where = f"plugin {st.target.name!r}: backend {backend.name!r} on %{inst.name} ({path.name})"
    cfgs = backend.get_supported_configs(inst)
    if not cfgs:
        raise CheckFailed("supported-configs", f"{where}: no supported configs")
    errors = []
    exe = None
    for c in cfgs[: st.max_compiles]:
        try:
            exe = backend.compile(inst, c)
            break
        except Exception as e:
            errors.append(f"{c}: {type(e).__name__}: {e}")
    if exe is None:
        raise CheckFailed("compile-apply-roundtrip", f"{where}: none of the first {st.max_compiles} configs compiles: "
                                                     + "; ".join(errors))
    if not isinstance(exe, Executable):
        raise CheckFailed("compile-apply-roundtrip", f"{where}: compile returned {type(exe).__name__}, not an Executable")
    before = json.dumps(inst.attrs.get("backend_config"), sort_keys=True, default=str)
    backend.apply_config(inst, c)
    once = json.dumps(inst.attrs.get("backend_config"), sort_keys=True, default=str)
    if once == before:
        raise CheckFailed("compile-apply-roundtrip", f"{where}: apply_config({c}) left the backend config unchanged")
    backend.apply_config(inst, c)
    if json.dumps(inst.attrs.get("backend_config"), sort_keys=True, default=str) != once:
        raise CheckFailed("compile-apply-roundtrip", f"{where}: applying {c} twice changes the backend config again")
    text = print_module(module)
    mods = parse_modules(text, f"<printed {path.name}>")
    back = next((i for m in mods for comp in m.computations for i in comp.instructions if i.name == inst.name), None)
    if back is None or json.dumps(back.attrs.get("backend_config"), sort_keys=True, default=str) != once:
        raise CheckFailed("compile-apply-roundtrip", f"{where}: the applied backend config does not survive printing "
                                                     f"and parsing the module")


def test_codegen_results_within_tolerance(st: Any, case: Any, request: Any) -> None:
    """On the backend's first (smallest) corpus instruction every config it offers (or a seeded sample of
    ``--fusegen-max-configs`` that keeps the first, its size in the result's ``configs_checked``), on the
    others the first, compiles to an executable whose result equals the reference evaluator's (or is at least as
    close to the f64 oracle, :func:`fusegen.conformance.checks.result_problem`); a config that
    does not compile is left out (the tuner skips it too), one that computes wrong values fails, named. At
    least one config must compile."""
    backend, module, inst, path = _codegen(st, case)
    st.require_device("cpu-interpreter", "cuda-gpu")
    where = f"plugin {st.target.name!r}: backend {backend.name!r} on %{inst.name} ({path.name})"
    cfgs = backend.get_supported_configs(inst)
    every = case[1] == getattr(st, "codegen_first", {}).get(backend.name)
    sample = checks.sample_configs(cfgs, st.max_configs) if every else checks.sample_configs(cfgs, st.max_compiles)
    if every:
        request.node.user_properties.append(("fusegen_configs_checked", f"{len(sample)} of {len(cfgs)}"))
    ops, ref = corpus.operands_and_reference(module, inst)
    tol = _tol(st, request)
    wrong, failed, ran = [], [], 0
    for cfg in sample:
        if ran and not every:
            break  # past the first instruction: the first config that compiles
        try:
            exe = backend.compile(inst, cfg)
        except Exception as e:
            failed.append(f"{cfg}: {type(e).__name__}: {e}")
            continue
        ran += 1
        problem = checks.config_result_problem(backend, inst, cfg, exe, ops, ref, tol)
        if problem:
            wrong.append(problem)
    if wrong:
        checked = f"{len(sample)} of {len(cfgs)} configs checked" + (" (seeded sample)" if len(sample) < len(cfgs) else "")
        raise CheckFailed("results-within-tolerance", f"{where}: {len(wrong)} of {ran} compiled configs give wrong "
                                                      f"results ({checked}): " + "; ".join(wrong[:4]))
    if not ran:
        raise CheckFailed("compile-apply-roundtrip", f"{where}: none of {len(sample)} configs compiles: "
                                                     + "; ".join(failed[:3]))
