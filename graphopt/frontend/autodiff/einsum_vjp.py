"""The VJP of an einsum, as an einsum with the equation rearranged.

For ``out = einsum("L_0,...,L_n->O", x_0, ..., x_n)`` the cotangent of ``x_k`` is
``einsum("O,L_0,..(not k)..,L_n->P", ct, ...)`` over ``P``, the distinct labels of ``L_k``
that the other terms carry, in first-occurrence order. Then:

- a label only ``x_k`` carries (summed in ``x_k`` alone) is broadcast back over its axis;
- a label ``L_k`` repeats (a diagonal, ``"ii->i"``) puts the cotangent on that diagonal and
  zeros elsewhere (a ``where`` against a constant mask, so an infinite cotangent never
  meets ``0 * inf``).

No conjugate is taken (JAX's convention, see ``rules``). IR equations are explicit, without
ellipsis, and operands already broadcast (the builder inserts ``broadcast_to``), so these
three cases are all there is.
"""

from __future__ import annotations

import numpy as np

from .. import tensor as T
from ..tensor import Tensor


def einsum_vjp(equation: str, args, ct: Tensor, k: int) -> Tensor:
    """The cotangent of operand ``k`` of ``einsum(equation, *args)`` given the result's ``ct``
    (in the result's dtype; the caller casts it to the operand's)."""
    lhs, out = equation.split("->")
    terms = lhs.split(",")
    mine = terms[k]
    others = [t for j, t in enumerate(terms) if j != k]
    carried = set(out).union(*others)
    distinct = list(dict.fromkeys(mine))
    present = "".join(c for c in distinct if c in carried)
    eq = ",".join([out] + others) + "->" + present
    ct = T.einsum(eq, ct, *(a for j, a in enumerate(args) if j != k))
    x = args[k]
    if present == mine:
        return ct
    # one axis per position of ``mine``; the cotangent's where a label first occurs and is
    # carried, size 1 elsewhere
    first = {c: mine.index(c) for c in distinct}
    shape = tuple(x.shape[i] if first[c] == i and c in carried else 1
                  for i, c in enumerate(mine))
    ct = T.broadcast_to(T.reshape(ct, shape), x.shape)
    if len(distinct) == len(mine):
        return ct
    return T.where(_diagonal_mask(mine, x.shape), ct, np.zeros((), dtype=ct.dtype))


def _diagonal_mask(labels: str, shape) -> np.ndarray:
    """True where every repeated label of ``labels`` takes one index value; size 1 on the
    axes of labels that do not repeat (``where`` broadcasts it)."""
    mask = np.ones((1,) * len(labels), dtype=bool)
    for c in dict.fromkeys(labels):
        axes = [i for i, d in enumerate(labels) if d == c]
        if len(axes) < 2:
            continue
        n = shape[axes[0]]
        idx = np.arange(n)
        eye_shape = [1] * len(labels)
        for a in axes:
            eye_shape[a] = n
        grids = [idx.reshape([n if i == a else 1 for i in range(len(labels))]) for a in axes]
        on = np.ones(eye_shape, dtype=bool)
        for g in grids[1:]:
            on &= grids[0] == g
        mask = mask & on
    return mask
