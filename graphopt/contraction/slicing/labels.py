"""Choosing slices: which labels of a contraction to slice, in blocks of how many values.

``find_slices`` chooses labels and blocks greedily, as cotengra's ``SliceFinder`` does (it
halves a label's block at a time, so a size-2 bond is sliced fully, as cotengra slices, and a
size-4096 dimension in a few ranges): each round takes the move that removes the most
excess memory per unit of added FLOPs, until every intermediate of a slice is within a
bound. ``slice_and_repath`` searches the path again for the sliced sizes (the slices change
which order is cheap, as cotengra's slice-and-reconfigure). ``fit_slices`` tightens that
bound until what running the slices really allocates
(``sliced_contraction.contraction_workspace_bytes``) fits a memory budget.
Running the slices is ``contraction.slicing.run``'s.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ...errors import GraphError
from ...ir.einsum import abbreviate
from ...ir.einsum import split as split_equation
from ..paths import default_path, label_sizes, live_peak, play_path, step_flops
from .run import contraction_workspace_bytes

# ------------------------------------------------------------------------------------ costs


@dataclass(frozen=True)
class SliceCost:
    """What a slicing costs: FLOPs over all slices (accumulation included), the largest
    per-slice intermediate and the per-slice working set (elements), the slice count."""

    flops: int
    largest: int
    working: int
    n_slices: int
    sizes: tuple[int, ...]   # per step: result elements per slice


def slice_cost(steps, n_terms: int, output: str, sizes: dict,
               blocks: dict[str, int]) -> SliceCost:
    """Cost of running ``steps`` (``play_path`` over ``n_terms`` operands) once per slice of
    ``blocks``."""
    parts = {c: -(-sizes[c] // b) for c, b in blocks.items()}
    per = {c: blocks.get(c, s) for c, s in sizes.items()}
    flops, results = 0, []
    for _, picked, result in steps:
        idx = set("".join(picked))
        recompute = math.prod(p for c, p in parts.items() if c not in idx)
        flops += step_flops(idx, bool(idx - set(result)), len(picked), sizes) * recompute
        results.append(math.prod(per[c] for c in result))
    # operands are views (nothing); they live while a step's result is written
    working = live_peak(steps, n_terms, results)
    summed = math.prod(p for c, p in parts.items() if c not in output)
    flops += (summed - 1) * math.prod(sizes[c] for c in output)
    return SliceCost(int(flops), max(results[:-1], default=0), working,
                     math.prod(parts.values()), tuple(results))


@dataclass(frozen=True)
class Slicing:
    """The slicing chosen for one contraction.

    ``labels``/``blocks``: what to slice and the index values per slice; ``parts``: slices per
    label; ``flops``/``flops_unsliced``: FLOPs with and without slicing (as opt_einsum counts,
    plus the additions that sum the slices); ``largest_bytes``: the largest per-slice
    intermediate; ``task_bytes``: one slice's operands + its live intermediates (a dask
    task; the host loop's exact workspace is ``sliced_contraction.contraction_workspace_bytes``)."""

    labels: tuple[str, ...]
    blocks: tuple[int, ...]
    parts: tuple[int, ...]
    n_slices: int
    flops: int
    flops_unsliced: int
    largest_bytes: int
    largest_unsliced_bytes: int
    task_bytes: int

    @property
    def flop_overhead(self) -> float:
        return self.flops / self.flops_unsliced if self.flops_unsliced else 1.0

    def to_dict(self) -> dict:
        return {"slices": list(self.labels), "slice_blocks": list(self.blocks),
                "parts": list(self.parts), "n_slices": self.n_slices, "flops": self.flops,
                "flops_unsliced": self.flops_unsliced,
                "flop_overhead": round(self.flop_overhead, 4),
                "largest_intermediate_bytes": self.largest_bytes,
                "largest_intermediate_unsliced_bytes": self.largest_unsliced_bytes,
                "task_peak_bytes": self.task_bytes}


class _Slicer:
    """The greedy search's state: per step its FLOPs and its per-slice result size, kept
    up to date move by move, so one round costs one pass over the steps' labels."""

    def __init__(self, steps, output: str, sizes: dict, limit_elems: float):
        self.sizes, self.output, self.limit = sizes, set(output), limit_elems
        self.idx = [set("".join(picked)) for _, picked, _ in steps]
        self.res = [r for _, _, r in steps]
        self.base = [step_flops(i, bool(i - set(r)), len(p), sizes)
                     for i, (_, p, r) in zip(self.idx, steps)]
        self.recompute = [1] * len(steps)        # slices of labels a step lacks
        self.elems = [math.prod(sizes[c] for c in r) for r in self.res]
        self.out_elems = math.prod(sizes[c] for c in output)
        self.summed = 1                          # slices of summed labels
        self.blocks: dict[str, int] = {}
        self.in_step = {c: [k for k, i in enumerate(self.idx) if c in i] for c in sizes}
        self.in_result = {c: [k for k, r in enumerate(self.res) if c in r] for c in sizes}

    def parts(self, c, block=None) -> int:
        b = self.blocks.get(c, self.sizes[c]) if block is None else block
        return -(-self.sizes[c] // b) if b else 1

    @property
    def flops(self) -> int:
        return sum(f * r for f, r in zip(self.base, self.recompute)) + \
            (self.summed - 1) * self.out_elems

    def _bits(self, e: float) -> float:
        return math.log2(e / self.limit) if e > self.limit else 0.0

    @property
    def excess(self) -> float:
        """Bits by which the intermediates exceed the limit, summed (0: every one fits)."""
        return sum(self._bits(e) for e in self.elems[:-1])

    def trial(self, c, block) -> tuple[float, int]:
        """``(excess removed, FLOPs after)`` of giving label ``c`` the block ``block``."""
        b, p, q = self.blocks.get(c, self.sizes[c]), self.parts(c), self.parts(c, block)
        last = len(self.elems) - 1
        gain = sum(self._bits(self.elems[k]) - self._bits(self.elems[k] // b * block)
                   for k in self.in_result[c] if k != last)
        total = sum(f * r for f, r in zip(self.base, self.recompute))
        inside = sum(self.base[k] * self.recompute[k] for k in self.in_step[c])
        summed = self.summed if c in self.output else self.summed // p * q
        return gain, inside + (total - inside) // p * q + (summed - 1) * self.out_elems

    def apply(self, c, block) -> None:
        b, p, q = self.blocks.get(c, self.sizes[c]), self.parts(c), self.parts(c, block)
        inside = set(self.in_step[c])
        self.recompute = [r if k in inside else r // p * q for k, r in enumerate(self.recompute)]
        for k in self.in_result[c]:
            self.elems[k] = self.elems[k] // b * block
        if c not in self.output:
            self.summed = self.summed // p * q
        if block >= self.sizes[c]:
            self.blocks.pop(c, None)
        else:
            self.blocks[c] = block

    def fits_after(self, c, block) -> bool:
        b, last = self.blocks.get(c, self.sizes[c]), len(self.elems) - 1
        return all(self.elems[k] // b * block <= self.limit for k in self.in_result[c]
                   if k != last)


def find_slices(equation: str, sizes: dict, path, itemsize: int, limit: int) -> Slicing:
    """Slices of ``equation`` (along ``path``) that keep every intermediate within ``limit``
    bytes, greedily (module docstring); the operands and the result are the caller's (not
    bounded). Raises ``GraphError`` (message with the numbers) where no slicing can: an
    intermediate over the limit with every label sliced to one index."""
    terms, output = split_equation(equation)
    steps = play_path(terms, output, path)
    limit_elems = limit / itemsize
    base = slice_cost(steps, len(terms), output, sizes, {})
    state = _Slicer(steps, output, sizes, limit_elems)
    while state.excess > 0:
        over = {c for e, r in zip(state.elems[:-1], state.res) if e > limit_elems for c in r}
        best = None
        for c in sorted(over, key=equation.index):
            b = state.blocks.get(c, sizes[c])
            if b <= 1:
                continue
            gain, flops = state.trial(c, -(-b // 2))
            extra = math.log2(max(flops, 1) / max(state.flops, 1))
            score = (gain / (extra + 1e-3), -flops)
            if best is None or score > best[0]:
                best = (score, c, -(-b // 2))
        if best is None:  # every label of an over-limit intermediate is sliced to one value
            k = next(i for i, e in enumerate(state.elems) if e > limit_elems)
            raise GraphError(f"no slicing of {abbreviate(equation)} keeps its intermediates "
                             f"within {limit} bytes: intermediate {steps[k][2]!r} stays "
                             f"{state.elems[k] * itemsize} bytes with every label sliced to "
                             "one index")
        state.apply(best[1], best[2])
    _relax(state)
    return slice_plan(equation, sizes, path, itemsize, state.blocks, steps, base)


def slice_plan(equation: str, sizes: dict, path, itemsize: int, blocks: dict,
               steps=None, base: SliceCost | None = None) -> Slicing:
    """The ``Slicing`` of slicing ``equation`` along ``path`` in ``blocks`` (label ->
    index values per slice); ``steps`` and ``base`` (the path played, its unsliced cost)
    where the caller has them."""
    terms, output = split_equation(equation)
    steps = steps if steps is not None else play_path(terms, output, path)
    base = base or slice_cost(steps, len(terms), output, sizes, {})
    blocks = {c: int(b) for c, b in blocks.items() if c in sizes and b < sizes[c]}
    cost = slice_cost(steps, len(terms), output, sizes, blocks)
    order = [c for c in dict.fromkeys(equation) if c in blocks]
    parts = tuple(-(-sizes[c] // blocks[c]) for c in order)
    operand_elems = sum(math.prod(blocks.get(c, sizes[c]) for c in t) for t in terms)
    return Slicing(labels=tuple(order), blocks=tuple(blocks[c] for c in order), parts=parts,
                     n_slices=cost.n_slices, flops=cost.flops, flops_unsliced=base.flops,
                     largest_bytes=cost.largest * itemsize,
                     largest_unsliced_bytes=base.largest * itemsize,
                     task_bytes=(operand_elems + cost.working) * itemsize)


def slice_and_repath(equation: str, sizes: dict, path, itemsize: int, limit: int,
                     optimize="greedy", rounds: int = 2) -> tuple[list, Slicing]:
    """``find_slices`` on ``path``, then on paths searched for the sliced sizes (the slices
    change which order is cheap, as cotengra's slice-and-reconfigure); the cheapest result
    as ``(path, plan)``."""
    terms, _ = split_equation(equation)
    best_path, best = [tuple(p) for p in path], find_slices(equation, sizes, path, itemsize,
                                                            limit)
    for _ in range(rounds):
        if not best.labels or len(terms) <= 2:
            break
        block = dict(zip(best.labels, best.blocks))
        shapes = [tuple(block.get(c, sizes[c]) for c in t) for t in terms]
        try:
            path = default_path(equation, shapes, optimize)
        except (TypeError, ValueError, KeyError):
            path = default_path(equation, shapes)
        plan = find_slices(equation, sizes, path, itemsize, limit)
        if (plan.flops, plan.n_slices) >= (best.flops, best.n_slices):
            break
        best_path, best = path, plan
    return best_path, best


def _relax(state: _Slicer) -> None:
    """Undo halvings the final slicing does not need (greedy rounds can overshoot): double a
    block back while everything still fits, the largest FLOP saving first."""
    while True:
        best = None
        for c, b in state.blocks.items():
            nb = min(2 * b, state.sizes[c])
            if state.fits_after(c, nb):
                flops = state.trial(c, nb)[1]
                if best is None or flops < best[0]:
                    best = (flops, c, nb)
        if best is None or best[0] > state.flops:
            return
        state.apply(best[1], best[2])




# A slicing whose exact workspace misses the budget is searched again with every
# intermediate bounded by at most this fraction of the previous bound.
TIGHTEN = 0.8
FIT_ROUNDS = 16
EXTRA_ROUNDS = 2
# A slicing that costs more than this many times the unsliced FLOPs is refused: a limit
# that only such a slicing meets is one the path, not slicing, must meet.
MAX_FLOP_OVERHEAD = 1000.0


def fit_slices(equation: str, shapes, path, dtype, budget: int, optimize="greedy",
               workers: int = 1, operand_dtypes=None,
               repath: bool = True) -> tuple[list, Slicing, int]:
    """Slices of ``equation`` along ``path`` whose run with ``workers`` slices at once
    allocates at most ``budget`` bytes beside its operands and result
    (``sliced_contraction.contraction_workspace_bytes``), as ``(path, plan, workspace
    bytes)``. Each intermediate is first bounded by ``budget / workers``; the bound tightens
    until the workspace, which also holds the arena's other live intermediates and the
    steps' operand copies, fits, and ``EXTRA_ROUNDS`` tighter bounds after that are tried
    too; the fewest FLOPs that fit win. With ``repath``, the path is then searched again
    once for the sliced sizes at that bound (``slice_and_repath`` with one round:
    ``optimize``, which may be a costly search, runs there only, once) and kept where it
    fits with fewer FLOPs. Raises
    ``GraphError`` with the numbers where no slicing fits within ``MAX_FLOP_OVERHEAD`` times
    the FLOPs."""
    sizes = label_sizes(equation, shapes)
    itemsize = np.dtype(dtype).itemsize
    bound, least, fewest, best, fit_bound = budget // max(1, workers), None, "", None, None

    def workspace(p, plan) -> int:
        return contraction_workspace_bytes(equation, shapes, p, plan.labels, plan.blocks,
                                           dtype, workers, operand_dtypes)

    extra = EXTRA_ROUNDS
    for _ in range(FIT_ROUNDS):
        if bound < itemsize or extra < 0:
            break
        try:
            plan = find_slices(equation, sizes, path, itemsize, bound)
        except GraphError:
            break
        if plan.flop_overhead > MAX_FLOP_OVERHEAD:
            fewest = f"{fewest}; slicing further costs {plan.flop_overhead:.3g}x the FLOPs"
            break
        ws = workspace(path, plan)
        if ws <= budget:
            if best is None or plan.flops < best[1].flops:
                best, fit_bound = (list(path), plan, ws), bound
            extra -= 1
        elif least is None or ws < least:
            least, fewest = ws, f"; the least found was {ws} bytes"
        bound = min(int(bound * TIGHTEN), int(bound * budget / ws))
    if repath and (fit_bound or bound) >= itemsize:
        try:
            p, plan = slice_and_repath(equation, sizes, path, itemsize, fit_bound or bound,
                                       optimize, rounds=1)
            ws = workspace(p, plan)
            if ws <= budget and plan.flop_overhead <= MAX_FLOP_OVERHEAD and \
                    (best is None or plan.flops < best[1].flops):
                best = (p, plan, ws)
        except GraphError:
            pass
    if best is not None:
        return best
    raise GraphError(f"no slicing of {abbreviate(equation)} runs within {budget} bytes "
                     f"({workers} slice(s) at once){fewest}")
