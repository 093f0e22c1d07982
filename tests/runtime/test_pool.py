"""TensorPool: bounded in bytes, idle buffers given back (ISSUE 12: defect 18)."""

import gc
import os
import threading
import time
import weakref

import numpy as np

from graphopt.runtime.pool import TensorPool


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
    pool = TensorPool(HostBackend(), max_cached_bytes=1 << 20, idle_seconds=60)
    pool.release(pool.acquire(4096))
    assert pool.stats.bytes_cached == 4096
    pool.idle_seconds = 0.0
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


def test_host_memory_is_the_machine_or_its_control_group(tmp_path):
    from graphopt.runtime import pool
    have = pool.host_memory_bytes()
    assert have is not None and 0 < have <= os.sysconf("SC_PHYS_PAGES") * os.sysconf(
        "SC_PAGE_SIZE")
    limit = tmp_path / "memory.max"
    for text, want in (("max\n", None), ("1048576\n", 1 << 20),
                       (str(2 ** 63 - 4096), None), ("garbage", None)):
        limit.write_text(text)
        assert pool._cgroup_limit(str(limit)) == want, text
    assert pool._cgroup_limit(str(tmp_path / "absent")) is None


def _wait_until(cond, seconds=5.0):
    end = time.monotonic() + seconds
    while not cond() and time.monotonic() < end:
        time.sleep(0.02)
    return cond()


def test_idle_buffers_are_given_back_on_a_timer_without_another_call():
    pool = TensorPool(HostBackend(), max_cached_bytes=1 << 30, idle_seconds=0.2)
    bufs = [pool.acquire(1 << 20) for _ in range(3)]
    for b in bufs:
        pool.release(b)
    assert pool.stats.bytes_cached == 3 << 20
    assert _wait_until(lambda: pool.stats.bytes_cached == 0)   # no acquire, no release
    assert pool.stats.bytes_held == 0 and pool.stats.trimmed_bytes == 3 << 20
    assert _wait_until(lambda: pool._timer[0] is None)          # nothing cached: no timer


def test_a_buffer_released_later_waits_its_own_idle_time():
    pool = TensorPool(HostBackend(), max_cached_bytes=1 << 30, idle_seconds=0.6)
    a, b = pool.acquire(1000), pool.acquire(2000)
    pool.release(a)
    time.sleep(0.4)
    pool.release(b)
    assert _wait_until(lambda: pool.stats.bytes_cached == 2000)
    assert pool.stats.trimmed_bytes == 1000
    assert _wait_until(lambda: pool.stats.bytes_cached == 0)


def test_a_dropped_pool_leaves_no_timer_behind():
    pool = TensorPool(HostBackend(), max_cached_bytes=1 << 20, idle_seconds=600)
    pool.release(pool.acquire(4096))
    timer = pool._timer[0]
    assert timer is not None and timer.is_alive()
    gone = weakref.ref(pool)
    del pool
    gc.collect()
    assert gone() is None
    assert _wait_until(lambda: not timer.is_alive())
    assert timer not in threading.enumerate()


def test_clear_pools_gives_every_buffer_back():
    from graphopt.runtime.pool import clear_pools

    pools = [TensorPool(HostBackend(), max_cached_bytes=1 << 20, idle_seconds=600)
             for _ in range(2)]
    for p in pools:
        p.release(p.acquire(4096))
    clear_pools()
    assert all(p.stats.bytes_cached == 0 and p._timer[0] is None for p in pools)
