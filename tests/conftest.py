"""Shared test fixtures: where the shared corpus lives, and a Triton cache inside the test tmp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent

# The tests mirror core's packages (tests/hlo, tests/emitters, ...; docs/layout.md). The helpers they share live
# here in tests/ (``pythonpath`` in pyproject.toml); no test module imports another (tests/test_layering.py).
# Test basenames are unique across the tree: pytest's default import mode needs that.

SHARED = REPO.parent / "shared"
CORPUS = SHARED / "corpus"

os.environ.setdefault("TRITON_CACHE_DIR", str(REPO / ".triton-cache"))
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")


def corpus_path(*parts: str) -> Path:
    """Path under ../shared/corpus; skips the test when the shared corpus is absent."""
    p = CORPUS.joinpath(*parts)
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return p


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.exists():
        pytest.skip(f"shared corpus not found at {CORPUS}")
    return CORPUS


@pytest.fixture(autouse=True)
def only_builtin_plugins(request, monkeypatch):
    """Every test sees fusegen's built-in plugins only, whatever else the venv has installed
    (``FUSEGEN_AUTOLOAD_DISTRIBUTIONS=fusegen``; subprocesses inherit it). A test marked ``third_party_plugins``
    sees every installed plugin; plugins a test names (``FUSEGEN_LOAD_PLUGINS``, ``enable``,
    ``--fusegen-plugin``) load either way."""
    if request.node.get_closest_marker("third_party_plugins") is None:
        monkeypatch.setenv("FUSEGEN_AUTOLOAD_DISTRIBUTIONS", "fusegen")
    else:
        monkeypatch.delenv("FUSEGEN_AUTOLOAD_DISTRIBUTIONS", raising=False)


#: Tests that took 2 s or more of one worker's time in a ``make test`` run on the 2-core machine (node ids,
#: written by ``scripts/slow-tests``): they count as ``slow`` so that ``make test`` stays near 3 minutes;
#: CI runs them (FUSEGEN_SLOW=1).
MEASURED_SLOW = Path(__file__).with_name("slow_tests.txt")


def _measured_slow() -> frozenset[str]:
    if not MEASURED_SLOW.exists() or os.environ.get("FUSEGEN_MEASURE_SLOW"):  # scripts/slow-tests measures all
        return frozenset()
    lines = (ln.split("#", 1)[0].strip() for ln in MEASURED_SLOW.read_text().splitlines())
    return frozenset(ln for ln in lines if ln)


def pytest_collection_modifyitems(config, items):
    """``slow`` tests (full corpus sweeps, every-config compiles, and the tests listed in ``slow_tests.txt``)
    run only with FUSEGEN_SLOW=1 (CI sets it)."""
    measured = _measured_slow()
    for item in items:
        if item.nodeid in measured:
            item.add_marker(pytest.mark.slow)
    if os.environ.get("FUSEGEN_SLOW", "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason="slow sweep; set FUSEGEN_SLOW=1 to run it (CI does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(scope="session")
def plugin_venv(tmp_path_factory) -> Path:
    """The python of a venv holding fusegen and the test plugin distributions of ``tests/plugin_packages``,
    pip-installed (``tests/plugin_venv.py``); built once per session (per xdist worker)."""
    from plugin_venv import make_plugin_venv

    return make_plugin_venv(tmp_path_factory.mktemp("plugin-venv"))
