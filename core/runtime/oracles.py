"""The module-level answers a run is judged against, evaluated beside the kernels.

:func:`fusegen.verify.judged_run.run_module` judges each module output against two values that do not depend
on any kernel: the reference evaluator's run of the whole module at the program's precision (``R``) and the f64
oracle (``O``, :mod:`fusegen.evaluator.promote`). :class:`ModuleOracles` evaluates both:

* **in the background** (``run_module(jobs > 1)``, the CLI's default on a machine of two or more cores): in
  a process forked before the first kernel runs, ``R`` then ``O``, each on its own
  :class:`~fusegen.runtime.limits.Budget` of the run's limits (deadline, while iterations). The kernels run
  in Triton's interpreter in the calling process; the answers come back through a pipe when the verdict
  needs them, so only what is left of their time then shows on the wall clock (``gpt12.h200_opt.hlo``:
  about 6 s of the 30 the run took in sequence). A process, not a thread: the evaluator's per-instruction
  Python would hold the GIL against the interpreter's. A run that stops early (an error, a limit, Ctrl-C)
  kills it.
* **in sequence** (``jobs == 1``; a platform without ``fork`` or a ``fork`` that fails; or when the kernel
  path's values and the f64 oracle's together would pass the run's memory limit): after the kernels, where
  ``R`` reuses each fusion's reference value whose operands are bitwise the kernel path's
  (:func:`reusing_reference`).

Both ways give the same values and the same report: the evaluator is deterministic, the reuse only skips a
recomputation, both run ``R`` and ``O`` on the explicit-stack interpreter under
:meth:`~fusegen.runtime.limits.Budget.another_run` (an f64 run whose own loops pass the while budget leaves
the oracle unavailable; a passed deadline fails the run), and the background process's warnings are issued
by the parent, once, as in sequence. The process dies with its parent, however that ends.

No XLA counterpart: XLA's ``HloRunner`` comparisons (``xla/tests/hlo_test_base.cc``, ``RunAndCompare``)
evaluate the reference after the test run, in sequence.
"""

from __future__ import annotations

import multiprocessing
import os
import pickle
import signal
import sys
import warnings
from typing import Any, Callable

import numpy as np

from fusegen.evaluator.common import EvaluationError
from fusegen.evaluator.evaluator import _coerce_arg, evaluate_instruction
from fusegen.evaluator.promote import OracleUnavailable, evaluate_promoted
from fusegen.hlo.ir import Instruction, Module
from fusegen.runtime.instruction_profile import InstructionTimes
from fusegen.runtime.limits import Budget, DeadlineError, RunLimits, estimate_peak_bytes

__all__ = ["ModuleOracles", "reusing_reference", "same_bits"]


class _Carried(BaseException):
    """Carries an error of the f64 run past :func:`evaluate_promoted`'s ``except Exception`` (a passed
    deadline must stay a :class:`DeadlineError`, not read as an unavailable oracle)."""

    def __init__(self, error: BaseException):
        super().__init__(error)
        self.error = error


def same_bits(a: Any, b: Any) -> bool:
    """Whether two values (arrays or nested tuples of them) have the same dtypes, shapes and bytes."""
    if a is b:
        return True
    if isinstance(a, tuple) or isinstance(b, tuple):
        return (isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b)
                and all(same_bits(x, y) for x, y in zip(a, b)))
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype != b.dtype or a.shape != b.shape or a.dtype.hasobject:
        return False
    return bool(np.array_equal(np.ascontiguousarray(a).reshape(-1).view(np.uint8),
                               np.ascontiguousarray(b).reshape(-1).view(np.uint8)))


def reusing_reference(cache: dict[int, tuple[list[Any], Any]]) -> Callable[[Instruction, list[Any]], Any]:
    """``evaluate_instruction`` for the module's reference run, answering a fusion whose operands are bitwise
    the ones the executor evaluated it on with that (deterministic) reference value instead of a second
    evaluation (the kernel path and the reference share operands up to the first fusion that differs).

    ``cache``: ``id(fusion) -> (operands, reference value)`` of its latest execution; entries are consumed.
    """
    def apply(inst: Instruction, ops: list[Any]) -> Any:
        hit = cache.pop(id(inst), None) if inst.opcode == "fusion" else None
        if hit is not None and len(hit[0]) == len(ops) and all(same_bits(x, y) for x, y in zip(hit[0], ops)):
            return hit[1]
        return evaluate_instruction(inst, ops)

    return apply


def _picklable(category: type) -> type:
    """``category`` when it travels through a pipe (a class importable by name), else ``UserWarning``."""
    try:
        pickle.dumps(category)
    except Exception:
        return UserWarning
    return category


def _reissue(seen: list[tuple[str, type, str, int]]) -> None:
    """Issue the background process's warnings here, in the registry of the module that raised each, so a
    warning this process already showed is not shown again (as when both runs share one process)."""
    files = {getattr(m, "__file__", None): m for m in list(sys.modules.values())}
    for text, category, filename, lineno in seen:
        mod = files.get(filename)
        registry = mod.__dict__.setdefault("__warningregistry__", {}) if mod is not None else None
        warnings.warn_explicit(text, category, filename, lineno,
                               module=mod.__name__ if mod is not None else None, registry=registry)


def _die_with_parent(parent: int) -> None:
    """Ask Linux to SIGKILL this process when the process that forked it ends; exit now if it already has."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL, 0, 0, 0)  # PR_SET_PDEATHSIG
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:
        os._exit(0)


def fits_beside(module: Module, limits: RunLimits | None) -> bool:
    """Whether the f64 oracle's values fit the memory limit while the kernel path's are alive too
    (:func:`~fusegen.runtime.limits.estimate_peak_bytes` of both, in bytes)."""
    if limits is None:
        return True
    return estimate_peak_bytes(module) + estimate_peak_bytes(module, promoted=True) <= limits.max_memory


class ModuleOracles:
    """``R`` and ``O`` of one module run (see the module docstring).

    Args:
        module: the module being run; ``args`` its entry arguments (checked for count by the caller).
        budget: the kernel run's :class:`Budget`; the reference and f64 runs each get
            :meth:`Budget.another_run` of it (the same deadline, their own while iterations).
        background: evaluate in a forked process from :meth:`start` on; otherwise in :meth:`reference` /
            :meth:`f64` (also where this platform cannot fork).

    Use :meth:`start` before the kernels run, then :meth:`reference` (``R``, needs the executor's fusion
    references in sequence) and :meth:`f64` (``O``: one array per output leaf, or the
    :class:`OracleUnavailable` saying why there is none); :meth:`close` in the end, also when the run stops
    early (it kills a background process still working).
    """

    def __init__(self, module: Module, args: list[Any], budget: Budget, background: bool):
        self.module, self.args, self.budget = module, args, budget
        self.background = background and "fork" in multiprocessing.get_all_start_methods()
        self._proc: Any = None
        self._conn: Any = None
        self._answer: tuple[Any, Any] | None = None
        self._f64: list[np.ndarray] | OracleUnavailable | None = None
        # seconds per instruction of R and O (run --profile), filled where they run (here or in the child)
        self.times = {"reference": InstructionTimes(), "f64": InstructionTimes()}

    # -- the work ------------------------------------------------------------------------------------
    def _interpret(self, module: Module, args: list[Any], apply: Callable, budget: Budget) -> Any:
        from fusegen.runtime.executor import interpret

        params = module.entry.parameters
        return interpret(module.entry, [_coerce_arg(p, a, module.filename) for p, a in zip(params, args)],
                         apply, budget)

    def _evaluate_f64(self) -> list[np.ndarray] | OracleUnavailable:
        """``O`` on the explicit-stack interpreter (no recursion limit for deep ``call`` chains) under
        :meth:`Budget.another_run`: a passed deadline is the run's error; loops that pass the while budget
        in f64 (whose control flow may differ from the program's) leave the oracle unavailable."""
        from fusegen.runtime.inputs import leaves

        def run(promoted: Module, promoted_args: list[Any]) -> Any:
            try:
                return self._interpret(promoted, promoted_args, self.times["f64"].wrap(evaluate_instruction),
                                       self.budget.another_run())
            except DeadlineError as e:
                raise _Carried(e) from None

        try:
            return [np.asarray(x) for x in leaves(evaluate_promoted(self.module, self.args, run=run))]
        except OracleUnavailable as e:
            return e
        except _Carried as c:
            raise c.error from None

    def _child(self, conn: Any, parent: int) -> None:
        """The forked process: ``R`` then ``O``, each on its own budget; sends ``("ok", (R, O), warnings)`` or
        ``("error", exception, warnings)`` and leaves without running the parent's exit handlers or flushing
        its buffers. It dies with the parent (``PR_SET_PDEATHSIG`` on Linux; a parent killed outright runs no
        ``finally``), and holds no read end of the pipe, so a send to a parent that is gone fails at once.
        Its warnings go back with the answer, for the parent to issue (once, as in sequence)."""
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's to handle; it kills us
        self._conn.close()
        _die_with_parent(parent)
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                try:
                    ref = self._interpret(self.module, self.args, self.times["reference"].wrap(evaluate_instruction),
                                          self.budget.another_run())
                    f64 = self._evaluate_f64()
                    kind, payload = "ok", (ref, f64, {k: t.rows for k, t in self.times.items()})
                except BaseException as e:
                    kind, payload = "error", e
            seen = list(dict.fromkeys((str(w.message), _picklable(w.category), w.filename, w.lineno)
                                      for w in caught))
            try:
                conn.send((kind, payload, seen))
            except Exception as e:  # an exception that does not pickle: its type and message do
                conn.send(("error", EvaluationError(f"{type(payload).__name__}: {payload}" if kind == "error"
                                                    else f"sending the answers failed: {e}"), seen))
        finally:
            os._exit(0)

    # -- the interface -------------------------------------------------------------------------------
    def start(self) -> "ModuleOracles":
        """Fork the background process (nothing in sequence); returns ``self``."""
        if self.background and self._proc is None:
            ctx = multiprocessing.get_context("fork")
            self._conn, child_end = ctx.Pipe(duplex=False)
            for stream in (sys.stdout, sys.stderr):  # a buffer copied into the child must not print twice
                try:
                    stream.flush()
                except (AttributeError, OSError, ValueError):
                    pass
            self._proc = ctx.Process(target=self._child, args=(child_end, os.getpid()), name="fusegen-oracles",
                                     daemon=True)
            try:
                with warnings.catch_warnings():
                    # JAX (where a caller imported it) and Python 3.12+ warn whenever a threaded
                    # process forks; the child runs only numpy and the evaluator, never their threads' code
                    warnings.filterwarnings("ignore", message=r".*(os\.fork|multi-threaded).*", category=RuntimeWarning)
                    warnings.filterwarnings("ignore", message=r".*multi-threaded.*", category=DeprecationWarning)
                    self._proc.start()
            except OSError:  # no fork to be had (a process limit, strict overcommit): in sequence, then
                self._proc = None
                self._conn.close()
                self.background = False
            child_end.close()
        return self

    def _receive(self) -> tuple[Any, Any]:
        if self._answer is None:
            try:
                kind, payload, seen = self._conn.recv()
            except (EOFError, OSError):
                self._proc.join()
                raise EvaluationError(f"the process evaluating the reference and the f64 oracle of module "
                                      f"{self.module.name} died (exit code {self._proc.exitcode}); "
                                      "run with --jobs 1 to evaluate them in this process") from None
            _reissue(seen)
            if kind == "error":
                raise payload
            for k, rows in payload[2].items():
                self.times[k].rows = rows
            self._answer = payload[:2]
        return self._answer

    def reference(self, fusion_references: dict[int, tuple[list[Any], Any]]) -> Any:
        """``R``: the module's entry value from the reference evaluator.

        In sequence it runs now, reusing ``fusion_references`` (``id(fusion) -> (operands, value)``).

        Raises:
            ResourceLimitError, EvaluationError, UnsupportedOpError: as the reference run raised them
            (``EvaluationError`` too when the background process died).
        """
        if self._proc is None:
            return self._interpret(self.module, self.args,
                                   self.times["reference"].wrap(reusing_reference(fusion_references)),
                                   self.budget.another_run())
        return self._receive()[0]

    def f64(self) -> list[np.ndarray] | OracleUnavailable:
        """``O``: the f64 oracle's output leaves, or the :class:`OracleUnavailable` saying why there is none.

        Raises:
            DeadlineError: the f64 run passed the run's deadline (its own loops passing the while budget make
                the oracle unavailable instead); in the background, also what :meth:`reference` raises.
        """
        if self._proc is None:
            if self._f64 is None:
                self._f64 = self._evaluate_f64()
            return self._f64
        return self._receive()[1]

    def profile(self) -> dict[str, dict[str, list]]:
        """``{"reference": rows, "f64": rows}`` (:class:`~fusegen.runtime.instruction_profile.InstructionTimes`
        rows) of the runs that finished; empty rows for one that did not run."""
        return {k: dict(t.rows) for k, t in self.times.items()}

    def close(self) -> None:
        """End the background process: killed if it is still working (the run stopped early), reaped."""
        if self._proc is not None:
            if self._proc.is_alive() and self._answer is None:
                self._proc.kill()
            self._proc.join()
            self._conn.close()
