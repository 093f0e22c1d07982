"""The testing kit itself: strategies cover what they promise, and the pass checkers reject
broken passes (and accept correct ones)."""

import re
from collections import Counter

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.passes import PassContext, PassResult
from graphopt.testing import (
    assert_pass_preserves_semantics,
    check_same_semantics,
    einsum_equations,
    graph_text,
    graphs,
    inputs_for,
    tolerance,
)
from graphopt.testing.strategies import OP_KINDS


def identity(G, ctx):
    return PassResult(ir.copy_graph(G), {})


def swap_sub_operands(G, ctx):
    """Broken on purpose: a - b becomes b - a."""
    H = ir.copy_graph(G)
    for n in list(H.nodes):
        if H.nodes[n]["op"] == "sub":
            for _, _, _, d in H.in_edges(n, keys=True, data=True):
                d["arg"] = 1 - d["arg"]
    return PassResult(H, {})


def mutate_input(G, ctx):
    """Broken on purpose: edits the graph it was given."""
    for n in G.nodes:
        G.nodes[n]["src"] = "mutated"
    return PassResult(ir.copy_graph(G), {})


def wrong_shape(G, ctx):
    H = ir.copy_graph(G)
    for n in H.nodes:
        if H.nodes[n]["op"] not in ("input", "const"):
            H.nodes[n]["shape"] = H.nodes[n]["shape"] + (1,)
            break
    return PassResult(H, {})


def crashes(G, ctx):
    raise KeyError("boom")


def drops_last_output(G, ctx):
    H = ir.copy_graph(G)
    H.graph["outputs"] = H.graph["outputs"][:-1] or H.graph["outputs"]
    return H


# Small graphs of binary ops: a broken pass is found and shrunk in about a second.
SUBTRACTIONS = graphs(max_nodes=3, ops=("binary",), dtypes=("float64",))


def test_accepts_a_correct_pass():
    assert_pass_preserves_semantics(identity, max_examples=30)
    assert_pass_preserves_semantics(lambda G, ctx: ir.copy_graph(G), max_examples=10)


def test_rejects_a_pass_that_swaps_sub_operands():
    with pytest.raises(AssertionError) as info:
        assert_pass_preserves_semantics(swap_sub_operands, max_examples=200,
                                        graphs=SUBTRACTIONS)
    msg = str(info.value)
    assert "pass 'swap_sub_operands' changed output" in msg
    assert "counterexample (shrunk by hypothesis)" in msg
    assert re.search(r"%\d+ = sub\(%\d+, %\d+\)", msg), msg  # the graph, as readable text
    assert "inputs:" in msg


@pytest.mark.parametrize("bad,pattern", [
    (mutate_input, "mutated its input graph"),
    (wrong_shape, "invalid IR"),
    (crashes, "raised KeyError"),
])
def test_rejects_contract_violations(bad, pattern):
    with pytest.raises(AssertionError, match=pattern):
        assert_pass_preserves_semantics(bad, max_examples=20, graphs=SUBTRACTIONS)


def test_rejects_a_pass_that_changes_the_signature():
    with pytest.raises(AssertionError, match="signature|invalid IR"):
        assert_pass_preserves_semantics(drops_last_output, max_examples=50, graphs=SUBTRACTIONS)


def test_check_same_semantics():
    g = go.Graph()
    x, y = g.input("x", (3,)), g.input("y", (3,), "float32")
    g.output((x - y, (x * y).sum()))
    G = g.to_ir()
    check_same_semantics(G, identity(G, None).graph, "identity")
    with pytest.raises(go.GraphError, match=r"pass 'swap' changed output 0") as info:
        check_same_semantics(G, swap_sub_operands(G, None).graph, "swap")
    assert "max abs error" in str(info.value) and info.value.op == "sub"
    H = ir.copy_graph(G)
    H.graph["outputs"] = H.graph["outputs"][::-1]
    with pytest.raises(go.GraphError, match="changed the graph's outputs"):
        check_same_semantics(G, H, "reorder")


def test_check_same_semantics_allows_float32_rounding_but_not_more():
    g = go.Graph()
    x = g.input("x", (50,), "float32")
    g.output(((x * 3.0) * 7.0).sum())
    G = g.to_ir()
    h = go.Graph()
    y = h.input("x", (50,), "float32")
    h.output((y * 21.0).sum())  # reassociated: not bit-identical in float32
    check_same_semantics(G, h.to_ir(), "reassociate")
    k = go.Graph()
    z = k.input("x", (50,), "float32")
    k.output((z * 21.01).sum())
    with pytest.raises(go.GraphError):
        check_same_semantics(G, k.to_ir(), "off")


def test_pass_manager_debug_mode_uses_check_same_semantics():
    from graphopt.passes import PassManager

    g = go.Graph()
    x, y = g.input("x", (3,)), g.input("y", (3,))
    g.output(x - y)
    G = g.to_ir()
    with pytest.raises(go.GraphError, match="pass 'swap_sub_operands' changed output 0"):
        PassManager([swap_sub_operands], debug=True).run(G, PassContext())
    H, records = PassManager([identity], debug=True).run(G, PassContext())
    assert records[0].name == "identity"


def test_tolerance():
    assert tolerance("int64") == (0.0, 0.0) and tolerance("bool") == (0.0, 0.0)
    assert tolerance("float32")[0] > tolerance("float64")[0] > 0
    assert tolerance(np.complex64) == tolerance("float32")


# ---------------------------------------------------------------------- strategy coverage


def _collect(strategy, n=60):
    found = []

    @settings(max_examples=n, deadline=None, derandomize=True, database=None,
              suppress_health_check=list(HealthCheck))
    @given(strategy)
    def run(g):
        found.append(g)

    run()
    return found


def test_graphs_cover_the_promised_features():
    ops, eqs, dtypes, features = Counter(), [], Counter(), Counter()
    for g in _collect(graphs(), 200):
        G = g.to_ir()
        ir.verify(G)
        live = set(G.graph["outputs"])
        for o in G.graph["outputs"]:
            live |= set(__import__("networkx").ancestors(G, o))
        if set(G.nodes) - live:
            features["dead branch"] += 1
        hashes = Counter(ir.node_hashes(G).values())
        if any(c > 1 for c in hashes.values()):
            features["shared subexpression"] += 1
        for n, d in G.nodes(data=True):
            ops[d["op"]] += 1
            dtypes[d["dtype"]] += 1
            if d["op"] == "einsum":
                eq = d["attrs"]["equation"]
                eqs.append(eq)
                ins = eq.split("->")[0].split(",")
                if any(len(set(t)) < len(t) for t in ins):
                    features["repeated index"] += 1
                if len(ins) >= 3:
                    features["3+ operands"] += 1
                if any(G.nodes[u]["op"] == "einsum" and len(ir.users(G, u)) == 1
                       for u in ir.operands(G, n)):
                    features["einsum chain"] += 1
        features[f"outputs:{G.graph['output_structure']['kind']}"] += 1
    for op in ("einsum", "add", "sub", "mul", "div", "exp", "log", "sqrt", "tanh", "sum", "max",
               "mean", "reshape", "transpose", "broadcast_to", "slice", "astype", "const", "where",
               "lt"):
        assert ops[op] > 0, (op, ops)
    for dt in ("float32", "float64", "complex128", "int64", "bool"):
        assert dtypes[dt] > 0, dtypes
    for f in ("dead branch", "shared subexpression", "repeated index", "3+ operands",
              "einsum chain", "outputs:tuple", "outputs:dict"):
        assert features[f] > 0, (f, features)


def test_einsum_equations_cover_the_promised_features():
    cases = _collect(einsum_equations(), 150)
    eqs = [eq for eq, _ in cases]
    assert any("..." in eq for eq in eqs)
    assert any("->" not in eq for eq in eqs)
    assert any(len(eq.split("->")[0].split(",")) >= 3 for eq in eqs)
    assert any(any(len(set(t.replace(".", ""))) < len(t.replace(".", "")) for t in
                   eq.split("->")[0].split(",")) for eq in eqs)
    assert any(1 in s for _, shapes in cases for s in shapes)


def test_graphs_parameters_are_respected():
    for g in _collect(graphs(max_nodes=5, dtypes=("float32",), ops=("unary",), max_inputs=1),
                      20):
        G = g.to_ir()
        assert len(G.graph["inputs"]) == 1
        assert {G.nodes[i]["dtype"] for i in G.graph["inputs"]} == {"float32"}
        assert not {d["op"] for _, d in G.nodes(data=True)} & {"einsum", "sum", "reshape"}
    with pytest.raises(ValueError, match="unknown op kinds"):
        _collect(graphs(ops=("bogus",)), 1)
    assert set(OP_KINDS) >= {"einsum", "chain", "shared", "softmax"}


@given(graphs(max_nodes=8), st.data())
def test_inputs_for_matches_the_signature_and_is_bounded(g, data):
    G = g.to_ir()
    inputs = data.draw(inputs_for(g))
    assert list(inputs) == [G.nodes[i]["name"] for i in G.graph["inputs"]]
    for i in G.graph["inputs"]:
        a = inputs[G.nodes[i]["name"]]
        assert a.shape == G.nodes[i]["shape"] and a.dtype.name == G.nodes[i]["dtype"]
        if a.dtype.kind != "b":
            assert np.all(np.abs(a) <= 3)


def test_graph_text_lists_every_node():
    g = go.Graph("t")
    x = g.input("x", (2, 2))
    g.output({"y": go.einsum("ii->i", x) + g.const(np.array([1.0, 2.0]))})
    text = graph_text(g.to_ir())
    assert "input 'x'" in text and "einsum{equation='ii->i'}" in text and "const{value=" in text
    assert text.count("\n") == g.to_ir().number_of_nodes() + 1
