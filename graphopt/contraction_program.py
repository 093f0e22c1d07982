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

Intermediates are dropped as soon as the step that reads them has run, so a call holds
the working set ``sliced_contraction.slice_cost`` counts, plus ``run_gemm``'s copies.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

from .einsum import evaluate, label, promote_operands, split, to_ascii
from .gemm import BLAS_DTYPES, GemmPlan, gemm_plan, run_gemm
from .paths import play_path


@dataclass(frozen=True)
class ProgramStep:
    """One step: the operands it takes (positions in the current operand list, which the
    result is appended to), its equation (ASCII labels), its result shape, and its GEMM
    plan (None: ``np.einsum``)."""

    positions: tuple[int, ...]
    equation: str
    shape: tuple[int, ...]
    gemm: GemmPlan | None

    def run(self, operands: list, out, matmul: Callable | None):
        """The step's result, written into ``out`` where given (C-contiguous, the result's
        shape and dtype)."""
        if self.gemm is not None:   # without ``out``: a permuted view, as opt_einsum keeps
            return run_gemm(np, self.gemm, *operands, out, matmul)
        if len(operands) > 2:
            res = evaluate(self.equation, operands)
            if out is None:
                return res
            out[...] = res
            return out
        return np.einsum(self.equation, *operands, **({} if out is None else {"out": out}))


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


def plan_program(terms: Sequence[str], output: str, path, shapes, dtype) -> list[ProgramStep]:
    """The steps of ``terms -> output`` along ``path`` for operands of ``shapes`` and
    ``dtype`` (all operands promoted to it)."""
    blas = np.dtype(dtype).name in BLAS_DTYPES
    current = [tuple(s) for s in shapes]
    steps = []
    for inds, picked, result in play_path(terms, output, path):
        in_shapes = tuple(current[i] for i in inds)
        for i in reversed(inds):
            current.pop(i)
        eq, shape, plan = _plan_step(_step_equation(picked, result), in_shapes, blas)
        steps.append(ProgramStep(tuple(inds), eq, shape, plan))
        current.append(shape)
    return steps


class PathContraction:
    """``equation`` along ``path``, one planned program per operand-shape signature (a
    sliced contraction's ragged last slices have their own); picklable for dask workers."""

    def __init__(self, equation: str, path):
        self.equation = equation
        self.path = [tuple(p) for p in path]
        self._terms, self._output = split(equation)
        self._programs: dict = {}

    def __getstate__(self):
        return {"equation": self.equation, "path": self.path}

    def __setstate__(self, state):
        self.__init__(state["equation"], state["path"])

    def program(self, shapes, dtype) -> list[ProgramStep]:
        """The planned steps for operands of ``shapes`` in ``dtype`` (built once)."""
        key = (tuple(map(tuple, shapes)), np.dtype(dtype).str)
        steps = self._programs.get(key)
        if steps is None:
            steps = plan_program(self._terms, self._output, self.path, shapes, dtype)
            self._programs[key] = steps
        return steps

    def __call__(self, *arrays, out=None, matmul: Callable | None = None):
        """``einsum(equation, *arrays)`` along the path, in the operands' promoted dtype.
        ``out`` (optional) receives the result if it is C-contiguous with the result's shape
        and dtype; otherwise the result is a new array. ``matmul(a, b, c)`` runs the GEMMs
        (default ``np.matmul(a, b, out=c)``)."""
        current = promote_operands(arrays)
        steps = self.program([a.shape for a in current], current[0].dtype)
        last = len(steps) - 1
        for k, step in enumerate(steps):
            operands = [current[i] for i in step.positions]
            for i in reversed(step.positions):
                del current[i]
            target = None
            if k == last and out is not None and out.flags.c_contiguous and \
                    out.shape == step.shape and out.dtype == operands[0].dtype:
                target = out
            current.append(step.run(operands, target, matmul))
            del operands   # the step's operands are freed here, not at the next step
        return current[0]


@functools.lru_cache(maxsize=256)
def path_contraction(equation: str, path: tuple) -> PathContraction:
    """A shared ``PathContraction`` (its programs are planned once per operand shapes)."""
    return PathContraction(equation, path)
