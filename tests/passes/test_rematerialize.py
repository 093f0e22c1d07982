"""The rematerialize pass: under memory_limit, values are recomputed rather than held,
chosen by cost; results never change; a limit that cannot be met is refused before running."""

import numpy as np
import pytest

import graphopt as go
from graphopt import ir
from graphopt.analysis.call_bytes import STEP_BYTES
from graphopt.errors import GraphError
from graphopt.passes import PassContext, PassManager, pipeline_for
from graphopt.passes.rematerialize import arena_bytes, rematerialize
from graphopt.testing import assert_grad_correct
from graphopt.workloads import tanh_chain


def deep_tanh(layers=6, batch=64, width=128, dtype="float32"):
    """A deep tanh chain with a mean-square loss."""
    g = go.Graph("deep")
    h = g.input("x", (batch, width), dtype)
    ws = [g.input(f"w{i}", (width, width), dtype) for i in range(layers)]
    for w in ws:
        h = go.tanh(h @ w)
    g.output({"loss": (h * h).mean()})
    return g


def deep_tanh_gradient(layers=6, batch=64, width=128):
    """The gradient of a deep tanh chain: every layer's activation is held for the backward
    pass, which reads them in reverse."""
    return go.grad(deep_tanh(layers, batch, width), of="loss",
                   wrt=[f"w{i}" for i in range(layers)])


def deep_inputs(layers=6, batch=64, width=128, seed=0):
    rng = np.random.default_rng(seed)
    out = {"x": rng.standard_normal((batch, width)).astype(np.float32)}
    for i in range(layers):
        out[f"w{i}"] = (rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float32)
    return out


def before_rematerialize(graph, backend="numba"):
    """The IR as the opt_level 2 pipeline hands it to the rematerialize pass."""
    names = pipeline_for(2)
    head = names[:names.index("rematerialize")]
    return PassManager(head).run(graph.to_ir(), PassContext(backend=backend))[0]


def test_without_memory_limit_it_does_nothing():
    G = before_rematerialize(deep_tanh_gradient())
    res = rematerialize(G, PassContext())
    assert res.graph is G and res.record == {}


def test_an_arena_within_the_limit_is_left_alone():
    G = before_rematerialize(deep_tanh_gradient())
    arena = arena_bytes(G)
    res = rematerialize(G, PassContext(memory_limit=arena))
    assert res.graph is G
    assert res.record["met"] and res.record["recomputed"] == [] and res.record["extra_flops"] == 0


@pytest.mark.parametrize("fraction", [0.8, 0.6])
def test_recomputation_lowers_the_arena_to_the_budget(fraction):
    G = before_rematerialize(deep_tanh_gradient())
    before = arena_bytes(G)
    limit = int(before * fraction)
    res = rematerialize(G, PassContext(memory_limit=limit))
    H, d = res.graph, res.record
    ir.verify(H)
    assert d["arena_before"] == before
    assert d["met"] and d["arena_after"] <= limit < before
    assert d["arena_after"] == arena_bytes(H)
    assert d["recomputed_count"] >= 1 and d["extra_flops"] > 0
    copies = [n for n in H if "recomputes" in H.nodes[n]]
    assert len(copies) == len(d["recomputed"]) + len(d["moved"])
    for v in d["recomputed"]:
        original, copy = H.nodes[v["node"]], H.nodes[v["copy"]]
        assert copy["recomputes"] == v["node"] and copy["op"] == original["op"]
        assert copy["src"] == original["src"]          # the user's line, as the original's
    # the memory pass plans the order the rematerialize pass leaves
    planned = PassManager(["memory"]).run(H, PassContext())[0].graph["arena_layout"]
    assert planned.planned_bytes == d["arena_after"]


def test_a_tighter_limit_recomputes_more():
    G = before_rematerialize(deep_tanh_gradient())
    before = arena_bytes(G)
    loose = rematerialize(G, PassContext(memory_limit=int(before * 0.8))).record
    tight = rematerialize(G, PassContext(memory_limit=int(before * 0.6))).record
    assert tight["extra_flops"] > loose["extra_flops"] > 0
    assert tight["arena_after"] < loose["arena_after"]


def test_a_value_needed_only_late_is_moved_at_no_cost():
    # in id order, ``early`` is computed first and held through the chain: computing it
    # where it is needed lowers the peak without recomputing anything
    g = go.Graph("late")
    x, y = g.input("x", (256,)), g.input("y", (64,))
    early = go.exp(x)
    h = y
    for _ in range(4):
        h = go.tanh(h) * 2.0
    g.output(early + h.sum())
    G = g.to_ir()
    G.graph["schedule"] = ir.topo_order(G)
    before = arena_bytes(G)
    res = rematerialize(G, PassContext(memory_limit=before - 1))
    d = res.record
    assert d["moved"] == [early.id] and d["recomputed"] == [] and d["extra_flops"] == 0
    assert d["met"] and d["arena_after"] < before
    plan = go.compile(g, backend="numpy", passes=["rematerialize", "memory"], cache=False,
                      memory_limit=plan_limit(g, before))
    args = {"x": np.linspace(-1, 1, 256), "y": np.linspace(0, 1, 64)}
    ref = go.compile(g, backend="numpy", opt_level=0)
    np.testing.assert_array_equal(plan(**args), ref(**args))
    assert plan.memory.planned_bytes < before


def plan_limit(g, arena):
    """A limit one byte under ``arena`` plus the numpy plan's largest step workspace."""
    plan = go.compile(g, backend="numpy", passes=["memory"], cache=False)
    return arena - 1 + plan.predicted_peak_bytes - plan.arena_bytes


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_recomputed_plan_gives_the_same_results_within_the_limit(backend):
    if backend == "numba":
        pytest.importorskip("numba")
    graph, inputs = deep_tanh_gradient(), deep_inputs()
    free = go.compile(graph, backend=backend, cache=False)
    limit = int(free.predicted_peak_bytes * 0.75)
    tight = go.compile(graph, backend=backend, memory_limit=limit, cache=False)
    assert tight.predicted_peak_bytes <= limit < free.predicted_peak_bytes
    (loss0, g0), (loss1, g1) = free(**inputs), tight(**inputs)
    assert loss0 == loss1
    for k in g0:
        np.testing.assert_array_equal(g0[k], g1[k])
    facts = tight.report.gradient["recomputation"]
    assert facts["recomputed_count"] >= 1
    assert facts["arena_after"] < facts["arena_before"]
    text = str(tight.report)
    assert "recomputed rather than held" in text and "without recomputation" in text
    assert "rematerialize" in text and "recomputed as node" in text


def test_numpy_workspace_is_kept_free_of_the_arena():
    # the NumPy reference kernels hold a result-sized workspace beside the arena: the first
    # plan's arena fits the limit but its peak does not, so compile plans again with room
    graph = deep_tanh_gradient()
    free = go.compile(graph, backend="numpy", cache=False)
    assert free.predicted_peak_bytes > free.arena_bytes
    limit = free.arena_bytes + 1
    plan = go.compile(graph, backend="numpy", memory_limit=limit, cache=False)
    assert plan.predicted_peak_bytes <= limit
    d = next(r.details for r in plan.report.records if r.name == "rematerialize")
    assert d["budget_bytes"] < limit      # the second plan kept the workspace free


def test_a_limit_recomputation_cannot_meet_is_refused_before_running():
    graph = deep_tanh_gradient()
    with pytest.raises(GraphError, match=r"memory_limit=\d+ bytes cannot be met.*Recomputing "
                                         r"\d+ value\(s\) instead of holding them lowered the "
                                         r"arena from \d+ to \d+ bytes.*no order holds less "
                                         r"than \d+ bytes"):
        go.compile(graph, backend="numba", memory_limit=80_000, cache=False)


@pytest.mark.parametrize("opt_level", [0, 1])
def test_a_refusal_below_opt_level_2_names_the_passes_that_fit_a_limit(opt_level):
    with pytest.raises(GraphError, match=r"did not run slicing, schedule, rematerialize: "
                                         r"compile with opt_level=2"):
        go.compile(deep_tanh_gradient(), backend="numpy", opt_level=opt_level,
                   memory_limit=100_000, cache=False)


def tanh_chain_gradient(layers=12, n=256):
    """The gradient of ``workloads.tanh_chain``: each value is an n x n float64 array."""
    f, x, w = tanh_chain(layers, n)
    return go.grad(f), x, w


def test_a_deep_chain_where_no_single_eviction_helps_fits_by_checkpointing():
    # the backward pass reads the forward values in reverse: every one is held across the
    # peak, and evicting one only moves the liveness to the value it is recomputed from
    grad, x, w = tanh_chain_gradient()
    free = go.jit(grad, backend="numba")
    limited = go.jit(grad, backend="numba", memory_limit=2 << 20)
    plan = limited.plan_for(x, w)
    d = next(r.details for r in plan.report.records if r.name == "rematerialize")
    assert free.plan_for(x, w).arena_bytes >= 13 * 256 * 256 * 8
    assert d["met"] and plan.predicted_peak_bytes <= 2 << 20
    assert d["solver"].startswith("checkpoints")
    assert d["floor_bytes"] <= d["arena_after"] and d["floor_gap"] == round(
        d["arena_after"] / d["floor_bytes"], 3)
    np.testing.assert_array_equal(limited(x, w), free(x, w))


def test_the_cheapest_checkpoints_are_kept():
    # with room for more than the least-memory order, the search keeps values rather than
    # recompute everything from the inputs (12 values: by spacing, then greedily)
    grad, x, w = tanh_chain_gradient(layers=12, n=64)
    want = go.jit(grad, backend="numba")(x, w)
    records = []
    for arrays in (4, 5):
        fn = go.jit(grad, backend="numba", memory_limit=arrays * 64 * 64 * 8 + 8192)
        plan = fn.plan_for(x, w)
        records.append(next(r.details for r in plan.report.records
                            if r.name == "rematerialize"))
        np.testing.assert_array_equal(fn(x, w), want)
    assert [d["solver"] for d in records] == ["checkpoints (greedy)"] * 2
    assert 0 < records[1]["extra_flops"] < records[0]["extra_flops"]


def test_a_few_candidates_are_searched_exactly():
    grad, x, w = tanh_chain_gradient(layers=6, n=64)
    fn = go.jit(grad, backend="numba", memory_limit=3 * 64 * 64 * 8 + 8192)
    d = next(r.details for r in fn.plan_for(x, w).report.records if r.name == "rematerialize")
    assert d["solver"] == "checkpoints (exact)" and d["met"] and d["floor_gap"] == 1.0
    np.testing.assert_array_equal(fn(x, w), go.jit(grad, backend="numba")(x, w))


def test_recomputation_is_deterministic():
    graph = deep_tanh_gradient()
    a = go.compile(graph, backend="numpy", memory_limit=300_000, cache=False)
    b = go.compile(graph, backend="numpy", memory_limit=300_000, cache=False)
    assert ir.structural_hash(a.graph) == ir.structural_hash(b.graph)
    assert a.graph.graph["schedule"] == b.graph.graph["schedule"]


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_gradients_under_a_tight_limit_match_finite_differences(backend):
    if backend == "numba":
        pytest.importorskip("numba")
    g = deep_tanh(layers=4, batch=8, width=16, dtype="float64")
    free = go.compile(go.grad(g, of="loss", wrt=["w0", "w3"]), backend=backend, cache=False)
    # 85 % of the arena, beside the largest step's workspace (the NumPy kernels hold one)
    # and the call's objects, with those of a few recomputed steps
    limit = free.predicted_peak_bytes - free.arena_bytes + int(free.arena_bytes * 0.85) + \
        4 * STEP_BYTES
    assert_grad_correct(g, of="loss", wrt=["w0", "w3"], backends=(backend,), opt_levels=(2,),
                        compile_options={"memory_limit": limit})
    plan = go.compile(go.grad(g, of="loss", wrt=["w0", "w3"]), backend=backend,
                      memory_limit=limit, cache=False)
    assert plan.report.gradient["recomputation"]["recomputed_count"] >= 1
