"""Before differentiating, an einsum of three or more operands is split into the pairwise
steps of its contraction path, in place.

Differentiated whole, each operand's cotangent would be its own einsum of every other
operand (an "environment"): n operands cost about n forward contractions. Split, the
backward pass runs through the pairwise steps and shares their intermediates, as reverse
mode does through any chain: about twice the forward's FLOPs. The path is the one the
contraction pass would choose for ``optimize="auto"`` (``contraction.search.choose``, the anytime
search's cache included); the einsum node keeps its id and becomes the last step, so its
users are untouched.
"""

from __future__ import annotations

from ... import ir
from ...contraction import paths
from ...contraction.search.choose import best_path
from ...ir.einsum import split as split_equation
from .. import tensor as T
from ..tensor import Tensor


def split_many_operand_einsum(g, n: int) -> bool:
    """Rewrite einsum node ``n`` of Graph ``g`` (three or more operands) as pairwise steps
    ending in ``n``; False where it has fewer operands or its path is one step."""
    G = g._G
    d = G.nodes[n]
    operands = ir.operands(G, n)
    if d["op"] != "einsum" or len(operands) < 3:
        return False
    terms, output = split_equation(d["attrs"]["equation"])
    sizes = paths.label_sizes(d["attrs"]["equation"],
                              [G.nodes[u]["shape"] for u in operands])
    steps, _ = best_path(terms, output, sizes)
    if len(steps.steps) < 2:
        return False
    current = list(operands)
    for positions, picked, result in steps.steps[:-1]:
        args = [Tensor(g, current[p]) for p in positions]
        for p in reversed(positions):
            current.pop(p)
        t = T.einsum(",".join(picked) + "->" + result, *args)
        G.nodes[t.id]["src"] = d.get("src")
        current.append(t.id)
    positions, picked, result = steps.steps[-1]
    last = [current[p] for p in positions]
    G.remove_edges_from(list(G.in_edges(n, keys=True)))
    for k, u in enumerate(last):
        G.add_edge(u, n, arg=k)
    d["attrs"] = dict(d["attrs"], equation=",".join(picked) + "->" + result)
    d["attrs"].pop("contraction", None)
    return True
