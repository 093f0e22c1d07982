"""The slicing pass (graphopt/passes/slicing.py), on lattice networks whose helpers the
slice-search, sliced-contraction and dask tests share."""

import math

import numpy as np
import opt_einsum
import pytest

import graphopt as go
from graphopt import ir
from graphopt.analysis.call_bytes import plan_objects_bytes
from graphopt.contraction.paths import default_path, play
from graphopt.contraction.slicing.run import contraction_workspace_bytes
from graphopt.errors import GraphError
from graphopt.ir.einsum import label
from graphopt.passes import PassContext
from graphopt.passes.contraction import contraction as contraction_pass
from graphopt.passes.slicing import SLICE_HEADROOM, slicing

# Every test runs twice: every GEMM-shaped pair step a GEMM (the arrays are small), then
# graphopt's default (small pair steps on np.einsum).
pytestmark = pytest.mark.usefixtures("pair_step_form")


def grid_equation(rows: int, cols: int) -> str:
    """A closed rows x cols lattice tensor network (PEPS norm-like), contracted to a scalar."""
    labels: dict = {}
    terms = []
    for i in range(rows):
        for j in range(cols):
            t = ""
            for a, b in (((i, j), (i + 1, j)), ((i, j), (i, j + 1)), ((i - 1, j), (i, j)),
                         ((i, j - 1), (i, j))):
                if all(0 <= x < rows and 0 <= y < cols for x, y in (a, b)):
                    t += labels.setdefault((a, b), label(len(labels)))
            terms.append(t)
    return ",".join(terms) + "->"


def network_graph(eq: str, bond: int, dtype="float64"):
    terms = eq.split("->")[0].split(",")
    g = go.Graph("network")
    ins = [g.input(f"t{k}", (bond,) * len(t), dtype) for k, t in enumerate(terms)]
    g.output(go.einsum(eq, *ins))
    return g


def network_inputs(eq: str, bond: int, seed=0) -> dict:
    rng = np.random.default_rng(seed)
    terms = eq.split("->")[0].split(",")
    # scaled so the scalar stays O(1) whatever the network size
    return {f"t{k}": rng.standard_normal((bond,) * len(t)) / math.sqrt(bond)
            for k, t in enumerate(terms)}


def reference(eq: str, inputs: dict):
    return opt_einsum.contract(eq, *inputs.values(), optimize="greedy")


# -------------------------------------------------------------------------------- pass


def test_pass_without_memory_limit_changes_nothing():
    g = network_graph(grid_equation(3, 3), 2)
    G = g.to_ir()
    res = slicing(G, PassContext())
    assert ir.structural_hash(res.graph) == ir.structural_hash(G)
    assert res.record["sliced"] == [] and res.record["memory_limit"] is None


def test_compiled_network_runs_sliced_within_the_limit_and_equals_unsliced():
    eq, bond = grid_equation(5, 5), 6
    g = network_graph(eq, bond)
    inputs = network_inputs(eq, bond)
    unsliced = go.compile(g, backend="numpy", cache=False)
    assert not unsliced.graph.nodes[unsliced.steps[0].node]["attrs"]["contraction"].slices
    limit = unsliced.predicted_peak_bytes // 4
    plan = go.compile(g, backend="numpy", memory_limit=limit, cache=False)
    rec = plan.report["slicing"].details
    (sliced,) = rec["sliced"]
    # the whole plan's predicted peak (its one step's workspace) is within the limit
    assert plan.predicted_peak_bytes == sliced["predicted_peak_bytes"] + plan.objects_bytes <= limit
    assert sliced["largest_intermediate_bytes"] < sliced["largest_intermediate_unsliced_bytes"]
    assert sliced["n_slices"] > 1 and rec["flop_overhead"] >= 1.0
    assert rec["slices"] == {str(sliced["node"]): sliced["slices"]}
    node = plan.graph.nodes[sliced["node"]]
    assert list(node["attrs"]["contraction"].slices) == sliced["slices"]
    assert plan.steps[0].kernel.impl == "numpy-sliced"
    np.testing.assert_allclose(plan(**inputs), reference(eq, inputs), rtol=1e-9)
    np.testing.assert_allclose(plan(**inputs), unsliced(**inputs), rtol=1e-9)


@pytest.mark.parametrize("threads", [1, 2])
def test_slices_are_cut_to_run_at_once_where_it_costs_no_flops(threads):
    # slicing the output label i costs nothing: with 2 threads the pass cuts slices of half
    # the limit and runs two at once (their steps average well over WORKER_MIN_FLOPS); the
    # report says so
    eq, (i, a) = "ia,ib,ic,abc->i", (1024, 64)
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in [(i, a), (i, a), (i, a), (a, a, a)]]
    g = go.Graph("parallel_slices")
    g.output(go.einsum(eq, *(g.input(f"t{k}", x.shape) for k, x in enumerate(arrays))))
    limit = 8 * i * a * a // 4
    plan = go.compile(g, backend="numpy", memory_limit=limit, threads=threads, cache=False)
    (rec,) = plan.report["slicing"].details["sliced"]
    assert rec["slice_workers"] == threads and rec["flop_overhead"] == 1.0
    assert threads * rec["largest_intermediate_bytes"] <= limit
    step = plan.steps[0]
    assert step.kernel.impl == "numpy-sliced" and step.kernel.details["slice_workers"] == threads
    assert f"up to {threads} slice(s) at once" in str(plan.report)
    # sums of 262144 products: bounded by a few ulps of the same sum of |products|
    bound = 16 * np.finfo(np.float64).eps * np.einsum(eq, *[np.abs(x) for x in arrays])
    assert np.all(np.abs(plan(*arrays) - np.einsum(eq, *arrays)) <= bound)


def test_a_backend_that_runs_slices_one_after_another_gets_slices_for_one():
    # the cupy backend (``slices_at_once`` False): the example above, whose slices cost
    # nothing more cut for two threads, is cut for one at a time whatever the threads
    eq, (i, a) = "ia,ib,ic,abc->i", (1024, 64)
    g = go.Graph("serial_slices")
    g.output(go.einsum(eq, *(g.input(f"t{k}", s) for k, s in
                             enumerate([(i, a), (i, a), (i, a), (a, a, a)]))))
    G = g.to_ir()
    limit = 8 * i * a * a // 4
    for at_once, workers in ((True, 2), (False, 1)):
        ctx = PassContext(memory_limit=limit, options={"threads": 2},
                          slices_at_once=at_once)
        H = slicing(contraction_pass(G, ctx).graph, ctx).graph
        (n,) = [m for m in H if H.nodes[m]["op"] == "einsum" and
                H.nodes[m]["attrs"]["contraction"].slices]
        assert H.nodes[n]["attrs"]["contraction"].workers == workers


def test_slices_run_one_at_a_time_where_two_at_once_do_not_fit():
    # a 5x6 lattice at bond 8 under 384 KiB: two of its slices at once do not fit (and the
    # pass kept them over slices cut for two at once), so its slices run one at a time, each
    # with the call's threads for its GEMMs (the path is the default search's, which is
    # counted, not timed, so the same on any machine; under 512 KiB its path's slices fit
    # two at once)
    eq, bond = grid_equation(5, 6), 8
    g = network_graph(eq, bond)
    limit = 3 * 2 ** 17
    plan = go.compile(g, backend="numpy", memory_limit=limit, threads=2, cache=False)
    (rec,) = plan.report["slicing"].details["sliced"]
    assert rec["slice_workers"] == 1 and rec["n_slices"] > 1
    assert plan.predicted_peak_bytes == rec["predicted_peak_bytes"] + plan.objects_bytes <= \
        limit * SLICE_HEADROOM
    shapes = [(bond,) * len(t) for t in eq.split("->")[0].split(",")]
    two = contraction_workspace_bytes(eq, shapes, rec["path"], rec["slices"],
                                      rec["slice_blocks"], "float64", 2)
    assert two > limit * SLICE_HEADROOM      # the chosen slices, two at once
    inputs = network_inputs(eq, bond)
    np.testing.assert_allclose(plan(**inputs), reference(eq, inputs), rtol=1e-9)


def test_sliced_plan_allocates_what_it_predicts_within_the_limit():
    # a 4x5 lattice at bond 8: unsliced, its greedy path holds 6 MiB at once; under a
    # quarter of that it runs sliced, and a call allocates (tracemalloc, beside inputs and
    # outputs) within 10 % of the predicted peak, and within the limit
    eq, bond = grid_equation(4, 5), 8
    g = network_graph(eq, bond)
    inputs = network_inputs(eq, bond)
    unsliced = go.compile(g, backend="numpy", cache=False, optimize="greedy")
    expected = unsliced(**inputs)
    whole = unsliced.measure_peak_bytes(**inputs)
    assert abs(whole - unsliced.predicted_peak_bytes) <= 0.1 * unsliced.predicted_peak_bytes
    limit = unsliced.predicted_peak_bytes // 4
    plan = go.compile(g, backend="numpy", memory_limit=limit, cache=False, optimize="greedy",
                      threads=1)
    (sliced,) = plan.report["slicing"].details["sliced"]
    np.testing.assert_allclose(plan(**inputs), expected, rtol=1e-9)
    measured = plan.measure_peak_bytes(**inputs)
    assert abs(measured - plan.predicted_peak_bytes) <= 0.1 * plan.predicted_peak_bytes
    assert measured <= limit < whole
    assert plan.idle_arena_bytes > 0      # measure_peak_bytes ran a call, which kept its arena


def test_a_limit_of_kilobytes_holds_where_the_call_s_own_objects_weigh():
    # an 8x8 lattice at bond 2 holds 97 kB at once unsliced; under three quarters of that it
    # runs in 64-256 slices of a few kB (as its path is searched with them), where the
    # loop's and np.einsum's own objects (index ranges, the views without each slice's
    # size-1 labels, np.einsum's iterator) are a third of what a slice holds: counted, the
    # call stays within the limit and within 10 % of the prediction (uncounted, it measured
    # 1.28x the prediction)
    eq, bond = grid_equation(8, 8), 2
    g = network_graph(eq, bond)
    inputs = network_inputs(eq, bond)
    limit = go.compile(g, cache=False).predicted_peak_bytes * 3 // 4
    plan = go.compile(g, memory_limit=limit, cache=False, threads=1)
    assert plan.report["slicing"].details["n_slices"] >= 64
    np.testing.assert_allclose(plan(**inputs), reference(eq, inputs), rtol=1e-9)
    measured = plan.measure_peak_bytes(**inputs)
    assert measured <= limit
    assert abs(measured - plan.predicted_peak_bytes) <= 0.1 * plan.predicted_peak_bytes


def test_a_limit_the_reordered_path_meets_needs_no_slicing(monkeypatch):
    # a 3x6 lattice at bond 8 along greedy's path (what the pass runs a node without a
    # ``path`` along): in its own order it holds 1.13 MB at once; the same contractions in
    # cotengra's peak-reducing order hold 0.86 MB, so a 1 MB limit is met with the same
    # FLOPs and no slice
    pytest.importorskip("cotengra")
    eq, bond, limit = grid_equation(3, 6), 8, 1_000_000
    g = network_graph(eq, bond)
    inputs = network_inputs(eq, bond)
    plan = go.compile(g, backend="numpy", memory_limit=limit, cache=False, optimize="greedy",
                      passes=["slicing"])
    details = plan.report["slicing"].details
    assert details["sliced"] == [] and [r["reordered"] for r in details["repathed"]] == [True]
    np.testing.assert_allclose(plan(**inputs), reference(eq, inputs), rtol=1e-9)
    assert plan.measure_peak_bytes(**inputs) <= limit
    terms = eq.split("->")[0].split(",")
    sizes = dict.fromkeys(eq, bond)
    greedy = play(terms, "", sizes, default_path(eq, [(bond,) * len(t) for t in terms],
                                                 optimize="greedy"))
    reordered = play(terms, "", sizes, details["repathed"][0]["path"])
    assert reordered.path != greedy.path and reordered.flops == greedy.flops
    shapes = [(bond,) * len(t) for t in terms]
    assert contraction_workspace_bytes(eq, shapes, greedy.path, (), None, "float64") > limit
    assert plan.predicted_peak_bytes <= limit
    # without cotengra the path keeps its order, and is sliced instead
    from graphopt.contraction.search import searchers as path_searchers
    monkeypatch.setattr(path_searchers, "cotengra_available", lambda: False)
    sliced = go.compile(g, backend="numpy", memory_limit=limit, cache=False,
                        optimize="greedy", passes=["slicing"])
    assert sliced.report["slicing"].details["sliced"]


def test_budget_no_slicing_can_meet_raises_at_compile_time():
    eq, bond = grid_equation(3, 3), 4
    g = network_graph(eq, bond)
    with pytest.raises(GraphError) as err:
        go.compile(g, backend="numpy", memory_limit=2000, cache=False)
    msg = str(err.value)
    assert "op 'einsum'" in msg and "node" in msg and "memory_limit=2000" in msg
    share = 2000 - plan_objects_bytes(1, 9, 1)       # (the call's own objects kept free)
    assert f"runs within {int(share * SLICE_HEADROOM)} bytes" in msg
    assert "the least found was" in msg
    assert "path_time=seconds" in msg     # no budget given: a longer search may find one
    assert err.value.src and "test_slicing.py" in err.value.src
    with pytest.raises(GraphError) as err:
        go.compile(g, backend="numpy", memory_limit=2000, cache=False, path_time=0.01)
    assert "path_time=seconds" not in str(err.value)


def test_a_limit_met_only_by_absurd_slicing_is_refused():
    # an MPS ring's live intermediates all hold a bond: halving its working set would
    # slice every bond (about 2**50 slices); the pass refuses rather than run that
    n, bond = 24, 8
    terms = [label(i) + label(n + i) + label((i + 1) % n) for i in range(n)]
    eq = ",".join(terms) + "->"
    g = go.Graph("ring")
    g.output(go.einsum(eq, *(g.input(f"t{i}", (bond, 2, bond)) for i in range(n))))
    whole = go.compile(g, backend="numpy", cache=False).predicted_peak_bytes
    with pytest.raises(GraphError, match=r"slicing further costs .*x the FLOPs"):
        go.compile(g, backend="numpy", memory_limit=whole // 6, cache=False)


def test_pipeline_runs_slicing_after_contraction():
    from graphopt.passes import pipeline_for

    for level in (2, 3):
        names = pipeline_for(level)
        assert names.index("slicing") == names.index("contraction") + 1


def test_a_costly_path_search_runs_a_bounded_number_of_times_under_a_limit():
    # a user's optimizer (here counting its calls, greedy inside) runs twice in the
    # contraction pass (unconstrained, then under the limit) and once in the slicing pass,
    # however many bounds the slicing tries, slices for two threads included
    calls = []

    class Counted(opt_einsum.paths.PathOptimizer):
        def __call__(self, inputs, output, size_dict, memory_limit=None):
            calls.append(len(inputs))
            return opt_einsum.paths.greedy(inputs, output, size_dict)

    eq, bond = grid_equation(4, 5), 8
    g = network_graph(eq, bond)
    whole = go.compile(g, backend="numpy", cache=False).predicted_peak_bytes
    plan = go.compile(g, backend="numpy", memory_limit=whole // 4, optimize=Counted(),
                      threads=2, cache=False)
    assert plan.report["slicing"].details["n_slices"] > 1
    assert len(calls) == 3, calls


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_sliced_contraction_keeps_its_kernel_beside_an_elementwise_epilogue(backend):
    # fusion used to take a sliced 25-operand einsum as the head of an epilogue group: the
    # group's kernel ran the whole equation unsliced (numpy: 8.3 MB measured under a
    # 187 kB limit, predicted 96 B) or as one np.einsum call (numba: "iterator is too large")
    eq, bond = grid_equation(5, 5), 6
    terms = eq.split("->")[0].split(",")
    g = go.Graph("network_epilogue")
    ins = [g.input(f"t{k}", (bond,) * len(t)) for k, t in enumerate(terms)]
    y = go.einsum(eq.replace("->", "->" + terms[0][0]), *ins)
    g.output(y * 0.5 + 1.0)
    inputs = network_inputs(eq, bond)
    whole = go.compile(g, backend=backend, cache=False)
    limit = whole.predicted_peak_bytes // 6
    plan = go.compile(g, backend=backend, memory_limit=limit, cache=False)
    (rec,) = plan.report["slicing"].details["sliced"]
    assert rec["n_slices"] > 1
    first, _ = plan.steps
    assert first.kernel.impl == "numpy-sliced" and first.kernel.details["slices"]
    fused = plan.report["fusion"].details
    assert fused["patterns"] == ["elementwise"]
    assert not any("einsum" in ops for ops in fused["groups"])
    expected = opt_einsum.contract(eq.replace("->", "->" + terms[0][0]), *inputs.values(),
                                   optimize="greedy") * 0.5 + 1.0
    np.testing.assert_allclose(plan(**inputs), expected, rtol=1e-9)
    assert plan.predicted_peak_bytes <= limit
    assert plan.measure_peak_bytes(**inputs) <= limit


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_a_short_sliced_program_holds_a_limit_of_tens_of_kilobytes(backend):
    """NumPy's own test equation of seven operands (a trace among them), sliced into a
    6-step program under a 22 kB limit: a call stays within it. Its GEMM step at the peak
    held ~1.3 kB of views, which the flat per-step allowance did not cover (measured 23.1
    kB, predicted 20.1 kB), now counted with the step (``call_bytes.GEMM_VIEW_BYTES``)."""
    from graphopt.frontend.jit import contract_graph

    eq = "acdf,jbje,gihb,hfac,gfac,gifabc,hfac"
    shapes = [(4, 5, 3, 5), (3, 3, 3, 8), (4, 7, 8, 3), (8, 5, 4, 5), (4, 5, 4, 5),
              (4, 7, 5, 4, 3, 5), (8, 5, 4, 5)]
    rng = np.random.default_rng(0)
    arrays = [rng.normal(size=s) for s in shapes]
    limit = 22399
    plan = go.compile(contract_graph(eq, arrays), backend=backend, memory_limit=limit)
    assert plan.predicted_peak_bytes <= limit
    assert plan.measure_peak_bytes(*arrays) <= limit
    np.testing.assert_allclose(plan(*arrays), np.einsum(eq, *arrays), rtol=1e-10)
