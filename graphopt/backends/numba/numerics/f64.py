"""float64 transcendentals (see the package docstring for their error bounds)."""

from __future__ import annotations

import numba
import numpy as np

from .intrinsics import _JIT, _JIT_INLINE, _bits, _fma, _from_bits

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
