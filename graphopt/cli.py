"""The ``graphopt`` command line (also ``python -m graphopt``).

``graphopt demo`` builds three workloads (an MLP layer, attention, a tensor-network ring),
compiles each, checks it against NumPy, prints the optimization report, a profile with
each step's bottleneck, and writes one Chrome trace. ``graphopt report GRAPH.json``
compiles a saved graph and prints its report. ``graphopt trace GRAPH.json`` profiles a
saved graph on random inputs and writes a Perfetto trace and a timeline PNG. ``graphopt
bench [SUITE] [ARGS]`` runs a benchmark suite of a source checkout. ``graphopt cache
[--clear]`` shows (or empties) the on-disk kernel and path cache; ``graphopt --version``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from . import GraphError, __version__, compile, load, workloads
from .ir.equivalence import random_inputs
from .support import disk_cache

# The demo's workloads (``graphopt.workloads``, the graphs the tests and benchmarks use) at
# sizes that compile and run in about a second: an MLP layer, attention, and an MPS ring of
# 20 sites (60 index labels > 52, so Unicode ones).
DEMO_WORKLOADS = [(workloads.mlp, {"batch": 64, "d_in": 256, "d_hidden": 512}),
                  (workloads.attention, {"batch": 2, "heads": 4, "seq": 64, "dim": 32}),
                  (workloads.mps_ring, {"sites": 20, "bond": 8})]


def _max_error(got, expected) -> float:
    """Largest error relative to the reference's magnitude."""
    got, expected = np.asarray(got), np.asarray(expected)
    scale = max(float(np.max(np.abs(expected), initial=0.0)), 1e-300)
    return float(np.max(np.abs(got - expected), initial=0.0)) / scale


def _profile(plan, inputs, repeat: int, trace_path: str | None) -> dict | None:
    """Print the plan's profile; returns the trace document written (None if none)."""
    prof = plan.profile(**inputs, repeat=repeat)
    print(prof.summary())
    print(prof.bottlenecks())
    if trace_path is None:
        return None
    prof.to_chrome_trace(trace_path)
    with open(trace_path, encoding="utf-8") as f:
        return json.load(f)


def _merge_traces(docs: list[tuple[str, dict | list]], path: str) -> None:
    """One Trace Event Format file with one process row per workload."""
    events = []
    for pid, (name, doc) in enumerate(docs, start=1):
        evs = doc.get("traceEvents", []) if isinstance(doc, dict) else doc
        events.append({"name": "process_name", "ph": "M", "pid": pid, "args": {"name": name}})
        events += [dict(e, pid=pid) for e in evs if isinstance(e, dict)]
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump({"traceEvents": events, "displayTimeUnit": "ns"}, f)
    os.replace(tmp, path)


def cmd_demo(args) -> int:
    """``graphopt demo``: compile, check against NumPy, report and profile the demo workloads."""
    if args.trace is None:   # never into the directory the demo is run from
        args.trace = os.path.join(tempfile.mkdtemp(prefix="graphopt-demo-"), "trace.json")
    traces, failed = [], []
    for build, sizes in DEMO_WORKLOADS:
        w = build(**sizes, seed=args.seed)
        print(f"\n=== {w.name} " + "=" * (60 - len(w.name)))
        t0 = time.perf_counter()
        plan = compile(w.build(), backend=args.backend, opt_level=args.opt_level)
        t1 = time.perf_counter()
        got = plan(**w.inputs)
        t2 = time.perf_counter()
        err = _max_error(got, w.reference(**w.inputs))
        ok = err <= w.rtol
        print(f"compiled in {t1 - t0:.2f} s on backend '{plan.report.backend}'; first call "
              f"{(t2 - t1) * 1e3:.1f} ms; max error vs NumPy {err:.2e} (tolerance {w.rtol:g})"
              f" {'OK' if ok else 'MISMATCH'}")
        print(plan.report)
        if not ok:
            failed.append(w.name)
            continue
        tmp = f"{args.trace}.{w.name}.tmp" if args.trace else None
        try:
            doc = _profile(plan, w.inputs, args.repeat, tmp)
        finally:
            if tmp and os.path.exists(tmp):
                os.remove(tmp)
        if doc is not None:
            traces.append((w.name, doc))
    if traces and args.trace:
        _merge_traces(traces, args.trace)
        print(f"\nChrome trace written to {args.trace} (open in https://ui.perfetto.dev or "
              "chrome://tracing)")
    if failed:
        print(f"\nFAILED: {', '.join(failed)} did not match NumPy", file=sys.stderr)
        return 1
    print("\nall workloads match NumPy")
    return 0


def cmd_report(args) -> int:
    """``graphopt report``: compile a saved graph and print its report."""
    g = load(args.graph)
    plan = compile(g, backend=args.backend, opt_level=args.opt_level)
    r = plan.report
    print({"text": str, "markdown": lambda x: x.to_markdown(), "json": lambda x: x.to_json(),
           "dot": lambda x: x.to_dot()}[args.format](r))
    return 0


def _out_dir(path: str | None, prefix: str) -> str:
    """``path`` (created), or a new temporary directory: never the working directory."""
    if path is None:
        return tempfile.mkdtemp(prefix=prefix)
    os.makedirs(path, exist_ok=True)
    return path


def cmd_trace(args) -> int:
    """``graphopt trace``: profile a saved graph on random inputs; write a Perfetto trace
    and a timeline PNG; print the per-step table and bottlenecks."""
    g = load(args.graph)
    plan = compile(g, backend=args.backend, opt_level=args.opt_level)
    inputs = random_inputs(plan.source_graph, np.random.default_rng(args.seed))
    reference = compile(g, backend="numpy", opt_level=0)(*inputs)
    got = plan(*inputs)
    pairs = zip(got, reference) if isinstance(got, (tuple, list)) else [(got, reference)]
    err = max((_max_error(a, b) for a, b in pairs), default=0.0)
    print(f"{plan!r}: max error against the interpreter {err:.2e}")
    prof = plan.profile(*inputs, repeat=args.repeat)
    print(prof.summary())
    print(prof.bottlenecks())
    out = _out_dir(args.out, "graphopt-trace-")
    trace = os.path.join(out, "trace.json")
    prof.to_chrome_trace(trace)
    print(f"\nPerfetto trace: {trace} (open in https://ui.perfetto.dev or chrome://tracing)")
    png = os.path.join(out, "timeline.png")
    try:
        prof.plot(png)
        print(f"timeline: {png}")
    except ImportError as e:
        print(f"timeline: not drawn ({e})")
    return 0


def find_benchmarks(start: Path | None = None) -> Path | None:
    """The ``benchmarks`` folder of a source checkout: beside the installed package (an
    editable install), else in the working directory or one above it."""
    here = Path(__file__).resolve().parent.parent
    for root in ([start] if start else []) + [here, Path.cwd(), *Path.cwd().parents]:
        if (root / "benchmarks" / "run.py").is_file() and (root / "graphopt").is_dir():
            return root
    return None


BENCH_SUITES = ("run", "networks", "first_contract", "sliced_networks", "integer_networks",
                "compile_time", "memory", "concurrency", "slices", "math_kernels",
                "dask_slicing", "gpu", "gpu_networks")


def cmd_bench(args) -> int:
    """``graphopt bench``: run one of the checkout's benchmark suites (``python -m
    benchmarks.SUITE ARGS``), its tables printed as it goes; returns its exit status."""
    root = find_benchmarks()
    if root is None:
        raise GraphError("the benchmark suites ship with graphopt's source, not its wheel: "
                         "clone the repository, pip install -e '.[bench]' and run graphopt "
                         "bench there")
    cmd = [sys.executable, "-m", f"benchmarks.{args.suite}", *args.args]
    print("running:", " ".join(cmd), f"(in {root})", flush=True)
    return subprocess.call(cmd, cwd=root)


def cmd_cache(args) -> int:
    """``graphopt cache``: where the on-disk cache is and what it holds; ``--clear`` empties
    it."""
    if args.clear:
        print(f"removed {disk_cache.clear()} files from {disk_cache.configured_dir()}")
        return 0
    u = disk_cache.usage()
    print(f"cache directory: {u['dir']}{'' if u['exists'] else ' (not created yet)'}")
    for kind, k in u["kinds"].items():
        print(f"  {kind:8s} {k['files']:6d} files {k['bytes'] / 2**20:10.2f} MiB")
    return 0


def _positive_int(text: str) -> int:
    try:
        v = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {v}")
    return v


class _Parser(argparse.ArgumentParser):
    """Usage errors: one line on stderr, exit status 2."""

    def error(self, message):
        self.exit(2, f"{self.prog}: error: {message} (see {self.prog} --help)\n")


def _parser() -> argparse.ArgumentParser:
    p = _Parser(prog="graphopt", description="Compile einsum computation graphs "
                                "into fast, memory-planned plans.")
    p.add_argument("--version", action="version", version=f"graphopt {__version__}")
    sub = p.add_subparsers(dest="command", required=True)
    common = _Parser(add_help=False)
    common.add_argument("--backend", default="auto",
                        help="auto (numba if installed), numba, cupy, dask or numpy")
    common.add_argument("--opt-level", type=int, default=2, choices=(0, 1, 2, 3))
    d = sub.add_parser("demo", parents=[common], help="compile an MLP, attention and a "
                       "tensor network; check them against NumPy; print reports")
    d.add_argument("--trace", default=None,
                   help="Chrome trace output path (default: trace.json in a new temporary "
                   "directory; '' for none)")
    d.add_argument("--repeat", type=_positive_int, default=5, help="profiled runs per workload")
    d.add_argument("--seed", type=int, default=None,
                   help="seed of the random inputs (default: each workload's own)")
    d.set_defaults(fn=cmd_demo)
    r = sub.add_parser("report", parents=[common], help="compile a graph saved with go.save "
                       "and print its optimization report")
    r.add_argument("graph", help="path of a graph JSON file")
    r.add_argument("--format", default="text", choices=("text", "markdown", "json", "dot"))
    r.set_defaults(fn=cmd_report)
    t = sub.add_parser("trace", parents=[common], help="profile a graph saved with go.save "
                       "on random inputs: a Perfetto trace and a timeline PNG")
    t.add_argument("graph", help="path of a graph JSON file")
    t.add_argument("--out", default=None,
                   help="output directory (default: a new temporary directory)")
    t.add_argument("--repeat", type=_positive_int, default=10, help="profiled runs")
    t.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    t.set_defaults(fn=cmd_trace)
    b = sub.add_parser("bench", help="run a benchmark suite of a source checkout against "
                       "its peers (NumPy, opt_einsum, cotengra, JAX, torch)")
    b.add_argument("suite", nargs="?", default="run", choices=BENCH_SUITES,
                   help="run: the workloads against every peer (default); networks: tensor "
                   "networks against cotengra/quimb; ...")
    b.add_argument("args", nargs=argparse.REMAINDER,
                   help="passed to the suite (e.g. --quick --mode pinned)")
    b.set_defaults(fn=cmd_bench)
    c = sub.add_parser("cache", help="show the on-disk cache (kernels, paths, timings): "
                       "where it is and its size")
    c.add_argument("--clear", action="store_true", help="remove graphopt's files from it")
    c.set_defaults(fn=cmd_cache)
    return p


def main(argv=None) -> int:
    """Run the command line; returns the exit status."""
    args = _parser().parse_args(argv)
    try:
        return args.fn(args)
    except (GraphError, OSError) as e:
        print(f"graphopt: error: {e}", file=sys.stderr)
        return 2
