"""``slicing``: bound a multi-operand contraction's intermediates by ``ctx.memory_limit``.

The ``contraction`` pass keeps a group as one multi-operand ``einsum`` (with a ``path``
attr) where no pairwise order keeps its intermediates within the limit. This pass plays
each such node's path (opt_einsum's path where the node has none) and, where an
intermediate exceeds the limit, chooses labels to slice
(``graphopt.sliced_contraction.find_slices``, greedy as cotengra's SliceFinder), then
searches the path again for the sliced sizes and keeps the cheaper of the two. It sets
``attrs["slices"]`` (labels), ``attrs["slice_blocks"]`` (index values per slice) and
``attrs["path"]``; backends run the node as a loop over slices
(``graphopt.sliced_contraction.sliced_contract``) or as one task per slice (dask). With more
than one thread (``compile(threads=)``, else the machine's) it may cut smaller slices to run
``attrs["slice_workers"]`` of them at once, where that costs at most
``PARALLEL_FLOP_OVERHEAD`` times the FLOPs and their largest intermediates fit the limit
together.
Without a memory limit the pass changes nothing.

Where no slicing can meet the limit (an operand or the result alone exceeds it) compilation
stops here with a ``GraphError`` naming the node, its equation and the numbers.

Details: ``memory_limit``; ``checked`` (multi-operand einsums examined); ``repathed`` (nodes
whose path searched again fits without slicing: node, path); ``sliced`` (per
sliced node: node, equation, slices, slice_blocks, n_slices, FLOPs with and without
slicing, flop_overhead, largest intermediate before/after, predicted_peak_bytes,
task_peak_bytes, slice_workers); ``slices`` (node -> labels); ``flop_overhead`` (over the
sliced nodes); ``predicted_peak_bytes`` (the largest over the sliced nodes); ``n_slices``
(their sum); ``slice_workers`` (the most slices any node runs at once).
"""

from __future__ import annotations

import networkx as nx
import numpy as np

from .. import ir, threads
from ..einsum import split as split_equation
from ..errors import GraphError
from ..paths import default_path, label_sizes, play_path
from ..sliced_contraction import slice_and_repath, slice_cost, slice_workers, splits_result
from .manager import PassResult, register_pass


def node_path(G: nx.MultiDiGraph, n: int, optimize="greedy") -> list[tuple[int, ...]]:
    """The contraction path node ``n`` runs along: its ``path`` attr, else opt_einsum's."""
    d = G.nodes[n]
    if d["attrs"].get("path"):
        return [tuple(p) for p in d["attrs"]["path"]]
    shapes = [G.nodes[u]["shape"] for u in ir.operands(G, n)]
    try:
        return default_path(d["attrs"]["equation"], shapes, optimize=optimize)
    except (TypeError, ValueError, KeyError):  # an optimize opt_einsum does not take here
        return default_path(d["attrs"]["equation"], shapes)


# Slices cut for running several at once may cost this much more FLOPs than slices cut for
# one at a time, and still be chosen.
PARALLEL_FLOP_OVERHEAD = 1.25


def _slice_node(G, n, limit: int, optimize, budget: int = 1) -> dict | None:
    """The slicing record of node ``n`` (None where its path already fits the limit).

    With a thread ``budget`` above 1 it also cuts slices for ``budget`` at once (each within
    ``limit / budget``) and keeps them where they cost at most ``PARALLEL_FLOP_OVERHEAD``
    times the FLOPs; ``slice_workers`` is how many slices may run at once within the limit
    (``sliced_contraction.slice_workers``)."""
    d = G.nodes[n]
    eq = d["attrs"]["equation"]
    shapes = [G.nodes[u]["shape"] for u in ir.operands(G, n)]
    sizes = label_sizes(eq, shapes)
    itemsize = np.dtype(d["dtype"]).itemsize
    path = node_path(G, n, optimize)
    terms, output = split_equation(eq)
    try:
        steps = play_path(terms, output, path)
        if slice_cost(steps, len(terms), output, sizes, {}).largest * itemsize <= limit:
            return None
        path0 = path
        path, plan = slice_and_repath(eq, sizes, path0, itemsize, limit, optimize)
    except GraphError as e:
        raise GraphError(f"slicing: {e.detail}", op="einsum", src=d.get("src"),
                         node=n) from None
    workers = _workers(eq, sizes, plan, itemsize, limit, budget)
    if budget > 1 and workers < budget:
        try:
            path_p, plan_p = slice_and_repath(eq, sizes, path0, itemsize, limit // budget,
                                              optimize)
        except GraphError:      # an operand alone exceeds limit / budget
            plan_p = None
        if plan_p is not None and plan_p.flops <= PARALLEL_FLOP_OVERHEAD * plan.flops:
            workers_p = _workers(eq, sizes, plan_p, itemsize, limit, budget)
            if workers_p > workers:
                path, plan, workers = path_p, plan_p, workers_p
    return {"node": n, "equation": eq, "path": path, "src": d.get("src"), **plan.to_dict(),
            "slice_workers": workers}


def _workers(eq, sizes, plan, itemsize: int, limit: int, budget: int) -> int:
    # measured as the pass bounds one slice: by its largest intermediate, so that the
    # largest intermediates of the slices running at once fit the limit together
    _, output = split_equation(eq)
    out_bytes = itemsize * int(np.prod([sizes[c] for c in output], dtype=np.int64))
    return slice_workers(plan.n_slices, splits_result(eq, sizes, plan.labels, plan.blocks),
                         plan.largest_bytes, out_bytes, limit, budget)


@register_pass("slicing")
def slicing(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Slice multi-operand einsums whose intermediates exceed ``ctx.memory_limit``."""
    limit = ctx.memory_limit
    H = G if limit is None else ir.copy_graph(G)    # without a limit ``G`` is returned as is
    candidates = [n for n in ir.topo_order(G)
                  if G.nodes[n]["op"] == "einsum" and G.in_degree(n) > 2] if limit else []
    records, repathed = [], []
    if limit is not None:
        budget = threads.budget_for(ctx.options.get("threads"), local=False)[0]
        for n in candidates:
            rec = _slice_node(G, n, int(limit), ctx.optimize, budget)
            if rec is None:
                continue
            attrs = dict(H.nodes[n]["attrs"], path=[tuple(p) for p in rec["path"]])
            if rec["slices"]:
                attrs.update(slices=list(rec["slices"]), slice_blocks=list(rec["slice_blocks"]),
                             slice_workers=rec["slice_workers"])
                records.append(rec)
            else:  # the path searched again fits without slicing
                repathed.append({"node": n, "path": rec["path"],
                                 "largest_intermediate_bytes": rec["largest_intermediate_bytes"]})
            H.nodes[n]["attrs"] = attrs
    flops = sum(r["flops"] for r in records)
    unsliced = sum(r["flops_unsliced"] for r in records)
    details = {
        "memory_limit": limit,
        "checked": len(candidates) if limit is not None else 0,
        "sliced": records,
        "repathed": repathed,
        "slices": {str(r["node"]): r["slices"] for r in records},
        "flop_overhead": flops / unsliced if unsliced else 1.0,
        "predicted_peak_bytes": max((r["predicted_peak_bytes"] for r in records), default=0),
        "slice_workers": max((r["slice_workers"] for r in records), default=1),
    }
    details["n_slices"] = sum(r["n_slices"] for r in records)
    return PassResult(H, details)
