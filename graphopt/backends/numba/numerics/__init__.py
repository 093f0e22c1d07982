"""Vectorizable transcendental functions for numba kernels.

PyPI's llvmlite has no Intel SVML, so ``np.exp``/``np.tanh`` inside a numba loop are scalar
libm calls and the loop does not vectorize. These scalar functions use only arithmetic,
selects, ``floor``/``rint``/``sqrt``/``fma`` and bit casts, so LLVM inlines them into a
``range``/``prange`` loop over float arrays and vectorizes it (8 float32 or 4 float64 lanes
with AVX2). Call them from a jitted loop with scalars of their dtype (``exp_f32`` takes and
returns float32); ``FAST[(op, dtype name)]`` is the same function::

    from graphopt.backends.numba.numerics import exp_f32

Each is ``numba.njit(cache=True, error_model="numpy")``; ``pow_*`` and ``tanh_f64`` are also
``inline="always"`` (numba-level inlining), because LLVM's inliner finds them too big and a
call left in the loop keeps it scalar.

Special values follow NumPy: ``exp(±inf) = inf/0``, overflow to inf and gradual underflow to
denormals, ``log(0) = -inf``, ``log(x<0) = nan``, ``tanh(±large) = ±1``, ``sin(±inf) =
nan``, IEEE ``pow`` special cases, NaN in -> NaN out, ``±0`` and denormal inputs kept.

Error bounds (``BOUNDS``/``ERROR_BOUNDS``, asserted by tests/backends/test_numba_math.py over
dense and whole-range sweeps) in ulp of the result, against NumPy in float64 for float32 and
in long double for float64. In brackets the worst error seen: for float32 over every input in
the range that is not trivial (exp: 1e-6 <= |x| <= 88.7, log: all x > 0, tanh: 4e-4 <= |x|
<= 9.02, sigmoid/gelu: 1e-4 <= |x| <= 104/9.9, sin/cos: 1e-4 <= |x| <= 1e4), for float64
over the test sweeps:

=======  ===================================  ===================================
op       float32                              float64
=======  ===================================  ===================================
exp      1.5 ulp [1.01]                       1.5 ulp [1.03]
log      1 ulp [0.83]                         1 ulp [0.80]
tanh     5 ulp [4.9; abs err < 3e-7]          1.5 ulp [1.27]
sigmoid  3 ulp [2.4]                          3 ulp [2.1]
gelu     3.5 ulp + 10 denormal ulp [3.3]      3.5 ulp + 10 denormal ulp [2.8]
sin/cos  2 ulp for |x| < 2**40 [1.52]         2 ulp for |x| < 2**40 [1.53]
pow      1 ulp [0.53] (float64 inside)        2 ulp [1.22] (double-double log)
sqrt     0.5 ulp (``np.sqrt``: exact)         0.5 ulp (exact)
=======  ===================================  ===================================

tanh float32 is Eigen's/XLA's rational approximation (cheap; good to 3e-7 absolute), the rest
are range-reduced polynomials (Cephes, fdlibm, or mpmath fits). ``sin``/``cos`` reduce the
argument by Cody-Waite in float64 with fused multiply-adds, exact only while ``x * 2/pi``
rounds to the right integer: for ``|x| >= TRIG_LIMIT = 2**40`` they return NaN, where NumPy
returns the correctly reduced value. Callers may compile their loops with ``fastmath`` flags
``contract``/``reassoc``/``arcp`` but not ``nnan``/``ninf`` (so not ``fastmath=True``): the
special values come from comparisons with NaN and inf.
"""

from __future__ import annotations

from typing import Callable, NamedTuple

import numpy as np

from .f32 import (
    cos_f32,
    exp_f32,
    gelu_f32,
    log_f32,
    pow_f32,
    sigmoid_f32,
    sin_f32,
    sqrt_f32,
    tanh_f32,
)
from .f64 import (
    TRIG_LIMIT,
    cos_f64,
    exp_f64,
    gelu_f64,
    log_f64,
    pow_f64,
    sigmoid_f64,
    sin_f64,
    sqrt_f64,
    tanh_f64,
)
from .intrinsics import fmaximum, fminimum, sum_add


# ---------------------------------------------------------------------------------- tables
class Bound(NamedTuple):
    """A documented error bound: ``|got - ref| <= ulp * ulp(ref) + abs`` on ``domain``."""

    ulp: float
    abs: float = 0.0
    domain: str = "all inputs"

    def __str__(self) -> str:
        parts = [f"{self.ulp:g} ulp"] if self.ulp else []
        parts += [f"abs {self.abs:.1e}"] if self.abs else []
        return f"max err {' + '.join(parts)} over {self.domain}"


_OPS = ("exp", "log", "tanh", "sigmoid", "gelu", "sin", "cos", "pow", "sqrt")
_FUNCTIONS = {f.__name__: f for f in (
    exp_f32, log_f32, tanh_f32, sigmoid_f32, gelu_f32, sin_f32, cos_f32, pow_f32, sqrt_f32,
    exp_f64, log_f64, tanh_f64, sigmoid_f64, gelu_f64, sin_f64, cos_f64, pow_f64, sqrt_f64)}
FAST: dict[tuple[str, str], Callable] = {
    (op, dt): _FUNCTIONS[f"{op}_{sfx}"]
    for op in _OPS for dt, sfx in (("float32", "f32"), ("float64", "f64"))}

# The approximations valid over the whole input range: the ones generated kernels may use.
# sin/cos are not (NaN for |x| >= TRIG_LIMIT, where NumPy reduces exactly), and fast math
# never turns a finite result into NaN: kernels call libm for them until a vectorizable
# Payne-Hanek reduction lands.
KERNEL_SAFE = frozenset(op for op in _OPS if op not in ("sin", "cos"))

_SUB32, _SUB64 = float(np.finfo(np.float32).smallest_subnormal), 5e-324
BOUNDS: dict[tuple[str, str], Bound] = {
    ("exp", "float32"): Bound(1.5), ("exp", "float64"): Bound(1.5),
    ("log", "float32"): Bound(1), ("log", "float64"): Bound(1),
    ("tanh", "float32"): Bound(5), ("tanh", "float64"): Bound(1.5),
    ("sigmoid", "float32"): Bound(3), ("sigmoid", "float64"): Bound(3),
    ("gelu", "float32"): Bound(3.5, 10 * _SUB32), ("gelu", "float64"): Bound(3.5, 10 * _SUB64),
    ("sin", "float32"): Bound(2, 0, "|x| < 2**40 (NaN beyond)"),
    ("sin", "float64"): Bound(2, 0, "|x| < 2**40 (NaN beyond)"),
    ("cos", "float32"): Bound(2, 0, "|x| < 2**40 (NaN beyond)"),
    ("cos", "float64"): Bound(2, 0, "|x| < 2**40 (NaN beyond)"),
    ("pow", "float32"): Bound(1), ("pow", "float64"): Bound(2),
    ("sqrt", "float32"): Bound(0.5), ("sqrt", "float64"): Bound(0.5),
}
ERROR_BOUNDS: dict[tuple[str, str], str] = {k: str(b) for k, b in BOUNDS.items()}
__all__ = ["FAST", "KERNEL_SAFE", "ERROR_BOUNDS", "BOUNDS", "Bound", "TRIG_LIMIT", "fmaximum",
           "fminimum", "sum_add",
           *(f.__name__ for f in FAST.values())]
