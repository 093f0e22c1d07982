"""What a path search's budget pays for (graphopt/contraction/search/budget.py): the default
budget and the counted steps; the search that spends it is tests/test_path_search.py's."""

from __future__ import annotations

import pytest
from opt_einsum.testing import rand_equation

from graphopt.contraction.search import anytime as path_search
from graphopt.contraction.search import budget as search_budget
from graphopt.contraction.search import searchers as path_searchers


def network(n, seed, reg=3):
    eq, shapes = rand_equation(n, reg, seed=seed, d_min=2, d_max=5)
    terms, output = eq.split("->")[0].split(","), eq.split("->")[1]
    sizes = {c: s for t, sh in zip(terms, shapes) for c, s in zip(t, sh)}
    return terms, output, sizes


def test_counted_steps_are_what_the_budget_pays_for():
    per_trial = search_budget.TRIAL_SECONDS_PER_TENSOR * 100
    budget = [per_trial * 3]
    counted = search_budget.SearchSteps([chr(0x4E00 + i) for i in range(100)], lambda: budget[0])
    assert counted.pays_for(per_trial * 3) and not counted.pays_for(per_trial * 3.01)
    counted.count(per_trial * 2)
    assert counted.pays_for(per_trial) and not counted.pays_for(per_trial * 1.01)
    assert counted.left() == pytest.approx(per_trial)
    budget[0] = 1e3                         # the budget follows the best path found so far
    assert counted.pays_for(search_budget.RECONF_SECONDS_PER_TENSOR[8] * 100)


def test_a_timed_budget_counts_the_clock_where_it_is_ahead_of_the_model():
    clock = [0.0]
    n = ["x"] * 10
    small = search_budget.SearchSteps(n, lambda: 0.1, lambda: clock[0])
    timed = search_budget.SearchSteps(n, lambda: search_budget.HYPER_MIN_SECONDS,
                                      lambda: clock[0])
    for counted in (small, timed):
        counted.count(0.05)
    clock[0] = 0.3            # the steps took longer than their assumed cost
    assert small.spent() == 0.05 and small.pays_for(0.05)     # counted: the same everywhere
    assert timed.spent() == 0.3
    assert timed.left() == pytest.approx(search_budget.HYPER_MIN_SECONDS - 0.3)
    clock[0] = 0.01           # the clock behind the model: the count decides
    assert timed.spent() == 0.05


def test_default_budget_follows_the_estimated_run_time():
    terms, output, sizes = network(12, 0)
    s = path_searchers.greedy(terms, output, sizes)
    assert search_budget.default_budget(s) == pytest.approx(
        search_budget.SEARCH_FRACTION * s.combo / search_budget.COMBO_RATE)
    huge = type(s)(s.path, s.steps, 10**30, s.largest, True, 10**20)
    assert search_budget.default_budget(huge) == search_budget.DEFAULT_MAX_SECONDS
    found, rec = path_search.find_path(terms, output, sizes, cache=False)
    assert rec["estimated_run_seconds"] == pytest.approx(search_budget.estimated_seconds(found))


def test_sharing_pairs_count_each_pair_of_terms_once():
    # "a" on three terms makes three pairs; "b" adds none that "a" has not (terms 0 and 1)
    assert search_budget.sharing_pairs(["ab", "ab", "ac", "d"]) == 3
    assert search_budget.sharing_pairs(["a", "b"]) == 0
    # one opt_einsum trial's assumed cost grows with the pairs
    counted = search_budget.SearchSteps(["ab", "ab", "ac", "d"], lambda: 1.0)
    assert counted.trial_seconds() == pytest.approx(
        4 * search_budget.TRIAL_SECONDS_PER_TENSOR + 3 * search_budget.TRIAL_SECONDS_PER_PAIR)
