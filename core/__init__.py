"""fusegen: turns every fusion of an XLA:GPU-optimized HLO module into a kernel, through plugins.

The library (:mod:`fusegen.api`): ``fusegen.load(path_or_text)``, ``fusegen.capture(jax_fn, *args, ...)``,
``fusegen.explain(module)``, ``fusegen.run(module, inputs=..., expected=...)``, ``fusegen.tune(module)`` and
``fusegen.report(module, ...)`` return typed results whose ``to_json()`` is what the matching command's
``--json`` prints. They are imported on first use, so ``import fusegen`` stays cheap.

``fusegen.report`` is also the package of the HTML report (:mod:`fusegen.report.data`, ...): calling it is
:func:`fusegen.report.reporting.report`.
"""

__version__ = "0.1.0"

from fusegen.plugin_manager import declare_core_plugin as _declare_core_plugin

# core's own plugins, as an installed plugin's entry points are declared: every plugin manager registers them
# before any entry point, in this order (the dispatch questions, then the `fusion` and `dot-decomposer` passes);
# each module is imported when a manager first loads, not by ``import fusegen``
_declare_core_plugin("fusegen.matchers", "fusegen.analysis.matchers")
_declare_core_plugin("fusegen.passes", "fusegen.passes.builtin")
del _declare_core_plugin

_API = ("load", "load_all", "explain", "run", "tune", "session", "UnsupportedInstructionError")
_CAPTURE = ("capture", "Captured", "CaptureError")


def __getattr__(name: str):
    import importlib

    if name in _API or name == "api":
        api = importlib.import_module("fusegen.api")  # not `from fusegen import api`: that asks here again
        return api if name == "api" else getattr(api, name)
    if name in _CAPTURE:
        return getattr(importlib.import_module("fusegen.jax_capture"), name)
    if name == "report":  # the report package, callable (fusegen.report.__init__)
        return importlib.import_module("fusegen.report")
    raise AttributeError(f"module 'fusegen' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API, *_CAPTURE, "report"])
