"""``Plan``: the executable result of ``compile()`` — a flat list of pre-bound steps over an
arena checked out of the ``TensorPool`` per call (DESIGN §5).

Per call the plan allocates only the arrays it returns; intermediates live in the arena at
the offsets of the memory plan. Each concurrent call checks out its own arena, so a plan
may be called from several threads at once. User inputs are never written to.
"""

from __future__ import annotations

import math
import threading
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import networkx as nx
import numpy as np

from . import threads
from .errors import VALUE_ERRORS, GraphError, InputError

ALIGN = 64  # bytes: cache-line (and AVX-512) aligned buffers


@dataclass
class Kernel:
    """A compiled step body: ``fn(args, out) -> array`` writes into ``out`` when given.

    ``source`` is readable code (generated source, or the library call it makes) and
    ``impl`` names the implementation chosen (e.g. ``numpy``, ``blas-gemm``, ``numba-fused``).
    ``uses_threads``: the kernel spreads over the call's threads (BLAS, parallel loops or
    blocks); otherwise it runs on the calling thread alone.
    """

    name: str
    fn: Callable
    source: str
    impl: str
    node: int | None = None
    details: dict = field(default_factory=dict)
    uses_threads: bool = False

    def __repr__(self) -> str:
        return f"Kernel({self.name!r}, impl={self.impl!r})"


@dataclass
class Step:
    """One executed step: a kernel, where its operands are, and where its result goes."""

    index: int
    name: str
    node: int | None
    op_kinds: tuple[str, ...]
    kernel: Kernel
    in_slots: tuple[int, ...]
    out_slot: int
    shape: tuple[int, ...]
    dtype: str
    offset: int | None          # arena byte offset, or None for a returned/unplanned value
    is_output: bool
    flops: int
    bytes: int
    srcs: tuple[str, ...] = ()

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * np.dtype(self.dtype).itemsize


@dataclass
class MemoryPlan:
    """Where each intermediate lives in the arena, and what that costs.

    ``naive_bytes``: every intermediate in its own buffer; ``planned_bytes``: the arena;
    ``lower_bound_bytes``: the most bytes live at any one step (no plan can do better).
    ``inplace`` maps a node to the operand whose buffer it overwrites."""

    offsets: dict[int, int]
    sizes: dict[int, int]
    naive_bytes: int
    planned_bytes: int
    lower_bound_bytes: int
    inplace: dict[int, int] = field(default_factory=dict)
    intervals: dict[int, tuple[int, int]] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"naive_bytes": self.naive_bytes, "planned_bytes": self.planned_bytes,
                "lower_bound_bytes": self.lower_bound_bytes,
                "offsets": {str(k): v for k, v in self.offsets.items()},
                "inplace": {str(k): v for k, v in self.inplace.items()}}


def align(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


# ------------------------------------------------------------------------ inputs / outputs


def bind_inputs(G: nx.MultiDiGraph, args: Sequence, kwargs: dict) -> list:
    """Match call arguments to the graph's inputs and validate names, shapes and dtypes.

    Arrays must have the declared dtype exactly; Python scalars and lists are converted to
    it. Raises ``InputError`` naming the input, what was expected and what came."""
    ins = G.graph["inputs"]
    names = [G.nodes[i]["name"] for i in ins]
    if len(args) > len(names):
        raise InputError(f"plan takes {len(names)} input(s) {names}, got {len(args)} "
                         "positional arguments")
    bound = dict(zip(names, args))
    for k, v in kwargs.items():
        if k in bound:
            raise InputError(f"input {k!r} given both positionally and by name")
        if k not in names:
            raise InputError(f"unexpected input {k!r}; the plan's inputs are {names}")
        bound[k] = v
    missing = [n for n in names if n not in bound]
    if missing:
        raise InputError(f"missing input(s) {missing}; the plan's inputs are {names}")
    out = []
    for nid, name in zip(ins, names):
        d = G.nodes[nid]
        v = bound[name]
        shape, dtype = tuple(d["shape"]), d["dtype"]
        if not (hasattr(v, "shape") and hasattr(v, "dtype")):
            v = convert_exact(v, dtype, name, d.get("src"))
        elif isinstance(v, np.ndarray) and not v.dtype.isnative:
            v = v.astype(v.dtype.newbyteorder("="))   # byte-swapped: same values, native order
        if tuple(v.shape) != shape or np.dtype(v.dtype).name != dtype:
            raise InputError(f"input {name!r} expects shape {shape} dtype {dtype}, got shape "
                             f"{tuple(v.shape)} dtype {np.dtype(v.dtype).name}",
                             op="input", src=d.get("src"))
        out.append(v)
    return out


def convert_exact(v, dtype: str, name: str, src=None) -> np.ndarray:
    """A Python scalar or (nested) list as an array of ``dtype``, only where no value
    changes: ``[1.7]`` into int32, ``2**40`` into int32, ``3`` into bool and strings are
    refused. Python floats may round into a narrower float type (NumPy treats Python scalars
    as weakly typed), but never overflow to inf."""
    def refuse(why):
        return InputError(f"input {name!r}: cannot convert {type(v).__name__} to {dtype} "
                          f"exactly: {why}", op="input", src=src)

    try:
        a = np.asarray(v)
    except (TypeError, ValueError, OverflowError) as e:
        raise refuse(f"{type(e).__name__}: {e}") from None
    if a.dtype.kind not in "biufc":
        raise refuse(f"its values are {a.dtype} (strings and objects are never converted)")
    target = np.dtype(dtype)
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        c = a.astype(target)
        back = c.astype(a.dtype)
    rounding_ok = a.dtype.kind in "fc" and target.kind in "fc" and (a.dtype.kind == "f" or
                                                                    target.kind == "c")
    if rounding_ok:
        bad = np.isfinite(a) & ~np.isfinite(c)
    else:
        bad = ~((back == a) | (np.isnan(a) & np.isnan(back) if a.dtype.kind in "fc" else False))
    if np.any(bad):
        first = a[bad].flat[0] if a.ndim else a[()]
        raise refuse(f"{first!r} does not fit")
    return c


def step_error(step: "Step", e: Exception) -> GraphError:
    """``e``, raised while running ``step``, as a ``GraphError`` naming the step's ops and the
    user's source lines."""
    return GraphError(f"{type(e).__name__} in step {step.index} ({step.name}: "
                      f"{' '.join(step.op_kinds)}): {e}", op=step.op_kinds[-1] if step.op_kinds
                      else None, src=", ".join(step.srcs) or None, node=step.node)


def restructure(struct: dict, values: list):
    """Arrange output values in the structure given to ``g.output``."""
    kind = struct["kind"]
    if kind == "tensor":
        return values[0]
    if kind == "tuple":
        return tuple(values)
    if kind == "list":
        return list(values)
    return dict(zip(struct["keys"], values))


# ----------------------------------------------------------------------------------- arena


class _Arena:
    """One call's working set: the arena buffer, views at the planned offsets, slot list."""

    __slots__ = ("buffer", "vals", "outs")

    def __init__(self, buffer, vals, outs):
        self.buffer = buffer
        self.vals = vals
        self.outs = outs


class StepsIntrospection:
    """``kernels`` and ``input_names`` of a plan with ``steps`` and ``graph`` (shared by the
    host plans and ``DaskPlan``)."""

    @property
    def kernels(self) -> list[Kernel]:
        return [s.kernel for s in self.steps]

    @property
    def input_names(self) -> list[str]:
        return [self.graph.nodes[i]["name"] for i in self.graph.graph["inputs"]]


class Plan(StepsIntrospection):
    """A compiled graph. Call it like the function the graph describes.

    Attributes:
        source_graph: the IR before any pass.
        graph: the IR after the passes.
        steps: the executed steps in order.
        kernels: one per step, each with ``.source``.
        memory: the ``MemoryPlan``.
        report: the ``OptimizationReport``.
        backend: the backend object.
    """

    def __init__(self, *, source_graph, graph, steps: list[Step], memory: MemoryPlan,
                 arena_bytes: int, backend, pool, input_slots, output_slots, init_vals,
                 report=None, options=None):
        self.source_graph = source_graph
        self.graph = graph
        self.steps = steps
        self.memory = memory
        self.arena_bytes = arena_bytes
        self.backend = backend
        self.pool = pool
        self.report = report
        self.options = dict(options or {})
        self.threads = threads.check_threads(self.options.get("threads"), "threads")
        self._input_slots = tuple(input_slots)
        self._output_slots = tuple(output_slots)
        self._init_vals = list(init_vals)
        self._struct = graph.graph["output_structure"]
        # Pre-bound program: the hot loop touches nothing else.
        self._program = tuple((s.kernel.fn, s.in_slots, s.out_slot, s.index) for s in steps)
        self._output_allocs = tuple((s.index, s.shape, s.dtype) for s in steps if s.is_output)
        from .backends.base import Backend

        # The common call (arrays of exactly the declared shape and dtype, on a backend that
        # computes on host arrays as they are) skips the general binding: 11 -> 2 us.
        self._fast_bind = type(backend).asarray is Backend.asarray
        ins = graph.graph["inputs"]
        self._names = tuple(graph.nodes[i]["name"] for i in ins)
        self._signature = tuple((np.dtype(graph.nodes[i]["dtype"]), tuple(graph.nodes[i]["shape"]))
                                for i in ins)
        self._free: list[_Arena] = []
        self._lock = threading.Lock()
        self.max_cached_arenas = 4
        self.arena_stats = {"created": 0, "reused": 0, "live": 0, "max_live": 0}

    def __repr__(self) -> str:
        return (f"Plan({self.graph.graph.get('name')!r}, backend={self.backend.name!r}, "
                f"{len(self.steps)} steps, arena {self.arena_bytes} B)")

    # -- arenas -----------------------------------------------------------------------------
    def _new_arena(self) -> _Arena:
        buf = self.pool.acquire(self.arena_bytes)
        outs: list[Any] = [None] * len(self.steps)
        for s in self.steps:
            if s.offset is not None:
                outs[s.index] = self.backend.view(buf, s.offset, s.shape, s.dtype)
        return _Arena(buf, list(self._init_vals), outs)

    def _checkout(self) -> _Arena:
        with self._lock:
            st = self.arena_stats
            st["live"] += 1
            st["max_live"] = max(st["max_live"], st["live"])
            if self._free:
                st["reused"] += 1
                return self._free.pop()
            st["created"] += 1
        return self._new_arena()

    def _checkin(self, arena: _Arena) -> None:
        for s in self._output_allocs:
            arena.outs[s[0]] = None
        vals = arena.vals
        for i, v in enumerate(self._init_vals):
            vals[i] = v
        with self._lock:
            self.arena_stats["live"] -= 1
            if len(self._free) < self.max_cached_arenas:
                self._free.append(arena)
                return
        self.pool.release(arena.buffer)

    def memory_stats(self) -> dict:
        """Measured memory next to the plan's prediction: ``high_water_bytes`` is the most
        arena bytes this plan had checked out at once (concurrent calls each hold one);
        ``pool`` the backend's pool statistics (hits, misses, bytes held, high water)."""
        with self._lock:
            st = dict(self.arena_stats)
        return {"planned_bytes": self.memory.planned_bytes, "arena_bytes": self.arena_bytes,
                "high_water_bytes": st["max_live"] * self.arena_bytes,
                "arenas_created": st["created"], "max_concurrent_calls": st["max_live"],
                "pool": self.pool.stats.to_dict()}

    @property
    def idle_arena_bytes(self) -> int:
        """Bytes of the arenas this plan keeps for its next calls (none checked out)."""
        return len(self._free) * self.arena_bytes

    def release_arenas(self) -> None:
        """Give every cached arena back to the pool."""
        with self._lock:
            free, self._free = self._free, []
        for a in free:
            self.pool.release(a.buffer)

    # -- execution --------------------------------------------------------------------------
    def bind(self, args, kwargs) -> list:
        """Validated, backend-resident input arrays for one call."""
        arrays = bind_inputs(self.graph, args, kwargs)
        return [self.backend.asarray(a) for a in arrays]

    def __call__(self, *args, **kwargs):
        if self._fast_bind:
            arrays = self._exact_arrays(args, kwargs)
            if arrays is not None:
                return self.run(arrays)
        return self.run(self.bind(args, kwargs))

    def _exact_arrays(self, args, kwargs):
        """The inputs in order if every one is an ndarray of exactly the declared shape and
        dtype, else None (``bind`` then validates, converts or explains)."""
        if kwargs:
            if args or len(kwargs) != len(self._names):
                return None
            try:
                args = [kwargs[k] for k in self._names]
            except KeyError:
                return None
        elif len(args) != len(self._names):
            return None
        for a, (dtype, shape) in zip(args, self._signature):
            if type(a) is not np.ndarray or a.dtype != dtype or a.shape != shape:
                return None
        return list(args)

    def run(self, arrays: list):
        """Execute on already-bound inputs (see ``bind``), with this call's share of the
        thread budget (``graphopt.threads``)."""
        arena = self._checkout()
        threads.enter_call(self.threads)
        try:
            vals, outs = arena.vals, arena.outs
            for slot, a in zip(self._input_slots, arrays):
                vals[slot] = a
            empty = self.backend.empty
            for k, shape, dtype in self._output_allocs:
                outs[k] = empty(shape, dtype)
            for fn, ins, out_slot, i in self._program:
                vals[out_slot] = fn([vals[j] for j in ins], outs[i])
            results = [vals[s] for s in self._output_slots]
        except VALUE_ERRORS as e:
            raise step_error(self.steps[i], e) from e
        finally:
            threads.exit_call()
            self._checkin(arena)
        return restructure(self._struct, self.backend.finish(results, self.options))

    def profile(self, *args, repeat: int = 10, warmup: int = 1, **kwargs):
        """Run ``repeat`` times in an instrumented loop; returns a ``Profile``."""
        from .profiler import profile_plan

        return profile_plan(self, self.bind(args, kwargs), repeat=repeat, warmup=warmup)
