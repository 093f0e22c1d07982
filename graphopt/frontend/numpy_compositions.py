"""NumPy ufuncs on graph Tensors that existing ops compose exactly, bit for bit and in
NumPy's result dtype (``numpy_api`` registers them): ``isnan``, ``isinf``, ``isfinite`` and,
for real values, ``sign``. A composition that would only approximate NumPy's own kernel
(``log10`` as ``log(x) / log(10)``, ``expm1`` as ``exp(x) - 1``) is not made here.
"""

from __future__ import annotations

import numpy as np

from ..errors import DTypeError
from . import tensor as T
from .tensor import user_src


def isnan(x):
    """NaN is the one value unequal to itself (a complex value: either part)."""
    (t,) = T._coerce([x], "isnan", user_src())
    return T.not_equal(t, t)


def isinf(x):
    """``|x| == inf`` (a complex value: either part infinite makes its modulus inf)."""
    (t,) = T._coerce([x], "isinf", user_src())
    if t.dtype.kind in "biu":
        return T.not_equal(t, t)          # (all False, as NumPy's)
    return T.equal(T.abs(t), np.inf)


def isfinite(x):
    """``|x| < inf``: False for NaN (every comparison with it is) and for infinities."""
    (t,) = T._coerce([x], "isfinite", user_src())
    if t.dtype.kind in "biu":
        return T.equal(t, t)              # (all True, as NumPy's)
    return T.less(T.abs(t), np.inf)


def sign(x):
    """-1, 0 or 1 in ``x``'s dtype, NaN for NaN; ``+0.0`` for both zeros, as NumPy's
    (``x + 0`` turns -0.0 into +0.0 and keeps NaN)."""
    (t,) = T._coerce([x], "sign", user_src())
    if t.dtype.kind in "cb":
        raise DTypeError(f"numpy.sign of {t.dtype} has no graph form (NumPy's is z / |z| for "
                         "complex values); write it from go.where and go.abs",
                         op="sign", src=user_src())
    if t.dtype.kind == "u":
        return T.where(t > 0, 1, t)
    return T.where(t > 0, 1, T.where(t < 0, -1, t + 0))


UFUNCS = {np.isnan: isnan, np.isinf: isinf, np.isfinite: isfinite, np.sign: sign}
