"""Static cost of a node: FLOPs (as opt_einsum counts them for contractions) and bytes moved.

Shared by the contraction pass, the report, lowering and the profiler's roofline."""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from . import einsum as einsum_mod
from . import ir, ops


def node_flops(G: nx.MultiDiGraph, n: int) -> int:
    """FLOPs of node ``n``: einsum counted pairwise left to right as opt_einsum counts (along
    its ``path`` attr where a multi-operand einsum has one);
    elementwise one per output element; reductions one per input element; layout and
    sources zero; fused groups the sum over their members."""
    d = G.nodes[n]
    kind = ops.OPS[d["op"]].kind
    if kind == ops.CONTRACTION:
        shapes = [G.nodes[u]["shape"] for u in ir.operands(G, n)]
        inputs, _ = einsum_mod.split(d["attrs"]["equation"])
        sizes = {c: s for t, sh in zip(inputs, shapes) for c, s in zip(t, sh)}
        if d["attrs"].get("path") and len(inputs) > 2:
            return path_flops(d["attrs"]["equation"], sizes, d["attrs"]["path"])
        return int(einsum_mod.pairwise_flops(d["attrs"]["equation"], sizes))
    if kind == ops.ELEMENTWISE:
        return math.prod(d["shape"])
    if kind == ops.REDUCTION:
        return math.prod(G.nodes[ir.operands(G, n)[0]]["shape"])
    if kind == ops.FUSED:
        sub = d["attrs"]["graph"]
        return sum(node_flops(sub, m) for m in sub.nodes)
    return 0


def path_flops(equation: str, sizes: dict, path) -> int:
    """FLOPs of ``equation`` contracted along ``path`` (opt_einsum's linear format: each
    step contracts the listed positions and appends the result), as opt_einsum counts."""
    from opt_einsum.helpers import flop_count

    inputs, output = einsum_mod.split(equation)
    current = [set(t) for t in inputs]
    total = 0
    for inds in path:
        picked = [current.pop(i) for i in sorted(inds, reverse=True)]
        idx = set().union(*picked)
        keep = idx & (set().union(*current) | set(output))
        total += flop_count(idx, bool(idx - keep), len(picked), sizes)
        current.append(keep)
    return int(total)


def node_bytes(G: nx.MultiDiGraph, n: int) -> int:
    """Bytes a node reads (each distinct operand once) plus bytes it writes."""
    ins = sum(ir.nbytes(G, u) for u in dict.fromkeys(ir.operands(G, n)))
    return ins + ir.nbytes(G, n)


def graph_flops(G: nx.MultiDiGraph) -> int:
    return sum(node_flops(G, n) for n in G.nodes)


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize
