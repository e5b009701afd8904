"""``fusegen config``: the configuration in force and where each value came from.

Also the shared pieces other commands use for ``--config FILE`` and ``--xla-flag NAME=VALUE``:
:func:`config_options` (the two click options) and :func:`resolve_config` (load lazily, one-line errors).
The file is read only when a command runs, so a broken config never breaks ``--help``.
"""

from __future__ import annotations

import json

import click

from fusegen.cli.common import fail


def config_options(f):
    """Add ``--config FILE`` and ``--xla-flag NAME=VALUE`` (repeatable) to a click command.

    The command receives ``config_path`` (str or None) and ``xla_flags`` (tuple of str).
    """
    f = strict_plugins_option(f)
    f = click.option("--xla-flag", "xla_flags", multiple=True, metavar="NAME=VALUE",
                     help="Override an XLA debug option (beats XLA_FLAGS and the config file). Repeatable.")(f)
    f = click.option("--config", "config_path", type=click.Path(dir_okay=False), default=None,
                     help="Config file (fusegen.toml, or a pyproject.toml with [tool.fusegen]). "
                          "Default: the closest one at or above the current directory.")(f)
    return f


_STRICT_KEY = "fusegen.strict_plugins"


def _set_strict(ctx: click.Context, _param, value: bool) -> None:
    if value:
        ctx.meta[_STRICT_KEY] = True


def strict_plugins_option(f):
    """``--strict-plugins``: any quarantined plugin fails the command (exit 2). Kept in the click context, so
    commands need no parameter for it."""
    return click.option("--strict-plugins", is_flag=True, expose_value=False, callback=_set_strict,
                        help="Exit 2 when a plugin is quarantined (also FUSEGEN_STRICT_PLUGINS=1, "
                             "[plugins] strict = true).")(f)


def _strict_requested() -> bool:
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(_STRICT_KEY))


def report_quarantine(pm, strict: bool = False) -> None:
    """One ``fusegen: warning:`` line per quarantined plugin (once per plugin manager); with ``strict`` the
    first one is an error, exit 2."""
    lines = pm.quarantine_lines()
    if strict and lines:
        for line in lines[1:]:
            click.echo(f"fusegen: error: {line}", err=True)
        fail(f"{lines[0]} (strict plugins: FUSEGEN_STRICT_PLUGINS, [plugins] strict or --strict-plugins)")
    said = pm.__dict__.setdefault("_reported", set())
    for name, line in zip(pm.broken, lines):
        if name not in said:
            said.add(name)
            click.echo(f"fusegen: warning: {line}", err=True)


def _plugin_manager():
    """The process-wide plugin manager (a function so tests can substitute one)."""
    from fusegen.plugin_manager import default_plugin_manager

    return default_plugin_manager()


def resolve_config(config_path, xla_flags, pm=None, quiet: bool = False):
    """Load the configuration for a command; errors exit 2 with one line, warnings go to stderr.

    Args:
        config_path: ``--config`` value or None.
        xla_flags: ``--xla-flag`` values.
        pm: plugin manager to validate against (default: the process-wide one).
        quiet: do not print warnings.

    Returns:
        fusegen.config.loader.ResolvedConfig
    """
    from fusegen.config.loader import load_config, read_plugins_table
    from fusegen.config.toml import ConfigError
    from fusegen.plugin_manager import PluginError, strict_from_env

    try:
        if pm is None:
            pm = _plugin_manager()
        pm.configure(read_plugins_table(config_path))  # [plugins] disable before any plugin is imported
        cfg = load_config(config_path=config_path, cli_flags=list(xla_flags or ()), pm=pm)
        pm.apply_config(cfg)  # [plugins] enable/disable
        env_strict = strict_from_env()
    except (ConfigError, PluginError) as e:
        fail(str(e))
    report_quarantine(pm, strict=_strict_requested() or env_strict or cfg.plugins.strict)
    pm.set_context(config=cfg)
    if not quiet:
        for w in cfg.warnings:
            click.echo(f"fusegen: warning: {w}", err=True)
    return cfg


@click.group()
def config() -> None:
    """Inspect fusegen's configuration (fusegen.toml, [tool.fusegen], XLA_FLAGS, --xla-flag)."""


def _show_value(v) -> str:
    if v is None:
        return "(unset)"
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, str):
        return repr(v) if v == "" else v
    if isinstance(v, list):
        return "[" + ", ".join(map(str, v)) + "]"
    return str(v)


def _cell(text: str):
    """A table cell shown as written: ``[loop]`` is a list value, not rich markup."""
    from rich.text import Text

    return Text(text)


@config.command("show")
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON: {\"options\": {name: {value, source}}}.")
def show(config_path, xla_flags, as_json):
    """Print every option, its value, and where the value came from (default, file:PATH:LINE, env:XLA_FLAGS, cli).

    Precedence: --xla-flag > XLA_FLAGS > config file > defaults.
    """
    cfg = resolve_config(config_path, xla_flags, quiet=as_json)
    if as_json:
        click.echo(json.dumps({
            "config_file": str(cfg.config_file) if cfg.config_file else None,
            "options": {k: {"value": cfg.values[k], "source": cfg.sources[k]} for k in cfg.values},
            "warnings": list(cfg.warnings),
        }, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    title = f"fusegen config ({cfg.config_file})" if cfg.config_file else "fusegen config (no config file)"
    t = Table(title=title)
    t.add_column("option", no_wrap=True)
    t.add_column("value", overflow="fold")
    t.add_column("source", overflow="fold")
    for k, v in cfg.values.items():
        src = cfg.sources[k]
        style = None if src == "default" else "bold"
        t.add_row(_cell(k), _cell(_show_value(v)), _cell(src), style=style)
    console = Console()
    if not console.is_terminal:  # piped or captured: do not fold paths at 80 columns
        console = Console(width=200)
    console.print(t)
