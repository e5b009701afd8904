"""``fusegen plugins``: every loaded plugin, its distribution version and hooks."""

from __future__ import annotations

import json
import sys

import click

from fusegen.cli.common import fail
from fusegen.cli.config import config_options, resolve_config


@click.command()
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@click.option("--hook", "hook_name", help="Only plugins implementing this hook.")
def plugins(config_path, xla_flags, as_json, hook_name):
    """List plugins: name, entry-point group, distribution and version, hooks, and what they register."""
    from fusegen.plugin_manager import PluginError, PluginManager

    try:
        pm = PluginManager()
        resolve_config(config_path, xla_flags, pm=pm)  # applies [plugins] disable; a broken config exits 2
        matchers, factories, backends, passes = pm.kind_matchers(), pm.emitter_factories(), pm.execution_backends(), pm.passes()
    except PluginError as e:
        fail(str(e))
    if hook_name:
        known = sorted(n for n in dir(pm.pm.hook) if n.startswith("fusegen_"))
        if hook_name not in known:
            from fusegen.config.xla_flags import did_you_mean

            fail(f"unknown hook {hook_name!r}{did_you_mean(hook_name, known)}; hooks: {', '.join(known)}")
    rows = []
    for info in pm.infos.values():
        if hook_name and hook_name not in info.hooks:
            continue
        provides = ([f"matcher {m.name}@{m.rank}" for m in matchers if m.plugin == info.name]
                    + [f"emitter {f.name}:{f.kind}@{f.rank}" for f in factories if f.plugin == info.name]
                    + [f"backend {b.name}@{b.rank}" for b in backends if b.plugin == info.name]
                    + [f"pass {p.name}" for p in passes.values() if p.plugin == info.name])
        rows.append({"name": info.name, "module": info.module, "group": info.group, "distribution": info.distribution,
                     "version": info.version, "hooks": info.hooks, "provides": provides})
    if as_json:
        click.echo(json.dumps({"plugins": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table

    t = Table(title="fusegen plugins")
    for col in ("name", "group", "distribution", "version", "hooks", "provides"):
        t.add_column(col, overflow="fold")
    for r in rows:
        t.add_row(r["name"], r["group"], r["distribution"], r["version"], ", ".join(r["hooks"]), "\n".join(r["provides"]))
    Console(width=None if sys.stdout.isatty() else 160).print(t)
