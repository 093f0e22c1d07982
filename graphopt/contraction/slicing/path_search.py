"""The path of a contraction that must be sliced, searched with its slicing in view.

The contraction pass orders a group for speed alone. Where no order of it fits the memory
limit whole, the slicing pass slices that path (``labels.fit_slices``), and the slices can
cost many times its FLOPs: an order that suits the whole network is rarely the one that
suits its slices (as cotengra finds too: on lattices under a small fraction of their peak,
a path searched with its slices in view slices into tens of times fewer slices at a
fraction of the FLOPs). ``search_sliced_path`` searches again, within a budget:

1. cotengra's slice-and-reconfigure of the unsliced path (``searchers.
   slice_reconfigured``) at each intermediate target of ``TARGET_FRACTIONS`` of the
   budget, while the counted budget pays (``SLICE_RECONF_SECONDS_PER_TENSOR`` each);
1b. where every slicing step 1 found fits the memory but costs more than
   ``MAX_FLOP_OVERHEAD`` times the unsliced run (the unsliced path was searched for the
   milliseconds that run takes, and slices only into billions), or step 1 ran nothing
   (no cotengra) and no slicing of the path fit: graphopt's path search of the unsliced
   network again, then step 1 from its path; the budget is then what such a slicing may
   cost and still be taken;
2. graphopt's own path search (``search.anytime``) for the network with the best slicing's
   labels at their block sizes (with none cheap enough, the cheapest that fits the
   memory), then sliced again, in rounds while one improves it;
3. by the clock, where at least ``HYPER_MIN_SECONDS`` are left (and a slicing was found,
   one too dear was, or ``path_time`` set the budget): cotengra's
   hyper-optimizer with its trials sliced to the first of those targets, and scored
   sliced.

Every path found is sliced again by ``fit_slices`` against what a call really allocates,
and cotengra's own slicing of it is kept too where it fits that (graphopt's halving of
label blocks suits a path it was handed less well than cotengra's slicing suits the path it
reconfigured for it); the least estimated run time that fits wins (the backend's
``Rates.sliced_seconds``: FLOPs, and a cost per step of each slice, so that many tiny
slices do not pass for cheap), within ``MAX_FLOP_OVERHEAD`` times the unsliced path's. The
budget: ``path_time`` where the user set it; by default ``SEARCH_FRACTION`` of the
estimated run time of the best slicing so far, at most ``DEFAULT_MAX_SECONDS``: the rule of
the unsliced search (``search.anytime``),
with the slices' cost as the stake. Without cotengra only steps 1b and 2 run. The path is
kept in the path cache under the network, the memory budget, the dtype and the slices in
flight, so a second compile or process does not search again.
"""

from __future__ import annotations

import hashlib
import time

import numpy as np

from ...errors import GraphError
from ...ir.einsum import split as split_equation
from ..paths import label_sizes, play
from ..rates import Rates, host_rates
from ..search import anytime as path_search
from ..search import cache as path_cache
from ..search import searchers as searchers
from ..search.budget import (
    DEFAULT_MAX_SECONDS,
    HYPER_CHUNK_SECONDS,
    HYPER_MIN_SECONDS,
    HYPER_TRIAL_SECONDS_PER_TENSOR,
    SEARCH_FRACTION,
    SearchSteps,
    check_time_budget,
)
from .labels import MAX_FLOP_OVERHEAD, Slicing, fit_slices, slice_plan
from .run import contraction_workspace_bytes, least_sliced_workspace_bytes

# Intermediate targets (fractions of the memory budget, in elements) that slice-and-
# reconfigure runs at, in order. A call holds several intermediates and the steps' operand
# copies beside the largest, so its largest must be a fraction of the budget; which fraction
# fits best depends on the network: 1/8 and 1/4 most often, 1/16 sometimes, smaller ones
# rarely, so they are tried in that order while the budget pays
TARGET_FRACTIONS = (1 / 8, 1 / 4, 1 / 16, 1 / 32)
# Step 2's rounds: at most this many, each given what the counted budget leaves, at most
# REPATH_SECONDS (under HYPER_MIN_SECONDS its steps are counted, not timed, so the same in
# every process), skipped under REPATH_MIN_SECONDS
REPATH_ROUNDS, REPATH_SECONDS, REPATH_MIN_SECONDS = 3, 0.25, 0.01
# Counted cost of one slice-and-reconfigure and the slicing of its path, per tensor
SLICE_RECONF_SECONDS_PER_TENSOR = 3e-3


def sliced_budget(plan: Slicing | None, time_budget: float | None, n_terms: int,
                  rates: Rates | None = None) -> float:
    """Seconds the search of a contraction sliced as ``plan`` (the best found so far) is
    worth (module docstring); with no slicing found yet, what the counted steps cost: a
    refusal is what the search saves."""
    if time_budget is not None:
        return float(time_budget)
    if plan is None:
        return SLICE_RECONF_SECONDS_PER_TENSOR * n_terms * len(TARGET_FRACTIONS)
    rates = rates or host_rates()
    return min(DEFAULT_MAX_SECONDS,
               SEARCH_FRACTION * rates.sliced_seconds(plan.flops, plan.n_slices, n_terms))


def sliced_key(equation: str, shapes, dtype, budget: int, workers: int) -> str:
    """The path cache's key of ``equation`` on ``shapes`` sliced within ``budget`` bytes with
    ``workers`` slices in flight."""
    terms, output = split_equation(equation)
    base = path_cache.network_key(terms, output, label_sizes(equation, shapes))
    text = f"{base}|sliced|{int(budget)}|{np.dtype(dtype).str}|{int(workers)}"
    return hashlib.sha256(text.encode()).hexdigest()[:32]


class _SlicedSearch:
    """One search's state: the network, the byte budget, the best ``(path, plan, workspace
    bytes)`` so far and what ran."""

    def __init__(self, equation, shapes, dtype, budget, path, found, workers,
                 operand_dtypes, time_budget, rates: Rates):
        self.equation, self.shapes, self.dtype, self.budget = equation, shapes, dtype, budget
        self.rates = rates
        self.workers, self.operand_dtypes, self.time_budget = workers, operand_dtypes, time_budget
        self.terms, self.output = split_equation(equation)
        self.sizes = label_sizes(equation, shapes)
        self.itemsize = np.dtype(dtype).itemsize
        self.path, self.best, self.t0 = [tuple(p) for p in path], found, time.perf_counter()
        # a slicing that costs more than MAX_FLOP_OVERHEAD times the unsliced path's run, as
        # fit_slices refuses along one path: a searched path's own unsliced FLOPs may be
        # many times those, and its slicing into billions of slices
        self.path_flops = play(self.terms, self.output, self.sizes, self.path).flops
        self.most = MAX_FLOP_OVERHEAD * rates.sliced_seconds(self.path_flops, 1,
                                                             len(self.terms))
        self.ran: list[str] = []
        self.considered: set = set()
        # the counted seconds of steps 1-2, and what they spent (``SearchSteps.spent``'s
        # rule: the clock too, where the budget is timed); step 2's rounds
        self.steps = SearchSteps(self.terms, self.seconds, self.elapsed)
        self.repaths = 0
        # the cheapest slicing found that fits the memory but costs more than ``most`` (a
        # narrower order may slice within it cheaply, step 1b; step 2 starts from it where
        # no other is found); the seconds step 1b searched for
        self.least_dear, self.unsliced_again = None, 0.0
        self.largest_budget = 0.0     # the largest the budget was, as it followed the search

    @property
    def dear(self) -> bool:
        """Whether a slicing found fits the memory but costs more than ``most``."""
        return self.least_dear is not None

    def seconds_of(self, fit) -> float:
        return self.rates.sliced_seconds(fit[1].flops, fit[1].n_slices, len(self.terms))

    def seconds(self) -> float:     # follows the best slicing so far: asked each time
        if self.best is None and self.dear and self.time_budget is None:
            # what is at stake: a slicing may cost up to ``most`` and still be taken
            seconds = min(DEFAULT_MAX_SECONDS, SEARCH_FRACTION * self.most)
        else:
            seconds = sliced_budget(self.best[1] if self.best else None, self.time_budget,
                                    len(self.terms), self.rates)
        self.largest_budget = max(self.largest_budget, seconds)
        return seconds

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def left(self) -> float:
        return self.seconds() - self.elapsed()

    def consider(self, path, blocks=None) -> None:
        """Keep the better of ``fit_slices`` along ``path`` and, where given, the slicing
        ``blocks`` (label -> index values per slice: cotengra's own, or a cached one) where
        it fits."""
        path = [tuple(p) for p in path]
        seen = (tuple(path), tuple(sorted((blocks or {}).items())))
        if seen in self.considered:     # (a hyper-optimizer chunk that found nothing new)
            return
        self.considered.add(seen)
        fits = []
        try:
            fits.append(fit_slices(self.equation, self.shapes, path, self.dtype, self.budget,
                                   workers=self.workers, operand_dtypes=self.operand_dtypes,
                                   repath=False))
        except GraphError:
            pass
        if blocks:
            plan = slice_plan(self.equation, self.sizes, path, self.itemsize, blocks)
            ws = contraction_workspace_bytes(self.equation, self.shapes, path, plan.labels,
                                             plan.blocks, self.dtype, self.workers,
                                             self.operand_dtypes)
            if ws <= self.budget:
                fits.append((path, plan, ws))
        for fit in fits:
            if self.seconds_of(fit) > self.most:
                if not self.dear or self.seconds_of(fit) < self.seconds_of(self.least_dear):
                    self.least_dear = fit
            elif self.best is None or self.seconds_of(fit) < self.seconds_of(self.best):
                self.best = fit

    def slice_and_reconfigure(self, first: bool = True) -> None:
        """Step 1: at each target of ``TARGET_FRACTIONS`` the counted budget pays for. From
        the unsliced path, not the first slicing's (searched again for its sliced sizes):
        the unsliced path reconfigures to cheaper slicings. ``first``: where its first
        target's slicing fits the memory only
        at more than ``most``, step 1b searches another path before the other targets."""
        per = SLICE_RECONF_SECONDS_PER_TENSOR * len(self.terms)
        for fraction in TARGET_FRACTIONS if searchers.cotengra_available() else ():
            if self.steps.spent() + per > self.seconds():
                return
            self.steps.count(per)
            target = max(1, int(self.budget * fraction) // self.itemsize)
            path, sliced = searchers.slice_reconfigured(self.terms, self.output, self.sizes,
                                                        self.path, target)
            self.consider(path, dict.fromkeys(sliced, 1))
            self.ran.append(f"1/{round(1 / fraction)}")
            if first and self.best is None and self.dear:
                return

    def search_unsliced_again(self) -> None:
        """Step 1b, where no slicing step 1 found is cheap enough but some fit the memory
        (``dear``), or step 1 ran nothing (without cotengra) and nothing fit along the
        path: graphopt's path search of the unsliced network again, for half of what
        the budget leaves, then step 1 from the path it finds. The unsliced search's
        default budget follows the unsliced run, which a tight limit's slices may cost
        hundreds of times; a narrower order, found by a longer search, slices cheaply where
        the default path slices only into billions of slices or not at all."""
        seconds = (self.seconds() - self.steps.spent()) / 2
        if self.best is not None or (self.ran and not self.dear) or \
                seconds < REPATH_MIN_SECONDS:
            return
        self.steps.count(seconds)
        steps, _ = path_search.find_path(self.terms, self.output, self.sizes,
                                         time_budget=seconds, cache=False)
        self.unsliced_again = round(seconds, 3)
        self.path = [tuple(p) for p in steps.path]
        self.consider(self.path)
        self.slice_and_reconfigure(first=False)

    def repath_for_slices(self) -> None:
        """Step 2: graphopt's own path search (``path_search.find_path``) on the network with
        each label the best slicing slices at its block size, the path then sliced again; in
        rounds while one improves it (``REPATH_ROUNDS``), each searching for half of what
        the counted budget leaves, at most ``REPATH_SECONDS`` (a path searched for the
        sliced sizes can cost half of what slice-and-reconfigure's does)."""
        for _ in range(REPATH_ROUNDS):
            start = self.best or self.least_dear
            # half of what is left for the search, half for slicing the path it finds
            seconds = min(REPATH_SECONDS, (self.seconds() - self.steps.spent()) / 2)
            if start is None or seconds < REPATH_MIN_SECONDS:
                return
            self.steps.count(2 * seconds)
            block = dict(zip(start[1].labels, start[1].blocks))
            sizes = {c: block.get(c, d) for c, d in self.sizes.items()}
            steps, _ = path_search.find_path(self.terms, self.output, sizes,
                                             time_budget=seconds, cache=False)
            self.consider(steps.path)
            self.repaths += 1
            if (self.best or self.least_dear) is start:
                return

    def by_the_clock(self) -> int:
        """Step 3, where ``HYPER_MIN_SECONDS`` are left and a slicing was found (or the user
        set the budget: with none found the default budget is the counted steps'): sliced
        hyper-optimizer trials (to the first target of ``TARGET_FRACTIONS``) until the
        budget is spent; how many ran."""
        if self.left() < HYPER_MIN_SECONDS or not searchers.cotengra_available() or \
                (self.best is None and self.time_budget is None and not self.dear):
            return 0
        target = max(1, int(self.budget * TARGET_FRACTIONS[0]) // self.itemsize)
        trials = searchers.HyperTrials(self.terms, self.output, self.sizes, slice_target=target)
        while True:
            per_trial = trials.seconds_per_trial() or \
                HYPER_TRIAL_SECONDS_PER_TENSOR * len(self.terms)
            chunk = min(HYPER_CHUNK_SECONDS, self.left() - per_trial)
            if chunk <= 0:
                return trials.trials
            self.consider(trials.trial(chunk), dict.fromkeys(trials.sliced_labels(), 1))

    def searcher(self, hyper_trials: int) -> str:
        names = [f"cotengra slice-and-reconfigure ({', '.join(self.ran)} of the budget)"] \
            if self.ran else []
        if self.unsliced_again:
            names.append(f"graphopt's path search of the unsliced network again "
                         f"({self.unsliced_again} s)" + (", slice-and-reconfigure from its "
                                                         "path" if self.ran else ""))
        if self.repaths:
            names.append(f"graphopt's path search for the sliced sizes ({self.repaths} "
                         f"round{'s' * (self.repaths > 1)})")
        if hyper_trials:
            names.append(f"{searchers.HyperTrials.name}, sliced ({hyper_trials} trials)")
        return ", then ".join(names) or "none"


def search_sliced_path(equation: str, shapes, dtype, budget: int, path, found=None,
                       workers: int = 1, operand_dtypes=None,
                       time_budget: float | None = None, cache: bool = True,
                       rates: Rates | None = None) -> tuple[list, Slicing, int, dict]:
    """``(path, plan, workspace bytes, record)``: the fastest slicing within ``budget``
    bytes that the search finds (module docstring), starting from ``path`` and ``found``
    (``fit_slices``'s ``(path, plan, workspace bytes)`` along it, or None where no slicing
    of it fits). The record says what ran: searcher, seconds, budget_seconds (the largest
    the budget was as it followed the best slicing), flops_before (``found``'s, or None),
    path_flops_unsliced (``path``'s, unsliced), cache ("hit", "miss" or "off"). Raises
    ``GraphError`` where nothing found fits."""
    check_time_budget(time_budget)
    run = _SlicedSearch(equation, shapes, dtype, budget, path, found, workers,
                        operand_dtypes, time_budget, rates or host_rates())

    def result(rec):
        if run.best is None:
            raise GraphError(f"no path searched ({rec['searcher']}) slices within {budget} "
                             "bytes either")
        return (*run.best, rec)

    record = {"searcher": "none", "seconds": 0.0, "budget_seconds": run.seconds(),
              "flops_before": found[1].flops if found else None,
              "path_flops_unsliced": run.path_flops, "cache": "off"}
    if len(run.terms) <= 2 or budget < least_sliced_workspace_bytes(len(run.terms), run.sizes):
        return result(record)       # (no path could: the call's own objects exceed it)
    key = sliced_key(equation, shapes, dtype, budget, workers) if cache else None
    kept = path_cache.cached(key, run.terms, run.output, run.sizes) if cache else None
    if kept is not None:
        run.consider(kept[0].path, dict(zip(kept[1].get("slices", ()),
                                            kept[1].get("slice_blocks", ()))))
        if kept[1]["budget_seconds"] >= run.seconds():
            return result(dict(record, searcher=kept[1]["searcher"], cache="hit"))
    run.slice_and_reconfigure()
    run.search_unsliced_again()
    run.repath_for_slices()
    searcher = run.searcher(run.by_the_clock())
    elapsed = round(run.elapsed(), 4)
    # the budget followed the best slicing as it improved: the record keeps the largest
    record.update(searcher=searcher, seconds=elapsed,
                  budget_seconds=max(run.seconds(), run.largest_budget))
    if cache and run.best is not None and searcher != "none":
        steps = play(run.terms, run.output, run.sizes, run.best[0])
        plan = run.best[1]
        path_cache.store(key, steps, {"path": [list(p) for p in steps.path],
                                      "slices": list(plan.labels),
                                      "slice_blocks": list(plan.blocks), "searcher": searcher,
                                      "budget_seconds": record["budget_seconds"],
                                      "seconds": elapsed, "combo": steps.combo})
        record["cache"] = "miss"
    return result(record)
