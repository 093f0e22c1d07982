"""``rematerialize``: under ``memory_limit``, recompute values instead of keeping them alive.

Runs after ``schedule`` and before ``memory``. Where the arena the memory pass would plan
for the execution order exceeds the budget (``memory_limit`` less the most a step will
allocate beside the arena and the call's own objects, ``workspace_reserve``), values held
across the peak are *evicted*: their later readers read a copy recomputed just before them
(``recompute``: the orders, their live bytes, and the solvers that search them). A value
with no reader before the peak is only moved, at no cost.

The greedy solver runs first (cheap, and enough a little under the arena); where it falls
short, the checkpoint solver (revolve's family: every held value recomputed from the
inputs, then the checkpoints that save the most FLOPs kept while the budget holds). The
live bytes of each candidate order are exact; the arena itself (in-place reuse, best-fit
offsets) is measured with the memory pass's own functions, and the steps the copies add
count their objects (``Problem.added_objects``). A graph whose budget cannot be met keeps the order
that lowered its arena most; ``compile`` then refuses it before running, naming the step
that does not fit. The record names the solver and how far the arena is above
``floor_bytes``, a lower bound no order beats.
"""

from __future__ import annotations

import networkx as nx

from .. import ir
from ..analysis.call_bytes import plan_objects_bytes
from ..analysis.liveness import assign_arena_offsets, execution_order, liveness_intervals
from .manager import PassResult, register_pass
from .memory import find_inplace
from .recompute import Problem, Rebuilt, checkpoint_search, evict_greedily, floor_bytes

# rounds of "evict until the live bytes fit, then measure the arena": best-fit offsets can
# leave the arena above the live peak, and each round lowers the live target by that gap
ARENA_ROUNDS = 4
# the recomputed values the record lists, most bytes first
LISTED = 64


def _apply(G: nx.MultiDiGraph, r: Rebuilt) -> tuple[nx.MultiDiGraph, dict[int, int]]:
    """A copy of ``G`` running ``r``: each clone a new node, each read of a copy an edge from
    it, moved values removed; the order in ``graph["schedule"]``. Returns (graph, item
    index -> node id)."""
    H = ir.copy_graph(G)
    ir.drop_derived(H)
    node_of: dict[int, int] = {}
    for i, item in enumerate(r.items):
        if not isinstance(item, tuple):
            node_of[i] = item
            continue
        d = G.nodes[item[1]]
        node_of[i] = ir.add_node(H, d["op"], [node_of[j] for j in r.reads[i]], d["shape"],
                                 d["dtype"], d["attrs"], src=d.get("src"))
        H.nodes[node_of[i]]["recomputes"] = item[1]
    for i, item in enumerate(r.items):
        if isinstance(item, tuple):
            continue
        want = [node_of[j] for j in r.reads[i]]
        if want != ir.operands(H, item):
            for u in set(H.predecessors(item)):
                H.remove_edges_from([(u, item, k) for k in list(H[u][item])])
            for k, u in enumerate(want):
                H.add_edge(u, item, arg=k)
    H.remove_nodes_from(r.moved)
    H.graph["schedule"] = [node_of[i] for i in range(len(r.items))]
    return H, node_of


def arena_bytes(H: nx.MultiDiGraph) -> int:
    """The arena the memory pass plans for ``H`` in its execution order."""
    order = execution_order(H)
    intervals = liveness_intervals(H, order)
    sizes = {n: ir.nbytes(H, n) for n in intervals}
    return assign_arena_offsets(intervals, sizes, find_inplace(H, order, intervals, sizes))[1]


def _checkpointed(p: Problem, goal: int):
    found = checkpoint_search(p, goal)
    if found is None:
        return None, None
    r, _, how = found
    return r, f"checkpoints ({how})"


def _fit(G, p: Problem, budget: int, before: int, search) -> tuple:
    """``(need, arena, graph, (rebuilt, node ids) or None, solver)``: the least ``need``
    (the arena, and the objects of the steps the copies add: ``Problem.added_objects``)
    ``search(goal)`` (a rebuilt order and the solver's name, or None) reaches in
    ``ARENA_ROUNDS`` rounds, each aiming lower by what the last left above the budget
    (best-fit offsets can leave the arena above the live peak)."""
    goal, best = budget, (before, before, G, None, None)
    for _ in range(ARENA_ROUNDS):
        r, solver = search(goal)
        if r is None:
            break
        if r.clones or r.moved:
            H, node_of = _apply(G, r)
            arena = arena_bytes(H)
            need = arena + p.added_objects(r)
            if need < best[0]:
                best = (need, arena, H, (r, node_of), solver)
        else:
            need = before
        if need <= budget or r.peak > goal:
            break
        goal -= need - budget
    return best


def workspace_reserve(G: nx.MultiDiGraph, ctx) -> int:
    """The bytes of ``memory_limit`` kept free of the arena: the most a step will allocate
    beside it (``ctx.workspace_of``, the backend's prediction: its kernel's workspace and
    its call's objects) and the call's own objects (``plan_objects_bytes``), unless that
    alone reaches the limit (no arena then helps: compile refuses the plan, naming the
    step)."""
    if ctx.workspace_of is None:
        return 0
    steps = [n for n, d in G.nodes(data=True) if d["op"] not in ("input", "const")]
    most = max((ctx.workspace_of(G, n) for n in steps), default=0) + (plan_objects_bytes(
        len(steps), len(G.graph["inputs"]), len(G.graph["outputs"])) if ctx.host_objects
        else 0)
    return most if most < ctx.memory_limit else 0


@register_pass("rematerialize")
def rematerialize(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Recompute values rather than hold them where the arena would exceed the budget.

    Details (only under ``memory_limit``): ``budget_bytes``, ``solver`` (``greedy``,
    ``checkpoints (exact)`` or ``checkpoints (greedy)``), ``floor_bytes`` and
    ``floor_gap`` (the arena over it), ``arena_before`` (no
    recomputation), ``arena_after``, ``added_objects_bytes`` (the objects of the steps the
    copies add), ``met`` (the two within the budget), ``recomputed`` (``{node, copy, op, shape,
    bytes, flops, src}`` per copy, most bytes first), ``moved`` (values computed later, at no
    cost), ``extra_flops``."""
    if ctx.memory_limit is None:
        return PassResult(G, {})
    budget = max(int(ctx.memory_limit) - workspace_reserve(G, ctx), 0)
    before = arena_bytes(G)
    details = {"budget_bytes": budget, "arena_before": before, "arena_after": before,
               "added_objects_bytes": 0, "met": before <= budget, "recomputed": [],
               "moved": [], "extra_flops": 0}
    if before <= budget:
        return PassResult(G, details)
    p = Problem(G)
    evicted: dict[int, tuple] = {}
    best = _fit(G, p, budget, before, lambda goal: (evict_greedily(p, goal, evicted), "greedy"))
    if best[0] > budget:
        found = _fit(G, p, budget, before, lambda goal: _checkpointed(p, goal))
        if found[0] < best[0]:
            best = found
    need, arena, H, applied, solver = best
    floor = floor_bytes(G)
    details.update(solver=solver, floor_bytes=floor,
                   floor_gap=round(arena / floor, 3) if floor else None)
    if applied is None:
        return PassResult(G, details)
    r, node_of = applied
    copies = sorted(((u, node_of[i]) for u, i in r.recomputations()),
                    key=lambda c: (-ir.nbytes(G, c[0]), c))
    details.update(
        arena_after=arena, added_objects_bytes=need - arena, met=need <= budget,
        extra_flops=p.extra_flops(r),
        recomputed=[{"node": u, "copy": c, "op": G.nodes[u]["op"],
                     "shape": list(G.nodes[u]["shape"]), "bytes": ir.nbytes(G, u),
                     "flops": p.flops[u], "src": G.nodes[u].get("src")}
                    for u, c in copies[:LISTED]],
        recomputed_count=len(copies), recomputed_bytes=sum(ir.nbytes(G, u) for u, _ in copies),
        moved=sorted(r.moved))
    return PassResult(H, details)
