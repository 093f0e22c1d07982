"""What one ``np.einsum`` call allocates beside its operands and ``out``: its iterator and
the buffers it may fill (a bound on what tracemalloc counts), which the contraction
program's np.einsum steps, the numba backend's einsum nodes and ``einsum_matmul``'s
products count as their workspace.
"""

from __future__ import annotations

import math
from typing import Sequence

# What one np.einsum call allocates beside its operands and ``out`` (as tracemalloc counts
# it, NumPy 2.4): its iterator (at most 1440 bytes and 64 a dim of the operands and out),
# and the buffers the iterator fills where the operands and ``out`` disagree on memory
# order, even all C-contiguous: NumPy's buffer of 8192 elements, or the iteration space
# where that is smaller, for at most two of them. A product that sums nothing, over
# C-contiguous operands each a run of the output's labels, fills none
# (``np_einsum_fills_no_buffer``); one whose operands interleave in the output, or one that
# sums, may fill two. Which ones it fills is the iterator's choice, so this is a bound.
NP_EINSUM_ITER_BYTES, NP_EINSUM_ITER_BYTES_PER_DIM = 1440, 64
NP_EINSUM_BUFFERS, NP_EINSUM_BUFFER_ELEMENTS = 2, 8192


def np_einsum_fills_no_buffer(terms: Sequence[str], output: str) -> bool:
    """Whether ``np.einsum`` over C-contiguous operands of ``terms`` into a C-contiguous
    ``output`` iterates every one in memory order: nothing is summed, and each term is a run
    of the output's labels, in order (an outer or broadcast product of blocks)."""
    for t in terms:
        if t and output.find(t) < 0:     # summed, repeated, out of order or interleaved
            return False
    return True


def np_einsum_bytes(terms: Sequence[str], output: str, sizes: dict, itemsize: int,
                    c_contiguous: bool = False) -> int:
    """At most what ``np.einsum`` allocates for one call of ``terms -> output`` with each
    label's ``sizes``, in ``itemsize``-byte elements, beside its operands and ``out`` (see
    ``NP_EINSUM_ITER_BYTES``); ``c_contiguous``: every operand and ``out`` is, so that
    ``np_einsum_fills_no_buffer`` may say no buffer is filled."""
    work = math.prod(sizes.values())
    buffers = 0 if c_contiguous and np_einsum_fills_no_buffer(terms, output) else \
        NP_EINSUM_BUFFERS * min(NP_EINSUM_BUFFER_ELEMENTS, work) * itemsize
    dims = sum(map(len, terms)) + len(output)
    return NP_EINSUM_ITER_BYTES + NP_EINSUM_ITER_BYTES_PER_DIM * dims + buffers
