"""``xla_gpu_load_autotune_results_from`` / ``xla_gpu_dump_autotune_results_to`` around ``tune`` and
``run --autotune``: XLA's AutotuneResults text proto into the tuner's memory before, out of it after.

Every note (unknown field, result fusegen cannot hold, entry XLA cannot express) is printed to stderr
as a warning; a file that cannot be read is a bad-input error (exit 2).
"""

from __future__ import annotations

import click

from fusegen.cli.common import fail


def _warn(notes: list[str]) -> None:
    for n in notes:
        click.echo(f"fusegen: warning: {n}", err=True)


def load_results(tuner, debug_options) -> dict:
    """Load ``xla_gpu_load_autotune_results_from`` (if set) into ``tuner``; the JSON keys to report."""
    path = getattr(debug_options, "xla_gpu_load_autotune_results_from", "")
    if not path:
        return {}
    from fusegen.cache.xla_results import XlaResultsError, load_into

    try:
        rep = load_into(tuner, path)
    except XlaResultsError as e:
        fail(f"xla_gpu_load_autotune_results_from: {e}")
    _warn(rep.notes)
    return {"xla_results_loaded": {"file": path, "results": rep.results, "entries": len(rep.entries),
                                   "skipped": rep.skipped, "notes": rep.notes}}


def dump_results(tuner, debug_options) -> dict:
    """Write ``xla_gpu_dump_autotune_results_to`` (if set) from ``tuner``'s memory; the JSON keys to report."""
    path = getattr(debug_options, "xla_gpu_dump_autotune_results_to", "")
    if not path:
        return {}
    from fusegen.cache.xla_results import dump_from

    try:
        rep = dump_from(tuner, path)
    except OSError as e:
        fail(f"xla_gpu_dump_autotune_results_to: {path}: {e.strerror or e}")
    _warn(rep.notes)
    return {"xla_results_dumped": {"file": path, "results": rep.results, "skipped": rep.skipped}}
