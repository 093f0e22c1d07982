"""The expression printer of a generated numba kernel: each value's Python/numba spelling
(constants, NumPy casts, ops, fast-math calls, reductions' accumulate and combine), read
from ``scalar_semantics``, the table the CUDA generator reads too.

``ScalarPrinter`` is a mixin of ``source._Source``: it reads the generator's ``sub``,
``fast``, ``globals``, ``fast_used``, ``bufs``, ``space`` and ``nvar``.
"""

from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import pathlib

import numpy as np

from ... import scalar_semantics as ss

_T = {"bool": "np.bool_", "int32": "np.int32", "int64": "np.int64", "float32": "np.float32",
      "float64": "np.float64", "complex64": "np.complex64", "complex128": "np.complex128"}
_NB = {"bool": "boolean", "int32": "int32", "int64": "int64", "float32": "float32",
       "float64": "float64", "complex64": "complex64", "complex128": "complex128"}
_COMPLEX_LOOP_NAMES = {"div": "cdiv", "reciprocal": "crecip", "pow": "cpow"}


# ------------------------------------------------------------------------------ fast math


def _fast_table() -> tuple[dict, str]:
    """``numba_math.FAST`` and a digest of its source (part of every kernel's cache key)."""
    try:
        from .. import numerics as numba_math
    except Exception:  # absent or mid-edit: exact np.* functions keep kernels correct
        return {}, "none"
    safe = getattr(numba_math, "KERNEL_SAFE", ())
    table = {k: f for k, f in (getattr(numba_math, "FAST", {}) or {}).items() if k[0] in safe}
    try:
        digest = _file_digest("numba.numerics")
    except OSError:
        digest = "unknown"
    return table, digest


def _file_digest(module: str) -> str:
    """A digest of backend module ``module``'s source (every file of a package). Kernels
    inline its functions, and numba's cache does not see a change there: the digest goes
    into every kernel's header, which is its cache key."""
    spec = importlib.util.find_spec(f"graphopt.backends.{module}")
    files = [pathlib.Path(spec.origin)]
    if spec.submodule_search_locations:
        files = sorted(pathlib.Path(d, f) for d in spec.submodule_search_locations
                       for f in os.listdir(d) if f.endswith(".py"))
    h = hashlib.sha256()
    for path in files:
        h.update(path.name.encode() + b"\0" + path.read_bytes())
    return h.hexdigest()[:16]


def _fast_key(table: dict, op: str, dtype: str):
    for key in ((op, dtype), (op, np.dtype(dtype)), (op, np.dtype(dtype).type)):
        if key in table:
            return key
    return None


def _float_text(v: float) -> str:
    if math.isnan(v):
        return "np.nan"
    if math.isinf(v):
        return "np.inf" if v > 0 else "-np.inf"
    return repr(float(v))


# --------------------------------------------------------------------------- reductions


# how each combine of scalar_semantics.Reduction is written; {a} the accumulator, {v} a value
_COMBINE = {"or": "({a} or {v})", "and": "({a} and {v})",
            # float maxima: numba_math's intrinsics (NaN-propagating, and they vectorize)
            ("maximum", "f"): "fmaximum({a}, {v})", ("minimum", "f"): "fminimum({a}, {v})",
            ("maximum", "i"): "max({a}, {v})", ("minimum", "i"): "min({a}, {v})",
            # floats: an add LLVM may re-associate (lanes of partial sums), and only that add
            ("add", "f"): "sum_add({a}, {v})"}


def _reduction_rule(op, in_dt, out_dt, const):
    """(accumulator dtype, init, combine(acc, v) template, final(acc) template)."""
    rule = ss.reduction(op, in_dt, out_dt)
    kind = "f" if np.dtype(rule.acc).kind == "f" else "i"
    comb = _COMBINE.get(rule.combine) or _COMBINE.get((rule.combine, kind), "{a} + {v}")
    return rule.acc, const(rule.identity, rule.acc), comb, "{a}"


class UnsupportedKernel(NotImplementedError):
    """The generator does not handle this group; the message says why."""


class ScalarPrinter:
    """Spells values, casts and ops of a kernel as numba source; code lines go to
    ``self.bufs[key]`` (one buffer per loop level and phase)."""

    def const(self, value, dtype) -> str:
        dt = np.dtype(dtype)
        v = np.asarray(value).astype(dt).reshape(())[()]
        if dt.kind == "b":
            text = f"np.bool_({bool(v)})"
        elif dt.kind in "iu":
            text = f"{_T[dt.name]}({int(v)})"
        elif dt.kind == "f":
            text = f"{_T[dt.name]}({_float_text(float(v))})"
        else:
            text = f"{_T[dt.name]}(complex({_float_text(v.real)}, {_float_text(v.imag)}))"
        for name, t in self.globals.items():
            if t == text:
                return name
        name = f"C{len(self.globals)}"
        self.globals[name] = text
        return name

    def cast(self, e: str, src: str, dst: str) -> str:
        if src == dst:
            return e
        if dst == "bool":
            return f"({e} != {self.const(0, src)})"
        if src == "bool":
            return f"({self.const(1, dst)} if {e} else {self.const(0, dst)})"
        if np.dtype(src).kind == "c" and np.dtype(dst).kind != "c":
            return f"{_T[dst]}({e}.real)"
        return f"{_T[dst]}({e})"

    def fast_call(self, op, dt, x):
        """``op_f32(x)`` from numba_math when it has one, else None."""
        key = _fast_key(self.fast, op, dt)
        if key is None:
            return None
        name = f"{op}_{'f32' if dt == 'float32' else 'f64'}"
        self.fast_used[name] = key
        return f"{name}({x})"

    def math(self, op, x, dt) -> str:
        if np.dtype(dt).kind == "c":
            if op == "log":
                return f"clog_c{np.dtype(dt).itemsize * 8}({x})"
            if dt == "complex64":
                # in complex128, rounded once: numba's complex64 sin/cos/exp overflow in
                # cosh/sinh where the result is still finite (NumPy's csinf scales)
                return f"np.complex64(cmath.{op}(np.complex128({x})))"
            return f"cmath.{op}({x})"
        return self.fast_call(op, dt, x) or f"np.{op}({x})"

    def var(self, key, expr) -> str:
        name = f"v{self.nvar}"
        self.nvar += 1
        self.bufs.setdefault(key, []).append(f"{name} = {expr}")
        return name

    def op_expr(self, op, a, dts, out, key) -> str:
        if op in ss.UFUNCS:
            ins, res = ss.loop_dtypes(op, dts, out)
            a = [self.cast(x, s, t) for x, s, t in zip(a, dts, ins)]
            expr = self.ufunc_expr(op, a, ins[0])
            # numba computes int32 arithmetic in int64: narrow back, as NumPy wraps
            return f"np.int32({expr})" if res == "int32" and op not in ("abs",) else expr
        if op == "astype":
            return self.cast(a[0], dts[0], out)
        if op == "where":
            c = a[0] if dts[0] == "bool" else f"({a[0]} != {self.const(0, dts[0])})"
            return f"({self.cast(a[1], dts[1], out)} if {c} else {self.cast(a[2], dts[2], out)})"
        if op in ("real", "imag"):
            if np.dtype(dts[0]).kind == "c":
                return f"{a[0]}.{op}"
            return a[0] if op == "real" else self.const(0, out)
        if op == "relu":
            if dts[0] == "bool":
                return a[0]
            z = self.const(0, dts[0])
            nan = f" or {a[0]} != {a[0]}" if np.dtype(dts[0]).kind == "f" else ""
            return f"({a[0]} if {a[0]} > {z}{nan} else {z})"
        if op == "sigmoid":
            if np.dtype(out).kind == "c":
                one = self.const(1, out)
                return f"{one} / ({one} + {self.math('exp', f'-{a[0]}', out)})"
            fast = self.fast_call("sigmoid", out, self.cast(a[0], dts[0], out))
            if fast:
                return fast
            w = self.var(key, self.cast(a[0], dts[0], ss.LOGISTIC_DTYPE))
            return self.logistic(w, self.const(1.0, ss.LOGISTIC_DTYPE), out, key)
        if op == "gelu":
            return self.gelu(a[0], dts[0], out, key)
        raise UnsupportedKernel(f"no numba expression for op {op!r}")

    def ufunc_expr(self, op, a, ct) -> str:
        kind = np.dtype(ct).kind
        x = a[0]
        if op in ss.MATH:
            return self.math(op, x, ct)
        if op == "neg":
            return f"-{x}"
        if op in ("abs", "square") and kind == "b":
            return x
        if op == "abs":
            return f"abs({x})"
        if op == "square":
            return f"{x} * {x}"
        if op == "conj":
            return f"{x}.conjugate()" if kind == "c" else x
        if kind == "c" and op in ss.COMPLEX_LOOPS:   # numba_scalar's ports of NumPy's loops
            return f"{_COMPLEX_LOOP_NAMES[op]}_c{np.dtype(ct).itemsize * 8}({', '.join(a)})"
        if op == "reciprocal":
            if kind == "f":
                return f"{self.const(1, ct)} / {x}"
            expr = self.const(ss.INT_RECIPROCAL_ELSE, ct)
            for when, then in reversed(ss.int_reciprocal_cases(ct)):
                expr = f"({self.const(then, ct)} if {x} == {self.const(when, ct)} else {expr})"
            return expr
        y = a[1]
        if kind == "b" and op in ss.BOOL_LOGIC:
            return f"({x} {ss.BOOL_LOGIC[op]} {y})"
        if op in ss.PICK_FIRST_IF:
            nan = f" or {x} != {x}" if kind == "f" else ""
            return f"({x} if {x} {ss.PICK_FIRST_IF[op]} {y}{nan} else {y})"
        if op == "pow":
            if kind == "i":
                return f"ipow({x}, {y}, err)"
            return (self.fast_call("pow", ct, f"{x}, {y}") if kind == "f" else None) or \
                f"{x} ** {y}"
        return f"{x} {ss.INFIX[op]} {y}"

    @staticmethod
    def cdiv(x, y, ct) -> str:
        """Complex ``x / y`` as NumPy divides (numba raises on a zero divisor)."""
        return f"cdiv_c{np.dtype(ct).itemsize * 8}({x}, {y})"

    def logistic(self, w, x, out, key) -> str:
        """``x * sigmoid(w)`` of float64 values, as ``activations._logistic``, cast to
        ``out``."""
        e = self.var(key, f"np.exp(-abs({w}))")
        one = self.const(1.0, ss.LOGISTIC_DTYPE)
        return self.cast(f"({x} * (({one} if {w} >= 0 else {e}) / ({one} + {e})))",
                         ss.LOGISTIC_DTYPE, out)

    def gelu(self, x, src, out, key) -> str:
        """GELU as ``activations.gelu``: ``x * sigmoid(w)``, ``w = 2 sqrt(2/pi) (x + k x**3)``
        in float64 with ``x**3`` in float64 (in an integer's own type: it wraps);
        numba_math's double-double form for float64 and when fast."""
        if np.dtype(out).kind == "c":
            h, one = self.const(0.5, out), self.const(1.0, out)
            c, k = self.const(ss.GELU_C, out), self.const(ss.GELU_K, out)
            t = self.math("tanh", f"{c} * ({x} + {k} * ({x} * {x} * {x}))", out)
            return f"{h} * {x} * ({one} + {t})"
        if src == out:
            fast = self.fast_call("gelu", out, x)
            if fast:
                return fast
        if src == out == "float64":
            # NumPy's float64 formula loses |w| ulp in the tail (the reference computes in
            # long double); numba has no long double: numba_math's double-double gelu
            # (3.5 ulp) with fast math off too
            self.fast_used["gelu_f64"] = ("gelu", "float64")
            return f"gelu_f64({x})"
        xd = self.var(key, self.cast(x, src, ss.LOGISTIC_DTYPE))
        # x**3 in float64, or in an integer's own type (it wraps, as activations.gelu)
        cube = f"{xd} * {xd} * {xd}" if np.dtype(src).kind == "f" else \
            self.cast(x if src == "bool" else f"{_T[src]}({_T[src]}({x} * {x}) * {x})",
                      src, ss.LOGISTIC_DTYPE)
        c2, k = self.const(ss.GELU_2C, ss.LOGISTIC_DTYPE), self.const(ss.GELU_K, ss.LOGISTIC_DTYPE)
        w = self.var(key, f"{c2} * ({xd} + {k} * ({cube}))")
        return self.logistic(w, xd, out, key)

    def reduction(self, r, v, vdt) -> tuple:
        """``(acc dtype, init, combine template, final template, v as acc dtype)`` of
        reduction node ``r`` over values ``v`` of dtype ``vdt``; templates use {a}, {v}."""
        red = self.sub.nodes[r]
        acc_dt, init, comb, final = _reduction_rule(red["op"], vdt, red["dtype"], self.const)
        if red["op"] == "mean":
            count = self.const(math.prod(self.space[a] for a in red["attrs"]["axes"]), acc_dt)
            final = self.cdiv("{a}", count, acc_dt) if np.dtype(acc_dt).kind == "c" else \
                f"{{a}} / {count}"
        return acc_dt, init, comb, self.cast(final, acc_dt, red["dtype"]), \
            self.cast(v, vdt, acc_dt)
