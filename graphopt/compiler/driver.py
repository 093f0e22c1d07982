"""``compile()``: IR -> pass pipeline -> lowering -> ``Plan``, with a compile cache.

The cache (``compile_cache``) keys on the graph's structural hash plus every compile
option, so compiling the same graph again (or the same function traced again) returns the
plan already built.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
import warnings
from dataclasses import replace

import networkx as nx
import numpy as np

from .. import ir
from ..backends import BACKENDS, get_backend
from ..contraction.groups import contraction_only
from ..errors import GraphError, did_you_mean
from ..frontend.graph import Graph
from ..observe import progress
from ..observe.report import OptimizationReport, recomputation
from ..passes.contraction import contraction as contraction_pass
from ..passes.manager import (
    CONTRACTION_ONLY_PIPELINE,
    PASS_OPTIONS,
    PassContext,
    PassManager,
    PassRecord,
    check_pass_names,
    env_disabled,
    pipeline_for,
)
from ..runtime.threads import check_threads
from . import cache as compile_cache

SLOW_COMPILE_SECONDS = 1.0   # a compile this long is logged at INFO (else DEBUG)
_log = logging.getLogger(__name__)
_warned_fallback = False


def clear_cache() -> None:
    """Forget every cached plan."""
    compile_cache.clear()


def _beside_arena(backend):
    """What a node's step will allocate beside the arena, as the passes ask
    (``PassContext.workspace_of``): its kernel's workspace and its call's objects."""
    def beside(G, n) -> int:
        return backend.workspace_bytes(G, n) + backend.call_bytes(G, n)
    return beside


def clear_caches() -> None:
    """Give back the memory graphopt keeps between calls in this process: every cached
    plan's arenas and the compile cache itself, the tensor pools' buffers, the contraction
    paths kept in memory. The disk cache is left as it is (``graphopt cache --clear``).
    Plans the caller still holds keep working: their next call takes a fresh arena."""
    from ..contraction.search.cache import clear_memo
    from ..runtime.pool import clear_pools

    for plan in compile_cache.plans():
        release = getattr(plan, "release_arenas", None)
        if release is not None:
            release()
    compile_cache.clear()
    clear_memo()
    clear_pools()


def cached_plans() -> list:
    """The plans in the compile cache, least recently compiled first."""
    return compile_cache.plans()


def resolve_backend(backend: str) -> str:
    """``"auto"`` is numba where it is installed, else the numpy reference (one warning)."""
    global _warned_fallback
    if backend != "auto":
        get_backend(backend)  # raises with an install hint if unknown/unavailable
        return backend
    if "numba" in BACKENDS and BACKENDS["numba"].available():
        return "numba"
    if not _warned_fallback:
        warnings.warn("graphopt: numba is not installed, running on the numpy reference "
                      "backend (pip install numba for compiled kernels)", stacklevel=3)
        _warned_fallback = True
    return "numpy"


def _as_ir(graph) -> nx.MultiDiGraph:
    if isinstance(graph, Graph):
        return graph._ir_for_compile()
    if isinstance(graph, nx.MultiDiGraph):
        G = ir.copy_graph(graph)
        ir.verify(G)
        return G
    raise GraphError(f"compile() takes a go.Graph (or an IR graph), got {type(graph).__name__}")


def _check_memory_limit(memory_limit):
    """A whole, positive number of bytes (any integer type, or a float with an integer
    value such as ``2e9``); anything else is an error, never silently rounded."""
    if memory_limit is None:
        return None
    ok = isinstance(memory_limit, (numbers.Integral, numbers.Real)) and \
        not isinstance(memory_limit, (bool, np.bool_))
    if ok and not isinstance(memory_limit, numbers.Integral):
        ok = math.isfinite(memory_limit) and float(memory_limit).is_integer()
    if not ok or memory_limit < 1:
        raise GraphError(f"memory_limit must be a positive whole number of bytes, got "
                         f"{memory_limit!r}")
    return int(memory_limit)


_NAMED_OPTIONS = ("backend", "opt_level", "memory_limit", "optimize", "passes", "disable",
                  "cache", "debug", "threads")


def _check_options(options: dict, backend_name: str, pass_list, disable) -> None:
    """Compile options the chosen backend and the passes do not read, and unknown pass names,
    are errors that list the valid ones (an option another backend reads says which)."""
    valid = set(PASS_OPTIONS) | BACKENDS[backend_name].compile_options
    wrong = sorted(set(options) - valid)
    if wrong:
        readers = {k: sorted(name for name, b in BACKENDS.items() if k in b.compile_options)
                   for k in wrong}
        known = _NAMED_OPTIONS + tuple(valid) + tuple(
            o for b in BACKENDS.values() for o in b.compile_options)
        said = "; ".join(f"{k!r} is read by backend {', '.join(map(repr, r))} only" if r
                         else f"{k!r} is read by no backend or pass"
                         f"{did_you_mean(k, known).replace('; ', ', ')}"
                         for k, r in readers.items())
        head = "unknown option(s)" if not any(readers.values()) else "option(s)"
        raise GraphError(f"compile: {head} {wrong} for backend {backend_name!r} ({said}); "
                         f"valid options: {', '.join(_NAMED_OPTIONS + tuple(sorted(valid)))}")
    check_pass_names([p for p in pass_list if isinstance(p, str)], "passes")
    given = {getattr(p, "pass_name", getattr(p, "__name__", None)) for p in pass_list}
    check_pass_names(set(disable) - given, "disable")
    check_pass_names(env_disabled(), "GRAPHOPT_DISABLE")


# Marks a compile option that cannot be part of the cache key (None is a valid option value).
_UNCACHEABLE = object()


def _option_key(v):
    if isinstance(v, (str, int, float, bool, type(None))):
        return v
    if isinstance(v, (list, tuple)):
        return tuple(_option_key(x) for x in v)
    if isinstance(v, (set, frozenset)):
        return tuple(sorted(map(repr, v)))
    if isinstance(v, dict):
        return tuple(sorted((k, _option_key(x)) for k, x in v.items()))
    return _UNCACHEABLE  # an object whose identity matters


def compile(graph, backend: str = "auto", opt_level: int = 2, memory_limit=None,
            optimize="auto", passes=None, disable=(), cache: bool = True, debug: bool | None = None,
            threads: int | None = None, **options):
    """Compile a graph into a ``Plan``.

    Args:
        graph: a ``go.Graph`` with outputs set.
        backend: "auto" (numba if installed, else numpy), "numba", "cupy", "dask", "numpy".
        opt_level: 0 verify and lower op by op; 1 + simplify, CSE, DCE; 2 + contraction
            ordering, fusion, scheduling, memory planning; 3 + autotuning on real timings.
        memory_limit: bytes; contraction intermediates are ordered and sliced within it,
            values are recomputed rather than held where the arena would exceed it (the
            ``rematerialize`` pass: a gradient's forward values, chosen by cost), and a
            plan whose predicted peak still exceeds it is refused before it runs. None:
            no slicing, and a plan whose predicted peak exceeds the backend's memory (this
            machine's, or its device's) is refused, with a limit to slice it within.
        optimize: contraction path search ("auto", "hyper", "greedy", "optimal", "dp", or
            an opt_einsum PathOptimizer). "auto" searches large groups within ``path_time``.
        passes: run these passes (callables or registered names) instead of the pipeline.
        disable: pass names to skip.
        cache: reuse a plan compiled before with the same graph and options.
        debug: check every pass against the interpreter on random inputs.
        threads: the plan's thread budget, shared by BLAS and generated kernels (default
            ``$GRAPHOPT_NUM_THREADS``, else every core this process may use; a call inside
            ``with go.thread_budget(n)`` uses ``n``).
        **options: backend options (e.g. ``fast_math=False``, ``cuda_graph=True``) and pass
            options: ``path_time`` (seconds of contraction-path search for groups of more
            than 12 operands; default scaled to the estimated run time; under
            ``memory_limit`` half for the unsliced search and what it left for the search
            with its slices, where a group must be sliced), ``path_cache`` (False: no
            cached paths).

    Returns:
        Plan: call it with the graph's inputs; ``plan.report`` says what was done.
    """
    t0 = time.perf_counter()
    G = _as_ir(graph)
    if isinstance(opt_level, bool) or opt_level not in (0, 1, 2, 3):
        raise GraphError(f"opt_level must be 0, 1, 2 or 3, got {opt_level!r}")
    memory_limit = _check_memory_limit(memory_limit)
    backend_name = resolve_backend(backend)
    if isinstance(disable, str):
        disable = {disable}
    backend_obj = get_backend(backend_name)
    whole = (passes is None and backend_obj.runs_contraction_paths and
             "contraction" not in set(disable) | env_disabled() and
             not options.get("kernel_forms") and contraction_only(G))
    pass_list = list(passes) if passes is not None else pipeline_for(opt_level, whole)
    whole = whole and pass_list == CONTRACTION_ONLY_PIPELINE
    _check_options(options, backend_name, pass_list, disable)
    if check_threads(threads, "compile(threads=)") is not None:
        options["threads"] = threads
    key = (backend_name, opt_level, memory_limit, _option_key(optimize),
           _option_key([p if isinstance(p, str) else _UNCACHEABLE for p in pass_list]),
           _option_key(set(disable) | env_disabled()), _option_key(options), debug)
    cacheable = cache and not any(v is _UNCACHEABLE for v in _flatten(key))
    digest = None
    if cacheable:
        key = (compile_cache.outline(G),) + key
        hit, digest = compile_cache.lookup(key, G)
        if hit is not None:
            return hit

    ctx = PassContext(opt_level=opt_level, memory_limit=memory_limit, optimize=optimize,
                      backend=backend_name, options=dict(options), debug=bool(debug),
                      whole_contraction=whole, slices_at_once=backend_obj.slices_at_once,
                      rates=backend_obj.rates, workspace_of=_beside_arena(backend_obj),
                      host_objects=backend_obj.host_arrays)
    source = G   # (a builder lends its own graph: passes never change their input)
    unsupported = {name: f"backend {backend_name!r} {why}"
                   for name, why in backend_obj.unsupported_passes.items()}
    with progress.activity(f"compiling {G.graph.get('name', 'graph')!r}"):
        optimized, records = PassManager(pass_list, disable=disable, debug=debug,
                                         unsupported=unsupported).run(G, ctx)
        optimized, records = _with_contractions(optimized, records, ctx)
        report = OptimizationReport.build(name=G.graph.get("name", "graph"),
                                          backend=backend_name, opt_level=opt_level,
                                          records=records, source_graph=source,
                                          graph=optimized, counted_flops=ctx.counted_flops)
        progress.phase(f"building the {backend_name} plan (kernels)")
        plan = backend_obj.build_plan(optimized, source, ctx, report)
        ctx.counted_flops.clear()    # (the graphs it holds are the plan's or garbage now)
    _check_predicted_peak(plan, memory_limit, recomputation(records),
                          missing=[n for n in _FITTING_PASSES
                                   if not any(r.name == n and "skipped" not in r.details
                                              for r in records)])
    if memory_limit is None:
        _check_fits_memory(plan, backend_obj)
    report.attach_plan(plan)
    report.compile_seconds = time.perf_counter() - t0
    slowest = max(records, key=lambda r: r.seconds, default=None)
    _log.log(logging.INFO if report.compile_seconds >= SLOW_COMPILE_SECONDS else logging.DEBUG,
             "compiled %r for backend %s in %.3f s (%d passes%s)", report.name, backend_name,
             report.compile_seconds, len(records), "" if slowest is None else
             f"; slowest: {slowest.name} {slowest.seconds:.3f} s")
    if cacheable:
        compile_cache.keep(key, plan, G, digest)
    return plan


def _with_contractions(G, records: list, ctx):
    """``G`` with a contraction on every einsum node: where the pipeline left one without
    (``passes=`` without the contraction pass, or it disabled), the contraction pass runs
    once more as at ``opt_level`` 0, giving each its contraction as written (its record
    says so). ``(graph, records)``."""
    if not any(d["op"] == "einsum" and "contraction" not in d["attrs"]
               for _, d in G.nodes(data=True)):
        return G, records
    t0 = time.perf_counter()
    result = contraction_pass(G, replace(ctx, opt_level=0))
    ir.verify(result.graph, pass_name="contraction")
    details = dict(result.record, why="each einsum given its contraction as written: the "
                   "pipeline that ran did not give every einsum one")
    rec = PassRecord(name="contraction", seconds=time.perf_counter() - t0,
                     nodes_before=G.number_of_nodes(), nodes_after=G.number_of_nodes(),
                     changed=True, details=details)
    return result.graph, records + [rec]


# the passes that fit a plan to memory_limit: a refusal of a pipeline without them says so
_FITTING_PASSES = ("slicing", "schedule", "rematerialize")


def _check_predicted_peak(plan, memory_limit, recomputed: dict | None = None,
                          missing=()) -> None:
    """Under ``memory_limit``, refuse before running a plan whose predicted peak (the arena,
    the most a step allocates beside it and the call's objects, ``Plan.predicted_peak_bytes``)
    exceeds it, naming the value or the step that cannot fit: first one held value or one
    step's workspace that exceeds the limit on its own, else the arena and the step that
    tops it up, what
    recomputing values (``recomputed``, the rematerialize pass's details) achieved, and the
    passes that fit a plan to a limit which did not run (``missing``)."""
    if memory_limit is None or not hasattr(plan, "predicted_peak_bytes"):
        return
    peak = plan.predicted_peak_bytes
    if peak <= memory_limit:
        return
    nbytes, what, s = _largest_holder(plan)
    if nbytes > memory_limit:
        head = f"step {s.index} {s.name} ({s.kernel.impl}, {s.dtype}{list(s.shape)}) {what} " \
               f"{nbytes} bytes on its own (the plan's predicted peak is {peak} bytes)"
    else:
        s = plan.workspace_step
        head = (f"the plan's predicted peak is {peak} bytes: its arena of {plan.arena_bytes} "
                f"bytes and the call's {plan.objects_bytes} bytes of objects while step "
                f"{s.index} {s.name} ({s.kernel.impl}, {s.dtype}{list(s.shape)}) needs "
                f"{s.call_bytes} bytes beside them (workspace and its call's objects)")
    tried = ""
    if recomputed:
        n, after = recomputed.get("recomputed_count", 0), recomputed["arena_after"]
        done = (f" Recomputing {n} value(s) instead of holding them lowered the arena from "
                f"{recomputed['arena_before']} to {after} bytes")
        tried = (" No value can be recomputed to lower the arena." if after >= recomputed[
            "arena_before"] else f"{done}, within {recomputed['budget_bytes']} bytes kept for "
            "it, but the step's workspace does not fit beside it." if recomputed["met"] else
            f"{done}; the search found nothing more to recompute that lowers it" + (
                f", and no order holds less than {recomputed['floor_bytes']} bytes (what one "
                "step reads and writes at once)." if recomputed.get("floor_bytes") else "."))
    if missing:
        fix = (f" This pipeline did not run {', '.join(missing)}: compile with opt_level=2 "
               "(the default), which orders and slices the intermediates inside a contraction, "
               "schedules the steps and recomputes values rather than hold them to fit the "
               "limit; or raise memory_limit")
    else:
        fix = (" graphopt orders and slices the intermediates inside a contraction and "
               "recomputes values rather than hold them to fit the limit; a value that other "
               "ops read whole cannot be sliced. Raise memory_limit, or split the computation")
    raise GraphError(
        f"memory_limit={memory_limit} bytes cannot be met: {head}.{tried}{fix}",
        op=s.op_kinds[0] if s.op_kinds else None, src=s.srcs[0] if s.srcs else None,
        node=s.node)


def _largest_holder(plan) -> tuple[int, str, object]:
    """``(bytes, "holds" or "needs as workspace", step)`` of the step that holds the most
    on its own: a value in the arena, or a kernel's workspace."""
    held = [(s.nbytes, "holds", s) for s in plan.steps if s.offset is not None]
    held += [(s.workspace_bytes, "needs as workspace", s) for s in plan.steps]
    return max(held, key=lambda h: h[0], default=(0, "", None))


def _check_fits_memory(plan, backend) -> None:
    """With no ``memory_limit``: refuse before running a plan whose predicted peak exceeds
    the backend's memory (``Backend.memory_bytes``), naming the step that holds the most,
    the plan's FLOPs and how to slice it. Such a network (a lattice or random graph too
    wide to contract whole) would otherwise fail at its first call, after its search."""
    have = backend.memory_bytes()
    peak = getattr(plan, "predicted_peak_bytes", 0)
    if have is None or peak <= have:
        return
    nbytes, what, s = _largest_holder(plan)
    raise GraphError(
        f"the plan's predicted peak is {peak} bytes, more than the {have} bytes of memory "
        f"of the {backend.name} backend here: step {s.index} {s.name} ({s.kernel.impl}, "
        f"{s.dtype}{list(s.shape)}) {what} {nbytes} bytes on its own, and the plan costs "
        f"{sum(t.flops for t in plan.steps):.3g} FLOPs. Pass memory_limit= (e.g. "
        f"memory_limit={have // 2}) to slice its contractions and recompute values within "
        "it, or give the path search longer (path_time=) for a narrower order",
        op=s.op_kinds[0] if s.op_kinds else None, src=s.srcs[0] if s.srcs else None,
        node=s.node)


def _flatten(v):
    if isinstance(v, tuple):
        for x in v:
            yield from _flatten(x)
    else:
        yield v
