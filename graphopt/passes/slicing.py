"""``slicing``: bound a multi-operand contraction's working memory by ``ctx.memory_limit``.

The ``contraction`` pass keeps a group as one multi-operand ``einsum`` (with a ``path``
attr) where no pairwise order keeps its intermediates within the limit, and always on the
contraction-only route. This pass computes what each such node allocates when it runs
(``sliced_contraction.contraction_workspace_bytes``: its arena of live intermediates, the
steps' operand copies, operand casts), against the node's share of the limit: the limit
less the node's operands and result where they are values the plan holds (graph inputs
and outputs are not counted, as ``memory_limit`` says) and the least a call's own objects
take (``call_bytes.plan_objects_bytes`` of one step). Where the workspace exceeds its
share it first runs the path's contractions in the order that holds the fewest at once
(``path_searchers.reordered_for_peak``: the same FLOPs; enough on its own for some networks),
then chooses labels to slice, within ``SLICE_HEADROOM`` of the share, and searches the
path again for the sliced sizes (``slice_search.fit_slices``), then with the slicing in
view, within a budget the slices' cost sets (``sliced_path_search``: cotengra's
slice-and-reconfigure and sliced hyper-optimizer trials; a limit that no slicing of the
unsliced path meets may be met along a path searched so). It sets ``attrs["slices"]`` (labels),
``attrs["slice_blocks"]`` (index values per slice) and ``attrs["path"]``; backends run the
node as a loop over slices (``sliced_contraction.sliced_contract``) or as one task per
slice (dask). With more than one thread (``compile(threads=)``, else the machine's) it may
cut smaller slices to run ``attrs["slice_workers"]`` of them at once, where that costs at
most ``PARALLEL_FLOP_OVERHEAD`` times the FLOPs, their workspaces fit the share together
and their steps keep that many threads busy (``_workers``: ``threads.useful_threads``); not
on a backend that runs them one after another (``PassContext.slices_at_once``: a GPU).
Without a memory limit the pass changes nothing.

Where no slicing fits, compilation stops here with a ``GraphError`` naming the node, its
equation and the numbers. The compiler then holds the whole plan (arena plus the largest
step workspace) to the limit.

Details: ``memory_limit``; ``checked`` (multi-operand einsums examined); ``repathed`` (nodes
whose path reordered or searched again fits without slicing: node, path, reordered); ``sliced`` (per
sliced node: node, equation, slices, slice_blocks, n_slices, FLOPs with and without
slicing, flop_overhead, largest intermediate before/after, predicted_peak_bytes (its
workspace), task_peak_bytes, slice_workers, path_search: the sliced path search's
record); ``slices`` (node -> labels); ``flop_overhead``
(over the sliced nodes); ``predicted_peak_bytes`` (the largest over the sliced nodes);
``n_slices`` (their sum); ``slice_workers`` (the most slices any node runs at once).
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from .. import ir
from ..analysis.call_bytes import plan_objects_bytes
from ..analysis.liveness import held_around
from ..contraction.paths import label_sizes, play
from ..contraction.rates import HOST_RATES, Rates
from ..contraction.search.searchers import reordered_for_peak
from ..contraction.slicing.labels import fit_slices
from ..contraction.slicing.path_search import search_sliced_path
from ..contraction.slicing.run import contraction_workspace_bytes, slice_workers, splits_result
from ..contraction.value import Contraction
from ..errors import GraphError
from ..ir.einsum import split as split_equation
from ..runtime import threads
from .manager import PassResult, register_pass

# Slices cut for running several at once may cost this much more FLOPs than slices cut for
# one at a time, and still be chosen.
PARALLEL_FLOP_OVERHEAD = 1.25
# A contraction that must be sliced is sliced to this fraction of its share of the limit:
# the predicted workspace is what a call measures within a few percent (NumPy's cache of
# small allocations, per-slice Python objects), and the measured peak must stay within it.
SLICE_HEADROOM = 0.9


def _slice_node(G, n, limit: int, optimize, budget: int = 1, options=None,
                spent: float = 0.0, rates: Rates = HOST_RATES,
                host_objects: bool = True) -> dict | None:
    """The slicing record of node ``n`` (None where its path already runs within its share
    of ``limit``; see the module docstring).

    With a thread ``budget`` above 1 it also cuts slices for ``budget`` at once and keeps
    them where they cost at most ``PARALLEL_FLOP_OVERHEAD`` times the FLOPs;
    ``slice_workers`` is how many slices may run at once within the share. ``options``:
    the compile's, for ``path_time`` and ``path_cache`` (the sliced path search's, which
    gets what is left of ``path_time`` after the ``spent`` seconds of the contraction pass's
    search of this node)."""
    options = options or {}
    d = G.nodes[n]
    held = d["attrs"].get("contraction")
    if held is None:      # (a pipeline without the contraction pass: ``optimize``'s path)
        held = Contraction.of_node(G, n, rates, optimize=optimize)
    elif held.table is not rates:
        held = Contraction.of_node(G, n, rates)
    eq, dtype = held.equation, held.dtype
    shapes, dtypes, path = list(held.shapes), list(held.operand_dtypes), list(held.path)
    # (the call's objects as a plan of one step holds them: fusion has yet to merge the
    # other nodes into the steps the plan runs; the compile's check counts them all)
    share = limit - held_around(G, n) - (plan_objects_bytes(
        1, len(G.graph["inputs"]), len(G.graph["outputs"])) if host_objects else 0)
    whole = held.workspace_bytes
    if whole <= share:
        return None
    # the same contractions in another order may hold fewer intermediates at once: free,
    # where slicing costs FLOPs
    terms, output = split_equation(eq)
    sizes = label_sizes(eq, shapes)
    reordered = reordered_for_peak(terms, output, sizes, path)
    if reordered != path:
        fewer = Contraction.of_node(G, n, rates, reordered).workspace_bytes
        if fewer < whole:
            path, whole = reordered, fewer
            if whole <= share:
                largest = play(terms, output, sizes, path).largest
                return {"node": n, "path": path, "slices": [], "reordered": True,
                        "largest_intermediate_bytes": largest * np.dtype(dtype).itemsize}
    try:
        if share <= 0:
            raise GraphError(f"the values it reads and writes and the call's own objects "
                             f"take {limit - share} bytes of memory_limit={limit} on their own")
        share = int(share * SLICE_HEADROOM)
        try:
            found, refusal = fit_slices(eq, shapes, path, dtype, share, optimize, 1, dtypes), None
        except GraphError as e:
            found, refusal = None, e
        path_time = options.get("path_time")
        try:
            new_path, plan, _, searched = search_sliced_path(
                eq, shapes, dtype, share, path, found, 1, dtypes,
                time_budget=None if path_time is None else max(0.0, path_time - spent),
                cache=options.get("path_cache", True), rates=rates)
        except GraphError:
            raise refusal from None
    except GraphError as e:
        # the default budgets follow the runs found, and where nothing was found that fits
        # (or nothing cheap enough: then the sliced search tried again, step 1b), a longer
        # search may still find an order that slices within the limit
        hint = "" if options.get("path_time") is not None or share <= 0 else \
            "; a longer path search (compile(..., path_time=seconds)) may find an order " \
            "that slices within it"
        raise GraphError(f"slicing: {e.detail}; unsliced it needs {whole} bytes beside its "
                         f"operands and result, within memory_limit={limit}{hint}",
                         op="einsum", src=d.get("src"), node=n) from None
    workers = _workers(eq, shapes, new_path, plan, dtype, dtypes, share, budget)
    if budget > 1 and workers < budget:
        try:
            # along the path just chosen: the path search (``optimize``, possibly a costly
            # search the user passed) runs once per node
            path_p, plan_p, _ = fit_slices(eq, shapes, new_path, dtype, share, optimize,
                                           budget, dtypes, repath=False)
        except GraphError:      # no slicing runs ``budget`` slices at once within the share
            plan_p = None
        if plan_p is not None and plan_p.flops <= PARALLEL_FLOP_OVERHEAD * plan.flops:
            workers_p = _workers(eq, shapes, path_p, plan_p, dtype, dtypes, share, budget)
            if workers_p > workers:
                new_path, plan, workers = path_p, plan_p, workers_p
    sliced = held.sliced(plan.labels, plan.blocks, workers, rates, new_path)
    return {"node": n, "equation": eq, "path": new_path, "src": d.get("src"), **plan.to_dict(),
            "slice_workers": workers, "predicted_peak_bytes": sliced.workspace_bytes,
            "path_search": searched, "contraction": sliced}


def _workers(eq, shapes, path, plan, dtype, dtypes, share: int, budget: int) -> int:
    """How many of ``plan``'s slices may run at once within ``share`` bytes
    (``slice_workers`` over the exact workspace of one slice in flight), and as many as
    their steps keep busy (``threads.useful_threads`` of a step's average FLOPs on each):
    slices of small steps run slower two at once than one after another (the GIL, BLAS's
    per-call costs), where slices of larger ones nearly halve their time."""
    step_flops = plan.flops / (plan.n_slices * max(1, len(shapes) - 1))
    budget = threads.useful_threads(budget * step_flops, budget)
    if budget == 1:
        return 1
    one = contraction_workspace_bytes(eq, shapes, path, plan.labels, plan.blocks, dtype, 1,
                                      dtypes)
    sizes = label_sizes(eq, shapes)
    out_bytes = np.dtype(dtype).itemsize * math.prod(sizes[c] for c in split_equation(eq)[1])
    return slice_workers(plan.n_slices, splits_result(eq, sizes, plan.labels, plan.blocks),
                         one, out_bytes, share, budget)


@register_pass("slicing", options=("path_time", "path_cache"))
def slicing(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Slice multi-operand einsums whose workspace exceeds their share of
    ``ctx.memory_limit``."""
    limit = ctx.memory_limit
    H = G if limit is None else ir.copy_graph(G)    # without a limit ``G`` is returned as is
    candidates = [n for n in ir.topo_order(G)
                  if G.nodes[n]["op"] == "einsum" and G.in_degree(n) > 2] if limit else []
    records, repathed = [], []
    if limit is not None:
        budget = threads.budget_for(ctx.options.get("threads"), local=False)[0] \
            if ctx.slices_at_once else 1
        for n in candidates:
            rec = _slice_node(G, n, int(limit), ctx.optimize, budget, ctx.options,
                              ctx.path_seconds.get(n, 0.0), ctx.rates, ctx.host_objects)
            if rec is None:
                continue
            if rec["slices"]:
                value = rec.pop("contraction")
                records.append(rec)
            else:  # the path reordered, or searched again, fits without slicing
                value = Contraction.of_node(G, n, ctx.rates, rec["path"])
                repathed.append({"node": n, "path": rec["path"],
                                 "reordered": rec.get("reordered", False),
                                 "largest_intermediate_bytes": rec["largest_intermediate_bytes"]})
            H.nodes[n]["attrs"] = dict(H.nodes[n]["attrs"], contraction=value)
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
