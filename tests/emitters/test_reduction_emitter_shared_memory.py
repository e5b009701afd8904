"""Shared memory of fusegen's sm_90 row-reduction kernels against XLA's own kernels for the same fusions.

XLA's row reduction folds a row within a warp by shuffles when the row fits one warp and writes the result from the
row's lane 0; it declares shared memory (``.shared ... shared_N[bytes]`` in the kernel's PTX) only for a step across
warps. fusegen's kernels, compiled for sm_90 on the CPU (``compile_for_target``), must allocate the same: a reduced
value stored from a layout that spreads rows over one warp's lanes goes through a shared-memory conversion XLA's
kernel does not have. The kernels' values are checked against the reference evaluator in the interpreter.
"""

from __future__ import annotations

import re

import pytest

from fusion_harness import operands_and_reference, run_and_compare
from kernel_inspection import fusegen_kernel, xla_entry

from fusegen.codegen import triton_runtime

_SHARED = re.compile(r"^\s*\.shared\s+(?:\.align\s+\d+\s+)?\.b8\s+\w+\[(\d+)\]", re.M)


def xla_shared_bytes(entry_text: str) -> int:
    """Bytes of the ``.shared`` arrays one XLA kernel's PTX entry declares (XLA demotes them into the entry)."""
    return sum(int(n) for n in _SHARED.findall(entry_text))


def test_xla_shared_bytes_reads_demoted_declarations():
    text = ".entry k(\n)\n{\n\t.shared .align 4 .b8 shared_0[32];\n\t.shared .align 16 .b8 shared_1[4224];\n"
    assert xla_shared_bytes(text) == 4256
    assert xla_shared_bytes(".entry k()\n{\n\tld.shared.b32 %r1, [%rd1];\n") == 0


@pytest.mark.parametrize("module,fusion,kernel,xla_bytes", [
    # rows within one warp (XLA: shuffles only, no shared memory)
    ("new_row_reduce_short.h200_opt.hlo", "input_reduce_fusion.1", "input_reduce_fusion_1", 0),  # 100-wide, 2 steps
    ("new_row_reduce_short.h200_opt.hlo", "input_reduce_fusion.2", "input_reduce_fusion_2", 0),  # 2 rows a warp
    ("new_multi_row_reduce.h200_opt.hlo", "input_reduce_fusion.1", "input_reduce_fusion_1", 0),  # 4-wide rows
    ("new_row_reduce_long.h200_opt.hlo", "input_reduce_fusion", "input_reduce_fusion", 0),  # 400-wide, 7 steps
    ("gpu_multi_output.default.h200_opt.hlo", "input_multiply_reduce_fusion", "input_multiply_reduce_fusion", 0),
    ("new_softmax_argmax_odd.h200_opt.hlo", "input_reduce_fusion", "input_reduce_fusion", 0),  # variadic argmax
    # rows across warps: XLA's inter-warp scratch, the same size in fusegen's
    ("gpu_rowsum.default.h200_opt.hlo", "input_reduce_fusion", "input_reduce_fusion", 32),
    ("new_row_reduce_long.h200_opt.hlo", "input_reduce_fusion.1", "input_reduce_fusion_1", 64),
])
def test_row_reduction_shared_memory_is_xlas(module, fusion, kernel, xla_bytes):
    inst, m, ks = fusegen_kernel(module, fusion)
    assert xla_shared_bytes(xla_entry(module, kernel)) == xla_bytes  # the premise, read in XLA's PTX
    assert triton_runtime.compile_for_target(ks, pointer_alignment=16).shared_bytes == xla_bytes
    ops, ref = operands_and_reference(m, inst)
    run_and_compare(inst, ops, ref)
