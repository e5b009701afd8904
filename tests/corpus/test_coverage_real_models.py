"""Coverage (issue 10): no fusion of a real model runs on the host backend.

The programs are keras-hub / flax / equinox models compiled by XLA for an H200 (``tests/data/real_models``) and the
shared JAX corpus (``../shared/corpus/jax``). The fast test plans every fusion (analysis, dispatch, emit) as
``fusegen run`` does and prints the host count; the slow one runs the real models end to end and checks every
kernel against the reference evaluator.
"""

from __future__ import annotations

import pytest

from _backend_helpers import device, plugin_manager
from conftest import REPO, SHARED
from fusegen.hlo.parser import parse_modules
from fusegen.passes.pipeline import optimize_if_needed
from fusegen.runtime.executor import Executor
from fusegen.runtime.inputs import load_inputs
from fusegen.verify.judged_run import run_module

REAL_MODELS = sorted((REPO / "tests" / "data" / "real_models").glob("*.hlo"))
CORPUS_JAX = sorted((SHARED / "corpus" / "jax").glob("*.hlo"))


def _modules(path, pm, dev):
    mods = parse_modules(path.read_text(), str(path))
    for m in mods:
        optimize_if_needed(m, pm=pm, device=dev)
    return mods


def _top_level_fusions(module):
    fused = {id(i.fused_computation) for i in module.all_instructions() if i.opcode == "fusion"}
    return [i for c in module.computations if id(c) not in fused for i in c.instructions if i.opcode == "fusion"]


def _host_fusions(paths):
    pm, dev = plugin_manager(), device()
    total, host = 0, []
    for path in paths:
        for m in _modules(path, pm, dev):
            ex = Executor(m, device=dev, pm=pm, compile_kernels=False)
            for f in _top_level_fusions(m):
                _, rep = ex.plan_fusion(f)
                total += 1
                if rep.backend == "host":
                    host.append(f"{path.name}: {f.name} ({rep.kind}): {rep.reason}")
    return total, host


def test_no_fusion_of_a_real_model_runs_on_the_host():
    assert len(REAL_MODELS) == 16
    total, host = _host_fusions(REAL_MODELS)
    print(f"\nreal models: {len(REAL_MODELS)} programs, {total} fusions, {len(host)} on the host")
    assert total == 331
    assert host == []


def test_no_fusion_of_the_jax_corpus_runs_on_the_host():
    if not CORPUS_JAX:
        pytest.skip("../shared/corpus/jax is absent")
    total, host = _host_fusions(CORPUS_JAX)
    print(f"\ncorpus/jax: {len(CORPUS_JAX)} programs, {total} fusions, {len(host)} on the host")
    assert host == []


@pytest.mark.slow
@pytest.mark.parametrize("path", REAL_MODELS, ids=lambda p: p.name.split(".")[0])
def test_real_model_runs_every_fusion_on_its_kernel(path):
    pm, dev = plugin_manager(), device()
    (m,) = _modules(path, pm, dev)
    # the program's real weights and inputs: seeded random ones drive bert's and resnet's outputs to NaN
    # everywhere, a vacuous comparison (not ok)
    npz = path.with_name(path.name.removesuffix(".h200_opt.hlo") + ".inputs.npz")
    _, rep = run_module(m, load_inputs(m, str(npz)), device=dev, pm=pm, compile_kernels=False)
    bad = [(f.name, f.backend, f.status, f.reason) for f in rep.fusions if f.backend == "host" or f.status != "ok"]
    assert bad == []
    assert rep.ok
