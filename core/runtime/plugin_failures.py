"""Run-time failures of a plugin on one fusion, said so that the plugin's author can act on them.

A fusion whose matcher, factory or emitter failed (:meth:`fusegen.runtime.executor.Executor.plan_fusion`), or
whose generated kernel did not load, run or compile, gets ``status="error"`` and a reason naming the plugin,
the callable, the fusion and, for generated source, the kernel file and line (the file the kernel was
imported from, :func:`fusegen.codegen.triton_runtime.load_kernel`). ``fusegen run``/``explain`` print every
row and then exit 2 naming the plugin (:func:`failure_lines`), or 3 when the plugin is one fusegen ships
(:func:`shipped_with_fusegen`): on a valid module that is fusegen's bug, and the line says how to report it.
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


#: What the line of a failure in fusegen's own plugin asks the user to do.
REPORT_BUG = "this is a fusegen bug; please report it with the module and the output of `fusegen --version`"


def shipped_with_fusegen(plugin: str) -> bool:
    """Whether ``plugin`` (a loaded plugin's name) is installed by the ``fusegen`` distribution itself: the
    emitters and backends of ``plugins/`` and core's matchers. A third-party plugin, one that replaced a
    built-in under its name included, and the name of no loaded plugin, are not."""
    from fusegen.plugin_manager import default_plugin_manager
    from fusegen.config.names import normalize_name

    info = default_plugin_manager().infos.get(plugin)
    return info is not None and normalize_name(info.distribution) == "fusegen"


def _field(row: Any, key: str) -> Any:
    """A fusion row's field, from a :class:`FusionReport` or its JSON (the report's document)."""
    return row.get(key, "-") if isinstance(row, dict) else getattr(row, key, "-")


def _failed(reports: list) -> list:
    return [f for r in reports for f in (r.get("fusions", ()) if isinstance(r, dict) else getattr(r, "fusions", r))
            if _field(f, "status") == "error"]


def failure_lines(module_path: str, reports: list, internal: bool = True) -> list[str]:
    """One line per fusion row with ``status == "error"`` of every :class:`RunReport` (or plain lists of fusion
    reports or of their JSON) in ``reports``: ``MODULE: fusion %NAME: REASON``; where the plugin is fusegen's
    own (and ``internal``: the module is valid), ``MODULE: fusion %NAME: internal error in fusegen's emitter E
    (plugin 'P'): REASON; ``:data:`REPORT_BUG`."""
    out = []
    for f in _failed(reports):
        head, plugin = f"{module_path}: fusion %{_field(f, 'name')}: ", _field(f, "plugin")
        if internal and shipped_with_fusegen(plugin):
            emitter = _field(f, "emitter")
            what = f"emitter {emitter} (plugin {plugin!r})" if emitter not in ("-", "", None) else f"plugin {plugin!r}"
            out.append(f"{head}internal error in fusegen's {what}: {_field(f, 'reason')}; {REPORT_BUG}")
        else:
            out.append(head + str(_field(f, "reason")))
    return out


def internal_failure(reports: list) -> bool:
    """Whether a fusion of ``reports`` (as :func:`failure_lines` takes them) failed in a plugin fusegen ships:
    the command then exits 3 (internal error), not 2."""
    return any(shipped_with_fusegen(_field(f, "plugin")) for f in _failed(reports))
