"""Compiling candidates in parallel in worker processes, one failure at a time.

XLA compiles candidates on a thread pool (``Autotuner::CompileAll``, autotuner.cc); one bad config
that crashes the compiler takes the whole process with it (the Inductor complaints in
``reference/anchors.md`` §1.4: "one config ... poisons the whole process"). Here every candidate is
compiled in a worker *process* (a fresh ``python -m`` interpreter by default, as safe with CUDA and Triton as
``spawn`` and never re-running the caller's ``__main__``: :mod:`fusegen.runtime.module_process`), each worker owns a
pipe, and the pool knows which task each worker holds, so:

* a compile that raises fails that config (COMPILATION_FAILED with the reason);
* a worker that dies (``os._exit``, a segfault) fails only the task it held ("compile worker
  crashed (exit code N)"), and is replaced;
* a compile that outlives ``timeout_s`` is killed and fails that config only; the pool carries on.

Tasks are picklable descriptions: the backend's ``worker_spec`` (``module:Class``), the config as
JSON and the instruction as HLO text (a one-instruction module printed by ``fusegen.hlo.printer`` and
parsed back by ``fusegen.hlo.parser`` in the worker). Executables come back as pickle bytes over the
pipe (inter-process transport only; nothing is ever unpickled from disk) and stay bytes here
(:class:`~fusegen.autotuning.supervised.PickledExecutable`): they are unpickled only where they are profiled,
a supervised worker by default (:mod:`fusegen.autotuning.supervised`).
"""

from __future__ import annotations

import collections
import hashlib
import os
import pickle
import time
from multiprocessing.connection import wait as _wait
from typing import TYPE_CHECKING, Any, Callable, Sequence

import attrs

from fusegen.autotuning.supervised import PickledExecutable
from fusegen.codegen_backend import CodegenBackend, CompilationFailed, Config, Executable
from fusegen.runtime.module_process import get_context

if TYPE_CHECKING:  # pragma: no cover
    from fusegen.hlo.ir import Instruction, Module

DEFAULT_TIMEOUT_S = 300.0


class CompilePoolUnavailable(RuntimeError):
    """Worker compilation needs ``fusegen.hlo.printer`` and ``fusegen.hlo.parser`` (message says which)."""


# --------------------------------------------------------------------------------------------
# Instruction <-> text
# --------------------------------------------------------------------------------------------

def _called_computations_post_order(instr: "Instruction") -> list:
    seen: set[int] = set()
    order: list = []

    def visit(comp) -> None:
        if id(comp) in seen:
            return
        seen.add(id(comp))
        for i in comp.instructions:
            for c in i.called_computations:
                visit(c)
        order.append(comp)

    for c in instr.called_computations:
        visit(c)
    return order


def instruction_module(instr: "Instruction") -> "Module":
    """A module whose entry holds ``instr`` as root, fed by one parameter per operand."""
    from fusegen.hlo.ir import Computation, Instruction, Module

    params = [Instruction(f"p{k}", "parameter", op.shape, attrs={"parameter_number": k})
              for k, op in enumerate(instr.operands)]
    clone = Instruction(instr.name, instr.opcode, instr.shape, operands=list(params), attrs=dict(instr.attrs))
    entry = Computation("main", instructions=[*params, clone], root=clone, is_entry=True)
    comps = _called_computations_post_order(instr)
    return Module("autotune_candidate", computations=[*comps, entry], entry=entry)


def instruction_to_text(instr: "Instruction") -> str:
    """HLO text of :func:`instruction_module` (``CompilePoolUnavailable`` without a printer)."""
    try:
        from fusegen.hlo.printer import print_module
    except ImportError as e:
        raise CompilePoolUnavailable(f"compiling in worker processes needs fusegen.hlo.printer ({e})") from None
    return print_module(instruction_module(instr))


# --------------------------------------------------------------------------------------------
# Tasks and outcomes
# --------------------------------------------------------------------------------------------

@attrs.frozen
class CompileTask:
    """One candidate to compile: picklable, no live objects."""

    index: int
    backend_spec: str
    config: dict  # Config.to_json()
    hlo_text: str


@attrs.define
class CompileOutcome:
    index: int
    executable: Executable | None = None
    error: str | None = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.executable is not None


def compile_task_in_process(task: CompileTask, backends: dict[str, CodegenBackend] | None = None) -> CompileOutcome:
    """Run one task here (used by workers, and for serial compilation)."""
    t0 = time.perf_counter()
    try:
        backend = (backends or {}).get(task.backend_spec) or CodegenBackend.from_worker_spec(task.backend_spec)
        if backends is not None:
            backends[task.backend_spec] = backend
        exe = backend.compile_from_text(task.hlo_text, Config.from_json(task.config))
        if exe is None:
            raise CompilationFailed("backend returned no executable")
        return CompileOutcome(task.index, exe, None, time.perf_counter() - t0)
    except CompilationFailed as e:
        return CompileOutcome(task.index, None, e.reason, time.perf_counter() - t0)
    except Exception as e:
        return CompileOutcome(task.index, None, f"{type(e).__name__}: {e}", time.perf_counter() - t0)


def _worker_main(conn) -> None:
    backends: dict[str, CodegenBackend] = {}
    texts: dict[str, str] = {}
    while True:
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg is None:
            return
        index, spec, config, text_id, text = msg
        if text is not None:
            if len(texts) > 16:
                texts.clear()
            texts[text_id] = text
        out = compile_task_in_process(CompileTask(index, spec, config, texts[text_id]), backends)
        # The executable travels as pickle bytes inside the message: the tuning process unpickles the
        # message (plain data) but not the executable, which only a profiling worker loads.
        try:
            data = pickle.dumps(out.executable) if out.executable is not None else None
        except Exception as e:  # the executable could not be pickled
            conn.send((out.index, None, f"executable cannot be sent back from the compile worker "
                                        f"({type(e).__name__}: {e})", out.seconds))
            continue
        conn.send((out.index, data, out.error, out.seconds))


class _Worker:
    def __init__(self, ctx) -> None:
        parent, child = ctx.Pipe(duplex=True)
        self.conn = parent
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True, name="fusegen-compile")
        self.proc.start()
        child.close()
        self.texts: set[str] = set()
        self.task: CompileTask | None = None
        self.started = 0.0

    def submit(self, task: CompileTask) -> None:
        tid = hashlib.sha1(task.hlo_text.encode()).hexdigest()
        text = None if tid in self.texts else task.hlo_text
        self.conn.send((task.index, task.backend_spec, task.config, tid, text))
        self.texts.add(tid)
        self.task = task
        self.started = time.monotonic()

    def kill(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join(5)
        self.conn.close()

    def stop(self) -> None:
        try:
            self.conn.send(None)
        except (OSError, BrokenPipeError):
            pass
        self.proc.join(2)
        if self.proc.is_alive():
            self.proc.kill()
            self.proc.join(2)
        self.conn.close()


class CompilePool:
    """A pool of compile worker processes that survives crashing and hanging compiles.

    Args:
        workers: number of processes (default: CPU count); 0 compiles in the calling process, in order.
        timeout_s: per-task limit; a task past it is killed and fails with a reason.
        start_method: ``module`` (default: ``python -m`` workers that never re-run the caller's ``__main__``:
            :mod:`fusegen.runtime.module_process`), ``spawn`` or ``forkserver``.

    Use as a context manager, or call :meth:`close`.
    """

    def __init__(self, workers: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 start_method: str = "module"):
        self.max_workers = (os.cpu_count() or 1) if workers is None else max(0, int(workers))
        self.timeout_s = float(timeout_s)
        self._ctx = get_context(start_method)  # fusegen.runtime.module_process
        self._workers: list[_Worker] = []
        self.crashes = 0
        self.timeouts = 0

    def __enter__(self) -> "CompilePool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        for w in self._workers:
            w.stop()
        self._workers = []

    def compile_all(self, tasks: Sequence[CompileTask],
                    on_done: Callable[[CompileOutcome], Any] | None = None) -> list[CompileOutcome]:
        """Compile every task; outcomes in task order (``on_done`` is called as each finishes)."""
        if self.max_workers == 0:
            out = []
            local: dict[str, CodegenBackend] = {}
            for t in tasks:
                o = compile_task_in_process(t, local)
                if on_done:
                    on_done(o)
                out.append(o)
            return out
        results: dict[int, CompileOutcome] = {}
        pending = collections.deque(enumerate(tasks))
        position: dict[int, int] = {}  # id(task) -> position
        want = min(self.max_workers, len(tasks))
        while len(self._workers) < want:
            self._workers.append(_Worker(self._ctx))

        def finish(pos: int, o: CompileOutcome) -> None:
            results[pos] = o
            if on_done:
                on_done(o)

        while pending or any(w.task is not None for w in self._workers):
            for w in self._workers:
                if w.task is None and pending:
                    pos, t = pending.popleft()
                    position[id(t)] = pos
                    try:
                        w.submit(t)
                    except (OSError, BrokenPipeError):
                        self._replace(w)
                        pending.appendleft((pos, t))
            busy = [w for w in self._workers if w.task is not None]
            if not busy:
                continue
            now = time.monotonic()
            wait_s = max(0.0, min(w.started + self.timeout_s - now for w in busy))
            ready = set(_wait([w.conn for w in busy] + [w.proc.sentinel for w in busy], timeout=min(wait_s, 1.0)))
            for w in busy:
                t = w.task
                assert t is not None
                pos = position[id(t)]
                if w.conn in ready or w.proc.sentinel in ready:
                    got = None
                    try:
                        if w.conn.poll():
                            got = w.conn.recv()
                    except (EOFError, OSError):
                        got = None
                    if got is not None:
                        idx, data, err, secs = got
                        exe = PickledExecutable(data) if data is not None else None
                        w.task = None
                        finish(pos, CompileOutcome(t.index, exe, err, secs))
                        continue
                    if not w.proc.is_alive():
                        w.proc.join(1)
                        code = w.proc.exitcode
                        self.crashes += 1
                        finish(pos, CompileOutcome(t.index, None, f"compile worker crashed (exit code {code}) while "
                                                                 f"compiling this config", time.monotonic() - w.started))
                        self._replace(w)
                        continue
                if time.monotonic() - w.started > self.timeout_s:
                    self.timeouts += 1
                    finish(pos, CompileOutcome(t.index, None, f"compilation timed out after {self.timeout_s:g} s",
                                               time.monotonic() - w.started))
                    self._replace(w)
        return [results[i] for i in range(len(tasks))]

    def _replace(self, w: _Worker) -> None:
        w.task = None
        w.kill()
        i = self._workers.index(w)
        self._workers[i] = _Worker(self._ctx)
