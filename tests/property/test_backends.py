"""Every host backend in the registry, on graphopt.testing's random graphs, equals the
interpreter at every opt_level (a new backend is picked up without anyone listing it)."""

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt.backends import BACKENDS
from graphopt.interpreter import interpret
from graphopt.testing import graphs, inputs_for
from graphopt.testing.semantics import graph_tolerance, compare_outputs

# cupy needs a GPU and dask a cluster: their own suites run them (marked gpu / dist).
HOST = sorted(name for name in BACKENDS if name not in ("cupy", "dask"))


def as_list(v):
    if isinstance(v, dict):
        return list(v.values())
    return list(v) if isinstance(v, (tuple, list)) else [v]


def assert_plan_matches_interpreter(g, plan, inputs):
    before = {k: np.array(v, copy=True) for k, v in inputs.items()}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        expected = as_list(interpret(g.to_ir(), **inputs))
        got = as_list(plan(**inputs))
        again = as_list(plan(**inputs))
    rtol, atol = graph_tolerance(g.to_ir(), plan.graph)
    if plan.backend.name == "numba" and plan.options.get("fast_math", True):
        rtol, atol = max(rtol, 1e-5), max(atol, 1e-5)   # numba_math's bounds, with margin
    assert len(expected) == len(got)
    for e, a, b in zip(expected, got, again):
        assert isinstance(a, np.ndarray)
        problem = compare_outputs(e, a, rtol, atol)
        assert problem is None, f"{problem}\n{plan.report}"
        # a later call never overwrites what an earlier one returned
        assert not np.shares_memory(a, b)
        assert compare_outputs(a, b, 0, 0) is None or np.isnan(a).any()
    for k, v in inputs.items():   # inputs are never written to
        assert np.array_equal(before[k], v, equal_nan=True), k


@pytest.mark.parametrize("backend", HOST)
@pytest.mark.parametrize("opt_level", [0, 2])
@settings(max_examples=15)
@given(g=graphs(max_nodes=14), data=st.data())
def test_random_graphs_equal_the_interpreter(backend, opt_level, g, data):
    if not BACKENDS[backend].available():
        pytest.skip(f"{backend}: {BACKENDS[backend].install_hint}")
    inputs = data.draw(inputs_for(g), label="inputs")
    plan = go.compile(g, backend=backend, opt_level=opt_level, cache=False)
    assert_plan_matches_interpreter(g, plan, inputs)


@pytest.mark.parametrize("fast_math", [True, False])
@settings(max_examples=15)
@given(g=graphs(max_nodes=16, ops=("unary", "binary", "reduce", "matmul", "softmax",
                                   "einsum", "const", "shared"),
                dtypes=("float32", "float64", "complex128")),
       data=st.data())
def test_numba_fusion_heavy_graphs_equal_the_interpreter(fast_math, g, data):
    pytest.importorskip("numba")
    inputs = data.draw(inputs_for(g), label="inputs")
    plan = go.compile(g, backend="numba", fast_math=fast_math, cache=False)
    assert_plan_matches_interpreter(g, plan, inputs)


@settings(max_examples=10, deadline=None)
@given(dims=st.tuples(*(st.integers(1, n) for n in (3, 3, 7, 5))),
       dtype=st.sampled_from(["float32", "float64", "complex128"]),
       middle=st.sampled_from(["softmax", "scale", "none"]),
       tile_bytes=st.sampled_from([1, 300, 1 << 20]), data=st.data())
def test_numba_tiled_chains_equal_the_interpreter(dims, dtype, middle, tile_bytes, data):
    """Batched einsum chains forced into tiled regions (any block size) run like the
    interpreter."""
    pytest.importorskip("numba")
    from graphopt.passes import tiling

    b, h, q, d = dims
    g = go.Graph("chain")
    x, y, z = (g.input(n, (b, h, q, d), dtype) for n in "xyz")
    s = go.einsum("bhqd,bhkd->bhqk", x, y)
    if middle == "softmax" and dtype != "complex128":
        s = go.softmax(s * 0.5, axis=-1)
    elif middle != "none":
        s = go.tanh(s) * 2.0 + 1.0
    g.output(go.einsum("bhqk,bhkd->bhqd", s, z) - 1.0)
    inputs = data.draw(inputs_for(g), label="inputs")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(tiling, "TILE_MIN_BYTES", 0)
        mp.setattr(tiling, "TILE_BYTES", tile_bytes)
        plan = go.compile(g, backend="numba", cache=False)
    if b * h > 1:
        assert any(k.impl.startswith("tiled(") for k in plan.kernels), plan.report
    assert_plan_matches_interpreter(g, plan, inputs)
