"""The compile cache: plans by graph outline and options, bounded in count and in the bytes
of the arenas its plans keep for their next calls.

A graph's structural hash is computed only where a cached plan's graph has the same
outline (``outline``): a first compile does not pay for one. At most ``CACHE_ENTRIES``
plans are kept, the least recently compiled dropped first, and the arenas they keep add up
to at most ``CACHE_ARENA_BYTES`` (the least recently compiled give theirs back first): a
plan the user dropped does not keep its working memory.

What each plan keeps is counted as it changes, not asked of every plan at every compile
(which costs a full cache's walk at every compile and every hit): a cached plan tells the
cache when a call leaves it keeping more than it last said, or its arenas were released
(``Plan.arena_listener``), and the cache counts that plan again then, between compiles (a
plan's arenas only grow in a call). Only where the count passes the bound does it ask
every plan, newest first, releasing what does not fit: the bound holds after every call,
not only at the next compile.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

import networkx as nx

from .. import ir
from ..runtime.pool import env_number as _env_number

CACHE_ENTRIES = 256
CACHE_ARENA_BYTES = int(_env_number("GRAPHOPT_PLAN_CACHE_BYTES", 64 << 20))

# (graph outline, options) -> [[structural hash or None, plan, graph compiled or None,
# the idle arena bytes last counted], ...]
_CACHE: "OrderedDict[tuple, list[list]]" = OrderedDict()
_lock = threading.RLock()    # (a plan released under it reports back to it)
_entry_of: dict = {}        # id(plan) -> its entry
_returned: set = set()      # cached plans that reported a change, not yet counted
_held = 0                   # the idle arena bytes last counted, over every entry
_bounding = False           # ``bound_arenas`` runs (a release it makes reports back)


def clear() -> None:
    """Forget every cached plan."""
    global _held
    with _lock:
        for entries in _CACHE.values():
            for entry in entries:
                _forget(entry)
        _CACHE.clear()
        _returned.clear()
        _held = 0


def plans() -> list:
    """The plans in the compile cache, least recently compiled first."""
    with _lock:
        return [e[1] for entries in _CACHE.values() for e in entries]


def counted_bytes() -> int:
    """The idle arena bytes of the cached plans, as last counted (each plan's calls since
    counted at the next compile)."""
    with _lock:
        return _held


def outline(G: nx.MultiDiGraph) -> tuple:
    """What every graph of the same structural hash shares, read without walking its other
    nodes: its node count, its inputs' shapes and dtypes, and its outputs' shapes, dtypes,
    ops and equations (a network's einsum: networks compiled one after another, of as many
    tensors or of one equation on other sizes, are told apart without hashing each)."""
    nodes = G._node
    # the inputs as one hash: a key is hashed again at every lookup, and an ordered dict's
    # walk over its values hashes each key (a network's tuple of hundreds of shapes in each
    # key would make the bound's walk many times slower); equal hashes only mean the graphs
    # are hashed
    return (len(nodes),
            hash(tuple([(tuple(nodes[i]["shape"]), nodes[i]["dtype"])
                        for i in G.graph.get("inputs", ()) if i in nodes])),
            tuple((tuple(nodes[o]["shape"]), nodes[o]["dtype"], nodes[o]["op"],
                   nodes[o]["attrs"].get("equation"))
                  for o in G.graph.get("outputs", ()) if o in nodes))


def lookup(key: tuple, G: nx.MultiDiGraph):
    """``(the plan cached for G under key, G's structural hash)``; either may be None. The
    hashes are computed here, where a plan of the same outline could match: the hash walks
    every node, a share of a large network's first compile."""
    with _lock:
        entries = _CACHE.get(key)
        if not entries:
            return None, None
    digest = ir.structural_hash(G)
    with _lock:
        for entry in _CACHE.get(key, ()):
            if entry[0] is None:
                entry[0], entry[2] = ir.structural_hash(entry[2]), None
            if entry[0] == digest:
                _CACHE.move_to_end(key)
                bound()
                return entry[1], digest
    return None, digest


def keep(key: tuple, plan, G: nx.MultiDiGraph, digest) -> None:
    """Cache ``plan``, compiled from ``G`` (kept to be hashed where a graph of its outline is
    compiled later, unless its hash ``digest`` is known), under ``key``."""
    entry = [digest, plan, G if digest is None else None, 0]
    with _lock:
        _CACHE.setdefault(key, []).append(entry)
        _CACHE.move_to_end(key)
        _entry_of[id(plan)] = entry
        if hasattr(plan, "arena_listener"):
            plan.arena_listener = _arena_returned
        _returned.add(plan)   # (its kernels may have run while it compiled, keeping arenas)
        bound()


def _arena_returned(plan) -> None:
    """What a cached plan keeps for its next calls changed (``Plan.arena_listener``): count
    it now, and keep the bound."""
    with _lock:
        _returned.add(plan)
        if not _bounding:
            bound_arenas()


def bound() -> None:
    """Keep ``CACHE_ENTRIES`` plans and ``CACHE_ARENA_BYTES`` of their idle arenas (the
    most recently compiled keep theirs; the lock held)."""
    count = sum(map(len, _CACHE.values()))
    while count > CACHE_ENTRIES:
        oldest = next(iter(_CACHE))
        entries = _CACHE[oldest]
        entry = entries.pop(0)
        _release(entry[1])
        _forget(entry)
        if not entries:
            del _CACHE[oldest]
        count -= 1
    bound_arenas()


def bound_arenas() -> None:
    """Count the plans that reported since, and keep ``CACHE_ARENA_BYTES`` of idle arenas
    (the lock held)."""
    global _held, _bounding
    while _returned:
        entry = _entry_of.get(id(_returned.pop()))
        if entry is not None:
            _held += _recount(entry)
    if _held <= CACHE_ARENA_BYTES:
        return
    budget, _held, _bounding = CACHE_ARENA_BYTES, 0, True
    try:
        for entry in reversed([e for entries in _CACHE.values() for e in entries]):
            _recount(entry)
            if entry[3] > budget:
                _release(entry[1])
                _recount(entry)
            budget -= entry[3]
            _held += entry[3]
    finally:
        _bounding = False
        _returned.clear()      # (the releases above reported plans just counted)


def _recount(entry: list) -> int:
    """Count the entry's plan's idle arena bytes again; by how much they changed."""
    was, entry[3] = entry[3], getattr(entry[1], "idle_arena_bytes", 0)
    return entry[3] - was


def _forget(entry: list) -> None:
    """The entry leaves the cache: its plan no longer reports to it."""
    global _held
    plan = entry[1]
    _held -= entry[3]
    _entry_of.pop(id(plan), None)
    _returned.discard(plan)
    if hasattr(plan, "arena_listener"):
        plan.arena_listener = None


def _release(plan) -> None:
    release = getattr(plan, "release_arenas", None)
    if release is not None:
        release()
