"""``Plan``: the executable result of ``compile()`` — a flat list of pre-bound steps over an
arena checked out of the ``TensorPool`` per call (docs/ARCHITECTURE.md).

Per call the plan allocates only the arrays it returns; intermediates live in the arena at
the offsets of the memory plan. Each concurrent call checks out its own arena, so a plan
may be called from several threads at once. User inputs are never written to.
"""

from __future__ import annotations

import html
import threading
from typing import Any

import numpy as np

from ..analysis.call_bytes import plan_objects_bytes
from ..analysis.liveness import ArenaLayout
from ..errors import VALUE_ERRORS
from ..observe import display, progress
from . import nans, threads
from .kernel import Kernel, Step, step_error
from .signature import bind_inputs, flatten_outputs, restructure

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
        memory: the ``ArenaLayout``.
        report: the ``OptimizationReport``.
        backend: the backend object.
    """

    def __init__(self, *, source_graph, graph, steps: list[Step], memory: ArenaLayout,
                 arena_bytes: int, backend, pool, input_slots, output_slots, init_vals,
                 report=None, options=None):
        self._spec = dict(source_graph=source_graph, graph=graph, steps=steps, memory=memory,
                          arena_bytes=arena_bytes, backend=backend, pool=pool,
                          input_slots=input_slots, output_slots=output_slots,
                          init_vals=init_vals, report=report, options=options)
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
        # only a call this large may take long enough to show a progress line
        self._long_running = sum(s.flops for s in steps) >= progress.LONG_RUN_FLOPS
        # numba's threads are set per call only where a step may run numba code
        self._numba = any(s.kernel.impl not in threads.NO_NUMBA_IMPLS for s in steps)
        # BLAS may thread the GEMMs itself where they are the plan's only threaded work
        self.blas_threads_gemms, self._parallel = threads.thread_use(
            (s.kernel.uses_threads, s.kernel.blas_only_threads) for s in steps)
        self._input_slots = tuple(input_slots)
        self._output_slots = tuple(output_slots)
        self._init_vals = list(init_vals)
        self._struct = graph.graph["output_structure"]
        # Pre-bound program: the hot loop touches nothing else.
        self._program = tuple((s.kernel.fn, s.in_slots, s.out_slot, s.index) for s in steps)
        self._output_allocs = tuple((s.index, s.shape, s.dtype) for s in steps if s.is_output)
        # The common call (arrays of exactly the declared shape and dtype, on a backend that
        # computes on host arrays as they are) skips the general binding, most of a small
        # call's cost.
        self._fast_bind = backend.host_arrays
        ins = graph.graph["inputs"]
        nodes = graph._node
        self._names = tuple(nodes[i]["name"] for i in ins)
        dtypes = {d: np.dtype(d) for d in {nodes[i]["dtype"] for i in ins}}
        self._signature = tuple((dtypes[nodes[i]["dtype"]], tuple(nodes[i]["shape"]))
                                for i in ins)
        self._free: list[_Arena] = []
        self._told_free = 0          # the arenas kept when ``arena_listener`` was last told
        # the kernels that keep memory between calls: the compile cache asks every plan it
        # holds at every compile (``idle_arena_bytes``), not each plan's every step
        self._held = tuple(s.kernel.held_bytes for s in steps if s.kernel.held_bytes is not None)
        self._lock = threading.Lock()
        self.max_cached_arenas = 4
        # called with the plan when a call leaves it keeping more arenas than it last said
        # (or its kernels keep memory of their own), or its arenas were released: what it
        # keeps for its next call changed (the compile cache counts what its plans keep
        # this way: ``compile_cache``)
        self.arena_listener = None
        self.arena_stats = {"created": 0, "reused": 0, "live": 0, "max_live": 0}

    def _repr_html_(self) -> str:
        """The plan in a notebook: its summary line, then its report (``display``)."""
        return f"<p><code>{html.escape(repr(self))}</code></p>" + display.report_html(
            self.report)

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
                arena = None
            # what the plan keeps changed only where it keeps more arenas than it last
            # said, or its kernels keep memory of their own: a call that reused an arena
            # tells nobody
            grew = len(self._free) > self._told_free
            if grew:
                self._told_free = len(self._free)
        if arena is not None:
            self.pool.release(arena.buffer)
        if grew or self._held:
            self._tell_listener()

    def _tell_listener(self) -> None:
        listener = self.arena_listener
        if listener is not None:
            listener(self)

    def memory_stats(self) -> dict:
        """Measured memory next to the plan's prediction: ``high_water_bytes`` is the most
        arena bytes this plan had checked out at once (concurrent calls each hold one);
        ``pool`` the backend's pool statistics (hits, misses, bytes held, high water);
        ``measured_peak_bytes`` the last ``measure_peak_bytes`` (None before one ran)."""
        with self._lock:
            st = dict(self.arena_stats)
        return {"planned_bytes": self.memory.planned_bytes, "arena_bytes": self.arena_bytes,
                "high_water_bytes": st["max_live"] * self.arena_bytes,
                "arenas_created": st["created"], "max_concurrent_calls": st["max_live"],
                "pool": self.pool.stats.to_dict(),
                "measured_peak_bytes": getattr(self, "_measured_peak", None)}

    @property
    def workspace_step(self):
        """The step that allocates the most beside the arena (``Step.call_bytes``: its
        kernel's workspace and its call's objects), or None for a plan without steps."""
        return max(self.steps, key=lambda s: s.call_bytes, default=None)

    @property
    def objects_bytes(self) -> int:
        """The objects one call holds throughout (``analysis.call_bytes``): views, slot
        lists, bound inputs, the output structure. Host memory: counted where the backend
        computes in it (``Backend.host_arrays``); a device plan's peak is its device's."""
        if not self.backend.host_arrays:
            return 0
        return plan_objects_bytes(len(self.steps), len(self._names), len(self._output_slots))

    @property
    def predicted_peak_bytes(self) -> int:
        """The plan's peak working memory per call: the arena, the most one step allocates
        beside it (workspace and its call's objects) and the call's own objects (inputs'
        and outputs' arrays not counted). ``memory_limit`` bounds it."""
        s = self.workspace_step
        return self.arena_bytes + (s.call_bytes if s is not None else 0) + self.objects_bytes

    @property
    def idle_arena_bytes(self) -> int:
        """Bytes of the arenas this plan keeps for its next calls (none checked out), its
        kernels' own included (``Kernel.held_bytes``)."""
        return len(self._free) * self.arena_bytes + sum(held() for held in self._held)

    def release_arenas(self) -> None:
        """Give every cached arena back to the pool, and the kernels' own (``Kernel.release``)."""
        with self._lock:
            free, self._free, self._told_free = self._free, [], 0
        for a in free:
            self.pool.release(a.buffer)
        for s in self.steps:
            if s.kernel.release is not None:
                s.kernel.release()
        self._tell_listener()

    def measure_peak_bytes(self, *args, **kwargs) -> int:
        """What one call on these inputs allocates at once beside its inputs and outputs, as
        the backend counts (``Backend.allocation_meter``: on the host ``tracemalloc``'s
        arrays and the call's Python objects; on a GPU the device allocations), to set beside
        ``predicted_peak_bytes`` (which counts arrays). Two calls run first, unmeasured, so
        that what a process sets up once is not counted (the first call's imports make the
        second list the BLAS libraries again); then the plan's kept arenas and the pool's
        buffers are released, so the arena is counted as on a first call."""
        for _ in range(2):
            self(*args, **kwargs)
        self.release_arenas()
        self.pool.clear()
        with self.backend.allocation_meter() as peak_of:
            results = self(*args, **kwargs)
            self.backend.synchronize()
        peak = peak_of()
        # every output array once, at any depth of the output structure
        leaves = {id(r): r for r in flatten_outputs(results, lambda v: v)[0]}
        self._measured_peak = peak - sum(getattr(r, "nbytes", 0) for r in leaves.values())
        return self._measured_peak

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

    def run(self, arrays: list, clock=None):
        """Execute on already-bound inputs (see ``bind``), with this call's share of the
        thread budget (``graphopt.runtime.threads``); ``clock`` as in ``run_steps``. A large plan's
        call counts its steps on a progress line once it passes a second (``progress``)."""
        if clock is None and self._long_running and progress.enabled():
            with progress.activity(f"running {self.graph.graph.get('name')!r}") as act:
                return self._run(arrays, progress.StepCounter(act, len(self.steps))
                                 if act is not None else None)
        return self._run(arrays, clock)

    def _run(self, arrays: list, clock):
        arena = self._checkout()
        threads.enter_call(self.threads, numba=self._numba, blas=self.blas_threads_gemms,
                           parallel=self._parallel)
        try:
            vals, outs = arena.vals, arena.outs
            self.place_inputs(vals, arrays)
            self.allocate_outputs(outs, self.backend.empty)
            self.run_steps(vals, outs, clock)
            results = self.output_values(vals)
        finally:
            threads.exit_call()
            self._checkin(arena)
        return restructure(self._struct, self.backend.finish(results, self.options))

    def run_steps(self, vals: list, outs: list, clock=None) -> None:
        """The step loop, the one every way of running a plan goes through: each step in
        order over one arena's slot values ``vals`` and output buffers ``outs``.

        ``clock`` (the profiler's hook, e.g. ``backend.step_clock()``): its ``mark()`` is
        called before the first step and after every step. A step's NumPy error becomes a
        ``GraphError`` naming the step; under ``go.debug_nans`` (``nans``) so does a result
        holding a NaN or an infinity."""
        i = 0
        try:
            if clock is None and nans.enabled():
                for fn, ins, out_slot, i in self._program:
                    args = [vals[j] for j in ins]
                    vals[out_slot] = fn(args, outs[i])
                    nans.check(self.steps[i], vals[out_slot], args, self.graph)
            elif clock is None:
                for fn, ins, out_slot, i in self._program:
                    vals[out_slot] = fn([vals[j] for j in ins], outs[i])
            else:
                clock.mark()
                for fn, ins, out_slot, i in self._program:
                    vals[out_slot] = fn([vals[j] for j in ins], outs[i])
                    clock.mark()
        except VALUE_ERRORS as e:
            raise step_error(self.steps[i], e) from e

    def place_inputs(self, vals: list, arrays: list) -> None:
        """Put one call's bound input arrays in their slots of ``vals``."""
        for slot, a in zip(self._input_slots, arrays):
            vals[slot] = a

    def allocate_outputs(self, outs: list, empty) -> None:
        """Fresh output arrays (``empty(shape, dtype)``) in ``outs``: an output is never
        written into memory a later call reuses."""
        for k, shape, dtype in self._output_allocs:
            outs[k] = empty(shape, dtype)

    def output_values(self, vals: list) -> list:
        """The graph's outputs from the slot values of a finished run, in output order."""
        return [vals[s] for s in self._output_slots]

    def rebuilt_as(self, cls: type) -> "Plan":
        """This plan as an instance of the ``Plan`` subclass ``cls`` (same steps, slots and
        pool; e.g. the CUDA-graph plan)."""
        return cls(**self._spec)

    def profile(self, *args, repeat: int = 10, warmup: int = 1, **kwargs):
        """Run ``repeat`` times in an instrumented loop; returns a ``Profile``."""
        from ..observe.profiler import profile_plan

        return profile_plan(self, self.bind(args, kwargs), repeat=repeat, warmup=warmup)
