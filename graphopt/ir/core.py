"""The IR: a ``networkx.MultiDiGraph`` with one node per op (docs/ARCHITECTURE.md, The IR).

Node attributes: ``op`` (str), ``shape`` (tuple of ints), ``dtype`` (numpy dtype name),
``attrs`` (dict), ``name`` (optional) and ``src`` (the user's ``file:line``). Operand ``k`` of
a node is an in-edge with ``arg=k``; ``x * x`` has two edges. Graph attributes ``inputs`` and
``outputs`` list node ids in declared order; ``output_structure`` says how ``outputs`` map
back onto what the user passed to ``g.output`` (one tensor, a tuple/list, or a dict).
Passes may leave ``schedule`` (an execution order) and ``arena_layout`` in the graph
attributes; a pass that changes nodes drops them.
"""

from __future__ import annotations

import hashlib
import heapq
import math
import weakref
from typing import Iterable

import networkx as nx
import numpy as np

from ..errors import GraphError
from . import ops

NODE_KEYS = ("op", "shape", "dtype", "attrs", "src")
# Graph attributes that describe one particular node numbering/order; they are derived
# facts that a structural change invalidates.
DERIVED_GRAPH_ATTRS = ("schedule", "arena_layout")


def new_graph(name: str = "graph") -> nx.MultiDiGraph:
    """An empty IR graph named ``name``."""
    G = nx.MultiDiGraph()
    G.graph.update(name=name, inputs=[], outputs=[], output_structure={"kind": "tensor"},
                   next_id=0)
    return G


def add_node(G: nx.MultiDiGraph, op: str, operands: Iterable[int], shape, dtype, attrs=None,
             *, name: str | None = None, src: str | None = None) -> int:
    """Append a node with its operand edges; returns the new node id."""
    node, succ, pred = G._node, G._succ, G._pred
    operands = tuple(operands)
    for u in operands:
        if u not in node:
            raise GraphError(f"operand {u} of a new {op!r} node is not in the graph",
                             op=op, src=src)
    nid = G.graph.get("next_id", 0)
    while nid in node:
        nid += 1
    G.graph["next_id"] = nid + 1
    d = {"op": op, "shape": tuple(map(int, shape)), "dtype": ops.canonical_dtype(dtype),
         "attrs": dict(attrs) if attrs else {}, "src": src}
    if name is not None:
        d["name"] = name
    # networkx's own adjacency dicts, filled as its ``add_node``/``add_edge`` fill them (the
    # same key per edge, a new attribute dict each) in a third of their time: a network's
    # hundreds of inputs and operand edges are added one by one as it is built
    node[nid], succ[nid], here = d, {}, {}
    pred[nid] = here
    for k, u in enumerate(operands):
        keys = here.get(u)
        if keys is None:
            keys = here[u] = succ[u][nid] = {}
        keys[len(keys)] = {"arg": k}
    cached = getattr(G, "__networkx_cache__", None)
    if cached:      # (what networkx derived from the graph before it changed)
        cached.clear()
    return nid


def add_op(G: nx.MultiDiGraph, op: str, operands: list[int], attrs=None, *,
           src: str | None = None, name: str | None = None) -> int:
    """Append a node whose shape and dtype are inferred by the op's rule."""
    nodes = G._node
    shapes = [nodes[u]["shape"] for u in operands]
    dtypes = [nodes[u]["dtype"] for u in operands]
    attrs = dict(attrs or {})
    try:
        shape, dtype = ops.infer(op, shapes, dtypes, attrs)
    except GraphError as e:
        raise e.located(src=src) from None
    return add_node(G, op, operands, shape, dtype, attrs, src=src, name=name)


def operands(G: nx.MultiDiGraph, n: int) -> list[int]:
    """Operand node ids of ``n`` in argument order."""
    # networkx's plain adjacency dicts, not its views: the hottest helper of every pass.
    # (Sorted as pairs: args are distinct, so a node id is never compared; a malformed
    # edge's missing arg fails the sort as it would fail a key.)
    args = [(d.get("arg"), u) for u, keys in G._pred[n].items() for d in keys.values()]
    args.sort()
    return [u for _, u in args]


def users(G: nx.MultiDiGraph, n: int) -> list[int]:
    """Distinct nodes that use ``n`` as an operand."""
    return list(dict.fromkeys(G.successors(n)))


def topo_order(G: nx.MultiDiGraph) -> list[int]:
    """A deterministic topological order (smallest node id first among ready nodes), as
    ``nx.lexicographical_topological_sort`` gives, in a fraction of its time. Raises
    ``nx.NetworkXUnfeasible`` on a cycle."""
    succ = G._succ
    if all(v > u for u, vs in succ.items() for v in vs):
        # every edge runs from a smaller id to a larger one (as the builder and ``add_op``
        # number nodes): ascending ids are that order, found without the heap
        return sorted(succ)
    indeg = dict(G.in_degree())
    ready = [n for n, k in indeg.items() if k == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        u = heapq.heappop(ready)
        order.append(u)
        for v, keys in succ[u].items():
            indeg[v] -= len(keys)
            if indeg[v] == 0:
                heapq.heappush(ready, v)
    if len(order) != len(indeg):
        raise nx.NetworkXUnfeasible("graph contains a cycle")
    return order


def copy_graph(G: nx.MultiDiGraph) -> nx.MultiDiGraph:
    """A copy whose node/graph attribute dicts can be changed without touching ``G``.

    Constant arrays and fused sub-graphs are shared (nothing mutates them in place)."""
    H = nx.MultiDiGraph()
    H.graph.update({k: (list(v) if isinstance(v, list) else dict(v) if isinstance(v, dict)
                        else v) for k, v in G.graph.items()})
    # networkx's own adjacency dicts, filled as ``add_node``/``add_edges_from`` would (the
    # same node, edge and key order; every attribute dict a copy), in a third of their time:
    # each pass copies the graph it rewrites.
    node, succ, pred = H._node, H._succ, H._pred
    for n, d in G._node.items():
        nd = dict(d)
        attrs = d["attrs"]
        nd["attrs"] = dict(attrs) if attrs else {}
        node[n] = nd
        succ[n] = {}
        pred[n] = {}
    for u, nbrs in G._succ.items():
        out = succ[u]
        for v, keydict in nbrs.items():
            if len(keydict) == 1:       # (one edge between two nodes: nearly always)
                for k, e in keydict.items():
                    copied = {k: dict(e)}
            else:
                copied = {k: dict(e) for k, e in keydict.items()}
            out[v] = copied
            pred[v][u] = copied
    return H


def replace_uses(G: nx.MultiDiGraph, old: int, new: int) -> None:
    """Redirect every use of ``old`` (operand edges and graph outputs) to ``new``."""
    for _, v, key, arg in list(G.out_edges(old, keys=True, data="arg")):
        G.remove_edge(old, v, key)
        G.add_edge(new, v, arg=arg)
    G.graph["outputs"] = [new if o == old else o for o in G.graph["outputs"]]


def nbytes(G: nx.MultiDiGraph, n: int) -> int:
    """Bytes of node ``n``'s value."""
    d = G._node[n]
    return math.prod(d["shape"]) * np.dtype(d["dtype"]).itemsize


def drop_derived(G: nx.MultiDiGraph) -> None:
    """Remove graph attributes derived from the structure (schedule, memory plan)."""
    for k in DERIVED_GRAPH_ATTRS:
        G.graph.pop(k, None)


# ----------------------------------------------------------------------------------- verify


def _fail(G, n, msg, pass_name=None):
    d = G.nodes[n] if n in G else {}
    extra = f" (after pass '{pass_name}')" if pass_name else ""
    raise GraphError(msg + extra, op=d.get("op"), src=d.get("src"), node=n)


# Fused sub-graphs are never mutated once built (passes share them between graph copies),
# so one verify per sub-graph object is enough: the pass manager verifies after every pass.
_VERIFIED_GROUPS: "weakref.WeakSet" = weakref.WeakSet()


def _verify_group(G: nx.MultiDiGraph, n: int, pass_name: str | None) -> None:
    sub = G.nodes[n]["attrs"].get("graph")
    if sub in _VERIFIED_GROUPS:
        return
    if not isinstance(sub, nx.MultiDiGraph):
        _fail(G, n, f"fused node's sub-graph is {type(sub).__name__}, not an IR", pass_name)
    try:
        verify(sub)
    except GraphError as e:
        _fail(G, n, f"fused sub-graph: {e.detail}", pass_name)
    if len(sub.graph.get("outputs", ())) != 1:
        _fail(G, n, "fused sub-graph must have exactly one output", pass_name)
    _VERIFIED_GROUPS.add(sub)


def verify(G: nx.MultiDiGraph, *, pass_name: str | None = None,
           verified: tuple[dict, dict] | None = None, nodes: bool = True) -> None:
    """Check every IR invariant; raise ``GraphError`` naming the node, op and source line.

    Invariants: acyclic; int node ids; the node schema; a registered op; operand args
    contiguous 0..n-1 with the op's arity; shape and dtype equal to what the op's rule
    infers; ``inputs`` are ``input`` nodes and every ``input`` node is listed; outputs
    exist; a ``schedule``, if present, is a topological order of all nodes.

    ``verified``: ``(node_keys of a verified graph, node_keys of G)``. A node whose key and
    whose operands' keys are the same in both passed the same per-node checks there and is
    not checked again (the pass manager verifies after every pass; most passes change few
    nodes). ``nodes=False`` skips the per-node checks: for a graph whose every node passed
    them as it was made (``add_op`` infers what it records; the builder's graphs).
    The whole-graph invariants are always checked.
    """
    where = f" (after pass '{pass_name}')" if pass_name else ""
    if not isinstance(G, nx.MultiDiGraph):
        raise GraphError(f"IR must be a networkx.MultiDiGraph, got {type(G).__name__}{where}")
    try:
        topo_order(G)
        acyclic = True
    except nx.NetworkXUnfeasible:
        acyclic = False
    except TypeError:           # node ids that do not order (the node check names them)
        acyclic = nx.is_directed_acyclic_graph(G)
    if not acyclic:
        cycle = nx.find_cycle(G)
        raise GraphError(f"IR has a cycle through nodes {[e[0] for e in cycle]}{where}") \
            from None
    before, now = verified or ({}, {})
    for n, d in (G._node.items() if nodes else ()):
        key = now.get(n)
        if isinstance(key, tuple) and before.get(n) == key and \
                (not key[-1] or all(before.get(u) == now.get(u) for _, u in key[-1])):
            continue      # (a network's hundreds of inputs have no operands to compare)
        _verify_node(G, n, d, pass_name, where)
    _verify_inputs_and_outputs(G, pass_name, where)
    _verify_schedule(G, where)


def _verify_node(G, n, d: dict, pass_name: str | None, where: str) -> None:
    """One node's schema, op, operand args, and shape and dtype against the op's rule."""
    if not isinstance(n, int) or isinstance(n, bool):
        raise GraphError(f"node id {n!r} is not an int{where}")
    for k in NODE_KEYS:
        if k not in d:
            _fail(G, n, f"node is missing attribute {k!r}", pass_name)
    if d["op"] not in ops.OPS:
        _fail(G, n, f"unknown op {d['op']!r}", pass_name)
    if d["op"] == "input" and not G._pred[n]:
        return
    pairs = [(e.get("arg"), u) for u, keys in G._pred[n].items() for e in keys.values()]
    try:
        pairs.sort()
    except TypeError:   # an arg missing (None) or not a number
        pairs.sort(key=lambda p: repr(p[0]))
    args = [a for a, _ in pairs]
    if args != list(range(len(args))):
        _fail(G, n, f"operand args {args} are not 0..{len(args) - 1}", pass_name)
    args_of = [u for _, u in pairs]       # ``operands``: the args are 0..n-1, in order
    opdef = ops.OPS[d["op"]]
    if d["op"] == "input":
        if args:
            _fail(G, n, "input node has operands", pass_name)
        return
    if d["op"] == ops.FUSED:
        _verify_group(G, n, pass_name)
    try:
        nodes = G._node
        shape, dtype = ops.infer(d["op"], [nodes[u]["shape"] for u in args_of],
                                 [nodes[u]["dtype"] for u in args_of], d["attrs"])
    except GraphError as e:
        _fail(G, n, e.detail, pass_name)
    if opdef.arity is not None and len(args) != opdef.arity:
        _fail(G, n, f"has {len(args)} operands, op takes {opdef.arity}", pass_name)
    if tuple(d["shape"]) != shape or d["dtype"] != dtype:
        _fail(G, n, f"recorded {tuple(d['shape'])} {d['dtype']} but the op's rule gives "
                    f"{shape} {dtype}", pass_name)
    held = d["attrs"].get("contraction") if d["op"] == "einsum" else None
    if held is not None:
        # the node's contraction value (``contraction.value``) describes this node
        wrong = held.check(d["attrs"]["equation"], [nodes[u]["shape"] for u in args_of],
                           d["dtype"], [nodes[u]["dtype"] for u in args_of])
        if wrong:
            _fail(G, n, f"its contraction does not fit it: {wrong}", pass_name)


def _verify_inputs_and_outputs(G, pass_name: str | None, where: str) -> None:
    ins = G.graph.get("inputs", [])
    nodes = G._node
    for i in ins:
        try:
            d = nodes.get(i)
        except TypeError:       # (an unhashable id is no node)
            d = None
        if d is None or d["op"] != "input":
            raise GraphError(f"graph input {i!r} is not an input node{where}")
    listed = set(ins)
    for n, d in nodes.items():
        if d["op"] == "input" and n not in listed:
            _fail(G, n, "input node is not listed in the graph's inputs", pass_name)
    outs = G.graph.get("outputs", [])
    if not outs:
        raise GraphError(f"graph has no outputs (call g.output(...)){where}")
    for o in outs:
        if o not in G:
            raise GraphError(f"graph output {o!r} is not a node{where}")


def _verify_schedule(G, where: str) -> None:
    sched = G.graph.get("schedule")
    if sched is None:
        return
    pos = {n: i for i, n in enumerate(sched)}
    if set(pos) != set(G.nodes) or len(pos) != len(sched):
        raise GraphError(f"schedule does not list every node exactly once{where}")
    for u, v in G.edges():
        if pos[u] >= pos[v]:
            raise GraphError(f"schedule runs node {v} before its operand {u}{where}")


# -------------------------------------------------------------------------- structural hash


# Attributes that say where a node came from, not what it computes: no hash or CSE key
# sees them, so the same graph built from another checkout (another absolute path) hashes
# the same and caches the same.
SOURCE_ATTRS = frozenset({"srcs"})


def _attr_token(v) -> str:
    if isinstance(v, nx.MultiDiGraph):
        return "G" + structural_hash(v)
    if isinstance(v, np.ndarray) or isinstance(v, np.generic):
        a = np.ascontiguousarray(v)
        return f"A{a.dtype.str}{a.shape}{hashlib.sha256(a.tobytes()).hexdigest()}"
    if isinstance(v, dict):
        return "{" + ",".join(f"{k!r}:{_attr_token(v[k])}" for k in sorted(v, key=repr)) + "}"
    if isinstance(v, (list, tuple)):
        return "[" + ",".join(_attr_token(x) for x in v) + "]"
    return repr(v)


def node_hashes(G: nx.MultiDiGraph) -> dict[int, str]:
    """Per node, a hash of its op, attributes, type and (recursively) its operands: equal
    hashes mean structurally equal computations. Inputs hash by name and position."""
    pos = {n: i for i, n in enumerate(G.graph.get("inputs", []))}
    out: dict[int, str] = {}
    nodes, pred = G._node, G._pred
    for n in topo_order(G):
        d = nodes[n]
        attrs = d["attrs"]     # (most nodes of a large network, its inputs, have none)
        parts = [d["op"], repr(tuple(d["shape"])), d["dtype"], _attr_token(
            {k: v for k, v in attrs.items() if k not in SOURCE_ATTRS}) if attrs else "{}"]
        if d["op"] == "input":
            parts += [repr(d.get("name")), repr(pos.get(n))]
        if pred[n]:
            parts += [out[u] for u in operands(G, n)]
        out[n] = hashlib.sha256("|".join(parts).encode()).hexdigest()
    return out


def structural_hash(G: nx.MultiDiGraph) -> str:
    """A hash stable across processes and node renumbering (not across op/attr changes)."""
    h = node_hashes(G)
    parts = ["in:" + ",".join(h[i] for i in G.graph.get("inputs", [])),
             "out:" + ",".join(h[o] for o in G.graph.get("outputs", [])),
             "struct:" + _attr_token(G.graph.get("output_structure")),
             "all:" + ",".join(sorted(h.values()))]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()


# ------------------------------------------------------------------------------ node keys


_PLAIN = (str, int, float, complex, bool, type(None))
_PLAIN_TYPES = frozenset(_PLAIN)


def value_key(v):
    """``v`` as a value equal between a graph and its ``copy_graph``: plain values and
    containers by value, anything else (arrays, sub-graphs: shared, never changed in place)
    by identity."""
    if isinstance(v, _PLAIN):
        return v
    if isinstance(v, (tuple, list)):
        types = set(map(type, v))
        if types <= _PLAIN_TYPES:     # a shape, axes or a path's pair
            return (type(v).__name__, tuple(v))
        if types == {tuple} and all(set(map(type, x)) <= _PLAIN_TYPES for x in v):
            return (type(v).__name__, tuple([("tuple", x) for x in v]))    # a path
        return (type(v).__name__, tuple(map(value_key, v)))
    if isinstance(v, dict):
        return ("dict", tuple(sorted(((repr(k), value_key(x)) for k, x in v.items()),
                                     key=lambda kv: kv[0])))
    return ("id", id(v))


def node_keys(G: nx.MultiDiGraph) -> dict[int, tuple]:
    """Per node id, what the node is: op, shape, dtype, attributes (``value_key``) and its
    operands as ``(arg, node id)`` pairs, last. Equal keys for the same id in two graphs
    (both alive) mean the same node; cheaper than ``node_hashes``, and unlike them it tells
    node ids apart, so the pass manager uses it to see which nodes a pass changed."""
    pred = G._pred
    out = {}
    for n, d in G._node.items():
        try:     # (a network's hundreds of inputs have no attributes and no operands)
            attrs, args = d["attrs"], pred[n]
            out[n] = (d["op"], tuple(d["shape"]), d["dtype"],
                      tuple(sorted((k, value_key(v)) for k, v in attrs.items()
                                   if k not in SOURCE_ATTRS)) if attrs else (),
                      tuple(sorted((e.get("arg"), u) for u, keys in args.items()
                                   for e in keys.values())) if args else ())
        except Exception:      # a malformed node (verify names it): equal to nothing
            out[n] = object()
    return out


def graph_key(G: nx.MultiDiGraph) -> tuple:
    """The graph attributes (inputs, outputs, schedule, ...) as ``value_key`` gives them."""
    return tuple(sorted((k, value_key(v)) for k, v in G.graph.items()))


def evaluate_iteratively(make, *request):
    """Evaluate a recursive definition without Python recursion (a graph of any depth).

    ``make(*request)`` returns a generator that *yields* a request tuple for each value it
    needs (an operand's), receives that value back, and *returns* its own value. Code
    generators walk operand chains this way: a 400-op chain would exceed Python's
    recursion limit."""
    stack, result = [make(*request)], None
    while stack:
        try:
            sub_request = stack[-1].send(result)
        except StopIteration as done:
            stack.pop()
            result = done.value
        else:
            stack.append(make(*sub_request))
            result = None
    return result
