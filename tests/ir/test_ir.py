"""The IR contract (docs/ARCHITECTURE.md): helpers, verify() catching each broken invariant, and
structural_hash() stable across renumbering and processes."""

import json
import os
import subprocess
import sys

import networkx as nx
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.frontend.serialize import graph_to_json
from graphopt.testing import graphs


def small_graph():
    g = go.Graph("small")
    x = g.input("x", (2, 3), "float32")
    w = g.input("w", (3, 4), "float32")
    h = go.einsum("ij,jk->ik", x, w)
    y = go.tanh(h) * x.sum()
    g.output({"y": y, "h": h})
    return g.to_ir()


def node_of(G, op):
    return next(n for n, d in G.nodes(data=True) if d["op"] == op)


# ---------------------------------------------------------------------------------- helpers


def test_node_schema_and_graph_attributes():
    G = small_graph()
    assert isinstance(G, nx.MultiDiGraph)
    for n, d in G.nodes(data=True):
        assert isinstance(n, int)
        assert {"op", "shape", "dtype", "attrs", "src"} <= set(d)
        assert isinstance(d["shape"], tuple) and isinstance(d["dtype"], str)
        assert d["src"].startswith(__file__ + ":")
    assert [G.nodes[i]["name"] for i in G.graph["inputs"]] == ["x", "w"]
    assert len(G.graph["outputs"]) == 2
    assert G.graph["output_structure"] == {"kind": "dict", "keys": ["y", "h"]}
    e = node_of(G, "einsum")
    assert G.nodes[e]["attrs"]["equation"] == "ij,jk->ik"


def test_operands_keep_duplicates_in_arg_order():
    g = go.Graph()
    x, y = g.input("x", (2,)), g.input("y", (2,))
    z = y - x
    sq = x * x
    g.output((z, sq))
    G = g.to_ir()
    assert ir.operands(G, z.id) == [y.id, x.id]
    assert ir.operands(G, sq.id) == [x.id, x.id]
    assert G.number_of_edges(x.id, sq.id) == 2
    assert sorted(ir.users(G, x.id)) == sorted({z.id, sq.id})


def test_add_node_fills_networkx_dicts_as_networkx_does():
    """``add_node`` writes networkx's adjacency dicts itself: the same edges, keys and data
    as networkx's ``add_node``/``add_edge`` (a repeated operand's second edge keyed 1), and
    an operand that is not in the graph is refused, not added bare."""
    G, H = ir.new_graph(), nx.MultiDiGraph()
    a = ir.add_node(G, "input", (), (2, 3), "float64", name="a")
    b = ir.add_node(G, "input", (), (3,), "float32", name="b")
    c = ir.add_node(G, "einsum", [a, b, a], (2,), "float64", {"equation": "ab,b,ab->a"})
    for n in (a, b, c):
        H.add_node(n)
    for k, u in enumerate([a, b, a]):
        H.add_edge(u, c, arg=k)
    assert list(G.edges(keys=True, data=True)) == list(H.edges(keys=True, data=True))
    assert G._succ == H._succ and G._pred == H._pred
    assert ir.operands(G, c) == [a, b, a] and G.nodes[b]["dtype"] == "float32"
    assert G.nodes[c]["attrs"] == {"equation": "ab,b,ab->a"} and G.nodes[a]["name"] == "a"
    with pytest.raises(go.GraphError, match="operand 99 of a new 'neg' node"):
        ir.add_node(G, "neg", [99], (2,), "float64")
    assert 99 not in G and list(G) == [a, b, c]      # (nothing half added)
    G.graph["next_id"] = 0     # (ids taken are skipped)
    assert ir.add_node(G, "input", (), (), "float64", name="d") == 3


def test_topo_order_copy_replace_and_derived():
    G = small_graph()
    order = ir.topo_order(G)
    assert order == ir.topo_order(G) and sorted(order) == sorted(G.nodes)
    pos = {n: i for i, n in enumerate(order)}
    assert all(pos[u] < pos[v] for u, v in G.edges())
    H = ir.copy_graph(G)
    t = node_of(H, "tanh")
    H.nodes[t]["attrs"]["junk"] = 1
    H.graph["outputs"].append(t)
    assert "junk" not in G.nodes[t]["attrs"] and t not in G.graph["outputs"]
    e = node_of(H, "einsum")
    twin = ir.add_op(H, "einsum", H.graph["inputs"], {"equation": "ab,bc->ac"})
    ir.replace_uses(H, e, twin)
    assert e not in ir.operands(H, t) and twin in ir.operands(H, t)
    assert twin in H.graph["outputs"] and e not in H.graph["outputs"]
    assert ir.users(H, e) == []
    H.graph["schedule"] = ir.topo_order(H)
    ir.drop_derived(H)
    assert "schedule" not in H.graph
    assert ir.nbytes(G, e) == 2 * 4 * 4


@given(graphs())
@settings(max_examples=25, deadline=None)
def test_copy_graph_is_networkx_copy_with_own_dicts(g):
    """copy_graph fills networkx's adjacency dicts itself: the same nodes, edges, keys and
    orders as networkx's own copy, every node, attrs and edge dict its own, and the copy
    mutable through networkx's API as any graph."""
    G = g.to_ir()
    H = ir.copy_graph(G)
    assert list(H.nodes(data=True)) == list(G.nodes(data=True))
    assert list(H.edges(keys=True, data=True)) == list(G.edges(keys=True, data=True))
    assert [list(H.predecessors(n)) for n in H] == [list(G.predecessors(n)) for n in G]
    assert ir.node_keys(H) == ir.node_keys(G) and H.graph == G.graph
    for n in G:
        assert H.nodes[n] is not G.nodes[n] and H.nodes[n]["attrs"] is not G.nodes[n]["attrs"]
    for u, v, k in G.edges(keys=True):
        assert H.edges[u, v, k] is not G.edges[u, v, k]
        assert H.pred[v][u][k] is H.succ[u][v][k]
    keys = ir.node_keys(G)
    first = next(iter(H))
    H.remove_node(first)
    H.add_edge(max(H), max(H) + 1, arg=0)
    assert ir.node_keys(G) == keys and first in G
    ir.verify(G)


def test_add_op_infers_and_locates_errors():
    G = small_graph()
    e = node_of(G, "einsum")
    with pytest.raises(go.ShapeError) as info:
        ir.add_op(G, "add", [e, G.graph["inputs"][1]], src="user.py:7")
    assert info.value.src == "user.py:7" and "op 'add'" in str(info.value)


# ----------------------------------------------------------------------------------- verify


def _break(kind):
    G = small_graph()
    e, t = node_of(G, "einsum"), node_of(G, "tanh")
    x = G.graph["inputs"][0]
    if kind == "cycle":
        G.add_edge(t, e, arg=2)
    elif kind == "non-int id":
        G.add_node("n", op="const", shape=(), dtype="float64", attrs={"value": np.float64(1)},
                   src=None)
    elif kind == "missing attr":
        del G.nodes[t]["dtype"]
    elif kind == "unknown op":
        G.nodes[t]["op"] = "frobnicate"
    elif kind == "args gap":
        for _, _, _, d in G.in_edges(e, keys=True, data=True):
            d["arg"] = d["arg"] * 2
    elif kind == "arity":
        G.add_edge(x, t, arg=1)
    elif kind == "no arg":
        G.add_edge(x, t)
    elif kind == "shape":
        G.nodes[t]["shape"] = (4, 2)
    elif kind == "dtype":
        G.nodes[t]["dtype"] = "float64"
    elif kind == "bad attrs":
        G.nodes[e]["attrs"]["equation"] = "ij,jk->iz"
    elif kind == "unlisted input":
        G.graph["inputs"] = G.graph["inputs"][:1]
    elif kind == "input not input":
        G.graph["inputs"].append(t)
    elif kind == "no outputs":
        G.graph["outputs"] = []
    elif kind == "missing output":
        G.graph["outputs"] = [999]
    elif kind == "input with operands":
        G.add_edge(G.graph["inputs"][1], x, arg=0)
    elif kind == "schedule incomplete":
        G.graph["schedule"] = ir.topo_order(G)[:-1]
    elif kind == "schedule order":
        G.graph["schedule"] = list(reversed(ir.topo_order(G)))
    return G


@pytest.mark.parametrize("kind,pattern", [
    ("cycle", "cycle"), ("non-int id", "not an int"), ("missing attr", "missing attribute"),
    ("unknown op", "unknown op 'frobnicate'"), ("args gap", "are not 0..1"),
    ("arity", "takes 1 operand"), ("no arg", r"args \[0, None\] are not 0..1"),
    ("shape", r"recorded \(4, 2\) float32"),
    ("dtype", "recorded .* float64 but the op's rule gives"),
    ("bad attrs", "output label 'z'"), ("unlisted input", "not listed"),
    ("input not input", "is not an input node"), ("no outputs", "no outputs"),
    ("missing output", "999"), ("input with operands", "input node has operands"),
    ("schedule incomplete", "exactly once"), ("schedule order", "before its operand"),
])
def test_verify_catches_each_broken_invariant(kind, pattern):
    G = _break(kind)
    with pytest.raises(go.GraphError, match=pattern) as info:
        ir.verify(G, pass_name="evil")
    assert "after pass 'evil'" in str(info.value)
    if kind in ("missing attr", "unknown op", "shape", "dtype", "bad attrs", "arity"):
        err = info.value
        assert err.node is not None and err.op is not None
        assert err.src and err.src.startswith(__file__)


def test_verify_accepts_valid_graphs_and_schedules():
    G = small_graph()
    ir.verify(G)
    G.graph["schedule"] = ir.topo_order(G)
    ir.verify(G)
    with pytest.raises(go.GraphError, match="MultiDiGraph"):
        ir.verify(nx.DiGraph())


# -------------------------------------------------------------------------- structural hash


def _renumber(G, seed):
    perm = np.random.default_rng(seed).permutation(1000)[:G.number_of_nodes()]
    mapping = {n: int(p) + 5 for n, p in zip(sorted(G.nodes), perm)}
    H = nx.relabel_nodes(G, mapping, copy=True)
    H.graph = dict(G.graph)
    H.graph["inputs"] = [mapping[i] for i in G.graph["inputs"]]
    H.graph["outputs"] = [mapping[o] for o in G.graph["outputs"]]
    return H


@given(graphs(max_nodes=12), st.integers(0, 1000))
def test_structural_hash_is_stable_across_renumbering(g, seed):
    G = g.to_ir()
    H = _renumber(G, seed)
    ir.verify(H)
    assert ir.structural_hash(H) == ir.structural_hash(G)


def test_structural_hash_sees_every_change():
    G = small_graph()
    h = ir.structural_hash(G)
    variants = []
    for change in ("attr", "dtype", "output order", "input name", "structure", "arg order"):
        H = ir.copy_graph(G)
        if change == "attr":
            H.nodes[node_of(H, "sum")]["attrs"]["keepdims"] = True
            H.nodes[node_of(H, "sum")]["shape"] = (1, 1)
        elif change == "dtype":
            H.nodes[node_of(H, "tanh")]["dtype"] = "float64"
        elif change == "output order":
            H.graph["outputs"] = H.graph["outputs"][::-1]
        elif change == "input name":
            H.nodes[H.graph["inputs"][0]]["name"] = "z"
        elif change == "structure":
            ir.add_op(H, "neg", [node_of(H, "tanh")])
        else:
            m = node_of(H, "mul")
            for _, _, _, d in H.in_edges(m, keys=True, data=True):
                d["arg"] = 1 - d["arg"]
        variants.append(ir.structural_hash(H))
    assert h not in variants and len(set(variants)) == len(variants)
    # src and node ids do not matter
    H = ir.copy_graph(G)
    for n in H.nodes:
        H.nodes[n]["src"] = "elsewhere.py:1"
    assert ir.structural_hash(H) == h


def test_structural_hash_ignores_where_fused_members_came_from():
    """A fused node lists its members' source lines (absolute paths): the same graph built
    from another checkout must hash the same (CI clones elsewhere)."""
    plan = go.compile(small_graph(), backend="numpy", cache=False)
    fused = [n for n, d in plan.graph.nodes(data=True) if d["op"] == "fused"]
    assert fused and all(plan.graph.nodes[n]["attrs"]["srcs"] for n in fused)
    H = ir.copy_graph(plan.graph)
    for n in fused:
        H.nodes[n]["attrs"] = dict(H.nodes[n]["attrs"], srcs=["/elsewhere/model.py:7"])
    assert ir.structural_hash(H) == ir.structural_hash(plan.graph)


def test_structural_hash_is_stable_across_processes(tmp_path):
    G = small_graph()
    path = tmp_path / "g.json"
    path.write_text(graph_to_json(G))
    loaded = ("import sys, graphopt as go\nfrom graphopt import ir\n"
              "g = go.load(sys.argv[1])\nprint(ir.structural_hash(g.to_ir()))\n")
    rebuilt = ("import sys\nsys.path.insert(0, sys.argv[2])\nfrom graphopt import ir\n"
               "from test_ir import small_graph\nprint(ir.structural_hash(small_graph()))\n")
    hashes = set()
    for seed, code in (("1", loaded), ("12345", loaded), ("777", rebuilt)):
        env = dict(os.environ, PYTHONHASHSEED=seed)
        out = subprocess.run([sys.executable, "-c", code, str(path), os.path.dirname(__file__)],
                             env=env, check=True, capture_output=True, text=True, timeout=120)
        hashes.add(out.stdout.strip())
    assert hashes == {ir.structural_hash(G)}
    json.loads(path.read_text())  # still a plain JSON document


@settings(max_examples=30)
@given(graphs(max_nodes=20))
def test_topo_order_is_networkx_lexicographical_order(g):
    from graphopt.passes import PassManager, pipeline_for

    built = g.to_ir()
    # ids reversed: edges run downward, so the order is found by the heap, not by sorting
    flipped = nx.relabel_nodes(built, {n: -n for n in built})
    for G in (built, PassManager(pipeline_for(2)).run(g.to_ir())[0], flipped):
        assert ir.topo_order(G) == list(nx.lexicographical_topological_sort(G))
        for n in G:
            edges = sorted(G.in_edges(n, data="arg"), key=lambda e: e[2])
            assert ir.operands(G, n) == [u for u, _, _ in edges]
