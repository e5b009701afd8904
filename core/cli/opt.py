"""``fusegen opt MODULE.hlo --passes a,b``: run module passes and print the result (like XLA's ``hlo-opt``).

Exit codes: 0 success, 2 bad input (malformed HLO, unknown pass, bad ``--xla-flag``, unknown device) or a pass
that failed (e.g. ``gemm-fusion`` on a device below compute capability 8.0) or broke the module (it does not
verify, changed the entry signature, or with ``--verify`` changed the outputs beyond its error budget: the
message names the pass and its plugin), each reported in one line; the module is not printed then.
"""

from __future__ import annotations

import json

import click

from fusegen.cli.common import device_option, fail, get_device_or_fail, internal_error, load_module
from fusegen.cli.config import resolve_config, strict_plugins_option
from fusegen.passes.pipeline import DEFAULT_PIPELINE_TEXT


def ensure_core_passes(pm) -> None:
    """Register core's pass plugin (``fusegen.passes``) on ``pm`` if it is not there yet."""
    if "fusegen.passes" not in pm.infos:
        from fusegen.passes import builtin

        pm.register(builtin, "fusegen.passes", group="builtin", dist="fusegen")


@click.command()
@click.argument("module_path", metavar="MODULE.hlo")
@click.option("--passes", "passes", default=None,
              help=f"Comma-separated pass names, run in order (beats [pipeline] passes; default: {DEFAULT_PIPELINE_TEXT}).")
@click.option("--verify", "verify", is_flag=True, default=None,
              help="Also compare the module's outputs on seeded inputs before and after each pass, within the "
                   "pass's error budget (as [pipeline] verify = true).")
@click.option("--xla-flag", "xla_flags", multiple=True, metavar="NAME=VALUE",
              help="Override an XLA debug option (repeatable), e.g. xla_gpu_enable_triton_gemm=false.")
@click.option("--config", "config_path", type=click.Path(), default=None, help="fusegen.toml / pyproject.toml to read.")
@device_option
@strict_plugins_option
@click.option("--json", "as_json", is_flag=True, help='Print {"changed": bool, "module": text}.')
def opt(module_path, passes, verify, xla_flags, config_path, device_name, as_json):
    """Run module passes over MODULE.hlo and print the rewritten module."""
    from fusegen.hlo.printer import print_module
    from fusegen.passes.pipeline import PassError, run_pipeline
    from fusegen.plugin_manager import PluginError, default_plugin_manager

    cfg = resolve_config(config_path, xla_flags)  # [plugins] disable before import; quarantined plugins named
    device = get_device_or_fail(device_name)
    module = load_module(module_path)
    pm = default_plugin_manager()
    names = [p.strip() for p in passes.split(",") if p.strip()] if passes else None
    if names is None and cfg.pipeline.passes:
        names = list(cfg.pipeline.passes)
    try:
        res = run_pipeline(module, names, pm=pm, debug_options=cfg.debug_options, device=device,
                           pass_options_by_name=cfg.pipeline.options, check_values=bool(verify or cfg.pipeline.verify))
    except PassError as e:
        fail(f"{module_path}: {e}")
    except PluginError as e:
        fail(f"{module_path}: {e}")
    except Exception as e:  # never a bare traceback
        internal_error(f"{module_path}: module {module.name}", e)
    for line in res.log:
        click.echo(f"fusegen: {line}", err=True)
    text = print_module(module)
    if as_json:
        click.echo(json.dumps({"changed": res.changed, "module": text}))
    else:
        click.echo(text, nl=False)
