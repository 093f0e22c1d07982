"""What a gradient graph costs, as built: forward and backward FLOPs and the forward values
the backward pass reads (kept alive until it runs). The report shows these facts.

``go.grad``/``go.vjp`` mark their graph with ``G.graph["gradient"]``: ``backward_from``, the
first node id the backward pass added (node ids only grow, so every node from it on is
backward), and ``wrt``.
"""

from __future__ import annotations

from .. import ir
from . import cost

# the saved values the report names, largest first
SAVED_SHOWN = 5


def gradient_facts(G, recomputed: dict | None = None) -> dict | None:
    """Forward/backward FLOPs and the saved forward values of gradient graph ``G`` (None
    for a graph ``go.grad``/``go.vjp`` did not build), and with ``recomputed`` (the
    ``rematerialize`` pass's details) what was recomputed instead of held, and the arena
    without and with recomputation."""
    mark = G.graph.get("gradient")
    if not mark:
        return None
    start = mark["backward_from"]
    forward = backward = 0
    saved: dict[int, int] = {}
    for n in G.nodes:
        if n >= start:
            backward += cost.node_flops(G, n)
            for u in ir.operands(G, n):
                if u < start and G.nodes[u]["op"] not in ("input", "const"):
                    saved[u] = ir.nbytes(G, u)
        else:
            forward += cost.node_flops(G, n)
    largest = sorted(saved, key=lambda u: (-saved[u], u))[:SAVED_SHOWN]
    recomputation = None if not recomputed else {
        k: recomputed.get(k, 0) for k in ("recomputed_count", "recomputed_bytes",
                                          "extra_flops", "arena_before", "arena_after")}
    return {"wrt": list(mark["wrt"]), "forward_flops": forward, "backward_flops": backward,
            "recomputation": recomputation,
            "saved_values": len(saved), "saved_bytes": sum(saved.values()),
            "largest_saved": [{"node": u, "op": G.nodes[u]["op"],
                               "shape": list(G.nodes[u]["shape"]), "bytes": saved[u],
                               "src": G.nodes[u].get("src")} for u in largest]}
