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

from fusegen.cli.common import (EXIT_MISMATCH, EXIT_UNSUPPORTED, device_option, fail, get_device_or_fail, internal_error,
                                limit_options, load_modules, pipeline_option, prepare_modules, check_writable,
                                resolve_limits, with_plugin)
from fusegen.cli.config import config_options, resolve_config
from fusegen.cli.run_spmd import is_multi_device, run_partitioned
from fusegen.cli.verify_options import budget_cell, expected_for, verdict_lines, verify_options


def _fmt(x):
    return "-" if x is None else f"{x:.3g}"


def report_table(report, title: str):
    """A rich table with one row per fusion of ``report`` (a :class:`RunReport`)."""
    from rich.table import Table

    t = Table(title=title, show_lines=False)
    for col in ("fusion", "kind", "decided by", "emitter", "backend", "launch", "max abs err", "max rel err",
                "err/budget", "status"):
        t.add_column(col, overflow="fold")
    for f in report.fusions:
        status = {"ok": "[green]ok[/]", "mismatch": "[red]mismatch[/]", "error": "[red]error[/]"}.get(f.status, f.status)
        t.add_row(f.name, f.kind, with_plugin(f.decided_by, f.decided_by_plugin), with_plugin(f.emitter, f.plugin),
                  f.backend, f.launch, _fmt(f.max_abs_error),
                  _fmt(f.max_rel_error), budget_cell(f), status)
    return t


def autotune_json(tuned: list, compiles: int, cache_stats: dict) -> dict:
    """The ``autotune`` part of ``--json``: one entry per instruction, plus totals.

    Each entry: ``name``, ``configs`` (tried), ``supported``, ``compiled``, ``failures`` (kind -> count),
    ``winner``, ``duration_us``, ``scratch_bytes``, ``tie_break``, ``cache`` (``memory`` | ``directory`` |
    ``miss``), ``cache_hit``, ``step``, ``error`` (and ``module`` for multi-module files), and for a
    profiled instruction ``candidates``: ``[{"name", "backend", "trusted", "duration_us", "scratch_bytes",
    "failure": null | kind}]`` in config order.
    """
    multi = len({m for m, _ in tuned}) > 1
    entries = []
    for module_name, r in tuned:
        d = r.to_json()
        d["candidates"] = [{"name": c.name, "backend": getattr(c.config, "backend", ""), "trusted": bool(c.trusted),
                            "duration_us": c.duration_us, "scratch_bytes": c.scratch_bytes,
                            "failure": c.failure.kind.name if c.failure else None} for c in r.results]
        if multi:
            d["module"] = module_name
        entries.append(d)
    return {"autotune": entries, "autotune_compiles": compiles, "autotune_cache": dict(cache_stats)}


def _autotune(modules, cfg, device, module_path, record_dir, cache_dir, top_k, show_progress):
    """Tune every module's tunable instructions in place; returns ``(tuner, [(module name, report)])``."""
    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner, discover_backends
    from fusegen.autotuning.selection import AutotuneError
    from fusegen.plugin_manager import PluginError

    overrides = {"retune_configured": True}
    if cache_dir is not None:
        overrides["xla_gpu_per_fusion_autotune_cache_dir"] = cache_dir
    if top_k is not None:
        overrides["cost_model_top_k"] = top_k
    try:
        options = AutotuneOptions.from_debug_options(cfg.debug_options, **overrides)
    except (ValueError, TypeError) as e:
        fail(str(e))
    try:
        backends = discover_backends()
    except PluginError as e:
        fail(str(e))
    if not backends:
        fail("--autotune: no codegen backends are registered (plugins contribute them through the "
             "fusegen_codegen_backends hook)")
    progress = None
    if show_progress:
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
    try:
        tuner = Autotuner(backends, options, device, record_dir=record_dir, progress=progress)
    except ValueError as e:
        fail(str(e))
    tuned = []
    from fusegen.cli.tune_xla import dump_results, load_results

    with tuner:
        load_results(tuner, cfg.debug_options)  # xla_gpu_load_autotune_results_from
        for module in modules:
            try:
                if progress is not None:
                    with progress:
                        reps = tuner.tune_module(module, raise_on_error=False)
                else:
                    reps = tuner.tune_module(module, raise_on_error=False)
            except AutotuneError as e:
                fail(f"{module_path}: {e.code}: {e.message}")
            except OSError as e:  # cache or record directory not writable
                fail(f"{module_path}: autotuning: {e}")
            except PluginError as e:
                fail(f"{module_path}: {e}")
            except Exception as e:  # never a bare traceback
                internal_error(f"{module_path}: autotuning module {module.name}", e)
            tuned.extend((module.name, r) for r in reps)
        dump_results(tuner, cfg.debug_options)  # xla_gpu_dump_autotune_results_to
    return tuner, tuned


def _others_line(report) -> str:
    """``2 on host (%sort.1 sort, %rng rng)``: each non-fusion instruction a backend ran, named once."""
    parts = []
    for backend, count in sorted(report.other.items()):
        names = [f"%{n} {o}" for n, o, b in report.other_instructions if b == backend]
        parts.append(f"{count} on {backend} ({', '.join(names)})" if names else f"{count} on {backend}")
    return "; ".join(parts) or "none"


def launch_dimensions_json(f) -> dict | None:
    """The structured launch of a fusion report's kernel (the one its ``launch`` string names):
    ``{"grid": [x, y, z], "threads": [x, y, z], "shared_memory_bytes": N}``, ``None`` without a kernel."""
    kernels = list(getattr(f, "kernels", None) or [])
    for k in kernels:
        if str(k.launch) == f.launch:
            return k.launch.to_json()
    return kernels[0].launch.to_json() if kernels else None


def fusion_json(f) -> dict:
    """One fusion of ``--json``: the report's keys plus ``launch_dimensions``. A Triton fusion that was not
    compiled (``--no-compile``, a failed compile) has no known shared memory: ``null`` and a
    ``"shared_memory_reason"``, never a placeholder 0."""
    from fusegen import kinds

    d = f.to_json()
    d["launch_dimensions"] = launch_dimensions_json(f)
    if d["launch_dimensions"] is not None and f.kind == kinds.TRITON and f.compiled != "ok":
        d["launch_dimensions"]["shared_memory_bytes"] = None
        d["shared_memory_reason"] = ("not compiled for sm_90 (--no-compile): the shared memory of a Triton kernel "
                                     "is known after its compile" if f.compiled == "-" else f"sm_90 compile {f.compiled}")
    return d


def report_json(reports) -> dict:
    """The ``--json`` document: ``{"module", "fusions": [...], ...}`` (fusions in entry post order)."""
    from fusegen.runtime.executor import combined_status
    if len(reports) == 1:
        r = reports[0]
        return {
            "module": r.module,
            "fusions": [fusion_json(f) for f in r.fusions],
            "other_instructions": r.other,
            "non_fusion_instructions": [{"name": n, "opcode": o, "backend": b} for n, o, b in r.other_instructions],
            "outputs_match": r.outputs_ok,
            "output_max_abs_error": r.output_max_abs_error,
            "seconds": round(r.seconds, 3),
            "status": r.status,
            "plugin_errors": r.plugin_errors,  # status "error": the plugin, fusion and reason of each failure
            **(r.verdict.to_json() if r.verdict is not None else {}),
            "timings": r.timings_json(),
            **(r.spmd_json() if hasattr(r, "spmd_json") else {}),  # num_partitions, collectives (SPMD runs)
            "reference_profile": reference_profile_json(r),
        }
    # A file of several modules (XLA tests separate them with `// -----`): one list, each row names its module.
    return {
        "module": "; ".join(r.module for r in reports),
        "modules": [report_json([r]) for r in reports],
        "fusions": [{**fusion_json(f), "module": r.module} for r in reports for f in r.fusions],
        "status": combined_status(r.status for r in reports),
        "plugin_errors": [{**e, "module": r.module} for r in reports for e in r.plugin_errors],
    }


def profile_table(report, n: int = 10):
    """A rich table of the ``n`` slowest fusions of ``report`` with their phase times (seconds), and a last
    row with the module's phases (:mod:`fusegen.runtime.timings`)."""
    from rich.table import Table

    from fusegen.runtime.timings import FUSION_PHASES, slowest

    mt = report.timings_json()
    t = Table(title=f"{report.module}: the {n} slowest fusions (seconds; module total {mt['seconds']:.2f} s, "
                    f"parse {mt['parse']:.2f}, passes {mt['passes']:.2f}, other instructions {mt['other']:.2f})")
    for col in ("fusion", "kind", "emitter") + FUSION_PHASES + ("total",):
        t.add_column(col, justify="left" if col in ("fusion", "kind", "emitter") else "right")
    for f in slowest(report.fusions, n):
        d = f.timings.to_json()
        t.add_row(f.name, f.kind, f.emitter, *(f"{d[k]:.3f}" for k in FUSION_PHASES), f"{d['seconds']:.3f}")
    t.add_row("(module)", "", "", *(f"{mt[k]:.3f}" for k in FUSION_PHASES), f"{mt['seconds']:.3f}")
    return t


def reference_profile_json(report, n: int = 20) -> dict:
    """The ``reference_profile`` part of ``--json``: the module's reference run and f64 oracle per instruction.

    ``{"reference_s", "f64_s"}`` (seconds over all instructions of each run, where it ran: in the process
    beside the kernels with ``--jobs`` above 1), ``"instructions"``: the ``n`` slowest, ``[{"name", "opcode",
    "reference_s", "f64_s", "calls"}]``, and ``"per_element"``: ``[{"name", "opcode", "computation",
    "reason"}]``, each instruction whose computation the evaluator runs per element (not liftable)."""
    from fusegen.runtime.instruction_profile import merge_profiles

    prof = getattr(report, "reference_profile", None) or {}
    ref, f64 = prof.get("reference", {}), prof.get("f64", {})
    return {"reference_s": round(sum(r[1] for r in ref.values()), 6), "f64_s": round(sum(r[1] for r in f64.values()), 6),
            "instructions": merge_profiles(ref, f64, n), "per_element": list(getattr(report, "per_element", []))}


def reference_profile_table(report, n: int = 10):
    """A rich table of the ``n`` slowest instructions of the module's reference run and f64 oracle (seconds),
    with a note on each instruction whose computation runs per element."""
    from rich.table import Table

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


@click.command()
@click.argument("module_path", metavar="MODULE.hlo")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Seed of the random inputs.")
@click.option("--inputs", "inputs_path", type=click.Path(), help=".npz with arrays p0, p1, ... (or parameter names).")
@click.option("--save-outputs", "outputs_path", type=click.Path(),
              help="Write the outputs to this .npz (o0, o1, ...; bf16/f8/s4 as raw bytes: .view(ml_dtypes.X)).")
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
              help="Compile and time only the cost model's best K configs (0: all). Default: 4 when timing "
                   "on the CPU (no GPU), else all.")
@limit_options
@verify_options
def run(module_path, seed, inputs_path, outputs_path, device_name, config_path, xla_flags, as_json, no_compile,
        jobs, profile, autotune, autotune_cache_dir, record_dir, top_k, max_memory, timeout, max_while_iterations, rtol, atol,
        expected_path):
    """Run MODULE.hlo end to end on seeded random inputs (or --inputs) and check every fusion.

    Each fusion's kernel output is compared with the reference evaluator on the same operands; the
    module's outputs are compared too. With --autotune the tunable instructions are tuned first and a
    summary table is printed before the run table (to stderr with --json; the JSON gets an "autotune"
    list). Module outputs that differ from the reference but are as close to an f64 evaluation as the
    reference itself (and every fusion within its error budget) are "drift", exit 0. Exit 1 on any
    mismatch or failed tuning, 2 on bad input, 3 on an internal error.
    """
    from fusegen.dispatch import DispatchError
    from fusegen.evaluator.collectives import MultiDeviceUnsupported
    from fusegen.evaluator.common import EvaluationError
    from fusegen.evaluator.evaluator import UnsupportedOpError
    from fusegen.plugin_manager import PluginError
    from fusegen.runtime.executor import run_module
    from fusegen.api import inputs_for
    from fusegen.runtime.inputs import InputError, leaves, save_npz
    from fusegen.runtime.limits import ResourceLimitError, check_module
    from fusegen.codegen.kernel_dir import KernelDirError

    cfg = resolve_config(config_path, xla_flags)
    device = get_device_or_fail(device_name, cfg)
    limits = resolve_limits(max_memory, timeout, max_while_iterations)
    t_parse = time.perf_counter()
    modules = load_modules(module_path)
    t_parse = time.perf_counter() - t_parse
    if not autotune:
        given = [n for n, v in (("--autotune-cache-dir", autotune_cache_dir), ("--record", record_dir),
                                ("--cost-model-top-k", top_k)) if v is not None]
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
    verify = cfg.verify.with_overrides(rtol, atol)
    expected = expected_for(modules[0], expected_path) if expected_path and not is_multi_device(modules[0]) else None
    tuner, tuned = None, []
    if autotune:
        tuner, tuned = _autotune(modules, cfg, device, module_path, record_dir, autotune_cache_dir, top_k,
                                 show_progress=not as_json and sys.stderr.isatty())
        from rich.console import Console

        from fusegen.autotuning.autotuner import summary_table

        tconsole = Console(stderr=as_json, width=None if (sys.stderr if as_json else sys.stdout).isatty() else 160)
        tconsole.print(summary_table([r for _, r in tuned], title=f"autotuning {module_path} on {device.name}"))
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
        for module, passes_s in zip(modules, t_passes):
            if is_multi_device(module):  # every partition x replica, global arrays (fusegen.cli.run_spmd)
                out, report = run_partitioned(module, module_path, inputs_path, expected_path, seed, device, limits,
                                              verify, not no_compile, (lambda r: progress.advance(task))
                                              if progress is not None else None, jobs or len(os.sched_getaffinity(0)))
                report.timings.add("parse", t_parse)
                report.timings.add("passes", passes_s)
                reports.append(report)
                outputs.append(out)
                continue
            try:
                check_module(module, limits)
                args = inputs_for(module, inputs_path, seed)  # the library's (fusegen.api)
            except InputError as e:
                fail(str(e))
            except ResourceLimitError as e:
                fail(f"{module_path}: {e}")
            except MemoryError as e:
                fail(f"{module_path}: the inputs of module {module.name} do not fit in memory ({e})")
            except Exception as e:  # never a bare traceback
                internal_error(f"{module_path}: inputs of module {module.name}", e)
            on_fusion = (lambda r: progress.advance(task)) if progress is not None else None
            try:
                out, report = run_module(module, args, device, compile_kernels=not no_compile, on_fusion=on_fusion,
                                         limits=limits, verify=verify, expected=expected,
                                         jobs=jobs or len(os.sched_getaffinity(0)))
            except MultiDeviceUnsupported as e:  # a valid module fusegen cannot run as meant: exit 4
                fail(f"{module_path}: {e}", EXIT_UNSUPPORTED)
            except (UnsupportedOpError, PluginError, InputError, ResourceLimitError, KernelDirError) as e:
                fail(f"{module_path}: {e}")
            except DispatchError as e:  # e.g. [plugins] disable removed the question that would answer
                fail(f"{module_path}: {e} (check [plugins] disable in the config)")
            except EvaluationError as e:  # the HLO is inconsistent in a way the parser does not check
                fail(f"{module_path}: cannot evaluate: {e}")
            except MemoryError as e:
                fail(f"{module_path}: module {module.name} needs more memory than this machine has ({e})")
            except Exception as e:  # never a bare traceback
                internal_error(f"{module_path}: module {module.name}", e)
            report.timings.add("parse", t_parse)
            report.timings.add("passes", passes_s)
            reports.append(report)
            outputs.append(out)
    finally:
        if progress is not None:
            progress.stop()
    if outputs_path:
        try:
            save_npz(outputs_path, {f"o{i}": a for i, a in enumerate(leaves(outputs[0]))})
        except OSError as e:
            fail(f"--save-outputs {outputs_path}: {e.strerror or e}")
    from fusegen.runtime.plugin_failures import failure_lines
    from fusegen.verify.verdict import VACUOUS

    ok = all(r.ok for r in reports) and not any(r.error for _, r in tuned)
    failed = failure_lines(module_path, reports)  # a plugin failed on a fusion: every row printed, then exit 2
    if as_json:
        doc = report_json(reports)
        if tuner is not None:
            doc.update(autotune_json(tuned, tuner.compiles, tuner.cache.stats))
            if any(r.error for _, r in tuned):
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
            for line in (report.collective_lines() if hasattr(report, "collective_lines") else []):
                console.print(line, markup=False)
            for line in verdict_lines(report):
                console.print(line, markup=False)
            said = {"ok": "match", "drift": "drift (as accurate as the reference vs f64)"}.get(report.status, "MISMATCH")
            vacuous = [o.name for o in getattr(report.verdict, "outputs", ()) if o.reason == VACUOUS]
            if report.status == "drift" and vacuous:
                said = f"vacuous: {', '.join(vacuous)} all NaN/inf on both sides, nothing compared (try other inputs)"
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
    for line in failed[1:]:
        click.echo(f"fusegen: error: {line}", err=True)
    if failed:
        fail(failed[0])
    sys.exit(0 if ok else EXIT_MISMATCH)
