"""``fusegen report``: one self-contained HTML page about a module's codegen.

:mod:`fusegen.report.data` collects the report document (JSON, ``--json-data``), :mod:`.tuning` the
measured candidates of a tuning, :mod:`.graph` writes the module graph as DOT text (the page lays it out
with the vendored Graphviz compiled to WebAssembly, package data ``vendor/``), :mod:`.charts` the plotly
figures, :mod:`.render` fills the jinja2 template (package data ``templates/``).

The package is callable: ``fusegen.report(module, run=True, output="m.html", ...)`` is
:func:`fusegen.api.report` (the name is both the package and the library's function, so neither shadows the other).
"""

import sys as _sys
import types as _types

from fusegen.report.data import SCHEMA, build_report, module_entry
from fusegen.report.render import render_html

__all__ = ["SCHEMA", "build_report", "module_entry", "render_html"]


class _CallableReport(_types.ModuleType):
    """This package, callable as :func:`fusegen.api.report`."""

    def __call__(self, *args, **kwargs):
        from fusegen.api.reporting import report

        return report(*args, **kwargs)


_sys.modules[__name__].__class__ = _CallableReport
