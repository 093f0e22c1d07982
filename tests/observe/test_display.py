"""Notebook displays (display.py): Graph, Plan, report and Profile render as HTML/SVG."""

import shutil
import sys
import xml.etree.ElementTree as ET

import numpy as np
import pytest

import graphopt as go
from graphopt.observe import display

needs_dot = pytest.mark.skipif(shutil.which("dot") is None,
                               reason="Graphviz's dot program is not installed")


def _graph():
    g = go.Graph("block")
    x = g.input("x", (8, 16), "float32")
    w = g.input("w", (16, 4), "float32")
    g.output(go.tanh(go.einsum("ij,jk->ik", x, w)) * 2.0 + 1.0)
    return g


def _svg_root(text: str):
    return ET.fromstring(text)   # well-formed XML, or this raises


@needs_dot
def test_graph_and_plan_render_as_svg_with_fused_clusters():
    g = _graph()
    page = g._repr_html_()
    svg = page[page.index("<svg"):page.rindex("</svg>") + 6]
    root = _svg_root(svg)
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "einsum ij,jk->ik" in texts and "tanh" in texts and "input x" in texts
    plan = go.compile(g, backend="numba", cache=False)
    html = plan._repr_html_()
    assert html.startswith("<p><code>Plan(") and "graphopt report: &#x27;block&#x27;" in html
    assert "<details><summary>optimized graph</summary>" in html
    fused = [n for n, d in plan.graph.nodes(data=True) if d["op"] == "fused"]
    assert fused and all(f"fused {n} (" in html for n in fused)     # the cluster titles
    assert "<svg" in plan.report._repr_html_()


def test_without_dot_a_node_table_says_how_to_draw(monkeypatch):
    monkeypatch.setattr(display.shutil, "which", lambda name: None)
    g = _graph()
    page = g._repr_html_()
    assert "<svg" not in page and "install Graphviz&#x27;s dot program" in page
    G = g.to_ir()
    assert page.count("<tr>") == G.number_of_nodes() + 1    # a header, then every node
    assert "einsum" in page and "ij,jk-&gt;ik" in page and "test_display.py:" in page
    plan = go.compile(g, backend="numpy", cache=False)
    assert "tanh" in plan._repr_html_()


def test_without_the_graphviz_package_displays_still_work(monkeypatch):
    monkeypatch.setitem(sys.modules, "graphviz", None)    # import graphviz raises ImportError
    g = _graph()
    assert "pip install &#x27;graphopt[viz]&#x27;" in g._repr_html_()
    with pytest.raises(ImportError, match=r"graphopt\[viz\]"):
        g.to_dot()


def test_a_graph_beyond_the_draw_limit_is_listed_not_drawn(monkeypatch):
    monkeypatch.setattr(display, "DRAW_LIMIT", 5)
    page = _graph()._repr_html_()
    assert "<svg" not in page and "listed, not drawn (more than 5)" in page


def test_profile_renders_a_table_and_a_timeline_svg():
    g = _graph()
    plan = go.compile(g, backend="numba", cache=False)
    x, w = np.ones((8, 16), np.float32), np.ones((16, 4), np.float32)
    prof = plan.profile(x, w, repeat=3)
    page = prof._repr_html_()
    assert page.startswith("<pre>") and "median of 3 runs" in page
    root = _svg_root(display.timeline_svg(prof))
    ns = "{http://www.w3.org/2000/svg}"
    bars = [r for r in root.iter(f"{ns}rect") if r.find(f"{ns}title") is not None]
    assert len(bars) == len(prof.events)                   # one bar per step per repeat
    tips = [r.find(f"{ns}title").text for r in bars]
    assert all(any(s.name in t for s in plan.steps) for t in tips)
    labels = [t.text for t in root.iter(f"{ns}text")]
    assert [f"repeat {r}" for r in range(3)] == [t for t in labels if t.startswith("repeat")]
    assert all(s.name in labels for s in plan.steps)       # the legend names every step
