"""Liveness: the one live-bytes sweep, what the arena holds, and the naive count."""

import numpy as np

import graphopt as go
from graphopt.analysis.liveness import (
    ALIGN,
    arena_sizes,
    held_around,
    in_arena,
    live_bytes,
    naive_bytes,
    peak_live_bytes,
)
from graphopt.contraction.paths import live_peak, play_path


def test_live_bytes_counts_each_buffer_through_its_last_step():
    intervals = {"a": (0, 2), "b": (1, 1), "c": (2, 4)}
    sizes = {"a": 10, "b": 5, "c": 7}
    np.testing.assert_array_equal(live_bytes(intervals, sizes), [10, 15, 17, 7, 7])
    np.testing.assert_array_equal(live_bytes(intervals, sizes, 6), [10, 15, 17, 7, 7, 0])
    assert peak_live_bytes(intervals, sizes) == 17
    assert peak_live_bytes({}, {}) == 0


def test_a_buffer_shared_in_place_is_counted_once():
    intervals = {"a": (0, 1), "b": (1, 2)}
    sizes = {"a": 8, "b": 8}
    assert peak_live_bytes(intervals, sizes) == 16
    assert peak_live_bytes(intervals, sizes, inplace={"b": "a"}) == 8


def test_the_arena_holds_computed_values_that_are_not_outputs():
    g = go.Graph("held")
    x = g.input("x", (4,), "float64")
    c = g.const(np.ones(4))
    h = go.exp(x + c)
    g.output(h * 2.0)
    G = g.to_ir()
    out = G.graph["outputs"][0]
    (add,) = [n for n in G if G.nodes[n]["op"] == "add"]
    assert not in_arena(G, G.graph["inputs"][0]) and not in_arena(G, out)
    assert in_arena(G, add)
    sizes = arena_sizes(G)
    assert sizes[add] == 32 and sizes[out] == 0 and sizes[G.graph["inputs"][0]] == 0
    # an exp reads the add (held) and writes a value the arena holds
    (exp,) = [n for n in G if G.nodes[n]["op"] == "exp"]
    assert held_around(G, exp) == 64 and held_around(G, out) == 32


def test_the_naive_count_aligns_every_buffer():
    assert naive_bytes({"a": 1, "b": ALIGN, "c": ALIGN + 1}) == 4 * ALIGN


def test_a_path_s_live_peak_holds_its_intermediates_and_each_step_s_result():
    steps = play_path(["ab", "bc", "cd"], "ad", [(0, 1), (0, 1)])
    # step 0 makes 10 (nothing else alive); step 1 reads it and makes 3
    assert live_peak(steps, 3, [10, 3]) == 13
    assert live_peak(steps, 3, [10, 0], extra=[0, 5]) == 15
