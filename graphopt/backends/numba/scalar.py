"""NumPy's scalar semantics where numba's own differ, for generated numba kernels.

numba raises ``ZeroDivisionError`` on complex division by zero (NumPy: inf/nan; its complex
reciprocal is a loop of its own, nan for 0), returns
NaN for complex ``0 ** z`` (NumPy: 0 when ``z.real > 0``), loses the complex log of denormal
values (it rounds ``abs(z)`` first), and returns a value for an integer to a negative integer
power (NumPy raises). These helpers follow NumPy's C loops
line by line (``npy_math_complex.c.src``: ``cdiv``, ``npy_cpow``; the integer ``power``
loop), so a kernel and the interpreter agree bit for bit on them.

Each is ``numba.njit(inline="always")``: they sit in a kernel's innermost loop.
"""

from __future__ import annotations

import cmath

import numba
import numpy as np

from ..scalar_semantics import CPOW_INT_LIMIT

_JIT = dict(cache=True, error_model="numpy", inline="always")


def _clog(ftype, ctype):
    zero = ftype(0.0)

    @numba.njit(**_JIT)
    def clog(z):
        """``log(z)`` as ``log(max) + log1p((min/max)**2) / 2`` of the parts' magnitudes:
        accurate for denormal and huge parts, where ``log(abs(z))`` (numba's ``cmath.log``)
        rounds ``abs(z)`` first (log of a denormal off by 0.06)."""
        re, im = z.real, z.imag
        ar, ai = abs(re), abs(im)
        if ar != ar or ai != ai:
            lr = np.inf if (ar == np.inf or ai == np.inf) else np.nan
        else:
            hi, lo = (ar, ai) if ar >= ai else (ai, ar)
            if hi == zero:
                lr = -np.inf
            elif hi == np.inf:
                lr = np.inf
            else:
                r = lo / hi
                lr = np.log(hi) + np.log1p(r * r) / ftype(2.0)
        return ctype(complex(lr, np.arctan2(im, re)))

    return clog


clog_c64 = _clog(np.float32, np.complex64)
clog_c128 = _clog(np.float64, np.complex128)


def _complex_ops(ftype, ctype):
    one, zero, lim = ftype(1.0), ftype(0.0), float(CPOW_INT_LIMIT)

    @numba.njit(**_JIT)
    def cmul(ar, ai, br, bi):
        return ar * br - ai * bi, ar * bi + ai * br

    @numba.njit(**_JIT)
    def cdiv(a, b):
        """``a / b`` as NumPy's complex divide loop (Smith's method; ``x / 0`` is inf/nan)."""
        ar, ai, br, bi = a.real, a.imag, b.real, b.imag
        abs_br, abs_bi = abs(br), abs(bi)
        if abs_br >= abs_bi:
            if abs_br == zero and abs_bi == zero:
                re, im = ar / abs_br, ai / abs_br
            else:
                rat = bi / br
                scl = one / (br + bi * rat)
                re, im = (ar + ai * rat) * scl, (ai - ar * rat) * scl
        else:
            rat = br / bi
            scl = one / (bi + br * rat)
            re, im = (ar * rat + ai) * scl, (ai * rat - ar) * scl
        return ctype(complex(re, im))

    @numba.njit(**_JIT)
    def crecip(z):
        """``1 / z`` as NumPy's complex reciprocal loop (not its divide: ``1 / 0`` is nan)."""
        zr, zi = z.real, z.imag
        if abs(zi) <= abs(zr):
            r = zi / zr
            d = zr + zi * r
            return ctype(complex(one / d, -r / d))
        r = zr / zi
        d = zr * r + zi
        return ctype(complex(r / d, -one / d))

    @numba.njit(**_JIT)
    def cpow(a, b):
        """``a ** b`` as NumPy's ``npy_cpow``: ``z ** 0 = 1``, ``0 ** z`` is 0 for
        ``z.real > 0`` else nan, small integer powers by repeated multiplication."""
        ar, ai, br, bi = a.real, a.imag, b.real, b.imag
        if br == zero and bi == zero:
            return ctype(complex(one, zero))
        if ar == zero and ai == zero:
            if br > zero:
                return ctype(complex(zero, zero))
            return ctype(complex(np.nan, np.nan))
        if bi == zero and br == np.trunc(br) and -lim < br < lim:
            n = int(br)
            if n == 1:
                return a
            if n == 2:
                re, im = cmul(ar, ai, ar, ai)
                return ctype(complex(re, im))
            if n == 3:
                re, im = cmul(ar, ai, ar, ai)
                re, im = cmul(ar, ai, re, im)
                return ctype(complex(re, im))
            m = -n if n < 0 else n
            qr, qi, pr, pi = one, zero, ar, ai
            mask = 1
            while True:
                if m & mask:
                    qr, qi = cmul(qr, qi, pr, pi)
                mask <<= 1
                if m < mask:
                    break
                pr, pi = cmul(pr, pi, pr, pi)
            r = ctype(complex(qr, qi))
            if br < zero:
                r = cdiv(ctype(complex(one, zero)), r)
            return r
        # C99 cpow, as NumPy's libm: exp(b log a), in complex128 (numba's own a ** b goes
        # through abs(a) ** b.real / exp(arg(a) b.imag): inf / inf = nan where this is 0)
        return ctype(cmath.exp(np.complex128(b) * clog_c128(np.complex128(a))))

    return cdiv, crecip, cpow


cdiv_c64, crecip_c64, cpow_c64 = _complex_ops(np.float32, np.complex64)
cdiv_c128, crecip_c128, cpow_c128 = _complex_ops(np.float64, np.complex128)


@numba.njit(**_JIT)
def ipow(a, b, err):
    """Integer ``a ** b``; a negative ``b`` sets ``err[0]`` (the kernel's wrapper then raises
    ``scalar_semantics.INT_POW_NEGATIVE``, as NumPy does) and gives 0."""
    if b < 0:
        err[0] = 1
        return a - a
    return a ** b

