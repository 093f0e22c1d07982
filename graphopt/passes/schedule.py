"""``schedule``: an execution order that lowers the peak of live arena memory.

Candidates: the plain topological order (``ir.topo_order``), the incoming schedule if the
graph has one, a greedy list schedule (among ready nodes, run the one that allocates the
least net of what it frees) and a depth-first order from the outputs that visits the
hungriest operand subtree first (Sethi-Ullman). Each is measured with the liveness the
memory planner uses (``memory.liveness_intervals`` / ``peak_live_bytes``) and the lowest
peak wins, the plain order on ties, so the result is never worse than the topological order.
"""

from __future__ import annotations

import heapq

import networkx as nx

from .. import ir
from ..analysis.liveness import arena_sizes, liveness_intervals, peak_live_bytes
from .manager import PassResult, register_pass


def peak_of(G, order: list[int]) -> int:
    """Peak live arena bytes when ``G`` runs in ``order``."""
    intervals = liveness_intervals(G, order)
    return peak_live_bytes(intervals, {n: ir.nbytes(G, n) for n in intervals})


def greedy_order(G) -> list[int]:
    """List scheduling: among ready nodes run the one with the least ``allocated - freed``
    bytes (then the fewest allocated, then the topological position)."""
    topo = ir.topo_order(G)
    rank = {n: i for i, n in enumerate(topo)}
    size = arena_sizes(G)
    preds = {n: set(G.predecessors(n)) for n in G}
    users = {n: ir.users(G, n) for n in G}
    users_left = {n: len(users[n]) for n in G}
    waiting = {n: len(preds[n]) for n in G}
    order: list[int] = []
    done: set[int] = set()
    heap: list[tuple] = []
    current: dict[int, tuple] = {}

    def push(v):
        freed = sum(size[u] for u in preds[v] if users_left[u] == 1)
        current[v] = (size[v] - freed, size[v], rank[v], v)
        heapq.heappush(heap, current[v])

    def run(n):
        done.add(n)
        order.append(n)
        for u in preds[n]:
            users_left[u] -= 1
            if users_left[u] == 1:  # its last user would now free it: re-rank that user
                v = next(w for w in users[u] if w not in done)
                if waiting[v] == 0:
                    push(v)
        for v in users[n]:
            waiting[v] -= 1
            if waiting[v] == 0:
                push(v)

    for n in topo:  # sources hold no arena memory
        if G.nodes[n]["op"] in ("input", "const"):
            run(n)
    for n in topo:  # other nodes without operands (e.g. a fused group of constants)
        if n not in done and not preds[n] and n not in current:
            push(n)
    while heap:
        k = heapq.heappop(heap)
        if k[-1] not in done and current[k[-1]] == k:
            run(k[-1])
    return order


def depth_first_order(G) -> list[int]:
    """Post-order from the outputs; at each node the operand whose subtree needs the most
    memory beyond what it leaves behind goes first (Sethi-Ullman, approximate on DAGs)."""
    size = arena_sizes(G)
    need: dict[int, int] = {}
    for n in ir.topo_order(G):
        args = sorted(set(G.predecessors(n)), key=lambda u: need[u] - size[u], reverse=True)
        held, peak = 0, 0
        for u in args:
            peak = max(peak, held + need[u])
            held += size[u]
        need[n] = max(peak, held + size[n])
    order: list[int] = []
    seen: set[int] = set()
    roots = list(dict.fromkeys(G.graph["outputs"])) + ir.topo_order(G)
    for r in roots:
        if r in seen:
            continue
        stack = [(r, False)]
        while stack:
            n, expanded = stack.pop()
            if expanded:
                order.append(n)
                continue
            if n in seen:
                continue
            seen.add(n)
            stack.append((n, True))
            args = sorted((u for u in set(G.predecessors(n)) if u not in seen),
                          key=lambda u: (need[u] - size[u], -u))
            stack.extend((u, False) for u in args)  # the last pushed runs first
    return order


def _valid(G, order) -> bool:
    if not isinstance(order, list) or len(order) != G.number_of_nodes() or \
            set(order) != set(G.nodes):
        return False
    pos = {n: i for i, n in enumerate(order)}
    return all(pos[u] < pos[v] for u, v in G.edges())


@register_pass("schedule")
def schedule(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Store the lowest-peak order found in ``graph["schedule"]``.

    Details: ``peak_before`` (bytes, the incoming schedule or else the topological order),
    ``peak_topological``, ``peak_after``, ``strategy`` and each candidate's peak."""
    H = ir.copy_graph(G)
    topo = ir.topo_order(H)
    candidates = [("topological", topo)]
    incoming = G.graph.get("schedule")
    if _valid(G, incoming):
        candidates.append(("incoming", list(incoming)))
    candidates += [("greedy", greedy_order(H)), ("depth-first", depth_first_order(H))]
    peaks = {name: peak_of(H, order) for name, order in candidates}
    best, order = min(candidates, key=lambda c: peaks[c[0]])  # min keeps the first on ties
    if order != incoming:
        H.graph.pop("arena_layout", None)  # planned for another order
    H.graph["schedule"] = order
    before = peaks["incoming" if "incoming" in peaks else "topological"]
    return PassResult(H, {"peak_before": before, "peak_topological": peaks["topological"],
                          "peak_after": peaks[best], "strategy": best, "candidates": peaks})
