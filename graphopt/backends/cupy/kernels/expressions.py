"""CUDA C spelling of scalar values: C types, literals, NumPy casts, the device helpers
and each elementwise op's expression, all read from ``scalar_semantics``."""

from __future__ import annotations

import math

import numpy as np

from ... import scalar_semantics as ss

CTYPES = {"bool": "bool", "int32": "int", "int64": "long long", "float16": "float16",
          "float32": "float", "float64": "double", "complex64": "complex<float>",
          "complex128": "complex<double>"}
COMPUTE = dict(CTYPES, float16="float")

NAN_F64 = "__longlong_as_double(0x7ff8000000000000LL)"
HELPERS = {  # emitted into a stage's preamble when its code (or another helper) calls them
    # float -> nearest float16 (ties to even) -> float, as NumPy rounds every float16 op;
    # bit arithmetic so that it needs no fp16 header.
    "go_f16": """__device__ inline float go_f16(float x) {
  unsigned int u = __float_as_uint(x), s = u & 0x80000000u, a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return x;                                   // inf, nan
  if (a >= 0x477ff000u) return __uint_as_float(s | 0x7f800000u);    // >= 65520: inf
  if (a < 0x38800000u)                                              // subnormal: step 2^-24
    return copysignf(rintf(fabsf(x) * 16777216.0f) / 16777216.0f, x);
  return __uint_as_float(s | ((a + 0xfffu + ((a >> 13) & 1u)) & ~0x1fffu));
}""",
    **{f"go_{op[:3]}": f"template <typename T> __device__ inline T go_{op[:3]}(T a, T b) "
       f"{{ return (a {cmp} b || a != a) ? a : b; }}  // as np.{op}: NaN wins, ties give b"
       for op, cmp in ss.PICK_FIRST_IF.items()},
    # sigmoid and gelu as ops.py defines them: real ones in double, in the stable form
    # x * e**min(w, 0) / (1 + e**-|w|) (no cancellation in the negative tail)
    "go_sigmoid": "__device__ inline double go_sigmoid(double x) {\n"
                  "  double e = exp(-fabs(x)); return (x >= 0 ? 1.0 : e) / (1.0 + e); }",
    "go_gelu": "__device__ inline double go_gelu(double x, double cube) {\n"
               f"  double w = {ss.GELU_2C!r} * (x + {ss.GELU_K!r} * cube);\n"
               "  double e = exp(-fabs(w)); return x * ((w >= 0 ? 1.0 : e) / (1.0 + e)); }",
    # NumPy's complex loops (scalar_semantics.COMPLEX_LOOPS), as numba_scalar ports them
    "go_cmul": "template <typename C> __device__ inline C go_cmul(C a, C b) {\n"
               "  return C(a.real() * b.real() - a.imag() * b.imag(),\n"
               "           a.real() * b.imag() + a.imag() * b.real()); }",
    "go_cdiv": """template <typename C> __device__ inline C go_cdiv(C a, C b) {
  typedef typename C::value_type T;
  const T ar = a.real(), ai = a.imag(), br = b.real(), bi = b.imag();
  const T abr = fabs(br), abi = fabs(bi);
  if (abr >= abi) {
    if (abr == T(0) && abi == T(0)) return C(ar / abr, ai / abr);
    const T rat = bi / br, scl = T(1) / (br + bi * rat);
    return C((ar + ai * rat) * scl, (ai - ar * rat) * scl);
  }
  const T rat = br / bi, scl = T(1) / (bi + br * rat);
  return C((ar * rat + ai) * scl, (ai * rat - ar) * scl);
}""",
    "go_crecip": """template <typename C> __device__ inline C go_crecip(C z) {
  typedef typename C::value_type T;
  const T zr = z.real(), zi = z.imag();
  if (fabs(zi) <= fabs(zr)) { const T r = zi / zr, d = zr + zi * r; return C(T(1) / d, -r / d); }
  const T r = zr / zi, d = zr * r + zi;
  return C(r / d, -T(1) / d);
}""",
    "go_cpow": f"""template <typename C> __device__ inline C go_cpow(C a, C b) {{
  typedef typename C::value_type T;
  const T br = b.real(), bi = b.imag();
  if (br == T(0) && bi == T(0)) return C(T(1), T(0));
  if (a.real() == T(0) && a.imag() == T(0))
    return br > T(0) ? C(T(0), T(0)) : C(T({NAN_F64}), T({NAN_F64}));
  if (bi == T(0) && br == trunc(br) && br > -{ss.CPOW_INT_LIMIT} && br < {ss.CPOW_INT_LIMIT}) {{
    const int n = (int)br;
    if (n == 1) return a;
    if (n == 2) return go_cmul(a, a);
    if (n == 3) return go_cmul(a, go_cmul(a, a));
    const int m = n < 0 ? -n : n;
    C q(T(1), T(0)), p = a;
    for (int mask = 1;; mask <<= 1) {{
      if (m & mask) q = go_cmul(q, p);
      if (m < (mask << 1)) break;
      p = go_cmul(p, p);
    }}
    return br < T(0) ? go_cdiv(C(T(1), T(0)), q) : q;
  }}
  const complex<double> r = exp(complex<double>(br, bi) * log(complex<double>(a.real(), a.imag())));
  return C((T)r.real(), (T)r.imag());
}}""",
    # only for exponents known non-negative: NumPy raises on a negative one, a kernel cannot
    "go_ipow": "template <typename T> __device__ inline T go_ipow(T a, T b) {\n"
               "  T r = 1; while (b > 0) { if (b & 1) r *= a; a *= a; b >>= 1; } return r; }",
}


def helpers_for(code: str) -> str:
    """Definitions of the helpers that ``code`` calls, and those they call, in the order of
    ``HELPERS`` (a helper comes after those it calls)."""
    used: set = set()
    while True:
        text = code + "".join(HELPERS[k] for k in used)
        more = {k for k in HELPERS if k + "(" in text} - used
        if not more:
            return "\n".join(v for k, v in HELPERS.items() if k in used)
        used |= more


class Unsupported(Exception):
    """The sub-graph holds something this generator does not emit (the backend then runs
    it op by op on cupy)."""


# ------------------------------------------------------------------------------- literals


def literal(value, dtype: str) -> str:
    """``value`` as a CUDA C literal of ``dtype``'s compute type (inf/nan by bit pattern)."""
    dt = np.dtype(dtype)
    if dt.kind == "b":
        return "true" if bool(value) else "false"
    if dt.kind in "iu":
        v = int(value)
        if dt.itemsize == 8:
            return "(-9223372036854775807LL - 1)" if v == -2**63 else f"{v}LL"
        return "(-2147483647 - 1)" if v == -2**31 else str(v)
    if dt.kind == "c":
        part = "float32" if dt.itemsize == 8 else "float64"
        c = complex(value)
        return f"{COMPUTE[dt.name]}({literal(c.real, part)}, {literal(c.imag, part)})"
    v = float(value)
    single = dt.itemsize <= 4
    if math.isnan(v):
        return "__int_as_float(0x7fffffff)" if single else NAN_F64
    if math.isinf(v):
        if single:
            return f"__int_as_float({'0x7f800000' if v > 0 else '(int)0xff800000'})"
        return ("__longlong_as_double(0x7ff0000000000000LL)" if v > 0 else
                "__longlong_as_double((long long)0xfff0000000000000ULL)")
    text = repr(float(np.float32(v))) if single else repr(v)
    return text + "f" if single else text


def cast(expr: str, src: str, dst: str) -> str:
    """Convert ``expr`` (a value in ``src``'s compute type) to ``dst``'s compute type as a
    NumPy cast does (complex -> real keeps the real part; float16 rounds)."""
    sk, dk = np.dtype(src).kind, np.dtype(dst).kind
    if src == dst:
        return expr
    if dk == "b":
        return f"(({expr}).real() != 0 || ({expr}).imag() != 0)" if sk == "c" else \
            f"(({expr}) != 0)"
    if dk == "c":
        if sk == "c":
            return f"{COMPUTE[dst]}({expr})"
        part = "float" if dst == "complex64" else "double"
        return f"{COMPUTE[dst]}(({part})({expr}))"
    if sk == "c":
        expr, sk = f"({expr}).real()", "f"
    if dst == "float16":
        return f"go_f16((float)({expr}))"
    if COMPUTE[src] == COMPUTE[dst] and sk == dk:
        return expr
    return f"(({COMPUTE[dst]})({expr}))"


# ----------------------------------------------------------------------------- op bodies


def truth(expr: str, dtype: str) -> str:
    """C expression: ``expr`` of ``dtype`` as a bool (NumPy's truth: nonzero)."""
    return cast(expr, dtype, "bool")


_C_LOGIC = {"or": "||", "and": "&&"}
_COMPLEX_LOOP_NAMES = {"div": "div", "reciprocal": "recip", "pow": "pow"}
# scalar_semantics.Reduction.combine as cupy's REDUCE expression of ``a`` and ``b``
REDUCE_EXPR = {"add": "a + b", "maximum": "go_max(a, b)", "minimum": "go_min(a, b)",
            "or": "(a || b)", "and": "(a && b)"}


def _int_reciprocal(a: str, t: str) -> str:
    expr = literal(ss.INT_RECIPROCAL_ELSE, t)
    for when, then in reversed(ss.int_reciprocal_cases(t)):
        expr = f"({a} == {literal(when, t)} ? {literal(then, t)} : {expr})"
    return expr


def _cube(a: str, t: str) -> str:
    """``a**3`` as double: in an integer's own type (it wraps, as activations.gelu:
    multiplied as unsigned, where wrapping is defined), else in double."""
    if np.dtype(t).kind == "b":
        return f"(double){a}"
    if np.dtype(t).kind in "iu":
        u = "unsigned long long"
        return f"(double)({CTYPES[t]})(({u}){a} * ({u}){a} * ({u}){a})"
    return f"((double){a} * (double){a} * (double){a})"


def op_expr(op: str, args: list[str], loop: list[str], out: str) -> str:
    """The C expression of elementwise ``op`` on ``args`` (already in their loop types,
    ``scalar_semantics.loop_dtypes``); the value is in ``out``'s compute type."""
    t = loop[0] if loop else out
    k = np.dtype(t).kind
    if k == "c" and op in ss.COMPLEX_LOOPS:
        return f"go_c{_COMPLEX_LOOP_NAMES[op]}({', '.join(args)})"
    if len(args) == 1 and op != "astype":
        return _unary_expr(op, args[0], t, out)
    a, b = args[0], args[1] if len(args) > 1 else ""
    if k == "b" and op in ss.BOOL_LOGIC:
        return f"({a} {_C_LOGIC[ss.BOOL_LOGIC[op]]} {b})"
    if op in ss.INFIX:
        return f"({a} {ss.INFIX[op]} {b})"
    if op == "pow":
        return f"go_ipow({a}, {b})" if k in "iu" else f"pow({a}, {b})"
    if op in ss.PICK_FIRST_IF:
        return f"go_{op[:3]}({a}, {b})"
    if op == "where":
        return f"({a} ? {b} : {args[2]})"
    if op == "astype":
        return cast(a, t, out)
    raise Unsupported(f"no CUDA body for op {op!r}")


def _unary_expr(op: str, a: str, t: str, out: str) -> str:
    """``op_expr`` of a one-operand op on ``a`` in loop type ``t``."""
    k = np.dtype(t).kind
    lit = lambda v: literal(v, t)  # noqa: E731
    if op == "neg":
        return f"(-{a})"
    if op == "abs":
        if k == "b":
            return a
        return f"abs({a})" if k == "c" else f"fabs({a})" if k == "f" else \
            f"llabs({a})" if t == "int64" else f"abs({a})"
    if op in ss.MATH:
        return f"{op}({a})"
    if op == "sigmoid":
        if k == "c":
            return f"({lit(1)} / ({lit(1)} + exp(-{a})))"
        return cast(f"go_sigmoid(({COMPUTE[ss.LOGISTIC_DTYPE]}){a})", ss.LOGISTIC_DTYPE, out)
    if op == "relu":
        return f"go_max({a}, {lit(0)})"
    if op == "gelu":
        if k == "c":
            return (f"({lit(0.5)} * {a} * ({lit(1.0)} + tanh({lit(ss.GELU_C)} * ({a} + "
                    f"{lit(ss.GELU_K)} * ({a} * {a} * {a})))))")
        return cast(f"go_gelu((double){a}, {_cube(a, t)})", ss.LOGISTIC_DTYPE, out)
    if op == "square":
        return f"({a} * {a})"
    if op == "reciprocal":
        return _int_reciprocal(a, t) if k in "iu" else f"({lit(1)} / {a})"
    if op == "conj":
        return f"conj({a})" if k == "c" else a
    if op == "real":
        return f"{a}.real()" if k == "c" else a
    if op == "imag":
        return f"{a}.imag()" if k == "c" else literal(0, out)
    raise Unsupported(f"no CUDA body for op {op!r}")
