"""Contraction-path arithmetic: play a path, count its FLOPs, find its largest intermediate.

A *path* is opt_einsum's linear format: each step contracts the listed operand positions
and appends the result at the end. Every caller that counts FLOPs along a path (the cost
model, the contraction and slicing passes, the sliced runtime, the dask lowering) plays it
here, so there is one rule for a step's result labels and one FLOP count.

FLOPs are counted as ``opt_einsum.helpers.flop_count`` counts them, in Python ints (no
overflow on the largest networks).
"""

from __future__ import annotations

import functools
import math
from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from ..errors import GraphError
from ..ir.einsum import split as split_equation

PlayedStep = tuple[tuple[int, ...], tuple[str, ...], str]


def step_flops(labels: set, inner: bool, n_terms: int, sizes: dict) -> int:
    """FLOPs of one step over ``labels`` joining ``n_terms`` terms (``inner``: some label is
    summed away), as ``opt_einsum.helpers.flop_count``."""
    return math.prod(map(sizes.__getitem__, labels)) * (max(1, n_terms - 1) + (1 if inner else 0))


def play_path(terms: Sequence[str], output: str, path) -> list[PlayedStep]:
    """``path`` played over ``terms``: per step ``(positions, picked terms, result term)``.

    A step's result keeps the labels that later steps or the output need, in order of
    appearance; the last step's result is ``output``. An empty path is one step over every
    term. Raises ``GraphError`` for a path that does not fit ``terms``. Memoized: the
    contraction pass, the cost model, the kernel's workspace and the contraction program
    play the same path of a large network."""
    return list(_play_path_memo(tuple(terms), output, tuple(tuple(p) for p in path))[0])


@functools.lru_cache(maxsize=256)
def _play_path_memo(terms: tuple, output: str, path: tuple) -> tuple[tuple, tuple]:
    """``(steps, labels)``: ``play_path``'s steps, and each step's labels once each (in
    order of appearance), which ``_counted`` counts."""
    current = list(terms)
    path = [tuple(p) for p in path] or [tuple(range(len(current)))]
    # a term's labels once each (an input may repeat one: a trace), for the counts below
    once = {t: "".join(dict.fromkeys(t)) for t in terms if len(t) > 1 and len(set(t)) != len(t)}
    # how many current terms hold each label, plus one for the output's labels (counted
    # in C: a network's hundreds of terms)
    held = dict(Counter("".join([once.get(t, t) for t in terms] if once else terms) +
                        output))
    if not once and all(n == 2 for n in held.values()) and all(len(p) == 2 for p in path):
        return _play_pairs_of_two(current, output, path)
    return _play_counting(current, output, path, once, held)


def _play_counting(current: list, output: str, path: list, once: dict, held: dict
                   ) -> tuple[tuple, tuple]:
    """``_play_path_memo`` of any ``path``, counting how many terms hold each label
    (``held``; ``once``: the terms that repeat a label, without the repeats)."""
    steps, step_labels = [], []
    last = len(path) - 1
    for k, inds in enumerate(path):
        n = len(current)
        if len(inds) == 2:      # (nearly every step: the branch below is the hot one)
            i, j, a, b = _take_pair(current, path, k, inds)
            picked = (a, b)
            union = once.get(a, a) + once.get(b, b) if once else a + b
            for c in union:
                held[c] -= 1
            inds = (i, j)
        else:
            inds = tuple(sorted(inds))
            if not (inds and inds[0] >= 0 and inds[-1] < n and len(set(inds)) == len(inds)):
                _bad_step(path, k, inds, n)
            picked = tuple([current[i] for i in inds])
            for i in reversed(inds):
                del current[i]
            for t in picked:
                for c in once.get(t, t):
                    held[c] -= 1
            union = "".join(picked)
        labels = dict.fromkeys(union)
        if k == last:
            _check_all_taken(current, path)
            result = output
            for c in set(result):
                held[c] += 1
        else:
            result = "".join([c for c in labels if held[c]])
            for c in result:
                held[c] += 1
        current.append(result)
        steps.append((inds, picked, result))
        step_labels.append("".join(labels))
    return tuple(steps), tuple(step_labels)


def _play_pairs_of_two(current: list, output: str, path: list) -> tuple[tuple, tuple]:
    """``_play_path_memo`` of a pairwise ``path`` where every label is held twice (by two
    terms, or by one and the output; no term repeats one), as in most tensor networks. That
    stays so after each step, so a step's result keeps the labels of one of its two terms
    only, in order of appearance, with no count kept (a search plays every path it keeps,
    so this is a hot loop). The terms are built by ``+=`` in plain loops: a comprehension's
    call per step would cost more than the step's work."""
    steps, step_labels = [], []
    last = len(path) - 1
    for k, inds in enumerate(path):
        i, j, a, b = _take_pair(current, path, k, inds)
        only_b = ""
        for c in b:
            if c not in a:
                only_b += c
        if k == last:
            _check_all_taken(current, path)
            result = output
        else:
            result = ""
            for c in a:
                if c not in b:
                    result += c
            result += only_b
        current.append(result)
        steps.append(((i, j), (a, b), result))
        step_labels.append(a + only_b)
    return tuple(steps), tuple(step_labels)


def _take_pair(current: list, path, k: int, inds) -> tuple[int, int, str, str]:
    """Step ``k``'s pair ``inds`` of ``path`` taken out of ``current``: ``(i, j, term i,
    term j)`` with ``i < j``; ``GraphError`` where they are not two positions of it."""
    i, j = inds
    if i > j:
        i, j = j, i
    if not (0 <= i and j < len(current) and i != j):
        _bad_step(path, k, (i, j), len(current))
    b = current.pop(j)
    return i, j, current.pop(i), b


def _check_all_taken(current: list, path) -> None:
    """``GraphError`` where the last step of ``path`` leaves operands in ``current``."""
    if current:
        raise GraphError(f"contraction path {path} leaves {len(current)} operand(s)")


def _bad_step(path, k: int, inds, n: int):
    raise GraphError(f"contraction path {path} step {k} picks {inds} from {n} operand(s)")


@dataclass
class Steps:
    """A path played out: per step the operand positions, their terms and the result term."""

    path: list[tuple[int, ...]]
    steps: list[PlayedStep]
    flops: int
    largest: int      # elements of the largest intermediate (the final result excluded)
    pairwise: bool
    write: int = 0    # elements written: every step's result, the final one included

    @property
    def combo(self) -> int:
        """The cost path searches minimize: FLOPs plus ``COMBO_WRITE_WEIGHT`` per element
        written (``combo_cost``)."""
        return combo_cost(self.flops, self.write)


# One element written costs about as much time as this many FLOPs (cotengra's 'combo'
# factor): a path with lopsided pairwise steps writes large intermediates for few FLOPs.
COMBO_WRITE_WEIGHT = 64


def combo_cost(flops: int, write: int) -> int:
    """FLOPs plus ``COMBO_WRITE_WEIGHT`` per element written: what a contraction path costs
    in time, up to a machine's rate."""
    return flops + COMBO_WRITE_WEIGHT * write


def play(terms: Sequence[str], output: str, sizes: dict, path) -> Steps:
    """Play ``path`` over ``terms`` (``play_path``) and count its FLOPs and largest
    intermediate."""
    path = [tuple(p) for p in path] or [tuple(range(len(terms)))]
    steps = play_path(terms, output, path)
    flops, largest, write = _counted(tuple(terms), output, tuple(path), tuple(sizes.items()))
    return Steps(path, steps, flops, largest, all(len(s[0]) <= 2 for s in steps), write)


@functools.lru_cache(maxsize=256)
def _counted(terms: tuple, output: str, path: tuple, sizes: tuple) -> tuple[int, int, int]:
    """``(flops, largest, write)`` of a played path; memoized: the path search, the
    contraction pass and the FLOP count of its node count the same path of a network."""
    sizes = dict(sizes)
    size = sizes.__getitem__
    prod = math.prod
    steps, step_labels = _play_path_memo(terms, output, path)
    flops, largest, write = 0, 0, 0
    last = len(steps) - 1
    for k, ((_, picked, result), labels) in enumerate(zip(steps, step_labels)):
        elements = prod(map(size, result))
        write += elements
        if elements > largest and k < last:
            largest = elements
        n = len(picked)
        # ``step_flops``' rule, inlined (a call per step is a large share of this hot loop;
        # a test holds the two equal). A result keeps some of its step's labels, each once: all of
        # them where its length is theirs.
        if len(labels) > len(result) or not set(result).issuperset(labels):
            flops += prod(map(size, labels)) * (n if n > 2 else 2)
        else:
            flops += prod(map(size, labels)) * (n - 1 if n > 2 else 1)
    return flops, largest, write


def live_peak(steps, n_terms: int, results, extra=None) -> int:
    """The most a played path holds at once (``steps``: ``play_path``'s over ``n_terms``
    operands, which count nothing): at each step its live intermediates, the step's own
    result (``results[k]``) and ``extra[k]`` where given (a kernel's workspace); an
    intermediate lives from its step to the one that reads it. The one sweep over a path's
    steps (a slicing's working set, pairwise nodes' arena)."""
    current = [0] * n_terms
    total = peak = 0
    for k, (inds, _, _) in enumerate(steps):
        held = total + results[k] + (extra[k] if extra is not None else 0)
        if held > peak:
            peak = held
        for i in reversed(inds):
            total -= current.pop(i)
        current.append(results[k])
        total += results[k]
    return peak


def left_to_right(n_operands: int) -> list[tuple[int, ...]]:
    """The order a multi-operand einsum is written in: ((a b) c) d ..."""
    if n_operands <= 2:
        return [tuple(range(n_operands))]
    return [(0, 1)] + [(0, n_operands - 2 - k) for k in range(n_operands - 2)]


def left_to_right_cost(terms: Sequence[str], output: str, sizes: dict) -> tuple[int, int, int]:
    """``(flops, largest, write)`` of ``play(terms, output, sizes, left_to_right(n))``, in
    time linear in the equation's length: written left to right, a large network's
    accumulated term grows to hundreds of labels, and playing it step by step is quadratic
    in them."""
    if len(terms) <= 2 or 0 in sizes.values():
        s = play(terms, output, sizes, left_to_right(len(terms)))
        return s.flops, s.largest, s.write
    size = sizes.__getitem__
    n = len(terms)
    # the accumulated term holds a label from its first term until its last one (to the end
    # where the output has it): each label is born once and dies once; per step, the
    # product of the sizes born and of those summed away (at step 1 at the earliest)
    last = {c: k for k, t in enumerate(terms) for c in t}
    first = {c: k for k, t in zip(range(n - 1, -1, -1), reversed(terms)) for c in t}
    born = [1] * n
    for c, k in first.items():
        born[k] *= size(c)
    for c in output:
        last.pop(c, None)
    dies, sums = [1] * n, [False] * n     # (a label of size 1 is summed away too)
    for c, k in last.items():
        dies[k or 1] *= size(c)
        sums[k or 1] = True
    acc_elems = born[0]
    flops, largest, write = 0, 0, 0
    for k in range(1, n):
        union_elems = acc_elems * born[k]
        if sums[k]:
            acc_elems = union_elems // dies[k]
            flops += 2 * union_elems
        else:
            acc_elems = union_elems
            flops += union_elems
        write += acc_elems
        if k < n - 1 and acc_elems > largest:
            largest = acc_elems
    return flops, largest, write


def path_flops(equation: str, sizes: dict, path=None) -> int:
    """FLOPs of ``equation`` contracted along ``path`` (None: left to right, as written)."""
    terms, output = split_equation(equation)
    if not path:
        return left_to_right_cost(terms, output, sizes)[0]
    # (counted as ``play`` counts, without its list of steps: a network's FLOP count
    # follows its path search, which counted the same path)
    return _counted(tuple(terms), output, tuple(map(tuple, path)), tuple(sizes.items()))[0]


def label_sizes(equation: str, shapes) -> dict[str, int]:
    """Each label's dimension, read from the operand ``shapes``: where a label is 1 on one
    operand and n on another (NumPy's size-1 broadcasting), n."""
    return dict(_label_sizes(equation, tuple(map(tuple, shapes))))


@functools.lru_cache(maxsize=256)
def _label_sizes(equation: str, shapes: tuple) -> dict[str, int]:
    # memoized (callers get a copy): compiling a network reads its sizes in the contraction
    # pass, its FLOP counts, the kernel's workspace and its program
    terms, _ = split_equation(equation)
    sizes: dict[str, int] = {}
    for t, sh in zip(terms, shapes):
        for c, d in zip(t, sh):
            if sizes.get(c, 1) == 1:
                sizes[c] = int(d)
    return sizes


def default_path(equation: str, shapes, optimize="greedy") -> list[tuple[int, ...]]:
    """opt_einsum's path for ``equation`` on operands of ``shapes``."""
    import opt_einsum

    if len(shapes) <= 2:
        return [tuple(range(len(shapes)))]
    path, _ = opt_einsum.contract_path(equation, *shapes, shapes=True, optimize=optimize)
    return [tuple(p) for p in path]
