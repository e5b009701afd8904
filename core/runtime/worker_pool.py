"""Worker processes that never import the caller's ``__main__``: each is ``python -m fusegen.runtime.worker_pool``.

``multiprocessing``'s ``spawn`` and ``forkserver`` start methods re-run the parent's main script in every worker
(as ``__mp_main__``), so a plain script that calls ``fusegen.run(..., jobs=2)`` without an
``if __name__ == "__main__":`` guard starts the run again in each worker, which dies (``BrokenProcessPool``).
Like pytest-xdist's and Ray's workers, these start a fresh interpreter on a module of their own and are sent
``(function, args)`` pickled over a pipe; the function must be importable by name (a module-level function of
an installed package). The worker's stdout is its stderr, so a library that prints cannot break the protocol.

:class:`WorkerPool` has the part of :class:`concurrent.futures.ProcessPoolExecutor` that compile jobs use:
``submit`` (a :class:`~concurrent.futures.Future`) and ``shutdown``. A worker that dies fails the call it was
running (:class:`WorkerDied`) and is replaced for the next one.
"""

from __future__ import annotations

import os
import pickle
import queue
import struct
import subprocess
import sys
import threading
from concurrent.futures import Future
from typing import Any, BinaryIO, Callable

_HEADER = struct.Struct(">Q")


class WorkerDied(RuntimeError):
    """The worker process running a call ended before answering (its exit code is in the message)."""


def _send(stream: BinaryIO, obj: Any) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _recv(stream: BinaryIO) -> Any:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        raise EOFError
    (n,) = _HEADER.unpack(head)
    data = stream.read(n)
    if len(data) < n:
        raise EOFError
    return pickle.loads(data)


class _Worker:
    """One worker process and the thread that feeds it calls from the pool's queue."""

    def __init__(self, pool: "WorkerPool"):
        self.pool = pool
        self.proc: subprocess.Popen | None = None
        self.thread = threading.Thread(target=self._loop, daemon=True, name="fusegen-worker-feed")
        self.thread.start()

    def _start(self) -> subprocess.Popen:
        from fusegen.runtime.module_process import child_env  # what this process imports, the worker does

        return subprocess.Popen([sys.executable, "-m", "fusegen.runtime.worker_pool"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, env=child_env())

    def _loop(self) -> None:
        while True:
            item = self.pool._queue.get()
            if item is None:
                break
            fut, fn, args = item
            if not fut.set_running_or_notify_cancel():
                continue
            try:
                if self.proc is None or self.proc.poll() is not None:
                    self.proc = self._start()
                _send(self.proc.stdin, (fn, args))
                ok, value = _recv(self.proc.stdout)
            except (EOFError, OSError, pickle.PickleError) as e:
                code = self.proc.wait() if self.proc is not None else None
                self.proc = None
                fut.set_exception(WorkerDied(f"worker process ended (exit code {code}) during "
                                             f"{getattr(fn, '__name__', fn)}: {type(e).__name__}"))
                continue
            (fut.set_result if ok else fut.set_exception)(value)
        self._stop()

    def _stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            try:
                self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except Exception:
                self.proc.kill()
        self.proc = None


class WorkerPool:
    """``workers`` processes (started on the first :meth:`submit`) running module-level functions.

    Args:
        workers: how many processes, at least 1.
    """

    def __init__(self, workers: int):
        self.workers = max(1, int(workers))
        self._queue: queue.Queue = queue.Queue()
        self._threads: list[_Worker] = []

    def submit(self, fn: Callable, *args: Any) -> Future:
        """Run ``fn(*args)`` in a worker; the future's exception is the function's, or :class:`WorkerDied`."""
        if not self._threads:
            self._threads = [_Worker(self) for _ in range(self.workers)]
        fut: Future = Future()
        self._queue.put((fut, fn, args))
        return fut

    def shutdown(self, wait: bool = True, cancel_futures: bool = False) -> None:
        """Stop the workers after the calls queued so far (``cancel_futures``: cancel those not started)."""
        if cancel_futures:
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not None:
                    item[0].cancel()
        for _ in self._threads:
            self._queue.put(None)
        if wait:
            for w in self._threads:
                w.thread.join()
        self._threads = []


def _serve() -> None:
    """The worker: read ``(fn, args)`` frames from stdin, answer ``(ok, value)`` frames until stdin closes."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # what the called code prints goes to stderr, never into the answers
    sys.stdout = sys.stderr
    inp = sys.stdin.buffer
    while True:
        try:
            fn, args = _recv(inp)
        except EOFError:
            return
        try:
            answer = (True, fn(*args))
        except Exception as e:  # the caller's future raises it
            answer = (False, e)
        try:
            _send(out, answer)
        except (pickle.PickleError, TypeError, AttributeError) as e:
            _send(out, (False, RuntimeError(f"the result of {getattr(fn, '__name__', fn)} does not pickle: {e}")))


if __name__ == "__main__":
    _serve()
