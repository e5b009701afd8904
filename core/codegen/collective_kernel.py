"""XLA's one-shot Triton all-reduce as a generated kernel over the N partitions' buffers.

An ``all-reduce`` / ``all-reduce-start`` whose ``collective_backend_config.kernel_strategy`` is
``KERNEL_STRATEGY_TRITON_ONE_SHOT`` is, on XLA:GPU, one Triton kernel that every rank launches over the
peers' buffers (``xla/backends/gpu/runtime/all_reduce.cc``, the one-shot strategy): each element is read from
every participant and combined with ``to_apply``. fusegen generates that kernel for the group (one input
pointer per participant, in group order, and the output), runs it in Triton's interpreter on the copies'
buffers (:mod:`fusegen.runtime.spmd`) and compiles it for sm_90 like every other kernel.

Served: one array operand of ``f32`` / ``f64`` / ``s32`` / ``u32`` / ``s64`` / ``u64`` (types whose loads need no
rounding step; narrower floats round after every combine and stay on the host) and a ``to_apply`` that is one
``add`` / ``multiply`` / ``maximum`` / ``minimum`` of its two parameters. Anything else runs on the host with
the same cross-partition semantics (:func:`one_shot_declines` says why).
"""

from __future__ import annotations

from typing import Any

import attrs
import numpy as np

from fusegen.codegen.kernel import KernelParam, KernelSource, LaunchDimensions
from fusegen.hlo.ir import Computation, Instruction

__all__ = ["ONE_SHOT", "kernel_strategy", "one_shot_declines", "one_shot_kernel", "run_one_shot"]

ONE_SHOT = "KERNEL_STRATEGY_TRITON_ONE_SHOT"
_TYPES = {"f32": "tl.float32", "f64": "tl.float64", "s32": "tl.int32", "u32": "tl.uint32", "s64": "tl.int64",
          "u64": "tl.uint64"}
_COMBINE = {"add": "{a} + {b}", "multiply": "{a} * {b}",
            "maximum": "tl.maximum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)",
            "minimum": "tl.minimum({a}, {b}, propagate_nan=tl.PropagateNan.ALL)"}
BLOCK = 1024  # elements per program on the GPU (4 warps, 8 per thread)
INTERPRET_BLOCK = 1 << 16  # the interpreter's cost is per program


def kernel_strategy(inst: Instruction) -> str | None:
    """``collective_backend_config.kernel_strategy`` of ``inst``'s backend config, if any."""
    bc = inst.attrs.get("backend_config")
    if not isinstance(bc, dict):
        return None
    cfg = bc.get("collective_backend_config")
    return cfg.get("kernel_strategy") if isinstance(cfg, dict) else None


def _combiner(comp: Any) -> str | None:
    if not isinstance(comp, Computation) or comp.root is None:
        return None
    root = comp.root
    params = [i for i in comp.instructions if i.opcode == "parameter"]
    if root.opcode not in _COMBINE or len(params) != 2 or any(o.opcode != "parameter" for o in root.operands):
        return None
    return root.opcode


def one_shot_declines(inst: Instruction) -> str | None:
    """Why the one-shot kernel does not serve ``inst`` (``None``: it does)."""
    if inst.opcode not in ("all-reduce", "all-reduce-start") or kernel_strategy(inst) != ONE_SHOT:
        return "not a one-shot all-reduce"
    if len(inst.operands) != 1 or inst.shape.is_tuple:
        return "a variadic all-reduce"
    t = inst.shape.element_type
    if t not in _TYPES:
        return f"{t} is combined on the host (the kernel serves {', '.join(_TYPES)})"
    if _combiner(inst.attrs.get("to_apply")) is None:
        return "to_apply is not one add/multiply/maximum/minimum of its parameters"
    return None


def one_shot_kernel(inst: Instruction, group_size: int) -> KernelSource:
    """The kernel for ``inst`` over ``group_size`` participants (check :func:`one_shot_declines` first)."""
    t = inst.shape.element_type
    op = _combiner(inst.attrs["to_apply"])
    ins = [f"in{k}" for k in range(group_size)]
    body = ["    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)", "    mask = offs < N",
            "    acc = tl.load(in0 + offs, mask=mask)"]
    for p in ins[1:]:  # group order: ((x0 op x1) op x2) ..., as the host does
        body.append("    acc = " + _COMBINE[op].format(a="acc", b=f"tl.load({p} + offs, mask=mask)"))
    body.append("    tl.store(out + offs, acc, mask=mask)")
    source = "\n".join(["import triton", "import triton.language as tl", "", "", "@triton.jit",
                        f"def one_shot_all_reduce({', '.join(ins)}, out, N: tl.constexpr, BLOCK: tl.constexpr):",
                        *body, ""])
    n = int(np.prod(inst.shape.dimensions, dtype=np.int64))
    operand = inst.operands[0].shape
    params = tuple([KernelParam("operand", k, operand) for k in range(group_size)]
                   + [KernelParam("output", 0, inst.shape)])
    name = f"one_shot_all_reduce_{op}_{t}_x{group_size}"

    def kernel(block: int) -> KernelSource:
        return KernelSource(name=name, source=source, entry="one_shot_all_reduce", params=params,
                            constexprs={"N": n, "BLOCK": block},
                            launch=LaunchDimensions((max(1, -(-n // block)),), num_warps=4))

    return attrs.evolve(kernel(BLOCK), interpret_variant=kernel(INTERPRET_BLOCK))


def run_one_shot(ks: KernelSource, inst: Instruction, contributions: list[np.ndarray]) -> np.ndarray:
    """The all-reduced array: ``ks`` run in Triton's interpreter on the participants' buffers (group order)."""
    from fusegen.codegen.triton_runtime import run_interpreted

    dims = tuple(inst.shape.dimensions)
    buffers = [np.ascontiguousarray(np.asarray(c).reshape(-1)) for c in contributions]
    out = np.empty(int(np.prod(dims, dtype=np.int64)), dtype=buffers[0].dtype)
    run_interpreted(ks, buffers + [out])
    return out.reshape(dims)
