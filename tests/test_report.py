"""The optimization report's renderings (report.py)."""

import gc

import numpy as np

import graphopt as go


def _fused_graph():
    g = go.Graph("dot")
    x = g.input("x", (8, 8), "float64")
    w = g.input("w", (8, 8), "float64")
    g.output(go.tanh(go.einsum("ij,jk->ik", x, w)) * 2.0 + x)
    return g


def test_to_dot_draws_the_optimized_graph_after_the_plan_is_gone():
    plan = go.compile(_fused_graph(), backend="numba", cache=False)
    fused = [n for n, d in plan.graph.nodes(data=True) if d["op"] == "fused"]
    assert fused, "the elementwise tail should fuse"
    report = plan.report
    x = np.ones((8, 8))
    np.testing.assert_allclose(plan(x, x), np.tanh(x @ x) * 2.0 + x)
    del plan
    gc.collect()
    dot = report.to_dot()
    assert dot.startswith('digraph "dot" {') and dot.rstrip().endswith("}")
    for n in fused:
        assert f"subgraph cluster_{n} " in dot
    assert '[label="einsum ab,bc->ac\\n(8, 8) float64"]' in dot and "tanh" in dot
    assert '"0" [label="input x\\n(8, 8) float64", style=filled' in dot
    assert report.to_dot() is dot      # drawn once
