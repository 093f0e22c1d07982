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
    assert dot.startswith("digraph dot {") and dot.rstrip().endswith("}")
    for n in fused:
        assert f"subgraph cluster_{n} {{" in dot
    assert 'label="einsum ab,bc->ac\\n(8, 8) float64"' in dot and "tanh" in dot
    assert '0 [label="input x\\n(8, 8) float64" fillcolor=lightgrey style=filled' in dot
    assert report.to_dot() is dot      # drawn once


def test_text_report_says_what_each_pass_decided_and_why():
    @go.jit
    def attn(q, k, v):
        s = go.einsum("bqd,bkd->bqk", q, k) * 0.125
        return go.einsum("bqk,bkd->bqd", go.softmax(s, axis=-1), v)

    q = np.random.default_rng(0).random((4, 64, 32)).astype(np.float32)
    attn(q, q, q)
    report = attn.plan_for(q, q, q).report
    text = " ".join(str(report).split())   # decisions wrap at 100 columns, never cut
    details = report["fusion"].details
    # every fusion refusal is printed with its reason and the user's line
    for r in details["rejected"]:
        assert f"not fused: node {r['node']}" in text and r["reason"] in text
    for ops in details["groups"]:
        assert f"fused {' '.join(ops)}" in text
    for g in report["contraction"].details["groups"]:
        assert g["reason"] in text
    assert "test_report.py:" in text              # decisions name the user's source line
    assert "order topological" in text or "order greedy" in text or "order depth" in text
    assert "why: batched GEMM B,M,K,N=(4, 64, 64, 32)" in text   # each step's kernel choice
    assert "something summed" in text             # and its reason (gemm.einsum_is_faster)
    assert "dtypes: inputs q float32, k float32, v float32; outputs float32" in text
    assert "dtype changes: none" in text
    md = report.to_markdown()
    assert details["rejected"][0]["reason"] in md


def test_text_report_names_each_dtype_change_with_its_cause():
    @go.jit
    def f(x):
        wide = go.tanh(x * np.float64(2.0))      # a strong float64 scalar widens float32
        kept = x * 2.0                           # a Python float keeps float32
        return wide, kept, np.mean(x.astype(np.int32)), x > 0

    x = np.ones((8, 8), np.float32)
    f(x)
    report = f.plan_for(x).report
    changes = report.dtypes["changes"]
    assert [(c["op"], c["from"], c["to"]) for c in changes] == [
        ("mul", ["float32"], "float64"), ("astype", ["float32"], "int32"),
        ("mean", ["int32"], "float64")]
    assert "constant widened it" in changes[0]["why"] and "keep float32" in changes[0]["why"]
    assert changes[1]["why"] == "a cast written as such"
    assert "NumPy's rule" in changes[2]["why"]
    text = str(report)
    assert "dtype changes (3):" in text
    assert "float32 -> float64  mul (node" in text and "test_report.py:" in text
    assert report.dtypes["outputs"] == ["float64", "float32", "float64", "bool"]
    assert report.to_dict()["dtypes"] == report.dtypes


def test_text_report_never_cuts_names_or_shapes():
    g = go.Graph("long")
    shape = (3, 5, 7, 11, 13, 2)
    x = g.input("x_with_a_long_name", shape, "float64")
    g.output(go.sum(go.exp(x) * x, axis=(0, 2, 4)))
    plan = go.compile(g, backend="numba", cache=False)
    text = str(plan.report)
    for k in plan.report.kernels:
        assert k["name"] in text and k["impl"] in text and str(tuple(k["shape"])) in text
    assert "..." not in text or "more (report.to_json() lists all)" in text


def test_an_unknown_pass_shows_every_detail():
    from graphopt.observe.report_text import pass_decisions
    from graphopt.passes.manager import PassRecord
    rec = PassRecord(name="my_pass", details={"kept": [1, 2, 3], "why": "x" * 200})
    assert pass_decisions(None, rec) == ["kept: [1, 2, 3]", "why: " + "x" * 200]


def test_a_network_compile_counts_each_graph_s_flops_once(monkeypatch):
    """The contraction pass's before/after FLOPs and the report's are the same graphs'
    counts (``PassContext.counted_flops``): each graph is counted once, and the figures
    agree with a count of their own."""
    from graphopt.analysis import cost

    g = go.Graph("chain")
    xs = [g.input(f"x{i}", (16, 16)) for i in range(4)] + [g.input("v", (16,))]
    g.output(go.einsum("ab,bc,cd,de,e->a", *xs))     # best right to left
    counted = []
    real = cost.node_flops
    monkeypatch.setattr(cost, "node_flops", lambda G, n: counted.append(id(G)) or real(G, n))
    plan = go.compile(g, cache=False)
    # the source graph's one einsum node: counted once for the pass's and the report's
    # figures (the optimized graph's nodes are also counted per plan step, by lowering)
    assert counted.count(id(plan.source_graph)) == 1
    rec = plan.report["contraction"].details
    assert plan.report.flops_naive == rec["flops_before"] == cost.graph_flops(plan.source_graph)
    assert plan.report.flops_optimized == rec["flops_after"] == cost.graph_flops(plan.graph)
    assert rec["flops_after"] < rec["flops_before"]
