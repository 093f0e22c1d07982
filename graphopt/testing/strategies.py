"""Hypothesis strategies: random graphs, einsum equations, and inputs (DESIGN §8).

``graphs()`` builds valid graphs through the public builder. They are DAGs by construction
(every operand is a tensor built earlier) and mix einsum (repeated labels, ellipsis,
implicit output, many operands, chains of single-consumer contractions), elementwise ops
with broadcasting and Python scalars, reductions, layout ops, casts and constants, with
shared subexpressions (also einsums with renamed labels and swapped operands) and dead
branches.

Values stay tame. Every tensor carries a bound on its magnitude; an operand that would
push a result past ``LIMIT`` (or exp past overflow) is squashed first, so a pass that
reassociates never turns a test into inf-vs-nan noise. Discontinuous ops (comparisons,
casts to int/bool) only see *exact* values — computed without rounding — so a legitimate
reordering of float arithmetic cannot flip them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable

import numpy as np
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from .. import graph as gb
from ..graph import Graph, Tensor

LIMIT = 100.0          # largest magnitude an op may produce before its operands are squashed
INPUT_BOUND = 3.0      # inputs: floats/complex within 2, ints within 3
DEFAULT_DTYPES = ("float64", "float32", "complex128", "int64")
OP_KINDS = ("unary", "binary", "reduce", "einsum", "chain", "layout", "matmul", "compare",
            "astype", "const", "softmax", "shared")
ASCII_LABELS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
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


def _random_values(rng: np.random.Generator, shape, dtype) -> np.ndarray:
    """Bounded random values: floats in [-2, 2], complex within 2, ints in [-3, 3]."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        return rng.integers(-3, 4, size=shape).astype(dt)
    if dt.kind == "c":
        z = rng.uniform(-1.4, 1.4, size=shape) + 1j * rng.uniform(-1.4, 1.4, size=shape)
        return np.asarray(z).astype(dt)
    return np.asarray(rng.uniform(-2, 2, size=shape)).astype(dt)


class _Builder:
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
        """An earlier tensor, the most recent first (shrinks towards short chains)."""
        cands = [it for it in self.items if pred(it)]
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
        vals = _random_values(np.random.default_rng(seed), shape, dtype)
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


def _unary(b: _Builder) -> bool:
    it = b.pick(lambda it: _kind(it.t) != "b")
    if it is None:
        return False
    k = _kind(it.t)
    name = b.draw(st.sampled_from(_REAL_UNARY if k == "f" else
                                  _COMPLEX_UNARY if k == "c" else _INT_UNARY))
    style = b.draw(st.booleans())  # operator/method form or go.<fn> form
    # name: (operand limit, build, bound of result given operand bound, keeps exactness)
    table = {
        "tanh": (math.inf, gb.tanh, lambda x: 1.0, False),
        "sin": (math.inf if k != "c" else 3.0, gb.sin, lambda x: math.cosh(x), False),
        "cos": (math.inf if k != "c" else 3.0, gb.cos, lambda x: math.cosh(x), False),
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
    x = b.tame(it, limit if limit < math.inf else math.inf)
    b.emit(lambda _: b.add(fn(x.t), bound(x.bound), keeps and x.exact))
    return True


def _partner(b: _Builder, a: _Item, *, complex_ok: bool = True, exact: bool = False):
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


def _binary(b: _Builder) -> bool:
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
        b.emit(lambda _: b.add(fn(x.t, y.t), bound, x.exact and y.exact and name != "mul"))
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


def _compare(b: _Builder) -> bool:
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


def _axes(b: _Builder, ndim: int):
    mode = b.draw(st.sampled_from(("none", "int", "tuple")))
    if mode == "none" or ndim == 0:
        return None
    if mode == "int":
        a = b.draw(st.integers(0, ndim - 1))
        return a - ndim if b.draw(st.booleans()) else a
    return tuple(i for i in range(ndim) if b.draw(st.booleans()))


def _reduce(b: _Builder) -> bool:
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


def _layout(b: _Builder) -> bool:
    it = b.pick()
    if it is None:
        return False
    t, shape = it.t, it.t.shape
    kind = b.draw(st.sampled_from(("reshape", "transpose", "T", "broadcast_to")))
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


def _astype(b: _Builder) -> bool:
    it = b.pick()
    if it is None:
        return False
    target = b.draw(st.sampled_from(tuple(dict.fromkeys(b.dtypes + ("float32", "float64",
                                                                     "bool")))))
    tk, sk = np.dtype(target).kind, _kind(it.t)
    if tk in "bi" and sk in "fc" and not it.exact:
        target = "float64"  # truncation of a rounded value could flip under reassociation
    if tk in "bif" and sk == "c" and not it.exact:
        target = "complex128"
    b.emit(lambda _: b.add(it.t.astype(target), 1.0 if target == "bool" else it.bound,
                           it.exact))
    return True


def _const(b: _Builder) -> bool:
    dtype = b.draw(st.sampled_from(b.dtypes))
    b.const(b.shape(), dtype)
    return True


def _softmax(b: _Builder) -> bool:
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


def _shared(b: _Builder) -> bool:
    if not b.recipes:
        return False
    b.recipes[b.draw(st.integers(0, len(b.recipes) - 1))](True)
    return True


def _matmul(b: _Builder) -> bool:
    a = b.pick(lambda it: _kind(it.t) in "ifc" and it.t.ndim >= 1)
    if a is None:
        return False

    def fits(it):
        if _kind(it.t) not in "ifc" or it.t.ndim == 0:
            return False
        try:
            np.empty(a.t.shape) @ np.empty(it.t.shape)
        except ValueError:
            return False
        return True

    p = b.pick(fits) or b.const((a.t.shape[-1], b.draw(st.integers(1, b.max_dim))),
                                "float64" if _kind(a.t) != "f" else str(a.t.dtype))
    a, p = b.tame(a), b.tame(p)
    b.emit(lambda _: b.add(a.t @ p.t, a.bound * p.bound * a.t.shape[-1], False))
    return True


from .einsums import chain as _chain  # noqa: E402
from .einsums import einsum as _einsum  # noqa: E402
from .einsums import einsum_equations  # noqa: E402,F401

_GENERATORS = {"unary": _unary, "binary": _binary, "reduce": _reduce, "einsum": _einsum,
               "chain": _chain, "layout": _layout, "matmul": _matmul, "compare": _compare,
               "astype": _astype, "const": _const, "softmax": _softmax, "shared": _shared}


# ---------------------------------------------------------------------------- strategies


@st.composite
def graphs(draw, max_nodes: int = 16, dtypes=DEFAULT_DTYPES, ops=OP_KINDS,
           max_inputs: int = 3, max_rank: int = 3, max_dim: int = 4, unicode: bool = False,
           name: str = "random") -> Graph:
    """A random valid ``go.Graph`` built through the public builder.

    Args:
        max_nodes: stop adding ops once the IR has this many nodes (a composite op may
            overshoot by a few).
        dtypes: dtypes drawn for inputs and constants (ops then promote as NumPy does).
        ops: op kinds to use, a subset of ``OP_KINDS``.
        max_inputs: 1..max_inputs inputs, named ``x0, x1, ...``.
        max_rank, max_dim: input shapes have rank <= max_rank and dims in 1..max_dim.
        unicode: also use non-ASCII einsum labels.
    """
    unknown = set(ops) - set(OP_KINDS)
    if unknown:
        raise ValueError(f"unknown op kinds {sorted(unknown)}; valid: {OP_KINDS}")
    dtypes = tuple(dtypes)
    g = Graph(name)
    b = _Builder(draw, g, dtypes, max_dim, unicode)
    for i in range(draw(st.integers(1, max_inputs))):
        shape = b.shape(max_rank)
        b.add(g.input(f"x{i}", shape, draw(st.sampled_from(dtypes))), INPUT_BOUND, True)
    kinds = tuple(k for k in OP_KINDS if k in ops)
    n_ops = draw(st.integers(1, max(1, max_nodes)))
    built = 0
    while built < n_ops and g._G.number_of_nodes() < max_nodes or built == 0:
        if _GENERATORS[draw(st.sampled_from(kinds))](b):
            built += 1
        elif not kinds or all(k == "shared" for k in kinds):
            break
    last = b.items[-1]
    outs = [last.t] + [b.pick().t for _ in range(draw(st.integers(0, 2)))]
    style = draw(st.sampled_from(("tensor", "tuple", "list", "dict")))
    if style == "tensor" and len(outs) == 1:
        g.output(outs[0])
    elif style == "dict":
        g.output({f"y{i}": t for i, t in enumerate(outs)})
    else:
        g.output(tuple(outs) if style == "tuple" else list(outs))
    return g


def _elements(dtype: str):
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return st.booleans()
    if dt.kind in "iu":
        return st.integers(-3, 3)
    if dt.kind == "c":
        return st.complex_numbers(max_magnitude=2, allow_nan=False, allow_infinity=False,
                                  allow_subnormal=False, width=dt.itemsize * 8)
    return st.floats(-2, 2, allow_subnormal=False, width=dt.itemsize * 8)


def inputs_for(graph) -> st.SearchStrategy:
    """A strategy of ``{input name: array}`` for ``graph`` (a ``go.Graph`` or IR) with
    bounded values: floats in [-2, 2], complex within 2, ints in [-3, 3]."""
    G = graph._G if isinstance(graph, Graph) else graph
    fields = {}
    for nid in G.graph["inputs"]:
        d = G.nodes[nid]
        fields[d["name"]] = hnp.arrays(np.dtype(d["dtype"]), tuple(d["shape"]),
                                       elements=_elements(d["dtype"]))
    return st.fixed_dictionaries(fields)
