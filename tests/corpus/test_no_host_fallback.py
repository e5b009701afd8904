"""No fusion of an emitter kind falls back to the host backend anywhere in the shared corpus.

Plans (analysis, dispatch, emitter, kernel generation) every fusion of every corpus module, as
``fusegen run --json`` does before running; kernels themselves are run by the per-emitter tests.
"""

from __future__ import annotations

import pytest

from conftest import CORPUS

from fusegen.device import get_device
from fusegen.hlo.errors import HloParseError
from fusegen.hlo.parser import parse_modules
from fusegen.runtime.executor import Executor

EMITTER_KINDS = {"kLoop", "kReduction", "kTranspose", "kConcatenate", "kScatter", "kSort"}

FILES = sorted(p for p in CORPUS.glob("**/*.hlo")) if CORPUS.exists() else []

#: Fusions that still decline, with the reason (a fusion listed here that no longer declines fails).
KNOWN_HOST: dict[tuple[str, str], str] = {
    # inputs of XLA's indexing-analysis tests, not programs XLA's emitters compile:
    ("AllGatherFusionWithTranspose.hlo", "fusion"):
        "an all-gather over replica group {0,1} inside a kLoop fusion: a collective needs two devices",
    ("NestedDotFusionWithDynamicUpdateSlice.hlo", "fusion"):
        "an unstamped fusion whose dot reads nested kCustom fusions (Triton GEMM operands without the stamp)",
}


def plan_all(path):
    try:
        modules = parse_modules(path.read_text(), str(path))
    except HloParseError:
        return []  # the parser's own tests cover files that are malformed on purpose (B01, B02)
    rows = []
    for m in modules:
        ex = Executor(m, get_device("h200"), compile_kernels=False)
        for inst in m.fusion_instructions():
            _, rep = ex.plan_fusion(inst)
            rows.append(rep)
    return rows


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_emitter_kinds_get_kernels(path):
    for rep in plan_all(path):
        if rep.kind not in EMITTER_KINDS:
            continue
        key = (path.name, rep.name)
        if key in KNOWN_HOST:
            assert rep.backend == "host", f"{key} now gets a kernel: drop it from KNOWN_HOST"
            continue
        assert rep.backend in ("triton", "memcpy"), (path.name, rep.name, rep.kind, rep.reason)
