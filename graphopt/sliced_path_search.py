"""The path of a contraction that must be sliced, searched with its slicing in view.

The contraction pass orders a group for speed alone. Where no order of it fits the memory
limit whole, the slicing pass slices that path (``slice_search.fit_slices``), and the
slices can cost many times its FLOPs: an order that suits the whole network is rarely the
one that suits its slices (cotengra's experience, and ours: a 6x6 lattice at bond 8 under
1/16 of its peak sliced 8192 ways at 8.6e10 FLOPs along its unsliced best path, 128 ways
at 3.1e9 along a path searched sliced). ``search_sliced_path`` searches again, within a
budget:

1. cotengra's slice-and-reconfigure of the unsliced path (``path_searchers.
   slice_reconfigured``) at each intermediate target of ``TARGET_FRACTIONS`` of the
   budget, while the counted budget pays (``SLICE_RECONF_SECONDS_PER_TENSOR`` each);
2. by the clock, where at least ``HYPER_MIN_SECONDS`` are left: cotengra's
   hyper-optimizer with its trials sliced and scored sliced.

Every path found is sliced again by ``fit_slices`` against what a call really allocates;
the least estimated run time that fits wins (``sliced_seconds``: FLOPs, and a cost per step
of each slice, so that many tiny slices do not pass for cheap), within
``MAX_FLOP_OVERHEAD`` times the unsliced path's. The budget: ``path_time`` where the user
set it; by default ``SEARCH_FRACTION`` of the estimated run time of the best slicing so
far, at most ``DEFAULT_MAX_SECONDS``: the rule of the unsliced search (``path_search``),
with the slices' cost as the stake. Without cotengra the first slicing
stands. The path is kept in the path cache under the network, the memory budget, the
dtype and the slices in flight, so a second compile or process does not search again.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from . import path_cache
from . import path_searchers as searchers
from .einsum import split as split_equation
from .errors import GraphError
from .paths import label_sizes, play
from .search_budget import (
    COMBO_RATE,
    DEFAULT_MAX_SECONDS,
    HYPER_CHUNK_SECONDS,
    HYPER_MIN_SECONDS,
    HYPER_TRIAL_SECONDS_PER_TENSOR,
    SEARCH_FRACTION,
    check_time_budget,
)
from .slice_search import MAX_FLOP_OVERHEAD, SlicePlan, fit_slices
from .sliced_contraction import least_sliced_workspace_bytes

# Intermediate targets (fractions of the memory budget, in elements) that slice-and-
# reconfigure runs at, in order. A call holds several intermediates and the steps' operand
# copies beside the largest, so its largest must be a fraction of the budget; which fraction
# fits best depends on the network: on 7 limits of lattices (5x6, 6x6 and 5x8 at bond 6-8)
# and a 50-tensor random-regular network (bond 4), at 1/4-1/64 of their peaks, 1/8 or 1/4
# gave the fewest FLOPs on 6 (1/8 on 5; 1/4 on one that 1/8 and 1/16 tied), 1/16 on one
# (1.1e8 against 1.3e8), 1/32 and 1/64 never, at up to twice the time
TARGET_FRACTIONS = (1 / 8, 1 / 4, 1 / 16, 1 / 32)
# Run time a sliced plan costs per step of each slice beside its FLOPs (the loop's Python
# and NumPy's per-call costs: 5.3 us a step on a 4x5 lattice's 32768 slices of 19 steps,
# 4.1 s a call for 7.7e9 FLOPs); it tells a plan of many tiny slices from one of fewer
SLICE_STEP_SECONDS = 5e-6
# Counted cost of one slice-and-reconfigure and the slicing of its path, per tensor
# (measured: 0.01-0.03 s on 20 tensors, 0.04-0.2 s on 36-50)
SLICE_RECONF_SECONDS_PER_TENSOR = 3e-3


def sliced_seconds(flops: int, n_slices: int, n_terms: int) -> float:
    """Estimated run time of ``n_slices`` slices of a path over ``n_terms`` operands that
    cost ``flops`` in all: the FLOPs at ``COMBO_RATE``, and ``SLICE_STEP_SECONDS`` per step
    of each slice. What the search ranks slicings by, and what sets its budget."""
    return flops / COMBO_RATE + n_slices * max(1, n_terms - 1) * SLICE_STEP_SECONDS


def sliced_budget(plan: SlicePlan | None, time_budget: float | None, n_terms: int) -> float:
    """Seconds the search of a contraction sliced as ``plan`` (the best found so far) is
    worth (module docstring); with no slicing found yet, what the counted steps cost: a
    refusal is what the search saves."""
    if time_budget is not None:
        return float(time_budget)
    if plan is None:
        return SLICE_RECONF_SECONDS_PER_TENSOR * n_terms * len(TARGET_FRACTIONS)
    return min(DEFAULT_MAX_SECONDS,
               SEARCH_FRACTION * sliced_seconds(plan.flops, plan.n_slices, n_terms))


def sliced_key(equation: str, shapes, dtype, budget: int, workers: int) -> str:
    """The path cache's key of ``equation`` on ``shapes`` sliced within ``budget`` bytes with
    ``workers`` slices in flight."""
    terms, output = split_equation(equation)
    base = path_cache.network_key(terms, output, label_sizes(equation, shapes))
    text = f"{base}|sliced|{int(budget)}|{np.dtype(dtype).str}|{int(workers)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


def search_sliced_path(equation: str, shapes, dtype, budget: int, path, found=None,
                       workers: int = 1, operand_dtypes=None,
                       time_budget: float | None = None,
                       cache: bool = True) -> tuple[list, SlicePlan, int, dict]:
    """``(path, plan, workspace bytes, record)``: the fastest slicing within ``budget``
    bytes that the search finds (module docstring), starting from ``path`` and ``found``
    (``fit_slices``'s ``(path, plan, workspace bytes)`` along it, or None where no slicing
    of it fits). The record says what ran: searcher, seconds, budget_seconds, flops_before
    (``found``'s, or None), cache ("hit", "miss" or "off"). Raises ``GraphError`` where
    nothing found fits."""
    check_time_budget(time_budget)
    t0 = time.perf_counter()
    terms, output = split_equation(equation)
    sizes = label_sizes(equation, shapes)
    best = found
    # a slicing that costs more than MAX_FLOP_OVERHEAD times the unsliced path's run, as
    # fit_slices refuses along one path: a searched path's own unsliced FLOPs may be many
    # times those (a 4x5 lattice under 1/24 of its peak: a billion slices, 1.2e13 FLOPs)
    most = MAX_FLOP_OVERHEAD * sliced_seconds(play(terms, output, sizes, path).flops, 1,
                                              len(terms))

    def seconds_of(fit) -> float:
        return sliced_seconds(fit[1].flops, fit[1].n_slices, len(terms))

    def consider(p) -> None:
        nonlocal best
        try:
            fit = fit_slices(equation, shapes, p, dtype, budget, workers=workers,
                             operand_dtypes=operand_dtypes, repath=False)
        except GraphError:
            return
        if seconds_of(fit) <= most and (best is None or seconds_of(fit) < seconds_of(best)):
            best = fit

    def seconds() -> float:      # follows the best slicing so far: asked each time
        return sliced_budget(best[1] if best else None, time_budget, len(terms))

    def result(rec):
        if best is None:
            raise GraphError(f"no path searched ({rec['searcher']}) slices within {budget} "
                             "bytes either")
        return (*best, rec)

    record = {"searcher": "none", "seconds": 0.0, "budget_seconds": seconds(),
              "flops_before": found[1].flops if found else None, "cache": "off"}
    if not searchers.cotengra_available() or len(terms) <= 2 or \
            budget < least_sliced_workspace_bytes(len(terms), sizes):
        return result(record)       # (no path could: the call's own objects exceed it)
    key = sliced_key(equation, shapes, dtype, budget, workers) if cache else None
    kept = path_cache.cached(key, terms, output, sizes) if cache else None
    if kept is not None:
        consider(kept[0].path)
        if kept[1]["budget_seconds"] >= seconds():
            return result(dict(record, searcher=kept[1]["searcher"], cache="hit"))

    itemsize = np.dtype(dtype).itemsize
    counted, per, ran = 0.0, SLICE_RECONF_SECONDS_PER_TENSOR * len(terms), []
    # from the unsliced path, not the first slicing's (searched again for its sliced sizes):
    # as good or better on all 7 limits above (a 6x6 lattice at 1/16: 6.1e9 against 1.8e10)
    start = [tuple(p) for p in path]
    for fraction in TARGET_FRACTIONS:
        if counted + per > seconds():
            break
        counted += per
        target = max(1, int(budget * fraction) // itemsize)
        consider(searchers.slice_reconfigured(terms, output, sizes, start, target))
        ran.append(f"1/{round(1 / fraction)}")
    searcher = f"cotengra slice-and-reconfigure ({', '.join(ran)} of the budget)" if ran \
        else "none"
    if best is not None and seconds() - (time.perf_counter() - t0) >= HYPER_MIN_SECONDS:
        trials = searchers.HyperTrials(terms, output, sizes,
                                       slice_target=max(1, best[1].largest_bytes // itemsize))
        while True:
            per_trial = trials.seconds_per_trial() or HYPER_TRIAL_SECONDS_PER_TENSOR * len(terms)
            chunk = min(HYPER_CHUNK_SECONDS, seconds() - (time.perf_counter() - t0) - per_trial)
            if chunk <= 0:
                break
            consider(trials.trial(chunk))
        if trials.trials:
            searcher = ("" if searcher == "none" else searcher + ", then ") + \
                f"{searchers.HyperTrials.name}, sliced ({trials.trials} trials)"
    elapsed = round(time.perf_counter() - t0, 4)
    record.update(searcher=searcher, seconds=elapsed, budget_seconds=seconds())
    if cache and best is not None and searcher != "none":
        steps = play(terms, output, sizes, best[0])
        path_cache.store(key, steps, {"path": [list(p) for p in steps.path],
                                      "searcher": searcher,
                                      "budget_seconds": record["budget_seconds"],
                                      "seconds": elapsed, "combo": steps.combo})
        record["cache"] = "miss"
    return result(record)
