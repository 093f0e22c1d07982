"""The anytime path search (graphopt/contraction/search/anytime.py), on networks from
opt_einsum's and cotengra's generators; its cache is tests/test_path_cache.py's."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import numpy as np
import opt_einsum
import pytest
from opt_einsum.testing import rand_equation

import graphopt as go
from graphopt.contraction.paths import play
from graphopt.contraction.search import anytime as path_search
from graphopt.contraction.search import budget as search_budget
from graphopt.contraction.search import searchers as path_searchers
from graphopt.errors import GraphError


def network(n, seed, reg=3):
    eq, shapes = rand_equation(n, reg, seed=seed, d_min=2, d_max=5)
    terms, output = eq.split("->")[0].split(","), eq.split("->")[1]
    sizes = {c: s for t, sh in zip(terms, shapes) for c, s in zip(t, sh)}
    return eq, terms, output, sizes, shapes


def greedy_steps(terms, output, sizes):
    return path_searchers.greedy(terms, output, sizes)


def start_steps(terms, output, sizes, name):
    """The greedy path a search record names as its start."""
    if name == "greedy":
        return greedy_steps(terms, output, sizes)
    costmod = float(re.fullmatch(r"cotengrust greedy \(costmod (.*)\)", name).group(1))
    return path_searchers.fast_greedy(terms, output, sizes, costmod)




@pytest.mark.parametrize("seed", range(6))
def test_anytime_path_is_valid_and_no_worse_than_greedy(seed, cache_dir):
    eq, terms, output, sizes, shapes = network(24, seed)
    steps, rec = path_search.find_path(terms, output, sizes)
    again = play(terms, output, sizes, steps.path)          # a full, valid path
    assert (again.flops, again.write) == (steps.flops, steps.write)
    assert steps.pairwise
    assert steps.combo <= rec["greedy_combo"]
    # the start is the cheapest of the greedy paths the budget paid for
    assert start_steps(terms, output, sizes, rec["greedy"]).combo == rec["greedy_combo"]
    assert rec["cache"] == "miss"
    # the FLOPs are opt_einsum's own count of the same path
    _, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=steps.path)
    assert int(info.opt_cost) == steps.flops


@pytest.mark.parametrize("searchers", ["cotengra", "opt_einsum"])
def test_the_search_stops_where_the_budget_of_the_best_path_no_longer_pays(
        searchers, cache_dir, monkeypatch):
    # a start whose path is terrible (as opt_einsum's greedy is on an MPS-MPO-MPS energy,
    # ~1e18 FLOPs) pays for the first steps; once one finds a path that runs in
    # microseconds the budget shrinks and the search stops (it used to run all eight
    # trials, then a 60 ms reconfiguration of a path that runs in 10 ms)
    _, terms, output, sizes, _ = network(30, 11)
    sizes = dict.fromkeys(sizes, 2)
    written = play(terms, output, sizes, [(0, 1)] * (len(terms) - 1))
    monkeypatch.setattr(path_searchers, "greedy", lambda *a: written)
    monkeypatch.setattr(path_searchers, "fast_greedy", lambda *a: written)
    if searchers == "opt_einsum":
        monkeypatch.setattr(path_searchers, "cotengra_available", lambda: False)
        monkeypatch.setattr(path_searchers, "cotengrust", lambda: None)
    elif not path_searchers.cotengra_available():
        pytest.skip("cotengra is not installed")
    per_trial = search_budget.SearchSteps(terms, None).trial_seconds()
    assert search_budget.default_budget(written) > per_trial * (search_budget.MIN_TRIALS + 1)
    steps, rec = path_search.search(terms, output, sizes, None)
    assert steps.combo < written.combo / 1e3
    if searchers == "opt_einsum":
        assert 1 <= rec["trials"] < search_budget.MIN_TRIALS
        assert rec["searcher"] == "opt_einsum random-greedy"
    else:     # the first batch of cotengrust's trials was enough: nothing ran after it
        assert rec["trials"] == search_budget.FIRST_TRIALS
        assert rec["searcher"] == "cotengrust random-greedy"


def test_the_reconfiguration_runs_at_each_size_the_budget_pays_for_smallest_first(
        cache_dir, monkeypatch):
    if not path_searchers.cotengra_available():
        pytest.skip("cotengra is not installed")
    _, terms, output, sizes, _ = network(30, 3)
    ran = []
    real = path_searchers.reconfigured

    def spy(terms, output, sizes, steps, size):
        ran.append(size)
        return real(terms, output, sizes, steps, size)

    monkeypatch.setattr(path_searchers, "reconfigured", spy)
    monkeypatch.setattr(path_searchers, "cotengrust", lambda: None)   # start: oe greedy
    rates = search_budget.RECONF_SECONDS_PER_TENSOR
    n = len(terms)
    start = search_budget.SearchSteps(terms, None).trial_seconds()
    for extra, sizes_run in ((rates[4] * n * 0.99, []), (rates[4] * n * 1.01, [4]),
                             ((rates[4] + rates[6] + rates[8]) * n * 1.01, [4, 6, 8])):
        ran.clear()
        _, rec = path_search.search(terms, output, sizes, start + extra)
        assert ran == sizes_run
        assert ("subtree reconfiguration" in rec["searcher"]) == bool(sizes_run)


def test_a_first_batch_of_trials_runs_before_the_reconfiguration_where_it_is_cheap(
        cache_dir, monkeypatch):
    """One batch of ``FIRST_TRIALS`` cotengrust trials, first, where it costs at most
    ``FIRST_TRIALS_SHARE`` of the budget; a budget it would take more of goes to the
    reconfiguration as before."""
    if path_searchers.cotengrust() is None or not path_searchers.cotengra_available():
        pytest.skip("cotengrust and cotengra are not installed")
    _, terms, output, sizes, _ = network(30, 3)
    ran = []
    real_trials, real_reconf = path_searchers.rust_random_greedy, path_searchers.reconfigured

    def trials(terms, output, sizes, k, seed):
        ran.append(("trials", k, seed))
        return real_trials(terms, output, sizes, k, seed)

    def reconf(terms, output, sizes, steps, size):
        ran.append(("reconfiguration", size))
        return real_reconf(terms, output, sizes, steps, size)
    monkeypatch.setattr(path_searchers, "rust_random_greedy", trials)
    monkeypatch.setattr(path_searchers, "reconfigured", reconf)
    counted = search_budget.SearchSteps(terms, None)
    batch = search_budget.RUST_PLAY_SECONDS_PER_TENSOR * counted.n + \
        search_budget.FIRST_TRIALS * counted.rust_trial_seconds()
    start = search_budget.FAST_GREEDY_SECONDS_PER_TENSOR * counted.n
    reconf4 = search_budget.RECONF_SECONDS_PER_TENSOR[4] * counted.n
    # a budget of which the batch is a tenth or less, that pays for every start and the
    # reconfiguration after it: the batch, then the reconfiguration
    budget = 2 * max(batch / search_budget.FIRST_TRIALS_SHARE,
                     counted.trial_seconds() + 2 * start + batch + reconf4)
    path_search.search(terms, output, sizes, budget)
    assert ran[:2] == [("trials", search_budget.FIRST_TRIALS, 0), ("reconfiguration", 4)]
    # a budget of which the batch would be more than a tenth: no batch first (the later
    # steps, which may run trials of their own, left out)
    ran.clear()
    for later in ("random_greedy", "by_the_clock"):
        monkeypatch.setattr(path_search._Search, later, lambda self: None)
    path_search.search(terms, output, sizes, (batch / search_budget.FIRST_TRIALS_SHARE) * 0.99)
    assert all(r[0] == "reconfiguration" for r in ran)


def test_the_trials_other_cheapest_paths_are_reconfigured_where_the_budget_pays(
        cache_dir, monkeypatch):
    """Step 5: up to ``RECONF_STARTS`` of the trials' cheapest paths not reconfigured yet,
    each at ``STARTS_SUBTREE``, cheapest first, where the counted budget pays; opt_einsum's
    trials do not run after cotengrust's."""
    if path_searchers.cotengrust() is None or not path_searchers.cotengra_available():
        pytest.skip("cotengrust and cotengra are not installed")
    _, terms, output, sizes, _ = network(30, 3)
    k, size = search_budget.RECONF_STARTS, search_budget.STARTS_SUBTREE
    run = path_search._Search(terms, output, sizes, 0.3)
    trial_paths = []
    real_batch = path_searchers.rust_random_greedy
    monkeypatch.setattr(path_searchers, "rust_random_greedy",
                        lambda *a, **kw: trial_paths.append(real_batch(*a, **kw)) or
                        trial_paths[-1])
    run.start()
    run.first_trials()
    run.reconfigure()
    run.random_greedy()
    assert run.rust_trials > search_budget.FIRST_TRIALS and run.oe_trials == 0
    assert set(run.trial_paths) == {tuple(p) for p in trial_paths}
    done = [p for p, _, _ in run.reconfigured]
    expected = sorted((s for s in run.trial_paths.values() if s.path not in done),
                      key=lambda s: s.combo)[:k]
    ran = []
    real_reconf = path_searchers.reconfigured
    monkeypatch.setattr(path_searchers, "reconfigured",
                        lambda t, o, sz, steps, n: ran.append((steps.path, n)) or
                        real_reconf(t, o, sz, steps, n))
    run.reconfigure_starts()
    assert len(expected) == k and ran == [(s.path, size) for s in expected]
    assert f"of {k} other trial paths" in run.searcher()
    assert run.best.combo <= min(s.combo for s in expected)
    # a budget that pays for none of them: none run
    small = path_search._Search(terms, output, sizes, 0.002)
    small.start()
    small.trial_paths = dict(run.trial_paths)
    ran.clear()
    small.reconfigure_starts()
    assert ran == [] and "other trial paths" not in small.searcher()


def test_under_a_timed_budget_the_starts_leave_one_random_round_room(cache_dir, monkeypatch):
    """Step 5 leaves room for one round of step 6 at the pace the clock has shown, where the
    budget is timed (``HYPER_MIN_SECONDS`` and more); a counted budget reserves nothing
    (its paths stay the machine's-speed-independent ones)."""
    if path_searchers.cotengrust() is None or not path_searchers.cotengra_available():
        pytest.skip("cotengrust and cotengra are not installed")
    _, terms, output, sizes, _ = network(30, 3)
    n = len(terms)
    rnd = search_budget.RANDOM_RECONF_SECONDS_PER_TENSOR * n
    start = search_budget.RECONF_SECONDS_PER_TENSOR[search_budget.STARTS_SUBTREE] * n
    budget = search_budget.HYPER_MIN_SECONDS * 2
    run = path_search._Search(terms, output, sizes, budget)
    run.start()
    run.first_trials()
    run.random_greedy()
    assert run.trial_paths
    # the counted steps ran at 3x their assumed cost: a round's room is 3x its cost
    run.counted.counted = 0.1
    clock = [0.3]
    monkeypatch.setattr(run, "elapsed", lambda: clock[0])
    monkeypatch.setattr(run.counted, "_elapsed", run.elapsed)   # (what it times by)
    assert run._timed_round_seconds() == pytest.approx(3 * rnd)
    # where the clock leaves a start but not a start and that room, no start runs
    clock[0] = budget - start - 2 * rnd
    run.counted.counted = clock[0] / 3
    ran = []
    monkeypatch.setattr(path_searchers, "reconfigured", lambda *a, **kw: ran.append(a))
    run.reconfigure_starts()
    assert ran == []
    # ... and with the room, one does
    clock[0] = budget - start - 3 * rnd * 1.2 - 0.01
    run.counted.counted = clock[0] / 3
    run.reconfigure_starts()
    assert len(ran) >= 1
    # a counted budget reserves nothing
    small = path_search._Search(terms, output, sizes, search_budget.HYPER_MIN_SECONDS / 2)
    small.counted.counted = 0.01
    monkeypatch.setattr(small, "elapsed", lambda: 1.0)
    assert small._timed_round_seconds() == 0.0


@pytest.mark.parametrize("rust", [True, False])
def test_a_network_that_runs_in_microseconds_is_not_searched_beyond_greedy(
        rust, cache_dir, monkeypatch):
    # 60 tensors of bond 2: greedy's path runs in microseconds, so the default budget pays
    # for no trial (the search used to run eight regardless, ~50 ms here), nor, where
    # cotengrust gives the start, for opt_einsum's greedy (2-5 ms on such networks)
    if not rust:
        monkeypatch.setattr(path_searchers, "cotengrust", lambda: None)
    elif path_searchers.cotengrust() is None:
        pytest.skip("cotengrust is not installed")
    _, terms, output, sizes, _ = network(60, 5)
    sizes = dict.fromkeys(sizes, 2)
    steps, rec = path_search.find_path(terms, output, sizes, cache=False)
    assert rec["budget_seconds"] < search_budget.SearchSteps(terms, None).trial_seconds()
    assert rec["trials"] == 0 and rec["searcher"] == rec["greedy"]
    assert rec["greedy"].startswith("cotengrust greedy (costmod ") if rust else \
        rec["greedy"] == "greedy"
    assert steps.path == start_steps(terms, output, sizes, rec["greedy"]).path


@pytest.mark.parametrize("hyper", [False, True])
def test_opt_einsum_s_greedy_starts_only_networks_with_hyper_indices(
        hyper, cache_dir, monkeypatch):
    # a budget that pays for opt_einsum's greedy (1 s): it runs where a label joins more
    # than two tensors, and not on a network whose labels each join two (cotengrust's
    # greedy and first trials start those as well or better)
    if path_searchers.cotengrust() is None:
        pytest.skip("cotengrust is not installed")
    eq, _ = rand_equation(30, 3, seed=2, d_min=2, d_max=4, global_dim=hyper)
    terms, output = eq.split("->")[0].split(","), eq.split("->")[1]
    sizes = {c: 3 for t in terms for c in t}
    assert search_budget.has_hyper_indices(terms, output) == hyper
    ran = []
    real = path_searchers.greedy
    monkeypatch.setattr(path_searchers, "greedy", lambda *a: ran.append(1) or real(*a))
    monkeypatch.setattr(path_search._Search, "first_trials", lambda self: None)
    monkeypatch.setattr(path_search._Search, "reconfigure", lambda self: None)
    monkeypatch.setattr(path_search._Search, "random_greedy", lambda self: None)
    monkeypatch.setattr(path_search._Search, "by_the_clock", lambda self: None)
    steps, rec = path_search.find_path(terms, output, sizes, time_budget=1.0, cache=False)
    assert ran == ([1] if hyper else [])
    starts = [f"cotengrust greedy (costmod {c})" for c in search_budget.FAST_GREEDY_COSTMODS]
    assert rec["greedy"] in starts + (["greedy"] if hyper else [])
    assert rec["greedy_combo"] == min(
        start_steps(terms, output, sizes, name).combo
        for name in starts + (["greedy"] if hyper else []))


def test_hyper_indices_are_labels_held_by_more_than_two():
    assert not search_budget.has_hyper_indices(["ab", "bc", "ca"], "")
    assert not search_budget.has_hyper_indices(["ab", "bc"], "ac")
    assert not search_budget.has_hyper_indices(["aab", "b"], "")    # a trace: one tensor
    assert search_budget.has_hyper_indices(["ab", "bc", "b"], "")
    assert search_budget.has_hyper_indices(["ab", "bc"], "b")
    assert not search_budget.has_hyper_indices([], "")


def test_a_search_that_runs_none_of_cotengra_s_steps_does_not_import_it(tmp_path):
    # importing cotengra takes 20-30 ms: a fresh process whose search stops at cotengrust's
    # greedy (a 40-tensor chain of bond 2 runs in microseconds) must not pay for it
    if not path_searchers.cotengra_available() or path_searchers.cotengrust() is None:
        pytest.skip("cotengra and cotengrust are not both installed")
    code = (
        "import sys, numpy as np, graphopt as go\n"
        "from graphopt.contraction.search import searchers as path_searchers\n"
        "n = 40\n"
        "sym = __import__('opt_einsum').get_symbol\n"
        "eq = ','.join(sym(i) + sym(i + 1) for i in range(n)) + '->' + sym(0) + sym(n)\n"
        "out = go.contract(eq, *[np.full((2, 2), 0.5) for _ in range(n)])\n"
        "assert out.shape == (2, 2) and np.allclose(out, 0.5), out\n"
        "assert path_searchers.cotengra_available()\n"
        "print('cotengra' in sys.modules)\n")
    env = dict(os.environ, GRAPHOPT_CACHE_DIR=str(tmp_path))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "False"


def test_cotengrust_greedy_paths_are_valid_pairwise_paths():
    if path_searchers.cotengrust() is None:
        pytest.skip("cotengrust is not installed")
    for seed in range(4):
        eq, terms, output, sizes, shapes = network(40, seed)
        for costmod in search_budget.FAST_GREEDY_COSTMODS:
            s = path_searchers.fast_greedy(terms, output, sizes, costmod)
            assert s.pairwise and play(terms, output, sizes, s.path).combo == s.combo
            _, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=s.path)
            assert int(info.opt_cost) == s.flops


def test_a_searcher_that_finds_no_path_is_skipped(cache_dir, monkeypatch):
    # cotengrust's batches and cotengra's reconfiguration return None where they give no
    # path that plays over the network: the search goes on with what it has
    monkeypatch.setattr(path_searchers, "reconfigured", lambda *a: None)
    monkeypatch.setattr(path_searchers, "rust_random_greedy", lambda *a, **k: None)
    _, terms, output, sizes, _ = network(20, 1)
    steps, rec = path_search.search(terms, output, sizes, 0.05)
    assert steps.pairwise and steps.combo <= rec["greedy_combo"]
    assert play(terms, output, sizes, steps.path).combo == steps.combo


def test_cotengrust_random_greedy_batches_are_valid_and_repeatable():
    if path_searchers.cotengrust() is None:
        pytest.skip("cotengrust is not installed")
    eq, terms, output, sizes, shapes = network(40, 9)
    path = path_searchers.rust_random_greedy(terms, output, sizes, 16, seed=3)
    s = play(terms, output, sizes, path)
    assert s.pairwise
    _, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=s.path)
    assert int(info.opt_cost) == s.flops
    assert path_searchers.rust_random_greedy(terms, output, sizes, 16, seed=3) == path


def test_zero_budget_is_greedy_and_a_larger_budget_searches_on(cache_dir):
    _, terms, output, sizes, _ = network(30, 5)
    greedy, rec = path_search.find_path(terms, output, sizes, time_budget=0)
    assert rec["trials"] == 0 and rec["searcher"] == rec["greedy"]
    # a zero budget pays for nothing but the first greedy
    first = "greedy" if path_searchers.cotengrust() is None else \
        f"cotengrust greedy (costmod {search_budget.FAST_GREEDY_COSTMODS[0]})"
    assert rec["greedy"] == first
    assert greedy.combo == start_steps(terms, output, sizes, first).combo
    better, rec2 = path_search.find_path(terms, output, sizes, time_budget=0.05)
    assert rec2["cache"] == "miss" and rec2["trials"] > 0 and rec2["seconds"] >= 0.05
    assert better.combo <= greedy.combo
    _, rec3 = path_search.find_path(terms, output, sizes, time_budget=0.01)
    assert rec3["cache"] == "hit"


@pytest.mark.parametrize("bad", [-1, float("nan"), "1s", True])
def test_bad_budget_is_a_graph_error(bad, cache_dir):
    _, terms, output, sizes, _ = network(6, 0)
    with pytest.raises(GraphError, match="path_time"):
        path_search.find_path(terms, output, sizes, time_budget=bad)


def test_without_cotengra_the_search_runs_random_greedy(cache_dir, monkeypatch):
    monkeypatch.setattr(path_searchers, "cotengra_available", lambda: False)
    monkeypatch.setattr(path_searchers, "cotengrust", lambda: None)
    _, terms, output, sizes, _ = network(20, 6)
    _, rec = path_search.find_path(terms, output, sizes, time_budget=0.6, cache=False)
    assert rec["searcher"] == "opt_einsum random-greedy" and rec["cache"] == "off"


def test_rounds_at_random_subtrees_run_while_one_improves_the_best_path(monkeypatch):
    """Step 7: seeded rounds of the reconfiguration at random subtrees, each of the best
    path then, until one does not improve it (at most ``RANDOM_ROUNDS``), where the budget
    pays; each round is repeatable."""
    if not path_searchers.cotengra_available():
        pytest.skip("cotengra is not installed")
    _, terms, output, sizes, _ = network(30, 2)
    start = play(terms, output, sizes, [(0, 1)] * (len(terms) - 1))   # the written order
    ran, gains = [], iter([0.5, 0.5, 1.0, 0.5])
    real = path_searchers.reconfigured

    def fake(t, o, sz, steps, size, seed=None, subtrees=None):
        ran.append((steps.path, size, seed, subtrees))
        found = real(t, o, sz, steps, size, seed=seed, subtrees=subtrees)
        assert real(t, o, sz, steps, size, seed=seed, subtrees=subtrees).path == found.path
        # a round "improves" by the next factor: the third does not
        return type(found)(found.path, found.steps, int(steps.flops * next(gains)),
                           found.largest, True, 0)

    monkeypatch.setattr(path_searchers, "reconfigured", fake)
    run = path_search._Search(terms, output, sizes, 10.0)
    run.best = start
    run.reconfigure_at_random()
    assert [(seed, size, k) for _, size, seed, k in ran] == \
        [(seed, search_budget.RANDOM_SUBTREE, search_budget.RANDOM_SUBTREES)
         for seed in range(3)]
    assert ran[0][0] == start.path and ran[1][0] != start.path   # each of the best then
    assert "2 rounds at random subtrees" not in run.searcher()
    assert "3 rounds at random subtrees" in run.searcher()
    # a budget that pays for no round: none run
    ran.clear()
    small = path_search._Search(terms, output, sizes, 1e-4)
    small.best = start
    small.reconfigure_at_random()
    assert ran == [] and "random" not in small.searcher()


def test_cotengra_minimizes_our_combo_cost():
    """cotengra is given the objective ``Steps.combo`` is (half of it: cotengra counts a
    multiply-add as one FLOP), and its hyper-optimizer only its partitioning methods (the
    search samples greedy paths itself), each trial reconfigured."""
    ctg = pytest.importorskip("cotengra")
    inputs, output, _, sizes = ctg.utils.lattice_equation([4, 4], d_min=2, d_max=3, seed=0)
    terms, out = ["".join(t) for t in inputs], "".join(output)
    steps = greedy_steps(terms, out, sizes)
    tree = ctg.ContractionTree.from_path(inputs, output, sizes, path=steps.path)
    factor = int(path_searchers.COTENGRA_MINIMIZE.split("-")[1])
    assert steps.combo == 2 * tree.combo_cost(factor=factor)
    hyper = path_searchers.HyperTrials(terms, out, sizes)._opt
    assert "greedy" not in hyper._methods and hyper.reconf_opts is not None
    assert hyper.minimize == path_searchers.COTENGRA_MINIMIZE


def test_hyper_optimizer_chunks_end_a_trial_before_the_budget(monkeypatch):
    """cotengra finishes the trial in flight at a chunk's end: each chunk ends a trial's
    time (the mean so far; before the first, the assumed time per tensor) before the
    budget, and no chunk starts where that leaves nothing."""
    if not path_searchers.cotengra_available():
        pytest.skip("cotengra is not installed")
    _, terms, output, sizes, _ = network(30, 4)
    chunks, trial_seconds = [], 0.04

    class Trials:     # each chunk runs its seconds, then one trial more
        def __init__(self, *args):
            self.trials = 0

        def seconds_per_trial(self):
            return trial_seconds if self.trials else 0.0

        def trial(self, seconds):
            chunks.append((seconds, run.budget() - run.elapsed()))
            time.sleep(seconds + trial_seconds)
            self.trials += 1
            return None

    monkeypatch.setattr(path_searchers, "HyperTrials", Trials)
    budget = search_budget.HYPER_MIN_SECONDS
    run = path_search._Search(terms, output, sizes, budget)
    run.best = play(terms, output, sizes, [(0, 1)] * (len(terms) - 1))
    run.by_the_clock()
    first = search_budget.HYPER_TRIAL_SECONDS_PER_TENSOR * len(terms)
    assert chunks[0][0] == pytest.approx(min(search_budget.HYPER_CHUNK_SECONDS,
                                             chunks[0][1] - first), abs=5e-3)
    # (the time left is read as the chunk starts, a moment after it was sized: a margin
    # for a collection or a descheduled thread between the two, far below a trial's 40 ms;
    # at 1 ms it failed 1 run in 6 on a shared 2-core machine)
    assert all(c <= left - trial_seconds + 0.01 for c, left in chunks[1:]), chunks
    # (a margin for sleep's own overshoot on a loaded machine: far below a trial's 40 ms)
    assert run.elapsed() <= budget + 0.03 and run.hyper_trials == len(chunks)
    # too little time left for the first trial: none starts
    chunks.clear()
    late = path_search._Search(terms, output, sizes, budget)
    late.best = run.best
    late.t0 -= budget - first / 2
    late.by_the_clock()
    assert chunks == [] and late.hyper_trials == 0


def test_with_cotengra_a_large_budget_runs_its_hyper_optimizer(cache_dir):
    pytest.importorskip("cotengra")
    _, terms, output, sizes, _ = network(30, 7)
    # (the steps before it take 0.34-0.42 s of the clock here; at 0.6 s, a full suite on a
    # loaded 2-core machine once spent it all before the hyper-optimizer started)
    steps, rec = path_search.find_path(terms, output, sizes, time_budget=1.5)
    assert rec["searcher"].endswith("cotengra hyper-optimizer") and rec["trials"] > 8
    assert steps.pairwise and steps.combo <= rec["greedy_combo"]


# ------------------------------------------------------------------------- through compile


def cotengra_networks():
    ctg = pytest.importorskip("cotengra")
    yield "lattice", ctg.utils.lattice_equation([4, 5], d_max=3, seed=0)
    yield "randreg", ctg.utils.randreg_equation(24, 3, d_min=2, d_max=3, seed=1)
    yield "tree", ctg.utils.tree_equation(20, d_min=2, d_max=3, seed=2)
    yield "hyper", ctg.utils.rand_equation(20, 3, n_out=2, n_hyper_in=2, n_hyper_out=1,
                                           d_min=2, d_max=3, seed=3)


@pytest.mark.parametrize("which", ["lattice", "randreg", "tree", "hyper"])
def test_cotengra_networks_compile_and_match_opt_einsum(which, cache_dir):
    inputs, output, shapes, _ = dict(cotengra_networks())[which]
    rng = np.random.default_rng(0)
    arrays = [rng.uniform(-1, 1, s) for s in shapes]
    eq = ",".join("".join(t) for t in inputs) + "->" + "".join(output)
    expected = opt_einsum.contract(eq, *arrays, optimize="greedy")
    g = go.Graph(which)
    ins = [g.input(f"x{i}", s) for i, s in enumerate(shapes)]
    g.output(go.einsum(eq, *ins))
    plan = go.compile(g, backend="numpy", cache=False)
    got = plan(*arrays)
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12 * np.abs(expected).max())
    group = plan.report["contraction"].details["groups"][0]
    assert group["search"]["combo"] <= group["search"]["greedy_combo"]
    assert "contraction groups" in str(plan.report)


def test_with_cotengra_the_random_greedy_path_is_reconfigured(cache_dir):
    ctg = pytest.importorskip("cotengra")
    inputs, output, _, sizes = ctg.utils.lattice_equation([6, 6], d_min=2, d_max=4, seed=0)
    terms, out = ["".join(t) for t in inputs], "".join(output)
    below, rec = path_search.search(terms, out, sizes, 0.005)
    assert "reconfiguration" not in rec["searcher"]
    above, rec = path_search.search(terms, out, sizes, 0.05)
    assert "subtree reconfiguration (4, 6, 8" in rec["searcher"]
    assert above.combo < below.combo and above.pairwise
    once = path_searchers.reconfigured(terms, out, sizes, below)
    assert once.combo < below.combo
    assert path_searchers.reconfigured(terms, out, sizes, below).path == once.path  # deterministic


def test_compile_takes_path_time_and_checks_it(cache_dir):
    _, terms, output, sizes, shapes = network(16, 8)
    g = go.Graph("net")
    ins = [g.input(f"x{i}", s) for i, s in enumerate(shapes)]
    g.output(go.einsum(",".join(terms) + "->" + output, *ins))
    plan = go.compile(g, backend="numpy", path_time=0, cache=False)
    search = plan.report["contraction"].details["groups"][0]["search"]
    assert search["searcher"] == search["greedy"] and search["budget_seconds"] == 0
    small = go.Graph("small")
    a = small.input("a", (2, 2))
    small.output(go.einsum("ij,jk->ik", a, a))
    for bad in (-1, "fast", float("inf")):
        with pytest.raises(GraphError, match="path_time"):
            go.compile(small, backend="numpy", path_time=bad, cache=False)


def test_the_default_budget_follows_the_backend_s_combo_rate(cache_dir, monkeypatch):
    # a backend that runs a path's combo cost faster (the GPU's ``combo_rate``) is worth
    # less search: the budget is the estimated run time at its rate, and a compile for it
    # reads the rate off the backend
    _, terms, output, sizes, _ = network(40, 3)
    sizes = dict.fromkeys(sizes, 8)
    host, rec_host = path_search.find_path(terms, output, sizes, cache=False)
    fast, rec_fast = path_search.find_path(terms, output, sizes, cache=False,
                                           combo_rate=1e4 * search_budget.COMBO_RATE)
    assert rec_host["budget_seconds"] > 0.05      # (so the rates' budgets differ)
    assert rec_fast["budget_seconds"] == pytest.approx(
        search_budget.default_budget(fast, 1e4 * search_budget.COMBO_RATE))
    assert rec_fast["budget_seconds"] < rec_host["budget_seconds"] / 100
    assert rec_fast["estimated_run_seconds"] == pytest.approx(
        fast.combo / (1e4 * search_budget.COMBO_RATE))
    seen = []
    real = path_search.find_path
    monkeypatch.setattr(path_search, "find_path",
                        lambda *a, **k: seen.append(k.get("combo_rate")) or real(*a, **k))
    g = go.Graph("rate")
    eq = ",".join(terms) + "->" + output
    ins = [g.input(f"t{k}", tuple(sizes[c] for c in t)) for k, t in enumerate(terms)]
    g.output(go.einsum(eq, *ins))
    go.compile(g, backend="numpy", cache=False, path_cache=False)
    assert seen == [go.backends.get_backend("numpy").rates.combo] == [search_budget.COMBO_RATE]
