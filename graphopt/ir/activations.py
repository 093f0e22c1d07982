"""The reference NumPy forms of sigmoid, relu and gelu (``ops.OPS[name].impl``), and the
memory they hold at once (``impl_peak_bytes``).

Sigmoid and GELU are accurate in both tails and round once: real inputs are worked in
float64 (long double for float64 inputs, where it is wider) and cast to the result's type
at the end. The generated kernels follow these forms (``backends/scalar_semantics.py``).
"""

from __future__ import annotations

import math

import numpy as np

# Wider than float64 where the platform has it (x86: 64-bit mantissa): gelu's tail is
# x * e**w with |w| up to 745, and w rounded in float64 is |w| ulp off in the result.
_WIDE = np.longdouble if np.finfo(np.longdouble).nmant > 52 else np.float64


def _real_work(x):
    """``(x in the working type, the result dtype)`` for sigmoid/gelu of a real ``x``: they
    compute in float64 (float64 inputs: in long double where it is wider) and round once at
    the end (float32 and float16 keep their type, integers and bools give float64, as
    ``0.5 * x`` would)."""
    out = x.dtype if x.dtype.kind == "f" else np.dtype(np.float64)
    return x.astype(_WIDE if out == np.float64 else np.float64), out


def _logistic(w, x):
    """``x * sigmoid(w)`` as ``x * e**min(w, 0) / (1 + e**-|w|)``: no overflow for large
    ``|w|`` and no cancellation in the negative tail (the ``0.5 * tanh(0.5 w) + 0.5`` form
    rounds sigmoid(-20) in float32 to 0; exact: 2.06e-9)."""
    e = np.exp(-np.abs(w))
    return x * (np.where(w >= 0, 1.0, e) / (1.0 + e))


def sigmoid(x):
    """1 / (1 + e**-x), accurate in both tails."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return 1 / (1 + np.exp(-x))
    xd, out = _real_work(x)
    return np.asarray(_logistic(xd, 1.0)).astype(out)


def relu(x):
    """max(x, 0) in ``x``'s own dtype."""
    return np.maximum(x, np.zeros((), dtype=x.dtype))


_GELU_C = math.sqrt(2.0 / math.pi)
GELU_2C = 2.0 * _GELU_C   # w = 2u: gelu(x) = x * sigmoid(w)
GELU_K = 0.044715
# the same constants to the working type's precision (parsed from decimal strings)
_GELU_2C_WIDE = _WIDE(2) * np.sqrt(_WIDE(2) / _WIDE("3.14159265358979323846264338327950288"))
_GELU_K_WIDE = _WIDE("0.044715")


def gelu(x):
    """GELU, tanh approximation (as JAX's default and PyTorch's ``approximate='tanh'``):
    ``0.5 x (1 + tanh(u))`` with ``u = sqrt(2/pi) (x + 0.044715 x**3)``, computed as the
    equal ``x * sigmoid(2u)``, which keeps the negative tail (``1 + tanh(u)`` cancels).
    ``x**3`` is taken in the working type, except for integers: in their own type (they
    wrap, as NumPy's ``x * x * x``)."""
    x = np.asarray(x)
    if x.dtype.kind == "c":
        return 0.5 * x * (1.0 + np.tanh(_GELU_C * (x + GELU_K * (x * x * x))))
    xd, out = _real_work(x)
    cube = xd * xd * xd if x.dtype.kind == "f" else (x * x * x).astype(xd.dtype)
    c2, k = (_GELU_2C_WIDE, _GELU_K_WIDE) if xd.dtype == _WIDE else (GELU_2C, GELU_K)
    w = c2 * (xd + k * cube)
    return np.asarray(_logistic(w, xd)).astype(out)


# Arrays the NumPy forms above hold at once (their result included), per element: real
# inputs in the working type of ``_real_work``, complex ones in the result's type (tracemalloc
# on NumPy 2.4: gelu 6 and 3, sigmoid 4 and 2). Other ops hold their result alone.
_HELD_ARRAYS = {"gelu": (6, 3), "sigmoid": (4, 2)}


def impl_peak_bytes(op: str, shape, in_dtype, out_dtype) -> int:
    """Bytes ``OPS[op].impl`` holds at once on an operand of ``in_dtype`` for a result of
    ``shape`` and ``out_dtype``, its result included (the memory a reference step needs)."""
    n = math.prod(shape)
    out = np.dtype(out_dtype)
    if op not in _HELD_ARRAYS:
        return n * out.itemsize
    real, cplx = _HELD_ARRAYS[op]
    if np.dtype(in_dtype).kind == "c":
        return cplx * n * out.itemsize
    work = np.dtype(_WIDE if out == np.float64 else np.float64)
    return real * n * work.itemsize
