"""``fusegen explain MODULE.hlo``: the dispatch table, without running anything."""

from __future__ import annotations

import json
import sys

import click

from fusegen.cli.common import (device_option, fail, get_device_or_fail, load_modules, pipeline_option,
                                pipeline_passes, with_plugin)
from fusegen.cli.config import config_options, resolve_config
from fusegen.cli.errors import fail_on_fusion_failures, plan_errors


@click.command()
@click.argument("module_path", metavar="MODULE.hlo")
@click.option("--fusion", "fusion_name", help="Also print this fusion's generated kernel source.")
@click.option("--indexing", "show_indexing", is_flag=True,
              help="With --fusion: print the emitter's thread-to-output and thread-to-input indexing maps "
                   "(XLA's text form; JSON: an \"indexing\" object).")
@click.option("--compile", "compile_triton", is_flag=True,
              help="Compile Triton fusions' kernels for sm_90 so that their launch carries the compiled shared "
                   "memory (without it, only kernels already in the compile cache have it), and estimate each "
                   "kernel's H200 time with its machine code (SASS: tensor cores, load width, occupancy, spills).")
@device_option
@config_options
@pipeline_option
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def explain(module_path, fusion_name, show_indexing, compile_triton, device_name, config_path, xla_flags, as_json):
    """Show, for every fusion, its kind, what decided it, its emitter, backend and launch dimensions."""
    from fusegen.api import device_summary, explain
    from fusegen.api.explaining import FusionNotFound
    from fusegen.plugin_manager import default_plugin_manager

    if show_indexing and fusion_name is None:
        fail("--indexing needs --fusion NAME")
    cfg = resolve_config(config_path, xla_flags)
    device = get_device_or_fail(device_name, cfg)
    modules = load_modules(module_path)
    with plan_errors(module_path):
        try:
            res = explain(modules, fusion=fusion_name, indexing=show_indexing, compile=compile_triton, device=device,
                          config=cfg, passes=pipeline_passes(cfg), pm=default_plugin_manager())
        except FusionNotFound:
            fail(f"{module_path}: no fusion named {fusion_name!r}")
    rows, calls, indexing = res.rows, res.library_calls, res.indexing
    for line in res.unsupported:  # before any run: `fusegen run` refuses the module (exit 4)
        click.echo(f"fusegen: warning: {module_path}: {line}; `fusegen run` will exit 4", err=True)
    if as_json:
        click.echo(json.dumps(res.to_json(), indent=2))
        _fail_on_plugin_errors(module_path, rows, modules)
        return
    from rich.console import Console
    from rich.table import Table

    console = Console(width=None if sys.stdout.isatty() else 160)
    t = Table(title=f"{'; '.join(m.name for m in modules)}: dispatch on {device.name}")
    from fusegen.perf.report import estimate_cell, module_line

    for col in ("fusion", "kind", "decided by", "emitter", "backend", "launch", f"est. {device.name} µs", "note"):
        t.add_column(col, overflow="fold", justify="right" if col.startswith("est.") else "left")
    for inst, (emitted, rep) in rows:
        t.add_row(rep.name, rep.kind, with_plugin(rep.decided_by, rep.decided_by_plugin),
                  with_plugin(rep.emitter, rep.plugin), rep.backend, rep.launch, estimate_cell(rep.estimate),
                  rep.reason)
    console.print(t)
    for c in calls:
        est = f", est. {estimate_cell(c.get('estimate'))} µs" if c.get("estimate") else ""
        console.print(f"library call %{c['name']}: custom-call {c['target']} on backend {c['backend']}{est}",
                      markup=False)
    console.print(module_line(res.estimated_us), markup=False)
    for m in modules:
        with plan_errors(module_path):
            lines = device_summary(m)[1]
        for line in lines:
            console.print(line, markup=False)
    for c in res.collectives:  # fusegen.perf.collectives: each on its device group (first module)
        e = c.get("estimate") or {}
        if e.get("us") is not None:
            console.print(f"  %{c['name']}: est. {e['us']:,.2f} µs ({e['algorithm']}"
                          f"{'/' + e['protocol'] if e['protocol'] != '-' else ''}, group of {e['group_size']}, "
                          f"{e['wire_bytes']} B sent a device), {e['exposed_us']:,.2f} µs not hidden under compute",
                          markup=False)
    if fusion_name:
        for inst, (emitted, rep) in rows:
            if inst.name == fusion_name.lstrip("%"):
                if not rep.kernels:
                    console.print(f"{inst.name}: no kernel ({rep.reason or rep.emitter})", markup=False)
                for k in rep.kernels:
                    console.print(f"# kernel {k.name} ({k.launch})", markup=False)
                    console.print(k.source, markup=False, highlight=False)
                if indexing is not None:
                    console.print(f"# indexing maps of %{inst.name} ({indexing['emitter'] or 'no emitter'})",
                                  markup=False)
                    for r in indexing["roots"]:
                        console.print(f"root %{r['root']} (hero %{r['hero']})", markup=False)
                        console.print(f"  thread -> output: {r['thread_to_output'] or 'none'}", markup=False,
                                      highlight=False, soft_wrap=True)
                        for o in r["operands"]:
                            console.print(f"  thread -> operand %{o['operand']}: {o['thread_to_input'] or 'none'}",
                                          markup=False, highlight=False, soft_wrap=True)
    _fail_on_plugin_errors(module_path, rows, modules)


def _fail_on_plugin_errors(module_path: str, rows: list, modules: list) -> None:
    """Exit 2 (after the table) when a plugin failed on a fusion, one line per failure; 3 when it is fusegen's own
    and the module valid."""
    fail_on_fusion_failures(module_path, [[rep for _, (_, rep) in rows]], modules)
