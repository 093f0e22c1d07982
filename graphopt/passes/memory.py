"""``memory``: liveness over the schedule, in-place reuse, and arena offsets.

Liveness comes from ``graphopt.memory.liveness_intervals`` over the execution order (the
``schedule`` graph attr, else the topological order lowering would use). An elementwise
node takes over an operand's buffer where that operand dies at the node and has the same
byte size (both arena values: never an input, constant or output). Buffers then get arena
offsets by best fit, largest first (as XLA's heap simulator and TFLite's arena planner do),
64-byte aligned. The result is a ``liveness.ArenaLayout`` in ``graph["arena_layout"]``.
"""

from __future__ import annotations

import math

import networkx as nx
import numpy as np

from .. import ir
from ..analysis.liveness import (
    ALIGN,
    ArenaLayout,
    assign_arena_offsets,
    buffer_groups,
    execution_order,
    liveness_intervals,
    naive_bytes,
    peak_live_bytes,
)
from ..errors import GraphError
from ..ir import ops
from .manager import PassResult, register_pass


def writes_elementwise(G, n: int, k: int) -> bool:
    """Does node ``n`` read operand ``k`` element for element as it writes its result, so
    the result may overwrite it? Elementwise ops, and ``elementwise`` fused groups where
    operand ``k`` flows only through elementwise members (no transpose or broadcast)."""
    d = G.nodes[n]
    kind = ops.OPS[d["op"]].kind
    if kind == ops.ELEMENTWISE:
        return True
    if kind != ops.FUSED or d["attrs"].get("pattern") != "elementwise":
        return False
    sub = d["attrs"]["graph"]
    inp = sub.graph["inputs"][k]
    return all(ops.OPS[sub.nodes[m]["op"]].kind == ops.ELEMENTWISE
               for m in nx.descendants(sub, inp))


def _same_elements(operand_shape, shape) -> bool:
    """Does broadcasting map the operand's elements one to one onto the result's?"""
    if math.prod(operand_shape) != math.prod(shape):
        return False
    try:
        return np.broadcast_shapes(tuple(operand_shape), tuple(shape)) == tuple(shape)
    except ValueError:
        return False


def find_inplace(G, order: list[int], intervals: dict, sizes: dict) -> dict[int, int]:
    """``{node: operand}`` pairs where the node's result may take the operand's buffer:
    the node is elementwise (see ``writes_elementwise``), the operand is an arena value
    whose last use is this node, with the same byte size and element count."""
    pos = {n: i for i, n in enumerate(order)}
    taken: set[int] = set()
    inplace: dict[int, int] = {}
    for n in order:
        if n not in intervals:
            continue
        shape = G.nodes[n]["shape"]
        args = ir.operands(G, n)
        for u in dict.fromkeys(args):
            if u not in intervals or u in taken or intervals[u][1] != pos[n] or \
                    sizes[u] != sizes[n] or not _same_elements(G.nodes[u]["shape"], shape):
                continue
            if all(writes_elementwise(G, n, k) for k, a in enumerate(args) if a == u):
                inplace[n] = u
                taken.add(u)
                break
    return inplace


def check_layout(G, plan: ArenaLayout) -> None:
    """Raise ``GraphError`` unless ``plan`` is sound for ``G``: sizes match, offsets are
    aligned, no two values live at one step share a byte unless one took the other's buffer
    in place (and they meet only at that step), ``lower_bound <= planned <= naive``."""
    def fail(msg):
        raise GraphError(f"memory plan: {msg}")

    root = {}
    for n in plan.intervals:
        r = n
        while r in plan.inplace:
            r = plan.inplace[r]
        root[n] = r
    live = sorted(plan.intervals, key=lambda n: plan.intervals[n])
    for i, a in enumerate(live):
        if plan.sizes[a] != ir.nbytes(G, a) or plan.offsets[a] % ALIGN:
            fail(f"node {a} has size {plan.sizes[a]} at offset {plan.offsets[a]}")
        first, last = plan.intervals[a]
        for b in live[i + 1:]:
            if plan.intervals[b][0] > last:
                break
            if not plan.sizes[a] or not plan.sizes[b] or \
                    plan.offsets[a] + plan.sizes[a] <= plan.offsets[b] or \
                    plan.offsets[b] + plan.sizes[b] <= plan.offsets[a]:
                continue
            if root[a] != root[b] or plan.offsets[a] != plan.offsets[b] or \
                    plan.intervals[b][0] != last:
                fail(f"nodes {a} {plan.intervals[a]} and {b} {plan.intervals[b]}, both live, "
                     f"overlap at offsets {plan.offsets[a]} and {plan.offsets[b]}")
    top = max((plan.offsets[n] + plan.sizes[n] for n in plan.intervals), default=0)
    if not plan.lower_bound_bytes <= plan.planned_bytes == top <= plan.naive_bytes:
        fail(f"lower bound {plan.lower_bound_bytes}, planned {plan.planned_bytes} (arena top "
             f"{top}), naive {plan.naive_bytes} are out of order")


@register_pass("memory")
def memory(G: nx.MultiDiGraph, ctx) -> PassResult:
    """Plan the arena for the execution order; store it in ``graph["arena_layout"]``.

    Details: ``naive_bytes`` (every arena value in its own aligned buffer),
    ``planned_bytes`` (the arena), ``lower_bound_bytes`` (the most bytes live at one step),
    ``inplace`` (``[node, operand]`` pairs) and ``buffers`` (values after sharing)."""
    H = ir.copy_graph(G)
    order = execution_order(H)
    intervals = liveness_intervals(H, order)
    sizes = {n: ir.nbytes(H, n) for n in intervals}
    inplace = find_inplace(H, order, intervals, sizes)
    offsets, arena = assign_arena_offsets(intervals, sizes, inplace)
    plan = ArenaLayout(offsets=offsets, sizes=sizes,
                      naive_bytes=naive_bytes(sizes), planned_bytes=arena,
                      lower_bound_bytes=peak_live_bytes(intervals, sizes, inplace),
                      inplace=inplace,
                      intervals=intervals)
    H.graph["schedule"] = order
    H.graph["arena_layout"] = plan
    return PassResult(H, {"naive_bytes": plan.naive_bytes, "planned_bytes": plan.planned_bytes,
                          "lower_bound_bytes": plan.lower_bound_bytes,
                          "inplace": [[n, u] for n, u in inplace.items()],
                          "arena_values": len(intervals),
                          "buffers": len(buffer_groups(intervals, sizes, inplace))})
