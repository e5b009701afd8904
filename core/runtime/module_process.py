"""A ``multiprocessing`` context whose processes never import the caller's ``__main__``.

The autotuner's compile and profiling workers talk to their parent over a ``multiprocessing`` connection
(``target(conn)``). With the ``spawn`` start method each worker re-runs the parent's main script first, so a plain
script calling ``fusegen.tune(..., workers=2)`` without an ``if __name__ == "__main__":`` guard starts over in every
worker. :class:`ModuleContext` has the two calls those workers use, ``Pipe`` and ``Process``, but its processes
start as ``python -m fusegen.runtime.module_process MODULE:FUNCTION FD SENTINEL`` (as pytest-xdist and Ray start
theirs): a fresh interpreter that imports ``target`` by name and calls it with the connection on ``FD``.
:class:`ModuleProcess` answers what the pools ask of a process: ``start``, ``is_alive``, ``kill``, ``join``,
``exitcode``, ``pid`` and a ``sentinel`` that ``multiprocessing.connection.wait`` sees readable once it ended.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import subprocess
import sys
import weakref
from typing import Any, Callable


def child_env() -> dict[str, str]:
    """The environment of a worker interpreter: this one's, with ``PYTHONPATH`` set to what this process imports
    from (so a worker finds what the caller found, an editable install or a notebook's ``sys.path`` alike)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


class ModuleProcess:
    """A worker process running ``target(conn)`` in a fresh interpreter (see the module docstring).

    Args:
        target: a module-level function (imported by name in the worker).
        args: ``(conn,)``, one end of :meth:`ModuleContext.Pipe`.
    """

    def __init__(self, target: Callable, args: tuple = (), daemon: bool = True, name: str | None = None):
        if len(args) != 1 or not hasattr(args[0], "fileno"):
            raise TypeError("a ModuleProcess takes one argument, a multiprocessing connection")
        if "<locals>" in target.__qualname__:
            raise TypeError(f"{target.__qualname__} is not importable by name (a worker imports its target)")
        self.target, self.args, self.daemon, self.name = target, args, daemon, name
        self._popen: subprocess.Popen | None = None
        self.sentinel: int | None = None
        self.pid: int | None = None

    def start(self) -> None:
        fd = self.args[0].fileno()
        r, w = os.pipe()  # the worker holds w until it ends: then r reads end-of-file (multiprocessing's sentinel)
        try:
            self._popen = subprocess.Popen(
                [sys.executable, "-m", "fusegen.runtime.module_process",
                 f"{self.target.__module__}:{self.target.__qualname__}", str(fd), str(w)],
                pass_fds=(fd, w), env=child_env())
        finally:
            os.close(w)
        self.sentinel, self.pid = r, self._popen.pid
        weakref.finalize(self, os.close, r)

    def is_alive(self) -> bool:
        return self._popen is not None and self._popen.poll() is None

    def kill(self) -> None:
        if self.is_alive():
            self._popen.kill()

    terminate = kill

    def join(self, timeout: float | None = None) -> None:
        if self._popen is None:
            return
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    @property
    def exitcode(self) -> int | None:
        """The exit status once ended (``-N`` for signal N, as ``multiprocessing`` reports it), else None."""
        return None if self._popen is None else self._popen.poll()


class ModuleContext:
    """The part of a ``multiprocessing`` context the autotuner's pools use, with :class:`ModuleProcess` processes."""

    def Pipe(self, duplex: bool = True) -> tuple[Any, Any]:  # noqa: N802 - multiprocessing's spelling
        return multiprocessing.Pipe(duplex)

    def Process(self, target: Callable, args: tuple = (), daemon: bool = True,  # noqa: N802
                name: str | None = None) -> ModuleProcess:
        return ModuleProcess(target, args, daemon, name)


def get_context(start_method: str) -> Any:
    """``"module"``: a :class:`ModuleContext`; otherwise ``multiprocessing.get_context(start_method)``.

    Raises:
        ValueError: an unknown start method.
    """
    return ModuleContext() if start_method == "module" else multiprocessing.get_context(start_method)


def _main(argv: list[str]) -> None:
    from multiprocessing.connection import Connection

    target, fd, _sentinel = argv  # the sentinel's write end stays open until this process ends
    module, _, name = target.partition(":")
    fn: Any = importlib.import_module(module)
    for part in name.split("."):
        fn = getattr(fn, part)
    fn(Connection(int(fd)))


if __name__ == "__main__":
    _main(sys.argv[1:])
