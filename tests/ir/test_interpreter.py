"""The reference interpreter: node-by-node NumPy semantics, checked shapes/dtypes, fused
sub-graphs, schedules, and input binding."""

import warnings

import networkx as nx
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.ir.interpreter import eval_node, interpret, run_graph
from graphopt.testing import graphs, inputs_for


def mlp():
    g = go.Graph("mlp")
    x = g.input("x", (4, 8), "float32")
    w = g.input("w", (8, 3), "float32")
    b = g.input("b", (3,), "float32")
    h = go.gelu(x @ w + b)
    g.output({"h": h, "s": go.softmax(h, axis=-1)})
    return g.to_ir()


def mlp_reference(x, w, b):
    z = x @ w + b
    c = np.float32(np.sqrt(2 / np.pi))
    h = 0.5 * z * (1 + np.tanh(c * (z + np.float32(0.044715) * z ** 3)))
    e = np.exp(h - h.max(-1, keepdims=True))
    return h, e / e.sum(-1, keepdims=True)


def test_run_graph_matches_numpy(rng):
    G = mlp()
    x, w, b = (rng.standard_normal(s).astype("float32") for s in [(4, 8), (8, 3), (3,)])
    h, s = run_graph(G, [x, w, b])
    eh, es = mlp_reference(x, w, b)
    assert h.dtype == np.float32 and s.dtype == np.float32
    np.testing.assert_allclose(h, eh, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(s, es, rtol=1e-5, atol=1e-6)
    out = interpret(G, x=x, w=w, b=b)
    assert list(out) == ["h", "s"]
    np.testing.assert_array_equal(out["h"], h)


def test_interpret_binds_positional_and_keyword_inputs(rng):
    G = mlp()
    x, w, b = (rng.standard_normal(s).astype("float32") for s in [(4, 8), (8, 3), (3,)])
    a = interpret(G, x, w, b=b)
    c = interpret(G, b=b, x=x, w=w)
    np.testing.assert_array_equal(a["s"], c["s"])
    with pytest.raises(go.InputError, match="missing input"):
        interpret(G, x, w)
    with pytest.raises(go.InputError, match="unexpected input 'q'"):
        interpret(G, x, w, b, q=b)
    with pytest.raises(go.InputError, match="expects shape"):
        interpret(G, x.T, w, b)


def test_run_graph_input_count():
    with pytest.raises(go.GraphError, match="takes 3 inputs, got 1"):
        run_graph(mlp(), [np.zeros((4, 8), "float32")])


def test_schedule_is_followed_and_equivalent(rng):
    G = mlp()
    arrays = [rng.standard_normal(s).astype("float32") for s in [(4, 8), (8, 3), (3,)]]
    base = run_graph(G, arrays)
    orders = list(nx.all_topological_sorts(G))[:5]
    for order in orders:
        H = ir.copy_graph(G)
        H.graph["schedule"] = list(order)
        for a, b in zip(run_graph(H, arrays), base):
            np.testing.assert_array_equal(a, b)
    assert len(orders) == 5


def test_eval_node_checks_recorded_shape_and_dtype(rng):
    G = mlp()
    t = next(n for n, d in G.nodes(data=True) if d["op"] == "add")
    G.nodes[t]["dtype"] = "float64"  # the static rule and the semantics now disagree
    arrays = [rng.standard_normal(s).astype("float32") for s in [(4, 8), (8, 3), (3,)]]
    with pytest.raises(go.GraphError, match="reference produced .* float32 but the IR records"):
        run_graph(G, arrays)


def test_fused_node_runs_its_subgraph(rng):
    sub = ir.new_graph("group")
    a = ir.add_node(sub, "input", [], (3,), "float64", name="in0")
    b = ir.add_node(sub, "input", [], (2, 3), "float64", name="in1")
    sub.graph["inputs"] = [a, b]
    s = ir.add_op(sub, "add", [a, b])
    e = ir.add_op(sub, "exp", [s])
    sub.graph["outputs"] = [e]
    G = ir.new_graph("outer")
    x = ir.add_node(G, "input", [], (3,), "float64", name="x")
    y = ir.add_node(G, "input", [], (2, 3), "float64", name="y")
    G.graph["inputs"] = [x, y]
    f = ir.add_op(G, "fused", [x, y], {"graph": sub, "pattern": "elementwise"})
    G.graph["outputs"] = [f]
    ir.verify(G)
    xv, yv = rng.standard_normal(3), rng.standard_normal((2, 3))
    np.testing.assert_allclose(run_graph(G, [xv, yv])[0], np.exp(xv + yv))
    with pytest.raises(go.ShapeError, match="fused operand 0"):
        ir.add_op(G, "fused", [y, x], {"graph": sub, "pattern": "elementwise"})


def test_outputs_may_repeat_and_be_inputs(rng):
    g = go.Graph()
    x = g.input("x", (2,))
    y = go.exp(x)
    g.output((y, x, y))
    xv = rng.standard_normal(2)
    a, b, c = run_graph(g.to_ir(), [xv])
    np.testing.assert_array_equal(a, c)
    np.testing.assert_array_equal(b, xv)


def test_reference_does_not_warn_or_write_inputs():
    g = go.Graph()
    x = g.input("x", (3,))
    g.output(go.log(x) + go.sqrt(x))
    xv = np.array([-1.0, 0.0, 4.0])
    xv.setflags(write=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = run_graph(g.to_ir(), [xv])[0]
    assert np.isnan(out[0]) and out[1] == -np.inf and out[2] == np.log(4) + 2


def test_eval_node_is_the_op_impl(rng):
    G = mlp()
    e = next(n for n, d in G.nodes(data=True) if d["op"] == "einsum")
    x, w = rng.standard_normal((4, 8)).astype("float32"), rng.standard_normal((8, 3)).astype(
        "float32")
    np.testing.assert_allclose(eval_node(G, e, [x, w]), x @ w, rtol=1e-5)


@given(graphs(), st.data())
def test_static_rules_agree_with_semantics_on_random_graphs(g, data):
    """run_graph checks every value against the IR's shape and dtype, so any drift between
    an op's rule and its NumPy meaning fails here; generated values stay finite."""
    G = g.to_ir()
    inputs = data.draw(inputs_for(G))
    outs = run_graph(G, [inputs[G.nodes[i]["name"]] for i in G.graph["inputs"]])
    for o, v in zip(G.graph["outputs"], outs):
        assert v.shape == G.nodes[o]["shape"] and v.dtype.name == G.nodes[o]["dtype"]
        if v.dtype.kind in "fc":
            assert np.all(np.isfinite(v)), "graphs() must keep values finite"
