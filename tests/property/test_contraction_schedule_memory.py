"""Property suites for the contraction, schedule and memory passes (hypothesis graphs, the
interpreter as the oracle)."""

import re

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.analysis import cost
from graphopt.ir.interpreter import interpret
from graphopt.passes import PASSES, PassContext, PassManager
from graphopt.passes.contraction import contraction
from graphopt.passes.memory import check_layout, memory
from graphopt.passes.schedule import peak_of, schedule
from graphopt.testing import (
    assert_pass_preserves_semantics,
    assert_plan_matches_interpreter,
    graphs,
    inputs_for,
)

# Graphs rich in contraction groups: chains, multi-operand einsums, transposes, scalings.
CONTRACTION_OPS = ("einsum", "chain", "matmul", "layout", "binary", "unary", "const", "shared")
LIMIT = 48  # bytes: 6 float64 elements, small enough to bind on many groups
TINY = 8    # bytes: one element: most groups can only be kept whole, for slicing
# how a refused memory_limit states what does not fit (bytes, each above the limit)
REFUSALS = (r"take (\d+) bytes of memory_limit", r"the least found was (\d+) bytes",
            r"unsliced it needs (\d+) bytes", r"predicted peak is (\d+) bytes",
            r"(?:holds|needs as workspace) (\d+) bytes on its own")


@st.composite
def einsum_trees(draw):
    """Trees of pairwise einsums over a few labels, with repeated labels (diagonals), labels
    summed in one einsum and reused in the next, transposes, scalar factors, and now and
    then an intermediate that is also an output (which blocks a merge)."""
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=5))
    labels = "abcde"[:len(sizes)]
    size = dict(zip(labels, sizes))
    g = go.Graph("tree")
    pool = []
    for i in range(draw(st.integers(2, 6))):
        term = draw(st.lists(st.sampled_from(labels), max_size=3, unique=True))
        pool.append(g.input(f"x{i}", tuple(size[c] for c in term)))
    s = g.input("s", ())
    extra = []

    def term_for(t):
        return "".join(draw(st.sampled_from([c for c in labels if size[c] == d]))
                       for d in t.shape)

    while len(pool) > 1:
        i, j = draw(st.lists(st.integers(0, len(pool) - 1), min_size=2, max_size=2,
                             unique=True))
        ta, tb = term_for(pool[i]), term_for(pool[j])
        union = list(dict.fromkeys(ta + tb))
        out = "".join(draw(st.permutations(union))[:draw(st.integers(0, min(3, len(union))))])
        t = go.einsum(f"{ta},{tb}->{out}", pool[i], pool[j])
        if t.ndim >= 2 and draw(st.booleans()):
            t = go.transpose(t, draw(st.permutations(range(t.ndim))))
        if draw(st.integers(0, 2)) == 0:
            t = t * s if draw(st.booleans()) else 0.5 * t
        if draw(st.integers(0, 5)) == 0:
            extra.append(t)
        pool = [p for k, p in enumerate(pool) if k not in (i, j)] + [t]
    g.output(tuple([pool[0]] + extra) if extra else pool[0])
    return g


def test_contraction_preserves_semantics():
    assert_pass_preserves_semantics(contraction, max_examples=40, ops=CONTRACTION_OPS)


def test_contraction_under_memory_limit_preserves_semantics():
    assert_pass_preserves_semantics(contraction, max_examples=25, ops=CONTRACTION_OPS,
                                    ctx=PassContext(memory_limit=LIMIT))


def test_contraction_on_einsum_trees_preserves_semantics():
    assert_pass_preserves_semantics(contraction, max_examples=40, graphs=einsum_trees())
    for limit in (LIMIT, TINY):
        assert_pass_preserves_semantics(contraction, max_examples=20, graphs=einsum_trees(),
                                        ctx=PassContext(memory_limit=limit))


def test_contraction_with_greedy_preserves_semantics():
    assert_pass_preserves_semantics(contraction, max_examples=15, ops=CONTRACTION_OPS,
                                    ctx=PassContext(optimize="greedy"))


@given(st.one_of(graphs(max_nodes=20, ops=CONTRACTION_OPS), einsum_trees()),
       st.sampled_from([None, LIMIT, TINY]))
def test_contraction_flops_never_increase_and_it_is_idempotent(g, limit):
    G = g.to_ir()
    ctx = PassContext(memory_limit=limit)
    res = contraction(G, ctx)
    H, rec = res.graph, res.record
    ir.verify(H)
    assert rec["flops_before"] == cost.graph_flops(G)
    assert rec["flops_after"] == cost.graph_flops(H)
    for group in rec["groups"]:
        fits_before = limit is None or group["largest_intermediate_before"]["bytes"] <= limit
        if fits_before:  # a memory limit may force more FLOPs, nothing else may
            assert group["flops_after"] <= group["flops_before"], group
        # (a group kept as one node along its path is the slicing pass's to bound)
        if group["decision"] == "reordered" and limit is not None and \
                group.get("emitted") != "one node along the path":
            assert group["largest_intermediate_after"]["bytes"] <= limit, group
        if group["decision"] == "kept user order" and limit is not None:
            assert fits_before, group
    if limit is None:
        assert rec["flops_after"] <= rec["flops_before"]
    again = contraction(H, ctx)
    assert again.record["flops_after"] == rec["flops_after"]
    assert ir.structural_hash(again.graph) == ir.structural_hash(H)


def test_schedule_preserves_semantics():
    assert_pass_preserves_semantics(schedule, max_examples=20)


@given(graphs(max_nodes=24))
def test_schedule_peak_never_exceeds_topological_order(g):
    G = g.to_ir()
    res = schedule(G, PassContext())
    H = res.graph
    ir.verify(H)  # checks the schedule is a topological order of every node
    assert peak_of(H, H.graph["schedule"]) == res.record["peak_after"]
    assert res.record["peak_after"] <= peak_of(G, ir.topo_order(G))


def _pipeline(names):
    return [n for n in names if n in PASSES]


@given(graphs(max_nodes=24))
def test_memory_plan_is_sound(g):
    G = g.to_ir()
    H, _ = PassManager(_pipeline(["fusion", "schedule"])).run(G, PassContext())
    res = memory(H, PassContext())
    ir.verify(res.graph)
    plan = res.graph.graph["arena_layout"]
    check_layout(res.graph, plan)
    outs, ins = set(res.graph.graph["outputs"]), set(res.graph.graph["inputs"])
    consts = {n for n in res.graph if res.graph.nodes[n]["op"] == "const"}
    arena = set(plan.offsets)
    assert not arena & (outs | ins | consts)
    for n, u in plan.inplace.items():
        assert n in arena and u in arena and ir.nbytes(res.graph, n) == ir.nbytes(res.graph, u)
        assert plan.intervals[u][1] == plan.intervals[n][0]
    assert res.record["lower_bound_bytes"] <= res.record["planned_bytes"] <= \
        res.record["naive_bytes"]


def _compile_matches_interpreter(g, data, **compile_kwargs):
    G = g.to_ir()
    inputs = data.draw(inputs_for(G), label="inputs")
    try:
        plan = go.compile(g, backend="numpy", cache=False, **compile_kwargs)
    except go.GraphError as e:
        # A budget that no order or slicing meets is refused before anything runs, with
        # the numbers: what the values a contraction reads and writes take, the least a
        # slicing needs, the plan's predicted peak, or one value or step alone.
        limit = compile_kwargs.get("memory_limit")
        found = [int(m) for pattern in REFUSALS for m in re.findall(pattern, str(e))]
        assert limit is not None and found and max(found) > limit, str(e)
        return
    assert_plan_matches_interpreter(G, plan, inputs, calls=3)  # later calls reuse the arena
    check_layout(plan.graph, plan.memory)


@given(graphs(max_nodes=20), st.data())
def test_end_to_end_with_these_passes(g, data):
    _compile_matches_interpreter(
        g, data, passes=_pipeline(["contraction", "fusion", "schedule", "memory"]))


@given(graphs(max_nodes=20, ops=CONTRACTION_OPS), st.data(), st.sampled_from([None, LIMIT]))
def test_end_to_end_default_pipeline(g, data, limit):
    _compile_matches_interpreter(g, data, memory_limit=limit)


def test_inplace_reuse_happens_on_elementwise_chains():
    g = go.Graph("chain")
    x = g.input("x", (8, 8))
    y = x
    for f in (go.exp, go.tanh, go.sin, go.cos):
        y = f(y)
    g.output(y.sum())
    plan = go.compile(g, backend="numpy", passes=["schedule", "memory"], cache=False)
    assert len(plan.memory.inplace) == 3 and plan.memory.planned_bytes == 8 * 8 * 8
    xa = np.random.default_rng(1).standard_normal((8, 8))
    np.testing.assert_allclose(plan(xa), interpret(g.to_ir(), xa), rtol=1e-12)
