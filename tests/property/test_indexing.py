"""Basic indexing on Tensors against NumPy's own, on every CPU backend: any shape, any mix of
ints, slices with any bounds and steps, ``None`` and ``...``."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt.testing.generators import basic_indices


@st.composite
def arrays_and_keys(draw):
    shape = tuple(draw(st.lists(st.integers(0, 5), min_size=0, max_size=4)))
    return shape, draw(basic_indices(shape))


@settings(max_examples=60, deadline=None)
@given(arrays_and_keys(), st.sampled_from(["numpy", "numba", "dask"]))
def test_indexing_matches_numpy(case, backend):
    shape, key = case
    a = np.arange(int(np.prod(shape)), dtype=np.float64).reshape(shape) - 3.5
    g = go.Graph("index")
    x = g.input("x", shape)
    g.output(x[key] * 2)
    got = go.compile(g, backend=backend)(a)
    want = a[key] * 2
    assert got.shape == want.shape
    np.testing.assert_array_equal(got, want)
