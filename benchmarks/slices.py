"""Sliced contractions, one slice at a time against several at once.

    python -m benchmarks.slices [--size 1024] [--bond 64] [--limit 8000000]

``ia,ib,ic,abc->i``: every pairwise order makes an ``i x a x b`` intermediate (32 MiB at
the defaults), so under ``--limit`` bytes the slicing pass slices ``i`` (an output label:
no FLOP overhead). Compiled with ``threads=1``; with ``threads=2`` and its slices run one
at a time (each with two BLAS threads, as before slices ran at once); and with
``threads=2`` as the pass chooses (slices of half the size, two at once). Median call
times against opt_einsum on the unsliced contraction, each result checked against it.
"""

from __future__ import annotations

import argparse

import numpy as np


def _plan(arrays, eq, limit, threads, one_at_a_time=False):
    import graphopt as go
    from graphopt.passes import slicing

    g = go.Graph("slices")
    g.output(go.einsum(eq, *(g.input(f"t{k}", a.shape) for k, a in enumerate(arrays))))
    keep = slicing.slice_workers
    if one_at_a_time:     # the slicing of the thread budget, run one slice at a time
        slicing.slice_workers = lambda *a, **k: 1
    try:
        return go.compile(g, memory_limit=limit, threads=threads, cache=False)
    finally:
        slicing.slice_workers = keep


def main(argv=None) -> int:
    import opt_einsum

    from .networks import _median_call

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024)
    ap.add_argument("--bond", type=int, default=64)
    ap.add_argument("--limit", type=int, default=8_000_000)
    args = ap.parse_args(argv)
    eq, i, a = "ia,ib,ic,abc->i", args.size, args.bond
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(s) for s in [(i, a), (i, a), (i, a), (a, a, a)]]
    ref = opt_einsum.contract(eq, *arrays)
    print("| variant | slices | slices at once | FLOP overhead | median ms | max rel diff |")
    print("|---|---|---|---|---|---|")
    print(f"| opt_einsum, unsliced | – | – | – | "
          f"{_median_call(lambda: opt_einsum.contract(eq, *arrays)) * 1e3:.2f} | – |")
    for label, threads, serial in [("graphopt threads=1", 1, False),
                                   ("graphopt threads=2, one slice at a time", 2, True),
                                   ("graphopt threads=2", 2, False)]:
        plan = _plan(arrays, eq, args.limit, threads, serial)
        (rec,) = plan.report["slicing"].details["sliced"]
        diff = float(np.max(np.abs(plan(*arrays) - ref)) / np.max(np.abs(ref)))
        ms = _median_call(lambda p=plan: p(*arrays)) * 1e3
        print(f"| {label} | {rec['n_slices']} | {1 if serial else rec['slice_workers']} | "
              f"{rec['flop_overhead']:.3f} | {ms:.2f} | {diff:.1e} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
