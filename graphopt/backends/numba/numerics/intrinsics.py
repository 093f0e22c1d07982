"""LLVM intrinsics numba lacks (bit casts, fma, NaN-propagating min/max, a re-associable add)
and the jit options every numba_math function uses."""

from __future__ import annotations

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
# reduction written with them, many times faster than the compare-and-select loop.
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
