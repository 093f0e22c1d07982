"""Running slices (graphopt/contraction/slicing/run.py): the loop against np.einsum, slices at
once, and what the loop allocates."""


import numpy as np
import pytest
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from graphopt.contraction.paths import default_path, label_sizes  # noqa: E402
from graphopt.contraction.slicing.run import (  # noqa: E402
    parallel_workspace_bytes,
    slice_workers,
    sliced_contract,
    splits_result,
)
from graphopt.ir.einsum import label  # noqa: E402

# Every test runs twice: every GEMM-shaped pair step a GEMM (the arrays are small), then
# graphopt's default (small pair steps on np.einsum).
pytestmark = pytest.mark.usefixtures("pair_step_form")

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


def test_a_sliced_call_of_twenty_operands_keeps_nothing_per_slice():
    # CPython before 3.12.5 never reuses a freed tuple of 20 items (gh-121439): a loop that
    # made one per slice (the operands as *args, a key of one item per operand) kept 200
    # bytes a tuple, three a slice; the loop now makes none of an operand's length
    import tracemalloc

    n, bond = 20, 4
    eq = ",".join(label(k) + label(k + 1) for k in range(n)) + "->"
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal((bond, bond)) for _ in range(n)]
    path = default_path(eq, [a.shape for a in arrays])
    slices = [label(k) for k in range(1, 4)]           # 64 slices
    expected = sliced_contract(eq, path, slices, arrays)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        res = sliced_contract(eq, path, slices, arrays)
        kept = tracemalloc.get_traced_memory()[0] - base - res.nbytes
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(res, expected, rtol=1e-12)
    assert kept < 64 * 200


@pytest.mark.parametrize("slices, blocks", [(["y"], [100]), (["x"], [10])])
def test_slices_of_a_summed_label_hold_one_slice_result_at_once(slices, blocks):
    # each slice's result is added into the result and dropped before the next one is
    # made: held until it was rebound, two 720 kB slice results were alive at once, and a
    # call measured 1.43-1.75x contraction_workspace_bytes
    import tracemalloc

    from graphopt.contraction.slicing.run import contraction_workspace_bytes

    eq, path = "ax,xy,yc->ac", [(0, 1), (0, 1)]
    rng = np.random.default_rng(0)
    arrays = [rng.random((300, 40)), rng.random((40, 400)), rng.random((400, 300))]
    out = np.empty((300, 300))
    predicted = contraction_workspace_bytes(eq, [a.shape for a in arrays], path, slices,
                                            blocks, np.float64)
    sliced_contract(eq, path, slices, arrays, out=out, blocks=blocks)    # (set up once)
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        sliced_contract(eq, path, slices, arrays, out=out, blocks=blocks)
        peak = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    np.testing.assert_allclose(out, arrays[0] @ arrays[1] @ arrays[2], rtol=1e-12)
    assert peak <= 1.05 * predicted


def test_a_slicing_is_predicted_alike_whatever_slicings_were_predicted_before():
    """A slicing search asks one shared ``PathContraction`` for many slicings: the shapes
    of one slicing's ragged slice (laid out in its full slice's arena) are another's full
    slice (an arena of its own). Each is kept apart, so a prediction is the one a fresh
    contraction (the kernel's) makes: planned the other way first, a 6-step network's was
    19.3 kB against its kernel's 17.6 kB."""
    from graphopt.contraction.program.run import PathContraction
    from graphopt.contraction.slicing.run import contraction_workspace_bytes

    eq = "abcd,be,ecf->adf"
    shapes = [(4, 6, 5, 3), (6, 7), (7, 5, 4)]
    path = [(0, 1), (0, 1)]
    shared = PathContraction(eq, path)

    def predicted(blocks, contraction):
        return contraction_workspace_bytes(eq, shapes, path, ["c"], blocks, np.float64,
                                           contraction=contraction)
    # blocks of 3 over c = 5: full slices of 3, a ragged one of 2; then blocks of 2: full
    # slices of 2 (the shapes of the ragged slice before), a ragged one of 1
    for blocks in ([3], [2], [3], [1]):
        assert predicted(blocks, shared) == predicted(blocks, PathContraction(eq, path))
