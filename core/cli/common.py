"""Shared pieces of the command-line interface: loading modules and reporting errors in one line."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import NoReturn

import click

EXIT_MISMATCH = 1
EXIT_BAD_INPUT = 2


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
    """Parse every module of an HLO file (exits 2 on a parse error, in one line)."""
    from fusegen.hlo.errors import HloParseError
    from fusegen.hlo.parser import parse_modules

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")
    except UnicodeDecodeError as e:
        fail(f"{path}: not a text file ({e.reason})")
    try:
        return parse_modules(text, filename=str(path))
    except HloParseError as e:
        click.echo(str(e).splitlines()[0], err=True)
        sys.exit(EXIT_BAD_INPUT)


def device_option(f):
    return click.option("--device", "device_name", default=None,
                        help="Device description preset: h200 (default, or [device] name in the config), h100, "
                             "a100, rtxa6000.")(f)


def prepare_modules(modules: list, cfg, device, pm=None) -> list:
    """Run the default pipeline (dot-decomposer, gemm-fusion, gemm-rewriter, fusion) on unoptimized modules, in place.

    Mirrors XLA: an unoptimized module (no fusions yet) is compiled before dispatch. Returns the
    per-module pipeline results (``None`` where the module was already fused).
    """
    from fusegen.passes.pipeline import PassError, optimize_if_needed
    from fusegen.plugin_manager import PluginError, default_plugin_manager

    pm = pm or default_plugin_manager()
    out = []
    for m in modules:
        try:
            out.append(optimize_if_needed(m, pm=pm, debug_options=cfg.debug_options, device=device))
        except (PassError, PluginError) as e:
            fail(f"{m.filename}: {e}")
    return out


def get_device_or_fail(name: str | None, cfg=None):
    """The device preset named on the command line, else the config's ``[device] name``, else H200."""
    from fusegen.device import get_device

    if name is None:
        name = cfg.device.name if cfg is not None and getattr(cfg, "device", None) is not None else "h200"

    try:
        return get_device(name)
    except (KeyError, ValueError) as e:
        fail(str(e).strip("'\""))


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
