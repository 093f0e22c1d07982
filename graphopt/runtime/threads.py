"""One thread budget for the process, owned by graphopt and shared by BLAS and numba.

Where the threads come from: ``with go.thread_budget(n)`` around a call, else the plan's
``compile(..., threads=n)``, else ``$GRAPHOPT_NUM_THREADS``, else the cores this process
may run on (``os.sched_getaffinity``). Every plan call runs between ``enter_call`` and
``exit_call``:

- a call alone gets the whole budget; concurrent calls from other user threads share it
  (``budget // calls in flight`` each), and at most the process budget's worth of calls
  run at once (the others wait for a slot), so four user threads on two cores never start
  eight;
- numba kernels get the call's share through ``numba.set_num_threads`` (per thread);
- BLAS: where a plan's only threaded steps are GEMMs (``thread_use``: contractions,
  a tensor network along its path) and its call is the only one in flight, BLAS runs on
  the call's threads and threads each GEMM itself. Otherwise BLAS runs one thread: a large
  GEMM is split over the call's threads by graphopt (``backends/cpu_gemm.py``) and tiled
  blocks run in parallel (``run_parallel``), each part a single-threaded BLAS call on
  graphopt's workers. The user's own BLAS setting is given back when no call is in flight
  (``blas_limits`` keeps the counts; every change is made here, under this module's lock).

Why graphopt splits GEMMs beside other parallel work instead of threading OpenBLAS:
OpenBLAS's workers spin for about 0.1 s after every threaded call, and numba's OpenMP
workers spin after every parallel kernel; two pools spinning on each other's cores make a
plan many times slower on two threads than on one. graphopt's workers sleep on a condition
when idle, and ``start_numba_workers`` makes numba's OpenMP workers do the same
(``OMP_WAIT_POLICY=passive``, unless the user has chosen a policy). Why BLAS threads a
GEMM-only plan's GEMMs: waking a sleeping worker costs tens of microseconds, which a split
of a small GEMM does not earn back, where OpenBLAS's spinning workers are ready at once.
With no numba loop or graphopt worker in the plan, nothing competes with BLAS's spinning.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
import time

from ..errors import GraphError
from . import blas_limits

ENV_THREADS = "GRAPHOPT_NUM_THREADS"

_local = threading.local()       # override (thread_budget), numba threads set here
_lock = threading.Lock()         # guards the counters below and every BLAS limit change
#                                    (``blas_limits``)
_active_calls = 0
_regions = 0
_blas_calls = 0                      # calls in flight that let BLAS thread their GEMMs
_parallel_at = float("-inf")         # when a call with work on other threads last started
# BLAS threads a GEMM-only call's GEMMs only where no call with numba loops or graphopt's
# workers started for this long: OpenBLAS's workers spin ~0.1 s after each threaded GEMM,
# and would slow such plans called in turn with a GEMM-only one several times over.
BLAS_QUIET_SECONDS = 1.0
_pool = None
_pool_size = 0


_machine: int | None = None


def machine_threads() -> int:
    """The cores this process may run on (read once)."""
    global _machine
    if _machine is None:
        try:
            _machine = max(1, len(os.sched_getaffinity(0)))
        except (AttributeError, OSError):
            _machine = max(1, os.cpu_count() or 1)
    return _machine


def check_threads(value, what: str = "threads") -> int | None:
    """``None`` or a positive int; anything else is a ``GraphError`` naming ``what``."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise GraphError(f"{what} must be a positive whole number of threads (or None for "
                         f"the default), got {value!r}")
    return int(value)


def default_threads() -> int:
    """``$GRAPHOPT_NUM_THREADS`` if it is a positive integer, else ``machine_threads()``.
    Read at the first plan call (calls are microseconds; the environment is not)."""
    global _default
    if _default is None:
        _default = budget_for(None, local=False)[0]
    return _default


_default: int | None = None


@contextlib.contextmanager
def thread_budget(n: int | None):
    """Run the plan calls made inside this block (in this thread) with ``n`` threads;
    ``None`` restores the default. Nests."""
    n = check_threads(n, "thread_budget(n)")
    prev = _local.__dict__.get("override")
    _local.override = n
    try:
        yield
    finally:
        _local.override = prev


def budget_for(plan_threads: int | None, local: bool = True) -> tuple[int, str]:
    """``(threads, where they come from)`` for a call of a plan compiled with
    ``threads=plan_threads`` in this thread (``local=False``: ignoring ``thread_budget``);
    reads the environment now."""
    o = _local.__dict__.get("override") if local else None
    if o is not None:
        return o, "thread_budget()"
    if plan_threads is not None:
        return plan_threads, "compile(threads=)"
    v = os.environ.get(ENV_THREADS, "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v), f"${ENV_THREADS}"
    return machine_threads(), "os.sched_getaffinity"


# ------------------------------------------------------------------------ BLAS and numba


def blas_for_gemm() -> bool:
    """Before a GEMM large enough for BLAS to thread: BLAS set for it. True where BLAS runs
    one thread (graphopt threads the GEMM itself, or it runs inside a parallel region):
    OpenBLAS's own workers spin for ~0.1 s after every threaded call, on the cores
    graphopt's workers and numba's need next. False where BLAS threads the GEMM itself: on
    this call's threads where the call may let it (``enter_call(blas=True)``), else as it
    is while another call in flight does (BLAS's threads are never changed under a call
    that runs on them). Outside a plan call (compile-time timing) BLAS keeps the user's
    setting."""
    n = _local.__dict__.get("blas")
    if n:
        if blas_limits.set_to() != n:
            with _lock:
                blas_limits.set_threads(n)
        return False
    if blas_limits.set_to() != 1 and _active_calls:
        with _lock:
            if _blas_calls:
                return False
            blas_limits.set_threads(1)
    return True


def thread_use(kernels) -> tuple[bool, bool]:
    """How a plan's steps use the call's threads, from per step ``(uses_threads,
    blas_only_threads)``: ``(blas, parallel)``. ``parallel``: some step runs numba loops
    or blocks or slices on graphopt's workers; ``blas``: some step is threaded and none is
    parallel, so BLAS may thread the GEMMs itself (``enter_call``)."""
    kernels = list(kernels)
    parallel = any(t and not b for t, b in kernels)
    return any(t for t, _ in kernels) and not parallel, parallel


def blas_threads() -> int | None:
    """What graphopt set BLAS to for the calls in flight (``None``: the user's own)."""
    return blas_limits.set_to()


def set_numba_threads(n: int) -> int:
    """numba's thread count for parallel kernels launched from this thread (capped at the
    pool numba started with); returns what was set. A no-op until numba is imported."""
    mine = _local.__dict__
    if mine.get("numba") == n:
        return n
    nb = sys.modules.get("numba")
    if nb is None:
        return n
    n = max(1, min(n, nb.config.NUMBA_NUM_THREADS))
    if mine.get("numba") != n:
        start_numba_workers()
        nb.set_num_threads(n)
        _local.numba = n
    return n


_wait_policy = "not started"


def start_numba_workers() -> None:
    """Start numba's threading layer (once) with OpenMP workers that sleep when idle
    instead of spinning on the cores BLAS needs next, unless the user chose a wait policy.
    libgomp reads the variable when it is loaded, so it is set for that moment only."""
    global _wait_policy
    if _wait_policy != "not started":
        return
    with _lock:
        if _wait_policy != "not started":
            return
        user = os.environ.get("OMP_WAIT_POLICY")
        if user is not None:
            _wait_policy = f"{user} (the user's OMP_WAIT_POLICY)"
        elif _libgomp_loaded():
            _wait_policy = ("default: libgomp was loaded by another library first (set "
                            "OMP_WAIT_POLICY=passive before importing it)")
        else:
            os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
            _wait_policy = "passive (set by graphopt)"
        try:
            from numba.np.ufunc import parallel

            parallel._launch_threads()
        except Exception as e:  # no threading layer: numba's kernels run on one thread
            _wait_policy = f"numba has no threading layer ({type(e).__name__})"
        finally:
            if user is None:
                os.environ.pop("OMP_WAIT_POLICY", None)


def _libgomp_loaded() -> bool:
    try:
        with open("/proc/self/maps") as f:
            return "libgomp" in f.read()
    except OSError:
        return False


# ------------------------------------------------------------------------------ per call


_gate = None    # a queue of slot tokens (SimpleQueue: C-level blocking get, no Condition)


def _call_gate():
    """At most ``default_threads()`` calls run at once; the others wait for a slot. More
    only time-slice the same cores and evict each other's caches."""
    global _gate
    if _gate is None:
        with _lock:
            if _gate is None:
                _gate = call_slots(default_threads())
    return _gate


def call_slots(n: int):
    """A gate of ``n`` slots: ``get()`` takes one (waiting), ``put(None)`` gives it back."""
    import queue

    q = queue.SimpleQueue()
    for _ in range(n):
        q.put(None)
    return q


# Kernel implementations that run no numba code: a plan of only these never starts numba's
# threading layer (a few ms at a process's first call).
NO_NUMBA_IMPLS = frozenset({"numpy", "numpy-sliced", "numpy-einsum", "numpy-ufunc",
                            "blas-gemm", "einsum-gemm", "copy"})


def enter_call(plan_threads: int | None, numba: bool = True, blas: bool = False,
               parallel: bool = False) -> int:
    """A plan call starts in this thread (waiting for a slot while the process budget's
    worth of calls run): returns the threads it may use, ``budget // calls in flight``
    (numba set to them for this thread where the plan runs ``numba`` code). With ``blas``
    (the plan's threaded steps are all GEMMs: ``thread_use``), a call alone in flight
    with more than one thread sets BLAS to them and lets it thread each GEMM itself, unless
    a call with ``parallel`` work (numba loops or graphopt's workers on the call's threads)
    started in the last ``BLAS_QUIET_SECONDS``. A call made inside a call (same thread)
    takes no slot. Pair with ``exit_call``."""
    global _active_calls, _blas_calls, _parallel_at
    mine = _local.__dict__
    budget = mine.get("override") or plan_threads or _default or default_threads()
    depth = mine.get("depth", 0)
    if depth == 0:
        (_gate or _call_gate()).get()
    mine["depth"] = depth + 1
    with _lock:
        _active_calls += 1
        calls = _active_calls
        n = budget // calls or 1
        if parallel:
            _parallel_at = time.monotonic()
        elif blas and depth == 0 and calls == 1 and n > 1 and not _regions and \
                time.monotonic() - _parallel_at > BLAS_QUIET_SECONDS:
            _blas_calls += 1       # (BLAS is set at the call's first large GEMM)
            mine["blas"] = n
    mine["call"] = n
    if numba and mine.get("numba") != n:
        set_numba_threads(n)
    return n


def exit_call() -> None:
    """The call ends; the last one in flight gives BLAS back its user's thread count."""
    global _active_calls, _blas_calls
    mine = _local.__dict__
    with _lock:
        _active_calls -= 1
        if mine["depth"] == 1 and mine.pop("blas", None):
            _blas_calls -= 1
        if _active_calls == 0 and blas_limits.set_to() is not None:
            blas_limits.restore_user()
    mine["depth"] -= 1
    if mine["depth"] == 0:
        mine["call"] = None       # outside a call, kernels run on one thread
        _gate.put(None)


def active_calls() -> int:
    """Plan calls in flight in this process."""
    return _active_calls


@contextlib.contextmanager
def parallel_region():
    """BLAS runs one thread while any parallel region is open."""
    global _regions
    with _lock:
        _regions += 1
        if not _blas_calls:     # (never under a call whose GEMMs BLAS threads)
            blas_limits.set_threads(1)
    try:
        yield
    finally:
        with _lock:
            _regions -= 1
            if _regions == 0 and _active_calls == 0 and blas_limits.set_to() is not None:
                blas_limits.restore_user()    # a region outside any plan call


def _worker_pool(n: int):
    """graphopt's worker threads (at least ``n``); they sleep when idle."""
    global _pool, _pool_size
    with _lock:
        if _pool is None or _pool_size < n:
            from concurrent.futures import ThreadPoolExecutor

            old, _pool_size = _pool, max(n, machine_threads())
            _pool = ThreadPoolExecutor(max_workers=_pool_size,
                                       thread_name_prefix="graphopt-worker")
            if old is not None:
                old.shutdown(wait=False)
        return _pool


def _one_thread(fn, chunk):
    set_numba_threads(1)
    _local.call = 1
    return fn(chunk)


def run_parallel(fn, chunks: list, threads: int) -> list:
    """``[fn(c) for c in chunks]`` on up to ``threads`` threads (the caller is one of them),
    each item with one BLAS and one numba thread. Items must not share what they write."""
    if threads <= 1 or len(chunks) <= 1:
        return [fn(c) for c in chunks]
    pool = _worker_pool(threads - 1)
    with parallel_region():
        futs = [pool.submit(_one_thread, fn, c) for c in chunks[1:]]
        prev = _local.__dict__.get("call") or 1
        try:
            first = _one_thread(fn, chunks[0])
        finally:
            _local.call = prev
            set_numba_threads(prev)
        return [first] + [f.result() for f in futs]


# Below this many FLOPs per thread, waking a worker costs more than the work it is given.
WORKER_MIN_FLOPS = 4e6


def useful_threads(flops: float, nthreads: int) -> int:
    """How many of ``nthreads`` threads ``flops`` of work can keep busy enough to pay for
    waking them (at least 1)."""
    if WORKER_MIN_FLOPS <= 0:
        return max(1, nthreads)
    return max(1, min(nthreads, int(flops // WORKER_MIN_FLOPS)))


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges covering ``range(n)`` in ``min(parts, n)`` near-equal parts."""
    parts = max(1, min(parts, n))
    cuts = [n * i // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:])]


def current_threads() -> int:
    """Threads the step running in this thread may use (1 outside a plan call)."""
    return _local.__dict__.get("call") or 1


def describe(plan_threads: int | None = None) -> dict:
    """The thread budget a call of a plan compiled with ``threads=plan_threads`` gets here,
    and the runtime's state (BLAS libraries, numba's layer), for the report."""
    n, where = budget_for(plan_threads)
    with _lock:
        blas = [f"{lib.internal_api} {lib.version} "
                f"({getattr(lib, 'threading_layer', None) or 'threads'})"
                for lib in blas_limits.controllers()]
    info = {"budget": n, "from": where, "machine": machine_threads(), "blas": blas,
            "blas_threads": blas_limits.set_to(), "active_calls": _active_calls,
            "blas_threaded_calls": _blas_calls}
    nb = sys.modules.get("numba")
    if nb is not None:
        try:
            info["numba_layer"] = nb.threading_layer()
        except ValueError:
            info["numba_layer"] = "not started"
        info["numba_max_threads"] = nb.config.NUMBA_NUM_THREADS
        info["omp_wait_policy"] = _wait_policy
    return info
