"""The GEMM lowering's workspace model (graphopt/contraction/program/gemm.py) against what
``run_gemm`` allocates, traced."""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest

from graphopt.contraction.program.gemm import (
    gemm_of,
    gemm_workspace_bytes,
    pair_labels,
    reshaped_strides,
    run_gemm,
)
from graphopt.ir.einsum import parse


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(64, 48), (48, 32)]),          # free views: no workspace
    ("ji,jk->ik", [(48, 64), (48, 32)]),          # an F-ordered matrix: still a view
    ("ijk,kl->lij", [(8, 16, 24), (24, 20)]),     # result needs its axes permuted
    ("abc,bd->dac", [(6, 10, 12), (10, 14)]),     # operand copy and permuted result
    ("bij,bjk->bik", [(5, 16, 24), (5, 24, 8)]),  # batched, free
    ("ibj,bjk->bik", [(16, 5, 24), (5, 24, 8)]),  # batched, operand copy
    ("ijx,jk->ik", [(16, 24, 3), (24, 8)]),       # a label summed before the GEMM
    ("kbi,bkj->bij", [(24, 5, 16), (5, 24, 8)]),  # batched, A F-ordered and B not
])
@pytest.mark.parametrize("dtype", ["float64", "int64"])
def test_workspace_model_matches_traced_allocations(eq, shapes, dtype):
    # int64: no BLAS, the product is einsum_matmul's (with its copy where A is F-ordered)
    p = gemm_of(eq, shapes)
    assert p is not None
    rng = np.random.default_rng(0)
    a, b = (rng.integers(-3, 4, size=s).astype(dtype) for s in shapes)
    out = np.empty(parse(eq, shapes).output_shape, dtype)
    run_gemm(np, p, a, b, out)              # warm: nothing cached is counted below
    tracemalloc.start()
    run_gemm(np, p, a, b, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    model = gemm_workspace_bytes(p, shapes, 8, blas=dtype == "float64")
    assert model - 4096 <= peak <= model * 1.1 + 4096, (peak, model)   # + view objects
    np.testing.assert_array_equal(out, np.einsum(eq, a, b))


def test_reshaped_strides_are_numpys():
    # the strides a transposed, regrouped operand's view has (dims above 1), or None where
    # NumPy copies, on random layouts, permutations and groupings (with dims of 1)
    rng = np.random.default_rng(0)
    for _ in range(3000):
        nd = int(rng.integers(1, 6))
        shape = [int(x) for x in rng.choice([1, 1, 2, 3, 4], nd)]
        order = rng.permutation(nd)
        a = np.empty([shape[i] for i in order], np.int8).transpose(np.argsort(order))
        perm = [int(x) for x in rng.permutation(nd)]
        dims, new, i = [a.shape[k] for k in perm], [], 0
        while i < nd:
            j = int(rng.integers(i + 1, nd + 1))
            new.append(int(np.prod(dims[i:j])))
            i = j
            if rng.random() < 0.2:
                new.append(1)
        r = a.transpose(perm).reshape(new)
        got = reshaped_strides(a.shape, a.strides, perm, new)
        assert (got is not None) == np.shares_memory(r, a), (a.shape, a.strides, perm, new)
        if got is not None:
            assert all(g == w for d, g, w in zip(new, got, r.strides) if d > 1)


def test_gemm_plan_shapes():
    p = gemm_of("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)])
    assert p.bmkn == (3, 4, 5, 2) and p.out_perm is None
    q = gemm_of("ijk,kl->lji", [(4, 3, 5), (5, 6)])
    assert q.bmkn[0] == 1 and q.bmkn[2] == 5 and {q.bmkn[1], q.bmkn[3]} == {12, 6}
    # l leads the result: B's matrix goes first (swapped), so the product needs no permuting
    assert q.swapped and q.out_perm is None and q.res_shape == (6, 3, 4)


def test_a_pairs_labels_are_planned_once_and_its_sizes_every_time():
    """``pair_labels`` is memoized by labels: plans of one pattern at other sizes take
    their own sizes, and each runs as ``np.einsum`` does."""
    rng = np.random.default_rng(5)
    pair_labels.cache_clear()
    for shapes in ([(2, 3, 4), (4, 3, 5)], [(6, 1, 2), (2, 1, 7)], [(1, 5, 3), (3, 5, 1)]):
        p = gemm_of("abc,cbd->dab", shapes)
        (a, b, c), d = shapes[0], shapes[1][2]
        assert p.bmkn == (b, a, c, d) and p.res_shape == (b, a, d)   # batch b, M a, N d
        lead = (b,) if b != 1 else ()
        assert p.matrices[:3] == (lead + (a, c), lead + (c, d), lead + (a, d))
        x, y = (rng.normal(size=s) for s in shapes)
        out = np.empty((d, a, b))
        run_gemm(np, p, x, y, out)
        np.testing.assert_allclose(out, np.einsum("abc,cbd->dab", x, y), rtol=1e-12)
    info = pair_labels.cache_info()
    assert (info.misses, info.hits) == (1, 2)
    assert pair_labels("aab", "bc", "ac") is None     # a trace: not a GEMM
