"""Run-time failures of a plugin on one fusion, said so that the plugin's author can act on them.

A fusion whose matcher, factory or emitter failed (:meth:`fusegen.runtime.executor.Executor.plan_fusion`), or
whose generated kernel did not load, run or compile, gets ``status="error"`` and a reason naming the plugin,
the callable, the fusion and, for generated source, the kernel file and line (the file the kernel was
imported from, :func:`fusegen.codegen.triton_runtime.load_kernel`). ``fusegen run``/``explain`` print every
row and then exit 2 (:func:`failure_lines`).
"""

from __future__ import annotations

import traceback
from typing import Any

from fusegen.codegen.kernel_dir import kernel_dir_path


def _chain(exc: BaseException):
    seen = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        yield exc
        exc = exc.__cause__ or exc.__context__


def kernel_location(exc: BaseException) -> str | None:
    """``PATH:LINE`` in a generated kernel file where ``exc`` arose (a ``SyntaxError`` in it, the innermost
    kernel frame of its traceback, or Triton's compile error), or None."""
    kdir = str(kernel_dir_path())
    for e in _chain(exc):
        fname = getattr(e, "filename", None)
        if isinstance(e, SyntaxError) and fname and str(fname).startswith(kdir):
            return f"{fname}:{e.lineno}"
        frames = [f for f in traceback.extract_tb(e.__traceback__) if f.filename.startswith(kdir)]
        if frames:
            return f"{frames[-1].filename}:{frames[-1].lineno}"
    return None


def _files(kernels: Any) -> str:
    """``name (PATH)`` of each kernel: the file it is imported from."""
    from fusegen.codegen.triton_runtime import source_hash

    return ", ".join(f"{k.name} ({kernel_dir_path() / f'k_{source_hash(k)}.py'})" for k in kernels or ()) or "none"


def kernel_failure(rep: Any, emitted: Any, exc: BaseException, what: str) -> str:
    """The reason of a fusion whose kernels failed in the interpreter (``what``: how)."""
    where = kernel_location(exc)
    msg = (str(exc).strip().splitlines() or [""])[0]
    at = f" at {where}" if where else f" (kernel {_files(getattr(emitted, 'kernels', ()))})"
    return f"plugin {rep.plugin!r}, {rep.emitter}.emit: kernel {what}{at}: {type(exc).__name__}: {msg}"


def limits_failure(rep: Any, problems: list[str], device: Any, when: str = "") -> str:
    """The reason of a fusion whose kernels launch over ``device``'s limits (``when``: ``" after its sm_90
    compile"`` for registers / compiled shared memory): the launch CUDA would refuse is not run."""
    return (f"plugin {rep.plugin!r}, {rep.emitter}.emit: kernel launch over the limits of {device.name}{when}: "
            + "; ".join(problems))


def refuse_over_limits(rep: Any, emitted: Any, device: Any) -> Any:
    """``emitted``, or None when one of its launches is over ``device``'s limits
    (:func:`fusegen.codegen.launch_limits.launch_problems`): then ``rep`` becomes an error row naming the plugin
    that keeps the emitter and launch it reported, and the fusion runs on an execution backend."""
    from fusegen.codegen.launch_limits import launch_problems

    over = launch_problems(emitted, device) if emitted is not None else []
    if not over:
        return emitted
    rep.emitter, rep.launch = emitted.emitter, str(emitted.launch) if emitted.launch else "-"
    rep.kernels, rep.status = list(emitted.kernels), "error"
    rep.reason = limits_failure(rep, over, device)
    return None


def check_compiled(rep: Any, result: tuple, device: Any) -> None:
    """A compiled kernel over ``device``'s registers or shared memory (``result``: ``(status, seconds, shared,
    registers)`` of :func:`fusegen.runtime.compile_jobs.compile_kernels`) makes ``rep`` an error row naming the
    plugin: the launch would fail on the device (``TOO MANY RESOURCES REQUESTED``)."""
    from fusegen.codegen.launch_limits import compiled_problems

    if result[0] != "ok" or rep.status == "error":
        return
    over = compiled_problems(rep.kernels, result[2], result[3] if len(result) > 3 else (), device)
    if over:
        rep.status = "error"
        rep.reason = limits_failure(rep, over, device, " after its sm_90 compile")


def compile_failure(rep: Any) -> str:
    """The reason of a fusion whose kernel did not compile for sm_90 (``rep.compiled`` holds Triton's words)."""
    return f"plugin {rep.plugin!r}, {rep.emitter}.emit: kernel {_files(rep.kernels)} did not compile for sm_90: " \
           f"{rep.compiled}"


def failure_lines(module_path: str, reports: list) -> list[str]:
    """One line per fusion row with ``status == "error"`` of every :class:`RunReport` (or plain fusion-report
    lists) in ``reports``: ``MODULE: fusion %NAME: REASON``."""
    out = []
    for r in reports:
        for f in getattr(r, "fusions", r):
            if f.status == "error":
                out.append(f"{module_path}: fusion %{f.name}: {f.reason}")
    return out
