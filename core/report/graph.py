"""The module as a picture: fusions and library calls as a Graphviz graph (DOT text), laid out in the page.

Like XLA's HLO graph dumps (``xla/service/hlo_graph_dumper.cc``) but one node per fusion rather than per
instruction: fusions are coloured by emitter kind, host fallbacks drawn red and dashed, ``while`` /
``conditional`` / ``call`` bodies drawn as clusters, every node links to its card (``#card-NAME``) and
every edge is as wide and dark as the bytes it carries. ``bitcast``, ``get-tuple-element``, ``tuple`` and
constants are not drawn; edges pass through them. Entry parameters are drawn only when there are few of
them (:data:`MAX_DRAWN_PARAMETERS`).

Python writes the DOT text only (the ``graphviz`` package, no binary); the page lays it out with Graphviz's
``dot`` engine compiled to WebAssembly (Viz.js, vendored: ``vendor/``, :func:`viz_js`).
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import re
from importlib import resources
from typing import Any

from fusegen.hlo.ir import Instruction, Module

#: Fill colours by emitter kind (graph nodes, chart bars and card badges use the same ones).
KIND_COLORS = {
    "kLoop": "#8ecae6", "kInput": "#ffb703", "kReduction": "#ffb703", "kTranspose": "#cdb4db",
    "kTriton": "#95d5b2", "kCustomFusion": "#80cbc4", "kCuDnn": "#b5e48c", "kScatter": "#f4a261",
    "kConcatenate": "#a2d2ff", "kInputSlices": "#bde0fe", "kDynamicUpdateSlice": "#e9c46a",
    "kSort": "#d4a373", "kMemcpy": "#dee2e6",
}
OTHER_KIND_COLOR = "#e0e0e0"
HOST_COLOR = "#d62828"
#: Outline of a fusion whose kernel disagreed with the reference (or stayed within budget only: drift).
STATUS_COLORS = {"mismatch": "#800f2f", "error": "#800f2f", "drift": "#e09f00"}
MAX_DRAWN_PARAMETERS = 8


def kind_color(kind: str) -> str:
    """The report's fill colour (``#rrggbb``) for an emitter kind (one colour for every other kind)."""
    return KIND_COLORS.get(kind, OTHER_KIND_COLOR)


def card_id(name: str) -> str:
    """The HTML id of a fusion's card (also the graph node's link target); ``name`` may carry a module prefix."""
    return "card-" + re.sub(r"[^A-Za-z0-9_.-]", "_", name)


def graph_data(module: Module, fusions: dict[str, dict], calls: dict[str, dict]) -> dict:
    """Nodes, edges and clusters of ``module`` (JSON-able; :func:`render_dot` writes it as DOT).

    Returns ``{"nodes": [{"id", "name", "type", "label", "kind", "host", "cluster"}], "edges": [[src, dst]],
    "edge_bytes": [int], "clusters": [{"id", "label", "parent", "caller"}], "hidden_parameters": int}``.
    ``type`` is ``fusion``, ``library`` (custom-call), ``op`` (another instruction an execution backend
    runs), ``control``, ``parameter`` or ``root``. ``edge_bytes[i]`` is what ``edges[i]`` carries: the byte
    size of the producer's values the consumer reads (one element of a tuple through
    ``get-tuple-element``; the sum where it reads several).
    """
    from fusegen.passes.hlo_edit import shape_bytes
    from fusegen.report.data import CONTROL_OPCODES, TRIVIAL_OPCODES, control_computations

    nodes: list[dict] = []
    edges: dict[tuple[str, str], int] = {}  # insertion-ordered: (producer, consumer) -> bytes
    clusters: list[dict] = []
    hidden = 0
    cluster_of: dict[int, str | None] = {}
    comps = control_computations(module)
    index = {id(comp): k for k, (comp, _, _) in enumerate(comps)}

    def node_id(inst: Instruction) -> str:  # names repeat across computations in hand-written HLO
        return f"n{index.get(id(inst.parent), 0)}_{inst.name}"

    for comp, caller, role in comps:
        if caller is None:
            cluster_of[id(comp)] = None
            continue
        cid = f"cluster_{len(clusters)}"
        cluster_of[id(comp)] = cid
        clusters.append({"id": cid, "label": f"{caller.opcode} %{caller.name}: {role} %{comp.name}",
                         "parent": cluster_of.get(id(caller.parent)), "caller": node_id(caller)})
    # instruction -> the drawn producers that stand for it, with the bytes of it each one gives
    sources: dict[int, dict[str, int]] = {}

    def passed_through(inst: Instruction) -> dict[str, int]:
        if inst.opcode == "get-tuple-element":
            (tup,) = inst.operands
            if tup.opcode == "tuple":  # exactly that element's producers
                return dict(sources.get(id(tup.operands[inst.attrs["index"]]), {}))
            return {p: shape_bytes(inst.shape) for p in sources.get(id(tup), {})}
        out: dict[str, int] = {}
        for o in inst.operands:  # tuple: every element; bitcast: the same bytes
            for p, b in sources.get(id(o), {}).items():
                out[p] = out.get(p, 0) + b
        return out

    def connect(inst: Instruction, nid: str) -> None:
        for o in inst.operands:
            for p, b in sources.get(id(o), {}).items():
                edges[(p, nid)] = edges.get((p, nid), 0) + b

    for comp, caller, role in comps:
        cl = cluster_of[id(comp)]
        params = [i for i in comp.instructions if i.opcode == "parameter"]
        draw_params = caller is not None or len(params) <= MAX_DRAWN_PARAMETERS
        for inst in comp.instructions:
            nid = node_id(inst)
            if inst.opcode == "parameter" and draw_params:
                nodes.append({"id": nid, "name": inst.name, "type": "parameter", "label": inst.name, "kind": "",
                              "host": False, "cluster": cl})
                sources[id(inst)] = {nid: shape_bytes(inst.shape)}
                continue
            if inst.opcode in TRIVIAL_OPCODES:
                hidden += inst.opcode == "parameter"
                sources[id(inst)] = passed_through(inst) if inst.opcode not in ("parameter", "constant") else {}
                continue
            if inst.opcode == "fusion":
                f = fusions.get(inst.name, {})
                kind = f.get("kind", "")
                sub = f.get("emitter", "-") if not f.get("host") else "host"
                node = {"id": nid, "name": inst.name, "type": "fusion", "label": f"{kind} · {sub}", "kind": kind,
                        "host": bool(f.get("host")), "cluster": cl, "card": f.get("card", card_id(inst.name)),
                        "status": f.get("status", "pending"),
                        "tooltip": "; ".join(x for x in (f"%{inst.name}: {kind} · {sub}", f.get("launch", "-"),
                                                         f.get("status", "pending"), f.get("reason", "")) if x and x != "-")}
            elif inst.opcode in CONTROL_OPCODES:
                node = {"id": nid, "name": inst.name, "type": "control", "label": inst.opcode, "kind": "",
                        "host": False, "cluster": cl}
            else:
                c = calls.get(inst.name, {})
                what = c.get("target") or inst.opcode
                node = {"id": nid, "name": inst.name, "type": "library" if inst.opcode == "custom-call" else "op",
                        "label": f"{what} · {c.get('backend', '?')}",
                        "kind": "", "host": c.get("backend") == "host", "cluster": cl}
            nodes.append(node)
            sources[id(inst)] = {nid: shape_bytes(inst.shape)}
            connect(inst, nid)
        if caller is None:  # the entry's result
            nodes.append({"id": "n_ROOT", "name": "ROOT", "type": "root", "label": "module result", "kind": "",
                          "host": False, "cluster": None})
            for p, b in sources.get(id(comp.root), {}).items():
                edges[(p, "n_ROOT")] = edges.get((p, "n_ROOT"), 0) + b
    return {"nodes": nodes, "edges": [[a, b] for a, b in edges], "edge_bytes": list(edges.values()),
            "clusters": clusters, "hidden_parameters": hidden}


def dom_id(node: dict, prefix: str = "") -> str:
    """The HTML id of a graph node's drawing (``gn-`` + its card id for a fusion); ``prefix`` as the module's
    card prefix keeps several modules' nodes apart on one page."""
    if node["type"] == "fusion":
        return "gn-" + node.get("card", card_id(prefix + node["name"]))
    return "gn-" + re.sub(r"[^A-Za-z0-9_.-]", "_", prefix + node["id"])


def edge_style(nbytes: int | None, lo: int, hi: int) -> dict[str, str]:
    """Pen width (points, 0.7 to 5) and grey of an edge carrying ``nbytes``, on a log scale from ``lo`` (the
    module's smallest edge: thinnest, lightest) to ``hi`` (its largest). ``None`` or 0 bytes: thinnest."""
    if not nbytes or hi <= lo:
        t = 0.0 if not nbytes else 0.5
    else:
        t = min(1.0, max(0.0, math.log2(nbytes / lo) / math.log2(hi / lo)))
    grey = round(0xb0 - t * (0xb0 - 0x38))
    return {"penwidth": f"{0.7 + 4.3 * t:.2f}", "color": f"#{grey:02x}{grey:02x}{grey + 6:02x}"}


def edge_bytes_range(graph: dict) -> tuple[int, int] | None:
    """The smallest and largest bytes an edge of ``graph`` carries (``None`` without sized edges)."""
    sizes = [b for b in graph.get("edge_bytes") or () if b]
    return (min(sizes), max(sizes)) if sizes else None


def to_dot(graph: dict, name: str = "module", prefix: str = "") -> Any:
    """A ``graphviz.Digraph`` of :func:`graph_data`'s result (DOT text only: no Graphviz binary is run).

    ``prefix``: the module's card prefix (:func:`dom_id`), also the prefix of the ids Graphviz makes up.
    """
    import graphviz

    g = graphviz.Digraph(name, graph_attr={"rankdir": "TB", "nodesep": "0.25", "ranksep": "0.35", "bgcolor": "transparent",
                                           "fontname": "Helvetica", "fontsize": "11", "compound": "true",
                                           "id": f"{prefix}g"},
                         node_attr={"fontname": "Helvetica", "fontsize": "10", "style": "filled,rounded",
                                    "shape": "box", "penwidth": "1", "color": "#555555", "margin": "0.1,0.03"},
                         edge_attr={"color": "#9aa0a6", "arrowsize": "0.6"})
    subgraphs: dict[str | None, Any] = {None: g}
    children: dict[str | None, list[dict]] = {}
    for c in graph["clusters"]:
        children.setdefault(c["parent"], []).append(c)
    for c in graph["clusters"]:
        subgraphs[c["id"]] = graphviz.Digraph(c["id"], graph_attr={
            "label": c["label"], "style": "rounded,dashed", "color": "#6c757d", "fontsize": "10", "labeljust": "l"})
    names = {n["id"]: n["name"] for n in graph["nodes"]}
    for n in graph["nodes"]:
        sg = subgraphs[n["cluster"]]
        if n["type"] == "fusion":
            label = f'<<b>{_esc(n["name"])}</b><br/><font point-size="9">{_esc(n["label"])}</font>>'
            attrs = {"fillcolor": kind_color(n["kind"]), "href": "#" + n.get("card", card_id(n["name"])),
                     "tooltip": n.get("tooltip", f'{n["name"]}: {n["label"]}'), "target": "_self",
                     "class": "fusion"}
            if n["host"]:
                attrs.update(color=HOST_COLOR, penwidth="2.5", style="filled,rounded,dashed", fontcolor=HOST_COLOR)
            if n.get("status") in STATUS_COLORS:  # where the errors are: a thick outline
                attrs.update(color=STATUS_COLORS[n["status"]], penwidth="4")
        elif n["type"] in ("library", "op"):
            label = f'<<b>{_esc(n["name"])}</b><br/><font point-size="9">{_esc(n["label"])}</font>>'
            attrs = {"fillcolor": "#fff3bf" if n["type"] == "library" else "#f8f9fa",
                     "shape": "component" if n["type"] == "library" else "box", "style": "filled", "tooltip": n["label"]}
            if n["host"] and n["type"] == "library":  # a library call the host runs instead of the GPU library
                attrs.update(color=HOST_COLOR, penwidth="2", style="filled,dashed")
        elif n["type"] == "control":
            label = f'<<b>{_esc(n["label"])}</b><br/><font point-size="9">{_esc(n["name"])}</font>>'
            attrs = {"fillcolor": "#ffffff", "shape": "hexagon", "style": "filled"}
        elif n["type"] == "parameter":
            label = n["name"]
            attrs = {"fillcolor": "#f1f3f5", "shape": "ellipse", "style": "filled", "fontsize": "9", "color": "#adb5bd"}
        else:
            label = n["label"]
            attrs = {"fillcolor": "#343a40", "fontcolor": "#ffffff", "shape": "oval", "style": "filled"}
        sg.node(n["id"], label=label, id=dom_id(n, prefix), **attrs)
    for c in graph["clusters"]:  # an edge from the control instruction into its body
        first = next((n["id"] for n in graph["nodes"] if n["cluster"] == c["id"]), None)
        if first is not None:
            g.edge(c["caller"], first, lhead=c["id"], style="dashed", color="#6c757d", arrowhead="empty")

    def attach(parent: str | None) -> None:
        for c in children.get(parent, []):
            attach(c["id"])
            subgraphs[parent].subgraph(subgraphs[c["id"]])

    attach(None)
    nbytes = graph.get("edge_bytes") or [None] * len(graph["edges"])  # documents written before edge_bytes
    lo, hi = edge_bytes_range(graph) or (0, 0)
    for (a, b), size in zip(graph["edges"], nbytes):
        tip = f"%{names.get(a, a)} -> %{names.get(b, b)}" + (f": {_fmt_bytes(size)}" if size is not None else "")
        g.edge(a, b, tooltip=tip, **edge_style(size, lo, hi))
    return g


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def _fmt_bytes(n: int) -> str:
    from fusegen.report.render import fmt_bytes

    return fmt_bytes(n)


def render_dot(graph: dict, name: str = "module", prefix: str = "") -> str:
    """The graph as DOT text, for the page's Graphviz (:func:`viz_js`) to lay out and draw as SVG."""
    return to_dot(graph, name, prefix).source


def search_index(graph: dict, prefix: str = "") -> dict[str, str]:
    """What the page's graph search matches: ``{dom_id: "name kind emitter ..."}`` (lower case) per node."""
    return {dom_id(n, prefix): f'{n["name"]} {n["label"]} {n.get("kind", "")}'.lower()
            for n in graph["nodes"] if n["type"] != "root"}


class VendorError(RuntimeError):
    """The vendored Viz.js (``fusegen/report/vendor/``) is missing or damaged."""


@functools.lru_cache(maxsize=1)
def viz_js() -> tuple[str, dict]:
    """The vendored Viz.js (``vendor/viz-global.js``: Graphviz compiled to WebAssembly, defines ``Viz``) and
    its ``viz-js.json`` (npm version, Graphviz version, sha256).

    Raises:
        VendorError: the file is missing or its sha256 differs from ``viz-js.json`` (a broken install or an
            edit by hand; ``scripts/update-viz-js`` vendors a version).
    """
    vendor = resources.files("fusegen.report") / "vendor"
    try:
        meta = json.loads((vendor / "viz-js.json").read_text(encoding="utf-8"))
        data = (vendor / "viz-global.js").read_bytes()
    except (OSError, ValueError) as e:
        raise VendorError(f"fusegen.report/vendor: cannot read the vendored Viz.js ({e}); reinstall fusegen") from e
    if hashlib.sha256(data).hexdigest() != meta["sha256"]:
        raise VendorError("fusegen.report/vendor/viz-global.js: sha256 differs from viz-js.json "
                           "(re-vendor with scripts/update-viz-js)")
    return data.decode("utf-8"), meta
