"""The custom-fusion backend: a registry of pre-compiled kernels for ``__custom_fusion`` fusions.

A ``__custom_fusion`` fusion names its kernel family in ``backend_config.fusion_backend_config.
custom_fusion_config.name``. Each :class:`CustomKernel` registered under that name has a pattern matcher over the
fusion, a CPU path (numpy; what runs here and in tests) and optionally a kernel compiled ahead of time and shipped
as PTX (loaded with CuPy on a GPU). XLA keeps only one such family today (``DynamicSliceFusionRewriterV2``,
``xla/backends/gpu/transforms/dynamic_slice_fusion_rewriter_v2.cc``; the cutlass custom fusions were removed,
5acd98ec3a), and its thunk emitter intercepts ``dynamic_slice_fusion`` (``EmitDynamicSliceFusionV2``); every other
name hits ``CustomFusion::Emit`` = Unimplemented("Custom kernel fusion is not supported.").

Built in:

* ``dynamic_slice_fusion``: a library call (the *hero*: a custom call such as ``__cublas$lt$matmul``) whose operands
  are parameters or (bitcasts of) ``dynamic-slice``s of parameters, and whose result is the root or is written
  with ``dynamic-update-slice`` into a parameter buffer. The CPU path does the address computation itself
  (start indices clamped into range as XLA does), runs the hero on the slices through the execution backends'
  evaluator, and writes the result back at the update offsets.
* ``fusegen.scaled_copy`` (the example of a kernel a plugin ships): ``out = scale * x`` for an f32 array and an
  f32 scalar, matched on a fusion whose root is ``multiply(x, broadcast(scale))``; PTX for sm_90 compiled ahead of
  time from a Triton kernel (:data:`SCALED_COPY_PTX` is generated at first use when not shipped).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import attrs
import numpy as np

from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, ExecutionBackend

CUSTOM_FUSION_KIND = "__custom_fusion"


class CustomFusionError(Exception):
    """A custom fusion has no matching kernel, or its kernel cannot run it; the message names the fusion."""


@attrs.frozen
class CustomKernel:
    """A pre-compiled kernel for one ``custom_fusion_config.name``.

    Attributes:
        name: the ``custom_fusion_config.name`` it serves.
        matches: ``matches(fusion) -> bool``: the pattern matcher.
        run_cpu: ``run_cpu(fusion, operand_values) -> value`` (logical numpy arrays, tuple for tuple shapes).
        ptx: PTX text compiled ahead of time (``None`` when the kernel has no device code of its own).
        entry: the PTX entry point.
        plugin: registering plugin.
    """

    name: str
    matches: Callable[[Instruction], bool]
    run_cpu: Callable[[Instruction, list[Any]], Any]
    ptx: str | None = None
    entry: str = ""
    plugin: str = "fusegen_plugins.backends.custom_fusion"


_REGISTRY: dict[str, list[CustomKernel]] = {}


def register_custom_kernel(kernel: CustomKernel) -> None:
    """Add ``kernel`` to the registry (later registrations of a name are tried after earlier ones)."""
    _REGISTRY.setdefault(kernel.name, []).append(kernel)


def registered(name: str) -> list[CustomKernel]:
    return list(_REGISTRY.get(name, []))


def config_name(fusion: Instruction) -> str | None:
    fbc = fusion.backend_config.get("fusion_backend_config") or {}
    cfg = fbc.get("custom_fusion_config") or {}
    n = cfg.get("name") if isinstance(cfg, dict) else None
    return n if isinstance(n, str) else None


def find_kernel(fusion: Instruction) -> CustomKernel | None:
    """The first registered kernel whose name and matcher accept ``fusion``."""
    if fusion.opcode != "fusion" or fusion.fusion_backend_kind != CUSTOM_FUSION_KIND:
        return None
    for k in _REGISTRY.get(config_name(fusion) or "", []):
        try:
            if k.matches(fusion):
                return k
        except Exception:
            continue
    return None


# ================================================================================= dynamic_slice_fusion
def _strip_bitcasts(inst: Instruction) -> Instruction:
    while inst.opcode in ("bitcast", "reshape") and inst.operands:
        inst = inst.operands[0]
    return inst


def _ds_hero(fusion: Instruction) -> Instruction | None:
    comp = fusion.fused_computation
    heroes = [i for i in comp.instructions if i.opcode == "custom-call"]
    if len(heroes) != 1:
        return None
    return heroes[0]


def _matches_dynamic_slice(fusion: Instruction) -> bool:
    hero = _ds_hero(fusion)
    if hero is None:
        return False
    from fusegen.evaluator.custom_calls import library_targets

    if str(hero.attrs.get("custom_call_target", "")) not in library_targets():
        return False  # the CPU path runs the hero through the evaluator's library-call semantics
    for o in hero.operands:
        s = _strip_bitcasts(o)
        if s.opcode == "dynamic-slice":
            if _strip_bitcasts(s.operands[0]).opcode != "parameter":
                return False
        elif s.opcode not in ("parameter", "constant"):
            return False
    return True


def _clamped_starts(starts: list[int], operand_dims, sizes) -> list[int]:
    # XLA clamps each start into [0, dim - size]
    return [min(max(int(s), 0), int(d) - int(z)) for s, d, z in zip(starts, operand_dims, sizes)]


def _run_dynamic_slice_cpu(fusion: Instruction, operands: list[Any]) -> Any:
    from fusegen.evaluator.evaluator import evaluate_instruction

    comp = fusion.fused_computation
    hero = _ds_hero(fusion)
    env: dict[int, Any] = {}
    for p in comp.parameters:
        env[id(p)] = operands[p.parameter_number]

    def val(inst: Instruction) -> Any:
        if id(inst) in env:
            return env[id(inst)]
        op = inst.opcode
        if op == "dynamic-slice":
            base = np.asarray(val(inst.operands[0]))
            sizes = [int(x) for x in inst.attrs.get("dynamic_slice_sizes") or ()]
            starts = [int(np.asarray(val(o)).reshape(())) for o in inst.operands[1:]]
            st = _clamped_starts(starts, base.shape, sizes)
            res = base[tuple(slice(s, s + z) for s, z in zip(st, sizes))]
        elif op == "dynamic-update-slice":
            base = np.array(val(inst.operands[0]), copy=True)
            upd = np.asarray(val(inst.operands[1]))
            starts = [int(np.asarray(val(o)).reshape(())) for o in inst.operands[2:]]
            st = _clamped_starts(starts, base.shape, upd.shape)
            base[tuple(slice(s, s + z) for s, z in zip(st, upd.shape))] = upd
            res = base
        elif op in ("bitcast", "reshape"):
            res = np.asarray(val(inst.operands[0])).reshape(inst.shape.dimensions)
        else:
            res = evaluate_instruction(inst, [val(o) for o in inst.operands])
        env[id(inst)] = res
        return res

    if hero is None:
        raise CustomFusionError(f"fusion %{fusion.name}: no library call hero")
    return val(comp.root)


# ================================================================================= example: scaled_copy
SCALED_COPY_NAME = "fusegen.scaled_copy"

#: PTX shipped with the example kernel (sm_90); filled from the Triton source below at first use when empty.
SCALED_COPY_PTX: str = ""

SCALED_COPY_TRITON = '''
import triton
import triton.language as tl


@triton.jit
def scaled_copy(x_ptr, s_ptr, o_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    m = offs < n
    s = tl.load(s_ptr)
    tl.store(o_ptr + offs, tl.load(x_ptr + offs, mask=m, other=0) * s, mask=m)
'''


def _scaled_copy_parts(fusion: Instruction) -> tuple[int, int] | None:
    comp = fusion.fused_computation
    root = comp.root
    if root.opcode != "multiply" or root.shape.element_type != "f32":
        return None
    a, b = root.operands
    for x, bc in ((a, b), (b, a)):
        if x.opcode == "parameter" and bc.opcode == "broadcast" and bc.operands[0].opcode == "parameter" \
                and bc.operands[0].shape.rank == 0:
            return x.parameter_number, bc.operands[0].parameter_number
    return None


def _run_scaled_copy_cpu(fusion: Instruction, operands: list[Any]) -> Any:
    parts = _scaled_copy_parts(fusion)
    if parts is None:
        raise CustomFusionError(f"fusion %{fusion.name} is not a scaled copy")
    xi, si = parts
    x = np.asarray(operands[xi], dtype=np.float32)
    return (x * np.float32(np.asarray(operands[si]).reshape(()))).astype(np.float32)


@functools.lru_cache(maxsize=1)
def scaled_copy_ptx() -> str:
    """The example kernel's sm_90 PTX (the shipped constant, else compiled once from its Triton source)."""
    if SCALED_COPY_PTX:
        return SCALED_COPY_PTX
    import importlib.util
    import os
    import tempfile

    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    d = tempfile.mkdtemp(prefix="fusegen-custom-")
    path = os.path.join(d, "scaled_copy_kernel.py")
    with open(path, "w", encoding="utf-8") as f:
        f.write(SCALED_COPY_TRITON)
    spec = importlib.util.spec_from_file_location("fusegen_scaled_copy_kernel", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    ck = triton.compile(ASTSource(fn=mod.scaled_copy, signature={"x_ptr": "*fp32", "s_ptr": "*fp32",
                                                                  "o_ptr": "*fp32", "n": "i32",
                                                                  "BLOCK": "constexpr"},
                                  constexprs={"BLOCK": 1024}),
                        target=GPUTarget("cuda", 90, 32), options={"num_warps": 4})
    return ck.asm["ptx"]


register_custom_kernel(CustomKernel("dynamic_slice_fusion", _matches_dynamic_slice, _run_dynamic_slice_cpu))
register_custom_kernel(CustomKernel(SCALED_COPY_NAME, lambda f: _scaled_copy_parts(f) is not None,
                                    _run_scaled_copy_cpu, ptx=None, entry="scaled_copy"))


# ================================================================================= hooks
def _can_execute(inst: Instruction) -> bool:
    return find_kernel(inst) is not None


def _execute(inst: Instruction, operands: list[Any], context: Any = None) -> Any:
    k = find_kernel(inst)
    if k is None:
        raise CustomFusionError(f"fusion %{inst.name}: no custom kernel registered for "
                                f"custom_fusion_config.name={config_name(inst)!r}")
    return k.run_cpu(inst, operands)


# ================================================================================= device-side emitter
def _device_side_dynamic_slice(fusion: Instruction) -> bool:
    """A ``dynamic_slice_fusion`` without a library call: its hero is a copy (XLA's v2 rewriter turns such
    copies into memcpys at offsets it computes), so the whole body is data movement at dynamic offsets."""
    if fusion.opcode != "fusion" or fusion.fusion_backend_kind != CUSTOM_FUSION_KIND:
        return False
    if config_name(fusion) != "dynamic_slice_fusion":
        return False
    ops = {i.opcode for i in fusion.fused_computation.instructions}
    if "custom-call" in ops or not ops & {"dynamic-slice", "dynamic-update-slice"}:
        return False
    return ops <= {"parameter", "constant", "bitcast", "reshape", "copy", "dynamic-slice", "dynamic-update-slice",
                   "tuple", "convert", "broadcast"}


def _create_dynamic_slice_emitter(analysis: Any, context: Any = None) -> Any:
    """Factory for ``dynamic_slice_fusion`` custom fusions whose hero is a copy: one Triton kernel that loads the
    start indices from their device buffers, clamps them (as XLA's ``DynamicSliceThunk`` offsets are) and moves
    the data. A DUS root whose operand buffer can be reused is written in place over the update's elements (the
    address-computation fusion's memcpy into the aliased buffer); anything else runs as a loop over the output.
    Library-call heroes are left to the execution backend (:func:`_run_dynamic_slice_cpu`)."""
    from fusegen_plugins.emitters.in_place_dus import can_emit_in_place, output_dus

    if not _device_side_dynamic_slice(analysis.fusion):
        return None
    in_place, loop = _dynamic_slice_emitters()
    if output_dus(analysis) is not None and can_emit_in_place(analysis):
        return in_place(analysis)
    return loop(analysis)


@functools.cache
def _dynamic_slice_emitters() -> tuple[type, type]:
    """The in-place DUS and loop emitters renamed ``DynamicSliceFusion`` (made once, on first use: the emitter
    plugins are imported only when a dynamic_slice_fusion is met)."""
    from fusegen_plugins.emitters.in_place_dus import InPlaceDynamicUpdateSliceFusion
    from fusegen_plugins.emitters.loop import LoopFusion

    return tuple(type("DynamicSliceFusion", (base,), {"name": "DynamicSliceFusion"})
                 for base in (InPlaceDynamicUpdateSliceFusion, LoopFusion))


@hookimpl
def fusegen_emitter_factories():
    """The ``dynamic_slice_fusion`` emitter factory (kind ``kCustomFusion``, rank 100)."""
    return [EmitterFactory(name="dynamic_slice_fusion", kind="kCustomFusion", rank=100,
                           create=_create_dynamic_slice_emitter)]


@hookimpl
def fusegen_execution_backends():
    return [ExecutionBackend(name="custom_fusion", rank=400, can_execute=_can_execute, execute=_execute,
                             trusted=True)]
