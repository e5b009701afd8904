"""``fusegen report``: one self-contained HTML page about a module's codegen.

:mod:`fusegen.report.data` collects the report document (JSON, ``--json-data``), :mod:`.tuning` the
measured candidates of a tuning, :mod:`.graph` writes the module graph as DOT text (the page lays it out
with the vendored Graphviz compiled to WebAssembly, package data ``vendor/``), :mod:`.charts` the plotly
figures, :mod:`.render` fills the jinja2 template (package data ``templates/``).

The package is callable: ``fusegen.report(module, run=True, output="m.html", ...)`` is
:func:`fusegen.report.reporting.report`, the library's report command, which returns a
:class:`~fusegen.report.reporting.ReportResult` (the name is both the package and the library's function, so
neither shadows the other). The report stands above :mod:`fusegen.api` and reads its results (docs/layers.md).
"""

import sys as _sys
import types as _types

from fusegen.report.data import SCHEMA, build_report, module_entry
from fusegen.report.render import render_html

__all__ = ["SCHEMA", "build_report", "module_entry", "render_html"]


class _CallableReport(_types.ModuleType):
    """This package, callable as :func:`fusegen.report.reporting.report`."""

    def __call__(self, *args, **kwargs):
        from fusegen.report.reporting import report  # loads the library (fusegen.api) on the first call only

        return report(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableReport
