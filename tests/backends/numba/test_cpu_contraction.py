"""The CPU backend's pairwise einsum nodes (graphopt/backends/numba/contraction.py): one GEMM
or np.einsum, each form against NumPy's einsum, and the one rule (``Rates.step_form``, the
form a ``Contraction`` holds) that the contraction program's steps follow too."""

import math

import numpy as np
import pytest

from graphopt.backends import timing
from graphopt.backends.numba import contraction as cpu_contraction
from graphopt.contraction.program.gemm import BLAS_DTYPES, gemm_of
from graphopt.contraction.program.run import PathContraction
from graphopt.contraction.rates import HOST_RATES, SMALL_PAIR_WORK
from graphopt.contraction.value import Contraction
from graphopt.ir.einsum import split

pytest.importorskip("numba")


def pair(eq, shapes, dtype):
    """The host's contraction of a pairwise einsum, as the contraction pass makes it."""
    return Contraction.build(eq, shapes, dtype, [dtype] * len(shapes), None, HOST_RATES)


def candidates(eq, shapes, dtype):
    return cpu_contraction.contraction_candidates(pair(eq, shapes, dtype))


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(5, 6), (6, 7)]),
    ("bij,bjk->bik", [(3, 4, 5), (3, 5, 2)]),
    ("ijk,kl->lji", [(4, 3, 5), (5, 6)]),          # result needs its axes permuted
    ("ij,kj->ki", [(4, 5), (6, 5)]),                # transposed operands
    ("abc,cb->a", [(3, 4, 5), (5, 4)]),             # two contracted labels
    ("ij,jk->k", [(3, 4), (4, 5)]),                 # a label summed in one operand only
    ("bi,bi->b", [(6, 7), (6, 7)]),                 # batched dot
    ("ij,kl->ijkl", [(6, 5), (5, 6)]),              # outer product (K = 1)
    ("ij,jk->ijk", [(8, 8), (8, 8)]),               # nothing summed, a batch label
])
@pytest.mark.parametrize("dtype", ["float32", "float64", "complex128", "int64", "int16",
                                   "uint8", "bool", "float16"])
@pytest.mark.parametrize("form", ["auto", "gemm", "numpy-einsum"])
def test_every_form_of_a_pairwise_contraction_equals_numpy_einsum(eq, shapes, dtype, form):
    # "gemm": BLAS's product in its dtypes, einsum_matmul's in the others
    if form == "gemm":
        form = "blas-gemm" if dtype in BLAS_DTYPES else "einsum-gemm"
    args = [timing.sample_array(s, dtype, seed=i) for i, s in enumerate(shapes)]
    run, impl, details, source = cpu_contraction.contraction(pair(eq, shapes, dtype), 2, form)
    out = np.empty(np.einsum(eq, *args).shape, dtype)
    assert run(args, out) is out
    if dtype == "float16":    # (np.einsum's own float16 sums, in another order)
        np.testing.assert_allclose(out, np.einsum(eq, *args), rtol=2e-2, atol=2e-2)
    elif np.dtype(dtype).kind in "iub":
        np.testing.assert_array_equal(out, np.einsum(eq, *args))
    else:
        np.testing.assert_allclose(out, np.einsum(eq, *args), rtol=1e-5)
    assert impl == form if form != "auto" else \
        impl in ("blas-gemm" if dtype in BLAS_DTYPES else "einsum-gemm", "numpy-einsum")
    assert source and details["reason"]


@pytest.mark.parametrize("eq, shapes", [
    ("ij,jk->ik", [(5, 6), (6, 7)]),
    ("bi,bi->b", [(6, 7), (6, 7)]),
])
@pytest.mark.parametrize("dtype, gemm", [("float64", "blas-gemm"), ("int32", "einsum-gemm")])
def test_opt_level_3_keeps_the_faster_form_measured(eq, shapes, dtype, gemm):
    run, impl, details, _ = cpu_contraction.contraction(pair(eq, shapes, dtype), 3)
    assert set(details["timings_ms"]) == {gemm, "numpy-einsum"}
    assert details["timings_ms"][impl] == min(details["timings_ms"].values())


def test_traces_go_to_einsum_and_integer_gemms_to_einsum_matmul():
    (c,) = candidates("ii,ij->j", [(3, 3), (3, 4)], "float64")
    assert c[0] == "numpy-einsum" and "trace or diagonal" in c[1]
    cands = candidates("ij,jk->ik", [(64, 64), (64, 64)], "int64")
    assert [c[0] for c in cands] == ["einsum-gemm", "numpy-einsum"]
    assert "no BLAS" in cands[0][1]
    # without BLAS an outer product is a GEMM too (its np.einsum may fill buffers)
    outer = candidates("ij,kl->ijkl", [(32, 32), (32, 32)], "int8")
    assert outer[0][0] == "einsum-gemm"
    big = candidates("ij,jk->ik", [(256, 256), (256, 256)],
                                                 "float32")
    assert big[0][0] == "blas-gemm" and big[0][2] < big[1][2]


def test_small_pairs_and_products_that_sum_nothing_go_to_einsum():
    assert SMALL_PAIR_WORK == 128
    small = candidates("ij,jk->ik", [(4, 4), (4, 4)], "float64")
    assert [c[0] for c in small] == ["numpy-einsum", "blas-gemm"]
    assert "64 multiply-adds, fewer than 128" in small[0][1]
    at = candidates("ij,jk->ik", [(4, 4), (4, 8)], "float64")
    assert at[0][0] == "blas-gemm" and "128 multiply-adds" in at[0][1]
    outer = candidates("ij,kl->ijkl", [(32, 32), (32, 32)],
                                                   "float64")
    assert outer[0][0] == "numpy-einsum" and "nothing summed" in outer[0][1]


def test_einsum_is_faster_is_the_size_rule_then_the_summed_rule():
    p = gemm_of("ij,jk->ik", [(8, 8), (8, 8)])
    outer = gemm_of("ij,kl->ijkl", [(8, 8), (8, 8)])
    faster = HOST_RATES.einsum_is_faster
    assert faster(SMALL_PAIR_WORK - 1) and not faster(SMALL_PAIR_WORK)
    assert not faster(512, p) and faster(4096, outer)
    assert faster(64, p)
    # without BLAS: the size rule alone
    assert not faster(4096, outer, blas=False) and faster(64, p, False)
    assert HOST_RATES.step_form(512, p, True) == "gemm"
    assert HOST_RATES.step_form(4096, outer, True) == "einsum"
    assert HOST_RATES.step_form(4096, None, True) == "einsum"


PAIRS = [("ij,jk->ik", [(n, n), (n, n)]) for n in (2, 4, 5, 6, 16)] + [
    ("abc,cd->abd", [(2, 4, 4), (4, 2)]),       # 64 multiply-adds
    ("abc,cd->abd", [(2, 8, 8), (8, 2)]),       # 256
    ("ab,cd->abcd", [(16, 2), (2, 16)]),        # outer product
    ("ab,bc->abc", [(12, 12), (12, 12)]),       # nothing summed, b a batch label
    ("abcd,aecd->be", [(4, 4, 2, 2), (4, 4, 2, 2)]),
    ("ab,ab->", [(7, 9), (7, 9)]),              # a full contraction
]


@pytest.mark.parametrize("eq, shapes", PAIRS)
@pytest.mark.parametrize("dtype", ["float64", "complex64", "int32", "bool"])
def test_a_pairwise_node_and_a_program_step_take_the_same_form(eq, shapes, dtype):
    # the numba backend's pairwise node and the contraction program's step of the same pair
    # read one rule: GEMM or np.einsum alike
    node = candidates(eq, shapes, dtype)[0][0]
    terms, out = split(eq)
    (step,) = PathContraction(eq, [(0, 1)]).program(shapes, dtype).steps
    assert (step.gemm is not None) == (node in ("blas-gemm", "einsum-gemm")), (node, step)
    work = math.prod({c: d for t, s in zip(terms, shapes) for c, d in zip(t, s)}.values())
    if node == "blas-gemm":
        assert work >= SMALL_PAIR_WORK and step.gemm.bmkn[2] > 1
