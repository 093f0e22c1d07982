"""What a contraction-path search's budget pays for: the default budget (a fraction of the
estimated run time of the best path found so far) and each counted step's assumed cost
(``SearchSteps``). ``anytime`` runs the steps; these constants size them.
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
# (the two together keep within the time the user gave)
LIMITED_UNSLICED_SHARE = 0.5
HYPER_MIN_SECONDS = 0.5    # below this budget, cotengra's trials are not worth starting
HYPER_CHUNK_SECONDS = 0.25  # cotengra runs this long between checks of the budget
# one of its trials' assumed time per tensor before the first has been timed (a kahypar
# partition and its reconfiguration)
HYPER_TRIAL_SECONDS_PER_TENSOR = 2e-3
TRIAL_SHARE = 0.5          # of the budget, for the counted random-greedy trials: the rest
                           # pays for reconfiguring what they find
MIN_TRIALS = 8             # opt_einsum random-greedy trials run before the clock, where
                           # paid, without cotengrust's
# one opt_einsum greedy or random-greedy trial's assumed cost, scored: per tensor and per
# pair of tensors that share a label (opt_einsum weighs every such pair; a hyper index
# shared by k tensors makes k(k-1)/2)
TRIAL_SECONDS_PER_TENSOR = 3e-5
TRIAL_SECONDS_PER_PAIR = 1.3e-5
# cotengra's subtree reconfiguration's assumed cost per tensor, by subtree size
RECONF_SECONDS_PER_TENSOR = {8: 6e-4, 6: 2.5e-4, 4: 1.6e-4}
# Step 5 reconfigures this many of the trials' other paths at this subtree size: a path
# that is not the trials' cheapest may reconfigure to a cheaper one than theirs (on
# hyper-index networks above all)
RECONF_STARTS = 8
STARTS_SUBTREE = 6
# Step 6: the reconfiguration of the best path at this subtree size with this many of its
# subtrees picked at random (seeded), in rounds while a round improves it: where the
# costliest-first reconfiguration is stuck, it walks on (its assumed cost below, per round)
RANDOM_SUBTREE = 8
RANDOM_SUBTREES = 200
RANDOM_ROUNDS = 4
RANDOM_RECONF_SECONDS_PER_TENSOR = 1e-3
# cotengrust's greedy: its weights of the size added against the sizes removed
# (``size_ab / costmod - (size_a + size_b) * costmod``). No one weight suits every kind of
# network (one that suits a lattice can be many orders worse on an MPS); the better of
# these two is close to opt_einsum's greedy on most. Its assumed cost per tensor: the
# first costmod runs always, the others where the budget also pays for opt_einsum's
# greedy (a network that runs for milliseconds or more).
FAST_GREEDY_COSTMODS = (0.5, 2.0)
FAST_GREEDY_SECONDS_PER_TENSOR = 3e-6
# cotengrust's random-greedy trials, run in batches of at most ``RUST_BATCH`` (each batch
# keeps its path of fewest FLOPs, which is then played and scored by combo cost): assumed
# per tensor and per sharing pair a trial, plus a batch's played path per tensor
RUST_TRIAL_SECONDS_PER_TENSOR = 1.5e-6
RUST_TRIAL_SECONDS_PER_PAIR = 1e-7
RUST_PLAY_SECONDS_PER_TENSOR = 6e-6
RUST_BATCH = 16
RUST_MAX_TRIALS = 1024
# Before the first reconfiguration, one batch of this many cotengrust trials where it costs
# at most ``FIRST_TRIALS_SHARE`` of the budget: a start the reconfiguration refines further
# than the greedy one on grid-like networks, within a few percent of the budget elsewhere.
FIRST_TRIALS = 8
FIRST_TRIALS_SHARE = 0.1


def estimated_seconds(steps: Steps, rate: float = COMBO_RATE) -> float:
    """Run time of ``steps`` the budget rule assumes: its combo cost at ``rate`` a second
    (the backend's, ``Rates.combo``: ``COMBO_RATE`` on the host)."""
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
    (``elapsed``) to leave it room: on networks of hundreds of tensors the steps cost
    several times their per-tensor model."""

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
