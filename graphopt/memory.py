"""Liveness over a schedule, and the naive memory plan (every intermediate its own buffer).

The ``memory`` pass builds a better plan (in-place reuse, shared offsets) on top of these.
"""

from __future__ import annotations

import networkx as nx

from . import ir
from .plan import MemoryPlan, align


def arena_nodes(G: nx.MultiDiGraph, order: list[int]) -> list[int]:
    """Nodes whose values live in the arena: computed values that are not graph outputs
    (outputs go to fresh per-call arrays; inputs and constants are not copied)."""
    outs = set(G.graph["outputs"])
    return [n for n in order if G.nodes[n]["op"] not in ("input", "const") and n not in outs]


def liveness_intervals(G: nx.MultiDiGraph, order: list[int]) -> dict[int, tuple[int, int]]:
    """For each arena node, ``(def, last_use)`` positions in ``order`` (inclusive)."""
    pos = {n: i for i, n in enumerate(order)}
    out = {}
    for n in arena_nodes(G, order):
        uses = [pos[v] for v in G.successors(n)]
        out[n] = (pos[n], max(uses, default=pos[n]))
    return out


def peak_live_bytes(G: nx.MultiDiGraph, intervals: dict[int, tuple[int, int]]) -> int:
    """The most arena bytes live at one step: a lower bound for any arena."""
    if not intervals:
        return 0
    events = []
    for n, (a, b) in intervals.items():
        events.append((a, 1, ir.nbytes(G, n)))
        events.append((b + 1, 0, -ir.nbytes(G, n)))
    live = peak = 0
    for _, _, delta in sorted(events):
        live += delta
        peak = max(peak, live)
    return peak


def naive_memory_plan(G: nx.MultiDiGraph, order: list[int]) -> MemoryPlan:
    """Every arena node at its own offset: what an op-by-op runtime holds if nothing is freed."""
    intervals = liveness_intervals(G, order)
    offsets, sizes, top = {}, {}, 0
    for n in intervals:
        offsets[n] = top
        sizes[n] = ir.nbytes(G, n)
        top += align(sizes[n])
    return MemoryPlan(offsets=offsets, sizes=sizes, naive_bytes=sum(sizes.values()),
                      planned_bytes=top, lower_bound_bytes=peak_live_bytes(G, intervals),
                      intervals=intervals)
