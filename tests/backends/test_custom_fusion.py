"""The custom-fusion backend: the dynamic_slice_fusion pattern's CPU path and the example shipped kernel."""

from __future__ import annotations

import numpy as np
import pytest

from _backend_helpers import plugin_manager
from conftest import corpus_path
from fusegen.evaluator.evaluator import evaluate_instruction
from fusegen.hlo.dot_numerics import tf32_round
from fusegen.hlo.parser import parse_modules, parse_module
from fusegen.runtime.inputs import make_inputs
from fusegen.verify.judged_run import run_module
from fusegen_plugins.backends import custom_fusion as cf


def _fusion(name):
    m = parse_modules(corpus_path("xla", "cases", name).read_text(), name)[0]
    return m, next(i for i in m.all_instructions() if i.opcode == "fusion")


def test_cublaslt_dynamic_slice_fusion_runs_on_its_cpu_path():
    m, f = _fusion("custom__CublasLtMatmulWithBitcastSlicedOperand.hlo")
    k = cf.find_kernel(f)
    assert k is not None and k.name == "dynamic_slice_fusion"
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 4)).astype(np.float32)
    rhs = rng.standard_normal((1, 4)).astype(np.float32)
    for start, row in ((2, 2), (-5, 0), (9, 3)):  # out-of-range starts clamp into [0, 3]
        out = k.run_cpu(f, [x, rhs, np.int32(start)])
        # an f32 cuBLAS GEMM of default precision: tf32, as XLA's cuBLAS computes it (operands rounded)
        np.testing.assert_allclose(out, np.outer(tf32_round(x[row]), tf32_round(rhs[0])), rtol=1e-6)
        np.testing.assert_allclose(out, evaluate_instruction(f, [x, rhs, np.int32(start)]), rtol=1e-6)
    # inside the while loop of the module, through the executor (custom_fusion backend, not the host)
    _, rep = run_module(m, make_inputs(m, 0), pm=plugin_manager(), compile_kernels=False)
    assert rep.ok


def test_unrunnable_heroes_are_not_claimed():
    _, f = _fusion("custom__SingleOutputOneDUS.hlo")
    assert cf.config_name(f) == "dynamic_slice_fusion"
    assert cf.find_kernel(f) is None  # __xla_test$$scaled_memset has no CPU semantics here


SCALED = """HloModule m
c {
  x = f32[1000] parameter(0)
  s = f32[] parameter(1)
  sb = f32[1000] broadcast(s), dimensions={}
  ROOT r = f32[1000] multiply(x, sb)
}
ENTRY e {
  x = f32[1000] parameter(0)
  s = f32[] parameter(1)
  ROOT f = f32[1000] fusion(x, s), kind=kCustom, calls=c,
    backend_config={"fusion_backend_config":{"kind":"__custom_fusion","custom_fusion_config":{"name":"fusegen.scaled_copy"}}}
}"""


def test_example_kernel_cpu_path_and_shipped_ptx():
    m = parse_module(SCALED)
    f = m.entry.root
    k = cf.find_kernel(f)
    assert k.name == cf.SCALED_COPY_NAME
    x = np.arange(1000, dtype=np.float32)
    np.testing.assert_array_equal(k.run_cpu(f, [x, np.float32(2.5)]), x * np.float32(2.5))
    ptx = cf.scaled_copy_ptx()
    assert ".entry scaled_copy" in ptx and ".target sm_90a" in ptx
    _, rep = run_module(m, make_inputs(m, 0), pm=plugin_manager(), compile_kernels=False)
    assert rep.ok and rep.fusions[0].backend == "custom_fusion"


def test_registry_is_open_to_plugins():
    calls = []
    kernel = cf.CustomKernel("test.noop", lambda f: True, lambda f, ops: calls.append(1) or ops[0])
    cf.register_custom_kernel(kernel)
    try:
        m = parse_module(SCALED.replace("fusegen.scaled_copy", "test.noop"))
        assert cf.find_kernel(m.entry.root) is kernel
    finally:
        cf._REGISTRY.pop("test.noop", None)
    with pytest.raises(cf.CustomFusionError, match="no custom kernel registered"):
        cf._execute(parse_module(SCALED.replace("fusegen.scaled_copy", "nobody")).entry.root, [])
