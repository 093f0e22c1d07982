"""The ``dask`` backend: plans over chunked ``dask.array`` inputs, run on dask.distributed.

``compile(g, backend="dask", chunks=..., client=...)`` runs the optimized graph as a dask
graph (``dask_graph/``: contractions with ``dask.array.einsum``, fused groups per block
with the generated numba kernels, tree reductions, sliced contractions as one task per
slice). ``plan(...)`` computes on ``client`` (a ``distributed.Client`` or a scheduler
address; default: the current default client, else dask's local threaded scheduler) and
returns NumPy arrays; ``plan.lazy(...)`` returns the dask arrays.

Options (``compile(..., **options)``):
    chunks: per input name a dask chunk spec, or one spec for every input; "auto" (the
        default) sizes chunks up to ``chunk_bytes``. Dask arrays given as inputs keep their
        own chunks unless ``chunks`` names them.
    chunk_bytes: the target chunk size of "auto" (default dask's ``array.chunk-size``).
    client: where ``plan(...)`` computes.
    progress: True / False / "auto" (default: a progress bar for graphs of at least
        ``dask_graph.cluster.PROGRESS_MIN_TASKS`` tasks); a cluster's dashboard link is
        printed once.
    split_every: fan-in of tree reductions and sliced sums (default 4).
    block_kernel: "auto" (numba kernels for blocks of at least ``numba_min_elements``),
        "numba" or "numpy" (the interpreter per block); fast_math as for numba.

Compiling lowers the plan once over placeholder inputs of the planned chunks, so each
step's ``Kernel.details`` (and ``plan.details``, in the report) say where operands are
rechunked and how many bytes that moves, the chunking of every value and the slice tasks.
"""

from __future__ import annotations

import importlib.util
import math

import numpy as np

from ... import ir
from ...analysis import cost
from ...analysis.fused import member_ops
from ...analysis.liveness import execution_order, naive_layout
from ...errors import VALUE_ERRORS, GraphError
from ...runtime.kernel import Kernel, Step
from ...runtime.plan import StepsIntrospection
from ...runtime.signature import bind_inputs, restructure
from ..base import Backend, register_backend
from .cluster import collection_graph, compute


@register_backend
class DaskBackend(Backend):
    """The scale-out backend: a plan lowered to one dask graph over chunked arrays."""
    name = "dask"
    compile_options = frozenset({"fast_math", "block_kernel", "split_every", "numba_min_elements",
                                 "chunk_bytes", "chunks", "client", "progress"})
    install_hint = "pip install 'graphopt[dist]'  (dask[distributed])"

    @classmethod
    def available(cls) -> bool:
        return all(importlib.util.find_spec(m) is not None for m in ("dask", "distributed"))

    def memory_bytes(self) -> int | None:
        """Not known here: the workers run the steps, on their own machines."""
        return None

    def kernel(self, G, n, ctx) -> Kernel:
        """A step that builds node ``n``'s dask array from its operands' (``out`` unused)."""
        from .blocks import lower_node
        from .lowering import StepLog

        opts = lowering_options(ctx.options)
        d = G.nodes[n]

        def fn(args, out=None, log=None):
            return lower_node(G, n, args, opts, log if log is not None else StepLog())

        fn.__name__ = f"dask_{d['op']}_{n}"
        return Kernel(fn.__name__, fn, _describe(G, n), impl=_impl_name(G, n), node=n)

    def copy_kernel(self, shape, dtype) -> Kernel:
        return Kernel("copy", lambda args, out=None, log=None: args[0], "x (dask arrays are "
                      "immutable; results are fresh NumPy arrays)", impl="dask-identity")

    def build_plan(self, G, source_graph, ctx, report):
        return DaskPlan.build(G, source_graph, self, ctx, report)


def lowering_options(options: dict):
    """The dask lowering's ``Options`` from ``compile(..., **options)``, validated."""
    from .lowering import Options

    kernel = options.get("block_kernel", "auto")
    if kernel not in ("auto", "numba", "numpy"):
        raise GraphError(f"block_kernel must be 'auto', 'numba' or 'numpy', got {kernel!r}")
    split_every = options.get("split_every", 4)
    if isinstance(split_every, bool) or not isinstance(split_every, int) or split_every < 2:
        raise GraphError(f"split_every must be an int >= 2, got {split_every!r}")
    return Options(split_every=split_every, block_kernel=kernel,
                   numba_min_elements=int(options.get("numba_min_elements", 1 << 15)),
                   fast_math=bool(options.get("fast_math", True)),
                   chunk_bytes=_chunk_bytes(options))


def _chunk_bytes(options) -> int | None:
    cb = options.get("chunk_bytes")
    if cb is None:
        return None
    if isinstance(cb, bool) or not isinstance(cb, (int, float)) or not math.isfinite(cb) \
            or cb < 1:
        raise GraphError(f"chunk_bytes must be a positive number of bytes, got {cb!r}")
    return int(cb)


def _impl_name(G, n) -> str:
    d = G.nodes[n]
    if d["op"] == "einsum":
        return "dask-sliced" if d["attrs"]["contraction"].slices else "dask-einsum"
    if d["op"] == "fused":
        return f"dask-blockwise-{d['attrs']['pattern']}"
    return f"dask-{d['op']}"


def _describe(G, n) -> str:
    d = G.nodes[n]
    a = d["attrs"]
    if d["op"] == "einsum":
        c = a["contraction"]
        if c.slices:
            return (f"# one task per slice of {list(c.slices)} (blocks {list(c.blocks)}), "
                    f"tree-summed\nsliced_einsum({c.equation!r}, path={list(c.path)})")
        return f"dask.array.einsum({c.equation!r}, *operands)  # {c.describe()}"
    if d["op"] == "fused":
        return (f"# fused {a['pattern']} group: {' -> '.join(member_ops(G, n))}\n"
                "dask.array.blockwise(GroupBlocks(sub_graph), ...)  # numba kernel per block")
    return f"dask: {d['op']}({', '.join(f'{k}={v!r}' for k, v in a.items())})"


# ---------------------------------------------------------------------------------- inputs


def input_chunks(G, options: dict) -> dict:
    """Per input name its dask chunk spec; None (not named): "auto" for a NumPy input, its
    own chunks for a dask array."""
    spec = options.get("chunks")
    names = [G.nodes[i]["name"] for i in G.graph["inputs"]]
    if isinstance(spec, dict):
        unknown = sorted(set(spec) - set(names))
        if unknown:
            raise GraphError(f"chunks names unknown input(s) {unknown}; the inputs are {names}")
        per = {nm: spec.get(nm) for nm in names}
    else:
        per = {nm: spec for nm in names}
    return per


def _to_dask(a, chunks, shape, dtype, chunk_bytes):
    import dask.array as da

    if isinstance(a, da.Array):
        return a if chunks is None else a.rechunk(_normalize(chunks, shape, dtype, chunk_bytes))
    return da.from_array(np.asarray(a), chunks=_normalize(chunks or "auto", shape, dtype,
                                                          chunk_bytes))


def _normalize(chunks, shape, dtype, chunk_bytes):
    from dask.array.core import normalize_chunks

    if math.prod(shape) == 0 and (isinstance(chunks, str) or chunks is None):
        chunks = -1      # no data to split: one (empty) chunk ("auto" divides by its size)
    try:
        out = normalize_chunks(chunks, shape, limit=chunk_bytes, dtype=np.dtype(dtype))
    except (ValueError, TypeError, ZeroDivisionError) as e:
        raise GraphError(f"chunks {chunks!r} do not fit shape {tuple(shape)}: "
                         f"{type(e).__name__}: {e}") from None
    if any(c == 0 for dim, cs in zip(shape, out) if dim for c in cs):
        raise GraphError(f"chunks {chunks!r} do not fit shape {tuple(shape)}: a chunk of a "
                         "non-empty dim has size 0")
    return out


# ------------------------------------------------------------------------------------ plan


class DaskPlan(StepsIntrospection):
    """A compiled graph that runs as a dask graph. Same public attributes as ``Plan``.

    Attributes:
        source_graph, graph, steps, kernels, memory, report: as ``Plan``.
        details: the lowering facts (input chunks, rechunks and bytes moved, slice tasks).
    """

    def __init__(self, *, source_graph, graph, steps, memory, backend, report, options, order):
        self.source_graph = source_graph
        self.graph = graph
        self.steps = steps
        self.memory = memory
        self.arena_bytes = 0
        self.backend = backend
        self.report = report
        self.options = dict(options)
        self.details: dict = {}
        self._order = order
        self._opts = lowering_options(self.options)
        self._chunks = input_chunks(graph, self.options)
        self._struct = graph.graph["output_structure"]

    @classmethod
    def build(cls, G, source_graph, backend, ctx, report) -> "DaskPlan":
        order = execution_order(G)
        steps = []
        for n in order:
            d = G.nodes[n]
            if d["op"] in ("input", "const"):
                continue
            k = backend.kernel(G, n, ctx)
            kinds = member_ops(G, n)
            steps.append(Step(index=len(steps), name=k.name, node=n, op_kinds=kinds, kernel=k,
                              in_slots=(), out_slot=n, shape=tuple(d["shape"]),
                              dtype=d["dtype"], offset=None,
                              is_output=n in G.graph["outputs"], flops=cost.node_flops(G, n),
                              bytes=cost.node_bytes(G, n),
                              srcs=(d["src"],) if d.get("src") else ()))
        memory = G.graph.get("arena_layout") or naive_layout(G, order)
        plan = cls(source_graph=source_graph, graph=G, steps=steps, memory=memory,
                   backend=backend, report=report, options=ctx.options, order=order)
        plan._dry_run()
        return plan

    def __repr__(self) -> str:
        return (f"DaskPlan({self.graph.graph.get('name')!r}, {len(self.steps)} steps, "
                f"{self.details.get('tasks', '?')} tasks)")

    # -- building the dask graph ------------------------------------------------------------
    def dask_inputs(self, arrays: list) -> list:
        """Bound input arrays as dask arrays in the planned chunks."""
        G = self.graph
        out = []
        for i, a in zip(G.graph["inputs"], arrays):
            d = G.nodes[i]
            out.append(_to_dask(a, self._chunks[d["name"]], d["shape"], d["dtype"],
                                self._opts.chunk_bytes))
        return out

    def build_steps(self, inputs: list, on_step=None) -> list:
        """The step loop: the outputs' dask arrays for dask ``inputs`` (``dask_inputs``),
        each step lowered in order. ``on_step(step, array, log)`` (the profile's and the
        dry run's hook) is called after each step and returns the array later steps use."""
        from .lowering import StepLog, constant

        G = self.graph
        env = dict(zip(G.graph["inputs"], inputs))
        for n in self._order:
            if G.nodes[n]["op"] == "const":
                env[n] = constant(G.nodes[n]["attrs"]["value"], self._opts)
        for s in self.steps:
            log = StepLog()
            x = s.kernel.fn([env[u] for u in ir.operands(G, s.node)], None, log)
            env[s.node] = x if on_step is None else on_step(s, x, log)
        return [env[o] for o in G.graph["outputs"]]

    def _dry_run(self) -> None:
        """Lower once over placeholders of the planned chunks; fill in the report facts."""
        import dask.array as da

        G = self.graph
        placeholders = []
        chunks_in = {}
        for i in G.graph["inputs"]:
            d = G.nodes[i]
            c = _normalize(self._chunks[d["name"]] or "auto", d["shape"], d["dtype"],
                           self._opts.chunk_bytes)
            chunks_in[d["name"]] = [list(x) for x in c]
            placeholders.append(da.empty(d["shape"], dtype=d["dtype"], chunks=c))
        logs: dict = {}

        def keep_log(step, x, log):
            logs[step.index] = (log, x)
            return x

        outs = self.build_steps(placeholders, keep_log)
        moved = []
        for s in self.steps:
            log, arr = logs[s.index]
            info = {"chunks": [list(c) for c in arr.chunks], "blocks": int(arr.npartitions),
                    "largest_chunk_bytes": int(math.prod(arr.chunksize) * arr.dtype.itemsize),
                    "rechunks": log.rechunks, "bytes_moved": log.bytes_moved}
            if log.notes:
                info["notes"] = log.notes
            if getattr(log, "sliced", None):
                info["sliced"] = log.sliced
            s.kernel.details.update(info)
            moved += [{"step": s.index, "node": s.node, **r} for r in log.rechunks]
        graph = collection_graph(outs)
        self.details = {
            "input_chunks": chunks_in, "tasks": len(graph), "rechunks": moved,
            "bytes_moved": sum(r["bytes"] for r in moved),
            "sliced_steps": [s.index for s in self.steps if "sliced" in s.kernel.details],
            "block_kernel": self._opts.block_kernel, "split_every": self._opts.split_every}

    # -- running ----------------------------------------------------------------------------
    def lazy(self, *args, **kwargs):
        """The outputs as dask arrays (nothing computed), in the structure of ``g.output``."""
        arrays = bind_inputs(self.graph, args, kwargs)
        return restructure(self._struct, self.build_steps(self.dask_inputs(arrays)))

    def __call__(self, *args, **kwargs):
        arrays = bind_inputs(self.graph, args, kwargs)
        if any(0 in tuple(d["shape"]) for _, d in self.graph.nodes(data=True)):
            # an empty value somewhere: nothing to distribute, and dask's blockwise
            # reductions have no identity for an empty block; the reference runs it
            from ...ir.interpreter import run_graph

            return restructure(self._struct, self._fresh(run_graph(self.graph, arrays),
                                                         arrays))
        outs = self.build_steps(self.dask_inputs(arrays))
        try:
            results = compute(outs, self.options.get("client"),
                              self.options.get("progress", "auto"))
        except VALUE_ERRORS as e:
            # a value NumPy refuses inside a block task (an integer to a negative integer
            # power): the user's error, named, as on every other backend
            ops_ = sorted({d["op"] for _, d in self.graph.nodes(data=True)
                           if d["op"] not in ("input", "const")})
            raise GraphError(f"{type(e).__name__} while computing on dask: {e} (the graph's "
                             f"ops: {', '.join(ops_)})") from e
        return restructure(self._struct, self._fresh(results, arrays))

    def _fresh(self, results: list, inputs: list) -> list:
        """NumPy arrays of the IR's dtypes that alias no input, constant or other output
        (dask's local schedulers may hand back an input's block itself)."""
        G = self.graph
        owned = [a for a in inputs if isinstance(a, np.ndarray)] + \
            [np.asarray(G.nodes[n]["attrs"]["value"]) for n in G if G.nodes[n]["op"] == "const"]
        out = []
        for o, r in zip(G.graph["outputs"], results):
            r = np.asarray(r, dtype=G.nodes[o]["dtype"])
            if any(np.may_share_memory(r, x) for x in owned + out):
                r = r.copy()
            out.append(r)
        return out

    def profile(self, *args, repeat: int = 3, warmup: int = 1, **kwargs):
        """Per-step times on the cluster, steps run one after another
        (``dask_graph/profile.py``)."""
        from .profile import profile_dask_plan

        return profile_dask_plan(self, bind_inputs(self.graph, args, kwargs), repeat=repeat,
                                 warmup=warmup)
