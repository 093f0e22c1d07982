"""The fusion pass: which groups form, the fused node format, refusals and their reasons."""

import networkx as nx
import numpy as np
import pytest

import graphopt as go
from graphopt import ir
from graphopt.ir import ops
from graphopt.ir.interpreter import run_graph
from graphopt.passes import PassContext
from graphopt.passes.fusion import fusion
from graphopt.testing import assert_plan_matches_interpreter, check_same_semantics


def fuse(g):
    G = g.to_ir()
    res = fusion(G, PassContext())
    ir.verify(res.graph)
    check_same_semantics(G, res.graph, "fusion")
    return G, res.graph, res.record


def fused_nodes(H):
    return [n for n in ir.topo_order(H) if H.nodes[n]["op"] == "fused"]


def member_ops(H, n):
    sub = H.nodes[n]["attrs"]["graph"]
    return [sub.nodes[m]["op"] for m in ir.topo_order(sub)
            if sub.nodes[m]["op"] not in ("input", "const")]


def reasons(details, op):
    return [r["reason"] for r in details["rejected"] if r["op"] == op]


def test_mlp_epilogue_is_one_contraction_group():
    g = go.Graph("mlp")
    x = g.input("x", (4, 8), "float32")
    w = g.input("w", (8, 16), "float32")
    b = g.input("b", (16,), "float32")
    g.output(go.gelu(go.einsum("bi,ij->bj", x, w) + b))
    G, H, details = fuse(g)
    (f,) = fused_nodes(H)
    attrs = H.nodes[f]["attrs"]
    assert attrs["pattern"] == "contraction"
    assert member_ops(H, f) == ["einsum", "add", "gelu"]
    assert details["groups"] == [["einsum", "add", "gelu"]]
    assert details["kernels"] == 1 and details["patterns"] == ["contraction"]
    assert details["fused_nodes"] == [f]
    # ARCHITECTURE "Fused nodes": inputs in0..ink in arg order, one output, srcs kept
    sub = attrs["graph"]
    names = [sub.nodes[i]["name"] for i in sub.graph["inputs"]]
    assert names == ["in0", "in1", "in2"]
    outer = [H.nodes[u]["name"] for u in ir.operands(H, f)]
    assert outer == ["x", "w", "b"]
    for i, u in zip(sub.graph["inputs"], ir.operands(H, f)):
        assert sub.nodes[i]["shape"] == H.nodes[u]["shape"]
    assert len(sub.graph["outputs"]) == 1
    assert attrs["srcs"] and all("test_fusion_pass.py:" in s for s in attrs["srcs"])
    assert all(sub.nodes[m]["src"] for m in sub if sub.nodes[m]["op"] != "input")
    assert H.graph["outputs"] == [f]


def test_elementwise_chain_with_scalars_is_one_kernel():
    g = go.Graph()
    x = g.input("x", (3, 5), "float64")
    y = g.input("y", (5,), "float64")
    g.output(go.sqrt(abs(go.tanh(x * 2.0 + y) - 0.5)) * y)
    G, H, details = fuse(g)
    (f,) = fused_nodes(H)
    assert H.nodes[f]["attrs"]["pattern"] == "elementwise"
    assert member_ops(H, f) == ["mul", "add", "tanh", "sub", "abs", "sqrt", "mul"]
    # the scalar constants were copied into the group and are gone outside
    assert not [n for n in H if H.nodes[n]["op"] == "const"]
    assert [H.nodes[u]["name"] for u in ir.operands(H, f)] == ["x", "y"]
    assert H.number_of_nodes() == 3


def test_reduction_rooted_group_and_its_epilogue():
    g = go.Graph()
    x = g.input("x", (6, 7), "float32")
    ms = (x * x).mean(axis=1, keepdims=True)
    g.output(go.sqrt(ms + 1e-5))
    G, H, details = fuse(g)
    (f,) = fused_nodes(H)
    assert H.nodes[f]["attrs"]["pattern"] == "reduction"
    assert member_ops(H, f) == ["mul", "mean", "add", "sqrt"]


def test_softmax_is_one_normalization_group():
    g = go.Graph()
    x = g.input("x", (4, 9), "float64")
    g.output(go.softmax(x * 0.5, axis=1))
    G, H, details = fuse(g)
    (f,) = fused_nodes(H)
    assert H.nodes[f]["attrs"]["pattern"] == "normalization"
    assert member_ops(H, f) == ["mul", "max", "sub", "exp", "sum", "div"]
    assert details["rejected"] == []


def test_layer_norm_and_logsumexp_are_normalization_groups():
    g = go.Graph()
    x = g.input("x", (6, 5, 8), "float32")
    w = g.input("w", (8,), "float32")
    mu = x.mean(axis=-1, keepdims=True)
    var = ((x - mu) * (x - mu)).mean(axis=-1, keepdims=True)
    g.output(((x - mu) / go.sqrt(var + 1e-5) * w,
              go.logsumexp(x, axis=(1, 2), keepdims=False)))
    G, H, details = fuse(g)
    fs = fused_nodes(H)
    assert [H.nodes[f]["attrs"]["pattern"] for f in fs] == ["normalization"] * 2
    assert member_ops(H, fs[0]).count("mean") == 2
    assert member_ops(H, fs[1]).count("max") == 1


@pytest.mark.parametrize("build, why", [
    (lambda x: go.softmax(x, axis=0), "not the trailing axes"),
    (lambda x: x - x.mean(), "a full reduction has no rows"),
    (lambda x: x.sum(axis=2, keepdims=True) * x + x.max(axis=(1, 2), keepdims=True),
     "different rows"),
    (lambda x: x * x.max(axis=2, keepdims=True).transpose((0, 2, 1)), "read across rows"),
])
def test_reductions_that_are_not_one_row_pass_stay_apart(build, why):
    g = go.Graph()
    x = g.input("x", (2, 6, 6), "float64")
    g.output(build(x))
    G, H, details = fuse(g)
    assert any(why in r["reason"] for r in details["rejected"]), details["rejected"]


def test_cycle_through_an_outside_node_is_refused():
    g = go.Graph()
    x = g.input("x", (8,), "float64")
    a = go.exp(x)
    s = a.sum()          # outside any group with the multiply: different shape
    g.output(a * s + 1.0)
    G, H, details = fuse(g)
    (why,) = [r for r in details["rejected"] if r["op"] == "exp" and r["root_op"] == "add"]
    assert why["reason"].startswith("would create a cycle through node")
    assert nx.is_directed_acyclic_graph(H)
    check_same_semantics(G, H, "fusion")


def test_graph_outputs_stay_group_outputs():
    g = go.Graph()
    x = g.input("x", (5,), "float32")
    t = go.tanh(x)
    g.output((t, t * 3.0 + 1.0))
    G, H, details = fuse(g)
    assert any("graph output" in r for r in reasons(details, "tanh"))
    assert H.nodes[H.graph["outputs"][0]]["op"] == "tanh"


def test_broadcast_recompute_of_expensive_ops():
    g = go.Graph()
    x = g.input("x", (64, 32), "float32")
    rows = g.input("r", (64, 1), "float32")
    cols = g.input("c", (32,), "float32")
    g.output(x * go.exp(rows) + go.exp(cols))
    G, H, details = fuse(g)
    (f,) = fused_nodes(H)
    # exp of a per-row value is computed once per row (hoisted); exp of a per-column
    # value would be recomputed for each of the 64 rows
    assert member_ops(H, f) == ["exp", "mul", "add"]
    (why,) = reasons(details, "exp")
    assert "recomputed 64x" in why and why.startswith("shape mismatch")


def test_layout_ops_inside_a_group_and_reshape_outside():
    g = go.Graph()
    x = g.input("x", (3, 4), "float64")
    y = g.input("y", (4, 3), "float64")
    t = go.exp(x).T + y
    g.output(go.reshape(t * t, (12,)) + 1.0)
    G, H, details = fuse(g)
    groups = sorted(details["groups"])
    assert ["exp", "transpose", "add", "mul"] in groups
    assert any(H.nodes[n]["op"] == "reshape" for n in H)


def test_einsum_with_other_users_or_reduction_is_not_an_epilogue():
    g = go.Graph()
    a = g.input("a", (4, 5), "float64")
    b = g.input("b", (5, 6), "float64")
    e = go.einsum("ij,jk->ik", a, b)
    g.output(((e + 1.0).sum(axis=0), e * 2.0))
    G, H, details = fuse(g)
    assert any(H.nodes[n]["op"] == "einsum" for n in H)
    assert "multiple external users" in " ".join(reasons(details, "einsum"))


def test_an_einsum_run_along_its_path_is_not_an_epilogue_head():
    # a many-operand einsum (or a sliced one) runs along its path in its own kernel: as a
    # group's head its kernel would run the whole equation at once
    g = go.Graph()
    a, b, c = (g.input(n, (4, 4), "float64") for n in "abc")
    g.output(go.einsum("ij,jk,kl->il", a, b, c) * 2.0 + 1.0)
    G, H, details = fuse(g)
    assert any(H.nodes[n]["op"] == "einsum" for n in H)
    assert all("einsum" not in member_ops(H, f) for f in fused_nodes(H))
    assert any("runs along its path" in r for r in reasons(details, "einsum"))


def test_einsum_operands_stay_group_inputs():
    g = go.Graph()
    x = g.input("x", (4, 4), "float64")
    w = g.input("w", (4, 4), "float64")
    a = go.exp(x)
    g.output(go.einsum("ij,jk->ik", a, w) + a)
    G, H, details = fuse(g)
    assert "einsum operands must be group inputs" in reasons(details, "exp")
    (f,) = [n for n in fused_nodes(H) if H.nodes[n]["attrs"]["pattern"] == "contraction"]
    assert member_ops(H, f) == ["einsum", "add"]


def test_epilogue_must_keep_the_einsum_dtype():
    g = go.Graph()
    x = g.input("x", (4, 4), "float32")
    w = g.input("w", (4, 4), "float32")
    g.output(go.astype(go.einsum("ij,jk->ik", x, w), "float64") * 2.0)
    G, H, details = fuse(g)
    assert any("dtype mismatch" in r for r in reasons(details, "einsum"))


def test_single_ops_are_left_alone():
    g = go.Graph()
    x = g.input("x", (4,), "float64")
    y = g.input("y", (4,), "float64")
    g.output((go.exp(x), x + y, x.sum()))
    G, H, details = fuse(g)
    assert details["kernels"] == 0 and details["groups"] == []
    assert ir.structural_hash(G) == ir.structural_hash(H)


def test_pass_is_pure_and_idempotent():
    g = go.Graph()
    x = g.input("x", (4, 6), "float32")
    g.output(go.logsumexp(go.relu(x) * 0.5, axis=1))
    G = g.to_ir()
    before = ir.structural_hash(G)
    H = fusion(G, PassContext()).graph
    assert ir.structural_hash(G) == before
    again = fusion(H, PassContext())
    assert again.record["kernels"] == 0
    assert ir.structural_hash(again.graph) == ir.structural_hash(H)


def test_members_are_allowed_kinds_and_only_the_root_leaves_the_group():
    g = go.Graph()
    x = g.input("x", (5, 6), "float64")
    w = g.input("w", (6, 3), "float64")
    h = go.sigmoid(go.einsum("ij,jk->ik", x, w) * 2.0)
    m = go.max(h, axis=0, keepdims=True)
    g.output((h - m, go.where(h > 0.5, h, 0.0).mean()))
    G, H, details = fuse(g)
    for f in fused_nodes(H):
        sub = H.nodes[f]["attrs"]["graph"]
        (out,) = sub.graph["outputs"]
        for n in sub:
            op = sub.nodes[n]["op"]
            assert op in ("input", "const", "broadcast_to", "transpose", "einsum") or \
                ops.OPS[op].kind in (ops.ELEMENTWISE, ops.REDUCTION)
            assert n == out or sub.out_degree(n) > 0


def test_fused_graph_runs_through_compile_on_the_reference_backend(rng):
    g = go.Graph("block")
    x = g.input("x", (6, 8), "float32")
    w = g.input("w", (8, 8), "float32")
    h = go.relu(go.einsum("bi,ij->bj", x, w) - 0.1)
    g.output(go.softmax(h, axis=-1))
    plan = go.compile(g, backend="numpy")
    # relu(h - 0.1) is read by the max and the subtraction: both in the softmax's group
    assert plan.report["fusion"].details["groups"] == [["sub", "relu", "max", "sub", "exp",
                                                         "sum", "div"]]
    xa = rng.standard_normal((6, 8)).astype(np.float32)
    wa = rng.standard_normal((8, 8)).astype(np.float32)
    np.testing.assert_allclose(plan(xa, wa), go.compile(g, backend="numpy", opt_level=0)(xa, wa),
                               rtol=1e-5, atol=1e-6)


def test_groups_of_a_fused_graph_are_acyclic_when_contracted():
    g = go.Graph()
    x = g.input("x", (4, 4), "float64")
    a = go.exp(x)
    b = a.sum(axis=1, keepdims=True)
    c = a / b
    d = go.einsum("ij,jk->ik", c, a)
    g.output(go.tanh(d + c) * b)
    G, H, details = fuse(g)
    assert nx.is_directed_acyclic_graph(H)
    np.testing.assert_allclose(run_graph(H, [np.eye(4)])[0], run_graph(G, [np.eye(4)])[0])


@pytest.mark.parametrize("dtype", ["int32", "bool", "complex64"])
def test_non_float_groups(dtype):
    g = go.Graph()
    x = g.input("x", (3, 4), dtype)
    y = g.input("y", (4,), dtype)
    g.output((x * y + x).sum(axis=0))
    G, H, details = fuse(g)
    assert details["patterns"] == ["reduction"]


def test_a_scalar_constant_operand_of_a_fused_einsum_stays_an_argument(rng):
    """A contraction group whose einsum reads a one-element constant (gradient graphs make
    ``einsum(",abc->bca", 1, x)``): the constant is passed to the einsum, not inlined."""
    g = go.Graph("scalar_einsum")
    x = g.input("x", (4, 4, 2), "complex128")
    y = g.input("y", (4, 2, 4), "complex128")
    g.output(go.conj(go.einsum(",abc->bca", g.const(np.complex128(2 + 1j)), x)) + y)
    for backend in ("numpy", "numba"):
        plan = go.compile(g, backend=backend, cache=False)
        assert_plan_matches_interpreter(g, plan, {
            "x": rng.normal(size=(4, 4, 2)) + 1j, "y": rng.normal(size=(4, 2, 4)) + 0j})
