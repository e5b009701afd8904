"""``fusegen tune``: autotune a module's GEMM/library instructions, or replay a recorded tuning.

``fusegen tune MODULE.hlo...`` tunes every instruction that needs a config with the codegen backends
that plugins contribute (``fusegen_codegen_backends``), prints a summary table per instruction and can
write the tuned module (``-o``, one module). ``fusegen tune --replay RECORD.json [--json]`` runs the real
clustering and PickBestConfig over recorded measurements and prints the winner and every failure.

Past one process: ``--shard K/N`` tunes the K-th of N shards of the unique instructions
(:mod:`fusegen.autotuning.sharding`); ``--cluster ray[://ADDRESS]`` fans them out as Ray tasks
(:mod:`fusegen.autotuning.distributed`). ``xla_gpu_load_autotune_results_from`` /
``xla_gpu_dump_autotune_results_to`` read and write XLA's AutotuneResults text proto around tuning.

Exit codes: 0 success, 1 an instruction could not be tuned (or the replay found no winner), 2 bad input.
"""

from __future__ import annotations

import contextlib
import json
import sys

import click

from fusegen.cli.common import (EXIT_MISMATCH, check_writable, device_option, fail, get_device_or_fail, load_module,
                                pipeline_option, prepare_modules)
from fusegen.cli.config import config_options, resolve_config


def _replay(path: str, as_json: bool) -> None:
    from fusegen.autotuning.replay import RecordError, format_outcome, replay_file

    try:
        outcome = replay_file(path)
    except RecordError as e:
        fail(str(e))
    if as_json:
        click.echo(json.dumps(outcome.to_json(), indent=1))
    else:
        click.echo(format_outcome(outcome))
    if outcome.winner is None:
        sys.exit(EXIT_MISMATCH)


@click.command()
@click.argument("module_paths", metavar="[MODULE.hlo]...", nargs=-1)
@click.option("--replay", "replay_path", type=click.Path(dir_okay=False),
              help="Replay RECORD.json (from --record) through clustering and PickBestConfig.")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of tables.")
@device_option
@click.option("--cache-dir", type=click.Path(file_okay=False), default=None,
              help="Autotune cache directory (xla_gpu_per_fusion_autotune_cache_dir).")
@click.option("--cache-mode", type=click.Choice(["UPDATE", "READ", "WRITE_ONLY"], case_sensitive=False), default=None,
              help="xla_gpu_experimental_autotune_cache_mode.")
@click.option("--level", type=click.IntRange(0, 5), default=None, help="xla_gpu_autotune_level.")
@click.option("--backends", "backends_spec", default=None,
              help="xla_gpu_experimental_autotune_backends: 'a,b' or '+a,-b'.")
@click.option("--workers", type=click.IntRange(0, None), default=None,
              help="Compile worker processes (0: compile in this process). Default: CPU count.")
@click.option("--cost-model-top-k", type=click.IntRange(0, None), default=None,
              help="Rank configs by the roofline cost model and compile only the best K (0: off).")
@click.option("--record", "record_dir", type=click.Path(file_okay=False), default=None,
              help="Write a replay record per tuned instruction into this directory.")
@click.option("--retune", is_flag=True,
              help="Also tune instructions that already carry a config (e.g. an XLA-optimized module).")
@click.option("--shard", "shard_spec", default=None, metavar="K/N",
              help="Tune only the K-th of N shards of the unique instructions (xla_gpu_shard_autotuning).")
@click.option("--cluster", "cluster", default=None, metavar="ray[://ADDRESS]",
              help="Fan compile and profiling tasks out on Ray (extra 'distributed'); 'ray' starts a local instance.")
@click.option("--ray-num-cpus", type=click.IntRange(1, None), default=None,
              help="CPUs of the local Ray instance --cluster ray starts (default: all).")
@click.option("--inject-worker-kill", "kill_marker", type=click.Path(dir_okay=False), default=None, hidden=True,
              help="Fault injection (tests): the first compile task that creates this file kills its worker.")
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False), default=None,
              help="Write the module with the winners applied to their backend configs (one MODULE only).")
@click.option("--compile-timeout", "compile_timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds one candidate may compile before its worker is killed and the config fails "
                   "(xla_gpu_autotune_compile_timeout, default 300).")
@config_options
@pipeline_option
def tune(module_paths, replay_path, as_json, device_name, cache_dir, cache_mode, level, backends_spec, workers,
         cost_model_top_k, record_dir, retune, shard_spec, cluster, ray_num_cpus, kill_marker, output_path,
         config_path, xla_flags, compile_timeout=None):
    """Autotune MODULE.hlo..., or replay a tuning record with --replay RECORD.json."""
    if replay_path:
        if module_paths:
            fail("give either MODULE.hlo or --replay RECORD.json, not both")
        _replay(replay_path, as_json)
        return
    if not module_paths:
        fail("missing MODULE.hlo (or --replay RECORD.json)")
    if output_path and len(module_paths) > 1:
        fail("-o/--output writes one module; give one MODULE.hlo")
    if shard_spec and cluster:
        fail("give --shard K/N or --cluster, not both")
    shard_kn = None
    if shard_spec:
        from fusegen.autotuning.sharding import parse_shard

        try:
            shard_kn = parse_shard(shard_spec)
        except ValueError as e:
            fail(str(e))
    ray_opts = None
    if cluster:
        from fusegen.autotuning.distributed import RayOptions, parse_cluster

        try:
            ray_opts = RayOptions(parse_cluster(cluster), ray_num_cpus, kill_worker_once=kill_marker)
        except ValueError as e:
            fail(str(e))

    from fusegen.autotuning.autotuner import AutotuneOptions, Autotuner, discover_backends, summary_table
    from fusegen.autotuning.selection import AutotuneError
    from fusegen.plugin_manager import PluginError

    cfg = resolve_config(config_path, xla_flags)
    overrides = {}
    if cache_dir is not None:
        overrides["xla_gpu_per_fusion_autotune_cache_dir"] = cache_dir
    if cache_mode is not None:
        overrides["xla_gpu_experimental_autotune_cache_mode"] = cache_mode.upper()
    if level is not None:
        overrides["xla_gpu_autotune_level"] = level
    if backends_spec is not None:
        overrides["xla_gpu_experimental_autotune_backends"] = backends_spec
    if workers is not None:
        overrides["compile_workers"] = workers
    if cost_model_top_k is not None:
        overrides["cost_model_top_k"] = cost_model_top_k
    if retune:
        overrides["retune_configured"] = True
    if compile_timeout is not None:
        overrides["compile_timeout_s"] = compile_timeout
    try:
        options = AutotuneOptions.from_debug_options(cfg.debug_options, **overrides)
    except (ValueError, TypeError) as e:
        fail(str(e))
    check_writable(output_path, "--output")
    device = get_device_or_fail(device_name, cfg)
    modules = [load_module(p) for p in module_paths]
    prepare_modules(modules, cfg, device)  # an unoptimized module is fused first, as `run` does
    try:
        backends = discover_backends()
    except PluginError as e:
        fail(str(e))
    if not backends:
        fail("no codegen backends are registered (plugins contribute them through the fusegen_codegen_backends hook)")

    progress = None
    if not as_json and sys.stderr.isatty():
        from rich.console import Console
        from rich.progress import Progress

        progress = Progress(console=Console(stderr=True), transient=True)
    try:
        tuner = Autotuner(backends, options, device, record_dir=record_dir, progress=None if ray_opts else progress)
    except ValueError as e:
        fail(str(e))
    extra: dict = {}
    with tuner:
        from fusegen.cli.tune_xla import dump_results, load_results

        extra.update(load_results(tuner, cfg.debug_options))
        try:
            with progress if progress is not None else contextlib.nullcontext():
                reports = _tune_all(tuner, modules, shard_kn, ray_opts, progress, extra)
        except AutotuneError as e:
            fail(f"{module_paths[0]}: {e.code}: {e.message}")
        except OSError as e:  # cache or record directory not writable
            fail(f"{module_paths[0]}: autotuning: {e}")
        extra.update(dump_results(tuner, cfg.debug_options))
    if not reports and not as_json:
        click.echo("fusegen: note: nothing to tune (no __triton_gemm, cuBLASLt, cuDNN or custom fusion without a "
                   "config" + ("" if retune else "; --retune also tunes instructions that carry one") + ")", err=True)
    if output_path:
        from fusegen.hlo.printer import print_module

        with open(output_path, "w") as fh:
            fh.write(print_module(modules[0]) + "\n")
    if as_json:
        from fusegen.api import TuneResult

        doc = TuneResult(module_paths[0], tuple(module_paths), tuple(reports), tuner.cache.stats, tuple(modules))
        click.echo(json.dumps({**doc.to_json(), **extra}, indent=1))
    else:
        from rich.console import Console

        title = f"autotuning {', '.join(module_paths)}" + (f" (shard {shard_spec})" if shard_spec else "") + \
            (f" on {cluster}" if cluster else "")
        Console(width=None if sys.stdout.isatty() else 160).print(summary_table(reports, title=title))
    if any(r.error for r in reports):
        sys.exit(EXIT_MISMATCH)


def _tune_all(tuner, modules, shard_kn, ray_opts, progress, extra: dict) -> list:
    """Tune ``modules`` in this process, one shard of them, or on Ray; fills ``extra`` (JSON keys)."""
    if ray_opts is not None:
        from fusegen.autotuning.distributed import DistributedUnavailable, tune_on_ray

        try:
            run = tune_on_ray(tuner, modules, ray_opts, progress)
        except DistributedUnavailable as e:
            fail(str(e))
        extra["cluster"] = {"address": ray_opts.address or "local", "cpus": run.cpus, "gpus": run.gpus,
                            "tuned": run.tuned, "measured_on": run.measured_on, "settled": run.settled,
                            "seconds": round(run.seconds, 3)}
        return run.reports
    if shard_kn is not None:
        from fusegen.autotuning.sharding import tune_shard

        k, n = shard_kn
        sr = tune_shard(tuner, modules, k, n)
        extra["shard"] = {"index": k, "count": n, "unique": sr.unique, "keys": sr.keys}
        return sr.reports
    reports = []
    for m in modules:
        reports.extend(tuner.tune_module(m, raise_on_error=False))
    return reports
