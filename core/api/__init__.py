"""fusegen as a library: load, explain, run, tune and report on HLO modules from Python, with typed results.

::

    import fusegen

    m = fusegen.load("model.hlo")                       # a path, or HLO text
    plan = fusegen.explain(m)                           # ExplainResult: one FusionPlan per fusion
    res = fusegen.run(m, inputs={"p0": x}, compile=False)   # RunResult: .status, .outputs, .fusions
    res.to_json() == json.loads(`fusegen run model.hlo --json`)     # the same keys
    tuned = fusegen.tune(m, backends="triton")          # TuneResult: one report per tuned instruction
    page = fusegen.report(m, run=True, output="m.html") # ReportResult: .html, .document
    res.to_dataframe()                                  # pandas, one row per fusion (also explain, tune)

The library owns every loop and result type; the ``fusegen`` command (:mod:`fusegen.cli`) only parses options,
calls these functions, prints, and maps exceptions to exit codes, so each result's ``to_json()`` is what the
command's ``--json`` prints. Loops report progress through ``progress=`` (:mod:`fusegen.api.progress`: None,
``"tqdm"`` or a callable). A module that is not fused yet (no ``fusion`` instruction) goes through the pipeline
first, in place, as every command does. ``fusegen.report`` is the report package's command
(:func:`fusegen.report.reporting.report`, :class:`~fusegen.report.reporting.ReportResult`), a layer above this
one: it builds its page from these functions' results.

Errors are exceptions, never ``SystemExit``, raised before any work where the arguments are at fault:
:class:`fusegen.hlo.errors.HloParseError` (file:line:col), :class:`LoadError` (unreadable file),
:class:`fusegen.runtime.inputs.InputError` (inputs or expected that do not fit the module),
:class:`fusegen.plugin_manager.PluginError` (names the plugin), :class:`fusegen.config.toml.ConfigError`,
:class:`fusegen.passes.pipeline.PassError`, ``ValueError`` (unknown device, bad option), and
:class:`UnsupportedInstructionError` (a valid module with an instruction fusegen has no implementation of,
before any run; a subclass of :class:`UnsupportedOpError`, which the evaluator raises for one instruction).
"""

from __future__ import annotations

from fusegen.api.explaining import ExplainResult, FusionPlan, device_summary, estimate_module, explain, \
    explain_document, plan_fusions, shared_memory_reasons
from fusegen.api.loading import LoadError, ModuleLike, Session, as_modules, load, load_all, prepare, session
from fusegen.api.progress import Progress, ProgressEvent
from fusegen.api.running import RunResult, expected_for, inputs_for, run, run_modules, spmd_inputs
from fusegen.api.tuning import AutotuneRun, TuneResult, autotune_modules, tune
from fusegen.evaluator.evaluator import UnsupportedOpError
from fusegen.runtime.support import UnsupportedInstructionError

__all__ = ["AutotuneRun", "ExplainResult", "FusionPlan", "LoadError", "ModuleLike", "Progress", "ProgressEvent",
           "RunResult", "Session", "TuneResult", "UnsupportedInstructionError", "UnsupportedOpError",
           "as_modules", "autotune_modules", "device_summary", "estimate_module", "expected_for", "explain",
           "explain_document", "inputs_for", "load", "load_all", "plan_fusions", "prepare", "run",
           "run_modules", "session", "shared_memory_reasons", "spmd_inputs", "tune"]
