"""Einsum stages on the GPU: the candidates (cuBLAS GEMM, cupy.einsum, opt_einsum with
cupy), the one the stage's contraction names first (its form, by the device's rates: every
pair that maps onto a GEMM is one), their run functions and source, and timing them."""

from __future__ import annotations

import math

import numpy as np

from ....contraction.program.gemm import (
    BLAS_DTYPES,
    gemm_of,
    gemm_source,
    run_gemm,
    transpose_copy_bytes,
)
from ....contraction.value import Contraction
from ....ir import einsum as einsum_mod
from ....ir.einsum_numpy import to_ascii
from .cublas import Cublas

# -------------------------------------------------------------------------- contractions


def contraction_candidates(c: Contraction) -> list[tuple[str, str]]:
    """Implementations that can run contraction ``c``, the one its form names first, with
    why (the device's predicted seconds, ``Rates``)."""
    eq, shapes, dtype, rates = c.equation, c.shapes, c.dtype, c.table
    n_ops = len(shapes)
    if n_ops > 2:
        return [("opt_einsum-pairwise", f"{n_ops} operands: pairwise steps with cupy along "
                 f"{[list(p) for p in c.path]}")]
    if n_ops == 1:
        return [("cupy-einsum", "one operand: a transpose/trace/sum")]
    p = gemm_of(eq, shapes)
    if p is None:
        return [("cupy-einsum", "repeated labels (diagonal): not a GEMM")]
    copy = transpose_copy_bytes(p, shapes, np.dtype(dtype).itemsize)
    est = rates.gemm_seconds(p, dtype, dtype in BLAS_DTYPES, copy)
    gemm = ("cublas-gemm", f"batched GEMM B,M,K,N={p.bmkn}, {copy} B of transposes, "
            f"est {est * 1e6:.1f} us")
    ein = ("cupy-einsum", f"cupy's einsum, est "
           f"{rates.einsum_seconds(math.prod(c.sizes.values())) * 1e6:.1f} us")
    return [gemm, ein] if c.forms[0] == "gemm" else [ein, gemm]


def contraction_fn(impl: str, eq: str, shapes, dtype: str, path=None, alpha=1):
    """``run(views, dest)``: the contraction (times ``alpha``) into ``dest``."""
    import cupy

    if impl == "cublas-gemm" and dtype in Cublas.TYPES:
        p = gemm_of(eq, shapes)
        matmul = cublas_matmul(dtype, alpha)

        def gemm(views, dest):
            a, b = (v.astype(dtype, copy=False) for v in views)
            run_gemm(cupy, p, a, b, dest, matmul)
        return gemm
    fn = _unscaled_contraction_fn(impl, eq, shapes, dtype, path)
    if alpha == 1:
        return fn

    def scaled(views, dest):
        fn(views, dest)
        cupy.multiply(dest, dest.dtype.type(alpha), out=dest)
    return scaled


def cublas_matmul(dtype: str, alpha=1):
    """``matmul(a, b, c)``: ``c = alpha * a @ b`` by cuBLAS's strided-batched GEMM called
    directly (capturable in a CUDA graph), or None in a dtype cuBLAS does not multiply
    (integers, bool: cupy's own kernels)."""
    if dtype not in Cublas.TYPES:
        return None
    cublas = Cublas.get()
    return lambda x, y, z: cublas.gemm(x, y, z, alpha)


def _unscaled_contraction_fn(impl: str, eq: str, shapes, dtype: str, path):
    import cupy

    if impl == "cublas-gemm":  # integer and bool GEMMs: cupy's own kernels
        p = gemm_of(eq, shapes)

        def gemm(views, dest):
            a, b = (v.astype(dtype, copy=False) for v in views)
            run_gemm(cupy, p, a, b, dest)
        return gemm
    if impl == "opt_einsum-pairwise":
        import opt_einsum

        expr = opt_einsum.contract_expression(eq, *shapes, optimize=[tuple(p) for p in path])

        def pairwise(views, dest):
            xs = [v.astype(dtype, copy=False) for v in views]
            cupy.copyto(dest, expr(*xs), casting="unsafe")  # backend inferred: cupy
        return pairwise
    ascii_eq = to_ascii(eq)

    def via_einsum(views, dest):
        r = cupy.einsum(ascii_eq, *(v.astype(dtype, copy=False) for v in views))
        cupy.copyto(dest, r.reshape(dest.shape), casting="unsafe")
    return via_einsum


def contraction_source(impl: str, eq: str, shapes, alpha=1) -> str:
    """The readable source shown for a contraction kernel: the library call ``impl`` makes."""
    scale = f"\nout *= {alpha!r}" if alpha != 1 else ""
    if impl == "opt_einsum-pairwise":
        return f"out[...] = opt_einsum.contract({eq!r}, ...)  # cupy arrays" + scale
    if impl != "cublas-gemm":
        return f"out[...] = cupy.einsum({eq!r}, ...)" + scale
    p = gemm_of(eq, shapes)
    M, N = p.bmkn[1], p.bmkn[3]
    k = f"{alpha!r} * " if alpha != 1 else ""

    def product(lead):
        if p.out_perm is None:
            return [f"out.reshape({lead}{M}, {N})[...] = {k}A @ B  # cublasGemmStridedBatchedEx"]
        return [f"out[...] = ({k}A @ B).reshape{p.res_shape}.transpose{p.out_perm}"]
    return gemm_source(p, eq, "cuBLAS", product)


def time_candidate(impl: str, eq: str, shapes, dtype: str, path=None,
                    repeat: int = 3) -> float:
    """Median seconds of ``impl`` on random device operands (opt_level 3 autotuning)."""
    import cupy

    rng = cupy.random.default_rng(0)
    xs = [rng.standard_normal(s).astype(dtype) for s in shapes]
    out_shape = einsum_mod.parse(eq, shapes).output_shape
    dest = cupy.empty(out_shape, dtype)
    fn = contraction_fn(impl, eq, shapes, dtype, path)
    fn(xs, dest)
    times = []
    for _ in range(repeat):
        start, end = cupy.cuda.Event(), cupy.cuda.Event()
        start.record()
        fn(xs, dest)
        end.record()
        end.synchronize()
        times.append(cupy.cuda.get_elapsed_time(start, end) / 1e3)
    return float(np.median(times))
