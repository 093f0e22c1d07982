"""Sliced contraction: bound the memory of a multi-operand einsum by looping over index ranges.

A contraction ``equation`` played along ``path`` (opt_einsum's linear format) creates one
intermediate per step. *Slicing* a label ``c`` with block ``b`` splits its range into
``ceil(size/b)`` parts and runs the whole path once per part, on operand views restricted
to that part: every intermediate holding ``c`` shrinks by ``size/b``. Slices of a summed
label are added up; slices of an output label write disjoint regions of the result. Steps
whose operands lack a sliced label are recomputed once per part of it: that is the FLOP
overhead of slicing.

``find_slices`` chooses labels and blocks greedily, as cotengra's ``SliceFinder`` does (it
halves a label's block at a time, so a size-2 bond is sliced fully, as cotengra slices, and a
size-4096 dimension in a few ranges): each round takes the move that removes the most
excess memory per unit of added FLOPs. ``sliced_contract`` is the loop every host backend
runs; the dask backend runs the same slices (``slice_ranges``) as independent tasks.

IR contract: an einsum node with ``attrs["slices"]`` (labels) and optionally
``attrs["slice_blocks"]`` (index values per slice, aligned with ``slices``; 1 where absent)
and ``attrs["path"]``.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from . import threads
from .contraction_program import path_contraction
from .einsum import promote_operands
from .einsum import split as split_equation
from .errors import GraphError
from .paths import default_path, label_sizes, play_path, step_flops

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
    current = [0] * n_terms  # elements alive by path position; operands are views (0)
    flops, working, results = 0, 0, []
    for inds, picked, result in steps:
        idx = set("".join(picked))
        recompute = math.prod(p for c, p in parts.items() if c not in idx)
        flops += step_flops(idx, bool(idx - set(result)), len(picked), sizes) * recompute
        elems = math.prod(per[c] for c in result)
        results.append(elems)
        working = max(working, sum(current) + elems)  # operands live while the result is written
        for i in reversed(inds):
            current.pop(i)
        current.append(elems)
    summed = math.prod(p for c, p in parts.items() if c not in output)
    flops += (summed - 1) * math.prod(sizes[c] for c in output)
    return SliceCost(int(flops), max(results[:-1], default=0), working,
                     math.prod(parts.values()), tuple(results))


def contraction_workspace_bytes(equation: str, shapes, path, slices, blocks,
                                itemsize: int) -> int:
    """What ``sliced_contract`` holds at once beside its result: one slice's live
    intermediates. Not counted: the operand copies ``tensordot`` makes inside a step (on a
    4x5 lattice at bond 6 a run measured 82 KB against 36 KB predicted)."""
    terms, output = split_equation(equation)
    sizes = label_sizes(equation, shapes)
    if path is None:
        path = default_path(equation, shapes)
    steps = play_path(terms, output, path)
    blocks = [1] * len(slices) if blocks is None else list(blocks)
    blocks = {c: b for c, b in zip(slices, blocks) if c in sizes}
    return slice_cost(steps, len(terms), output, sizes, blocks).working * itemsize


@dataclass(frozen=True)
class SlicePlan:
    """The slicing chosen for one contraction.

    ``labels``/``blocks``: what to slice and the index values per slice; ``parts``: slices per
    label; ``flops``/``flops_unsliced``: FLOPs with and without slicing (as opt_einsum counts,
    plus the additions that sum the slices); ``largest_bytes``: the largest per-slice
    intermediate; ``peak_bytes``: the predicted peak of the host loop (result + per-slice
    working set); ``task_bytes``: one slice's operands + working set (a dask task). The
    working set counts intermediates, not the transposed operand copies ``tensordot`` may
    make within a step (up to twice a step's bytes)."""

    labels: tuple[str, ...]
    blocks: tuple[int, ...]
    parts: tuple[int, ...]
    n_slices: int
    flops: int
    flops_unsliced: int
    largest_bytes: int
    largest_unsliced_bytes: int
    peak_bytes: int
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
                "predicted_peak_bytes": self.peak_bytes, "task_peak_bytes": self.task_bytes}


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


def find_slices(equation: str, sizes: dict, path, itemsize: int, limit: int) -> SlicePlan:
    """Slices of ``equation`` (along ``path``) that keep every intermediate within ``limit``
    bytes, greedily (module docstring). Raises ``GraphError`` (message with the numbers)
    where no slicing can: an operand or the result alone exceeds the limit."""
    terms, output = split_equation(equation)
    steps = play_path(terms, output, path)
    limit_elems = limit / itemsize
    for k, t in enumerate(terms + [output]):
        elems = math.prod(sizes[c] for c in t)
        if elems > limit_elems:
            what = "the result" if k == len(terms) else f"operand {k}"
            raise GraphError(f"no slicing of {equation!r} fits memory_limit={limit} bytes: "
                             f"{what} {t!r} alone is {elems * itemsize} bytes "
                             f"({elems} elements of {itemsize} bytes)")
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
            raise GraphError(f"no slicing of {equation!r} fits memory_limit={limit} bytes: "
                             f"intermediate {steps[k][2]!r} stays {state.elems[k] * itemsize} "
                             "bytes with every label sliced to one index")
        state.apply(best[1], best[2])
    _relax(state)
    blocks = dict(state.blocks)
    cost = slice_cost(steps, len(terms), output, sizes, blocks)
    order = [c for c in dict.fromkeys(equation) if c in blocks]
    parts = tuple(-(-sizes[c] // blocks[c]) for c in order)
    out_elems = math.prod(sizes[c] for c in output)
    operand_elems = sum(math.prod(blocks.get(c, sizes[c]) for c in t) for t in terms)
    return SlicePlan(labels=tuple(order), blocks=tuple(blocks[c] for c in order), parts=parts,
                     n_slices=cost.n_slices, flops=cost.flops, flops_unsliced=base.flops,
                     largest_bytes=cost.largest * itemsize,
                     largest_unsliced_bytes=base.largest * itemsize,
                     peak_bytes=(out_elems + cost.working) * itemsize,
                     task_bytes=(operand_elems + cost.working) * itemsize)


def slice_and_repath(equation: str, sizes: dict, path, itemsize: int, limit: int,
                     optimize="greedy", rounds: int = 2) -> tuple[list, SlicePlan]:
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


# ---------------------------------------------------------------------------------- running


def slice_ranges(size: int, block: int) -> list[slice]:
    """The index ranges of one sliced label: ``block`` values each, the last one ragged."""
    block = max(1, int(block))
    return [slice(s, min(s + block, size)) for s in range(0, size, block)] or [slice(0, 0)]


def slice_combinations(labels: Sequence[str], sizes: dict, blocks) -> Iterator[dict]:
    """Every slice: a ``{label: slice}`` per combination of the labels' ranges (row-major)."""
    ranges = [slice_ranges(sizes[c], b) for c, b in zip(labels, blocks)]
    for combo in itertools.product(*ranges):
        yield dict(zip(labels, combo))


def operand_view(array, term: str, where: dict):
    """``array`` (labelled ``term``) restricted to the slice ``where`` (a view for NumPy)."""
    if not any(c in where for c in term):
        return array
    return array[tuple(where.get(c, slice(None)) for c in term)]


def sliced_contract(equation: str, path, slices, arrays: Sequence[np.ndarray], out=None,
                    blocks=None, workers: int = 1, matmul=None, contraction=None):
    """``einsum(equation, *arrays)`` along ``path``, looping over ``slices`` (labels) in
    ranges of ``blocks`` index values (default 1 per label: each value its own slice).

    Summed labels accumulate into the result; output labels fill disjoint regions. Memory:
    the result plus one slice's intermediates per worker. ``path`` None: opt_einsum's
    greedy path. ``out`` (C-contiguous, the result's shape and dtype) receives the result if
    given. ``workers`` > 1 runs slices at once on graphopt's worker threads (one BLAS thread
    each): output regions are shared out whole; where only summed labels are sliced, each
    worker sums its run of slices into a buffer of the result's size (``slice_workers``
    counts it), added up in worker order, so the result is the same on every call.
    ``matmul(a, b, c)`` runs the steps' GEMMs; ``contraction``: the ``PathContraction`` of
    ``equation`` along ``path`` to run (default a shared one, which keeps no arenas)."""
    arrays = promote_operands(arrays)
    if path is None:
        path = default_path(equation, [a.shape for a in arrays])
    contract = contraction or path_contraction(equation, tuple(tuple(p) for p in path))
    if not slices:   # one run of the whole path, straight into ``out``
        res = contract(*arrays, out=out, matmul=matmul)
        if out is None:
            return np.array(res, copy=True) if any(np.may_share_memory(res, a)
                                                   for a in arrays) else res
        if res is not out:
            np.copyto(out, res, casting="unsafe")
        return out
    terms, output = split_equation(equation)
    sizes = label_sizes(equation, [a.shape for a in arrays])
    blocks = [1] * len(slices) if blocks is None else list(blocks)
    pairs = [(c, b) for c, b in zip(slices, blocks) if c in sizes]
    shape = tuple(sizes[c] for c in output)
    dtype = np.result_type(*arrays)
    if out is None:
        out = np.empty(shape, dtype=dtype)
    outer = [(c, b) for c, b in pairs if c in output]
    inner = [(c, b) for c, b in pairs if c not in output]
    regions = list(slice_combinations([c for c, _ in outer], sizes, [b for _, b in outer]))
    parts = list(slice_combinations([c for c, _ in inner], sizes, [b for _, b in inner]))

    def fill(target, region, some_parts) -> None:
        first = True
        for part in some_parts:
            where = {**region, **part}
            views = [operand_view(a, t, where) for a, t in zip(arrays, terms)]
            if first:
                res = contract(*views, out=target, matmul=matmul)
                if res is not target:
                    np.copyto(target, res, casting="unsafe")
                first = False
                continue
            res = contract(*views, matmul=matmul)
            target += res
        if first:  # a summed label of size 0: the empty sum
            target[...] = 0

    split = len(regions) > 1          # as splits_result says
    workers = max(1, min(int(workers), len(regions) if split else len(parts)))
    if workers == 1:
        for region in regions:
            fill(operand_view(out, output, region), region, parts)
    elif split:
        def run_regions(span):
            for region in regions[span[0]:span[1]]:
                fill(operand_view(out, output, region), region, parts)
        threads.run_parallel(run_regions, threads.split(len(regions), workers), workers)
    else:
        def run_parts(span):
            target = out if span[0] == 0 else np.empty(shape, dtype=dtype)
            fill(target, regions[0], parts[span[0]:span[1]])
            return target
        partial = threads.run_parallel(run_parts, threads.split(len(parts), workers), workers)
        for p in partial[1:]:
            out += p
    return out


def slice_workers(n_slices: int, outer: bool, workspace_bytes: int, out_bytes: int,
                  limit: int | None, budget: int) -> int:
    """Slices ``sliced_contract`` may run at once: at most ``budget`` threads and
    ``n_slices``, and, under ``limit`` bytes, as many as ``workspace_bytes`` each (what
    the caller bounds one slice by; plus a result-sized buffer each beyond the first where
    no output label is sliced, ``outer`` False) fit in it."""
    most = max(1, min(int(budget), int(n_slices)))
    if limit is None:
        return most
    for w in range(most, 1, -1):
        if parallel_workspace_bytes(w, outer, workspace_bytes, out_bytes) <= limit:
            return w
    return 1


def splits_result(equation: str, sizes: dict, slices, blocks) -> bool:
    """Whether the slices cut the result into more than one region (an output label in
    more than one range): slices run at once then write disjoint regions; otherwise each
    worker beyond the first sums its slices into a result-sized buffer."""
    _, output = split_equation(equation)
    blocks = [1] * len(slices) if blocks is None else list(blocks)
    return any(c in output and len(slice_ranges(sizes[c], b)) > 1
               for c, b in zip(slices, blocks) if c in sizes)


def parallel_workspace_bytes(workers: int, outer: bool, workspace_bytes: int,
                             out_bytes: int) -> int:
    """What ``sliced_contract`` holds beside its result with ``workers`` slices at once:
    each one's ``workspace_bytes``, and a result-sized buffer for each worker beyond the
    first where no output label is sliced (``outer`` False)."""
    return workers * workspace_bytes + (0 if outer else (workers - 1) * out_bytes)
