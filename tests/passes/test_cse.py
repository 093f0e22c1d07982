"""Unit tests of the CSE pass: what merges (einsum canonical form, commutative ops, equal
constants) and what must never merge."""

import numpy as np
import pytest

import graphopt as go
from graphopt import ir
from graphopt.passes import PassContext
from graphopt.passes.cse import cse, node_key
from graphopt.testing import checked_run


def run(g):
    """cse on ``g``'s IR; checks purity, verification, semantics and idempotence."""
    G, res = checked_run(cse, g)
    H, merged = res.graph, res.record["merged"]
    again = cse(H, PassContext())
    assert again.record["merged"] == [] and ir.structural_hash(again.graph) == \
        ir.structural_hash(H)
    keys = [node_key(H, n) for n in H if H.nodes[n]["op"] != "input"]
    assert len(keys) == len(set(keys)), "two structurally equal nodes survived"
    return G, H, merged


def two_inputs(shape_a=(2, 3), shape_b=(3, 4), dtype="float64"):
    g = go.Graph()
    return g, g.input("a", shape_a, dtype), g.input("b", shape_b, dtype)


def test_einsum_operand_order_and_label_names_do_not_hide_a_duplicate():
    g, a, b = two_inputs()
    e1 = go.einsum("ij,jk->ik", a, b)
    e2 = go.einsum("jk,ij->ik", b, a)
    e3 = go.einsum("xy,yz->xz", a, b)
    g.output((e1, e2 + e3))
    G, H, merged = run(g)
    assert merged == [(e1.id, e2.id), (e1.id, e3.id)]
    assert H.graph["outputs"][0] == e1.id
    assert ir.operands(H, H.graph["outputs"][1]) == [e1.id, e1.id]


def test_different_contractions_stay_apart():
    g, a, _ = two_inputs((3, 3), (3, 3))
    square = go.einsum("ij,jk->ik", a, a)
    same = go.einsum("jk,ij->ik", a, a)        # also a @ a
    gram = go.einsum("ij,kj->ik", a, a)        # a @ a.T
    trans = go.einsum("ij,jk->ki", a, a)       # (a @ a).T
    g.output((square, same, gram, trans))
    G, H, merged = run(g)
    assert merged == [(square.id, same.id)]
    assert len({H.graph["outputs"][k] for k in range(4)}) == 3


def test_an_einsum_s_contraction_does_not_block_a_merge():
    # how an einsum runs (its contraction: path, forms, slices) is not what it computes
    from graphopt.contraction.value import Contraction

    g, a, b = two_inputs()
    g.output((go.einsum("ij,jk->ik", a, b), go.einsum("ij,jk->ik", a, b)))
    G = g.to_ir()
    first, second = G.graph["outputs"]
    G.nodes[second]["attrs"]["contraction"] = Contraction.of_node(G, second)
    H, merged = run(G)[1:]
    assert merged == [(first, second)]
    assert H.graph["outputs"] == [first, first]


@pytest.mark.parametrize("op", ["add", "mul", "maximum", "minimum", "eq", "ne"])
def test_commutative_ops_with_swapped_operands_merge(op):
    dtype = "int64" if op in ("maximum", "minimum") else "float64"
    g, a, b = two_inputs((2, 3), (3,), dtype)
    f = getattr(go, {"eq": "equal", "ne": "not_equal"}.get(op, op))
    x, y = f(a, b), f(b, a)
    g.output((x, y))
    G, H, merged = run(g)
    assert merged == [(x.id, y.id)]


@pytest.mark.parametrize("op", ["sub", "div", "pow", "less", "greater_equal"])
def test_non_commutative_ops_with_swapped_operands_never_merge(op):
    g, a, b = two_inputs((3,), (3,))
    f = getattr(go, op)
    g.output((f(a, b), f(b, a)))
    assert run(g)[2] == []


@pytest.mark.parametrize("op", ["maximum", "minimum"])
def test_float_max_min_with_swapped_operands_stay_apart(op):
    """NumPy: maximum(-0.0, 0.0) is 0.0 but maximum(0.0, -0.0) is -0.0."""
    assert np.signbit(getattr(np, op)(0.0, -0.0)) != np.signbit(getattr(np, op)(-0.0, 0.0))
    g, a, b = two_inputs((3,), (3,))
    f = getattr(go, op)
    x, y = f(a, b), f(a, b)
    g.output((x, y, f(b, a)))
    assert run(g)[2] == [(x.id, y.id)]


def test_where_operands_are_ordered():
    g, a, b = two_inputs((3,), (3,))
    c = a > b
    g.output((go.where(c, a, b), go.where(c, b, a)))
    assert run(g)[2] == []


def test_equal_constants_merge_and_others_do_not():
    g = go.Graph()
    x = g.input("x", (3,))
    consts = [g.const(np.array([1.0, 2.0, 3.0])), g.const(np.array([1.0, 2.0, 3.0])),
              g.const(np.array([1.0, 2.0, 3.0], np.float32)), g.const(np.array([[1.0, 2.0, 3.0]])),
              g.const(np.float64(0.0)), g.const(np.float64(-0.0)), g.const(np.float64(0.0))]
    g.output(tuple(x + c for c in consts))
    G, H, merged = run(g)
    ids = [c.id for c in consts]
    assert (ids[0], ids[1]) in merged and (ids[4], ids[6]) in merged
    assert {r for _, r in merged} >= {ids[1], ids[6]}
    assert not {ids[2], ids[3], ids[5]} & {r for _, r in merged}


def test_inputs_never_merge():
    g, a, b = two_inputs((3,), (3,))
    g.output((go.exp(a), go.exp(b)))
    G, H, merged = run(g)
    assert merged == [] and set(H.graph["inputs"]) == {a.id, b.id}


def test_different_attrs_stay_apart():
    g, a, _ = two_inputs((2, 3), (3,))
    g.output((a.sum(axis=0), a.sum(axis=1), a.sum(axis=0, keepdims=True), a.max(axis=0),
              a.astype("float32"), a.astype("int64"), a.reshape(3, 2), a.reshape(6)))
    assert run(g)[2] == []


def test_duplicates_of_duplicates_merge_in_one_pass():
    g, a, b = two_inputs((2, 3), (3,))

    def branch(p, q):
        return go.tanh(go.einsum("ij,j->i", go.exp(p + q), q)).sum()

    x, y = branch(a, b), branch(a, b) * 1
    g.output(x + y)
    G, H, merged = run(g)
    assert len(merged) == 5
    assert sorted(d["op"] for _, d in H.nodes(data=True)) == \
        ["add", "add", "const", "einsum", "exp", "input", "input", "mul", "sum", "tanh"]


def test_merged_outputs_are_returned_as_separate_arrays():
    g, a, b = two_inputs()
    g.output({"p": a @ b, "q": go.einsum("jk,ij->ik", b, a)})
    plan = go.compile(g, backend="numpy", opt_level=1, cache=False)
    merged = plan.report["cse"].details["merged"]
    assert len(merged) == 1
    rng = np.random.default_rng(0)
    A, B = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    out = plan(a=A, b=B)
    np.testing.assert_allclose(out["p"], A @ B)
    np.testing.assert_allclose(out["q"], A @ B)
    assert not np.shares_memory(out["p"], out["q"])


def test_report_at_opt_level_1():
    g, a, b = two_inputs()
    y = go.relu(a @ b) + go.relu(go.einsum("xy,yz->xz", a, b))
    g.output(y)
    plan = go.compile(g, backend="numpy", opt_level=1, cache=False)
    rec = plan.report["cse"]
    assert len(rec.details["merged"]) == 2 and rec.changed
    assert rec.nodes_before - rec.nodes_after == 2
    rng = np.random.default_rng(1)
    A, B = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    np.testing.assert_allclose(plan(A, B), 2 * np.maximum(A @ B, 0))
