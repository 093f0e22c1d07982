"""The numba backend: kernel choices, BLAS contractions, epilogues in place, the arena
runtime (no per-call allocation but the outputs, concurrency) and the fallback without numba.
"""

import warnings
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import graphopt as go
from graphopt.backends import BACKENDS
from graphopt.backends.numba import backend as numba_cpu
from graphopt.compiler import driver as compiler
from graphopt.errors import GraphError
from graphopt.support import disk_cache

pytest.importorskip("numba")


def mlp_graph(b=64, i=48, h=80):
    g = go.Graph("mlp")
    x = g.input("x", (b, i), "float32")
    w = g.input("w", (i, h), "float32")
    bias = g.input("bias", (h,), "float32")
    y = go.gelu(go.einsum("bi,ih->bh", x, w) + bias)
    g.output({"y": y, "z": go.exp(y * 0.5).sum(axis=1)})
    return g


def mlp_inputs(rng, b=64, i=48, h=80):
    return {"x": rng.standard_normal((b, i), dtype=np.float32),
            "w": (rng.standard_normal((i, h), dtype=np.float32) * 0.2).astype(np.float32),
            "bias": rng.standard_normal(h, dtype=np.float32)}


def test_auto_is_numba_and_matches_the_reference(rng):
    g, inputs = mlp_graph(), mlp_inputs(rng)
    plan = go.compile(g)
    assert plan.backend.name == "numba"
    ref = go.compile(g, backend="numpy", opt_level=0)(**inputs)
    got = plan(**inputs)
    for k in ref:
        np.testing.assert_allclose(got[k], ref[k], rtol=1e-5, atol=1e-5)


def test_contraction_epilogue_runs_on_the_gemm_output(rng):
    plan = go.compile(mlp_graph(), cache=False)
    (step,) = [s for s in plan.steps if "einsum" in s.op_kinds]
    assert step.kernel.impl.startswith("blas-gemm+")
    assert step.op_kinds == ("einsum", "add", "gelu")
    src = step.kernel.source
    assert "np.matmul(" in src and "def epilogue(args, out)" in src and "@numba.njit" in src
    assert step.kernel.details["contraction"] == "blas-gemm"


def test_large_elementwise_group_is_timed_against_numpy_blocks(rng):
    n = numba_cpu.MEASURE_MIN_ELEMENTS
    g = go.Graph("ew")
    x = g.input("x", (n,), "float32")
    y = g.input("y", (n,), "float32")
    g.output(go.tanh(go.exp(x * 0.5) * y + 1.0) - x)
    plan = go.compile(g, cache=False)
    (step,) = plan.steps
    d = step.kernel.details
    assert set(d["timings_ms"]) == {"numba-fused", "numpy-blocked"}
    assert d["timings_ms"][step.kernel.impl] == min(d["timings_ms"].values())
    assert "measured" in d["reason"]
    xs = {"x": rng.standard_normal(n, dtype=np.float32),
          "y": rng.standard_normal(n, dtype=np.float32)}
    ref = go.compile(g, backend="numpy")(**xs)
    np.testing.assert_allclose(plan(**xs), ref, rtol=1e-5, atol=1e-5)


def test_exact_math_on_request(rng):
    g = go.Graph()
    x = g.input("x", (1000,), "float64")
    g.output(go.exp(go.tanh(x) * 3.0) + 1.0)
    xs = rng.standard_normal(1000) * 10
    fast = go.compile(g, cache=False)
    exact = go.compile(g, fast_math=False, cache=False)
    assert "FAST[" in fast.kernels[0].source and "FAST[" not in exact.kernels[0].source
    ref = np.exp(np.tanh(xs) * 3.0) + 1.0
    np.testing.assert_allclose(exact(xs), ref, rtol=1e-15)
    np.testing.assert_allclose(fast(xs), ref, rtol=1e-12)
    with pytest.raises(GraphError, match="fast_math"):
        go.compile(g, fast_math="yes", cache=False)


def test_single_ops_use_ufuncs_and_the_reference(rng):
    g = go.Graph()
    x = g.input("x", (30, 40), "float64")
    g.output({"e": go.exp(x), "s": x.sum(axis=0), "t": x.T})
    plan = go.compile(g, opt_level=0, cache=False)
    impls = {s.op_kinds[0]: s.kernel.impl for s in plan.steps}
    assert impls["exp"] == "numpy-ufunc" and impls["sum"] == "numpy"
    xs = rng.standard_normal((30, 40))
    out = plan(xs)
    np.testing.assert_array_equal(out["e"], np.exp(xs))
    np.testing.assert_array_equal(out["s"], xs.sum(axis=0))
    np.testing.assert_array_equal(out["t"], xs.T)


def test_calls_allocate_only_their_outputs(rng):
    g = go.Graph()
    x = g.input("x", (256, 64), "float32")
    w = g.input("w", (64, 64), "float32")
    h = go.relu(go.einsum("ij,jk->ik", x, w))
    h2 = go.einsum("ij,jk->ik", h, w) * 2.0
    g.output(go.tanh(h2).sum(axis=1))
    plan = go.compile(g, cache=False)
    assert plan.arena_bytes > 0
    xs = {"x": rng.standard_normal((256, 64), dtype=np.float32),
          "w": rng.standard_normal((64, 64), dtype=np.float32)}
    first = plan(**xs)
    misses = plan.pool.stats.misses
    outs = [plan(**xs) for _ in range(5)]
    assert plan.pool.stats.misses == misses            # the arena is reused, not reallocated
    assert plan.arena_stats["reused"] >= 5
    for o in outs:                                      # fresh outputs every call
        assert not np.shares_memory(o, first)
        np.testing.assert_array_equal(o, first)


def test_concurrent_calls_get_their_own_arenas(rng):
    g, _ = mlp_graph(), None
    plan = go.compile(g, cache=False)
    inputs = [mlp_inputs(np.random.default_rng(s)) for s in range(6)]
    ref_plan = go.compile(g, backend="numpy")
    expected = [ref_plan(**i) for i in inputs]

    def work(k):
        for _ in range(5):
            got = plan(**inputs[k])
        return got

    with ThreadPoolExecutor(6) as pool:
        results = list(pool.map(work, range(6)))     # (a worker's exception is raised here)
    for got, exp in zip(results, expected):
        for key in exp:
            np.testing.assert_allclose(got[key], exp[key], rtol=1e-5, atol=1e-5)


def test_without_numba_compile_says_so_and_offers_numpy(monkeypatch):
    monkeypatch.setattr(BACKENDS["numba"], "available", classmethod(lambda cls: False))
    monkeypatch.setattr(compiler, "_warned_fallback", False)
    g = go.Graph()
    g.output(go.exp(g.input("x", (3,), "float64")))
    with pytest.raises(GraphError, match="pip install numba.*backend='numpy'"):
        go.compile(g, backend="numba", cache=False)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        plan = go.compile(g, cache=False)
    assert plan.backend.name == "numpy"
    (w,) = [w for w in caught if "numba is not installed" in str(w.message)]
    assert len(str(w.message).splitlines()) == 1


def test_fortran_and_strided_inputs(rng):
    g = go.Graph()
    a = g.input("a", (40, 30), "float64")
    b = g.input("b", (30, 20), "float64")
    g.output(go.tanh(go.einsum("ij,jk->ik", a, b)) + a.sum(axis=1, keepdims=True))
    plan = go.compile(g, cache=False)
    a_c, b_c = rng.standard_normal((40, 30)), rng.standard_normal((30, 20))
    expected = plan(a_c, b_c)
    a_f = np.asfortranarray(a_c)
    b_s = np.zeros((60, 20))[::2]          # a strided view
    b_s[...] = b_c
    np.testing.assert_allclose(plan(a_f, b_s), expected, rtol=1e-12)
    assert np.array_equal(b_s, b_c) and a_f.flags.f_contiguous


def test_measured_memory_is_reported_next_to_the_plan(rng):
    g = go.Graph()
    x = g.input("x", (256, 64), "float32")
    w = g.input("w", (64, 64), "float32")
    h = go.relu(go.einsum("ij,jk->ik", x, w))
    g.output(go.tanh(go.einsum("ij,jk->ik", h, w) * 2.0).sum(axis=1))
    inputs = {"x": rng.standard_normal((256, 64), dtype=np.float32),
              "w": rng.standard_normal((64, 64), dtype=np.float32)}
    plan = go.compile(g, cache=False)
    assert plan.arena_bytes > 0 and plan.memory_stats()["arenas_created"] == 0
    plan(**inputs)
    m = plan.memory_stats()
    assert m["high_water_bytes"] == plan.arena_bytes and m["max_concurrent_calls"] == 1
    assert m["planned_bytes"] == plan.memory.planned_bytes
    assert m["pool"]["high_water"] >= plan.arena_bytes
    text = str(plan.report)
    assert "arenas in use: high water" in text and "measured peak" not in text
    assert plan.report.to_dict()["memory_measured"]["high_water_bytes"] == plan.arena_bytes
    # a measured call (tracemalloc) is set beside the prediction, within 10 %
    got = plan.measure_peak_bytes(**inputs)
    assert abs(got - plan.predicted_peak_bytes) <= 0.1 * plan.predicted_peak_bytes
    assert plan.memory_stats()["measured_peak_bytes"] == got
    assert "measured peak per call:" in str(plan.report) and "% of the predicted" in \
        str(plan.report)


def test_kernel_timings_are_kept_for_the_next_process(tmp_path, monkeypatch):
    monkeypatch.setenv("GRAPHOPT_CACHE_DIR", str(tmp_path))
    calls = []

    def measure():
        calls.append(1)
        return {"numba-fused": 1.5, "numpy-blocked": 2.5}

    assert numba_cpu.measured_once("src", measure) == (measure(), False)
    assert numba_cpu.measured_once("src", measure) == ({"numba-fused": 1.5,
                                                        "numpy-blocked": 2.5}, True)
    assert len(calls) == 2                      # measured once (plus the call in the assert)
    doc = tmp_path / next(p.name for p in tmp_path.iterdir() if p.suffix == ".json")
    keys = ("numba-fused", "numpy-blocked")
    # broken, or valid JSON but incomplete: dropped, re-timed and rewritten, one warning each
    for text in ("not json", '{"numba-fused": 1.5}', '{"numba-fused": 1.5, '
                 '"numpy-blocked": "fast"}', '[1, 2]'):
        doc.write_text(text)
        disk_cache._warned.clear()
        with pytest.warns(RuntimeWarning, match="corrupt or incomplete"):
            assert numba_cpu.measured_once("src", measure, keys) == (measure(), False)
        assert numba_cpu.measured_once("src", measure, keys)[1] is True
