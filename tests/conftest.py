"""Shared test fixtures: where the shared corpus lives, and a Triton cache inside the test tmp dir."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
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


def pytest_collection_modifyitems(config, items):
    """``slow`` tests (full corpus sweeps, every-config compiles) run only with FUSEGEN_SLOW=1 (CI sets it)."""
    if os.environ.get("FUSEGEN_SLOW", "") not in ("", "0"):
        return
    skip = pytest.mark.skip(reason="slow sweep; set FUSEGEN_SLOW=1 to run it (CI does)")
    for item in items:
        if "slow" in item.keywords:
            item.add_marker(skip)
