"""int8, int16 and unsigned integers on every host backend, exactly as NumPy computes them:
each op's value wraps in its own dtype, mixed operands promote by NumPy's rules, sums
accumulate in NumPy's widths, contractions wrap like ``np.einsum``. The kernel generators
decline these dtypes (numba and C compute small integers in 64 or 32 bits between ops), so
their groups run on NumPy kernels; the CUDA generator's refusal is checked on the host."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import graphopt as go
from graphopt.analysis.fused import node_subgraph
from graphopt.backends.cupy import codegen as cg
from graphopt.testing import assert_plan_matches_interpreter

BACKENDS = [("numpy", {}), ("numba", {}),
            ("numba", {"fast_math": False,
                       "kernel_forms": {"fused": "numba-fused", "contraction": "blas-gemm"}}),
            ("dask", {})]
SMALL = ("int8", "int16", "uint8", "uint16", "uint32", "uint64")


def _extremes(dtype, shape, rng):
    if np.dtype(dtype).kind == "f":
        return (rng.normal(size=shape) * 100).astype(dtype)
    info = np.iinfo(dtype)
    pool = np.array([info.min, info.min + 1, -1 if info.min else 2, 0, 1, 3, info.max - 1,
                     info.max], dtype=dtype)
    return rng.choice(pool, size=shape)


def _check(build, arrays, backend, options):
    if backend == "dask":
        pytest.importorskip("dask.distributed")
    g = go.Graph("small_ints")
    ts = [g.input(f"x{i}", a.shape, a.dtype.name) for i, a in enumerate(arrays)]
    g.output(build(*ts))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        with np.errstate(all="ignore"):
            want = np.asarray(build(*arrays))
        plan = go.compile(g, backend=backend, cache=False, **options)
        got = np.asarray(plan(*arrays))
    assert got.dtype == want.dtype and got.shape == want.shape
    if want.dtype.kind == "f":    # float16 or an integer promoted with a float: rounding
        rtol = {2: 1e-3, 4: 1e-6}.get(want.dtype.itemsize, 1e-14)
        np.testing.assert_allclose(got, want, rtol=rtol, atol=rtol)
    else:
        np.testing.assert_array_equal(got, want)
    assert_plan_matches_interpreter(g, plan, {f"x{i}": a for i, a in enumerate(arrays)})
    return plan


@pytest.mark.parametrize("backend,options", BACKENDS)
@pytest.mark.parametrize("dtype", SMALL)
def test_elementwise_chains_wrap_in_their_own_dtype(dtype, backend, options, rng):
    # maximum after a wrapping add: a 32/64-bit intermediate would give another answer
    x, y = _extremes(dtype, (6, 7), rng), _extremes(dtype, (7,), rng)
    plan = _check(lambda a, b: go.maximum(a + b, a * b) - b if isinstance(a, go.Tensor)
                  else np.maximum(a + b, a * b) - b, [x, y], backend, options)
    if backend == "numba":
        assert not any(s.kernel.impl.startswith("numba") for s in plan.steps
                       if s.dtype == dtype)


@pytest.mark.parametrize("backend,options", BACKENDS)
@pytest.mark.parametrize("da,db", [("uint8", "int8"), ("uint64", "int64"), ("uint32", "float32"),
                                   ("int16", "uint16"), ("int8", "float16"), ("uint16", "bool")])
def test_mixed_operands_promote_as_numpy(da, db, backend, options, rng):
    x = _extremes(da, (5, 4), rng)
    y = _extremes(db, (4,), rng) if db != "bool" else rng.random(4) < 0.5
    _check(lambda a, b: a * b + a, [x, y], backend, options)
    _check(lambda a, b: a / (b * 0 + 3), [x, y], backend, options)


@pytest.mark.parametrize("backend,options", BACKENDS)
@pytest.mark.parametrize("dtype", SMALL)
def test_reductions_accumulate_in_numpys_widths(dtype, backend, options, rng):
    x = _extremes(dtype, (9, 5), rng)
    _check(lambda a: a.sum(axis=0), [x], backend, options)
    _check(lambda a: a.max(axis=1), [x], backend, options)
    _check(lambda a: a.mean(), [x], backend, options)


@pytest.mark.parametrize("backend,options", BACKENDS)
@pytest.mark.parametrize("dtype", SMALL)
def test_contractions_wrap_like_np_einsum(dtype, backend, options, rng):
    a, b, c = (_extremes(dtype, s, rng) for s in [(4, 5), (5, 6), (6, 3)])

    def chain(x, y, z):
        return go.einsum("ij,jk,kl->il", x, y, z) if isinstance(x, go.Tensor) else \
            np.einsum("ij,jk,kl->il", x, y, z)
    _check(chain, [a, b, c], backend, options)


def test_the_cuda_generator_declines_small_integers():
    g = go.Graph()
    x = g.input("x", (4,), "int8")
    g.output(go.maximum(x + x, x))
    G = g.to_ir()
    root = G.graph["outputs"][0]
    with pytest.raises(cg.Unsupported, match="dtype int8 has no generated kernel"):
        cg.compile_group(node_subgraph(G, root))
