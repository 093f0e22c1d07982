"""A contraction along a path: planned once per operand shapes, then run step by step.

``PathContraction(equation, path)(*arrays)`` computes ``einsum(equation, *arrays)`` along
``path`` (opt_einsum's linear format). The steps are ``paths.play_path``'s, so every
intermediate has the label order the contraction pass gives its pairwise nodes. For each
operand-shape signature, each step is planned once:

- a pairwise step on a BLAS dtype whose labels map onto a (batched) matrix product is one
  GEMM (``gemm.gemm_plan``, run by ``gemm.run_gemm`` with the caller's ``matmul``);
- any other step is ``np.einsum`` on the step's own equation: a trace or diagonal, a size-1
  label broadcast against a larger one, a one-operand step, integer, bool or float16
  operands. A step over more than two operands is ``einsum.evaluate``'s.

Intermediates live in one arena whose offsets are assigned over the steps' lifetimes
(``liveness.assign_arena_offsets``, as the memory pass assigns a plan's): a call holds about
the working set ``sliced_contraction.slice_cost`` counts, plus ``run_gemm``'s transposed
operand copies. The last result is the caller's ``out`` or a new array, never the arena.
"""

from __future__ import annotations

import functools
import math
import threading
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .einsum import evaluate, label, promote_operands, split, to_ascii
from .gemm import BLAS_DTYPES, GemmPlan, gemm_plan, run_gemm
from .liveness import assign_arena_offsets
from .paths import play_path


@dataclass(frozen=True)
class ProgramStep:
    """One step: the operands it takes (positions in the current operand list, which the
    result is appended to), its equation (ASCII labels), its result shape, its GEMM plan
    (None: ``np.einsum``), and where its result lives in the program's arena (None: a new
    array, or the caller's ``out``)."""

    positions: tuple[int, ...]
    equation: str
    shape: tuple[int, ...]
    gemm: GemmPlan | None
    offset: int | None = None

    def buffer(self, arena, dtype):
        """The step's place in ``arena`` (C-contiguous, the result's shape), or None."""
        if self.offset is None:
            return None
        n = math.prod(self.shape) * dtype.itemsize
        return arena[self.offset:self.offset + n].view(dtype).reshape(self.shape)

    def run(self, operands: list, out, matmul: Callable | None, buf=None):
        """The step's result: into ``out`` where given (C-contiguous, the result's shape and
        dtype), else into ``buf`` (its place in the arena) where given, else a new array."""
        if out is not None:
            buf = None
        if self.gemm is not None:   # without ``out``: the product, permuted as a view
            return run_gemm(np, self.gemm, *operands, out, matmul, into=buf)
        if len(operands) > 2:
            res = evaluate(self.equation, operands)
            if out is None:
                return res
            out[...] = res
            return out
        if out is None and buf is not None:
            out = buf
        return np.einsum(self.equation, *operands, **({} if out is None else {"out": out}))


@dataclass(frozen=True)
class Program:
    """The planned steps and the arena their intermediates share (bytes; offsets assigned
    over the steps' lifetimes as the memory pass assigns a plan's)."""

    steps: tuple[ProgramStep, ...]
    arena_bytes: int


def _step_equation(picked: Sequence[str], result: str) -> str:
    """The step's equation over IR labels ``label(0), label(1), ...`` in order of first
    use (so that steps alike are planned once)."""
    names: dict = {}
    for t in (*picked, result):
        for c in t:
            if c not in names:
                names[c] = label(len(names))
    return ",".join("".join(map(names.__getitem__, t)) for t in picked) + "->" + \
        "".join(map(names.__getitem__, result))


@functools.lru_cache(maxsize=4096)
def _plan_step(equation: str, in_shapes: tuple, blas: bool) -> tuple[str, tuple, GemmPlan | None]:
    """``(equation to run, result shape, GEMM plan or None)`` of one step."""
    terms, result = split(equation)
    dims: dict = {}
    for t, s in zip(terms, in_shapes):
        for c, d in zip(t, s):
            dims.setdefault(c, set()).add(d)
    # a label of size 1 against a larger size broadcasts, as np.einsum does
    size = {c: max(ds) if 0 not in ds else 0 for c, ds in dims.items()}
    shape = tuple(size[c] for c in result)
    plan = None
    if blas and len(terms) == 2 and all(len(ds) == 1 for ds in dims.values()):
        plan = gemm_plan(equation, in_shapes)
    if plan is None and len(terms) <= 2:
        equation = to_ascii(equation)
    return equation, shape, plan


def plan_program(terms: Sequence[str], output: str, path, shapes, dtype) -> Program:
    """The steps of ``terms -> output`` along ``path`` for operands of ``shapes`` and
    ``dtype`` (all operands promoted to it), with their intermediates' arena offsets."""
    blas = np.dtype(dtype).name in BLAS_DTYPES
    itemsize = np.dtype(dtype).itemsize
    current = [tuple(s) for s in shapes]
    made_by: list = [None] * len(current)        # the step that made each current operand
    planned, intervals, sizes = [], {}, {}
    played = play_path(terms, output, path)
    for k, (inds, picked, result) in enumerate(played):
        in_shapes = tuple(current[i] for i in inds)
        for i in reversed(inds):
            if made_by[i] is not None:
                intervals[made_by[i]] = (made_by[i], k)
            current.pop(i)
            made_by.pop(i)
        eq, shape, plan = _plan_step(_step_equation(picked, result), in_shapes, blas)
        planned.append((tuple(inds), eq, shape, plan))
        current.append(shape)
        # the last result is the caller's (``out``) or new; a step of more than two
        # operands makes its own (``evaluate``)
        made_by.append(k if k < len(played) - 1 and len(inds) <= 2 else None)
        sizes[k] = math.prod(shape) * itemsize
    offsets, arena_bytes = assign_arena_offsets(intervals, {k: sizes[k] for k in intervals})
    steps = tuple(ProgramStep(inds, eq, shape, plan, offsets.get(k))
                  for k, (inds, eq, shape, plan) in enumerate(planned))
    return Program(steps, arena_bytes)


class PathContraction:
    """``equation`` along ``path``, one planned program per operand-shape signature (a
    sliced contraction's ragged last slices have their own); picklable for dask workers.

    Each call runs on an arena of the program's ``arena_bytes``. With ``keep_arenas`` the
    arenas are kept for the next calls (one per call in flight; fresh memory is slower to
    write than reused, 2x on a 10x10 lattice) until ``release_arenas``; otherwise each call
    allocates its own."""

    def __init__(self, equation: str, path, keep_arenas: bool = False):
        self.equation = equation
        self.path = [tuple(p) for p in path]
        self.keep_arenas = keep_arenas
        self._terms, self._output = split(equation)
        self._programs: dict = {}
        self._idle: dict = {}            # program key -> arenas kept for the next calls
        self._lock = threading.Lock()

    def __getstate__(self):
        return {"equation": self.equation, "path": self.path, "keep_arenas": self.keep_arenas}

    def __setstate__(self, state):
        self.__init__(state["equation"], state["path"], state.get("keep_arenas", False))

    def program(self, shapes, dtype) -> Program:
        """The planned program for operands of ``shapes`` in ``dtype`` (built once)."""
        key = (tuple(map(tuple, shapes)), np.dtype(dtype).str)
        prog = self._programs.get(key)
        if prog is None:
            prog = plan_program(self._terms, self._output, self.path, shapes, dtype)
            self._programs[key] = prog
        return prog

    def idle_arena_bytes(self) -> int:
        """Bytes of the arenas kept for the next calls."""
        with self._lock:
            return sum(a.nbytes for idle in self._idle.values() for a, _ in idle)

    def release_arenas(self) -> None:
        """Drop the arenas kept for the next calls."""
        with self._lock:
            self._idle = {}

    def __call__(self, *arrays, out=None, matmul: Callable | None = None):
        """``einsum(equation, *arrays)`` along the path, in the operands' promoted dtype.
        ``out`` (optional) receives the result if it is C-contiguous with the result's shape
        and dtype; otherwise the result is a new array (never the arena's).
        ``matmul(a, b, c)`` runs the GEMMs (default ``np.matmul(a, b, out=c)``)."""
        current = promote_operands(arrays)
        key = (tuple(a.shape for a in current), current[0].dtype.str)
        prog = self.program(key[0], current[0].dtype)
        kept = None          # (arena, each step's place in it)
        if prog.arena_bytes:
            with self._lock:
                idle = self._idle.get(key)
                kept = idle.pop() if idle else None
            if kept is None:
                arena = np.empty(prog.arena_bytes, np.uint8)
                kept = (arena, [s.buffer(arena, current[0].dtype) for s in prog.steps])
        bufs = kept[1] if kept else [None] * len(prog.steps)
        try:
            last = len(prog.steps) - 1
            for k, step in enumerate(prog.steps):
                operands = [current[i] for i in step.positions]
                for i in reversed(step.positions):
                    del current[i]
                target = None
                if k == last and out is not None and out.flags.c_contiguous and \
                        out.shape == step.shape and out.dtype == operands[0].dtype:
                    target = out
                current.append(step.run(operands, target, matmul, bufs[k]))
                del operands   # operands outside the arena are freed here, not a step later
            res = current[0]
            if kept is not None and np.may_share_memory(res, kept[0]):
                res = res.copy()  # a last step that only permutes an intermediate: a view
        finally:
            if kept is not None and self.keep_arenas:
                with self._lock:
                    self._idle.setdefault(key, []).append(kept)
        return res


@functools.lru_cache(maxsize=256)
def path_contraction(equation: str, path: tuple) -> PathContraction:
    """A shared ``PathContraction`` (its programs are planned once per operand shapes)."""
    return PathContraction(equation, path)
