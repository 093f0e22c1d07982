"""This machine's physical references: BLAS GFLOP/s on a plain GEMM and memory GB/s."""

from __future__ import annotations

import numpy as np

from graphopt.backends.timing import median_seconds as _median_time  # warm-up call first


def gemm_gflops(n: int = 2048, dtype="float32", repeat: int = 5) -> float:
    """Median GFLOP/s of an n x n x n GEMM through NumPy's BLAS (2 n^3 FLOPs)."""
    r = np.random.default_rng(0)
    a = r.standard_normal((n, n)).astype(dtype)
    b = r.standard_normal((n, n)).astype(dtype)
    out = np.empty((n, n), dtype)
    np.matmul(a, b, out=out)
    return 2 * n**3 / _median_time(lambda: np.matmul(a, b, out=out), repeat) / 1e9


def gemm_gflops_shape(m: int, k: int, n: int, dtype="float32", repeat: int = 5) -> float:
    r = np.random.default_rng(0)
    a = r.standard_normal((m, k)).astype(dtype)
    b = r.standard_normal((k, n)).astype(dtype)
    out = np.empty((m, n), dtype)
    np.matmul(a, b, out=out)
    return 2 * m * k * n / _median_time(lambda: np.matmul(a, b, out=out), repeat) / 1e9


def memory_gbs(nbytes: int = 256 * 2**20, repeat: int = 5) -> float:
    """Median GB/s of a large copy (bytes read + bytes written)."""
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    np.copyto(b, a)
    return 2 * nbytes / _median_time(lambda: np.copyto(b, a), repeat) / 1e9
