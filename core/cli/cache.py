"""``fusegen cache``: list, show, clear, export and import the autotune cache directory.

The directory is ``--cache-dir`` or ``xla_gpu_per_fusion_autotune_cache_dir`` from the configuration.
``export``/``import`` carry whole results in one JSON bundle, for shipping tuned results ahead of time
(XLA's ``xla_gpu_dump_autotune_results_to`` / ``xla_gpu_load_autotune_results_from``), or, with
``export --format xla`` / ``import FILE.pbtxt``, as XLA's own AutotuneResults text proto.

Exit codes: 0 success, 2 bad input (no directory, unknown key, malformed bundle).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from fusegen.cli.common import fail
from fusegen.cli.config import config_options, resolve_config


def _dir_option(f):
    """``--cache-dir`` accepted after the subcommand too (``fusegen cache ls --cache-dir D``)."""
    return click.option("--cache-dir", "sub_cache_dir", type=click.Path(file_okay=False), default=None,
                        help="Cache directory (overrides the group option).")(f)


def _tier(ctx: click.Context, sub_cache_dir: str | None = None):
    from fusegen.cache.tiers import DirectoryTier

    o = ctx.obj
    d = sub_cache_dir or o.get("cache_dir")
    if not d:
        cfg = resolve_config(o.get("config_path"), o.get("xla_flags", ()), quiet=True)
        d = cfg.debug_options.xla_gpu_per_fusion_autotune_cache_dir
    if not d:
        fail("no cache directory: pass --cache-dir or set xla_gpu_per_fusion_autotune_cache_dir")
    return DirectoryTier(d)


def _first_line(hlo: str) -> str:
    lines = [ln.strip() for ln in hlo.splitlines() if ln.strip()]
    root = next((ln for ln in lines if ln.startswith("ROOT ")), lines[-1] if lines else "")
    return root if len(root) <= 90 else root[:87] + "..."


@click.group()
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Cache directory (default: xla_gpu_per_fusion_autotune_cache_dir).")
@config_options
@click.pass_context
def cache(ctx, cache_dir, config_path, xla_flags):
    """Inspect and manage the autotune cache directory."""
    ctx.obj = {"cache_dir": cache_dir, "config_path": config_path, "xla_flags": xla_flags}


@cache.command("ls")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@_dir_option
@click.pass_context
def ls(ctx, as_json, sub_cache_dir):
    """One line per entry: key prefix, winner, time, device; bad files are flagged, never removed."""
    tier = _tier(ctx, sub_cache_dir)
    rows = []
    for f, e, problem in tier.entries():
        if e is None:
            rows.append({"key": f.stem, "file": str(f), "problem": problem})
        else:
            rows.append({"key": e.digest, "file": str(f), "winner": e.result.config.name,
                         "duration_us": e.result.duration_us, "model": e.key.model, "hlo": _first_line(e.key.hlo),
                         "source": e.result.source.to_json()})
    if as_json:
        click.echo(json.dumps(rows, indent=1))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"autotune cache {tier.path} ({len(rows)} entries)")
    for col in ("key", "winner", "time µs", "time from", "instruction", "device"):
        t.add_column(col, overflow="fold")
    for r in rows:
        if "problem" in r:
            t.add_row(r["key"][:12], f"[red]bad file[/]: {r['problem']}", "-", "-", "-", "-")
        else:
            t.add_row(r["key"][:12], r["winner"], "-" if r["duration_us"] is None else f"{r['duration_us']:.2f}",
                      r["source"]["label"], r["hlo"], r["model"].split(",")[0])
    Console(width=None if sys.stdout.isatty() else 160).print(t)


@cache.command("show")
@click.argument("key")
@_dir_option
@click.pass_context
def show(ctx, key, sub_cache_dir):
    """Print the entry whose key digest is KEY (a unique prefix is enough)."""
    tier = _tier(ctx, sub_cache_dir)
    key = key.strip().lower()
    matches = [f for f in tier.files() if f.stem.startswith(key)]
    if not matches:
        fail(f"no cache entry with key {key!r} in {tier.path}")
    if len(matches) > 1:
        fail(f"key prefix {key!r} is ambiguous in {tier.path}: {', '.join(m.stem[:16] for m in matches[:5])}")
    from fusegen.cache.format import CacheFormatError

    try:
        e = tier.read(matches[0])  # bounded regular file only
    except (OSError, CacheFormatError) as ex:
        fail(str(ex))
    click.echo(json.dumps(e.to_json(), indent=1))


@cache.command("clear")
@_dir_option
@click.pass_context
def clear(ctx, sub_cache_dir):
    """Remove every entry file (and stale temp files) of the directory; nothing else."""
    tier = _tier(ctx, sub_cache_dir)
    n = tier.clear()
    click.echo(f"removed {n} entries from {tier.path}")


@cache.command("export")
@click.argument("file", type=click.Path(dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["json", "xla"]), default="json",
              help="json: fusegen's bundle; xla: XLA's AutotuneResults text proto (xla_gpu_load_autotune_results_from).")
@click.option("--include-estimates", is_flag=True,
              help="With --format xla: also write entries whose figure is not a GPU measurement (estimates, CPU "
                   "time), each after a '# fusegen: estimated by ...' comment and without run_time.")
@_dir_option
@click.pass_context
def export(ctx, file, fmt, include_estimates, sub_cache_dir):
    """Write every valid entry into FILE (bad files, and with --format xla entries XLA cannot express, are
    skipped with a warning). With --format xla, entries whose figure is not a GPU measurement are left out (XLA
    reads every run_time as its own measurement) unless --include-estimates; the summary says how many."""
    from fusegen.cache.format import bundle_to_json

    tier = _tier(ctx, sub_cache_dir)
    good = []
    for f, e, problem in tier.entries():
        if e is None:
            click.echo(f"fusegen: warning: skipping {f}: {problem}", err=True)
        else:
            good.append(e)
    if fmt == "xla":
        from fusegen.cache.xla_results import write_file

        try:
            rep = write_file(file, good, include_estimates)
        except OSError as e:
            fail(f"{file}: {e.strerror or e}")
        for n in rep.notes:
            click.echo(f"fusegen: warning: {n}", err=True)
        est = ""
        if rep.estimates_left_out:
            est = (f"; {rep.estimates_left_out} not GPU measurements (estimates or CPU time) left out: "
                   f"--include-estimates writes them marked")
        elif rep.estimates_marked:
            est = f"; {rep.estimates_marked} estimates written marked '# fusegen: ...', without run_time"
        click.echo(f"exported {len(rep.entries)} entries ({rep.results} XLA results) to {file}"
                   + (f"; {rep.skipped} left out" if rep.skipped else "") + est)
        return
    Path(file).write_text(json.dumps(bundle_to_json(good), indent=1) + "\n")
    click.echo(f"exported {len(good)} entries to {file}")


def _xla_fingerprint(ctx, cost_model_top_k, level, backends_spec) -> str:
    """The options fingerprint ``fusegen tune`` would use with the same configuration and options."""
    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner, discover_backends
    from fusegen.cli.common import get_device_or_fail
    from fusegen.plugin_manager import PluginError

    o = ctx.obj
    cfg = resolve_config(o.get("config_path"), o.get("xla_flags", ()), quiet=True)
    overrides = {k: v for k, v in (("cost_model_top_k", cost_model_top_k), ("xla_gpu_autotune_level", level),
                                   ("xla_gpu_experimental_autotune_backends", backends_spec)) if v is not None}
    try:
        opts = AutotuneOptions.from_debug_options(cfg.debug_options, **overrides)
        return Autotuner(discover_backends(), opts, get_device_or_fail(None, cfg)).fingerprint
    except (ValueError, TypeError, PluginError) as e:
        fail(str(e))


@cache.command("import")
@click.argument("file", type=click.Path(dir_okay=False, exists=True))
@click.option("--cost-model-top-k", type=click.IntRange(0, None), default=None,
              help="XLA results: store them for `tune --cost-model-top-k K` (keys hold the tuning options).")
@click.option("--level", type=click.IntRange(0, 5), default=None, help="XLA results: for `tune --level N`.")
@click.option("--backends", "backends_spec", default=None, help="XLA results: for `tune --backends SPEC`.")
@_dir_option
@click.pass_context
def import_(ctx, file, cost_model_top_k, level, backends_spec, sub_cache_dir):
    """Validate FILE and write each entry into the directory (atomically, one file per key).

    FILE is a fusegen JSON bundle, or XLA's AutotuneResults text proto (``*.pbtxt``, ``*.textproto``, or any
    file that is not JSON: an XLA dump or xla_gpu_dump_autotune_results_to). XLA's keys carry no autotuner
    options; the entries are stored under those `fusegen tune` would use with this configuration.
    """
    from fusegen.cache.format import MAX_BUNDLE_BYTES, CacheFormatError, bundle_from_text, read_bounded

    tier = _tier(ctx, sub_cache_dir)
    try:
        text = read_bounded(file, MAX_BUNDLE_BYTES)
    except CacheFormatError as e:
        fail(str(e))
    except (OSError, UnicodeDecodeError) as e:
        fail(f"{file}: {e}")
    if not text.lstrip().startswith("{"):
        from fusegen.cache.xla_results import XlaResultsError, entries_from_text

        try:
            rep = entries_from_text(text, file, _xla_fingerprint(ctx, cost_model_top_k, level, backends_spec))
        except XlaResultsError as e:
            fail(str(e))
        for n in rep.notes:
            click.echo(f"fusegen: warning: {n}", err=True)
        kept = sum(tier.put(e) is None for e in rep.entries)  # a newer fusegen's file is left in place
        click.echo(f"imported {len(rep.entries) - kept} entries from {rep.results} XLA results into {tier.path}"
                   + (f"; {rep.skipped} skipped" if rep.skipped else "")
                   + (f"; {kept} left as a newer fusegen wrote them" if kept else ""))
        return
    try:
        entries = bundle_from_text(text, file)
    except CacheFormatError as e:
        fail(str(e))
    kept = 0
    for e in entries:
        try:
            kept += tier.put(e) is None  # a newer fusegen's file is left in place
        except OSError as ex:
            fail(f"{tier.path}: cannot write entry {e.digest[:16]}: {ex.strerror or ex}")
    click.echo(f"imported {len(entries) - kept} entries into {tier.path}"
               + (f"; {kept} left as a newer fusegen wrote them" if kept else ""))
