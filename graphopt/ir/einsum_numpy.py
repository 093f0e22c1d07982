"""Running an IR einsum on NumPy: its equation in ASCII letters, NumPy's C einsum called
directly, the operands promoted to the result dtype, and the reference evaluation of any
number of operands. The contraction program's steps, the numba backend's pairwise nodes,
the generated kernels and the interpreter run their einsums through here.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from ..errors import EinsumError
from .einsum import ASCII_LETTERS

_NO_SYNTAX = str.maketrans("", "", ",->")


def to_ascii(equation: str) -> str:
    """Map the labels of an equation with at most 52 distinct labels onto ASCII letters, as
    ``numpy.einsum`` requires."""
    bare = equation.translate(_NO_SYNTAX)
    if bare.isascii() and (bare.isalpha() or not bare):    # (a step's, nearly always)
        return equation
    labels = sorted(set(bare), key=equation.index)
    if len(labels) > len(ASCII_LETTERS):
        raise EinsumError(f"a single einsum step with {len(labels)} distinct labels cannot run "
                          "on numpy.einsum (52 at most)")
    table = {c: ASCII_LETTERS[i] for i, c in enumerate(labels)}
    return "".join(table.get(c, c) for c in equation)


try:
    from numpy._core.multiarray import c_einsum as _c_einsum
except ImportError:     # (NumPy 1.x names the module numpy.core)
    try:
        from numpy.core.multiarray import c_einsum as _c_einsum
    except ImportError:
        _c_einsum = np.einsum


def plain_einsum(equation: str, operands: Sequence, out=None):
    """``np.einsum(equation, *operands, out=out)`` without ``optimize``, through NumPy's C
    einsum called directly: np.einsum is that function behind a Python wrapper and NumPy's
    array-function dispatch, about half of a small step's time (a tree network runs a step
    per tensor a call). ``out`` None: a new array (the C function takes no None for it)."""
    if out is None:
        return _c_einsum(equation, *operands)
    return _c_einsum(equation, *operands, out=out)


def promote_operands(arrays: Sequence[np.ndarray], xp=np) -> list[np.ndarray]:
    """The operands in the einsum's result dtype (NumPy's promotion of all of them), as
    ``np.einsum`` computes. Contracting pairwise in the pair's own dtype would differ: two
    bool operands of ``"ij,jk,kl->il"`` with a float one would be summed as logical or.
    ``xp``: their array module (NumPy, or cupy)."""
    arrays = [xp.asarray(a) for a in arrays]
    if not arrays:
        return arrays
    dtype = arrays[0].dtype
    if any(a.dtype != dtype for a in arrays):   # (no tuple of the operands where all agree:
        dtype = np.result_type(*[a.dtype for a in arrays])  # see program_key)
    return [a if a.dtype == dtype else a.astype(dtype) for a in arrays]


def evaluate(equation: str, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """Reference evaluation of an IR equation: ``numpy.einsum`` for one or two operands,
    opt_einsum's pairwise contraction beyond that (NumPy caps the operand count), all in
    the result dtype (``promote_operands``)."""
    if len(arrays) <= 2:
        return np.asarray(np.einsum(to_ascii(equation), *arrays))
    import opt_einsum

    return np.asarray(opt_einsum.contract(equation, *promote_operands(arrays),
                                          optimize="greedy"))
