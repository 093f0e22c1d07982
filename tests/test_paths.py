"""Contraction-path arithmetic (graphopt/paths.py) against opt_einsum's own accounting, on
equations from opt_einsum's generator (``opt_einsum.testing.rand_equation``)."""

import math

import numpy as np
import opt_einsum
import pytest
from opt_einsum.testing import rand_equation

from graphopt import paths
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
    assert steps == [((1, 2), ["bc", "cd"], "bd"), ((0, 1), ["ab", "bd"], "ad")]


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
