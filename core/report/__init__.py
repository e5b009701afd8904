"""``fusegen report``: one self-contained HTML page about a module's codegen.

:mod:`fusegen.report.data` collects the report document (JSON, ``--json-data``), :mod:`.tuning` the
measured candidates of a tuning, :mod:`.graph` writes the module graph as DOT text (the page lays it out
with the vendored Graphviz compiled to WebAssembly, package data ``vendor/``), :mod:`.charts` the plotly
figures, :mod:`.render` fills the jinja2 template (package data ``templates/``).
"""

from fusegen.report.data import SCHEMA, build_report, module_entry
from fusegen.report.render import render_html

__all__ = ["SCHEMA", "build_report", "module_entry", "render_html"]
