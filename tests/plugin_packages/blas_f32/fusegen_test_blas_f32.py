"""A BLAS backend as a third party writes one: f32 dots in IEEE f32 (numpy's sgemm), no tf32 rounding.

XLA:GPU, and fusegen's reference evaluator, run an f32 dot of default precision at tf32; this backend is the
more accurate one, and the conformance suite must pass it (tests/conformance/test_conformance_blas.py). Serves plain 2-D
f32 dots and ``__triton_gemm`` fusions whose root is such a dot of two parameters, as an execution backend
and as a codegen backend of one config. ``blas_f32_off`` is the same with a planted 1% error.
"""

import numpy as np

from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable
from fusegen.hlo.layout_util import from_physical, to_physical
from fusegen.plugin_manager import hookimpl
from fusegen.registry import ExecutionBackend


def gemm_dot(instr):
    """The plain f32 ``[m,k] x [k,n]`` dot ``instr`` computes (itself or its GEMM fusion's root), else None."""
    dot = instr
    if instr.opcode == "fusion" and instr.fusion_backend_kind == "__triton_gemm":
        dot = instr.fused_computation.root
        if not all(o.opcode == "parameter" for o in dot.operands):
            return None
    if dot.opcode != "dot" or dot.shape.element_type != "f32" or dot.shape.rank != 2:
        return None
    a = dot.attrs
    if any(o.shape.element_type != "f32" for o in dot.operands) or a.get("lhs_batch_dims") or a.get("rhs_batch_dims"):
        return None
    plain = tuple(a.get("lhs_contracting_dims", ())) == (1,) and tuple(a.get("rhs_contracting_dims", ())) == (0,)
    return dot if plain else None


class BlasF32(CodegenBackend):
    """``lhs @ rhs`` in IEEE f32 (times ``1 + error``: 0 for the right backend), one config."""

    name = "blas_f32"
    error = 0.0
    version = "1"
    rank = 800
    compiles_in_process = True

    def sgemm(self, instr, values):
        dot = gemm_dot(instr)
        lhs, rhs = (values[0], values[1]) if dot is instr else (values[o.parameter_number] for o in dot.operands)
        out = np.asarray(lhs, np.float32) @ np.asarray(rhs, np.float32)
        return (out * np.float32(1 + self.error)).astype(np.float32)

    def get_supported_configs(self, instr):
        return [Config(self.name, {"algo": "sgemm"})] if gemm_dot(instr) is not None else []

    def get_default_config(self, instr):
        return next(iter(self.get_supported_configs(instr)), None)

    def compile(self, instr, config):
        if config not in self.get_supported_configs(instr):
            raise CompilationFailed(f"{config} is not a config of %{instr.name}")
        return SgemmExecutable(self, instr)

    def apply_config(self, instr, config):
        instr.attrs["backend_config"] = {**(instr.attrs.get("backend_config") or {}), "blas": dict(config.values)}


class BlasF32Off(BlasF32):
    """The planted bug: every result 1% too large."""

    name = "blas_f32_off"
    error = 0.01


class SgemmExecutable(Executable):
    def __init__(self, backend, instr):
        self.backend, self.instr = backend, instr

    def run(self, inputs, outputs, scratch):
        values = [from_physical(np.asarray(b), o.shape) for b, o in zip(inputs, self.instr.operands)]
        outputs[0][...] = to_physical(self.backend.sgemm(self.instr, values), self.instr.shape)


class Plugin:
    """One entry point: the backend, as a codegen backend and as the execution backend of its name."""

    FUSEGEN_CONFORMANCE = {"devices": ["cpu-interpreter"]}

    def __init__(self, backend):
        self.backend = backend
        self.execution = ExecutionBackend(name=backend.name, rank=900, trusted=False, execute=self.execute,
                                          can_execute=lambda inst: gemm_dot(inst) is not None)

    def execute(self, inst, operands, context=None):
        return self.backend.sgemm(inst, operands)

    @hookimpl
    def fusegen_codegen_backends(self):
        return [self.backend]

    @hookimpl
    def fusegen_execution_backends(self):
        return [self.execution]


plugin = Plugin(BlasF32())
off_by_one_percent = Plugin(BlasF32Off())
