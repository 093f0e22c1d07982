"""The op generators behind ``strategies.graphs()``: a builder that tracks, per tensor, a
bound on its magnitude and whether it is exact, and one generator per op kind.

Values stay tame. An operand that would push a result past ``LIMIT`` (or exp past
overflow) is squashed first, so a pass that reassociates never turns a test into
inf-vs-nan noise. Discontinuous ops (comparisons, casts to int/bool) only see *exact*
values — computed without rounding — so a legitimate reordering of float arithmetic
cannot flip them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import strategies as st

from ..frontend import tensor as gb
from ..frontend.graph import Graph
from ..frontend.tensor import Tensor
from ..ir.equivalence import random_values
from .einsums import ASCII_LABELS, LIMIT
from .einsums import chain as _chain
from .einsums import einsum as _einsum

INPUT_BOUND = 3.0      # inputs: floats/complex within 2, ints within 3
OP_KINDS = ("unary", "binary", "reduce", "einsum", "chain", "layout", "matmul", "compare",
            "astype", "const", "softmax", "shared")
UNICODE_LABELS = "αβγδεζηθικλμνξπρστυφχψωЖЗИЛ"


@dataclass
class _Item:
    t: Tensor
    bound: float   # |value| <= bound for every element
    exact: bool    # computed without rounding, so reassociation cannot change it


def _kind(t: Tensor) -> str:
    return t.dtype.kind  # b, i, f, c


def _bcast(*shapes):
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        return None


class Builder:
    """One graph under construction: the tensors built so far (each with its bound and
    exactness), the recipes that ``shared`` can replay, and hypothesis' ``draw``."""

    def __init__(self, draw, g: Graph, dtypes, max_dim: int, unicode: bool):
        self.draw, self.g, self.dtypes, self.max_dim = draw, g, dtypes, max_dim
        self.labels = ASCII_LABELS + (UNICODE_LABELS if unicode else "")
        self.items: list[_Item] = []
        self.recipes: list[Callable] = []

    def add(self, t: Tensor, bound: float, exact: bool) -> _Item:
        it = _Item(t, float(bound), bool(exact) or _kind(t) in "bi")
        self.items.append(it)
        return it

    def emit(self, make: Callable, shareable: bool = True) -> None:
        """Build one op now; keep the recipe so ``shared`` can build it again."""
        make(False)
        if shareable:
            self.recipes.append(make)

    def pick(self, pred=lambda it: True) -> _Item | None:
        """An earlier tensor, the most recent first (shrinks towards short chains). Never
        an empty one (an index can slice a dim to 0): it stays a graph output, since most
        ops on it (a max with no identity, a reshape to a scalar, an einsum label of size
        0 beside 2) are errors by NumPy's rules, not graphs to generate."""
        cands = [it for it in self.items if it.t.size and pred(it)]
        if not cands:
            return None
        return cands[len(cands) - 1 - self.draw(st.integers(0, len(cands) - 1))]

    def tame(self, it: _Item, limit: float = 1.0) -> _Item:
        """``it`` itself if its bound is within ``limit``, else a squashed copy of it."""
        if it.bound <= limit:
            return it
        k = _kind(it.t)
        if k == "f":
            return self.add(gb.tanh(it.t), 1.0, False)
        if k == "c":
            return self.add(it.t / (abs(it.t) + 1.0), 1.0, False)
        return self.add(gb.minimum(gb.maximum(it.t, -3), 3), 3.0, True)  # ints: clip, exact

    def const(self, shape, dtype) -> _Item:
        seed = self.draw(st.integers(0, 2**16))
        vals = random_values(np.random.default_rng(seed), shape, dtype)
        return self.add(self.g.const(vals), INPUT_BOUND, True)

    def shape(self, max_rank=3) -> tuple[int, ...]:
        rank = self.draw(st.integers(0, max_rank))
        return tuple(self.draw(st.integers(1, self.max_dim)) for _ in range(rank))


# ------------------------------------------------------------------------- op generators

_REAL_UNARY = ("tanh", "sin", "cos", "sigmoid", "relu", "gelu", "abs", "neg", "square", "exp",
               "log1p_abs", "sqrt_abs", "recip", "conj", "real", "imag", "squash")
_COMPLEX_UNARY = ("abs", "neg", "square", "exp", "sin", "cos", "log1p_abs", "sqrt_abs", "recip",
                  "conj", "real", "imag", "squash")
_INT_UNARY = ("abs", "neg", "square", "exp", "tanh", "sin", "sqrt_abs", "log1p_abs")


def _unary(b: Builder) -> bool:
    it = b.pick(lambda it: _kind(it.t) != "b")
    if it is None:
        return False
    k = _kind(it.t)
    name = b.draw(st.sampled_from(_REAL_UNARY if k == "f" else
                                  _COMPLEX_UNARY if k == "c" else _INT_UNARY))
    style = b.draw(st.booleans())  # operator/method form or go.<fn> form
    trig = (lambda x: math.cosh(x)) if k == "c" else (lambda x: 1.0)
    # name: (operand limit, build, bound of result given operand bound, keeps exactness)
    table = {
        "tanh": (math.inf, gb.tanh, lambda x: 1.0, False),
        "sin": (math.inf if k != "c" else 3.0, gb.sin, trig, False),
        "cos": (math.inf if k != "c" else 3.0, gb.cos, trig, False),
        "sigmoid": (math.inf, gb.sigmoid, lambda x: 1.0, False),
        "relu": (math.inf, gb.relu, lambda x: x, True),
        "gelu": (math.inf, gb.gelu, lambda x: x, False),
        "abs": (math.inf, (lambda t: abs(t)) if style else gb.abs, lambda x: x, True),
        "neg": (math.inf, (lambda t: -t) if style else gb.neg, lambda x: x, True),
        "square": (math.sqrt(LIMIT), (lambda t: t ** 2) if style else gb.square,
                   lambda x: x * x, False),
        "exp": (3.0, gb.exp, math.exp, False),
        "log1p_abs": (math.inf, lambda t: gb.log(abs(t) + 1), lambda x: math.log1p(x), False),
        "sqrt_abs": (math.inf, lambda t: gb.sqrt(abs(t)), math.sqrt, False),
        "recip": (math.inf, lambda t: gb.reciprocal(abs(t) + 1.0), lambda x: 1.0, False),
        "conj": (math.inf, (lambda t: t.conj()) if style else gb.conj, lambda x: x, True),
        "real": (math.inf, (lambda t: t.real) if style else gb.real, lambda x: x, True),
        "imag": (math.inf, (lambda t: t.imag) if style else gb.imag, lambda x: x, True),
        "squash": (math.inf, lambda t: t / (abs(t) + 1), lambda x: 1.0, False),
    }
    limit, fn, bound, keeps = table[name]
    x = b.tame(it, limit)
    b.emit(lambda _: b.add(fn(x.t), bound(x.bound), keeps and x.exact))
    return True


def _partner(b: Builder, a: _Item, *, complex_ok: bool = True, exact: bool = False):
    """A second operand for ``a``: an earlier tensor that broadcasts with it, ``a`` itself,
    a fresh constant of a broadcastable shape, or a Python scalar (weakly typed, NEP 50)."""
    kinds = "ifc" if complex_ok else "if"
    mode = b.draw(st.sampled_from(("tensor", "self", "const", "scalar")))
    if mode == "tensor":
        p = b.pick(lambda it: _kind(it.t) in kinds and (it.exact or not exact) and
                   _bcast(it.t.shape, a.t.shape) is not None)
        if p is not None:
            return p
    if mode in ("tensor", "self"):
        return a
    if mode == "const":
        shape = tuple(1 if b.draw(st.booleans()) else d for d in a.t.shape)
        shape = shape[b.draw(st.integers(0, len(shape))):]
        dtype = b.draw(st.sampled_from(b.dtypes))
        if np.dtype(dtype).kind not in kinds:
            dtype = "float64"
        return b.const(shape, dtype)
    vals = [0, 1, 2, -1, 0.0, 1.0, 0.5, -2.0, 1.5]
    if complex_ok and _kind(a.t) == "c":
        vals += [1j, 0.5 - 1j]
    v = b.draw(st.sampled_from(vals))
    return _Item(v, float(abs(v)), True)


def _binary(b: Builder) -> bool:
    a = b.pick(lambda it: _kind(it.t) != "b")
    if a is None:
        return False
    real_ops = ("maximum", "minimum", "pow")
    name = b.draw(st.sampled_from(("add", "sub", "mul", "div") +
                                  (real_ops if _kind(a.t) != "c" else ())))
    p = _partner(b, a, complex_ok=name not in real_ops)
    x, y = (p, a) if b.draw(st.booleans()) else (a, p)
    if name in ("add", "sub", "mul"):
        grow = x.bound * y.bound if name == "mul" else x.bound + y.bound
        if grow > LIMIT:
            x, y = (b.tame(v) if isinstance(v.t, Tensor) else v for v in (x, y))
        fn = {"add": (lambda u, v: u + v, gb.add), "sub": (lambda u, v: u - v, gb.sub),
              "mul": (lambda u, v: u * v, gb.mul)}[name][b.draw(st.integers(0, 1))]
        bound = x.bound * y.bound if name == "mul" else x.bound + y.bound
        b.emit(lambda _: b.add(fn(x.t, y.t), bound, False))  # float rounding: not exact
    elif name == "div":  # a / (|p| + 1): the denominator is at least 1
        b.emit(lambda _: b.add(gb.div(a.t, abs(p.t) + 1), a.bound, False))
    elif name in ("maximum", "minimum"):
        fn = gb.maximum if name == "maximum" else gb.minimum
        b.emit(lambda _: b.add(fn(x.t, y.t), max(x.bound, y.bound), x.exact and y.exact))
    else:  # (|a| + 1) ** e with e = tanh(p) or a small scalar: a positive base, no overflow
        if isinstance(p.t, Tensor):
            e = b.add(gb.tanh(p.t), 1.0, False)
        else:
            e = _Item(b.draw(st.sampled_from((2, 0.5, -1.0, 1))), 2.0, True)
            a = b.tame(a, 9.0)
        base = b.add(abs(a.t) + 1, a.bound + 1, False)
        b.emit(lambda _: b.add(base.t ** e.t, base.bound ** e.bound, False))
    return True


def _compare(b: Builder) -> bool:
    a = b.pick(lambda it: it.exact and _kind(it.t) in "bif")
    if a is None:
        return False
    if _kind(a.t) == "b":
        cond = a
    else:
        p = _partner(b, a, complex_ok=False, exact=True)
        op = b.draw(st.sampled_from(("lt", "le", "gt", "ge", "eq", "ne")))
        fns = {"lt": lambda u, v: u < v, "le": lambda u, v: u <= v, "gt": lambda u, v: u > v,
               "ge": lambda u, v: u >= v, "eq": gb.equal, "ne": gb.not_equal}
        cond = b.add(fns[op](a.t, p.t), 1.0, True)
    if b.draw(st.booleans()):
        return True
    x = b.pick(lambda it: _kind(it.t) != "b" and _bcast(it.t.shape, cond.t.shape) is not None)
    if x is None:
        return True
    y = b.pick(lambda it: _kind(it.t) != "b" and
               _bcast(it.t.shape, cond.t.shape, x.t.shape) is not None) or _Item(0.0, 0.0, True)
    b.emit(lambda _: b.add(gb.where(cond.t, x.t, y.t), max(x.bound, y.bound),
                           x.exact and y.exact))
    return True


def _axes(b: Builder, ndim: int):
    mode = b.draw(st.sampled_from(("none", "int", "tuple")))
    if mode == "none" or ndim == 0:
        return None
    if mode == "int":
        a = b.draw(st.integers(0, ndim - 1))
        return a - ndim if b.draw(st.booleans()) else a
    return tuple(i for i in range(ndim) if b.draw(st.booleans()))


def _reduce(b: Builder) -> bool:
    it = b.pick()
    if it is None:
        return False
    k = _kind(it.t)
    name = b.draw(st.sampled_from(("sum", "mean", "max", "min") if k in "if" else
                                  ("sum", "mean") if k == "c" else ("sum",)))
    axis = _axes(b, it.t.ndim)
    keepdims = b.draw(st.booleans())
    axes = range(it.t.ndim) if axis is None else (axis,) if isinstance(axis, int) else axis
    count = math.prod(it.t.shape[a] for a in axes)
    if name == "sum" and it.bound * count > LIMIT:
        it = b.tame(it)
    method = b.draw(st.booleans())
    fn = getattr(gb, name)
    bound = it.bound * count if name == "sum" else it.bound
    b.emit(lambda _: b.add(getattr(it.t, name)(axis=axis, keepdims=keepdims) if method
                           else fn(it.t, axis, keepdims), bound,
                           it.exact and name in ("max", "min")))
    return True


@st.composite
def basic_indices(draw, shape) -> tuple:
    """A NumPy basic index into ``shape``: per dim an int (either sign), a slice (any
    bounds, steps of either sign) or all; ``None`` inserted and a ``...`` where drawn."""
    key = []
    for d in shape:
        form = draw(st.sampled_from(("all", "slice", "int") if d else ("all", "slice")))
        if form == "int":
            key.append(draw(st.integers(-d, d - 1)))
        elif form == "slice":
            bound = st.none() | st.integers(-d - 2, d + 2)
            key.append(slice(draw(bound), draw(bound),
                             draw(st.none() | st.integers(-3, 3).filter(bool))))
        else:
            key.append(slice(None))
    for _ in range(draw(st.integers(0, 2))):
        key.insert(draw(st.integers(0, len(key))), None)
    if draw(st.booleans()):       # a ``...`` standing for a run of whole dims
        at = draw(st.integers(0, len(key)))
        n = draw(st.integers(0, len(key) - at))
        if all(k == slice(None) for k in key[at:at + n]):
            key[at:at + n] = [Ellipsis]
    return tuple(key)


def _layout(b: Builder) -> bool:
    it = b.pick()
    if it is None:
        return False
    t, shape = it.t, it.t.shape
    kind = b.draw(st.sampled_from(("reshape", "transpose", "T", "broadcast_to", "index")))
    if kind == "reshape":
        factors = [p for d in shape for p in _prime_factors(d)]
        new, i = [], 0
        while i < len(factors):
            n = b.draw(st.integers(1, len(factors) - i))
            new.append(math.prod(factors[i:i + n]))
            i += n
        for _ in range(b.draw(st.integers(0, 1))):
            new.insert(b.draw(st.integers(0, len(new))), 1)
        if new and b.draw(st.booleans()):
            new[b.draw(st.integers(0, len(new) - 1))] = -1
        make = lambda _: t.reshape(tuple(new))
    elif kind == "transpose" and t.ndim:
        perm = b.draw(st.permutations(range(t.ndim)))
        neg = b.draw(st.booleans())
        make = lambda _: gb.transpose(t, [p - t.ndim if neg else p for p in perm])
    elif kind == "broadcast_to":
        new = [b.draw(st.integers(1, b.max_dim)) if d == 1 and b.draw(st.booleans()) else d
               for d in shape]
        new = [b.draw(st.integers(1, b.max_dim)) for _ in range(b.draw(st.integers(0, 1)))] + new
        make = lambda _: gb.broadcast_to(t, tuple(new))
    elif kind == "index":
        key = b.draw(basic_indices(shape))
        make = lambda _: t[key]
    else:
        make = lambda _: t.T
    b.emit(lambda v: b.add(make(v), it.bound, it.exact))
    return True


def _prime_factors(n: int) -> list[int]:
    out, p = [], 2
    while n > 1:
        while n % p == 0:
            out.append(p)
            n //= p
        p += 1
    return out


def _astype(b: Builder) -> bool:
    it = b.pick()
    if it is None:
        return False
    target = b.draw(st.sampled_from(tuple(dict.fromkeys(b.dtypes + ("float32", "float64",
                                                                     "bool")))))
    tk, sk = np.dtype(target).kind, _kind(it.t)
    if tk in "bi" and sk in "fc" and not it.exact:
        target = "float64"  # truncation of a rounded value could flip under reassociation
    b.emit(lambda _: b.add(it.t.astype(target), 1.0 if target == "bool" else it.bound,
                           it.exact))
    return True


def _const(b: Builder) -> bool:
    dtype = b.draw(st.sampled_from(b.dtypes))
    b.const(b.shape(), dtype)
    return True


def _softmax(b: Builder) -> bool:
    it = b.pick(lambda it: _kind(it.t) == "f" and it.t.ndim > 0)
    if it is None:
        return False
    axis = b.draw(st.integers(-it.t.ndim, it.t.ndim - 1))
    if b.draw(st.booleans()):
        b.emit(lambda _: b.add(gb.softmax(it.t, axis=axis), 1.0, False))
    else:
        keep = b.draw(st.booleans())
        bound = it.bound + math.log(it.t.shape[axis])
        b.emit(lambda _: b.add(gb.logsumexp(it.t, axis=axis, keepdims=keep), bound, False))
    return True


def _shared(b: Builder) -> bool:
    if not b.recipes:
        return False
    b.recipes[b.draw(st.integers(0, len(b.recipes) - 1))](True)
    return True


def _matmul(b: Builder) -> bool:
    a = b.pick(lambda it: _kind(it.t) in "ifc" and it.t.ndim >= 1)
    if a is None:
        return False

    def fits(it):
        if _kind(it.t) not in "ifc" or it.t.ndim == 0:
            return False
        try:
            np.zeros(a.t.shape) @ np.zeros(it.t.shape)
        except ValueError:
            return False
        return True

    p = b.pick(fits) or b.const((a.t.shape[-1], b.draw(st.integers(1, b.max_dim))),
                                "float64" if _kind(a.t) != "f" else str(a.t.dtype))
    a, p = b.tame(a), b.tame(p)
    b.emit(lambda _: b.add(a.t @ p.t, a.bound * p.bound * a.t.shape[-1], False))
    return True


GENERATORS = {"unary": _unary, "binary": _binary, "reduce": _reduce, "einsum": _einsum,
               "chain": _chain, "layout": _layout, "matmul": _matmul, "compare": _compare,
               "astype": _astype, "const": _const, "softmax": _softmax, "shared": _shared}
