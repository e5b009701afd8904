"""PickBestConfig, the BufferComparator check, failure kinds and ``fusegen tune --replay``.

Corpus: ``xla/cases/pick_best_config__*.json`` (xla/backends/autotuner/config_selector_test.cc).
"""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
from click.testing import CliRunner

from conftest import CORPUS
from fusegen.autotuning.clustering import buffers_match
from fusegen.autotuning.selection import (AutotuneError, Failure, FailureKind, ProfileResult,
                                          pick_best_config)
from fusegen.cli.tune import tune

CASES = sorted((CORPUS / "xla" / "cases").glob("pick_best_config__*.json")) if CORPUS.exists() else []


def _profiles(case: dict) -> list[ProfileResult]:
    out = []
    for p in case["profiles"]:
        failure = Failure(FailureKind.parse(p["failure"]), "from the test") if p.get("failure") else None
        out.append(ProfileResult(p["name"], float(p["dur_us"]), int(p.get("scratch", 0)), failure))
    return out


@pytest.mark.skipif(not CASES, reason="shared corpus (xla/cases/pick_best_config__*.json) not found")
@pytest.mark.parametrize("path", CASES, ids=lambda p: p.stem)
def test_pick_best_config_corpus(path):
    case = json.loads(path.read_text())
    profiles = _profiles(case)
    exp = case["expected"]
    if "error" in exp:
        with pytest.raises(AutotuneError) as ei:
            pick_best_config(profiles, case["window_us"])
        assert ei.value.code == exp["error"]
        assert ei.value.message.startswith(exp["message_prefix"])
        n_failed = sum(1 for p in profiles if p.failed)
        assert f"\nFailures ({n_failed}):\n" in ei.value.message
        for p in profiles:
            assert p.name in ei.value.message
    else:
        sel = pick_best_config(profiles, case["window_us"])
        assert sel.result.name == exp["name"]
        assert sel.result.scratch_bytes == exp["scratch"]


def test_corpus_has_the_pick_best_config_cases():
    if not CORPUS.exists():
        pytest.skip("shared corpus not found")
    assert {p.stem.split("__")[1] for p in CASES} >= {"FailsWhenAllConfigsFail", "IgnoresScratchBytesOutsideWindow"}


def test_fewer_scratch_bytes_within_window_wins_and_logs_both(caplog):
    profiles = [ProfileResult("fast", 10.0, 4096), ProfileResult("lean", 11.5, 0), ProfileResult("slow", 20.0, 0)]
    with caplog.at_level(logging.DEBUG, logger="fusegen.autotuning"):
        sel = pick_best_config(profiles, 2.0)
    assert (sel.result.name, sel.index, sel.fastest_index, sel.tie_break) == ("lean", 1, 0, True)
    line = [r.getMessage() for r in caplog.records if "PickBestConfig" in r.getMessage()]
    assert len(line) == 1 and "lean" in line[0] and "fast" in line[0]


def test_no_tie_break_log_when_fastest_is_leanest(caplog):
    profiles = [ProfileResult("fast", 10.0, 0), ProfileResult("other", 11.0, 0)]
    with caplog.at_level(logging.DEBUG, logger="fusegen.autotuning"):
        sel = pick_best_config(profiles)
    assert sel.result.name == "fast" and not sel.tie_break
    assert not [r for r in caplog.records if "PickBestConfig" in r.getMessage()]


def test_equal_scratch_within_window_goes_to_shorter_duration():
    profiles = [ProfileResult("a", 10.5, 100), ProfileResult("b", 10.0, 200), ProfileResult("c", 10.2, 100)]
    sel = pick_best_config(profiles, 2.0)
    assert sel.result.name == "c"  # scratch 100 beats 200; among scratch 100, 10.2 < 10.5


def test_window_edge_is_inclusive_and_failed_profiles_ignored():
    failed = ProfileResult("broken", 1.0, 0, Failure(FailureKind.EXECUTION_FAILED, "boom"))
    profiles = [failed, ProfileResult("fast", 10.0, 64), ProfileResult("edge", 12.0, 0)]
    assert pick_best_config(profiles, 2.0).result.name == "edge"
    assert pick_best_config(profiles, 1.999).result.name == "fast"


def test_all_failed_message_lists_each_failure():
    profiles = [ProfileResult("x", failure=Failure(FailureKind.COMPILATION_FAILED, "too much smem")),
                ProfileResult("y", failure=Failure(FailureKind.WRONG_RESULTS, "disagrees"))]
    with pytest.raises(AutotuneError) as ei:
        pick_best_config(profiles)
    assert ei.value.code == "NotFound"
    assert ei.value.message == ("All configs failed during profiling.\nFailures (2):\n"
                                "x: COMPILATION FAILED: too much smem\ny: WRONG RESULTS: disagrees")


@pytest.mark.parametrize("text,kind", [("kCompilationFailed", FailureKind.COMPILATION_FAILED),
                                       ("EXECUTION_FAILED", FailureKind.EXECUTION_FAILED),
                                       ("REDZONE CHECK FAILED", FailureKind.REDZONE_CHECK_FAILED),
                                       ("kWrongResults", FailureKind.WRONG_RESULTS),
                                       ("WRONG_RESULT", FailureKind.WRONG_RESULTS)])
def test_failure_kind_spellings(text, kind):
    assert FailureKind.parse(text) is kind


def test_failure_kind_unknown_names_valid_ones():
    with pytest.raises(ValueError, match="COMPILATION_FAILED"):
        FailureKind.parse("kTimedOut")


def test_buffer_comparator_relative_tolerance():
    a = np.array([1.0, 100.0, -3.0], np.float32)
    # |a-b| / (max(|a|,|b|) + 1): 0.19/2.19 = 0.087 < 0.1 matches; 0.25/2.25 = 0.111 does not.
    assert buffers_match(a, np.array([1.19, 100.0, -3.0], np.float32), 0.1)
    assert not buffers_match(a, np.array([1.25, 100.0, -3.0], np.float32), 0.1)
    assert buffers_match(a, a * 1.05, 0.1) and not buffers_match(a, a * 1.5, 0.1)


def test_buffer_comparator_nan_inf_bool_and_size():
    nan = np.array([np.nan, 1.0], np.float32)
    assert buffers_match(nan, nan.copy())
    assert not buffers_match(nan, np.array([0.0, 1.0], np.float32))
    h = np.array([np.inf], np.float16)
    assert buffers_match(h, np.array([65504.0], np.float16))  # inf compared as the largest finite f16
    assert not buffers_match(np.array([True, False]), np.array([True, True]))
    assert not buffers_match(np.zeros(3), np.zeros(4))
    assert buffers_match([np.ones(2), np.zeros(2)], [np.ones(2), np.zeros(2)])


def _record(tmp_path, record: dict):
    p = tmp_path / "record.json"
    p.write_text(json.dumps(record))
    return p


def test_replay_cli_json_matches_xla_semantics(tmp_path):
    out = [1.0, 2.0, 3.0]
    record = {"window_us": 2, "rtol": 0.1, "check_correctness": True, "candidates": [
        {"name": "lib_algo0", "backend": "cublaslt", "trusted": True, "duration_us": 30.0, "scratch_bytes": 4096,
         "failure": None, "output": out},
        {"name": "triton_64x64", "backend": "triton", "trusted": False, "duration_us": 20.0, "scratch_bytes": 0,
         "failure": None, "output": out},
        {"name": "triton_wrong", "backend": "triton", "trusted": False, "duration_us": 5.0, "scratch_bytes": 0,
         "failure": None, "output": [2.0, 4.0, 6.0]},
        {"name": "triton_big_smem", "backend": "triton", "trusted": False, "duration_us": 0, "scratch_bytes": 0,
         "failure": "COMPILATION_FAILED", "output": None},
        {"name": "triton_oob", "backend": "triton", "trusted": False, "duration_us": 1.0, "scratch_bytes": 0,
         "failure": "REDZONE_CHECK_FAILED", "output": None},
    ]}
    res = CliRunner().invoke(tune, ["--replay", str(_record(tmp_path, record)), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.output) == {"winner": "triton_64x64", "error": None, "failures": {
        "triton_wrong": "WRONG_RESULTS", "triton_big_smem": "COMPILATION_FAILED", "triton_oob": "REDZONE_CHECK_FAILED"}}
    text = CliRunner().invoke(tune, ["--replay", str(_record(tmp_path, record))])
    assert "winner: triton_64x64" in text.output
    assert "triton_wrong: WRONG RESULTS: Output disagrees with winning cluster (member of cluster -1 of 1" in text.output


def test_replay_cli_all_failed_exits_1_with_xla_message(tmp_path):
    record = {"candidates": [
        {"name": "a", "trusted": True, "duration_us": 1, "failure": "EXECUTION_FAILED"},
        {"name": "b", "trusted": True, "duration_us": 1, "failure": "kRedzoneCheckFailed"}]}
    res = CliRunner().invoke(tune, ["--replay", str(_record(tmp_path, record)), "--json"])
    assert res.exit_code == 1
    got = json.loads(res.output)
    assert got["winner"] is None and got["error"].startswith("All configs failed during profiling.\nFailures (2):")
    assert got["failures"] == {"a": "EXECUTION_FAILED", "b": "REDZONE_CHECK_FAILED"}


def test_replay_tie_break_and_no_compiled(tmp_path):
    rec = {"check_correctness": False, "candidates": [
        {"name": "fast", "duration_us": 10.0, "scratch_bytes": 1 << 20},
        {"name": "lean", "duration_us": 11.0, "scratch_bytes": 0}]}
    res = CliRunner().invoke(tune, ["--replay", str(_record(tmp_path, rec))])
    assert res.exit_code == 0 and "winner: lean" in res.output and "fastest, fast" in res.output
    rec = {"candidates": [{"name": "a", "failure": "COMPILATION_FAILED"}, {"name": "b", "failure": "COMPILATION_FAILED"}]}
    res = CliRunner().invoke(tune, ["--replay", str(_record(tmp_path, rec)), "--json"])
    assert json.loads(res.output)["error"] == "No candidates could be compiled."


@pytest.mark.parametrize("record,needle", [
    ({"candidates": []}, "candidates must be a non-empty list"),
    ({"candidates": [{"name": "a", "failure": "WRONG_RESULTS"}]}, "is WRONG_RESULTS but has no output to recompute"),
    ({"candidates": [{"name": "a", "output": [1]}, {"name": "a", "output": [1]}]}, "appears twice"),
    ({"candidates": [{"name": "a"}, {"name": "b", "output": [1]}]}, "has no output but check_correctness is true"),
    ({"rtol": -1, "candidates": [{"name": "a", "output": [1]}]}, "rtol must be a non-negative number"),
])
def test_replay_bad_record_is_one_line_error(tmp_path, record, needle):
    p = _record(tmp_path, record)
    res = CliRunner().invoke(tune, ["--replay", str(p)])
    assert res.exit_code == 2
    assert needle in res.output and str(p) in res.output
    assert "Traceback" not in res.output


def test_replay_says_where_the_recorded_times_came_from(tmp_path):
    """A record of a tuning without the GPU holds estimates: the replay says so (text and --json 'source')."""
    from fusegen.cache import provenance
    from fusegen.perf import MODEL_VERSION

    src = provenance.estimated("NVIDIA H200 141GB HBM3e").to_json()
    label = f"estimated by fusegen.perf v{MODEL_VERSION}"
    record = {"check_correctness": False, "source": src, "candidates": [
        {"name": "a", "trusted": False, "duration_us": 6.7, "failure": None},
        {"name": "b", "trusted": False, "duration_us": 19.5, "failure": None}]}
    res = CliRunner().invoke(tune, ["--replay", str(_record(tmp_path, record)), "--json"])
    assert res.exit_code == 0 and json.loads(res.output)["source"]["label"] == label
    text = CliRunner().invoke(tune, ["--replay", str(_record(tmp_path, record))]).output
    assert text.splitlines()[:2] == ["winner: a", f"  (times: {label})"]
