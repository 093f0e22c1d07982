"""Tiled regions (``passes.tiling``) run one block of their batch dims at a time.

``tiled_kernel(G, n, kernel_of)`` re-shapes the region's sub-graph to one block
(``block_graph``), asks the backend for a kernel per member on the block shapes
(``kernel_of(H, m)``), and runs them block after block: operands and the result are sliced
along the leading dims (views; the result's block is C-contiguous because the dims before
the blocked one are taken one index at a time), intermediates live in block-sized scratch
kept per thread, so calls from several threads never share it.
"""

from __future__ import annotations

import math
import threading

import networkx as nx
import numpy as np

from .. import ir
from ..plan import Kernel


def _block_shape(shape, lead, block) -> tuple:
    t = len(lead)
    if len(shape) >= t and tuple(shape[:t]) == lead:
        return tuple(block) + tuple(shape[t:])
    return tuple(shape)


def block_graph(sub: nx.MultiDiGraph, lead: tuple, block: tuple) -> nx.MultiDiGraph:
    """``sub`` (and its nested fused sub-graphs) with every value indexed by the leading
    dims ``lead`` re-shaped to ``block``."""
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
    ir.verify(H)
    return H


def tiled_kernel(G: nx.MultiDiGraph, n: int, kernel_of) -> Kernel:
    """The kernel of tiled node ``n``: its members' kernels (``kernel_of(H, m)`` on the
    block graph ``H``) run per block."""
    d = G.nodes[n]
    a = d["attrs"]
    t, tile = a["tile_dims"], a["tile"]
    shape, dtype = tuple(d["shape"]), d["dtype"]
    lead = shape[:t]
    block = (1,) * (t - 1) + (tile,)
    H = block_graph(a["graph"], lead, block)
    root = H.graph["outputs"][0]
    steps = [(m, kernel_of(H, m), ir.operands(H, m)) for m in ir.topo_order(H)
             if H.nodes[m]["op"] not in ("input", "const")]
    inputs = list(H.graph["inputs"])
    scratch = [(m, H.nodes[m]["shape"], H.nodes[m]["dtype"]) for m, _, _ in steps if m != root]
    grid = lead[:-1] + (lead[-1] // tile,)
    blocks = [tuple(slice(i, i + 1) for i in idx[:-1]) + (slice(idx[-1] * tile,
                                                               (idx[-1] + 1) * tile),)
              for idx in np.ndindex(*grid)]

    local = threading.local()   # scratch per thread: reused, so its pages stay mapped

    def fn(args, out=None):
        if out is None:
            out = np.empty(shape, dtype)
        bufs = getattr(local, "bufs", None)
        if bufs is None:
            bufs = local.bufs = {m: np.empty(s, dt) for m, s, dt in scratch}
        env = dict(bufs)
        for sl in blocks:
            env.update(zip(inputs, (x[sl] for x in args)))
            for m, k, operands in steps:
                env[m] = k.fn([env[u] for u in operands], out[sl] if m == root else bufs[m])
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
               "steps": [{"kernel": k.name, "impl": k.impl,
                          "reason": k.details.get("reason", "")} for _, k, _ in steps]}
    return Kernel(f"tiled_{n}", fn, source, impl, node=n, details=details)
