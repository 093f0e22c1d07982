"""The backend protocol and registry (docs/ARCHITECTURE.md, Kernels, steps and the plan).

A backend turns IR nodes into kernels, owns device memory (arena buffers, views, transfers)
and supplies the profiler's clock. ``available()`` is cheap and imports nothing heavy.
"""

from __future__ import annotations

import contextlib
import time
from types import MappingProxyType

import networkx as nx
import numpy as np

from ..analysis.call_bytes import REFERENCE_IMPL, kernel_call_bytes
from ..analysis.fused import member_ops
from ..contraction.rates import HOST_RATES, Rates
from ..errors import GraphError
from ..runtime.kernel import Kernel


class Backend:
    """Base class: host (NumPy) memory; subclasses override what differs."""

    name = "base"
    install_hint = ""
    # Names of the ``compile(..., **options)`` this backend reads (``compile`` rejects a name
    # neither this backend nor a pass reads: a misspelling, or an option of another backend,
    # is an error, not a silently ignored setting).
    compile_options: frozenset = frozenset()
    # Passes whose output this backend cannot run, each with the reason: the pass manager
    # skips them on this backend and the report says why. Only a backend that runs tiled
    # nodes block by block takes the ``tiling`` pass.
    unsupported_passes = MappingProxyType(
        {"tiling": "runs a tiled region whole, not block by block"})
    oom_errors: tuple = (MemoryError,)
    # Computes on the caller's host arrays as they are (``asarray`` is the identity): a plan
    # may then bind exactly-typed NumPy inputs without converting them.
    host_arrays = True
    # Runs a many-operand einsum along its ``path`` attr as one kernel about as fast as the
    # pairwise nodes the contraction pass would emit for it (``contraction_program``): a graph
    # that is one contraction then compiles by ``CONTRACTION_ONLY_PIPELINE``.
    runs_contraction_paths = False
    # Runs several slices of a sliced contraction at once (on host threads): the slicing
    # pass may cut slices for that many workers. A GPU runs them one after another.
    slices_at_once = True
    # The machine-rate table the contraction library's choices read (``contraction.rates``):
    # each contraction step's form, the default path-search budget
    rates: Rates = HOST_RATES

    def __init__(self, **options):
        self.options = options
        self._pool = None

    # -- availability -----------------------------------------------------------------------
    @classmethod
    def available(cls) -> bool:
        return True

    # -- memory -----------------------------------------------------------------------------
    @property
    def pool(self):
        if self._pool is None:
            from ..runtime.pool import TensorPool

            self._pool = TensorPool(self)
        return self._pool

    def memory_bytes(self) -> int | None:
        """The memory one plan's call may use here (None: not known to the client, as on a
        cluster's workers): with no ``memory_limit``, a plan whose predicted peak exceeds
        it is refused at compile. Host memory (``pool.host_memory_bytes``)."""
        from ..runtime.pool import host_memory_bytes

        return host_memory_bytes()

    @contextlib.contextmanager
    def allocation_meter(self):
        """Meter what the code inside allocates at once: yields ``peak()``, the most bytes
        it held together beyond what was held when it began. Host: ``tracemalloc`` (NumPy's
        arrays and Python's objects)."""
        import tracemalloc

        tracing = tracemalloc.is_tracing()
        if not tracing:
            tracemalloc.start()
        try:
            base = tracemalloc.get_traced_memory()[0]
            tracemalloc.reset_peak()
            peak = []
            yield lambda: peak[0]
            peak.append(tracemalloc.get_traced_memory()[1] - base)
        finally:
            if not tracing:
                tracemalloc.stop()

    def alloc(self, nbytes: int):
        """A 1-d uint8 buffer of ``nbytes`` (the arena)."""
        return np.empty(max(nbytes, 1), dtype=np.uint8)

    def view(self, buf, offset: int, shape, dtype):
        """A C-contiguous array of ``shape``/``dtype`` at byte ``offset`` of ``buf``."""
        dt = np.dtype(dtype)
        n = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
        return buf[offset:offset + n].view(dt).reshape(shape)

    def empty(self, shape, dtype):
        return np.empty(shape, dtype=dtype)

    def asarray(self, a):
        """Input array as this backend computes on it (host->device where needed)."""
        return a

    def constant(self, value: np.ndarray):
        return value

    def finish(self, results: list, options: dict) -> list:
        """Outputs as returned to the user (device->host where asked)."""
        return results

    def release_cached(self) -> None:
        """Free memory the backend itself caches (called by the pool on out-of-memory)."""

    # -- timing -----------------------------------------------------------------------------
    def synchronize(self) -> None:
        """Wait for queued work (a no-op on synchronous backends)."""

    def now_ns(self) -> int:
        return time.perf_counter_ns()

    def step_clock(self) -> "HostStepClock":
        """A fresh clock for one profiled run (see ``HostStepClock``); a device backend may
        return one that records device events instead of synchronizing at every mark."""
        return HostStepClock(self)

    # -- kernels ----------------------------------------------------------------------------
    def kernel(self, G: nx.MultiDiGraph, n: int, ctx) -> Kernel:
        raise NotImplementedError

    def workspace_bytes(self, G: nx.MultiDiGraph, n: int) -> int:
        """What node ``n``'s kernel will allocate beside the arena while it runs (its
        ``Kernel.workspace_bytes``), known before any kernel is built: the ``rematerialize``
        pass keeps the largest free of the arena it plans. Here: an einsum's contraction's
        (``Contraction.workspace_bytes``), nothing for any other node."""
        d = G.nodes[n]
        held = d["attrs"].get("contraction") if d["op"] == "einsum" else None
        return held.workspace_bytes if held is not None else 0

    def call_bytes(self, G: nx.MultiDiGraph, n: int) -> int:
        """What node ``n``'s kernel's call will allocate beyond its workspace (its objects
        and temporaries, ``analysis.call_bytes``), known before any kernel is built: an
        einsum run along its path, nothing more; any other node, the reference
        interpreter's NumPy calls; nothing on a device backend (``host_arrays`` False), whose
        peak is its device memory's."""
        if G.nodes[n]["op"] == "einsum" or not self.host_arrays:
            return 0      # (a device's peak holds no host objects)
        return kernel_call_bytes(REFERENCE_IMPL, member_ops(G, n))

    def copy_kernel(self, shape, dtype) -> Kernel:
        def copy(args, out):
            out[...] = args[0]
            return out
        return Kernel("copy", copy, "out[...] = x", impl="copy")

    def build_plan(self, G: nx.MultiDiGraph, source_graph: nx.MultiDiGraph, ctx, report):
        """Lower an optimized IR to a Plan (generic lowering; a backend may replace it)."""
        from ..compiler.lowering import lower

        return lower(G, source_graph, self, ctx, report)


class HostStepClock:
    """Per-step timestamps for the profiler: ``mark()`` once before the first step and once
    after every step; ``read()`` returns the marks as ``now_ns`` times (ns). This default
    synchronizes the backend at every mark, so each interval is the step's own time."""

    def __init__(self, backend: Backend):
        self._backend = backend
        self._marks: list[int] = []

    def mark(self) -> None:
        self._backend.synchronize()
        self._marks.append(self._backend.now_ns())

    def read(self) -> list[int]:
        return list(self._marks)


BACKENDS: dict[str, type[Backend]] = {}


def register_backend(cls: type[Backend]) -> type[Backend]:
    """Class decorator: make a backend available to ``compile(backend=name)``."""
    if cls.name in BACKENDS:
        raise ValueError(f"backend {cls.name!r} is already registered")
    BACKENDS[cls.name] = cls
    return cls


_instances: dict[str, Backend] = {}


def get_backend(name: str) -> Backend:
    """The shared instance of backend ``name``; raises ``GraphError`` if unknown or absent."""
    if name not in BACKENDS:
        raise GraphError(f"unknown backend {name!r}; valid backends: {', '.join(sorted(BACKENDS))}")
    cls = BACKENDS[name]
    if not cls.available():
        raise GraphError(f"backend {name!r} is not available here: {cls.install_hint}")
    if name not in _instances:
        _instances[name] = cls()
    return _instances[name]
