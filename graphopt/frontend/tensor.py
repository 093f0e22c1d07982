"""Graph-building values: ``Tensor`` handles with NumPy-style operators and methods, and the
op functions of ``go.`` (elementwise, reductions, layout, contraction) they call.

Every op function checks its operands eagerly (shapes, dtypes, equations) and records the
user's ``file:line`` on the node, so a mistake is reported where it was written. A Tensor's
``graph`` is the ``graph.Graph`` it belongs to (this module never constructs one).
"""

from __future__ import annotations

import builtins
import math
import operator
import os
import sys
import threading
from typing import Any

import numpy as np

from ..errors import DTypeError, GraphError, ShapeError
from ..ir import einsum as einsum_mod
from ..ir import ops

_PKG_DIR = os.path.dirname(os.path.abspath(__file__))
# graphopt.testing builds graphs as a user would: its lines are the source of what it builds.
_TESTING_DIR = os.path.join(_PKG_DIR, "testing")
_SCALARS = (bool, int, float, complex)


def user_src() -> str:
    """``file:line`` of the innermost caller outside the graphopt package."""
    f = sys._getframe(1)
    while f is not None and f.f_code.co_filename.startswith(_PKG_DIR) and \
            not f.f_code.co_filename.startswith(_TESTING_DIR):
        f = f.f_back
    if f is None:
        return "<unknown>"
    return f"{f.f_code.co_filename}:{f.f_lineno}"


class Tensor:
    """A handle on one node of a Graph. Supports NumPy-style operators and methods."""

    __slots__ = ("graph", "id")
    __array_ufunc__ = None  # make ``ndarray + Tensor`` defer to Tensor.__radd__

    def __init__(self, graph, nid: int):
        self.graph = graph
        self.id = nid

    @property
    def _node(self):
        return self.graph._G._node[self.id]

    @property
    def shape(self) -> tuple[int, ...]:
        return self._node["shape"]

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(self._node["dtype"])

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def op(self) -> str:
        return self._node["op"]

    @property
    def T(self) -> "Tensor":
        return transpose(self)

    def __len__(self) -> int:
        if not self.shape:
            raise TypeError("len() of a 0-d Tensor")
        return self.shape[0]

    def __repr__(self) -> str:
        return f"Tensor({self.op}, shape={self.shape}, dtype={self.dtype.name}, node={self.id})"

    def __bool__(self):
        raise GraphError("a Tensor has no truth value while a graph is built (data-dependent "
                         "Python control flow cannot be traced); use go.where, or run the "
                         "function eagerly under go.disable_jit() to debug", src=user_src())

    def _no_value(self, call: str):
        raise GraphError(f"{call} of a Tensor: it has no value while a graph is built; return "
                         "it from the function, or run eagerly under go.disable_jit() to "
                         "debug", src=user_src())

    def __float__(self): self._no_value("float()")
    def __int__(self): self._no_value("int()")
    def __complex__(self): self._no_value("complex()")

    def __array__(self, *a, **k):
        raise GraphError("a Tensor is symbolic and cannot become a NumPy array; run the "
                         "compiled plan to get values", src=user_src())

    __hash__ = object.__hash__

    # arithmetic
    def __add__(self, o): return add(self, o)
    def __radd__(self, o): return add(o, self)
    def __sub__(self, o): return sub(self, o)
    def __rsub__(self, o): return sub(o, self)
    def __mul__(self, o): return mul(self, o)
    def __rmul__(self, o): return mul(o, self)
    def __truediv__(self, o): return div(self, o)
    def __rtruediv__(self, o): return div(o, self)
    def __pow__(self, o): return pow(self, o)
    def __rpow__(self, o): return pow(o, self)
    def __matmul__(self, o): return matmul(self, o)
    def __rmatmul__(self, o): return matmul(o, self)
    def __neg__(self): return neg(self)
    def __pos__(self): return self
    def __abs__(self): return abs(self)
    def __eq__(self, o): return equal(self, o)
    def __ne__(self, o): return not_equal(self, o)
    def __lt__(self, o): return less(self, o)
    def __le__(self, o): return less_equal(self, o)
    def __gt__(self, o): return greater(self, o)
    def __ge__(self, o): return greater_equal(self, o)

    # methods
    def sum(self, axis=None, keepdims=False, *, dtype=None):
        return sum(self, axis, keepdims, dtype=dtype)
    def max(self, axis=None, keepdims=False): return max(self, axis, keepdims)
    def min(self, axis=None, keepdims=False): return min(self, axis, keepdims)
    def mean(self, axis=None, keepdims=False, *, dtype=None):
        return mean(self, axis, keepdims, dtype=dtype)
    def reshape(self, *shape): return reshape(self, shape[0] if len(shape) == 1 else shape)
    def astype(self, dtype): return astype(self, dtype)
    def conj(self): return conj(self)

    def transpose(self, *axes):
        if len(axes) == 1 and not isinstance(axes[0], (int, np.integer)):
            axes = tuple(axes[0]) if axes[0] is not None else ()
        return transpose(self, axes or None)

    @property
    def real(self): return real(self)

    @property
    def imag(self): return imag(self)


# ------------------------------------------------------------------------- operand handling

_trace_state = threading.local()


def _graph_of(args, op: str, src: str):
    graphs = {id(a.graph): a.graph for a in args if isinstance(a, Tensor)}
    if len(graphs) > 1:
        raise GraphError("operands belong to different Graphs", op=op, src=src)
    if graphs:
        return next(iter(graphs.values()))
    current = getattr(_trace_state, "graph", None)
    if current is not None:
        return current
    raise GraphError("no operand is a Tensor: build ops on Tensors from g.input/g.const",
                     op=op, src=src)


def _coerce(args, op: str, src: str) -> list[Tensor]:
    """Tensors for ``args``; arrays become constants and Python scalars are weakly typed
    (NumPy 2 / NEP 50: ``float32_tensor * 2.0`` stays float32)."""
    g = _graph_of(args, op, src)
    strong = None      # (made where a scalar needs it: an einsum of hundreds of Tensors has none)
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a)
        elif isinstance(a, _SCALARS):
            if strong is None:
                strong = [x.dtype for x in args if isinstance(x, Tensor)] + \
                    [np.asarray(x).dtype for x in args if isinstance(x, (np.ndarray, np.generic))]
            dtype = np.result_type(*strong, a) if strong else None
            try:
                with np.errstate(all="raise"):
                    out.append(g._const(a, src, dtype=dtype))
            except (GraphError, FloatingPointError) as e:
                raise DTypeError(f"Python scalar {a!r} does not fit dtype {dtype}: {e}",
                                 op=op, src=src) from None
        elif isinstance(a, (np.ndarray, np.generic, list)):
            out.append(g._const(a, src))
        else:
            raise DTypeError(f"operand of type {type(a).__name__} is not a Tensor, array or "
                             "scalar", op=op, src=src)
    return out


def _apply(op: str, *args, attrs=None) -> Tensor:
    src = user_src()
    ts = _coerce(args, op, src)
    return ts[0].graph._add(op, ts, attrs, src=src) if ts else None


# --------------------------------------------------------------------------- elementwise ops

def _unary(name, doc):
    def f(x):
        return _apply(name, x)
    f.__name__ = name
    f.__doc__ = doc
    return f


exp = _unary("exp", "Elementwise e**x.")
log = _unary("log", "Elementwise natural logarithm.")
sqrt = _unary("sqrt", "Elementwise square root.")
abs = _unary("abs", "Elementwise absolute value (modulus for complex).")
neg = _unary("neg", "Elementwise negation.")
tanh = _unary("tanh", "Elementwise hyperbolic tangent.")
sigmoid = _unary("sigmoid", "Elementwise logistic function 1/(1+exp(-x)).")
relu = _unary("relu", "Elementwise max(x, 0).")
gelu = _unary("gelu", "GELU, tanh approximation: 0.5x(1+tanh(sqrt(2/pi)(x+0.044715x^3))), "
              "with sqrt(2/pi) and 0.044715 the real numbers, not their float64 roundings "
              "(every backend is within 3.5 ulp of that function, to the far negative "
              "tail; a program that rounds the constants first, as JAX's and PyTorch's do, "
              "differs from it by up to 2**-53 |w| relative, w = 2u, there).")
sin = _unary("sin", "Elementwise sine.")
cos = _unary("cos", "Elementwise cosine.")
square = _unary("square", "Elementwise x*x.")
reciprocal = _unary("reciprocal", "Elementwise 1/x (integer division for ints, as NumPy).")
conj = _unary("conj", "Complex conjugate.")
real = _unary("real", "Real part.")
imag = _unary("imag", "Imaginary part.")


def _binary(name, doc):
    def f(a, b):
        return _apply(name, a, b)
    f.__name__ = name
    f.__doc__ = doc
    return f


add = _binary("add", "a + b with NumPy broadcasting and promotion.")
sub = _binary("sub", "a - b.")
mul = _binary("mul", "a * b.")
div = _binary("div", "a / b (true division).")


def pow(a, b) -> Tensor:
    """``a ** b``. Integers to negative integer powers are an error, as in NumPy."""
    src = user_src()
    ta = a if isinstance(a, Tensor) else None
    power = b._node["attrs"]["value"] if isinstance(b, Tensor) and b.op == "const" else b
    if ta is not None and ta.dtype.kind in "bi" and not isinstance(power, (Tensor, bool)) and \
            np.asarray(power).dtype.kind in "iu" and np.any(np.asarray(power) < 0):
        raise DTypeError(f"Integers to negative integer powers are not allowed (as in NumPy): "
                         f"{ta.dtype.name} {ta.shape} ** {power!r}; cast to float first",
                         op="pow", src=src)
    ts = _coerce([a, b], "pow", src)
    return ts[0].graph._add("pow", ts, src=src)


maximum = _binary("maximum", "Elementwise maximum (NaN-propagating, as NumPy).")
minimum = _binary("minimum", "Elementwise minimum (NaN-propagating, as NumPy).")
equal = _binary("eq", "a == b, elementwise.")
not_equal = _binary("ne", "a != b, elementwise.")
less = _binary("lt", "a < b, elementwise.")
less_equal = _binary("le", "a <= b, elementwise.")
greater = _binary("gt", "a > b, elementwise.")
greater_equal = _binary("ge", "a >= b, elementwise.")


def where(cond, a, b) -> Tensor:
    """``a`` where ``cond`` is true, else ``b`` (all three broadcast)."""
    return _apply("where", cond, a, b)


def astype(x, dtype) -> Tensor:
    """Cast to ``dtype`` (NumPy casting)."""
    src = user_src()
    try:
        name = ops.canonical_dtype(dtype)
    except GraphError as e:
        raise e.located(op="astype", src=src) from None
    (t,) = _coerce([x], "astype", src)
    return t.graph._add("astype", [t], {"dtype": name}, src=src)


# ------------------------------------------------------------------------------- reductions

def _reduce(name, x, axis, keepdims):
    src = user_src()
    (t,) = _coerce([x], name, src)
    try:
        axes = ops.normalize_axes(axis, t.ndim)
    except GraphError as e:
        raise type(e)(f"{e.detail} (operand shape {t.shape})", op=name, src=src) from None
    return t.graph._add(name, [t], {"axes": axes, "keepdims": bool(keepdims)}, src=src)


def _in_dtype(name, x, axis, keepdims, dtype):
    """NumPy's ``sum``/``mean`` with ``dtype=``: the values are cast to ``dtype`` and summed
    in it, and the result is ``dtype``. The graph sums an integer or bool cast in the widest
    type and casts back, which is exact: wrapping addition is arithmetic modulo 2**bits, the
    same in any wider two's-complement type, and a bool sum cast back is ``any``, as NumPy's
    bool add. A mean's sum does the same, then divides and casts as NumPy does (``unsafe``:
    toward zero for an integer ``dtype``)."""
    src = user_src()
    try:
        d = ops.canonical_dtype(dtype)
    except GraphError as e:
        raise e.located(op=name, src=src) from None
    t = astype(x, d)
    if name == "sum" or np.dtype(d).kind not in "biu":
        return astype(_reduce(name, t, axis, keepdims), d)
    s = astype(_reduce("sum", t, axis, keepdims), d)
    count = s.size and t.size // s.size
    return astype(s / count if count else s * np.nan, d)


def sum(x, axis=None, keepdims=False, *, dtype=None) -> Tensor:
    """Sum over ``axis`` (None: all); ``dtype``: NumPy's accumulator and result type."""
    if dtype is not None:
        return _in_dtype("sum", x, axis, keepdims, dtype)
    return _reduce("sum", x, axis, keepdims)


def max(x, axis=None, keepdims=False) -> Tensor:
    """Maximum over ``axis`` (None: all)."""
    return _reduce("max", x, axis, keepdims)


def min(x, axis=None, keepdims=False) -> Tensor:
    """Minimum over ``axis`` (None: all)."""
    return _reduce("min", x, axis, keepdims)


def mean(x, axis=None, keepdims=False, *, dtype=None) -> Tensor:
    """Mean over ``axis`` (None: all); ``dtype``: NumPy's accumulator and result type."""
    if dtype is not None:
        return _in_dtype("mean", x, axis, keepdims, dtype)
    return _reduce("mean", x, axis, keepdims)


def softmax(x, axis=-1) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` over ``axis``: shifted so it cannot overflow."""
    m = max(x, axis=axis, keepdims=True)
    e = exp(x - m)
    return e / sum(e, axis=axis, keepdims=True)


def logsumexp(x, axis=None, keepdims=False) -> Tensor:
    """``log(sum(exp(x)))`` over ``axis``, shifted by the max; rows of -inf give -inf."""
    m = max(x, axis=axis, keepdims=True)
    finite = abs(m) < np.inf
    shift = where(finite, m, 0.0)
    out = log(sum(exp(x - shift), axis=axis, keepdims=True)) + shift
    if keepdims:
        return out
    (t,) = _coerce([x], "logsumexp", user_src())
    axes = ops.normalize_axes(axis, t.ndim)
    return reshape(out, tuple(d for i, d in enumerate(out.shape) if i not in axes))


# ----------------------------------------------------------------------------------- layout

def _ints(values, what: str, op: str, src: str, t: Tensor) -> tuple[int, ...]:
    """``values`` (an int or a sequence of ints) as a tuple of ints, else a ShapeError."""
    try:
        seq = (values,) if isinstance(values, (int, np.integer)) else tuple(values)
        return tuple(operator.index(v) for v in seq)
    except TypeError:
        raise ShapeError(f"{what} {values!r} is not an int or a sequence of ints (operand "
                         f"shape {t.shape})", op=op, src=src) from None


def reshape(x, shape) -> Tensor:
    """Reshape (C order); one dimension may be -1."""
    src = user_src()
    (t,) = _coerce([x], "reshape", src)
    shape = _ints(shape, "shape", "reshape", src, t)
    if shape.count(-1) > 1:
        raise ShapeError(f"only one -1 allowed in reshape {shape} of {t.shape}",
                         op="reshape", src=src)
    if -1 in shape:
        known = math.prod(d for d in shape if d != -1)
        if known == 0 or t.size % known:
            raise ShapeError(f"cannot reshape {t.shape} into {shape}", op="reshape", src=src)
        shape = tuple(t.size // known if d == -1 else d for d in shape)
    return t.graph._add("reshape", [t], {"shape": shape}, src=src)


def transpose(x, axes=None) -> Tensor:
    """Permute axes (reverse them when ``axes`` is None)."""
    src = user_src()
    (t,) = _coerce([x], "transpose", src)
    axes = tuple(reversed(range(t.ndim))) if axes is None else _ints(axes, "axes", "transpose",
                                                                       src, t)
    if any(not -t.ndim <= a < t.ndim for a in axes):
        raise ShapeError(f"axes {axes} are out of range for shape {t.shape}", op="transpose",
                         src=src)
    axes = tuple(a % t.ndim for a in axes)
    return t.graph._add("transpose", [t], {"axes": axes}, src=src)


def broadcast_to(x, shape) -> Tensor:
    """Broadcast to ``shape`` (NumPy rules)."""
    src = user_src()
    (t,) = _coerce([x], "broadcast_to", src)
    shape = _ints(shape, "shape", "broadcast_to", src, t)
    return t.graph._add("broadcast_to", [t], {"shape": shape}, src=src)


# ------------------------------------------------------------------------------ contraction

def einsum(*args) -> Tensor:
    """Einstein summation, as ``numpy.einsum``: ``einsum("ij,jk->ik", a, b)`` or the
    interleaved form ``einsum(a, [0, 1], b, [1, 2], [0, 2])`` (any hashable labels). Any
    number of operands, ``...``, repeated labels, implicit output; a label is any character
    opt_einsum takes (all but ``,``, ``-``, ``>`` and ``.``; ASCII spaces are dropped)."""
    src = user_src()
    if not args:
        raise GraphError("einsum needs an equation and operands", op="einsum", src=src)
    if isinstance(args[0], str):
        eq, operands = args[0], list(args[1:])
    else:
        try:
            eq, operands = einsum_mod.interleaved_to_equation(args)
        except GraphError as e:
            raise e.located(op="einsum", src=src) from None
    if not operands:
        raise GraphError(f"einsum {eq!r} has no operands", op="einsum", src=src)
    ts = _coerce(operands, "einsum", src)
    try:
        spec = einsum_mod.parse(eq, [t.shape for t in ts])
    except GraphError as e:
        raise e.located(op="einsum", src=src) from None
    g = ts[0].graph
    ts = [t if b is None else g._add("broadcast_to", [t], {"shape": b}, src=src)
          for t, b in zip(ts, spec.broadcast)]
    return g._add("einsum", ts, {"equation": spec.equation}, src=src)


def matmul(a, b) -> Tensor:
    """``a @ b`` with NumPy's matmul semantics (1-d promotion, batch broadcasting)."""
    src = user_src()
    ta, tb = _coerce([a, b], "matmul", src)
    if ta.ndim == 0 or tb.ndim == 0:
        raise ShapeError(f"matmul does not take 0-d operands (shapes {ta.shape}, {tb.shape})",
                         op="matmul", src=src)
    lhs = "...ij" if ta.ndim >= 2 else "j"
    rhs = "...jk" if tb.ndim >= 2 else "j"
    # builtins.max: this module's ``max`` is the reduction op.
    out = ("..." if builtins.max(ta.ndim, tb.ndim) > 2 or (ta.ndim >= 2 and tb.ndim >= 2)
           else "")
    out += ("i" if ta.ndim >= 2 else "") + ("k" if tb.ndim >= 2 else "")
    if ta.shape[-1] != tb.shape[-2 if tb.ndim >= 2 else 0]:
        raise ShapeError(f"matmul inner dimensions differ: {ta.shape} @ {tb.shape}",
                         op="matmul", src=src)
    return einsum(f"{lhs},{rhs}->{out}", ta, tb)


# -------------------------------------------------------------------------------- tracing

class tracing:
    """Context manager: ops on scalars/arrays with no Tensor operand go to ``graph``."""

    def __init__(self, graph):
        self.graph = graph

    def __enter__(self):
        self.prev = getattr(_trace_state, "graph", None)
        _trace_state.graph = self.graph
        return self.graph

    def __exit__(self, *exc):
        _trace_state.graph = self.prev


def traced_graph():
    """The graph ``tracing`` sends ops to on this thread (a ``@go.jit`` trace, or eager
    mode's), or None outside one."""
    return getattr(_trace_state, "graph", None)


def is_tensor(x: Any) -> bool:
    """``x`` is a graph ``Tensor``."""
    return isinstance(x, Tensor)
