"""Vectorizable transcendental functions for numba kernels.

PyPI's llvmlite has no Intel SVML, so ``np.exp``/``np.tanh`` inside a numba loop are scalar
libm calls and the loop does not vectorize. These scalar functions use only arithmetic,
selects, ``floor``/``rint``/``sqrt``/``fma`` and bit casts, so LLVM inlines them into a
``range``/``prange`` loop over float arrays and vectorizes it (8 float32 or 4 float64 lanes
with AVX2). Call them from a jitted loop with scalars of their dtype (``exp_f32`` takes and
returns float32); ``FAST[(op, dtype name)]`` is the same function::

    from graphopt.backends.numba_math import exp_f32

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

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

_JIT = dict(cache=True, fastmath={"contract"}, error_model="numpy")
# Inlined at numba IR level: functions too big for LLVM's inliner, whose call would keep the
# loop scalar. Their own arithmetic then takes the caller's fastmath flags, so the delicate
# parts (double-double sums) stay in plain helpers, which keep ``contract`` only.
_JIT_INLINE = dict(_JIT, inline="always")
_f32 = np.float32


# ---------------------------------------------------------------------------- intrinsics
# numba has no scalar bit cast and promotes int32 arithmetic to int64; these emit the one
# LLVM instruction each, which the loop vectorizer widens like any other.


@intrinsic
def _bits(typingctx, x):
    """The IEEE bit pattern of a float32 (as int32) or float64 (as int64)."""
    if x not in (types.float32, types.float64):
        return None
    ity = types.int32 if x == types.float32 else types.int64

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.IntType(ity.bitwidth))

    return ity(x), codegen


@intrinsic
def _from_bits(typingctx, i):
    """The float32 (int32 input) or float64 (int64 input) with this bit pattern."""
    if i not in (types.int32, types.int64):
        return None
    fty = types.float32 if i == types.int32 else types.float64

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType() if i == types.int32 else ir.DoubleType())

    return fty(i), codegen


@intrinsic
def _fma(typingctx, a, b, c):
    """``a * b + c`` with one rounding (``llvm.fma``); all three of one float type."""
    if a not in (types.float32, types.float64) or not (a == b == c):
        return None

    def codegen(context, builder, sig, args):
        lty = args[0].type
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(lty, [lty] * 3),
            "llvm.fma.f32" if a == types.float32 else "llvm.fma.f64")
        return builder.call(fn, args)

    return a(a, a, a), codegen


def _binary_intrinsic(llvm_name: str, doc: str):
    @intrinsic
    def f(typingctx, a, b):
        if a not in (types.float32, types.float64) or a != b:
            return None

        def codegen(context, builder, sig, args):
            lty = args[0].type
            fn = cgutils.get_or_insert_function(
                builder.module, ir.FunctionType(lty, [lty] * 2),
                f"llvm.{llvm_name}.{'f32' if a == types.float32 else 'f64'}")
            return builder.call(fn, args)

        return a(a, a), codegen

    f.__doc__ = doc
    return f


# NaN-propagating max/min (IEEE 754-2019 maximum/minimum: -0 < +0). Unlike a compare and
# select they are associative without fast-math flags, so LLVM vectorizes a max/min
# reduction written with them: a row max of 4M float32 takes 0.54 ms instead of 4.5 ms.
@intrinsic
def sum_add(typingctx, a, b):
    """``a + b`` for a running sum: one IEEE ``fadd`` carrying only the ``reassoc`` flag.

    The loop vectorizer then keeps several partial sums (lanes) and adds them at the end:
    the summands are added in another order, as NumPy's pairwise sum does, and nothing else
    changes (no FMA contraction, no NaN/inf assumptions, and every other operation of the
    kernel stays plain IEEE). A kernel-wide ``fastmath={"reassoc"}`` would let LLVM
    re-associate the prologue too (``sum(x * c)`` into ``c * sum(x)``, which can overflow)."""
    if a not in (types.float32, types.float64) or a != b:
        return None

    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1], flags=("reassoc",))

    return a(a, a), codegen


fmaximum = _binary_intrinsic("maximum", "NaN-propagating max of two floats (llvm.maximum).")
fminimum = _binary_intrinsic("minimum", "NaN-propagating min of two floats (llvm.minimum).")


# ---------------------------------------------------------------------------------- float64
_INF, _NAN = np.inf, np.nan
_LOG2E, _LN2 = 1.4426950408889634, 0.6931471805599453
# fdlibm's ln2 split: _LN2_HI has 32 trailing zero bits, so k*_LN2_HI is exact for |k| < 2**21.
_LN2_HI, _LN2_LO = 6.93147180369123816490e-01, 1.90821492927058770002e-10
# e**r = 1 + r + r*r*Q(r) on |r| <= ln2/2: mpmath.chebyfit, max error of Q 1.05e-16.
_Q9, _Q8, _Q7, _Q6, _Q5, _Q4, _Q3, _Q2, _Q1, _Q0 = (
    2.5100375832561234e-08, 2.7620075879983367e-07, 2.7557268480310024e-06,
    2.4801521322368692e-05, 0.00019841269863040545, 0.0013888888917196719,
    0.008333333333330065, 0.041666666666624164, 0.16666666666666669, 0.5000000000000001)


@numba.njit(**_JIT)
def _pow2_f64(k):
    """2**k for a float64 integer k in [-1022, 1023] (int32 conversion: AVX2 has no
    packed double -> int64)."""
    return _from_bits((np.int64(np.int32(k)) + 1023) << 52)


@numba.njit(**_JIT)
def _exp_core_f64(hi, lo):
    """e**(hi + lo) for |lo| <= ulp(hi); NaN hi gives NaN."""
    xc = hi if hi >= -746.0 else -746.0
    xc = xc if xc <= 710.0 else 710.0
    n = np.rint(xc * _LOG2E)
    r = ((xc - n * _LN2_HI) - n * _LN2_LO) + lo
    q = ((((((((_Q9 * r + _Q8) * r + _Q7) * r + _Q6) * r + _Q5) * r + _Q4) * r + _Q3) * r
          + _Q2) * r + _Q1) * r + _Q0
    p = 1.0 + (r + r * r * q)
    n1 = np.floor(n * 0.5)
    y = p * _pow2_f64(n1) * _pow2_f64(n - n1)
    return y if hi == hi else hi


@numba.njit(**_JIT)
def exp_f64(x):
    """e**x for float64 x."""
    return _exp_core_f64(x, 0.0)


_SQRTH_BITS = 0x3FE6A09E667F3BCD
# log(1+f) = 2s + s*z*G(z), s = f/(2+f), z = s*s <= 0.0295: mpmath.chebyfit, max error of
# G 2.1e-18 (its share of the result is below 2**-64 relative).
_G7, _G6, _G5, _G4, _G3, _G2, _G1, _G0 = (
    0.13086626147840102, 0.13268773138656886, 0.15386239702814658, 0.18181795640132906,
    0.22222222391713917, 0.28571428570803614, 0.4000000000000088, 0.6666666666666666)


@numba.njit(**_JIT)
def _log_reduce_f64(ax):
    """(k, f) with ax = 2**k * (1 + f), 1 + f in [sqrt(.5), sqrt(2)), for finite ax > 0."""
    sub = ax < 2.2250738585072014e-308
    xs = ax * 18014398509481984.0 if sub else ax  # 2**54
    ix = _bits(xs) + (0x3FF0000000000000 - _SQRTH_BITS)
    k = np.float64(np.int32((ix >> 52) & 0x7FF) - 1023) - (54.0 if sub else 0.0)
    f = _from_bits((ix & 0x000FFFFFFFFFFFFF) + _SQRTH_BITS) - 1.0
    return k, f


@numba.njit(**_JIT)
def _log_g(z):
    return ((((((_G7 * z + _G6) * z + _G5) * z + _G4) * z + _G3) * z + _G2) * z + _G1) * z + _G0


@numba.njit(**_JIT)
def _log_core_f64(ax):
    """log(ax) for finite ax > 0 (fdlibm's arrangement of the terms)."""
    k, f = _log_reduce_f64(ax)
    s = f / (2.0 + f)
    z = s * s
    hfsq = 0.5 * f * f
    return k * _LN2_HI - ((hfsq - (s * (hfsq + z * _log_g(z)) + k * _LN2_LO)) - f)


@numba.njit(**_JIT)
def log_f64(x):
    """Natural log of float64 x."""
    y = _log_core_f64(x)
    y = y if x > 0.0 else (-_INF if x == 0.0 else _NAN)
    return y if x < _INF else x


_TWO_THIRDS, _TWO_THIRDS_LO = 0.6666666666666666, 3.700743415417188e-17  # 2/3 to 2**-107


@numba.njit(**_JIT)
def _log_dd_f64(ax):
    """log(ax) as an unevaluated sum hi + lo, to about 2**-63 relative, for finite ax > 0:
    pow needs it, since exp(y*log x) magnifies an error in log x by |y log x| (up to 745)."""
    k, f = _log_reduce_f64(ax)
    d = 2.0 + f
    dl = (2.0 - d) + f  # exact: |f| < 2
    s = f / d
    sl = (_fma(-s, d, f) - s * dl) / d  # s + sl = f / (2 + f) to ~2**-106
    z = s * s
    c = s * z
    cl = _fma(s, z, -c) + s * _fma(s, s, -z)  # c + cl = s**3
    # log(1+f) = 2s + 2/3 s^3 + s^3 z H(z): the first two terms (up to 3e-3) in double-double.
    p = _TWO_THIRDS * c
    pl = _fma(_TWO_THIRDS, c, -p) + (_TWO_THIRDS_LO * c + _TWO_THIRDS * cl)
    h = (((((_G7 * z + _G6) * z + _G5) * z + _G4) * z + _G3) * z + _G2) * z + _G1
    rest = c * z * h
    a, b = k * _LN2_HI, 2.0 * s
    h1 = a + b
    bb = h1 - a
    e1 = (a - (h1 - bb)) + (b - bb)  # TwoSum: a + b = h1 + e1 exactly
    h2 = h1 + p
    e2 = p - (h2 - h1)  # Fast2Sum, |h1| >= |p|
    lo = e1 + e2 + pl + (k * _LN2_LO + 2.0 * sl + 2.0 * z * sl + rest)
    hi = h2 + lo
    return hi, lo - (hi - h2)


@numba.njit(**_JIT)
def _log_abs_edges(ax, lx):
    """log|x| with its limits: lx = log(ax) for finite ax > 0; -inf at 0, inf at inf, NaN."""
    lx = lx if ax < _INF else ax
    return -_INF if ax == 0.0 else lx


@numba.njit(**_JIT)
def _pow_finish(x, y, r):
    """IEEE pow from r = exp(y * log|x|), which already over/underflows right for x = 0 or inf
    and y = +-inf: the sign for x < 0, and the cases exp and log cannot produce."""
    h = 0.5 * y
    yint = np.floor(y) == y
    yodd = yint & (np.floor(h) != h)
    r = -r if (np.copysign(1.0, x) < 0.0) & yodd else r
    r = _NAN if (x < 0.0) & (x > -_INF) & ~yint else r
    r = 1.0 if (abs(x) == 1.0) & (abs(y) == _INF) else r  # (-1)**inf; inf * log 1 is NaN
    return 1.0 if (y == 0.0) | (x == 1.0) else r


@numba.njit(**_JIT_INLINE)
def pow_f64(x, y):
    """x**y for float64 x, y: exp(y * log|x|) with log|x| in double-double."""
    ax = abs(x)
    lh, ll = _log_dd_f64(ax)
    lh = _log_abs_edges(ax, lh)
    th = y * lh
    tl = _fma(y, lh, -th) + y * ll
    big = abs(th) >= 2048.0  # certain over/underflow; keeps inf - inf out of tl
    th = (2048.0 if th > 0.0 else -2048.0) if big else th
    tl = 0.0 if big else tl
    return _pow_finish(x, y, _exp_core_f64(th, tl))


# tanh: Cephes tanh.c, x + x^3 P(z)/Q(z) below 0.625, else 1 - 2/(e^2|x| + 1).
_TP2, _TP1, _TP0 = -9.64399179425052238628e-1, -9.92877231001918586564e1, \
    -1.61468768441708447952e3
_TQ2, _TQ1, _TQ0 = 1.12811678491632931402e2, 2.23548839060100448583e3, 4.84406305325125486048e3


@numba.njit(**_JIT)
def _tanh_small_f64(x):
    z = x * x
    return x + x * z * (((_TP2 * z + _TP1) * z + _TP0) / (((z + _TQ2) * z + _TQ1) * z + _TQ0))


@numba.njit(**_JIT)
def _tanh_large_f64(ax):
    e = _exp_core_f64(44.0 if ax > 22.0 else 2.0 * ax, 0.0)  # tanh(22) rounds to 1
    return 1.0 - 2.0 / (e + 1.0)


@numba.njit(**_JIT_INLINE)
def tanh_f64(x):
    """tanh of float64 x."""
    ax = abs(x)
    small = _tanh_small_f64(x)
    large = np.copysign(_tanh_large_f64(ax), x)
    y = small if ax < 0.625 else large
    return x if ax < 1e-9 else y  # keeps -0 and denormals


@numba.njit(**_JIT)
def sigmoid_f64(x):
    """1 / (1 + e**-x) for float64 x, accurate in both tails."""
    e = _exp_core_f64(-abs(x), 0.0)
    return (1.0 if x >= 0.0 else e) / (1.0 + e)


# 2*sqrt(2/pi) and 2*sqrt(2/pi)*0.044715 as double-doubles (mpmath).
_GELU_D0, _GELU_D0_LO = 1.5957691216057308, -9.96930880911092e-17
_GELU_D1, _GELU_D1_LO = 0.07135481627260025, -6.175149918155315e-19


@numba.njit(**_JIT)
def _gelu_w_f64(x):
    """w = 2u = x * (D0 + D1 x^2) as hi + lo: gelu's tail is e**w, so an error in w is the
    relative error of the result, and w reaches -745."""
    x2 = x * x
    x2l = _fma(x, x, -x2)
    t = _GELU_D1 * x2
    tl = _fma(_GELU_D1, x2, -t) + (_GELU_D1 * x2l + _GELU_D1_LO * x2)
    s = _GELU_D0 + t
    bb = s - _GELU_D0
    sl = ((_GELU_D0 - (s - bb)) + (t - bb)) + (tl + _GELU_D0_LO)  # TwoSum + low parts
    w = x * s
    return w, _fma(x, s, -w) + x * sl


@numba.njit(**_JIT)
def gelu_f64(x):
    """GELU, tanh approximation, of float64 x: 0.5x(1 + tanh(u)) = x * sigmoid(2u), which has
    no cancellation for negative x and underflows gradually."""
    w, wl = _gelu_w_f64(x)
    wl = wl if abs(w) < 1e3 else 0.0  # x*x overflowed: wl is NaN, w is +-inf
    pos = w >= 0.0
    e = _exp_core_f64(-abs(w), -wl if pos else wl)  # e**-|w|
    return x * ((1.0 if pos else e) / (1.0 + e))


# pi/2 = _PIO2_1 + _PIO2_2 + _PIO2_3 (53 bits each). With fma, x - n*_PIO2_1 is exact and the
# later steps round only relative to the remainder r. Past TRIG_LIMIT the rounding of x*2/pi
# can make n off by one (|r| > pi/4, where the polynomials lose accuracy): NaN there.
_TWO_OVER_PI = 0.63661977236758138243
_PIO2_1, _PIO2_2, _PIO2_3 = 1.5707963267948966, 6.123233995736766e-17, -1.4973849048591698e-33
TRIG_LIMIT = 2.0 ** 40
_SC5, _SC4, _SC3, _SC2, _SC1, _SC0 = (
    1.58962301576546568060e-10, -2.50507477628578072866e-8, 2.75573136213857245213e-6,
    -1.98412698295895385996e-4, 8.33333333332211858878e-3, -1.66666666666666307295e-1)
_CC5, _CC4, _CC3, _CC2, _CC1, _CC0 = (
    -1.13585365213876817300e-11, 2.08757008419747316778e-9, -2.75573141792967388112e-7,
    2.48015872888517045348e-5, -1.38888888888730564116e-3, 4.16666666666665929218e-2)


@numba.njit(**_JIT)
def _sin_cos_f64(x, quarter):
    """sin(x + quarter*pi/2) for quarter 0 (sin) or 1 (cos); Cephes sin/cos polynomials."""
    ok = abs(x) < TRIG_LIMIT
    xs = x if ok else 0.0
    n = np.rint(xs * _TWO_OVER_PI)
    r = _fma(-n, _PIO2_1, xs)
    r = _fma(-n, _PIO2_2, r)
    r = _fma(-n, _PIO2_3, r)
    q = n + quarter
    q = q - 4.0 * np.floor(q * 0.25)
    z = r * r
    s = r + r * z * (((((_SC5 * z + _SC4) * z + _SC3) * z + _SC2) * z + _SC1) * z + _SC0)
    c = 1.0 - 0.5 * z + z * z * (((((_CC5 * z + _CC4) * z + _CC3) * z + _CC2) * z + _CC1) * z
                                 + _CC0)
    v = c if (q == 1.0) | (q == 3.0) else s
    v = -v if q >= 2.0 else v
    v = x if (quarter == 0) & (abs(x) < 1e-9) else v
    return v if ok else _NAN


@numba.njit(**_JIT)
def sin_f64(x):
    """sin of float64 x; NaN for |x| >= TRIG_LIMIT (see the module docstring)."""
    return _sin_cos_f64(x, 0)


@numba.njit(**_JIT)
def cos_f64(x):
    """cos of float64 x; NaN for |x| >= TRIG_LIMIT (see the module docstring)."""
    return _sin_cos_f64(x, 1)


@numba.njit(**_JIT)
def sqrt_f64(x):
    """sqrt of float64 x (``llvm.sqrt``)."""
    return np.sqrt(x)


# ---------------------------------------------------------------------------------- float32
_INF32, _NAN32 = _f32(np.inf), _f32(np.nan)
_ZERO32, _HALF32, _ONE32 = _f32(0), _f32(0.5), _f32(1)
# exp: n = rint(x/ln2), r = x - n*ln2 in two parts (Cephes expf), |r| <= ln2/2.
_LOG2E32 = _f32(1.44269504088896341)
_LN2HI32, _LN2LO32 = _f32(0.693359375), _f32(-2.12194440e-4)
_EXP_LO32, _EXP_HI32 = _f32(-104.0), _f32(89.0)  # e^-104 rounds to 0; e^89 overflows
_EXPP32 = [_f32(c) for c in (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3,
                             4.1665795894e-2, 1.6666665459e-1, 5.0000001201e-1)]
_E0, _E1, _E2, _E3, _E4, _E5 = _EXPP32
_BIAS32, _MANT32 = _f32(127.0), _f32(2.0 ** 23)


@numba.njit(**_JIT)
def _pow2_f32(k):
    """2**k for a float32 integer k in [-126, 127], by building the exponent field."""
    return _from_bits(np.int32((k + _BIAS32) * _MANT32))


@numba.njit(**_JIT)
def _exp_scaled_f32(r, n):
    """e**r * 2**n for |r| <= ln2/2 and a float32 integer n in [-150, 129]."""
    p = (((((_E0 * r + _E1) * r + _E2) * r + _E3) * r + _E4) * r + _E5) * (r * r) + r + _ONE32
    # 2**n as two factors: each stays a normal float for n in [-150, 129], so the product
    # overflows to inf and underflows gradually (one rounding) exactly where e**x does.
    n1 = np.floor(n * _HALF32)
    return p * _pow2_f32(n1) * _pow2_f32(n - n1)


@numba.njit(**_JIT)
def exp_f32(x):
    """e**x for float32 x."""
    xc = x if x >= _EXP_LO32 else _EXP_LO32  # NaN -> the low clamp; restored at the end
    xc = xc if xc <= _EXP_HI32 else _EXP_HI32
    n = np.rint(xc * _LOG2E32)
    y = _exp_scaled_f32((xc - n * _LN2HI32) - n * _LN2LO32, n)
    return y if x == x else x


_SQRTH_BITS32 = 0x3F3504F3  # bits of sqrt(0.5): mantissas are reduced into [sqrt(.5), sqrt(2))
_MIN_NORMAL32, _TWO23 = _f32(2.0 ** -126), _f32(2.0 ** 23)
_LOGP32 = [_f32(c) for c in (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1,
                             -1.2420140846e-1, 1.4249322787e-1, -1.6668057665e-1,
                             2.0000714765e-1, -2.4999993993e-1, 3.3333331174e-1)]
_L0, _L1, _L2, _L3, _L4, _L5, _L6, _L7, _L8 = _LOGP32


@numba.njit(**_JIT)
def log_f32(x):
    """Natural log of float32 x (Cephes logf polynomial on [sqrt(.5)-1, sqrt(2)-1])."""
    sub = x < _MIN_NORMAL32
    xs = x * _TWO23 if sub else x
    ix = np.int32(_bits(xs) + (0x3F800000 - _SQRTH_BITS32))
    k = np.float32(np.int32(ix >> 23) - 127) - (_f32(23) if sub else _ZERO32)
    f = _from_bits(np.int32((ix & 0x007FFFFF) + _SQRTH_BITS32)) - _ONE32
    z = f * f
    p = (((((((_L0 * f + _L1) * f + _L2) * f + _L3) * f + _L4) * f + _L5) * f + _L6) * f
         + _L7) * f + _L8
    y = p * f * z + k * _LN2LO32 - _HALF32 * z
    y = (f + y) + k * _LN2HI32
    y = y if x > _ZERO32 else (-_INF32 if x == _ZERO32 else _NAN32)
    return y if x < _INF32 else x


# tanh: Eigen's/XLA's rational approximation (odd degree 13 over even degree 6).
_TANH_CLAMP32, _TANH_TINY32 = _f32(7.90531110763549805), _f32(0.0004)
_TANH_ONE32 = _f32(9.010913)  # tanh(x) rounds to 1 from the next float up
_TA = [_f32(c) for c in (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
                         5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
                         4.89352455891786e-03)]
_TB = [_f32(c) for c in (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
                         4.89352518554385e-03)]
_A13, _A11, _A9, _A7, _A5, _A3, _A1 = _TA
_B6, _B4, _B2, _B0 = _TB


@numba.njit(**_JIT)
def tanh_f32(x):
    """tanh of float32 x."""
    xc = _TANH_CLAMP32 if x > _TANH_CLAMP32 else x
    xc = -_TANH_CLAMP32 if xc < -_TANH_CLAMP32 else xc
    z = xc * xc
    p = xc * (((((((_A13 * z + _A11) * z + _A9) * z + _A7) * z + _A5) * z + _A3) * z + _A1))
    q = ((_B6 * z + _B4) * z + _B2) * z + _B0
    y = p / q  # within 3e-7 of +-1 at the clamp, but not exactly +-1
    y = np.copysign(_ONE32, x) if abs(x) > _TANH_ONE32 else y
    return x if abs(x) < _TANH_TINY32 else y


@numba.njit(**_JIT)
def sigmoid_f32(x):
    """1 / (1 + e**-x) for float32 x, accurate in both tails."""
    e = exp_f32(-abs(x))
    return (_ONE32 if x >= _ZERO32 else e) / (_ONE32 + e)


@numba.njit(**_JIT)
def gelu_f32(x):
    """GELU, tanh approximation, of float32 x, as ``gelu_f64``: w = 2u and its reduction
    w - n ln2 in float64 (an error in w is the tail's relative error), the rest in float32."""
    xd = np.float64(x)
    w = xd * (_GELU_D0 + _GELU_D1 * (xd * xd))
    aw = -abs(w)
    aw = aw if aw >= -104.0 else -104.0  # NaN too: then e = 0, and x * 0 is NaN again
    n = np.rint(aw * _LOG2E)
    r = np.float32(_fma(-n, _LN2, aw))
    e = _exp_scaled_f32(r, np.float32(n))  # e**-|w|
    return x * ((_ONE32 if w >= 0.0 else e) / (_ONE32 + e))


# sin/cos: the reduction x - n*pi/2 runs in float64 (exact, see _sin_cos_f64), the
# polynomials (Cephes sinf/cosf, |r| <= pi/4) in float32.
_S1, _S2, _S3 = (_f32(c) for c in (-1.9515295891e-4, 8.3321608736e-3, -1.6666654611e-1))
_C1, _C2, _C3 = (_f32(c) for c in (2.443315711809948e-5, -1.388731625493765e-3,
                                   4.166664568298827e-2))
_SIN_TINY32 = _f32(2.0 ** -12)  # sin(x) rounds to x below this


@numba.njit(**_JIT)
def _sin_cos_f32(x, quarter):
    """sin(x + quarter*pi/2) for quarter 0 (sin) or 1 (cos)."""
    xd = np.float64(x)
    ok = abs(xd) < TRIG_LIMIT
    xs = xd if ok else 0.0  # inf, NaN, huge: a finite dummy; the result is replaced below
    n = np.rint(xs * _TWO_OVER_PI)
    r = _fma(-n, _PIO2_1, xs)
    r = np.float32(_fma(-n, _PIO2_2, r))
    q = n + quarter
    q = q - 4.0 * np.floor(q * 0.25)
    z = r * r
    s = ((_S1 * z + _S2) * z + _S3) * z * r + r
    c = ((_C1 * z + _C2) * z + _C3) * (z * z) - _HALF32 * z + _ONE32
    v = c if (q == 1.0) | (q == 3.0) else s
    v = -v if q >= 2.0 else v
    v = x if (quarter == 0) & (abs(x) < _SIN_TINY32) else v
    return v if ok else _NAN32


@numba.njit(**_JIT)
def sin_f32(x):
    """sin of float32 x; NaN for |x| >= TRIG_LIMIT (see the module docstring)."""
    return _sin_cos_f32(x, 0)


@numba.njit(**_JIT)
def cos_f32(x):
    """cos of float32 x; NaN for |x| >= TRIG_LIMIT (see the module docstring)."""
    return _sin_cos_f32(x, 1)


# pow in float64 needs only ~2**-33 relative in log2|x| and 2**-30 in 2**r for a float32
# result (mpmath.chebyfit): ln(1+f) = 2s + s^3 G(s^2) with G of degree 3 (error 1.2e-9 in G,
# 1.7e-11 relative in the log), 2**r on |r| <= 1/2 of degree 6 (error 2.0e-9).
_PG3, _PG2, _PG1, _PG0 = (0.23330467216303835, 0.28550820815960665, 0.40000121839806124,
                          0.6666666655449709)
_P2_6, _P2_5, _P2_4, _P2_3, _P2_2, _P2_1, _P2_0 = (
    0.0001546144469856913, 0.0013400428177615838, 0.009618056678524637, 0.05550327226670302,
    0.24022650922288757, 0.6931472067028326, 1.0)


@numba.njit(**_JIT)
def _log2_short_f64(ax):
    """log2(ax) to ~2**-35 relative, for finite ax > 0."""
    k, f = _log_reduce_f64(ax)
    s = f / (2.0 + f)
    z = s * s
    return k + (2.0 * s + s * z * (((_PG3 * z + _PG2) * z + _PG1) * z + _PG0)) * _LOG2E


@numba.njit(**_JIT)
def _exp2_short_f64(t):
    """2**t to ~2**-29 relative for float64 t; past +-160 (beyond float32's range) +-inf/0."""
    t = 160.0 if t > 160.0 else t  # NaN stays NaN
    t = -160.0 if t < -160.0 else t
    n = np.rint(t if t == t else 0.0)
    r = t - n
    p = (((((_P2_6 * r + _P2_5) * r + _P2_4) * r + _P2_3) * r + _P2_2) * r + _P2_1) * r + _P2_0
    return p * _pow2_f64(n)


@numba.njit(**_JIT_INLINE)
def pow_f32(x, y):
    """x**y for float32 x, y: 2**(y log2|x|) in float64 with short polynomials, then one
    rounding to float32."""
    xd, yd = np.float64(x), np.float64(y)
    ax = abs(xd)
    t = yd * _log_abs_edges(ax, _log2_short_f64(ax))
    return np.float32(_pow_finish(xd, yd, _exp2_short_f64(t)))


@numba.njit(**_JIT)
def sqrt_f32(x):
    """sqrt of float32 x (``llvm.sqrt``: already vectorized; here for a uniform table)."""
    return np.sqrt(x)


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
FAST: dict[tuple[str, str], Callable] = {
    (op, dt): globals()[f"{op}_{sfx}"]
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
__all__ = ["FAST", "KERNEL_SAFE", "ERROR_BOUNDS", "BOUNDS", "Bound", "TRIG_LIMIT",
           *(f.__name__ for f in FAST.values())]
