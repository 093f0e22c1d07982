"""Fused sub-graph -> CUDA C source for ``cupy.ElementwiseKernel`` / ``ReductionKernel``.

Pure Python (no cupy import), so the generated source is tested on any machine. A
sub-graph (a fused node's ``attrs["graph"]``, or one op wrapped as one) compiles to a
``GroupProgram``: stages run in order, each writing a temporary or the step's output.

- Elementwise members are inlined into one expression per stage, one line per node.
- Each reduction and each einsum is its own stage (a ``ReductionKernel``, a contraction);
  elementwise work before a reduction becomes its map expression, elementwise work after
  it its post-map expression when it reads nothing else, else an epilogue stage.
- Layout ops (transpose, broadcast_to, reshape) never move data inside a kernel: they are
  pushed down to the kernel arguments as a *chain* of view operations (elementwise ops
  commute with index remapping), so ``x + x.T`` reads two views of ``x``.
- Values are computed in the compute type of their dtype (float16 in float32, rounded back
  to float16 after every op exactly as NumPy does). Loop dtypes, refusals, integer and NaN
  corner cases, reduction accumulators and the sigmoid/GELU constants come from
  ``scalar_semantics``, the table the numba generator reads too.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

import networkx as nx
import numpy as np

from .. import ir, ops
from . import scalar_semantics as ss

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


@dataclass(frozen=True)
class Operand:
    """A kernel argument: fused-node operand ``index`` (``source="input"``), an earlier
    stage's result (``"stage"``), a sub-graph constant (``"const"``), or a zero-filled
    array that only carries the reduction's shape (``"shape"``); ``chain`` lists the view
    ops applied to it first; the kernel then broadcasts it to ``shape``."""

    source: str
    index: int
    chain: tuple
    dtype: str
    shape: tuple


@dataclass
class ElementwiseStage:
    name: str
    operands: list
    in_params: str
    out_params: str
    operation: str
    preamble: str
    shape: tuple
    dtype: str
    dest: str = "temp"  # "out" or "temp"
    kind: str = "elementwise"


@dataclass
class ReductionStage:
    name: str
    operands: list
    in_params: str
    out_params: str
    map_expr: str
    reduce_expr: str
    post_map_expr: str
    identity: str
    reduce_type: str
    preamble: str
    axes: tuple
    keepdims: bool
    in_shape: tuple
    shape: tuple
    dtype: str
    dest: str = "temp"
    kind: str = "reduction"


@dataclass
class EinsumStage:
    name: str
    equation: str
    operands: list
    shape: tuple
    dtype: str
    path: tuple | None = None  # the contraction pass's pairwise order, for many operands
    alpha: object = 1          # scale of the result (a folded ``* c`` or ``/ c`` epilogue)
    dest: str = "temp"
    kind: str = "einsum"


@dataclass
class GroupProgram:
    """Stages in run order; the last one's result is the group's value. ``via_temp``: the
    last stage writes a temporary that is then copied into the output (the output buffer
    is also an operand that stage reads). ``constants``: arrays for ``const`` operands."""

    name: str
    stages: list
    shape: tuple
    dtype: str
    constants: list = field(default_factory=list)
    via_temp: bool = False

    @property
    def source(self) -> str:
        return render(self)


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


def _truth(expr: str, dtype: str) -> str:
    return cast(expr, dtype, "bool")


_C_LOGIC = {"or": "||", "and": "&&"}
_COMPLEX_LOOP_NAMES = {"div": "div", "reciprocal": "recip", "pow": "pow"}
# scalar_semantics.Reduction.combine as cupy's REDUCE expression of ``a`` and ``b``
_COMBINE = {"add": "a + b", "maximum": "go_max(a, b)", "minimum": "go_min(a, b)",
            "or": "(a || b)", "and": "(a && b)"}


def _int_reciprocal(a: str, t: str) -> str:
    expr = literal(ss.INT_RECIPROCAL_ELSE, t)
    for when, then in reversed(ss.int_reciprocal_cases(t)):
        expr = f"({a} == {literal(when, t)} ? {literal(then, t)} : {expr})"
    return expr


def _cube(a: str, t: str) -> str:
    """``a**3`` as double: in an integer's own type (it wraps, as ops._gelu: multiplied as
    unsigned, where wrapping is defined), else in double."""
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
    a = args[0] if args else ""
    b = args[1] if len(args) > 1 else ""
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
    if k == "c" and op in ss.COMPLEX_LOOPS:
        return f"go_c{_COMPLEX_LOOP_NAMES[op]}({', '.join(args)})"
    if op == "reciprocal":
        return _int_reciprocal(a, t) if k in "iu" else f"({lit(1)} / {a})"
    if op == "conj":
        return f"conj({a})" if k == "c" else a
    if op == "real":
        return f"{a}.real()" if k == "c" else a
    if op == "imag":
        return f"{a}.imag()" if k == "c" else literal(0, out)
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


# ------------------------------------------------------------------------------ emitter


def _norm(chain: tuple) -> tuple:
    """Drop trailing broadcasts: the kernel broadcasts every argument to its shape anyway,
    and right-aligned broadcasts compose."""
    chain = list(chain)
    while chain and chain[-1][0] == "broadcast_to":
        chain.pop()
    return tuple(chain)


def _layout_op(d) -> tuple:
    a = d["attrs"]
    if d["op"] == "transpose":
        return ("transpose", tuple(a["axes"]))
    return (d["op"], tuple(d["shape"]))


def _chain_shape(shape: tuple, chain: tuple) -> tuple:
    for op, arg in chain:
        shape = tuple(shape[i] for i in arg) if op == "transpose" else tuple(arg)
    return shape


class _Emitter:
    """Emits one stage's body: ``value(n, chain)`` is a C expression of node ``n`` (viewed
    through ``chain``) at the current index, in its compute type."""

    def __init__(self, prog: "_Builder", kernel_shape: tuple, leaf_exprs=None):
        self.p, self.G, self.kernel_shape = prog, prog.G, kernel_shape
        self.leaf_exprs = leaf_exprs or {}
        self.lines: list[str] = []
        self.operands: list[Operand] = []
        self._memo: dict = {}

    def param(self, source: str, index: int, chain: tuple, dtype: str, shape: tuple) -> str:
        opnd = Operand(source, index, chain, dtype, tuple(self.kernel_shape))
        if opnd not in self.operands:
            self.operands.append(opnd)
        name = f"in{self.operands.index(opnd)}"
        if dtype == "float16":
            return f"((float){name})"
        return name

    def value(self, n: int, chain: tuple = ()) -> str:
        """The C expression of node ``n`` seen through view ops ``chain``. An explicit stack,
        not recursion: ``_value_gen`` yields ``(node, chain)`` for each operand it needs and
        receives its expression, so a chain of any length compiles."""
        return ir.evaluate_iteratively(self._value_gen, n, chain)

    def _value_gen(self, n: int, chain: tuple = ()):
        chain = _norm(chain)
        key = (n, chain)
        if key in self._memo:
            return self._memo[key]
        d = self.G.nodes[n]
        op, kind = d["op"], ops.OPS[d["op"]].kind
        if (n, chain) in self.leaf_exprs:
            expr = self.leaf_exprs[(n, chain)]
        elif n in self.p.stage_of:
            expr = self.param("stage", self.p.stage_of[n], chain, d["dtype"], d["shape"])
        elif op == "input":
            pos = self.G.graph["inputs"].index(n)
            if pos in self.p.literals:
                expr = literal(self.p.literals[pos], d["dtype"])
            else:
                expr = self.param("input", pos, chain, d["dtype"], d["shape"])
        elif op == "const":
            v = np.asarray(d["attrs"]["value"])
            if v.size == 1:
                expr = literal(v.reshape(()).item(), d["dtype"])
            else:
                expr = self.param("const", self.p.const_index(n), chain, d["dtype"], d["shape"])
        elif kind == ops.LAYOUT:
            (u,) = ir.operands(self.G, n)
            expr = yield (u, (_layout_op(d),) + chain)
        elif kind == ops.REDUCTION and not d["attrs"]["axes"]:
            (u,) = ir.operands(self.G, n)  # reducing over no axis: a cast
            expr = cast((yield (u, chain)), self.G.nodes[u]["dtype"], d["dtype"])
        elif kind == ops.ELEMENTWISE:
            expr = yield from self._elementwise(n, d, chain)
        else:
            raise Unsupported(f"{op} inside an elementwise expression")
        self._memo[key] = expr
        return expr

    def _elementwise(self, n: int, d, chain: tuple) -> str:
        us = ir.operands(self.G, n)
        shape = tuple(d["shape"])
        vals = []
        for u in us:
            ud = self.G.nodes[u]
            pre = (("broadcast_to", shape),) if tuple(ud["shape"]) != shape else ()
            vals.append(((yield (u, pre + chain)), ud["dtype"]))
        in_dtypes = [dt for _, dt in vals]
        reason = ss.refusal(d["op"], in_dtypes)
        if reason:
            raise Unsupported(reason)
        loop, _ = ss.loop_dtypes(d["op"], in_dtypes, d["dtype"])
        if d["op"] == "pow" and np.dtype(loop[0]).kind in "iu" and \
                not self._known_non_negative(us[1]):
            raise Unsupported(f"integer power with an exponent not known to be >= 0 ("
                              f"NumPy raises {ss.INT_POW_NEGATIVE!r}; a kernel cannot)")
        args = [cast(v, dt, lt) if not (d["op"] == "where" and i == 0) else _truth(v, dt)
                for i, ((v, dt), lt) in enumerate(zip(vals, loop))]
        body = op_expr(d["op"], args, loop, d["dtype"])
        if d["dtype"] == "float16" and d["op"] != "astype":
            body = f"go_f16({body})"  # NumPy rounds every float16 op
        var = f"v{n}" + (f"_{len(self._memo)}" if chain else "")
        where = f" @ {d['src']}" if d.get("src") else ""
        self.lines.append(f"const {COMPUTE[d['dtype']]} {var} = {body};  // {d['op']}{where}")
        return var

    def _known_non_negative(self, u: int) -> bool:
        """Whether node ``u`` is a constant or a literal input with no negative value."""
        d = self.G.nodes[u]
        if d["op"] == "const":
            return bool(np.all(np.asarray(d["attrs"]["value"]) >= 0))
        pos = self.G.graph["inputs"].index(u) if d["op"] == "input" else None
        return pos in self.p.literals and self.p.literals[pos] >= 0

    def params_text(self) -> str:
        return ", ".join(f"{o.dtype} in{i}" for i, o in enumerate(self.operands))

    def preamble(self, result: str) -> str:
        return helpers_for("\n".join(self.lines) + result)


# ------------------------------------------------------------------------------ builder


def _kind(G, n) -> str:
    return ops.OPS[G.nodes[n]["op"]].kind


def _is_root(G, n) -> bool:
    k = _kind(G, n)
    return k == ops.CONTRACTION or (k == ops.REDUCTION and bool(G.nodes[n]["attrs"]["axes"]))


class _Builder:
    def __init__(self, G: nx.MultiDiGraph, literals: dict, name: str):
        self.G, self.literals, self.name = G, dict(literals), name
        self.stage_of: dict[int, int] = {}
        self.stages: list = []
        self.constants: list = []
        self._const_ids: dict[int, int] = {}

    def const_index(self, n: int) -> int:
        if n not in self._const_ids:
            self._const_ids[n] = len(self.constants)
            self.constants.append(np.asarray(self.G.nodes[n]["attrs"]["value"]))
        return self._const_ids[n]

    def _leaf(self, u: int) -> tuple[int, tuple]:
        """Follow layout ops down from ``u``: the node that holds the data and the chain."""
        chain: tuple = ()
        while _kind(self.G, u) == ops.LAYOUT:
            chain = (_layout_op(self.G.nodes[u]),) + chain
            (u,) = ir.operands(self.G, u)
        return u, chain

    def _operand(self, u: int) -> Operand:
        base, chain = self._leaf(u)
        d = self.G.nodes[base]
        shape = _chain_shape(tuple(d["shape"]), chain)
        if base in self.stage_of:
            return Operand("stage", self.stage_of[base], chain, d["dtype"], shape)
        if d["op"] == "input":
            return Operand("input", self.G.graph["inputs"].index(base), chain, d["dtype"], shape)
        if d["op"] == "const":
            return Operand("const", self.const_index(base), chain, d["dtype"], shape)
        raise AssertionError("einsum operands are materialized first")

    def elementwise(self, n: int, leaf_exprs=None) -> ElementwiseStage:
        d = self.G.nodes[n]
        em = _Emitter(self, tuple(d["shape"]), leaf_exprs)
        v = em.value(n)
        ct = CTYPES[d["dtype"]]
        op = "\n".join(em.lines + [f"out0 = static_cast<{ct}>({v});"])
        return ElementwiseStage(f"{self.name}_s{len(self.stages)}", em.operands,
                                em.params_text(), f"{d['dtype']} out0", op, em.preamble(v),
                                tuple(d["shape"]), d["dtype"])

    def reduction(self, n: int, post_node: int | None = None) -> ReductionStage:
        d = self.G.nodes[n]
        (u,) = ir.operands(self.G, n)
        ud = self.G.nodes[u]
        red, axes = d["op"], tuple(d["attrs"]["axes"])
        rt = d["dtype"]
        reason = ss.refusal(red, [ud["dtype"]])
        if reason:
            raise Unsupported(reason)
        rule = ss.reduction(red, ud["dtype"], rt)
        em = _Emitter(self, tuple(ud["shape"]))
        v = cast(em.value(u), ud["dtype"], rule.acc)
        if not em.operands:  # nothing but literals: a zero array carries the shape
            em.operands.append(Operand("shape", 0, (), "bool", tuple(ud["shape"])))
        names = ", ".join(f"in{i}" for i in range(len(em.operands)))
        sig = ", ".join(f"const {CTYPES[o.dtype]} in{i}" for i, o in enumerate(em.operands))
        rct = COMPUTE[rule.acc]
        fname = f"{self.name}_map{len(self.stages)}"
        pre = [f"__device__ inline {rct} {fname}({sig}) {{"] + \
              [f"  {line}" for line in em.lines] + [f"  return {v};", "}"]
        reduce_expr = _COMBINE[rule.combine]
        identity = literal(rule.identity, rule.acc)
        count = math.prod(ud["shape"][a] for a in axes)
        a_expr = cast(f"(a / {literal(count, rule.acc)})" if red == "mean" else "a",
                      rule.acc, rt)
        out_node, out_expr = n, a_expr
        if post_node is not None:
            pem = _Emitter(self, tuple(self.G.nodes[post_node]["shape"]),
                           {(n, ()): "_r"})
            out_expr = pem.value(post_node)
            post_name = f"{self.name}_post{len(self.stages)}"
            pre += [f"__device__ inline {COMPUTE[self.G.nodes[post_node]['dtype']]} "
                    f"{post_name}(const {rct} a) {{", f"  const {COMPUTE[rt]} _r = {a_expr};"] + \
                   [f"  {line}" for line in pem.lines] + [f"  return {out_expr};", "}"]
            out_node, out_expr = post_node, f"{post_name}(a)"
        od = self.G.nodes[out_node]
        post_map = f"out0 = static_cast<{CTYPES[od['dtype']]}>({out_expr})"
        helpers = helpers_for("\n".join(pre) + reduce_expr + post_map)
        # cupy's CUB path (one contiguous input) names the argument types by these typedefs,
        # which ReductionKernel defines only for generic parameter types.
        helpers = "\n".join([f"typedef {CTYPES[em.operands[0].dtype]} type_in0_raw;",
                             f"typedef {CTYPES[od['dtype']]} type_out0_raw;"] +
                            ([helpers] if helpers else []))
        return ReductionStage(
            f"{self.name}_s{len(self.stages)}", em.operands,
            ", ".join(f"{o.dtype} in{i}" for i, o in enumerate(em.operands)),
            f"{od['dtype']} out0", f"{fname}({names})", reduce_expr,
            post_map, identity, rct,
            (helpers + "\n" if helpers else "") + "\n".join(pre), axes,
            bool(d["attrs"]["keepdims"]), tuple(ud["shape"]), tuple(od["shape"]), od["dtype"])

    def einsum(self, n: int) -> EinsumStage:
        d = self.G.nodes[n]
        path = d["attrs"].get("path")
        return EinsumStage(f"{self.name}_s{len(self.stages)}", d["attrs"]["equation"],
                           [self._operand(u) for u in ir.operands(self.G, n)],
                           tuple(d["shape"]), d["dtype"],
                           tuple(tuple(p) for p in path) if path else None)

    def add(self, n: int, stage) -> None:
        self.stage_of[n] = len(self.stages)
        self.stages.append(stage)


def _readers(G, n, stop: set) -> set:
    """Materialized nodes (in ``stop``) whose value depends on ``n`` without passing another
    materialized node."""
    out, todo, seen = set(), list(ir.users(G, n)), set()
    while todo:
        v = todo.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in stop:
            out.add(v)
        else:
            todo.extend(ir.users(G, v))
    return out


def compile_group(sub: nx.MultiDiGraph, literals: dict | None = None, aliased=frozenset(),
                  name: str | None = None) -> GroupProgram:
    """Compile a sub-graph (inputs ``in0..``, one output) into a ``GroupProgram``.

    Args:
        literals: input position -> scalar value, inlined into the source (scalar constants
            of the enclosing graph).
        aliased: input positions whose buffer is the step's output buffer (the memory plan
            put the result in place of a dying operand).
        name: kernel name prefix (default: from the structure).

    Raises:
        Unsupported: an op or dtype combination this generator does not emit.
    """
    literals = dict(literals or {})
    if name is None:
        key = ir.structural_hash(sub) + repr(sorted(literals.items(), key=repr))
        name = "go_" + hashlib.sha256(key.encode()).hexdigest()[:10]
    G = sub
    (out,) = G.graph["outputs"]
    order = ir.topo_order(G)
    for n in order:
        if _kind(G, n) == ops.FUSED:
            raise Unsupported("a fused node inside a fused group")
    p = _Builder(G, literals, name)
    roots = [n for n in order if _is_root(G, n)]
    mat = set(roots)
    for r in roots:  # an einsum reads arrays: materialize computed operands first
        if _kind(G, r) == ops.CONTRACTION:
            for u in ir.operands(G, r):
                base, _ = p._leaf(u)
                if G.nodes[base]["op"] not in ("input", "const"):
                    mat.add(base)
    for n in [m for m in order if m in mat]:
        if _kind(G, n) == ops.CONTRACTION:
            p.add(n, p.einsum(n))
        elif _kind(G, n) == ops.REDUCTION and n != out and _fold_post(G, n, out, mat):
            p.add(out, p.reduction(n, post_node=out))
            break  # the output reads nothing but this reduction
        elif _kind(G, n) == ops.REDUCTION:
            p.add(n, p.reduction(n))
        else:
            p.add(n, p.elementwise(n))
    if out not in p.stage_of:
        p.add(out, p.elementwise(out))
    stages = p.stages
    last = stages[-1]
    last.dest = "out"
    od = G.nodes[out]
    prog = GroupProgram(name, stages, tuple(od["shape"]), od["dtype"], p.constants)
    if aliased and last.kind != "elementwise":
        prog.via_temp = True
        last.dest = "temp"
    elif not aliased and last.kind == "elementwise" and len(stages) > 1:
        _root_into_out(G, prog)
        _fold_scale(G, prog, out, literals, p.stage_of)
    return prog


def _fold_post(G, r: int, out: int, mat: set) -> bool:
    """The output is elementwise work on reduction ``r`` and literals alone: it becomes the
    reduction's post-map expression."""
    if _readers(G, r, mat | {out}) != {out}:
        return False
    ok = True

    def visit(n, chain):
        nonlocal ok
        if n == r:
            ok &= chain == ()
            return
        d = G.nodes[n]
        k = ops.OPS[d["op"]].kind
        if d["op"] == "input" or (d["op"] == "const" and np.size(d["attrs"]["value"]) != 1):
            ok = False
        elif k == ops.LAYOUT:
            visit(ir.operands(G, n)[0], _norm((_layout_op(d),) + chain))
        elif k == ops.ELEMENTWISE or (k == ops.REDUCTION and not d["attrs"]["axes"]):
            for u in ir.operands(G, n):
                pre = (("broadcast_to", tuple(d["shape"])),) if tuple(G.nodes[u]["shape"]) != \
                    tuple(d["shape"]) else ()
                visit(u, _norm(pre + chain))
        elif d["op"] != "const":
            ok = False
    visit(out, ())
    return ok and tuple(G.nodes[r]["shape"]) == tuple(G.nodes[out]["shape"])


def _root_into_out(G, prog: GroupProgram) -> None:
    """Let the stage before the epilogue write the output buffer when the epilogue reads it
    only element for element (same shape and dtype): the epilogue then runs in place."""
    *rest, epi = prog.stages
    r = rest[-1]
    k = len(rest) - 1
    reads = [o for o in epi.operands if o.source == "stage" and o.index == k]
    others = [s for s in rest[:-1] for o in s.operands if o.source == "stage" and o.index == k]
    if (r.kind in ("einsum", "reduction") and tuple(r.shape) == tuple(prog.shape)
            and r.dtype == prog.dtype and reads and all(o.chain == () for o in reads)
            and not others):
        r.dest = "out"


def _fold_scale(G, prog: GroupProgram, out: int, literals: dict, stage_of: dict) -> None:
    """An epilogue that only scales the contraction (``c * k``, ``c / k``, a scalar ``k``)
    becomes the GEMM's ``alpha``: one pass over the output fewer."""
    *rest, epi = prog.stages
    r = rest[-1]
    if r.kind != "einsum" or r.dest != "out" or [o.source for o in epi.operands] != ["stage"]:
        return
    d = G.nodes[out]
    if d["op"] not in ("mul", "div") or np.dtype(d["dtype"]).kind not in "fc":
        return
    a, b = ir.operands(G, out)

    def scalar(n):
        nd = G.nodes[n]
        if nd["op"] == "const" and np.size(nd["attrs"]["value"]) == 1:
            return np.asarray(nd["attrs"]["value"]).reshape(()).item()
        if nd["op"] == "input":
            return literals.get(G.graph["inputs"].index(n))
        return None
    root = next(n for n, i in stage_of.items() if i == len(rest) - 1)
    if d["op"] == "mul" and b == root:
        a, b = b, a
    k = scalar(b)
    if a != root or k is None or G.nodes[b]["dtype"] != d["dtype"]:
        return
    r.alpha = k if d["op"] == "mul" else 1 / k
    prog.stages = rest


# ------------------------------------------------------------------------------ one node


# ------------------------------------------------------------------------------- render


def _describe(o: Operand, i: int) -> str:
    where = {"input": f"operand {o.index}", "stage": f"stage {o.index}",
             "const": f"constant {o.index}", "shape": "shape carrier"}[o.source]
    views = "".join(f".{op}{arg}" for op, arg in o.chain)
    return f"//   in{i}: {o.dtype} <- {where}{views}"


def render(prog: GroupProgram) -> str:
    """Readable CUDA source of every stage (what ``plan.kernels[i].source`` shows)."""
    out = [f"// graphopt kernel {prog.name}: {len(prog.stages)} stage(s) -> "
           f"{prog.dtype}{list(prog.shape)}"]
    for i, s in enumerate(prog.stages):
        dest = "out" if s.dest == "out" else f"temp{i}"
        out.append(f"\n// stage {i}: {s.kind} -> {dest} {s.dtype}{list(s.shape)}")
        out += [_describe(o, j) for j, o in enumerate(s.operands)]
        if s.kind == "einsum":
            scale = f", scaled by alpha = {s.alpha!r}" if s.alpha != 1 else ""
            out.append(f"//   contraction {s.equation!r}{scale} (library call chosen per step)")
            continue
        if s.preamble:
            out.append(s.preamble)
        if s.kind == "elementwise":
            out.append(f"// cupy.ElementwiseKernel({s.in_params!r}, {s.out_params!r}, "
                       f"name={s.name!r}):")
            out.append(s.operation)
        else:
            out.append(f"// cupy.ReductionKernel({s.in_params!r}, {s.out_params!r}, "
                       f"name={s.name!r}, reduce_type={s.reduce_type!r}), axis={s.axes}, "
                       f"keepdims={s.keepdims}")
            out += [f"//   map:      {s.map_expr}", f"//   reduce:   {s.reduce_expr}",
                    f"//   post_map: {s.post_map_expr}", f"//   identity: {s.identity}"]
    if prog.via_temp:
        out.append("\n// the last stage writes a temporary, copied into out (out aliases an "
                   "operand)")
    return "\n".join(out)
