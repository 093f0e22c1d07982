"""Static cost of a node: FLOPs (as opt_einsum counts them for contractions) and bytes moved.

Shared by the contraction pass, the report, lowering and the profiler's roofline."""

from __future__ import annotations

import functools
import math

import networkx as nx
import numpy as np

from .. import ir
from ..contraction import paths
from ..ir import ops
from ..ir.einsum import split as split_equation


def node_flops(G: nx.MultiDiGraph, n: int) -> int:
    """FLOPs of node ``n``: an einsum counted as opt_einsum counts, along the path of its
    contraction (``Contraction.flops``), or as written, left to right, where it holds none
    yet (the user's graph: what the contraction pass improves on);
    elementwise one per output element; reductions one per input element; layout and
    sources zero; fused groups the sum over their members."""
    d = G._node[n]
    kind = ops.OPS[d["op"]].kind
    if kind == ops.SOURCE:
        return 0
    if kind == ops.CONTRACTION:
        held = d["attrs"].get("contraction")
        if held is not None:
            return held.flops
        nodes = G._node
        shapes = tuple(tuple(nodes[u]["shape"]) for u in ir.operands(G, n))
        return written_order_cost(d["attrs"]["equation"], shapes)[0]
    if kind == ops.ELEMENTWISE:
        return math.prod(d["shape"])
    if kind == ops.REDUCTION:
        return math.prod(G.nodes[ir.operands(G, n)[0]]["shape"])
    if kind == ops.FUSED:
        sub = d["attrs"]["graph"]
        return sum(node_flops(sub, m) for m in sub.nodes)
    return 0


@functools.lru_cache(maxsize=1024)
def written_order_cost(eq: str, shapes: tuple) -> tuple[int, int, int]:
    """``(flops, largest, write)`` of ``eq`` on operands of ``shapes`` contracted left to
    right as written (``paths.left_to_right_cost``); memoized: the contraction pass weighs
    a network's written order, and counting its FLOPs plays the same order."""
    terms, output = split_equation(eq)
    return paths.left_to_right_cost(terms, output, paths.label_sizes(eq, shapes))


def node_bytes(G: nx.MultiDiGraph, n: int) -> int:
    """Bytes a node reads (each distinct operand once) plus bytes it writes."""
    ins = sum(ir.nbytes(G, u) for u in G._pred[n])     # (its distinct operands, any order)
    return ins + ir.nbytes(G, n)


def graph_flops(G: nx.MultiDiGraph, counted: dict | None = None) -> int:
    """FLOPs of every node of ``G`` (``node_flops``), summed. ``counted``: counts of graphs
    no one changes any more, by identity (``PassContext.counted_flops``), read and added to."""
    if counted is not None and id(G) in counted and counted[id(G)][0] is G:
        return counted[id(G)][1]
    kinds = ops.OPS
    flops = sum(node_flops(G, n) for n, d in G._node.items()
                if kinds[d["op"]].kind != ops.SOURCE)
    if counted is not None:
        counted[id(G)] = (G, flops)
    return flops


def itemsize(dtype: str) -> int:
    """Bytes per element of ``dtype``."""
    return np.dtype(dtype).itemsize
