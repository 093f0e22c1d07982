"""The CPU backend's pairwise einsum nodes: one GEMM or ``np.einsum``.

A pairwise einsum runs as one GEMM (transpose-transpose-GEMM-transpose, batched ``matmul``
where batch labels exist, written into the planned buffer with ``out=``, on the call's
threads: ``cpu_gemm.threaded_matmul``; BLAS's product, or in integer, bool and float16
dtypes ``einsum_matmul``'s) or as ``np.einsum`` (small pairs, outer products in BLAS
dtypes, traces, diagonals). ``gemm.einsum_is_faster``, the rule the contraction
program's steps follow too, decides between them (``contraction_candidates``); at
``opt_level=3`` both are timed on the real shapes; ``kernel_forms`` pins one. A node of
more than two operands, or a sliced one, runs along its path (``path_kernel.host_path_kernel``).
"""

from __future__ import annotations

import math

import numpy as np

from ...analysis.fused import runs_along_path
from ...contract.paths import label_sizes
from ...contract.program.einsum_bytes import np_einsum_bytes
from ...contract.program.gemm import (
    BLAS_DTYPES,
    SMALL_PAIR_WORK,
    einsum_is_faster,
    gemm_plan,
    gemm_source,
    gemm_workspace_bytes,
    run_gemm,
    transpose_copy_bytes,
)
from ...ir import einsum as einsum_mod
from ...ir.einsum_numpy import plain_einsum, to_ascii
from ...runtime.kernel import Kernel
from ..cpu_gemm import threaded_matmul
from ..path_kernel import host_path_kernel
from ..timing import median_seconds, sample_array

# Rates of a 2-core x86 machine for the cost model's predictions (only their ratios matter;
# the choice between the two forms is ``gemm.einsum_is_faster``'s, which they agree with).
# Per-call costs and np.einsum's rate measured on pairwise nodes of 8-32768 multiply-adds
# through this backend's kernels (one core, float64 and complex128).
GEMM_FLOPS = {"float32": 150e9, "float64": 75e9, "complex64": 150e9, "complex128": 75e9}
EINSUM_FLOPS = 1.3e9        # np.einsum's sum-of-products loops on small pairs, no blocking
# ``einsum_matmul``'s product of a GEMM's matrices in integer dtypes (4.4e9 on int64
# 64 x 256^3 batched, less on small matrices)
EINSUM_GEMM_FLOPS = 3e9
COPY_BYTES = 20e9
GEMM_OVERHEAD = 2.2e-6      # transposes, reshapes and the matmul call
EINSUM_OVERHEAD = 2.0e-6    # np.einsum parses its equation on every call
# The GEMM forms: BLAS's product, and ``einsum_matmul``'s in dtypes BLAS does not multiply
GEMM_IMPLS = ("blas-gemm", "einsum-gemm")


def einsum_kernel(G, n, opt_level: int, form: str = "auto") -> Kernel:
    """A pairwise (or one-operand) einsum node; many-operand or sliced ones run along their
    path with ``sliced_contract``."""
    from ... import ir

    d = G.nodes[n]
    a = d["attrs"]
    if runs_along_path(G, n):
        return host_path_kernel(G, n)
    operands = ir.operands(G, n)
    shapes = [tuple(G.nodes[u]["shape"]) for u in operands]
    run, impl, details, source = contraction(a["equation"], shapes, d["dtype"], opt_level,
                                             form)

    def fn(args, out):
        if out is None:
            out = np.empty(d["shape"], d["dtype"])
        return run(args, out)
    gemm = impl in GEMM_IMPLS
    return Kernel(f"einsum_{n}", fn, source, impl, node=n, details=details,
                  uses_threads=gemm, blas_only_threads=impl == "blas-gemm",
                  workspace_bytes=details["workspace_bytes"])


def contraction_with_epilogue(G, n, k, opt_level, form: str = "auto"):
    """``body(args, out)`` of a fused contraction: the einsum into ``out``, then the
    generated epilogue in place on it."""
    sub = G.nodes[n]["attrs"]["graph"]
    ein = sub.nodes[k.einsum_node]
    ins = sub.graph["inputs"]
    shapes = [tuple(sub.nodes[ins[i]]["shape"]) for i in k.einsum_args]
    run, impl, details, source = contraction(k.einsum_equation, shapes, ein["dtype"],
                                             opt_level, form)
    where, epilogue = k.einsum_args, k.epilogue
    shape, dtype = tuple(G.nodes[n]["shape"]), G.nodes[n]["dtype"]

    def body(args, out):
        if out is None:
            out = np.empty(shape, dtype)
        run([args[i] for i in where], out)
        return epilogue(args, out)
    return body, impl, details, source


def pair_plan(eq: str, shapes):
    """The GEMM plan of a two-operand einsum (None: not a GEMM, or one operand)."""
    return gemm_plan(eq, shapes) if len(shapes) == 2 else None


def contraction_candidates(eq: str, shapes, dtype: str) -> list[tuple[str, str, float]]:
    """``(impl, why, predicted seconds)`` for every implementation of a one- or two-operand
    einsum, the one to run first: a GEMM where one maps the pair and
    ``gemm.einsum_is_faster`` (the rule the contraction program's steps follow too) does not
    give it to ``np.einsum``. The predictions are the cost model's."""
    return _candidates(eq, shapes, dtype, pair_plan(eq, shapes))


def _candidates(eq: str, shapes, dtype: str, p) -> list[tuple[str, str, float]]:
    """``contraction_candidates`` with the pair's ``pair_plan`` ``p``."""
    work = math.prod(label_sizes(eq, shapes).values())
    est_einsum = EINSUM_OVERHEAD + 2.0 * work / EINSUM_FLOPS
    blas = dtype in BLAS_DTYPES
    if p is None:
        why = ("not a GEMM (a repeated label: trace or diagonal)" if len(shapes) == 2
               else "np.einsum's loops")
        return [("numpy-einsum", why, est_einsum)]
    B, M, K, N = p.bmkn
    copy = transpose_copy_bytes(p, shapes, np.dtype(dtype).itemsize)
    impl = "blas-gemm" if blas else "einsum-gemm"
    rate = GEMM_FLOPS[dtype] if blas else EINSUM_GEMM_FLOPS
    est = GEMM_OVERHEAD + 2.0 * B * M * K * N / rate + copy / COPY_BYTES
    why = (f"{'batched ' if B > 1 else ''}GEMM B,M,K,N={p.bmkn}, {copy} B of transposes" +
           ("" if blas else f"; {dtype}: no BLAS, np.einsum's product of the matrices"))
    if not einsum_is_faster(work, p, blas):
        return [(impl, f"{why} ({work} multiply-adds" +
                 (", something summed)" if blas else ")"), est),
                ("numpy-einsum", "np.einsum's loops", est_einsum)]
    gemm = (impl, why, est)
    why = (f"np.einsum: {work} multiply-adds, fewer than {SMALL_PAIR_WORK}"
           if work < SMALL_PAIR_WORK else "np.einsum: nothing summed (an outer or broadcast "
           "product; a GEMM of K = 1)")
    return [("numpy-einsum", why, est_einsum), gemm]


def contraction(eq: str, shapes, dtype: str, opt_level: int, form: str = "auto"):
    """``(run(args, out) -> out, impl, details, source)`` for the einsum: the first of
    ``contraction_candidates``, or the fastest measured at ``opt_level`` 3, or the one
    ``form`` pins."""
    plan = pair_plan(eq, shapes)
    cands = _candidates(eq, shapes, dtype, plan)
    impl, why, est = cands[0]
    details = {"contraction": impl, "reason": why,
               "predicted_us": {c: round(e * 1e6, 2) for c, _, e in cands}}
    pinned = [c for c in cands if c[0] == form]
    if pinned:
        impl = pinned[0][0]
        details.update(contraction=impl, reason=f"kernel_forms: {pinned[0][1]}")
    elif opt_level >= 3 and len(cands) > 1:
        args = [sample_array(s, dtype) for s in shapes]
        out = np.empty(einsum_mod.parse(eq, shapes).output_shape, dtype)
        timings = {c: median_seconds(lambda f=_contraction_fn(c, eq, dtype, plan):
                                     f(args, out)) for c, _, _ in cands}
        impl = min(timings, key=timings.get)
        details.update(contraction=impl, reason="fastest measured (opt_level 3)",
                       timings_ms={c: round(t * 1e3, 4) for c, t in timings.items()})
    itemsize = np.dtype(dtype).itemsize
    if impl in GEMM_IMPLS:
        details["workspace_bytes"] = gemm_workspace_bytes(plan, shapes, itemsize,
                                                          impl == "blas-gemm")
    else:
        # the plan's values are C-contiguous buffers, and inputs are predicted as
        # C-contiguous (as a contraction program's are, ``contraction_workspace_bytes``)
        details["workspace_bytes"] = np_einsum_bytes(*einsum_mod.split(eq),
                                                     label_sizes(eq, shapes), itemsize,
                                                     c_contiguous=True)
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
