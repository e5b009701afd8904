"""Bugs plugin authors really make, planted in plugin packages of our own (``tests/plugin_packages``, pip-installed
into the session's plugin venv as a user installs them), each caught by the conformance suite naming the plugin
and the check, and the launch and invalid-module ones by ``run`` / ``opt`` too (issue 30):

| package (plugin)                           | planted bug                        | suite's check            | CLI          |
|--------------------------------------------|------------------------------------|--------------------------|--------------|
| fusegen-test-pass-bugs (dot_swap)          | the new dot's operands swapped      | pass-keeps-values, pass-module-verifies | run: exit 2 naming the pass |
| fusegen-test-pass-bugs (dot_unplaced)      | converts built, never inserted      | pass-module-verifies     | opt: exit 2, nothing printed |
| fusegen-test-reverse-no-map                | the kReverse emitter ignores its map | output-matches-evaluator | run: mismatch |
| fusegen-test-reverse-warps64               | 64 warps (2048 threads)             | launch-within-limits     | run / explain: error row, exit 2 |
| fusegen-test-gemm-drop-chunk               | split_k > 1 drops the last K chunk  | results-within-tolerance naming the configs | tune --record: WRONG_RESULTS |

and the good ones (docs/plugins.md's ``dot-bf16`` pass is tested from the guide: tests/plugins/test_docs_plugins_installed.py)
pass with the checks of their kind run: the kReverse emitter on the sweep corpus's reverses (no FUSEGEN_CORPUS),
the split-K GEMM backend with every one of its 6 configs checked.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from conftest import REPO
from plugin_venv import conformance_in, fusegen_in

CORPUS = REPO.parent / "shared" / "corpus"
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")
REVERSE_2D = CORPUS / "sweep" / "rev_2d_both_f32.h200_opt.hlo"


def _by_test(data: dict) -> dict[str, dict]:
    return {r["test"]: r for r in data["results"]}


def _failed(data: dict) -> dict[str, dict]:
    return {t: r for t, r in _by_test(data).items() if r["outcome"] in ("failed", "error")}


def _matmul(m: int, k: int, n: int) -> str:
    """An unoptimized module: ``dot(x, w) + b`` (the default pipeline fuses it)."""
    return (f"HloModule mm_{m}x{k}x{n}\nENTRY e {{\n  x = f32[{m},{k}] parameter(0)\n  w = f32[{k},{n}] parameter(1)\n"
            f"  b = f32[{m},{n}] parameter(2)\n  d = f32[{m},{n}] dot(x, w), lhs_contracting_dims={{1}}, "
            f"rhs_contracting_dims={{0}}\n  ROOT r = f32[{m},{n}] add(d, b)\n}}\n")


PASS_BUGS = "fusegen-test-pass-bugs"


@needs_corpus
def test_pass_bugs_are_caught_by_the_suite_naming_the_pass_its_plugin_and_the_check(plugin_venv, tmp_path):
    proc, data = conformance_in(plugin_venv, "dot_swap", tmp_path, "-k", "test_pass")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = _failed(data)
    label = f"pass 'dot-bf16-swapped' (plugin 'dot_swap' from {PASS_BUGS})"
    checks = {r["check"] for r in failed.values()}
    assert checks == {"pass-keeps-values", "pass-module-verifies"}, failed  # square dots: values; others: invalid
    for r in failed.values():
        assert r["test"].startswith("test_pass_rewrites_corpus[dot-bf16-swapped-") and label in r["message"], r
    assert any("contracting dimension sizes differ" in r["message"] for r in failed.values())
    assert any(re.search(r"changed by [\d.e+-]+, [\d.e+-]+ of its largest value .*error_budget=0.015625", r["message"])
               for r in failed.values())
    assert _by_test(data)["test_pass_declared[dot-bf16-swapped]"]["outcome"] == "passed"

    proc, data = conformance_in(plugin_venv, "dot_unplaced", tmp_path, "-k", "test_pass")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = _failed(data)
    assert failed and {r["check"] for r in failed.values()} == {"pass-module-verifies"}, failed
    assert all(f"pass 'dot-bf16-unplaced' (plugin 'dot_unplaced' from {PASS_BUGS}) produced an invalid module: "
               in r["message"] and "is not an instruction of this computation" in r["message"] for r in failed.values())


def test_pass_bugs_are_caught_by_opt_and_run_naming_the_pass_not_the_input(plugin_venv, tmp_path):
    square, wide = tmp_path / "square.hlo", tmp_path / "wide.hlo"
    square.write_text(_matmul(16, 16, 16))
    wide.write_text(_matmul(8, 32, 16))
    # opt: an invalid rewrite is an error naming the pass; the module is not printed
    p = fusegen_in(plugin_venv, "opt", str(wide), "--passes", "dot-bf16-unplaced", dists=PASS_BUGS, cwd=tmp_path)
    assert p.returncode == 2 and p.stdout == "", (p.stdout, p.stderr)
    assert (f"pass 'dot-bf16-unplaced' (plugin 'dot_unplaced' from {PASS_BUGS}) produced an invalid module: "
            f"computation 'e', %d: operand %x.bf16 is not an instruction of this computation") in p.stderr
    # run on a non-square matmul: the pass's bad rewrite is named, not the input ("contracting sizes differ")
    passes = "dot_bf16_swapped,dot-decomposer,gemm-fusion,gemm-rewriter,fusion"  # names compare as plugin names
    p = fusegen_in(plugin_venv, "run", str(wide), "--no-compile", "--passes", passes, dists=PASS_BUGS, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    (line,) = [ln for ln in p.stderr.splitlines() if "error" in ln]
    assert f"pass 'dot-bf16-swapped' (plugin 'dot_swap' from {PASS_BUGS}) produced an invalid module: " in line
    assert re.search(r"contracting dimension sizes differ: lhs %\S+ bf16\[32,16\] dimension 1 is 16, rhs %\S+ "
                     r"bf16\[8,32\] dimension 0 is 8", line), line
    # on a square one the module stays valid: run is ok, unless [pipeline] verify compares the outputs
    p = fusegen_in(plugin_venv, "run", str(square), "--no-compile", "--passes", passes, dists=PASS_BUGS, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (tmp_path / "fusegen.toml").write_text("[pipeline]\nverify = true\n")
    p = fusegen_in(plugin_venv, "run", str(square), "--no-compile", "--passes", passes, dists=PASS_BUGS, cwd=tmp_path)
    assert p.returncode == 2, p.stderr
    assert (f"pass 'dot-bf16-swapped' (plugin 'dot_swap' from {PASS_BUGS}) changed the module's outputs on seeded "
            f"inputs: output 0 (f32) changed by") in p.stderr


@needs_corpus
def test_the_reverse_emitter_runs_every_check_on_the_sweep_corpus_and_its_bugs_are_caught(plugin_venv, tmp_path):
    proc, data = conformance_in(plugin_venv, "reverse", tmp_path, "--fusegen-max-examples", "4")
    assert proc.returncode == 0, proc.stdout[-3000:]
    passed = {t for t, r in _by_test(data).items() if r["outcome"] == "passed"}
    for check in ("test_corpus_output", "test_compiles_sm90", "test_launch_within_limits", "test_deterministic_source"):
        assert f"{check}[rev_2d_both_f32.h200_opt:wrapped_reverse]" in passed, (check, passed)
    assert "test_generated_output[kReverse]" in passed and data["corpus"]["roots"] == [str(CORPUS)]
    skipped = {t: r["message"] for t, r in _by_test(data).items() if r["outcome"] == "skipped"}
    assert skipped["test_matcher_claims_corpus[none]"].endswith(
        "no corpus case (xla/cases/INDEX.tsv) is labelled with the plugin's kinds ['kReverse']")

    proc, data = conformance_in(plugin_venv, "reverse_no_map", tmp_path, "--fusegen-max-examples", "4", "-k",
                                "output")
    failed = _failed(data)
    assert proc.returncode == 1 and "test_corpus_output[rev_2d_both_f32.h200_opt:wrapped_reverse]" in failed, failed
    assert {r["check"] for r in failed.values()} == {"output-matches-evaluator"}
    assert all("plugin 'reverse_no_map', fusion %" in r["message"] and "differs from the reference evaluator" in
               r["message"] for r in failed.values()), failed

    proc, data = conformance_in(plugin_venv, "reverse_warps64", tmp_path, "--fusegen-max-examples", "2", "-k",
                                "launch_within_limits")
    failed = _failed(data)
    assert proc.returncode == 1 and {r["check"] for r in failed.values()} == {"launch-within-limits"}, failed
    r = failed["test_launch_within_limits[rev_2d_both_f32.h200_opt:wrapped_reverse]"]
    assert ("plugin 'reverse_warps64', fusion %wrapped_reverse on h200: kernel reverse_wrapped_reverse: num_warps=64 "
            "gives 2048 threads per block, limit 1024") in r["message"]


@needs_corpus
def test_an_over_limit_launch_is_an_error_row_in_run_and_explain(plugin_venv, tmp_path):
    said = ("plugin 'reverse_warps64', Warps64Reverse.emit: kernel launch over the limits of h200: kernel "
            "reverse_wrapped_reverse: num_warps=64 gives 2048 threads per block, limit 1024")
    for cmd in (["run", "--no-compile"], ["explain"]):
        p = fusegen_in(plugin_venv, cmd[0], str(REVERSE_2D), *cmd[1:], "--json", dists="fusegen-test-reverse-warps64")
        assert p.returncode == 2, (cmd, p.stderr[-2000:])
        (f,) = json.loads(p.stdout)["fusions"]
        assert (f["plugin"], f["emitter"], f["launch"]) == ("reverse_warps64", "Warps64Reverse", "grid=33 warps=64"), f
        assert f.get("status", "error") == "error" and said in f["reason"] and said in p.stderr
    # the good emitter's launch is fine and its kernel right; the one ignoring its map is a mismatch (exit 1)
    p = fusegen_in(plugin_venv, "run", str(REVERSE_2D), "--no-compile", "--json", dists="fusegen-test-reverse")
    assert p.returncode == 0, p.stderr[-2000:]
    (f,) = json.loads(p.stdout)["fusions"]
    assert (f["status"], f["emitter"], f["kind"]) == ("ok", "ReverseFusion", "kReverse")
    p = fusegen_in(plugin_venv, "run", str(REVERSE_2D), "--no-compile", "--json", dists="fusegen-test-reverse-no-map")
    (f,) = json.loads(p.stdout)["fusions"]
    assert p.returncode == 1 and (f["status"], f["emitter"]) == ("mismatch", "NoMapReverse"), (p.returncode, f)


@needs_corpus
def test_every_config_of_a_gemm_backend_is_checked_and_a_wrong_one_is_named(plugin_venv, tmp_path):
    proc, data = conformance_in(plugin_venv, "splitk_gemm", tmp_path, "-k", "codegen or execution")
    assert proc.returncode == 0, proc.stdout[-3000:]
    res = [r for t, r in _by_test(data).items() if t.startswith("test_codegen_results_within_tolerance[")]
    assert res and all(r["outcome"] == "passed" for r in res), res
    assert [r.get("configs_checked") for r in res][0] == "6 of 6"  # every config on its first instruction

    proc, data = conformance_in(plugin_venv, "splitk_gemm_bug", tmp_path, "-k", "codegen_results")
    failed = _failed(data)
    assert proc.returncode == 1 and len(failed) == 1, proc.stdout[-3000:]  # its first instruction; the rest: split_k=1
    for r in failed.values():
        assert r["check"] == "results-within-tolerance" and "4 of 6 compiled configs give wrong results" in r["message"]
        wrong = set(re.findall(r"config (splitk_gemm_bug:\S+) output 0", r["message"]))
        assert wrong == {f"splitk_gemm_bug:acc={a},split_k={s}" for a in ("f32", "f64") for s in (2, 4)}, r


def test_tune_records_wrong_results_as_the_failure(plugin_venv, tmp_path):
    module = tmp_path / "gemm.hlo"
    module.write_text("HloModule gemm\nf {\n  a = f32[64,256] parameter(0)\n  b = f32[256,64] parameter(1)\n"
                      "  ROOT d = f32[64,64] dot(a, b), lhs_contracting_dims={1}, rhs_contracting_dims={0}\n}\n"
                      "ENTRY e {\n  a = f32[64,256] parameter(0)\n  b = f32[256,64] parameter(1)\n  ROOT f = f32[64,64] "
                      "fusion(a, b), kind=kCustom, calls=f, backend_config={\"fusion_backend_config\":"
                      "{\"kind\":\"__triton_gemm\"}}\n}\n")
    rec = tmp_path / "records"
    # every candidate run and compared (on a CPU: timed in the interpreter, on request), as on a GPU
    p = fusegen_in(plugin_venv, "tune", str(module), "--backends", "splitk_gemm_bug", "--cost-model-top-k", "0",
                   "--workers", "0", "--record", str(rec), "--cache-dir", str(tmp_path / "cache"), "--measure-on-cpu",
                   dists="fusegen-test-gemm-drop-chunk", cwd=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    (record,) = [json.loads(f.read_text()) for f in rec.glob("*.json")]
    failures = {c["name"]: c["failure"] for c in record["candidates"]}
    assert failures == {f"splitk_gemm_bug:acc={a},split_k={s}": ("WRONG_RESULTS" if s > 1 else None)
                        for a in ("f32", "f64") for s in (1, 2, 4)}, failures
    wrong = [c for c in record["candidates"] if c["failure"]]
    assert all(c["message"].startswith("Output disagrees with winning cluster") and c["output"] for c in wrong), wrong
    # the replay recomputes the verdict from the recorded outputs and agrees
    p = fusegen_in(plugin_venv, "tune", "--replay", str(next(rec.glob("*.json"))), "--json", cwd=tmp_path)
    assert p.returncode == 0 and json.loads(p.stdout)["failures"] == {n: f for n, f in failures.items() if f}, p.stdout
