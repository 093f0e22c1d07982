"""Which path search runs for a contraction: the one rule the contraction pass and the
gradient's einsum splitting share.

``optimize="auto"`` is opt_einsum's exhaustive search up to ``AUTO_OPTIMAL_MAX`` operands,
its dynamic programming up to ``AUTO_DP_MAX``, and the anytime search (``anytime``, within
the compile's ``path_time``) beyond; ``"hyper"`` is the anytime search at any size; any
other name is opt_einsum's search of that name, and a ``PathOptimizer`` runs as given. An
explicit path (opt_einsum's list of index tuples, or NumPy's ``["einsum_path", ...]``) is
taken as it is (``GivenPath``): the contraction pass runs it, and no other order.
"""

from __future__ import annotations

from opt_einsum import paths as oe_paths

from ...errors import GraphError
from ..paths import Steps, play
from . import anytime

AUTO_OPTIMAL_MAX = 4
AUTO_DP_MAX = 12
# Where the chosen search finds no order within a memory limit, dynamic programming and a
# two-way branch search are tried up to these sizes.
LIMIT_DP_MAX = 16
LIMIT_BRANCH_MAX = 10
# Greedy under a limit is opt_einsum's branch search, cubic in the operand count: on larger
# groups plain greedy runs and the limit is checked afterwards.
LIMIT_GREEDY_MAX = 64

ANYTIME = "anytime"   # optimizer_for's answer for the anytime search (``anytime.find_path``)


class GivenPath(oe_paths.PathOptimizer):
    """A path the caller gave: each step the positions of the operands it contracts, as
    opt_einsum's ``contract_path`` returns them (NumPy's ``["einsum_path", ...]`` too, its
    first item dropped). Checked against the network when it is played (``paths.play``)."""

    def __init__(self, path):
        steps = list(path)
        if steps and steps[0] == "einsum_path":
            steps = steps[1:]
        try:
            self.path = tuple(tuple(int(i) for i in step) for step in steps)
        except (TypeError, ValueError):
            raise GraphError(f"optimize={list(path)!r}: an explicit path is a list of tuples "
                             "of operand positions (opt_einsum's or np.einsum_path's form)"
                             ) from None

    def __call__(self, inputs, output, size_dict, memory_limit=None):
        return [tuple(p) for p in self.path]

    def __eq__(self, other):
        return isinstance(other, GivenPath) and other.path == self.path

    def __hash__(self):
        return hash(self.path)

    def __repr__(self):
        return f"GivenPath({list(self.path)})"


def optimizer_for(optimize, n_operands: int):
    """``(search function, its name)`` for ``optimize`` on ``n_operands`` operands; the
    function is ``ANYTIME`` for ``anytime.find_path``."""
    if isinstance(optimize, (list, tuple)):
        optimize = GivenPath(optimize)
    if isinstance(optimize, GivenPath):
        return optimize, "the given path"
    if isinstance(optimize, oe_paths.PathOptimizer):
        return optimize, type(optimize).__name__
    if optimize == "auto":
        optimize = ("optimal" if n_operands <= AUTO_OPTIMAL_MAX else
                    "dp" if n_operands <= AUTO_DP_MAX else "hyper")
    if optimize == "hyper":
        return ANYTIME, ANYTIME
    if isinstance(optimize, str):
        try:
            return oe_paths.get_path_fn(optimize), optimize
        except KeyError:
            pass
    raise GraphError(f"optimize={optimize!r} is not a contraction path search; use 'auto', "
                     "'hyper', "
                     f"{', '.join(repr(k) for k in oe_paths._PATH_OPTIONS if k != 'auto')}, "
                     "an opt_einsum PathOptimizer or an explicit path")


def fallbacks(n_operands: int) -> list[str]:
    """Searches to try where the chosen one finds no order within the memory limit."""
    return [name for name, most in (("dp", LIMIT_DP_MAX), ("branch-2", LIMIT_BRANCH_MAX))
            if 2 < n_operands <= most]


def search(fn, terms, output: str, sizes: dict, memory_limit: int | None) -> Steps | None:
    """Run one opt_einsum path search ``fn``; None where it finds no order under
    ``memory_limit`` (elements)."""
    if len(terms) <= 2:
        path = [tuple(range(len(terms)))]
    else:
        try:
            path = fn([set(t) for t in terms], set(output), sizes, memory_limit)
        except RuntimeError:  # dynamic programming: nothing fits the limit
            return None
    return play(terms, output, sizes, path)


def best_path(terms, output: str, sizes: dict, optimize="auto", time_budget=None,
              cache: bool = True, combo_rate: float | None = None
              ) -> tuple[Steps, dict | None]:
    """The path ``optimize`` finds for ``terms -> output`` without a memory limit, and the
    anytime search's record where it ran (else None)."""
    fn, _ = optimizer_for(optimize, len(terms))
    if fn is ANYTIME and len(terms) > 2:
        kw = {} if combo_rate is None else {"combo_rate": combo_rate}
        return anytime.find_path(terms, output, sizes, time_budget=time_budget, cache=cache,
                                 **kw)
    return search(fn, terms, output, sizes, None), None


def fits_limit(s: Steps | None, limit: int | None) -> bool:
    """Whether ``s`` is pairwise with every intermediate within ``limit`` elements."""
    return s is not None and s.pairwise and (limit is None or s.largest <= limit)


def searched(terms, output: str, sizes: dict, result_size: int, limit: int | None, fn,
             name: str, free: Steps | None) -> tuple[Steps | None, Steps | None, str]:
    """``(found, greedy, name)``: the best path by ``Steps.combo`` that ``fn`` (then, where
    it does not fit the limit in elements, each fallback) and greedy find; greedy's own path
    (None for two operands or the anytime search, which starts from it); the searchers'
    names. ``free``: ``fn``'s path without a limit; ``result_size``: the result's
    elements."""
    def attempt(f):
        # opt_einsum's limit covers the final result too, which exists in any order: the
        # branch searches exempt a last pair that exceeds it, dynamic programming does not.
        # The anytime search takes no limit: its path is checked afterwards.
        lim = limit
        if limit is None or f is ANYTIME:
            return free
        if f is oe_paths.dynamic_programming or isinstance(f, oe_paths.DynamicProgramming):
            lim = max(limit, result_size)
        elif f is oe_paths.greedy and len(terms) > LIMIT_GREEDY_MAX:
            return free
        return search(f, terms, output, sizes, lim)

    found = attempt(fn)
    if limit is not None and not fits_limit(found, limit):
        for alt in fallbacks(len(terms)):
            s = attempt(oe_paths.get_path_fn(alt))
            if fits_limit(s, limit) and (not fits_limit(found, limit) or s.combo < found.combo):
                found, name = s, f"{name}, then {alt}"
    # opt_einsum's searchers rank by their own count; greedy's path can cost less by ours
    # (the anytime search starts from it already)
    greedy = search(oe_paths.greedy, terms, output, sizes, None) \
        if len(terms) > 2 and fn is not ANYTIME else None
    if fits_limit(greedy, limit) and (not fits_limit(found, limit) or greedy.combo < found.combo):
        found, name = greedy, f"{name}, then greedy"
    return found, greedy, name
