"""Small numpy codegen backends and GEMM fusions for testing and benchmarking the autotuner.

The backends compute real matrix products with numpy (so correctness clustering has real outputs to
compare) and take behaviour switches from their config values, so one test can mix good, wrong,
crashing and out-of-bounds candidates:

* ``cost_us``: busy-wait this long per run (orders the candidates' timings);
* ``wrong``: scale the result by 1.5 (a wrong kernel);
* ``oob``: write this many elements past the end of the output (red-zone test);
* ``fail_compile``: raise :class:`CompilationFailed`;
* ``crash``: ``os._exit(13)`` in the compiler (compile-worker crash test);
* ``hang``: sleep in the compiler (timeout test);
* ``raise_run``: raise when run (EXECUTION_FAILED);
* ``hang_run``: sleep when run; ``exit_run``: ``os._exit(17)`` when run; ``hang_unpickle``: sleep when the
  executable is unpickled (profiling-supervision tests).

Every backend constructs without arguments (compile workers rebuild it from ``worker_spec``).
"""

from __future__ import annotations

import os
import time
import numpy as np

from fusegen.autotuning.profiler import Profiler
from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable


def make_gemm_module(shapes: list[tuple[int, int, int]], dtype: str = "f32", kind: str = "__triton_gemm",
                     name: str = "gemms"):
    """A module with one ``__triton_gemm``-style fusion per ``(m, n, k)``: ``dot(p[m,k], p[k,n])``.

    Returns:
        ``(module, [fusion instructions])``.
    """
    from fusegen.hlo.ir import Computation, Instruction, Module, Shape

    comps = []
    entry_insts: list[Instruction] = []
    fusions = []
    outs = []
    pnum = 0
    for idx, (m, n, k) in enumerate(shapes):
        a = Instruction(f"param_0.{idx}", "parameter", Shape(dtype, (m, k)), attrs={"parameter_number": 0})
        b = Instruction(f"param_1.{idx}", "parameter", Shape(dtype, (k, n)), attrs={"parameter_number": 1})
        d = Instruction(f"dot.{idx}", "dot", Shape(dtype, (m, n)), operands=[a, b],
                        attrs={"lhs_contracting_dims": (1,), "rhs_contracting_dims": (0,)})
        comp = Computation(f"gemm_fusion.{idx}", instructions=[a, b, d], root=d)
        comps.append(comp)
        pa = Instruction(f"p{pnum}", "parameter", Shape(dtype, (m, k)), attrs={"parameter_number": pnum})
        pb = Instruction(f"p{pnum + 1}", "parameter", Shape(dtype, (k, n)), attrs={"parameter_number": pnum + 1})
        pnum += 2
        f = Instruction(f"gemm.{idx}", "fusion", Shape(dtype, (m, n)), operands=[pa, pb],
                        attrs={"kind": "kCustom", "calls": comp,
                               "backend_config": {"fusion_backend_config": {"kind": kind}}})
        entry_insts += [pa, pb, f]
        fusions.append(f)
        outs.append(f)
    if len(outs) == 1:
        root = outs[0]
    else:
        root = Instruction("tuple", "tuple", Shape("tuple", tuple_shapes=tuple(o.shape for o in outs)), operands=outs)
        entry_insts.append(root)
    entry = Computation("main", instructions=entry_insts, root=root, is_entry=True)
    return Module(name, computations=[*comps, entry], entry=entry), fusions


def _gemm_dims(instr) -> tuple[int, int, int]:
    if instr.opcode != "fusion":
        raise CompilationFailed(f"%{instr.name} is not a fusion")
    root = instr.fused_computation.root
    if root is None or root.opcode != "dot":
        raise CompilationFailed(f"%{instr.name}: fused root is not a dot")
    (m, k), (_, n) = root.operands[0].shape.dimensions, root.operands[1].shape.dimensions
    return m, n, k


def _busy(us: float) -> None:
    end = time.perf_counter() + us / 1e6
    while time.perf_counter() < end:
        pass


def burn_cpu(seconds: float) -> int:
    """Spend ``seconds`` of real CPU time (a stand-in for an expensive compile)."""
    end = time.process_time() + seconds
    x = 0
    while time.process_time() < end:
        for i in range(2000):
            x = (x * 1103515245 + i) & 0xFFFFFFFF
    return x


class GemmExecutable(Executable):
    """``out = lhs @ rhs`` with the behaviour switches of the module docstring."""

    def __init__(self, m: int, n: int, k: int, values: dict):
        self.m, self.n, self.k = m, n, k
        self.values = dict(values)

    def __setstate__(self, state: dict) -> None:
        if state.get("values", {}).get("hang_unpickle"):
            time.sleep(3600)
        self.__dict__.update(state)

    def run(self, inputs, outputs, scratch) -> None:
        v = self.values
        if v.get("hang_run"):
            time.sleep(3600)
        if v.get("exit_run"):
            os._exit(17)
        if v.get("raise_run"):
            raise RuntimeError("illegal memory access (simulated)")
        a = np.asarray(inputs[0], dtype=np.float32).reshape(self.m, self.k)
        b = np.asarray(inputs[1], dtype=np.float32).reshape(self.k, self.n)
        res = (a @ b).ravel()
        if v.get("wrong"):
            res = res * 1.5
        out = outputs[0]
        out[...] = res.astype(out.dtype)
        extra = int(v.get("oob", 0) or 0)
        if extra:
            wide = np.lib.stride_tricks.as_strided(out, shape=(out.size + extra,), strides=out.strides)
            wide[out.size:] = 0
        if scratch is not None and scratch.size:
            scratch[:] = 0
        _busy(float(v.get("cost_us", 0) or 0))


class FakeGemmBackend(CodegenBackend):
    """An untrusted Triton-like backend: block-size configs, config written as ``triton_gemm_config``."""

    name = "fake_triton"
    version = "1"
    modelled_by_fusegen = True  # writes triton_gemm_config, which fusegen.perf's tiled model reads
    #: Configs returned by :meth:`get_supported_configs` (class-level so workers see the same).
    CONFIGS: list[dict] = [
        {"block_m": 16, "block_n": 16, "block_k": 16, "cost_us": 600},
        {"block_m": 32, "block_n": 32, "block_k": 16, "cost_us": 300},
        {"block_m": 64, "block_n": 32, "block_k": 32, "cost_us": 900},
    ]
    #: CPU seconds each compile burns (benchmarks).
    COMPILE_COST_S = 0.0

    def can_produce_wrong_results(self) -> bool:
        return True

    def get_supported_configs(self, instr) -> list[Config]:
        if instr.opcode != "fusion" or instr.fusion_backend_kind not in ("__triton_gemm", None):
            return []
        return [Config(self.name, v) for v in self.CONFIGS]

    def compile(self, instr, config: Config) -> Executable:
        m, n, k = _gemm_dims(instr)
        v = config.values
        if v.get("crash"):
            os._exit(13)
        if v.get("hang"):
            time.sleep(3600)
        if v.get("fail_compile"):
            raise CompilationFailed(f"block_k={v.get('block_k')} needs more shared memory than the device has")
        if self.COMPILE_COST_S:
            burn_cpu(self.COMPILE_COST_S)
        return GemmExecutable(m, n, k, v)

    def validate_config(self, instr, config: Config) -> None:
        """Block sizes must be positive powers of two (as Triton's); then the default check."""
        from fusegen.codegen_backend import ConfigError

        for f in ("block_m", "block_n", "block_k"):
            v = config.values.get(f, 16)
            if isinstance(v, bool) or not isinstance(v, int) or v <= 0 or v & (v - 1):
                raise ConfigError(f"{f}={v!r} is not a positive power of two")
        super().validate_config(instr, config)

    def apply_config(self, instr, config: Config) -> None:
        bc = instr.attrs.get("backend_config")
        if not isinstance(bc, dict):
            bc = {}
        fbc = dict(bc.get("fusion_backend_config", {}))
        fbc["triton_gemm_config"] = {k: v for k, v in config.values.items()}
        fbc["fusegen_autotuned_backend"] = config.backend
        instr.attrs["backend_config"] = {**bc, "fusion_backend_config": fbc}


class FakeLibraryBackend(FakeGemmBackend):
    """A trusted cuBLASLt-like backend: algorithm configs with scratch (workspace) bytes."""

    name = "fake_lib"
    version = "7"
    modelled_by_fusegen = False  # algorithm ids: nothing fusegen.perf can read (no estimate)
    CONFIGS = [
        {"algorithm": 0, "workspace": 4096, "cost_us": 700},
        {"algorithm": 1, "workspace": 0, "cost_us": 1500},
    ]

    def can_produce_wrong_results(self) -> bool:
        return False

    def get_default_config(self, instr) -> Config | None:
        return Config(self.name, {"algorithm": 0, "workspace": 4096})

    def scratch_bytes(self, config: Config) -> int:
        return int(config.values.get("workspace", 0))


# --------------------------------------------------------------------------------------------
# Helpers run in separate processes by the concurrency tests (must be importable by name)
# --------------------------------------------------------------------------------------------

def tune_into_directory(cache_dir: str, shapes: list, start_event=None, rounds: int = 1) -> list[tuple[str, str]]:
    """Tune a GEMM module into ``cache_dir`` (in-process compiles); returns ``[(instruction, winner)]``."""
    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner
    from fusegen.autotuning.profiler import CpuWallTimeProfiler

    if start_event is not None:
        start_event.wait(30)
    out = []
    for _ in range(rounds):
        module, _ = make_gemm_module([tuple(s) for s in shapes])
        opts = AutotuneOptions(compile_workers=0, xla_gpu_redzone_padding_bytes=256,
                               xla_gpu_per_fusion_autotune_cache_dir=cache_dir,
                               xla_gpu_experimental_autotune_cache_mode="WRITE_ONLY")
        with Autotuner([FakeGemmBackend(), FakeLibraryBackend()], opts, "test-device",
                       profiler=CpuWallTimeProfiler(1)) as tuner:
            out = [(r.name, r.winner) for r in tuner.tune_module(module)]
    return out


def hammer_writes(cache_dir: str, n: int, start_event=None) -> int:
    """Write one fixed entry ``n`` times into ``cache_dir`` (atomic-rename stress test)."""
    from fusegen.cache.format import CacheEntry, TuneResult
    from fusegen.cache.key import CacheKey
    from fusegen.cache.tiers import DirectoryTier

    if start_event is not None:
        start_event.wait(30)
    tier = DirectoryTier(cache_dir)
    for i in range(n):
        tier.put(CacheEntry(CacheKey("dev", "hlo " * 2000, 50, "fp"),
                            TuneResult(Config("fake_triton", {"block_m": 16 * (1 + i % 4)}), "1", float(i), 0, 3, {})))
    return n


class SlowCompileGemmBackend(FakeGemmBackend):
    """:class:`FakeGemmBackend` whose every compile burns ``FUSEGEN_FAKE_COMPILE_COST_S`` CPU seconds
    (default 0.05; compile workers inherit the environment). Stands in for Triton in the benchmark."""

    name = "slow_triton"
    CONFIGS = [{"block_m": bm, "block_n": bn, "block_k": bk, "cost_us": 50 + bm + bn // 2 + bk // 4}
               for bm in (16, 32, 64, 128) for bn in (32, 64) for bk in (32, 64)]

    @property
    def COMPILE_COST_S(self) -> float:  # noqa: N802 (the base class reads it as an attribute)
        return float(os.environ.get("FUSEGEN_FAKE_COMPILE_COST_S", "0.05"))


class DeclaredCostProfiler(Profiler):
    """A deterministic profiler for tests: runs the executable once, reports its ``cost_us`` value.

    Selection tests need a stable ranking on a loaded CI machine; wall time is tested separately.
    """

    name = "declared-cost"
    xp = np

    def time_us(self, executable, inputs, outputs, scratch) -> float:
        executable.run(inputs, outputs, scratch)
        return float(getattr(executable, "values", {}).get("cost_us", 0) or 0)

    def to_host(self, a):
        return np.array(a, copy=True)

    def synchronize(self) -> None:
        pass
