"""The interface every autotunable codegen backend implements.

Mirrors XLA's ``CodegenBackend`` (``xla/backends/autotuner/codegen_backend.h``) and the GPU refinement
``GpuCodegenBackend::CanProduceWrongResults`` (``xla/backends/gpu/autotuner/gpu_codegen_backend.h``):
a backend enumerates the configs it supports for one instruction, compiles one config into an
executable, names a default config, and writes a chosen config into the instruction's backend config.

Backends reach the autotuner through the ``fusegen_codegen_backends()`` hook; the autotuner itself
takes an explicit list (:class:`fusegen.autotuning.autotuner.Autotuner`), so it can be driven without
plugins.
"""

from __future__ import annotations

import abc
import json
from typing import TYPE_CHECKING, Any, Mapping

import attrs

if TYPE_CHECKING:  # pragma: no cover
    import numpy as np

    from fusegen.hlo.ir import Instruction, Module


class CompilationFailed(Exception):
    """A config could not be compiled; ``reason`` is shown in the COMPILATION_FAILED entry."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


class ConfigError(ValueError):
    """A serialised config (cache file, record, CLI) is malformed; the message says which field."""


def _freeze_values(values: Mapping[str, Any]) -> dict:
    if not isinstance(values, Mapping):
        raise ConfigError(f"config values must be a JSON object, got {type(values).__name__}")
    out = {}
    for k in sorted(values):
        if not isinstance(k, str):
            raise ConfigError(f"config value names must be strings, got {k!r}")
        v = values[k]
        try:
            # Round-trip so the stored form is exactly what a cache file would give back.
            out[k] = json.loads(json.dumps(v, sort_keys=True))
        except (TypeError, ValueError) as e:
            raise ConfigError(f"config value {k}={v!r} is not JSON-serialisable: {e}") from None
    return out


def _fmt_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float, str)) or v is None:
        return str(v)
    return json.dumps(v, sort_keys=True, separators=(",", ":"))


@attrs.frozen(eq=True, hash=False)
class Config:
    """One candidate configuration of one backend.

    Attributes:
        backend: the backend's ``name`` (``"triton"``, ``"cublaslt"``...).
        values: JSON-serialisable parameters (``{"block_m": 64, "block_n": 128, ...}``); keys are kept
            sorted so equal configs have equal names.
    """

    backend: str
    values: dict = attrs.field(factory=dict, converter=_freeze_values)

    @property
    def name(self) -> str:
        """Stable display/identity string, e.g. ``triton:block_k=32,block_m=64,block_n=64,num_stages=3``."""
        inner = ",".join(f"{k}={_fmt_value(v)}" for k, v in self.values.items())
        return f"{self.backend}:{inner}" if inner else self.backend

    def __hash__(self) -> int:
        return hash(self.name)

    def __str__(self) -> str:
        return self.name

    def to_json(self) -> dict:
        """``{"backend": str, "values": {...}}``."""
        return {"backend": self.backend, "values": dict(self.values)}

    @classmethod
    def from_json(cls, obj: Any) -> "Config":
        """Inverse of :meth:`to_json`.

        Raises:
            ConfigError: ``obj`` is not ``{"backend": str, "values": object}``.
        """
        if not isinstance(obj, Mapping):
            raise ConfigError(f"config must be a JSON object, got {type(obj).__name__}")
        backend = obj.get("backend")
        if not isinstance(backend, str) or not backend:
            raise ConfigError("config field 'backend' must be a non-empty string")
        return cls(backend, obj.get("values", {}))


class Executable(abc.ABC):
    """A compiled candidate that can be run on buffers.

    ``run`` takes the instruction's operands and outputs as arrays with the instruction's element
    types; each is 1-D in *physical* (layout) order with ``numel`` elements (the convention of
    :mod:`fusegen.codegen.kernel`). Outputs are written in place. ``scratch`` is a ``uint8`` array of
    ``CodegenBackend.scratch_bytes(config)`` bytes, or ``None`` when the config needs none. On a GPU the
    arrays are CuPy arrays. Any exception counts as EXECUTION_FAILED for this candidate.
    """

    @abc.abstractmethod
    def run(self, inputs: list["np.ndarray"], outputs: list["np.ndarray"], scratch: "np.ndarray | None") -> None:
        ...


class CodegenBackend(abc.ABC):
    """One source of candidate implementations (XLA ``CodegenBackend``).

    Subclasses set ``name`` and ``version`` (class attributes are fine) and implement
    :meth:`get_supported_configs`, :meth:`compile` and :meth:`apply_config`.

    Compiling in worker processes: the compile pool rebuilds the backend in a worker from
    :meth:`worker_spec` (``"module:QualName"``, constructed with no arguments) and the instruction from
    HLO text (:meth:`compile_from_text`). A backend whose constructor needs arguments overrides
    :meth:`worker_spec`/:meth:`from_worker_spec`; one whose executables cannot be pickled sets
    ``compiles_in_process = True`` and is compiled in the tuning process instead.
    """

    name: str = ""
    version: str = "0"
    #: Order among backends (ascending): the level-0 "first compilable config" is searched in this
    #: order. XLA's CUDA factory order: cuDNN 100, Triton 200, cuBLASLt 300, fission 400, native
    #: emitter 500, block-level emitter 600; fusegen's host backend 1000.
    rank: int = 500
    #: Compile in the tuning process (executables not picklable, or compile is trivially cheap).
    compiles_in_process: bool = False
    #: The name of another plugin's codegen backend this one takes the place of (names are owned: a taken
    #: name without it quarantines the plugin).
    replaces: str | None = None
    #: Set by fusegen before the autotuner asks the backend anything: the registering plugin's
    #: :class:`fusegen.plugin_context.PluginContext` (device, settings); None in a compile worker.
    context: Any = None
    #: The backend produces kernels (or library calls) for the GPU. ``False``: it runs instructions on the host
    #: (fusegen's ``host``, the reference evaluator): it is the CPU's execution path, never an XLA:GPU backend, so
    #: it is never a tuning candidate for a GPU device key.
    targets_gpu: bool = True
    #: ``fusegen.perf`` reads this backend's configs from the backend config :meth:`apply_config` writes
    #: (``triton_gemm_config`` / ``block_level_fusion_config``, as the built-in Triton backend does): configs it
    #: gives no :meth:`estimate_seconds` for are estimated by fusegen's model on a copy of the instruction.
    modelled_by_fusegen: bool = False
    #: The configs replace the instruction by a library call (XLA's fission backends, ``CUBLASLT_FISSION``: a GEMM
    #: fusion's dot becomes a cuBLAS(Lt) call, the rest fusions around it, timed against the fusion's Triton configs).
    #: ``xla_gpu_cublas_fallback=false`` leaves such a backend out (XLA cancels its configs: "exclude_cublas_config is
    #: set."). With :attr:`modelled_by_fusegen`, ``fusegen.perf`` estimates :meth:`fissioned`'s module.
    library_fallback: bool = False

    def can_produce_wrong_results(self) -> bool:
        """Whether outputs of this backend are untrusted during correctness clustering.

        XLA: true for Triton, cuDNN and the block-level emitter; false (the default) for cuBLASLt,
        the native emitter and fission backends.
        """
        return False

    @abc.abstractmethod
    def get_supported_configs(self, instr: "Instruction") -> list[Config]:
        """Every config this backend could use for ``instr``, in preference order; ``[]`` if none."""

    def get_default_config(self, instr: "Instruction") -> Config | None:
        """The config used without tuning (``xla_gpu_autotune_level=0`` fallback), or ``None``."""
        return None

    @abc.abstractmethod
    def compile(self, instr: "Instruction", config: Config) -> Executable:
        """Compile ``instr`` with ``config``.

        Raises:
            CompilationFailed: the config cannot be compiled (reason given); any other exception is
                also recorded as a compilation failure of this config only.
        """

    @abc.abstractmethod
    def apply_config(self, instr: "Instruction", config: Config) -> None:
        """Write ``config`` into ``instr``'s backend config (XLA ``ApplyConfig``), in place."""

    def validate_config(self, instr: "Instruction", config: Config) -> None:
        """Check a config that comes from outside this process (a cache file, an imported bundle) before
        it is applied; the autotuner re-tunes instead of applying a config that fails here.

        The default checks that ``config`` names this backend and that :meth:`apply_config` accepts it on
        a copy of ``instr``; backends with value ranges (block sizes, warps) check those too.

        Raises:
            ConfigError: the config is not one this backend can use (the message says why).
        """
        import copy

        if config.backend != self.name:
            raise ConfigError(f"config of backend {config.backend!r} given to backend {self.name!r}")
        clone = copy.copy(instr)
        clone.attrs = dict(instr.attrs)
        try:
            self.apply_config(clone, config)
        except Exception as e:  # noqa: BLE001 - whatever apply_config raises, the config is unusable
            raise ConfigError(f"{type(e).__name__}: {e}") from None

    def scratch_bytes(self, config: Config) -> int:
        """Scratch (workspace) bytes ``config`` needs at run time (0 by default)."""
        return 0

    def estimate_seconds(self, instr: "Instruction", config: Config, device: Any) -> float | None:
        """This backend's own estimate of ``config``'s run time of ``instr`` on ``device`` (seconds), or ``None``.

        The estimate hook (see docs/plugins.md). Tuning without the target GPU ranks candidates by estimate
        (:mod:`fusegen.autotuning.cost_model`): a float here is used as is and recorded as estimated by
        ``backend:<name>``; ``None`` falls back to ``fusegen.perf`` when :attr:`modelled_by_fusegen`, else the
        config has *no estimate*. Configs without an estimate are never crowded out: they rank after the estimated
        ones when nothing is timed, and are timed beside (not instead of) the cost model's top ``k`` when timing.

        Args:
            instr: the instruction being tuned (do not modify it); config: one of :meth:`get_supported_configs`'s;
            device: a :class:`fusegen.device.DeviceDescription`.
        """
        return None

    def fissioned(self, instr: "Instruction", config: Config) -> "Module | None":
        """What ``config`` runs in place of ``instr``, as a module whose entry computation takes ``instr``'s operands
        and gives its result (XLA's ``FissionBackend``: the library call and fusions of the rest), or ``None`` (the
        default: ``config`` tunes ``instr`` itself). For a backend :attr:`modelled_by_fusegen`, ``fusegen.perf``
        estimates this module kernel by kernel (:func:`fusegen.perf.estimate.estimate_fission`) instead of a copy of
        ``instr`` with ``config`` applied."""
        return None

    # -- worker-process support -------------------------------------------------------------
    def worker_spec(self) -> str:
        """``"module:QualName"`` importable in a fresh process; the class must construct with no args."""
        cls = type(self)
        return f"{cls.__module__}:{cls.__qualname__}"

    @staticmethod
    def from_worker_spec(spec: str) -> "CodegenBackend":
        """Rebuild a backend from :meth:`worker_spec` (in a compile worker)."""
        import importlib

        mod_name, _, qual = spec.partition(":")
        obj: Any = importlib.import_module(mod_name)
        for part in qual.split("."):
            obj = getattr(obj, part)
        return obj()

    def compile_from_text(self, hlo_text: str, config: Config) -> Executable:
        """Compile the root of the entry computation of ``hlo_text`` (used by compile workers)."""
        from fusegen.hlo.parser import entry_root_from_text

        return self.compile(entry_root_from_text(hlo_text), config)

    def __repr__(self) -> str:
        return f"<CodegenBackend {self.name} v{self.version}>"
