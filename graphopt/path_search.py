"""Anytime contraction-path search within a time budget, with a persistent path cache.

``find_path(terms, output, sizes, time_budget=None)`` returns the cheapest path found
(``paths.Steps``; cost ``Steps.combo``: FLOPs plus 64 per element written) and a record of
the search. It starts from opt_einsum's greedy path, then runs randomized trials until the
budget is spent: opt_einsum's random-greedy trials; where cotengra is installed (``pip
install graphopt[networks]``: cotengra, cotengrust, kahypar, optuna) and the budget pays
for it, cotengra's subtree reconfiguration of the best of them (a deterministic
local search: 3-5x fewer FLOPs on lattices, PEPS and MPO networks in tens of
milliseconds); where the budget is at least ``HYPER_MIN_SECONDS``, cotengra's
hyper-optimizer with every trial refined the same way, until the budget is spent.

The budget: ``time_budget`` seconds where given (``compile(..., path_time=)``); by default
``SEARCH_FRACTION`` of the estimated run time of the best path found so far (its combo cost
at ``COMBO_RATE``), at most ``DEFAULT_MAX_SECONDS``: a network that runs in a millisecond
is ordered in well under one, an expensive one gets seconds. The steps before cotengra's
hyper-optimizer are counted, not timed (``SearchSteps``): greedy and each random-greedy
trial at ``TRIAL_SECONDS_PER_TENSOR`` and ``TRIAL_SECONDS_PER_PAIR``, the reconfiguration at
``RECONF_SECONDS_PER_TENSOR`` for its subtree size. A step runs only where what was counted
so far plus its own assumed cost is within the budget of the best path found so far (the
trials within ``TRIAL_SHARE`` of it, leaving the rest to the reconfiguration), so a
small network's path does not depend on the machine's speed, and a path that runs in ten
milliseconds is not refined for sixty (the largest subtree size the budget pays for is
used). Only then does the clock decide: cotengra's hyper-optimizer runs until the budget is
spent; under a budget too small for it that the user set, or without cotengra, more
random-greedy trials do. A trial that has started is finished, so a search may overrun
its budget by one trial.

Paths are kept by the network's structure and sizes: in this process (``_MEMO``) and on
disk beside the kernels (``disk_cache``, ``path_<digest>.json``, at most
``DISK_ENTRIES`` files, oldest dropped first), so a second compile or a second process does
no search. An entry is used when it was searched with at least the budget now asked for;
a corrupt entry, or one whose path does not fit the network, is dropped and searched again.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections import OrderedDict
from typing import Sequence

from . import disk_cache, progress
from .errors import GraphError
from .paths import Steps, play

_log = logging.getLogger(__name__)
SLOW_SECONDS = 1.0         # a search this long is logged at INFO (else DEBUG)
SEARCH_FRACTION = 0.5
DEFAULT_MAX_SECONDS = 20.0
COMBO_RATE = 1e10          # combo cost per second assumed when sizing the default budget
HYPER_MIN_SECONDS = 0.5    # below this budget, cotengra's trials are not worth starting
HYPER_CHUNK_SECONDS = 0.25  # cotengra runs this long between checks of the budget
TRIAL_SHARE = 0.5          # of the budget, for the counted random-greedy trials: the rest
                           # pays for the reconfiguration, worth more than later trials
MIN_TRIALS = 8             # random-greedy trials run before the clock, where the budget pays
# one random-greedy trial's assumed cost, scored: per tensor and per pair of tensors that
# share a label (opt_einsum weighs every such pair; a hyper index shared by k tensors makes
# k(k-1)/2). Measured on nine networks of 50-200 tensors and 105-1679 pairs, a 2024 server
# core: 2.7-20 ms, within 20 % of this.
TRIAL_SECONDS_PER_TENSOR = 3e-5
TRIAL_SECONDS_PER_PAIR = 1.3e-5
# cotengra's subtree reconfiguration's assumed cost per tensor, by subtree size (the median
# of those nine networks: 0.12-0.2, 0.2-0.3 and 0.24-1.6 ms a tensor)
RECONF_SECONDS_PER_TENSOR = {8: 6e-4, 6: 2.5e-4, 4: 1.6e-4}
CACHE_FORMAT = 1           # part of every key: a change to the search makes new entries
MEMO_ENTRIES = 256
DISK_ENTRIES = 4096

_MEMO: OrderedDict = OrderedDict()
_lock = threading.Lock()


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
        self.pairs = sharing_pairs(terms)

    def trial_seconds(self) -> float:
        return TRIAL_SECONDS_PER_TENSOR * self.n + TRIAL_SECONDS_PER_PAIR * self.pairs

    def pays_for(self, seconds: float, share: float = 1.0) -> bool:
        return self.counted + seconds <= share * self.budget()

    def reconf_size(self) -> int | None:
        """The largest subtree size whose reconfiguration the budget pays for, or None."""
        return next((k for k, rate in sorted(RECONF_SECONDS_PER_TENSOR.items(), reverse=True)
                     if self.pays_for(rate * self.n)), None)

    def count(self, seconds: float) -> None:
        self.counted += seconds


def _numbered(terms, output) -> dict:
    """Each label's number, in order of first use."""
    names: dict = {}
    for c in "".join(terms) + output:
        names.setdefault(c, len(names))
    return names


def network_key(terms: Sequence[str], output: str, sizes: dict) -> str:
    """The cache key of a network: its equation with labels renamed in order of first use,
    and each label's size."""
    names = _numbered(terms, output)
    doc = [CACHE_FORMAT, [[names[c] for c in t] for t in terms], [names[c] for c in output],
           [int(sizes[c]) for c in names]]
    return hashlib.sha256(json.dumps(doc).encode()).hexdigest()[:32]


def _hyper_available() -> bool:
    try:
        import cotengra  # noqa: F401
    except ImportError:
        return False
    return True


def _int_labels(terms, output, sizes):
    """The network with labels as ints: opt_einsum's greedy walks sets of labels, and a set
    of strings iterates in an order that changes from process to process (hash seeds), so
    its ties, and the random trials, would too."""
    names = _numbered(terms, output)
    return ([{names[c] for c in t} for t in terms], {names[c] for c in output},
            {names[c]: sizes[c] for c in names})


class _RandomGreedyTrials:
    """opt_einsum's random-greedy trials (its ``setup``/``trial_fn`` protocol), scored by
    our combo cost."""

    name = "opt_einsum random-greedy"

    def __init__(self, terms, output, sizes):
        from opt_einsum import RandomGreedy
        self._fn, self._args = RandomGreedy().setup(*_int_labels(terms, output, sizes))
        self._r = 1       # trial 0 is plain greedy, which the search starts from

    def trial(self, seconds_left: float) -> list[tuple[int, ...]]:
        from opt_einsum.paths import ssa_to_linear
        ssa_path, _, _ = self._fn(self._r, *self._args)
        self._r += 1
        return [tuple(p) for p in ssa_to_linear(ssa_path)]

    @property
    def trials(self) -> int:
        return self._r - 1


class _HyperTrials:
    """cotengra's hyper-optimizer with subtree reconfiguration of every trial, run in chunks
    of at most ``HYPER_CHUNK_SECONDS`` (it keeps its sampler's state between them)."""

    name = "cotengra hyper-optimizer"

    def __init__(self, terms, output, sizes):
        import warnings

        import cotengra
        with warnings.catch_warnings():   # "kahypar not found: using 'labels'" and the like
            warnings.simplefilter("ignore")
            self._opt = cotengra.HyperOptimizer(max_repeats=10**9, minimize="combo",
                                                reconf_opts={}, parallel=False,
                                                progbar=False, on_trial_error="ignore")
        self._args = ([tuple(t) for t in terms], tuple(output), dict(sizes))

    def trial(self, seconds_left: float) -> list[tuple[int, ...]]:
        import warnings
        self._opt.max_time = max(1e-3, min(seconds_left, HYPER_CHUNK_SECONDS))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._opt.search(*self._args)
        return [tuple(p) for p in self._opt.path]

    @property
    def trials(self) -> int:
        return len(self._opt.scores)


def _reconfigured(terms, output, sizes, steps: Steps, subtree_size: int = 8) -> Steps:
    """``steps`` improved by cotengra's subtree reconfiguration (deterministic; tens of
    milliseconds on a 100-tensor network): every subtree of ``subtree_size`` tensors
    re-ordered optimally."""
    import warnings

    import cotengra
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = cotengra.ContractionTree.from_path([tuple(t) for t in terms], tuple(output),
                                                  dict(sizes), path=steps.path)
        tree.subtree_reconfigure_(minimize="combo", subtree_size=subtree_size)
        return play(terms, output, sizes, tree.get_path())


def reordered_for_peak(terms, output, sizes, path) -> list[tuple[int, ...]]:
    """``path``'s contractions (the same tree, the same FLOPs) in the order cotengra's
    ``reorder_for_peak_size`` picks: at each node, the child whose build holds less at its
    peak first, so fewer intermediates are live at once. ``path`` itself without cotengra."""
    if not _hyper_available():
        return [tuple(p) for p in path]
    import warnings

    import cotengra
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = cotengra.ContractionTree.from_path([tuple(t) for t in terms], tuple(output),
                                                  dict(sizes), path=[tuple(p) for p in path])
        tree.reorder_for_peak_size()
        return [tuple(p) for p in tree.get_path()]


def _greedy(terms, output, sizes) -> Steps:
    from opt_einsum import paths as oe_paths
    path = oe_paths.greedy(*_int_labels(terms, output, sizes))
    return play(terms, output, sizes, path)


def search(terms, output, sizes, time_budget: float | None, start: Steps | None = None):
    """Search without the cache: ``(best steps, record)`` (see the module docstring)."""
    t0 = time.perf_counter()
    best = first = _greedy(terms, output, sizes)
    if start is not None and start.combo < best.combo:
        best = start

    def budget():
        return time_budget if time_budget is not None else default_budget(best)

    def elapsed():
        return time.perf_counter() - t0

    counted = SearchSteps(terms, budget)
    counted.count(counted.trial_seconds())           # greedy's

    def keep(path):
        nonlocal best
        try:
            s = play(terms, output, sizes, path)
        except GraphError:    # a trial that did not produce a full path
            return
        if s.combo < best.combo:
            best = s

    trials, searcher = 0, "greedy"
    if budget() >= SLOW_SECONDS:      # say why a compile is about to take a while
        _log.info("searching a contraction path for %d operands for up to %.1f s (greedy's "
                  "combo cost %.3g; compile(path_time=...) sets the budget)", len(terms),
                  budget(), best.combo)
        progress.phase(f"contraction path search, {len(terms)} operands, up to "
                       f"{budget():.1f} s")
    if len(terms) > 2 and time_budget != 0:
        # random-greedy first (cheap, and on some networks hard to beat), its best
        # reconfigured, then cotengra's hyper-optimizer where the budget is worth it
        cotengra = _hyper_available()

        def hyper():     # the budget follows the best path so far: asked each time
            return cotengra and budget() >= HYPER_MIN_SECONDS

        runner = None

        def greedy_trial():
            nonlocal runner
            runner = runner or _RandomGreedyTrials(terms, output, sizes)
            keep(runner.trial(budget() - elapsed()))
            return runner.trials

        while trials < MIN_TRIALS and counted.pays_for(counted.trial_seconds(), TRIAL_SHARE):
            counted.count(counted.trial_seconds())
            trials = greedy_trial()
        subtree = counted.reconf_size() if cotengra else None
        if subtree is not None:
            counted.count(RECONF_SECONDS_PER_TENSOR[subtree] * counted.n)
            try:
                s = _reconfigured(terms, output, sizes, best, subtree)
            except GraphError:
                s = best
            if s.combo < best.combo:
                best = s
            searcher += f", subtree reconfiguration ({subtree})"
        # the rest of a budget too small for the hyper-optimizer (or without cotengra):
        # random-greedy trials by the clock, where the user set the budget or nothing
        # else improves the path
        while not hyper() and (time_budget is not None or not cotengra) and elapsed() < budget():
            trials = greedy_trial()
        if trials:
            searcher = searcher.replace("greedy", _RandomGreedyTrials.name, 1)
        if hyper() and elapsed() < budget():
            hyper_trials = _HyperTrials(terms, output, sizes)
            while elapsed() < budget():
                keep(hyper_trials.trial(budget() - elapsed()))
            trials += hyper_trials.trials
            searcher = f"{searcher}, then {_HyperTrials.name}"
    seconds = time.perf_counter() - t0
    _log.log(logging.INFO if seconds >= SLOW_SECONDS else logging.DEBUG,
             "path search for %d operands: %s, %d trials in %.2f s, combo cost %.3g (greedy "
             "%.3g)", len(terms), searcher, trials, seconds, best.combo, first.combo)
    return best, {"searcher": searcher, "trials": trials, "seconds": round(seconds, 4),
                  "budget_seconds": budget(),
                  "estimated_run_seconds": estimated_seconds(best),
                  "greedy_combo": first.combo, "greedy_flops": first.flops,
                  "combo": best.combo}


def _valid_entry(doc) -> bool:
    return (isinstance(doc, dict) and isinstance(doc.get("path"), list)
            and isinstance(doc.get("budget_seconds"), (int, float))
            and isinstance(doc.get("searcher"), str)
            and all(isinstance(p, list) and all(isinstance(i, int) for i in p)
                    for p in doc["path"]))


def _cached(key: str, terms, output, sizes):
    """``(steps, entry)`` kept for ``key`` (this process first, then disk), or None."""
    with _lock:
        hit = _MEMO.get(key)
        if hit is not None:
            _MEMO.move_to_end(key)
            return hit
    doc = disk_cache.read_json(f"path_{key}.json", _valid_entry)
    if doc is None:
        return None
    try:
        steps = play(terms, output, sizes, doc["path"])
    except GraphError:
        disk_cache.remove(f"path_{key}.json")
        return None
    if steps.combo != doc.get("combo", steps.combo):
        disk_cache.remove(f"path_{key}.json")
        return None
    _remember(key, steps, doc)
    return steps, doc


def _remember(key: str, steps: Steps, entry: dict) -> None:
    with _lock:
        _MEMO[key] = (steps, entry)
        _MEMO.move_to_end(key)
        while len(_MEMO) > MEMO_ENTRIES:
            _MEMO.popitem(last=False)


def check_time_budget(time_budget) -> None:
    """``GraphError`` unless ``time_budget`` is None or a finite number of seconds >= 0."""
    if time_budget is not None and (isinstance(time_budget, bool) or
                                    not isinstance(time_budget, (int, float)) or
                                    not 0 <= time_budget < float("inf")):
        raise GraphError(f"path_time must be a finite number of seconds >= 0, got {time_budget!r}")


def find_path(terms: Sequence[str], output: str, sizes: dict,
              time_budget: float | None = None, cache: bool = True) -> tuple[Steps, dict]:
    """The best path found for ``terms -> output`` within ``time_budget`` seconds (None: the
    default budget), and a record: searcher, trials, seconds, budget_seconds,
    estimated_run_seconds, greedy_combo, greedy_flops, combo, and ``cache`` ("hit", "miss"
    or "off")."""
    terms, sizes = list(terms), {c: int(s) for c, s in sizes.items()}
    check_time_budget(time_budget)
    if not cache:
        steps, rec = search(terms, output, sizes, time_budget)
        return steps, dict(rec, cache="off")
    key = network_key(terms, output, sizes)
    kept = _cached(key, terms, output, sizes)
    if kept is not None:
        steps, entry = kept
        asked = time_budget if time_budget is not None else default_budget(steps)
        if entry["budget_seconds"] >= asked:
            return steps, {"searcher": entry["searcher"], "trials": 0, "seconds": 0.0,
                           "budget_seconds": entry["budget_seconds"],
                           "estimated_run_seconds": estimated_seconds(steps),
                           "greedy_combo": entry.get("greedy_combo", steps.combo),
                           "greedy_flops": entry.get("greedy_flops"),
                           "combo": steps.combo, "cache": "hit",
                           "searched_seconds": entry.get("seconds", 0.0)}
        steps, rec = search(terms, output, sizes, time_budget, start=steps)
    else:
        steps, rec = search(terms, output, sizes, time_budget)
    entry = {"path": [list(p) for p in steps.path], "searcher": rec["searcher"],
             "budget_seconds": rec["budget_seconds"], "seconds": rec["seconds"],
             "greedy_combo": rec["greedy_combo"], "greedy_flops": rec["greedy_flops"],
             "combo": steps.combo}
    _remember(key, steps, entry)
    disk_cache.write_json(f"path_{key}.json", entry)
    disk_cache.prune("path_*.json", DISK_ENTRIES)
    return steps, dict(rec, cache="miss")


def clear_memo() -> None:
    """Forget the paths kept in this process (the disk cache stays)."""
    with _lock:
        _MEMO.clear()
