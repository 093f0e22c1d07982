"""Fused groups on dask: each group runs per block, with the kernel generated for the block.

``block_group`` maps the group's loop space onto ``dask.array.blockwise``: every operand is
indexed by the loop dims its dims are read at (``graphopt/fused.py`` index maps), and the
per-block body (``GroupBlocks``) re-shapes the group to the block and calls the generated
numba kernel (``numba_codegen.build_fused_kernel``) or, where numba is absent, the block is
small or the generator declines, the interpreter. Kernels are built in the worker that runs
the block, once per block shape (dask's edge blocks have their own).

- elementwise groups: one blockwise task per output block;
- reduction groups: per block, the prologue and a partial reduction (dims kept); dask
  combines the partials in a tree (``split_every``); then the epilogue per block;
- contraction groups: the einsum (``lowering.lower_einsum``), then the epilogue per block.

A group that reads one value at two index maps (``x + x.T``) runs op by op instead.
"""

from __future__ import annotations

import importlib.util
import math

import dask.array as da
import networkx as nx
import numpy as np
from dask.base import tokenize

from ... import ir
from ...analysis.fused import (
    build_subgraph,
    computed_members,
    group_maps,
    identity_map,
    operand_index_map,
)
from ...ir import ops
from ...ir.interpreter import run_graph
from .lowering import Options, StepLog, conform, constant, lower_einsum, lower_op

LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
COMBINE = {"sum": "sum", "mean": "sum", "max": "max", "min": "min"}


def lower_node(G: nx.MultiDiGraph, n: int, args: list, opts: Options, log: StepLog):
    """The dask array of node ``n`` of ``G`` given its operands' dask arrays: a fused group
    per block (``lower_fused``), any other op by ``lowering.lower_op``."""
    d = G.nodes[n]
    if d["op"] == ops.FUSED:
        return conform(lower_fused(d["attrs"], args, opts, log), d, n)
    return lower_op(G, n, args, opts, log)


class Irregular(Exception):
    """A fused group that per-block execution cannot express (the reason is the message)."""


def lower_fused(attrs: dict, args: list, opts: Options, log: StepLog):
    """A fused node as dask arrays: per pattern, blockwise where it can, else member by member."""
    sub, pattern = attrs["graph"], attrs["pattern"]
    try:
        if pattern == "elementwise":
            return elementwise_group(sub, args, opts, log)
        if pattern == "contraction":
            return fused_contraction(sub, args, opts, log)
        if pattern == "reduction":
            return fused_reduction(sub, args, opts, log)
        raise Irregular(f"unknown pattern {pattern!r}")
    except Irregular as e:
        log.notes.append(f"fused {pattern} group runs op by op on dask: {e}")
    return lower_subgraph(sub, args, opts, log)


def lower_subgraph(sub: nx.MultiDiGraph, args: list, opts: Options, log: StepLog):
    """A sub-graph lowered node by node; the value of its (single) output."""
    env = dict(zip(sub.graph["inputs"], args))
    for m in ir.topo_order(sub):
        if m not in env:
            env[m] = lower_node(sub, m, [env[u] for u in ir.operands(sub, m)], opts, log)
    return env[sub.graph["outputs"][0]]


def _part(sub, members, root):
    """``(sub-graph of members, its operand ids in sub)``, the constants they use copied."""
    consts = {u for m in members for u in ir.operands(sub, m) if sub.nodes[u]["op"] == "const"}
    return build_subgraph(sub, members, root, consts)


def _args_for(sub, ext, args, computed: dict) -> list:
    pos = {u: k for k, u in enumerate(sub.graph["inputs"])}
    return [computed[u] if u in computed else args[pos[u]] for u in ext]


def fused_contraction(sub, args, opts, log):
    """A fused contraction: the einsum lowered on its own, then the epilogue blockwise."""
    e = next(m for m in sub if sub.nodes[m]["op"] == "einsum")
    pos = {u: k for k, u in enumerate(sub.graph["inputs"])}
    operands = [args[pos[u]] if u in pos else constant(sub.nodes[u]["attrs"]["value"], opts)
                for u in ir.operands(sub, e)]
    y = conform(lower_einsum(sub.nodes[e]["attrs"], operands, opts, log), sub.nodes[e], e)
    root = sub.graph["outputs"][0]
    epi, ext = _part(sub, set(computed_members(sub)) - {e}, root)
    return elementwise_group(epi, _args_for(sub, ext, args, {e: y}), opts, log)


def fused_reduction(sub, args, opts, log):
    """Per-block partials of the prologue + reduction, dask's tree combine, the epilogue."""
    members, root = set(computed_members(sub)), sub.graph["outputs"][0]
    (r,) = [m for m in members if ops.OPS[sub.nodes[m]["op"]].kind == ops.REDUCTION]
    rd = sub.nodes[r]
    pre = (nx.ancestors(sub, r) & members) | {r}
    post = members - pre
    # prologue values the epilogue reads too (not through the reduction) are recomputed there
    stack = [u for m in post for u in ir.operands(sub, m) if u in pre and u != r]
    while stack:
        u = stack.pop()
        if u not in post:
            post.add(u)
            stack.extend(w for w in ir.operands(sub, u) if w in pre and w != r)
    pre_graph, ext = _part(sub, pre, r)
    partial_graph, count = partial_reduction(pre_graph)
    axes = tuple(rd["attrs"]["axes"])
    partials, loop = block_group(partial_graph, _args_for(sub, ext, args, {}), opts, log,
                                 reduce_axes=axes)
    comb = getattr(da, COMBINE[rd["op"]])(
        partials, axis=tuple(i for i, l in enumerate(loop) if l in axes), keepdims=True,
        split_every=opts.split_every)
    if rd["op"] == "mean":
        comb = comb / count if count else comb * np.nan
    value = comb.astype(rd["dtype"]).reshape(rd["shape"])
    if not post:
        return value
    epi, ext = _part(sub, post, root)
    return elementwise_group(epi, _args_for(sub, ext, args, {r: value}), opts, log)


def partial_reduction(pre: nx.MultiDiGraph):
    """``pre`` with its reduction keeping dims (one partial per block) and ``mean`` as a
    ``sum`` in the mean's dtype; returns it and the count a mean divides by."""
    H = ir.copy_graph(pre)
    (r,) = H.graph["outputs"]
    d = H.nodes[r]
    (u,) = ir.operands(H, r)
    count = math.prod(H.nodes[u]["shape"][a] for a in d["attrs"]["axes"])
    if d["op"] == "mean" and H.nodes[u]["dtype"] != d["dtype"]:
        u = ir.add_op(H, "astype", [u], {"dtype": d["dtype"]}, src=d.get("src"))
    new = ir.add_op(H, "sum" if d["op"] == "mean" else d["op"], [u],
                    {"axes": tuple(d["attrs"]["axes"]), "keepdims": True}, src=d.get("src"))
    H.remove_node(r)
    H.graph["outputs"] = [new]
    return H, count


# --------------------------------------------------------------------- per-block groups


def index_maps(G: nx.MultiDiGraph) -> tuple[dict, tuple]:
    """Per node of a group sub-graph (inputs included, constants not), the loop dims its dims
    are read at (``fused`` maps), and the loop space. Raises ``Irregular`` where a
    value is read at two maps."""
    root = G.graph["outputs"][0]
    members = set(computed_members(G))
    seen, space, red = group_maps(G, members, root)
    maps: dict = {}
    for m in members:
        found = {mp for mp, _ in seen.get(m, ())}
        if len(found) != 1:
            raise Irregular(f"{G.nodes[m]['op']} is read at {len(found)} index maps")
        maps[m] = found.pop()
    for m in members:
        for k, u in enumerate(ir.operands(G, m)):
            if G.nodes[u]["op"] != "input":
                continue
            mp = identity_map(G.nodes[u]["shape"]) if m == red else \
                operand_index_map(G, m, k, maps[m])
            if maps.setdefault(u, mp) != mp:
                raise Irregular(f"input {G.nodes[u].get('name')} is read at two index maps")
    return maps, space


def elementwise_group(G, args, opts, log):
    """An elementwise group as one blockwise dask operation, in the group's output shape."""
    arr, _ = block_group(G, args, opts, log)
    shape = tuple(G.nodes[G.graph["outputs"][0]]["shape"])
    return arr if arr.shape == shape else arr.reshape(shape)


def block_group(G: nx.MultiDiGraph, args: list, opts: Options, log: StepLog, reduce_axes=None):
    """Run group ``G`` per block with ``blockwise``. Returns ``(array, loop)``: the result
    over the loop dims ``loop`` (the group's dims of size > 1); with ``reduce_axes`` (``G``'s
    root is a reduction keeping dims) one partial per block along those dims."""
    maps, space = index_maps(G)
    loop = sorted({l for mp in maps.values() for l in mp if l is not None})
    if len(loop) > len(LETTERS):
        raise Irregular(f"{len(loop)} loop dims")
    letter = {l: LETTERS[i] for i, l in enumerate(loop)}
    operands, covered = [], {}
    for k, (i, a) in enumerate(zip(G.graph["inputs"], args)):
        mp = maps.get(i)
        if mp is None:
            raise Irregular(f"input {k} is not read")
        if None in mp:
            a = a[tuple(0 if l is None else slice(None) for l in mp)]
        dims = [l for l in mp if l is not None]
        for j, l in enumerate(dims):
            covered.setdefault(l, (k, j))
        operands.append((a, "".join(letter[l] for l in dims)))
    target, size = {}, {}
    for a, ind in operands:
        for j, c in enumerate(ind):
            if c not in target or a.nbytes > size[c]:
                target[c], size[c] = a.chunks[j], a.nbytes
    operands = [(log.rechunk(a, {j: target[c] for j, c in enumerate(ind)},
                             f"fused group: operand {k} to the chunks of the largest operand"),
                 ind) for k, (a, ind) in enumerate(operands)]
    reduced = set(reduce_axes or ()) & set(loop)
    root = G.nodes[G.graph["outputs"][0]]
    dtype = np.dtype(root["dtype"])
    fn = GroupBlocks(G, maps, space, loop, covered, reduced, opts)
    out_ind = "".join(letter[l] for l in loop)
    name = "fused-" + tokenize(ir.structural_hash(G), out_ind, sorted(reduced),
                               [(a.name, ind) for a, ind in operands], opts.block_kernel)
    flat = [x for pair in operands for x in pair]
    arr = da.blockwise(fn, out_ind, *flat, dtype=dtype, name=name, align_arrays=False,
                       meta=np.empty((0,) * len(loop), dtype),
                       new_axes={letter[l]: space[l] for l in loop if l not in covered} or None,
                       adjust_chunks={letter[l]: 1 for l in reduced} or None)
    return arr, loop


class GroupBlocks:
    """The per-block body of ``block_group``: the group re-shaped to the block (its maps say
    each node's block shape) and compiled for it, once per block shape in each worker
    process (numba kernels are not shipped, they are built where they run)."""

    def __init__(self, G, maps, space, loop, covered, reduced, opts: Options):
        self.G, self.maps, self.space, self.loop = G, maps, space, loop
        self.covered, self.reduced, self.opts = covered, reduced, opts
        self.pattern = "reduction" if any(
            ops.OPS[G.nodes[m]["op"]].kind == ops.REDUCTION for m in computed_members(G)) \
            else "elementwise"
        self._cache: dict = {}

    def __getstate__(self):
        return {k: v for k, v in self.__dict__.items() if k != "_cache"}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self._cache = {}

    def __call__(self, *blocks):
        extent = {l: blocks[k].shape[j] for l, (k, j) in self.covered.items()}
        key = tuple(extent.get(l, self.space[l]) for l in self.loop)
        if key not in self._cache:
            self._cache[key] = self._build(dict(zip(self.loop, key)))
        H, fn = self._cache[key]
        args = [np.reshape(b, H.nodes[i]["shape"]) for b, i in zip(blocks, H.graph["inputs"])]
        root = H.nodes[H.graph["outputs"][0]]
        out = fn(args, np.empty(root["shape"], dtype=root["dtype"]))
        return np.reshape(out, tuple(1 if l in self.reduced else n
                                     for l, n in zip(self.loop, key)))

    def block_graph(self, extent: dict) -> nx.MultiDiGraph:
        """The group with every node at its block shape."""
        H = nx.MultiDiGraph()
        H.graph.update({k: (list(v) if isinstance(v, list) else v)
                        for k, v in self.G.graph.items()})
        for n, d in self.G.nodes(data=True):
            nd = dict(d, attrs=dict(d["attrs"]))
            if n in self.maps:
                nd["shape"] = tuple(1 if l is None else extent[l] for l in self.maps[n])
            if nd["op"] == "broadcast_to":
                nd["attrs"]["shape"] = nd["shape"]
            H.add_node(n, **nd)
        H.add_edges_from(self.G.edges(keys=True, data=True))
        ir.verify(H)
        return H

    def _build(self, extent: dict):
        H = self.block_graph(extent)
        policy = self.opts.block_kernel
        if policy == "numba" or (policy == "auto" and math.prod(extent.values(), start=1)
                                 >= self.opts.numba_min_elements):
            try:
                from ..numba.codegen import UnsupportedKernel, build_fused_kernel
            except ImportError:
                if importlib.util.find_spec("numba") is not None:
                    raise           # a broken install or import, not a missing numba
            else:
                try:
                    k = build_fused_kernel(H, self.pattern, fast_math=self.opts.fast_math)
                    return H, k.fn
                except UnsupportedKernel:
                    pass

        def interpret(args, out):
            return run_graph(H, args)[0]

        return H, interpret
