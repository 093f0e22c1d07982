"""The CPU backend's pairwise einsum nodes: one GEMM or ``np.einsum``.

A pairwise einsum runs in the form its ``Contraction`` gives its one step (the backend's
rates decided it: ``Rates.step_form``, the rule every contraction step follows): one GEMM
(transpose-transpose-GEMM-transpose, batched ``matmul`` where batch labels exist, written
into the planned buffer with ``out=``, on the call's threads: ``cpu_gemm.threaded_matmul``;
BLAS's product, or in integer, bool and float16 dtypes ``einsum_matmul``'s) or
``np.einsum`` (small pairs, outer products in BLAS dtypes, traces, diagonals). At
``opt_level=3`` both forms are timed on the real shapes; ``kernel_forms`` pins one. A node
of more than two operands, or a sliced one, runs along its path
(``path_kernel.host_path_kernel``).
"""

from __future__ import annotations

import math

import numpy as np

from ...analysis.fused import runs_along_path
from ...contraction.program.gemm import (
    BLAS_DTYPES,
    gemm_of,
    gemm_source,
    run_gemm,
    transpose_copy_bytes,
)
from ...contraction.rates import HOST_RATES, Rates
from ...contraction.value import Contraction, contraction_of, pair_workspace_bytes
from ...ir.einsum_numpy import plain_einsum, to_ascii
from ...runtime.kernel import Kernel
from ..cpu_gemm import threaded_matmul
from ..path_kernel import host_path_kernel
from ..timing import median_seconds, sample_array

# The GEMM forms: BLAS's product, and ``einsum_matmul``'s in dtypes BLAS does not multiply
GEMM_IMPLS = ("blas-gemm", "einsum-gemm")


def einsum_kernel(G, n, opt_level: int, form: str = "auto",
                  rates: Rates = HOST_RATES) -> Kernel:
    """A pairwise (or one-operand) einsum node; many-operand or sliced ones run along their
    path with ``sliced_contract``."""
    d = G.nodes[n]
    if runs_along_path(G, n):
        return host_path_kernel(G, n)
    run, impl, details, source = contraction(contraction_of(G, n), opt_level, form, rates)

    def fn(args, out):
        if out is None:
            out = np.empty(d["shape"], d["dtype"])
        return run(args, out)
    gemm = impl in GEMM_IMPLS
    return Kernel(f"einsum_{n}", fn, source, impl, node=n, details=details,
                  uses_threads=gemm, blas_only_threads=impl == "blas-gemm",
                  workspace_bytes=details["workspace_bytes"])


def contraction_with_epilogue(G, n, k, opt_level, form: str = "auto",
                              rates: Rates = HOST_RATES):
    """``body(args, out)`` of a fused contraction: the einsum into ``out``, then the
    generated epilogue in place on it."""
    sub = G.nodes[n]["attrs"]["graph"]
    run, impl, details, source = contraction(contraction_of(sub, k.einsum_node), opt_level,
                                             form, rates)
    where, epilogue = k.einsum_args, k.epilogue
    shape, dtype = tuple(G.nodes[n]["shape"]), G.nodes[n]["dtype"]

    def body(args, out):
        if out is None:
            out = np.empty(shape, dtype)
        run([args[i] for i in where], out)
        return epilogue(args, out)
    return body, impl, details, source


def contraction_candidates(c: Contraction, rates: Rates = HOST_RATES
                           ) -> list[tuple[str, str, float]]:
    """``(impl, why, predicted seconds)`` for every implementation of a one- or two-operand
    einsum, the one its contraction's form names first (``Rates.step_form``); the
    predictions are ``rates``'."""
    eq, shapes, dtype = c.equation, c.shapes, c.dtype
    work = math.prod(c.sizes.values())
    est_einsum = rates.einsum_seconds(work)
    blas = dtype in BLAS_DTYPES
    p = gemm_of(eq, shapes) if len(shapes) == 2 else None
    if p is None:
        why = ("not a GEMM (a repeated label: trace or diagonal)" if len(shapes) == 2
               else "np.einsum's loops")
        return [("numpy-einsum", why, est_einsum)]
    B, M, K, N = p.bmkn
    copy = transpose_copy_bytes(p, shapes, np.dtype(dtype).itemsize)
    impl = "blas-gemm" if blas else "einsum-gemm"
    est = rates.gemm_seconds(p, dtype, blas, copy)
    why = (f"{'batched ' if B > 1 else ''}GEMM B,M,K,N={p.bmkn}, {copy} B of transposes" +
           ("" if blas else f"; {dtype}: no BLAS, np.einsum's product of the matrices"))
    if c.forms[0] == "gemm":
        return [(impl, f"{why} ({work} multiply-adds" +
                 (", something summed)" if blas else ")"), est),
                ("numpy-einsum", "np.einsum's loops", est_einsum)]
    gemm = (impl, why, est)
    why = (f"np.einsum: {work} multiply-adds, fewer than {rates.small_pair_work}"
           if work < rates.small_pair_work else "np.einsum: nothing summed (an outer or "
           "broadcast product; a GEMM of K = 1)")
    return [("numpy-einsum", why, est_einsum), gemm]


def contraction(c: Contraction, opt_level: int, form: str = "auto",
                rates: Rates = HOST_RATES):
    """``(run(args, out) -> out, impl, details, source)`` for the pairwise contraction
    ``c``: the first of ``contraction_candidates``, or the fastest measured at ``opt_level``
    3, or the one ``form`` pins."""
    eq, shapes, dtype = c.equation, c.shapes, c.dtype
    plan = gemm_of(eq, shapes) if len(shapes) == 2 else None
    cands = contraction_candidates(c, rates)
    impl, why, est = cands[0]
    details = {"contraction": impl, "reason": why,
               "predicted_us": {name: round(e * 1e6, 2) for name, _, e in cands}}
    pinned = [cand for cand in cands if cand[0] == form]
    if pinned:
        impl = pinned[0][0]
        details.update(contraction=impl, reason=f"kernel_forms: {pinned[0][1]}")
    elif opt_level >= 3 and len(cands) > 1:
        args = [sample_array(s, dtype) for s in shapes]
        out = np.empty(tuple(c.sizes[x] for x in c.output), dtype)
        timings = {name: median_seconds(lambda f=_contraction_fn(name, eq, dtype, plan):
                                        f(args, out)) for name, _, _ in cands}
        impl = min(timings, key=timings.get)
        details.update(contraction=impl, reason="fastest measured (opt_level 3)",
                       timings_ms={name: round(t * 1e3, 4) for name, t in timings.items()})
    details["workspace_bytes"] = pair_workspace_bytes(
        eq, shapes, dtype, "gemm" if impl in GEMM_IMPLS else "einsum")
    return (_contraction_fn(impl, eq, dtype, plan), impl, details,
            _contraction_source(impl, eq, plan))


def _contraction_fn(impl: str, eq: str, dtype: str, p):
    if impl in GEMM_IMPLS:
        def gemm(args, out):
            a, b = (x.astype(dtype, copy=False) for x in args)
            return run_gemm(np, p, a, b, out, threaded_matmul)
        return gemm
    ascii_eq = to_ascii(eq)

    def via_einsum(args, out):
        return plain_einsum(ascii_eq, [x.astype(dtype, copy=False) for x in args], out)
    return via_einsum


def _contraction_source(impl: str, eq: str, p) -> str:
    if impl not in GEMM_IMPLS:
        return f"np.einsum({to_ascii(eq)!r}, *operands, out=out)"
    M, N = p.bmkn[1], p.bmkn[3]
    matmul = "np.matmul" if impl == "blas-gemm" else "einsum_matmul"

    def product(lead):
        if p.out_perm is None:
            return [f"{matmul}(A, B, out=out.reshape({lead}{M}, {N}))"]
        return [f"out[...] = {matmul}(A, B).reshape{p.res_shape}.transpose{p.out_perm}"]
    return gemm_source(p, eq, "BLAS" if impl == "blas-gemm" else "np.einsum", product)
