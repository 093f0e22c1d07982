"""Sliced contraction: bound the memory of a multi-operand einsum by looping over index ranges.

A contraction ``equation`` played along ``path`` (opt_einsum's linear format) creates one
intermediate per step. *Slicing* a label ``c`` with block ``b`` splits its range into
``ceil(size/b)`` parts and runs the whole path once per part, on operand views restricted
to that part: every intermediate holding ``c`` shrinks by ``size/b``. Slices of a summed
label are added up; slices of an output label write disjoint regions of the result. Steps
whose operands lack a sliced label are recomputed once per part of it: that is the FLOP
overhead of slicing.

``sliced_contract`` is the loop every host backend runs; the dask backend runs the same
slices (``slice_ranges``) as independent tasks. ``contraction_workspace_bytes`` is what the
loop allocates at once, the one rule the slicing pass bounds and the kernels declare.
Choosing the slices is ``contraction.slicing.labels``'s.

IR contract: an einsum node with ``attrs["slices"]`` (labels) and optionally
``attrs["slice_blocks"]`` (index values per slice, aligned with ``slices``; 1 where absent)
and ``attrs["path"]``.
"""

from __future__ import annotations

import math
import sys
from typing import Sequence

import numpy as np
from numpy.lib.stride_tricks import as_strided

from ...analysis.call_bytes import LIST_BYTES_PER_ITEM, call_object_bytes, view_bytes
from ...ir.einsum import split as split_equation
from ...ir.einsum_numpy import promote_operands
from ...observe import progress
from ...runtime import threads
from ..paths import default_path, label_sizes
from ..program.gemm import c_strides
from ..program.run import PathContraction, path_contraction

# ------------------------------------------------------------------------------- workspace

def slice_view_bytes(terms, shapes, labels) -> int:
    """What one slice's operand views take: a view per operand with a sliced label (of
    size above 1; ``operand_view``), and the list of all operands."""
    sliced = set(labels)
    return LIST_BYTES_PER_ITEM * len(terms) + sum(
        view_bytes(len(t)) for t, s in zip(terms, shapes)
        if any(c in sliced and d != 1 for c, d in zip(t, s)))


# The sliced loop's own objects (``sliced_contract``): a slice object per index range of a
# sliced label (with its list's item, as tracemalloc counts it), and beside them the
# slice's index dicts, the lists of sliced labels and the progress activity: an allowance
# that keeps a sliced call's measured peak within its prediction
SLICE_RANGE_BYTES = 56
SLICE_LOOP_BYTES = 2048


def slice_loop_bytes(sizes: dict, block: dict) -> int:
    """What ``sliced_contract``'s loop holds for itself: its copy of the label ``sizes``
    (``sys.getsizeof``: exact for this interpreter), the index ranges of each sliced label
    (``SLICE_RANGE_BYTES`` each) and ``SLICE_LOOP_BYTES``."""
    ranges = sum(len(slice_ranges(sizes[c], b)) for c, b in block.items())
    return sys.getsizeof(sizes) + SLICE_RANGE_BYTES * ranges + SLICE_LOOP_BYTES


def full_slice_shapes(terms, shapes, block: dict) -> list[tuple[int, ...]]:
    """Each operand's shape in the first, full slice of ``block`` (label -> index values
    per slice): every slice is no larger."""
    return [tuple(min(d, block.get(c, d)) for c, d in zip(t, s)) for t, s in zip(terms, shapes)]


def least_sliced_workspace_bytes(n_terms: int, sizes: dict) -> int:
    """A floor under ``contraction_workspace_bytes`` of any path and slicing of a
    contraction of ``n_terms`` operands over labels of ``sizes``: a sliced call's own
    objects (its steps' and operands', its loop's) with no array at all."""
    return call_object_bytes(max(1, n_terms - 1), n_terms) + slice_loop_bytes(sizes, {})


def contraction_workspace_bytes(equation: str, shapes, path, slices, blocks, dtype,
                                workers: int = 1, operand_dtypes=None,
                                contraction: PathContraction | None = None,
                                device: bool = False, forms=None) -> int:
    """What ``sliced_contract`` allocates at once beside its operands and its result, with
    ``workers`` slices in flight: the operands cast to ``dtype`` (those whose
    ``operand_dtypes`` differ), and per slice in flight its program's arena and largest step
    scratch (``Program.peak_bytes``, for the largest slice; the slice's result counted where
    it is not written straight into the result: a summed label sliced, or a region that is
    not C-contiguous; the larger of the full slice's and the one ragged in every label whose
    block leaves a remainder) and its operand views (``slice_view_bytes``), and a result-sized
    buffer for each worker beyond the first where no output label is sliced
    (``parallel_workspace_bytes``). ``device``: on a GPU, whose memory holds the arrays
    only (``Program.peak_bytes``'s ``device_itemsize``; no views, loop or call objects).
    ``forms``: each step's (``program.forms.step_forms``; None: by the rule for where the
    steps run). The one rule the slicing pass bounds and the kernels declare."""
    dtype = np.dtype(dtype)
    terms, output = split_equation(equation)
    shapes = [tuple(s) for s in shapes]
    sizes = label_sizes(equation, shapes)
    contract = contraction or path_contraction(equation, tuple(tuple(p) for p in path),
                                               None if forms is None else tuple(forms), device)
    blocks = [1] * len(slices) if blocks is None else list(blocks)
    block = {c: int(b) for c, b in zip(slices, blocks) if c in sizes}
    sliced = full_slice_shapes(terms, shapes, block) if block else shapes
    strides = [c_strides(s) for s in shapes]
    into_out = _writes_into_result(output, sizes, block)
    on_device = dtype.itemsize if device else None
    peak = contract.program(sliced, dtype, strides).peak_bytes(into_out, on_device)
    # the ragged slice of every label whose block leaves a remainder: it shares the full
    # slice's arena, but may hold more objects (views without its size-1 labels, where a
    # remainder is 1) and other steps' scratch (a step small enough for np.einsum)
    rest = {c: sizes[c] % b for c, b in block.items() if sizes[c] % b}
    if rest:
        ragged = [tuple(rest.get(c, d) for c, d in zip(t, s)) for t, s in zip(terms, sliced)]
        peak = max(peak, contract.program(ragged, dtype, strides, sliced).peak_bytes(
            into_out, on_device))
    per_slice = peak + (slice_view_bytes(terms, shapes, block) if block and not device else 0)
    # the loop's objects, and its list of the full slice's shapes (``sliced_contract``)
    loop = slice_loop_bytes(sizes, block) + sys.getsizeof(sliced) + \
        sum(map(sys.getsizeof, sliced)) if block and not device else 0
    name = dtype.name               # a Python property in NumPy: read once, not per operand
    casts = sum(math.prod(s) * dtype.itemsize for s, dt in zip(shapes, operand_dtypes or ())
                if dt != name and np.dtype(dt) != dtype)
    out_bytes = math.prod(sizes[c] for c in output) * dtype.itemsize
    outer = splits_result(equation, sizes, slices, blocks)
    return casts + loop + parallel_workspace_bytes(max(1, int(workers)), outer, per_slice,
                                                   out_bytes)


def _writes_into_result(output: str, sizes: dict, block: dict) -> bool:
    """Whether each slice's result is written straight into its region of the result: no
    summed label is sliced, and a region is C-contiguous (asked of a stand-in array with
    the result's strides and no memory)."""
    if not block:
        return True
    if any(c not in output for c in block):
        return False
    full = tuple(sizes[c] for c in output)
    if 0 in full:
        return True
    stand_in = as_strided(np.empty(1, np.int8), full, c_strides(full))
    return stand_in[tuple(slice(0, block.get(c, sizes[c])) for c in output)].flags.c_contiguous

# ---------------------------------------------------------------------------------- running


def slice_ranges(size: int, block: int) -> list[slice]:
    """The index ranges of one sliced label: ``block`` values each, the last one ragged."""
    block = max(1, int(block))
    return [slice(s, min(s + block, size)) for s in range(0, size, block)] or [slice(0, 0)]


_WHOLE = slice(None)


def slice_index(term: str, shape, where: dict) -> tuple:
    """The index restricting an operand labelled ``term`` of ``shape`` to the slice
    ``where``; a dim of size 1 is kept whole (it broadcasts against the label's range, as
    ``np.einsum`` broadcasts it, so every slice reads it)."""
    return tuple([_WHOLE if d == 1 else where.get(c, _WHOLE)     # a list: see
                  for c, d in zip(term, shape)])                  # PathContraction.__call__


def operand_view(array, term: str, where: dict):
    """``array`` (labelled ``term``) restricted to the slice ``where`` (a view for NumPy)."""
    if not any(c in where for c in term):
        return array
    return array[slice_index(term, array.shape, where)]


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
    ``equation`` along ``path`` to run (default a shared one, which keeps no arenas; its
    ``xp`` is the arrays' module: NumPy, or cupy)."""
    xp = contraction.xp if contraction is not None else np
    arrays = promote_operands(arrays, xp)
    if path is None:
        path = default_path(equation, [a.shape for a in arrays])
    contract = contraction or path_contraction(equation, tuple(tuple(p) for p in path))
    if not slices:   # one run of the whole path, straight into ``out``
        res = contract.run(arrays, out, matmul, promoted=True)
        if out is None:
            return xp.array(res, copy=True) if any(xp.may_share_memory(res, a)
                                                   for a in arrays) else res
        if res is not out:
            xp.copyto(out, res, casting="unsafe")
        return out
    terms, output = contract.terms, contract.output
    sizes = label_sizes(equation, [a.shape for a in arrays])
    blocks = [1] * len(slices) if blocks is None else list(blocks)
    pairs = [(c, b) for c, b in zip(slices, blocks) if c in sizes]
    shape = tuple(sizes[c] for c in output)
    dtype = arrays[0].dtype   # (promoted: every operand's)
    if out is None:
        out = xp.empty(shape, dtype=dtype)
    outer = [(c, b) for c, b in pairs if c in output]
    inner = [(c, b) for c, b in pairs if c not in output]
    # slices are made one at a time from their index: a list of them grows with the count
    regions = _Combinations(outer, sizes)
    parts = _Combinations(inner, sizes)

    # a ragged slice's program takes the full slice's arena layout
    full = full_slice_shapes(terms, [a.shape for a in arrays], dict(pairs))
    with progress.activity(f"sliced contraction {equation!r}") as act:
        if act is not None:
            act.set_phase("slices", total=len(regions) * len(parts))
        _run_slices(contract, arrays, terms, output, regions, parts, out, shape, dtype,
                    workers, matmul, act, full)
    return out


def _run_slices(contract, arrays, terms, output, regions, parts, out, shape, dtype,
                workers, matmul, act, full) -> None:
    """Every slice into ``out`` on up to ``workers`` threads (see ``sliced_contract``);
    ``act``: the progress activity told of each slice done, or None; ``full``: the full
    slice's operand shapes."""

    xp = contract.xp

    def fill(target, region, lo: int, hi: int) -> None:
        for k in range(lo, hi):
            if act is not None:
                act.advance()
            where = {**region, **parts[k]}
            views = [operand_view(a, t, where) for a, t in zip(arrays, terms)]
            if k == lo:
                res = contract.run(views, target, matmul, full, promoted=True)
                if res is not target:
                    xp.copyto(target, res, casting="unsafe")
            else:
                res = contract.run(views, None, matmul, full, promoted=True)
                target += res
            # (dropped before the next slice's result is made: kept until it is rebound, two
            # slice results would be alive at once where the workspace counts one)
            del res
        if lo >= hi:  # a summed label of size 0: the empty sum
            target[...] = 0

    split = len(regions) > 1          # as splits_result says
    workers = max(1, min(int(workers), len(regions) if split else len(parts)))
    if workers == 1:
        for r in range(len(regions)):
            region = regions[r]
            fill(operand_view(out, output, region), region, 0, len(parts))
    elif split:
        def run_regions(span):
            for r in range(*span):
                region = regions[r]
                fill(operand_view(out, output, region), region, 0, len(parts))
        threads.run_parallel(run_regions, threads.split(len(regions), workers), workers)
    else:
        def run_parts(span):
            target = out if span[0] == 0 else xp.empty(shape, dtype=dtype)
            fill(target, regions[0], span[0], span[1])
            return target
        partial = threads.run_parallel(run_parts, threads.split(len(parts), workers), workers)
        for p in partial[1:]:
            out += p


class _Combinations:
    """The slices of ``pairs`` (label, block) by index, row-major (the last label
    fastest), each ``{label: slice}`` made when asked for."""

    def __init__(self, pairs, sizes: dict):
        self.labels = [c for c, _ in pairs]
        self.ranges = [slice_ranges(sizes[c], b) for c, b in pairs]

    def __len__(self) -> int:
        return math.prod(len(r) for r in self.ranges)

    def __getitem__(self, k: int) -> dict:
        where = {}
        for c, r in zip(reversed(self.labels), reversed(self.ranges)):
            k, j = divmod(k, len(r))
            where[c] = r[j]
        return where


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

