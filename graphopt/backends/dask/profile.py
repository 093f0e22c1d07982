"""``DaskPlan.profile``: per-step times of a plan run as a dask graph.

A dask graph has no step boundaries at run time (tasks of different steps interleave), so
the profile runs the steps one after another: each step's result is persisted in cluster
memory (``persist`` + ``wait``) before the next step starts from it. Times include
scheduling and transfers; the whole-graph run (``plan(...)``) overlaps steps and is faster.
The result is the general ``observe.profiler.Profile`` (summary, Chrome trace, bottlenecks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from ...observe.profiler import Profile, StepEvent
from .cluster import get_client


@dataclass
class DaskStepEvent(StepEvent):
    """A ``StepEvent`` that also counts the dask tasks the step ran."""

    tasks: int = 0


class _StepTimer:
    """``DaskPlan.build_steps``'s hook for one run: persist each step's array (it waits for
    it) and record the step's time, from the end of the previous one (lowering included)."""

    def __init__(self, persist, repeat: int | None):
        self.persist, self.repeat = persist, repeat
        self.events: list[DaskStepEvent] = []
        self.last = time.perf_counter_ns()

    def __call__(self, s, x, log):
        graph = x.__dask_graph__()
        tasks = len(graph.layers[x.name]) if hasattr(graph, "layers") else len(graph)
        x = self.persist(x)
        end = time.perf_counter_ns()
        if self.repeat is not None:
            self.events.append(DaskStepEvent(
                s.name, s.op_kinds, self.last, end, s.flops, s.bytes, step=s.index,
                repeat=self.repeat, shape=s.shape, dtype=s.dtype, impl=s.kernel.impl,
                srcs=s.srcs, tasks=tasks))
        self.last = time.perf_counter_ns()
        return x


def profile_dask_plan(plan, arrays: list, repeat: int = 3, warmup: int = 1) -> Profile:
    """Run ``plan`` on bound ``arrays`` step by step, ``warmup + repeat`` times."""
    import dask

    client = get_client(plan.options.get("client"))

    def persist(x):
        if client is None:
            return dask.persist(x)[0]
        import distributed

        x = client.persist(x)
        distributed.wait(x)
        return x

    events = []
    for r in range(warmup + repeat):
        inputs = [persist(a) for a in plan.dask_inputs(arrays)]
        timer = _StepTimer(persist, r - warmup if r >= warmup else None)
        plan.build_steps(inputs, timer)
        events += timer.events
    return Profile(events, repeat)
