"""The module as a picture: fusions and library calls as a graphviz graph, rendered to inline SVG.

Like XLA's HLO graph dumps (``xla/service/hlo_graph_dumper.cc``) but one node per fusion rather than per
instruction: fusions are coloured by emitter kind, host fallbacks drawn red and dashed, ``while`` /
``conditional`` / ``call`` bodies drawn as clusters, and every node links to its card (``#card-NAME``).
``bitcast``, ``get-tuple-element``, ``tuple`` and constants are not drawn; edges pass through them.
Entry parameters are drawn only when there are few of them (:data:`MAX_DRAWN_PARAMETERS`).
"""

from __future__ import annotations

import re
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
    """Nodes, edges and clusters of ``module`` (JSON-able; :func:`render_svg` draws it).

    Returns ``{"nodes": [{"id", "name", "type", "label", "kind", "host", "cluster"}], "edges": [[src, dst]],
    "clusters": [{"id", "label", "parent"}], "hidden_parameters": int}``. ``type`` is ``fusion``,
    ``library`` (custom-call), ``op`` (another instruction an execution backend runs), ``control``,
    ``parameter`` or ``root``.
    """
    from fusegen.report.data import CONTROL_OPCODES, TRIVIAL_OPCODES, control_computations

    nodes: list[dict] = []
    edges: list[list[str]] = []
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
    node_ids: dict[int, list[str]] = {}  # instruction -> drawn producers that stand for it
    for comp, caller, role in comps:
        cl = cluster_of[id(comp)]
        params = [i for i in comp.instructions if i.opcode == "parameter"]
        draw_params = caller is not None or len(params) <= MAX_DRAWN_PARAMETERS
        for inst in comp.instructions:
            nid = node_id(inst)
            if inst.opcode == "parameter" and draw_params:
                nodes.append({"id": nid, "name": inst.name, "type": "parameter", "label": inst.name, "kind": "",
                              "host": False, "cluster": cl})
                node_ids[id(inst)] = [nid]
                continue
            if inst.opcode in TRIVIAL_OPCODES:
                hidden += inst.opcode == "parameter"
                node_ids[id(inst)] = sorted({p for o in inst.operands for p in node_ids.get(id(o), [])})
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
            node_ids[id(inst)] = [nid]
            for o in inst.operands:
                for p in node_ids.get(id(o), []):
                    if [p, nid] not in edges:
                        edges.append([p, nid])
        if caller is None:  # the entry's result
            nodes.append({"id": "n_ROOT", "name": "ROOT", "type": "root", "label": "module result", "kind": "",
                          "host": False, "cluster": None})
            for p in node_ids.get(id(comp.root), []):
                edges.append([p, "n_ROOT"])
    return {"nodes": nodes, "edges": edges, "clusters": clusters, "hidden_parameters": hidden}


def to_dot(graph: dict, name: str = "module") -> Any:
    """A ``graphviz.Digraph`` of :func:`graph_data`'s result."""
    import graphviz

    g = graphviz.Digraph(name, graph_attr={"rankdir": "TB", "nodesep": "0.25", "ranksep": "0.35", "bgcolor": "transparent",
                                           "fontname": "Helvetica", "fontsize": "11", "compound": "true"},
                         node_attr={"fontname": "Helvetica", "fontsize": "10", "style": "filled,rounded",
                                    "shape": "box", "penwidth": "1", "color": "#555555", "margin": "0.08,0.03"},
                         edge_attr={"color": "#9aa0a6", "arrowsize": "0.6"})
    subgraphs: dict[str | None, Any] = {None: g}
    children: dict[str | None, list[dict]] = {}
    for c in graph["clusters"]:
        children.setdefault(c["parent"], []).append(c)
    for c in graph["clusters"]:
        subgraphs[c["id"]] = graphviz.Digraph(c["id"], graph_attr={
            "label": c["label"], "style": "rounded,dashed", "color": "#6c757d", "fontsize": "10", "labeljust": "l"})
    for n in graph["nodes"]:
        sg = subgraphs[n["cluster"]]
        if n["type"] == "fusion":
            label = f'<<b>{_esc(n["name"])}</b><br/><font point-size="9">{_esc(n["label"])}</font>>'
            attrs = {"fillcolor": kind_color(n["kind"]), "href": "#" + n.get("card", card_id(n["name"])),
                     "tooltip": n.get("tooltip", f'{n["name"]}: {n["label"]}'), "target": "_self"}
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
        sg.node(n["id"], label=label, **attrs)
    for c in graph["clusters"]:  # an edge from the control instruction into its body
        first = next((n["id"] for n in graph["nodes"] if n["cluster"] == c["id"]), None)
        if first is not None:
            g.edge(c["caller"], first, lhead=c["id"], style="dashed", color="#6c757d", arrowhead="empty")

    def attach(parent: str | None) -> None:
        for c in children.get(parent, []):
            attach(c["id"])
            subgraphs[parent].subgraph(subgraphs[c["id"]])

    attach(None)
    for a, b in graph["edges"]:
        g.edge(a, b)
    return g


def _esc(s: str) -> str:
    return s.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def render_svg(graph: dict, name: str = "module") -> str:
    """The graph as an ``<svg>`` element (no XML prolog) for inlining in HTML.

    Raises:
        graphviz.ExecutableNotFound: the ``dot`` binary (Debian package ``graphviz``) is not installed.
    """
    svg = to_dot(graph, name).pipe(format="svg", encoding="utf-8", quiet=True)
    start = svg.find("<svg")
    return svg[start:] if start >= 0 else svg
