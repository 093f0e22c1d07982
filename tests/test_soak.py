"""Soak: thousands of distinct plans compiled, run and dropped in one process, with memory
flat; caches bounded in entries and bytes (ISSUE 12: defects 18, 19)."""

import ctypes
import gc
import os
import tracemalloc

import numpy as np
import pytest

import graphopt as go
from graphopt.compiler import cache as compile_cache
from graphopt.compiler import driver as compiler


def small_graph(n: int, k: int) -> go.Graph:
    """Distinct for every ``k`` (a different constant), 5 shapes of ``n`` in turn."""
    g = go.Graph(f"soak{k}")
    x = g.input("x", (n, 3), "float64")
    w = g.input("w", (3, 5), "float64")
    h = go.tanh(go.einsum("ij,jk->ik", x, w)) * (2.0 + k)
    g.output((h - h.mean(axis=1, keepdims=True)).sum(axis=0))
    return g


def run_many(first: int, count: int) -> None:
    rng = np.random.default_rng(first)
    w = rng.standard_normal((3, 5))
    for k in range(first, first + count):
        n = 200 + 100 * (k % 5)
        x = rng.standard_normal((n, 3))
        out = go.compile(small_graph(n, k), backend="numpy")(x=x, w=w)
        h = np.tanh(x @ w) * (2.0 + k)
        np.testing.assert_allclose(out, (h - h.mean(axis=1, keepdims=True)).sum(axis=0),
                                   rtol=1e-10, atol=1e-10)


def rss_bytes() -> int:
    """Resident bytes, after glibc has given its free heap pages back (``malloc_trim``):
    without it, what earlier tests left fragmented (numba compiling every kernel in a cold
    clone) showed as 20 MiB of growth that no live object held."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):   # not glibc: RSS as it is
        pass
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.slow
@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="reads /proc (Linux)")
def test_two_thousand_distinct_plans_keep_memory_flat(monkeypatch):
    """Once the compile cache (64 plans here) is full, 1500 more distinct plans compiled, run
    and dropped leave the number of live Python objects where it was (a plan kept by any
    cache is thousands of objects) and resident memory within allocator noise."""
    monkeypatch.setattr(compile_cache, "CACHE_ENTRIES", 64)
    compiler.clear_cache()
    run_many(1, 500)
    gc.collect()
    base_rss, base_objects = rss_bytes(), len(gc.get_objects())
    run_many(1000, 1500)
    gc.collect()
    grown, objects = rss_bytes() - base_rss, len(gc.get_objects()) - base_objects
    assert len(compiler.cached_plans()) == 64
    assert objects < 1000, f"{objects} more live objects after 1500 plans"
    assert grown < 16 << 20, f"resident memory grew by {grown / 2**20:.2f} MiB"


@pytest.mark.thorough
def test_traced_memory_stays_flat_over_five_thousand_plans(monkeypatch):
    """The same with tracemalloc (exact, slow): the traced bytes once the cache holds only
    plans made while tracing, against 4800 plans later."""
    monkeypatch.setattr(compile_cache, "CACHE_ENTRIES", 64)
    compiler.clear_cache()
    run_many(1, 20)   # first-use caches (dtype probes, imports)
    gc.collect()
    tracemalloc.start()
    try:
        run_many(100, 150)
        gc.collect()
        base, _ = tracemalloc.get_traced_memory()
        run_many(1000, 4800)
        gc.collect()
        now, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert now - base < 256 << 10, f"grew by {(now - base) / 2**20:.2f} MiB"


def test_dropped_plans_give_their_arenas_back():
    """Six plans with 30 MB arenas, each run once and dropped: the compile cache keeps at
    most CACHE_ARENA_BYTES of their arenas, the pool at most its bound, and idle pooled
    memory is given back."""
    compiler.clear_cache()
    n = 1 << 20
    plans = []
    for k in range(6):
        g = go.Graph(f"big{k}")
        x = g.input("x", (n,), "float64")
        y = go.exp(x) + float(k)
        z = go.einsum("i,i->i", y, y)
        g.output(go.sum(z * go.tanh(y)) + go.sum(y))
        p = go.compile(g, backend="numpy")
        p(x=np.ones(n))
        plans.append(p)
    assert plans[0].arena_bytes >= 8 * n
    go.compile(small_graph(10, 0), backend="numpy")   # the bound holds at every compile
    assert sum(p.idle_arena_bytes for p in compiler.cached_plans()) <= \
        compile_cache.CACHE_ARENA_BYTES
    pool = plans[0].pool
    assert pool.stats.bytes_cached <= pool.max_cached_bytes
    del plans
    pool.idle_seconds = 0.0
    pool.trim()
    assert pool.stats.bytes_cached == 0


def test_jit_cache_is_bounded_and_nan_statics_hit():
    @go.jit(backend="numpy")
    def scale(x, c):
        return x * c

    a = np.ones(4)
    for _ in range(5):
        assert np.isnan(scale(a, float("nan"))).all()
    assert len(scale.plans) == 1
    for i in range(go.jit.__globals__["JIT_CACHE_ENTRIES"] + 10):
        scale(a, float(i))
    assert len(scale.plans) == go.jit.__globals__["JIT_CACHE_ENTRIES"]
    # 0.0 and -0.0 trace different graphs
    assert np.signbit(scale(a, -0.0)).all() and not np.signbit(scale(a, 0.0)).any()
