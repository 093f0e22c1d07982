"""The slicing pass and the sliced-contraction executor (graphopt/sliced_contraction.py)."""

import math

import numpy as np
import opt_einsum
import pytest
from hypothesis import given
from hypothesis import strategies as st

import graphopt as go
from graphopt import ir
from graphopt.errors import GraphError
from graphopt.passes import PassContext
from graphopt.passes.contraction import label
from graphopt.passes.slicing import SLICE_HEADROOM, slicing
from graphopt.paths import default_path, label_sizes, play_path
from graphopt.slice_search import find_slices, slice_cost
from graphopt.sliced_contraction import (
    contraction_workspace_bytes,
    parallel_workspace_bytes,
    slice_workers,
    sliced_contract,
    splits_result,
)


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


# ------------------------------------------------------------------------------ finder


def test_find_slices_meets_the_limit_and_reports_the_cost():
    eq, bond = grid_equation(5, 5), 3
    shapes = [(bond,) * len(t) for t in eq[:-2].split(",")]
    sizes = label_sizes(eq, shapes)
    path = default_path(eq, shapes)
    terms, out = eq.split("->")[0].split(","), ""
    unsliced = slice_cost(play_path(terms, out, path), len(terms), out, sizes, {})
    limit = 8 * 81
    assert unsliced.largest * 8 > limit
    plan = find_slices(eq, sizes, path, 8, limit)
    assert plan.labels and plan.largest_bytes <= limit
    assert plan.n_slices == math.prod(plan.parts) > 1
    assert plan.flops >= plan.flops_unsliced == unsliced.flops
    again = slice_cost(play_path(terms, out, path), len(terms), out, sizes,
                       dict(zip(plan.labels, plan.blocks)))
    assert again.largest * 8 == plan.largest_bytes and again.flops == plan.flops


def test_labels_present_in_every_step_are_sliced_first():
    # 'b' is a batch label in every operand and the output: slicing it costs no FLOPs;
    # bi,bj first makes a b*i*j intermediate 32x larger than any operand
    eq = "bi,bj,bjk,bik->b"
    sizes = {"b": 16, "i": 64, "j": 64, "k": 2}
    plan = find_slices(eq, sizes, [(0, 1), (0, 1), (0, 1)], 8, 16 * 64 * 64 * 8 // 4)
    assert plan.labels == ("b",) and plan.blocks == (4,)
    assert plan.flops == plan.flops_unsliced


def test_blocks_slice_large_dimensions_in_ranges():
    # ij,kl first makes an i*j*k*l intermediate; i and l appear in every step
    eq = "ij,jk,kl->il"
    sizes = {"i": 64, "j": 256, "k": 256, "l": 64}
    plan = find_slices(eq, sizes, [(0, 2), (0, 1)], 8, 256 * 256 * 8 * 4)
    assert plan.largest_bytes <= 256 * 256 * 8 * 4
    assert set(plan.labels) <= {"i", "l"} and max(plan.blocks) > 1  # ranges, not single values
    assert plan.flops == plan.flops_unsliced


def test_find_slices_bounds_intermediates_not_operands_or_the_result():
    # operands and the result are the caller's (memory_limit does not count inputs and
    # outputs): only the intermediate 'ab' (1600 bytes) is cut to fit 800
    plan = find_slices("a,b,c->abc", {"a": 10, "b": 20, "c": 30}, [(0, 1), (0, 1)], 8, 800)
    assert plan.largest_bytes <= 800 < plan.largest_unsliced_bytes == 1600
    plan = find_slices("ab,bc,c->a", {"a": 2, "b": 20, "c": 30}, [(0, 1), (0, 1)], 8, 1000)
    assert plan.n_slices == 1   # the intermediate 'ac' is 480 bytes; operand 'bc' is 4800
    with pytest.raises(GraphError, match=r"intermediate 'a' stays 16 bytes with every label "
                                         r"sliced to one index"):
        find_slices("ab,b,a->", {"a": 10, "b": 20}, [(0, 1), (0, 1)], 16, 8)


# ---------------------------------------------------------------------------- executor


@st.composite
def sliced_problems(draw):
    """An explicit IR equation (repeated labels allowed), its arrays, a path and slices."""
    n = draw(st.integers(1, 4))
    pool = "abcdef"[:draw(st.integers(1, 6))]
    size = {c: draw(st.integers(1, 5)) for c in pool}
    terms = ["".join(draw(st.lists(st.sampled_from(pool), max_size=3))) for _ in range(n)]
    used = list(dict.fromkeys("".join(terms)))
    out = "".join(draw(st.permutations([c for c in used if draw(st.booleans())])))
    eq = ",".join(terms) + "->" + out
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    arrays = [rng.standard_normal([size[c] for c in t]) for t in terms]
    path = [tuple(range(n))] if n <= 2 else default_path(eq, [a.shape for a in arrays])
    slices = draw(st.lists(st.sampled_from(used), unique=True)) if used else []
    blocks = [draw(st.integers(1, size[c])) for c in slices]
    return eq, arrays, path, slices, blocks


@given(sliced_problems())
def test_sliced_contract_equals_einsum(problem):
    eq, arrays, path, slices, blocks = problem
    expected = np.einsum(eq, *arrays)
    got = sliced_contract(eq, path, slices, arrays, blocks=blocks)
    np.testing.assert_allclose(got, expected, rtol=1e-10, atol=1e-10)
    out = np.full(expected.shape, np.nan)
    assert sliced_contract(eq, path, slices, arrays, out=out, blocks=blocks) is out
    np.testing.assert_allclose(out, expected, rtol=1e-10, atol=1e-10)


@given(sliced_problems(), st.integers(2, 4))
def test_slices_run_at_once_give_the_same_result(problem, workers):
    eq, arrays, path, slices, blocks = problem
    one = sliced_contract(eq, path, slices, arrays, blocks=blocks)
    got = sliced_contract(eq, path, slices, arrays, blocks=blocks, workers=workers)
    np.testing.assert_allclose(got, one, rtol=1e-10, atol=1e-10)
    again = sliced_contract(eq, path, slices, arrays, blocks=blocks, workers=workers)
    np.testing.assert_array_equal(again, got)    # partial sums added in worker order


@pytest.mark.parametrize("slices,blocks", [(["i"], [8]), (["a"], [4]), (["i", "a"], [16, 8])])
def test_parallel_slices_over_output_summed_and_both_labels(slices, blocks):
    rng = np.random.default_rng(3)
    x, y, z = rng.standard_normal((64, 16)), rng.standard_normal((64, 16)), \
        rng.standard_normal((16, 16))
    eq = "ia,ib,ab->i"
    got = sliced_contract(eq, None, slices, [x, y, z], blocks=blocks, workers=2)
    np.testing.assert_allclose(got, np.einsum(eq, x, y, z), rtol=1e-12)


def test_slice_workers_fit_the_limit_with_the_partial_sums():
    assert slice_workers(16, True, 100, 1000, None, 4) == 4
    assert slice_workers(3, True, 100, 1000, None, 4) == 3       # no more than the slices
    assert slice_workers(16, True, 100, 1000, 250, 4) == 2       # 2 x 100 <= 250
    assert slice_workers(16, False, 100, 1000, 1300, 4) == 2     # 2 x 100 + 1 x 1000
    assert slice_workers(16, False, 100, 1000, 1000, 4) == 1
    assert parallel_workspace_bytes(3, False, 100, 1000) == 3 * 100 + 2 * 1000
    sizes = {"i": 8, "a": 4, "b": 4}
    assert splits_result("ia,ib->i", sizes, ["i"], [4])
    assert not splits_result("ia,ib->i", sizes, ["i"], [8])     # one range: no regions
    assert not splits_result("ia,ib->i", sizes, ["a"], None)    # summed labels only


def test_sliced_contract_empty_sum_and_unicode_labels():
    a, b = np.ones((3, 0)), np.ones((0, 2))
    np.testing.assert_array_equal(sliced_contract("ab,bc->ac", None, ["b"], [a, b]),
                                  np.zeros((3, 2)))
    rng = np.random.default_rng(1)
    x, y, z = (rng.standard_normal(s) for s in ((3, 4), (4, 5), (5, 3)))
    got = sliced_contract("αβ,βγ,γα->α", [(0, 1), (0, 1)], ["β", "γ"], [x, y, z], blocks=[2, 3])
    np.testing.assert_allclose(got, np.einsum("ab,bc,ca->a", x, y, z), rtol=1e-12)


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
    assert "slices" not in unsliced.graph.nodes[unsliced.steps[0].node]["attrs"]
    limit = unsliced.predicted_peak_bytes // 4
    plan = go.compile(g, backend="numpy", memory_limit=limit, cache=False)
    rec = plan.report["slicing"].details
    (sliced,) = rec["sliced"]
    # the whole plan's predicted peak (its one step's workspace) is within the limit
    assert plan.predicted_peak_bytes == sliced["predicted_peak_bytes"] <= limit
    assert sliced["largest_intermediate_bytes"] < sliced["largest_intermediate_unsliced_bytes"]
    assert sliced["n_slices"] > 1 and rec["flop_overhead"] >= 1.0
    assert rec["slices"] == {str(sliced["node"]): sliced["slices"]}
    node = plan.graph.nodes[sliced["node"]]
    assert node["attrs"]["slices"] == sliced["slices"]
    assert plan.steps[0].kernel.impl == "numpy-sliced"
    np.testing.assert_allclose(plan(**inputs), reference(eq, inputs), rtol=1e-9)
    np.testing.assert_allclose(plan(**inputs), unsliced(**inputs), rtol=1e-9)


@pytest.mark.parametrize("threads", [1, 2])
def test_slices_are_cut_to_run_at_once_where_it_costs_no_flops(threads):
    # slicing the output label i costs nothing: with 2 threads the pass cuts slices of half
    # the limit and runs two at once; the report says so
    eq, (i, a) = "ia,ib,ic,abc->i", (256, 16)
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
    np.testing.assert_allclose(plan(*arrays), np.einsum(eq, *arrays), rtol=1e-12)


def test_slices_run_one_at_a_time_where_two_at_once_do_not_fit():
    # a 5x6 lattice at bond 8 under 512 KiB: two of its slices at once do not fit (and the
    # pass kept them over slices cut for two at once), so its slices run one at a time, each
    # with the call's threads for its GEMMs
    eq, bond = grid_equation(5, 6), 8
    g = network_graph(eq, bond)
    limit = 2 ** 19
    plan = go.compile(g, backend="numpy", memory_limit=limit, threads=2, cache=False)
    (rec,) = plan.report["slicing"].details["sliced"]
    assert rec["slice_workers"] == 1 and rec["n_slices"] > 1
    assert plan.predicted_peak_bytes == rec["predicted_peak_bytes"] <= limit * SLICE_HEADROOM
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


def test_budget_no_slicing_can_meet_raises_at_compile_time():
    eq, bond = grid_equation(3, 3), 4
    g = network_graph(eq, bond)
    with pytest.raises(GraphError) as err:
        go.compile(g, backend="numpy", memory_limit=100, cache=False)
    msg = str(err.value)
    assert "op 'einsum'" in msg and "node" in msg and "memory_limit=100" in msg
    assert "runs within 90 bytes" in msg and "the least found was" in msg  # SLICE_HEADROOM
    assert err.value.src and "test_slicing.py" in err.value.src


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
        go.compile(g, backend="numpy", memory_limit=whole // 8, cache=False)


def test_pipeline_runs_slicing_after_contraction():
    from graphopt.passes import pipeline_for

    for level in (2, 3):
        names = pipeline_for(level)
        assert names.index("slicing") == names.index("contraction") + 1


@pytest.mark.parametrize("blocks", [[1], [2], [3], [4]])
def test_a_sliced_label_that_broadcasts_from_size_one_is_read_whole(blocks):
    # 'b' is 4 on the first operand and 1 (broadcast) on the second: every slice of b reads
    # the second operand's one row, as np.einsum broadcasts it
    rng = np.random.default_rng(0)
    a, b, c = rng.normal(size=(3, 4)), rng.normal(size=(1, 5)), rng.normal(size=(5, 2))
    eq = "ab,bc,cd->ad"
    assert label_sizes(eq, [a.shape, b.shape, c.shape])["b"] == 4
    got = sliced_contract(eq, [(0, 1), (0, 1)], ["b"], [a, b, c], blocks=blocks)
    np.testing.assert_allclose(got, np.einsum(eq, a, b, c), rtol=1e-12)
    got = sliced_contract("ab,bc,cd->bd", [(0, 1), (0, 1)], ["b"], [a, b, c], blocks=blocks)
    np.testing.assert_allclose(got, np.einsum("ab,bc,cd->bd", a, b, c), rtol=1e-12)
