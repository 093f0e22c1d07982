"""Property suite for the rematerialize pass: on random graphs under memory limits that bind,
recomputation keeps the interpreter's results, the arena it reports is the one the memory
pass plans, and a compiled plan either fits the limit or is refused before running."""

import re

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.errors import GraphError
from graphopt.passes import PassContext, PassManager
from graphopt.passes.rematerialize import arena_bytes, rematerialize
from graphopt.testing import assert_pass_preserves_semantics, graphs, inputs_for
from graphopt.testing.gradcheck import gradient_graph, has_gradient
from graphopt.testing.plans import output_leaves

# bytes: a few float64 elements, below most random graphs' arenas
LIMITS = (8, 64, 256)


@pytest.mark.parametrize("limit", LIMITS)
def test_rematerialize_preserves_semantics(limit):
    assert_pass_preserves_semantics(rematerialize, max_examples=20,
                                    ctx=PassContext(memory_limit=limit), max_nodes=20)


@given(g=graphs(max_nodes=24), fraction=st.sampled_from([0.3, 0.6, 0.9]))
def test_reported_arena_is_the_planned_one_and_never_above_the_start(g, fraction):
    G, _ = PassManager(["fusion", "schedule"]).run(g.to_ir(), PassContext())
    before = arena_bytes(G)
    res = rematerialize(G, PassContext(memory_limit=max(1, int(before * fraction))))
    d, H = res.record, res.graph
    ir.verify(H)
    assert d["arena_before"] == before and d["arena_after"] <= before
    assert d["arena_after"] == arena_bytes(H)
    assert d["met"] == (d["arena_after"] + d["added_objects_bytes"] <= d["budget_bytes"])
    planned = PassManager(["memory"]).run(H, PassContext())[0].graph["arena_layout"]
    assert planned.planned_bytes == d["arena_after"]
    if H is not G:   # every copy computes what its original does, from the same operands' values
        for n in H:
            if "recomputes" in H.nodes[n]:
                orig = G.nodes[H.nodes[n]["recomputes"]]
                assert (H.nodes[n]["op"], H.nodes[n]["shape"]) == (orig["op"], orig["shape"])


@settings(max_examples=25)
@given(g=graphs(max_nodes=20), fraction=st.sampled_from([0.5, 0.8]), data=st.data())
def test_a_plan_under_memory_limit_fits_it_and_gives_the_same_results(g, fraction, data):
    free = go.compile(g, backend="numpy", cache=False)
    limit = max(1, int(free.predicted_peak_bytes * fraction))
    try:
        plan = go.compile(g, backend="numpy", memory_limit=limit, cache=False)
    except GraphError as e:
        assert re.search(rf"memory_limit={limit}\b", str(e)), e    # names the limit
        return
    assert plan.predicted_peak_bytes <= limit
    args = data.draw(inputs_for(g))
    want, got = free(**args), plan(**args)
    for a, b in zip(output_leaves(want), output_leaves(got)):
        np.testing.assert_array_equal(a, b)


@settings(max_examples=20)
@given(g=graphs(max_nodes=14, dtypes=("float64", "complex128")),
       backend=st.sampled_from(["numpy", "numba"]), data=st.data())
def test_gradient_graphs_under_memory_limit_give_the_same_results(g, backend, data):
    """Gradient graphs hold forward values for their backward pass: the case recomputation
    is for. Half the arena (beside the largest workspace) forces it on most of them."""
    pytest.importorskip(backend)
    assume(has_gradient(g))
    grad_graph, _ = gradient_graph(g)
    free = go.compile(grad_graph, backend=backend, cache=False)
    limit = free.predicted_peak_bytes - free.arena_bytes + free.arena_bytes // 2
    try:
        plan = go.compile(grad_graph, backend=backend, memory_limit=max(limit, 1), cache=False)
    except GraphError as e:
        assert "memory_limit=" in str(e)
        return
    assert plan.predicted_peak_bytes <= limit
    args = data.draw(inputs_for(grad_graph))
    for a, b in zip(output_leaves(free(**args)), output_leaves(plan(**args))):
        np.testing.assert_array_equal(a, b)

