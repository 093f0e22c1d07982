"""Anytime contraction-path search within a time budget, with a persistent path cache.

``find_path(terms, output, sizes, time_budget=None)`` returns the cheapest path found
(``paths.Steps``; cost ``Steps.combo``: FLOPs plus 64 per element written) and a record of
the search. The searchers are ``path_searchers``'; the order they run in, and what the
budget pays for, is decided here:

1. the start, the cheapest greedy path: cotengrust's (Rust, a fraction of a millisecond, at
   each of ``FAST_GREEDY_COSTMODS``; quimb and cotengra start from the same), and
   opt_einsum's (Python, 2-10 ms on 50-200 tensors) where the budget pays for it or
   cotengrust is not installed;
2. one batch of ``FIRST_TRIALS`` cotengrust random-greedy trials, where it costs at most
   ``FIRST_TRIALS_SHARE`` of the budget (a better start for the next step on grid-like
   networks);
3. cotengra's subtree reconfiguration of the best path, at each subtree size the budget
   pays for, smallest first (a deterministic local search: at subtree size 4, 2-15x less
   combo cost than the greedy start on the lattice, PEPS and MPO networks of
   benchmarks/networks.py, in 6-17 ms);
4. random-greedy trials within ``TRIAL_SHARE`` of the budget: cotengrust's in batches, then
   opt_einsum's (without cotengrust, these alone);
5. the reconfiguration again, of a better path the trials found;
6. by the clock: where the budget is at least ``HYPER_MIN_SECONDS``, cotengra's
   hyper-optimizer at its defaults, until the budget is spent; under
   a smaller budget that the user set, or without cotengra, more of opt_einsum's trials.

The budget: ``time_budget`` seconds where given (``compile(..., path_time=)``); by default
``SEARCH_FRACTION`` of the estimated run time of the best path found so far (its combo cost
at ``COMBO_RATE``), at most ``DEFAULT_MAX_SECONDS``: a search costs at most about what the
run it shortens is estimated to cost (the rent-or-buy bound); a network that
runs in a millisecond is ordered in well under one, an expensive one gets seconds. Steps
1-5 are counted, not timed (``SearchSteps``, each step's assumed cost from the constants
below): a step runs only where what was counted so far plus its own assumed cost is within
the budget of the best path found so far, so a small network's path does not depend on the
machine's speed, and a path that runs in ten milliseconds is not refined for sixty. A trial
that has started is finished, so a search may overrun its budget by one trial.

Paths are kept by the network's structure and sizes (``path_cache``: in this process and
on disk beside the kernels), so a second compile or a second process does no search. An
entry is used when it was searched with at least the budget now asked for; a corrupt
entry, or one whose path does not fit the network, is dropped and searched again.
"""

from __future__ import annotations

import functools
import logging
import time
from typing import Sequence

from . import path_cache, progress
from . import path_searchers as searchers
from .errors import GraphError
from .paths import Steps, play

_log = logging.getLogger(__name__)
SLOW_SECONDS = 1.0         # a search this long is logged at INFO (else DEBUG)
SEARCH_FRACTION = 1.0
DEFAULT_MAX_SECONDS = 20.0
# combo cost per second assumed when sizing the default budget: conservative (the
# GEMM-bound networks of benchmarks/networks.py ran at 1.1-6.5e10 a second on one 2024
# server core, complex ones at the low end; a 4e10 rate cut the search short of the
# reconfiguration that halves the hyper-index network's run time), so the default budget is
# up to a few times a path's actual run time
COMBO_RATE = 1e10
HYPER_MIN_SECONDS = 0.5    # below this budget, cotengra's trials are not worth starting
HYPER_CHUNK_SECONDS = 0.25  # cotengra runs this long between checks of the budget
TRIAL_SHARE = 0.5          # of the budget, for the counted random-greedy trials: the rest
                           # pays for reconfiguring what they find
MIN_TRIALS = 8             # opt_einsum random-greedy trials run before the clock, where paid
# one opt_einsum greedy or random-greedy trial's assumed cost, scored: per tensor and per
# pair of tensors that share a label (opt_einsum weighs every such pair; a hyper index
# shared by k tensors makes k(k-1)/2). Measured on nine networks of 50-200 tensors and
# 105-1679 pairs, a 2024 server core: 2.7-20 ms, within 20 % of this.
TRIAL_SECONDS_PER_TENSOR = 3e-5
TRIAL_SECONDS_PER_PAIR = 1.3e-5
# cotengra's subtree reconfiguration's assumed cost per tensor, by subtree size (the median
# of those nine networks: 0.12-0.2, 0.2-0.3 and 0.24-1.6 ms a tensor)
RECONF_SECONDS_PER_TENSOR = {8: 6e-4, 6: 2.5e-4, 4: 1.6e-4}
# cotengrust's greedy: its weights of the size added against the sizes removed
# (``size_ab / costmod - (size_a + size_b) * costmod``). Of 0.1-4 on the nine networks of
# benchmarks/networks.py, the better of 0.5 and 2.0 was within 1.8x of opt_einsum's greedy
# combo cost on eight (0.002-0.87x on three) and 3.5x on the hyper-index one, where 1.0
# alone was 1.6-9.4x worse on five; 0.5 alone was 42x worse on the PEPS norm, 2.0 alone
# 1e11x worse on the MPS. Its assumed cost per tensor (measured 0.5-3 us at 0.5, up to 10
# at 2.0 where its path is that bad). The first costmod runs always, the others where the
# budget also pays for opt_einsum's greedy (a network that runs for milliseconds or more).
FAST_GREEDY_COSTMODS = (0.5, 2.0)
FAST_GREEDY_SECONDS_PER_TENSOR = 3e-6
# cotengrust's random-greedy trials, run in batches of at most ``RUST_BATCH`` (each batch
# keeps its path of fewest FLOPs, which is then played and scored by combo cost): assumed
# per tensor and per sharing pair a trial (measured 0.5-3.8 us a tensor on 24-200 tensors,
# the most with hyper indices), plus a batch's played path per tensor (1-6 us)
RUST_TRIAL_SECONDS_PER_TENSOR = 1.5e-6
RUST_TRIAL_SECONDS_PER_PAIR = 1e-7
RUST_PLAY_SECONDS_PER_TENSOR = 6e-6
RUST_BATCH = 16
RUST_MAX_TRIALS = 1024
# Before the first reconfiguration, one batch of this many cotengrust trials where it costs
# at most ``FIRST_TRIALS_SHARE`` of the budget: a start the reconfiguration refines further
# than the greedy one on grid-like networks (the 10x10 lattice of benchmarks/networks.py:
# search 20.9 -> 12.0 ms, run 4.3 -> 2.5 ms), within a few percent of the budget elsewhere.
FIRST_TRIALS = 8
FIRST_TRIALS_SHARE = 0.1



def estimated_seconds(steps: Steps) -> float:
    """Run time of ``steps`` the budget rule assumes: its combo cost at ``COMBO_RATE``."""
    return steps.combo / COMBO_RATE


def default_budget(steps: Steps) -> float:
    """Seconds of search a path of ``steps`` is worth by default (see the module docstring)."""
    return min(DEFAULT_MAX_SECONDS, SEARCH_FRACTION * estimated_seconds(steps))


def sharing_pairs(terms: Sequence[str]) -> int:
    """How many pairs of terms share at least one label."""
    holders: dict = {}
    for i, t in enumerate(terms):
        for c in set(t):
            holders.setdefault(c, []).append(i)
    return len({(a, b) for ts in holders.values() if len(ts) > 1
                for k, a in enumerate(ts) for b in ts[k + 1:]})


class SearchSteps:
    """The assumed seconds of the counted search steps run so far (see the module
    docstring): a step runs where they plus its own fit the budget of the best path."""

    def __init__(self, terms: Sequence[str], budget):
        self.n, self.budget, self.counted = max(1, len(terms)), budget, 0.0
        self._terms = terms

    @functools.cached_property
    def pairs(self) -> int:
        """``sharing_pairs`` of the terms (counted where a trial's cost is first asked: a
        network whose budget pays for nothing never needs it)."""
        return sharing_pairs(self._terms)

    def trial_seconds(self) -> float:
        """One opt_einsum greedy or random-greedy trial's assumed cost."""
        return TRIAL_SECONDS_PER_TENSOR * self.n + TRIAL_SECONDS_PER_PAIR * self.pairs

    def rust_trial_seconds(self) -> float:
        """One cotengrust random-greedy trial's assumed cost (its batch's play aside)."""
        return RUST_TRIAL_SECONDS_PER_TENSOR * self.n + RUST_TRIAL_SECONDS_PER_PAIR * self.pairs

    def left(self) -> float:
        """Seconds of the budget not yet counted."""
        return self.budget() - self.counted

    def pays_for(self, seconds: float) -> bool:
        return seconds <= self.left()

    def pays_for_trial(self, room: float | None = None) -> bool:
        """Whether ``room`` (default: the budget left) pays for one opt_einsum trial (its
        per-tensor part first: the pairs need counting only where that fits)."""
        room = self.left() if room is None else room
        return TRIAL_SECONDS_PER_TENSOR * self.n <= room and self.trial_seconds() <= room

    def count(self, seconds: float) -> None:
        self.counted += seconds


class _Search:
    """One search's state (see the module docstring for its steps): the best path so far,
    the start it came from, the counted seconds and what ran."""

    def __init__(self, terms, output, sizes, time_budget: float | None):
        self.terms, self.output, self.sizes = terms, output, sizes
        self.time_budget, self.t0 = time_budget, time.perf_counter()
        self.best = self.first = None
        self.greedy = "greedy"         # the start's name
        self.counted = SearchSteps(terms, self.budget)
        self.cotengra = searchers.cotengra_available()
        self.reconfigured: list = []   # (path, subtree size) of each reconfiguration run
        self.rust_trials = self.hyper_trials = 0
        self._oe_trials = None         # opt_einsum's RandomGreedyTrials, made on first use

    def budget(self) -> float:     # follows the best path so far: asked each time
        return self.time_budget if self.time_budget is not None else \
            default_budget(self.best)

    def elapsed(self) -> float:
        return time.perf_counter() - self.t0

    def keep(self, path) -> None:
        """Keep ``path`` (a path or its ``Steps``; None: a searcher found none) where it is
        cheaper than the best so far."""
        if path is None:
            return
        try:
            s = path if isinstance(path, Steps) else \
                play(self.terms, self.output, self.sizes, path)
        except GraphError:    # a trial that did not produce a full path
            return
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
            counted.count(counted.trial_seconds())
            begin_with(searchers.greedy(*net), "greedy")
            for costmod in rust[1:]:     # a budget that paid for that pays for these
                if counted.pays_for(fast):
                    rust_greedy(costmod)

    def reconfigure(self) -> None:
        """Steps 3 and 5: cotengra's reconfiguration of the best path at each subtree size
        the budget pays for, smallest first."""
        for size, rate in sorted(RECONF_SECONDS_PER_TENSOR.items()) if self.cotengra else ():
            seconds = rate * self.counted.n
            if (self.best.path, size) in self.reconfigured or \
                    not self.counted.pays_for(seconds):
                continue
            self.counted.count(seconds)
            self.reconfigured.append((self.best.path, size))
            self.keep(searchers.reconfigured(self.terms, self.output, self.sizes, self.best,
                                             size))

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
                                               seed=self.rust_trials))
        self.rust_trials += k

    def random_greedy(self) -> None:
        """Step 4: random-greedy trials within ``TRIAL_SHARE`` of the budget left when they
        begin, cotengrust's in batches, then opt_einsum's."""
        counted, base = self.counted, self.counted.counted
        per_batch = RUST_PLAY_SECONDS_PER_TENSOR * counted.n

        def room():      # the trials' share of what the budget of the best path left
            return base + TRIAL_SHARE * (self.budget() - base) - counted.counted

        while searchers.cotengrust() is not None and self.rust_trials < RUST_MAX_TRIALS:
            if room() < per_batch + RUST_TRIAL_SECONDS_PER_TENSOR * counted.n:
                break     # (the pairs need counting only where a trial may fit)
            k = min(RUST_BATCH, RUST_MAX_TRIALS - self.rust_trials,
                    int((room() - per_batch) / counted.rust_trial_seconds()))
            if k < 1:
                break
            self._rust_batch(k)
        while self.oe_trials < MIN_TRIALS and counted.pays_for_trial(room()):
            counted.count(counted.trial_seconds())
            self.oe_trial()

    @property
    def oe_trials(self) -> int:
        return 0 if self._oe_trials is None else self._oe_trials.trials

    def oe_trial(self) -> None:
        if self._oe_trials is None:
            self._oe_trials = searchers.RandomGreedyTrials(self.terms, self.output, self.sizes)
        self.keep(self._oe_trials.trial())

    def by_the_clock(self) -> None:
        """Step 6: the hyper-optimizer until the budget is spent, where it is worth it;
        else, where the user set the budget or nothing else improves the path, more of
        opt_einsum's trials."""
        def hyper():
            return self.cotengra and self.budget() >= HYPER_MIN_SECONDS

        while not hyper() and (self.time_budget is not None or not self.cotengra) and \
                self.elapsed() < self.budget():
            self.oe_trial()
        if hyper() and self.elapsed() < self.budget():
            trials = searchers.HyperTrials(self.terms, self.output, self.sizes)
            while self.elapsed() < self.budget():
                self.keep(trials.trial(min(HYPER_CHUNK_SECONDS,
                                           self.budget() - self.elapsed())))
            self.hyper_trials = trials.trials

    def searcher(self) -> str:
        """What ran, e.g. "cotengrust random-greedy, subtree reconfiguration (4, 6)"."""
        stages = ["cotengrust random-greedy"] * bool(self.rust_trials) + \
            [searchers.RandomGreedyTrials.name] * bool(self.oe_trials)
        name = " + ".join(stages) or self.greedy
        if self.reconfigured:
            name += ", subtree reconfiguration (" + \
                ", ".join(str(k) for _, k in self.reconfigured) + ")"
        if self.hyper_trials:
            name += f", then {searchers.HyperTrials.name}"
        return name

    def record(self) -> dict:
        return {"searcher": self.searcher(),
                "trials": self.rust_trials + self.oe_trials + self.hyper_trials,
                "seconds": round(self.elapsed(), 4), "budget_seconds": self.budget(),
                "estimated_run_seconds": estimated_seconds(self.best),
                "greedy": self.greedy, "greedy_combo": self.first.combo,
                "greedy_flops": self.first.flops, "combo": self.best.combo}


def search(terms, output, sizes, time_budget: float | None, start: Steps | None = None):
    """Search without the cache: ``(best steps, record)`` (see the module docstring);
    ``start``: a path found before (a cache entry searched with a smaller budget), kept
    where it is cheaper than the greedy start."""
    run = _Search(terms, output, sizes, time_budget)
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
        run.reconfigure()
        run.by_the_clock()
    rec = run.record()
    _log.log(logging.INFO if rec["seconds"] >= SLOW_SECONDS else logging.DEBUG,
             "path search for %d operands: %s, %d trials in %.2f s, combo cost %.3g (greedy "
             "%.3g)", len(terms), rec["searcher"], rec["trials"], rec["seconds"],
             rec["combo"], rec["greedy_combo"])
    return run.best, rec


def check_time_budget(time_budget) -> None:
    """``GraphError`` unless ``time_budget`` is None or a finite number of seconds >= 0."""
    if time_budget is not None and (isinstance(time_budget, bool) or
                                    not isinstance(time_budget, (int, float)) or
                                    not 0 <= time_budget < float("inf")):
        raise GraphError(f"path_time must be a finite number of seconds >= 0, got {time_budget!r}")


def find_path(terms: Sequence[str], output: str, sizes: dict,
              time_budget: float | None = None, cache: bool = True) -> tuple[Steps, dict]:
    """The best path found for ``terms -> output`` within ``time_budget`` seconds (None: the
    default budget), and a record:
    searcher, trials, seconds, budget_seconds, estimated_run_seconds, greedy (the start:
    "cotengrust greedy (costmod c)" or opt_einsum's "greedy"), greedy_combo, greedy_flops,
    combo, and ``cache`` ("hit", "miss" or "off")."""
    terms, sizes = list(terms), {c: int(s) for c, s in sizes.items()}
    check_time_budget(time_budget)
    if not cache:
        steps, rec = search(terms, output, sizes, time_budget)
        return steps, dict(rec, cache="off")
    key = path_cache.network_key(terms, output, sizes)
    kept = path_cache.cached(key, terms, output, sizes)
    if kept is not None:
        steps, entry = kept
        asked = time_budget if time_budget is not None else default_budget(steps)
        if entry["budget_seconds"] >= asked:
            return steps, {"searcher": entry["searcher"], "trials": 0, "seconds": 0.0,
                           "budget_seconds": entry["budget_seconds"],
                           "estimated_run_seconds": estimated_seconds(steps),
                           "greedy": entry.get("greedy", "greedy"),
                           "greedy_combo": entry.get("greedy_combo", steps.combo),
                           "greedy_flops": entry.get("greedy_flops"),
                           "combo": steps.combo, "cache": "hit",
                           "searched_seconds": entry.get("seconds", 0.0)}
        steps, rec = search(terms, output, sizes, time_budget, start=steps)
    else:
        steps, rec = search(terms, output, sizes, time_budget)
    entry = {"path": [list(p) for p in steps.path], "searcher": rec["searcher"],
             "budget_seconds": rec["budget_seconds"], "seconds": rec["seconds"],
             "greedy": rec["greedy"], "greedy_combo": rec["greedy_combo"],
             "greedy_flops": rec["greedy_flops"],
             "combo": steps.combo}
    path_cache.store(key, steps, entry)
    return steps, dict(rec, cache="miss")
