"""A contraction too large for one worker's memory: graphopt-dask with memory-budget slicing
against cotengra's sliced contraction on the same budget, on one local dask cluster.

    python -m benchmarks.dask_slicing [--nodes 80] [--bond 4] [--worker-memory 1.5e9]
        [--budget 32e6] [--repeat 2] [--skip-unsliced] [--json out.json] [--quick]

The network: a random 3-regular graph of ``--nodes`` tensors, bond dimension ``--bond``,
contracted to a scalar (float64). Both sides get the same path search (cotengra's
HyperOptimizer; graphopt takes it as ``optimize=``) and the same budget on the largest
intermediate (``--budget`` bytes: graphopt's ``memory_limit``, cotengra's ``target_size``).
FLOPs are given as opt_einsum counts them (2 per multiply-add; cotengra's
``total_flops`` doubled), over all slices. Each run uses a ``LocalCluster`` of 2
single-threaded worker processes with ``--worker-memory`` bytes each (BLAS limited to one
thread); a sampler thread in every worker records its peak RSS. Rows:

- graphopt-dask unsliced: the same plan without a budget (expected to exceed a worker);
- graphopt-dask sliced: ``compile(g, backend="dask", memory_limit=budget)``;
- cotengra sliced on dask: ``tree.contract_slice`` submitted once per slice (cotengra's
  documented dask pattern), arrays scattered to the workers first, ``gather_slices``;
- cotengra sliced in-process and graphopt sliced on the numpy backend, for reference
  (peak RSS of this process).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
import time
import warnings

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")  # one BLAS thread per worker process

import numpy as np  # noqa: E402


def network(n: int, bond: int, seed: int = 1):
    """``(equation, arrays)`` of a random 3-regular tensor network contracted to a scalar."""
    import networkx as nx

    from graphopt.ir.einsum import label

    G = nx.random_regular_graph(3, n, seed=seed)
    lab = {e: label(i) for i, e in enumerate(sorted(tuple(sorted(e)) for e in G.edges))}
    terms = ["".join(lab[tuple(sorted((u, v)))] for v in sorted(G[u])) for u in sorted(G)]
    rng = np.random.default_rng(seed)
    # entries scaled by bond**-0.75 keep the contracted value within float64 range
    arrays = [rng.random((bond,) * 3) * bond**-0.75 for _ in terms]
    return ",".join(terms) + "->", arrays


# ------------------------------------------------------------------- worker memory sampler


def _start_sampler(dask_worker):
    import psutil

    w = dask_worker
    if getattr(w, "_peak_sampler", None) is None:
        proc = psutil.Process()
        w._peak_rss = proc.memory_info().rss

        def sample():
            while True:
                w._peak_rss = max(w._peak_rss, proc.memory_info().rss)
                time.sleep(0.002)

        w._peak_sampler = threading.Thread(target=sample, daemon=True)
        w._peak_sampler.start()
    return True


def _reset_peak(dask_worker):
    import gc

    import psutil

    gc.collect()
    w = dask_worker
    w._peak_rss = psutil.Process().memory_info().rss
    return w._peak_rss


def _read_peak(dask_worker):
    return dask_worker._peak_rss


class LocalPeak:
    """Peak RSS of this process while in the block (sampled every 2 ms)."""

    def __enter__(self):
        import psutil

        self._proc = psutil.Process()
        self.start = self.peak = self._proc.memory_info().rss
        self._stop = threading.Event()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()
        return self

    def _run(self):
        while not self._stop.is_set():
            self.peak = max(self.peak, self._proc.memory_info().rss)
            time.sleep(0.002)

    def __exit__(self, *exc):
        self._stop.set()
        self._t.join()


# -------------------------------------------------------------------------------- runs


def measured(client, fn, repeat: int, warmup: bool = True) -> dict:
    """Median seconds of ``fn()`` (after one untimed call) and the workers' peak RSS (MiB),
    also above their RSS before the call."""
    times, peaks, result = [], [], None
    if warmup:
        fn()
    for _ in range(repeat):
        base = client.run(_reset_peak)
        t0 = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - t0)
        peak = client.run(_read_peak)
        peaks.append({w: (peak[w] / 2**20, (peak[w] - base[w]) / 2**20) for w in peak})
    worst = max(peaks, key=lambda p: max(v[0] for v in p.values()))
    return {"seconds": float(np.median(times)), "times": times, "result": float(result),
            "peak_rss_mib": [round(v[0], 1) for v in worst.values()],
            "peak_above_idle_mib": [round(v[1], 1) for v in worst.values()]}


def graphopt_graph(eq, arrays):
    import graphopt as go

    g = go.Graph("rrg")
    ins = [g.input(f"t{k}", a.shape, "float64") for k, a in enumerate(arrays)]
    g.output(go.einsum(eq, *ins))
    return g, {f"t{k}": a for k, a in enumerate(arrays)}


def run(args) -> dict:
    import cotengra as ctg
    from distributed import Client, LocalCluster

    import graphopt as go

    eq, arrays = network(args.nodes, args.bond, args.seed)
    inputs_terms = [tuple(t) for t in eq.split("->")[0].split(",")]
    sizes = {c: args.bond for t in inputs_terms for c in t}
    budget = int(args.budget)
    out: dict = {"nodes": args.nodes, "bond": args.bond, "budget_bytes": budget,
                 "worker_memory_bytes": int(args.worker_memory), "rows": {}}

    def search(**kw):
        return ctg.HyperOptimizer(max_repeats=args.max_repeats, parallel=False, progbar=False,
                                  **kw)

    t0 = time.perf_counter()
    # cotengra's recommended slicing: sliced during the search, with subtree reconfiguration
    tree = ctg.array_contract_tree(inputs_terms, (), sizes,
                                   optimize=search(slicing_reconf_opts={"target_size":
                                                                        budget // 8}))
    out["cotengra_search_seconds"] = time.perf_counter() - t0
    unsliced_tree = ctg.array_contract_tree(inputs_terms, (), sizes, optimize=search())
    out["cotengra"] = {"nslices": tree.nslices, "sliced_inds": list(tree.sliced_inds),
                       "max_size_bytes": tree.max_size() * 8,
                       "unsliced_max_size_bytes": unsliced_tree.max_size() * 8,
                       # cotengra counts a multiply-add once; graphopt, as opt_einsum, twice
                       "gflop": 2 * tree.total_flops() / 1e9,
                       "unsliced_gflop": 2 * unsliced_tree.total_flops() / 1e9}

    g, named = graphopt_graph(eq, arrays)
    t0 = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plan_numpy = go.compile(g, backend="numpy", memory_limit=budget, optimize=search(),
                                cache=False)
    out["graphopt_compile_seconds"] = time.perf_counter() - t0
    rec = plan_numpy.report["slicing"].details
    if rec["sliced"]:
        (s,) = rec["sliced"]
        out["graphopt"] = {k: s[k] for k in ("slices", "slice_blocks", "n_slices",
                                             "largest_intermediate_bytes",
                                             "largest_intermediate_unsliced_bytes",
                                             "predicted_peak_bytes", "task_peak_bytes",
                                             "flop_overhead")}
        out["graphopt"]["gflop"] = s["flops"] / 1e9
    else:
        out["graphopt"] = {"note": "the path found fits the budget unsliced",
                           "repathed": rec["repathed"]}

    rows = out["rows"]
    with LocalPeak() as lp:
        t0 = time.perf_counter()
        tree.contract(arrays)
        cot_local = time.perf_counter() - t0
    rows["cotengra sliced, in-process"] = {"seconds": cot_local,
                                           "peak_rss_mib": [round(lp.peak / 2**20, 1)],
                                           "peak_above_idle_mib":
                                           [round((lp.peak - lp.start) / 2**20, 1)]}
    with LocalPeak() as lp:
        t0 = time.perf_counter()
        plan_numpy(**named)
        go_local = time.perf_counter() - t0
    rows["graphopt sliced, numpy backend"] = {"seconds": go_local,
                                              "peak_rss_mib": [round(lp.peak / 2**20, 1)],
                                              "peak_above_idle_mib":
                                              [round((lp.peak - lp.start) / 2**20, 1)]}

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                           host="127.0.0.1", dashboard_address=None,
                           memory_limit=int(args.worker_memory))
    client = Client(cluster)
    try:
        client.run(_start_sampler)
        # the IR the numpy plan was compiled to (sliced): no second path search
        plan = go.compile(plan_numpy.graph, backend="dask", passes=[], client=client,
                          progress=False, cache=False)
        rows["graphopt-dask sliced"] = measured(client, lambda: plan(**named), args.repeat)
        rows["graphopt-dask sliced"]["tasks"] = plan.details["tasks"]

        def cotengra_dask():
            arrs = client.scatter(arrays, broadcast=True)
            futures = [client.submit(tree.contract_slice, arrs, i, pure=False)
                       for i in range(tree.nslices)]
            return tree.gather_slices(f.result() for f in futures)

        rows["cotengra sliced on dask"] = measured(client, cotengra_dask, args.repeat)
        rows["cotengra sliced on dask"]["tasks"] = tree.nslices

        if not args.skip_unsliced:
            import dask

            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                unsliced = go.compile(g, backend="dask", optimize=search(), client=client,
                                      progress=False, cache=False)
            with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
                try:
                    rows["graphopt-dask unsliced"] = measured(
                        client, lambda: unsliced(**named), 1, warmup=False)
                except Exception as e:  # the point of this row: a worker runs out
                    rows["graphopt-dask unsliced"] = {"failed": f"{type(e).__name__}: "
                                                                f"{str(e)[:160]}"}
    finally:
        client.close()
        cluster.close()

    values = [r["result"] for r in rows.values() if "result" in r]
    ref = float(tree.contract(arrays))
    out["max_relative_difference"] = max(abs(v - ref) / abs(ref) for v in values)
    return out


def table(out: dict) -> str:
    lines = [f"random 3-regular network: {out['nodes']} tensors, bond {out['bond']}; "
             f"budget {out['budget_bytes'] / 2**20:.1f} MiB per intermediate; workers 2 x 1 "
             f"thread, {out['worker_memory_bytes'] / 2**30:.2f} GiB each",
             f"cotengra: {out['cotengra']['nslices']} slices, largest "
             f"{out['cotengra']['max_size_bytes'] / 2**20:.1f} MiB (unsliced "
             f"{out['cotengra']['unsliced_max_size_bytes'] / 2**20:.1f} MiB), "
             f"{out['cotengra']['gflop']:.2f} GFLOP (unsliced "
             f"{out['cotengra']['unsliced_gflop']:.2f})"]
    gr = out["graphopt"]
    if "n_slices" in gr:
        lines.append(f"graphopt: {gr['n_slices']} slices over {gr['slices']}, largest "
                     f"{gr['largest_intermediate_bytes'] / 2**20:.1f} MiB (unsliced "
                     f"{gr['largest_intermediate_unsliced_bytes'] / 2**20:.1f} MiB), "
                     f"{gr['gflop']:.2f} GFLOP (x{gr['flop_overhead']:.2f} overhead), "
                     f"predicted task peak {gr['task_peak_bytes'] / 2**20:.1f} MiB")
    lines.append(f"compile: graphopt {out['graphopt_compile_seconds']:.1f} s, cotengra search "
                 f"{out['cotengra_search_seconds']:.1f} s")
    lines.append("")
    lines.append(f"{'run':<34}{'seconds':>9}{'tasks':>8}  peak RSS per worker MiB "
                 "(above idle)")
    for name, r in out["rows"].items():
        if "failed" in r:
            lines.append(f"{name:<34}{'-':>9}{'-':>8}  failed: {r['failed']}")
            continue
        peaks = ", ".join(f"{a:.0f} ({b:+.0f})" for a, b in zip(r["peak_rss_mib"],
                                                               r["peak_above_idle_mib"]))
        lines.append(f"{name:<34}{r['seconds']:>9.2f}{r.get('tasks', '-'):>8}  {peaks}")
    lines.append(f"\nresults agree within {out['max_relative_difference']:.2e} (relative)")
    return "\n".join(lines)


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.dask_slicing", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nodes", type=int, default=80)
    p.add_argument("--bond", type=int, default=4)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--budget", type=float, default=32e6, help="bytes per intermediate")
    p.add_argument("--worker-memory", type=float, default=1.5e9, help="bytes per worker")
    p.add_argument("--repeat", type=int, default=2)
    p.add_argument("--max-repeats", type=int, default=64, help="cotengra search trials")
    p.add_argument("--skip-unsliced", action="store_true")
    p.add_argument("--json", default=None)
    p.add_argument("--quick", action="store_true", help="a small network (smoke test)")
    args = p.parse_args(argv)
    if args.quick:
        args.nodes, args.bond, args.budget, args.repeat = 40, 4, 2**14 * 8, 1
        args.max_repeats, args.skip_unsliced = 8, True
    try:
        import cotengra  # noqa: F401
    except ImportError:
        print("cotengra is not installed (pip install cotengra): nothing to compare against",
              file=sys.stderr)
        return 1
    out = run(args)
    print(table(out))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(out, f, indent=2, default=str)
    return 0


if __name__ == "__main__":
    sys.exit(main())
