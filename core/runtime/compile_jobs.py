"""sm_90 compiles of a run's kernels: once per distinct fusion, optionally on a pool of worker processes.

Fusions with the same canonical computation, fusion backend config (tiling, GEMM config) and operand/result
shapes and layouts get the same kernels up to names, so the first one's compile result stands for all of
them (XLA deduplicates such fusions too: ``deduplicated_name`` in the metadata). With ``jobs > 1`` compiles
run on a ``forkserver`` process pool while the interpreter goes on in the main process; Triton's on-disk
cache (``TRITON_CACHE_DIR``, inherited by the workers) keeps them warm between runs.

Mirrors the role of XLA's parallel LLVM compilation (``xla_gpu_force_compilation_parallelism``,
``xla/service/gpu/gpu_compiler.cc``: ``CompileModuleToLlvmIrImpl`` + the thread pool of ``CompileAndLink``).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future, ProcessPoolExecutor
from typing import Any, Sequence

from fusegen.hlo.ir import Instruction


def fusion_fingerprint(inst: Instruction, kernels: Sequence[Any]) -> tuple:
    """What makes two fusions' kernels compile alike: canonical HLO, fusion backend config, shapes with
    layouts, and each kernel's constexprs, launch and stages."""
    from fusegen.cache.key import canonical_hlo
    from fusegen.hlo.printer import print_shape

    fbc = inst.backend_config.get("fusion_backend_config") if isinstance(inst.backend_config, dict) else None
    return (canonical_hlo(inst), json.dumps(fbc, sort_keys=True, default=str), print_shape(inst.shape),
            tuple(print_shape(o.shape) for o in inst.operands),
            tuple((tuple(sorted(k.constexprs.items())), str(k.launch), k.launch.num_warps, k.num_stages)
                  for k in kernels))


def compile_kernels(kernels: Sequence[Any], capability: int = 90) -> tuple[str, float]:
    """Compile every kernel for ``sm_<capability>``; returns ``("ok" | "failed: <Error>: <first line>", seconds)``.

    Runs in a worker process too (a module-level function, so it pickles).
    """
    from fusegen.codegen import triton_runtime

    t0 = time.perf_counter()
    try:
        for k in kernels:
            triton_runtime.compile_for_target(k, capability=capability)
    except Exception as e:
        return f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", time.perf_counter() - t0
    return "ok", time.perf_counter() - t0


class CompileJobs:
    """The compiles of one run: deduplicated by :func:`fusion_fingerprint`, on ``jobs`` worker processes.

    Args:
        jobs: worker processes; ``1`` compiles in the calling process, at :meth:`submit`.
        pool_after: distinct compiles to see before the pool starts (a worker pays Triton's import and
            backend start-up, seconds; a module of a few kernels compiles them in the calling process, at
            :meth:`result`).

    Use :meth:`submit` per fusion, then :meth:`result` (blocks until its compile finished), and
    :meth:`close`. ``seconds`` of a result is the compile's own time (``0.0`` for a fusion served by an
    earlier identical one).
    """

    def __init__(self, jobs: int = 1, pool_after: int = 4):
        self.jobs = max(1, int(jobs))
        self.pool_after = pool_after
        self._pool: ProcessPoolExecutor | None = None
        self._by_key: dict[tuple, Future | tuple[str, float]] = {}
        self._deferred: dict[tuple, tuple] = {}  # key -> kernels, waiting for the pool or for result()
        self.distinct = 0  # compiles actually run (the rest were served by an identical fusion's)

    def submit(self, inst: Instruction, kernels: Sequence[Any]) -> tuple[tuple, bool]:
        """Start (or reuse) the compile of ``inst``'s kernels; returns ``(handle, first)`` for :meth:`result`."""
        key = fusion_fingerprint(inst, kernels)
        if key in self._by_key:
            return key, False
        self.distinct += 1
        if self.jobs == 1:
            self._by_key[key] = compile_kernels(kernels)
            return key, True
        self._deferred[key] = tuple(kernels)
        if self._pool is None and self.distinct >= self.pool_after:
            import multiprocessing

            self._pool = ProcessPoolExecutor(self.jobs, mp_context=multiprocessing.get_context("forkserver"))
        if self._pool is not None:
            for k, ks in self._deferred.items():
                self._by_key[k] = self._pool.submit(compile_kernels, ks)
            self._deferred.clear()
        return key, True

    def result(self, handle: tuple) -> tuple[str, float]:
        """``(status, seconds)`` of a submitted compile (a worker that died reads as a failed compile)."""
        if handle in self._deferred:
            self._by_key[handle] = compile_kernels(self._deferred.pop(handle))
        r = self._by_key[handle]
        if isinstance(r, Future):
            try:
                r = r.result()
            except Exception as e:  # BrokenProcessPool, a pickling problem: the compile did not happen
                r = (f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", 0.0)
            self._by_key[handle] = r
        return r

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
