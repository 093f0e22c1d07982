"""The contraction pass: merging, reordering, the user's order kept, memory limits, speed."""

import math
import time

import numpy as np
import opt_einsum
import pytest

import graphopt as go
from graphopt import ir
from graphopt.analysis import cost
from graphopt.contraction.groups import find_groups
from graphopt.contraction.paths import left_to_right
from graphopt.errors import GraphError
from graphopt.ir.einsum import label
from graphopt.ir.interpreter import run_graph
from graphopt.passes import PassContext
from graphopt.passes.contraction import contraction
from graphopt.testing import checked_run


def run(g, **ctx):
    G, res = checked_run(contraction, g, PassContext(**ctx))
    return G, res.graph, res.record


def assert_same(G, H, rng, rtol=1e-9):
    ins = [rng.standard_normal(G.nodes[i]["shape"]).astype(G.nodes[i]["dtype"])
           for i in G.graph["inputs"]]
    for e, a in zip(run_graph(G, ins), run_graph(H, ins)):
        np.testing.assert_allclose(a, e, rtol=rtol, atol=rtol * max(1.0, np.abs(e).max()))


def as_written(G):
    """``G``'s structural hash without the contractions the pass gives every einsum: what the
    user's nodes compute and how they are joined."""
    H = ir.copy_graph(G)
    for _, d in H.nodes(data=True):
        d["attrs"] = {k: v for k, v in d["attrs"].items() if k != "contraction"}
    return ir.structural_hash(H)


def einsum_nodes(H):
    return [n for n in ir.topo_order(H) if H.nodes[n]["op"] == "einsum"]


def bad_chain(n=60):
    g = go.Graph("bad_chain")
    A, B, C = (g.input(k, (n, n)) for k in "ABC")
    v = g.input("v", (n,))
    g.output(go.einsum("ij,j->i", (A @ B) @ C, v))  # ((AB)C)v: O(n^3); A(B(Cv)) is O(n^2)
    return g


def test_bad_order_matrix_chain_is_reordered_and_flops_drop(rng):
    G, H, rec = run(bad_chain())
    assert rec["flops_before"] == cost.graph_flops(G) == 2 * (2 * 60**3) + 2 * 60**2
    assert rec["flops_after"] == cost.graph_flops(H) == 3 * 2 * 60**2
    assert rec["merged"] == 1 and rec["kept_user_order"] == []
    (group,) = rec["groups"]
    assert group["decision"] == "reordered" and group["optimizer"] == "optimal"
    assert rec["path"][str(group["root"])] == group["path"]
    # Pairwise steps that keep only the labels still needed: every intermediate is a vector.
    steps = einsum_nodes(H)
    assert len(steps) == 3 and all(len(ir.operands(H, n)) == 2 for n in steps)
    assert all(H.nodes[n]["shape"] == (60,) for n in steps)
    assert rec["largest_intermediate_before"] == {"elements": 3600, "bytes": 28800}
    assert rec["largest_intermediate_after"] == {"elements": 60, "bytes": 480}
    assert "schedule" not in H.graph
    assert_same(G, H, rng)


def test_users_better_order_is_kept():
    g = go.Graph("good")
    A, B = g.input("A", (50, 50)), g.input("B", (50, 50))
    v = g.input("v", (50,))
    g.output(go.einsum("ij,j->i", A, go.einsum("ij,j->i", B, v)))
    G, H, rec = run(g)
    assert as_written(H) == ir.structural_hash(G)
    assert all("contraction" in H.nodes[n]["attrs"] for n in einsum_nodes(H))
    assert rec["merged"] == 0 and rec["flops_after"] == rec["flops_before"]
    (kept,) = rec["kept_user_order"]
    assert "user order costs" in kept["reason"]


def test_greedy_worse_than_user_keeps_user_order():
    # A custom path search that always contracts left to right over the merged operands
    # (here: the worst order) must lose to the user's own.
    class LeftToRight(opt_einsum.paths.PathOptimizer):
        def __call__(self, inputs, output, size_dict, memory_limit=None):
            return left_to_right(len(inputs))

    g = go.Graph("g")
    A, B = g.input("A", (40, 40)), g.input("B", (40, 40))
    v = g.input("v", (40,))
    g.output(go.einsum("ij,j->i", A, go.einsum("ij,j->i", B, v)))
    G, H, rec = run(g, optimize=LeftToRight())
    assert rec["groups"][0]["optimizer"] == "LeftToRight"
    assert rec["merged"] == 0 and as_written(H) == ir.structural_hash(G)


def test_transposes_and_scalar_factors_merge(rng):
    g = go.Graph("ts")
    A, B = g.input("A", (40, 40)), g.input("B", (40, 40))
    v, s = g.input("v", (40,)), g.input("s", ())
    g.output(go.einsum("ij,j->i", ((A @ B) * s).T * 2.0, v))
    G, H, rec = run(g)
    (group,) = rec["groups"]
    assert sorted(group["ops"]) == ["einsum", "einsum", "mul", "mul", "transpose"]
    assert group["operands"] == 5 and group["decision"] == "reordered"
    assert {H.nodes[n]["op"] for n in H} == {"input", "const", "einsum"}
    assert rec["flops_after"] < rec["flops_before"]
    assert_same(G, H, rng)


def test_repeated_labels_and_labels_reused_across_einsums(rng):
    g = go.Graph("labels")
    A, B = g.input("A", (6, 5)), g.input("B", (5, 6))
    C, v = g.input("C", (6, 7)), g.input("v", (5,))
    X = go.einsum("ij,jk->ik", A, B)           # j summed here ...
    t = go.einsum("ii->i", X)                  # ... diagonal: both of X's labels are one
    Y = go.einsum("ij,j->i", A, v)             # j summed here too
    Z = go.einsum("j,jk->k", Y, C)             # ... and j reused with another meaning
    g.output(go.einsum("i,k->ik", t, Z))
    G, H, rec = run(g)
    (group,) = rec["groups"]
    assert group["operands"] == 5
    eq = group["equation"]
    ins, out = eq.split("->")
    assert len(set(eq) - set(",->")) == 5  # i(=k of X), j of X, i of Y, j of Y, k of Z
    assert_same(G, H, rng)


def test_memory_limit_prefers_an_order_that_fits(rng):
    # (AB)C is cheaper but builds a 100x2 intermediate; A(BC) builds 14x14 = 196 elements.
    g = go.Graph("limit")
    A, B, C = g.input("A", (100, 14)), g.input("B", (14, 2)), g.input("C", (2, 14))
    D = g.input("D", (14, 3))
    g.output(go.einsum("ij,jk->ik", (A @ B) @ C, D))
    G, H, free = run(g)
    assert free["largest_intermediate_after"]["elements"] == 200
    limit = 196 * 8
    G, H, rec = run(g, memory_limit=limit)
    assert rec["largest_intermediate_after"]["bytes"] <= limit
    (group,) = rec["groups"]
    assert group["decision"] == "reordered" and "exceeds the memory limit" in group["reason"]
    assert free["flops_after"] < rec["flops_after"] < rec["flops_before"]
    inner = [n for n in einsum_nodes(H) if n not in H.graph["outputs"]]
    assert inner and max(ir.nbytes(H, n) for n in inner) <= limit
    assert rec["needs_slicing"] == []
    assert_same(G, H, rng)


def test_memory_limit_nothing_fits_keeps_one_node_for_slicing(rng):
    g = go.Graph("slice")
    A, B, C = g.input("A", (2, 50)), g.input("B", (50, 50)), g.input("C", (50, 2))
    g.output(go.einsum("ij,jk->ik", A @ B, C))
    G, H, rec = run(g, memory_limit=50 * 8)
    (s,) = rec["needs_slicing"]
    node = H.nodes[s["node"]]
    assert node["op"] == "einsum" and len(ir.operands(H, s["node"])) == 3
    path = node["attrs"]["contraction"].path
    assert list(path) == s["path"] and all(isinstance(p, tuple) for p in path)
    assert s["largest_intermediate"]["elements"] == 100 and s["memory_limit"] == 400
    assert rec["groups"][0]["decision"] == "needs slicing"
    # FLOPs of the kept node follow its path, as opt_einsum counts them.
    path_cost = opt_einsum.contract_path(node["attrs"]["equation"], *(
        H.nodes[u]["shape"] for u in ir.operands(H, s["node"])), shapes=True,
        optimize=list(path))[1].opt_cost
    assert cost.node_flops(H, s["node"]) == path_cost == rec["flops_after"]
    assert_same(G, H, rng)
    # Running again leaves it as it is.
    _, H2, rec2 = run(H, memory_limit=50 * 8)
    assert ir.structural_hash(H2) == ir.structural_hash(H)


def test_multi_operand_einsum_is_split_pairwise(rng):
    g = go.Graph("multi")
    ts = [g.input(f"m{i}", (8, 8)) for i in range(5)]
    g.output(go.einsum("ab,bc,cd,de,ef->af", *ts))
    G, H, rec = run(g)
    assert rec["groups"][0]["decision"] == "reordered"
    assert all(len(ir.operands(H, n)) == 2 for n in einsum_nodes(H))
    assert rec["flops_after"] <= rec["flops_before"]
    assert_same(G, H, rng)


def test_optimize_choices_and_invalid():
    g = bad_chain(20)
    for opt in ("optimal", "dp", "branch-2", opt_einsum.paths.DynamicProgramming()):
        _, _, rec = run(g, optimize=opt)
        assert rec["flops_after"] == 3 * 2 * 20**2
    _, _, rec = run(g, optimize="greedy")  # a heuristic: better than the user's, not optimal
    assert 3 * 2 * 20**2 < rec["flops_after"] < rec["flops_before"]
    with pytest.raises(GraphError, match="not a contraction path search"):
        run(g, optimize="fastest")


def test_idempotent_and_details_match_graph():
    G, H, rec = run(bad_chain(10))
    _, H2, rec2 = run(H)
    assert ir.structural_hash(H2) == ir.structural_hash(H)
    assert rec2["merged"] == 0 and rec2["flops_before"] == rec2["flops_after"] == rec["flops_after"]


def test_labels_beyond_ascii_are_letters():
    assert [label(i) for i in range(3)] == ["a", "b", "c"]
    assert all(label(i).isalpha() for i in range(600))
    assert len({label(i) for i in range(600)}) == 600


def chain_graph(n_ops, d=3):
    g = go.Graph("long")
    ms = [g.input(f"m{i}", (d, d)) for i in range(n_ops)]
    acc = ms[0]
    for m in ms[1:]:
        acc = go.einsum("ij,jk->ik", acc, m)
    g.output(acc)
    return g


@pytest.mark.parametrize("form", ["nested", "one_einsum"])
def test_200_operand_chain_compiles_fast_with_auto(form, rng):
    n = 200
    if form == "nested":
        g = chain_graph(n)
    else:
        g = go.Graph("wide")
        ms = [g.input(f"m{i}", (3, 3)) for i in range(n)]
        eq = ",".join(label(i) + label(i + 1) for i in range(n)) + "->" + label(0) + label(n)
        g.output(go.einsum(eq, *ms))
    G = g.to_ir()
    t0 = time.perf_counter()
    res = contraction(G, PassContext(optimize="auto"))
    pass_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    plan = go.compile(g, backend="numpy", cache=False)
    compile_s = time.perf_counter() - t0
    rec = res.record
    group = rec["groups"][0]
    assert group["operands"] == n and group["optimizer"] == group["search"]["searcher"]
    assert group["search"]["cache"] in ("hit", "miss")
    assert pass_s < 5 and compile_s < 20, (pass_s, compile_s)
    assert rec["flops_after"] <= rec["flops_before"]
    arrays = [rng.uniform(0.2, 0.5, (3, 3)) for _ in range(n)]
    expected = np.linalg.multi_dot(arrays)
    assert math.isfinite(expected.max()) and expected.max() > 0
    np.testing.assert_allclose(plan(*arrays), expected, rtol=1e-9)


def test_group_feeding_another_group_is_rewired(rng):
    g = go.Graph("two_groups")
    A, B, C, D = (g.input(k, (30, 30)) for k in "ABCD")
    W = g.input("W", (30, 2))
    X = (A @ B) @ W                       # used twice: the root of its own group
    g.output(((C @ D) @ X, X.sum()))      # (C D) X feeds on the rewritten X
    G, H, rec = run(g)
    assert rec["merged"] == 2 and rec["flops_after"] < rec["flops_before"]
    assert_same(G, H, rng)


def test_compile_reports_contraction(rng):
    g = bad_chain(40)
    plan = go.compile(g, backend="numpy", cache=False)
    details = plan.report["contraction"].details
    assert details["flops_after"] < details["flops_before"]
    assert plan.report.flops_optimized < plan.report.flops_naive
    arrays = [rng.standard_normal((40, 40)) for _ in range(3)] + [rng.standard_normal(40)]
    A, B, C, v = arrays
    np.testing.assert_allclose(plan(*arrays), A @ B @ C @ v, rtol=1e-9)


@pytest.mark.parametrize("seed", range(4))
def test_the_written_order_of_a_network_is_counted_once_by_one_rule(seed):
    # the pass weighs a lone einsum's written order by ``cost.written_order_cost``, the
    # memo that counting the node's FLOPs reads: the same figures as counting it afresh
    from opt_einsum.testing import rand_equation

    from graphopt.contraction.paths import left_to_right_cost, split_equation
    from graphopt.passes.contraction import user_cost

    eq, shapes = rand_equation(12, 3, seed=seed, d_min=2, d_max=4)
    g = go.Graph("net")
    g.output(go.einsum(eq, *[g.input(f"x{i}", s) for i, s in enumerate(shapes)]))
    G = g.to_ir()
    (group,) = find_groups(G)
    root = group[0]
    shaped = tuple(tuple(G.nodes[u]["shape"]) for u in ir.operands(G, root))
    written = cost.written_order_cost(G.nodes[root]["attrs"]["equation"], shaped)
    terms, out = split_equation(G.nodes[root]["attrs"]["equation"])
    sizes = {c: d for t, s in zip(terms, shaped) for c, d in zip(t, s)}
    assert written == left_to_right_cost(terms, out, sizes)
    assert user_cost(G, group, written) == user_cost(G, group) == written
    assert cost.node_flops(G, root) == written[0]
