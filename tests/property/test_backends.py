"""Every host backend in the registry, on graphopt.testing's random graphs, equals the
interpreter at every opt_level (a new backend is picked up without anyone listing it)."""


import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt.backends import BACKENDS
from graphopt.testing import assert_plan_matches_interpreter, graphs, inputs_for

# cupy needs a GPU and dask a cluster: their own suites run them (marked gpu / dist).
HOST = sorted(name for name in BACKENDS if name not in ("cupy", "dask"))


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
