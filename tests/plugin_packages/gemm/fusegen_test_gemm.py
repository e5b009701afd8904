"""A GEMM codegen backend the autotuner enumerates: accumulation type x split-K configs, computed with numpy.

Serves plain dots and ``__triton_gemm`` fusions whose root is a dot of two parameters. Configs: ``acc`` in
(f32, f64) x ``split_k`` in (1, 2, 4) (at most K); split-K sums ``split_k`` partial dots over consecutive K
chunks. A tuned winner runs at run time on the execution backend of the same name:
``apply_config`` writes the config and names that backend (``set_execution_backend``), whose ``execute``
reads the config back. The planted-bug variant (tests/plugin_packages/gemm_drop_chunk) overrides ``chunks``.
"""

import numpy as np

from fusegen.codegen.tuned_backend import set_execution_backend
from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable
from fusegen.evaluator.dot_conv import dot_operands as xla_operands
from fusegen.hlo.dtypes import numpy_dtype
from fusegen.hlo.layout_util import from_physical, to_physical
from fusegen.plugin_manager import hookimpl
from fusegen.registry import ExecutionBackend

CONFIG_KEY = "splitk_gemm_config"


def the_dot(instr):
    """The dot ``instr`` computes (itself, or a GEMM fusion's root of two parameters), else None."""
    if instr.opcode == "dot":
        return instr
    if instr.opcode == "fusion" and instr.fusion_backend_kind == "__triton_gemm":
        root = instr.fused_computation.root
        if root.opcode == "dot" and all(o.opcode == "parameter" for o in root.operands):
            return root
    return None


def dot_operands(instr, values):
    """``(lhs, rhs)`` of the dot ``instr`` computes, from ``instr``'s operand values, rounded as XLA:GPU
    multiplies them (an f32 dot of default precision: tf32; ``fusegen.evaluator.dot_conv.dot_operands``)."""
    dot = the_dot(instr)
    lhs, rhs = (values[0], values[1]) if dot is instr else tuple(values[o.parameter_number] for o in dot.operands)
    return xla_operands(dot, lhs, rhs)


def _plain(dot) -> bool:
    a = dot.attrs if dot is not None else {}
    return (dot is not None and dot.shape.element_type in ("f32", "f64") and dot.shape.rank == 2
            and tuple(a.get("lhs_contracting_dims", ())) == (1,) and tuple(a.get("rhs_contracting_dims", ())) == (0,)
            and not a.get("lhs_batch_dims") and not a.get("rhs_batch_dims"))


class SplitKGemm(CodegenBackend):
    name = "splitk_gemm"
    version = "1"
    rank = 800
    compiles_in_process = True

    def chunks(self, k: int, split_k: int) -> list:
        """The K index chunks the partial dots sum over."""
        return np.array_split(np.arange(k), split_k)

    def matmul(self, lhs, rhs, acc: str, split_k: int, out_type: str):
        lhs, rhs = lhs.astype(numpy_dtype(acc)), rhs.astype(numpy_dtype(acc))
        out = sum(lhs[:, c] @ rhs[c, :] for c in self.chunks(lhs.shape[1], split_k))
        return np.asarray(out).astype(numpy_dtype(out_type))

    def get_supported_configs(self, instr):
        dot = the_dot(instr)
        if dot is None or not _plain(dot):
            return []
        k = dot.operands[0].shape.dimensions[1]
        return [Config(self.name, {"acc": acc, "split_k": s}) for acc in ("f32", "f64") for s in (1, 2, 4) if s <= k]

    def get_default_config(self, instr):
        cfgs = self.get_supported_configs(instr)
        return cfgs[0] if cfgs else None

    def compile(self, instr, config):
        if config not in self.get_supported_configs(instr):
            raise CompilationFailed(f"{config} is not a config of %{instr.name}")
        return GemmExecutable(self, instr, config)

    def apply_config(self, instr, config):
        bc = dict(instr.attrs.get("backend_config") or {})
        bc[CONFIG_KEY] = dict(config.values)
        instr.attrs["backend_config"] = bc
        if instr.opcode == "fusion":  # a non-kernel winner: the executor runs the fusion on our backend
            set_execution_backend(instr, self.name)

    def scratch_bytes(self, config):
        return 0


class GemmExecutable(Executable):
    """Runs on 1-D physical buffers, as every fusegen executable does."""

    def __init__(self, backend, instr, config):
        self.backend, self.instr, self.values = backend, instr, dict(config.values)

    def run(self, inputs, outputs, scratch):
        values = [from_physical(np.asarray(b), o.shape) for b, o in zip(inputs, self.instr.operands)]
        lhs, rhs = dot_operands(self.instr, values)
        out = self.backend.matmul(lhs, rhs, self.values["acc"], self.values["split_k"], self.instr.shape.element_type)
        outputs[0][...] = to_physical(out, self.instr.shape)


def execution_backend(backend: SplitKGemm) -> ExecutionBackend:
    """Runs what the tuner gave ``backend``: the applied config (or the default) read from the backend config."""

    def execute(inst, operands, context=None):
        values = inst.backend_config.get(CONFIG_KEY) or backend.get_default_config(inst).values
        lhs, rhs = dot_operands(inst, [np.asarray(o) for o in operands])
        return backend.matmul(lhs, rhs, values["acc"], values["split_k"], inst.shape.element_type)

    return ExecutionBackend(name=backend.name, rank=900, execute=execute, trusted=False,
                            can_execute=lambda inst: bool(backend.get_supported_configs(inst)))


class Plugin:
    FUSEGEN_CONFORMANCE = {"devices": ["cpu-interpreter"], "tolerances": {"*": {"rtol": 1e-5, "atol": 1e-5}}}

    def __init__(self, backend_class):
        self.backend_class = backend_class

    @hookimpl
    def fusegen_codegen_backends(self):
        return [self.backend_class()]

    @hookimpl
    def fusegen_execution_backends(self):
        return [execution_backend(self.backend_class())]


plugin = Plugin(SplitKGemm)
