"""go.debug_nans: the first step whose result holds a NaN or an infinity raises, naming the
op and the user's line; off, nothing is checked."""

import numpy as np
import pytest

import graphopt as go


def _graph():
    g = go.Graph("nans")
    x = g.input("x", (4,), "float64")
    y = go.log(x)                      # the line the error names
    g.output(go.exp(y * 2.0) + go.sqrt(x))
    return g


@pytest.mark.parametrize("backend", ["numpy", "numba"])
def test_the_first_non_finite_result_names_its_op_and_line(backend):
    plan = go.compile(_graph(), backend=backend, cache=False)
    bad = np.array([1.0, -1.0, 2.0, 3.0])          # log(-1) is nan
    assert np.isnan(plan(x=bad)).any()             # off: NumPy's answer, no check
    with go.debug_nans():
        with pytest.raises(go.GraphError, match=r"debug_nans: step \d+ .* produced a NaN or "
                                                r"an infinity from finite operands") as e:
            plan(x=bad)
        np.testing.assert_allclose(plan(x=np.ones(4)), np.exp(0.0) + 1.0)
    assert e.value.op == "log" and "test_nans.py:13" in e.value.src
    assert np.isnan(plan(x=bad)).any()             # the block's end restores the setting


def test_a_non_finite_input_is_said_to_come_in():
    plan = go.compile(_graph(), backend="numpy", cache=False)
    go.debug_nans(True)
    try:
        with pytest.raises(go.GraphError, match="already held one"):
            plan(x=np.array([1.0, np.inf, 2.0, 3.0]))
    finally:
        go.debug_nans(False)


def test_integer_results_are_not_checked():
    g = go.Graph("ints")
    x = g.input("x", (3,), "int64")
    g.output(x * 2)
    with go.debug_nans():
        np.testing.assert_array_equal(go.compile(g, cache=False)(x=np.arange(3)), [0, 2, 4])
