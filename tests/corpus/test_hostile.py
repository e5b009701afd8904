"""Every file of ../shared/corpus/hostile/ gets a one-line error and exit 2 (or runs correctly), within 10 s and
1 GB of address space, run as a user would: the CLI in a child process under an ``RLIMIT_AS`` limit."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

HOSTILE = Path(__file__).parents[2].parent / "shared" / "corpus" / "hostile"
needs_hostile = pytest.mark.skipif(not HOSTILE.is_dir(), reason=f"hostile corpus not found at {HOSTILE}")
LIMIT_BYTES = 1 << 30
LIMIT_SECONDS = 10.0

#: file -> (expected exit code, text the one-line error must contain); exit 0 means the module is valid
#: and must run and match the reference.
EXPECTED = {
    "parse_int_digits.hlo": (2, "has 5000 digits; HLO integers are int64"),
    "parse_bad_hex_escape.hlo": (2, "\\x escape without hex digits"),
    "run_param_number_out_of_range.hlo": (2, "parameter(1) of %p: computation 'e' has 1 parameter"),
    "transpose_dims_out_of_range.hlo": (2, "dimensions={0,5} is not a permutation"),
    "giant.hlo": (2, "more than the limit of"),
    "while_huge.hlo": (2, "runs 2,000,000,000 iterations (static trip count)"),
    "deepcall.hlo": (0, "outputs vs reference: match"),
    "small.hlo": (0, "outputs vs reference: match"),
}


def _limit_memory():  # runs in the child before exec
    import resource

    resource.setrlimit(resource.RLIMIT_AS, (LIMIT_BYTES, LIMIT_BYTES))


def fusegen_limited(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    env = dict(os.environ, COLUMNS="200")
    env.pop("FUSEGEN_DEBUG", None)
    t0 = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "fusegen.cli", *args], capture_output=True, text=True, env=env,
                       timeout=LIMIT_SECONDS * 3, preexec_fn=_limit_memory)
    return p, time.monotonic() - t0


def _assert_one_line_error(p: subprocess.CompletedProcess, code: int, needle: str) -> None:
    assert p.returncode == code, (p.returncode, p.stderr[-2000:])
    assert "Traceback" not in p.stderr and "internal error" not in p.stderr, p.stderr[-2000:]
    lines = [x for x in p.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, p.stderr
    assert needle in lines[0], lines[0]
    assert lines[0].startswith("fusegen: error:") or ": error: " in lines[0], lines[0]


def hostile_inputs() -> list[str]:
    if not HOSTILE.is_dir():
        return []
    return sorted(p.name for p in HOSTILE.iterdir() if p.suffix in (".hlo", ".py"))


@needs_hostile
def test_every_hostile_file_has_an_expectation():
    # A new hostile input must get its own expected behaviour here (and a fix), not pass by omission.
    assert set(hostile_inputs()) == set(EXPECTED) | {"make_npz_bomb.py"}


@needs_hostile
@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_hostile_module_run(name):
    code, needle = EXPECTED[name]
    p, seconds = fusegen_limited("run", "--no-compile", str(HOSTILE / name))
    assert seconds < LIMIT_SECONDS, f"{name} took {seconds:.1f} s"
    if code == 0:
        assert p.returncode == 0, p.stderr[-2000:]
        assert needle in p.stdout
    else:
        _assert_one_line_error(p, code, needle)


@needs_hostile
@pytest.mark.parametrize("name", [n for n, (c, _) in sorted(EXPECTED.items()) if c == 2 and n.startswith(("parse",
                                                                                                       "run_", "transpose"))])
def test_hostile_module_explain(name):
    code, needle = EXPECTED[name]
    p, seconds = fusegen_limited("explain", str(HOSTILE / name))
    assert seconds < LIMIT_SECONDS
    _assert_one_line_error(p, code, needle)


@pytest.fixture(scope="module")
def npz_bomb(tmp_path_factory) -> Path:
    if not HOSTILE.is_dir():
        pytest.skip(f"hostile corpus not found at {HOSTILE}")
    out = tmp_path_factory.mktemp("bomb") / "bomb.npz"
    # 2e9 bytes of zeros: twice the child's address-space limit once inflated; the script's default (6e9)
    # behaves the same and takes three times as long to write.
    subprocess.run([sys.executable, str(HOSTILE / "make_npz_bomb.py"), str(out), "2e9"], check=True, timeout=120)
    return out


@needs_hostile
def test_npz_bomb_is_refused_from_its_header(npz_bomb):
    assert npz_bomb.stat().st_size < 20 << 20
    p, seconds = fusegen_limited("run", "--no-compile", str(HOSTILE / "small.hlo"), "--inputs", str(npz_bomb))
    assert seconds < LIMIT_SECONDS
    _assert_one_line_error(p, 2, "array 'p0' for parameter 0 (%a) has shape [2000000000], expected [4]")


@needs_hostile
def test_giant_runs_nothing_but_is_refused_with_the_estimate_and_max_memory_can_lower_the_limit(tmp_path):
    p, _ = fusegen_limited("run", "--no-compile", str(HOSTILE / "giant.hlo"))
    # two f32[100000,100000] arrays in, the fusion's value kept by kernels and reference: >= 74.5 GiB
    assert "needs an estimated" in p.stderr and "GiB" in p.stderr
    p, _ = fusegen_limited("run", "--no-compile", str(HOSTILE / "small.hlo"), "--max-memory", "16")
    _assert_one_line_error(p, 2, "more than the limit of 16 B (raise it with --max-memory)")
    p, _ = fusegen_limited("run", "--no-compile", str(HOSTILE / "small.hlo"), "--max-memory", "lots")
    _assert_one_line_error(p, 2, "--max-memory: not a size: 'lots'")


@needs_hostile
def test_while_budget_and_timeout_from_the_command_line(tmp_path):
    text = (HOSTILE / "while_huge.hlo").read_text()
    ten = tmp_path / "w10.hlo"
    ten.write_text(text.replace("2000000000", "10"))
    p, _ = fusegen_limited("run", "--no-compile", str(ten))
    assert p.returncode == 0 and "outputs vs reference: match" in p.stdout, p.stderr
    p, _ = fusegen_limited("run", "--no-compile", str(ten), "--max-while-iterations", "9")
    _assert_one_line_error(p, 2, "runs 10 iterations (static trip count), more than the budget of 9")
    slow = tmp_path / "w1e6.hlo"
    slow.write_text(text.replace("2000000000", "1000000"))
    p, seconds = fusegen_limited("run", "--no-compile", str(slow), "--timeout", "1")
    _assert_one_line_error(p, 2, "the run took longer than --timeout 1 s")
    assert seconds < LIMIT_SECONDS
