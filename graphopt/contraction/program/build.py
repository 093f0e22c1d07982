"""A contraction's program: each step of a path planned once per operand shapes.

``build_program(terms, output, path, shapes, dtype, strides)`` is what
``run.PathContraction`` runs. The steps are ``paths.play_path``'s, so every intermediate
has the label order the contraction pass gives its pairwise nodes. Each step takes the form
``step_forms`` gives it (the contraction's, by the backend's rates):

- a pairwise step whose labels map onto a (batched) matrix product is one GEMM
  (``gemm.gemm_of``, run by ``gemm.run_gemm`` with the caller's ``matmul``: BLAS's, or
  in integer, bool or float16 operands ``matmul.einsum_matmul``'s), unless the rates give
  it to ``np.einsum`` (a small step, or in a BLAS dtype one that sums nothing);
- any other step is ``np.einsum`` on the step's own equation: a small step, an outer or
  broadcast product (nothing summed), a trace or diagonal, a size-1 label broadcast
  against a larger one, a one-operand step. A step over more than two operands is
  ``einsum_numpy.evaluate``'s.

Intermediates live in one arena whose offsets are assigned over the steps' lifetimes
(``liveness.assign_arena_offsets``, as the memory pass assigns a plan's), or back to back
where they are at most ``UNSHARED_ARENA_BYTES`` in all, or in the places of a larger
program of the same path (a sliced contraction's full slice, for a ragged one). Beside it a
step may allocate scratch: ``run_gemm``'s pre-summed operands, the copies it makes of
operands whose matrix is not a view (known exactly at planning, from the operands' strides:
inputs and slice views as given, GEMM products kept as permuted views), ``einsum_matmul``'s
copy of one operand into another memory order, and a product written before permuting it
into ``out``; a step's copies of at least ``ARENA_COPY_BYTES`` are buffers of the arena
that live within their step (``ProgramStep.copies``). ``Program.peak_bytes`` is the arena
plus the largest step's scratch and the call's Python objects: what a call allocates at
once, as ``tracemalloc`` measures it.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

import numpy as np

from ...analysis.call_bytes import (
    GEMM_VIEW_BYTES,
    LIST_BYTES_PER_ITEM,
    PAIR_BYTES,
    call_object_bytes,
    view_bytes,
)
from ...analysis.liveness import assign_arena_offsets, stacked_offsets
from ...ir.einsum import first_use_equation, split
from ...ir.einsum_numpy import evaluate, plain_einsum, to_ascii
from ..paths import label_sizes, play_path
from ..rates import DEVICE_RATES, host_rates
from .einsum_bytes import np_einsum_bytes, np_einsum_fills_no_buffer
from .forms import step_forms, step_gemm, step_sizes
from .gemm import (
    BLAS_DTYPES,
    Gemm,
    c_strides,
    copies_bytes,
    operand_copies,
    operand_scratch,
    run_gemm,
)

# Intermediates of at most this many bytes in all each get their own place in the arena:
# sharing would save less than this, and its best fit is quadratic in the intermediates
# (most of a large network's planning time, for a few tens of kB).
UNSHARED_ARENA_BYTES = 1 << 17
# A step whose GEMM copies at least this many bytes of its operands makes the copies in the
# program's arena (kept between calls), not in memory NumPy allocates: glibc's malloc maps
# fresh pages for such a block (its default mmap threshold), which every call then faults
# in again, most of a large network's page faults. Smaller copies come from memory malloc
# reuses, and their places' views would weigh more than they save.
ARENA_COPY_BYTES = 1 << 17


def copy_places_bytes(steps) -> int:
    """What an arena's views of its steps' operand-copy places hold (``_Arena.places``: a
    list of an item a step; a pair, and a view each copy, for a step that copies)."""
    return LIST_BYTES_PER_ITEM * len(steps) + sum(
        PAIR_BYTES + sum(view_bytes(len(c[1])) for c in s.copies if c is not None)
        for s in steps if s.copies is not None)


class ProgramStep(NamedTuple):
    """One step: the operands it takes (positions in the current operand list, which the
    result is appended to), its equation (ASCII labels), its result shape, its GEMM plan
    (None: ``np.einsum``), where its result lives in the program's arena (None: a new
    array, or the caller's ``out``), and the bytes it allocates beside the arena while it
    runs: ``scratch`` where its result goes to the arena or ``out``, ``scratch_new`` where
    it is a new array (the last step without ``out``; the new result counted). A named
    tuple: a network's program makes hundreds, and a named tuple is made several times
    faster than a frozen dataclass."""

    positions: tuple[int, ...]
    equation: str
    shape: tuple[int, ...]
    gemm: Gemm | None
    offset: int | None = None
    scratch: int = 0
    scratch_new: int = 0
    # per GEMM operand (A, B): ``(offset, shape)`` of the place in the arena its permuted
    # copy is made in (``gemm.operand_copies``), or None (a view; or a copy NumPy makes)
    copies: tuple | None = None

    def buffer(self, arena, dtype):
        """The step's place in ``arena`` (a 1-d uint8 NumPy or cupy array; C-contiguous, the
        result's shape), or None."""
        if self.offset is None:
            return None
        if isinstance(arena, np.ndarray):
            return np.ndarray(self.shape, dtype, arena, self.offset)
        nbytes = math.prod(self.shape) * np.dtype(dtype).itemsize
        return arena[self.offset:self.offset + nbytes].view(dtype).reshape(self.shape)

    def copy_buffers(self, arena, dtype) -> tuple | None:
        """The places in ``arena`` (a 1-d uint8 NumPy array) of the GEMM operands' copies
        (``run_gemm``'s ``copies``), or None where the step makes none there."""
        if self.copies is None:
            return None
        return tuple(None if c is None else np.ndarray(c[1], dtype, arena, c[0])
                     for c in self.copies)

    def run(self, operands: list, out, matmul: Callable | None, buf=None, xp=np,
            copies=None):
        """The step's result: into ``out`` where given (C-contiguous, the result's shape and
        dtype), else into ``buf`` (its place in the arena) where given, else a new array.
        ``xp``: the operands' array module (NumPy, or cupy on a GPU); ``copies``: the
        step's ``copy_buffers``."""
        if out is not None:
            buf = None
        if self.gemm is not None:   # without ``out``: the product, permuted as a view
            return run_gemm(xp, self.gemm, *operands, out, matmul, into=buf, copies=copies)
        if xp is not np:    # cupy's einsum takes no ``out``, and any number of operands
            res = xp.einsum(self.equation, *operands)
            target = out if out is not None else buf
            if target is None:
                return res
            target[...] = res
            return target
        if len(operands) > 2:
            res = evaluate(self.equation, operands)
            if out is None:
                return res
            out[...] = res
            return out
        if out is None and buf is not None:
            out = buf
        return plain_einsum(self.equation, operands, out)


@dataclass(frozen=True)
class Program:
    """The planned steps and the arena their intermediates share (bytes; offsets assigned
    over the steps' lifetimes as the memory pass assigns a plan's)."""

    steps: tuple[ProgramStep, ...]
    arena_bytes: int
    # labels of size 1 are dropped before planning (``squeeze_ones``): the operands' shapes
    # without them and the result's whole shape, or None where no label is of size 1
    squeeze: tuple[tuple, tuple] | None = None
    # some step copies GEMM operands in the arena (``ProgramStep.copies``)
    copies_in_arena: bool = False

    def peak_bytes(self, into_out: bool = True, device_itemsize: int | None = None) -> int:
        """What one call allocates at once: the arena, the largest step's scratch (the last
        step writing into the caller's ``out``, ``into_out``, or a new array, then counted)
        and the call's Python objects (``OBJECT_BYTES_PER_STEP`` a step,
        ``OBJECT_BYTES_PER_OPERAND`` an operand, where size-1 labels are dropped a view of
        each operand and of the result, and the views of the operands' copies' places
        made with the arena, ``copy_places_bytes``). Operands and ``out`` are the caller's, not
        counted. ``device_itemsize``: the call runs on a device (cupy) in elements of that
        size, whose memory holds arrays only: no Python objects, and a step that is not a
        GEMM holds its whole result beside its place (``cupy.einsum`` makes it; it is then
        copied there) instead of np.einsum's buffers."""
        if device_itemsize is not None:
            return self.arena_bytes + max(
                (s.scratch if s.gemm is not None else math.prod(s.shape) * device_itemsize
                 for s in self.steps), default=0)
        last = len(self.steps) - 1
        objects = call_object_bytes(len(self.steps),
                                    1 + sum(len(s.positions) - 1 for s in self.steps))
        if self.squeeze is not None:
            shapes, out_shape = self.squeeze
            objects += view_bytes(len(out_shape)) + sum(
                view_bytes(len(s)) + LIST_BYTES_PER_ITEM for s in shapes)
        if self.copies_in_arena:
            objects += copy_places_bytes(self.steps)
        return self.arena_bytes + objects + max(
            (s.scratch_new if k == last and not into_out else s.scratch
             for k, s in enumerate(self.steps)), default=0)


def _build_step(equation: str, in_shapes: tuple, form: str
               ) -> tuple[str, tuple, Gemm | None, dict]:
    """``(equation to run, result shape, GEMM plan or None, each label's size)`` of one
    step whose ``form`` (``step_forms``) is ``"gemm"`` or ``"einsum"``."""
    terms, result = split(equation)
    size, uniform = step_sizes(terms, in_shapes)
    shape = tuple(map(size.__getitem__, result))
    plan = step_gemm(terms, result, size, uniform) if form == "gemm" else None
    if plan is None and len(terms) <= 2:
        equation = to_ascii(equation)
    return equation, shape, plan, size


@functools.lru_cache(maxsize=4096)
def _built_step(equation: str, in_shapes: tuple, in_strides: tuple, form: str, blas: bool,
                  itemsize: int, device: bool = False
                  ) -> tuple[str, tuple, Gemm | None, int, tuple, tuple | None]:
    """``_build_step`` of one step for operands of element ``in_strides``, with the bytes it
    allocates beside its operands and result (a GEMM's for its operands,
    ``operand_scratch``; np.einsum's own, ``np_einsum_bytes``; 0 for a step of more than
    two operands, whose result ``evaluate`` makes; on the host a GEMM's views too,
    ``GEMM_VIEW_BYTES``), the result's element strides, and on the host a GEMM's
    ``operand_copies`` where they are at least ``ARENA_COPY_BYTES`` (their
    bytes not counted in the first: the program places them), else None. ``device``: the
    step runs on a GPU, whose memory holds arrays only. Memoized: the steps of a large
    network repeat (an MPS's bulk, a circuit's layers)."""
    equation, shape, plan, size = _build_step(equation, in_shapes, form)
    if plan is None:
        if len(in_shapes) <= 2:
            terms, result = split(equation)
            # (the operands' layouts matter only where np.einsum might fill no buffer)
            held = np_einsum_bytes(terms, result, size, itemsize, c_contiguous=(
                np_einsum_fills_no_buffer(terms, result) and
                all(tuple(st) == c_strides(sh) for sh, st in zip(in_shapes, in_strides))))
        else:
            held = 0
        return equation, shape, None, held, c_strides(shape), None
    layouts = list(zip(in_shapes, in_strides))
    if device:
        held, res_strides = operand_scratch(plan, layouts, itemsize, blas)
        return equation, shape, plan, held, res_strides, None
    copies, held, res_strides = operand_copies(plan, layouts, itemsize, blas)
    held += GEMM_VIEW_BYTES           # (objects: a host call's memory, tracemalloc's count)
    copied = copies_bytes(copies, itemsize)
    if copied < ARENA_COPY_BYTES:     # NumPy's copies, in memory malloc reuses
        return equation, shape, plan, held + copied, res_strides, None
    return equation, shape, plan, held, res_strides, copies


def squeeze_ones(terms: Sequence[str], output: str, shapes, strides):
    """``(terms, output, shapes, strides, the result's shape)`` without the labels whose
    size is 1 on every operand, or None where there is none. An index that takes one value
    changes no value, and dropping it keeps every intermediate a feasible contraction makes
    within NumPy's 64 dimensions. A label of size 1 on one operand and n on another
    broadcasts: kept."""
    sizes = label_sizes(",".join(terms) + "->" + output, shapes)
    ones = {c for c, d in sizes.items() if d == 1}
    if not ones:
        return None
    keep = [[j for j, c in enumerate(t) if c not in ones] for t in terms]
    return ([''.join(t[j] for j in k) for t, k in zip(terms, keep)],
            ''.join(c for c in output if c not in ones),
            [tuple(sh[j] for j in k) for sh, k in zip(shapes, keep)],
            [tuple(st[j] for j in k) for st, k in zip(strides, keep)],
            tuple(sizes[c] for c in output))


def build_program(terms: Sequence[str], output: str, path, shapes, dtype, strides=None,
                 layout_of: Program | None = None, device: bool = False,
                 forms=None) -> Program:
    """The steps of ``terms -> output`` along ``path`` for operands of ``shapes`` and
    ``dtype`` (all operands promoted to it) and element ``strides`` (default C-contiguous),
    with their intermediates' arena offsets and each step's scratch bytes. ``layout_of``: a
    program of the same path over operands at least as large (a sliced contraction's full
    slice, for a ragged one): its arena and offsets are taken, each intermediate fitting
    its place (see ``PathContraction.program``). ``device``: the steps run on a GPU, whose
    memory holds arrays only. ``forms``: each step's (``step_forms``; None: by the rates of
    where they run, on these shapes)."""
    blas = np.dtype(dtype).name in BLAS_DTYPES
    itemsize = np.dtype(dtype).itemsize
    if forms is None:
        forms = step_forms(terms, output, path, shapes, dtype,
                           DEVICE_RATES if device else host_rates())
    # each current operand: (shape, element strides, the step that made it or None)
    current = [(tuple(s), c_strides(s), None) for s in shapes] if strides is None else \
        [(tuple(s), tuple(t), None) for s, t in zip(shapes, strides)]
    planned, intervals, sizes = [], {}, {}
    copying = {}          # step -> its operand_copies, placed in the arena below
    played = play_path(terms, output, path)
    last = len(played) - 1
    for k, (inds, picked, result) in enumerate(played):
        if len(inds) == 2:     # (nearly every step; play_path orders a pair's positions)
            i, j = inds
            (sa, ta, ma), (sb, tb, mb) = current[i], current[j]
            in_shapes, in_strides = (sa, sb), (ta, tb)
            if ma is not None:
                intervals[ma] = (ma, k)
            if mb is not None:
                intervals[mb] = (mb, k)
            del current[j], current[i]
        else:
            ins = [current[i] for i in inds]
            in_shapes = tuple([x[0] for x in ins])
            in_strides = tuple([x[1] for x in ins])
            for x in ins:
                if x[2] is not None:
                    intervals[x[2]] = (x[2], k)
            for i in reversed(inds):
                del current[i]
        eq, shape, plan, held, res_strides, copies = _built_step(
            first_use_equation(picked, result), in_shapes, in_strides, forms[k], blas,
            itemsize, device)
        nbytes = math.prod(shape) * itemsize
        if copies is not None:
            copying[k] = copies
        if plan is not None:
            # into ``out``: a product to permute is written beside it first
            scratch = held + (nbytes if k == last and plan.out_perm is not None else 0)
        else:   # np.einsum writes its buffer directly; ``evaluate`` makes its own result
            scratch = nbytes if len(inds) > 2 else held
        planned.append([inds, eq, shape, plan, scratch, held + nbytes])
        # the last result is the caller's (``out``) or new; a step of more than two
        # operands makes its own (``evaluate``)
        current.append((shape, res_strides, k if k < last and len(inds) <= 2 else None))
        sizes[k] = nbytes
    held = {k: sizes[k] for k in intervals}
    if layout_of is not None and _fits_layout(held, layout_of, itemsize):
        offsets = {k: layout_of.steps[k].offset for k in held}
        arena_bytes = layout_of.arena_bytes
        placed = {k: places for k, cs in copying.items()
                  if (places := _copy_places_of(cs, layout_of.steps[k].copies))}
    else:
        # each copy lives within its step (interval (k, k)): it may share bytes with
        # intermediates not live at that step, never with the step's operands or result
        spans = {_copy_key(k, i): ((k, k), math.prod(c) * itemsize)
                 for k, cs in copying.items() for i, c in enumerate(cs) if c is not None}
        if spans or sum(held.values()) > UNSHARED_ARENA_BYTES:
            offsets, arena_bytes = assign_arena_offsets(
                {**intervals, **{key: span for key, (span, _) in spans.items()}},
                {**held, **{key: nbytes for key, (_, nbytes) in spans.items()}})
        else:
            offsets, arena_bytes = stacked_offsets(held)
        placed = {k: tuple(None if c is None else (offsets[_copy_key(k, i)], c)
                           for i, c in enumerate(cs)) for k, cs in copying.items()}
    for k, cs in copying.items():
        if k not in placed:      # (a ragged slice's step beyond the full slice's places)
            nbytes = copies_bytes(cs, itemsize)
            planned[k][4] += nbytes
            planned[k][5] += nbytes
    steps = tuple(ProgramStep(inds, eq, shape, plan, offsets.get(k), scratch, scratch_new,
                              placed.get(k))
                  for k, (inds, eq, shape, plan, scratch, scratch_new) in enumerate(planned))
    return Program(steps, arena_bytes, copies_in_arena=bool(placed))


def _copy_key(k: int, operand: int) -> int:
    """Step ``k``'s copy of GEMM operand ``operand`` (0: A, 1: B) as an arena buffer: a
    negative key, apart from the steps' intermediates (``k``)."""
    return -2 * k - 1 - operand


def _copy_places_of(copies: tuple, full: tuple | None) -> tuple | None:
    """A ragged slice's step's ``ProgramStep.copies`` (``copies``: its ``operand_copies``)
    in the places the full slice's same step has (``full``), where each copy fits its
    operand's; else None."""
    if full is None or any((c is None) != (f is None) or
                           (c is not None and math.prod(c) > math.prod(f[1]))
                           for c, f in zip(copies, full)):
        return None
    return tuple(None if c is None else (f[0], c) for c, f in zip(copies, full))


def _fits_layout(held: dict, layout_of: Program, itemsize: int) -> bool:
    """Whether each intermediate of ``held`` (step -> bytes) fits the place the same step's
    intermediate has in ``layout_of``."""
    steps = layout_of.steps
    return all(k < len(steps) and steps[k].offset is not None and
               nbytes <= math.prod(steps[k].shape) * itemsize for k, nbytes in held.items())
