"""Timing on the real shapes, for the kernel forms the CPU backend measures (fused loop or
NumPy-blocked, GEMM or ``np.einsum`` at ``opt_level=3``, tiled blocks in parallel or not)."""

from __future__ import annotations

import time

import numpy as np


def sample_array(shape, dtype: str, seed: int = 0) -> np.ndarray:
    """Operands for timing: values in [0.5, 1.5) (no domain errors in log/sqrt/pow)."""
    r = np.random.default_rng(seed)
    if dtype == "bool":
        return r.random(shape) < 0.5
    if dtype.startswith("int"):
        return r.integers(1, 8, size=shape).astype(dtype)
    x = r.random(shape) + 0.5
    if dtype.startswith("complex"):
        x = x + 1j * (r.random(shape) + 0.5)
    return x.astype(dtype)


def median_seconds(fn, repeat: int = 5) -> float:
    """Median wall time of ``fn()`` after one warm-up call."""
    with np.errstate(all="ignore"):
        fn()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return float(np.median(times))
