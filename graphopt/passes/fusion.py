"""The fusion pass: replace groups of elementwise/reduction/epilogue ops by ``fused`` nodes.

A group has one output (its *root*). It is grown from the root towards its producers, latest
node first, so when a producer is considered every one of its users is already decided. A
producer joins when all of its users are in the group (otherwise it must stay outside: a
value two kernels need is materialized once), when joining creates no cycle through an
outside node, and when the group still has one of the patterns of the fused-group contract
(``graphopt/fused.py``: elementwise, reduction, contraction, normalization).

A group holds at most ``MAX_GROUP_OPS`` ops (a longer chain becomes several groups).
Size-1 constants used by members are copied into the group (literals in the kernel). A
group of one op that absorbed nothing is left alone, unless its NumPy form is several
passes (gelu, sigmoid, relu: one generated kernel does it in one). An expensive op (exp,
tanh, ...) whose value a kernel would recompute across a broadcast is left outside.

Details: ``groups`` (member op names per fused node, in execution order), ``patterns``,
``kernels`` (number of fused nodes), ``fused_nodes`` (their ids) and ``rejected`` (each
refused candidate: node, op, the group it was refused from and why).
"""

from __future__ import annotations

import heapq

import networkx as nx
import numpy as np

from .. import ir
from ..analysis.fused import (
    build_subgraph,
    check_recompute,
    classify,
    computed_members,
    fusion_kind,
    is_scalar_const,
)
from ..errors import GraphError
from ..ir import ops
from .manager import PassResult, register_pass

# ---------------------------------------------------------------------------------- growing


def _reaches_group(G, starts, members, pos, limit) -> int | None:
    """An outside node on a path from ``starts`` back into ``members``, if any."""
    stack, seen = list(starts), set(starts)
    while stack:
        q = stack.pop()
        for v in G.successors(q):
            if v in members:
                return q
            if v not in seen and pos[v] < limit:
                seen.add(v)
                stack.append(v)
    return None


# Members per group at most: LLVM's compile time grows faster than linearly with the size of
# one kernel (200 inlined tanh: 24 s, 600: 240 s), and a longer chain runs as several kernels
# at almost the same speed.
MAX_GROUP_OPS = 64


def _refusal(G, members, p, pos, outputs, root) -> str:
    if len(members) >= MAX_GROUP_OPS:
        return f"the group is full ({MAX_GROUP_OPS} ops: bounds the kernel's compile time)"
    if p in outputs:
        return "multiple external users: it is a graph output"
    outside = [v for v in ir.users(G, p) if v not in members]
    via = _reaches_group(G, outside, members, pos, pos[root])
    if via is not None:
        return f"would create a cycle through node {via} ({G.nodes[via]['op']})"
    if outside:
        names = ", ".join(f"{G.nodes[v]['op']} {v}" for v in outside[:3])
        return f"multiple external users: used outside the group by {names}"
    pattern, reason = classify(G, members | {p}, root)
    if pattern is None:
        return reason
    if pattern == "normalization":   # normalization_maps checked recomputation
        return ""
    return check_recompute(G, members | {p}, root)


def _grow(G, root, pos, outputs, assigned, rejected) -> set:
    members = {root}
    heap = [(-pos[u], u) for u in ir.operands(G, root)]
    heapq.heapify(heap)
    decided = set()
    while heap:
        _, p = heapq.heappop(heap)
        if p in decided or p in members:
            continue
        decided.add(p)
        if fusion_kind(G, p) is None or p in assigned:
            continue
        reason = _refusal(G, members, p, pos, outputs, root)
        if reason:
            rejected.append({"node": p, "op": G.nodes[p]["op"], "group_root": root,
                             "root_op": G.nodes[root]["op"], "reason": reason})
            continue
        members.add(p)
        for u in ir.operands(G, p):
            heapq.heappush(heap, (-pos[u], u))
    return members


# ops whose NumPy form is a function but no pass over the data (a view of the parts)
_VIEWS = frozenset({"real", "imag"})


def _multi_pass(op: str) -> bool:
    """An elementwise op whose NumPy form is several passes over the data, not one ufunc
    (gelu, sigmoid, relu): worth a generated kernel even alone (``real``/``imag`` are
    functions too, but views: a kernel alone would only copy)."""
    f = ops.UNARY_FUNCS.get(op)
    return f is not None and not isinstance(f, np.ufunc) and op not in _VIEWS


def _absorbed_consts(G, members) -> list[int]:
    """Scalar constants the group's kernel inlines as literals: those no einsum member
    reads (a contraction group's einsum takes every operand as an array argument)."""
    einsum_read = {u for m in members if G.nodes[m]["op"] == "einsum"
                   for u in ir.operands(G, m)}
    return sorted({u for m in members for u in ir.operands(G, m)
                   if u not in members and u not in einsum_read and is_scalar_const(G, u)})


# -------------------------------------------------------------------------------- rewriting


def _fuse(H, G, root, members, pattern, renamed) -> int:
    """Replace ``members`` by one fused node in ``H``; ``renamed`` maps the roots of groups
    fused before to their fused nodes."""
    consts = _absorbed_consts(G, members)
    sub, ext = build_subgraph(G, members, root, consts)
    ext = [renamed.get(u, u) for u in ext]
    order = computed_members(sub)
    srcs = list(dict.fromkeys(sub.nodes[n]["src"] for n in order if sub.nodes[n]["src"]))
    d = G.nodes[root]
    f = ir.add_node(H, "fused", ext, d["shape"], d["dtype"],
                    {"graph": sub, "pattern": pattern, "srcs": srcs}, src=d["src"])
    ir.replace_uses(H, root, f)
    renamed[root] = f
    H.remove_nodes_from(members)
    for c in consts:
        if H.out_degree(c) == 0 and c not in H.graph["outputs"]:
            H.remove_node(c)
    return f


@register_pass("fusion")
def fusion(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Fuse elementwise chains, reductions with their producers and einsum epilogues."""
    order = ir.topo_order(G)
    pos = {n: i for i, n in enumerate(order)}
    outputs = set(G.graph["outputs"])
    assigned: set[int] = set()
    found, rejected = [], []
    for root in reversed(order):
        if root in assigned or fusion_kind(G, root) not in ("pointwise", "reduction"):
            continue
        members = _grow(G, root, pos, outputs, assigned, rejected)
        if len(members) == 1 and not _absorbed_consts(G, members) and \
                not _multi_pass(G.nodes[root]["op"]):
            continue
        pattern, reason = classify(G, members, root)
        if pattern is None:  # every addition was checked; this is a bug, not a refusal
            raise GraphError(f"fusion built an invalid group: {reason}", op="fused")
        assigned |= members
        found.append((root, members, pattern))

    H = ir.copy_graph(G)
    groups, patterns, fused, renamed = [], [], [], {}
    for root, members, pattern in sorted(found, key=lambda f: pos[f[0]]):
        fused.append(_fuse(H, G, root, members, pattern, renamed))
        groups.append([G.nodes[m]["op"] for m in sorted(members, key=pos.get)])
        patterns.append(pattern)
    if found:
        ir.drop_derived(H)
        if not nx.is_directed_acyclic_graph(H):
            raise GraphError("fusion created a cycle between fused groups", op="fused")
    details = {"groups": groups, "patterns": patterns, "kernels": len(fused),
               "fused_nodes": fused, "rejected": rejected}
    return PassResult(H, details)
