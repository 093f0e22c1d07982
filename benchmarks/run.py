"""Run every workload under every peer and print the comparison, twice: every library
pinned to one core, and every library at its defaults on all the cores this process has.

    python -m benchmarks.run [--workloads mlp,chain] [--peers graphopt,numpy,jax]
                             [--mode both|pinned|default] [--threads N]
                             [--json out.json] [--quick]

``--mode both`` (the default) runs one process per mode (thread settings must be made before
NumPy, numba, JAX or torch start their pools) and prints a table for each, then the parallel
speedup (pinned time / default time) of every peer. ``pinned``: this process on its first
allowed core, every library told to use one thread. ``default``: nothing set. ``--threads N``
runs once in this process with N threads for every library.

Each peer runs after warm-up; a table gives median ms per call (min/max in the JSON), the
ratio best-peer / graphopt (> 1: graphopt is faster), compile times, and graphopt's planned
memory against NumPy eager's measured peak. ``--quick`` shrinks every workload for a smoke run.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys


def _parse(argv):
    p = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workloads", default="all", help="comma list (default: all)")
    p.add_argument("--peers", default="all", help="comma list (default: all)")
    p.add_argument("--mode", choices=("both", "pinned", "default"), default="both",
                   help="pinned to one core, library defaults, or both (default)")
    p.add_argument("--threads", type=int, default=None,
                   help="run once, in this process, with N threads for every library")
    p.add_argument("--json", default=None, help="write all results to this file")
    p.add_argument("--quick", action="store_true", help="tiny shapes, few repeats (smoke test)")
    p.add_argument("--min-time", type=float, default=1.0, help="seconds of timing per peer")
    p.add_argument("--no-subprocess", action="store_true",
                   help="skip the compile-from-disk-cache measurement in a new process")
    return p.parse_args(argv)


# Settings some machines' environments carry for old OpenBLAS builds (a fixed kernel and
# cache size): they hold OpenBLAS below what the CPU runs, and a user's machine has neither.
# A benchmark's child processes run without them; the tests and CI keep the environment.
CHILD_UNSET = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE")


def child_env() -> dict:
    """The environment a benchmark's child process runs in: this one less ``CHILD_UNSET``."""
    return {k: v for k, v in os.environ.items() if k not in CHILD_UNSET}


def _set_threads(n: int) -> None:
    # Must happen before numpy/numba/jax/torch are imported.
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS",
                "GRAPHOPT_NUM_THREADS"):
        os.environ[var] = str(n)
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               f" --xla_cpu_multi_thread_eigen={'true' if n > 1 else 'false'}")


def time_calls(fn, args, min_time: float, min_repeat: int = 5,
               max_repeat: int = 1000) -> list[float]:
    import time as _t

    fn(*args)
    times = []
    start = _t.perf_counter()
    while len(times) < min_repeat or (_t.perf_counter() - start < min_time
                                      and len(times) < max_repeat):
        t0 = _t.perf_counter()
        fn(*args)
        times.append(_t.perf_counter() - t0)
    return times


def numpy_peak_bytes(w) -> int:
    import tracemalloc

    tracemalloc.start()
    tracemalloc.reset_peak()
    w.numpy(**w.inputs)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak


def reference(w) -> tuple:
    """The result every peer is checked against, and whose it is: NumPy eager's, or
    opt_einsum's where NumPy cannot run the workload (its einsum gives up on the MPS ring)."""
    import numpy as np

    try:
        return np.asarray(w.numpy(**w.inputs)), "numpy"
    except (ValueError, MemoryError) as e:
        if w.opt_einsum is None:
            raise
        ref = np.asarray(w.opt_einsum(w.inputs)(**w.inputs))
        return ref, f"opt_einsum (NumPy failed: {type(e).__name__}: {e})"


def cached_compile_seconds(name: str, scale: float) -> float | None:
    """Compile the workload in a fresh process (numba kernels from the disk cache)."""
    code = ("import time, graphopt as go; from benchmarks.workloads import ALL; "
            f"w = ALL[{name!r}]({scale}); g = w.build(); t0 = time.perf_counter(); "
            "p = go.compile(g); p(**w.inputs); print(time.perf_counter() - t0)")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                             timeout=600, cwd=os.path.dirname(os.path.dirname(__file__)),
                             env=child_env())
        return float(out.stdout.strip().splitlines()[-1])
    except (subprocess.SubprocessError, ValueError, IndexError):
        return None


def _pin_to_one_core() -> None:
    """This process (and the threads it starts) on its first allowed core, one thread per
    library: ``taskset -c 0 ... --threads 1``."""
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
    _set_threads(1)


def rows_per_mode(module: str, child_args: list[str]) -> dict | int:
    """Run ``python -m module *child_args --mode M --json F`` once pinned to one core and once
    at the libraries' defaults, each in its own process: ``{mode: rows}``, or the child's
    exit status where one failed."""
    import tempfile

    results = {}
    for mode in ("pinned", "default"):
        with tempfile.NamedTemporaryFile(suffix=".json") as f:
            print(f"\n######## {mode}", flush=True)
            rc = subprocess.run([sys.executable, "-m", module, *child_args, "--mode", mode,
                                 "--json", f.name],
                                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                env=child_env())
            if rc.returncode:
                return rc.returncode
            with open(f.name) as g:
                results[mode] = json.load(g)
    return results


def main_per_mode(module: str, mode: str, child_args: list[str], run_rows, table,
                  json_path: str | None, caption: str = "") -> int:
    """A benchmark's ``main`` after parsing: ``mode`` "both" runs ``module`` once per mode
    (``rows_per_mode``) and prints ``table(rows)`` of each under ``caption``; "pinned" or
    "default" runs ``run_rows()`` here (pinned to one core first, for "pinned"). The rows
    go to ``json_path`` where given."""
    if mode == "both":
        results = rows_per_mode(module, child_args)
        if isinstance(results, int):
            return results
        for m, rows in results.items():
            print(f"\n{m} ({'one core' if m == 'pinned' else 'default threads'}){caption}:\n"
                  f"{table(rows)}")
    else:
        if mode == "pinned":
            _pin_to_one_core()
        results = run_rows()
    if json_path:
        with open(json_path, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


def run_modes(argv: list[str], args) -> int:
    """One child process per mode; merge their JSON, print both tables and the speedups."""
    import tempfile

    results = {"modes": {}, "quick": args.quick}
    with tempfile.TemporaryDirectory() as tmp:
        for mode in ("pinned", "default"):
            path = os.path.join(tmp, f"{mode}.json")
            child = [a for a in argv if a not in ("--mode", "both")]
            if "--json" in child:
                i = child.index("--json")
                del child[i:i + 2]
            print(f"\n######## {mode}: " + ("every library pinned to one core, one thread"
                                           if mode == "pinned" else
                                           "every library at its defaults, all cores"))
            sys.stdout.flush()
            rc = subprocess.run([sys.executable, "-m", "benchmarks.run", *child, "--mode", mode,
                                 "--json", path],
                                cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                env=child_env())
            if rc.returncode != 0:
                return rc.returncode
            with open(path) as f:
                results["modes"][mode] = json.load(f)
    pnames = _peer_names(args)
    for mode, res in results["modes"].items():
        print(f"\n{mode} ({'one core' if mode == 'pinned' else 'default threads'}):\n"
              + markdown_table(res, pnames))
    print("\nparallel speedup (pinned ms / default ms):\n" + speedup_table(results, pnames))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


def _peer_names(args) -> list[str]:
    from . import peers

    pnames = list(peers.PEERS) if args.peers == "all" else args.peers.split(",")
    if args.quick and args.peers == "all":
        pnames = ["graphopt", "numpy", "opt_einsum"]
    return pnames


def speedup_table(results: dict, pnames: list[str]) -> str:
    """Per workload and peer, its pinned median over its default-threads median."""
    pinned, default = (results["modes"][m]["workloads"] for m in ("pinned", "default"))
    lines = ["| workload | " + " | ".join(pnames) + " |", "|---" * (len(pnames) + 1) + "|"]
    for wname in pinned:
        cells = []
        for p in pnames:
            a = pinned[wname]["peers"].get(p, {}).get("median_ms")
            b = default.get(wname, {}).get("peers", {}).get(p, {}).get("median_ms")
            cells.append(f"{a / b:.2f}" if a and b else "–")
        lines.append(f"| {wname} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = _parse(argv)
    if args.threads:
        _set_threads(args.threads)
    elif args.mode == "both":
        return run_modes(argv, args)
    elif args.mode == "pinned":
        _pin_to_one_core()
    import numpy as np

    from . import machine, peers
    from .workloads import ALL

    scale = 0.125 if args.quick else 1.0
    min_time = 0.05 if args.quick else args.min_time
    wnames = list(ALL) if args.workloads == "all" else args.workloads.split(",")
    pnames = _peer_names(args)
    for w in wnames:
        if w not in ALL:
            print(f"unknown workload {w!r}; choose from {', '.join(ALL)}", file=sys.stderr)
            return 2
    mode = f"threads={args.threads}" if args.threads else args.mode
    results = {"machine": {}, "workloads": {}, "threads": args.threads, "mode": mode,
               "cores": sorted(os.sched_getaffinity(0)), "quick": args.quick}
    if not args.quick:
        results["machine"] = {"gemm_gflops_f32": machine.gemm_gflops(2048, "float32"),
                              "gemm_gflops_f64": machine.gemm_gflops(2048, "float64"),
                              "memory_gbs": machine.memory_gbs()}
        print("machine: " + ", ".join(f"{k} {v:.1f}" for k, v in results["machine"].items()))

    for wname in wnames:
        w = ALL[wname](scale)
        ref, ref_source = reference(w)
        row = {"description": w.description, "peers": {}, "reference": ref_source}
        print(f"\n== {wname}: {w.description}  (checked against {ref_source})")
        for peer in pnames:
            try:
                fn, call_args, to_np, compile_s, note = peers.make(peer, w, {})
                got = to_np(fn(*call_args))
            except peers.Skip as e:
                row["peers"][peer] = {"skipped": str(e)}
                print(f"  {peer:<14} skipped: {e}")
                continue
            except Exception as e:  # a peer that breaks must not stop the others
                row["peers"][peer] = {"error": f"{type(e).__name__}: {e}"[:300]}
                print(f"  {peer:<14} ERROR {type(e).__name__}: {str(e)[:200]}")
                continue
            atol = w.rtol * (np.abs(ref).max() + 1e-30)
            ok = bool(np.allclose(np.asarray(got), ref, rtol=w.rtol, atol=atol))
            times = time_calls(fn, call_args, min_time)
            med = float(np.median(times)) * 1e3
            row["peers"][peer] = {"median_ms": med, "min_ms": min(times) * 1e3,
                                  "max_ms": max(times) * 1e3, "repeats": len(times),
                                  "compile_s": compile_s, "correct": ok, "note": note}
            print(f"  {peer:<14} {med:10.3f} ms  (min {min(times) * 1e3:.3f}, n={len(times)})"
                  f"  compile {compile_s:.2f}s{'' if ok else '  WRONG RESULT'}  {note}")
            if peer == "graphopt":
                plan = fn
                row["graphopt"] = {"planned_bytes": plan.memory.planned_bytes,
                                   "arena_bytes": plan.arena_bytes,
                                   "output_bytes": int(sum(s.nbytes for s in plan.steps
                                                           if s.is_output)),
                                   "flops_naive": plan.report.flops_naive,
                                   "flops_optimized": plan.report.flops_optimized,
                                   "steps": len(plan.steps), "backend": plan.backend.name}
                del plan
            del fn, call_args
        row["numpy_peak_bytes"] = numpy_peak_bytes(w) if ref_source == "numpy" else None
        if "graphopt" in row and not args.no_subprocess and not args.quick:
            row["graphopt"]["compile_cached_process_s"] = cached_compile_seconds(wname, scale)
        timed = {p: r["median_ms"] for p, r in row["peers"].items()
                 if "median_ms" in r and r["correct"]}
        others = {p: t for p, t in timed.items() if p != "graphopt"}
        if others and "graphopt" in timed:
            best = min(others, key=others.get)
            ratio = others[best] / timed["graphopt"]
            row["best_peer"], row["ratio_best_over_graphopt"] = best, ratio
            print(f"  best peer {best}: {others[best]:.3f} ms -> ratio {ratio:.2f}"
                  f"  (>1 means graphopt is faster)")
        if "graphopt" in row:
            g = row["graphopt"]
            eager = (f"{row['numpy_peak_bytes'] / 2**20:.2f} MiB" if row["numpy_peak_bytes"]
                     else "n/a (NumPy did not run)")
            print(f"  memory: graphopt arena {g['arena_bytes'] / 2**20:.2f} MiB + outputs "
                  f"{g['output_bytes'] / 2**20:.2f} MiB vs NumPy eager peak {eager}")
        results["workloads"][wname] = row

    print("\n" + markdown_table(results, pnames))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
    return 0


def markdown_table(results: dict, pnames: list[str]) -> str:
    cols = [p for p in pnames]
    lines = ["| workload | " + " | ".join(cols) + " | best peer | best/graphopt |",
             "|---" * (len(cols) + 3) + "|"]
    for wname, row in results["workloads"].items():
        cells = []
        for p in cols:
            r = row["peers"].get(p, {})
            cells.append(f"{r['median_ms']:.3g}" + ("" if r.get("correct", True) else " (wrong)")
                         if "median_ms" in r else "–")
        lines.append(f"| {wname} | " + " | ".join(cells) +
                     f" | {row.get('best_peer', '–')} | "
                     f"{row['ratio_best_over_graphopt']:.2f} |" if "ratio_best_over_graphopt" in row
                     else f"| {wname} | " + " | ".join(cells) + " | – | – |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
