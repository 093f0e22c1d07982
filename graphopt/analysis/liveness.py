"""The execution order, liveness over it, and the ``ArenaLayout`` (with the naive one: every
intermediate its own buffer). The ``memory`` pass builds a better plan (in-place reuse,
shared offsets) on top of these; lowering, the interpreter and dask run ``execution_order``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from .. import ir

ALIGN = 64  # bytes: cache-line (and AVX-512) aligned buffers
# ``assign_arena_offsets`` finds the placed buffers a new one overlaps by steps (its cost
# grows with the intervals' lengths) where intervals are at most this many steps long on
# average, or at most one ``STEP_SCAN_BUFFERS_PER_STEP``th of the buffers' count (where it
# beats both scans), else by a scan of every placed buffer, in Python up to
# ``VECTOR_SCAN_BUFFERS`` of them and with NumPy beyond (where NumPy's per-call cost is
# repaid)
STEP_SCAN_STEPS = 4
STEP_SCAN_BUFFERS_PER_STEP = 6
VECTOR_SCAN_BUFFERS = 300


@dataclass
class ArenaLayout:
    """Where each intermediate lives in the arena, and what that costs.

    ``naive_bytes``: every intermediate in its own buffer; ``planned_bytes``: the arena;
    ``lower_bound_bytes``: the most bytes live at any one step (no plan can do better).
    ``inplace`` maps a node to the operand whose buffer it overwrites."""

    offsets: dict[int, int]
    sizes: dict[int, int]
    naive_bytes: int
    planned_bytes: int
    lower_bound_bytes: int
    inplace: dict[int, int] = field(default_factory=dict)
    intervals: dict[int, tuple[int, int]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"naive_bytes": self.naive_bytes, "planned_bytes": self.planned_bytes,
                "lower_bound_bytes": self.lower_bound_bytes,
                "offsets": {str(k): v for k, v in self.offsets.items()},
                "inplace": {str(k): v for k, v in self.inplace.items()}}


def align(n: int) -> int:
    """``n`` rounded up to the arena alignment."""
    return (n + ALIGN - 1) // ALIGN * ALIGN


def execution_order(G: nx.MultiDiGraph) -> list[int]:
    """The one order a graph's nodes run in: a valid ``schedule`` attr, else
    ``ir.topo_order``."""
    order = G.graph.get("schedule")
    if isinstance(order, list) and len(order) == G.number_of_nodes() and set(order) == set(G):
        pos = {n: i for i, n in enumerate(order)}
        if all(pos[u] < pos[v] for u, v in G.edges()):
            return list(order)
    return ir.topo_order(G)


def in_arena(G: nx.MultiDiGraph, n: int, outputs=None) -> bool:
    """Whether node ``n``'s value lives in the arena: a computed value that is not a graph
    output (outputs go to fresh per-call arrays; inputs and constants are not copied). The
    one rule of what an arena holds (``outputs``: the graph's, as a set, where the caller
    asks of many nodes)."""
    if outputs is None:
        outputs = G.graph["outputs"]
    return G._node[n]["op"] not in ("input", "const") and n not in outputs


def arena_nodes(G: nx.MultiDiGraph, order: list[int]) -> list[int]:
    """The nodes of ``order`` whose values live in the arena (``in_arena``)."""
    outs = set(G.graph["outputs"])
    return [n for n in order if in_arena(G, n, outs)]


def arena_sizes(G: nx.MultiDiGraph) -> dict[int, int]:
    """Bytes each node holds in the arena (0 where it holds none: ``in_arena``)."""
    outs = set(G.graph["outputs"])
    return {n: ir.nbytes(G, n) if in_arena(G, n, outs) else 0 for n in G}


def held_around(G: nx.MultiDiGraph, n: int, operands=None) -> int:
    """Bytes of node ``n``'s operands (default its own; each once) and result that the arena
    holds while ``n`` runs (``in_arena``): what a memory limit leaves a step's workspace."""
    outs = set(G.graph["outputs"])
    reads = set(ir.operands(G, n) if operands is None else operands)
    return sum(ir.nbytes(G, u) for u in reads | {n} if in_arena(G, u, outs))


def naive_bytes(sizes: dict) -> int:
    """Every arena value in its own aligned buffer: the one count of the naive arena."""
    return sum(align(s) for s in sizes.values())


def liveness_intervals(G: nx.MultiDiGraph, order: list[int]) -> dict[int, tuple[int, int]]:
    """For each arena node, ``(def, last_use)`` positions in ``order`` (inclusive)."""
    pos = {n: i for i, n in enumerate(order)}
    out = {}
    for n in arena_nodes(G, order):
        uses = [pos[v] for v in G.successors(n)]
        out[n] = (pos[n], max(uses, default=pos[n]))
    return out


def live_bytes(intervals: dict, sizes: dict, steps: int | None = None) -> np.ndarray:
    """Bytes live at each step ``0 .. steps - 1`` (default: through the last interval's end):
    each buffer ``n`` holds ``sizes[n]`` from ``intervals[n][0]`` through ``intervals[n][1]``
    (inclusive). The one sweep every live-bytes figure comes from."""
    if steps is None:
        steps = max((b for _, b in intervals.values()), default=-1) + 1
    delta = np.zeros(steps + 1, dtype=np.int64)
    for n, (a, b) in intervals.items():
        s = sizes[n]
        if s:
            delta[a] += s
            delta[b + 1] -= s
    return np.cumsum(delta[:-1])


def peak_live_bytes(intervals: dict, sizes: dict, inplace: dict | None = None) -> int:
    """The most bytes live at one step, a buffer shared in place counted once
    (``buffer_groups``): no arena that keeps these buffers apart can be smaller."""
    if inplace:
        groups = buffer_groups(intervals, sizes, inplace).values()
        intervals = {min(m): (min(intervals[n][0] for n in m), max(intervals[n][1] for n in m))
                     for m in groups}
        sizes = {min(m): max(sizes[n] for n in m) for m in groups}
    return int(live_bytes(intervals, sizes).max(initial=0))


def naive_layout(G: nx.MultiDiGraph, order: list[int]) -> ArenaLayout:
    """Every arena node at its own offset: what an op-by-op runtime holds if nothing is freed."""
    intervals = liveness_intervals(G, order)
    sizes = {n: ir.nbytes(G, n) for n in intervals}
    offsets, _ = stacked_offsets(sizes)
    # (the arena ends where its last buffer does, as the memory pass's)
    top = max((offsets[n] + s for n, s in sizes.items()), default=0)
    return ArenaLayout(offsets=offsets, sizes=sizes, naive_bytes=naive_bytes(sizes),
                      planned_bytes=top, lower_bound_bytes=peak_live_bytes(intervals, sizes),
                      intervals=intervals)


def stacked_offsets(sizes: dict) -> tuple[dict[int, int], int]:
    """Each buffer its own place, back to back at ``ALIGN``ed offsets, in key order:
    ``(offsets, arena_bytes)``. For intermediates too small in all for
    ``assign_arena_offsets``' sharing to be worth its planning time."""
    offsets, top = {}, 0
    for n, size in sizes.items():
        offsets[n] = top
        top = align(top + size) if size else top
    return offsets, top


def buffer_groups(intervals: dict, sizes: dict, inplace: dict) -> dict[int, list[int]]:
    """Nodes grouped by the buffer they share: in-place chains are one buffer."""
    owner = {n: n for n in intervals}

    def find(n):
        while owner[n] != n:
            owner[n] = owner[owner[n]]
            n = owner[n]
        return n

    for n, u in inplace.items():
        owner[find(n)] = find(u)
    groups: dict[int, list[int]] = {}
    for n in intervals:
        groups.setdefault(find(n), []).append(n)
    return groups


def assign_arena_offsets(intervals: dict, sizes: dict, inplace: dict | None = None
                         ) -> tuple[dict[int, int], int]:
    """Arena offsets by best fit, largest buffer first; ``(offsets, arena_bytes)``.

    ``intervals[n] = (first, last)`` step positions (inclusive) and ``sizes[n]`` bytes, per
    node; ``inplace[n] = u`` makes ``n`` share ``u``'s buffer. Two buffers whose intervals
    overlap never share bytes; offsets are multiples of ``ALIGN``.
    """
    offsets: dict[int, int] = {}
    buffers = []
    groups = buffer_groups(intervals, sizes, inplace).values() if inplace else \
        [[n] for n in intervals]
    for members in groups:
        if len(members) == 1:
            n = members[0]
            first, last = intervals[n]
            buffers.append((sizes[n], first, last, n, members))
            continue
        first = min(intervals[n][0] for n in members)
        last = max(intervals[n][1] for n in members)
        buffers.append((max(sizes[n] for n in members), first, last, min(members), members))
    # the buffers placed so far: which of them a new buffer's interval overlaps is found
    # by steps (two intervals overlap where one begins within the other: the placed
    # buffers live at the new one's first step, and those that begin after it, up to its
    # last) where intervals are short (``STEP_SCAN_STEPS``), else by a scan in Python up to
    # ``VECTOR_SCAN_BUFFERS`` of them, then one vectorized test over their intervals (the
    # scan is quadratic; the test costs microseconds of NumPy calls)
    lengths = sum(b[2] - b[1] + 1 for b in buffers)
    stepped = lengths <= STEP_SCAN_STEPS * len(buffers) or \
        lengths * STEP_SCAN_BUFFERS_PER_STEP <= len(buffers) ** 2
    vector = not stepped and len(buffers) > VECTOR_SCAN_BUFFERS
    firsts = np.zeros(len(buffers) if vector else 0, dtype=np.int64)
    lasts = np.zeros_like(firsts)
    placed: list[tuple[int, int]] = []   # (offset, aligned end)
    spans: list[tuple[int, int, int, int]] = []   # (first, last, offset, aligned end)
    live_at: dict[int, list] = {}   # step -> (offset, aligned end) of the buffers live at it
    begins_at: dict[int, list] = {}   # step -> (offset, aligned end) of those beginning there
    arena = 0
    for size, first, last, _, members in sorted(buffers, key=lambda b: (-b[0], b[1], b[3])):
        offset = 0
        if size > 0:
            k = len(placed)
            if stepped:
                live = live_at.get(first, [])
                for t in range(first + 1, last + 1):
                    begun = begins_at.get(t)
                    if begun:
                        live = live + begun
            elif vector:
                live = [placed[i] for i in
                        np.flatnonzero((firsts[:k] <= last) & (lasts[:k] >= first)).tolist()]
            else:
                live = [(o, e) for f, la, o, e in spans if f <= last and la >= first]
            best_gap, top = -1, 0
            for o, end in sorted(live):
                if o - top >= size and (best_gap < 0 or o - top < best_gap):
                    best_gap, offset = o - top, top
                if end > top:
                    top = end
            if best_gap < 0:
                offset = top
            place = (offset, align(offset + size))
            if stepped:
                begins_at.setdefault(first, []).append(place)
                for t in range(first, last + 1):
                    here = live_at.get(t)
                    if here is None:
                        live_at[t] = [place]
                    else:
                        here.append(place)
            elif vector:
                firsts[k], lasts[k] = first, last
            else:
                spans.append((first, last) + place)
            placed.append(place)
            if offset + size > arena:
                arena = offset + size
        for n in members:
            offsets[n] = offset
    return offsets, arena
