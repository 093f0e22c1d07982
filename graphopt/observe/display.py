"""Notebook displays: graphs drawn with the ``graphviz`` package, reports and profiles as HTML.

``ir_digraph(G)`` is the one place an IR becomes a drawing (inputs and constants grey,
outputs doubly outlined, each fused kernel a blue cluster of its members, the user's line
as each node's tooltip); ``to_dot`` is its DOT source. Drawing needs the ``viz`` extra
(``pip install graphopt[viz]``, the graphviz package) and, for SVG, Graphviz's ``dot``
program. Where either is missing, the HTML displays fall back to a node table and say what
to install; they never fail. ``timeline_svg`` draws a profile's steps as bars itself (no
layout is needed for a timeline).
"""

from __future__ import annotations

import html
import shutil

from .. import ir
from ..analysis.fused import member_ops
from .report_text import where

DRAW_LIMIT = 400  # nodes; a larger graph's layout takes seconds, so it is listed, not drawn


def _what(d) -> str:
    """A node's own words: an einsum's equation, else its name (inputs), else nothing."""
    return d["attrs"].get("equation", "") if d["op"] == "einsum" else d.get("name", "")


def _label(G, n) -> str:
    d = G.nodes[n]
    # "\\n" is DOT's own line break (a raw newline in a label is not portable)
    return f"{d['op']} {_what(d)}".rstrip() + f"\\n{tuple(d['shape'])} {d['dtype']}"


def _graphviz():
    try:
        import graphviz
    except ImportError:
        raise ImportError("drawing a graph needs the graphviz package: pip install "
                          "'graphopt[viz]' (and Graphviz's dot program for SVG)") from None
    return graphviz


def ir_digraph(G):
    """A ``graphviz.Digraph`` of the IR ``G``; each ``fused`` node is a cluster of its
    members. Raises ``ImportError`` without the graphviz package."""
    gv = _graphviz()
    dg = gv.Digraph(str(G.graph.get("name", "graph")),
                    graph_attr={"rankdir": "TB"}, node_attr={"shape": "box", "fontsize": "10"})
    outs = set(G.graph["outputs"])
    for n in ir.topo_order(G):
        d = G.nodes[n]
        tip = where(d.get("src")) or None
        if d["op"] == "fused":
            _draw_fused(dg, G, n, n in outs)
            continue
        style = {"style": "filled", "fillcolor": "lightgrey"} \
            if d["op"] in ("input", "const") else {}
        if n in outs:
            style["peripheries"] = "2"
        dg.node(str(n), _label(G, n), tooltip=tip, **style)
    for u, v, a in G.edges(data="arg"):
        if G.nodes[v]["op"] != "fused":   # a fused node's operands go to its members
            dg.edge(str(u), str(v), label=str(a), fontsize="8")
    return dg


def _draw_fused(dg, G, n, is_output: bool) -> None:
    """Fused node ``n`` as a cluster: its members, its operands' edges into the members
    that read them, and a point for its value (the edges to its users leave from there)."""
    d = G.nodes[n]
    sub = d["attrs"]["graph"]
    outside = dict(zip(sub.graph["inputs"], ir.operands(G, n)))
    with dg.subgraph(name=f"cluster_{n}") as c:
        c.attr(label=f"fused {n} ({d['attrs'].get('pattern', '')})", style="rounded",
               color="blue")
        for m in ir.topo_order(sub):
            if sub.nodes[m]["op"] != "input":
                c.node(f"{n}.{m}", _label(sub, m), tooltip=where(sub.nodes[m].get("src")) or None)
        c.node(str(n), f"out {tuple(d['shape'])}", shape="point",
               peripheries="2" if is_output else None)
    for u, v in sub.edges():
        src = str(outside[u]) if u in outside else f"{n}.{u}"
        dg.edge(src, f"{n}.{v}")
    dg.edge(f"{n}.{sub.graph['outputs'][0]}", str(n))


def to_dot(G) -> str:
    """Graphviz DOT source of the IR ``G`` (see ``ir_digraph``)."""
    return ir_digraph(G).source


def graph_svg(G) -> str | None:
    """``G`` drawn as SVG text, or None where the graphviz package or ``dot`` is missing or
    the graph has more than ``DRAW_LIMIT`` nodes."""
    if G.number_of_nodes() > DRAW_LIMIT or shutil.which("dot") is None:
        return None
    try:
        svg = ir_digraph(G).pipe(format="svg", encoding="utf-8")
    except ImportError:
        return None
    return svg[svg.find("<svg"):]   # no XML prolog or DOCTYPE inside an HTML page


def _why_not_drawn(G) -> str:
    if G.number_of_nodes() > DRAW_LIMIT:
        return (f"{G.number_of_nodes()} nodes: listed, not drawn (more than {DRAW_LIMIT}); "
                "to_dot() gives the whole drawing")
    try:
        _graphviz()
    except ImportError:
        return "pip install 'graphopt[viz]' to draw it"
    return "install Graphviz's dot program (apt install graphviz, brew install graphviz) to draw it"


def node_table_html(G) -> str:
    """The IR as an HTML table: node, op, equation or name, shape, dtype, operands, line."""
    rows = []
    for n in ir.topo_order(G):
        d = G.nodes[n]
        what = _what(d)
        if d["op"] == "fused":
            what = " ".join(member_ops(G, n))
        cells = [n, d["op"], what, tuple(d["shape"]), d["dtype"],
                 ", ".join(map(str, ir.operands(G, n))), where(d.get("src"))]
        rows.append("<tr>" + "".join(f"<td>{html.escape(str(c))}</td>" for c in cells) + "</tr>")
    head = "".join(f"<th>{h}</th>" for h in
                   ("node", "op", "equation / name / members", "shape", "dtype", "operands",
                    "line"))
    return f"<table><tr>{head}</tr>{''.join(rows)}</table>"


def graph_html(G, title: str) -> str:
    """``G`` for a notebook: its SVG drawing, else its node table and how to draw it."""
    svg = graph_svg(G)
    body = svg if svg is not None else \
        f"<p><i>{html.escape(_why_not_drawn(G))}</i></p>{node_table_html(G)}"
    return f"<div><b>{html.escape(title)}</b>{body}</div>"


def report_html(report) -> str:
    """The optimization report for a notebook: the text report, then the optimized graph
    (fused kernels as clusters) behind a disclosure triangle."""
    text = f"<pre>{html.escape(str(report))}</pre>"
    if report._graph is None:
        return text
    return (text + "<details><summary>optimized graph</summary>"
            + graph_html(report._graph, f"{report.name}: after the passes") + "</details>")


# ------------------------------------------------------------------------------- timeline

_COLORS = ("#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1",
           "#ff9da7", "#9c755f", "#bab0ac")


def timeline_svg(profile, width: int = 800, row: int = 18) -> str:
    """The profile's events as SVG: one row per repeat, one bar per step from the repeat's
    own start, a colour per step, each bar's tooltip its name, µs, implementation and
    shape; then a legend."""
    starts: dict[int, int] = {}
    for e in profile.events:
        starts.setdefault(e.repeat, e.start_ns)
    span = max((e.end_ns - starts[e.repeat] for e in profile.events), default=1) or 1
    names = {e.step: e.name for e in profile.events}
    left, scale = 70, (width - 80) / span
    parts = []
    for i, r in enumerate(sorted(starts)):
        y = 20 + i * row
        parts.append(f'<text x="4" y="{y + row - 6}" font-size="11">repeat {r}</text>')
    rows = {r: i for i, r in enumerate(sorted(starts))}
    for e in profile.events:
        x = left + (e.start_ns - starts[e.repeat]) * scale
        w = max(e.duration_ns * scale, 0.5)
        tip = html.escape(f"{e.name}: {e.duration_ns / 1e3:.1f} us, {e.impl}, {e.shape} "
                          f"{e.dtype}")
        parts.append(f'<rect x="{x:.1f}" y="{20 + rows[e.repeat] * row + 2}" width="{w:.1f}" '
                     f'height="{row - 4}" fill="{_COLORS[e.step % len(_COLORS)]}">'
                     f"<title>{tip}</title></rect>")
    y = 20 + len(starts) * row + 14
    parts.append(f'<text x="{left}" y="{y}" font-size="11">{span / 1e3:.1f} us from the start '
                 "of each repeat</text>")
    for k, (step, name) in enumerate(sorted(names.items())):
        ly = y + 16 * (k + 1)
        parts.append(f'<rect x="{left}" y="{ly - 10}" width="10" height="10" '
                     f'fill="{_COLORS[step % len(_COLORS)]}"/><text x="{left + 14}" y="{ly}" '
                     f'font-size="11">{html.escape(name)}</text>')
    height = y + 16 * (len(names) + 1)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}">'
            + "".join(parts) + "</svg>")


def profile_html(profile) -> str:
    """A profile for a notebook: the per-step table, then the timeline."""
    return f"<pre>{html.escape(profile.summary())}</pre>{timeline_svg(profile)}"
