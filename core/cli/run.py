"""``fusegen run MODULE.hlo``: parse, dispatch, generate, run every fusion, compare with the reference."""

from __future__ import annotations

import json
import os
import sys

import click
import numpy as np

from fusegen.cli.common import EXIT_BAD_INPUT, EXIT_MISMATCH, device_option, fail, get_device_or_fail, load_module


def _fmt(x):
    return "-" if x is None else f"{x:.3g}"


def report_table(report, title: str):
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for col in ("fusion", "kind", "decided by", "emitter", "backend", "launch", "max abs err", "max rel err", "status"):
        t.add_column(col, overflow="fold")
    for f in report.fusions:
        status = {"ok": "[green]ok[/]", "mismatch": "[red]mismatch[/]", "error": "[red]error[/]"}.get(f.status, f.status)
        t.add_row(f.name, f.kind, f.decided_by, f.emitter, f.backend, f.launch, _fmt(f.max_abs_error),
                  _fmt(f.max_rel_error), status)
    return t


@click.command()
@click.argument("module_path", metavar="MODULE.hlo")
@click.option("--seed", default=0, show_default=True, help="Seed of the random inputs.")
@click.option("--inputs", "inputs_path", type=click.Path(), help=".npz with arrays p0, p1, ... (or parameter names).")
@click.option("--save-outputs", "outputs_path", type=click.Path(), help="Write the outputs to this .npz (o0, o1, ...).")
@device_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of tables.")
@click.option("--no-compile", is_flag=True, help="Skip compiling each kernel for sm_90.")
def run(module_path, seed, inputs_path, outputs_path, device_name, as_json, no_compile):
    """Run MODULE.hlo end to end on seeded random inputs (or --inputs) and check every fusion.

    Each fusion's kernel output is compared with the reference evaluator on the same operands; the
    module's outputs are compared too. Exit 1 on any mismatch, 2 on bad input.
    """
    from fusegen.evaluator.evaluator import UnsupportedOpError
    from fusegen.plugin_manager import PluginError
    from fusegen.runtime.executor import run_module
    from fusegen.runtime.inputs import InputError, leaves, load_inputs, make_inputs

    device = get_device_or_fail(device_name)
    module = load_module(module_path)
    try:
        args = load_inputs(module, inputs_path) if inputs_path else make_inputs(module, seed)
    except InputError as e:
        fail(str(e))
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    progress = None
    if not as_json and sys.stderr.isatty():
        from rich.progress import Progress

        progress = Progress(transient=True)
    n_fusions = sum(1 for c in module.computations for i in c.instructions if i.opcode == "fusion")
    try:
        if progress is not None:
            with progress:
                task = progress.add_task("running fusions", total=n_fusions)
                out, report = run_module(module, args, device, compile_kernels=not no_compile,
                                         on_fusion=lambda r: progress.advance(task))
        else:
            out, report = run_module(module, args, device, compile_kernels=not no_compile)
    except (UnsupportedOpError, PluginError, InputError) as e:
        fail(f"{module_path}: {e}")
    if outputs_path:
        np.savez(outputs_path, **{f"o{i}": a for i, a in enumerate(leaves(out))})
    if as_json:
        click.echo(json.dumps({
            "module": report.module,
            "fusions": [f.to_json() for f in report.fusions],
            "other_instructions": report.other,
            "outputs_match": report.outputs_ok,
            "output_max_abs_error": report.output_max_abs_error,
            "seconds": round(report.seconds, 3),
            "status": "ok" if report.ok else "mismatch",
        }, indent=2))
    else:
        from rich.console import Console

        console = Console()
        console.print(report_table(report, f"{report.module} on {device.name}"))
        for f in report.fusions:
            if f.reason and f.status != "ok" or f.backend != "triton" and f.reason:
                console.print(f"  {f.name}: {f.reason}", markup=False)
        others = ", ".join(f"{n} on {b}" for b, n in sorted(report.other.items())) or "none"
        console.print(f"non-fusion instructions: {others}", markup=False)
        console.print(f"outputs vs reference: {'match' if report.outputs_ok else 'MISMATCH'} "
                      f"(max abs error {report.output_max_abs_error:.3g}); {report.seconds:.2f} s", markup=False)
    sys.exit(0 if report.ok else EXIT_MISMATCH)
