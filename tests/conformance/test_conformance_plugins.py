"""The conformance suite fails broken plugins: real plugin packages, pip-installed into a venv, run through
``pytest -p fusegen.conformance`` (issue 19, point 7).

* a matcher-only plugin whose matcher raises on every fusion, and one answering the typo ``kLooop``, fail
  ``matcher-answers`` (the suite asks every matcher about every corpus fusion);
* the guide's negate emitter with a kernel that stores ``x`` instead of ``-x`` fails
  ``output-matches-evaluator``; with a kernel that does not compile, ``compiles-sm90``, both naming the plugin;
* a plugin with a kind of its own brings its generator through ``fusegen_conformance_generators`` and passes;
  the same plugin declaring the suite's ``elementwise`` generator instead fails ``generator-reaches-kind`` with
  a message saying what to do, not hypothesis's ``Unsatisfiable``;
* ``FUSEGEN_CORPUS`` adds a directory to the shared corpus; corpus limits are options and a skip counts
  what they left out.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from fusegen.runtime.inputs import save_npz
from venv_plugins import PluginVenv, write_project

pytest_plugins = ["pytester"]

REPO = Path(__file__).resolve().parents[2]
CORPUS = REPO.parent / "shared" / "corpus"
DOC = REPO / "docs" / "plugins.md"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")

MATCHERS = '''"""Matcher-only plugins, broken on purpose (tests/conformance/test_conformance_plugins.py)."""
from fusegen.plugin_manager import hookimpl
from fusegen.registry import KindMatcher


def _match(analysis):
    {body}


@hookimpl
def fusegen_fusion_kind_matchers():
    return [KindMatcher(name="{name}", rank=150, match=_match)]
'''

# A kind of its own: abs(transpose(parameter)) fusions, emitted with the kit; GENERATORS is spliced in.
KABS = '''"""A plugin with a kind of its own, kAbsTranspose (tests/conformance/test_conformance_plugins.py)."""
from fusegen.codegen import kit
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, KindMatcher

KIND = "kAbsTranspose"


def _is_mine(analysis):
    r = analysis.roots
    return (len(r) == 1 and r[0].opcode == "abs" and r[0].operands[0].opcode == "transpose"
            and r[0].operands[0].operands[0].opcode == "parameter")


class AbsTranspose(kit.LinearKernelIndexing, kit.FusionEmitter):
    name = "AbsTranspose"

    def emit(self):
        out = self.fusion.shape

        def body(gen, lin_c):
            idx = kit.logical_index(gen, lin_c, out)
            ptr = gen.ctx.param("output", 0, out, "out")
            kit.store_line(gen, ptr, lin_c, gen.value(self.analysis.roots[0], idx), out.element_type, gen.ctx.mask)

        return kit.EmittedFusion(emitter=self.name, kernels=(kit.build_linear_kernel(self, "abs_t", out.numel, body),))


@hookimpl
def fusegen_fusion_kind_matchers():
    return [KindMatcher(name="abs-transpose", rank=150, match=lambda a: KIND if _is_mine(a) else None)]


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="abs_transpose", kind=KIND, rank=100, create=lambda a, c=None: AbsTranspose(a))]
{generators}
'''

HOOKED = '''

def _abs_transposes(dtypes):
    from hypothesis import strategies as st

    from fusegen.conformance.generators import fusion_module

    def module(dims):
        src, dst = f"f32[{dims[0]},{dims[1]}]", f"f32[{dims[1]},{dims[0]}]"
        return fusion_module(f"  t = {dst} transpose(p0), dimensions={{1,0}}\\n  ROOT a = {dst} abs(t)", [src], dst)

    return st.tuples(st.integers(1, 40), st.integers(1, 40)).map(module)


@hookimpl
def fusegen_conformance_generators():
    return {KIND: _abs_transposes}


FUSEGEN_CONFORMANCE = {"kinds": [KIND]}
'''

ELEMENTWISE = '''
FUSEGEN_CONFORMANCE = {"kinds": [KIND], "generators": {KIND: "elementwise"}}
'''

ABS_T_HLO = """HloModule extra_abs_transpose
fused {
  p0 = f32[12,5]{1,0} parameter(0)
  t = f32[5,12]{1,0} transpose(p0), dimensions={1,0}
  ROOT a = f32[5,12]{1,0} abs(t)
}
ENTRY e {
  p0 = f32[12,5]{1,0} parameter(0)
  ROOT f = f32[5,12]{1,0} fusion(p0), kind=kLoop, calls=fused
}
"""


# A wrong kLoop emitter: the built-in loop kernel with 1 added to every stored value (beyond even bf16 tolerances).
OFF_BY_ONE = '''"""A kLoop emitter off by 1 everywhere (tests/conformance/test_conformance_plugins.py)."""
import re

import attrs

from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory
from fusegen_plugins.emitters.loop import LoopFusion


def _bump(k):
    if k is None:
        return None
    src = re.sub(r"tl\\.store\\(([^,]+), ([^,]+), mask=mask\\)", r"tl.store(\\1, \\2 + 1.0, mask=mask)", k.source)
    return attrs.evolve(k, source=src, interpret_variant=_bump(k.interpret_variant))  # the interpreter runs that


class OffByOne(LoopFusion):
    name = "OffByOne"

    def emit(self):
        e = super().emit()
        return attrs.evolve(e, emitter=self.name, kernels=tuple(_bump(k) for k in e.kernels))


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="off_by_one", kind="kLoop", rank=1, create=lambda a, c=None: OffByOne(a))]
'''

# An emitter plugin whose kind nothing reaches (its matcher never claims, no generator), and a kind typo.
UNREACHED = '''"""Emitter factories never exercised (tests/conformance/test_conformance_plugins.py)."""
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, KindMatcher
from fusegen_plugins.emitters.loop import LoopFusion

FUSEGEN_CONFORMANCE = {KINDS}


@hookimpl
def fusegen_fusion_kind_matchers():
    return [KindMatcher(name="{NAME}-never", rank=150, match=lambda a: None)]


@hookimpl
def fusegen_emitter_factories():
    return [EmitterFactory(name="{NAME}", kind={KIND!r}, rank=100, create=lambda a, c=None: LoopFusion(a))]
'''

# seeded inputs give log of negatives: the output is all NaN (the shared corpus's own copy)
VACUOUS_CASE = CORPUS / "xla" / "cases" / "gemm_fusion__GemmFusionProfitabilityTest__UnprofitableConvertOutput.hlo"


def _guide_negate() -> str:
    text = DOC.read_text()
    return re.search(r"```python\n(# file: fusegen_negate\.py\n.*?)```", text, re.S).group(1)


def _negate_variant(replace: str) -> str:
    src = _guide_negate()
    assert "tl.store(out_ptr + lin, -x, mask=mask)" in src, "the guide's negate kernel changed: update this test"
    return src.replace("tl.store(out_ptr + lin, -x, mask=mask)", replace)


@pytest.fixture(scope="module")
def broken_venv(tmp_path_factory):
    """One venv with the broken plugins installed as two distributions (five entry points)."""
    root = tmp_path_factory.mktemp("broken-plugins")
    venv = PluginVenv(root / "venv")
    venv.install(write_project(root / "matchers", "broken-matchers", {
        "raising_matcher": MATCHERS.format(body="raise RuntimeError(f'cannot look at {analysis.fusion.name}')",
                                           name="always-raises"),
        "typo_matcher": MATCHERS.format(body="return 'kLooop' if len(analysis.roots) > 1 else None", name="typo"),
    }, {"fusegen.emitters": {"raising_matcher": "raising_matcher", "typo_matcher": "typo_matcher"}}))
    venv.install(write_project(root / "emitters", "broken-emitters", {
        "wrong_negate": _negate_variant("tl.store(out_ptr + lin, x, mask=mask)"),
        "uncompilable_negate": _negate_variant("tl.store(out_ptr + lin, tl.no_such_function(x), mask=mask)"),
        "kabs_hooked": KABS.format(generators=HOOKED),
        "kabs_elementwise": KABS.format(generators=ELEMENTWISE),
        "off_by_one": OFF_BY_ONE,
        "kfoo_unreached": UNREACHED.replace("{KINDS}", '{"kinds": ["kFoo"]}').replace("{NAME}", "kfoo").replace(
            "{KIND!r}", "'kFoo'"),
        "kind_typo": UNREACHED.replace("{KINDS}", "{}").replace("{NAME}", "typo").replace("{KIND!r}", "'kLooop'"),
        "kind_case": UNREACHED.replace("{KINDS}", "{}").replace("{NAME}", "case").replace("{KIND!r}", "'kloop'"),
    }, {"fusegen.emitters": {n: n for n in ("wrong_negate", "uncompilable_negate", "kabs_hooked",
                                             "kabs_elementwise", "off_by_one", "kfoo_unreached",
                                             "kind_typo", "kind_case")}}, version="0.2.0"))
    return venv


def _failed(data: dict) -> dict[str, dict]:
    return {r["test"]: r for r in data["results"] if r["outcome"] in ("failed", "error")}


@needs_corpus
@pytest.mark.parametrize("plugin, matcher, what", [
    ("raising_matcher", "always-raises", "raised on"),
    ("typo_matcher", "typo", "answered something that is not a kind on"),
])
def test_suite_fails_a_broken_matcher_only_plugin(broken_venv, tmp_path, plugin, matcher, what):
    proc, data = broken_venv.conformance(plugin, tmp_path)
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = _failed(data)
    assert set(failed) == {"test_matcher_answers_over_corpus[corpus]"}, failed
    r = failed["test_matcher_answers_over_corpus[corpus]"]
    assert r["check"] == "matcher-answers"
    assert f"plugin {plugin!r}: kind matcher {matcher!r} {what}" in r["message"], r["message"]
    if plugin == "typo_matcher":
        assert "'kLooop'" in r["message"] and "kLoop" in r["message"]
    else:
        # every corpus fusion was asked: the count is the corpus's analysable fusions
        asked = int(re.search(r"raised on (\d+) of (\d+)", r["message"]).group(2))
        assert asked > 500 and f"raised on {asked} of {asked}" in r["message"]
        assert "RuntimeError: cannot look at" in r["message"]
    assert data["plugin"]["distribution"] == "broken-matchers"


@needs_corpus
def test_suite_fails_a_kernel_computing_wrong_values(broken_venv, tmp_path):
    proc, data = broken_venv.conformance("wrong_negate", tmp_path, "--fusegen-max-examples", "5")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = _failed(data)
    names = {t.split("[")[0] for t in failed}
    assert {"test_corpus_output", "test_generated_output"} <= names, failed
    assert not names - {"test_corpus_output", "test_generated_output"}, failed  # launch, compile, source: fine
    for r in failed.values():
        assert r["check"] == "output-matches-evaluator"
        assert "plugin 'wrong_negate', fusion %" in r["message"] and "differs from the reference evaluator" in r["message"]


@needs_corpus
def test_suite_fails_a_kernel_that_does_not_compile_naming_the_plugin(broken_venv, tmp_path):
    proc, data = broken_venv.conformance("uncompilable_negate", tmp_path, "--fusegen-max-examples", "2",
                                         "--fusegen-max-corpus", "2")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = _failed(data)
    comp = [r for t, r in failed.items() if t.startswith("test_compiles_sm90[")]
    assert comp and all(r["check"] == "compiles-sm90" for r in comp), failed
    assert all("plugin 'uncompilable_negate', fusion %" in r["message"] and "kernel negate_kernel does not compile"
               in r["message"] for r in comp), comp
    out = [r for t, r in failed.items() if t.startswith("test_corpus_output[")]
    assert out and all("plugin 'uncompilable_negate'" in r["message"] and "no_such_function" in r["message"]
                       for r in out), out
    # the interpreter's failure points into the generated kernel file: k_<hash>.py:LINE
    assert all(re.search(r"running the kernels failed at \S+/k_[0-9a-f]+\.py:\d+: ", r["message"]) for r in out), out


@needs_corpus
def test_plugin_kind_with_its_own_generator_passes_and_fusegen_corpus_adds_a_directory(broken_venv, tmp_path):
    extra = tmp_path / "my-corpus" / "nested"
    extra.mkdir(parents=True)
    (extra / "abs_transpose.hlo").write_text(ABS_T_HLO)
    proc, data = broken_venv.conformance("kabs_hooked", tmp_path, "--fusegen-max-examples", "4",
                                         env={"FUSEGEN_CORPUS": str(tmp_path / "my-corpus")})
    assert proc.returncode == 0, proc.stdout[-3000:]
    by = {r["test"]: r["outcome"] for r in data["results"]}
    assert by["test_generated_output[kAbsTranspose]"] == "passed", by
    assert by["test_corpus_output[abs_transpose:f]"] == "passed", by  # from the added directory
    assert by["test_matcher_answers_over_corpus[corpus]"] == "passed"
    assert data["corpus"]["roots"] == [str(CORPUS), str(tmp_path / "my-corpus")]  # added, not replaced


@needs_corpus
def test_a_wrong_kernel_on_an_all_nan_output_fails_and_fusegen_corpus_is_never_sampled(broken_venv, tmp_path):
    mine = tmp_path / "my-corpus"
    mine.mkdir()
    (mine / "vacuous_log.hlo").write_text(VACUOUS_CASE.read_text())
    proc, data = broken_venv.conformance("off_by_one", tmp_path, "--fusegen-max-corpus", "1", "-k",
                                         "test_corpus_output and vacuous_log", env={"FUSEGEN_CORPUS": str(mine)})
    by = {r["test"]: r for r in data["results"]}
    # collected although the shared corpus sample (1) is full; inputs redrawn until the output is finite; the
    # venv's other distribution (broken-matchers: a matcher raising on every fusion) is not loaded
    r = by["test_corpus_output[vacuous_log:fusion]"]
    assert r["outcome"] == "failed" and r["check"] == "output-matches-evaluator", r
    assert "plugin 'off_by_one', fusion %fusion" in r["message"] and "differs from the reference" in r["message"]
    # the CLI says an all-NaN comparison is vacuous instead of calling the wrong kernel ok: log of a negative p0
    # (seeded inputs no longer give one: a parameter reaching log draws positive values)
    rng = np.random.default_rng(0)
    save_npz(tmp_path / "in.npz", {"p0": -np.ones((32, 32), ml_dtypes.bfloat16),
                                   **{f"p{k}": rng.standard_normal((32, 32)).astype(ml_dtypes.bfloat16) for k in (1, 2)}})
    p = broken_venv.run("-m", "fusegen.cli", "run", str(VACUOUS_CASE), "--inputs", str(tmp_path / "in.npz"),
                        "--no-compile", "--json", cwd=tmp_path,
                        env={"FUSEGEN_AUTOLOAD_DISTRIBUTIONS": "fusegen", "FUSEGEN_LOAD_PLUGINS": "off_by_one"})
    assert p.stdout.startswith("{"), p.stderr[-3000:]
    doc = json.loads(p.stdout)
    assert [f["emitter"] for f in doc["fusions"]][-1] == "OffByOne", doc["fusions"]
    (o,) = doc["outputs"]
    assert (doc["status"], o["status"]) == ("vacuous", "vacuous") and "comparison vacuous" in o["reason"], o
    assert "not a pass" in o["reason"] and p.returncode == 1, (p.returncode, o)


@needs_corpus
def test_an_emitter_plugin_never_exercised_fails_and_a_kind_typo_is_refused(broken_venv, tmp_path):
    proc, data = broken_venv.conformance("kfoo_unreached", tmp_path, "--fusegen-max-corpus", "2")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = _failed(data)
    r = failed["test_emitters_exercised[emitters]"]
    assert r["check"] == "emitters-exercised"
    assert "plugin 'kfoo_unreached': nothing was exercised" in r["message"] and "kfoo (kFoo)" in r["message"]
    assert "fusegen_conformance_generators hook" in r["message"] and "FUSEGEN_CORPUS" in r["message"]
    for plugin, said in (("kind_typo", "factory 'typo' serves kind 'kLooop', which is not one of XLA's and the "
                                       "plugin does not declare it"),
                         ("kind_case", "factory 'case' kind 'kloop' is not a kind name like 'kLoop'")):
        proc, data = broken_venv.conformance(plugin, tmp_path, "-k", "test_factory_kinds")
        assert proc.returncode == 1, proc.stdout[-3000:]
        r = _failed(data)["test_factory_kinds[all]"]
        assert (r["check"], said in r["message"]) == ("factory-kinds", True), r
        assert r["message"].endswith("did you mean 'kLoop'?")


def test_a_generator_that_never_reaches_the_kind_fails_saying_what_to_do(broken_venv, tmp_path):
    proc, data = broken_venv.conformance("kabs_elementwise", tmp_path, "--fusegen-max-examples", "5",
                                         "-k", "test_generated_output")
    assert proc.returncode == 1, proc.stdout[-3000:]
    r = _failed(data)["test_generated_output[kAbsTranspose]"]
    assert r["check"] == "generator-reaches-kind"
    assert ("plugin 'kabs_elementwise': no fusion generator 'elementwise' drew dispatches to kAbsTranspose served "
            "by the plugin (they went to: kLoop x") in r["message"]
    assert "fusegen_conformance_generators hook" in r["message"]
    assert "errors.Unsatisfiable:" not in proc.stdout and "Unable to satisfy assumptions" not in proc.stdout


@needs_corpus
def test_corpus_limits_are_options_and_the_skip_counts_what_they_left_out(pytester):
    report = pytester.path / "r.json"
    res = pytester.runpytest_subprocess("-p", "fusegen.conformance", "-p", "no:cacheprovider", "--fusegen-plugin",
                                        "host", "--fusegen-max-elements", "1", "--fusegen-report", str(report),
                                        "-q", "-rs", "-k", "test_execution_backend_results")
    assert res.ret == 0, res.stdout.str()[-2000:]
    import json

    data = json.loads(report.read_text())
    (r,) = [r for r in data["results"] if r["test"].startswith("test_execution_backend_results")]
    assert r["outcome"] == "skipped"
    m = re.search(r"(\d+) more above --fusegen-max-elements 1 elements \(smallest (\d+); raise "
                  r"--fusegen-max-elements to check them\)", r["message"])
    assert m and int(m.group(1)) > 0 and int(m.group(2)) > 1, r["message"]
    left = data["corpus"]["left_out"]["execution"]
    assert (left["limit"], left["over_limit"]) == (1, int(m.group(1)))
    assert data["options"]["max_elements"] == 1 and data["options"]["max_codegen_elements"] == 32768


def test_fusegen_corpus_entries_are_added_after_the_shared_corpus(tmp_path):
    from fusegen.conformance.corpus import CorpusError, corpus_files, corpus_roots

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "x.hlo").write_text(ABS_T_HLO)
    roots = corpus_roots({"FUSEGEN_CORPUS": f"{tmp_path / 'a'}:{tmp_path / 'a'}"})
    assert roots[-1] == tmp_path / "a" and roots.count(tmp_path / "a") == 1
    if CORPUS.exists():
        assert roots[0] == CORPUS
        files = corpus_files(roots)
        assert files[-1] == tmp_path / "a" / "x.hlo" and any(CORPUS in f.parents for f in files)
        # all of the shared corpus, sweep included; a plugin's globs narrow it, never a FUSEGEN_CORPUS directory
        assert {f.relative_to(CORPUS).parts[0] for f in files if CORPUS in f.parents} >= {
            "xla", "jax", "sweep", "spmd", "bugs", "hostile"}
        narrow = corpus_files(roots, ("jax/gelu_matmul.pre.hlo",))
        assert narrow == [CORPUS / "jax" / "gelu_matmul.pre.hlo", tmp_path / "a" / "x.hlo"]
    with pytest.raises(CorpusError, match="FUSEGEN_CORPUS entry '.*nope' is not a directory"):
        corpus_roots({"FUSEGEN_CORPUS": str(tmp_path / "nope")})
