"""NumPy's scalar semantics as data: the one table the numba and the CUDA kernel generators
read, so that they cannot drift apart.

The interpreter (NumPy itself) is the reference. For an op and its operand dtypes a
generator reads here: the dtype each operand is converted to and the dtype the op's value
has (NumPy's ufunc loop), whether the op is refused, the corner cases NumPy's C loops have
(NaN and ties in ``maximum``/``minimum``, the integer reciprocal, integer powers), the
reduction's accumulator and identity, and the constants of sigmoid and GELU. Each
generator only *spells* these in its language (``numba_kernels/expressions.py``,
``cuda_kernels/expressions.py``). ``tests/backends/test_scalar_semantics.py`` runs every
op of the table on every dtype through both generators (the CUDA C through g++ on the host) and
compares with the interpreter.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..ir import activations

# Ops that are NumPy ufuncs: their loop dtypes are NumPy's own type resolution.
UFUNCS = {"neg": np.negative, "abs": np.absolute, "exp": np.exp, "log": np.log,
          "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "square": np.square,
          "reciprocal": np.reciprocal, "conj": np.conjugate, "add": np.add,
          "sub": np.subtract, "mul": np.multiply, "div": np.true_divide, "pow": np.power,
          "maximum": np.maximum, "minimum": np.minimum, "eq": np.equal, "ne": np.not_equal,
          "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal}

# Binary ops written infix, spelled the same in Python and in C.
INFIX = {"add": "+", "sub": "-", "mul": "*", "div": "/", "eq": "==", "ne": "!=", "lt": "<",
         "le": "<=", "gt": ">", "ge": ">="}

# Transcendentals: each language's correctly rounded (or numba_math's bounded) function.
MATH = ("exp", "log", "sqrt", "tanh", "sin", "cos")

# On bool operands NumPy's add/maximum are logical or, mul/minimum logical and.
BOOL_LOGIC = {"add": "or", "maximum": "or", "mul": "and", "minimum": "and"}

# maximum(a, b) = a if (a > b or a is NaN) else b (minimum with <): NaN wins, the first
# operand's when both are NaN, and a tie gives b (maximum(-0.0, 0.0) is 0.0, NumPy 2).
PICK_FIRST_IF = {"maximum": ">", "minimum": "<"}

# Ops that order their operands: NumPy orders complex numbers lexicographically, which no
# generator emits; they refuse these on complex operands (the op then runs unfused).
ORDERING = frozenset({"maximum", "minimum", "relu", "lt", "le", "gt", "ge", "max", "min"})

# Complex ops NumPy computes by loops of its own, not by the textbook operator: division by
# Smith's method (``x / 0`` is inf/nan), the reciprocal by its own loop (``1 / 0`` is nan,
# not inf), powers by ``npy_cpow`` (``z ** 0 = 1``; ``0 ** z`` is 0 for ``z.real > 0``, else
# nan; integer exponents below 100 by repeated multiplication, a negative one then divided
# into 1; else ``exp(b log a)`` in complex128). Each generator calls its port of these
# loops (numba_scalar.py; the go_c* helpers of cuda_kernels/expressions.py) for every
# complex op listed here.
COMPLEX_LOOPS = ("div", "reciprocal", "pow")
CPOW_INT_LIMIT = 100

# NumPy's integer reciprocal (its C loop computes 1/x): 1 and -1 map to themselves, 0 to the
# type's minimum (the division's undefined result, as NumPy returns it), all else to 0.
INT_RECIPROCAL_CASES = ((1, 1), (-1, -1), (0, "min"))
INT_RECIPROCAL_ELSE = 0

# An integer to a negative integer power: NumPy raises ValueError with this message.
INT_POW_NEGATIVE = "Integers to negative integer powers are not allowed."

# sigmoid and GELU of a real value are computed in float64 in the stable logistic form
# ``x * (1 if w >= 0 else e) / (1 + e)``, ``e = exp(-|w|)`` (activations._logistic), with
# ``w = GELU_2C * (x + GELU_K * x**3)`` for GELU and ``x**3`` in an integer's own type
# (it wraps, as activations.gelu); on complex values they are the textbook formulas.
LOGISTIC_DTYPE = "float64"
GELU_C, GELU_2C, GELU_K = activations.GELU_2C / 2.0, activations.GELU_2C, activations.GELU_K

# Sums accumulate wider than they store (NumPy's pairwise summation keeps float32 sums
# accurate; a plain loop must widen to match it), and a mean of integers is a float64 mean.
SUM_ACCUMULATOR = {"float16": "float32", "float32": "float64", "complex64": "complex128"}


# Integers narrower than 32 bits, and unsigned ones: numba computes them in 64 bits and C
# promotes them to int between ops, where NumPy wraps every op's value in its own dtype (a
# maximum after a wrapping add differs). No generator emits them: their groups run on
# NumPy's (cupy's) own kernels, op by op.
UNEMITTED_DTYPES = frozenset({"int8", "int16", "uint8", "uint16", "uint32", "uint64"})


def dtype_refusal(dtype: str) -> str | None:
    """Why no generator emits a value of ``dtype``, or None."""
    if str(dtype) in UNEMITTED_DTYPES:
        return (f"dtype {dtype} has no generated kernel (NumPy wraps each op's value in it; "
                "generated code would compute it wider)")
    return None


def refusal(op: str, operand_dtypes, out: str | None = None) -> str | None:
    """Why no generator emits ``op`` on these operand dtypes (giving ``out``), or None."""
    if op in ORDERING and any(np.dtype(t).kind == "c" for t in operand_dtypes):
        return f"{op} orders complex numbers (lexicographic in NumPy)"
    for t in [*operand_dtypes, *([out] if out is not None else [])]:
        reason = dtype_refusal(t)
        if reason:
            return f"{op}: {reason}"
    return None


def loop_dtypes(op: str, operand_dtypes, out: str) -> tuple[list[str], str]:
    """``(dtype each operand is converted to, dtype of the op's value)`` as NumPy computes
    ``op``: a ufunc by NumPy's own loop resolution; ``where`` in the result dtype (its
    condition as bool); ``astype``, ``real``, ``imag``, ``relu``, ``sigmoid`` and ``gelu``
    take their operand as it is (sigmoid/GELU of a real then work in ``LOGISTIC_DTYPE``)."""
    ins = [str(t) for t in operand_dtypes]
    if op in UFUNCS:
        *loop, res = UFUNCS[op].resolve_dtypes(tuple(np.dtype(t) for t in ins) + (None,))
        return [t.name for t in loop], res.name
    if op == "where":
        return ["bool", out, out], out
    return ins, out


def int_reciprocal_cases(dtype: str) -> list[tuple[int, int]]:
    """``INT_RECIPROCAL_CASES`` with "min" resolved for ``dtype``: ``(x, 1/x)`` pairs; any
    other ``x`` gives ``INT_RECIPROCAL_ELSE``."""
    lo = int(np.iinfo(dtype).min)
    return [(x, lo if r == "min" else r) for x, r in INT_RECIPROCAL_CASES]


@dataclass(frozen=True)
class Reduction:
    """How a reduction runs as a loop: values are converted to ``acc``, combined from
    ``identity`` with ``combine`` ("add", "maximum", "minimum", "or", "and"; maximum and
    minimum propagate NaN), then, for ``mean``, divided by the count in ``acc``, and cast
    to the result dtype."""

    acc: str
    identity: object
    combine: str


def reduction(op: str, in_dtype: str, out_dtype: str) -> Reduction:
    """The loop form of reduction ``op`` ("sum", "mean", "max", "min") of ``in_dtype``
    values into ``out_dtype``."""
    if op in ("sum", "mean"):
        acc = SUM_ACCUMULATOR.get(out_dtype, out_dtype)
        if op == "mean" and np.dtype(acc).kind in "biu":
            acc = "float64"
        return Reduction(acc, 0, "add")
    big = op == "max"
    kind = np.dtype(in_dtype).kind
    if kind == "b":
        return Reduction(in_dtype, not big, "or" if big else "and")
    if kind == "f":
        return Reduction(in_dtype, -np.inf if big else np.inf, "maximum" if big else "minimum")
    info = np.iinfo(in_dtype)
    return Reduction(in_dtype, int(info.min if big else info.max),
                     "maximum" if big else "minimum")
