"""What a contraction-path search's budget pays for: the default budget (a fraction of the
estimated run time of the best path found so far) and each counted step's assumed cost
(``SearchSteps``). ``path_search`` runs the steps; these constants size them.
"""

from __future__ import annotations

import functools
from collections import Counter
from typing import Sequence

from ...errors import GraphError
from ..paths import Steps
from ..rates import HOST_RATES

SEARCH_FRACTION = 1.0
DEFAULT_MAX_SECONDS = 20.0
# combo cost per second assumed when sizing the default budget where no backend names its
# own: the host's (``rates.HOST_RATES``)
COMBO_RATE = HOST_RATES.combo
# Under ``memory_limit``, the share of a user's ``path_time`` the unsliced search of a group
# gets; where the group must be sliced, its search with its slices gets what that one left
# (the two together took 1.7x and 2.0x a budget of 1 and 2 s on a 5x8 lattice at 1/4 of its
# peak, each given all of it)
LIMITED_UNSLICED_SHARE = 0.5
HYPER_MIN_SECONDS = 0.5    # below this budget, cotengra's trials are not worth starting
HYPER_CHUNK_SECONDS = 0.25  # cotengra runs this long between checks of the budget
# one of its trials' assumed time per tensor before the first has been timed (a kahypar
# partition and its reconfiguration: 1.3-1.9 ms a tensor on the randreg network and the
# circuit of benchmarks/networks.py, 3 on the hyper-index one)
HYPER_TRIAL_SECONDS_PER_TENSOR = 2e-3
TRIAL_SHARE = 0.5          # of the budget, for the counted random-greedy trials: the rest
                           # pays for reconfiguring what they find
MIN_TRIALS = 8             # opt_einsum random-greedy trials run before the clock, where
                           # paid, without cotengrust's
# one opt_einsum greedy or random-greedy trial's assumed cost, scored: per tensor and per
# pair of tensors that share a label (opt_einsum weighs every such pair; a hyper index
# shared by k tensors makes k(k-1)/2). Measured on nine networks of 50-200 tensors and
# 105-1679 pairs, a 2024 server core: 2.7-20 ms, within 20 % of this.
TRIAL_SECONDS_PER_TENSOR = 3e-5
TRIAL_SECONDS_PER_PAIR = 1.3e-5
# cotengra's subtree reconfiguration's assumed cost per tensor, by subtree size (the median
# of those nine networks: 0.12-0.2, 0.2-0.3 and 0.24-1.6 ms a tensor)
RECONF_SECONDS_PER_TENSOR = {8: 6e-4, 6: 2.5e-4, 4: 1.6e-4}
# Step 5 reconfigures this many of the trials' other paths at this subtree size: of 1 s
# searches of benchmarks/networks.py (8 each), the hyper-index network's median combo cost
# went 2.9e8 -> 1.6e8 (cotengra's hyper-optimizer at that budget: 2.6-2.8e8), the lattice's
# 3.16e7 -> 3.14e7, each start 15-22 ms
RECONF_STARTS = 8
STARTS_SUBTREE = 6
# Step 6: the reconfiguration of the best path at this subtree size with this many of its
# subtrees picked at random (seeded), in rounds while a round improves it: where the
# costliest-first reconfiguration is stuck, it walks on. One round, from the paths steps
# 1-5 and the second reconfiguration (now after it) found in 0.45 s on
# benchmarks/networks.py's networks: randreg 3.54e6 -> 2.13e6 combo (85 ms; cotengra's 1 s
# hyper-optimizer: median 2.5e6), lattice 3.18e7 -> 2.99e7, PEPS norm 3.89e8 -> 3.86e8,
# circuit and hyper-index -1 %, tree and MPS-MPO-MPS unchanged; 0.25-3.5 ms a tensor (its
# assumed cost below, per round)
RANDOM_SUBTREE = 8
RANDOM_SUBTREES = 200
RANDOM_ROUNDS = 4
RANDOM_RECONF_SECONDS_PER_TENSOR = 1e-3
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


def estimated_seconds(steps: Steps, rate: float = COMBO_RATE) -> float:
    """Run time of ``steps`` the budget rule assumes: its combo cost at ``rate`` a second
    (the backend's, ``Backend.combo_rate``: ``COMBO_RATE`` on the host)."""
    return steps.combo / rate


def default_budget(steps: Steps, rate: float = COMBO_RATE) -> float:
    """Seconds of search a path of ``steps`` is worth by default (see the module docstring)
    on a backend that runs ``rate`` combo cost a second."""
    return min(DEFAULT_MAX_SECONDS, SEARCH_FRACTION * estimated_seconds(steps, rate))


def has_hyper_indices(terms: Sequence[str], output: str) -> bool:
    """Whether a label is held by more than two of the terms and the output."""
    return max(Counter("".join(["".join(set(t)) for t in terms]) + output).values(),
               default=0) > 2


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
    docstring): a step runs where they plus its own fit the budget of the best path. Under
    ``HYPER_MIN_SECONDS`` of budget that is all (the same steps in every process); from it
    on, where the search is timed by the clock anyway, a step also needs the clock
    (``elapsed``) to leave it room: on large networks the steps cost more than their
    per-tensor model (a 400-tensor lattice's 3 s search took 4.3 s, a 200-tensor random
    3-regular one's 1 s search 1.9 s, cotengrust's trials 1.5-6.6x their assumed cost)."""

    def __init__(self, terms: Sequence[str], budget, elapsed=None):
        self.n, self.budget, self.counted = max(1, len(terms)), budget, 0.0
        self._terms, self._elapsed = terms, elapsed

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

    def spent(self) -> float:
        """Seconds of the budget used: those counted, or those elapsed where more and the
        budget is timed (see the class docstring)."""
        if self._elapsed is not None and self.budget() >= HYPER_MIN_SECONDS:
            return max(self.counted, self._elapsed())
        return self.counted

    def left(self) -> float:
        """Seconds of the budget not yet spent."""
        return self.budget() - self.spent()

    def pays_for(self, seconds: float) -> bool:
        return seconds <= self.left()

    def pays_for_trial(self, room: float | None = None) -> bool:
        """Whether ``room`` (default: the budget left) pays for one opt_einsum trial (its
        per-tensor part first: the pairs need counting only where that fits)."""
        room = self.left() if room is None else room
        return TRIAL_SECONDS_PER_TENSOR * self.n <= room and self.trial_seconds() <= room

    def count(self, seconds: float) -> None:
        self.counted += seconds


def check_time_budget(time_budget) -> None:
    """``GraphError`` unless ``time_budget`` is None or a finite number of seconds >= 0."""
    if time_budget is not None and (isinstance(time_budget, bool) or
                                    not isinstance(time_budget, (int, float)) or
                                    not 0 <= time_budget < float("inf")):
        raise GraphError(f"path_time must be a finite number of seconds >= 0, got {time_budget!r}")
