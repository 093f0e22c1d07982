"""The reference interpreter: runs an IR node by node with NumPy. This is the spec.

Every pass and backend is tested against ``run_graph``. It checks that each value has
the shape and dtype the IR records, so the static rules and the semantics cannot drift.
"""

from __future__ import annotations

import warnings
from typing import Sequence

import networkx as nx
import numpy as np

from .. import ir
from ..analysis.liveness import execution_order, live_bytes
from ..errors import VALUE_ERRORS, GraphError
from ..runtime.signature import bind_inputs, restructure
from . import activations, ops


def eval_node(G: nx.MultiDiGraph, n: int, args: Sequence[np.ndarray]) -> np.ndarray:
    """The value of node ``n`` given its operand values (a fused node's: its sub-graph run
    here)."""
    d = G.nodes[n]
    try:
        with np.errstate(all="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", np.exceptions.ComplexWarning)
            out = np.asarray(run_graph(d["attrs"]["graph"], args)[0] if d["op"] == ops.FUSED
                             else ops.OPS[d["op"]].impl(list(args), d["attrs"]))
    except GraphError as e:
        raise e.located(op=d["op"], src=d.get("src"), node=n) from None
    except VALUE_ERRORS as e:
        # NumPy refusing a value (integer ** negative integer): the user's op, named
        raise GraphError(f"{type(e).__name__}: {e}", op=d["op"], src=d.get("src"),
                         node=n) from None
    if out.shape != tuple(d["shape"]) or out.dtype.name != d["dtype"]:
        raise GraphError(f"reference produced {out.shape} {out.dtype.name} but the IR records "
                         f"{tuple(d['shape'])} {d['dtype']}", op=d["op"], src=d.get("src"),
                         node=n)
    return out


def run_graph(G: nx.MultiDiGraph, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate ``G`` on ``inputs`` (in ``G.graph['inputs']`` order); returns the outputs in
    ``G.graph['outputs']`` order. Values are freed after their last use."""
    ins = G.graph["inputs"]
    if len(inputs) != len(ins):
        raise GraphError(f"graph takes {len(ins)} inputs, got {len(inputs)}")
    order = execution_order(G)
    remaining = _uses(G)
    env: dict[int, np.ndarray] = {}
    for nid, arr in zip(ins, inputs):
        env[nid] = np.asarray(arr)
    for n in order:
        if n not in env:
            env[n] = eval_node(G, n, [env[u] for u in ir.operands(G, n)])
        for u in ir.operands(G, n):
            remaining[u] -= 1
            if remaining[u] == 0:
                del env[u]
    return [env[o] for o in G.graph["outputs"]]


def _uses(G: nx.MultiDiGraph) -> dict[int, int]:
    """Per node, the reads that keep its value alive in ``run_graph`` (an output: one more,
    to the end)."""
    remaining = {n: G.out_degree(n) for n in G}
    for o in G.graph["outputs"]:
        remaining[o] += 1
    return remaining


def node_peak_bytes(G: nx.MultiDiGraph, n: int) -> int:
    """Bytes ``eval_node`` holds at once for node ``n`` (its result included): a fused
    node's body values (``run_graph_peak_bytes``), else what the op's NumPy form holds
    (``activations.impl_peak_bytes``)."""
    d = G.nodes[n]
    if d["op"] == ops.FUSED:
        return run_graph_peak_bytes(d["attrs"]["graph"])
    us = ir.operands(G, n)
    return activations.impl_peak_bytes(d["op"], d["shape"],
                                       G.nodes[us[0]]["dtype"] if us else d["dtype"],
                                       d["dtype"])


def run_graph_peak_bytes(G: nx.MultiDiGraph) -> int:
    """The most bytes of computed values ``run_graph`` holds at once on ``G``: each value
    from its evaluation to its last use (outputs to the end), and while an op runs the
    arrays its NumPy form holds (``activations.impl_peak_bytes``); inputs and constants not
    counted, a value NumPy returns as a view counted as new (an upper bound)."""
    order = execution_order(G)
    pos = {n: i for i, n in enumerate(order)}
    outs, end = set(G.graph["outputs"]), len(order) - 1
    computed = [n for n in order if G.nodes[n]["op"] not in ("input", "const")]
    intervals = {n: (pos[n], end if n in outs else max((pos[v] for v in G.successors(n)),
                                                       default=pos[n])) for n in computed}
    sizes = {n: ir.nbytes(G, n) for n in computed}
    live = live_bytes(intervals, sizes, len(order))
    # at a node's step: what is live then, its own result counted by its NumPy form instead
    return max((int(live[pos[n]]) - sizes[n] + node_peak_bytes(G, n) for n in computed),
               default=0)


def interpret(G: nx.MultiDiGraph, *args, **kwargs):
    """Run ``G`` on user arguments (positional in input order, or by name) and return the
    structure given to ``g.output``. Inputs are validated as a compiled plan validates them."""
    arrays = bind_inputs(G, args, kwargs)
    return restructure(G.graph["output_structure"], run_graph(G, arrays))
