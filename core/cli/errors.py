"""The library's exceptions as the CLI's one-line errors and exit codes (2 bad input, 3 internal, 4 unsupported:
a valid module fusegen cannot run as meant, :class:`~fusegen.runtime.support.UnsupportedInstructionError` and
:class:`~fusegen.evaluator.collectives.MultiDeviceUnsupported`).

Each command calls the library inside one of these context managers; nothing here decides anything the
library does not.
"""

from __future__ import annotations

import contextlib
from typing import Iterator

import click

from fusegen.cli.common import EXIT_BAD_INPUT, EXIT_INTERNAL, EXIT_UNSUPPORTED, fail, internal_error


def fail_on_fusion_failures(module_path: str, reports: list, modules: list) -> None:
    """After the table, a line per fusion a plugin failed on (:func:`fusegen.runtime.plugin_failures.failure_lines`)
    and the exit: 3 when one of those plugins ships with fusegen and ``modules`` verify (a built-in failing on a
    valid module is fusegen's bug), else 2: the plugin is named, or the module's first problem
    (:func:`fusegen.hlo.module_verifier.verify_module`, which the parser does not run in full). Returns when
    nothing failed."""
    from fusegen.hlo.module_verifier import verify_module
    from fusegen.runtime.plugin_failures import failure_lines, internal_failure

    internal = internal_failure(reports)
    problems = [p for m in modules for p in verify_module(m, max_problems=1)] if internal else []
    failed = failure_lines(module_path, reports, internal=not problems)
    if problems:  # what broke fusegen's own plugin is the input: say what is wrong with it
        failed.insert(0, f"{module_path}: invalid module: {problems[0]}")
    for line in failed[1:]:
        click.echo(f"fusegen: error: {line}", err=True)
    if failed:
        fail(failed[0], EXIT_INTERNAL if internal and not problems else EXIT_BAD_INPUT)


@contextlib.contextmanager
def run_errors(module_path: str) -> Iterator[None]:
    """Errors of loading inputs and expected answers and of running a module (``run``, ``report --run``)."""
    from fusegen.codegen.interpreter_patches import TritonInternalsError
    from fusegen.codegen.kernel_dir import KernelDirError
    from fusegen.dispatch import DispatchError
    from fusegen.evaluator.collectives import MultiDeviceUnsupported
    from fusegen.evaluator.common import EvaluationError
    from fusegen.evaluator.evaluator import UnsupportedOpError
    from fusegen.hlo.sharding import ShardingError
    from fusegen.plugin_manager import PluginError
    from fusegen.runtime.inputs import InputError
    from fusegen.runtime.limits import ResourceLimitError

    try:
        yield
    except MultiDeviceUnsupported as e:  # a valid module fusegen cannot run as meant: exit 4
        fail(f"{module_path}: cannot run as all its devices: {e}", EXIT_UNSUPPORTED)
    except UnsupportedOpError as e:  # a valid module with an op fusegen has no implementation of: exit 4
        fail(f"{module_path}: {e}", EXIT_UNSUPPORTED)
    except InputError as e:  # names the module or the file already
        fail(str(e))
    except (ShardingError, ResourceLimitError, PluginError, KernelDirError, TritonInternalsError) as e:
        fail(f"{module_path}: {e}")
    except DispatchError as e:  # e.g. [plugins] disable removed the question that would answer
        fail(f"{module_path}: {e} (check [plugins] disable in the config)")
    except EvaluationError as e:  # the HLO is inconsistent in a way the parser does not check
        fail(f"{module_path}: cannot evaluate: {e}")
    except ValueError as e:  # an unreadable --expected / --inputs file (the message names it)
        fail(str(e))
    except MemoryError as e:
        fail(f"{module_path}: needs more memory than this machine has ({e})")
    except Exception as e:  # never a bare traceback
        internal_error(f"{module_path}: running", e)


def _fail_tuning(module_path: str, e: Exception) -> None:
    """An instruction that could not be tuned, or XLA's results file that could not be read."""
    from fusegen.autotuning.selection import AutotuneError

    if isinstance(e, AutotuneError):
        fail(f"{module_path}: {e.code}: {e.message}")
    fail(f"xla_gpu_load_autotune_results_from: {e}")


@contextlib.contextmanager
def tune_errors(module_path: str) -> Iterator[None]:
    """Errors of tuning (``tune``, ``run --autotune``, ``report --autotune``)."""
    from fusegen.autotuning.distributed import DistributedUnavailable
    from fusegen.autotuning.selection import AutotuneError
    from fusegen.cache.xla_results import XlaResultsError
    from fusegen.passes.pipeline import PassError
    from fusegen.plugin_manager import PluginError

    try:
        yield
    except (AutotuneError, XlaResultsError) as e:
        _fail_tuning(module_path, e)
    except (ValueError, TypeError, DistributedUnavailable) as e:  # bad options, no codegen backend, no Ray
        fail(str(e))
    except OSError as e:  # cache, record directory or results file not writable
        fail(f"{module_path}: autotuning: {e}")
    except (PluginError, PassError) as e:
        fail(f"{module_path}: {e}")
    except Exception as e:  # never a bare traceback
        internal_error(f"{module_path}: autotuning", e)


@contextlib.contextmanager
def plan_errors(module_path: str, what: str = "") -> Iterator[None]:
    """Errors of dispatching and emitting without running (``explain``, the report's cards)."""
    from fusegen.dispatch import DispatchError
    from fusegen.hlo.sharding import ShardingError
    from fusegen.passes.pipeline import PassError
    from fusegen.plugin_manager import PluginError

    try:
        yield
    except (PluginError, ShardingError, PassError) as e:
        fail(f"{module_path}: {e}")
    except DispatchError as e:
        fail(f"{module_path}: {e} (check [plugins] disable in the config)")
    except Exception as e:  # never a bare traceback
        internal_error(f"{module_path}{': ' + what if what else ''}", e)


@contextlib.contextmanager
def load_errors() -> Iterator[None]:
    """A module file the library could not read or parse: its one line, exit 2."""
    import sys

    import click

    from fusegen.api import LoadError
    from fusegen.cli.common import EXIT_BAD_INPUT
    from fusegen.hlo.errors import HloParseError

    try:
        yield
    except HloParseError as e:  # FILE:LINE:COL: error: ...
        click.echo(str(e).splitlines()[0], err=True)
        sys.exit(EXIT_BAD_INPUT)
    except LoadError as e:
        fail(str(e))


@contextlib.contextmanager
def report_errors(module_path: str, output_path: str) -> Iterator[None]:
    """``fusegen report``: tuning, records, the vendored page assets and writing the page; the rest as a run."""
    from fusegen.autotuning.replay import RecordError
    from fusegen.autotuning.selection import AutotuneError
    from fusegen.cache.xla_results import XlaResultsError
    from fusegen.codegen.kernel_dir import KernelDirError
    from fusegen.report.graph import VendorError

    with load_errors(), run_errors(module_path):
        try:
            yield
        except (AutotuneError, XlaResultsError) as e:
            _fail_tuning(module_path, e)
        except (RecordError, VendorError) as e:  # unreadable records; a broken install: which file
            fail(str(e))
        except KernelDirError as e:
            fail(f"{module_path}: {e}")
        except OSError as e:  # the page or its data cannot be written
            fail(f"{output_path}: {e.strerror or e}")
