"""``DaskPlan.profile``: per-step times of a plan run as a dask graph.

A dask graph has no step boundaries at run time (tasks of different steps interleave), so
the profile runs the steps one after another: each step's result is persisted in cluster
memory (``persist`` + ``wait``) before the next step starts from it. Times include
scheduling and transfers; the whole-graph run (``plan(...)``) overlaps steps and is faster.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

from .. import ir
from .dask_dist import get_client


@dataclass
class StepEvent:
    """One step of one repeat: ``name, op_kinds, start_ns, end_ns, flops, bytes``."""

    name: str
    op_kinds: tuple
    start_ns: int
    end_ns: int
    flops: int
    bytes: int
    tasks: int

    @property
    def seconds(self) -> float:
        return (self.end_ns - self.start_ns) / 1e9


class DaskProfile:
    """Events of ``repeat`` step-by-step runs; ``summary()`` and ``to_chrome_trace(path)``."""

    def __init__(self, events: list[StepEvent], repeat: int):
        self.events = events
        self.repeat = repeat

    def summary(self) -> str:
        rows: dict[str, list[StepEvent]] = {}
        for e in self.events:
            rows.setdefault(e.name, []).append(e)
        total = sum(e.seconds for e in self.events) or 1.0
        lines = [f"{'step':<28}{'tasks':>7}{'ms':>10}{'share':>8}{'GFLOP/s':>10}{'GB/s':>8}"]
        for name, evs in rows.items():
            t = sum(e.seconds for e in evs) / len(evs)
            e = evs[0]
            lines.append(f"{name[:27]:<28}{e.tasks:>7}{t * 1e3:>10.2f}"
                         f"{sum(x.seconds for x in evs) / total:>8.1%}"
                         f"{e.flops / t / 1e9 if t else 0:>10.2f}"
                         f"{e.bytes / t / 1e9 if t else 0:>8.2f}")
        return "\n".join(lines)

    def to_chrome_trace(self, path) -> None:
        """Trace Event Format JSON (Perfetto, chrome://tracing)."""
        t0 = min((e.start_ns for e in self.events), default=0)
        trace = [{"name": e.name, "ph": "X", "pid": 0, "tid": 0, "cat": ",".join(e.op_kinds),
                  "ts": (e.start_ns - t0) / 1e3, "dur": (e.end_ns - e.start_ns) / 1e3,
                  "args": {"flops": e.flops, "bytes": e.bytes, "tasks": e.tasks}}
                 for e in self.events]
        with open(path, "w") as f:
            json.dump({"traceEvents": trace, "displayTimeUnit": "ms"}, f)


def profile_dask_plan(plan, arrays: list, repeat: int = 3, warmup: int = 1) -> DaskProfile:
    """Run ``plan`` on bound ``arrays`` step by step, ``warmup + repeat`` times."""
    import dask

    from .dask_lowering import StepLog, constant

    client = get_client(plan.options.get("client"))
    G = plan.graph

    def persist(x):
        if client is None:
            return dask.persist(x)[0]
        import distributed

        x = client.persist(x)
        distributed.wait(x)
        return x

    events = []
    for r in range(warmup + repeat):
        env = dict(zip(G.graph["inputs"], [persist(a) for a in plan._dask_inputs(arrays)]))
        for n in G:
            if G.nodes[n]["op"] == "const":
                env[n] = constant(G.nodes[n]["attrs"]["value"], plan._opts)
        for s in plan.steps:
            start = time.perf_counter_ns()
            x = s.kernel.fn([env[u] for u in ir.operands(G, s.node)], None, StepLog())
            tasks = len(x.__dask_graph__().layers[x.name]) if hasattr(
                x.__dask_graph__(), "layers") else len(x.__dask_graph__())
            env[s.node] = persist(x)
            if r >= warmup:
                events.append(StepEvent(s.name, s.op_kinds, start, time.perf_counter_ns(),
                                        s.flops, s.bytes, tasks))
    return DaskProfile(events, repeat)
