"""A contraction along a path: planned once per operand shapes, then run step by step.

``PathContraction(equation, path)(*arrays)`` computes ``einsum(equation, *arrays)`` along
``path`` (opt_einsum's linear format), running the program ``contraction_plan.build_program``
made for the operands' shapes, strides and dtype (planned once per such signature), on an
arena of the program's size. The last result is the caller's ``out`` or a new array, never
the arena.
"""

from __future__ import annotations

import dataclasses
import functools
import threading
from typing import Callable

import numpy as np

from ...ir.einsum import split
from ...ir.einsum_numpy import promote_operands
from ..rates import DEVICE_RATES, host_rates
from .build import Program, build_program, squeeze_ones
from .forms import step_forms
from .gemm import c_strides


class PathContraction:
    """``equation`` along ``path``, one planned program per operand-shape signature (a
    sliced contraction's ragged last slices have their own); picklable for dask workers.

    Each call runs on an arena of the program's ``arena_bytes``. With ``keep_arenas`` the
    arenas are kept for the next calls (one per call in flight; fresh memory is slower to
    write than reused, its pages faulted in again) until ``release_arenas``; otherwise each call
    allocates its own. ``xp``: the array module the operands, arenas and steps are in
    (NumPy; cupy on a GPU, whose steps run cuBLAS's GEMMs and cupy's einsum)."""

    def __init__(self, equation: str, path, keep_arenas: bool = False, xp=np, forms=None,
                 device: bool | None = None):
        self.equation = equation
        self.path = [tuple(p) for p in path]
        self.keep_arenas = keep_arenas
        self.xp = xp
        self.forms = None if forms is None else tuple(forms)
        self.device = xp is not np if device is None else bool(device)
        self.terms, self.output = split(equation)
        # (shapes, byte strides, dtype) -> program: shared by every PathContraction of this
        # equation, path and forms, so a kernel runs what its compile planned
        self._programs = shared_programs(equation, tuple(self.path), self.forms, self.device)
        self._idle: list = []            # arenas kept for the next calls
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"equation": self.equation, "path": self.path, "keep_arenas": self.keep_arenas,
                "forms": self.forms, "device": self.device}

    def __setstate__(self, state):
        self.__init__(state["equation"], state["path"], state.get("keep_arenas", False),
                      forms=state.get("forms"), device=state.get("device", False))

    def forms_for(self, shapes, dtype, ragged: bool = False) -> tuple:
        """Each step's form for operands of ``shapes``: the ones given (the full slice's),
        else, and for a ``ragged`` slice, ``step_forms`` on these shapes by the rates of
        where the steps run (the host's or a device's): a ragged slice's small steps take
        the form the rule gives their own size."""
        if self.forms is not None and not ragged:
            return self.forms
        rates = DEVICE_RATES if self.device else host_rates()
        return step_forms(self.terms, self.output, self.path, shapes, dtype, rates)

    def program(self, shapes, dtype, strides=None, full_shapes=None) -> Program:
        """The planned program for operands of ``shapes`` in ``dtype`` with element
        ``strides`` (default C-contiguous), built once. ``full_shapes``: a sliced
        contraction's full slice, which these operands (a ragged slice) are no larger than:
        the program takes the full slice's arena and offsets. A ragged slice's own could be
        larger: intermediates of at most ``UNSHARED_ARENA_BYTES`` in all each get their own
        place, so a slice just under that threshold could hold twice what the full slice,
        its places shared, holds, beyond the workspace predicted."""
        shapes = tuple(map(tuple, shapes))
        strides = tuple(map(tuple, strides)) if strides is not None else \
            tuple(c_strides(s) for s in shapes)
        dtype = np.dtype(dtype)
        # keyed as a call finds it (its arrays' shapes and byte strides): the first call
        # finds the program compile planned without converting its operands' strides
        key = program_key(shapes, [tuple([s * dtype.itemsize for s in t]) for t in strides],
                          dtype.str)
        full_shapes = None if full_shapes is None else tuple(map(tuple, full_shapes))
        if full_shapes is not None and full_shapes != shapes:
            # a ragged slice's program, laid out in the full slice's arena: apart from the
            # program of the same shapes as a full slice of its own (a slicing search asks
            # for both, and each prediction must be its own)
            key = (key, full_shapes)
        else:
            full_shapes = None
        prog = self._programs.get(key)
        if prog is None:
            full = None
            if full_shapes is not None:
                full = self.program(full_shapes, dtype, strides)
            forms = self.forms_for(shapes, dtype, ragged=full_shapes is not None)
            squeezed = squeeze_ones(self.terms, self.output, shapes, strides)
            if squeezed is None:
                prog = build_program(self.terms, self.output, self.path, shapes, dtype, strides,
                                    full, self.device, forms)
            else:
                terms, output, in_shapes, in_strides, out_shape = squeezed
                prog = build_program(terms, output, self.path, in_shapes, dtype, in_strides,
                                    full, self.device, forms)
                prog = dataclasses.replace(prog, squeeze=(tuple(in_shapes), out_shape))
            self._programs[key] = prog
        return prog

    def idle_arena_bytes(self) -> int:
        """Bytes of the arenas kept for the next calls."""
        with self._lock:
            return sum(a.buffer.nbytes for a in self._idle)

    def release_arenas(self) -> None:
        """Drop the arenas kept for the next calls."""
        with self._lock:
            self._idle = []

    def _checkout(self, nbytes: int) -> "_Arena":
        """An arena of at least ``nbytes`` for one call: a kept one (grown where it is too
        small: the programs of a sliced contraction's ragged slices share it), else new."""
        with self._lock:
            kept = self._idle.pop() if self._idle else None
        if kept is None or kept.buffer.nbytes < nbytes:
            kept = _Arena(self.xp.empty(nbytes, np.uint8))
        return kept

    def __call__(self, *arrays, out=None, matmul: Callable | None = None):
        """``einsum(equation, *arrays)`` along the path, in the operands' promoted dtype.
        ``out`` (optional) receives the result if it is C-contiguous with the result's shape
        and dtype; otherwise the result is a new array (never the arena's).
        ``matmul(a, b, c)`` runs the GEMMs (default ``np.matmul(a, b, out=c)``)."""
        return self.run(list(arrays), out, matmul)

    def run(self, arrays: list, out=None, matmul: Callable | None = None,
            full_shapes=None, promoted: bool = False):
        """``self(*arrays, out=out, matmul=matmul)`` for a list of operands: what a sliced
        loop calls per slice, with no tuple of the operands made (see ``program_key``);
        ``full_shapes``: the full slice's operand shapes (see ``program``); ``promoted``:
        the operands are ``promote_operands``' already (``sliced_contract``'s)."""
        xp = self.xp
        current = list(arrays) if promoted else promote_operands(arrays, xp)
        dtype = current[0].dtype
        shapes = [a.shape for a in current]
        key = program_key(shapes, [a.strides for a in current], dtype.str)
        prog = self._programs.get(key)
        if prog is None:     # (kept by this key too: strides not a multiple of the itemsize)
            prog = self._programs[key] = self.program(
                shapes, dtype, [[s // dtype.itemsize for s in a.strides] for a in current],
                full_shapes)
        into = out
        if prog.squeeze is not None:      # views: only dims of size 1 go
            current = [a.reshape(s) for a, s in zip(current, prog.squeeze[0])]
            if out is not None and out.flags.c_contiguous and out.shape == prog.squeeze[1]:
                into = out.reshape(prog.steps[-1].shape)
        kept = self._checkout(prog.arena_bytes) if prog.arena_bytes else None
        bufs, copies = kept.places(key, prog, dtype) if kept else (None, None)
        try:
            last = len(prog.steps) - 1
            for k, step in enumerate(prog.steps):
                positions = step.positions
                if len(positions) == 2:      # (nearly every step: ordered, as played)
                    i, j = positions
                    operands = [current[i], current[j]]
                    del current[j], current[i]
                else:
                    operands = [current[i] for i in positions]
                    for i in reversed(positions):
                        del current[i]
                target = None
                if k == last and into is not None and into.flags.c_contiguous and \
                        into.shape == step.shape and into.dtype == operands[0].dtype:
                    target = into
                if bufs is not None:
                    buf, copy = bufs[k], copies[k]
                elif kept is not None:
                    buf = step.buffer(kept.buffer, dtype)
                    copy = step.copy_buffers(kept.buffer, dtype)
                else:
                    buf = copy = None
                current.append(step.run(operands, target, matmul, buf, xp, copy))
                del operands   # operands outside the arena are freed here, not a step later
            res = current[0]
            if kept is not None and xp.may_share_memory(res, kept.buffer):
                res = res.copy()  # a last step that only permutes an intermediate: a view
            if prog.squeeze is not None:
                res = out if res is into and into is not out else \
                    res.reshape(prog.squeeze[1])
        finally:
            if kept is not None and self.keep_arenas:
                with self._lock:
                    self._idle.append(kept)
        return res


class _Arena:
    """One call's arena, and each step's place in it for the first program run on it
    (made once: the full slices of a sliced contraction; the ragged slices' programs make
    each step's place as it runs, so that no list of views grows with their combinations)."""

    __slots__ = ("buffer", "key", "bufs", "copies")

    def __init__(self, buffer):
        self.buffer, self.key, self.bufs, self.copies = buffer, None, None, None

    def places(self, key, prog: Program, dtype) -> tuple:
        """Each step's place and its operands' copies' (``ProgramStep.copy_buffers``) for
        the program of ``key``, or ``(None, None)`` (made per step, then)."""
        if self.key is None:
            self.key = key
            self.bufs = [s.buffer(self.buffer, dtype) for s in prog.steps]
            self.copies = [s.copy_buffers(self.buffer, dtype) for s in prog.steps] \
                if prog.copies_in_arena else _no_copies(len(prog.steps))
        return (self.bufs, self.copies) if self.key == key else (None, None)


@functools.lru_cache(maxsize=64)
def _no_copies(n_steps: int) -> tuple:
    """``_Arena.places``' copies of a program of ``n_steps`` steps none of which copies in
    its arena: one tuple of Nones for every such arena (a list of its own would weigh 8 bytes
    a step in a sliced call's peak)."""
    return (None,) * n_steps


def program_key(shapes, byte_strides, dtype_str: str) -> tuple:
    """A program's key: the operands' shapes, then their byte strides, then the dtype, in
    one tuple of odd length (2 per operand, plus 1). Never a tuple of one item per operand,
    made per call or per slice: CPython before 3.12.5 keeps a freed tuple of 20 items on a
    free list it never takes them back from (gh-121439), so on a 20-operand network every
    such tuple would stay allocated, thousands of them, beyond the predicted peak."""
    return tuple([*shapes, *byte_strides, dtype_str])


@functools.lru_cache(maxsize=256)
def shared_programs(equation: str, path: tuple, forms: tuple | None, device: bool) -> dict:
    """The programs planned for ``equation`` along ``path`` with ``forms`` (None: by the
    rule) on the host or a ``device``, by signature: one dict every ``PathContraction`` of
    them shares (planning is pure; only arenas are a contraction's own)."""
    return {}


@functools.lru_cache(maxsize=256)
def path_contraction(equation: str, path: tuple, forms: tuple | None = None,
                     device: bool = False) -> PathContraction:
    """A shared ``PathContraction`` that keeps no arenas (its programs are planned once per
    operand shapes)."""
    return PathContraction(equation, path, forms=forms, device=device)
