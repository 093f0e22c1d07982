"""float32 transcendentals (see the package docstring for their error bounds)."""

from __future__ import annotations

import numba
import numpy as np

from .f64 import (
    _GELU_D0,
    _GELU_D1,
    _LN2,
    _LOG2E,
    _PIO2_1,
    _PIO2_2,
    _TWO_OVER_PI,
    TRIG_LIMIT,
    _log_abs_edges,
    _log_reduce_f64,
    _pow2_f64,
    _pow_finish,
)
from .intrinsics import _JIT, _JIT_INLINE, _bits, _f32, _fma, _from_bits

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
