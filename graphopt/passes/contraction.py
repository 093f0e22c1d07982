"""``contraction``: give every einsum node its contraction, merging einsum chains into one
contraction and ordering it (docs/ARCHITECTURE.md, Passes).

Each group of einsums (``contraction.groups``: a tree joined through single-use intermediates,
of one non-bool dtype) becomes one equation over its external operands; the search
``ctx.optimize`` names (``contraction.search.choose``) orders it, and the result is emitted as
pairwise steps. The FLOPs (counted as opt_einsum counts them, ``cost.node_flops``) never
exceed the user's own order: where theirs is as good, their nodes stay. ``ctx.memory_limit``
(bytes) bounds every intermediate a group creates; where no pairwise order fits, or where the
pairwise steps' intermediates would hold more than the limit at once, the group stays one
multi-operand einsum along its best path, for the ``slicing`` pass to bound. Where the graph
is this one contraction of inputs (``ctx.whole_contraction``,
``manager.CONTRACTION_ONLY_PIPELINE``), the group also stays one node, run by the
contraction program: pairwise nodes would buy nothing there but compile time.

Every einsum node leaves the pass holding its ``Contraction`` (``attrs["contraction"]``): the
path it runs along and each step's form by the backend's rates (``ctx.rates``). Below
``opt_level`` 2 the pass merges and reorders nothing: each einsum runs as written, a
multi-operand one along opt_einsum's greedy path (``paths.default_path``).
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
from opt_einsum import paths as oe_paths

from .. import ir
from ..analysis import cost
from ..analysis.liveness import held_around
from ..contraction.groups import Merged, find_groups, merge
from ..contraction.paths import (
    Steps,
    combo_cost,
    left_to_right,
    left_to_right_cost,
    live_peak,
    play,
)
from ..contraction.search import budget as search_budget
from ..contraction.search.choose import (
    GivenPath,
    best_path,
    fits_limit,
    optimizer_for,
    search,
    searched,
)
from ..contraction.value import Contraction
from ..errors import GraphError
from ..ir import einsum as einsum_mod
from .manager import PassResult, register_pass

# ------------------------------------------------------------------------------------- pass


def user_cost(G, group: list[int], written=None) -> tuple[int, int, int]:
    """FLOPs, largest intermediate and elements written (elements) of ``group`` as the user
    wrote it; a multi-operand einsum counts along the path of the contraction it holds, else
    left to right (``written``: that order's ``left_to_right_cost`` already counted, for a
    group of one einsum)."""
    if written is not None and len(group) == 1 and \
            "contraction" not in G._node[group[0]]["attrs"]:
        return written        # (its FLOPs are what counting the node's finds: the same rule)
    flops = sum(cost.node_flops(G, n) for n in group)
    largest = max((math.prod(G.nodes[n]["shape"]) for n in group[1:]), default=0)
    write = 0
    for n in group:
        d = G.nodes[n]
        if d["op"] == "einsum" and G.in_degree(n) > 2:
            eq = d["attrs"]["equation"]
            ins, out = einsum_mod.split(eq)
            held = d["attrs"].get("contraction")
            if held is not None:
                s = play(ins, out, held.sizes, held.path)
                big, wrote = s.largest, s.write
            else:
                _, big, wrote = (written if written is not None and len(group) == 1 else
                                 cost.written_order_cost(eq, tuple(
                                     tuple(G._node[u]["shape"]) for u in ir.operands(G, n))))
            largest = max(largest, big)
            write += wrote
        else:
            write += math.prod(d["shape"])
    return flops, largest, write


def _emit_pairwise(H, m: Merged, steps: Steps, operands: list[int], src, rates) -> list:
    """One einsum node per step of ``steps``, each with its contraction; the nodes made, in
    order (the last computes the group's result)."""
    items, made = list(operands), []
    for inds, picked, result in steps.steps:
        args = [items[i] for i in inds]
        for i in reversed(inds):
            items.pop(i)
        eq = einsum_mod.first_use_equation(picked, result)
        new = ir.add_op(H, "einsum", args, {"equation": eq}, src=src)
        H.nodes[new]["attrs"]["contraction"] = Contraction.of_node(H, new, rates)
        items.append(new)
        made.append(new)
    return made


def _size(elements: int, itemsize: int) -> dict:
    return {"elements": int(elements), "bytes": int(elements) * itemsize}


def _unconstrained(m: Merged, ctx) -> tuple[Steps | None, dict | None]:
    """The chosen search's path without a memory limit, and the anytime search's record.
    Under ``memory_limit`` the anytime search gets ``LIMITED_UNSLICED_SHARE`` of a
    ``path_time`` the user set: a group that must be sliced is searched again with its
    slices (the slicing pass), within what this search left."""
    budget = ctx.options.get("path_time")
    if budget is not None and ctx.memory_limit is not None:
        budget = budget * search_budget.LIMITED_UNSLICED_SHARE
    return best_path(m.terms, m.output, m.sizes, ctx.optimize, budget,
                     ctx.options.get("path_cache", True), ctx.rates.combo)


def _one_node_path(m: Merged, free: Steps | None, written) -> Steps:
    """The path of a group kept as one node for the slicing pass to bound: the cheaper of
    the unconstrained path and the written order (``written``: its ``left_to_right_cost``,
    or None)."""
    written = written or left_to_right_cost(m.terms, m.output, m.sizes)
    best = free
    if best is None or combo_cost(written[0], written[2]) < best.combo:
        best = play(m.terms, m.output, m.sizes, left_to_right(len(m.terms)))
    return best


def _needs_slicing(m: Merged, rec: dict, best: Steps, itemsize: int, memory_limit: int,
                   limit: int) -> Steps:
    """One multi-operand node along ``best`` (``_one_node_path``), for the slicing pass."""
    rec.update(decision="needs slicing", path=best.path, flops_after=best.flops,
               largest_intermediate_after=_size(best.largest, itemsize),
               reason=f"no pairwise order keeps every intermediate within "
                      f"{memory_limit} bytes ({limit} elements)")
    whole = [(tuple(range(len(m.terms))), m.terms, m.output)]
    return Steps(best.path, whole, best.flops, best.largest, False, best.write)


def _plan_group(G, group: list[int], ctx) -> tuple[Merged, dict, Steps | None, Steps | None]:
    """Decide what to do with one group: ``(merged, record, steps, whole)``; ``steps`` is
    None where the user's nodes stay; ``whole``, under ``memory_limit``, the path it takes
    as one node (``_one_node_path``). Candidates are compared by ``Steps.combo`` (FLOPs plus 64 per
    element written); the user's pairwise nodes win ties."""
    root = group[0]
    d = G.nodes[root]
    m = merge(G, group)
    itemsize = np.dtype(d["dtype"]).itemsize
    limit = None if ctx.memory_limit is None else int(ctx.memory_limit) // itemsize
    user_pairwise = all(G.in_degree(n) <= 2 for n in group)
    # the written order of one multi-operand einsum: (flops, largest, write), memoized
    # where counting the node's FLOPs finds it
    ltr = (cost.written_order_cost(d["attrs"]["equation"],
                                   tuple(tuple(G._node[u]["shape"]) for u in m.operands))
           if len(group) == 1 and not user_pairwise else None)
    user_flops, user_largest, user_write = user_cost(G, group, ltr)
    user_combo = combo_cost(user_flops, user_write)
    fn, name = optimizer_for(ctx.optimize, len(m.terms))
    if isinstance(fn, GivenPath):
        return _given(m, fn, {"root": root, "ops": [G.nodes[n]["op"] for n in group],
                              "flops_before": user_flops,
                              "largest_intermediate_before": _size(user_largest, itemsize)},
                      limit, itemsize, ctx)
    free, search_rec = _unconstrained(m, ctx)
    if search_rec is not None:
        name = search_rec["searcher"]

    def fits(s):
        return fits_limit(s, limit)

    found, greedy, name = searched(m.terms, m.output, m.sizes, math.prod(d["shape"]), limit,
                                   fn, name, free)
    user_fits = limit is None or user_largest <= limit

    def allowed(flops):
        # where the user's order fits, no other may cost more FLOPs (the combo may still
        # prefer fewer elements written among those that cost no more)
        return not user_fits or flops <= user_flops

    # (combo cost, preference on ties, steps): the user's pairwise nodes win ties.
    cands = [(user_combo, 0 if user_pairwise else 3, None)] if user_fits else []
    if fits(found) and allowed(found.flops):
        cands.append((found.combo, 1, found))
    if ltr is not None and (limit is None or ltr[1] <= limit) and allowed(ltr[0]):
        cands.append((combo_cost(ltr[0], ltr[2]), 2, "written"))
    rec = {"root": root, "ops": [G.nodes[n]["op"] for n in group], "operands": len(m.terms),
           "equation": m.equation, "optimizer": name, "flops_before": user_flops,
           "largest_intermediate_before": _size(user_largest, itemsize)}
    if search_rec is not None:
        rec["search"] = search_rec
    if len(m.terms) > 2:   # the anytime search started from greedy: it has the figure
        rec["flops_greedy"] = greedy.flops if greedy is not None else (
            (search_rec or {}).get("greedy_flops") or
            search(oe_paths.greedy, m.terms, m.output, m.sizes, None).flops)
    if not cands:  # nothing pairwise fits the limit: one multi-operand node, sliced later
        whole = _one_node_path(m, free, ltr)
        return m, rec, _needs_slicing(m, rec, whole, itemsize, ctx.memory_limit, limit), whole
    _, _, steps = min(cands, key=lambda c: c[:2])
    if steps == "written":
        steps = play(m.terms, m.output, m.sizes, left_to_right(len(m.terms)))
    if steps is None:
        if fits(found):
            reason = (f"user order costs {user_flops} FLOPs, {user_write} elements written "
                      f"(combo {user_combo}) <= {found.combo} of the best path found ({name})")
        else:
            reason = (f"no other order found ({name}) fits: pairwise, intermediates within "
                      f"{limit} elements (the user's largest is {user_largest})")
        rec.update(decision="kept user order", reason=reason, flops_after=user_flops,
                   largest_intermediate_after=rec["largest_intermediate_before"])
        return m, rec, None, None
    flops = steps.flops
    if not user_fits:
        reason = (f"the user's order exceeds the memory limit ({user_largest} > {limit} "
                  f"elements); this one fits with {flops} FLOPs (user: {user_flops})")
    elif steps.combo < user_combo:
        reason = (f"{flops} FLOPs, {steps.write} elements written (combo {steps.combo}) < "
                  f"the user order's {user_flops}, {user_write} (combo {user_combo})")
    else:
        reason = f"{flops} FLOPs, as the user's multi-operand einsum, now pairwise"
    rec.update(decision="reordered", reason=reason, flops_after=flops, path=steps.path,
               largest_intermediate_after=_size(steps.largest, itemsize))
    whole = _one_node_path(m, free, ltr) if limit is not None and len(m.terms) > 2 else None
    return m, rec, steps, whole


def _given(m: Merged, fn: GivenPath, rec: dict, limit, itemsize,
           ctx) -> tuple[Merged, dict, Steps, Steps]:
    """A group contracted along the path the caller gave (``optimize=`` an explicit path),
    and no other; under a limit it does not meet, one node along it for the slicing pass.
    ``rec``: the group's record so far (root, ops, what the user's order costs)."""
    steps = play(m.terms, m.output, m.sizes, fn.path)
    rec = dict(rec, operands=len(m.terms), equation=m.equation, optimizer="the given path")
    if limit is not None and steps.largest > limit:
        return m, rec, _needs_slicing(m, rec, steps, itemsize, ctx.memory_limit, limit), steps
    rec.update(decision="reordered", reason="the path given (optimize=)",
               flops_after=steps.flops, path=steps.path,
               largest_intermediate_after=_size(steps.largest, itemsize))
    return m, rec, steps, steps


def _pairwise_peak_bytes(H, m: Merged, steps: Steps, made: list[int], ctx) -> int:
    """The most bytes a group's pairwise nodes ``made`` (one per step of ``steps``) hold at
    once beside the group's operands and result: the intermediates live at a step, and the
    workspace the backend predicts its kernel allocates (``ctx.workspace_of``)."""
    results = [ir.nbytes(H, n) for n in made[:-1]] + [0]    # (the result: held around)
    workspace = [ctx.workspace_of(H, n) for n in made] if ctx.workspace_of else None
    return live_peak(steps.steps, len(m.terms), results, workspace)


def _pairwise_over_limit(G, H, group, m: Merged, rec: dict, steps: Steps, made, ctx) -> bool:
    """Under ``memory_limit``, whether a group of three or more operands just emitted as
    pairwise nodes ``made`` would hold more at once, with their kernels' workspace, than
    the limit leaves beside its operands and result (each intermediate fits; together they
    do not): as one node along its path, the slicing pass bounds what it holds. The
    reason goes into the group's record."""
    if ctx.memory_limit is None or len(m.terms) <= 2:
        return False
    share = ctx.memory_limit - held_around(G, group[0], m.operands)
    held = _pairwise_peak_bytes(H, m, steps, made, ctx)
    if share <= 0 or held <= share:
        return False
    rec["reason"] = rec.get("reason", "") + (
        f" (one node along its path: as pairwise nodes it would hold {held} bytes at once, "
        f"over the {share} bytes memory_limit leaves beside its operands and result)")
    return True


def _plan_as_written(H, ctx) -> list[int]:
    """Give every einsum node of ``H`` without a contraction its own, along
    ``paths.default_path``; at ``opt_level`` 2 and above (an einsum outside every group),
    along its written order instead where that costs fewer FLOPs: the FLOPs never exceed
    the user's own order. The nodes given one."""
    planned = []
    for n, d in H.nodes(data=True):
        if d["op"] == "einsum" and "contraction" not in d["attrs"]:
            held = Contraction.of_node(H, n, ctx.rates)
            if ctx.opt_level >= 2 and H.in_degree(n) > 2:
                written = Contraction.of_node(H, n, ctx.rates, left_to_right(H.in_degree(n)))
                held = written if written.flops < held.flops else held
            d["attrs"] = dict(d["attrs"], contraction=held)
            planned.append(n)
    return planned


def _replace_group(G, H, group, m: Merged, rec: dict, steps: Steps, whole: Steps | None,
                   operands, ctx) -> int:
    """Emit ``group`` as ``steps`` into ``H`` (one node along the path, or pairwise nodes;
    one node along ``whole`` where the pairwise nodes would hold more than the memory limit
    leaves); the node that now computes its result."""
    root = group[0]
    rd = G.nodes[root]
    one_node = rec["decision"] == "needs slicing" or ctx.whole_contraction
    if not one_node:
        made = _emit_pairwise(H, m, steps, operands, rd["src"], ctx.rates)
        if _pairwise_over_limit(G, H, group, m, rec, steps, made, ctx):
            H.remove_nodes_from(made)
            one_node, steps = True, whole
            itemsize = np.dtype(G.nodes[root]["dtype"]).itemsize
            rec.update(path=whole.path, flops_after=whole.flops,
                       largest_intermediate_after=_size(whole.largest, itemsize),
                       reason=rec["reason"] + f"; as one node, {whole.flops} FLOPs")
        else:
            new = made[-1]
    spent = rec.get("search", {}).get("seconds", 0.0)
    if one_node:
        if group == [root] and operands == m.operands:
            # one einsum stays one node, now with its path: the node itself is kept (its
            # operand edges, often hundreds, are not rebuilt)
            new = root
            H.nodes[root]["attrs"] = dict(H.nodes[root]["attrs"], equation=m.equation)
        else:
            new = ir.add_op(H, "einsum", operands, {"equation": m.equation}, src=rd["src"])
        H.nodes[new]["attrs"]["contraction"] = Contraction.of_node(H, new, ctx.rates,
                                                                   steps.path)
        rec["node"] = new
        rec["emitted"] = "one node along the path"
        ctx.path_seconds[new] = spent
        if new == root:
            return new
    nd = H.nodes[new]
    if (nd["shape"], nd["dtype"]) != (rd["shape"], rd["dtype"]):
        raise GraphError(f"contraction rebuilt {m.equation!r} as {nd['shape']} "
                         f"{nd['dtype']}, expected {rd['shape']} {rd['dtype']}",
                         op="einsum", src=rd["src"], node=root)
    if "name" in rd:
        nd["name"] = rd["name"]
    ir.replace_uses(H, root, new)
    H.remove_nodes_from(group)
    return new


def _kept(H, group: list[int], rates) -> None:
    """The user's nodes of a group kept as written: each einsum along its own contraction's
    path, else its written order (left to right: what the pass counted for it)."""
    for n in group:
        d = H.nodes[n]
        if d["op"] == "einsum" and "contraction" not in d["attrs"]:
            path = left_to_right(H.in_degree(n))
            d["attrs"] = dict(d["attrs"], contraction=Contraction.of_node(H, n, rates, path))


@register_pass("contraction", options=("path_time", "path_cache"))
def contraction(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Give every einsum its contraction, merging and reordering groups at ``opt_level`` 2
    and above (see the module docstring).

    Details: ``flops_before``/``flops_after`` (the whole graph, ``cost.graph_flops``),
    ``largest_intermediate_before``/``_after`` (over the groups, elements and bytes),
    ``path`` (per rewritten group root), ``merged`` (groups rewritten), ``groups`` (one
    record per group), ``kept_user_order``, ``needs_slicing`` and ``planned`` (einsum nodes
    given a contraction as written: below opt_level 2, or outside every group)."""
    search_budget.check_time_budget(ctx.options.get("path_time"))
    H = ir.copy_graph(G)
    replaced: dict[int, int] = {}
    records = []
    for group in find_groups(G) if ctx.opt_level >= 2 else ():
        m, rec, steps, whole = _plan_group(G, group, ctx)
        records.append(rec)
        if steps is None:
            _kept(H, group, ctx.rates)
            continue
        operands = [replaced.get(u, u) for u in m.operands]
        replaced[group[0]] = _replace_group(G, H, group, m, rec, steps, whole, operands, ctx)
    if replaced:
        ir.drop_derived(H)
    planned = _plan_as_written(H, ctx)

    def largest(key):
        best = max(records, key=lambda r: r[key]["bytes"], default=None)
        return best[key] if best else {"elements": 0, "bytes": 0}

    details = {
        "flops_before": cost.graph_flops(G, ctx.counted_flops),
        "flops_after": cost.graph_flops(H, ctx.counted_flops),
        "largest_intermediate_before": largest("largest_intermediate_before"),
        "largest_intermediate_after": largest("largest_intermediate_after"),
        "path": {str(r["root"]): r["path"] for r in records if "path" in r},
        "merged": sum(r["decision"] != "kept user order" for r in records),
        "groups": records,
        "kept_user_order": [{"root": r["root"], "reason": r["reason"]} for r in records
                            if r["decision"] == "kept user order"],
        "needs_slicing": [{"node": r["node"], "root": r["root"], "path": r["path"],
                           "memory_limit": ctx.memory_limit,
                           "largest_intermediate": r["largest_intermediate_after"]}
                          for r in records if r["decision"] == "needs slicing"],
        "planned": planned,
    }
    return PassResult(H, details)
