"""TensorPool: bounded in bytes, idle buffers given back (ISSUE 12: defect 18)."""

import numpy as np

from graphopt.pool import TensorPool


class HostBackend:
    oom_errors = (MemoryError,)

    def alloc(self, nbytes):
        return np.empty(nbytes, np.uint8)

    def release_cached(self):
        pass


def test_cached_bytes_never_exceed_the_bound():
    pool = TensorPool(HostBackend(), max_cached_bytes=1000, idle_seconds=60)
    bufs = [pool.acquire(400) for _ in range(4)]
    for b in bufs:
        pool.release(b)
    assert pool.stats.bytes_cached == 800 and pool.stats.bytes_held == 800
    assert pool.acquire(400) is not None and pool.stats.hits == 1


def test_idle_buffers_are_given_back():
    pool = TensorPool(HostBackend(), max_cached_bytes=1 << 20, idle_seconds=0.0)
    pool.release(pool.acquire(4096))
    assert pool.stats.bytes_cached == 4096
    pool.trim()
    assert pool.stats.bytes_cached == 0 and pool.stats.bytes_held == 0
    assert pool.stats.trimmed_bytes == 4096
    # a fresh acquire after the trim allocates again
    pool.acquire(4096)
    assert pool.stats.misses == 2


def test_environment_sets_the_bounds(monkeypatch):
    monkeypatch.setenv("GRAPHOPT_POOL_BYTES", "12345")
    monkeypatch.setenv("GRAPHOPT_POOL_IDLE_SECONDS", "2.5")
    pool = TensorPool(HostBackend())
    assert pool.max_cached_bytes == 12345 and pool.idle_seconds == 2.5
    monkeypatch.setenv("GRAPHOPT_POOL_BYTES", "lots")
    assert TensorPool(HostBackend()).max_cached_bytes == 256 << 20
