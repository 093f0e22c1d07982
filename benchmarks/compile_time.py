"""Compile time of a ~100-node graph, once its kernels are built (issue 5's compile target).

    python -m benchmarks.compile_time [--layers 24]

The graph: ``layers`` x (einsum, scale, add, tanh) on 64x64 float32, then a row sum. The
first compile pays the numba JIT (or the disk-cache load); the median of later compiles
(``cache=False``, kernels in memory) is the compiler's own time.
"""

from __future__ import annotations

import argparse
import statistics
import time

import graphopt as go


def layered_graph(layers: int) -> go.Graph:
    g = go.Graph("layers")
    x = g.input("x", (64, 64), "float32")
    w = g.input("w", (64, 64), "float32")
    h = x
    for _ in range(layers):
        h = go.tanh(go.einsum("ij,jk->ik", h, w) * 0.5 + x)
    g.output(h.sum(axis=1))
    return g


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.compile_time")
    p.add_argument("--layers", type=int, default=24)
    args = p.parse_args(argv)
    g = layered_graph(args.layers)
    t0 = time.perf_counter()
    go.compile(g, cache=False)
    first = time.perf_counter() - t0
    times = []
    for _ in range(5):
        t0 = time.perf_counter()
        plan = go.compile(g, cache=False)
        times.append(time.perf_counter() - t0)
    passes = sum(r.seconds for r in plan.report.records)
    print(f"{g.to_ir().number_of_nodes()} nodes: first compile {first * 1e3:.0f} ms; later "
          f"compiles median {statistics.median(times) * 1e3:.0f} ms (passes "
          f"{passes * 1e3:.0f} ms of it)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
