"""The tiling pass: run a chain of batched kernels one block of its batch dims at a time,
so that the intermediates between them stay in cache.

Attention is the example: ``einsum(bhqd,bhkd->bhqk) -> softmax -> einsum(bhqk,bhkd->bhqd)``.
``b`` and ``h`` lead every operand, intermediate and result, so the chain computes each head
on its own; run whole, it writes and re-reads two 16 MiB score arrays, run per 8 heads they
are 4 MiB and stay in cache.

A region is a chain ``n1 -> ... -> nk`` where each ``ni`` (i < k) has one user, ``n(i+1)``,
and is not a graph output; every member is an ``einsum`` whose operands start with the
output's leading labels, or a fused ``contraction``/``elementwise``/``normalization`` group
that reads each input at the leading loop dims (no broadcast, transpose or reduction across
them); every operand from outside the region is indexed by the leading dims; the chain
starts at a contraction. A region with at least
``TILE_MIN_BYTES`` of intermediates becomes one ``fused`` node, pattern ``"tiled"``, with
attrs ``tile_dims`` (t: how many leading dims) and ``tile`` (the block extent of leading dim
t-1; dims before it are taken one index at a time), chosen so a block's intermediates take
about ``TILE_BYTES``. Its sub-graph holds the members (nested fused nodes stay fused).

Only a backend that runs tiled nodes block by block (the numba backend) runs this pass;
the others declare it in ``Backend.unsupported_passes`` and the pass manager skips it for
them. Details: ``regions`` (member ops, tile dims, tile, blocks, intermediate bytes) and
``rejected``.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from .. import ir
from ..analysis.fused import build_subgraph, group_maps, identity_map, normalization_maps
from ..ir import einsum as einsum_mod
from .manager import PassResult, register_pass

TILE_MIN_BYTES = 8 << 20   # intermediates a region must hold to be worth tiling
TILE_BYTES = 4 << 20       # intermediates per block: about the L2 + L3 share of a core


def _nbytes(d) -> int:
    return math.prod(d["shape"]) * np.dtype(d["dtype"]).itemsize


def leading_dims(G: nx.MultiDiGraph, n: int) -> int:
    """How many leading dims of ``n``'s result index every operand the same way (0 if
    ``n`` cannot be tiled)."""
    d = G.nodes[n]
    if d["op"] == "einsum":
        return _einsum_leading(d["attrs"]["equation"])
    patterns = ("elementwise", "normalization", "contraction")
    if d["op"] != "fused" or d["attrs"]["pattern"] not in patterns:
        return 0
    sub = d["attrs"]["graph"]
    root = sub.graph["outputs"][0]
    members = {m for m in sub if sub.nodes[m]["op"] not in ("input", "const")}
    if d["attrs"]["pattern"] == "normalization":
        rows = normalization_maps(sub, members, root)
        if isinstance(rows, str):
            return 0
        space, maps, limit = rows.space, rows.maps, len(rows.space) - len(rows.axes)
    else:
        found, space, _ = group_maps(sub, members | set(sub.graph["inputs"]), root)
        maps = {n: {m for m, _ in e} for n, e in found.items()}
        limit = len(space)
    ein = [m for m in members if sub.nodes[m]["op"] == "einsum"]
    if ein:   # the contraction pattern: its einsum reads group inputs directly
        limit = min(limit, _einsum_leading(sub.nodes[ein[0]]["attrs"]["equation"]))
    ident = identity_map(space)
    reads = [m for i in sub.graph["inputs"] for m in maps.get(i, ())] + list(maps[root])
    if any(len(m) != len(space) for m in reads):   # a lower-rank operand broadcasts
        return 0
    t = 0
    while t < limit and all(m[t] == ident[t] for m in reads):
        t += 1
    return t


def _einsum_leading(equation: str) -> int:
    terms, out = einsum_mod.split(equation)
    t = 0
    while t < len(out) and all(len(term) > t and term[t] == out[t] for term in terms):
        t += 1
    return t


def _contracts(d) -> bool:
    return d["op"] == "einsum" or (d["op"] == "fused" and d["attrs"]["pattern"] == "contraction")


def _chain_from(G, start, outputs, assigned):
    """The longest chain from ``start`` through single users that can be tiled."""
    chain = [start]
    while True:
        last = chain[-1]
        users = ir.users(G, last)
        if last in outputs or len(set(users)) != 1 or users[0] in assigned:
            return chain
        if leading_dims(G, users[0]) == 0:
            return chain
        chain.append(users[0])


def _region(G, chain) -> tuple[int, int, int] | str:
    """``(t, tile, intermediate bytes)`` for tiling ``chain``, or why not."""
    t = min(leading_dims(G, n) for n in chain)
    lead = tuple(G.nodes[chain[0]]["shape"][:t])
    inside = set(chain)
    t = min([t] + [_shared(lead, G.nodes[n]["shape"]) for n in chain])
    for n in chain:
        for u in ir.operands(G, n):
            if u not in inside:
                t = min(t, _shared(lead, G.nodes[u]["shape"]))
    if t == 0 or math.prod(lead[:t]) < 2:
        return "no batch dims lead every operand and intermediate"
    interior = sum(_nbytes(G.nodes[n]) for n in chain[:-1])
    if interior < TILE_MIN_BYTES:
        return f"intermediates take {interior} B (< {TILE_MIN_BYTES}): they fit in cache whole"
    lead = lead[:t]
    units = max(1, int(TILE_BYTES * math.prod(lead) // interior))   # batch entries per block
    tile = max(k for k in range(1, lead[t - 1] + 1) if lead[t - 1] % k == 0 and k <= units)
    return t, tile, interior


def _shared(lead, shape) -> int:
    t = 0
    while t < len(lead) and t < len(shape) and shape[t] == lead[t]:
        t += 1
    return t


@register_pass("tiling")
def tiling(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Run chains of batched contractions and the kernels between them per batch block."""
    order = ir.topo_order(G)
    outputs = set(G.graph["outputs"])
    assigned: set[int] = set()
    found, rejected = [], []
    for n in order:
        if n in assigned or not _contracts(G.nodes[n]) or leading_dims(G, n) == 0:
            continue
        chain = _chain_from(G, n, outputs, assigned)
        if len(chain) < 2:
            users = ir.users(G, n)
            if len(users) == 1 and G.nodes[users[0]]["op"] in ("einsum", "fused"):
                rejected.append({"node": n, "ops": [G.nodes[n]["op"], G.nodes[users[0]]["op"]],
                                 "reason": "no batch dims lead every operand of its user"})
            continue
        region = _region(G, chain)
        if isinstance(region, str):
            rejected.append({"node": n, "ops": [G.nodes[m]["op"] for m in chain],
                             "reason": region})
            continue
        assigned |= set(chain)
        found.append((chain, region))
    if not found:
        return PassResult(G, {"regions": [], "rejected": rejected})
    H = ir.copy_graph(G)
    regions = []
    for chain, (t, tile, interior) in found:
        root = chain[-1]
        sub, ext = build_subgraph(G, set(chain), root)
        d = G.nodes[root]
        srcs = list(dict.fromkeys(s for m in chain for s in
                                  (G.nodes[m]["attrs"].get("srcs") or [G.nodes[m]["src"]]) if s))
        f = ir.add_node(H, "fused", ext, d["shape"], d["dtype"],
                        {"graph": sub, "pattern": "tiled", "srcs": srcs, "tile_dims": t,
                         "tile": tile}, src=d["src"])
        ir.replace_uses(H, root, f)
        H.remove_nodes_from(chain)
        lead = tuple(d["shape"][:t])
        regions.append({"node": f, "ops": [G.nodes[m]["op"] for m in chain], "tile_dims": t,
                        "tile": tile, "blocks": math.prod(lead[:-1]) * (lead[-1] // tile),
                        "intermediate_bytes": interior})
    ir.drop_derived(H)
    return PassResult(H, {"regions": regions, "rejected": rejected})
