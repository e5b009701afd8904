"""Launch limits (``fusegen.codegen.launch_limits``): what CUDA would refuse, found before a launch.

The registers of a compiled kernel are read from its cubin and checked against what ``cuobjdump
--dump-resource-usage`` (the Triton wheel's) prints for the same cubin; the limits are the H200's
(``fusegen.device``: 1024 threads, 65536 registers a block, 232448 bytes of opt-in shared memory).
"""

from __future__ import annotations

import os
import re
import subprocess

import pytest

from fusegen.codegen.kernel import EmittedFusion, KernelSource, LaunchDimensions
from fusegen.codegen.launch_limits import compiled_problems, cubin_registers, launch_problems
from fusegen.device import get_device

H200 = get_device("h200")


def _kernel(grid=(4,), warps=4, smem=0) -> KernelSource:
    return KernelSource(name="k", source="", entry="k", params=(),
                        launch=LaunchDimensions(grid=grid, num_warps=warps, shared_memory_bytes=smem))


def test_launch_problems_name_each_limit():
    ok = EmittedFusion(emitter="E", kernels=(_kernel(),))
    assert launch_problems(ok, H200) == []
    bad = EmittedFusion(emitter="E", kernels=(_kernel(grid=(1, 70000), warps=64, smem=300_000),))
    assert launch_problems(bad, H200) == [
        "kernel k: grid[1]=70000 outside [1, 65535]",
        "kernel k: num_warps=64 gives 2048 threads per block, limit 1024",
        "kernel k: 300000 bytes of shared memory, limit 232448"]


def test_compiled_problems_registers_and_shared_memory():
    k = _kernel(warps=16)  # 512 threads
    assert compiled_problems([k], [1024], [128], H200) == []  # 128 x 512 = 65536: exactly the limit
    assert compiled_problems([k], [0], [129], H200) == [
        "kernel k uses 129 registers per thread x 512 threads = 66048 registers per block, limit 65536"]
    assert compiled_problems([k], [0], [300], H200) == ["kernel k uses 300 registers per thread, limit 255"]
    assert compiled_problems([k], [240_000], [32], H200) == [
        "kernel k compiled to 240000 bytes of shared memory, limit 232448"]
    assert cubin_registers(b"not an elf") == 0


def test_registers_read_from_the_cubin_agree_with_cuobjdump(tmp_path):
    triton = pytest.importorskip("triton")
    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        pytest.skip(f"the Triton wheel has no cuobjdump at {tool}")
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from fusegen.codegen import triton_runtime
    from fusegen.codegen.kernel import KernelParam
    from fusegen.hlo.ir import Shape

    src = ("import triton\nimport triton.language as tl\n\n@triton.jit\ndef k(x_ptr, y_ptr, BLOCK: tl.constexpr):\n"
           "    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n    x = tl.load(x_ptr + i)\n"
           "    tl.store(y_ptr + i, tl.exp(x) * tl.sin(x) + tl.sqrt(x * x + 1.0))\n")
    s = Shape("f32", (1024,))
    ks = KernelSource(name="k", source=src, entry="k", params=(KernelParam("operand", 0, s), KernelParam("output", 0, s)),
                      constexprs={"BLOCK": 256}, launch=LaunchDimensions(grid=(4,), num_warps=4))
    res = triton_runtime.compile_for_target(ks)  # what run's sm_90 compile records
    ck = triton.compile(ASTSource(fn=triton_runtime.load_kernel(ks), signature=triton_runtime.signature_of(ks),
                                  constexprs={"BLOCK": 256}), target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    cubin = tmp_path / "k.cubin"
    cubin.write_bytes(ck.asm["cubin"])
    out = subprocess.run([tool, "--dump-resource-usage", str(cubin)], capture_output=True, text=True, check=True).stdout
    regs = int(re.search(r"REG:(\d+)", out).group(1))
    assert res.registers == regs == cubin_registers(ck.asm["cubin"]) and regs > 0, out
