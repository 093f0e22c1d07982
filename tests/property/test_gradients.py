"""Gradients of random graphs (graphopt.testing's generators: einsum with traces,
diagonals and ellipsis, elementwise ops with broadcasting and scalars, reductions, layout
and indexing, softmax, casts, shared subexpressions) against float64 finite differences,
on every host backend at every opt level."""

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from graphopt.backends import BACKENDS
from graphopt.testing import assert_grad_correct, graphs
from graphopt.testing.gradcheck import has_gradient

HOST = sorted(name for name in BACKENDS if name not in ("cupy", "dask"))
FLOAT_INPUTS = ("float64", "complex128", "int64")


@pytest.mark.slow
@pytest.mark.parametrize("backend", HOST)
@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
@settings(max_examples=8, suppress_health_check=[HealthCheck.too_slow,
                                                 HealthCheck.filter_too_much])
@given(g=graphs(max_nodes=12, dtypes=FLOAT_INPUTS), data=st.data())
def test_random_graph_gradients_match_finite_differences(backend, opt_level, g, data):
    if not BACKENDS[backend].available():
        pytest.skip(f"{backend}: {BACKENDS[backend].install_hint}")
    assume(has_gradient(g))
    # generic points (standard normal values): finite differences cannot judge a kink, and
    # inputs_for's exact small values sit on them (relu(0), abs(0), ties)
    seed = data.draw(st.integers(0, 2**16), label="seed")
    assert_grad_correct(g, seed=seed, backends=(backend,), opt_levels=(opt_level,),
                        directions=2)


@pytest.mark.slow
@settings(max_examples=10)
@given(g=graphs(max_nodes=12, dtypes=("float32", "float64"),
                ops=("unary", "binary", "reduce", "einsum", "matmul", "softmax", "shared")),
       data=st.data())
def test_float32_gradients_on_numba_match_finite_differences(g, data):
    pytest.importorskip("numba")
    assume(has_gradient(g))
    seed = data.draw(st.integers(0, 2**16), label="seed")
    assert_grad_correct(g, seed=seed, backends=("numba",), opt_levels=(2,), directions=2)
