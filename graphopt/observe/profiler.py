"""The plan profiler (docs/API.md): per-step times of a plan, and what bounds each step.

``profile_plan`` runs a plan's pre-bound program in its own instrumented loop, so
``Plan.run`` carries no profiling code at all (STYLE 11). Timestamps come from the
backend's ``step_clock()``: host backends synchronize at each mark, a GPU backend records
device events, so on either each event spans one step's own execution.
"""

from __future__ import annotations

import json
import numbers
import statistics
import threading
import time
from dataclasses import asdict, dataclass

import numpy as np

from ..errors import GraphError
from ..runtime import threads
from . import display

OVERHEAD_NS = 20_000  # below this a step's time is launch/dispatch cost, not work
OVERHEAD_FACTOR = 10.0  # this far above its roofline time, a step is bound by neither roof
OVERSUBSCRIBED_FACTOR = 1.25  # busy cores beyond this multiple of a step's threads


@dataclass
class StepEvent:
    """One step of one recorded repeat: ``name, op_kinds, start_ns, end_ns, flops, bytes``,
    plus where it comes from (``step`` index, ``repeat`` index) and what it ran.

    ``threads``: the threads the step was given (the call's budget for a kernel that uses
    threads, else 1); ``cpu_ns``: CPU time the whole process spent during the step, so
    ``cpu_ns / duration_ns`` is how many cores were busy (above ``threads``: thread pools
    spinning or oversubscribed; other threads of the process count too)."""

    name: str
    op_kinds: tuple
    start_ns: int
    end_ns: int
    flops: int
    bytes: int
    step: int = 0
    repeat: int = 0
    shape: tuple = ()
    dtype: str = ""
    impl: str = ""
    srcs: tuple = ()
    threads: int = 1
    cpu_ns: int = 0

    @property
    def duration_ns(self) -> int:
        return self.end_ns - self.start_ns

    @property
    def busy_cores(self) -> float:
        """CPU time over wall time: the cores busy during the step."""
        return self.cpu_ns / self.duration_ns if self.duration_ns > 0 else 0.0


@dataclass
class Bottleneck:
    """What bounds one step: ``bound`` is ``"compute"``, ``"memory"`` or ``"overhead"``;
    ``time_ns`` the median over repeats; ``fraction`` the achieved share of the peak of the
    roof that bounds the step (FLOP/s if its compute time at the peaks is the larger,
    else bandwidth)."""

    step: int
    name: str
    bound: str
    time_ns: float
    gflops: float
    gbs: float
    fraction: float
    threads: int = 1
    busy_cores: float = 0.0
    roof: str = ""   # the peak ``fraction`` is of: "FLOP/s", or the bandwidth tier's key

    @property
    def oversubscribed(self) -> bool:
        """More cores busy than the step was given threads (pools spinning or fighting)."""
        return self.busy_cores > self.threads * OVERSUBSCRIBED_FACTOR + 0.25

    def __str__(self) -> str:
        return self.row(len(self.name) + 1)

    def row(self, width: int) -> str:
        """This record as a table row whose name column is ``width`` wide."""
        flag = "  oversubscribed" if self.oversubscribed else ""
        return (f"{self.name:<{width}}{self.bound:<10}{self.time_ns / 1e3:>11.1f}"
                f"{self.gflops:>10.2f}{self.gbs:>9.2f}{self.fraction:>9.1%}"
                f"  {self.roof:<8}{self.threads:>4}{self.busy_cores:>7.2f}{flag}")


class Bottlenecks(list):
    """A list of ``Bottleneck`` (slowest step first) that prints as a table."""

    def __init__(self, records, peaks: dict):
        super().__init__(records)
        self.peaks = dict(peaks)

    def __str__(self) -> str:
        head = ", ".join(f"{k} {v:.1f}" for k, v in sorted(self.peaks.items()))
        w = max([len(b.name) + 2 for b in self] + [6])
        lines = [f"peaks: {head}",
                 f"{'step':<{w}}{'bound':<10}{'us':>11}{'GFLOP/s':>10}{'GB/s':>9}{'of peak':>9}"
                 f"  {'roof':<8}{'thr':>4}{'cores':>7}"]
        return "\n".join(lines + [b.row(w) for b in self])


# ---------------------------------------------------------------------------- machine peaks

_peaks: dict | None = None
_peaks_lock = threading.Lock()


def _best_seconds(fn, *args, runs: int = 3, **kwargs) -> float:
    fn(*args, **kwargs)  # first touch and BLAS thread start-up are not the steady state
    best = float("inf")
    for _ in range(runs):
        t = time.perf_counter()
        fn(*args, **kwargs)
        best = min(best, time.perf_counter() - t)
    return max(best, 1e-9)


# Working sets (bytes read + written) at which the cache bandwidths are measured: a step
# that moves at most this many bytes is held to that roof, not DRAM's (against the DRAM
# copy, a step whose data sits in cache reads as far over its peak).
CACHE_TIERS = (("gbs_l1", 16 << 10), ("gbs_l2", 512 << 10), ("gbs_l3", 8 << 20))


def _copy_seconds(nbytes: int) -> float:
    """Seconds per copy of ``nbytes / 2`` bytes, repeated in NumPy until 4 MiB have moved,
    so that a cache-sized copy is timed over many calls, not one call's overhead."""
    src = np.ones(max(nbytes // 16, 1))
    dst = np.empty_like(src)
    reps = max(1, (4 << 20) // max(nbytes, 1))

    def run():
        for _ in range(reps):
            np.copyto(dst, src)
    return _best_seconds(run) / reps


def machine_peaks() -> dict:
    """Measured host peaks, once per process (~0.3 s): ``{"gflops_float32",
    "gflops_float64", "gbs", "gbs_l1", "gbs_l2", "gbs_l3"}`` from a 1024² NumPy GEMM per
    dtype, a 64 MiB copy (read + write bytes: DRAM) and copies that fit each working set
    of ``CACHE_TIERS``. These are host numbers; for a device backend pass peaks
    explicitly."""
    global _peaks
    with _peaks_lock:
        if _peaks is None:
            n, peaks = 1024, {}
            for dt in ("float32", "float64"):
                a = np.ones((n, n), dt)
                c = np.empty_like(a)
                s = _best_seconds(np.matmul, a, a, out=c)
                peaks[f"gflops_{dt}"] = 2 * n**3 / s / 1e9
            src = np.ones(1 << 23)
            dst = np.empty_like(src)
            peaks["gbs"] = 2 * src.nbytes / _best_seconds(np.copyto, dst, src) / 1e9
            # A smaller working set is never slower than a larger one: a tier whose copy
            # measured slower than the next (an L1 copy is a few calls' overhead) gets the
            # next tier's bandwidth, so each roof bounds what steps of its size reach.
            roof = peaks["gbs"]
            for key, size in reversed(CACHE_TIERS):
                roof = peaks[key] = max(size / _copy_seconds(size) / 1e9, roof)
            _peaks = peaks
        return dict(_peaks)


def _flop_peak(peaks: dict, dtype: str) -> float:
    single = dtype in ("float16", "float32", "complex64")
    key = "gflops_float32" if single else "gflops_float64"
    return float(peaks.get(key, peaks.get("gflops", 0.0)))


def bandwidth_roof(peaks: dict, nbytes: int) -> tuple[str, float]:
    """The memory roof of a step that moves ``nbytes``, as ``(key, GB/s)``: the smallest
    cache tier in ``peaks`` whose working set holds it, else ``"gbs"`` (DRAM)."""
    for key, size in CACHE_TIERS:
        if nbytes <= size and key in peaks:
            return key, float(peaks[key])
    return "gbs", float(peaks.get("gbs", 0.0))


# ---------------------------------------------------------------------------------- profile


class Profile:
    """Events of ``repeat`` recorded runs of a plan, one per step per repeat.

    Attributes:
        events: the ``StepEvent`` list, in run order (repeat-major, then step order).
        repeat: how many runs were recorded.
    """

    def __init__(self, events: list[StepEvent], repeat: int):
        self.events = list(events)
        self.repeat = repeat

    def __repr__(self) -> str:
        return f"Profile({len(self.events)} events, repeat={self.repeat})"

    def _repr_html_(self) -> str:
        return display.profile_html(self)

    def _rows(self) -> list[tuple[StepEvent, float, float]]:
        """Per step, slowest first: its first event, its median time in ns and its median
        busy cores."""
        by_step: dict[int, list[StepEvent]] = {}
        for e in self.events:
            by_step.setdefault(e.step, []).append(e)
        rows = [(evs[0], statistics.median(e.duration_ns for e in evs),
                 statistics.median(e.busy_cores for e in evs))
                for _, evs in sorted(by_step.items())]
        return sorted(rows, key=lambda r: -r[1])

    def summary(self) -> str:
        """A table, one row per step, slowest first: median time over repeats, share of the
        summed medians, GFLOP/s, GB/s, implementation and shape; then a total line."""
        rows = self._rows()
        total = sum(t for _, t, _ in rows)
        w = max([len(e.name) + 2 for e, _, _ in rows] + [18])
        wi = max([len(e.impl) + 2 for e, _, _ in rows] + [6])
        lines = [f"{'step':<{w}}{'us':>11}{'share':>8}{'GFLOP/s':>10}{'GB/s':>9}{'thr':>5}"
                 f"{'cores':>7}  {'impl':<{wi}}shape"]
        for e, t, busy in rows:
            lines.append(f"{e.name:<{w}}{t / 1e3:>11.1f}{t / total if total else 0:>8.1%}"
                         f"{_rate(e.flops, t):>10.2f}{_rate(e.bytes, t):>9.2f}{e.threads:>5}"
                         f"{busy:>7.2f}  {e.impl:<{wi}}{e.shape} {e.dtype}")
        flops, nbytes = sum(e.flops for e, _, _ in rows), sum(e.bytes for e, _, _ in rows)
        lines.append(f"{f'total ({len(rows)} steps)':<{w}}{total / 1e3:>11.1f}"
                     f"{1 if total else 0:>8.0%}{_rate(flops, total):>10.2f}"
                     f"{_rate(nbytes, total):>9.2f}  (median of {self.repeat} runs; thr: "
                     f"threads given, cores: CPU time / wall time)")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.summary()

    def bottlenecks(self, peaks: dict | None = None, *, overhead_ns: float = OVERHEAD_NS,
                    overhead_factor: float = OVERHEAD_FACTOR) -> Bottlenecks:
        """Class each step by a roofline against machine peaks.

        With ``t`` the step's median time, ``tc = flops / peak FLOP/s`` and
        ``tm = bytes / peak bandwidth``, a step is ``"overhead"`` bound when
        ``t < overhead_ns`` or ``t > overhead_factor * max(tc, tm)`` (it is far from both
        roofs, so dispatch, allocation or a poor kernel dominates); otherwise it is
        ``"compute"`` bound when ``tc >= tm`` and ``"memory"`` bound when not.

        Args:
            peaks: ``{"gbs": GB/s, "gflops": GFLOP/s}``, where ``"gflops_float32"`` /
                ``"gflops_float64"`` override ``"gflops"`` by the step's precision
                (float16/float32/complex64 use the float32 peak). ``None`` measures host
                peaks once per process (``machine_peaks()``).
            overhead_ns: below this median time a step is overhead bound.
            overhead_factor: above this multiple of its roofline time a step is overhead
                bound.

        Returns:
            ``Bottlenecks``: one ``Bottleneck`` per step, slowest first; ``print`` it.
        """
        peaks = machine_peaks() if peaks is None else dict(peaks)
        out = []
        for e, t, busy in self._rows():
            (tier, pb), pf = bandwidth_roof(peaks, e.bytes), _flop_peak(peaks, e.dtype)
            tc = e.flops / pf if pf > 0 else 0.0  # GFLOP/s == FLOP/ns
            tm = e.bytes / pb if pb > 0 else 0.0
            gflops, gbs = _rate(e.flops, t), _rate(e.bytes, t)
            if t < overhead_ns or t > overhead_factor * max(tc, tm):
                bound = "overhead"
            else:
                bound = "compute" if tc >= tm else "memory"
            frac = gflops / pf if tc >= tm and pf > 0 else gbs / pb if pb > 0 else 0.0
            roof = "FLOP/s" if tc >= tm and pf > 0 else tier
            out.append(Bottleneck(e.step, e.name, bound, t, gflops, gbs, frac, e.threads,
                                  busy, roof))
        return Bottlenecks(sorted(out, key=lambda b: -b.time_ns), peaks)

    def to_dict(self) -> dict:
        """``{"repeat": int, "events": [event fields as a dict, ...]}`` (JSON-ready)."""
        return {"repeat": self.repeat, "events": [asdict(e) for e in self.events]}

    def to_json(self, path=None) -> str:
        """``to_dict()`` as JSON text; also written to ``path`` when given."""
        text = json.dumps(self.to_dict(), indent=1)
        if path is not None:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return text

    def to_chrome_trace(self, path) -> None:
        """Write Trace Event Format JSON (Perfetto, chrome://tracing) to ``path``: one
        complete (``"X"``) event per step event, one thread row per repeat, timestamps in
        µs from the first event's start."""
        t0 = min((e.start_ns for e in self.events), default=0)
        trace = [{"name": "thread_name", "ph": "M", "pid": 0, "tid": r,
                  "args": {"name": f"repeat {r}"}}
                 for r in sorted({e.repeat for e in self.events})]
        trace += [{"name": e.name, "ph": "X", "pid": 0, "tid": e.repeat,
                   "cat": ",".join(e.op_kinds), "ts": (e.start_ns - t0) / 1e3,
                   "dur": e.duration_ns / 1e3,
                   "args": {"step": e.step, "flops": e.flops, "bytes": e.bytes,
                            "shape": list(e.shape), "dtype": e.dtype, "impl": e.impl,
                            "srcs": list(e.srcs), "threads": e.threads,
                            "cpu_us": e.cpu_ns / 1e3}}
                  for e in self.events]
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)

    def plot(self, path) -> None:
        """Write a timeline PNG to ``path``: one row per repeat, one bar per step, each
        repeat from its own start. Raises ``ImportError`` without matplotlib."""
        try:
            from matplotlib.figure import Figure
        except ImportError:
            raise ImportError("Profile.plot needs matplotlib: pip install matplotlib") from None
        # Figure without pyplot: no GUI backend is picked and no global state is touched.
        fig = Figure(figsize=(10, 1.5 + 0.4 * max(self.repeat, 1)))
        ax = fig.add_subplot()
        colors = [f"C{i % 10}" for i in range(max((e.step for e in self.events), default=0) + 1)]
        starts: dict[int, int] = {}
        for e in self.events:
            starts.setdefault(e.repeat, e.start_ns)
        first = min(starts, default=0)
        for e in self.events:  # label one repeat only: one legend entry per step
            ax.broken_barh([((e.start_ns - starts[e.repeat]) / 1e3, e.duration_ns / 1e3)],
                           (e.repeat - 0.4, 0.8), color=colors[e.step],
                           label=e.name if e.repeat == first else None)
        if self.events:
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))
        ax.set_xlabel("µs from the start of the run")
        ax.set_ylabel("repeat")
        ax.set_yticks(sorted(starts))
        fig.savefig(path, format="png", dpi=100, bbox_inches="tight")


def _rate(amount: int, ns: float) -> float:
    """Per-second rate in G-units of ``amount`` done in ``ns`` nanoseconds (amount/ns)."""
    return amount / ns if ns > 0 else 0.0


# ----------------------------------------------------------------------------------- runner


class _CpuClock:
    """Wraps a backend's step clock: at each mark also the process CPU time and the threads
    this call has (``graphopt.runtime.threads``), read inside the call."""

    def __init__(self, clock):
        self.clock = clock
        self.cpu: list[int] = []
        self.threads = 1

    def mark(self) -> None:
        if self.clock is not None:
            self.clock.mark()
        self.cpu.append(time.process_time_ns())
        self.threads = threads.current_threads()


def profile_plan(plan, arrays: list, repeat: int = 10, warmup: int = 1) -> Profile:
    """Profile ``plan`` on already-bound ``arrays`` (see ``Plan.bind``).

    Runs ``warmup`` unrecorded then ``repeat`` recorded runs through ``Plan.run`` with a
    step clock (the backend's ``step_clock``); the results are discarded and the inputs
    never written to.

    Returns:
        A ``Profile`` with ``repeat * len(plan.steps)`` events.

    Raises:
        GraphError: ``repeat < 1`` or ``warmup < 0`` (or not integers).
    """
    if not (isinstance(repeat, numbers.Integral) and isinstance(warmup, numbers.Integral)) \
            or repeat < 1 or warmup < 0:
        raise GraphError(f"profile needs integers repeat >= 1 and warmup >= 0, got "
                         f"repeat={repeat!r}, warmup={warmup!r}")
    backend = plan.backend
    for _ in range(warmup):
        plan.run(arrays, clock=_CpuClock(None))
    backend.synchronize()
    events = []
    for r in range(repeat):
        clock = _CpuClock(backend.step_clock())
        plan.run(arrays, clock=clock)
        marks, cpu, nthreads = clock.clock.read(), clock.cpu, clock.threads
        for s, start, end, c0, c1 in zip(plan.steps, marks, marks[1:], cpu, cpu[1:]):
            events.append(StepEvent(s.name, tuple(s.op_kinds), start, end, s.flops, s.bytes,
                                    step=s.index, repeat=r, shape=tuple(s.shape),
                                    dtype=s.dtype, impl=s.kernel.impl, srcs=tuple(s.srcs),
                                    threads=nthreads if s.kernel.uses_threads else 1,
                                    cpu_ns=c1 - c0))
    return Profile(events, repeat)
