"""``DaskPlan.profile``: per-step times of a plan run as a dask graph.

A dask graph has no step boundaries at run time (tasks of different steps interleave), so
the profile runs the steps one after another: each step's result is persisted in cluster
memory (``persist`` + ``wait``) before the next step starts from it. Times include
scheduling and transfers; the whole-graph run (``plan(...)``) overlaps steps and is faster.
The result is the general ``graphopt.profiler.Profile`` (summary, Chrome trace, bottlenecks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ... import ir
from ...profiler import Profile, StepEvent
from .cluster import get_client


@dataclass
class DaskStepEvent(StepEvent):
    """A ``StepEvent`` that also counts the dask tasks the step ran."""

    tasks: int = 0


def profile_dask_plan(plan, arrays: list, repeat: int = 3, warmup: int = 1) -> Profile:
    """Run ``plan`` on bound ``arrays`` step by step, ``warmup + repeat`` times."""
    import dask

    from .lowering import StepLog, constant

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
                events.append(DaskStepEvent(
                    s.name, s.op_kinds, start, time.perf_counter_ns(), s.flops, s.bytes,
                    step=s.index, repeat=r - warmup, shape=s.shape, dtype=s.dtype,
                    impl=s.kernel.impl, srcs=s.srcs, tasks=tasks))
    return Profile(events, repeat)
