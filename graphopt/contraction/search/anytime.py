"""Anytime contraction-path search within a time budget, with a persistent path cache.

``find_path(terms, output, sizes, time_budget=None)`` returns the cheapest path found
(``paths.Steps``; cost ``Steps.combo``: FLOPs plus 64 per element written) and a record of
the search. The searchers are ``searchers``'; the order they run in, and what the budget
pays for, is decided here:

1. the start, the cheapest greedy path: cotengrust's (Rust, a fraction of a millisecond, at
   each of ``FAST_GREEDY_COSTMODS``; quimb and cotengra start from the same), and
   opt_einsum's (Python, milliseconds on large networks) where cotengrust is not
   installed, or where the budget pays for one of its trials and a label joins more than
   two tensors (a hyper index, where opt_einsum's scoring of every pair sharing a label
   finds a cheaper start);
2. one batch of ``FIRST_TRIALS`` cotengrust random-greedy trials, where it costs at most
   ``FIRST_TRIALS_SHARE`` of the budget (a better start for the next step on grid-like
   networks);
3. cotengra's subtree reconfiguration of the best path, at each subtree size the budget
   pays for, smallest first (a deterministic local search that improves greedy paths on
   grids and matrix-product networks many times over for milliseconds);
4. random-greedy trials within ``TRIAL_SHARE`` of the budget: cotengrust's in batches
   whose trials cost at least what playing the batch's best path does (without
   cotengrust, opt_einsum's);
5. the reconfiguration of the trials' other cheapest paths (``RECONF_STARTS``): it ranks
   paths differently from their own costs; where the budget is timed, leaving room for one
   round of step 6 at the pace the clock has shown (``_timed_round_seconds``);
6. the reconfiguration of the best path at subtrees picked at random, in rounds while one
   improves it (``RANDOM_ROUNDS``): where the costliest-first walk of steps 3 and 5 is
   stuck (before step 7: under the clock a budget may pay for only one of the two, and
   this one walks further);
7. the reconfiguration again, of a better path steps 4-6 found;
8. by the clock: where the budget is at least ``HYPER_MIN_SECONDS``, cotengra's
   hyper-optimizer over its partitioning methods (``searchers.HyperTrials``) until the
   budget is spent; under a smaller budget that the user set, or without cotengra, more
   of opt_einsum's trials.

The budget: ``time_budget`` seconds where given (``compile(..., path_time=)``); by default
``SEARCH_FRACTION`` of the estimated run time of the best path found so far (its combo cost
at the backend's combo rate), at most ``DEFAULT_MAX_SECONDS``: a search costs at most about
what the run it shortens is estimated to cost (the rent-or-buy bound); a network that runs
in a millisecond is ordered in well under one, an expensive one gets seconds. Steps 1-7
are counted, not timed (``SearchSteps``, each step's assumed cost from ``budget``'s
constants): a step runs only where what was counted so far plus its own assumed cost is
within the budget of the best path found so far, so a small network's path does not
depend on the machine's speed. From ``HYPER_MIN_SECONDS`` of budget on, where step 8 is
timed anyway, a counted step also needs the clock to leave room for it: on networks of
hundreds of tensors the steps can cost several times their assumed cost. A step that has
started is finished; step 8 stops a trial's time short of the budget, so a search ends
about on its budget.

Paths are kept by the network's structure and sizes (``cache``: in this process and on
disk beside the kernels), so a second compile or a second process does no search. An
entry is used when it was searched with at least the budget now asked for; a corrupt
entry, or one whose path does not fit the network, is dropped and searched again. A path
that nothing but cotengrust's greedy found is kept too: reading an entry costs a later
process less than finding the path again.
"""

from __future__ import annotations

import logging
import time
from typing import Sequence

from ...errors import GraphError
from ...observe import progress
from ..paths import Steps, play
from . import cache as path_cache
from . import searchers as searchers
from .budget import (
    COMBO_RATE,
    FAST_GREEDY_COSTMODS,
    FAST_GREEDY_SECONDS_PER_TENSOR,
    FIRST_TRIALS,
    FIRST_TRIALS_SHARE,
    HYPER_CHUNK_SECONDS,
    HYPER_MIN_SECONDS,
    HYPER_TRIAL_SECONDS_PER_TENSOR,
    MIN_TRIALS,
    RANDOM_RECONF_SECONDS_PER_TENSOR,
    RANDOM_ROUNDS,
    RANDOM_SUBTREE,
    RANDOM_SUBTREES,
    RECONF_SECONDS_PER_TENSOR,
    RECONF_STARTS,
    RUST_BATCH,
    RUST_MAX_TRIALS,
    RUST_PLAY_SECONDS_PER_TENSOR,
    RUST_TRIAL_SECONDS_PER_TENSOR,
    STARTS_SUBTREE,
    TRIAL_SHARE,
    SearchSteps,
    check_time_budget,
    default_budget,
    estimated_seconds,
    has_hyper_indices,
)

_log = logging.getLogger(__name__)
SLOW_SECONDS = 1.0         # a search this long is logged at INFO (else DEBUG)


class _Search:
    """One search's state (see the module docstring for its steps): the best path so far,
    the start it came from, the counted seconds and what ran."""

    def __init__(self, terms, output, sizes, time_budget: float | None,
                 combo_rate: float = COMBO_RATE):
        self.terms, self.output, self.sizes = terms, output, sizes
        self.time_budget, self.t0 = time_budget, time.perf_counter()
        self.combo_rate = combo_rate
        self.best = self.first = None
        self.greedy = "greedy"         # the start's name
        self.counted = SearchSteps(terms, self.budget, self.elapsed)
        # (path, subtree size, "best", "start" or "random": which step) of each one run
        self.reconfigured: list = []
        self.trial_paths: dict = {}    # path -> its Steps, of every trial's path kept
        self.rust_trials = self.hyper_trials = 0
        self._oe_trials = None         # opt_einsum's RandomGreedyTrials, made on first use

    @property
    def cotengra(self) -> bool:
        """Whether cotengra is installed: asked where a step would use it (a search that
        stops at the greedy start, as most of those of networks that run in milliseconds
        do, does not import it)."""
        return searchers.cotengra_available()

    def budget(self) -> float:     # follows the best path so far: asked each time
        return self.time_budget if self.time_budget is not None else \
            default_budget(self.best, self.combo_rate)

    def hyper(self) -> bool:
        """Whether the hyper-optimizer runs by the clock after the counted steps."""
        return self.budget() >= HYPER_MIN_SECONDS and self.cotengra

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def keep(self, path, trial: bool = False) -> None:
        """Keep ``path`` (a path or its ``Steps``; None: a searcher found none) where it is
        cheaper than the best so far. ``trial``: a random trial's path, also a start for
        ``reconfigure_starts``."""
        if path is None:
            return
        try:
            s = path if isinstance(path, Steps) else \
                play(self.terms, self.output, self.sizes, path)
        except GraphError:    # a trial that did not produce a full path
            return
        if trial:
            self.trial_paths.setdefault(tuple(s.path), s)
        if s.combo < self.best.combo:
            self.best = s

    def start(self) -> None:
        """Step 1: the cheapest greedy path the budget pays for."""
        net, counted = (self.terms, self.output, self.sizes), self.counted

        def begin_with(s, name):
            if s is not None and (self.first is None or s.combo < self.first.combo):
                self.best = self.first = s
                self.greedy = name

        rust = FAST_GREEDY_COSTMODS if searchers.cotengrust() is not None else ()
        fast = FAST_GREEDY_SECONDS_PER_TENSOR * counted.n

        def rust_greedy(costmod):
            counted.count(fast)
            begin_with(searchers.fast_greedy(*net, costmod),
                       f"cotengrust greedy (costmod {costmod})")

        if rust:
            rust_greedy(rust[0])
        if self.first is None or counted.pays_for_trial():
            # opt_einsum's greedy where cotengrust's could not start, or where a label joins
            # more than two tensors (see the module docstring)
            if self.first is None or has_hyper_indices(self.terms, self.output):
                counted.count(counted.trial_seconds())
                begin_with(searchers.greedy(*net), "greedy")
            for costmod in rust[1:]:     # a budget that paid for that pays for these
                if counted.pays_for(fast):
                    rust_greedy(costmod)

    def reconfigure(self) -> None:
        """Steps 3 and 7: cotengra's reconfiguration of the best path at each subtree size
        the budget pays for, smallest first."""
        for size, rate in sorted(RECONF_SECONDS_PER_TENSOR.items()):
            seconds = rate * self.counted.n
            if not self.counted.pays_for(seconds) or not self.cotengra or \
                    self.was_reconfigured(self.best, size):
                continue
            self.counted.count(seconds)
            self._reconfigure(self.best, size)

    def was_reconfigured(self, steps: Steps, size: int) -> bool:
        return any(p == steps.path and k == size and kind != "random"
                   for p, k, kind in self.reconfigured)

    def _reconfigure(self, steps: Steps, size: int, kind: str = "best", **random) -> None:
        """Keep ``steps`` reconfigured at subtree ``size`` (``kind``: which step's, as
        ``self.reconfigured`` records; ``random``: ``seed`` and ``subtrees``)."""
        self.reconfigured.append((steps.path, size, kind))
        self.keep(searchers.reconfigured(self.terms, self.output, self.sizes, steps, size,
                                         **random))

    def reconfigure_starts(self) -> None:
        """Step 5: the reconfiguration, at subtree size ``STARTS_SUBTREE``, of up to
        ``RECONF_STARTS`` of the cheapest other paths the trials found, where the budget
        pays, leaving room for one round of step 6 where the budget is timed
        (``_timed_round_seconds``): it ranks paths differently from their own costs, so
        another start may end cheaper than the best one."""
        seconds = RECONF_SECONDS_PER_TENSOR[STARTS_SUBTREE] * self.counted.n
        if not self.counted.pays_for(seconds + self._timed_round_seconds()) or \
                not self.cotengra:
            return
        starts = sorted(self.trial_paths.values(), key=lambda s: s.combo)
        done = [p for p, _, _ in self.reconfigured]
        for s in [s for s in starts if s.path not in done][:RECONF_STARTS]:
            if not self.counted.pays_for(seconds + self._timed_round_seconds()):
                return
            self.counted.count(seconds)
            self._reconfigure(s, STARTS_SUBTREE, "start")

    def _timed_round_seconds(self) -> float:
        """Where the budget is timed (from ``HYPER_MIN_SECONDS``; else 0: a counted budget
        keeps its steps' order of payment), what one round of step 6 will take: its
        assumed cost at the pace the clock has shown the counted steps to run. On a slow
        machine the counted steps run at a multiple of their assumed cost, and the starts
        of step 5 would leave step 6, which finds more on random-regular networks, no
        time."""
        if self.budget() < HYPER_MIN_SECONDS or self.counted.counted <= 0:
            return 0.0
        pace = max(1.0, self.elapsed() / self.counted.counted)
        return RANDOM_RECONF_SECONDS_PER_TENSOR * self.counted.n * pace

    def reconfigure_at_random(self) -> None:
        """Step 6: rounds of the reconfiguration of the best path at ``RANDOM_SUBTREES``
        subtrees picked at random (round k seeded k), while one improves it, at most
        ``RANDOM_ROUNDS``, where the budget pays."""
        seconds = RANDOM_RECONF_SECONDS_PER_TENSOR * self.counted.n
        for seed in range(RANDOM_ROUNDS):
            if not self.counted.pays_for(seconds) or not self.cotengra:
                return
            self.counted.count(seconds)
            before = self.best
            self._reconfigure(before, RANDOM_SUBTREE, "random", seed=seed,
                              subtrees=RANDOM_SUBTREES)
            if self.best is before:
                return

    def first_trials(self) -> None:
        """Step 2: one batch of ``FIRST_TRIALS`` cotengrust random-greedy trials, where it
        costs at most ``FIRST_TRIALS_SHARE`` of the budget."""
        counted = self.counted
        play = RUST_PLAY_SECONDS_PER_TENSOR * counted.n
        room = FIRST_TRIALS_SHARE * self.budget()
        if searchers.cotengrust() is None or \
                play + FIRST_TRIALS * RUST_TRIAL_SECONDS_PER_TENSOR * counted.n > room:
            return    # (the pairs need counting only where the batch may fit)
        seconds = play + FIRST_TRIALS * counted.rust_trial_seconds()
        if seconds <= room and counted.pays_for(seconds):
            self._rust_batch(FIRST_TRIALS)

    def _rust_batch(self, k: int) -> None:
        """Count and run one batch of ``k`` cotengrust random-greedy trials (seeded by the
        trials run before it, so a search repeats)."""
        self.counted.count(RUST_PLAY_SECONDS_PER_TENSOR * self.counted.n +
                           k * self.counted.rust_trial_seconds())
        self.keep(searchers.rust_random_greedy(self.terms, self.output, self.sizes, k,
                                               seed=self.rust_trials), trial=True)
        self.rust_trials += k

    def random_greedy(self) -> None:
        """Step 4: random-greedy trials within ``TRIAL_SHARE`` of the budget left when they
        begin, cotengrust's in batches, then opt_einsum's."""
        counted, base = self.counted, self.counted.spent()
        per_batch = RUST_PLAY_SECONDS_PER_TENSOR * counted.n

        def room():      # the trials' share of what the budget of the best path left
            return base + TRIAL_SHARE * (self.budget() - base) - counted.spent()

        while searchers.cotengrust() is not None and self.rust_trials < RUST_MAX_TRIALS:
            if room() < per_batch + RUST_TRIAL_SECONDS_PER_TENSOR * counted.n:
                break     # (the pairs need counting only where a trial may fit)
            k = min(RUST_BATCH, RUST_MAX_TRIALS - self.rust_trials,
                    int((room() - per_batch) / counted.rust_trial_seconds()))
            if k < 1 or k * counted.rust_trial_seconds() < per_batch:
                # a batch whose trials cost less than playing its best path is mostly
                # overhead: playing the path is most of what it costs
                break
            self._rust_batch(k)
        # opt_einsum's trials are the same kind, a hundred times slower: only without
        # cotengrust's (or where those found nothing)
        oe = searchers.cotengrust() is None or not self.trial_paths
        while oe and self.oe_trials < MIN_TRIALS and counted.pays_for_trial(room()):
            counted.count(counted.trial_seconds())
            self.oe_trial()

    @property
    def oe_trials(self) -> int:
        return 0 if self._oe_trials is None else self._oe_trials.trials

    def oe_trial(self) -> None:
        if self._oe_trials is None:
            self._oe_trials = searchers.RandomGreedyTrials(self.terms, self.output, self.sizes)
        self.keep(self._oe_trials.trial(), trial=True)

    def by_the_clock(self) -> None:
        """Step 8: the hyper-optimizer until the budget is spent, where it is worth it;
        else, where the user set the budget or nothing else improves the path, more of
        opt_einsum's trials."""
        while not self.hyper() and self.elapsed() < self.budget() and \
                (self.time_budget is not None or not self.cotengra):
            self.oe_trial()
        if self.hyper() and self.elapsed() < self.budget():
            trials = searchers.HyperTrials(self.terms, self.output, self.sizes)
            while True:
                # cotengra finishes the trial it started at a chunk's end: the chunk ends
                # a trial (of the mean time so far, or the assumed time before the first)
                # early, so the search ends about on its budget, not a trial past it
                per_trial = trials.seconds_per_trial() or \
                    HYPER_TRIAL_SECONDS_PER_TENSOR * self.counted.n
                chunk = min(HYPER_CHUNK_SECONDS,
                            self.budget() - self.elapsed() - per_trial)
                if chunk <= 0:
                    break
                self.keep(trials.trial(chunk))
            self.hyper_trials = trials.trials

    def searcher(self) -> str:
        """What ran, e.g. "cotengrust random-greedy, subtree reconfiguration (4, 6, 8, 8)
        and of 8 other trial paths"."""
        stages = ["cotengrust random-greedy"] * bool(self.rust_trials) + \
            [searchers.RandomGreedyTrials.name] * bool(self.oe_trials)
        name = " + ".join(stages) or self.greedy
        sizes = [str(k) for _, k, kind in self.reconfigured if kind == "best"]
        starts = sum(kind == "start" for _, _, kind in self.reconfigured)
        rounds = sum(kind == "random" for _, _, kind in self.reconfigured)
        if sizes:
            name += ", subtree reconfiguration (" + ", ".join(sizes) + ")"
        if starts:
            name += f"{' and' if sizes else ', subtree reconfiguration'} of {starts} " \
                    "other trial paths"
        if rounds:
            name += f", {rounds} round{'s' * (rounds > 1)} at random subtrees"
        if self.hyper_trials:
            name += f", then {searchers.HyperTrials.name}"
        return name

    def record(self) -> dict:
        return {"searcher": self.searcher(),
                "trials": self.rust_trials + self.oe_trials + self.hyper_trials,
                "seconds": round(self.elapsed(), 4), "budget_seconds": self.budget(),
                "estimated_run_seconds": estimated_seconds(self.best, self.combo_rate),
                "greedy": self.greedy, "greedy_combo": self.first.combo,
                "greedy_flops": self.first.flops, "combo": self.best.combo}


def search(terms, output, sizes, time_budget: float | None, start: Steps | None = None,
           combo_rate: float = COMBO_RATE):
    """Search without the cache: ``(best steps, record)`` (see the module docstring);
    ``start``: a path found before (a cache entry searched with a smaller budget), kept
    where it is cheaper than the greedy start; ``combo_rate``: as ``find_path``'s."""
    run = _Search(terms, output, sizes, time_budget, combo_rate)
    run.start()
    if start is not None:
        run.keep(start)
    if run.budget() >= SLOW_SECONDS:      # say why a compile is about to take a while
        _log.info("searching a contraction path for %d operands for up to %.1f s (greedy's "
                  "combo cost %.3g; compile(path_time=...) sets the budget)", len(terms),
                  run.budget(), run.best.combo)
        progress.phase(f"contraction path search, {len(terms)} operands, up to "
                       f"{run.budget():.1f} s")
    if len(terms) > 2 and time_budget != 0:
        run.first_trials()
        run.reconfigure()
        run.random_greedy()
        run.reconfigure_starts()
        run.reconfigure_at_random()
        run.reconfigure()
        run.by_the_clock()
    rec = run.record()
    _log.log(logging.INFO if rec["seconds"] >= SLOW_SECONDS else logging.DEBUG,
             "path search for %d operands: %s, %d trials in %.2f s, combo cost %.3g (greedy "
             "%.3g)", len(terms), rec["searcher"], rec["trials"], rec["seconds"],
             rec["combo"], rec["greedy_combo"])
    return run.best, rec


def find_path(terms: Sequence[str], output: str, sizes: dict,
              time_budget: float | None = None, cache: bool = True,
              combo_rate: float = COMBO_RATE) -> tuple[Steps, dict]:
    """The best path found for ``terms -> output`` within ``time_budget`` seconds (None: the
    default budget, at the backend's ``combo_rate``: ``Backend.combo_rate``), and a record:
    searcher, trials, seconds, budget_seconds, estimated_run_seconds, greedy (the start:
    "cotengrust greedy (costmod c)" or opt_einsum's "greedy"), greedy_combo, greedy_flops,
    combo and ``cache`` ("hit", "miss" or "off"; a path searched on a miss is kept on disk
    and in this process)."""
    terms, sizes = list(terms), {c: int(s) for c, s in sizes.items()}
    check_time_budget(time_budget)
    if not cache:
        steps, rec = search(terms, output, sizes, time_budget, combo_rate=combo_rate)
        return steps, dict(rec, cache="off")
    key = path_cache.network_key(terms, output, sizes)
    kept = path_cache.cached(key, terms, output, sizes)
    if kept is not None:
        steps, entry = kept
        asked = time_budget if time_budget is not None else default_budget(steps, combo_rate)
        if entry["budget_seconds"] >= asked:
            return steps, {"searcher": entry["searcher"], "trials": 0, "seconds": 0.0,
                           "budget_seconds": entry["budget_seconds"],
                           "estimated_run_seconds": estimated_seconds(steps, combo_rate),
                           "greedy": entry.get("greedy", "greedy"),
                           "greedy_combo": entry.get("greedy_combo", steps.combo),
                           "greedy_flops": entry.get("greedy_flops"),
                           "combo": steps.combo, "cache": "hit",
                           "searched_seconds": entry.get("seconds", 0.0)}
        steps, rec = search(terms, output, sizes, time_budget, start=steps,
                            combo_rate=combo_rate)
    else:
        steps, rec = search(terms, output, sizes, time_budget, combo_rate=combo_rate)
    entry = {"path": [list(p) for p in steps.path], "searcher": rec["searcher"],
             "budget_seconds": rec["budget_seconds"], "seconds": rec["seconds"],
             "greedy": rec["greedy"], "greedy_combo": rec["greedy_combo"],
             "greedy_flops": rec["greedy_flops"],
             "combo": steps.combo}
    path_cache.store(key, steps, entry)
    return steps, dict(rec, cache="miss")
