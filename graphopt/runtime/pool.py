"""``TensorPool``: raw arena buffers, cached in free lists keyed by size.

A plan checks a buffer out per concurrent call and gives it back when it no longer
caches it. On out-of-memory the pool drops its cache and retries once.

Bounded: at most ``max_cached_bytes`` sit in the free lists (default 256 MiB,
``$GRAPHOPT_POOL_BYTES``), and a buffer that nobody took for ``idle_seconds`` (default 30 s,
``$GRAPHOPT_POOL_IDLE_SECONDS``) is given back to the system by a timer, whether or not the
pool is used again: memory a finished workload used does not stay with the process. The
timer is a daemon thread that exists only while the pool caches a buffer; it holds the pool
weakly. ``clear_pools`` (``go.clear_caches``) gives every pool's buffers back at once.
"""

from __future__ import annotations

import functools
import math
import os
import threading
import time
import weakref
from dataclasses import dataclass

DEFAULT_MAX_CACHED_BYTES = 256 << 20
DEFAULT_IDLE_SECONDS = 30.0

_pools: "weakref.WeakSet[TensorPool]" = weakref.WeakSet()


def clear_pools() -> None:
    """Give back every pool's cached buffers now."""
    for pool in list(_pools):
        pool.clear()


def env_number(name: str, default: float) -> float:
    """A non-negative number from the environment, else ``default`` (never an error)."""
    try:
        v = float(os.environ.get(name, default))
    except ValueError:
        return default
    return v if v >= 0 else default


@functools.lru_cache(maxsize=1)
def host_memory_bytes() -> int | None:
    """The memory this process may use (read once): the machine's physical memory, or its
    control group's limit where that is lower (a container's); None where neither can be
    read."""
    found = []
    try:
        found.append(os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    except (AttributeError, ValueError, OSError):
        pass
    found += [n for n in map(_cgroup_limit, _cgroup_limit_files()) if n is not None]
    return min(found) if found else None


def _cgroup_limit_files() -> list[str]:
    """The memory limit files of this process's control group (v2, then v1)."""
    files = []
    try:
        with open("/proc/self/cgroup") as f:
            for line in f:
                if line.startswith("0::"):
                    files.append(f"/sys/fs/cgroup{line[3:].strip().rstrip('/')}/memory.max")
    except OSError:
        pass
    return files + ["/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"]


def _cgroup_limit(path: str) -> int | None:
    """A control group's memory limit in bytes, or None (none set, or none there)."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    # (v1 writes "no limit" as a page-rounded 2**63)
    return int(text) if text.isdigit() and int(text) < 1 << 60 else None


@dataclass
class PoolStats:
    """What a ``TensorPool`` did: hits and misses, bytes held and cached, the high water."""
    hits: int = 0          # acquisitions served from the free list
    misses: int = 0        # acquisitions that allocated
    bytes_held: int = 0    # bytes of every live buffer the pool made (cached or checked out)
    bytes_cached: int = 0  # bytes sitting in the free lists
    high_water: int = 0    # most bytes held at once
    oom_retries: int = 0
    trimmed_bytes: int = 0  # bytes given back because they sat idle too long

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class TensorPool:
    """Free lists of byte buffers keyed by size, for one backend.

    Args:
        backend: provides ``alloc(nbytes)`` and ``oom_errors`` (exception types).
        max_cached_bytes: cached buffers beyond this are dropped on release.
        idle_seconds: cached buffers unused this long are dropped.
    """

    def __init__(self, backend, max_cached_bytes: int | None = None,
                 idle_seconds: float | None = None):
        self.backend = backend
        self.max_cached_bytes = int(env_number("GRAPHOPT_POOL_BYTES", DEFAULT_MAX_CACHED_BYTES)
                                    if max_cached_bytes is None else max_cached_bytes)
        self.idle_seconds = (env_number("GRAPHOPT_POOL_IDLE_SECONDS", DEFAULT_IDLE_SECONDS)
                             if idle_seconds is None else idle_seconds)
        self.stats = PoolStats()
        self._free: dict[int, list] = {}   # nbytes -> [(buffer, released at), ...]
        self._lock = threading.Lock()
        # the idle timer, armed while a buffer is cached; cancelled when the pool goes
        self._timer: list[threading.Timer | None] = [None]
        weakref.finalize(self, _cancel, self._timer)
        _pools.add(self)

    def acquire(self, nbytes: int):
        with self._lock:
            self._trim_idle()
            bucket = self._free.get(nbytes)
            if bucket:
                self.stats.hits += 1
                self.stats.bytes_cached -= nbytes
                return bucket.pop()[0]
            self.stats.misses += 1
        try:
            buf = self.backend.alloc(nbytes)
        except self.backend.oom_errors:
            self.clear()
            self.stats.oom_retries += 1
            buf = self.backend.alloc(nbytes)
        with self._lock:
            self.stats.bytes_held += nbytes
            self.stats.high_water = max(self.stats.high_water, self.stats.bytes_held)
        return buf

    def release(self, buf) -> None:
        nbytes = int(buf.nbytes)
        with self._lock:
            self._trim_idle()
            if self.stats.bytes_cached + nbytes <= self.max_cached_bytes:
                self._free.setdefault(nbytes, []).append((buf, time.monotonic()))
                self.stats.bytes_cached += nbytes
                self._arm(self.idle_seconds)
            else:
                self.stats.bytes_held -= nbytes

    def _arm(self, seconds: float) -> None:
        """Start the idle timer to fire in ``seconds`` unless it is armed (lock held)."""
        if self._timer[0] is not None or not math.isfinite(self.idle_seconds):
            return
        timer = threading.Timer(max(seconds, 0.0) + 0.01, _on_timer, (weakref.ref(self),))
        timer.daemon = True
        timer.start()
        self._timer[0] = timer

    def _on_timer(self) -> None:
        """Trim what has been idle long enough, and re-arm for the next buffer to expire."""
        with self._lock:
            self._timer[0] = None
            self._trim_idle()
            if self._free:
                oldest = min(t for bucket in self._free.values() for _, t in bucket)
                self._arm(oldest + self.idle_seconds - time.monotonic())

    def _trim_idle(self) -> None:
        """Drop cached buffers released more than ``idle_seconds`` ago (lock held)."""
        if not self.stats.bytes_cached:
            return
        cutoff = time.monotonic() - self.idle_seconds
        for nbytes in list(self._free):
            bucket = self._free[nbytes]
            keep = [(b, t) for b, t in bucket if t > cutoff]
            dropped = (len(bucket) - len(keep)) * nbytes
            if dropped:
                self.stats.bytes_cached -= dropped
                self.stats.bytes_held -= dropped
                self.stats.trimmed_bytes += dropped
                if keep:
                    self._free[nbytes] = keep
                else:
                    del self._free[nbytes]

    def trim(self) -> None:
        """Give back every cached buffer that has been idle for ``idle_seconds``."""
        with self._lock:
            self._trim_idle()

    def clear(self) -> None:
        """Drop every cached buffer (the backend frees them)."""
        with self._lock:
            for nbytes, bucket in self._free.items():
                self.stats.bytes_held -= nbytes * len(bucket)
            self._free.clear()
            self.stats.bytes_cached = 0
            _cancel(self._timer)
            self.backend.release_cached()


def _cancel(timer: list) -> None:
    if timer[0] is not None:
        timer[0].cancel()
        timer[0] = None


def _on_timer(ref) -> None:
    pool = ref()
    if pool is not None:
        pool._on_timer()


def _after_fork() -> None:
    # a forked child has no timer threads: its pools re-arm at their next release
    for pool in list(_pools):
        pool._timer[0] = None
        pool._lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_after_fork)
