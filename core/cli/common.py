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
    """Parse an HLO file; any parse problem exits 2 with ``FILE:LINE:COL: error: ...``."""
    from fusegen.hlo.errors import HloParseError
    from fusegen.hlo.parser import parse_module

    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        fail(f"{path}: {e.strerror or e}")
    except UnicodeDecodeError as e:
        fail(f"{path}: not a text file ({e.reason})")
    try:
        return parse_module(text, filename=str(path))
    except HloParseError as e:
        click.echo(str(e).splitlines()[0], err=True)
        sys.exit(EXIT_BAD_INPUT)


def device_option(f):
    return click.option("--device", "device_name", default="h200", show_default=True,
                        help="Device description preset: h200, h100, a100, rtxa6000.")(f)


def get_device_or_fail(name: str):
    from fusegen.device import get_device

    try:
        return get_device(name)
    except (KeyError, ValueError) as e:
        fail(str(e).strip("'\""))
