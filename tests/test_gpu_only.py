"""GPU-only checks: cuBLASLt algorithms, cuDNN plans, Triton kernels on the device, emitter kernels vs the
reference. Every test skips on a machine without a CUDA GPU, saying why; ``scripts/gpu-check`` runs them."""

from __future__ import annotations

import numpy as np
import pytest

from _backend_helpers import device, plugin_manager
from conftest import corpus_path
from gpu_presence import _no_gpu
from fusegen.hlo.parser import parse_file, parse_modules

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _need_gpu():
    why = _no_gpu()
    if why:
        pytest.skip(f"GPU-only: {why}")


class _Dev:
    """A CuPy array as a Triton launch argument (``data_ptr`` + numpy ``dtype``)."""

    def __init__(self, arr):
        self.arr = arr
        self.dtype = arr.dtype

    def data_ptr(self) -> int:
        return self.arr.data.ptr


def test_cublaslt_heuristic_algorithms_and_execution():
    import cupy as cp

    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen_plugins.backends import cublaslt

    assert cublaslt.unavailable_reason() is None, cublaslt.unavailable_reason()
    m = parse_file(corpus_path("jax", "gpu_mlp_bf16.notritongemm.h100_opt.hlo"))
    call = next(i for i in m.entry.instructions if i.opcode == "custom-call")
    cfgs = cublaslt.CublasLtBackend(max_algorithms=8).get_supported_configs(call)
    assert 1 <= len(cfgs) <= 8 and all(c.values["workspace_bytes"] >= 0 for c in cfgs)
    rng = np.random.default_rng(0)
    import ml_dtypes

    ops = [rng.standard_normal(o.shape.dimensions).astype(ml_dtypes.bfloat16) for o in call.operands]
    ref = evaluate_instruction(call, ops)[0]
    out = cublaslt.execute_on_gpu(call, [cp.asarray(o) for o in ops], algorithm=0).get()
    np.testing.assert_allclose(out.astype(np.float32), np.asarray(ref, np.float32), rtol=2e-2, atol=2e-1)


def test_cudnn_execution_plans():
    cudnn = pytest.importorskip("cudnn")
    from fusegen_plugins.backends.cudnn import CudnnBackend, unavailable_reason

    assert unavailable_reason() is None, unavailable_reason()
    mods = parse_modules(corpus_path("xla", "cases", "cudnn__F32DotGraphIsConvertedCorrectly.hlo").read_text())
    f = next(i for m in mods for i in m.all_instructions() if i.opcode == "fusion")
    cfgs = CudnnBackend(max_plans=5).get_supported_configs(f)
    assert 1 <= len(cfgs) <= 5 and all("workspace_bytes" in c.values for c in cfgs)
    del cudnn


def _launch(ks, bufs):
    import triton

    from fusegen.codegen import triton_runtime

    fn = triton_runtime.load_kernel(ks)
    fn[ks.launch.grid](*[_Dev(b) for b in bufs], num_warps=ks.launch.num_warps, num_stages=ks.num_stages,
                       **triton_runtime.launch_options(ks), **ks.constexprs)
    del triton


@pytest.mark.parametrize("cfg_index", [0, 9, 21])
def test_triton_gemm_kernel_on_device(cfg_index):
    import cupy as cp

    from fusegen.codegen import triton_runtime
    from fusegen.codegen_backend import Config
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen.hlo.layout_util import from_physical, to_physical
    from fusegen.passes.pipeline import optimize_if_needed
    from fusegen.runtime.compare import compare
    from fusegen_plugins.backends.triton import TritonBackend
    from fusegen_plugins.backends.triton_configs import default_configs

    m = parse_file(corpus_path("jax", "gelu_matmul.pre.hlo"))
    optimize_if_needed(m, pm=plugin_manager(), device=device())
    f = next(i for i in m.entry.instructions if i.fusion_backend_kind == "__triton_gemm")
    exe = TritonBackend((9, 0)).compile(f, Config("triton", default_configs((9, 0))[cfg_index].to_values()))
    (ks,) = exe.emitted.kernels
    rng = np.random.default_rng(cfg_index)
    ops = [rng.standard_normal(o.shape.dimensions).astype(np.float32) for o in f.operands]
    bufs = []
    for p in ks.params:
        if p.kind == "operand":
            bufs.append(cp.asarray(triton_runtime.to_storage(to_physical(ops[p.index], p.shape), p.shape.element_type)))
        elif p.kind == "output":
            bufs.append(cp.zeros(p.shape.numel, dtype=np.float32))
        else:
            bufs.append(cp.asarray(triton_runtime.to_storage(to_physical(np.asarray(p.value), p.shape),
                                                             p.shape.element_type)))
    _launch(ks, bufs)
    out_i = next(k for k, p in enumerate(ks.params) if p.kind == "output")
    out = from_physical(bufs[out_i].get(), f.shape)
    assert compare(out, np.asarray(evaluate_instruction(f, ops)), "f32").ok


def test_block_level_softmax_on_device():
    import cupy as cp

    from fusegen.codegen import triton_runtime
    from fusegen.evaluator.evaluator import evaluate_instruction
    from fusegen_plugins.backends.triton import _Analysis
    from fusegen_plugins.backends.triton_block_level import TritonBlockLevelFusion

    m = parse_file(corpus_path("jax", "gpu_softmax.default.h100_opt.hlo"))
    f = m.entry.root
    (ks,) = TritonBlockLevelFusion(_Analysis(f)).emit().kernels
    x = np.random.default_rng(0).standard_normal((64, 4096)).astype(np.float32)
    xin, out = cp.asarray(x.reshape(-1)), cp.zeros(64 * 4096, dtype=np.float32)
    _launch(ks, [xin if p.kind == "operand" else out for p in ks.params])
    np.testing.assert_allclose(out.get().reshape(64, 4096), evaluate_instruction(f, [x]), rtol=1e-5, atol=1e-6)
    del triton_runtime


def test_shipped_custom_kernel_ptx_loads_on_device():
    import cupy as cp

    from fusegen_plugins.backends import custom_fusion as cf

    x = cp.arange(1000, dtype=cp.float32)
    s = cp.asarray([2.5], dtype=cp.float32)
    o = cp.zeros_like(x)
    import tempfile

    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as fh:
        fh.write(cf.scaled_copy_ptx())
    rm = cp.RawModule(path=fh.name)
    k = rm.get_function("scaled_copy")
    ptx = cf.scaled_copy_ptx()
    sig = ptx[ptx.index(".entry scaled_copy"):].split(")", 1)[0]
    extra = [np.uint64(0)] * (sig.count(".param") - 4)  # Triton's trailing scratch pointers
    k((1,), (128,), (x, s, o, np.int32(1000), *extra), shared_mem=0)
    np.testing.assert_allclose(o.get(), np.arange(1000, dtype=np.float32) * 2.5)
