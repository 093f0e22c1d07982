"""The compile cache (graphopt/compiler/cache.py): what its plans keep for their next calls,
counted as it changes, within its bound; dropped plans let go."""

import gc
import weakref

import numpy as np
import pytest

import graphopt as go
from graphopt.compiler import cache as compile_cache
from graphopt.runtime.plan import Plan


def _graph(n: int, k: int):
    g = go.Graph(f"cached{k}")
    x = g.input("x", (n,), "float64")
    y = go.exp(x) + float(k)
    g.output(go.sum(go.einsum("i,i->i", y, y) * go.tanh(y)))
    return g


def _asked_of_every_plan() -> int:
    return sum(p.idle_arena_bytes for p in compile_cache.plans())


@pytest.fixture
def asks(monkeypatch):
    """How many times a plan was asked what it keeps (``Plan.idle_arena_bytes``)."""
    got = []
    real = Plan.idle_arena_bytes

    def counted(self):
        got.append(self)
        return real.fget(self)
    monkeypatch.setattr(Plan, "idle_arena_bytes", property(counted))
    return got


def test_the_count_follows_calls_and_releases():
    compile_cache.clear()
    plans = [go.compile(_graph(1000 + k, k), backend="numpy") for k in range(5)]
    for p in plans:
        p(x=np.ones(p.graph.nodes[p.graph.graph["inputs"][0]]["shape"]))
    go.compile(_graph(10, 99), backend="numpy")      # (a bound counts what calls returned)
    held = _asked_of_every_plan()
    assert held > 0 and compile_cache.counted_bytes() == held
    plans[0].release_arenas()
    plans[1].release_arenas()
    go.compile(_graph(11, 98), backend="numpy")
    assert compile_cache.counted_bytes() == _asked_of_every_plan() < held


def test_a_compile_asks_only_the_plans_called_since_the_last(asks):
    compile_cache.clear()
    plans = [go.compile(_graph(100 + k, k), backend="numpy") for k in range(40)]
    for p in plans:
        p(x=np.ones(p.graph.nodes[p.graph.graph["inputs"][0]]["shape"]))
    go.compile(_graph(10, 99), backend="numpy")
    asks.clear()
    plans[3](x=np.ones(103))          # reused its arena: what it keeps did not change
    go.compile(_graph(11, 98), backend="numpy")   # the new plan alone
    assert [id(p) for p in asks] == [id(compile_cache.plans()[-1])]
    plans[3].release_arenas()
    asks.clear()
    plans[3](x=np.ones(103))          # a new arena kept: counted at the call
    assert [id(p) for p in asks] == [id(plans[3])]
    asks.clear()
    again = go.compile(_graph(11, 98), backend="numpy")   # a cache hit asks no plan
    assert again is compile_cache.plans()[-1] and asks == []


def test_over_the_bound_the_least_recently_compiled_give_their_arenas_back(monkeypatch):
    compile_cache.clear()
    plans = [go.compile(_graph(50_000, k), backend="numpy") for k in range(4)]
    for p in plans:
        p(x=np.ones(50_000))
    one = max(p.idle_arena_bytes for p in plans)
    monkeypatch.setattr(compile_cache, "CACHE_ARENA_BYTES", 2 * one)
    go.compile(_graph(10, 99), backend="numpy")
    held = _asked_of_every_plan()
    assert held <= 2 * one and compile_cache.counted_bytes() == held
    assert plans[0].idle_arena_bytes == 0 and plans[3].idle_arena_bytes > 0


def test_a_plan_out_of_the_cache_is_let_go(monkeypatch):
    monkeypatch.setattr(compile_cache, "CACHE_ENTRIES", 2)
    compile_cache.clear()
    first = go.compile(_graph(100, 0), backend="numpy")
    first(x=np.ones(100))
    gone = weakref.ref(first)
    for k in range(1, 4):
        go.compile(_graph(100 + k, k), backend="numpy")
    assert first.arena_listener is None
    first(x=np.ones(100))           # (a call of a plan out of the cache tells it nothing)
    go.compile(_graph(200, 9), backend="numpy")
    del first
    gc.collect()
    assert gone() is None
    assert len(compile_cache.plans()) == 2
    assert compile_cache.counted_bytes() == _asked_of_every_plan()


def test_the_count_holds_under_threads_compiling_calling_and_releasing(monkeypatch):
    from concurrent.futures import ThreadPoolExecutor

    monkeypatch.setattr(compile_cache, "CACHE_ENTRIES", 8)
    monkeypatch.setattr(compile_cache, "CACHE_ARENA_BYTES", 3 << 20)
    compile_cache.clear()

    def work(seed):
        rng = np.random.default_rng(seed)
        for r in range(30):
            n, k = int(rng.integers(1000, 200_000)), int(rng.integers(0, 12))
            plan = go.compile(_graph(n, k), backend="numpy")
            for _ in range(int(rng.integers(1, 3))):
                plan(x=np.ones(n))
            if r % 7 == 0:
                plan.release_arenas()
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(4)))      # (a thread's exception is raised here)
    go.compile(_graph(10, 99), backend="numpy")
    assert len(compile_cache.plans()) == 8
    assert compile_cache.counted_bytes() == _asked_of_every_plan() <= 3 << 20


def test_the_bound_holds_after_calls_not_only_at_the_next_compile(monkeypatch):
    compile_cache.clear()
    plans = [go.compile(_graph(50_000, k), backend="numpy") for k in range(4)]
    plans[0](x=np.ones(50_000))
    one = plans[0].idle_arena_bytes
    monkeypatch.setattr(compile_cache, "CACHE_ARENA_BYTES", 2 * one)
    for p in plans:              # calls only: no compile, no lookup in between
        p(x=np.ones(50_000))
        assert _asked_of_every_plan() <= 2 * one
    assert compile_cache.counted_bytes() == _asked_of_every_plan()
    assert plans[0].idle_arena_bytes == 0 and plans[3].idle_arena_bytes > 0


def test_clear_caches_gives_back_plans_arenas_pools_and_paths():
    from graphopt.contraction.search import cache as path_cache
    from graphopt.contraction.search.anytime import find_path

    compile_cache.clear()
    plan = go.compile(_graph(50_000, 1), backend="numpy")
    plan(x=np.ones(50_000))
    find_path(["ab", "bc", "cd", "da"], "", dict(a=2, b=3, c=4, d=5))
    assert plan.idle_arena_bytes > 0 and path_cache._MEMO
    go.clear_caches()
    assert compile_cache.plans() == [] and compile_cache.counted_bytes() == 0
    assert plan.idle_arena_bytes == 0 and plan.pool.stats.bytes_cached == 0
    assert not path_cache._MEMO
    np.testing.assert_allclose(plan(x=np.ones(50_000)), go.compile(
        _graph(50_000, 1), backend="numpy", cache=False)(x=np.ones(50_000)))
