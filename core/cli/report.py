"""``fusegen report MODULE.hlo``: the module as a page (graph, fusion cards, tuning charts, summary).

Writes one self-contained HTML file (the graph as DOT text with Graphviz compiled to WebAssembly to lay it
out, plotly.js and styles embedded: it opens without network access and needs no Graphviz install). ``--autotune`` tunes first, as ``fusegen run --autotune`` does, and charts every
measured candidate; ``--record DIR`` writes replay records there (with ``--autotune``) or, without it,
charts the records a previous ``fusegen run --autotune --record DIR`` wrote. ``--run`` also runs every
fusion and compares it with the reference evaluator. ``--json-data FILE`` writes the page's data.

Exit codes: 0 written, 1 written but ``--run`` found a mismatch (or a tuning failed), 2 bad input,
3 internal error.
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

import click

from fusegen.cli.common import (EXIT_MISMATCH, check_writable, device_option, fail, get_device_or_fail,
                                internal_error, limit_options, load_modules, pipeline_option, prepare_modules,
                                resolve_limits)
from fusegen.cli.config import config_options, resolve_config
from fusegen.cli.run_spmd import is_multi_device, run_partitioned


def _run_modules(modules, device, seed, compile_kernels, module_path, limits, verify):
    """``fusegen run``'s run of every module (same limits and verdict), one report each; errors exit 2."""
    from fusegen.codegen.kernel_dir import KernelDirError
    from fusegen.dispatch import DispatchError
    from fusegen.evaluator.common import EvaluationError
    from fusegen.evaluator.evaluator import UnsupportedOpError
    from fusegen.plugin_manager import PluginError
    from fusegen.runtime.executor import run_module
    from fusegen.runtime.inputs import InputError, make_inputs
    from fusegen.runtime.limits import ResourceLimitError, check_module

    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
    reports = []
    for module in modules:
        if is_multi_device(module):  # every partition x replica, as `fusegen run` does
            reports.append(run_partitioned(module, module_path, None, None, seed, device, limits, verify,
                                           compile_kernels, None, 1)[1])
            continue
        try:
            check_module(module, limits)
            _, rep = run_module(module, make_inputs(module, seed), device, compile_kernels=compile_kernels,
                                limits=limits, verify=verify)
        except (UnsupportedOpError, PluginError, InputError, DispatchError, ResourceLimitError, KernelDirError) as e:
            fail(f"{module_path}: {e}")
        except EvaluationError as e:
            fail(f"{module_path}: cannot evaluate: {e}")
        except MemoryError as e:
            fail(f"{module_path}: module {module.name} needs more memory than this machine has ({e})")
        except Exception as e:  # never a bare traceback
            internal_error(f"{module_path}: module {module.name}", e)
        reports.append(rep)
    return reports


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
              help="With --autotune: time only the cost model's best K configs (0: all; default 4 on a CPU).")
@click.option("--autotune-cache-dir", type=click.Path(file_okay=False), default=None,
              help="With --autotune: xla_gpu_per_fusion_autotune_cache_dir.")
@click.option("--run", "do_run", is_flag=True,
              help="Also run every fusion (Triton's interpreter on a CPU) and show its error against the reference.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of --run's random inputs.")
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
           no_compile, rtol, atol, max_memory, timeout, max_while_iterations, device_name, config_path, xla_flags):
    """Write an HTML report of MODULE.hlo: graph, a card per fusion, tuning charts, summary."""
    from fusegen.plugin_manager import default_plugin_manager

    if not autotune and (top_k is not None or autotune_cache_dir is not None):
        fail("--cost-model-top-k and --autotune-cache-dir need --autotune")
    if record_dir is not None and not autotune and not Path(record_dir).is_dir():
        fail(f"--record {record_dir}: no such directory (without --autotune it is read)")
    output_path = output_path or f"{Path(module_path).name.removesuffix('.hlo')}.report.html"
    check_writable(output_path, "--output")
    check_writable(json_path, "--json-data")
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    cfg = resolve_config(config_path, xla_flags)
    device = get_device_or_fail(device_name, cfg)
    limits = resolve_limits(max_memory, timeout, max_while_iterations)
    modules = load_modules(module_path)
    phases["parse"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    prepare_modules(modules, cfg, device)
    phases["passes"] = time.perf_counter() - t0
    from fusegen.report import tuning as tuning_data

    tuning = []
    tuned = []
    if autotune:
        from fusegen.cli.run import _autotune

        t0 = time.perf_counter()
        tuner, tuned = _autotune(modules, cfg, device, module_path, record_dir, autotune_cache_dir, top_k,
                                 show_progress=sys.stderr.isatty())
        phases["autotune"] = time.perf_counter() - t0
        tuning = tuning_data.from_instruction_reports(tuned, tuner.options.scratch_bytes_window_us)
    elif record_dir is not None:
        from fusegen.autotuning.replay import RecordError

        try:
            tuning = tuning_data.from_record_dir(record_dir)
        except (RecordError, OSError) as e:
            fail(str(e))
    run_reports = [None] * len(modules)
    if do_run:
        t0 = time.perf_counter()
        run_reports = _run_modules(modules, device, seed, not no_compile, module_path, limits,
                                   cfg.verify.with_overrides(rtol, atol))
        phases["run"] = time.perf_counter() - t0
    doc = _collect(module_path, modules, device, default_plugin_manager(), run_reports, not no_compile, phases,
                   tuning, {"autotune": autotune, "run": do_run, "record": record_dir, "compile": not no_compile,
                            "seed": seed if do_run else None})
    from fusegen.report.graph import VendorError
    from fusegen.report.render import render_html

    try:
        html = render_html(doc)
    except VendorError as e:  # a broken install: say which file, not a traceback
        fail(str(e))
    except Exception as e:
        internal_error(f"{module_path}: rendering the report", e)
    try:
        Path(output_path).write_text(html, encoding="utf-8")
        if json_path:
            Path(json_path).write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    except OSError as e:
        fail(f"{output_path}: {e.strerror or e}")
    s = doc["summary"]
    click.echo(f"wrote {output_path} ({s['fusions']} fusions, {len(s['host_fallbacks'])} on the host, "
               f"{len(tuning)} tuned instructions, {len(html) / 1e6:.1f} MB)", err=True)
    bad = s["status"] == "mismatch" or any(t.get("error") for t in tuning if t["source"] == "autotune")
    bad = bad or any(m.get("outputs_match") is False for m in doc["modules"])
    failed = [f"{module_path}: fusion %{f['name']}: {f.get('reason', '')}" for m in doc["modules"]
              for f in m["fusions"] if f.get("status") == "error"]  # a plugin failed on it (written all the same)
    for line in failed[1:]:
        click.echo(f"fusegen: error: {line}", err=True)
    if failed:
        fail(failed[0])
    sys.exit(EXIT_MISMATCH if bad else 0)


def _collect(module_path, modules, device, pm, run_reports, compile_kernels, phases, tuning, options):
    from fusegen.dispatch import DispatchError
    from fusegen.plugin_manager import PluginError
    from fusegen.report.data import build_report, module_entry

    t0 = time.perf_counter()
    entries = []
    major, minor = getattr(device, "compute_capability", (9, 0))
    capability = major * 10 + minor if major >= 7 else 90  # the device's SM; sm_90 for a non-CUDA preset
    options["compile"] = f"sm_{capability}" if compile_kernels else False
    try:
        for k, (m, rr) in enumerate(zip(modules, run_reports)):
            entries.append(module_entry(m, device, pm, rr, compile_kernels, capability,
                                        card_prefix=f"m{k}-" if len(modules) > 1 else ""))
    except PluginError as e:
        fail(f"{module_path}: {e}")
    except DispatchError as e:
        fail(f"{module_path}: {e} (check [plugins] disable in the config)")
    except Exception as e:  # never a bare traceback
        internal_error(f"{module_path}: collecting the report", e)
    phases[f"dispatch + sm_{capability} compile" if compile_kernels else "dispatch"] = time.perf_counter() - t0
    return build_report(module_path, device, entries, tuning, phases, options)
