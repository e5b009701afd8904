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

import json
import sys

import click

from fusegen.cli.common import (EXIT_MISMATCH, check_writable, device_option, fail, get_device_or_fail, load_module,
                                pipeline_option, pipeline_passes)
from fusegen.cli.config import config_options, resolve_config
from fusegen.cli.errors import tune_errors
from fusegen.cli.progress import rich_progress


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
              help="Time only the cost model's best K configs and up to K without an estimate (0: all). "
                   "Default: 4 with --measure-on-cpu, else all.")
@click.option("--record", "record_dir", type=click.Path(file_okay=False), default=None,
              help="Write a replay record per tuned instruction into this directory.")
@click.option("--retune", is_flag=True,
              help="Also tune instructions that already carry a config (e.g. an XLA-optimized module).")
@click.option("--measure-on-cpu", is_flag=True,
              help="Without a GPU, time candidates in Triton's interpreter / numpy instead of ranking them by the "
                   "H200 performance model (recorded as CPU time, never as a GPU figure).")
@click.option("--no-remeasure", "no_remeasure", is_flag=True,
              help="On a GPU, apply cached entries whose figure is an estimate or CPU time instead of measuring again.")
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
         cost_model_top_k, record_dir, retune, measure_on_cpu, no_remeasure, shard_spec, cluster, ray_num_cpus,
         kill_marker, output_path, config_path, xla_flags, compile_timeout=None):
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
    from fusegen.api import tune as tune_modules
    from fusegen.api.tuning import tune_options
    from fusegen.autotuning.autotuner import summary_table
    from fusegen.plugin_manager import default_plugin_manager

    cfg = resolve_config(config_path, xla_flags)
    options = dict(backends=backends_spec, level=level, cache_dir=cache_dir, cache_mode=cache_mode, retune=retune,
                   workers=workers, cost_model_top_k=cost_model_top_k, record_dir=record_dir,
                   compile_timeout=compile_timeout, shard=shard_spec, cluster=cluster, ray_num_cpus=ray_num_cpus,
                   measure_on_cpu=measure_on_cpu, remeasure_estimates=not no_remeasure, _kill_worker_once=kill_marker)
    with tune_errors(module_paths[0]):  # bad option values: one line before anything is loaded
        if shard_spec and cluster:
            raise ValueError("give --shard K/N or --cluster, not both")
        tune_options(cfg.debug_options, xla_gpu_autotune_level=level, cost_model_top_k=cost_model_top_k,
                     compile_timeout_s=compile_timeout)
    check_writable(output_path, "--output")
    device = get_device_or_fail(device_name, cfg)
    modules = [load_module(p) for p in module_paths]
    with tune_errors(module_paths[0]), rich_progress(not as_json and sys.stderr.isatty()) as progress:
        res = tune_modules(modules, device=device, config=cfg, passes=pipeline_passes(cfg), pm=default_plugin_manager(),
                           progress=progress, **options)
    for note in res.notes:
        click.echo(f"fusegen: warning: {note}", err=True)
    reports = list(res.instructions)
    if not reports and not as_json:
        from fusegen.autotuning.instructions import nothing_to_tune_note

        click.echo(f"fusegen: note: {nothing_to_tune_note(retune, '--retune')}", err=True)
    if output_path:
        from fusegen.hlo.printer import print_module

        with open(output_path, "w") as fh:
            fh.write(print_module(modules[0]) + "\n")
    if as_json:
        click.echo(json.dumps(res.to_json(), indent=1))
    else:
        from rich.console import Console

        title = f"autotuning {', '.join(module_paths)}" + (f" (shard {shard_spec})" if shard_spec else "") + \
            (f" on {cluster}" if cluster else "")
        Console(width=None if sys.stdout.isatty() else 160).print(summary_table(reports, title=title))
    if not res.ok:
        sys.exit(EXIT_MISMATCH)
