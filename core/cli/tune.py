"""``fusegen tune``: autotune a module's GEMM/library instructions, or replay a recorded tuning.

``fusegen tune MODULE.hlo`` tunes every instruction that needs a config with the codegen backends
that plugins contribute (``fusegen_codegen_backends``), prints a summary table per instruction and can
write the tuned module (``-o``). ``fusegen tune --replay RECORD.json [--json]`` runs the real
clustering and PickBestConfig over recorded measurements and prints the winner and every failure.

Exit codes: 0 success, 1 an instruction could not be tuned (or the replay found no winner), 2 bad input.
"""

from __future__ import annotations

import json
import sys

import click

from fusegen.cli.common import EXIT_MISMATCH, device_option, fail, get_device_or_fail, load_module, check_writable, prepare_modules
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
@click.argument("module_path", metavar="[MODULE.hlo]", required=False)
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
@click.option("-o", "--output", "output_path", type=click.Path(dir_okay=False), default=None,
              help="Write the module with the winners applied to their backend configs.")
@click.option("--compile-timeout", "compile_timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Seconds one candidate may compile before its worker is killed and the config fails "
                   "(xla_gpu_autotune_compile_timeout, default 300).")
@config_options
def tune(module_path, replay_path, as_json, device_name, cache_dir, cache_mode, level, backends_spec, workers,
         cost_model_top_k, record_dir, retune, output_path, config_path, xla_flags, compile_timeout=None):
    """Autotune MODULE.hlo, or replay a tuning record with --replay RECORD.json."""
    if replay_path:
        if module_path:
            fail("give either MODULE.hlo or --replay RECORD.json, not both")
        _replay(replay_path, as_json)
        return
    if not module_path:
        fail("missing MODULE.hlo (or --replay RECORD.json)")

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
    module = load_module(module_path)
    prepare_modules([module], cfg, device)  # an unoptimized module is fused first, as `run` does
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
        tuner = Autotuner(backends, options, device, record_dir=record_dir, progress=progress)
    except ValueError as e:
        fail(str(e))
    with tuner:
        try:
            if progress is not None:
                with progress:
                    reports = tuner.tune_module(module, raise_on_error=False)
            else:
                reports = tuner.tune_module(module, raise_on_error=False)
        except AutotuneError as e:
            fail(f"{module_path}: {e.code}: {e.message}")
    if not reports and not as_json:
        click.echo("fusegen: note: nothing to tune (no __triton_gemm, cuBLASLt, cuDNN or custom fusion without a "
                   "config" + ("" if retune else "; --retune also tunes instructions that carry one") + ")", err=True)
    if output_path:
        from fusegen.hlo.printer import print_module

        with open(output_path, "w") as fh:
            fh.write(print_module(module) + "\n")
    if as_json:
        click.echo(json.dumps({"module": module_path, "instructions": [r.to_json() for r in reports],
                               "cache": tuner.cache.stats}, indent=1))
    else:
        from rich.console import Console

        Console(width=None if sys.stdout.isatty() else 160).print(summary_table(reports, title=f"autotuning {module_path}"))
    if any(r.error for r in reports):
        sys.exit(EXIT_MISMATCH)
