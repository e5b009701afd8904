"""Shared pieces of the command-line interface: loading modules and reporting errors in one line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import attrs
import click

from fusegen.passes.pipeline import DEFAULT_PIPELINE_TEXT

EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2
EXIT_UNSUPPORTED = 4  # a valid module fusegen cannot run as it is meant to run (e.g. not as all its N devices)


def fail(message: str, code: int = EXIT_BAD_INPUT) -> NoReturn:
    """Print ``fusegen: error: MESSAGE`` (one line, no traceback) to stderr and exit."""
    click.echo(f"fusegen: error: {message}", err=True)
    sys.exit(code)


def load_module(path: str):
    """Parse an HLO file; any parse problem exits 2 with ``FILE:LINE:COL: error: ...``.

    A file holding several modules (separated by ``// -----``, as XLA's tests write them) gives the
    first; use :func:`load_modules` for all.
    """
    return load_modules(path)[0]


def load_modules(path: str) -> list:
    """Every module of an HLO file, through the library (:func:`fusegen.api.load_all`); an unreadable file or a
    parse error exits 2 in one line (``FILE:LINE:COL: error: ...``)."""
    from fusegen.api import LoadError, load_all
    from fusegen.hlo.errors import HloParseError

    try:
        return load_all(Path(path))
    except LoadError as e:
        fail(str(e))
    except HloParseError as e:
        click.echo(str(e).splitlines()[0], err=True)
        sys.exit(EXIT_BAD_INPUT)


def device_option(f):
    return click.option("--device", "device_name", default=None,
                        help="Device description preset: h200 (default, or [device] name in the config), h100, "
                             "a100, rtxa6000.")(f)


_PASSES_KEY = "fusegen.passes"


def _set_passes(ctx: click.Context, _param, value: str | None) -> None:
    if value is not None:
        ctx.meta[_PASSES_KEY] = value


_PRECISION_KEY = "fusegen.default_matmul_precision"


def _set_precision(ctx: click.Context, _param, value: str | None) -> None:
    if value is not None:
        ctx.meta[_PRECISION_KEY] = value.lower()


def pipeline_option(f):
    """``--passes a,b``: the pipeline unoptimized input goes through, beating ``[pipeline] passes``, and
    ``--default-matmul-precision P``, beating ``[pipeline] default_matmul_precision`` (kept in the click context,
    so commands need no parameter for them)."""
    from fusegen.hlo.dot_numerics import MATMUL_PRECISIONS

    f = click.option("--default-matmul-precision", expose_value=False, callback=_set_precision, default=None,
                     type=click.Choice(list(MATMUL_PRECISIONS), case_sensitive=False),
                     help="JAX's jax_default_matmul_precision for every dot of DEFAULT precision (beats [pipeline] "
                          "default_matmul_precision; default: 'default', f32 dots at tf32 on the tensor cores "
                          "as XLA:GPU runs them; 'highest': IEEE f32).")(f)
    return click.option("--passes", expose_value=False, callback=_set_passes, metavar="A,B,...", default=None,
                        help="Passes an unoptimized module goes through, in order (beats [pipeline] passes; "
                             f"default: {DEFAULT_PIPELINE_TEXT}).")(f)


def pipeline_passes(cfg) -> list[str] | None:
    """The pipeline for unoptimized input: ``--passes``, else ``[pipeline] passes``, else None (the default)."""
    ctx = click.get_current_context(silent=True)
    spec = ctx.meta.get(_PASSES_KEY) if ctx is not None else None
    if spec is not None:
        return [p.strip() for p in spec.split(",") if p.strip()]
    passes = getattr(getattr(cfg, "pipeline", None), "passes", None)
    return list(passes) if passes else None


def prepare_modules(modules: list, cfg, device, pm=None) -> list:
    """Run the pipeline (:func:`pipeline_passes`: ``--passes``, ``[pipeline] passes``, else
    :data:`fusegen.passes.pipeline.DEFAULT_PIPELINE`) with ``[pipeline.options.<pass>]`` on unoptimized modules, in place.

    Mirrors XLA: an unoptimized module (no fusions yet) is compiled before dispatch. Returns the
    per-module pipeline results (``None`` where the module was already fused). Every command (``run``,
    ``explain``, ``report``, ``tune``) goes through here, so they all see the same pipeline ``opt`` runs.
    """
    from fusegen.api import Session, prepare
    from fusegen.passes.pipeline import PassError
    from fusegen.plugin_manager import PluginError, default_plugin_manager

    ctx = click.get_current_context(silent=True)
    precision = ctx.meta.get(_PRECISION_KEY) if ctx is not None else None
    if precision is not None and getattr(cfg, "pipeline", None) is not None:
        cfg = attrs.evolve(cfg, pipeline=attrs.evolve(cfg.pipeline, default_matmul_precision=precision))
    s = Session(cfg, device, pm or default_plugin_manager())
    names = pipeline_passes(cfg)
    out = []
    for m in modules:
        try:
            out.extend(prepare([m], s, names))  # the library's pipeline step (fusegen.api)
        except (PassError, PluginError) as e:
            fail(f"{m.filename}: {e}")
    return out


def get_device_or_fail(name: str | None, cfg=None):
    """The device preset named on the command line, else the config's ``[device] name``, else H200."""
    from fusegen.device import get_device

    if name is None:
        name = cfg.device.name if cfg is not None and getattr(cfg, "device", None) is not None else "h200"

    try:
        device = get_device(name)
    except (KeyError, ValueError) as e:
        fail(str(e).strip("'\""))
    from fusegen.plugin_manager import default_plugin_manager

    default_plugin_manager().set_context(device=device)  # what PluginContext.device tells plugins
    return device


EXIT_INTERNAL = 3


def internal_error(where: str, exc: BaseException) -> NoReturn:
    """Report an unexpected exception in one line (exit 3); ``FUSEGEN_DEBUG=1`` re-raises it."""
    import os

    if os.environ.get("FUSEGEN_DEBUG", "") not in ("", "0"):
        raise exc
    msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    fail(f"{where}: internal error: {type(exc).__name__}: {msg} (set FUSEGEN_DEBUG=1 for the traceback)",
         EXIT_INTERNAL)


def check_writable(path: str | None, what: str) -> None:
    """Fail (exit 2) before any work when ``path`` cannot be written: a directory, or no parent folder."""
    if not path:
        return
    p = Path(path)
    if p.is_dir():
        fail(f"{what} {path}: is a directory")
    if not p.parent.exists():
        fail(f"{what} {path}: folder {p.parent} does not exist")


def limit_options(f):
    """``--max-memory``, ``--timeout`` and ``--max-while-iterations`` (see :mod:`fusegen.runtime.limits`)."""
    f = click.option("--max-while-iterations", "max_while_iterations", type=click.IntRange(min=0), default=None,
                     help="While-loop iterations one run may execute, all loops together (default 1,000,000); a "
                          "loop whose static trip count is larger is refused before running.")(f)
    f = click.option("--timeout", "timeout", type=click.FloatRange(min=0, min_open=True), default=None,
                     help="Wall-clock seconds the module may run (default: no limit).")(f)
    f = click.option("--max-memory", "max_memory", default=None, metavar="SIZE",
                     help="Refuse a module whose estimated peak memory is above SIZE (bytes, or 512M, 8G, ...; "
                          "default: half the machine's RAM).")(f)
    return f


def resolve_limits(max_memory: str | None, timeout: float | None, max_while_iterations: int | None):
    """A :class:`~fusegen.runtime.limits.RunLimits` from the command-line values (exit 2 on a bad size)."""
    from fusegen.runtime.limits import DEFAULT_MAX_WHILE_ITERATIONS, RunLimits, default_max_memory, parse_size

    try:
        mem = parse_size(max_memory) if max_memory is not None else default_max_memory()
    except ValueError as e:
        fail(f"--max-memory: {e}")
    iters = DEFAULT_MAX_WHILE_ITERATIONS if max_while_iterations is None else max_while_iterations
    return RunLimits(max_memory=mem, timeout=timeout, max_while_iterations=iters)


def with_plugin(value: str, plugin: str) -> str:
    """A table cell naming what decided or emitted a fusion, with its plugin in brackets when that plugin is
    not one of fusegen's own (a third-party or replacing plugin): ``loop (acme_loop)``; a plugin that replaced
    a plugin of its own name also names its distribution: ``EltFusion (loop from acme-loop)``."""
    from fusegen.plugin_manager import default_plugin_manager

    info = default_plugin_manager().infos.get(plugin)
    if value == "-" or info is None or info.distribution == "fusegen":
        return value
    if any(r.split(" (")[0] == plugin for r in info.replaces):  # took the name of the plugin it replaced
        return f"{value} ({plugin} from {info.distribution})"
    return f"{value} ({plugin})"
