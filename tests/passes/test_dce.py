"""Unit tests of the DCE pass."""

import networkx as nx
import numpy as np

import graphopt as go
from graphopt import ir
from graphopt.passes.dce import dce
from graphopt.testing import checked_run


def run(g):
    G, res = checked_run(dce, g)
    H = res.graph
    outs = set(H.graph["outputs"])
    for n, d in H.nodes(data=True):
        if d["op"] != "input":
            assert n in outs or nx.descendants(H, n) & outs, f"node {n} reaches no output"
    return G, H, res.record["removed"]


def test_dead_branches_are_removed_and_reported():
    g = go.Graph()
    x, unused = g.input("x", (3,)), g.input("unused", (2,))
    dead1 = go.exp(x)
    dead2 = dead1 + g.const(np.ones(3))
    live = go.tanh(x)
    g.output(live)
    G, H, removed = run(g)
    assert [(n, op) for n, op in removed if op != "const"] == [(dead1.id, "exp"),
                                                             (dead2.id, "add")]
    assert sorted(op for _, op in removed) == ["add", "const", "exp"]
    assert unused.id in H and H.graph["inputs"] == [x.id, unused.id]
    assert sorted(H.nodes) == sorted([x.id, unused.id, live.id])


def test_nothing_dead_changes_nothing():
    g = go.Graph()
    x = g.input("x", (3,))
    g.output((go.exp(x), x, x * 2))
    G, H, removed = run(g)
    assert removed == [] and ir.structural_hash(H) == ir.structural_hash(G)


def test_shared_node_used_by_live_and_dead_users_stays():
    g = go.Graph()
    x = g.input("x", (3,))
    shared = go.sin(x)
    dead = shared * 3
    g.output(shared + 1)
    G, H, removed = run(g)
    assert shared.id in H and dead.id not in H
    assert (dead.id, "mul") in removed


def test_schedule_is_dropped_when_nodes_go():
    g = go.Graph()
    x = g.input("x", (3,))
    go.exp(x)
    g.output(go.tanh(x))
    G = g.to_ir()
    G.graph["schedule"] = ir.topo_order(G)
    H = run(G)[1]
    assert "schedule" not in H.graph


def test_opt_level_1_reports_removed():
    g = go.Graph()
    x = g.input("x", (3,))
    go.cos(x) * 2  # dead
    g.output(go.tanh(x))
    plan = go.compile(g, backend="numpy", opt_level=1, cache=False)
    removed = plan.report["dce"].details["removed"]
    assert sorted(op for _, op in removed) == ["const", "cos", "mul"]
    xa = np.linspace(-1, 1, 3)
    np.testing.assert_allclose(plan(xa), np.tanh(xa))
