"""Rendering the report document (:mod:`fusegen.report.data`) to one self-contained HTML page.

jinja2 template ``templates/report.html.j2`` (package data); the module graph as DOT text laid out and drawn
in the page by the vendored Viz.js (Graphviz compiled to WebAssembly, :func:`fusegen.report.graph.viz_js`)
and the charts by plotly.js, both embedded in ``<script>`` elements (the page needs nothing but a browser:
no network, no Graphviz install); Triton source and HLO highlighted by pygments.
"""

from __future__ import annotations

import json
import math
from typing import Any

from pygments.lexer import RegexLexer, bygroups
from pygments.token import Comment, Keyword, Name, Number, Operator, Punctuation, String, Text, Whitespace


class HloLexer(RegexLexer):
    """HLO text (``xla/hlo/ir/hlo_instruction.cc``'s printer): names, shapes, opcodes, attributes."""

    name = "HLO"
    aliases = ["hlo"]
    filenames = ["*.hlo"]
    tokens = {
        "root": [
            (r"\s+", Whitespace),
            (r"//.*?$", Comment.Single),
            (r"/\*.*?\*/", Comment.Multiline),
            (r"\b(ROOT|ENTRY|HloModule)\b", Keyword),
            (r"%[\w.\-]+", Name.Variable),
            (r"\b(pred|s4|s8|s16|s32|s64|u4|u8|u16|u32|u64|f16|bf16|f32|f64|c64|c128|f8e\w+|token)(\[)",
             bygroups(Keyword.Type, Punctuation)),
            (r"([a-z][\w\-]*)(\()", bygroups(Name.Function, Punctuation)),
            (r"([a-z_][\w]*)(=)", bygroups(Name.Attribute, Operator)),
            (r'"(\\.|[^"\\])*"', String),
            (r"-?\d+(\.\d+)?(e[+-]?\d+)?", Number),
            (r"[\[\]{}(),:]", Punctuation),
            (r"[\w.\-]+", Text),
            (r".", Text),
        ]
    }


def _highlighter():
    from markupsafe import Markup
    from pygments import highlight
    from pygments.formatters import HtmlFormatter
    from pygments.lexers import PythonLexer

    fmt = HtmlFormatter(cssclass="hl", nowrap=False)
    lexers = {"python": PythonLexer(), "hlo": HloLexer()}

    def hl(source: str, language: str = "python") -> Markup:
        return Markup(highlight(source, lexers[language], fmt))

    return hl, HtmlFormatter(style="friendly").get_style_defs(".hl")


def fmt_us(x: Any) -> str:
    """µs with three significant digits (``-`` for none)."""
    if x is None:
        return "-"
    x = float(x)
    if x >= 1e6:
        return f"{x / 1e6:.3g} s"
    if x >= 1e3:
        return f"{x / 1e3:.3g} ms"
    return f"{x:.3g} µs"


def fmt_bytes(x: Any) -> str:
    """Bytes as ``"N B"``, KiB, MiB or GiB (3 significant digits); ``"-"`` for ``None``."""
    if x is None:
        return "-"
    x = int(x)
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if x >= size:
            return f"{x / size:.3g} {unit}"
    return f"{x} B"


def fmt_err(x: Any) -> str:
    """An error figure with 3 significant digits (``"0"``, ``"nan"``, ``"inf"`` as such); ``"-"`` for ``None``."""
    if x is None:
        return "-"
    x = float(x)
    if x == 0:
        return "0"
    if math.isnan(x) or math.isinf(x):
        return str(x)
    return f"{x:.3g}"


def fmt_s(x: Any) -> str:
    """Seconds as ``"N ms"`` below 1 s, else ``"N.NN s"``; ``"-"`` for ``None``."""
    if x is None:
        return "-"
    x = float(x)
    return f"{x * 1e3:.0f} ms" if x < 1 else f"{x:.2f} s"


def environment():
    """The jinja2 environment (autoescaping on) with the report's filters and globals."""
    import jinja2

    from fusegen.report.graph import KIND_COLORS, card_id, edge_bytes_range, kind_color, viz_js

    env = jinja2.Environment(loader=jinja2.PackageLoader("fusegen.report", "templates"),
                             autoescape=jinja2.select_autoescape(default=True, default_for_string=True),
                             trim_blocks=True, lstrip_blocks=True, undefined=jinja2.StrictUndefined)
    hl, css = _highlighter()
    env.filters.update(highlight=hl, us=fmt_us, bytes=fmt_bytes, err=fmt_err, secs=fmt_s, card_id=card_id,
                       kind_color=kind_color)
    env.globals.update(pygments_css=css, kind_colors=KIND_COLORS, viz=viz_js()[1], edge_bytes_range=edge_bytes_range)
    return env


def render_html(doc: dict, *, plotly_js: str | None = None, viz_js: str | None = None) -> str:
    """The HTML page of report document ``doc``.

    ``plotly_js`` defaults to the plotly.js bundled with the ``plotly`` package (embedded, ~4.8 MB);
    ``viz_js`` to the vendored Viz.js (embedded, ~1.3 MB), which lays each module's graph out when the page
    opens. Each module's graph goes in as ``{"dot": DOT text, "search": {node html id: text}}`` JSON.

    Raises:
        fusegen.report.graph.VendorError: the vendored Viz.js is missing or damaged.
    """
    from fusegen.report import graph as graph_mod
    from fusegen.report.charts import kinds_figure, tuning_figure

    if plotly_js is None:
        from plotly.offline import get_plotlyjs

        plotly_js = get_plotlyjs()
    viz = viz_js if viz_js is not None else graph_mod.viz_js()[0]
    several = len(doc["modules"]) > 1
    graphs = []
    for k, m in enumerate(doc["modules"]):
        prefix = f"m{k}-" if several else ""  # as module_entry's card_prefix
        graphs.append({"dot": graph_mod.render_dot(m["graph"], m["name"], prefix),
                       "search": graph_mod.search_index(m["graph"], prefix)})
    charts = {"kinds": kinds_figure(doc["summary"]),
              # no chart where nothing was measured (served from the cache, a single config, an error)
              "tuning": [tuning_figure(t) if any(c["duration_us"] is not None for c in t["candidates"]) else None
                         for t in doc["tuning"]]}
    phase_total = sum(doc["phases"].values()) or 1.0
    return environment().get_template("report.html.j2").render(
        doc=doc, graphs_json=json.dumps(graphs, separators=(",", ":")).replace("<", "\\u003c"),  # no </script, <!--
        charts=charts, plotly_js=_in_script(plotly_js), viz_js=_in_script(viz), phase_total=phase_total)


def _in_script(js: str) -> str:
    """``js`` safe inside ``<script>``: a ``</script`` in it would end the element."""
    return js.replace("</script", "<\\/script")
