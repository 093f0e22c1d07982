"""Predicted against measured peak memory, with and without ``memory_limit``.

    python -m benchmarks.memory [--mode both|pinned|default] [--instances lattice,peps_norm]
                                [--fractions 0.5,0.25] [--json F]

For each tensor network of ``benchmarks.networks`` (cotengra's, einsum-benchmark's and
quimb's generators) and each workload of ``graphopt.workloads``, in one process: compile at
default settings, then under ``memory_limit`` set to each fraction of the unlimited plan's
predicted peak; report the plan's ``predicted_peak_bytes`` (arena, largest step workspace,
the call's objects), the peak a call measures (``Plan.measure_peak_bytes``: tracemalloc,
beside inputs and outputs, arenas released first), their ratio, the slices and slices at
once, and whether the measured peak stayed within the limit; a limit the compiler refuses is
listed with its reason.
``--mode both`` (the default) runs once pinned to one core, once at the libraries' defaults
(slices run at once only with more than one thread), each in a child process.
"""

from __future__ import annotations

import argparse
import json
import sys

from .networks import INSTANCES
from .run import main_per_mode

WORKLOADS = ("mlp", "attention", "elementwise", "mps_ring")


def _graph_and_inputs(name: str):
    import graphopt as go
    from graphopt import workloads

    if name in INSTANCES:
        eq, arrays, _ = INSTANCES[name][1]()
        g = go.Graph(name)
        ins = [g.input(f"t{i}", a.shape, str(a.dtype)) for i, a in enumerate(arrays)]
        g.output(go.einsum(eq, *ins))
        return g, {f"t{i}": a for i, a in enumerate(arrays)}
    w = getattr(workloads, name)()
    return w.build(), w.inputs


def measure(name: str, fractions, backend: str) -> list[dict]:
    """One row per limit (None, then each fraction of the unlimited predicted peak)."""
    import graphopt as go

    g, inputs = _graph_and_inputs(name)
    rows, whole = [], None
    for f in (None, *fractions):
        if f is not None and not whole:
            break        # nothing held beside inputs and outputs: no limit to set
        limit = None if f is None else int(whole * f)
        row = {"instance": name, "backend": backend, "fraction": f, "limit": limit}
        try:
            plan = go.compile(g, backend=backend, memory_limit=limit, cache=False)
        except go.GraphError as e:
            rows.append(dict(row, refused=str(e).split(": ", 1)[-1][:160]))
            continue
        measured = plan.measure_peak_bytes(**inputs)
        predicted = plan.predicted_peak_bytes
        whole = predicted if whole is None else whole
        names = [r.name for r in plan.report.records]
        sliced = plan.report["slicing"].details if "slicing" in names else {}
        rows.append(dict(row, predicted=predicted, measured=measured,
                         ratio=measured / predicted if predicted else None,
                         slices=sliced.get("n_slices", 0),
                         at_once=sliced.get("slice_workers", 1),
                         within_limit=limit is None or measured <= limit))
    return rows


def _kb(x) -> str:
    return "–" if x is None else f"{x / 1024:.0f}"


def table(rows: list[dict]) -> str:
    out = ["| instance | backend | limit KiB | predicted KiB | measured KiB | measured / predicted "
           "| slices (at once) | within limit |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "refused" in r:
            out.append(f"| {r['instance']} | {r['backend']} | {_kb(r['limit'])} | refused: "
                       f"{r['refused']} | | | | |")
            continue
        out.append(f"| {r['instance']} | {r['backend']} | {_kb(r['limit'])} "
                   f"| {_kb(r['predicted'])} | {_kb(r['measured'])} "
                   f"| {'–' if r['ratio'] is None else format(r['ratio'], '.3f')} "
                   f"| {r['slices']} ({r['at_once']}) | {'yes' if r['within_limit'] else 'NO'} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--instances", default=",".join([*INSTANCES, *WORKLOADS]))
    p.add_argument("--fractions", default="0.5,0.25")
    p.add_argument("--mode", choices=("both", "pinned", "default"), default="both")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    fractions = [float(x) for x in args.fractions.split(",") if x]

    def run_rows():
        rows = []
        for name in args.instances.split(","):
            backends = ("numba", "numpy") if name in WORKLOADS else ("numba",)
            for backend in backends:
                try:
                    rows += measure(name, fractions, backend)
                except ImportError as e:
                    rows.append({"instance": name, "backend": backend, "limit": None,
                                 "refused": f"skipped: {e.name} is not installed"})
                print(json.dumps(rows[-1], default=str), flush=True)
        return rows

    return main_per_mode("benchmarks.memory", args.mode,
                         ["--instances", args.instances, "--fractions", args.fractions],
                         run_rows, table, args.json)


if __name__ == "__main__":
    sys.exit(main())
