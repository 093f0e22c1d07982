"""Calls from several user threads at once against the same calls one after another.

    python -m benchmarks.concurrency [--workloads mlp,attention] [--threads 4] [--calls 8]
                                     [--min-ms 20] [--json out.json]

For each workload: one plan, ``--threads`` user threads each making ``--calls`` calls, or
more where a sequential round would take under ``--min-ms`` (so a 20 us plan is measured
calling, not waking threads), every result of a first, untimed concurrent round checked
against NumPy; against the same ``threads * calls`` calls made one after another from one
thread; medians of ``--repeat`` rounds, the concurrent ones timed from the moment every
thread is ready. The ``python floor`` column is the same ratio for a pure-Python call that
busy-waits as long as one plan call (plans under 1 ms): what CPython's GIL and thread
switches cost any Python code.
graphopt shares its thread budget between the calls in flight (``graphopt/runtime/threads.py``):
the ratio sequential / concurrent is >= 1 where the concurrent round took no longer. The
process CPU time over wall time shows how many cores were busy.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.concurrency", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="mlp,attention,redundant,elementwise,small")
    p.add_argument("--threads", type=int, default=4, help="user threads (default 4)")
    p.add_argument("--calls", type=int, default=8, help="calls per user thread (at least)")
    p.add_argument("--min-ms", type=float, default=20.0,
                   help="more calls per thread until a sequential round takes this long")
    p.add_argument("--repeat", type=int, default=5, help="rounds of each kind")
    p.add_argument("--quick", action="store_true", help="tiny shapes (smoke test)")
    p.add_argument("--json", default=None)
    return p.parse_args(argv)


def _timed(fn) -> tuple[float, float]:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    wall = time.perf_counter() - t0
    return wall, (time.process_time() - c0) / wall


FLOOR_MAX_CALL_S = 1e-3


def rounds(call, nthreads: int, calls: int, repeat: int) -> dict:
    """Median wall time and busy cores of ``nthreads * calls`` calls of ``call`` made one
    after another, and of ``nthreads`` threads making ``calls`` each."""
    import numpy as np

    def sequential():
        for _ in range(nthreads * calls):
            call()

    def concurrent() -> tuple[float, float]:
        """Timed from the moment every user thread is ready (thread start-up excluded)."""
        barrier = threading.Barrier(nthreads + 1)

        def user():
            barrier.wait()
            for _ in range(calls):
                call()
        ts = [threading.Thread(target=user) for _ in range(nthreads)]
        for t in ts:
            t.start()
        c0, t0 = time.process_time(), time.perf_counter()
        barrier.wait()
        for t in ts:
            t.join()
        wall = time.perf_counter() - t0
        return wall, (time.process_time() - c0) / wall

    seq, conc = [], []
    for _ in range(repeat):       # interleaved, so drift hits both kinds alike
        seq.append(_timed(sequential))
        conc.append(concurrent())
    med = lambda xs, i: float(np.median([x[i] for x in xs]))  # noqa: E731
    return {"sequential_ms": med(seq, 0) * 1e3, "concurrent_ms": med(conc, 0) * 1e3,
            "sequential_cores": med(seq, 1), "concurrent_cores": med(conc, 1),
            "ratio_sequential_over_concurrent": med(seq, 0) / med(conc, 0),
            "calls": nthreads * calls}


def busy_wait(seconds: float):
    """A pure-Python call that holds the GIL for ``seconds``."""
    def call():
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            pass
    return call


def measure(w, nthreads: int, calls: int, repeat: int, min_ms: float = 0.0) -> dict:
    import numpy as np

    import graphopt as go

    plan = go.compile(w.build())
    ref = np.asarray(w.numpy(**w.inputs))
    atol = w.rtol * (np.abs(ref).max() + 1e-30)
    results = []

    def call():
        plan(**w.inputs)

    # every result of one concurrent round checked, untimed
    threads = [threading.Thread(target=lambda: results.append(plan(**w.inputs)))
               for _ in range(nthreads)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    correct = len(results) == nthreads and all(
        np.allclose(r, ref, rtol=w.rtol, atol=atol) for r in results)
    per_call = min(_timed(call)[0] for _ in range(5))
    calls = max(calls, math.ceil(min_ms * 1e-3 / (nthreads * per_call)))
    out = rounds(call, nthreads, calls, repeat)
    # the floor matters where calls are short; a long busy wait would only burn time
    floor = (rounds(busy_wait(per_call), nthreads, calls, repeat)
             ["ratio_sequential_over_concurrent"] if per_call < FLOOR_MAX_CALL_S else None)
    return {**out, "python_floor": floor, "correct": correct}


def main(argv=None) -> int:
    args = _parse(argv)
    from .workloads import ALL

    scale = 0.125 if args.quick else 1.0
    out = {"threads": args.threads, "calls_per_thread": args.calls, "workloads": {}}
    print(f"{args.threads} user threads x {args.calls}+ calls (a sequential round >= "
          f"{args.min_ms:g} ms) vs the same calls in sequence (median of {args.repeat} rounds)")
    print(f"{'workload':<12}{'calls':>7}{'sequential ms':>15}{'concurrent ms':>15}{'seq/conc':>10}"
          f"{'cores seq':>11}{'cores conc':>12}{'python floor':>14}  correct")
    for name in args.workloads.split(","):
        r = measure(ALL[name](scale), args.threads, args.calls, args.repeat, args.min_ms)
        out["workloads"][name] = r
        floor = "-" if r["python_floor"] is None else f"{r['python_floor']:.2f}"
        print(f"{name:<12}{r['calls']:>7}{r['sequential_ms']:>15.1f}{r['concurrent_ms']:>15.1f}"
              f"{r['ratio_sequential_over_concurrent']:>10.2f}{r['sequential_cores']:>11.2f}"
              f"{r['concurrent_cores']:>12.2f}{floor:>14}  {r['correct']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=1)
    return 0 if all(r["correct"] for r in out["workloads"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
