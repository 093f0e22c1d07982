"""Choosing slices (graphopt/contraction/slicing/labels.py): the greedy finder, and fitting
a budget with the exact workspace."""

import math

import pytest

from graphopt.contraction.paths import default_path, label_sizes, play_path  # noqa: E402
from graphopt.contraction.slicing.labels import (  # noqa: E402
    MAX_FLOP_OVERHEAD,
    find_slices,
    fit_slices,
    slice_cost,
)
from graphopt.contraction.slicing.run import contraction_workspace_bytes  # noqa: E402
from graphopt.errors import GraphError  # noqa: E402
from tests.passes.test_slicing import grid_equation  # noqa: E402

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


# ------------------------------------------------------------------------------ fitting


def test_fit_slices_meets_the_budget_with_the_exact_workspace():
    # a 4x5 lattice at bond 8: unsliced its greedy path allocates ~6 MiB at once
    eq, bond = grid_equation(4, 5), 8
    shapes = [(bond,) * len(t) for t in eq[:-2].split(",")]
    path = default_path(eq, shapes)
    whole = contraction_workspace_bytes(eq, shapes, path, (), None, "float64")
    for workers in (1, 2):
        budget = whole // 6
        got_path, plan, ws = fit_slices(eq, shapes, path, "float64", budget, workers=workers)
        assert ws == contraction_workspace_bytes(eq, shapes, got_path, plan.labels,
                                                 plan.blocks, "float64", workers) <= budget
        assert plan.n_slices > 1 and plan.flop_overhead <= MAX_FLOP_OVERHEAD
        # the intermediates' bound alone would not do: the arena holds several of them
        assert ws > plan.largest_bytes * workers


def test_fit_slices_names_the_least_it_found_where_nothing_fits():
    eq, bond = grid_equation(3, 3), 4
    shapes = [(bond,) * len(t) for t in eq[:-2].split(",")]
    with pytest.raises(GraphError, match=r"runs within 100 bytes \(1 slice\(s\) at once\); "
                                         r"the least found was \d+ bytes"):
        fit_slices(eq, shapes, default_path(eq, shapes), "float64", 100)
