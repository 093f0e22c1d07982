"""NumPy's products and norms on graph Tensors, each an einsum with reshapes or reductions
(``numpy_api`` registers them): ``trace``, ``diagonal``, ``vdot``, ``inner``, ``kron``,
``linalg.norm``. Each follows NumPy's result dtype (``trace`` sums its diagonal as ``np.sum``
does; ``vdot`` and ``inner`` keep the operands' common type, as ``np.dot``; ``norm`` works
in float). Where NumPy takes an argument these have no graph form for, a ``GraphError``
names it.
"""

from __future__ import annotations

import numpy as np

from ..errors import GraphError, ShapeError
from ..ir import einsum as einsum_mod
from . import tensor as T
from .tensor import user_src


def _tensors(call: str, *xs):
    return T._coerce(list(xs), call, user_src())


def _diagonal_axes(call: str, t, offset, axis1, axis2) -> tuple[int, int]:
    if offset != 0:
        raise GraphError(f"numpy.{call}(offset={offset}): only the main diagonal has a graph "
                         "form; slice first (x[:, k:] for offset k)", op=call, src=user_src())
    if t.ndim < 2:
        raise ShapeError(f"numpy.{call} needs 2 or more dims, got shape {t.shape}", op=call,
                         src=user_src())
    a1, a2 = axis1 % t.ndim, axis2 % t.ndim
    if a1 == a2 or t.shape[a1] != t.shape[a2]:
        raise ShapeError(f"numpy.{call}: axes {axis1} and {axis2} of shape {t.shape} are not "
                         "two dims of one size", op=call, src=user_src())
    return a1, a2


def diagonal(a, offset=0, axis1=0, axis2=1, *, call="diagonal"):
    """The diagonal over ``axis1`` and ``axis2``, as the last dim (NumPy's order); a new
    array, not NumPy's read-only view (``call``: the NumPy function errors name)."""
    (t,) = _tensors(call, a)
    a1, a2 = _diagonal_axes(call, t, offset, axis1, axis2)
    labels = [einsum_mod.label(i) for i in range(t.ndim)]
    labels[a2] = labels[a1]
    rest = "".join(c for i, c in enumerate(labels) if i not in (a1, a2))
    return T.einsum(f"{''.join(labels)}->{rest}{labels[a1]}", t)


def trace(a, offset=0, axis1=0, axis2=1, dtype=None, out=None):
    """The sum of the diagonal over ``axis1`` and ``axis2``, in ``np.sum``'s result dtype
    (integers widen) or ``dtype``."""
    if out is not None:
        raise GraphError("numpy.trace(out=): graph values are never written into a given "
                         "array; assign the result", op="trace", src=user_src())
    return T.sum(diagonal(a, offset, axis1, axis2, call="trace"), axis=-1, dtype=dtype)


def vdot(a, b):
    """The dot product of ``a`` and ``b`` flattened, the first conjugated."""
    ta, tb = _tensors("vdot", a, b)
    if ta.size != tb.size:
        raise ShapeError(f"numpy.vdot: operands of {ta.size} and {tb.size} elements (shapes "
                         f"{ta.shape}, {tb.shape})", op="vdot", src=user_src())
    if ta.dtype.kind == "c":
        ta = T.conj(ta)
    return T.einsum("i,i->", T.reshape(ta, (-1,)), T.reshape(tb, (-1,)))


def inner(a, b):
    """The sum over the last axes of ``a`` and ``b``: shape ``a.shape[:-1] + b.shape[:-1]``
    (a product where one is a scalar)."""
    ta, tb = _tensors("inner", a, b)
    if ta.ndim == 0 or tb.ndim == 0:
        return ta * tb
    if ta.shape[-1] != tb.shape[-1]:
        raise ShapeError(f"numpy.inner: last dims of {ta.shape} and {tb.shape} differ",
                         op="inner", src=user_src())
    names = [einsum_mod.label(i) for i in range(ta.ndim + tb.ndim - 1)]
    la, lb = names[:ta.ndim - 1], names[ta.ndim - 1:ta.ndim + tb.ndim - 2]
    k = names[-1]
    return T.einsum(f"{''.join(la)}{k},{''.join(lb)}{k}->{''.join(la + lb)}", ta, tb)


def kron(a, b):
    """The Kronecker product (the operand of fewer dims given leading dims of size 1)."""
    ta, tb = _tensors("kron", a, b)
    n = max(ta.ndim, tb.ndim)
    sa, sb = (1,) * (n - ta.ndim) + ta.shape, (1,) * (n - tb.ndim) + tb.shape
    if n == 0:
        return ta * tb
    la = [einsum_mod.label(i) for i in range(n)]
    lb = [einsum_mod.label(n + i) for i in range(n)]
    pairs = "".join(x + y for x, y in zip(la, lb))
    outer = T.einsum(f"{''.join(la)},{''.join(lb)}->{pairs}", T.reshape(ta, sa),
                     T.reshape(tb, sb))
    return T.reshape(outer, tuple(x * y for x, y in zip(sa, sb)))


def norm(x, ord=None, axis=None, keepdims=False):
    """``numpy.linalg.norm`` for ``ord`` None (the 2-norm of a vector, the Frobenius norm of
    a matrix, over ``axis``: None, an int or a pair), ``"fro"`` on a pair of axes, and 2 on
    one axis: ``sqrt(sum(|x|**2))`` in float (integers as float64)."""
    (t,) = _tensors("linalg.norm", x)
    if axis is None:
        axes = tuple(range(t.ndim))
    else:
        axes = tuple(np.atleast_1d(axis).tolist())
    fro = ord == "fro" and len(axes) == 2
    if not (ord is None or fro or (ord == 2 and len(axes) == 1)):
        raise GraphError(f"numpy.linalg.norm(ord={ord!r}) over {len(axes)} axis(es) has no "
                         "graph form; ord=None (2-norm, Frobenius), 'fro' on two axes and 2 "
                         "on one do: write others from go.abs, go.max and go.sum",
                         op="linalg.norm", src=user_src())
    if t.dtype.kind in "biu":
        t = T.astype(t, "float64")
    squares = T.real(t) ** 2 + T.imag(t) ** 2 if t.dtype.kind == "c" else T.square(t)
    if not axes:
        return T.sqrt(squares)
    return T.sqrt(T.sum(squares, axis=axes, keepdims=keepdims))


FUNCTIONS = {np.trace: trace, np.diagonal: diagonal, np.vdot: vdot, np.inner: inner,
             np.kron: kron, np.linalg.norm: norm}
