"""The matrix product of dtypes BLAS does not multiply
(graphopt/contraction/program/matmul.py): equal to NumPy's ``matmul`` in every memory order,
and what it allocates as ``gemm``'s workspace model counts it (NumPy's iterator fills no
buffer of its own)."""

from __future__ import annotations

import itertools
import tracemalloc

import numpy as np
import pytest

from graphopt.contraction.program.matmul import einsum_matmul, host_matmul, operand_to_copy

DTYPES = ["int64", "int32", "int8", "uint16", "bool", "float16"]


def _laid_out(rng, shape, order, dtype):
    """A random array of ``shape`` whose memory holds its axes in ``order``."""
    base = rng.integers(-3, 4, [shape[i] for i in order]).astype(dtype)
    return base.transpose(np.argsort(order))


def _traced(fn) -> int:
    fn()                          # (warm: nothing NumPy caches is counted)
    tracemalloc.start()
    fn()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("bmkn", [(1, 5, 6, 7), (3, 8, 5, 9), (2, 1, 6, 4), (2, 7, 6, 1),
                                  (1, 1, 5, 1), (4, 3, 0, 2), (0, 3, 4, 5), (3, 33, 17, 65)])
def test_every_memory_order_of_a_and_b_multiplies_as_matmul(dtype, bmkn):
    rng = np.random.default_rng(sum(bmkn))
    B, M, K, N = bmkn
    for oa, ob in itertools.product(itertools.permutations(range(3)), repeat=2):
        a = _laid_out(rng, (B, M, K), oa, dtype)
        b = _laid_out(rng, (B, K, N), ob, dtype)
        c = np.full((B, M, N), 7, dtype)
        assert einsum_matmul(a, b, c) is c
        want = np.matmul(a.astype(np.int64), b.astype(np.int64)) if dtype != "float16" \
            else np.matmul(a.astype(np.float64), b.astype(np.float64))
        if dtype == "float16":
            np.testing.assert_allclose(c, want, rtol=1e-2, atol=1e-2)
        else:
            np.testing.assert_array_equal(c, want.astype(dtype))
        a_orig, b_orig = a.copy(), b.copy()
        einsum_matmul(a, b, c)
        assert np.array_equal(a, a_orig) and np.array_equal(b, b_orig)   # inputs untouched


@pytest.mark.parametrize("dtype", ["int64", "int8", "bool", "float16"])
def test_it_allocates_only_the_copy_operand_to_copy_names(dtype):
    # NumPy's iterator fills two buffers of up to 8192 elements of its own where A's rows
    # are its inner axis and B's columns are B's; einsum_matmul copies the smaller first,
    # and beside that copy allocates only the iterator's ~2 kB, in every memory order
    rng = np.random.default_rng(0)
    itemsize = np.dtype(dtype).itemsize
    for (B, M, K, N), oa, ob in itertools.product(
            [(4, 48, 40, 56), (1, 96, 64, 80), (6, 20, 72, 12)],
            itertools.permutations(range(3)), itertools.permutations(range(3))):
        a = _laid_out(rng, (B, M, K), oa, dtype)
        b = _laid_out(rng, (B, K, N), ob, dtype)
        c = np.empty((B, M, N), dtype)
        which = operand_to_copy(a.shape, a.strides, b.shape, b.strides)
        copy = (0, a.size, b.size)[which] * itemsize
        peak = _traced(lambda a=a, b=b, c=c: einsum_matmul(a, b, c))
        assert copy <= peak <= copy + 4096, (B, M, K, N, oa, ob, which, peak)


def test_np_einsum_alone_fills_buffers_where_a_is_f_ordered_and_b_is_not():
    # what the copy saves (if NumPy changes this, the copy may go)
    a = np.ones((4, 40, 48), np.int64).transpose(0, 2, 1)      # (4, 48, 40), F-ordered
    b = np.ones((4, 40, 56), np.int64)
    c = np.empty((4, 48, 56), np.int64)
    assert operand_to_copy(a.shape, a.strides, b.shape, b.strides) == 1
    alone = _traced(lambda: np.einsum("...ij,...jk->...ik", a, b, out=c))
    assert alone > a.nbytes


def test_host_matmul_takes_blas_for_its_dtypes():
    a = np.arange(12.0).reshape(3, 4)
    b = np.arange(8.0).reshape(4, 2)
    for dtype in ("float64", "complex64", "int16"):
        c = np.empty((3, 2), dtype)
        np.testing.assert_array_equal(host_matmul(a.astype(dtype), b.astype(dtype), c),
                                      (a @ b).astype(dtype))
