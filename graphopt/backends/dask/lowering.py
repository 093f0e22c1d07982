"""IR nodes as dask.array computations (the ``dask`` backend's kernels).

- ``einsum``: pairwise steps with ``dask.array.einsum`` (per-block ``np.einsum``, a tree sum
  over the blocks of contracted labels), multi-operand nodes along their ``path``; a node
  with ``slices`` runs one task per slice, tree-summed (``sliced_einsum``).
- ``fused``: per block, with the generated numba kernels (``blocks``).
- elementwise, reduction, layout ops: dask's own (tree reductions, ``reshape``...).

Operands whose chunks disagree along a shared dimension are rechunked once, to the chunks
of the largest operand there; every rechunk is logged (``StepLog``) with the bytes it moves.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import dask.array as da
import networkx as nx
import numpy as np
from dask.base import tokenize
from dask.highlevelgraph import HighLevelGraph

from ...contraction.paths import play_path
from ...contraction.program.run import PathContraction
from ...contraction.slicing.run import full_slice_shapes, slice_index, slice_ranges
from ...errors import GraphError
from ...ir import ops
from ...ir.einsum import split as split_equation
from ...ir.einsum_numpy import to_ascii


@dataclass
class Options:
    """Lowering options (from ``compile(..., **options)``)."""

    split_every: int = 4            # fan-in of tree reductions and of sliced sums
    block_kernel: str = "auto"      # "numba", "numpy" (interpreter) or "auto"
    numba_min_elements: int = 1 << 15   # "auto": numba for blocks at least this large
    fast_math: bool = True
    chunk_bytes: int | None = None  # constants' chunks ("auto" up to this many bytes)


@dataclass
class StepLog:
    """What one step moves: rechunks (where, from, to, bytes) and notes."""

    rechunks: list = field(default_factory=list)
    notes: list = field(default_factory=list)

    def rechunk(self, x, want: dict, why: str):
        """``x`` rechunked to ``want`` ({dim: chunks}) where it differs; logged."""
        want = {j: tuple(c) for j, c in want.items() if tuple(x.chunks[j]) != tuple(c)}
        if not want:
            return x
        self.rechunks.append({"why": why, "shape": list(x.shape),
                              "from": [list(x.chunks[j]) for j in sorted(want)],
                              "to": [list(want[j]) for j in sorted(want)],
                              "dims": sorted(want), "bytes": int(x.nbytes)})
        return x.rechunk(want)

    @property
    def bytes_moved(self) -> int:
        return sum(r["bytes"] for r in self.rechunks)


def constant(value, opts: Options):
    """A constant as a dask array, chunked as the options say."""
    a = np.asarray(value)
    return da.from_array(a, chunks="auto" if opts.chunk_bytes is None else
                         da.core.normalize_chunks("auto", a.shape, limit=opts.chunk_bytes,
                                                  dtype=a.dtype))


# ------------------------------------------------------------------------------ one node


def reshape(x, shape: tuple, log):
    """``x.reshape(shape)``. Dask reshapes only where dims merge or split evenly over its
    chunks; any other reshape goes through one dim (a merge, then a split: both supported)."""
    if x.npartitions > 1:
        log.notes.append(f"reshape {x.shape} -> {shape} from chunks {x.chunksize} (dask "
                         "rechunks across merged dims)")
    try:
        return x.reshape(shape)
    except NotImplementedError:
        log.notes.append(f"reshape {x.shape} -> {shape} splits dims unevenly over chunks "
                         f"{x.chunksize}: done as a reshape to one dim, then to {shape}")
        return x.reshape(-1).reshape(shape)


def lower_op(G: nx.MultiDiGraph, n: int, args: list, opts: Options, log: StepLog):
    """The dask array of node ``n`` of ``G`` (not a fused one: ``blocks.lower_node``) given
    its operands' dask arrays."""
    d = G.nodes[n]
    op, attrs = d["op"], d["attrs"]
    kind = ops.OPS[op].kind
    if op == "const":
        return constant(attrs["value"], opts)
    if op == "einsum":
        res = lower_einsum(attrs, args, opts, log)
    elif kind == ops.REDUCTION:
        fn = getattr(da, op)
        res = fn(args[0], axis=tuple(attrs["axes"]), keepdims=attrs["keepdims"],
                 split_every=opts.split_every)
    elif kind == ops.ELEMENTWISE:
        res = ops.OPS[op].impl(align_broadcast(args, d["shape"], log, op), attrs)
    elif op == "reshape":
        res = reshape(args[0], tuple(d["shape"]), log)
    else:  # layout: dask's transpose / broadcast_to
        res = ops.OPS[op].impl(args, attrs)
    return conform(res, d, n)


def conform(x, d: dict, n=None):
    """``x`` as the IR records node ``d``: its shape (checked) and dtype (cast)."""
    if not isinstance(x, da.Array):
        x = da.from_array(np.asarray(x))
    if tuple(x.shape) != tuple(d["shape"]):
        raise GraphError(f"dask lowering produced shape {tuple(x.shape)}, the IR records "
                         f"{tuple(d['shape'])}", op=d["op"], src=d.get("src"), node=n)
    if x.dtype != np.dtype(d["dtype"]):
        x = x.astype(d["dtype"])
    return x


def align_broadcast(args: list, shape, log: StepLog, what: str) -> list:
    """Operands broadcast against ``shape`` (NumPy rules), rechunked to agree per dim."""
    nd = len(shape)
    target: dict[int, tuple] = {}
    for j in range(nd):
        have = [(a.nbytes, -k, a.chunks[j - nd + a.ndim]) for k, a in enumerate(args)
                if a.ndim >= nd - j and a.shape[j - nd + a.ndim] == shape[j] and shape[j] != 1]
        if have:
            target[j] = max(have)[2]
    out = []
    for k, a in enumerate(args):
        lead = nd - a.ndim
        want = {i: target[i + lead] for i in range(a.ndim)
                if i + lead in target and a.shape[i] == shape[i + lead]}
        out.append(log.rechunk(a, want, f"{what}: operand {k} to the chunks of the "
                               "largest operand"))
    return out


# ------------------------------------------------------------------------------- einsum


def unify_labels(terms, arrays, log: StepLog, what: str) -> list:
    """Operands rechunked so that every label has one chunking (the largest operand's)."""
    target: dict[str, tuple] = {}
    best: dict[str, int] = {}
    for t, a in zip(terms, arrays):
        for j, c in enumerate(t):
            if c not in target or a.nbytes > best[c]:
                target[c], best[c] = a.chunks[j], a.nbytes
    return [log.rechunk(a, {j: target[c] for j, c in enumerate(t)},
                        f"{what}: operand {k} to the chunks of labels {t!r}")
            for k, (t, a) in enumerate(zip(terms, arrays))]


def _block_einsum(*blocks, equation: str, summed: int):
    """One block of ``pairwise_einsum``: the contraction (BLAS through opt_einsum where it
    can), with a size-1 dim per summed label for dask's tree sum over blocks."""
    import opt_einsum

    res = np.asarray(opt_einsum.contract(equation, *blocks) if len(blocks) > 1 else
                     np.einsum(to_ascii(equation), *blocks))
    return res.reshape(res.shape + (1,) * summed)


def pairwise_einsum(equation: str, arrays: list, opts: Options, log: StepLog):
    """One einsum step with ``blockwise``: per block combination the contraction; labels
    summed across blocks are kept as size-1 dims and summed in a tree (as
    ``dask.array.einsum``, minus its rechunking of operands to bound the output's chunks:
    here chunks change only where two operands disagree, and the log says so)."""
    terms, output = split_equation(equation)
    arrays = unify_labels(terms, arrays, log, f"einsum {equation!r}")
    summed = [c for c in dict.fromkeys("".join(terms)) if c not in output]
    dtype = np.result_type(*[a.dtype for a in arrays])
    name = "einsum-" + tokenize(equation, *[a.name for a in arrays])
    pairs = [x for t, a in zip(terms, arrays) for x in (a, tuple(t))]
    res = da.blockwise(_block_einsum, tuple(output) + tuple(summed), *pairs, dtype=dtype,
                       name=name, align_arrays=False, adjust_chunks=dict.fromkeys(summed, 1),
                       meta=np.empty((0,) * (len(output) + len(summed)), dtype),
                       equation=equation, summed=len(summed))
    if not summed:
        return res
    return res.sum(axis=tuple(range(len(output), len(output) + len(summed))),
                   split_every=opts.split_every, dtype=dtype)


def lower_einsum(attrs: dict, args: list, opts: Options, log: StepLog):
    """An einsum node as dask arrays along its contraction: pairwise along its path, one
    task per slice where it has slices."""
    c = attrs["contraction"]
    eq, terms, output, sizes = c.equation, c.terms, c.output, c.sizes
    slices = [(s, b) for s, b in zip(c.slices, c.blocks) if sizes.get(s, 0) > 0]
    if not slices and len(args) <= 2:
        return pairwise_einsum(eq, list(args), opts, log)
    path = c.path
    if slices:
        return sliced_einsum(c, slices, args, opts, log)
    current = list(args)
    for inds, picked, result in play_path(terms, output, path):
        operands = [current[i] for i in inds]
        for i in reversed(inds):
            current.pop(i)
        current.append(pairwise_einsum(",".join(picked) + "->" + result, operands, opts, log))
    return current[0]


def _contract_slice(contract: PathContraction, full: list, *arrays):
    """One slice task: ``contract`` of the slice's operands; a ragged slice's program takes
    the full slice's arena layout (``full``: its operand shapes), as ``sliced_contract``'s
    do, so that it holds no more than the full slice the workspace counts."""
    return contract.run(list(arrays), None, None, full)


def _sum_blocks(*parts):
    out = np.array(parts[0], copy=True)
    for p in parts[1:]:
        out += p
    return out


def sliced_einsum(c, slices, args: list, opts: Options, log: StepLog):
    """One task per slice of contraction ``c`` (operands restricted to it, the contraction
    along its path and forms); the partial results of summed labels are added in a tree of
    fan-in ``split_every``; slices of output labels are the output's chunks."""
    equation, path, terms, output, sizes = c.equation, c.path, c.terms, c.output, c.sizes
    ranges = {c: slice_ranges(sizes[c], b) for c, b in slices}
    outer = [c for c, _ in slices if c in output]
    inner = [c for c, _ in slices if c not in output]
    dtype = np.result_type(*[a.dtype for a in args])
    token = tokenize(equation, path, slices, *[a.name for a in args])
    name, part_name, sum_name = (f"sliced-einsum-{token}", f"slice-{token}",
                                 f"slice-sum-{token}")
    contract = PathContraction(equation, path, forms=c.forms)
    full = full_slice_shapes(terms, [a.shape for a in args], dict(slices))
    views: dict = {}

    def view(k, where):
        key = (k,) + tuple((c, where[c].start) for c in terms[k] if c in where)
        if key not in views:
            a = args[k]
            sub = a[slice_index(terms[k], a.shape, where)] if len(key) > 1 else a
            views[key] = sub.rechunk({j: -1 for j in range(sub.ndim)}) if sub.ndim else sub
        return views[key]

    layer, n_tasks = {}, 0
    for oi in np.ndindex(*[len(ranges[c]) for c in outer]):
        region = {c: ranges[c][i] for c, i in zip(outer, oi)}
        keys = []
        for ii in np.ndindex(*[len(ranges[c]) for c in inner]):
            where = {**region, **{c: ranges[c][i] for c, i in zip(inner, ii)}}
            subs = [view(k, where) for k in range(len(args))]
            key = (part_name, *oi, *ii)
            layer[key] = (_contract_slice, contract, full,
                          *[(s.name,) + (0,) * s.ndim for s in subs])
            keys.append(key)
        level = 0
        while len(keys) > 1:
            nxt = []
            for j in range(0, len(keys), opts.split_every):
                key = (sum_name, *oi, level, j)
                layer[key] = (_sum_blocks, *keys[j:j + opts.split_every])
                nxt.append(key)
            keys, level = nxt, level + 1
        block = tuple(oi[outer.index(c)] if c in outer else 0 for c in output)
        layer[(name, *block)] = keys[0]
        n_tasks += len(keys)
    chunks = tuple(tuple(r.stop - r.start for r in ranges[c]) if c in outer else (sizes[c],)
                   for c in output)
    graph = HighLevelGraph.from_collections(name, layer, dependencies=list(views.values()))
    n_slices = math.prod(len(r) for r in ranges.values())
    log.notes.append(f"sliced einsum: {n_slices} slice tasks over {[c for c, _ in slices]}, "
                     f"tree sums of fan-in {opts.split_every}")
    log.sliced = {"slices": [c for c, _ in slices], "slice_blocks": [b for _, b in slices],
                  "tasks": n_slices, "operand_views": len(views)}
    return da.Array(graph, name, chunks, dtype=dtype, meta=np.empty((0,) * len(output), dtype))
