"""Einsum groups: which einsum nodes form one contraction, and the group as one equation.

A *group* is a tree of einsum nodes (plus ``transpose`` nodes and multiplications by 0-d
tensors) joined through intermediates that have exactly one use and are not graph outputs,
all of one non-bool dtype (so no reordering can change the precision or the integer
wrap-around of a partial product). ``merge`` writes a group as one equation over its
external operands, for the ``contraction`` pass to order. A graph that is one einsum of
graph inputs and nothing else (a tensor network) is ``contraction_only``: ``compile`` runs
it through ``manager.CONTRACTION_ONLY_PIPELINE``.
"""

from __future__ import annotations

from dataclasses import dataclass

from .. import ir
from ..ir import einsum as einsum_mod
from ..ir.einsum import label
from .paths import label_sizes


def _member(G, n) -> bool:
    """May ``n`` be part of a group? Einsums, transposes, products with a 0-d tensor, all of
    one non-bool dtype with their operands."""
    d = G.nodes[n]
    if d["op"] not in ("einsum", "mul", "transpose") or d["dtype"] == "bool" or \
            any(G._node[u]["dtype"] != d["dtype"] for u in G._pred[n]):
        return False
    if d["op"] == "einsum":
        return not _sliced(d)
    if d["op"] == "mul":
        return any(G._node[u]["shape"] == () for u in G._pred[n])
    return True     # a transpose


def _sliced(d: dict) -> bool:
    """Whether an einsum node's contraction loops over slices (a sliced node keeps them)."""
    held = d["attrs"].get("contraction")
    return held is not None and bool(held.slices)


def find_groups(G) -> list[list[int]]:
    """Maximal groups, each listed root first (the node whose value leaves the group)."""
    lone = lone_contraction(G)
    if lone is not None:      # a tensor network: its einsum is the one group, if any
        return [[lone]] if _member(G, lone) else []
    outs = set(G.graph["outputs"])
    member = {n for n in G if _member(G, n)}
    absorbed = {n for n in member if n not in outs and G.out_degree(n) == 1
                and next(iter(G.successors(n))) in member}
    groups = []
    for root in ir.topo_order(G):
        if root not in member or root in absorbed:
            continue
        group, stack = [], [root]
        while stack:
            n = stack.pop()
            group.append(n)
            stack.extend(u for u in ir.operands(G, n) if u in absorbed)
        if any(G.nodes[n]["op"] == "einsum" for n in group):
            groups.append(group)
    return groups


def lone_contraction(G) -> int | None:
    """The einsum node where ``G`` computes one einsum of two or more graph inputs and
    nothing else (a tensor network, ``go.contract``), else None. A pair is one too: the
    contraction pass keeps it as it is, and the passes after it have nothing to act on
    (the contraction-only pipeline compiles it faster, to the same kernel)."""
    nodes = G._node
    computed = [n for n, d in nodes.items() if d["op"] not in ("input", "const")]
    if len(computed) != 1:
        return None
    n = computed[0]
    d, args = nodes[n], G._pred[n]
    ok = (d["op"] == "einsum" and sum(map(len, args.values())) >= 2 and
          not _sliced(d) and all(nodes[u]["op"] == "input" for u in args))
    return n if ok else None


def contraction_only(G) -> bool:
    """Whether ``G`` is one einsum of two or more graph inputs and nothing else
    (``lone_contraction``): see ``manager.CONTRACTION_ONLY_PIPELINE``."""
    return lone_contraction(G) is not None


@dataclass
class Merged:
    """One group as a single equation: ``terms[i]`` labels ``operands[i]``."""

    operands: list[int]
    terms: list[str]
    output: str
    sizes: dict

    @property
    def equation(self) -> str:
        return ",".join(self.terms) + "->" + self.output


def merge(G, group: list[int]) -> Merged:
    """Substitute every intermediate of ``group`` by its defining equation. Labels summed
    inside one einsum get fresh names, so they never collide with another einsum's. A group
    of one einsum (a tensor network) is its own equation, labels as written: its node keeps
    it (only a ``path`` is added), so what was inferred and played of it is not redone."""
    root = group[0]
    d = G.nodes[root]
    if len(group) == 1 and d["op"] == "einsum":
        operands = ir.operands(G, root)
        eq = d["attrs"]["equation"]
        terms, output = einsum_mod.split(eq)
        # (memoized: the node's written order and FLOP counts read the same sizes)
        sizes = label_sizes(eq, [G._node[u]["shape"] for u in operands])
        return Merged(operands, terms, output, sizes)
    return _substituted(G, group)


def _substituted(G, group: list[int]) -> Merged:
    """``merge`` of any group: each member's equation substituted into its user's."""
    inside = set(group)
    fresh = iter(range(1 << 62))
    root = group[0]
    out = [next(fresh) for _ in G.nodes[root]["shape"]]
    operands, terms, sizes = [], [], {}
    stack = [(root, out)]
    while stack:
        n, labels = stack.pop()
        d = G.nodes[n]
        if n not in inside:
            operands.append(n)
            terms.append(labels)
            sizes.update(zip(labels, d["shape"]))
            continue
        args = ir.operands(G, n)
        if d["op"] == "transpose":
            inner = [None] * len(labels)
            for p, a in enumerate(d["attrs"]["axes"]):
                inner[a] = labels[p]
            subs = [inner]
        elif d["op"] == "mul":
            subs = [labels if G.nodes[u]["shape"] == d["shape"] else [] for u in args]
        else:
            ins, res = einsum_mod.split(d["attrs"]["equation"])
            name = dict(zip(res, labels))
            for c in "".join(ins):
                if c not in name:
                    name[c] = next(fresh)
            subs = [[name[c] for c in t] for t in ins]
        stack.extend(reversed(list(zip(args, subs))))
    chars: dict = {}
    for t in terms + [out]:
        for x in t:
            chars.setdefault(x, label(len(chars)))
    return Merged(operands, ["".join(chars[x] for x in t) for t in terms],
                  "".join(chars[x] for x in out), {chars[x]: s for x, s in sizes.items()})
