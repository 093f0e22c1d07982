"""One thread budget for the process, owned by graphopt and shared by BLAS and numba.

Where the threads come from: ``with go.thread_budget(n)`` around a call, else the plan's
``compile(..., threads=n)``, else ``$GRAPHOPT_NUM_THREADS``, else the cores this process
may run on (``os.sched_getaffinity``). Every plan call runs under ``running_call``:

- the first call in flight gets the whole budget: BLAS gets it (process-wide, through
  ``threadpoolctl``) and so do numba kernels (``numba.set_num_threads``, per thread);
- concurrent calls from other user threads share it: each gets ``budget // calls`` for its
  numba kernels and BLAS runs one thread while more than one call is in flight, so four
  user threads on two cores never start eight;
- a parallel region (``run_parallel``: tiled blocks, slices, blocked kernels) spreads its
  items over graphopt's worker threads with one thread of BLAS and numba each, never on top
  of busy BLAS threads.

numba's OpenMP layer spins its workers after every parallel kernel; OpenBLAS wants those
cores for the next GEMM. ``start_numba_workers`` makes the OpenMP workers sleep when
idle (``OMP_WAIT_POLICY=passive``, only if the user has not set it) before numba starts
them, which is what made two threads 38x slower than one on attention (issue 13).
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading

from .errors import GraphError

ENV_THREADS = "GRAPHOPT_NUM_THREADS"

_local = threading.local()       # override (thread_budget), numba threads set here
_lock = threading.Lock()         # guards the counters below and every BLAS limit change
_active_calls = 0
_regions = 0
_blas_threads: int | None = None     # what BLAS was last set to by graphopt
_blas_wanted = 1                     # what BLAS gets outside parallel regions, now
_blas_libs = None                    # threadpoolctl controllers of the loaded BLAS libraries
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
    """``$GRAPHOPT_NUM_THREADS`` if it is a positive integer, else ``machine_threads()``."""
    v = os.environ.get(ENV_THREADS, "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v)
    return machine_threads()


@contextlib.contextmanager
def thread_budget(n: int | None):
    """Run the plan calls made inside this block (in this thread) with ``n`` threads;
    ``None`` restores the default. Nests."""
    n = check_threads(n, "thread_budget(n)")
    prev = getattr(_local, "override", None)
    _local.override = n
    try:
        yield
    finally:
        _local.override = prev


def budget_for(plan_threads: int | None) -> tuple[int, str]:
    """``(threads, where they come from)`` for a call of a plan compiled with
    ``threads=plan_threads``."""
    o = getattr(_local, "override", None)
    if o is not None:
        return o, "thread_budget()"
    if plan_threads is not None:
        return plan_threads, "compile(threads=)"
    v = os.environ.get(ENV_THREADS, "").strip()
    if v.isdigit() and int(v) > 0:
        return int(v), f"${ENV_THREADS}"
    return machine_threads(), "os.sched_getaffinity"


# ------------------------------------------------------------------------ BLAS and numba


def _blas_controllers():
    """threadpoolctl's controllers of every BLAS loaded now (lock held); found once, and
    again if another library has loaded one since."""
    global _blas_libs
    if _blas_libs is None:
        from threadpoolctl import ThreadpoolController

        _blas_libs = ThreadpoolController().select(user_api="blas").lib_controllers
    return _blas_libs


def _set_blas(n: int) -> None:
    """BLAS threads process-wide (lock held); nothing to do if already ``n``."""
    global _blas_threads
    if _blas_threads == n:
        return
    for lib in _blas_controllers():
        lib.set_num_threads(n)
    _blas_threads = n


def blas_threads() -> int | None:
    """What graphopt last set BLAS to (``None`` before the first call)."""
    return _blas_threads


def set_numba_threads(n: int) -> int:
    """numba's thread count for parallel kernels launched from this thread (capped at the
    pool numba started with); returns what was set. A no-op until numba is imported."""
    if getattr(_local, "numba", None) == n:
        return n
    nb = sys.modules.get("numba")
    if nb is None:
        return n
    n = max(1, min(n, nb.config.NUMBA_NUM_THREADS))
    if getattr(_local, "numba", None) != n:
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


def enter_call(plan_threads: int | None) -> int:
    """A plan call starts in this thread: returns the threads it may use (BLAS and numba
    set accordingly). Pair with ``exit_call``."""
    global _active_calls, _blas_wanted
    budget = getattr(_local, "override", None) or plan_threads or default_threads()
    with _lock:
        _active_calls += 1
        calls = _active_calls
        _blas_wanted = budget if calls == 1 else 1
        if _regions == 0:
            _set_blas(_blas_wanted)
    mine = _local.call = max(1, budget // calls)
    set_numba_threads(mine)
    return mine


def exit_call() -> None:
    global _active_calls
    with _lock:
        _active_calls -= 1


def active_calls() -> int:
    return _active_calls


@contextlib.contextmanager
def parallel_region():
    """BLAS runs one thread while any parallel region is open."""
    global _regions
    with _lock:
        _regions += 1
        _set_blas(1)
    try:
        yield
    finally:
        with _lock:
            _regions -= 1
            if _regions == 0:
                _set_blas(_blas_wanted)


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
        prev = getattr(_local, "call", None) or 1
        try:
            first = _one_thread(fn, chunks[0])
        finally:
            _local.call = prev
            set_numba_threads(prev)
        return [first] + [f.result() for f in futs]


def split(n: int, parts: int) -> list[tuple[int, int]]:
    """``[start, stop)`` ranges covering ``range(n)`` in ``min(parts, n)`` near-equal parts."""
    parts = max(1, min(parts, n))
    cuts = [n * i // parts for i in range(parts + 1)]
    return [(a, b) for a, b in zip(cuts, cuts[1:])]


def current_threads() -> int:
    """Threads the step running in this thread may use (1 outside a plan call)."""
    return getattr(_local, "call", None) or 1


def describe(plan_threads: int | None = None) -> dict:
    """The thread budget a call of a plan compiled with ``threads=plan_threads`` gets here,
    and the runtime's state (BLAS libraries, numba's layer), for the report."""
    n, where = budget_for(plan_threads)
    with _lock:
        blas = [f"{lib.internal_api} {lib.version} "
                f"({getattr(lib, 'threading_layer', None) or 'threads'})"
                for lib in _blas_controllers()]
    info = {"budget": n, "from": where, "machine": machine_threads(), "blas": blas,
            "blas_threads": _blas_threads, "active_calls": _active_calls}
    nb = sys.modules.get("numba")
    if nb is not None:
        try:
            info["numba_layer"] = nb.threading_layer()
        except ValueError:
            info["numba_layer"] = "not started"
        info["numba_max_threads"] = nb.config.NUMBA_NUM_THREADS
        info["omp_wait_policy"] = _wait_policy
    return info
