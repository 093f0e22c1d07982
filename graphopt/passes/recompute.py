"""The recomputation orders ``rematerialize`` searches, and the solvers that search them.

An order is the incoming execution order with *evictions*: a value evicted at split
positions is read, from each split on, through a copy recomputed just before its first
reader there, from the operands live then (an operand evicted too is recomputed first, for
that segment). ``Problem.rebuild`` plays an eviction set and measures its live bytes at
each step exactly.

Two solvers, both ending at an order that fits a goal (``Problem.need``: its live peak and
the objects of the steps its copies add) or as low as they reach:

- ``evict_greedily``: adds one eviction at a time at the peak step, the one that removes
  the most bytes over the goal per recomputed FLOP (as XLA's rematerialization and
  Checkmate's heuristics do). Cheap, and what a limit slightly below the arena needs; on a
  deep chain no single eviction lowers the peak (each moves the liveness one value back),
  so it stops early.
- ``checkpoint_search``: the checkpointing family that Griewank and Walther's revolve and
  Chen et al.'s sublinear checkpointing schedule from. Its least-memory member keeps no
  value across a split point: every reader of a value held across the over-budget steps
  gets its own copy, recomputed from the inputs, so a step holds what it reads and writes
  and what the recomputation of its operands needs (on a chain, about three values). From
  there it keeps values as checkpoints (held until their last reader, their dependents
  recomputed from them) while the order still fits, by the most recomputed FLOPs saved:
  up to ``EXACT_VALUES`` candidate values, every set of checkpoints (exact over the
  family); beyond, every k-th value for each spacing k (the sqrt(n) pattern among them),
  then single checkpoints added greedily, within ``CHECKPOINT_TRIALS`` orders. It does not
  nest checkpoints as revolve does (a checkpoint taken while recomputing a segment).

``floor_bytes`` is the lower bound the report measures a result against.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from .. import ir
from ..analysis import cost
from ..analysis.call_bytes import STEP_BYTES
from ..analysis.liveness import align, arena_sizes, execution_order, live_bytes
from .memory import writes_elementwise

# values live at the peak step judged for eviction, largest first
MAX_CANDIDATES = 24
# values ``checkpoint_search`` may recompute (held across an over-budget step, and the
# arena values they are recomputed from); beyond this the graph is left to the greedy (a
# value's copies are recomputed recursively, one Python frame per value)
MAX_CHECKPOINT_VALUES = 160
# up to this many values, every set of checkpoints is tried
EXACT_VALUES = 8
# orders ``checkpoint_search`` plays beyond the exact range: its spacings, then single
# checkpoints added (each order costs one ``Problem.rebuild``)
CHECKPOINT_TRIALS = 600


@dataclass
class Rebuilt:
    """An execution order with evictions applied: ``items`` in order, each an original node
    id or a clone ``("clone", origin)``; ``reads[i]``, the operand items of item ``i``."""

    items: list = field(default_factory=list)
    reads: list = field(default_factory=list)
    clones: dict = field(default_factory=dict)   # (origin, segment) -> item index of a copy
    moved: set = field(default_factory=set)             # evicted values with no early user
    live: np.ndarray | None = None                      # live arena bytes at each step
    intervals: dict = field(default_factory=dict)       # item index -> (first, last)

    @property
    def peak(self) -> int:
        return int(self.live.max(initial=0))

    def recomputations(self) -> list[tuple[int, int]]:
        """``(origin, item index)`` of every copy that computes a value again: all copies
        but a moved value's first."""
        moves = {min(k for k in self.clones if k[0] == u) for u in self.moved}
        return [(k[0], i) for k, i in self.clones.items() if k not in moves]


class Problem:
    """A graph's incoming execution order and what rebuilding that order needs."""

    def __init__(self, G: nx.MultiDiGraph):
        self.order = list(execution_order(G))
        self.pos = {n: i for i, n in enumerate(self.order)}
        self.args = {n: ir.operands(G, n) for n in self.order}
        # as the arena holds them: each buffer starts at an ``ALIGN``ed offset
        self.size = {n: align(s) for n, s in arena_sizes(G).items()}
        self.user_positions = {n: [self.pos[v] for v in ir.users(G, n)] for n in self.order}
        self.flops = {n: cost.node_flops(G, n) for n in self.order}
        self.cost = {n: self.flops[n] + ir.nbytes(G, n) for n in self.order}

    def rebuild(self, evicted: dict[int, tuple]) -> Rebuilt:
        """The order with ``evicted`` applied (node -> its split positions, ascending: users
        from the ``k``-th split on, up to the next, read the ``k``-th recomputed copy), and
        the live bytes at each of its steps."""
        r = Rebuilt()
        index: dict[int, int] = {}

        def emit(item, reads):
            r.items.append(item)
            r.reads.append(reads)
            return len(r.items) - 1

        def ref(u, at):
            splits = evicted.get(u)
            if not splits or at < splits[0]:
                return index[u]
            key = (u, bisect.bisect_right(splits, at))
            if key not in r.clones:
                reads = [ref(w, at) for w in self.args[u]]
                r.clones[key] = emit(("clone", u), reads)
            return r.clones[key]

        for n in self.order:
            at = self.pos[n]
            splits = evicted.get(n)
            if splits and all(p >= splits[0] for p in self.user_positions[n]):
                r.moved.add(n)          # no user before the split: computed where needed
                continue
            index[n] = emit(n, [ref(u, at) for u in self.args[n]])
        self._measure(r)
        return r

    def _measure(self, r: Rebuilt) -> None:
        last = list(range(len(r.items)))
        for i, reads in enumerate(r.reads):
            for j in reads:
                last[j] = i
        sizes = {}
        for i, item in enumerate(r.items):
            s = self.size[item[1] if isinstance(item, tuple) else item]
            if s:
                r.intervals[i] = (i, last[i])
                sizes[i] = s
        r.live = live_bytes(r.intervals, sizes, len(r.items))

    def added_objects(self, r: Rebuilt) -> int:
        """The call's objects for the steps ``r``'s copies add (``STEP_BYTES`` each)."""
        return STEP_BYTES * max(len(r.items) - len(self.order), 0)

    def need(self, r: Rebuilt) -> int:
        """What ``r`` holds at its peak beside the rest of the call: its live bytes, and the
        objects of the steps its copies add."""
        return r.peak + self.added_objects(r)

    def extra_flops(self, r: Rebuilt, per_node: dict | None = None) -> int:
        """FLOPs the copies add, less those of the values only moved (``per_node``: another
        count per node, e.g. ``self.cost``)."""
        per_node = self.flops if per_node is None else per_node
        return sum(per_node[u] for u, _ in r.recomputations())

    def candidates(self, r: Rebuilt, evicted: dict) -> tuple[list[int], int]:
        """Values (original nodes; a copy stands for its origin) live across the peak step
        and not read there, largest first, and the split position (the original order
        position of the peak step)."""
        t = int(np.argmax(r.live))
        item = r.items[t]
        # a clone at the peak stands where the op that asked for it stands: the next original
        split = next(self.pos[x] for x in r.items[t:] if not isinstance(x, tuple))
        read_here = set(r.reads[t]) | {t}
        found = []
        for i, (first, last) in r.intervals.items():
            n = r.items[i][1] if isinstance(r.items[i], tuple) else r.items[i]
            if first < t < last and i not in read_here and split not in evicted.get(n, ()) \
                    and n != item:
                found.append(n)
        found.sort(key=lambda n: (-self.size[n], n))
        return found[:MAX_CANDIDATES], split


def _excess(r: Rebuilt, goal: int) -> int:
    return int(np.maximum(r.live - goal, 0).sum())


def evict_greedily(p: Problem, goal: int, evicted: dict) -> Rebuilt:
    """Add evictions to ``evicted`` (in place) until the live peak is at most ``goal`` or
    no candidate lowers the bytes over it; the rebuilt order."""
    r = p.rebuild(evicted)
    while r.peak > goal:
        found, split = p.candidates(r, evicted)
        over, spent = _excess(r, goal), p.extra_flops(r, p.cost)
        best = None
        for n in found:
            trial = p.rebuild({**evicted, n: tuple(sorted((*evicted.get(n, ()), split)))})
            gain = over - _excess(trial, goal)
            if gain <= 0:
                continue
            extra = p.extra_flops(trial, p.cost) - spent
            score = gain / max(extra, 1)
            if best is None or score > best[0]:
                best = (score, n, trial)
        if best is None:
            break
        evicted[best[1]] = tuple(sorted((*evicted.get(best[1], ()), split)))
        r = best[2]
    return r


def checkpoint_search(p: Problem, goal: int) -> tuple[Rebuilt, dict, str] | None:
    """The cheapest order of the checkpointing family that fits ``goal``
    (``Problem.need``: its live peak and the objects of the steps its copies add; see the
    module docstring), its evictions and how it was found (``"exact"`` or ``"greedy"``);
    where no member fits, the least-memory one. None where the graph has no value to
    recompute or more than ``MAX_CHECKPOINT_VALUES`` of them."""
    values = _recomputable(p, goal)
    if not values or len(values) > MAX_CHECKPOINT_VALUES:
        return None
    splits = _split_points(p, values)

    def play(kept) -> tuple:
        evicted = {u: s for u, s in splits.items() if u not in kept and s}
        r = p.rebuild(evicted)
        return p.extra_flops(r, p.cost), r, evicted

    def fitting(tries):
        fits = [t for t in tries if p.need(t[1]) <= goal]
        return min(fits, key=lambda t: t[0], default=None)

    least = play(())
    if p.need(least[1]) > goal:
        return least[1], least[2], "none within the goal"
    if len(values) <= EXACT_VALUES:
        best = fitting(play(kept) for k in range(len(values) + 1)
                       for kept in itertools.combinations(values, k))
        return best[1], best[2], "exact"
    # every k-th value kept (sqrt(n) checkpointing's pattern, each spacing), then single
    # checkpoints added while one saves FLOPs and fits, within ``CHECKPOINT_TRIALS`` orders
    best = fitting([least] + [play(values[k - 1::k]) for k in range(2, len(values) + 1)])
    kept = set(values) - set(best[2])
    trials = len(values)
    while trials < CHECKPOINT_TRIALS:
        tries = [play(kept | {u}) for u in values if u not in kept][:CHECKPOINT_TRIALS - trials]
        trials += len(tries)
        found = fitting(tries)
        if found is None or found[0] >= best[0]:
            break
        best, kept = found, set(values) - set(found[2])
    return best[1], best[2], "greedy"


def _recomputable(p: Problem, goal: int) -> list[int]:
    """The arena values live across a step over ``goal`` without being read there, and the
    arena values they are computed from (each may be recomputed), in order."""
    r = p.rebuild({})
    over = set(np.flatnonzero(r.live > goal).tolist())
    seeds = {r.items[i] for i, (first, last) in r.intervals.items()
             if any(first < t < last and i not in r.reads[t] for t in over)}
    found, stack = set(), list(seeds)
    while stack:
        u = stack.pop()
        if u in found or not p.size[u]:
            continue
        found.add(u)
        stack.extend(p.args[u])
    return sorted(found, key=p.pos.__getitem__)


def _split_points(p: Problem, values: list[int]) -> dict[int, tuple]:
    """Per value, a split at every position after its first reader where one of ``values``
    is read: each such reader gets its own copy of whatever it needs recomputed."""
    reads = sorted({q for u in values for q in p.user_positions[u]})
    out = {}
    for u in values:
        first = min(p.user_positions[u], default=None)
        out[u] = () if first is None else tuple(reads[bisect.bisect_right(reads, first):])
    return out


def floor_bytes(G: nx.MultiDiGraph) -> int:
    """A lower bound on the arena of any order of ``G``, recomputing or not: the most one
    step holds at once, its arena operands and its result (less the operand it may
    overwrite in place, where its op writes element for element)."""
    sizes = {n: align(s) for n, s in arena_sizes(G).items()}
    most = 0
    for n in execution_order(G):
        args = ir.operands(G, n)
        held = sum(sizes[u] for u in set(args))
        donor = max((sizes[u] for k, u in enumerate(args)
                     if sizes[u] == sizes[n] and writes_elementwise(G, n, k)), default=0)
        most = max(most, held + sizes[n] - donor)
    return most
