"""The (batched) matrix product of a GEMM step in a dtype BLAS does not multiply.

NumPy's ``matmul`` has no BLAS for integers, bool, float16 or longdouble, and its own loops
are slower than ``np.einsum``'s sum-of-products loops, many times so for small integer
types. ``einsum_matmul`` runs the product on the GEMM's matrices through those loops
instead, which release the GIL. It is also faster than ``np.einsum`` over each step's own
labels, whose iterator loops over labels in an order of its choosing and buffers operands it
finds awkward.

What it allocates is known: over matrices NumPy's iterator fills no buffer of its own
(in every dtype and batched or not, in every memory order of A and B, as tracemalloc
shows), except where A's rows are its inner axis (F-ordered) and B's columns are B's
(C-ordered): then it may fill two buffers of up to 8192 elements. There the smaller operand
is copied into the other memory order first (``operand_to_copy``), which
``gemm.operand_scratch`` counts. ``np.einsum`` over a step's own labels fills such buffers
too, of sizes its iterator picks, which a predicted peak could only bound at their most.
"""

from __future__ import annotations

import math

import numpy as np

from .einsum_bytes import NP_EINSUM_ITER_BYTES, NP_EINSUM_ITER_BYTES_PER_DIM

# The dtypes BLAS multiplies (``gemm.BLAS_DTYPES``), and their characters: what a call
# reads (``dtype.char``: ``dtype.name`` is a Python property, slow on a hot path)
BLAS_DTYPES = frozenset({"float32", "float64", "complex64", "complex128"})
BLAS_CHARS = frozenset(np.dtype(d).char for d in BLAS_DTYPES)


def _f_ordered(shape, strides) -> bool:
    """Whether a matrix of ``shape`` (last two dims) and ``strides`` has its rows as its
    inner axis (both dims above 1)."""
    return shape[-1] > 1 and shape[-2] > 1 and strides[-1] > strides[-2]


def operand_to_copy(shape_a, strides_a, shape_b, strides_b) -> int:
    """Which operand ``einsum_matmul`` copies into the other memory order first: 0 none, 1
    A (into C order), 2 B (into F order): the smaller, where A is F-ordered and B is not
    and neither is a vector. ``strides`` in bytes or in elements."""
    if shape_b[-1] == 1 or shape_a[-2] == 1:
        return 0
    if _f_ordered(shape_a, strides_a) and not _f_ordered(shape_b, strides_b):
        return 1 if math.prod(shape_a) <= math.prod(shape_b) else 2
    return 0


def einsum_matmul_bytes(ndim: int) -> int:
    """What ``einsum_matmul`` of ``ndim``-dimensional matrices (2, or 3 batched) allocates
    beside its operands, its copy of one and ``c``: ``np.einsum``'s iterator over three
    arrays of ``ndim`` dims (``einsum_bytes.NP_EINSUM_ITER_BYTES``)."""
    return NP_EINSUM_ITER_BYTES + NP_EINSUM_ITER_BYTES_PER_DIM * 3 * ndim


def matmul_operands(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``a`` and ``b`` with ``operand_to_copy``'s copy made: what ``einsum_matmul`` (or each
    part of a product split over threads) multiplies."""
    which = operand_to_copy(a.shape, a.strides, b.shape, b.strides)
    if which == 1:
        a = np.ascontiguousarray(a)
    elif which == 2:
        b = np.ascontiguousarray(b.swapaxes(-1, -2)).swapaxes(-1, -2)
    return a, b


def einsum_product(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``c = a @ b`` (leading dims batched) by ``np.einsum``, for operands already through
    ``matmul_operands``: a matrix times a vector (N = 1) and a vector times a matrix
    (M = 1) as such, which fill no buffer in any memory order."""
    if b.shape[-1] == 1:
        np.einsum("...ij,...j->...i", a, b[..., 0], out=c[..., 0])
    elif a.shape[-2] == 1:
        np.einsum("...j,...jk->...k", a[..., 0, :], b, out=c[..., 0, :])
    else:
        np.einsum("...ij,...jk->...ik", a, b, out=c)
    return c


def einsum_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``c = a @ b`` (leading dims batched) through ``np.einsum``'s loops (module doc)."""
    return einsum_product(*matmul_operands(a, b), c)


def host_matmul(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``c = a @ b`` on the CPU, on the calling thread: NumPy's ``matmul`` (BLAS) for the
    dtypes BLAS multiplies, else ``einsum_matmul``."""
    if c.dtype.char in BLAS_CHARS:
        return np.matmul(a, b, out=c)
    return einsum_matmul(a, b, c)
