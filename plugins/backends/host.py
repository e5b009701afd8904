"""The host backend: runs any instruction on the CPU through the reference evaluator.

Two roles:

* execution backend ``host`` (rank 1000): it ranks last among execution backends, so it serves every
  non-fusion instruction (library custom calls with their backend-config semantics, control flow
  operands, ...) and every fusion whose kind has no emitter yet;
* codegen backend ``host`` (:class:`HostCodegenBackend`, rank 1000, beyond XLA): one config,
  ``host:impl=numpy``, for every fusion. It runs on the CPU, not the GPU (``targets_gpu = False``), so the
  autotuner never makes it a candidate for a GPU device key (every fusegen device is one): a tuned module is
  tuned for the GPU. It remains what the CPU runs a fusion with (the execution backend above); a config named
  by hand (``apply_config``, a cache file of an older fusegen) names it in the fusion's backend config
  (:data:`fusegen.codegen.tuned_backend.EXECUTION_BACKEND_FIELD`) and the executor runs that fusion here.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable
from fusegen.evaluator.evaluator import evaluate_instruction, implements
from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import ExecutionBackend

HOST_RANK = 1000
#: The host backend's only config (``Config.name`` prints it as ``host:impl=numpy``).
HOST_CONFIG = Config("host", {"impl": "numpy"})


def _can_execute(inst: Instruction) -> bool:
    """Every fusion, and every other instruction the reference evaluator implements (an op or library call it
    does not is left to the executor, which names it: ``fusegen has no implementation of ...``)."""
    return inst.opcode == "fusion" or implements(inst)


def _execute(inst: Instruction, operands: list[Any], context: Any = None) -> Any:
    """Evaluate ``inst`` on logical numpy ``operands``.

    Raises:
        fusegen.evaluator.evaluator.UnsupportedOpError: the op (or custom-call target) is unknown.
    """
    return evaluate_instruction(inst, operands)


def _host_array(a: Any) -> np.ndarray:
    """A numpy view/copy of a profiler buffer (numpy already, or CuPy on a GPU)."""
    if isinstance(a, np.ndarray):
        return a
    get = getattr(a, "get", None)  # cupy.ndarray.get() copies to the host
    return get() if callable(get) else np.asarray(a)


class HostExecutable(Executable):
    """Evaluates the fusion with the reference evaluator on the autotuner's physical 1-D buffers.

    ``inputs`` hold one buffer per array leaf of the operands, in order (tuple-shaped operands are
    rebuilt); ``outputs`` one per leaf of the result.
    """

    def __init__(self, instr: Instruction):
        self.instr = instr

    def run(self, inputs, outputs, scratch) -> None:
        from fusegen.codegen.triton_runtime import from_storage, to_storage
        from fusegen.hlo.layout_util import from_physical, to_physical

        it = iter(inputs)

        def build(shape):
            if shape.is_tuple:
                return tuple(build(s) for s in shape.tuple_shapes)
            return from_physical(from_storage(_host_array(next(it)), shape.element_type), shape)

        ops = [build(o.shape) for o in self.instr.operands]
        value = evaluate_instruction(self.instr, ops)
        leaves: list[Any] = []

        def flat(v: Any) -> None:
            if isinstance(v, tuple):
                for x in v:
                    flat(x)
            else:
                leaves.append(v)

        flat(value)
        for out, v, s in zip(outputs, leaves, self.instr.shape.leaves()):
            data = to_storage(to_physical(np.asarray(v), s), s.element_type)
            if isinstance(out, np.ndarray):
                out[...] = data
            else:  # a CuPy buffer (GPU profiler)
                import cupy

                out[...] = cupy.asarray(data)


class HostCodegenBackend(CodegenBackend):
    """The reference evaluator as an autotuning candidate (fusegen; see the module docstring).

    Supports every fusion (configs ``[host:impl=numpy]``), none of the custom calls; no scratch.
    """

    name = "host"
    version = "1"
    rank = HOST_RANK
    compiles_in_process = True  # nothing to compile; the executable holds the instruction
    targets_gpu = False  # the CPU's execution path: never a candidate for a GPU device key

    def can_produce_wrong_results(self) -> bool:
        return False

    def get_supported_configs(self, instr: Instruction) -> list[Config]:
        return [HOST_CONFIG] if instr.opcode == "fusion" else []

    def get_default_config(self, instr: Instruction) -> Config | None:
        return HOST_CONFIG if instr.opcode == "fusion" else None

    def compile(self, instr: Instruction, config: Config) -> Executable:
        """Raises CompilationFailed for a config other than :data:`HOST_CONFIG` or a non-fusion."""
        if config != HOST_CONFIG:
            raise CompilationFailed(f"host backend has one config, {HOST_CONFIG.name}; got {config.name}")
        if instr.opcode != "fusion":
            raise CompilationFailed(f"host backend tunes fusions only, not {instr.opcode} %{instr.name}")
        return HostExecutable(instr)

    def apply_config(self, instr: Instruction, config: Config) -> None:
        """Name the host execution backend in the fusion's ``fusion_backend_config``; other fields are kept."""
        from fusegen.codegen.tuned_backend import set_execution_backend

        set_execution_backend(instr, self.name)

    def scratch_bytes(self, config: Config) -> int:
        return 0


@hookimpl
def fusegen_execution_backends():
    return [ExecutionBackend(name="host", rank=HOST_RANK, can_execute=_can_execute, execute=_execute, trusted=True)]


@hookimpl
def fusegen_codegen_backends():
    return [HostCodegenBackend()]
