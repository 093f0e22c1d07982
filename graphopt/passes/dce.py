"""The DCE pass: remove every node that no graph output depends on.

Inputs always stay, used or not: they are the plan's signature. Details: ``removed``, the
``(node, op)`` pairs removed, in topological order.
"""

from __future__ import annotations

import networkx as nx

from .. import ir
from .manager import PassResult, register_pass


def live_nodes(G: nx.MultiDiGraph) -> set[int]:
    """The graph outputs, everything they depend on, and the inputs."""
    live = set(G.graph["outputs"])
    stack = list(live)
    while stack:
        for u in G.predecessors(stack.pop()):
            if u not in live:
                live.add(u)
                stack.append(u)
    return live | set(G.graph["inputs"])


@register_pass("dce")
def dce(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Remove dead nodes; ``G`` is not modified."""
    H = ir.copy_graph(G)
    live = live_nodes(H)
    dead = [n for n in ir.topo_order(H) if n not in live]
    removed = [(n, H.nodes[n]["op"]) for n in dead]
    if dead:
        H.remove_nodes_from(dead)
        ir.drop_derived(H)
    return PassResult(H, {"removed": removed})
