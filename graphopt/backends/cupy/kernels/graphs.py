"""CUDA events as the profiler's step clock, and plans captured into a CUDA graph."""

from __future__ import annotations

import threading
import time
import warnings
from collections import OrderedDict

from ....runtime.plan import Plan
from ....runtime.signature import restructure

# ------------------------------------------------------------------------------ profiler


class EventStepClock:
    """Step timestamps from CUDA events on the current stream: nothing synchronizes between
    steps, so the timeline shows device time; ``read()`` anchors it to the host clock."""

    def __init__(self):
        self._events: list = []
        self._t0 = 0

    def mark(self) -> None:
        import cupy

        if not self._events:
            cupy.cuda.get_current_stream().synchronize()
            self._t0 = time.perf_counter_ns()
        self._events.append(cupy.cuda.get_current_stream().record())

    def read(self) -> list[int]:
        import cupy

        if not self._events:
            return []
        self._events[-1].synchronize()
        first = self._events[0]
        return [self._t0 + int(round(cupy.cuda.get_elapsed_time(first, e) * 1e6))
                for e in self._events]


# ---------------------------------------------------------------------------- CUDA graphs


class CudaGraphPlan(Plan):
    """A plan whose launches are captured once into a CUDA graph and replayed
    (``compile(..., cuda_graph=True)``): one launch per call instead of one per kernel.

    A graph reads its inputs at the device addresses it was captured with, so graphs are
    kept per input addresses (up to ``max_graphs``; re-calling with the same device arrays,
    or with NumPy inputs whose upload lands where the last one did, replays without a copy).
    Other calls copy their inputs into the plan's own buffers and replay the graph that
    reads those. Every graph shares one arena, one set of output buffers and a private
    memory pool for the temporaries inside kernels (nothing else may reuse memory a graph
    holds); outputs are copied out, so returned arrays are never reused. Calls are
    serialized by a lock. Plans with large outputs (``max_output_bytes``), and plans with
    something that cannot be captured (``graph_error``), run eagerly.
    """

    max_graphs = 8
    # Graph replays return copies of the outputs; past this many output bytes the copy costs
    # more than the launches a graph saves, and the plan runs eagerly instead.
    max_output_bytes = 16 << 20

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self._graphs: OrderedDict = OrderedDict()
        self._glock = threading.Lock()
        self._garena = None
        self._statics = None
        self._last_stream = None
        self.graph_error: str | None = None
        self._output_bytes = sum(s.nbytes for s in self.steps if s.is_output)
        self.graph_stats = {"captures": 0, "replays": 0, "input_copies": 0}

    def _setup(self) -> None:
        import cupy

        self._garena = self._new_arena()  # held for the plan's life: graphs point into it
        self.allocate_outputs(self._garena.outs, cupy.empty)
        self._gpool = cupy.cuda.MemoryPool()
        self._stream = cupy.cuda.Stream(non_blocking=True)

    def _capture(self, arrays):
        import cupy

        vals, outs = self._garena.vals, self._garena.outs
        self.place_inputs(vals, arrays)
        s = self._stream
        s.wait_event(cupy.cuda.get_current_stream().record())
        with cupy.cuda.using_allocator(self._gpool.malloc), s:
            if not self.graph_stats["captures"]:
                # Compile kernels, create library handles and fill the private pool before
                # capturing: none of that may happen inside a capture.
                self.run_steps(vals, outs)
                s.synchronize()
            s.begin_capture()
            try:
                self.run_steps(vals, outs)
            finally:
                graph = s.end_capture()
        s.synchronize()
        self.graph_stats["captures"] += 1
        return graph

    def run(self, arrays: list, clock=None):
        """Replay the CUDA graph for these inputs (capturing it first where new); a profiled
        run (``clock``), a plan that cannot be captured and a plan with large outputs run
        eagerly, step by step."""
        if clock is not None or self.graph_error is not None or \
                self._output_bytes > self.max_output_bytes:
            return Plan.run(self, arrays, clock)
        import cupy

        with self._glock:
            if self._garena is None:
                self._setup()
            key = tuple((a.data.ptr, a.strides) for a in arrays)
            graph = self._graphs.get(key)
            try:
                if graph is None and len(self._graphs) < self.max_graphs:
                    graph = self._graphs[key] = self._capture(arrays)
            except Exception as e:  # something in the plan cannot be captured: run eagerly
                self.graph_error = f"{type(e).__name__}: {e}"
                warnings.warn(f"graphopt: CUDA graph capture failed, plan runs eagerly "
                              f"({self.graph_error})", stacklevel=3)
                return Plan.run(self, arrays)
            if graph is None:
                if self._statics is None:
                    self._statics = [cupy.empty(a.shape, a.dtype) for a in arrays]
                for buf, a in zip(self._statics, arrays):
                    cupy.copyto(buf, a)
                self.graph_stats["input_copies"] += len(arrays)
                graph = self._graphs.get("static")
                if graph is None:
                    graph = self._graphs["static"] = self._capture(self._statics)
            stream = cupy.cuda.get_current_stream()
            if self._last_stream is not None and self._last_stream != stream:
                stream.wait_event(self._last_stream.record())
            self._last_stream = stream
            graph.launch(stream)
            self.graph_stats["replays"] += 1
            results = [v.copy() for v in self.output_values(self._garena.vals)]
        return restructure(self.graph.graph["output_structure"],
                           self.backend.finish(results, self.options))
