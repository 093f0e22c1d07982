"""The contraction-path searchers ``path_search`` composes within its budget: greedy paths
(opt_einsum's in Python, cotengrust's in Rust), random-greedy trials (both libraries'),
cotengra's subtree reconfiguration and hyper-optimizer, and cotengra's reordering of a
path for a lower peak. Each takes a network as ``terms -> output`` with label ``sizes`` and
returns a path (opt_einsum's linear format) or its played ``Steps``; the libraries other
than opt_einsum are optional (``pip install graphopt[networks]``) and each function says
what it does without them.
"""

from __future__ import annotations

import functools
import importlib.util
import warnings

from ...errors import GraphError
from ..paths import COMBO_WRITE_WEIGHT, Steps, play

# cotengra counts a multiply-add as one FLOP where opt_einsum and graphopt count two, so our
# combo cost (``Steps.combo``: FLOPs plus 64 per element written) is twice its "combo-32":
# the objective its reconfiguration and hyper-optimizer are given, so that they minimize
# what the search ranks paths by. (Its own "combo" weighs a written element as 128 of our
# FLOPs. A local search lands where its objective leads, which on some hyper-index
# networks is a dearer path than another objective's.)
COTENGRA_MINIMIZE = f"combo-{COMBO_WRITE_WEIGHT // 2}"


def numbered_labels(terms, output) -> dict:
    """Each label's number, in order of first use."""
    names: dict = {}
    for c in "".join(terms) + output:
        names.setdefault(c, len(names))
    return names


try:
    # imported with graphopt, as cotengra (and so quimb) import it: a process's first path
    # search would pay for the import otherwise
    import cotengrust as _cotengrust
except ImportError:
    _cotengrust = None


def cotengrust():
    """The cotengrust module, or None where it is not installed."""
    return _cotengrust


@functools.cache
def cotengra_available() -> bool:
    """Whether cotengra is installed, found without importing it: importing it takes tens
    of milliseconds (autoray, its optimizers), which a search that runs none of its steps
    should not pay, most of a small network's first ``go.contract``. It is imported by the
    first step that uses it."""
    try:
        return importlib.util.find_spec("cotengra") is not None
    except (ImportError, ValueError):
        return False


def _int_labels(terms, output, sizes):
    """The network with labels as ints: opt_einsum's greedy walks sets of labels, and a set
    of strings iterates in an order that changes from process to process (hash seeds), so
    its ties, and the random trials, would too."""
    names = numbered_labels(terms, output)
    return ([{names[c] for c in t} for t in terms], {names[c] for c in output},
            {names[c]: sizes[c] for c in names})


def greedy(terms, output, sizes) -> Steps:
    """opt_einsum's greedy path (its 'memory-removed' cost), played."""
    from opt_einsum import paths as oe_paths
    path = oe_paths.greedy(*_int_labels(terms, output, sizes))
    return play(terms, output, sizes, path)


def fast_greedy(terms, output, sizes, costmod: float) -> Steps | None:
    """cotengrust's greedy path at ``costmod`` (Rust: a tenth of opt_einsum's greedy in
    Python, or less), played; None where it gives no full pairwise path."""
    try:
        path = cotengrust().optimize_greedy([tuple(t) for t in terms], tuple(output), sizes,
                                            costmod=costmod, temperature=0.0, simplify=False,
                                            use_ssa=False)
        s = play(terms, output, sizes, [tuple(p) for p in path])
    except (GraphError, ValueError, TypeError, OverflowError):
        return None
    return s if s.pairwise else None


def rust_random_greedy(terms, output, sizes, trials: int, seed: int):
    """The path of fewest FLOPs of ``trials`` of cotengrust's random-greedy (its costmod
    and temperature sampled per trial; ``seed`` makes them repeatable), or None where it
    gives none (sizes its counters overflow on)."""
    try:
        path, _ = cotengrust().optimize_random_greedy_track_flops(
            [tuple(t) for t in terms], tuple(output), sizes, ntrials=trials, seed=seed,
            simplify=False, use_ssa=False)
    except (ValueError, TypeError, OverflowError):
        return None
    return [tuple(p) for p in path]


class RandomGreedyTrials:
    """opt_einsum's random-greedy trials (its ``setup``/``trial_fn`` protocol), scored by
    our combo cost."""

    name = "opt_einsum random-greedy"

    def __init__(self, terms, output, sizes):
        from opt_einsum import RandomGreedy
        self._fn, self._args = RandomGreedy().setup(*_int_labels(terms, output, sizes))
        self._r = 1       # trial 0 is plain greedy, which the search's start runs

    def trial(self) -> list[tuple[int, ...]]:
        """The next trial's path."""
        from opt_einsum.paths import ssa_to_linear
        ssa_path, _, _ = self._fn(self._r, *self._args)
        self._r += 1
        return [tuple(p) for p in ssa_to_linear(ssa_path)]

    @property
    def trials(self) -> int:
        return self._r - 1


def _default_hyper_methods() -> tuple:
    """cotengra's default hyper-optimizer methods (empty where this version does not say)."""
    try:
        from cotengra.hyperoptimizers.hyper import get_default_hq_methods
    except ImportError:
        return ()
    return tuple(get_default_hq_methods())


class HyperTrials:
    """cotengra's hyper-optimizer over its partitioning methods (kahypar where installed,
    else its 'labels'), each trial reconfigured (its default), run in chunks (it keeps its
    sampler's state between them). Its greedy trials are left out: the search's own steps
    sample greedy paths and reconfigure them, and reconfigured partition trials find
    cheaper paths than unrefined ones."""

    name = "cotengra hyper-optimizer"

    def __init__(self, terms, output, sizes, slice_target: int | None = None):
        """``slice_target``: each trial is sliced until its intermediates are within that
        many elements, reconfigured as it is sliced, and scored sliced (cotengra's
        ``slicing_reconf_opts``); ``trial`` returns the path, ``sliced_labels`` what the
        best trial sliced."""
        import cotengra
        sliced = {} if slice_target is None else \
            {"slicing_reconf_opts": {"target_size": max(1, int(slice_target))}}
        with warnings.catch_warnings():   # "kahypar not found: using 'labels'" and the like
            warnings.simplefilter("ignore")
            methods = [m for m in _default_hyper_methods() if m != "greedy"] or None
            self._opt = cotengra.HyperOptimizer(methods=methods, max_repeats=10**9,
                                                minimize=COTENGRA_MINIMIZE, parallel=False,
                                                progbar=False, on_trial_error="ignore",
                                                **sliced)
        self._args = ([tuple(t) for t in terms], tuple(output), dict(sizes))

    def trial(self, seconds: float) -> list[tuple[int, ...]]:
        """The best path after searching on for about ``seconds`` more (cotengra starts
        trials until ``seconds`` have passed: the last may end up to a trial later)."""
        self._opt.max_time = max(1e-3, seconds)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            self._opt.search(*self._args)
        return [tuple(p) for p in self._opt.path]

    def sliced_labels(self) -> tuple:
        """The labels the best trial so far sliced (none without ``slice_target``)."""
        tree = self._opt.tree
        return tuple(getattr(tree, "sliced_inds", ()))

    @property
    def trials(self) -> int:
        return len(self._opt.scores)

    def seconds_per_trial(self) -> float:
        """The mean seconds of the trials run so far (0 before the first)."""
        times = self._opt.times
        return sum(times) / len(times) if times else 0.0


def reconfigured(terms, output, sizes, steps: Steps, subtree_size: int = 8,
                 seed: int | None = None, subtrees: int | None = None) -> Steps | None:
    """``steps`` improved by cotengra's subtree reconfiguration (tens of milliseconds on a
    100-tensor network): subtrees of ``subtree_size`` tensors re-ordered optimally, the
    costliest first (deterministic), or with a ``seed``, ``subtrees`` of them picked at
    random (repeatable: where the costliest-first walk is stuck, it may go on); None where
    its path does not play over the network."""
    import cotengra
    picks = {} if seed is None else {"select": "random", "seed": seed, "maxiter": subtrees}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = cotengra.ContractionTree.from_path([tuple(t) for t in terms], tuple(output),
                                                  dict(sizes), path=steps.path)
        tree.subtree_reconfigure_(minimize=COTENGRA_MINIMIZE, subtree_size=subtree_size,
                                  **picks)
        try:
            return play(terms, output, sizes, tree.get_path())
        except GraphError:
            return None


def slice_reconfigured(terms, output, sizes, path, target: int
                       ) -> tuple[list[tuple[int, ...]], tuple]:
    """``(path, labels)``: ``path`` re-ordered for slicing by cotengra's
    slice-and-reconfigure, which slices the tree a label or two at a time until every
    intermediate is within ``target`` elements and reconfigures its subtrees after each cut,
    so the order suits what is left of each tensor; ``labels``: what it sliced. Its slicing
    picks labels at a temperature of 0 (the same path in every process). The caller
    checks the slicing against what a call allocates, which counts more than
    intermediates."""
    import cotengra
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = cotengra.ContractionTree.from_path([tuple(t) for t in terms], tuple(output),
                                                  dict(sizes), path=[tuple(p) for p in path])
        tree.slice_and_reconfigure_(max(1, int(target)), temperature=0.0,
                                    minimize=COTENGRA_MINIMIZE)
        return [tuple(p) for p in tree.get_path()], tuple(tree.sliced_inds)


def reordered_for_peak(terms, output, sizes, path) -> list[tuple[int, ...]]:
    """``path``'s contractions (the same tree, the same FLOPs) in the order cotengra's
    ``reorder_for_peak_size`` picks: at each node, the child whose build holds less at its
    peak first, so fewer intermediates are live at once. ``path`` itself without cotengra."""
    if not cotengra_available():
        return [tuple(p) for p in path]
    import cotengra
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        tree = cotengra.ContractionTree.from_path([tuple(t) for t in terms], tuple(output),
                                                  dict(sizes), path=[tuple(p) for p in path])
        tree.reorder_for_peak_size()
        return [tuple(p) for p in tree.get_path()]
