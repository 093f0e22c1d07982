"""The sliced path search (graphopt/contraction/slicing/path_search.py): a contraction that
must be sliced gets a path searched with its slicing in view, and compile runs it within the
limit."""


import numpy as np
import opt_einsum
import pytest

import graphopt as go  # noqa: E402
from graphopt.contraction.rates import DEVICE_RATES, HOST_RATES  # noqa: E402
from graphopt.contraction.search import searchers as path_searchers
from graphopt.contraction.slicing import path_search as sliced_path_search  # noqa: E402
from graphopt.contraction.slicing.labels import MAX_FLOP_OVERHEAD, fit_slices  # noqa: E402
from graphopt.contraction.slicing.path_search import search_sliced_path, sliced_budget  # noqa: E402
from graphopt.contraction.slicing.run import least_sliced_workspace_bytes  # noqa: E402
from graphopt.errors import GraphError  # noqa: E402
from graphopt.passes.slicing import SLICE_HEADROOM  # noqa: E402
from tests.passes.test_slicing import grid_equation, network_graph, network_inputs  # noqa: E402

# the tests that run cotengra's slice-and-reconfigure or hyper-optimizer; the others run
# without it, as a user without the networks extra does
needs_cotengra = pytest.mark.skipif(not path_searchers.cotengra_available(),
                                    reason="cotengra is not installed")


def _network(rows, cols, bond):
    eq = grid_equation(rows, cols)
    shapes = [(bond,) * len(t) for t in eq.split("->")[0].split(",")]
    return eq, shapes


def _unsliced_path(eq, shapes):
    g = network_graph(eq, shapes[0][0])
    plan = go.compile(g, cache=False, threads=1)
    return plan.report["contraction"].details["groups"][0]["path"], plan.predicted_peak_bytes


@needs_cotengra
def test_a_path_searched_sliced_costs_fewer_flops_than_slicing_the_unsliced_one(cache_dir):
    # a 5x6 lattice at bond 8 under 1/16 of its peak: sliced along its unsliced best path it
    # costs 1.2e10 FLOPs (2048 slices); searched with its slicing, about 30x fewer
    eq, shapes = _network(5, 6, 8)
    path, peak = _unsliced_path(eq, shapes)
    budget = peak // 16
    found = fit_slices(eq, shapes, path, "float64", budget)
    p, plan, ws, rec = search_sliced_path(eq, shapes, "float64", budget, path, found)
    assert ws <= budget and plan.flops * 4 < found[1].flops
    assert rec["flops_before"] == found[1].flops and rec["cache"] == "miss"
    assert rec["searcher"].startswith("cotengra slice-and-reconfigure")
    # the budget followed the best slicing; the record keeps the largest it was: the first
    # slicing's worth
    assert rec["budget_seconds"] == sliced_budget(found[1], None, len(shapes))
    assert sliced_budget(plan, None, len(shapes)) < rec["budget_seconds"]
    again = search_sliced_path(eq, shapes, "float64", budget, path, found)
    assert again[3]["cache"] == "hit" and again[0] == p and again[1] == plan


@needs_cotengra
def test_compile_meets_a_limit_no_slicing_of_the_unsliced_path_meets(cache_dir):
    # a 6x6 lattice at bond 4 under 1/10 of its peak: every slicing of its unsliced path
    # needs more; along the path searched sliced it runs within the limit, and right
    eq, shapes = _network(6, 6, 4)
    path, peak = _unsliced_path(eq, shapes)
    limit = peak // 10
    with pytest.raises(GraphError):     # (the pass slices within SLICE_HEADROOM of it)
        fit_slices(eq, shapes, path, "float64", int(limit * SLICE_HEADROOM))
    g = network_graph(eq, 4)
    plan = go.compile(g, cache=False, threads=1, memory_limit=limit)
    (rec,) = plan.report["slicing"].details["sliced"]
    assert rec["path_search"]["flops_before"] is None
    assert "path searched with its slices" in str(plan.report)
    assert "along the unsliced path none fitted" in str(plan.report)
    # the report sets the sliced FLOPs beside the unsliced path's (what no limit would cost)
    whole = rec["path_search"]["path_flops_unsliced"]
    assert whole < rec["flops"] and f"the unsliced path's {whole:.3g}" in str(plan.report)
    assert rec["flop_overhead"] < 2 * MAX_FLOP_OVERHEAD
    inputs = network_inputs(eq, 4)
    expected = opt_einsum.contract(eq, *inputs.values(), optimize="greedy")
    np.testing.assert_allclose(plan(**inputs), expected, rtol=1e-9)
    assert plan.measure_peak_bytes(**inputs) <= limit


def test_no_budget_keeps_the_first_slicing_and_no_cotengra_searches_graphopt_s(cache_dir,
                                                                              monkeypatch):
    eq, shapes = _network(5, 6, 8)
    path, peak = _unsliced_path(eq, shapes)
    budget = peak // 16
    found = fit_slices(eq, shapes, path, "float64", budget)
    # path_time=0: no search
    p, plan, ws, rec = search_sliced_path(eq, shapes, "float64", budget, path, found,
                                          time_budget=0)
    assert (p, plan, ws) == found and rec["searcher"] == "none"
    monkeypatch.setattr(path_searchers, "cotengra_available", lambda: False)
    # without cotengra only graphopt's own search for the sliced sizes runs, from the first
    # slicing: never worse than it, within the budget
    p, plan, ws, rec = search_sliced_path(eq, shapes, "float64", budget, path, found,
                                          cache=False)
    assert "cotengra" not in rec["searcher"] and plan.flops <= found[1].flops
    assert ws <= budget
    # without a first slicing, step 1b searches the unsliced network again (step 1, which
    # would have found one, needs cotengra) and slices the path it finds
    p, plan, ws, rec = search_sliced_path(eq, shapes, "float64", budget, path, None,
                                          cache=False)
    assert rec["searcher"].startswith("graphopt's path search of the unsliced network again")
    assert "cotengra" not in rec["searcher"] and ws <= budget and plan.n_slices > 1


def test_without_cotengra_step_2_starts_from_the_cheapest_slicing_too_dear_to_take(
        cache_dir, monkeypatch):
    """Without cotengra (and cotengrust), at the GPU's rate: a 6x6 lattice at bond 6 under
    190 kB slices along opt_einsum's greedy path only at over MAX_FLOP_OVERHEAD times its
    FLOPs, and compile refused it where cotengra sliced it (the GPU suite on a machine
    without cotengra failed so on an 8x8 lattice). Step 1b's path slices within the memory
    but too dearly still (15552 slices); step 2 now starts from that slicing, and the
    path it finds for the sliced sizes is taken (1944 slices)."""
    monkeypatch.setattr(path_searchers, "cotengra_available", lambda: False)
    monkeypatch.setattr(path_searchers, "cotengrust", lambda: None)
    eq, shapes = _network(6, 6, 6)
    terms = eq.split("->")[0].split(",")
    sizes = dict.fromkeys("".join(terms), 6)
    quick, share = path_searchers.greedy(terms, "", sizes).path, 191857
    with pytest.raises(GraphError, match="slicing further costs"):
        fit_slices(eq, shapes, quick, "float64", share, repath=False)
    searched = []
    real = sliced_path_search.path_search.find_path
    monkeypatch.setattr(sliced_path_search.path_search, "find_path",
                        lambda *a, **k: searched.append(a[2]) or real(*a, **k))
    p, plan, ws, rec = search_sliced_path(eq, shapes, "float64", share, quick, None,
                                          cache=False, rates=DEVICE_RATES)
    assert ws <= share and plan.flop_overhead <= MAX_FLOP_OVERHEAD, rec
    assert rec["searcher"].startswith("graphopt's path search of the unsliced network "
                                      "again (") and "slice-and-reconfigure" not in \
        rec["searcher"], rec
    assert rec["searcher"].endswith("s), then graphopt's path search for the sliced sizes "
                                    "(1 round)"), rec
    # step 1b at the full sizes; step 2 at the too-dear slicing's block sizes
    assert searched[0] == sizes and len(searched) == 2 and searched[1] != sizes
    assert {d for c, d in searched[1].items() if d != 6} < set(range(1, 6))
    assert plan.n_slices > 1 and set(plan.labels) <= set(sizes)


def test_a_budget_below_the_call_s_own_objects_is_not_searched(cache_dir, monkeypatch):
    # no path can meet it: refused at once, cotengra never asked
    eq, shapes = _network(6, 6, 4)
    path, _ = _unsliced_path(eq, shapes)
    sizes = dict.fromkeys(eq.replace(",", "").replace("->", ""), 4)
    floor = least_sliced_workspace_bytes(len(shapes), sizes)

    def fail(*args, **kwargs):
        raise AssertionError("searched")

    monkeypatch.setattr(path_searchers, "slice_reconfigured", fail)
    with pytest.raises(GraphError):
        search_sliced_path(eq, shapes, "float64", floor - 1, path, None)


@needs_cotengra
def test_slice_and_reconfigure_gives_the_same_path_every_time():
    eq, shapes = _network(5, 5, 6)
    path, _ = _unsliced_path(eq, shapes)
    terms = eq.split("->")[0].split(",")
    sizes = dict.fromkeys("".join(terms), 6)
    first, sliced = path_searchers.slice_reconfigured(terms, "", sizes, path, 216)
    assert (first, sliced) == path_searchers.slice_reconfigured(terms, "", sizes, path, 216)
    assert first != path and sliced        # it sliced, and reordered the path for it


def test_the_sliced_key_tells_budgets_dtypes_and_workers_apart():
    eq, shapes = _network(3, 3, 4)
    keys = {sliced_path_search.sliced_key(eq, shapes, dt, b, w)
            for dt in ("float64", "complex128") for b in (1000, 2000) for w in (1, 2)}
    assert len(keys) == 8


@needs_cotengra
def test_cotengra_s_own_slicing_is_kept_where_it_fits_the_workspace(cache_dir, monkeypatch):
    # graphopt's re-slicing of every searched path refused: what is left is cotengra's own
    # slicing of the path it reconfigured, checked against the same workspace
    eq, shapes = _network(5, 6, 8)
    path, peak = _unsliced_path(eq, shapes)
    budget = peak // 4
    found = fit_slices(eq, shapes, path, "float64", budget)

    def refuse(*args, **kwargs):
        raise GraphError("refused")

    monkeypatch.setattr(sliced_path_search, "fit_slices", refuse)
    p, plan, ws, rec = search_sliced_path(eq, shapes, "float64", budget, path, found,
                                          time_budget=0.2, cache=False)
    assert plan is not found[1] and ws <= budget and set(plan.blocks) == {1}
    terms = eq.split("->")[0].split(",")
    sizes = dict.fromkeys("".join(terms), 8)
    candidates = [path_searchers.slice_reconfigured(terms, "", sizes, path,
                                                    int(budget * f) // 8)
                  for f in sliced_path_search.TARGET_FRACTIONS]
    assert (p, set(plan.labels)) in [(q, set(s)) for q, s in candidates]


@needs_cotengra
def test_path_time_bounds_the_unsliced_and_the_sliced_search_together(cache_dir):
    # under memory_limit the unsliced search gets half of path_time, and the search with
    # the slices what it left: each had all of it (a 5x8 lattice at 1/4 of its peak took
    # 1.7x and 2.0x budgets of 1 and 2 s)
    eq, shapes = _network(5, 6, 8)
    _, peak = _unsliced_path(eq, shapes)
    g = network_graph(eq, 8)
    plan = go.compile(g, cache=False, threads=1, memory_limit=peak // 16, path_time=0.2)
    (group,) = plan.report["contraction"].details["groups"]
    assert group["search"]["budget_seconds"] == pytest.approx(0.1)
    (rec,) = plan.report["slicing"].details["sliced"]
    left = 0.2 - group["search"]["seconds"]
    assert rec["path_search"]["budget_seconds"] == pytest.approx(left, abs=1e-3)
    # without a limit, the unsliced search has all of it
    free = go.compile(g, cache=False, threads=1, path_time=0.2)
    assert free.report["contraction"].details["groups"][0]["search"]["budget_seconds"] == 0.2


@needs_cotengra
def test_a_path_that_slices_only_too_dearly_is_searched_again_unsliced(cache_dir,
                                                                        monkeypatch):
    """Where step 1's slicings fit the memory but cost more than MAX_FLOP_OVERHEAD times
    the unsliced run (a large network's quickly searched path under a tight limit), step
    1b searches the unsliced network again and slices the path it finds; with the budget
    of what such a slicing would have cost at most. Here cotengra's slice-and-reconfigure
    is made to slice every label, and the given path to slice no other way."""
    from graphopt.contraction.paths import left_to_right
    eq, shapes = _network(5, 6, 8)
    _, peak = _unsliced_path(eq, shapes)
    path = left_to_right(len(shapes))      # as written: not what the search finds
    budget = peak // 4
    terms = eq.split("->")[0].split(",")

    def every_label(terms_, output, sizes, path_, target):
        return [tuple(q) for q in path_], sorted(set("".join(terms_)))

    def not_the_given_path(eq_, shapes_, path_, *args, **kwargs):
        if [tuple(q) for q in path_] == path:
            raise GraphError("refused")
        return fit_slices(eq_, shapes_, path_, *args, **kwargs)

    monkeypatch.setattr(path_searchers, "slice_reconfigured", every_label)
    monkeypatch.setattr(sliced_path_search, "fit_slices", not_the_given_path)
    monkeypatch.setattr(sliced_path_search, "DEFAULT_MAX_SECONDS", 0.6)   # (a short test)
    searched = []
    real = sliced_path_search.path_search.find_path
    monkeypatch.setattr(sliced_path_search.path_search, "find_path",
                        lambda *a, **k: searched.append((a[2], k)) or real(*a, **k))
    p, plan, ws, rec = search_sliced_path(eq, shapes, "float64", budget, path, None,
                                          cache=False)
    assert ws <= budget and plan.n_slices < 8 ** 4
    assert "path search of the unsliced network again" in rec["searcher"]
    full = dict.fromkeys("".join(terms), 8)
    assert searched[0][0] == full          # the unsliced sizes: no label at a block size
    run = sliced_path_search._SlicedSearch(eq, shapes, "float64", budget, path, None, 1,
                                           None, None, HOST_RATES)
    assert run.most > 0.6 and rec["budget_seconds"] == 0.6     # the stake, capped
    assert [tuple(q) for q in p] != path    # sliced along the path step 1b found
