"""The fusion pass: replace groups of elementwise/reduction/epilogue ops by ``fused`` nodes.

A group has one output (its *root*). It is grown from the root towards its producers, latest
node first, so when a producer is considered every one of its users is already decided. A
producer joins when all of its users are in the group (otherwise it must stay outside: a
value two kernels need is materialized once), when joining creates no cycle through an
outside node, and when the group still has one of the patterns of ARCHITECTURE "Fused
nodes":

- ``elementwise``: elementwise ops plus ``broadcast_to``/``transpose`` (pure indexing);
- ``reduction``: one reduction fed by elementwise ops, followed only by elementwise ops on
  the reduced shape;
- ``contraction``: one ``einsum`` whose operands are group inputs, followed by elementwise
  ops on its output (shape and dtype), e.g. bias add + gelu: backends run the einsum into
  the output buffer and the rest in place on it;
- ``normalization``: reductions over the same trailing axes of one shape (the rows), mixed
  with elementwise ops over the rows and over the per-row values, e.g. softmax, layer norm,
  logsumexp: backends make one pass over a row per level of reductions.

A group holds at most ``MAX_GROUP_OPS`` ops (a longer chain becomes several groups).
Size-1 constants used by members are copied into the group (literals in the kernel). A
group of one op that absorbed nothing is left alone. An expensive op (exp, tanh, ...) whose
value a kernel would recompute across a broadcast is left outside.

Details: ``groups`` (member op names per fused node, in execution order), ``patterns``,
``kernels`` (number of fused nodes), ``fused_nodes`` (their ids) and ``rejected`` (each
refused candidate: node, op, the group it was refused from and why).
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass

import networkx as nx

from .. import ir, ops
from ..errors import GraphError
from .manager import PassResult, register_pass

INDEXING = ("broadcast_to", "transpose")
# Ops worth a vector unit's time per element; recomputing them across a broadcast loses to
# materializing them once.
EXPENSIVE = frozenset({"exp", "log", "tanh", "sigmoid", "gelu", "sin", "cos", "pow"})


def is_pointwise(G: nx.MultiDiGraph, n: int) -> bool:
    """Elementwise ops and pure-indexing layout ops: members of any pattern."""
    op = G.nodes[n]["op"]
    return ops.OPS[op].kind == ops.ELEMENTWISE or op in INDEXING


def _kind(G, n) -> str | None:
    op = G.nodes[n]["op"]
    kind = ops.OPS[op].kind
    if is_pointwise(G, n):
        return "pointwise"
    if kind == ops.REDUCTION:
        return "reduction"
    if kind == ops.CONTRACTION:
        return "einsum"
    return None


def _is_scalar_const(G, n) -> bool:
    d = G.nodes[n]
    return d["op"] == "const" and math.prod(d["shape"]) == 1


# ------------------------------------------------------------------------------ index maps


def operand_index_map(G: nx.MultiDiGraph, n: int, k: int, node_map: tuple) -> tuple:
    """Where operand ``k`` of ``n`` is read when ``n`` is evaluated at ``node_map``.

    A map has one entry per dim of the node: a loop-dimension id, or None where the index
    is 0 (a size-1 dim). Defined for pointwise nodes (NumPy broadcasting, transpose)."""
    d = G.nodes[n]
    u = ir.operands(G, n)[k]
    shape = G.nodes[u]["shape"]
    if d["op"] == "transpose":
        out = [None] * len(shape)
        for i, a in enumerate(d["attrs"]["axes"]):
            out[a] = node_map[i]
        return tuple(None if shape[j] == 1 else out[j] for j in range(len(shape)))
    lead = len(d["shape"]) - len(shape)
    return tuple(None if shape[j] == 1 else node_map[lead + j] for j in range(len(shape)))


def identity_map(shape) -> tuple:
    return tuple(None if s == 1 else i for i, s in enumerate(shape))


def reduction_maps(shape_in, axes, keepdims) -> tuple[tuple, tuple]:
    """(map of the reduction's operand, map of its result) over the operand's loop space."""
    in_map = identity_map(shape_in)
    if keepdims:
        out_map = tuple(None if i in axes else m for i, m in enumerate(in_map))
    else:
        out_map = tuple(m for i, m in enumerate(in_map) if i not in axes)
    return in_map, out_map


def group_maps(G: nx.MultiDiGraph, members, root: int) -> tuple[dict, tuple, int | None]:
    """Every (member, map, phase) a single-loop-nest kernel evaluates.

    Returns ``({node: {(map, phase), ...}}, loop_shape, reduction_node)``. The loop space is
    the root's shape, or the reduction's operand shape when the group has a reduction;
    ``phase`` is "pro" (inside the reduction loops) or "epi" (per output element)."""
    members = set(members)
    red = next((m for m in members if _kind(G, m) == "reduction"), None)
    seen: dict[int, set] = {}
    if red is None:
        space = tuple(G.nodes[root]["shape"])
        stack = [(root, identity_map(space), "epi")]
    else:
        (u,) = ir.operands(G, red)
        space = tuple(G.nodes[u]["shape"])
        a = G.nodes[red]["attrs"]
        in_map, out_map = reduction_maps(space, a["axes"], a["keepdims"])
        # the reduced value and what follows it are indexed by the kept loop dims
        stack = [(root, out_map, "epi")]
    while stack:
        n, m, phase = stack.pop()
        if (m, phase) in seen.setdefault(n, set()):
            continue
        seen[n].add((m, phase))
        if n == red:
            (u,) = ir.operands(G, n)
            if u in members:
                stack.append((u, in_map, "pro"))
            continue
        if not is_pointwise(G, n):
            continue
        for k, u in enumerate(ir.operands(G, n)):
            if u in members:
                stack.append((u, operand_index_map(G, n, k, m), phase))
    return seen, space, red


def _recompute_factor(m: tuple, space: tuple, kept: set | None) -> int:
    """How many times a value at map ``m`` is recomputed when the kernel hoists it to the
    loop of its innermost index: the extents of unused loop dims outside that loop."""
    used = {d for d in m if d is not None}
    inner = max(used, default=-1)
    dims = range(len(space)) if kept is None else sorted(kept)
    return math.prod(space[d] for d in dims if d < inner and d not in used)


# --------------------------------------------------------------------------------- patterns


def classify(G: nx.MultiDiGraph, members, root: int) -> tuple[str | None, str]:
    """The pattern of a candidate group, or ``(None, reason)``."""
    members = set(members)
    kinds = {m: _kind(G, m) for m in members}
    if None in kinds.values():
        bad = next(m for m in members if kinds[m] is None)
        return None, f"op {G.nodes[bad]['op']!r} cannot be fused"
    reds = [m for m in members if kinds[m] == "reduction"]
    eins = [m for m in members if kinds[m] == "einsum"]
    if len(eins) > 1:
        return None, "a kernel holds one einsum"
    if eins and reds:
        return None, "an einsum epilogue cannot hold a reduction"
    if reds:
        reason = _epilogue_reason(G, reds[0], members, "reduction") if len(reds) == 1 else \
            "a reduction kernel holds one reduction"
        if not reason:
            return "reduction", ""
        rows = normalization_maps(G, members, root)
        if isinstance(rows, str):
            return None, f"{reason}; not a normalization: {rows}"
        return "normalization", ""
    if eins:
        reason = _epilogue_reason(G, eins[0], members, "einsum")
        if reason:
            return None, reason
        if eins[0] == root:
            return None, "an einsum alone is not an epilogue group"
        if any(u in members for u in ir.operands(G, eins[0])):
            return None, "einsum operands must be group inputs"
        return "contraction", ""
    return "elementwise", ""


def _epilogue_reason(G, head, members, what) -> str:
    """Why the members after ``head`` are not an epilogue on its result ("" if they are)."""
    hd = G.nodes[head]
    for m in _descendants_within(G, head, members):
        md = G.nodes[m]
        if md["op"] in INDEXING or tuple(md["shape"]) != tuple(hd["shape"]):
            reason = ("reduction not at root" if what == "reduction" else "shape mismatch")
            return (f"{reason}: {md['op']} after the {hd['op']} is not elementwise "
                    f"on its {tuple(hd['shape'])} result")
        if what == "einsum" and md["dtype"] != hd["dtype"]:
            return (f"dtype mismatch: {md['op']} turns the einsum's {hd['dtype']} "
                    f"into {md['dtype']} (the epilogue runs in place)")
    return ""


@dataclass(frozen=True)
class RowMaps:
    """The loop space of a normalization group: ``space`` (the reductions' operand shape),
    ``axes`` (the reduced, trailing axes), ``kept`` (the map of a per-row value) and
    ``maps`` (every map each member and input is read at)."""

    space: tuple
    axes: tuple
    kept: tuple
    maps: dict


def normalization_maps(G: nx.MultiDiGraph, members, root: int) -> RowMaps | str:
    """The rows of a normalization group, or why ``members`` are not one.

    Every reduction reduces the same trailing axes of an operand of one shape, and its
    value is read only once per row (at the kept dims); the root is over the rows or over
    the per-row values; an expensive op is not recomputed across a broadcast."""
    members = set(members)
    reds = [m for m in members if _kind(G, m) == "reduction"]
    if not reds:
        return "it has no reduction"
    operand = ir.operands(G, reds[0])[0]
    space = tuple(G.nodes[operand]["shape"])
    axes = tuple(sorted(G.nodes[reds[0]]["attrs"]["axes"]))
    for r in reds:
        u = ir.operands(G, r)[0]
        if tuple(G.nodes[u]["shape"]) != space or tuple(sorted(G.nodes[r]["attrs"]["axes"])) \
                != axes:
            return "its reductions reduce different rows"
    nd = len(space)
    if axes != tuple(range(nd - len(axes), nd)):
        return f"the reduced axes {axes} are not the trailing axes of {space}"
    if len(axes) == nd or math.prod(space[:nd - len(axes)]) == 1:
        return "a full reduction has no rows"
    row = identity_map(space)
    kept = tuple(None if i in axes else m for i, m in enumerate(row))
    shape = tuple(G.nodes[root]["shape"])
    if shape == space:
        start = row
    elif shape == tuple(1 if i in axes else s for i, s in enumerate(space)):
        start = kept
    elif shape == space[:nd - len(axes)]:
        start = kept[:nd - len(axes)]
    else:
        return f"the result {shape} is neither over the rows of {space} nor one per row"
    maps: dict[int, set] = {}
    stack = [(root, start)]
    while stack:
        n, m = stack.pop()
        if m in maps.setdefault(n, set()):
            continue
        maps[n].add(m)
        if n in reds:
            a = G.nodes[n]["attrs"]
            if m != reduction_maps(space, axes, a["keepdims"])[1]:
                return f"the {G.nodes[n]['op']} over the rows is read across rows"
            u = ir.operands(G, n)[0]
            stack.append((u, row))
            continue
        if n not in members or not is_pointwise(G, n):
            continue
        for k, u in enumerate(ir.operands(G, n)):
            stack.append((u, operand_index_map(G, n, k, m)))
    lead = set(kept) - {None}
    for n, entries in maps.items():
        if G.nodes[n]["op"] not in EXPENSIVE:
            continue
        for m in entries:
            used = set(m) - {None}
            if used - lead and lead - used:
                return (f"{G.nodes[n]['op']} of {tuple(G.nodes[n]['shape'])} would be "
                        f"recomputed for every row of {space}")
    return RowMaps(space, axes, kept, maps)


def _descendants_within(G, head, members) -> set:
    out, stack = set(), [head]
    while stack:
        for v in G.successors(stack.pop()):
            if v in members and v not in out:
                out.add(v)
                stack.append(v)
    return out


def _check_recompute(G, members, root) -> str:
    maps, space, red = group_maps(G, members, root)
    kept = None
    if red is not None:
        axes = G.nodes[red]["attrs"]["axes"]
        kept = {d for d in range(len(space)) if d not in axes}
    for n, entries in maps.items():
        if G.nodes[n]["op"] not in EXPENSIVE:
            continue
        for m, phase in entries:
            f = _recompute_factor(m, space, kept if phase == "epi" else None)
            if f > 1:
                return (f"shape mismatch: {G.nodes[n]['op']} of {tuple(G.nodes[n]['shape'])} "
                        f"would be recomputed {f}x across a broadcast to {space}")
    return ""


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
    return _check_recompute(G, members | {p}, root)


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
        if _kind(G, p) is None or p in assigned:
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


def _absorbed_consts(G, members) -> list[int]:
    return sorted({u for m in members for u in ir.operands(G, m)
                   if u not in members and _is_scalar_const(G, u)})


# -------------------------------------------------------------------------------- rewriting


def build_subgraph(G: nx.MultiDiGraph, members, root: int, consts=()) -> tuple[nx.MultiDiGraph,
                                                                                list[int]]:
    """The sub-IR of a group: ``input`` nodes ``in0..ink`` (one per outside operand, in order
    of first use), copies of ``consts`` and members, one output. Returns it with the outside
    operand ids in argument order."""
    members, consts = set(members), set(consts)
    order = [n for n in ir.topo_order(G.subgraph(members | consts)) if n in members]
    ext: list[int] = []
    for m in order:
        for u in ir.operands(G, m):
            if u not in members and u not in consts and u not in ext:
                ext.append(u)
    S = ir.new_graph("fused")
    new = {}
    for k, u in enumerate(ext):
        d = G.nodes[u]
        new[u] = ir.add_node(S, "input", [], d["shape"], d["dtype"], name=f"in{k}", src=d["src"])
        S.graph["inputs"].append(new[u])
    for c in sorted(consts):
        d = G.nodes[c]
        new[c] = ir.add_node(S, "const", [], d["shape"], d["dtype"], dict(d["attrs"]),
                             src=d["src"])
    for m in order:
        d = G.nodes[m]
        new[m] = ir.add_node(S, d["op"], [new[u] for u in ir.operands(G, m)], d["shape"],
                             d["dtype"], dict(d["attrs"]), src=d["src"])
    S.graph["outputs"] = [new[root]]
    return S, ext


def _fuse(H, G, root, members, pattern, renamed) -> int:
    """Replace ``members`` by one fused node in ``H``; ``renamed`` maps the roots of groups
    fused before to their fused nodes."""
    consts = _absorbed_consts(G, members)
    sub, ext = build_subgraph(G, members, root, consts)
    ext = [renamed.get(u, u) for u in ext]
    order = [n for n in ir.topo_order(sub) if sub.nodes[n]["op"] not in ("input", "const")]
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
        if root in assigned or _kind(G, root) not in ("pointwise", "reduction"):
            continue
        members = _grow(G, root, pos, outputs, assigned, rejected)
        if len(members) == 1 and not _absorbed_consts(G, members):
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
