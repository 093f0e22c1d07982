"""Recomputation under ``memory_limit`` on gradients of deep chains.

    python -m benchmarks.recompute [--mode both|pinned|default] [--chains 12x256,24x128]
                                   [--limits 2097152,3145728] [--json F]

For the gradient of ``sum(tanh(...tanh(x @ w)... @ w))`` (``layers`` x ``n x n``, float64)
with respect to ``x``, through ``go.jit`` on the numba backend: unlimited, then under each
limit: the rematerialize pass's solver, the arena before and after, its ratio to a lower
bound no order beats, the FLOPs recomputed, the compile seconds, the peak a call measures
(``Plan.measure_peak_bytes``), the median call, and whether the gradients equal the
unlimited plan's. A limit the compiler refuses is listed with its reason. ``--mode both``
runs once pinned to one core and once at the libraries' defaults, each in a child process.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

from .run import main_per_mode


def chain_gradient(layers: int, n: int):
    """``(go.grad of workloads.tanh_chain, x, w)``."""
    import graphopt as go
    from graphopt.workloads import tanh_chain

    f, x, w = tanh_chain(layers, n)
    return go.grad(f), x, w


def measure(layers: int, n: int, limits) -> list[dict]:
    """One row per limit (None first)."""
    import numpy as np

    import graphopt as go

    grad, x, w = chain_gradient(layers, n)
    want = go.jit(grad)(x, w)
    rows = []
    for limit in (None, *limits):
        row = {"chain": f"{layers} x {n}x{n}", "limit": limit}
        fn = go.jit(grad, memory_limit=limit)
        t0 = time.perf_counter()
        try:
            plan = fn.plan_for(x, w)
        except go.GraphError as e:
            rows.append(dict(row, refused=str(e).split(": ", 1)[-1][:160]))
            continue
        compile_s = time.perf_counter() - t0
        fn(x, w)
        calls = []
        for _ in range(15):
            t0 = time.perf_counter()
            got = fn(x, w)
            calls.append(time.perf_counter() - t0)
        d = next(r.details for r in plan.report.records if r.name == "rematerialize")
        rows.append(dict(row, solver=d.get("solver"), arena_before=d.get("arena_before"),
                         arena=plan.arena_bytes, floor_gap=d.get("floor_gap"),
                         extra_gflop=d.get("extra_flops", 0) / 1e9, steps=len(plan.steps),
                         compile_s=compile_s, measured=plan.measure_peak_bytes(x, w),
                         call_ms=statistics.median(calls) * 1e3,
                         equal=bool(np.array_equal(got, want))))
    return rows


def table(rows: list[dict]) -> str:
    out = ["| chain | limit (B) | solver | arena (B) | floor gap | extra GFLOP | steps "
           "| compile s | measured peak (B) | call ms | equal |",
           "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            out.append(f"| {r['chain']} | {r['limit']} | refused: {r['refused']} "
                       "| | | | | | | | |")
            continue
        out.append(f"| {r['chain']} | {r['limit'] or 'none'} | {r['solver'] or '-'} "
                   f"| {r['arena']:,} | {r['floor_gap'] or '-'} | {r['extra_gflop']:.3f} "
                   f"| {r['steps']} | {r['compile_s']:.2f} | {r['measured']:,} "
                   f"| {r['call_ms']:.1f} | {'yes' if r['equal'] else 'NO'} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.recompute", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--chains", default="12x256,24x128")
    p.add_argument("--limits", default="2097152,3145728")
    p.add_argument("--mode", choices=("both", "pinned", "default"), default="both")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    limits = [int(x) for x in args.limits.split(",") if x]

    def run_rows():
        rows = []
        for chain in args.chains.split(","):
            layers, n = map(int, chain.split("x"))
            rows += measure(layers, n, limits)
            print(json.dumps(rows[-1], default=str), flush=True)
        return rows

    return main_per_mode("benchmarks.recompute", args.mode,
                         ["--chains", args.chains, "--limits", args.limits],
                         run_rows, table, args.json)


if __name__ == "__main__":
    sys.exit(main())
