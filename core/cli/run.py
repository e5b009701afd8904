"""``fusegen run MODULE.hlo``: parse, dispatch, generate, run every fusion, compare with the reference.

With ``--autotune`` every tunable instruction (XLA's ``ConfigAssigner`` list: ``__triton_gemm`` /
``__triton_nested_gemm_fusion`` fusions, cuBLASLt calls, ``__cudnn$fusion``, ``__custom_fusion``) is tuned
first, including those that already carry a config (corpus modules come tuned for another machine), with
the codegen backends plugins contribute (Triton configs, cuBLASLt, cuDNN, the host backend). The winners
are applied to the backend configs, so the run then uses them. The autotune cache directory is
``xla_gpu_per_fusion_autotune_cache_dir`` (config file, ``XLA_FLAGS``, ``--xla-flag``, or
``--autotune-cache-dir``); a second run with the same directory is served from it without compiling.
"""

from __future__ import annotations

import json
import os
import sys
import time

import click

from fusegen.cli.common import (EXIT_MISMATCH, check_writable, device_option, fail, get_device_or_fail, limit_options,
                                load_modules, pipeline_option, prepare_modules, resolve_limits, with_plugin)
from fusegen.cli.config import config_options, resolve_config
from fusegen.cli.errors import fail_on_fusion_failures, run_errors, tune_errors
from fusegen.cli.progress import rich_progress
from fusegen.cli.verify_options import budget_cell, verdict_lines, verify_options


def _fmt(x):
    return "-" if x is None else f"{x:.3g}"


def report_table(report, title: str):
    """A rich table with one row per fusion of ``report`` (a :class:`RunReport`)."""
    from rich.table import Table

    from fusegen.perf.report import estimate_cell

    t = Table(title=title, show_lines=False)
    dev = next(((f.estimate or {}).get("device") for f in report.fusions if f.estimate), "") or "gpu"
    for col in ("fusion", "kind", "decided by", "emitter", "backend", "launch", f"est. {dev} µs", "max abs err",
                "max rel err", "err/budget", "status"):
        t.add_column(col, overflow="fold")
    for f in report.fusions:
        status = {"ok": "[green]ok[/]", "mismatch": "[red]mismatch[/]", "error": "[red]error[/]"}.get(f.status, f.status)
        t.add_row(f.name, f.kind, with_plugin(f.decided_by, f.decided_by_plugin), with_plugin(f.emitter, f.plugin),
                  f.backend, f.launch, estimate_cell(f.estimate), _fmt(f.max_abs_error),
                  _fmt(f.max_rel_error), budget_cell(f), status)
    return t


def autotune_step(modules, cfg, device, module_path, record_dir, cache_dir, top_k, show_progress, measure_on_cpu=False):
    """``--autotune``: the library's tuning step (:func:`fusegen.api.autotune_modules`), errors as one line."""
    from fusegen.api import Session, autotune_modules
    from fusegen.plugin_manager import default_plugin_manager

    with tune_errors(module_path), rich_progress(show_progress) as progress:
        run = autotune_modules(modules, Session(cfg, device, default_plugin_manager()), cache_dir=cache_dir,
                               record_dir=record_dir, cost_model_top_k=top_k, progress=progress,
                               measure_on_cpu=measure_on_cpu)
    for note in run.notes:
        click.echo(f"fusegen: warning: {note}", err=True)
    return run


def _others_line(report) -> str:
    """``2 on host (%sort.1 sort, %rng rng)``: each non-fusion instruction a backend ran, named once."""
    parts = []
    for backend, count in sorted(report.other.items()):
        names = [f"%{n} {o}" for n, o, b in report.other_instructions if b == backend]
        parts.append(f"{count} on {backend} ({', '.join(names)})" if names else f"{count} on {backend}")
    return "; ".join(parts) or "none"


def profile_table(report, n: int = 10):
    """A rich table of the ``n`` fusions of ``report`` with the largest estimated device time (fusegen.perf,
    labelled as an estimate) beside their interpreter phase times (seconds on this CPU), and a last row with the
    module's (:mod:`fusegen.runtime.timings`)."""
    from rich.table import Table

    from fusegen.perf.report import estimate_cell, ranked_by_estimate
    from fusegen.runtime.run_json import estimated_json
    from fusegen.runtime.timings import FUSION_PHASES

    mt = report.timings_json()
    est = estimated_json(report)
    dev = est.get("device") or "gpu"
    t = Table(title=f"{report.module}: the {n} fusions of the largest estimated {dev} time (estimate: fusegen.perf "
                    f"v{est.get('model_version')}, not a measurement), beside their seconds on this CPU (module total "
                    f"{mt['seconds']:.2f} s, parse {mt['parse']:.2f}, passes {mt['passes']:.2f}, other instructions "
                    f"{mt['other']:.2f})")
    for col in ("fusion", "kind", "emitter", f"est. {dev} µs", "bound") + FUSION_PHASES + ("CPU total s",):
        t.add_column(col, justify="left" if col in ("fusion", "kind", "emitter", "bound") else "right")
    for f in ranked_by_estimate(report.fusions, n):
        d = f.timings.to_json()
        t.add_row(f.name, f.kind, f.emitter, estimate_cell(f.estimate), (f.estimate or {}).get("bound", "-"),
                  *(f"{d[k]:.3f}" for k in FUSION_PHASES), f"{d['seconds']:.3f}")
    t.add_row("(module)", "", "", estimate_cell(est), "", *(f"{mt[k]:.3f}" for k in FUSION_PHASES),
              f"{mt['seconds']:.3f}")
    return t


def reference_profile_table(report, n: int = 10):
    """A rich table of the ``n`` slowest instructions of the module's reference run and f64 oracle (seconds),
    with a note on each instruction whose computation runs per element."""
    from rich.table import Table

    from fusegen.runtime.run_json import reference_profile_json

    d = reference_profile_json(report, n)
    notes = {p["name"]: p["reason"] for p in d["per_element"]}
    t = Table(title=f"{report.module}: the reference run ({d['reference_s']:.2f} s) and f64 oracle ({d['f64_s']:.2f} s), "
                    f"the {n} slowest instructions")
    for col in ("instruction", "opcode", "reference", "f64", "calls", "note"):
        t.add_column(col, justify="right" if col in ("reference", "f64", "calls") else "left", overflow="fold")
    for row in d["instructions"]:
        t.add_row(row["name"], row["opcode"], f"{row['reference_s']:.3f}", f"{row['f64_s']:.3f}", str(row["calls"]),
                  notes.get(row["name"], ""))
    return t


def per_element_lines(report) -> list[str]:
    """One line per instruction whose computation the evaluator cannot lift (runs per element)."""
    return [f"  %{p['name']} ({p['opcode']}): {p['reason']}" for p in getattr(report, "per_element", [])]


def save_outputs(path: str, result, reports: list) -> dict:
    """``--save-outputs PATH``: the module's outputs as ``o0``, ``o1``, ... (:func:`fusegen.runtime.inputs.save_npz`).

    Not written when a fusion failed: the reference evaluator stood in for its kernel (or the kernel cannot run on
    the device), so the values would not be the kernels'. A file an earlier run left at ``path`` is removed then,
    so that nothing stale passes for this run's outputs. Returns the ``--json`` key ``saved_outputs``:
    ``{"path", "written"}`` and, when not written, ``"reason"``. Exits 2 when the file cannot be written.
    """
    from pathlib import Path

    from fusegen.runtime.inputs import leaves, save_npz

    failed = [f"%{e['fusion']}" for r in reports for e in r.plugin_errors]
    if failed:
        reason = (f"fusion{'s' if len(failed) > 1 else ''} {', '.join(failed)} failed, so the outputs are not all "
                  "kernel outputs (a failed fusion's values come from the reference evaluator)")
        try:
            Path(path).unlink()
            reason += f"; the earlier {path} was removed"
        except FileNotFoundError:
            pass
        except OSError as e:
            reason += f"; the earlier {path} could not be removed ({e.strerror or e})"
        return {"path": path, "written": False, "reason": reason}
    try:
        save_npz(path, {f"o{i}": a for i, a in enumerate(leaves(result.outputs))})
    except OSError as e:
        fail(f"--save-outputs {path}: {e.strerror or e}")
    return {"path": path, "written": True}


@click.command()
@click.argument("module_path", metavar="MODULE.hlo")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the random inputs.")
@click.option("--inputs", "inputs_path", type=click.Path(), help=".npz with arrays p0, p1, ... (or parameter names).")
@click.option("--save-outputs", "outputs_path", type=click.Path(),
              help="Write the outputs to this .npz (o0, o1, ...; bf16/f8/s4 as raw bytes: .view(ml_dtypes.X)); "
                   "not written when a fusion failed.")
@device_option
@config_options
@pipeline_option
@click.option("--json", "as_json", is_flag=True, help="Print a JSON report instead of tables.")
@click.option("--no-compile", is_flag=True, help="Skip compiling each kernel for sm_90.")
@click.option("--jobs", "-j", type=click.IntRange(min=1), default=None,
              help="Worker processes for the sm_90 compiles; above 1 the module's reference run and f64 oracle "
                   "also run in a process beside the kernels (default: the number of usable cores).")
@click.option("--profile", is_flag=True,
              help="Also print the ten slowest fusions with their phase times, the ten slowest instructions of "
                   "the reference run and f64 oracle, and each computation evaluated per element (to stderr "
                   "with --json).")
@click.option("--autotune", is_flag=True,
              help="Autotune every GEMM/library instruction first (also those carrying a config) and run the winners.")
@click.option("--autotune-cache-dir", "autotune_cache_dir", type=click.Path(file_okay=False), default=None,
              help="Autotune cache directory (sets xla_gpu_per_fusion_autotune_cache_dir). Needs --autotune.")
@click.option("--record", "record_dir", type=click.Path(file_okay=False), default=None,
              help="Write a replay record per tuned instruction (fusegen tune --replay). Needs --autotune.")
@click.option("--cost-model-top-k", "top_k", type=click.IntRange(0, None), default=None,
              help="Compile and time only the cost model's best K configs, and up to K without an estimate "
                   "(0: all). Default: 4 with --measure-on-cpu, else all.")
@click.option("--measure-on-cpu", is_flag=True,
              help="With --autotune and no GPU: time candidates in Triton's interpreter / numpy instead of ranking "
                   "them by the H200 performance model (recorded as CPU time). Needs --autotune.")
@limit_options
@verify_options
def run(module_path, seed, inputs_path, outputs_path, device_name, config_path, xla_flags, as_json, no_compile,
        jobs, profile, autotune, autotune_cache_dir, record_dir, top_k, measure_on_cpu, max_memory, timeout,
        max_while_iterations, rtol, atol, allow_vacuous, expected_path):
    """Run MODULE.hlo end to end on seeded random inputs (or --inputs) and check every fusion.

    Each fusion's kernel output is compared with the reference evaluator on the same operands; the
    module's outputs are compared too. With --autotune the tunable instructions are tuned first and a
    summary table is printed before the run table (to stderr with --json; the JSON gets an "autotune"
    list). Module outputs that differ from the reference but are as close to an f64 evaluation as the
    reference itself (and every fusion within its error budget) are "drift", exit 0. Exit 1 on any
    mismatch or failed tuning, 2 on bad input, 3 on an internal error, 4 on a valid module fusegen cannot
    run (an op it has no implementation of, a multi-device module it cannot run as all its devices).
    """
    from fusegen.api import Session, run_modules
    from fusegen.plugin_manager import default_plugin_manager

    cfg = resolve_config(config_path, xla_flags)
    device = get_device_or_fail(device_name, cfg)
    limits = resolve_limits(max_memory, timeout, max_while_iterations)
    t_parse = time.perf_counter()
    modules = load_modules(module_path)
    t_parse = time.perf_counter() - t_parse
    if not autotune:
        given = [n for n, v in (("--autotune-cache-dir", autotune_cache_dir), ("--record", record_dir),
                                ("--cost-model-top-k", top_k), ("--measure-on-cpu", measure_on_cpu or None))
                 if v is not None]
        if given:
            fail(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} --autotune")
    check_writable(outputs_path, "--save-outputs")
    t_passes = []
    for m in modules:  # one at a time, to time each
        t0 = time.perf_counter()
        prepare_modules([m], cfg, device)
        t_passes.append(time.perf_counter() - t0)
    if (inputs_path or outputs_path or expected_path) and len(modules) > 1:
        fail(f"{module_path}: holds {len(modules)} modules; --inputs/--save-outputs/--expected need a single-module "
             "file")
    tuned = None
    if autotune:
        tuned = autotune_step(modules, cfg, device, module_path, record_dir, autotune_cache_dir, top_k,
                              show_progress=not as_json and sys.stderr.isatty(), measure_on_cpu=measure_on_cpu)
        from rich.console import Console

        from fusegen.autotuning.autotuner import summary_table

        tconsole = Console(stderr=as_json, width=None if (sys.stderr if as_json else sys.stdout).isatty() else 160)
        tconsole.print(summary_table([r for _, r in tuned.tuned], title=f"autotuning {module_path} on {device.name}"))
    session = Session(cfg, device, default_plugin_manager())
    with run_errors(module_path), rich_progress(not as_json and sys.stderr.isatty()) as progress:
        result = run_modules(modules, session, inputs=inputs_path, seed=seed, expected=expected_path,
                             compile=not no_compile, limits=limits, verify=cfg.verify.with_overrides(rtol, atol, allow_vacuous),
                             jobs=jobs or len(os.sched_getaffinity(0)), progress=progress, parse_seconds=t_parse,
                             pass_seconds=t_passes)
    reports = list(result.reports)
    saved = save_outputs(outputs_path, result, reports) if outputs_path else None
    from fusegen.verify.output_verdict import VACUOUS

    ok = result.ok and (tuned is None or tuned.ok)
    if as_json:
        from fusegen.runtime.run_json import autotune_json

        doc = result.to_json()
        if saved is not None:
            doc["saved_outputs"] = saved
        if tuned is not None:
            doc.update(autotune_json(tuned.tuned, tuned.compiles, tuned.cache))
            if not tuned.ok:
                doc["status"] = "autotune-error" if doc.get("status") in ("ok", "drift") else doc.get("status")
        click.echo(json.dumps(doc, indent=2))
        if profile:
            from rich.console import Console

            pconsole = Console(stderr=True, width=None if sys.stderr.isatty() else 160)
            for report in reports:
                pconsole.print(profile_table(report))
                pconsole.print(reference_profile_table(report))
                for line in per_element_lines(report):
                    pconsole.print(line, markup=False)
    else:
        from rich.console import Console

        console = Console(width=None if sys.stdout.isatty() else 160)
        for report in reports:
            console.print(report_table(report, f"{report.module} on {device.name}"))
            for f in report.fusions:
                if f.reason:
                    console.print(f"  {f.name}: {f.reason}", markup=False)
            console.print(f"non-fusion instructions: {_others_line(report)}", markup=False)
            from fusegen.perf.report import module_line
            from fusegen.runtime.run_json import estimated_json

            console.print(module_line(estimated_json(report)), markup=False)
            for line in (report.collective_lines() if hasattr(report, "collective_lines") else []):
                console.print(line, markup=False)
            for line in verdict_lines(report):
                console.print(line, markup=False)
            said = {"ok": "match", "drift": "drift (as accurate as the reference vs f64)"}.get(report.status, "MISMATCH")
            vacuous = [o.name for o in getattr(report.verdict, "outputs", ()) if o.reason.startswith(VACUOUS)]
            if report.status in ("drift", "vacuous") and vacuous:
                said = (f"vacuous: {', '.join(vacuous)} all NaN/inf on both sides, nothing compared (try other "
                        "inputs)" + ("" if report.status == "drift" else "; not a pass (--allow-vacuous accepts it)"))
            if report.status == "undetermined":
                said = "cannot tell (an output whose sharding was inferred matches expected under no sharding that fits)"
            if report.status == "error":  # the failed fusion ran on the host: its outputs prove nothing
                said = "not judged: " + "; ".join(f"plugin {e['plugin']!r} failed on fusion %{e['fusion']}"
                                                  for e in report.plugin_errors)
            console.print(f"outputs vs reference: {said} "
                          f"(max abs error {report.output_max_abs_error:.3g}); {report.seconds:.2f} s", markup=False)
            if profile:
                console.print(profile_table(report))
                console.print(reference_profile_table(report))
                for line in per_element_lines(report):
                    console.print(line, markup=False)
    if saved is not None and not saved["written"]:
        click.echo(f"fusegen: warning: --save-outputs {outputs_path}: not written: {saved['reason']}", err=True)
    fail_on_fusion_failures(module_path, reports, modules)  # after every row: exit 2 (a plugin) or 3 (fusegen's own)
    sys.exit(0 if ok else EXIT_MISMATCH)
