"""NumPy's own functions on graph Tensors, as dask and cupy arrays take them.

A Tensor answers NumPy's dispatch protocols (``__array_ufunc__``, ``__array_function__``),
so ``np.exp(x)``, ``np.einsum(eq, x, w)``, ``np.sum(x, axis=1)`` or ``ndarray + x`` build
graph ops; it takes basic indexing (``x[..., :k]``, ``x[0, ::-1, None]``) and the
NumPy-named methods built from graph ops (``var``, ``std``, ``clip``, ``squeeze``, ...).
A NumPy function or argument with no graph meaning is a ``GraphError`` naming the call and
what to use instead. ``install`` puts all of this on ``Tensor`` (the package does it on
import; ``tensor`` itself knows nothing of this module).
"""

from __future__ import annotations

import builtins
import math
import operator

import numpy as np

from ..errors import GraphError, OutOfRange, ShapeError, did_you_mean
from ..ir import einsum as einsum_mod
from ..ir import ops
from . import numpy_compositions as compositions
from . import numpy_products as products
from . import tensor as T
from .tensor import Tensor, user_src


def _name(f) -> str:
    module = getattr(f, "__module__", None) or "numpy"
    return f"{module}.{f.__name__}" if module.startswith("numpy") else f"numpy.{f.__name__}"


def _refuse(call: str, **given) -> None:
    """A GraphError for NumPy arguments a graph cannot honour (``out=``: graph values are
    new arrays; ``where=``, ``order=``, ...), given as ``name=(value, default)``."""
    bad = [k for k, (v, default) in given.items()
           if v is not default and not (isinstance(v, (str, int, float)) and v == default)]
    if bad:
        why = ("graph values are never written into a given array; assign the result"
               if "out" in bad else "the graph op has no such argument")
        raise GraphError(f"{call}: argument(s) {', '.join(f'{k}=' for k in bad)} not "
                         f"supported ({why})", op=call, src=user_src())


def _tensor(x, call: str) -> Tensor:
    (t,) = T._coerce([x], call, user_src())
    return t


def _axes(axis, ndim: int, call: str, shape) -> tuple[int, ...]:
    try:
        return ops.normalize_axes(axis, ndim)
    except GraphError as e:
        raise type(e)(f"{e.detail} (operand shape {tuple(shape)})", op=call,
                      src=user_src()) from None


def _ordered(names: str, seq) -> str:
    return "".join(names[i] for i in seq)


# --------------------------------------------------------------------------- basic indexing

def index(x: Tensor, key) -> Tensor:
    """``x[key]`` for NumPy's basic indexing: ints, slices (any step), ``None`` and one
    ``...``; an int drops its dim, ``None`` adds one of size 1. The result is a new value
    (a ``slice`` op, then a reshape where ints or ``None`` change the dims)."""
    src = user_src()
    key = key if isinstance(key, tuple) else (key,)
    for k in key:
        if not (k is None or k is Ellipsis or isinstance(k, slice) or
                isinstance(k, (int, np.integer)) and not isinstance(k, (bool, np.bool_))):
            raise GraphError(
                f"index {k!r} of type {type(k).__name__}: only basic indexing (ints, slices, "
                "None, ...) builds a graph op; for a mask use go.where(mask, x, 0), for a "
                "gather an einsum with a one-hot matrix", op="getitem", src=src)
    if builtins.sum(k is Ellipsis for k in key) > 1:
        raise ShapeError(f"an index can have only one '...', got {key!r}", op="getitem",
                         src=src)
    used = builtins.sum(k is not None and k is not Ellipsis for k in key)
    if used > x.ndim:
        raise ShapeError(f"too many indices for a Tensor of shape {x.shape}: {key!r}",
                         op="getitem", src=src)
    if Ellipsis not in key:
        key = key + (Ellipsis,)
    at = key.index(Ellipsis)
    key = key[:at] + (slice(None),) * (x.ndim - used) + key[at + 1:]
    window, shape, dim = [], [], 0
    for k in key:
        if k is None:
            shape.append(1)
            continue
        d = x.shape[dim]
        if isinstance(k, slice):
            try:
                start, stop, step = k.indices(d)
            except TypeError:
                raise GraphError(f"slice {k!r}: bounds must be ints (a slice cannot depend on "
                                 "graph values)", op="getitem", src=src) from None
            count = len(range(start, stop, step))
            window.append((start if count else 0, step, count))
            shape.append(count)
        else:
            i = operator.index(k)
            if not -d <= i < d:
                raise OutOfRange(f"index {i} is out of bounds for axis {dim} with size {d} "
                                 f"(shape {x.shape})", op="getitem", src=src)
            window.append((i % d, 1, 1))
        dim += 1
    y = x
    if any(w != (0, 1, d) for w, d in zip(window, x.shape)):
        y = x.graph._add("slice", [x], {"window": tuple(window)}, src=src)
    return y if y.shape == tuple(shape) else T.reshape(y, tuple(shape))


# ------------------------------------------------------------------------- NumPy functions

def var(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=None, correction=None):
    """NumPy's ``var``: the mean of ``|x - mean(x)|**2`` over ``axis``, divided by
    ``n - ddof`` (``correction`` is ``ddof``'s Array API name); integers and bools in
    float64, complex values give real variances."""
    _refuse("numpy.var", out=(out, None), where=(where, True), mean=(mean, None))
    ddof = ddof if correction is None else correction
    t = _tensor(a, "var")
    if dtype is not None:
        t = T.astype(t, dtype)
    elif t.dtype.kind in "biu":
        t = T.astype(t, "float64")
    axes = _axes(axis, t.ndim, "var", t.shape)
    n = math.prod(t.shape[i] for i in axes)
    d = t - T.mean(t, axis=axes, keepdims=True)
    sq = T.real(d * T.conj(d)) if t.dtype.kind == "c" else d * d
    # n - ddof <= 0 divides by 0 (inf or nan), as NumPy does
    return T.sum(sq, axis=axes, keepdims=keepdims) / builtins.max(n - ddof, 0)


def std(a, axis=None, dtype=None, out=None, ddof=0, keepdims=False, *, where=True,
        mean=None, correction=None):
    """NumPy's ``std``: the square root of ``var``."""
    _refuse("numpy.std", out=(out, None), where=(where, True), mean=(mean, None))
    return T.sqrt(var(a, axis, dtype, None, ddof, keepdims, correction=correction))


def clip(a, a_min=None, a_max=None, out=None, *, min=None, max=None):
    """NumPy's ``clip``: ``minimum(maximum(a, a_min), a_max)`` (NaN propagates; either bound
    may be None)."""
    _refuse("numpy.clip", out=(out, None))
    lo = a_min if a_min is not None else min
    hi = a_max if a_max is not None else max
    t = _tensor(a, "clip")
    if lo is not None:
        t = T.maximum(t, lo)
    return t if hi is None else T.minimum(t, hi)


def squeeze(a, axis=None):
    """Drop dims of size 1 (all of them, or those of ``axis``, which must be size 1)."""
    t = _tensor(a, "squeeze")
    axes = tuple(i for i, d in enumerate(t.shape) if d == 1) if axis is None else \
        _axes(axis, t.ndim, "squeeze", t.shape)
    if any(t.shape[i] != 1 for i in axes):
        raise ShapeError(f"cannot squeeze axes {axes} of shape {t.shape}: not all of size 1",
                         op="squeeze", src=user_src())
    return T.reshape(t, tuple(d for i, d in enumerate(t.shape) if i not in axes))


def expand_dims(a, axis):
    """Insert dims of size 1 at ``axis`` (positions in the result)."""
    t = _tensor(a, "expand_dims")
    axes = _axes(axis, t.ndim + len(axis if isinstance(axis, (tuple, list)) else (axis,)),
                 "expand_dims", t.shape)
    dims = iter(t.shape)
    return T.reshape(t, tuple(1 if i in axes else next(dims)
                              for i in range(t.ndim + len(axes))))


def swapaxes(a, axis1, axis2):
    """Exchange two axes."""
    t = _tensor(a, "swapaxes")
    i, j = (_axes(x, t.ndim, "swapaxes", t.shape)[0] for x in (axis1, axis2))
    perm = list(range(t.ndim))
    perm[i], perm[j] = j, i
    return T.transpose(t, perm)


def moveaxis(a, source, destination):
    """Move axes to new positions, the others keeping their order (NumPy's rule)."""
    t = _tensor(a, "moveaxis")
    src = [_axes(s, t.ndim, "moveaxis", t.shape)[0] for s in np.atleast_1d(source).tolist()]
    dst = [_axes(s, t.ndim, "moveaxis", t.shape)[0]
           for s in np.atleast_1d(destination).tolist()]
    if len(src) != len(dst):
        raise ShapeError(f"source {source!r} and destination {destination!r} differ in "
                         "length", op="moveaxis", src=user_src())
    order = [n for n in range(t.ndim) if n not in src]
    for d, s in sorted(zip(dst, src)):
        order.insert(d, s)
    return T.transpose(t, order)


def ravel(a, order="C"):
    """Flatten (C order)."""
    _refuse("numpy.ravel", order=(order, "C"))
    return T.reshape(_tensor(a, "ravel"), (-1,))


def tensordot(a, b, axes=2):
    """Sum over ``axes`` of ``a`` and ``b`` (an int N: a's last N with b's first N), as an
    einsum."""
    ta, tb = T._coerce([a, b], "tensordot", user_src())
    if isinstance(axes, (int, np.integer)):
        pairs = (list(range(ta.ndim - axes, ta.ndim)), list(range(axes)))
    else:
        pairs = tuple(np.atleast_1d(x).tolist() for x in axes)
    ia = [x % builtins.max(ta.ndim, 1) for x in pairs[0]]
    ib = [x % builtins.max(tb.ndim, 1) for x in pairs[1]]
    if len(ia) != len(ib) or any(ta.shape[i] != tb.shape[j] for i, j in zip(ia, ib)):
        raise ShapeError(f"tensordot axes {axes!r} do not pair dims of {ta.shape} and "
                         f"{tb.shape}", op="tensordot", src=user_src())
    names = [einsum_mod.label(i) for i in range(ta.ndim + tb.ndim)]
    la = names[:ta.ndim]
    lb = names[ta.ndim:]
    for i, j in zip(ia, ib):
        lb[j] = la[i]
    out = [c for k, c in enumerate(la) if k not in ia] + [c for k, c in enumerate(lb)
                                                         if k not in ib]
    return T.einsum(f"{''.join(la)},{''.join(lb)}->{''.join(out)}", ta, tb)


def dot(a, b, out=None):
    """NumPy's ``dot``: a product with a scalar, else a sum over a's last axis and b's
    second-to-last (its only one when 1-d)."""
    _refuse("numpy.dot", out=(out, None))
    ta, tb = T._coerce([a, b], "dot", user_src())
    if ta.ndim == 0 or tb.ndim == 0:
        return ta * tb
    return tensordot(ta, tb, ([-1], [0 if tb.ndim == 1 else -2]))


def outer(a, b, out=None):
    """The outer product of ``a`` and ``b`` flattened."""
    _refuse("numpy.outer", out=(out, None))
    ta, tb = T._coerce([a, b], "outer", user_src())
    return T.einsum("i,j->ij", ravel(ta), ravel(tb))


def full_like(a, fill_value, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """``fill_value`` broadcast to ``a``'s shape (or ``shape``) in ``a``'s dtype (or
    ``dtype``)."""
    _refuse("numpy.full_like", order=(order, "K"), device=(device, None))
    t = _tensor(a, "full_like")
    value = np.asarray(fill_value, dtype=dtype or t.dtype)
    return T.broadcast_to(t.graph._const(value, user_src()),
                          t.shape if shape is None else shape)


def zeros_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """Zeros of ``a``'s shape and dtype."""
    return full_like(a, 0, dtype, order, subok, shape, device=device)


def ones_like(a, dtype=None, order="K", subok=True, shape=None, *, device=None):
    """Ones of ``a``'s shape and dtype."""
    return full_like(a, 1, dtype, order, subok, shape, device=device)


def _reduction(op):
    def f(a, axis=None, dtype=None, out=None, keepdims=False, initial=None, where=True):
        _refuse(f"numpy.{op.__name__}", out=(out, None), initial=(initial, None),
                where=(where, True))
        t = _tensor(a, op.__name__)
        return op(t, axis, keepdims, dtype=dtype)
    f.__name__ = op.__name__
    f.__doc__ = f"NumPy's ``{op.__name__}`` (``dtype=``: the accumulator and result type)."
    return f


def _extremum(op):
    def f(a, axis=None, out=None, keepdims=False, initial=None, where=True):
        _refuse(f"numpy.{op.__name__}", out=(out, None), initial=(initial, None),
                where=(where, True))
        return op(a, axis, keepdims)
    f.__name__ = op.__name__
    f.__doc__ = f"NumPy's ``{op.__name__}``."
    return f


def _einsum(*operands, out=None, optimize=False, dtype=None, order="K", casting="safe"):
    # ``optimize`` is accepted and left to graphopt, which orders every contraction itself
    _refuse("numpy.einsum", out=(out, None), order=(order, "K"), casting=(casting, "safe"))
    res = T.einsum(*operands)
    return res if dtype is None else T.astype(res, dtype)


def _where(condition, *xy):
    if len(xy) != 2:
        raise GraphError("numpy.where(condition) (the indices of true elements) has a "
                         "data-dependent shape; use numpy.where(condition, x, y)",
                         op="numpy.where", src=user_src())
    return T.where(condition, *xy)


def _reshape(a, shape=None, order="C", *, newshape=None, copy=None):
    _refuse("numpy.reshape", order=(order, "C"))
    return T.reshape(a, shape if shape is not None else newshape)


def _astype(x, dtype, /, *, copy=True, device=None):
    _refuse("numpy.astype", device=(device, None))
    return T.astype(x, dtype)


def _size(a, axis=None):
    return a.size if axis is None else a.shape[axis]


FUNCTIONS = {
    np.einsum: _einsum, np.sum: _reduction(T.sum), np.mean: _reduction(T.mean),
    np.max: _extremum(T.max), np.amax: _extremum(T.max), np.min: _extremum(T.min),
    np.amin: _extremum(T.min), np.var: var, np.std: std, np.clip: clip, np.where: _where,
    np.transpose: lambda a, axes=None: T.transpose(a, axes), np.reshape: _reshape,
    np.broadcast_to: lambda array, shape, subok=False: T.broadcast_to(array, shape),
    np.squeeze: squeeze, np.expand_dims: expand_dims, np.swapaxes: swapaxes,
    np.moveaxis: moveaxis, np.ravel: ravel, np.tensordot: tensordot, np.dot: dot,
    np.outer: outer, np.real: T.real, np.imag: T.imag, np.astype: _astype,
    np.full_like: full_like, np.zeros_like: zeros_like, np.ones_like: ones_like,
    np.shape: lambda a: a.shape, np.ndim: lambda a: a.ndim, np.size: _size,
    np.copy: lambda a, order="K", subok=False: _copy(_tensor(a, "copy"), order),
    **products.FUNCTIONS,
}

UFUNCS = {
    np.add: T.add, np.subtract: T.sub, np.multiply: T.mul, np.true_divide: T.div,
    np.power: T.pow, np.maximum: T.maximum, np.minimum: T.minimum, np.equal: T.equal,
    np.not_equal: T.not_equal, np.less: T.less, np.less_equal: T.less_equal,
    np.greater: T.greater, np.greater_equal: T.greater_equal, np.negative: T.neg,
    np.positive: lambda x: x, np.absolute: T.abs, np.exp: T.exp, np.log: T.log,
    np.sqrt: T.sqrt, np.tanh: T.tanh, np.sin: T.sin, np.cos: T.cos, np.square: T.square,
    np.reciprocal: T.reciprocal, np.conjugate: T.conj, np.matmul: T.matmul,
    **compositions.UFUNCS,
}

# ``ufunc.reduce`` of these is a graph reduction
_UFUNC_REDUCTIONS = {np.add: T.sum, np.maximum: T.max, np.minimum: T.min}

# What to write instead, for NumPy calls a user is likely to reach for
HINTS = {
    "log1p": "go.log(1 + x)", "expm1": "go.exp(x) - 1", "exp2": "2.0 ** x",
    "log2": "go.log(x) / math.log(2)", "log10": "go.log(x) / math.log(10)",
    "tan": "go.sin(x) / go.cos(x)",
    "fmax": "go.maximum (NaN-propagating) or go.where", "fmin": "go.minimum or go.where",
    "prod": "go.exp(go.sum(go.log(x))) for positive x",
    "matrix_transpose": "np.swapaxes(x, -1, -2)",
    "argmax": "a one-hot via x == x.max(axis, "
    "keepdims=True)", "concatenate": "separate outputs, or an einsum with selector "
    "matrices", "stack": "separate outputs, or an einsum with selector matrices",
    "logaddexp": "go.logsumexp of the stacked values, or go.log(go.exp(a) + go.exp(b))",
}


def _unsupported(call: str, what: str) -> GraphError:
    short = call.rpartition(".")[2]
    hint = f"; use {HINTS[short]}" if short in HINTS else ""
    takes = sorted({_name(f) for f in FUNCTIONS} | {_name(f) for f in UFUNCS})
    return GraphError(f"{call} {what} has no graph op{hint}. NumPy functions a Tensor takes: "
                      f"{', '.join(takes)}", op=call, src=user_src())


def array_ufunc(self, ufunc, method, *inputs, **kwargs):
    """NumPy's ufunc protocol: ``np.exp(x)``, ``ndarray + x``, ``np.add.reduce(x)``."""
    call = _name(ufunc)
    if method == "reduce" and ufunc in _UFUNC_REDUCTIONS:
        dtype = kwargs.pop("dtype", None) if ufunc is np.add else None
        _refuse(f"{call}.reduce", out=(kwargs.pop("out", None), None),
                dtype=(kwargs.pop("dtype", None), None),
                initial=(kwargs.pop("initial", None), None),
                where=(kwargs.pop("where", True), True))
        (x,) = inputs
        axis, keepdims = kwargs.pop("axis", 0), kwargs.pop("keepdims", False)
        if dtype is not None:
            return T.sum(x, axis, keepdims, dtype=dtype)
        return _UFUNC_REDUCTIONS[ufunc](x, axis, keepdims)
    if method != "__call__":
        raise _unsupported(f"{call}.{method}", "on a Tensor")
    if ufunc not in UFUNCS:
        raise _unsupported(call, "on a Tensor")
    out = kwargs.pop("out", None)
    _refuse(call, out=(out, None), **{k: (v, None) for k, v in kwargs.items()})
    return UFUNCS[ufunc](*inputs)


def array_function(self, func, types, args, kwargs):
    """NumPy's function protocol: ``np.einsum``, ``np.sum``, ``np.var`` ... on Tensors."""
    f = FUNCTIONS.get(func)
    if f is None:
        raise _unsupported(_name(func), "on a Tensor")
    return f(*args, **kwargs)


def _missing_attribute(self, name: str):
    if name.startswith("__"):
        raise AttributeError(name)
    hint = f"; use {HINTS[name]}" if name in HINTS else did_you_mean(
        name, [a for a in dir(Tensor) if not a.startswith("_")])
    raise AttributeError(f"Tensor has no attribute {name!r} (numpy.ndarray.{name} has no graph "
                         f"op{hint})")


def install(cls) -> None:
    """Give ``cls`` (``Tensor``) NumPy's protocols, basic indexing and the NumPy-named
    methods built here."""
    cls.__array_ufunc__ = array_ufunc
    cls.__array_function__ = array_function
    cls.__getitem__ = index
    cls.__getattr__ = _missing_attribute
    for f in (var, std, clip, squeeze, swapaxes, ravel, dot, products.trace,
              products.diagonal):
        setattr(cls, f.__name__, f)
    cls.flatten = ravel
    cls.__iter__ = _iterate
    cls.copy = _copy


def _iterate(self):
    """``for row in x`` and ``a, b = x``: the sub-tensors along the first dim, as NumPy."""
    if self.ndim == 0:
        raise GraphError(f"iteration over a 0-d Tensor (shape {self.shape})", op="iter",
                         src=user_src())
    return (self[i] for i in range(self.shape[0]))


def _copy(self, order="K"):
    """``x.copy()``: graph values are never written in place, so the value itself."""
    _refuse("numpy.ndarray.copy", order=(order, "K"))
    return self


install(Tensor)
