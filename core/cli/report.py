"""``fusegen report MODULE.hlo``: the module as a page (graph, fusion cards, tuning charts, summary).

Writes one self-contained HTML file (the graph as DOT text with Graphviz compiled to WebAssembly to lay it
out, plotly.js and styles embedded: it opens without network access and needs no Graphviz install). ``--autotune`` tunes first, as ``fusegen run --autotune`` does, and charts every
measured candidate; ``--record DIR`` writes replay records there (with ``--autotune``) or, without it,
charts the records a previous ``fusegen run --autotune --record DIR`` wrote. ``--run`` also runs every
fusion and compares it with the reference evaluator (on ``--inputs``, with ``--expected`` as a third oracle, as
``fusegen run`` takes them). The page is built by the library (:func:`fusegen.report.reporting.report`). ``--json-data FILE`` writes the page's data.

Exit codes: 0 written, 1 written but ``--run`` found a mismatch (or a tuning failed), 2 bad input,
3 internal error.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from fusegen.cli.common import (EXIT_MISMATCH, check_writable, device_option, fail, get_device_or_fail, limit_options,
                                load_modules, pipeline_option, pipeline_passes, resolve_limits)
from fusegen.cli.config import config_options, resolve_config
from fusegen.cli.errors import fail_on_fusion_failures, report_errors
from fusegen.cli.progress import rich_progress


@click.command()
@click.argument("module_path", metavar="MODULE.hlo")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False), default=None,
              help="HTML file to write. Default: MODULE.report.html in the current directory.")
@click.option("--json-data", "json_path", type=click.Path(dir_okay=False), default=None,
              help="Also write the report's data (one JSON document) to this file.")
@click.option("--autotune", is_flag=True, help="Autotune every GEMM/library instruction first and chart the candidates.")
@click.option("--record", "record_dir", type=click.Path(file_okay=False), default=None,
              help="With --autotune: write replay records here. Without: chart the records found here.")
@click.option("--cost-model-top-k", "top_k", type=click.IntRange(0, None), default=None,
              help="With --autotune on a GPU: time only the cost model's best K configs and up to K without an "
                   "estimate (0, the default: all). Without a GPU nothing is timed: configs are ranked by estimate.")
@click.option("--autotune-cache-dir", type=click.Path(file_okay=False), default=None,
              help="With --autotune: xla_gpu_per_fusion_autotune_cache_dir.")
@click.option("--run", "do_run", is_flag=True,
              help="Also run every fusion (Triton's interpreter on a CPU) and show its error against the reference.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of --run's random inputs.")
@click.option("--inputs", "inputs_path", type=click.Path(), default=None,
              help="With --run: the inputs, as fusegen run --inputs takes them (.npz of p0, p1, ...; N devices: the "
                   "global arrays or a folder of part{K}.inputs.npz).")
@click.option("--expected", "expected_path", type=click.Path(), default=None,
              help="With --run: a known answer, as fusegen run --expected takes it (.npz of o0, o1, ..., e.g. JAX's "
                   "outputs; N devices: global, or a folder of part{K}.expected.npz).")
@click.option("--no-compile", is_flag=True,
              help="Skip compiling each kernel for the device's SM (sm_90 on h200/h100): registers, shared memory, spills.")
@click.option("--rtol", type=click.FloatRange(min=0, min_open=True), default=None,
              help="With --run: conditioning factor of the drift verdict (as fusegen run; [verify] rtol).")
@click.option("--atol", type=click.FloatRange(min=0), default=None,
              help="With --run: floor of every element type (as fusegen run; [verify] atol).")
@limit_options
@device_option
@config_options
@pipeline_option
def report(module_path, output_path, json_path, autotune, record_dir, top_k, autotune_cache_dir, do_run, seed,
           inputs_path, expected_path, no_compile, rtol, atol, max_memory, timeout, max_while_iterations, device_name,
           config_path, xla_flags):
    """Write an HTML report of MODULE.hlo: graph, a card per fusion, tuning charts, summary."""
    from fusegen.report.reporting import report as make_report
    from fusegen.plugin_manager import default_plugin_manager

    if not autotune and (top_k is not None or autotune_cache_dir is not None):
        fail("--cost-model-top-k and --autotune-cache-dir need --autotune")
    if not do_run and (inputs_path or expected_path):
        fail("--inputs and --expected need --run")
    if record_dir is not None and not autotune and not Path(record_dir).is_dir():
        fail(f"--record {record_dir}: no such directory (without --autotune it is read)")
    output_path = output_path or f"{Path(module_path).name.removesuffix('.hlo')}.report.html"
    check_writable(output_path, "--output")
    check_writable(json_path, "--json-data")
    cfg = resolve_config(config_path, xla_flags)
    device = get_device_or_fail(device_name, cfg)
    limits = resolve_limits(max_memory, timeout, max_while_iterations)
    with report_errors(module_path, output_path), rich_progress(sys.stderr.isatty()) as progress:
        res = make_report(module_path, output=output_path, json_data=json_path, autotune=autotune,
                          record_dir=record_dir, cost_model_top_k=top_k, autotune_cache_dir=autotune_cache_dir,
                          run=do_run, inputs=inputs_path, expected=expected_path, seed=seed, compile=not no_compile,
                          rtol=rtol, atol=atol, limits=limits, device=device, config=cfg,
                          passes=pipeline_passes(cfg), pm=default_plugin_manager(), progress=progress)
    for note in res.notes:
        click.echo(f"fusegen: warning: {note}", err=True)
    s = res.document["summary"]
    click.echo(f"wrote {output_path} ({s['fusions']} fusions, {len(s['host_fallbacks'])} on the host, "
               f"{len(res.document['tuning'])} tuned instructions, {len(res.html) / 1e6:.1f} MB)", err=True)
    # a plugin failed on it (the page is written all the same); the module read again only to verify it then
    fail_on_fusion_failures(module_path, res.document["modules"], load_modules(module_path) if res.errors else [])
    sys.exit(0 if res.ok else EXIT_MISMATCH)
