"""sm_90 compiles of a run's kernels: once per distinct fusion, optionally on a pool of worker processes.

Fusions with the same canonical computation, fusion backend config (tiling, GEMM config) and operand/result
shapes and layouts get the same kernels up to names, so the first one's compile result stands for all of
them (XLA deduplicates such fusions too: ``deduplicated_name`` in the metadata). With ``jobs > 1`` compiles
run on worker processes while the interpreter goes on in the main process
(:class:`~fusegen.runtime.worker_pool.WorkerPool`: ``python -m`` workers that never re-run the caller's
``__main__``, so a plain script needs no ``if __name__ == "__main__":`` guard); Triton's on-disk cache
(``TRITON_CACHE_DIR``, inherited by the workers) keeps them warm between runs.

Mirrors the role of XLA's parallel LLVM compilation (``xla_gpu_force_compilation_parallelism``,
``xla/service/gpu/gpu_compiler.cc``: ``CompileModuleToLlvmIrImpl`` + the thread pool of ``CompileAndLink``).
"""

from __future__ import annotations

import json
import time
from concurrent.futures import Future
from typing import Any, Sequence

from fusegen.codegen import compile_record
from fusegen.hlo.ir import Instruction


def fusion_fingerprint(inst: Instruction, kernels: Sequence[Any]) -> tuple:
    """What makes two fusions' kernels compile alike: canonical HLO, fusion backend config, shapes with
    layouts, and each kernel's constexprs, launch and stages."""
    from fusegen.hlo.canonical import canonical_hlo
    from fusegen.hlo.printer import print_shape

    fbc = inst.backend_config.get("fusion_backend_config") if isinstance(inst.backend_config, dict) else None
    return (canonical_hlo(inst), json.dumps(fbc, sort_keys=True, default=str), print_shape(inst.shape),
            tuple(print_shape(o.shape) for o in inst.operands),
            tuple((tuple(sorted(k.constexprs.items())), str(k.launch), k.launch.num_warps, k.num_stages)
                  for k in kernels))


def compile_kernels(kernels: Sequence[Any], capability: int = 90) -> tuple:
    """Compile every kernel for ``sm_<capability>``; returns ``("ok" | "failed: <Error>: <first line>",
    seconds, shared, registers)`` with ``shared`` each compiled kernel's shared memory in bytes (Triton's
    ``shared`` metadata) and ``registers`` its registers per thread (the cubin's; 0 unknown), both empty when
    the compile failed.

    Runs in a worker process too (a module-level function, so it pickles).
    """
    from fusegen.codegen import triton_runtime

    t0 = time.perf_counter()
    shared, registers = [], []
    try:
        for k in kernels:
            # the launched kernel: Triton's JIT specialises 16-byte aligned buffers (XLA's are), which can change
            # its layouts and so its shared memory (fp8 GEMM tiles: 256 bytes unaligned, 512 aligned, as XLA's)
            res = triton_runtime.compile_for_target(k, capability=capability, pointer_alignment=16)
            shared.append(res.shared_bytes)
            registers.append(res.registers)
    except Exception as e:
        return (f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", time.perf_counter() - t0,
                (), ())
    return "ok", time.perf_counter() - t0, tuple(shared), tuple(registers)


def with_compiled_shared(ks: Any, shared: int) -> Any:
    """``ks`` whose launch carries its compiled shared memory (``shared`` bytes) as the launch's shared memory
    and in its ``smem=`` string: XLA launches a Triton fusion with what the Triton compile allocated
    (``TritonFusion::Emit``, ``xla/backends/gpu/codegen/triton/fusion.cc``: the thunk's shared memory is the
    compiled kernel's ``shmem_bytes``)."""
    import attrs

    return attrs.evolve(ks, launch=attrs.evolve(ks.launch, shared_memory_bytes=int(shared),
                                                launch_shared_memory_bytes=int(shared)))


def apply_compiled_shared(rep: Any, result: tuple) -> None:
    """Record a Triton fusion's compiled shared memory in its report (``rep.kernels`` and the ``launch``
    string); native emitters keep XLA's launch (their shared tiles are static: the thunk's shared memory
    is 0), and a failed compile changes nothing."""
    from fusegen import kinds

    status, _seconds, shared = result[:3]
    if rep.kind != kinds.TRITON or status != "ok" or len(shared) != len(rep.kernels):
        return
    primary = next((i for i, k in enumerate(rep.kernels) if str(k.launch) == rep.launch), 0)
    rep.kernels = [with_compiled_shared(k, s) for k, s in zip(rep.kernels, shared)]
    rep.launch = str(rep.kernels[primary].launch)


#: Why ``explain`` reports no shared memory for a Triton fusion it did not compile.
NOT_COMPILED_REASON = ("the shared memory of a Triton kernel is known after its sm_90 compile, and this kernel is not "
                       "in the compile cache: `fusegen run` or `fusegen explain --compile` compiles it")


def shared_from_cache(rep: Any, inst: Instruction, kernels: Sequence[Any], jobs: "CompileJobs | None" = None) -> str | None:
    """For a Triton fusion's report: put its kernels' compiled shared memory into ``rep`` (as
    :func:`apply_compiled_shared`) from the compile records of identical fusions, or from a compile on
    ``jobs`` when given; ``kernels`` are the emitter's (not yet carrying compile results). Returns ``None``
    when known (or not a Triton fusion), else why not (:data:`NOT_COMPILED_REASON`, or the failed compile)."""
    from fusegen import kinds

    if rep.kind != kinds.TRITON or not kernels:
        return None
    if jobs is not None:
        result = jobs.result(jobs.submit(inst, kernels)[0])
        if result[0] != "ok":
            return f"sm_90 compile {result[0]}"
    else:
        shared = compile_record.lookup(compile_record.compile_key(fusion_fingerprint(inst, kernels)))
        if shared is None or len(shared) != len(kernels):
            return NOT_COMPILED_REASON
        result = ("ok", 0.0, tuple(shared))
    apply_compiled_shared(rep, result)
    return None


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
        self._pool: Any = None  # fusegen.runtime.worker_pool.WorkerPool, started after pool_after compiles
        self._by_key: dict[tuple, Future | tuple] = {}
        self._deferred: dict[tuple, tuple] = {}  # key -> kernels, waiting for the pool or for result()
        self.distinct = 0  # compiles actually run (the rest were served by an identical fusion's)

    def submit(self, inst: Instruction, kernels: Sequence[Any]) -> tuple[tuple, bool]:
        """Start (or reuse) the compile of ``inst``'s kernels; returns ``(handle, first)`` for :meth:`result`."""
        key = fusion_fingerprint(inst, kernels)
        if key in self._by_key:
            return key, False
        self.distinct += 1
        if self.jobs == 1:
            self._done(key, compile_kernels(kernels))
            return key, True
        self._deferred[key] = tuple(kernels)
        if self._pool is None and self.distinct >= self.pool_after:
            from fusegen.runtime.worker_pool import WorkerPool

            self._pool = WorkerPool(self.jobs)
        if self._pool is not None:
            for k, ks in self._deferred.items():
                self._by_key[k] = self._pool.submit(compile_kernels, ks)
            self._deferred.clear()
        return key, True

    def result(self, handle: tuple) -> tuple:
        """``(status, seconds, shared, registers)`` of a submitted compile (:func:`compile_kernels`; a worker
        that died reads as a failed compile)."""
        if handle in self._deferred:
            self._done(handle, compile_kernels(self._deferred.pop(handle)))
        r = self._by_key[handle]
        if isinstance(r, Future):
            try:
                r = r.result()
            except Exception as e:  # WorkerDied, a pickling problem: the compile did not happen
                r = (f"failed: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}", 0.0, (), ())
            self._done(handle, r)
        return r

    def _done(self, handle: tuple, r: tuple) -> None:
        # the shared memory of a good compile outlives the run: `explain` reads it (compile_record)
        self._by_key[handle] = r
        if r[0] == "ok":
            compile_record.record(compile_record.compile_key(handle), r[2], 90)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
