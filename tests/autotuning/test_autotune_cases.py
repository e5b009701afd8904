"""XLA's autotuner unit cases from the shared corpus.

* ``config_runner__*.json`` (xla/backends/autotuner/config_runner_test.cc): per-candidate failure
  kinds after ProfileAll; ``compare_results`` is the sequence of CheckOutputBuffer outcomes, which a
  scripted comparator replays, so the cases also check *which* comparisons clustering makes.
* ``cache_key_device__*.txtpb`` + INDEX.tsv: exact AutotuneCacheKey model strings.
* ``cache_key_hlo__kDotFusionHloText.hlo``: the key holds ``version=50``; versions 0 and 1 differ.
"""

from __future__ import annotations

import csv
import json

import pytest

from conftest import CORPUS
from fusegen.autotuning.clustering import profile_all
from fusegen.autotuning.selection import Failure, FailureKind, ProfileResult, pick_best_config
from fusegen.cache.key import CURRENT_VERSION, canonical_hlo, make_key, model_string_from_target_config

CASES_DIR = CORPUS / "xla" / "cases"
RUNNER_CASES = sorted(CASES_DIR.glob("config_runner__*.json")) if CORPUS.exists() else []
DEVICE_CASES = sorted(CASES_DIR.glob("cache_key_device__*.txtpb")) if CORPUS.exists() else []
needs_corpus = pytest.mark.skipif(not CORPUS.exists(), reason=f"shared corpus not found at {CORPUS}")


def _index() -> dict[str, str]:
    with open(CASES_DIR / "INDEX.tsv", newline="") as fh:
        return {row[0]: row[2] for row in csv.reader(fh, delimiter="\t") if row}


def _kind(name: str | None) -> str | None:
    return None if name is None else FailureKind.parse(name).name


def _run_case(case: dict):
    cands = case["cands"]
    script = list(case["compare_results"])
    calls: list[str] = []

    def run_one(i: int) -> ProfileResult:
        c = cands[i]
        r = ProfileResult(c["n"], float(c.get("dur_s", 0)) * 1e6, int(c.get("scratch", 0)))
        if "profile_error" in c:
            r.failure = Failure(FailureKind.EXECUTION_FAILED, c["profile_error"])
        elif "redzone_error" in c:
            r.failure = Failure(FailureKind.REDZONE_CHECK_FAILED, c["redzone_error"])
        else:
            r.output = c["n"]
        return r

    def compare(out, rep) -> bool:
        assert script, f"clustering made an extra comparison ({out} vs {rep}) beyond the recorded ones"
        outcome = script.pop(0)
        calls.append(f"{out} vs {rep}")
        return outcome.startswith("match")

    results = profile_all([c["trusted"] for c in cands], run_one, compare, case["check"])
    return results, script, calls


@needs_corpus
@pytest.mark.parametrize("path", RUNNER_CASES, ids=lambda p: p.stem)
def test_config_runner_corpus(path):
    case = json.loads(path.read_text())
    results, left, calls = _run_case(case)
    assert [r.name for r in results] == [c["n"] for c in case["cands"]]  # original order kept
    assert [_kind(r.failure.kind.name) if r.failure else None for r in results] == \
        [_kind(k) for k in case["expected_failures"]]
    assert left == [], f"recorded comparisons not made: {left} (made: {calls})"
    expected_index = json.loads(_index()[path.name])
    assert [_kind(k) for k in expected_index] == [_kind(k) for k in case["expected_failures"]]


@needs_corpus
def test_config_runner_untrusted_votes_for_trusted_cluster_details():
    case = json.loads((CASES_DIR / "config_runner__UntrustedVotesForTrustedCluster.json").read_text())
    results, _, calls = _run_case(case)
    # Trusted first: b is compared with a, then the untrusted ones with a then b.
    assert calls == ["trusted_b vs trusted_a", "untrusted_matches_b vs trusted_a", "untrusted_matches_b vs trusted_b",
                     "untrusted_matches_none vs trusted_a", "untrusted_matches_none vs trusted_b"]
    assert results[0].failure.message == ("Output disagrees with winning cluster (member of cluster 0 of 2; "
                                          "winning cluster has 2 member(s), trusted=true).")
    assert results[3].failure.message == ("Output disagrees with winning cluster (member of cluster -1 of 2; "
                                          "winning cluster has 2 member(s), trusted=true).")
    # The surviving untrusted config is the fastest, so it wins.
    assert pick_best_config(results).result.name == "untrusted_matches_b"


@needs_corpus
def test_config_runner_cases_present():
    names = {p.stem.split("__")[1] for p in RUNNER_CASES}
    assert {"ClustersOutputsWhenAllBackendsUntrusted", "PreservesCandidateOrderWhenProfilingTrustedFirst",
            "ProfileAllCorrectnessCheckDisabled", "ProfileAllExecutionError", "ProfileAllRedzoneCheckFailed",
            "UntrustedVotesForTrustedCluster"} <= names


@needs_corpus
@pytest.mark.parametrize("path", DEVICE_CASES, ids=lambda p: p.stem)
def test_cache_key_model_string_formatter(path):
    assert model_string_from_target_config(path.read_text()) == _index()[path.name]


@needs_corpus
@pytest.mark.parametrize("path", DEVICE_CASES, ids=lambda p: p.stem)
def test_cache_key_model_string_from_device(path):
    device_mod = pytest.importorskip("fusegen.device")
    dev = device_mod.from_target_config_text(path.read_text())
    got, want = device_mod.model_string(dev), _index()[path.name]
    assert got == want
    assert make_key_model(dev) == want


def make_key_model(dev) -> str:
    from fusegen.cache.key import model_string_for

    return model_string_for(dev)


@needs_corpus
def test_cache_key_hlo_version_50():
    parser = pytest.importorskip("fusegen.hlo.parser")
    path = CASES_DIR / "cache_key_hlo__kDotFusionHloText.hlo"
    module = parser.parse_module(path.read_text(), str(path))
    fusion = module.entry.root
    key = make_key(fusion, "CUDA: 9.0, Cores: 132")
    assert CURRENT_VERSION == 50 and "version=50" in key.to_string()
    k0 = make_key(fusion, "CUDA: 9.0, Cores: 132", version=0)
    k1 = make_key(fusion, "CUDA: 9.0, Cores: 132", version=1)
    assert k0 != k1 and k0.digest != k1.digest
    # The fused computation, canonically: tmp_<n> names, operand shapes, no instruction names.
    assert canonical_hlo(fusion).splitlines() == [
        "fusion kind=kCustom backend=",
        "fused_computation {",
        "  tmp_0 = f16[1,16,17,3]{3,2,1,0} parameter(0)",
        "  tmp_1 = f16[16,51]{1,0} bitcast(f16[1,16,17,3]{3,2,1,0} tmp_0)",
        "  tmp_2 = s8[16,17,3]{2,1,0} parameter(1)",
        "  tmp_3 = s8[51,16]{0,1} bitcast(s8[16,17,3]{2,1,0} tmp_2)",
        "  tmp_4 = f16[51,16]{0,1} convert(s8[51,16]{0,1} tmp_3)",
        "  tmp_5 = f16[16,16]{1,0} dot(f16[16,51]{1,0} tmp_1, f16[51,16]{0,1} tmp_4), lhs_contracting_dims={1}, "
        "rhs_contracting_dims={0}",
        "  ROOT tmp_6 = f16[1,16,16]{2,1,0} bitcast(f16[16,16]{1,0} tmp_5)",
        "}",
    ]
