"""Plotly figures of the report (JSON text for ``Plotly.newPlot``; plotly.js is embedded in the page).

* :func:`tuning_figure`: one tuned instruction, duration (µs) against scratch bytes for every candidate that
  ran, coloured by correctness cluster, WRONG_RESULTS crossed out, the ``PickBestConfig`` window
  (fastest + ``window_us``) shaded, the winner starred and the fastest ringed.
* :func:`kinds_figure`: fusions per emitter kind, stacked by the backend that runs them.
"""

from __future__ import annotations

from typing import Any

from fusegen.report.graph import HOST_COLOR, kind_color

CLUSTER_COLORS = ["#1f77b4", "#2ca02c", "#9467bd", "#ff7f0e", "#17becf", "#8c564b", "#e377c2", "#bcbd22"]
BACKEND_COLORS = {"triton": "#2a9d8f", "host": HOST_COLOR, "memcpy": "#adb5bd", "cublaslt": "#e9c46a",
                  "cudnn": "#8ab17d", "custom_fusion": "#6d597a"}
_LAYOUT = dict(template="plotly_white", font=dict(family="Helvetica, Arial, sans-serif", size=12),
               margin=dict(l=60, r=20, t=40, b=50), legend=dict(orientation="h", y=-0.25))


def point_label(config_name: str) -> str:
    """A short label of a config: ``host``, ``triton 128×128×32 w4 s3`` (block m×n×k, warps, stages)."""
    backend, _, rest = config_name.partition(":")
    kv = dict(p.split("=", 1) for p in rest.split(",") if "=" in p)
    if all(k in kv for k in ("block_m", "block_n", "block_k")):
        extra = "".join(f" {c}{kv[k]}" for c, k in (("w", "num_warps"), ("s", "num_stages"), ("sk", "split_k"))
                        if k in kv and not (k == "split_k" and kv[k] == "1"))
        return f"{backend} {kv['block_m']}×{kv['block_n']}×{kv['block_k']}{extra}"
    return backend if len(config_name) > 24 else config_name


def tuning_figure(entry: dict) -> str:
    """The figure JSON (``{"data", "layout"}``) of one :mod:`fusegen.report.tuning` entry."""
    import plotly.graph_objects as go

    ran = [c for c in entry["candidates"] if c["duration_us"] is not None]
    fig = go.Figure()
    labels = len(ran) <= 12
    # neighbours along the duration axis alternate above and below, so their labels do not overlap
    positions = {c["name"]: ("top center", "bottom center")[k % 2]
                 for k, c in enumerate(sorted(ran, key=lambda c: (c["duration_us"], c["scratch_bytes"])))}
    groups: dict[Any, list[dict]] = {}
    for c in ran:
        key = "WRONG_RESULTS" if c["failure"] == "WRONG_RESULTS" else ("failed" if c["failure"] else c["cluster"])
        groups.setdefault(key, []).append(c)
    for key, cs in sorted(groups.items(), key=lambda kv: (isinstance(kv[0], str), str(kv[0]))):
        if key == "WRONG_RESULTS":
            name, marker = "WRONG RESULTS", dict(symbol="x-thin-open", size=12, color=HOST_COLOR, line=dict(width=2))
        elif key == "failed":
            name, marker = "failed", dict(symbol="x", size=10, color="#6c757d")
        else:
            col = CLUSTER_COLORS[int(key) % len(CLUSTER_COLORS)] if int(key) >= 0 else "#6c757d"
            name = f"cluster {key}" if int(key) >= 0 else "not clustered"
            marker = dict(symbol="circle", size=10, color=col, line=dict(width=1, color="#ffffff"))
        fig.add_trace(go.Scatter(
            x=[c["duration_us"] for c in cs], y=[c["scratch_bytes"] for c in cs], name=name,
            mode="markers+text" if labels else "markers", marker=marker, text=[point_label(c["name"]) for c in cs],
            textposition=[positions.get(c["name"], "top center") for c in cs], textfont=dict(size=10, color="#495057"),
            customdata=[c["name"] for c in cs],
            hovertemplate="%{customdata}<br>%{x:.3f} µs, %{y} scratch bytes<extra>" + name + "</extra>"))
    for flag, label, marker in (("winner", "winner", dict(symbol="star", size=20, color="#ffd60a",
                                                                     line=dict(width=1.5, color="#000000"))),
                                ("fastest", "fastest", dict(symbol="circle-open", size=24, color="#000000",
                                                            line=dict(width=2)))):
        cs = [c for c in ran if c[flag]]
        if cs:
            fig.add_trace(go.Scatter(x=[c["duration_us"] for c in cs], y=[c["scratch_bytes"] for c in cs],
                                     mode="markers", name=label, marker=marker, text=[c["name"] for c in cs],
                                     hovertemplate=f"{label}: " + "%{text}<extra></extra>"))
    durations = [c["duration_us"] for c in ran if not c["failure"]]
    log_x = bool(durations) and min(durations) > 0 and max(durations) / min(durations) > 20
    if durations:
        lo = min(durations)
        fig.add_vrect(x0=lo, x1=lo + entry["window_us"], fillcolor="#ffd60a", opacity=0.25, line_width=0,
                      layer="below")
        fig.add_annotation(x=_axis_x(lo, log_x), y=1.0, yref="paper", showarrow=False, xanchor="left", yanchor="bottom",
                           text=f"fastest + {entry['window_us']:g} µs window", font=dict(size=10, color="#7a6400"))
    fig.update_layout(**_LAYOUT, height=380, title=dict(text=f"%{entry['instruction']}: duration vs scratch bytes",
                                                        font=dict(size=14)))
    fig.update_xaxes(title_text="duration (µs)" + (", log scale" if log_x else ""), type="log" if log_x else "linear")
    top = max((c["scratch_bytes"] for c in ran), default=0)
    fig.update_yaxes(title_text="scratch bytes", range=[-0.15 * (top or 1), 1.25 * (top or 1)], zeroline=True)
    return _json(fig)


def _json(fig: Any) -> str:
    import plotly.io as pio

    # "</" would end the <script> the figure is embedded in
    return pio.to_json(fig, validate=False, pretty=False).replace("</", "<\\/")


def _axis_x(x: float, log_x: bool) -> float:
    import math

    return math.log10(x) if log_x else x  # plotly annotations on a log axis take log10 positions


def kinds_figure(summary: dict) -> str:
    """Fusions per kind, one stacked bar segment per backend."""
    import plotly.graph_objects as go

    table = summary["by_kind_backend"]
    kinds = sorted(table, key=lambda k: -sum(table[k].values()))
    backends = sorted({b for row in table.values() for b in row})
    fig = go.Figure()
    for b in backends:
        # bars take their kind's colour (as in the graph); the host's share is red
        host = b == "host"
        fig.add_trace(go.Bar(y=kinds, x=[table[k].get(b, 0) for k in kinds], name=f"on {b}", orientation="h",
                             marker=dict(color=[HOST_COLOR if host else kind_color(k) for k in kinds],
                                         line=dict(color="#555555", width=1)),
                             hovertemplate="%{y} on " + b + ": %{x}<extra></extra>"))
    fig.update_layout(**{**_LAYOUT, "margin": dict(l=110, r=20, t=40, b=40)}, barmode="stack",
                      showlegend=len(backends) > 1,
                      height=max(180, 60 + 32 * len(kinds)), title=dict(text="fusions by kind and backend", font=dict(size=14)))
    fig.update_yaxes(autorange="reversed")
    fig.update_xaxes(title_text="fusions")
    return _json(fig)
