"""Contraction-path arithmetic (graphopt/contraction/paths.py) against opt_einsum's own
accounting, on equations from opt_einsum's generator (``opt_einsum.testing.rand_equation``)."""

import collections
import math

import numpy as np
import opt_einsum
import pytest
from opt_einsum.testing import rand_equation

from graphopt.contraction import paths
from graphopt.errors import GraphError


def _sizes(eq, shapes):
    return paths.label_sizes(eq, shapes)


@pytest.mark.parametrize("seed", range(12))
@pytest.mark.parametrize("optimize", ["greedy", "dp", "random-greedy"])
def test_flops_and_largest_intermediate_match_opt_einsum(seed, optimize):
    eq, shapes = rand_equation(3 + seed % 6, 3, seed=seed, d_min=2, d_max=5,
                               n_out=seed % 3, return_size_dict=False)
    path, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=optimize)
    terms, output = eq.split("->")[0].split(","), eq.split("->")[1]
    played = paths.play(terms, output, _sizes(eq, shapes), path)
    assert played.flops == paths.path_flops(eq, _sizes(eq, shapes), path) == info.opt_cost
    # opt_einsum's size_list holds every step's result, the final one included
    assert played.largest == max(info.size_list[:-1], default=0)
    assert played.pairwise == all(len(p) <= 2 for p in path)


def test_without_a_path_counts_left_to_right_as_written():
    eq = "ab,bc,cd->ad"
    shapes = [(2, 3), (3, 4), (4, 5)]
    _, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=[(0, 1), (0, 1)])
    assert paths.path_flops(eq, _sizes(eq, shapes)) == info.opt_cost
    assert paths.left_to_right(4) == [(0, 1), (0, 2), (0, 1)]


def test_a_step_keeps_only_labels_later_steps_or_the_output_need():
    steps = paths.play_path(["ab", "bc", "cd"], "ad", [(1, 2), (0, 1)])
    assert steps == [((1, 2), ("bc", "cd"), "bd"), ((0, 1), ("ab", "bd"), "ad")]


def test_flops_do_not_overflow_on_huge_networks():
    # 64 labels of size 16: 2**256 elements in one step, far beyond int64
    terms = ["".join(opt_einsum.get_symbol(i) for i in range(32)),
             "".join(opt_einsum.get_symbol(i) for i in range(32, 64))]
    sizes = {opt_einsum.get_symbol(i): 16 for i in range(64)}
    steps = paths.play(terms, "", sizes, [(0, 1)])
    assert steps.flops == 16 ** 64 * 2 and steps.flops > np.iinfo(np.int64).max
    assert math.log2(steps.flops) == 257


@pytest.mark.parametrize("path, why", [([(0, 3)], "picks"), ([(0, 1)], "leaves"),
                                       ([(0, 0), (0, 1)], "picks")])
def test_a_path_that_does_not_fit_is_a_graph_error(path, why):
    with pytest.raises(GraphError, match=why):
        paths.play_path(["ab", "bc", "cd"], "ad", path)


def _random_terms(seed):
    eq, shapes = rand_equation(3 + seed % 7, 1 + seed % 4, seed=seed, d_min=1, d_max=3,
                               n_out=seed % 4, return_size_dict=False)
    terms, output = eq.split("->")[0].split(","), eq.split("->")[1]
    if seed % 3 == 0 and terms[0]:       # a repeated label (a diagonal) in the first term
        terms[0] += terms[0][0]
        shapes[0] = tuple(shapes[0]) + (shapes[0][0],)
    return terms, output, paths.label_sizes(",".join(terms) + "->" + output, shapes)


@pytest.mark.parametrize("seed", range(300))
def test_left_to_right_cost_is_the_written_order_played(seed):
    terms, output, sizes = _random_terms(seed)
    played = paths.play(terms, output, sizes, paths.left_to_right(len(terms)))
    assert paths.left_to_right_cost(terms, output, sizes) == \
        (played.flops, played.largest, played.write)


def test_left_to_right_cost_with_a_size_zero_label():
    sizes = {"a": 2, "b": 0, "c": 3, "d": 4}
    played = paths.play(["ab", "bc", "cd"], "ad", sizes, paths.left_to_right(3))
    assert paths.left_to_right_cost(["ab", "bc", "cd"], "ad", sizes) == \
        (played.flops, played.largest, played.write)


def test_left_to_right_cost_on_large_networks_matches_play():
    # 400 tensors on a ring, written in ring order (the accumulated term stays small), and
    # the same with a last tensor bonded to all of them (it grows to 400 labels)
    sym = opt_einsum.get_symbol
    ring = [sym(i) + sym((i + 1) % 400) for i in range(400)]
    hub = [t + sym(400 + i) for i, t in enumerate(ring)] + \
        ["".join(sym(400 + i) for i in range(400))]
    for terms in (ring, hub):
        sizes = {c: 2 for t in terms for c in t}
        played = paths.play(terms, "", sizes, paths.left_to_right(len(terms)))
        assert paths.left_to_right_cost(terms, "", sizes) == \
            (played.flops, played.largest, played.write)


@pytest.mark.parametrize("seed", range(40))
def test_step_results_hold_the_labels_opt_einsum_keeps(seed):
    """Each step's result holds the labels opt_einsum's own step keeps, on random equations
    with repeated labels in a term (traces) and steps of two and three operands."""
    r = np.random.default_rng(seed)
    letters = "abcdefg"
    terms = ["".join(r.choice(list(letters), r.integers(1, 5))) for _ in range(r.integers(2, 7))]
    seen = "".join(dict.fromkeys("".join(terms)))
    output = "".join(c for c in seen if r.random() < 0.3 and "".join(terms).count(c) == 1)
    path, left = [], len(terms)
    while left > 1:
        k = min(left, int(r.choice([2, 2, 3])))
        path.append(tuple(int(i) for i in r.choice(left, k, replace=False)))
        left -= k - 1
    eq = ",".join(terms) + "->" + output
    shapes = [(2,) * len(t) for t in terms]
    _, info = opt_einsum.contract_path(eq, *shapes, shapes=True, optimize=path)
    steps = paths.play_path(terms, output, path)
    assert len(steps) == len(info.contraction_list)
    for (_, picked, result), theirs in zip(steps, info.contraction_list):
        ins, out = theirs[2].split("->")
        def canon(ts):   # opt_einsum orders an intermediate's labels its own way
            return sorted("".join(sorted(t)) for t in ts)
        assert canon(picked) == canon(ins.split(",")) and set(result) == set(out)


@pytest.mark.parametrize("seed", range(40))
def test_counted_flops_are_step_flops_summed(seed):
    """``_counted`` (every path's count) applies ``step_flops``' rule inlined: a path's
    count is ``step_flops`` summed over its steps, on random paths with steps of one, two
    and three operands, traces, sizes 1-4."""
    r = np.random.default_rng(seed)
    letters = "abcdefg"
    terms = ["".join(r.choice(list(letters), r.integers(0, 5))) for _ in range(r.integers(1, 7))]
    seen = "".join(dict.fromkeys("".join(terms)))
    output = "".join(c for c in seen if r.random() < 0.3)
    path, left = [], len(terms)
    while left > 1:
        k = min(left, int(r.choice([2, 2, 3])))
        path.append(tuple(int(i) for i in r.choice(left, k, replace=False)))
        left -= k - 1
    path = path or [(0,)]
    sizes = {c: int(r.integers(1, 5)) for c in seen}
    steps = paths.play_path(terms, output, path)
    expected = sum(paths.step_flops(set(labels), bool(set(labels) - set(result)),
                                    len(picked), sizes)
                   for (_, picked, result), labels in
                   zip(steps, (dict.fromkeys("".join(p)) for _, p, _ in steps)))
    assert paths.play(terms, output, sizes, path).flops == expected


def _random_pair_path(rng, n: int) -> list:
    path = []
    while n > 1:
        i, j = (int(x) for x in rng.choice(n, 2, replace=False))
        path.append((i, j))
        n -= 1
    return path


@pytest.mark.parametrize("seed", range(60))
def test_a_network_of_labels_held_twice_plays_as_the_counting_play(seed):
    """Where every label is on two tensors, or on one and the output (opt_einsum's random
    networks), ``play_path`` takes the fast play (``_play_pairs_of_two``): its steps and
    labels are the counting play's, along random pairwise paths; with a label on every
    tensor (``global_dim``), a trace or a step of three, the counting play runs."""
    rng = np.random.default_rng(seed)
    eq, _ = rand_equation(3 + seed % 25, 2 + seed % 3, n_out=seed % 4, seed=seed,
                          global_dim=seed % 5 == 4)
    terms, output = eq.split("->")[0].split(","), eq.split("->")[1]
    path = _random_pair_path(rng, len(terms))
    if seed % 7 == 3 and len(terms) > 3:      # a step of three
        path = [(0, 1, 2)] + path[2:]
    if seed % 11 == 5:                        # a trace in the first term
        terms[0] += terms[0][0]
    held = dict(collections.Counter("".join(terms) + output))
    fast = all(n == 2 for n in held.values()) and all(len(p) == 2 for p in path) and \
        all(len(set(t)) == len(t) for t in terms)
    assert fast == (seed % 5 != 4 and not (seed % 7 == 3 and len(terms) > 3) and
                    seed % 11 != 5)
    once = {t: "".join(dict.fromkeys(t)) for t in terms if len(set(t)) != len(t)}
    counting = paths._play_counting(list(terms), output, [tuple(p) for p in path], once,
                                    dict(held) if not once else dict(collections.Counter(
                                        "".join(once.get(t, t) for t in terms) + output)))
    assert paths._play_path_memo(tuple(terms), output, tuple(path)) == counting
    if fast:
        assert paths._play_pairs_of_two(list(terms), output, list(path)) == counting


@pytest.mark.parametrize("path, why", [([(0, 3), (0, 1)], "picks"), ([(0, 1)], "leaves"),
                                       ([(1, 1), (0, 1)], "picks")])
def test_the_fast_play_refuses_a_path_that_does_not_fit(path, why):
    # ab,bc,cd->ad: every label held twice
    with pytest.raises(GraphError, match=why):
        paths.play_path(["ab", "bc", "cd"], "ad", path)
