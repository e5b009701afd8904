"""``fusegen run MODULE.hlo``: parse, dispatch, generate, run every fusion, compare with the reference."""

from __future__ import annotations

import json
import os
import sys

import click
import numpy as np

from fusegen.cli.common import (EXIT_MISMATCH, device_option, fail, get_device_or_fail, internal_error,
                                load_modules, prepare_modules)
from fusegen.cli.config import config_options, resolve_config


def _fmt(x):
    return "-" if x is None else f"{x:.3g}"


def report_table(report, title: str):
    """A rich table with one row per fusion of ``report`` (a :class:`RunReport`)."""
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for col in ("fusion", "kind", "decided by", "emitter", "backend", "launch", "max abs err", "max rel err", "status"):
        t.add_column(col, overflow="fold")
    for f in report.fusions:
        status = {"ok": "[green]ok[/]", "mismatch": "[red]mismatch[/]", "error": "[red]error[/]"}.get(f.status, f.status)
        t.add_row(f.name, f.kind, f.decided_by, f.emitter, f.backend, f.launch, _fmt(f.max_abs_error),
                  _fmt(f.max_rel_error), status)
    return t


def report_json(reports) -> dict:
    """The ``--json`` document: ``{"module", "fusions": [...], ...}`` (fusions in entry post order)."""
    if len(reports) == 1:
        r = reports[0]
        return {
            "module": r.module,
            "fusions": [f.to_json() for f in r.fusions],
            "other_instructions": r.other,
            "outputs_match": r.outputs_ok,
            "output_max_abs_error": r.output_max_abs_error,
            "seconds": round(r.seconds, 3),
            "status": "ok" if r.ok else "mismatch",
        }
    # A file of several modules (XLA tests separate them with `// -----`): one list, each row names its module.
    return {
        "module": "; ".join(r.module for r in reports),
        "modules": [report_json([r]) for r in reports],
        "fusions": [{**f.to_json(), "module": r.module} for r in reports for f in r.fusions],
        "status": "ok" if all(r.ok for r in reports) else "mismatch",
    }


@click.command()
@click.argument("module_path", metavar="MODULE.hlo")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--inputs", "inputs_path", type=click.Path(), help=".npz with arrays p0, p1, ... (or parameter names).")
@click.option("--save-outputs", "outputs_path", type=click.Path(), help="Write the outputs to this .npz (o0, o1, ...).")
@device_option
@config_options
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of tables.")
@click.option("--no-compile", is_flag=True, help="Skip compiling each kernel for sm_90.")
def run(module_path, seed, inputs_path, outputs_path, device_name, config_path, xla_flags, as_json, no_compile):
    """Run MODULE.hlo end to end on seeded random inputs (or --inputs) and check every fusion.

    Each fusion's kernel output is compared with the reference evaluator on the same operands; the
    module's outputs are compared too. Exit 1 on any mismatch, 2 on bad input, 3 on an internal error.
    """
    from fusegen.evaluator.evaluator import UnsupportedOpError
    from fusegen.plugin_manager import PluginError
    from fusegen.runtime.executor import run_module
    from fusegen.runtime.inputs import InputError, leaves, load_inputs, make_inputs

    cfg = resolve_config(config_path, xla_flags)
    device = get_device_or_fail(device_name, cfg)
    modules = load_modules(module_path)
    prepare_modules(modules, cfg, device)
    if (inputs_path or outputs_path) and len(modules) > 1:
        fail(f"{module_path}: holds {len(modules)} modules; --inputs/--save-outputs need a single-module file")
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    reports, outputs = [], []
    n_fusions = sum(1 for m in modules for c in m.computations for i in c.instructions if i.opcode == "fusion")
    progress = None
    if not as_json and sys.stderr.isatty():
        from rich.progress import Progress

        progress = Progress(transient=True)
        progress.start()
        task = progress.add_task("running fusions", total=n_fusions)
    try:
        for module in modules:
            try:
                args = load_inputs(module, inputs_path) if inputs_path else make_inputs(module, seed)
            except InputError as e:
                fail(str(e))
            on_fusion = (lambda r: progress.advance(task)) if progress is not None else None
            try:
                out, report = run_module(module, args, device, compile_kernels=not no_compile, on_fusion=on_fusion)
            except (UnsupportedOpError, PluginError, InputError) as e:
                fail(f"{module_path}: {e}")
            except Exception as e:  # never a bare traceback
                internal_error(f"{module_path}: module {module.name}", e)
            reports.append(report)
            outputs.append(out)
    finally:
        if progress is not None:
            progress.stop()
    if outputs_path:
        np.savez(outputs_path, **{f"o{i}": a for i, a in enumerate(leaves(outputs[0]))})
    ok = all(r.ok for r in reports)
    if as_json:
        click.echo(json.dumps(report_json(reports), indent=2))
    else:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        for report in reports:
            console.print(report_table(report, f"{report.module} on {device.name}"))
            for f in report.fusions:
                if f.reason:
                    console.print(f"  {f.name}: {f.reason}", markup=False)
            others = ", ".join(f"{n} on {b}" for b, n in sorted(report.other.items())) or "none"
            console.print(f"non-fusion instructions: {others}", markup=False)
            console.print(f"outputs vs reference: {'match' if report.outputs_ok else 'MISMATCH'} "
                          f"(max abs error {report.output_max_abs_error:.3g}); {report.seconds:.2f} s", markup=False)
    sys.exit(0 if ok else EXIT_MISMATCH)
