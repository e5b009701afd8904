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
    """List plugins: name, entry-point group, distribution and version, hooks, what they register (matchers,
    emitter factories, execution and codegen backends, passes), what they replace, and every quarantined
    plugin with the reason."""
    from fusegen.plugin_manager import PluginManager

    pm = PluginManager(lazy=True)  # [plugins] disable applies before anything is imported
    resolve_config(config_path, xla_flags, pm=pm)  # a broken config exits 2
    matchers, factories, backends, passes = pm.kind_matchers(), pm.emitter_factories(), pm.execution_backends(), pm.passes()
    codegen = pm.codegen_backends()
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
                    + [f"codegen {b.name}@{b.rank}" for b in codegen if b.plugin == info.name]
                    + [f"pass {p.name}" for p in passes.values() if p.plugin == info.name])
        rows.append({"name": info.name, "module": info.module, "group": info.group, "distribution": info.distribution,
                     "version": info.version, "hooks": info.hooks, "provides": provides,
                     "entry_point": info.entry_point, "status": "loaded",
                     "replaces": [f"replaces {r}" for r in info.replaces]})
    for info in pm.broken.values():
        rows.append({"name": info.name, "module": info.module, "group": info.group, "distribution": info.distribution,
                     "version": info.version, "hooks": [], "provides": [], "entry_point": info.entry_point,
                     "status": "broken", "reason": info.reason, "replaces": []})
    if as_json:
        click.echo(json.dumps({"plugins": rows}, indent=2))
        return
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    t = Table(title="fusegen plugins")
    for col in ("name", "group", "distribution", "version", "hooks", "provides"):
        t.add_column(col, overflow="fold")
    for r in rows:
        what = r["provides"] + r["replaces"] if r["status"] == "loaded" else [f"BROKEN: {r['reason']}"]
        t.add_row(*(Text(x) for x in (r["name"], r["group"], r["distribution"], r["version"], ", ".join(r["hooks"]),
                                      "\n".join(what))))
    Console(width=None if sys.stdout.isatty() else 160).print(t)
