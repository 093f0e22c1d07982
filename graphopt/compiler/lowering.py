"""Lowering: optimized IR + schedule + memory plan -> ``Plan`` of pre-bound steps.

Each node becomes one step whose kernel the backend supplies. Every value has a slot;
constants are pre-filled, inputs are bound per call. A graph output is written straight
into a fresh per-call array; an output that is an input, a constant, or listed twice gets a
copy step, so no returned array aliases user memory or another output.
"""

from __future__ import annotations

import networkx as nx

from .. import ir
from ..analysis import cost
from ..analysis.fused import member_ops
from ..analysis.liveness import execution_order, naive_layout
from ..runtime.kernel import Step
from ..runtime.plan import Plan


def lower(G: nx.MultiDiGraph, source_graph: nx.MultiDiGraph, backend, ctx, report) -> Plan:
    """IR -> ``Plan``: one step per computed node in execution order, each with its
    backend kernel, slots and arena offset; outputs get fresh arrays per call."""
    order = execution_order(G)
    mem = G.graph.get("arena_layout") or naive_layout(G, order)
    slot = {n: i for i, n in enumerate(order)}
    init_vals: list = [None] * len(order)
    nodes = G._node     # (networkx's plain dict: a network's hundreds of inputs pass here)
    for n in order:
        if nodes[n]["op"] == "const":
            init_vals[slot[n]] = backend.constant(nodes[n]["attrs"]["value"])

    outputs = G.graph["outputs"]
    direct_outputs = {o for o in outputs if nodes[o]["op"] not in ("input", "const")}
    steps: list[Step] = []
    for n in order:
        d = nodes[n]
        if d["op"] in ("input", "const"):
            continue
        is_out = n in direct_outputs
        k = backend.kernel(G, n, ctx)
        kinds = member_ops(G, n)
        srcs = (tuple(dict.fromkeys(d["attrs"].get("srcs", [d["src"]])))
                if d["op"] == "fused" else (d["src"],))
        steps.append(Step(index=len(steps), name=k.name, node=n, op_kinds=kinds, kernel=k,
                          in_slots=tuple(slot[u] for u in ir.operands(G, n)), out_slot=slot[n],
                          shape=tuple(d["shape"]), dtype=d["dtype"],
                          offset=None if is_out else mem.offsets.get(n), is_output=is_out,
                          flops=cost.node_flops(G, n), bytes=cost.node_bytes(G, n),
                          srcs=tuple(s for s in srcs if s)))

    output_slots, claimed = [], set()
    for o in outputs:
        if o in direct_outputs and o not in claimed:
            claimed.add(o)
            output_slots.append(slot[o])
            continue
        d = G.nodes[o]
        new_slot = len(init_vals)
        init_vals.append(None)
        k = backend.copy_kernel(d["shape"], d["dtype"])
        steps.append(Step(index=len(steps), name=f"copy_{o}", node=o, op_kinds=("copy",),
                          kernel=k, in_slots=(slot[o],), out_slot=new_slot,
                          shape=tuple(d["shape"]), dtype=d["dtype"], offset=None,
                          is_output=True, flops=0, bytes=2 * ir.nbytes(G, o),
                          srcs=(d["src"],) if d.get("src") else ()))
        output_slots.append(new_slot)

    arena_bytes = max((s.offset + s.nbytes for s in steps if s.offset is not None), default=0)
    return Plan(source_graph=source_graph, graph=G, steps=steps, memory=mem,
                arena_bytes=arena_bytes, backend=backend, pool=backend.pool,
                input_slots=[slot[i] for i in G.graph["inputs"]], output_slots=output_slots,
                init_vals=init_vals, report=report, options=ctx.options)
