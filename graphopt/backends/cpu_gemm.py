"""The CPU GEMM: one (batched) matrix product on the call's threads.

``threaded_matmul(a, b, c)`` computes ``c = a @ b`` (2-D, or 3-D with a batch dim) with NumPy's
BLAS. Where the call lets BLAS thread its GEMMs (a plan whose only threaded steps are
GEMMs, alone in flight: ``threads.enter_call``) the product is one BLAS call on BLAS's
threads. Otherwise BLAS runs one thread per part: a product too small to share runs
whole on the calling thread; a larger one is cut into as many parts as the call has
threads, along the batch dim where there are enough matrices, else along the wider of M
and N (the parts are strided views, which BLAS reads and writes in place), and the parts
run on graphopt's workers (``threads.run_parallel``). Every element of ``c`` is one BLAS
dot product over the whole K in either case, so the split changes no result beyond BLAS's
own kernel choice at a part's edge. A product in a dtype BLAS does not multiply (integers,
bool, float16) is ``einsum_matmul``'s, cut into parts the same way.
"""

from __future__ import annotations

import numpy as np

from ..contraction.program.matmul import BLAS_CHARS, einsum_product, matmul_operands
from ..runtime import threads

# OpenBLAS runs a real GEMM of at most this many M*N*K multiply-adds on one thread whatever
# its thread count (SMP_THRESHOLD_MIN * GEMM_MULTITHREAD_THRESHOLD); it threads complex ones
# from a quarter of that. Below it graphopt leaves BLAS alone.
SMALL_GEMM = {"f": 65536 * 4, "c": 65536}
# Column or row cuts fall on multiples of this (whole register tiles of BLAS kernels).
CUT_ALIGN = 16


def gemm_parts(shape_a, shape_b, nthreads: int) -> tuple[str, list[tuple[int, int]]]:
    """How ``threaded_matmul`` cuts ``a @ b`` for ``nthreads`` threads: ``(axis, ranges)``
    with axis "batch", "m", "n" or "whole" (one range)."""
    *lead, m, k = shape_a
    n = shape_b[-1]
    batch = lead[0] if lead else 1
    flops = 2.0 * batch * m * n * k
    parts = threads.useful_threads(flops, nthreads)
    if parts < 2:
        return "whole", [(0, 1)]
    if batch >= parts:
        return "batch", threads.split(batch, parts)
    axis, size = ("n", n) if n >= m else ("m", m)
    blocks = -(-size // CUT_ALIGN)
    if blocks < 2:
        return "whole", [(0, 1)]
    return axis, [(lo * CUT_ALIGN, min(hi * CUT_ALIGN, size))
                  for lo, hi in threads.split(blocks, parts)]


def threaded_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``np.matmul(a, b, out=c)`` on the calling plan's threads (see the module doc); in a
    dtype BLAS does not multiply, ``einsum_matmul``'s product, cut over the call's threads
    the same way (np.einsum's loops release the GIL)."""
    if c.dtype.char not in BLAS_CHARS:
        a, b = matmul_operands(a, b)       # (once, not per part)
        product = einsum_product
    elif a.shape[-2] * a.shape[-1] * b.shape[-1] <= SMALL_GEMM.get(c.dtype.kind, 0) or \
            not threads.blas_for_gemm():   # (BLAS threads it itself: threads.enter_call)
        return np.matmul(a, b, out=c)
    else:
        product = _blas_product
    axis, ranges = gemm_parts(a.shape, b.shape, threads.current_threads())
    if axis == "whole":
        return product(a, b, c)
    if axis == "batch":
        def part(r):
            product(a[r[0]:r[1]], b[r[0]:r[1]], c[r[0]:r[1]])
    elif axis == "n":
        def part(r):
            product(a, b[..., r[0]:r[1]], c[..., r[0]:r[1]])
    else:
        def part(r):
            product(a[..., r[0]:r[1], :], b, c[..., r[0]:r[1], :])
    threads.run_parallel(part, ranges, len(ranges))
    return c


def _blas_product(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    return np.matmul(a, b, out=c)
