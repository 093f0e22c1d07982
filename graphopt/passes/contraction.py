"""``contraction``: merge einsum chains into one contraction, order it with opt_einsum, and
split it back into pairwise ``einsum`` nodes (DESIGN §4).

Each group of einsums (``einsum_groups``: a tree joined through single-use intermediates, of
one non-bool dtype) becomes one equation over its external operands; opt_einsum picks the
order (``ctx.optimize``); the result is emitted as pairwise steps. The FLOPs (counted as
opt_einsum counts them, ``cost.node_flops``) never exceed the user's own order: where
theirs is as good, their nodes stay. ``ctx.memory_limit`` (bytes) bounds every
intermediate a group creates; where no pairwise order fits, the group stays one
multi-operand einsum whose ``path`` attr is the best unconstrained path, for the
``slicing`` pass. Where the graph is this one contraction of inputs
(``ctx.whole_contraction``, ``manager.CONTRACTION_ONLY_PIPELINE``), the group also stays
one node with its ``path``, run by the contraction program: pairwise nodes would buy
nothing there but compile time.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np
from opt_einsum import paths as oe_paths

from .. import ir
from ..analysis import cost
from ..contract.groups import Merged, find_groups, merge
from ..contract.paths import Steps, combo_cost, label_sizes, left_to_right, left_to_right_cost, play
from ..contract.search import anytime as path_search
from ..contract.search import budget as search_budget
from ..errors import GraphError
from ..ir import einsum as einsum_mod
from .manager import PassResult, register_pass

# optimize="auto": exhaustive search up to AUTO_OPTIMAL_MAX operands, dynamic programming
# up to AUTO_DP_MAX, the anytime search (``path_search``, within the compile's path_time)
# beyond. optimize="hyper" is the anytime search at any size.
AUTO_OPTIMAL_MAX = 4
AUTO_DP_MAX = 12
# Where the chosen search finds no order within the memory limit, dynamic programming and
# a two-way branch search are tried up to these sizes.
LIMIT_DP_MAX = 16
LIMIT_BRANCH_MAX = 10
LIMIT_GREEDY_MAX = 64

# ------------------------------------------------------------------------------------ paths


ANYTIME = "anytime"   # optimizer_for's answer for the anytime search (``path_search``)


def optimizer_for(optimize, n_operands: int):
    """``(search function, its name)`` for ``ctx.optimize`` on ``n_operands`` operands; the
    function is ``ANYTIME`` for ``path_search.find_path``."""
    if isinstance(optimize, oe_paths.PathOptimizer):
        return optimize, type(optimize).__name__
    if optimize == "auto":
        optimize = ("optimal" if n_operands <= AUTO_OPTIMAL_MAX else
                    "dp" if n_operands <= AUTO_DP_MAX else "hyper")
    if optimize == "hyper":
        return ANYTIME, ANYTIME
    if isinstance(optimize, str):
        try:
            return oe_paths.get_path_fn(optimize), optimize
        except KeyError:
            pass
    raise GraphError(f"optimize={optimize!r} is not a contraction path search; use 'auto', "
                     "'hyper', "
                     f"{', '.join(repr(k) for k in oe_paths._PATH_OPTIONS if k != 'auto')} "
                     "or an opt_einsum PathOptimizer")


def fallbacks(n_operands: int) -> list[str]:
    """Searches to try where the chosen one finds no order within the memory limit."""
    return [name for name, most in (("dp", LIMIT_DP_MAX), ("branch-2", LIMIT_BRANCH_MAX))
            if 2 < n_operands <= most]


def search(fn, m: Merged, memory_limit: int | None) -> Steps | None:
    """Run one path search; None where it finds no order under ``memory_limit``."""
    if len(m.terms) <= 2:
        path = [tuple(range(len(m.terms)))]
    else:
        try:
            path = fn([set(t) for t in m.terms], set(m.output), m.sizes, memory_limit)
        except RuntimeError:  # dynamic programming: nothing fits the limit
            return None
    return play(m.terms, m.output, m.sizes, path)


# ------------------------------------------------------------------------------------- pass


def user_cost(G, group: list[int], written=None) -> tuple[int, int, int]:
    """FLOPs, largest intermediate and elements written (elements) of ``group`` as the user
    wrote it; a multi-operand einsum counts along its ``path`` attr, else left to right
    (``written``: that order's ``left_to_right_cost`` already counted, for a group of one
    einsum)."""
    if written is not None and len(group) == 1 and not G._node[group[0]]["attrs"].get("path"):
        return written        # (its FLOPs are what counting the node's finds: the same rule)
    flops = sum(cost.node_flops(G, n) for n in group)
    largest = max((math.prod(G.nodes[n]["shape"]) for n in group[1:]), default=0)
    write = 0
    for n in group:
        d = G.nodes[n]
        if d["op"] == "einsum" and G.in_degree(n) > 2:
            eq = d["attrs"]["equation"]
            ins, out = einsum_mod.split(eq)
            sizes = label_sizes(eq, [G.nodes[u]["shape"] for u in ir.operands(G, n)])
            path = d["attrs"].get("path")
            if path:
                s = play(ins, out, sizes, path)
                big, wrote = s.largest, s.write
            else:
                _, big, wrote = (written if written is not None and len(group) == 1 else
                                 left_to_right_cost(ins, out, sizes))
            largest = max(largest, big)
            write += wrote
        else:
            write += math.prod(d["shape"])
    return flops, largest, write


def _emit_pairwise(H, m: Merged, steps: Steps, operands: list[int], src) -> int:
    items = list(operands)
    for inds, picked, result in steps.steps:
        args = [items[i] for i in inds]
        for i in reversed(inds):
            items.pop(i)
        eq = einsum_mod.first_use_equation(picked, result)
        items.append(ir.add_op(H, "einsum", args, {"equation": eq}, src=src))
    return items[0]


def _size(elements: int, itemsize: int) -> dict:
    return {"elements": int(elements), "bytes": int(elements) * itemsize}


def _unconstrained(fn, m: Merged, ctx) -> tuple[Steps | None, dict | None]:
    """The chosen search's path without a memory limit, and the anytime search's record.
    Under ``memory_limit`` the anytime search gets ``LIMITED_UNSLICED_SHARE`` of a
    ``path_time`` the user set: a group that must be sliced is searched again with its
    slices (the slicing pass), within what this search left."""
    if fn is ANYTIME and len(m.terms) > 2:
        budget = ctx.options.get("path_time")
        if budget is not None and ctx.memory_limit is not None:
            budget = budget * search_budget.LIMITED_UNSLICED_SHARE
        return path_search.find_path(m.terms, m.output, m.sizes, time_budget=budget,
                                     cache=ctx.options.get("path_cache", True),
                                     combo_rate=ctx.combo_rate)
    return search(fn, m, None), None


def _needs_slicing(m: Merged, rec: dict, free: Steps | None, written, itemsize: int,
                   memory_limit: int, limit: int) -> Steps:
    """One multi-operand node along the cheaper of the unconstrained path and the written
    order (``written``: its ``left_to_right_cost``, or None), for the slicing pass."""
    written = written or left_to_right_cost(m.terms, m.output, m.sizes)
    best = free
    if best is None or combo_cost(written[0], written[2]) < best.combo:
        best = play(m.terms, m.output, m.sizes, left_to_right(len(m.terms)))
    rec.update(decision="needs slicing", path=best.path, flops_after=best.flops,
               largest_intermediate_after=_size(best.largest, itemsize),
               reason=f"no pairwise order keeps every intermediate within "
                      f"{memory_limit} bytes ({limit} elements)")
    whole = [(tuple(range(len(m.terms))), m.terms, m.output)]
    return Steps(best.path, whole, best.flops, best.largest, False, best.write)


def _plan_group(G, group: list[int], ctx) -> tuple[Merged, dict, Steps | None]:
    """Decide what to do with one group: ``(merged, record, steps)``; ``steps`` is None where
    the user's nodes stay. Candidates are compared by ``Steps.combo`` (FLOPs plus 64 per
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
    free, search_rec = _unconstrained(fn, m, ctx)
    if search_rec is not None:
        name = search_rec["searcher"]

    def fits(s):
        return s is not None and s.pairwise and (limit is None or s.largest <= limit)

    def attempt(f):
        # opt_einsum's limit covers the final result too, which exists in any order: the
        # branch searches exempt a last pair that exceeds it, dynamic programming does not.
        # Greedy under a limit is opt_einsum's branch search, cubic in the operand count:
        # on large groups run plain greedy and check the limit afterwards. The anytime
        # search takes no limit: its path is checked afterwards.
        lim = limit
        if limit is None or f is ANYTIME:
            return free
        if f is oe_paths.dynamic_programming or isinstance(f, oe_paths.DynamicProgramming):
            lim = max(limit, math.prod(d["shape"]))
        elif f is oe_paths.greedy and len(m.terms) > LIMIT_GREEDY_MAX:
            return free
        return search(f, m, lim)

    found = attempt(fn)
    if limit is not None and not fits(found):
        for alt in fallbacks(len(m.terms)):
            s = attempt(oe_paths.get_path_fn(alt))
            if fits(s) and (not fits(found) or s.combo < found.combo):
                found, name = s, f"{name}, then {alt}"
    user_fits = limit is None or user_largest <= limit
    # (combo cost, preference on ties, steps): the user's pairwise nodes win ties.
    cands = [(user_combo, 0 if user_pairwise else 3, None)] if user_fits else []
    if fits(found):
        cands.append((found.combo, 1, found))
    if ltr is not None and (limit is None or ltr[1] <= limit):
        cands.append((combo_cost(ltr[0], ltr[2]), 2, "written"))
    rec = {"root": root, "ops": [G.nodes[n]["op"] for n in group], "operands": len(m.terms),
           "equation": m.equation, "optimizer": name, "flops_before": user_flops,
           "largest_intermediate_before": _size(user_largest, itemsize)}
    if search_rec is not None:
        rec["search"] = search_rec
    if len(m.terms) > 2:   # the anytime search started from greedy: it has the figure
        rec["flops_greedy"] = ((search_rec or {}).get("greedy_flops") or
                               search(oe_paths.greedy, m, None).flops)
    if not cands:  # nothing pairwise fits the limit: one multi-operand node, sliced later
        return m, rec, _needs_slicing(m, rec, free, ltr, itemsize, ctx.memory_limit, limit)
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
        return m, rec, None
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
    return m, rec, steps


@register_pass("contraction", options=("path_time", "path_cache"))
def contraction(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Merge, reorder and re-split einsum groups (see the module docstring).

    Details: ``flops_before``/``flops_after`` (the whole graph, ``cost.graph_flops``),
    ``largest_intermediate_before``/``_after`` (over the groups, elements and bytes),
    ``path`` (per rewritten group root), ``merged`` (groups rewritten), ``groups`` (one
    record per group), ``kept_user_order`` and ``needs_slicing``."""
    search_budget.check_time_budget(ctx.options.get("path_time"))
    H = ir.copy_graph(G)
    replaced: dict[int, int] = {}
    records = []
    for group in find_groups(G):
        m, rec, steps = _plan_group(G, group, ctx)
        records.append(rec)
        if steps is None:
            continue
        root = group[0]
        rd = G.nodes[root]
        operands = [replaced.get(u, u) for u in m.operands]
        one_node = rec["decision"] == "needs slicing" or ctx.whole_contraction
        spent = rec.get("search", {}).get("seconds", 0.0)
        # (``merge`` read a group of one einsum's operands from ``G``: ``m.operands``)
        if one_node and group == [root] and operands == m.operands:
            # one einsum stays one node, now with its path: the node itself is kept (its
            # operand edges, often hundreds, are not rebuilt); verification re-infers it
            nd = H.nodes[root]
            nd["attrs"] = dict(nd["attrs"], equation=m.equation, path=steps.path)
            rec["node"] = root
            rec["emitted"] = "one node along the path"
            replaced[root] = root
            ctx.path_seconds[root] = spent
            continue
        if one_node:
            new = ir.add_op(H, "einsum", operands, {"equation": m.equation, "path": steps.path},
                            src=rd["src"])
            rec["node"] = new
            rec["emitted"] = "one node along the path"
            ctx.path_seconds[new] = spent
        else:
            new = _emit_pairwise(H, m, steps, operands, rd["src"])
        nd = H.nodes[new]
        if (nd["shape"], nd["dtype"]) != (rd["shape"], rd["dtype"]):
            raise GraphError(f"contraction rebuilt {m.equation!r} as {nd['shape']} "
                             f"{nd['dtype']}, expected {rd['shape']} {rd['dtype']}",
                             op="einsum", src=rd["src"], node=root)
        if "name" in rd:
            nd["name"] = rd["name"]
        ir.replace_uses(H, root, new)
        H.remove_nodes_from(group)
        replaced[root] = new
    if replaced:
        ir.drop_derived(H)

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
    }
    return PassResult(H, details)
