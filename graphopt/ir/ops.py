"""The op registry: for every op, its kind, its shape/dtype rule and its NumPy semantics.

``impl`` is the reference meaning of the op (the interpreter calls it); ``infer`` derives
the output shape and dtype. Dtype rules are not re-derived by hand: they come from
running ``impl`` on tiny probe arrays of the operand dtypes (cached), so the dtype an
analysis predicts is the dtype the reference produces, NumPy promotion included.
"""

from __future__ import annotations

import functools
import math
import warnings
from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..errors import DTypeError, GraphError, ShapeError, did_you_mean
from . import einsum as einsum_mod
from .activations import gelu, relu, sigmoid
from .einsum_numpy import evaluate as einsum_evaluate

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")

# Op kinds: what passes and backends dispatch on.
SOURCE = "source"            # input, const
ELEMENTWISE = "elementwise"  # broadcasting map over operands
REDUCTION = "reduction"      # sum/max/min/mean over axes
CONTRACTION = "contraction"  # einsum
LAYOUT = "layout"            # reshape, transpose, broadcast_to
SLICE = "slice"              # a strided window of one operand (NumPy's basic indexing)
FUSED = "fused"              # a fused group holding a sub-DAG


def canonical_dtype(dtype) -> str:
    """The IR's name for ``dtype`` (a str, numpy dtype or scalar type)."""
    try:
        return _canonical_dtype_memo(dtype)
    except TypeError:       # (unhashable: no memo; NumPy says what it makes of it)
        return _canonical_dtype(dtype)


@functools.lru_cache(maxsize=256)
def _canonical_dtype_memo(dtype) -> str:
    # memoized: NumPy's ``dtype.name`` is Python, asked per input and per node as a
    # network of hundreds of tensors is built
    return _canonical_dtype(dtype)


def _canonical_dtype(dtype) -> str:
    try:
        name = np.dtype(dtype).name
    except Exception as e:  # NumPy's parser raises TypeError, ValueError, SyntaxError, ...
        raise DTypeError(f"unknown dtype {dtype!r} ({type(e).__name__}: {e}); supported: "
                         f"{', '.join(DTYPES)}") from None
    if name not in DTYPES:
        raise DTypeError(f"unsupported dtype {name!r}; supported: {', '.join(DTYPES)}")
    return name


@dataclass(frozen=True)
class OpDef:
    """One op: ``impl(args, attrs) -> ndarray`` is its meaning; ``infer(shapes, dtypes, attrs)
    -> (shape, dtype_name)`` its static rule; ``arity`` the operand count (None: any)."""

    name: str
    kind: str
    impl: Callable
    infer: Callable
    arity: int | None
    commutative: bool = False


OPS: dict[str, OpDef] = {}


def register_op(op: OpDef) -> OpDef:
    """Add ``op`` to the registry; a duplicate name raises."""
    if op.name in OPS:
        raise ValueError(f"op {op.name!r} is already registered")
    OPS[op.name] = op
    return op


def get_op(name: str) -> OpDef:
    """The registered op ``name``; ``GraphError`` listing the known ops otherwise."""
    try:
        return OPS[name]
    except KeyError:
        raise GraphError(f"unknown op {name!r}{did_you_mean(name, OPS)} (known ops: "
                         f"{', '.join(sorted(OPS))})") from None


# ---------------------------------------------------------------------------- dtype probing


@functools.lru_cache(maxsize=4096)
def _probe_dtype(op: str, dtypes: tuple[str, ...], ndims: tuple[int, ...], attrs_key) -> str:
    opdef = OPS[op]
    attrs = dict(attrs_key)
    args = [np.ones((1,) * nd, dtype=dt) for dt, nd in zip(dtypes, ndims)]
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            out = np.asarray(opdef.impl(args, attrs))
        except TypeError as e:
            raise DTypeError(f"operand dtypes {list(dtypes)} are not supported: {e}") from None
    return canonical_dtype(out.dtype)


def _hashable(v):
    if isinstance(v, (list, tuple)):
        return tuple(_hashable(x) for x in v)
    if isinstance(v, dict):
        return tuple(sorted((k, _hashable(x)) for k, x in v.items()))
    return v


def probe_dtype(op: str, dtypes, ndims, attrs) -> str:
    """The result dtype of ``op`` on operands of ``dtypes``/``ndims``, as NumPy resolves it."""
    return _probe_dtype(op, tuple(dtypes), tuple(ndims), _hashable(attrs))


def broadcast_shapes(*shapes) -> tuple[int, ...]:
    """NumPy's broadcast of ``shapes``; ``ShapeError`` where they do not broadcast."""
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise ShapeError(f"shapes {[tuple(s) for s in shapes]} cannot be broadcast together"
                         " (NumPy broadcasting)") from None


# ------------------------------------------------------------------------------ elementwise


UNARY_FUNCS: dict[str, Callable] = {
    "neg": np.negative, "abs": np.abs, "exp": np.exp, "log": np.log, "sqrt": np.sqrt,
    "tanh": np.tanh, "sigmoid": sigmoid, "relu": relu, "gelu": gelu, "sin": np.sin,
    "cos": np.cos, "square": np.square, "reciprocal": np.reciprocal, "conj": np.conjugate,
    "real": np.real, "imag": np.imag,
}
BINARY_FUNCS: dict[str, Callable] = {
    "add": np.add, "sub": np.subtract, "mul": np.multiply, "div": np.true_divide,
    "pow": np.power, "maximum": np.maximum, "minimum": np.minimum,
    "eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal,
    "gt": np.greater, "ge": np.greater_equal,
}
COMMUTATIVE = {"add", "mul", "maximum", "minimum", "eq", "ne"}
COMPARISONS = {"eq", "ne", "lt", "le", "gt", "ge"}


def _elementwise_infer(name):
    def infer(shapes, dtypes, attrs):
        shape = broadcast_shapes(*shapes)
        return shape, probe_dtype(name, dtypes, [len(s) for s in shapes], attrs)
    return infer


def _unary_impl(f):
    return lambda args, attrs: f(args[0])


def _binary_impl(f):
    return lambda args, attrs: f(args[0], args[1])


for _name, _f in UNARY_FUNCS.items():
    register_op(OpDef(_name, ELEMENTWISE, _unary_impl(_f), _elementwise_infer(_name), 1))
for _name, _f in BINARY_FUNCS.items():
    register_op(OpDef(_name, ELEMENTWISE, _binary_impl(_f), _elementwise_infer(_name), 2,
                      commutative=_name in COMMUTATIVE))

register_op(OpDef("where", ELEMENTWISE, lambda a, attrs: np.where(a[0], a[1], a[2]),
                  _elementwise_infer("where"), 3))
register_op(OpDef("astype", ELEMENTWISE,
                  lambda a, attrs: a[0].astype(attrs["dtype"]),
                  lambda shapes, dtypes, attrs: (tuple(shapes[0]),
                                                 canonical_dtype(attrs["dtype"])), 1))


# ------------------------------------------------------------------------------- reductions


def normalize_axes(axis, ndim: int) -> tuple[int, ...]:
    """``axis`` (None, int or sequence) as a sorted tuple of non-negative ints."""
    if axis is None:
        return tuple(range(ndim))
    try:
        axes = (axis,) if isinstance(axis, (int, np.integer)) else tuple(axis)
    except TypeError:
        raise ShapeError(f"axis {axis!r} is not an int, a sequence of ints or None") from None
    out = []
    for a in axes:
        if not isinstance(a, (int, np.integer)) or isinstance(a, bool):
            raise ShapeError(f"axis {a!r} is not an int")
        if not -ndim <= a < ndim:
            raise ShapeError(f"axis {a} is out of range for {ndim}-d operand")
        out.append(int(a) % ndim if ndim else 0)
    if len(set(out)) != len(out):
        raise ShapeError(f"repeated axis in {axis!r}")
    return tuple(sorted(out))


REDUCE_FUNCS = {"sum": np.sum, "max": np.max, "min": np.min, "mean": np.mean}


def _reduce_infer(name):
    def infer(shapes, dtypes, attrs):
        (shape,) = shapes
        axes = attrs["axes"]
        if any(not 0 <= a < len(shape) for a in axes) or list(axes) != sorted(set(axes)):
            raise ShapeError(f"axes {axes} are not sorted, distinct axes of shape {shape}")
        if name in ("max", "min") and any(shape[a] == 0 for a in axes):
            raise ShapeError(f"{name} over a zero-size axis of shape {shape} has no identity")
        if attrs["keepdims"]:
            out = tuple(1 if i in axes else d for i, d in enumerate(shape))
        else:
            out = tuple(d for i, d in enumerate(shape) if i not in axes)
        return out, probe_dtype(name, dtypes, [len(shape)], attrs)
    return infer


def _reduce_impl(f):
    return lambda a, attrs: f(a[0], axis=tuple(attrs["axes"]), keepdims=attrs["keepdims"])


for _name, _f in REDUCE_FUNCS.items():
    register_op(OpDef(_name, REDUCTION, _reduce_impl(_f), _reduce_infer(_name), 1))


# ---------------------------------------------------------------------------------- layout


def _reshape_infer(shapes, dtypes, attrs):
    (shape,), new = shapes, tuple(attrs["shape"])
    if math.prod(shape) != math.prod(new) or any(d < 0 for d in new):
        raise ShapeError(f"cannot reshape {tuple(shape)} into {new}")
    return new, dtypes[0]


def _transpose_infer(shapes, dtypes, attrs):
    (shape,), axes = shapes, tuple(attrs["axes"])
    if sorted(axes) != list(range(len(shape))):
        raise ShapeError(f"axes {axes} are not a permutation of the {len(shape)} dims of {shape}")
    return tuple(shape[a] for a in axes), dtypes[0]


def _broadcast_to_infer(shapes, dtypes, attrs):
    (shape,), new = shapes, tuple(attrs["shape"])
    if len(new) < len(shape) or broadcast_shapes(shape, new) != new:
        raise ShapeError(f"cannot broadcast {tuple(shape)} to {new}")
    return new, dtypes[0]


register_op(OpDef("reshape", LAYOUT, lambda a, attrs: np.reshape(a[0], attrs["shape"]),
                  _reshape_infer, 1))
register_op(OpDef("transpose", LAYOUT, lambda a, attrs: np.transpose(a[0], attrs["axes"]),
                  _transpose_infer, 1))
register_op(OpDef("broadcast_to", LAYOUT,
                  lambda a, attrs: np.broadcast_to(a[0], attrs["shape"]),
                  _broadcast_to_infer, 1))


def window_index(window) -> tuple:
    """The NumPy index of a ``slice`` op's ``window`` (a ``(start, step, count)`` per dim:
    elements ``start + i * step`` for ``i < count``); a negative step's stop below 0 is
    None, since -1 would wrap to the last element."""
    out = []
    for start, step, count in window:
        stop = start + count * step
        out.append(slice(start, stop if stop >= 0 else None, step) if count else slice(0, 0))
    return tuple(out)


def _fitted_window(window, shape) -> tuple:
    """``window`` as a tuple of ``(start, step, count)``, checked to lie within ``shape``."""
    window = tuple(tuple(w) for w in window)
    if len(window) != len(shape):
        raise ShapeError(f"window {window} has {len(window)} dims, the operand {len(shape)}")
    for d, (start, step, count) in zip(shape, window):
        if step == 0 or count < 0 or count and not (
                0 <= start < d and 0 <= start + (count - 1) * step < d):
            raise ShapeError(f"window {window} does not fit shape {tuple(shape)}")
    return window


def _slice_infer(shapes, dtypes, attrs):
    return tuple(w[2] for w in _fitted_window(attrs["window"], shapes[0])), dtypes[0]


def _pad_infer(shapes, dtypes, attrs):
    (shape,), full = shapes, tuple(attrs["shape"])
    window = _fitted_window(attrs["window"], full)
    if tuple(w[2] for w in window) != tuple(shape):
        raise ShapeError(f"operand {tuple(shape)} does not fill window {window}")
    return full, dtypes[0]


def _pad_impl(a, attrs):
    out = np.zeros(attrs["shape"], dtype=a[0].dtype)
    out[window_index(attrs["window"])] = a[0]
    return out


# a copy: the value is the graph's own, never a view of an input the user may change
register_op(OpDef("slice", SLICE, lambda a, attrs: a[0][window_index(attrs["window"])].copy(),
                  _slice_infer, 1))
# slice's transpose (its gradient): zeros of ``shape`` with the operand at ``window``
register_op(OpDef("pad", SLICE, _pad_impl, _pad_infer, 1))


# ------------------------------------------------------------------------------ contraction


def _einsum_infer(shapes, dtypes, attrs):
    return _einsum_result(attrs["equation"], tuple(map(tuple, shapes)), tuple(dtypes))


@functools.lru_cache(maxsize=1024)
def _einsum_result(eq: str, shapes: tuple, dtypes: tuple):
    # memoized: a network's einsum of hundreds of operands is inferred where it is built,
    # and verified after every pass
    if "->" not in eq or "..." in eq:
        raise GraphError(f"IR einsum equation {eq!r} must be explicit and ellipsis-free")
    spec = einsum_mod.parse(eq, shapes)
    if spec.equation != eq:
        raise GraphError(f"IR einsum equation {eq!r} must use letters for labels "
                         f"(einsum_mod.label), e.g. {spec.equation!r}")
    if any(b is not None for b in spec.broadcast):
        raise GraphError(f"IR einsum {eq!r} needs operand broadcasting (shapes {list(shapes)}); "
                         "the builder inserts broadcast_to first")
    # (each distinct dtype once: promotion among dtypes alone is order-free)
    return spec.output_shape, canonical_dtype(np.result_type(*dict.fromkeys(dtypes)))


register_op(OpDef("einsum", CONTRACTION,
                  lambda a, attrs: einsum_evaluate(attrs["equation"], a),
                  _einsum_infer, None))


# --------------------------------------------------------------------------------- sources


def _no_infer(shapes, dtypes, attrs):
    raise GraphError("source nodes carry their shape and dtype")


def _const_impl(args, attrs):
    return attrs["value"]


register_op(OpDef("input", SOURCE, lambda a, attrs: None, _no_infer, 0))
register_op(OpDef("const", SOURCE, _const_impl,
                  lambda s, d, attrs: (tuple(np.shape(attrs["value"])),
                                       canonical_dtype(np.asarray(attrs["value"]).dtype)), 0))


# ----------------------------------------------------------------------------------- fused


def _fused_impl(args, attrs):
    raise GraphError("a fused node's value is its sub-graph's: graphopt.ir.interpreter.eval_node "
                     "runs it", op=FUSED)


def _fused_infer(shapes, dtypes, attrs):
    """Operands against the sub-graph's inputs (``ir.verify`` checks the sub-graph itself)."""
    sub = attrs["graph"]
    for i, (nid, s, d) in enumerate(zip(sub.graph["inputs"], shapes, dtypes)):
        node = sub.nodes[nid]
        if tuple(node["shape"]) != tuple(s) or node["dtype"] != d:
            raise ShapeError(f"fused operand {i} is {tuple(s)} {d} but the group expects "
                             f"{tuple(node['shape'])} {node['dtype']}")
    if len(sub.graph["inputs"]) != len(shapes):
        raise GraphError(f"fused group takes {len(sub.graph['inputs'])} operands, "
                         f"got {len(shapes)}")
    (out,) = sub.graph["outputs"]
    return tuple(sub.nodes[out]["shape"]), sub.nodes[out]["dtype"]


register_op(OpDef(FUSED, FUSED, _fused_impl, _fused_infer, None))


def infer(op: str, shapes, dtypes, attrs) -> tuple[tuple[int, ...], str]:
    """Output ``(shape, dtype)`` of ``op`` on operands of ``shapes``/``dtypes``.

    Raises:
        GraphError: (ShapeError, DTypeError, EinsumError) with the op named.
    """
    opdef = get_op(op)
    if opdef.arity is not None and len(shapes) != opdef.arity:
        raise GraphError(f"takes {opdef.arity} operand(s), got {len(shapes)}", op=op)
    try:
        shape, dtype = opdef.infer([tuple(s) for s in shapes], list(dtypes), attrs)
    except GraphError as e:
        operands = ", ".join(f"{tuple(s)} {d}" for s, d in zip(shapes, dtypes))
        raise type(e)(f"{e.detail} [operands: {operands or 'none'}]", op=op) from None
    except (TypeError, ValueError, KeyError, IndexError, AttributeError) as e:
        # Malformed attrs (a loaded document, a buggy pass): still a GraphError.
        raise GraphError(f"malformed attrs: {type(e).__name__}: {e}",
                         op=op) from None
    return tuple(int(d) for d in shape), dtype
