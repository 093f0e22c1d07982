"""Each step's form along a contraction's path: a GEMM where the pair's labels map onto a
(batched) matrix product and the backend's rates give it one (``rates.Rates.step_form``),
else ``np.einsum``. The one rule every contraction step and pairwise einsum node follows;
``build.build_program`` plans the steps in these forms.
"""

from __future__ import annotations

import functools
import math
from typing import Sequence

import numpy as np

from ...ir.einsum import first_use_equation, split
from ..paths import play_path
from .gemm import BLAS_DTYPES, pair_gemm


def step_sizes(terms, in_shapes) -> tuple[dict, bool]:
    """Each label's size in one step over operands of ``in_shapes``, and whether every
    label has one size throughout (a label of size 1 against a larger size broadcasts, as
    np.einsum does: its size is the larger)."""
    size: dict = {}
    uniform = True
    for t, s in zip(terms, in_shapes):
        for c, d in zip(t, s):
            e = size.setdefault(c, d)
            if e != d:
                uniform = False
                size[c] = 0 if 0 in (e, d) else max(e, d)
    return size, uniform


def step_gemm(terms, result, size: dict, uniform: bool):
    """The GEMM a pair step's labels map onto, or None (not a pair, a broadcast label, a
    repeated label)."""
    if len(terms) != 2 or not uniform:
        return None
    return pair_gemm(terms[0], terms[1], result, size)


def step_forms(terms: Sequence[str], output: str, path, shapes, dtype, rates) -> tuple:
    """Each step's form along ``path`` for operands of ``shapes`` (a sliced contraction's
    full slice): ``"gemm"`` where the pair maps onto a GEMM and ``rates.step_form`` gives it
    one, else ``"einsum"`` (``np.einsum``, or a step of more than two operands). The one
    rule every contraction step and pairwise einsum node follows."""
    return _step_forms(tuple(terms), output, tuple(map(tuple, path)),
                       tuple(map(tuple, shapes)), np.dtype(dtype).name in BLAS_DTYPES, rates)


@functools.lru_cache(maxsize=1024)
def _step_forms(terms: tuple, output: str, path: tuple, shapes: tuple, blas: bool,
                rates) -> tuple:
    current = list(shapes)
    forms = []
    for inds, picked, result in play_path(terms, output, path):
        in_shapes = [current[i] for i in inds]
        for i in reversed(inds):
            del current[i]
        eq_terms, eq_result = split(first_use_equation(picked, result))
        size, uniform = step_sizes(eq_terms, in_shapes)
        gemm = step_gemm(eq_terms, eq_result, size, uniform)
        forms.append(rates.step_form(math.prod(size.values()), gemm, blas))
        current.append(tuple(map(size.__getitem__, eq_result)))
    return tuple(forms)
