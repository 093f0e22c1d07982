"""The CPU GEMM split over the call's threads (backends/cpu_gemm.py): every way of cutting
a product gives the product, for every BLAS dtype, batched or not, on strided views."""

import contextlib

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import graphopt as go
from graphopt.backends import cpu_gemm
from graphopt.runtime import threads


@contextlib.contextmanager
def split_everything(call: bool = True):
    """Split every product, however small (inside a call with 3 threads if ``call``)."""
    saved = threads.WORKER_MIN_FLOPS, cpu_gemm.SMALL_GEMM, cpu_gemm.CUT_ALIGN
    threads.WORKER_MIN_FLOPS, cpu_gemm.SMALL_GEMM, cpu_gemm.CUT_ALIGN = 0, {}, 2
    if call:
        threads.enter_call(3)
    try:
        yield
    finally:
        if call:
            threads.exit_call()
        threads.WORKER_MIN_FLOPS, cpu_gemm.SMALL_GEMM, cpu_gemm.CUT_ALIGN = saved


def operand(r, shape, dtype):
    x = r.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * r.standard_normal(shape)
    return x.astype(dtype)


@settings(max_examples=60)
@given(batch=st.sampled_from([None, 1, 2, 5]), m=st.integers(1, 40), k=st.integers(1, 24),
       n=st.integers(1, 40), dtype=st.sampled_from(["float32", "float64", "complex64",
                                                     "complex128"]),
       transposed=st.booleans(), seed=st.integers(0, 2**16))
def test_threaded_matmul_is_the_product(batch, m, k, n, dtype, transposed, seed):
    r = np.random.default_rng(seed)
    lead = () if batch is None else (batch,)
    a = operand(r, lead + (m, k), dtype)
    b = operand(r, lead + (n, k), dtype)
    b = np.swapaxes(b, -1, -2) if transposed else np.ascontiguousarray(np.swapaxes(b, -1, -2))
    c = np.empty(lead + (m, n), dtype)
    with split_everything():
        assert cpu_gemm.threaded_matmul(a, b, c) is c
    want = np.matmul(a.astype(np.complex128), b.astype(np.complex128))
    eps = np.finfo(dtype).eps
    bound = 4 * k * eps * (np.abs(a) @ np.abs(b))
    assert np.all(np.abs(c - want) <= bound + np.finfo(dtype).tiny)


@pytest.mark.parametrize("blas_threads_gemms", [False, True])
def test_a_plan_with_a_split_gemm_and_epilogue_matches_numpy(blas_threads_gemms, monkeypatch):
    """The GEMM split over graphopt's workers (as beside a parallel loop), or one BLAS call
    on BLAS's threads (a GEMM-only plan alone in flight): the same result."""
    g = go.Graph("gemm+bias")
    x, w, b = (g.input("x", (33, 17), "float64"), g.input("w", (17, 29), "float64"),
               g.input("b", (29,), "float64"))
    g.output(go.relu(go.einsum("ik,kj->ij", x, w) + b))
    r = np.random.default_rng(3)
    xs, ws, bs = r.standard_normal((33, 17)), r.standard_normal((17, 29)), r.standard_normal(29)
    plan = go.compile(g, threads=3, cache=False)
    assert plan.blas_threads_gemms      # only the GEMM (its epilogue on one thread) is threaded
    plan.blas_threads_gemms = blas_threads_gemms
    monkeypatch.setattr(threads, "_parallel_at", float("-inf"))  # no parallel call before
    parts = []
    real = cpu_gemm.threads.run_parallel

    def counting(fn, items, n):
        parts.append(len(items))
        return real(fn, items, n)
    cpu_gemm.threads.run_parallel = counting
    try:
        with split_everything(call=False):
            got = plan(x=xs, w=ws, b=bs)
    finally:
        cpu_gemm.threads.run_parallel = real
    assert parts == ([] if blas_threads_gemms else [3])
    np.testing.assert_allclose(got, np.maximum(xs @ ws + bs, 0), rtol=1e-12, atol=1e-12)
