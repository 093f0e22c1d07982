"""The fused-group contract (ARCHITECTURE "Fused nodes"): what a ``fused`` node's sub-graph
may hold and how its members index the group's loop space. The fusion pass grows groups
that satisfy it; backends generate kernels from it. Nothing here decides *which* groups to
form (that is ``passes/fusion.py``).

Patterns (``classify``):

- ``elementwise``: elementwise ops plus ``broadcast_to``/``transpose`` (pure indexing);
- ``reduction``: one reduction fed by elementwise ops, followed only by elementwise ops on
  the reduced shape;
- ``contraction``: one ``einsum`` whose operands are group inputs, followed by elementwise
  ops on its output (shape and dtype), e.g. bias add + gelu: backends run the einsum into
  the output buffer and the rest in place on it;
- ``normalization``: reductions over the same trailing axes of one shape (the rows), mixed
  with elementwise ops over the rows and over the per-row values, e.g. softmax, layer norm,
  logsumexp: backends make one pass over a row per level of reductions.

Index maps (``group_maps``, ``operand_index_map``, ``reduction_maps``,
``normalization_maps``) say which loop dim each member's dims walk; ``build_subgraph``
makes the sub-graph a fused node holds. An expensive op (exp, tanh, ...) whose value a
kernel would recompute across a broadcast is refused (``check_recompute``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import networkx as nx

from .. import ir
from ..ir import ops

INDEXING = ("broadcast_to", "transpose")
# Ops worth a vector unit's time per element; recomputing them across a broadcast loses to
# materializing them once.
EXPENSIVE = frozenset({"exp", "log", "tanh", "sigmoid", "gelu", "sin", "cos", "pow"})


def is_pointwise(G: nx.MultiDiGraph, n: int) -> bool:
    """Elementwise ops and pure-indexing layout ops: members of any pattern."""
    op = G.nodes[n]["op"]
    return ops.OPS[op].kind == ops.ELEMENTWISE or op in INDEXING


def fusion_kind(G, n) -> str | None:
    """How node ``n`` takes part in a group: ``pointwise``, ``reduction``, ``einsum`` or None."""
    op = G.nodes[n]["op"]
    kind = ops.OPS[op].kind
    if is_pointwise(G, n):
        return "pointwise"
    if kind == ops.REDUCTION:
        return "reduction"
    if kind == ops.CONTRACTION:
        return "einsum"
    return None


def runs_along_path(G, n) -> bool:
    """Einsum node ``n`` runs along its contraction path (``Contraction.along_path``: it is
    sliced, or has more than two operands): every backend gives it a kernel of its own,
    which the memory limit's slicing and the path's intermediates are planned for."""
    held = G.nodes[n]["attrs"].get("contraction")
    return held.along_path if held is not None else G.in_degree(n) > 2


def is_scalar_const(G, n) -> bool:
    """Node ``n`` is a one-element constant (inlined into a kernel as a literal)."""
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


def computed_members(sub: nx.MultiDiGraph) -> list[int]:
    """The nodes of a fused node's sub-graph that compute (not its inputs or constants), in
    execution order: the one list a fused step's kernels, profile, report and drawings
    name."""
    return [n for n in ir.topo_order(sub) if sub.nodes[n]["op"] not in ("input", "const")]


def member_ops(G: nx.MultiDiGraph, n: int) -> tuple[str, ...]:
    """The ops node ``n``'s step computes: a fused node's members' (``computed_members``),
    in order; any other node's own."""
    d = G.nodes[n]
    if d["op"] != "fused":
        return (d["op"],)
    sub = d["attrs"]["graph"]
    return tuple(sub.nodes[m]["op"] for m in computed_members(sub))


def identity_map(shape) -> tuple:
    """The index map of an operand of ``shape`` over a loop space of the same shape (size-1
    dims broadcast: None)."""
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
    red = next((m for m in members if fusion_kind(G, m) == "reduction"), None)
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
    kinds = {m: fusion_kind(G, m) for m in members}
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
        if runs_along_path(G, eins[0]):
            return None, ("a sliced or many-operand einsum runs along its path, slice by "
                          "slice: its own kernel, not an epilogue group's head")
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
    reds = [m for m in members if fusion_kind(G, m) == "reduction"]
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


def check_recompute(G, members, root) -> str:
    """Why a group would recompute an expensive member per broadcast element (empty: it
    would not)."""
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


def node_subgraph(G: nx.MultiDiGraph, n: int) -> nx.MultiDiGraph:
    """Node ``n`` of ``G`` alone, as a sub-graph with inputs ``in0..`` (one per operand, in
    ``ir.operands(G, n)`` order: ``x * x`` has two). The one builder of one-op groups for
    every backend, so they bind a node's operands alike."""
    d = G.nodes[n]
    S = ir.new_graph(f"{d['op']}_{n}")
    ins = []
    for k, u in enumerate(ir.operands(G, n)):
        ud = G.nodes[u]
        i = ir.add_node(S, "input", [], ud["shape"], ud["dtype"], name=f"in{k}", src=ud.get("src"))
        S.graph["inputs"].append(i)
        ins.append(i)
    m = ir.add_node(S, d["op"], ins, d["shape"], d["dtype"], d["attrs"], src=d.get("src"))
    S.graph["outputs"] = [m]
    return S
