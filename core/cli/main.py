"""The ``fusegen`` command: ``run``, ``explain``, ``report``, ``plugins``, ...

Exit codes: 0 success, 1 an output mismatched the reference evaluator, 2 bad input (malformed HLO,
bad inputs file, unknown device) or a failing third-party plugin, each reported in one line; 3 an internal
error (one of fusegen's own plugins failing on a valid module included); 4 a valid module fusegen cannot
run as meant (a multi-device module it cannot run as all its devices); 130 interrupted (Ctrl-C,
``fusegen: interrupted``), as a shell reports a process SIGINT ended.
"""

from __future__ import annotations

import sys

import click

from fusegen import __version__
from fusegen.cli.config import config
from fusegen.cli.explain import explain
from fusegen.cli.indexing import indexing
from fusegen.cli.opt import opt
from fusegen.cli.tune import tune
from fusegen.cli.cache import cache
from fusegen.cli.capture import capture
from fusegen.cli.plugins import plugins
from fusegen.cli.report import report
from fusegen.cli.run import run


EXIT_INTERRUPTED = 130  # 128 + SIGINT


class _Group(click.Group):
    """click's group, except that Ctrl-C in a command is one line and exit 130: click's own ``Aborted!`` exits 1,
    which fusegen uses for a mismatch."""

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt:
            click.echo("fusegen: interrupted", err=True)
            sys.exit(EXIT_INTERRUPTED)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="fusegen")
def cli() -> None:
    """fusegen: XLA:GPU's codegen path after the optimizer, as plugins.

    Takes a fused HLO module, decides each fusion's emitter kind as XLA does, generates Triton kernels,
    runs them (Triton's interpreter on a CPU) and checks them against a reference evaluator.
    """


cli.add_command(run)
cli.add_command(explain)
cli.add_command(plugins)
cli.add_command(config)
cli.add_command(opt)
cli.add_command(tune)
cli.add_command(cache)
cli.add_command(report)
cli.add_command(indexing)
cli.add_command(capture)


def main() -> None:
    import warnings

    from fusegen.cache.tiers import CacheWarning

    # The cache logs each bad file in one line already; the Python warning would repeat it with source.
    warnings.filterwarnings("ignore", category=CacheWarning)
    cli(prog_name="fusegen")
