"""The Triton backend plugin: the ``gemm-fusion`` pass, the ``kTriton`` emitters and the autotunable backend.

Registers (XLA counterparts in parentheses):

* pass ``gemm-fusion`` (``GemmFusion``, :mod:`fusegen_plugins.backends.triton_gemm_fusion`);
* emitter factory ``triton_gemm`` (kind ``kTriton``, rank 100): ``__triton_gemm`` and
  ``__triton_nested_gemm_fusion`` fusions (:mod:`fusegen_plugins.backends.triton_gemm_emitter`), declining the rest;
* emitter factory ``triton_block_level`` (kind ``kTriton``, rank 200): ``__triton`` fusions with a
  ``block_level_fusion_config`` (:mod:`fusegen_plugins.backends.triton_block_level`);
* codegen backend ``triton`` (``TritonBackend``, ``backends/gpu/autotuner/triton.cc``): configs are XLA's default
  set for the device's architecture (Ampere 30, Hopper 25, Blackwell 40), compiled for the device's SM without a
  GPU; ``can_produce_wrong_results()`` is true.
"""

from __future__ import annotations

from typing import Any

from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable
from fusegen.hlo.ir import Instruction
from fusegen.plugin_manager import hookimpl
from fusegen.registry import EmitterFactory, HloPass


def _run_gemm_fusion(module, options=None) -> bool:
    from fusegen_plugins.backends import triton_gemm_fusion

    return triton_gemm_fusion.run(module, options)


def _create_gemm(analysis: Any, context: Any = None):
    from fusegen_plugins.backends import triton_gemm_emitter

    return triton_gemm_emitter.create(analysis, context)


def _create_block_level(analysis: Any, context: Any = None):
    from fusegen_plugins.backends import triton_block_level

    return triton_block_level.create(analysis, context)


class _Analysis:
    """The minimal analysis an emitter needs (``.fusion``, ``.computation``)."""

    def __init__(self, fusion: Instruction):
        self.fusion = fusion
        self.computation = fusion.fused_computation


class _TritonExecutable(Executable):
    """Runs the emitted kernels: on a GPU through Triton's launcher, else in the interpreter."""

    def __init__(self, instr: Instruction, emitted: Any):
        self.instr = instr
        self.emitted = emitted

    def run(self, inputs, outputs, scratch) -> None:
        from fusegen.codegen import triton_runtime
        from fusegen.hlo.layout_util import from_physical

        ops = [from_physical(triton_runtime.from_storage(x, o.shape.element_type), o.shape)
               for x, o in zip(inputs, self.instr.operands)]
        res = triton_runtime.run_fusion(self.emitted, ops, self.instr)
        for out, r, s in zip(outputs, res, self.instr.shape.leaves()):
            from fusegen.hlo.layout_util import to_physical

            out[...] = triton_runtime.to_storage(to_physical(r, s), s.element_type)


class TritonBackend(CodegenBackend):
    """XLA's ``TritonBackend`` for ``__triton_gemm`` fusions.

    Args:
        compute_capability: the target SM (default 9.0, Hopper) choosing the default config set and the compile
            target.
    """

    name = "triton"
    rank = 200  # XLA's order (factory_cuda.cc:85-100): cuDNN, Triton, cuBLASLt; level 0 takes the first
    version = "1"
    compiles_in_process = True
    modelled_by_fusegen = True  # fusegen.perf's tiled model reads triton_gemm_config / block_level_fusion_config

    def __init__(self, compute_capability: tuple[int, int] = (9, 0)):
        self.compute_capability = tuple(compute_capability)

    def can_produce_wrong_results(self) -> bool:
        return True

    @staticmethod
    def _is_gemm(instr: Instruction) -> bool:
        from fusegen_plugins.backends.triton_gemm_emitter import GEMM_KINDS

        return instr.opcode == "fusion" and instr.fusion_backend_kind in GEMM_KINDS

    def get_supported_configs(self, instr: Instruction) -> list[Config]:
        """XLA's default config set for the architecture (``triton_default_configs``), ``[]`` for non-GEMM fusions."""
        if not self._is_gemm(instr):
            return []
        from fusegen_plugins.backends.triton_configs import default_configs

        return [Config(self.name, c.to_values()) for c in default_configs(self.compute_capability)]

    def get_default_config(self, instr: Instruction) -> Config | None:
        return None  # XLA's TritonBackend has no default config

    def _emit(self, instr: Instruction, config: Config):
        from fusegen.codegen.emitter import EmitterUnsupported
        from fusegen_plugins.backends.triton_configs import ConfigError, from_values
        from fusegen_plugins.backends.triton_gemm_emitter import TritonGemmFusion

        try:
            cfg = from_values(dict(config.values))
            if cfg.num_ctas != 1:
                raise CompilationFailed(f"num_ctas={cfg.num_ctas} is not supported")
            return TritonGemmFusion(_Analysis(instr), cfg).emit()
        except (ConfigError, EmitterUnsupported) as e:
            raise CompilationFailed(str(e)) from None

    def compile(self, instr: Instruction, config: Config) -> Executable:
        """Emit the GEMM kernel for ``config`` and compile it for the target SM (no GPU needed).

        Raises:
            CompilationFailed: the config is malformed, the fusion cannot be emitted, or Triton rejects the kernel.
        """
        from fusegen.codegen import triton_runtime

        emitted = self._emit(instr, config)
        cap = self.compute_capability[0] * 10 + self.compute_capability[1]
        try:
            for k in emitted.kernels:
                triton_runtime.compile_for_target(k, capability=cap)
        except Exception as e:
            raise CompilationFailed(f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
        return _TritonExecutable(instr, emitted)

    def validate_config(self, instr: Instruction, config: Config) -> None:
        """Field ranges (:func:`~fusegen_plugins.backends.triton_configs.check_limits`), then the default check."""
        from fusegen.codegen_backend import ConfigError as BackendConfigError
        from fusegen_plugins.backends.triton_configs import ConfigError, check_limits

        try:
            check_limits(dict(config.values))
        except ConfigError as e:
            raise BackendConfigError(str(e)) from None
        super().validate_config(instr, config)

    def apply_config(self, instr: Instruction, config: Config) -> None:
        """Write the config into the fusion's ``fusion_backend_config`` (XLA ``ApplyConfig``), in place.

        ``triton_gemm_config`` is always written: it is what the GEMM emitter reads first
        (:func:`fusegen_plugins.backends.triton_gemm_emitter.resolve_config`) and the only field that carries
        ``block_k``. A ``__triton_nested_gemm_fusion`` also gets its ``block_level_fusion_config`` replaced by
        the same tiling (output tile ``[1, ..., block_m, block_n]``, warps, stages, CTAs, TMA; other fields of
        the old one kept), so the two never disagree; on a ``__triton_gemm`` fusion a stale
        ``block_level_fusion_config`` is removed. A host or library-call (cuBLASLt fission) winner applied earlier
        is cleared.

        Raises:
            fusegen_plugins.backends.triton_configs.ConfigError: a malformed config (``split_k > 1``...).
        """
        from fusegen.codegen.tuned_backend import EXECUTION_BACKEND_FIELD, LIBRARY_CALL_FIELD
        from fusegen_plugins.backends.triton_configs import from_values

        cfg = from_values(dict(config.values))
        bc = dict(instr.backend_config)
        fbc = dict(bc.get("fusion_backend_config") or {})
        fbc.setdefault("kind", "__triton_gemm")
        fbc["triton_gemm_config"] = cfg.to_backend_config()
        if fbc["kind"] == "__triton_nested_gemm_fusion":
            fbc["block_level_fusion_config"] = _block_level_config(instr, cfg, fbc.get("block_level_fusion_config"))
        else:
            fbc.pop("block_level_fusion_config", None)
        fbc.pop(EXECUTION_BACKEND_FIELD, None)
        fbc.pop(LIBRARY_CALL_FIELD, None)
        bc["fusion_backend_config"] = fbc
        instr.attrs["backend_config"] = bc

    def scratch_bytes(self, config: Config) -> int:
        return 0


def _block_level_config(instr: Instruction, cfg: Any, old: Any) -> dict:
    """The ``block_level_fusion_config`` of a nested GEMM fusion tiled by ``cfg`` (a ``TritonGemmConfig``).

    XLA's ``NestGemmFusion`` turns a ``triton_gemm_config`` into this form: the output tile is ``block_m x
    block_n`` with 1 on every batch dimension (the dot's output is ``[batch..., m, n]``). Fields of ``old`` this
    does not set (``is_warp_specialization_allowed``, ``waves_per_eu``...) are kept.
    """
    rank = max(2, len(instr.shape.dimensions)) if not instr.shape.is_tuple else 2
    out = dict(old) if isinstance(old, dict) else {}
    out["output_tiles"] = [{"sizes": ["1"] * (rank - 2) + [str(cfg.block_m), str(cfg.block_n)]}]
    out["num_warps"] = str(cfg.num_warps)
    out["num_ctas"] = cfg.num_ctas
    out["num_stages"] = cfg.num_stages
    out["is_tma_allowed"] = cfg.is_tma_allowed
    return out


@hookimpl
def fusegen_passes():
    from fusegen.config.options import ConfigOption

    return [HloPass(name="gemm-fusion", run=_run_gemm_fusion,
                    options=[ConfigOption("v2", bool, False, "Use the generic (v2) Triton support table: unsigned and 64-bit types too.")])]


@hookimpl
def fusegen_emitter_factories():
    return [
        EmitterFactory(name="triton_gemm", kind="kTriton", rank=100, create=_create_gemm),
        EmitterFactory(name="triton_block_level", kind="kTriton", rank=200, create=_create_block_level),
    ]


@hookimpl
def fusegen_codegen_backends():
    return [TritonBackend()]
