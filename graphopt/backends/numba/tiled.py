"""Tiled regions (``passes.tiling``) run one block of their batch dims at a time.

``tiled_kernel(G, n, kernel_of)`` re-shapes the region's sub-graph to one block
(``block_graph``), asks the backend for a kernel per member on the block shapes
(``kernel_of(H, m)``), and runs them block after block: operands and the result are sliced
along the leading dims (views; the result's block is C-contiguous because the dims before
the blocked one are taken one index at a time), intermediates live in block-sized scratch
kept per thread, so calls from several threads never share it.

With more than one thread the blocks either run in parallel, a contiguous share per
thread with one BLAS and one numba thread each, or in sequence with every thread given to
each member's BLAS call and kernel (``parallel_blocks``: the cost model).
"""

from __future__ import annotations

import math
import threading

import networkx as nx
import numpy as np

from ... import ir
from ...analysis.fused import computed_members
from ...contraction.value import Contraction
from ...runtime import threads
from ...runtime.kernel import Kernel


def parallel_blocks(nblocks: int, flops: float, nthreads: int) -> bool:
    """Blocks in parallel (one BLAS thread each) rather than in sequence (BLAS and the
    kernels threaded)? Independent blocks scale without synchronization inside a block, so
    whenever every thread gets a block and enough work to pay for waking it."""
    return 1 < nthreads <= nblocks and threads.useful_threads(flops, nthreads) == nthreads


def _block_shape(shape, lead, block) -> tuple:
    t = len(lead)
    if len(shape) >= t and tuple(shape[:t]) == lead:
        return tuple(block) + tuple(shape[t:])
    return tuple(shape)


def block_graph(sub: nx.MultiDiGraph, lead: tuple, block: tuple) -> nx.MultiDiGraph:
    """``sub`` (and its nested fused sub-graphs) with every value indexed by the leading
    dims ``lead`` re-shaped to ``block``; each einsum's contraction planned again for its
    block (the same path, its forms by the same rates on the block's shapes)."""
    H = nx.MultiDiGraph()
    H.graph.update({k: (list(v) if isinstance(v, list) else v) for k, v in sub.graph.items()})
    for n, d in sub.nodes(data=True):
        nd = dict(d, attrs=dict(d["attrs"]), shape=_block_shape(d["shape"], lead, block))
        if nd["op"] == "broadcast_to":
            nd["attrs"]["shape"] = nd["shape"]
        if nd["op"] == "fused":
            nd["attrs"]["graph"] = block_graph(d["attrs"]["graph"], lead, block)
        H.add_node(n, **nd)
    H.add_edges_from(sub.edges(keys=True, data=True))
    for n, d in H.nodes(data=True):
        if d["op"] == "einsum" and "contraction" in d["attrs"]:
            d["attrs"]["contraction"] = Contraction.of_node(H, n)
    ir.verify(H)
    return H


def _thread_choice(nblocks: int, flops: float) -> str:
    """What ``parallel_blocks`` decides for every thread count, in words (the report)."""
    most = min(nblocks, threads.useful_threads(flops, nblocks))
    if most < 2:
        return "blocks in sequence, each member on all the call's threads"
    return (f"blocks in parallel (one BLAS thread each) on 2 to {most} threads; in sequence, "
            "each member on all the call's threads, beyond that or on one")


def tiled_kernel(G: nx.MultiDiGraph, n: int, kernel_of, flops: float = 0.0,
                 timing=None) -> Kernel:
    """The kernel of tiled node ``n``: its members' kernels (``kernel_of(H, m)`` on the
    block graph ``H``) run per block; ``flops`` of the whole region drive the choice
    between parallel and sequential blocks. ``timing = (sample_args, seconds_of, threads)``
    (opt_level 3) times both on ``threads`` threads instead and keeps the faster."""
    d = G.nodes[n]
    a = d["attrs"]
    t, tile = a["tile_dims"], a["tile"]
    shape, dtype = tuple(d["shape"]), d["dtype"]
    lead = shape[:t]
    block = (1,) * (t - 1) + (tile,)
    H = block_graph(a["graph"], lead, block)
    root = H.graph["outputs"][0]
    steps = [(m, kernel_of(H, m), ir.operands(H, m)) for m in computed_members(H)]
    inputs = list(H.graph["inputs"])
    scratch = [(m, H.nodes[m]["shape"], H.nodes[m]["dtype"]) for m, _, _ in steps if m != root]
    grid = lead[:-1] + (lead[-1] // tile,)
    blocks = [tuple(slice(i, i + 1) for i in idx[:-1]) + (slice(idx[-1] * tile,
                                                               (idx[-1] + 1) * tile),)
              for idx in np.ndindex(*grid)]

    local = threading.local()   # scratch per thread: reused, so its pages stay mapped

    def run_range(args, out, first: int, end: int) -> None:
        bufs = getattr(local, "bufs", None)
        if bufs is None:
            bufs = local.bufs = {m: np.empty(s, dt) for m, s, dt in scratch}
        env = dict(bufs)
        for sl in blocks[first:end]:
            env.update(zip(inputs, (x[sl] for x in args)))
            for m, k, operands in steps:
                env[m] = k.fn([env[u] for u in operands], out[sl] if m == root else bufs[m])

    pinned: list = []     # "parallel" or "sequential" where timing chose

    def fn(args, out=None):
        if out is None:
            out = np.empty(shape, dtype)
        t = threads.current_threads()
        if t > 1 and len(blocks) > 1 and (pinned[0] == "parallel" if pinned else
                                          parallel_blocks(len(blocks), flops, t)):
            threads.run_parallel(lambda r: run_range(args, out, *r),
                                 threads.split(len(blocks), t), t)
        else:
            run_range(args, out, 0, len(blocks))
        return out

    parts = [f"# step {k.name} ({k.impl}) on {tuple(H.nodes[m]['shape'])}:\n{k.source}"
             for m, k, _ in steps]
    source = (f"# tiled: {len(blocks)} blocks of {block} over the leading dims {lead} of "
              f"{shape}; per block:\n" + "\n".join(parts))
    impl = "tiled(" + ", ".join(k.impl for _, k, _ in steps) + ")"
    details = {"reason": f"{len(blocks)} blocks: intermediates of "
                         f"{sum(math.prod(s) * np.dtype(dt).itemsize for _, s, dt in scratch)}"
                         " B per block stay in cache",
               "blocks": len(blocks), "block": block,
               "threads": _thread_choice(len(blocks), flops),
               "steps": [{"kernel": k.name, "impl": k.impl,
                          "reason": k.details.get("reason", "")} for _, k, _ in steps]}
    if timing is not None and len(blocks) > 1 and timing[2] > 1:
        args, seconds_of, nthreads = timing
        out = np.empty(shape, dtype)
        timings: dict = {}
        # A B A B, best of the two: the first parallel runs start workers and touch their
        # scratch, which a steady-state call never pays.
        for mode in ("sequential", "parallel") * 2:
            pinned[:] = [mode]
            threads.enter_call(nthreads)
            try:
                ms = round(seconds_of(lambda: fn(args, out)) * 1e3, 4)
            finally:
                threads.exit_call()
            timings[mode] = min(ms, timings.get(mode, ms))
        pinned[:] = [min(timings, key=timings.get)]
        how = "in parallel (one BLAS thread each)" if pinned[0] == "parallel" else \
            "in sequence, each member on all the call's threads"
        details.update(threads=f"blocks {how} whenever a call has more than one thread: "
                               f"faster measured on {nthreads} threads (opt_level 3)",
                       threads_timings_ms=timings)
    return Kernel(f"tiled_{n}", fn, source, impl, node=n, details=details, uses_threads=True)
