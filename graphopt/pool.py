"""``TensorPool``: raw arena buffers, cached in free lists keyed by size.

A plan checks a buffer out per concurrent call and gives it back when it no longer
caches it. On out-of-memory the pool drops its cache and retries once.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass


@dataclass
class PoolStats:
    hits: int = 0          # acquisitions served from the free list
    misses: int = 0        # acquisitions that allocated
    bytes_held: int = 0    # bytes of every live buffer the pool made (cached or checked out)
    bytes_cached: int = 0  # bytes sitting in the free lists
    high_water: int = 0    # most bytes held at once
    oom_retries: int = 0

    def to_dict(self) -> dict:
        return dict(self.__dict__)


class TensorPool:
    """Free lists of byte buffers keyed by size, for one backend.

    Args:
        backend: provides ``alloc(nbytes)`` and ``oom_errors`` (exception types).
        max_cached_bytes: cached buffers beyond this are dropped on release.
    """

    def __init__(self, backend, max_cached_bytes: int = 1 << 32):
        self.backend = backend
        self.max_cached_bytes = max_cached_bytes
        self.stats = PoolStats()
        self._free: dict[int, list] = {}
        self._lock = threading.Lock()

    def acquire(self, nbytes: int):
        with self._lock:
            bucket = self._free.get(nbytes)
            if bucket:
                self.stats.hits += 1
                self.stats.bytes_cached -= nbytes
                return bucket.pop()
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
            if self.stats.bytes_cached + nbytes <= self.max_cached_bytes:
                self._free.setdefault(nbytes, []).append(buf)
                self.stats.bytes_cached += nbytes
            else:
                self.stats.bytes_held -= nbytes

    def clear(self) -> None:
        """Drop every cached buffer (the backend frees them)."""
        with self._lock:
            for nbytes, bucket in self._free.items():
                self.stats.bytes_held -= nbytes * len(bucket)
            self._free.clear()
            self.stats.bytes_cached = 0
            self.backend.release_cached()
